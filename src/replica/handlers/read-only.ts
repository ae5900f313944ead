/**
 * ReadOnlyRequest on any replica (DESIGN §2 "Safe time", "RO routing"; rules 9, 11, 19).
 *
 * A read at readTs is served once it is readable here: applied safe time ≥ readTs, or (on the primary acting under
 * a valid lease) readable safe time ≥ readTs, which holds at once for a fresh readTs. Otherwise it waits, bounded by
 * the partition's read wait (TIMEOUT). No readTs: an implicit single read, served on the primary at the primary's
 * `now` (rule 19) and answered with that timestamp. The request's readTs is never absorbed into the clock (rule 8:
 * a future readTs is served by waiting, not by pushing clocks).
 *
 * Values: every key is read with `read(rowId, readTs)` in one synchronous step; a foreign write intent is then
 * resolved through the injected IntentResolver, and its value is taken only if the tx committed at or below readTs,
 * else the newest committed version ≤ readTs that the read returned with it.
 *
 * Rule 10: with a `lowWatermark` (the node's, the one its storage GC uses), a readTs below it fails
 * TX_READ_ONLY_TOO_OLD; it is checked after any wait, right before the synchronous storage reads, so no GC can run
 * between the check and the reads.
 *
 * Change reads (a watch's page, DESIGN §4b "Change streams"): the committed versions with commitTs in
 * `(fromTs, readTs]`, served as a read at readTs (same wait, same resolution of intents: an intent is a change at its
 * tx's commitTs when that is in the window). GC keeps every version above the watermark, so the window is complete
 * iff fromTs ≥ watermark, checked in the same step as readTs; below it the read fails WATCH_TOO_OLD naming the
 * oldest timestamp this node still has.
 */
import { BasaltError, invalidArgument } from '../../core/errors.js';
import type { HybridTimestamp } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import { formatTimestamp } from '../../hlc/timestamp.js';
import { type ChangeRow, type ReadResult, type RowValue, TOMBSTONE } from '../../storage/mv-partition-storage.js';
import { expiresAtOf } from '../../storage/version-chain.js';
import { readOnlyTooOld } from '../../tx/core/low-watermark.js';
import type {
  ChangeEntry,
  ChangesReadResult,
  FoundValue,
  ReadOnlyRequest,
  ReadOnlyResponse,
  RoOperation,
} from '../../tx/core/messages.js';
import type { PartitionReplica } from '../partition/partition-replica.js';
import { type IntentResolver, isIntentVisible } from '../resolution/intent-resolver.js';

export interface ReadOnlyDeps {
  readonly resolver: IntentResolver;
  /** The node's low watermark (rule 10); absent: no check (no GC runs below any read). */
  readonly lowWatermark?: () => HybridTimestamp;
}

export async function handleReadOnly(
  p: PartitionReplica,
  request: ReadOnlyRequest,
  deps: ReadOnlyDeps,
): Promise<ReadOnlyResponse> {
  const { operation } = request;
  if (operation.op === 'changes' && (request.readTs === undefined || operation.fromTs >= request.readTs)) {
    throw invalidArgument('a change read needs a readTs above its fromTs');
  }
  const readTs = request.readTs ?? (await implicitReadTs(p));
  if (readTs <= 0n) throw invalidArgument('readTs must be positive');
  await p.waitReadable(readTs);
  const watermark = deps.lowWatermark?.();
  if (watermark !== undefined && operation.op === 'changes' && operation.fromTs < watermark) {
    throw watchTooOld(operation.fromTs, watermark);
  }
  if (watermark !== undefined && readTs < watermark) throw readOnlyTooOld(readTs, watermark);
  return { kind: 'ReadOnlyResponse', readTs, result: await readAt(p, request.operation, readTs, deps.resolver) };
}

/** Rule 19: an implicit read happens on the primary at its `now` (after waiting for a lease on its way, rule 1). */
async function implicitReadTs(p: PartitionReplica): Promise<HybridTimestamp> {
  const now = await p.untilLeaseStart(p.clock.now());
  p.actingLease(now);
  return now;
}

interface Seen {
  readonly key: string;
  readonly read: ReadResult;
}

