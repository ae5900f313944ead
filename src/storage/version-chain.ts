/**
 * One row's version chain as stored: the row's key, an optional write intent, and committed versions newest first
 * with strictly decreasing commit timestamps. Values inside a row are kept encoded (msgpack bytes; `null` is a
 * tombstone) and decoded only for the version a read returns. Pure functions: visibility, GC trimming, and the
 * row's binary form `[key, intentTxId, intentCommitPartitionId, intentValue, ts1, value1, ts2, value2, ...]`.
 */
import { assert } from '../core/assert.js';
import { BasaltError, invalidArgument } from '../core/errors.js';
import type { HybridTimestamp, PartitionId, TxId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { decode, decodeWithViews, encode, utf8Bytes } from './codec.js';
import {
  type CommittedRead,
  type EmptyRead,
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
}

export interface StoredVersion {
  readonly commitTs: HybridTimestamp;
  readonly value: StoredValue;
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

function committedRead(version: StoredVersion): CommittedRead {
  return { kind: 'committed', value: decodeValue(version.value), commitTs: version.commitTs };
}

function intentRead(row: RowRecord, intent: StoredIntent): IntentRead {
  const newest = row.versions[0];
  return {
    kind: 'intent',
    value: decodeValue(intent.value),
    txId: intent.txId,
    commitPartitionId: intent.commitPartitionId,
    newestCommitTimestamp: newest?.commitTs,
    newestCommittedValue: newest === undefined ? undefined : decodeValue(newest.value),
  };
}

/** `read(rowId, ts)`: the intent only if no committed version is newer than `ts`, else the newest committed ≤ ts. */
export function readAt(row: RowRecord, ts: HybridTimestamp): ReadResult {
  const newest = row.versions[0];
  if (row.intent !== undefined && (newest === undefined || newest.commitTs <= ts)) return intentRead(row, row.intent);
  const visible = row.versions.find((v) => v.commitTs <= ts);
  return visible === undefined ? EMPTY_READ : committedRead(visible);
}

export function readLatest(row: RowRecord): ReadResult {
  if (row.intent !== undefined) return intentRead(row, row.intent);
  const newest = row.versions[0];
  return newest === undefined ? EMPTY_READ : committedRead(newest);
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
 * (reads at any timestamp ≥ watermark still see the same thing); drops that one too if it is a tombstone with nothing
 * newer, since then every such read sees "absent" either way.
 */
export function trimRow(row: RowRecord, lowWatermark: HybridTimestamp): TrimResult {
  const keepUpTo = row.versions.findIndex((v) => v.commitTs <= lowWatermark);
  if (keepUpTo < 0) return { row, versionsRemoved: 0 };
  const floor = row.versions[keepUpTo]!;
  const dropFloor = floor.value === null && keepUpTo === 0 && row.intent === undefined;
  const kept = row.versions.slice(0, dropFloor ? keepUpTo : keepUpTo + 1);
  const versionsRemoved = row.versions.length - kept.length;
  if (kept.length === 0 && row.intent === undefined) return { row: undefined, versionsRemoved };
  return { row: versionsRemoved === 0 ? row : { ...row, versions: kept }, versionsRemoved };
}

/** The row's binary form; its versions are checked on the way to disk as `decodeRow` checks them on the way back. */
export function encodeRow(row: RowRecord): Uint8Array {
  const fields: unknown[] = [
    row.key,
    row.intent?.txId ?? null,
    row.intent?.commitPartitionId ?? null,
    row.intent?.value ?? null,
  ];
  let previous: HybridTimestamp | undefined;
  for (const v of row.versions) {
    assert(v.commitTs > 0n, 'a committed version has its commit timestamp', row.key);
    assert(previous === undefined || v.commitTs < previous, 'versions newest first', row.key, previous, v.commitTs);
    previous = v.commitTs;
    fields.push(v.commitTs, v.value);
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

export function decodeRow(bytes: Uint8Array): RowRecord {
  const fields = decodeWithViews(bytes);
  if (!Array.isArray(fields) || fields.length < 4 || fields.length % 2 !== 0) throw corrupted('bad field count');
  const [key, txId, commitPartitionId, intentValue] = fields;
  if (typeof key !== 'string') throw corrupted('key');
  let intent: StoredIntent | undefined;
  if (txId !== null) {
    if (typeof txId !== 'string' || typeof commitPartitionId !== 'string') throw corrupted('intent tags');
    intent = {
      txId: txId as TxId,
      commitPartitionId: commitPartitionId as PartitionId,
      value: storedValueField(intentValue),
    };
  }
  const versions: StoredVersion[] = [];
  for (let i = 4; i < fields.length; i += 2) {
    const ts = fields[i];
    if (typeof ts !== 'bigint') throw corrupted('commit timestamp');
    const previous = versions[versions.length - 1];
    if (previous !== undefined && ts >= previous.commitTs) throw corrupted('commit timestamps not decreasing');
    versions.push({ commitTs: ts as HybridTimestamp, value: storedValueField(fields[i + 1]) });
  }
  return { key, intent, versions };
}
