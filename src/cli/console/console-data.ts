/**
 * The console's data view, read-only by construction: a key browser that reads one page of a prefix through a
 * read-only transaction of the node's own client (at its `now`, or at a chosen timestamp: a snapshot, lock-free), and a
 * key's version history read from the node's local replica of the key's partition (newest first: the write intent if
 * any, then committed versions with their commit timestamps). Only the first uses the cluster; the history is what
 * this node's replica holds, so it is answered only by a node that hosts the partition (the answer names those that
 * do). Values are returned as JSON; bytes as `{ "$bytes": "<base64>" }`.
 */
import { nodeClient } from '../../client/node-client.js';
import { prefixSuccessor } from '../../client/scan-pages.js';
import { invalidArgument } from '../../core/errors.js';
import type { HybridTimestamp, PartitionId, TxId } from '../../core/ids.js';
import { partitionIndexOf, tablePartitionId } from '../../core/partitioning.js';
import { physicalMs } from '../../hlc/timestamp.js';
import type { BasaltNode } from '../../node/basalt-node.js';
import { type ReadResult, type RowValue, TOMBSTONE } from '../../storage/mv-partition-storage.js';
import { localReplica } from './console-cluster.js';

export interface ConsoleRow {
  readonly key: string;
  readonly value: unknown;
}

export interface ConsolePage {
  readonly table: string;
  readonly prefix: string;
  readonly readTs: string | null;
  readonly readTsMs: number | null;
  readonly rows: readonly ConsoleRow[];
  /** Pass as `after` for the next page; null after the last. */
  readonly next: string | null;
}

export interface ConsolePageQuery {
  readonly table: string;
  readonly prefix: string;
  readonly after: string | undefined;
  readonly at: HybridTimestamp | undefined;
  readonly limit: number;
}

/** One page of the keys of `table` that start with `prefix`, after the key `after`, in one read-only snapshot. */
export async function readPage(node: BasaltNode, q: ConsolePageQuery): Promise<ConsolePage> {
  if (node.metastorage.table(q.table) === undefined) throw invalidArgument(`no table ${q.table}`, { table: q.table });
  const tx = await nodeClient(node).begin({ readOnly: true, ...(q.at !== undefined && { readTimestamp: q.at }) });
  try {
    const start = q.after !== undefined && q.after >= q.prefix ? q.after : q.prefix;
    const end = prefixSuccessor(q.prefix);
    const rows = await tx.scan(q.table, { start, ...(end !== undefined && { end }) }, { limit: q.limit + 1 });
    const page = (q.after !== undefined && rows[0]?.key === q.after ? rows.slice(1) : rows).slice(0, q.limit);
    const more = rows.length > page.length + (q.after !== undefined && rows[0]?.key === q.after ? 1 : 0);
    return {
      table: q.table,
      prefix: q.prefix,
      readTs: tx.readTimestamp === undefined ? null : String(tx.readTimestamp),
      readTsMs: tx.readTimestamp === undefined ? null : physicalMs(tx.readTimestamp),
      rows: page.map((r) => ({ key: r.key, value: jsonValue(r.value) })),
      next: more && page.length > 0 ? page[page.length - 1]!.key : null,
    };
  } finally {
    await tx.commit().catch(() => {});
  }
}

export interface ConsoleVersion {
  readonly kind: 'intent' | 'committed';
  readonly txId: string | null;
  readonly commitTs: string | null;
  readonly commitTsMs: number | null;
  readonly deleted: boolean;
  readonly value: unknown;
}

export interface ConsoleHistory {
  readonly table: string;
  readonly key: string;
  readonly partition: string;
  readonly replicas: readonly string[];
  /** False: this node hosts no replica of the key's partition; ask one of `replicas`. */
  readonly hostedHere: boolean;
  readonly versions: readonly ConsoleVersion[];
  readonly truncated: boolean;
}

/** Versions of one key as this node's replica holds them, newest first, at most `limit`. */
export function keyHistory(node: BasaltNode, tableName: string, key: string, limit: number): ConsoleHistory {
  const table = node.metastorage.table(tableName);
  if (table === undefined) throw invalidArgument(`no table ${tableName}`, { table: tableName });
  const partition = tablePartitionId(table.id, partitionIndexOf(key, table.partitions)) as PartitionId;
  const replicas = new Map(node.metastorage.view().assignments).get(partition) ?? [];
  const mv = localReplica(node, partition)?.mv;
  const base = { table: tableName, key, partition, replicas };
  if (mv === undefined) return { ...base, hostedHere: false, versions: [], truncated: false };
  const rowId = mv.rowIdOf(key);
  const versions: ConsoleVersion[] = [];
  let read: ReadResult = rowId === undefined ? { kind: 'empty' } : mv.readLatest(rowId);
  while (read.kind !== 'empty' && versions.length < limit && rowId !== undefined) {
    versions.push(versionView(read));
    const below = read.kind === 'intent' ? read.newestCommitTimestamp : read.commitTs;
    if (below === undefined || below <= 1n) break;
    const older = mv.read(rowId, (below - 1n) as HybridTimestamp);
    read = older.kind === 'committed' && older.commitTs < below ? older : { kind: 'empty' };
  }
  return { ...base, hostedHere: true, versions, truncated: read.kind !== 'empty' && versions.length >= limit };
}

function versionView(read: Exclude<ReadResult, { kind: 'empty' }>): ConsoleVersion {
  const deleted = read.value === TOMBSTONE;
  const value = deleted ? null : jsonValue(read.value);
  if (read.kind === 'intent') {
    return { kind: 'intent', txId: read.txId as TxId, commitTs: null, commitTsMs: null, deleted, value };
  }
  const commitTs = String(read.commitTs);
  return { kind: 'committed', txId: null, commitTs, commitTsMs: physicalMs(read.commitTs), deleted, value };
}

/** A stored value as JSON: bytes become `{ "$bytes": base64 }`. */
export function jsonValue(value: RowValue | undefined): unknown {
  if (value === undefined || value === TOMBSTONE) return null;
  if (value instanceof Uint8Array) return { $bytes: Buffer.from(value).toString('base64') };
  return value;
}
