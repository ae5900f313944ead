/**
 * One row's version chain as stored: the row's key, an optional write intent, and committed versions newest first
 * with strictly decreasing commit timestamps. Values inside a row are kept encoded (msgpack bytes; `null` is a
 * tombstone) and decoded only for the version a read returns. Pure functions: visibility, GC trimming, and the
 * row's binary form.
 *
 * Two binary forms, told apart by the first field (a key is a string, a format tag a number):
 *   v1 `[key, intentTxId, intentCommitPartitionId, intentValue, ts1, value1, ts2, value2, ...]`
 *   v2 `[2, key, intentTxId, intentCommitPartitionId, intentValue, intentTtlMs, intentExpiresAt,
 *        ts1, value1, expiresAt1, ts2, value2, expiresAt2, ...]`            (absent fields are null)
 * A row without any expiry is written in v1, so rows written before expiry existed and rows that never use it share
 * one form; v2 is written only for rows that carry an expiry. Both are read.
 *
 * Expiry (DESIGN §4b): a committed version with `expiresAt` is visible to a read at T iff commitTs ≤ T < expiresAt;
 * at or above its expiry it reads as a tombstone would, so every snapshot and every replica agree.
 */
import { assert } from '../core/assert.js';
import { BasaltError, invalidArgument } from '../core/errors.js';
import type { HybridTimestamp, PartitionId, TxId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { decode, decodeWithViews, encode, utf8Bytes } from './codec.js';
import {
  type CommittedRead,
  type EmptyRead,
  type Expiry,
  type IntentRead,
  type ReadResult,
  type RowValue,
  TOMBSTONE,
} from './mv-partition-storage.js';

/** An encoded value, or null for a tombstone. */
export type StoredValue = Uint8Array | null;

export interface StoredIntent {
  readonly txId: TxId;
  readonly commitPartitionId: PartitionId;
  readonly value: StoredValue;
  /** Set when the intent was written with an expiry; its version's `expiresAt` is fixed at commit. */
  readonly expiry?: Expiry;
}

export interface StoredVersion {
  readonly commitTs: HybridTimestamp;
  readonly value: StoredValue;
  /** Set when the version expires: reads at or above it see no value. */
  readonly expiresAt?: HybridTimestamp;
}

/** Format tag of the v2 binary form (v1 starts with the key, a string). */
const FORMAT_V2 = 2;
const V1_HEADER = 4;
const V2_HEADER = 7;
const LOGICAL_BITS = 16n;

/** The expiry timestamp of a version committed at `commitTs` with `expiry` (a ttl counts whole ms of HLC time). */
export function expiresAtOf(expiry: Expiry, commitTs: HybridTimestamp): HybridTimestamp {
  return ('at' in expiry ? expiry.at : commitTs + (BigInt(expiry.ttlMs) << LOGICAL_BITS)) as HybridTimestamp;
}

/** A committed version built from a value and its optional expiry. */
export function committedVersion(
  commitTs: HybridTimestamp,
  value: StoredValue,
  expiry: Expiry | undefined,
): StoredVersion {
  return expiry === undefined ? { commitTs, value } : { commitTs, value, expiresAt: expiresAtOf(expiry, commitTs) };
}

/** Whether `version` reads as absent at `ts`: a tombstone, or expired at or below `ts`. */
export function absentAt(version: StoredVersion, ts: HybridTimestamp): boolean {
  return version.value === null || (version.expiresAt !== undefined && version.expiresAt <= ts);
}

/** Checks a caller's expiry: a positive integer ttl up to the limit, or a positive timestamp. */
export function validateExpiry(expiry: Expiry | undefined): void {
  if (expiry === undefined) return;
  if ('at' in expiry) {
    if (typeof expiry.at !== 'bigint' || expiry.at <= 0n || expiry.at >= 1n << 64n) {
      throw invalidArgument('an expiry must be a positive 64-bit timestamp');
    }
    return;
  }
  const { ttlMs } = expiry;
  if (!Number.isSafeInteger(ttlMs) || ttlMs < 1 || ttlMs > LIMITS.ttlMsMax) {
    throw invalidArgument(`ttlMs must be an integer in 1..${LIMITS.ttlMsMax}`, { ttlMs: String(ttlMs) });
  }
}

export interface RowRecord {
  readonly key: string;
  readonly intent: StoredIntent | undefined;
  /** Newest first, commit timestamps strictly decreasing. */
  readonly versions: readonly StoredVersion[];
}

export const EMPTY_READ: EmptyRead = { kind: 'empty' };

/** In a `u` regex a surrogate pair is one code point, so this matches only unpaired surrogates. */
const LONE_SURROGATE = /\p{Surrogate}/u;

/** Checks a key against the limits and the UTF-8 rule (a lone surrogate has no UTF-8 form, so no byte order). */
export function validateKey(key: string): Uint8Array {
  if (typeof key !== 'string') throw invalidArgument('a key must be a string');
  if (LONE_SURROGATE.test(key)) throw invalidArgument('a key must be well-formed Unicode (no lone surrogates)');
  const bytes = utf8Bytes(key);
  if (bytes.length > LIMITS.keyBytesMax) {
    throw invalidArgument(`key is ${bytes.length} bytes, above the limit of ${LIMITS.keyBytesMax}`, {
      keyBytes: bytes.length,
      keyBytesMax: LIMITS.keyBytesMax,
    });
  }
  return bytes;
}

/** Encodes a value for storage, enforcing the value size limit. */
export function encodeValue(value: RowValue): StoredValue {
  if (value === TOMBSTONE) return null;
  if (value === undefined) throw invalidArgument('a value may not be undefined (use TOMBSTONE to remove a row)');
  const bytes = encode(value);
  if (bytes.length > LIMITS.valueBytesMax) {
    throw invalidArgument(`value is ${bytes.length} bytes encoded, above the limit of ${LIMITS.valueBytesMax}`, {
      valueBytes: bytes.length,
      valueBytesMax: LIMITS.valueBytesMax,
    });
  }
  return bytes;
}

export function decodeValue(stored: StoredValue): RowValue {
  return stored === null ? TOMBSTONE : (decode(stored) as RowValue);
}

/** A committed version as read at `ts` (undefined: no expiry clock); expired, it reads as a tombstone. */
function committedRead(version: StoredVersion, ts: HybridTimestamp | undefined): CommittedRead {
  const { commitTs, expiresAt } = version;
  if (expiresAt === undefined) return { kind: 'committed', value: decodeValue(version.value), commitTs };
  if (ts !== undefined && expiresAt <= ts) return { kind: 'committed', value: TOMBSTONE, commitTs };
  return { kind: 'committed', value: decodeValue(version.value), commitTs, expiresAt };
}

function intentRead(row: RowRecord, intent: StoredIntent, ts: HybridTimestamp | undefined): IntentRead {
  const newest = row.versions[0];
  const read: IntentRead = {
    kind: 'intent',
    value: decodeValue(intent.value),
    txId: intent.txId,
    commitPartitionId: intent.commitPartitionId,
    newestCommitTimestamp: newest?.commitTs,
    newestCommittedValue: newest === undefined ? undefined : committedRead(newest, ts).value,
  };
  return intent.expiry === undefined ? read : { ...read, expiry: intent.expiry };
}

/**
 * `read(rowId, ts)`: the intent only if no committed version is newer than `ts`, else the newest committed ≤ ts
 * (a tombstone if it expired at or below `ts`).
 */
export function readAt(row: RowRecord, ts: HybridTimestamp): ReadResult {
  const newest = row.versions[0];
  if (row.intent !== undefined && (newest === undefined || newest.commitTs <= ts)) {
    return intentRead(row, row.intent, ts);
  }
  const visible = row.versions.find((v) => v.commitTs <= ts);
  return visible === undefined ? EMPTY_READ : committedRead(visible, ts);
}

/** The intent if any, else the newest committed version; with `now`, expired at or below `now` reads as a tombstone. */
export function readLatest(row: RowRecord, now?: HybridTimestamp): ReadResult {
  if (row.intent !== undefined) return intentRead(row, row.intent, now);
  const newest = row.versions[0];
  return newest === undefined ? EMPTY_READ : committedRead(newest, now);
}

/** Whether a committed version at `commitTs` may go on top of the row's chain (timestamps strictly decrease). */
export function assertNewerThanChain(row: RowRecord, commitTs: HybridTimestamp): void {
  const newest = row.versions[0];
  assert(commitTs > 0n, 'commit timestamp must be set');
  assert(
    newest === undefined || commitTs > newest.commitTs,
    "a commit is newer than the row's newest committed version",
    commitTs,
    newest?.commitTs,
  );
}

export interface TrimResult {
  /** The row after trimming; undefined when nothing is left and the row is to be removed. */
  readonly row: RowRecord | undefined;
  readonly versionsRemoved: number;
}

/**
 * GC of one row at `lowWatermark`: keeps every version newer than the watermark and the newest one at or below it
 * (reads at any timestamp ≥ watermark still see the same thing); drops that one too if it is a tombstone, or expired
 * at or below the watermark, with nothing newer, since then every such read sees "absent" either way.
 */
export function trimRow(row: RowRecord, lowWatermark: HybridTimestamp): TrimResult {
  const keepUpTo = row.versions.findIndex((v) => v.commitTs <= lowWatermark);
  if (keepUpTo < 0) return { row, versionsRemoved: 0 };
  const floor = row.versions[keepUpTo]!;
  const dropFloor = absentAt(floor, lowWatermark) && keepUpTo === 0 && row.intent === undefined;
  const kept = row.versions.slice(0, dropFloor ? keepUpTo : keepUpTo + 1);
  const versionsRemoved = row.versions.length - kept.length;
  if (kept.length === 0 && row.intent === undefined) return { row: undefined, versionsRemoved };
  return { row: versionsRemoved === 0 ? row : { ...row, versions: kept }, versionsRemoved };
}

/** Whether the row needs the v2 form (some expiry in it). */
function hasExpiry(row: RowRecord): boolean {
  return row.intent?.expiry !== undefined || row.versions.some((v) => v.expiresAt !== undefined);
}

/** The row's binary form; its versions are checked on the way to disk as `decodeRow` checks them on the way back. */
export function encodeRow(row: RowRecord): Uint8Array {
  const v2 = hasExpiry(row);
  const expiry = row.intent?.expiry;
  const fields: unknown[] = [
    row.key,
    row.intent?.txId ?? null,
    row.intent?.commitPartitionId ?? null,
    row.intent?.value ?? null,
  ];
  if (v2) {
    fields.unshift(FORMAT_V2);
    fields.push(
      expiry !== undefined && 'ttlMs' in expiry ? expiry.ttlMs : null,
      expiry !== undefined && 'at' in expiry ? expiry.at : null,
    );
  }
  let previous: HybridTimestamp | undefined;
  for (const v of row.versions) {
    assert(v.commitTs > 0n, 'a committed version has its commit timestamp', row.key);
    assert(previous === undefined || v.commitTs < previous, 'versions newest first', row.key, previous, v.commitTs);
    previous = v.commitTs;
    fields.push(v.commitTs, v.value);
    if (v2) fields.push(v.expiresAt ?? null);
  }
  return encode(fields);
}

function corrupted(what: string): BasaltError {
  return new BasaltError('STORAGE_CORRUPTED', `malformed row record: ${what}`);
}

function storedValueField(field: unknown): StoredValue {
  if (field === null) return null;
  if (field instanceof Uint8Array) return field;
  throw corrupted('value is neither bytes nor null');
}

/** A timestamp field that may be null (absent). */
function optionalTimestampField(field: unknown, what: string): HybridTimestamp | undefined {
  if (field === null) return undefined;
  if (typeof field !== 'bigint' || field <= 0n) throw corrupted(what);
  return field as HybridTimestamp;
}

function intentExpiryFields(ttlMs: unknown, at: unknown): Expiry | undefined {
  const atTs = optionalTimestampField(at, 'intent expiry');
  if (ttlMs === null) return atTs === undefined ? undefined : { at: atTs };
  if (typeof ttlMs !== 'number' || !Number.isSafeInteger(ttlMs) || ttlMs < 1 || atTs !== undefined) {
    throw corrupted('intent ttl');
  }
  return { ttlMs };
}

export function decodeRow(bytes: Uint8Array): RowRecord {
  const fields = decodeWithViews(bytes);
  if (!Array.isArray(fields) || fields.length === 0) throw corrupted('bad field count');
  const v2 = fields[0] === FORMAT_V2;
  const header = v2 ? V2_HEADER : V1_HEADER;
  const width = v2 ? 3 : 2;
  if (fields.length < header || (fields.length - header) % width !== 0) throw corrupted('bad field count');
  const [key, txId, commitPartitionId, intentValue, ttlMs, at] = v2 ? fields.slice(1) : fields;
  if (typeof key !== 'string') throw corrupted('key');
  let intent: StoredIntent | undefined;
  if (txId !== null) {
    if (typeof txId !== 'string' || typeof commitPartitionId !== 'string') throw corrupted('intent tags');
    const expiry = v2 ? intentExpiryFields(ttlMs, at) : undefined;
    intent = {
      txId: txId as TxId,
      commitPartitionId: commitPartitionId as PartitionId,
      value: storedValueField(intentValue),
      ...(expiry !== undefined && { expiry }),
    };
  }
  const versions: StoredVersion[] = [];
  for (let i = header; i < fields.length; i += width) {
    const ts = fields[i];
    if (typeof ts !== 'bigint') throw corrupted('commit timestamp');
    const previous = versions[versions.length - 1];
    if (previous !== undefined && ts >= previous.commitTs) throw corrupted('commit timestamps not decreasing');
    const value = storedValueField(fields[i + 1]);
    const expiresAt = v2 ? optionalTimestampField(fields[i + 2], 'expiry') : undefined;
    versions.push(
      expiresAt === undefined
        ? { commitTs: ts as HybridTimestamp, value }
        : { commitTs: ts as HybridTimestamp, value, expiresAt },
    );
  }
  return { key, intent, versions };
}
