/**
 * Checks of what a user hands to a transaction (API misuse throws INVALID_ARGUMENT before anything is sent): table
 * names, keys (well-formed Unicode, at most keyBytesMax UTF-8 bytes), values (JSON-compatible data or a Uint8Array,
 * at most valueBytesMax bytes encoded), batch sizes, scan options and read options (an options object holds only the
 * keys it names: a misspelt option is refused, not ignored). Also the key order every merge uses: the order
 * of UTF-8 bytes, which is the order of Unicode code points (not JavaScript's UTF-16 code unit order).
 */
import { invalidArgument } from '../../core/errors.js';
import type { HybridTimestamp } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import { encode } from '../../storage/codec.js';
import type { Expiry, KeyRange, Value } from '../../storage/mv-partition-storage.js';
import { validateKey } from '../../storage/version-chain.js';

/** Values nested deeper than this are refused (the wire codec adds a few levels of envelope around a value). */
const VALUE_DEPTH_MAX = LIMITS.codecDepthMax - 8;

export function checkTable(table: unknown): string {
  if (typeof table !== 'string' || table.length === 0) throw invalidArgument('a table name must be a non-empty string');
  return table;
}

export function checkKey(key: unknown): string {
  if (typeof key !== 'string') throw invalidArgument('a key must be a string');
  validateKey(key);
  return key;
}

export function checkKeys(keys: unknown): readonly string[] {
  if (!Array.isArray(keys)) throw invalidArgument('keys must be an array of strings');
  checkBatchSize(keys.length);
  for (const key of keys) checkKey(key);
  return keys as readonly string[];
}

/** A row: its key and value. */
export interface KeyValue {
  /** The row's key. */
  readonly key: string;
  /** The row's value. */
  readonly value: Value;
}

export function checkEntries(entries: unknown): readonly KeyValue[] {
  if (!Array.isArray(entries)) throw invalidArgument('entries must be an array of { key, value }');
  checkBatchSize(entries.length);
  for (const entry of entries) {
    if (typeof entry !== 'object' || entry === null) throw invalidArgument('an entry must be { key, value }');
    checkKey((entry as { key?: unknown }).key);
    checkValue((entry as { value?: unknown }).value);
  }
  return entries as readonly KeyValue[];
}

/**
 * A write a transaction carries with its commit (a client that buffers its writes): a put, or a removal when `value`
 * is absent. The last write of a key wins.
 */
export interface TxWrite {
  readonly table: string;
  readonly key: string;
  readonly value?: Value;
}

export function checkWrites(writes: unknown): readonly TxWrite[] {
  if (!Array.isArray(writes)) throw invalidArgument('writes must be an array of { table, key, value? }');
  checkBatchSize(writes.length);
  for (const write of writes) {
    if (typeof write !== 'object' || write === null) throw invalidArgument('a write must be { table, key, value? }');
    const { table, key, value } = write as { table?: unknown; key?: unknown; value?: unknown };
    if (typeof table !== 'string' || table.length === 0) throw invalidArgument('a write names its table');
    checkKey(key);
    if (value !== undefined) checkValue(value);
  }
  return writes as readonly TxWrite[];
}

function checkBatchSize(n: number): void {
  if (n > LIMITS.txBatchKeysMax) {
    throw invalidArgument(`a batch holds at most ${LIMITS.txBatchKeysMax} keys`, {
      size: n,
      txBatchKeysMax: LIMITS.txBatchKeysMax,
    });
  }
}

/** A value must be JSON-compatible data (finite numbers, plain objects and arrays) or a Uint8Array. */
export function checkValue(value: unknown): Value {
  checkEncodedValue(value);
  return value as Value;
}

/** checkValue, answering the value encoded. */
export function checkEncodedValue(value: unknown): Uint8Array {
  if (!(value instanceof Uint8Array)) checkJson(value, 0);
  const encoded = encode(value);
  const bytes = encoded.length;
  if (bytes > LIMITS.valueBytesMax) {
    throw invalidArgument(`value is ${bytes} bytes encoded, above the limit of ${LIMITS.valueBytesMax}`, {
      valueBytes: bytes,
      valueBytesMax: LIMITS.valueBytesMax,
    });
  }
  return encoded;
}

