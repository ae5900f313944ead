/**
 * What a finished transaction may leave behind, inspected on every running node of a cluster: locks held on a
 * primary, write intents in a partition's MVCC storage, and non-final entries of the volatile tx state map. A
 * transaction whose hard deadline is older than a given age must have none of them anywhere: its cleanup ran, or its
 * recovery did (a real database never needs an operator to unstick a key).
 *
 * Also the durable records of commit partitions, so that what a client was told can be held against what was stored.
 */
import type { HybridTimestamp, PartitionId, TxId } from '../../src/core/ids.js';
import { physicalMs } from '../../src/hlc/timestamp.js';
import type { BasaltNode } from '../../src/node/basalt-node.js';
import { ReplicaPartitionHost } from '../../src/node/replica-host.js';
import type { StoredTxMeta } from '../../src/storage/tx-state-storage.js';
import { beginTimestampOf } from '../../src/tx/core/tx-id.js';
import { isFinal } from '../../src/tx/core/tx-state.js';
import type { TestCluster } from './support.js';

export interface Leftover {
  readonly node: string;
  readonly what: 'lock' | 'intent' | 'map-entry';
  readonly txId: TxId;
  readonly partitionId?: PartitionId;
  readonly detail: string;
}

/** Rows one scan page reads while listing a partition's intents. */
const SCAN_PAGE_ROWS = 1_000;

function hostOf(node: BasaltNode): ReplicaPartitionHost | undefined {
  return node.partitions instanceof ReplicaPartitionHost ? node.partitions : undefined;
}

/** Begin timestamp as physical ms (the age a leftover is judged by). */
function beganMs(txId: TxId): number {
  return physicalMs(beginTimestampOf(txId));
}

/**
 * Every lock, intent and non-final map entry, on every running node, of a transaction that began before
 * `olderThanMs` (physical ms of the node's HLC scale).
 */
export function leftovers(cluster: TestCluster, olderThanMs: number): Leftover[] {
  const found: Leftover[] = [];
  for (const name of cluster.nodes) {
    const node = cluster.basaltNode(name);
    if (node === undefined) continue;
    for (const txId of node.txStates.txIds()) {
      const entry = node.txStates.entry(txId);
      if (entry === undefined || isFinal(entry.state) || beganMs(txId) >= olderThanMs) continue;
      found.push({ node: name, what: 'map-entry', txId, detail: entry.state });
    }
    const host = hostOf(node);
    if (host === undefined) continue;
    for (const partitionId of node.hostedPartitions().keys()) {
      const p = host.partition(partitionId);
      if (p === undefined) continue;
      for (const txId of p.locks.holderTxIds()) {
        if (beganMs(txId) >= olderThanMs) continue;
        const keys = p.locks.locksOf(txId).map((l) => `${l.key}:${l.mode}`);
        found.push({ node: name, what: 'lock', txId, partitionId, detail: keys.join(',') });
      }
      for (let start: string | undefined = ''; start !== undefined; ) {
        const page = p.mv.scan({ kind: 'range', start }, 'latest', SCAN_PAGE_ROWS);
        for (const row of page.rows) {
          if (row.read.kind !== 'intent' || beganMs(row.read.txId) >= olderThanMs) continue;
          found.push({ node: name, what: 'intent', txId: row.read.txId, partitionId, detail: row.key });
        }
        start = page.nextKey;
      }
    }
  }
  return found;
}

/** The durable record of `txId` on any running replica of its commit partition, if one is stored. */
export function durableRecord(cluster: TestCluster, txId: TxId): StoredTxMeta | undefined {
  for (const name of cluster.nodes) {
    const node = cluster.basaltNode(name);
    const host = node === undefined ? undefined : hostOf(node);
    if (node === undefined || host === undefined) continue;
    for (const partitionId of node.hostedPartitions().keys()) {
      const record = host.partition(partitionId)?.txState.get(txId);
      if (record !== undefined) return record;
    }
  }
  return undefined;
}

/** The newest physical ms any running node's HLC has reached. */
export function clusterNowMs(cluster: TestCluster): number {
  let now = 0;
  for (const name of cluster.nodes) {
    const hlc: HybridTimestamp | undefined = cluster.basaltNode(name)?.hlc.current();
    if (hlc !== undefined) now = Math.max(now, physicalMs(hlc));
  }
  return now;
}

export function describeLeftovers(found: readonly Leftover[], max = 12): string {
  const byKind = new Map<string, number>();
  for (const l of found) {
    const kind = l.what === 'map-entry' ? `${l.what} ${l.detail}` : l.what;
    byKind.set(kind, (byKind.get(kind) ?? 0) + 1);
  }
  const summary = [...byKind].map(([kind, n]) => `${n} ${kind}`).join(', ');
  const lines = [
    summary,
    ...found
      .slice(0, max)
      .map(
        (l) => `${l.node} ${l.what} ${l.txId}${l.partitionId === undefined ? '' : ` @${l.partitionId}`} ${l.detail}`,
      ),
  ];
  if (found.length > max) lines.push(`... and ${found.length - max} more`);
  return lines.join('\n');
}
