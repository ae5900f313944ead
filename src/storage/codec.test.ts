import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decode, encode } from './codec.js';

test('binary values decode as Buffers (fresh copies), whether the stored bytes are a Buffer or a plain Uint8Array', () => {
  const value = { bytes: Buffer.from([1, 2, 3]), n: 1 };
  const stored = encode(value);
  const plain = new Uint8Array(stored.byteLength + 4).subarray(2, 2 + stored.byteLength);
  plain.set(stored);
  for (const bytes of [Buffer.from(stored), plain]) {
    const decoded = decode(bytes) as { bytes: Buffer };
    assert.ok(Buffer.isBuffer(decoded.bytes), `a Buffer from ${bytes.constructor.name}`);
    assert.deepEqual(decoded, value);
    decoded.bytes[0] = 9;
    assert.deepEqual(decode(bytes), value, 'the decoded copy does not share the stored bytes');
  }
});