function checkJson(value: unknown, depth: number): void {
  if (depth > VALUE_DEPTH_MAX) throw invalidArgument(`a value may nest at most ${VALUE_DEPTH_MAX} levels`);
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return;
    case 'number':
      if (!Number.isFinite(value)) throw invalidArgument('a number in a value must be finite (JSON-compatible)');
      return;
    case 'object':
      if (value === null) return;
      if (Array.isArray(value)) {
        for (const item of value) checkJson(item, depth + 1);
        return;
      }
      if (!isPlainObject(value)) throw invalidArgument('an object in a value must be a plain object (JSON-compatible)');
      for (const item of Object.values(value)) checkJson(item, depth + 1);
      return;
    default:
      throw invalidArgument(`a value may not hold ${typeof value} (JSON-compatible data or a Uint8Array only)`);
  }
}

function isPlainObject(value: object): boolean {
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** Options of a read of a transaction (`get`, `getAll`). */
export interface ReadOptions {
  /**
   * Read-write transactions only (`SELECT ... FOR UPDATE`): lock the rows read exclusively, as a write of them would
   * (IX on the partition + X on each row instead of IS + S), so a read-modify-write does not need an S→X upgrade
   * that wait-die may refuse. The value read is the same.
   */
  readonly forUpdate?: boolean;
}

const READ_OPTION_KEYS: ReadonlySet<string> = new Set(['forUpdate']);

/** Whether `options` (a `ReadOptions`, or undefined) asks for a locking read; anything else is INVALID_ARGUMENT. */
export function checkReadOptions(options: unknown): boolean {
  if (options === undefined) return false;
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw invalidArgument('read options must be an object { forUpdate? }');
  }
  for (const key of Object.keys(options)) {
    if (!READ_OPTION_KEYS.has(key)) throw invalidArgument(`unknown read option ${JSON.stringify(key.slice(0, 64))}`);
  }
  const forUpdate = (options as { forUpdate?: unknown }).forUpdate;
  if (forUpdate !== undefined && typeof forUpdate !== 'boolean') {
    throw invalidArgument('read option forUpdate must be a boolean', { forUpdate: typeof forUpdate });
  }
  return forUpdate === true;
}

/**
 * How long a written version lives (DESIGN §4b, docs/concepts/expiry.md). At most one of them; the version is
 * visible to a read at T iff its commitTs ≤ T < its expiry.
 */
export interface PutOptions {
  /** The version expires `ttlMs` milliseconds of HLC time after its commit timestamp (an integer in 1..ttlMsMax). */
  readonly ttlMs?: number;
  /** The version expires at this HLC timestamp (a lease's end; a timestamp at or below its commit hides it at once). */
  readonly expiresAt?: HybridTimestamp;
  /** Attach the key to this lease (client.grantLease): it expires when the lease ends. */
  readonly lease?: string;
}

const PUT_OPTION_KEYS: ReadonlySet<string> = new Set(['ttlMs', 'expiresAt', 'lease']);

/** The expiry `options` ask for (undefined: none), after checking them; a lease is resolved by the client first. */
export function checkPutOptions(options: unknown): Expiry | undefined {
  if (options === undefined) return undefined;
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw invalidArgument('put options must be an object { ttlMs?, expiresAt?, lease? }');
  }
  for (const key of Object.keys(options)) {
    if (!PUT_OPTION_KEYS.has(key)) throw invalidArgument(`unknown put option ${JSON.stringify(key.slice(0, 64))}`);
  }
  const { ttlMs, expiresAt, lease } = options as { ttlMs?: unknown; expiresAt?: unknown; lease?: unknown };
  const given = [ttlMs, expiresAt, lease].filter((v) => v !== undefined).length;
  if (given > 1) throw invalidArgument('put options take at most one of ttlMs, expiresAt and lease');
  if (lease !== undefined) throw invalidArgument('a lease must be resolved to its end before the write is sent');
  if (ttlMs !== undefined) {
    if (typeof ttlMs !== 'number' || !Number.isSafeInteger(ttlMs) || ttlMs < 1 || ttlMs > LIMITS.ttlMsMax) {
      throw invalidArgument(`ttlMs must be an integer in 1..${LIMITS.ttlMsMax}`, { ttlMs: String(ttlMs) });
    }
    return { ttlMs };
  }
  if (expiresAt !== undefined) {
    if (typeof expiresAt !== 'bigint' || expiresAt <= 0n || expiresAt >= 1n << 64n) {
      throw invalidArgument('expiresAt must be a positive 64-bit hybrid timestamp (a bigint)');
    }
    return { at: expiresAt as HybridTimestamp };
  }
  return undefined;
}

