/**
 * The wire codec: msgpack (msgpackr) over *plain data*, the only values that cross a connection or a disk boundary.
 *
 * Plain data is: null, booleans, numbers, bigints, strings, byte arrays, arrays and plain objects of plain data, up to
 * LIMITS.codecDepthMax levels deep. The options below are pinned so that the round trip is exact and predictable:
 *   - a bigint always decodes as a bigint, whatever its magnitude: int64/uint64 for 64-bit values, msgpackr's bigint
 *     extension beyond that (`useBigIntExtension`, `int64AsType: 'bigint'`);
 *   - a number always decodes as a number: integers of 32 bits or less as msgpack ints, everything else (2^53, 1.5,
 *     NaN, Infinity) as float64, never float32. The one loss: -0 decodes as 0;
 *   - a Uint8Array decodes as a Node `Buffer` (a Uint8Array subclass) holding its own copy of the bytes, so that a
 *     decoded value never pins the frame it came from (`copyBuffers`);
 *   - an object property whose value is `undefined` is omitted, as in JSON, so an absent optional field and an
 *     `undefined` one decode alike (`skipValues`); `undefined` as an array element or at the top level round-trips;
 *   - no records, no shared structures: every frame decodes on its own (`useRecords: false`).
 * Anything else (class instances, Map, Set, Date, functions, symbols, cycles, typed arrays other than Uint8Array) is
 * rejected on encode; a decoded frame holding anything but plain data (msgpack extensions, the reserved 0xc1 byte) is
 * rejected too. Every encode or decode failure is a BasaltError('MALFORMED_FRAME').
 */
import { type Options, Packr } from 'msgpackr';
import { bufferView } from '../core/bytes.js';
import { BasaltError } from '../core/errors.js';
import { LIMITS } from '../core/limits.js';

export type PlainData =
  | null
  | undefined
  | boolean
  | number
  | bigint
  | string
  | Uint8Array
  | readonly PlainData[]
  | { readonly [key: string]: PlainData };

/** `skipValues` exists in msgpackr 2.x but is missing from its typings. */
type PinnedOptions = Options & { readonly skipValues: readonly unknown[] };

/** The pinned msgpackr options of the wire and the disk (exported so tests can build frames the checks would refuse). */
export const CODEC_OPTIONS: PinnedOptions = {
  useRecords: false,
  mapsAsObjects: true,
  useBigIntExtension: true,
  int64AsType: 'bigint',
  largeBigIntToFloat: false,
  largeBigIntToString: false,
  useFloat32: 0,
  copyBuffers: true,
  skipValues: [undefined],
  encodeUndefinedAsNil: false,
  moreTypes: false,
  structuredClone: false,
  useTimestamp32: false,
};
const packr = new Packr(CODEC_OPTIONS);

/** Encodes plain data; throws MALFORMED_FRAME for anything else. */
export function encode(value: unknown): Buffer {
  const problem = plainDataProblem(value, 0);
  if (problem !== undefined) throw new BasaltError('MALFORMED_FRAME', `cannot encode: ${problem}`);
  try {
    return packr.pack(value);
  } catch (error) {
    throw new BasaltError('MALFORMED_FRAME', `cannot encode: ${messageOf(error)}`, undefined, { cause: error });
  }
}

/** Decodes exactly one msgpack value filling `bytes`; throws MALFORMED_FRAME unless it is plain data. */
export function decode(bytes: Uint8Array): unknown {
  let value: unknown;
  try {
    // Byte arrays decode as copies of the source's own type: reading from a Buffer view makes them Buffers whatever
    // the caller passed (a frame from a socket, bytes from a store), so the decoded type never depends on the path.
    value = packr.unpack(bufferView(bytes));
  } catch (error) {
    throw new BasaltError('MALFORMED_FRAME', `cannot decode: ${messageOf(error)}`, undefined, { cause: error });
  }
  const problem = plainDataProblem(value, 0);
  if (problem !== undefined) throw new BasaltError('MALFORMED_FRAME', `cannot decode: ${problem}`);
  return value;
}

/** True when `value` is plain data as defined above. */
export function isPlainData(value: unknown): value is PlainData {
  return plainDataProblem(value, 0) === undefined;
}

/** Why `value` is not plain data, or undefined when it is. Depth-bounded, so cycles are caught as too deep. */
function plainDataProblem(value: unknown, depth: number): string | undefined {
  switch (typeof value) {
    case 'undefined':
    case 'boolean':
    case 'number':
    case 'bigint':
    case 'string':
      return undefined;
    case 'object':
      return value === null ? undefined : objectProblem(value, depth);
    default:
      return `a ${typeof value} is not plain data`;
  }
}

function objectProblem(value: object, depth: number): string | undefined {
  if (value instanceof Uint8Array) return undefined;
  if (depth >= LIMITS.codecDepthMax) return `nested deeper than ${LIMITS.codecDepthMax} levels`;
  if (Array.isArray(value)) {
    for (const item of value) {
      const problem = plainDataProblem(item, depth + 1);
      if (problem !== undefined) return problem;
    }
    return undefined;
  }
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) {
    return `a ${value.constructor?.name ?? 'non-plain object'} is not plain data`;
  }
  // Decoders drop a `__proto__` key (a prototype-pollution guard), so an object holding one would not round-trip.
  if (Object.hasOwn(value, '__proto__')) return 'an object with a __proto__ key is not plain data';
  // for…in over own keys, as Object.values would see them, without building an array per object.
  for (const key in value) {
    if (!Object.hasOwn(value, key)) continue;
    const problem = plainDataProblem((value as Record<string, unknown>)[key], depth + 1);
    if (problem !== undefined) return problem;
  }
  return undefined;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