async function readAt(
  p: PartitionReplica,
  operation: RoOperation,
  readTs: HybridTimestamp,
  resolver: IntentResolver,
): Promise<ReadOnlyResponse['result']> {
  // Every storage read first, synchronously, so all of them see one applied state.
  switch (operation.op) {
    case 'get': {
      const [value] = await resolveAll(p, [readKey(p, operation.key, readTs)], readTs, resolver);
      return { op: 'get', value: value ?? { found: false } };
    }
    case 'getAll': {
      const seen = operation.keys.map((k) => readKey(p, k, readTs));
      return { op: 'getAll', values: await resolveAll(p, seen, readTs, resolver) };
    }
    case 'scan': {
      const limit = Math.max(1, Math.min(operation.limit, LIMITS.storageScanRowsMax));
      const scanned = p.mv.scan(operation.range, readTs, limit);
      const seen = scanned.rows.map((r) => ({ key: r.key, read: r.read }));
      const values = await resolveAll(p, seen, readTs, resolver);
      const rows = seen.flatMap((s, i) => {
        const v = values[i];
        return v?.found ? [{ key: s.key, value: v.value }] : [];
      });
      return scanned.nextKey === undefined ? { op: 'scan', rows } : { op: 'scan', rows, nextKey: scanned.nextKey };
    }
    case 'changes': {
      const limit = Math.max(1, Math.min(operation.limit, LIMITS.storageScanRowsMax));
      const read = p.mv.changes(operation.range, operation.fromTs, readTs, limit);
      const perRow = await Promise.all(read.rows.map((row) => changesOf(p, row, operation.fromTs, readTs, resolver)));
      const result: ChangesReadResult = { op: 'changes', changes: perRow.flat() };
      return read.nextKey === undefined ? result : { ...result, nextKey: read.nextKey };
    }
  }
}

/**
 * One row's changes in `(fromTs, readTs]`, oldest first: its committed versions there, then its intent's value at
 * the tx's commitTs when the tx committed inside the window (the intent is newer than every committed version).
 */
async function changesOf(
  p: PartitionReplica,
  row: ChangeRow,
  fromTs: HybridTimestamp,
  readTs: HybridTimestamp,
  resolver: IntentResolver,
): Promise<ChangeEntry[]> {
  const out = row.versions.map((v) => changeEntry(row.key, v.commitTs, v.value));
  const { intent } = row;
  if (intent === undefined) return out;
  const answer = await resolver.resolve({
    txId: intent.txId,
    commitPartitionId: intent.commitPartitionId,
    readTs,
    partitionId: p.partitionId,
    key: row.key,
    newestCommitTs: intent.newestCommitTimestamp,
  });
  if (answer.state === 'COMMITTED' && answer.commitTs > fromTs && isIntentVisible(answer, readTs)) {
    out.push(changeEntry(row.key, answer.commitTs, intent.value));
  }
  return out;
}

function changeEntry(key: string, commitTs: HybridTimestamp, value: RowValue): ChangeEntry {
  return value === TOMBSTONE ? { key, commitTs, deleted: true } : { key, commitTs, deleted: false, value };
}

export function watchTooOld(fromTs: HybridTimestamp, oldest: HybridTimestamp): BasaltError {
  return new BasaltError(
    'WATCH_TOO_OLD',
    `changes from ${formatTimestamp(fromTs)} are no longer retained; the oldest timestamp available is ${formatTimestamp(oldest)}`,
    { fromTimestamp: String(fromTs), oldestTimestamp: String(oldest) },
  );
}

function readKey(p: PartitionReplica, key: string, readTs: HybridTimestamp): Seen {
  const rowId = p.mv.rowIdOf(key);
  return { key, read: rowId === undefined ? { kind: 'empty' } : p.mv.read(rowId, readTs) };
}

function resolveAll(
  p: PartitionReplica,
  seen: readonly Seen[],
  readTs: HybridTimestamp,
  resolver: IntentResolver,
): Promise<FoundValue[]> {
  return Promise.all(seen.map((s) => resolveOne(p, s, readTs, resolver)));
}

async function resolveOne(p: PartitionReplica, seen: Seen, readTs: HybridTimestamp, resolver: IntentResolver) {
  const { read } = seen;
  switch (read.kind) {
    case 'empty':
      return foundValue(undefined);
    case 'committed':
      return foundValue(read.value);
    case 'intent': {
      const answer = await resolver.resolve({
        txId: read.txId,
        commitPartitionId: read.commitPartitionId,
        readTs,
        partitionId: p.partitionId,
        key: seen.key,
        newestCommitTs: read.newestCommitTimestamp,
      });
      // `read` returns an intent only when no committed version is newer than readTs, so the newest committed
      // version it carries is the fallback at readTs (already a tombstone if it expired at or below readTs).
      if (!isIntentVisible(answer, readTs)) return foundValue(read.newestCommittedValue);
      // A visible intent expires as its committed version will: commitTs + ttl, or its absolute expiry.
      const expired =
        read.expiry !== undefined &&
        answer.state === 'COMMITTED' &&
        expiresAtOf(read.expiry, answer.commitTs) <= readTs;
      return foundValue(expired ? undefined : read.value);
    }
  }
}

function foundValue(value: RowValue | undefined): FoundValue {
  return value === undefined || value === TOMBSTONE ? { found: false } : { found: true, value };
}