/** Options of `scan`. */
export interface ScanOptions {
  /** Most rows returned (default and maximum LIMITS.storageScanRowsMax). */
  readonly limit?: number;
  /**
   * Scan only the partition of this index (0 .. partitions − 1) of the table, as a backup reads a table one partition
   * at a time; default: every partition, merged in key order.
   */
  readonly partition?: number;
}

/** A scan range as the public API takes it: `{ prefix }` or `{ start?, end? }` (`[start, end)`). */
export type ScanRange =
  | {
      /** Every key that starts with this. */
      readonly prefix: string;
    }
  | {
      /** The first key of the range, included (default: the first key). */
      readonly start?: string;
      /** The key the range ends before, excluded (default: past the last key). */
      readonly end?: string;
    };

export function checkScanRange(range: unknown): KeyRange {
  if (typeof range !== 'object' || range === null)
    throw invalidArgument('a scan range is { prefix } or { start, end }');
  const r = range as { prefix?: unknown; start?: unknown; end?: unknown };
  if (r.prefix !== undefined) {
    if (r.start !== undefined || r.end !== undefined) throw invalidArgument('a scan range has a prefix or bounds');
    return { kind: 'prefix', prefix: checkKey(r.prefix) };
  }
  const start = r.start === undefined ? undefined : checkKey(r.start);
  const end = r.end === undefined ? undefined : checkKey(r.end);
  if (start !== undefined && end !== undefined && compareKeys(start, end) > 0) {
    throw invalidArgument('a scan range must not start after its end', { start, end });
  }
  return { kind: 'range', start, end };
}

/** The partitions a scan reads: `all` (the table's, by index), or only `options.partition` (INVALID_ARGUMENT if out of range). */
export function scanPartitions<P>(all: readonly P[], options: ScanOptions | undefined): readonly P[] {
  const index = options?.partition;
  if (index === undefined) return all;
  if (!Number.isInteger(index) || index < 0 || index >= all.length) {
    throw invalidArgument(`a scan partition is an integer in [0, ${all.length - 1}]`, { partition: index });
  }
  return [all[index]!];
}

export function checkScanLimit(options: ScanOptions | undefined): number {
  const limit = options?.limit ?? LIMITS.storageScanRowsMax;
  if (!Number.isInteger(limit) || limit < 1 || limit > LIMITS.storageScanRowsMax) {
    throw invalidArgument(`a scan limit is an integer in [1, ${LIMITS.storageScanRowsMax}]`, { limit });
  }
  return limit;
}

/** Orders keys as storage does (UTF-8 bytes = code points): negative when `a` sorts first. */
export function compareKeys(a: string, b: string): number {
  if (a === b) return 0;
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const ca = a.charCodeAt(i);
    const cb = b.charCodeAt(i);
    if (ca === cb) continue;
    // Code units differ: surrogates (U+D800–DFFF) stand for code points above U+FFFF, which sort after every BMP unit.
    const sa = ca >= 0xd800 && ca <= 0xdfff;
    const sb = cb >= 0xd800 && cb <= 0xdfff;
    if (sa !== sb) return sa ? 1 : -1;
    return ca - cb;
  }
  return a.length - b.length;
}
