import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { isBasaltError } from '../core/errors.js';
import { LIMITS } from '../core/limits.js';
import { decode, encode, isPlainData } from './codec.js';

const roundTrip = (value: unknown): unknown => decode(encode(value));

/** Plain data without `undefined` in objects, -0 or `__proto__` keys, which the codec documents as not preserved. */
const plainValue = fc.letrec((tie) => ({
  leaf: fc.oneof(
    fc.constant(null),
    fc.boolean(),
    fc.double().map((n) => (Object.is(n, -0) ? 0 : n)),
    fc.integer(),
    fc.bigInt({ min: -(1n << 200n), max: 1n << 200n }),
    fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }),
    fc.string(),
    fc.uint8Array({ maxLength: 40 }),
  ),
  node: fc.oneof(
    { depthSize: 'small' },
    tie('leaf'),
    fc.array(tie('node'), { maxLength: 5 }),
    fc.dictionary(
      fc.string().filter((k) => k !== '__proto__'),
      tie('node'),
      { maxKeys: 5 },
    ),
  ),
})).node;

/** Deep equality where a decoded Buffer equals the Uint8Array that was encoded. */
function normalize(value: unknown): unknown {
  if (value instanceof Uint8Array) return { bytes: Array.from(value) };
  if (Array.isArray(value)) return value.map(normalize);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, normalize(v)]));
  }
  return value;
}

function assertMalformed(fn: () => unknown, what = 'value'): void {
  assert.throws(fn, (e: unknown) => isBasaltError(e, 'MALFORMED_FRAME'), what);
}

describe('codec', () => {
  it('round-trips nested plain data with bigints exactly (property)', () => {
    fc.assert(
      fc.property(plainValue, (value) => {
        assert.deepEqual(normalize(roundTrip(value)), normalize(value));
      }),
      { numRuns: 300 },
    );
  });

  it('rejects an object with an own __proto__ key, which no decoder would give back', () => {
    const value = JSON.parse('{"a":{"__proto__":{"x":1}}}') as unknown;
    assert.equal(isPlainData(value), false);
    assertMalformed(() => encode(value), '__proto__ key');
  });

  it('a bigint always decodes as a bigint, whatever its magnitude (property)', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: -(1n << 300n), max: 1n << 300n }), (n) => {
        const back = roundTrip({ n, list: [n] }) as { n: unknown; list: unknown[] };
        assert.equal(typeof back.n, 'bigint');
        assert.equal(back.n, n);
        assert.equal(back.list[0], n);
      }),
    );
    for (const n of [0n, 1n, -1n, 2n ** 53n, 2n ** 63n - 1n, -(2n ** 63n), 2n ** 64n - 1n, 2n ** 64n, -(2n ** 64n)]) {
      assert.equal(roundTrip(n), n);
    }
  });

  it('a number always decodes as a number, whatever its magnitude (property)', () => {
    fc.assert(
      fc.property(fc.double(), (n) => {
        const back = roundTrip(n);
        assert.equal(typeof back, 'number');
        assert.ok(Object.is(back, Object.is(n, -0) ? 0 : n));
      }),
    );
    for (const n of [2 ** 32, 2 ** 53, 2 ** 53 + 2, -(2 ** 53), Number.MAX_VALUE, 0.1, Number.NaN, -Infinity]) {
      assert.ok(Object.is(roundTrip(n), n));
    }
  });

  it('-0 decodes as 0 (documented loss)', () => {
    assert.ok(Object.is(roundTrip(-0), 0));
  });

  it('a Uint8Array decodes as a Buffer owning a copy of its bytes', () => {
    const bytes = new Uint8Array([1, 2, 3]);
    const frame = encode({ bytes });
    const back = decode(frame) as { bytes: Uint8Array };
    assert.ok(Buffer.isBuffer(back.bytes));
    assert.deepEqual(Array.from(back.bytes), [1, 2, 3]);
    frame.fill(0);
    assert.deepEqual(Array.from(back.bytes), [1, 2, 3], 'decoded bytes do not alias the frame');
  });

  it('decodes byte arrays as Buffers whether the frame is a Buffer or a plain Uint8Array', () => {
    const frame = encode({ bytes: new Uint8Array([4, 5]) });
    const plain = new Uint8Array(frame.byteLength);
    plain.set(frame);
    for (const source of [frame, plain]) {
      const back = decode(source) as { bytes: Uint8Array };
      assert.ok(Buffer.isBuffer(back.bytes), `from a ${source.constructor.name}`);
      assert.deepEqual(Array.from(back.bytes), [4, 5]);
    }
  });

  it('omits object properties whose value is undefined; keeps undefined elsewhere', () => {
    const back = roundTrip({ a: undefined, b: 1, c: [undefined, 2] }) as Record<string, unknown>;
    assert.deepEqual(back, { b: 1, c: [undefined, 2] });
    assert.equal(Object.hasOwn(back, 'a'), false);
    assert.equal(roundTrip(undefined), undefined);
  });

  it('rejects values that are not plain data on encode', () => {
    const cyclic: Record<string, unknown> = {};
    cyclic['self'] = cyclic;
    class Point {
      x = 1;
    }
    for (const bad of [
      new Map([[1, 2]]),
      new Set([1]),
      new Date(0),
      () => 1,
      Symbol('s'),
      new Int32Array(2),
      new Point(),
      { nested: [{ when: new Date(0) }] },
      cyclic,
    ]) {
      assertMalformed(() => encode(bad));
      assert.equal(isPlainData(bad), false);
    }
  });

  it('accepts nesting up to the depth limit and rejects deeper values', () => {
    const nest = (levels: number): unknown => {
      let v: unknown = 1;
      for (let i = 0; i < levels; i++) v = [v];
      return v;
    };
    assert.deepEqual(roundTrip(nest(LIMITS.codecDepthMax)), nest(LIMITS.codecDepthMax));
    assertMalformed(() => encode(nest(LIMITS.codecDepthMax + 1)));
    // A peer that skips the check still cannot make us accept it.
    const deep = Buffer.concat([Buffer.alloc(LIMITS.codecDepthMax + 1, 0x91), Buffer.from([0x01])]);
    assertMalformed(() => decode(deep));
  });

  it('turns every kind of bad frame into MALFORMED_FRAME', () => {
    assertMalformed(() => decode(Buffer.alloc(0)));
    assertMalformed(() => decode(Buffer.from([0x93, 0x01])), 'truncated array');
    assertMalformed(() => decode(Buffer.concat([encode(1), encode(2)])), 'trailing bytes');
    assertMalformed(() => decode(Buffer.from([0xc1])), 'reserved byte');
    assertMalformed(() => decode(Buffer.from([0xd4, 0x12, 0x00])), 'unknown extension');
    assertMalformed(() => decode(Buffer.from([0xd6, 0xff, 0, 0, 0, 0])), 'timestamp extension (a Date)');
    assertMalformed(() => decode(Buffer.alloc(1 << 16, 0x91)), 'nested far too deep');
  });

  it('never throws anything but MALFORMED_FRAME on random bytes (property)', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
        try {
          const value = decode(bytes);
          assert.ok(isPlainData(value));
        } catch (e) {
          assert.ok(isBasaltError(e, 'MALFORMED_FRAME'), String(e));
        }
      }),
      { numRuns: 2000 },
    );
  });
});
