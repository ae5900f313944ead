import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { isBasaltError } from '../core/errors.js';
import { decode } from './codec.js';
import { encodeFrame, FRAME_HEADER_BYTES, FrameDecoder } from './frame.js';

describe('frames', () => {
  it('decodes the frames of any payload sequence, however the stream is cut (property)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ kind: fc.string(), n: fc.bigInt(), bytes: fc.uint8Array({ maxLength: 300 }) }), {
          maxLength: 20,
        }),
        fc.array(fc.integer({ min: 1, max: 700 }), { minLength: 1, maxLength: 30 }),
        (payloads, cuts) => {
          const stream = Buffer.concat(payloads.flatMap((p) => [...encodeFrame(p, 1 << 20)]));
          const decoder = new FrameDecoder(1 << 20);
          const frames: Buffer[] = [];
          let offset = 0;
          for (let i = 0; offset < stream.length; i++) {
            const size = cuts[i % cuts.length]!;
            const output = decoder.push(stream.subarray(offset, offset + size));
            assert.ok(output.ok);
            frames.push(...output.frames);
            offset += size;
          }
          assert.equal(decoder.pendingBytes, 0);
          const decoded = frames.map((f) => decode(f) as { kind: string; n: bigint; bytes: Uint8Array });
          assert.deepEqual(
            decoded.map((d) => [d.kind, d.n, Array.from(d.bytes)]),
            payloads.map((p) => [p.kind, p.n, Array.from(p.bytes)]),
          );
        },
      ),
      { numRuns: 200 },
    );
  });

  it('stops at a length above the limit, after yielding the frames before it', () => {
    const decoder = new FrameDecoder(100);
    const good = Buffer.concat(encodeFrame({ kind: 'ok' }, 100));
    const bad = Buffer.alloc(FRAME_HEADER_BYTES);
    bad.writeUInt32BE(101, 0);
    const output = decoder.push(Buffer.concat([good, bad, good]));
    assert.equal(output.ok, false);
    assert.equal(output.frames.length, 1);
    if (!output.ok) assert.equal(output.frameBytes, 101);
    assert.deepEqual(decoder.push(good).frames, [], 'a poisoned stream yields nothing more');
  });

  it('accepts a frame of exactly the limit; refuses to encode one byte more', () => {
    const payload = 'x'.repeat(95);
    const [, body] = encodeFrame(payload, 1000);
    const limit = body.length;
    const decoder = new FrameDecoder(limit);
    assert.equal(decoder.push(Buffer.concat(encodeFrame(payload, limit))).frames.length, 1);
    assert.throws(
      () => encodeFrame(`${payload}x`, limit),
      (e: unknown) => isBasaltError(e, 'FRAME_TOO_LARGE'),
    );
  });
});
