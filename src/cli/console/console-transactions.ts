/**
 * The console's transactions view: this node's volatile tx state map (its size, entries found by tx id), the
 * resolution counters by path, and the oldest live (not final) transactions with the locks they hold and the
 * transactions they wait for in the lock tables of the partitions this node is primary of. Read-only and bounded:
 * a search examines at most `TX_EXAMINED_MAX` entries and returns at most `limit`.
 */
import type { NodeId, NodeName, PartitionId, TxId } from '../../core/ids.js';
import { physicalMs } from '../../hlc/timestamp.js';
import type { BasaltNode } from '../../node/basalt-node.js';
import { RESOLUTION_COUNTERS } from '../../replica/ports.js';
import { beginTimestampOf, isTxId } from '../../tx/core/tx-id.js';
import { isFinal } from '../../tx/core/tx-state.js';
import type { TxStateEntry } from '../../tx/core/tx-state-map.js';
import { localReplica } from './console-cluster.js';

/** Entries one request looks at, at most, when it searches by a part of a tx id or lists the oldest. */
export const TX_EXAMINED_MAX = 100_000;
/** Locks and waits listed per transaction, at most. */
const LOCKS_LISTED_MAX = 20;

export interface ConsoleTxEntry {
  readonly txId: string;
  readonly state: string;
  readonly coordinatorId: string | null;
  /** The coordinator's member name, when this node knows the id. */
  readonly coordinator: string | null;
  readonly commitTs: string | null;
  readonly commitTsMs: number | null;
  readonly commitPartition: string | null;
  readonly beginMs: number;
  readonly ageMs: number;
  readonly cleanupCompleted: boolean;
}

export interface ConsoleLiveTx extends ConsoleTxEntry {
  readonly locksHeld: number;
  /** `key` is null where the viewer may not read the partition's table. */
  readonly locks: readonly { readonly partition: string; readonly key: string | null; readonly mode: string }[];
  readonly waitsFor: readonly {
    readonly partition: string;
    readonly key: string | null;
    readonly holders: readonly string[];
  }[];
}

export interface ConsoleTransactions {
  readonly node: string;
  readonly size: number;
  readonly entriesMax: number;
  readonly resolution: Readonly<Record<string, number>>;
  readonly query: string;
  readonly entries: readonly ConsoleTxEntry[];
  /** The search stopped at the limit or at TX_EXAMINED_MAX: there may be more. */
  readonly truncated: boolean;
  readonly oldestLive: readonly ConsoleLiveTx[];
}

/** `readable`: whether the viewer may see the keys of a partition (the keys of the others are left out). */
export function transactionsView(
  node: BasaltNode,
  query: string,
  limit: number,
  readable: (partition: PartitionId) => boolean = () => true,
): ConsoleTransactions {
  const names = coordinatorNames(node);
  const nowMs = physicalMs(node.hlc.current());
  const { found, truncated } = search(node, query, limit);
  return {
    node: node.name,
    size: node.txStates.size,
    entriesMax: node.txStates.entriesMax,
    resolution: resolutionCounters(node),
    query,
    entries: found.map(([txId, e]) => entryView(txId, e, names, nowMs)),
    truncated,
    oldestLive: oldestLive(node, limit).map(([txId, e]) => liveView(node, entryView(txId, e, names, nowMs), readable)),
  };
}

/** Resolutions answered on this node, by the path that answered, and the recoveries it decided. */
export function resolutionCounters(node: BasaltNode): Record<string, number> {
  return {
    local: node.counters.get(RESOLUTION_COUNTERS.local),
    coordinator: node.counters.get(RESOLUTION_COUNTERS.coordinator),
    commitPartition: node.counters.get(RESOLUTION_COUNTERS.commitPartition),
    primaryReplica: node.counters.get(RESOLUTION_COUNTERS.primaryReplica),
    recovery: node.counters.get(RESOLUTION_COUNTERS.recoveries),
    shared: node.counters.get(RESOLUTION_COUNTERS.shared),
    failed: node.counters.get(RESOLUTION_COUNTERS.failed),
  };
}

function search(
  node: BasaltNode,
  query: string,
  limit: number,
): { found: (readonly [TxId, TxStateEntry])[]; truncated: boolean } {
  if (isTxId(query)) {
    const e = node.txStates.entry(query);
    return { found: e === undefined ? [] : [[query, e]], truncated: false };
  }
  const found: (readonly [TxId, TxStateEntry])[] = [];
  let examined = 0;
  for (const pair of node.txStates.entries()) {
    if (found.length >= limit || examined >= TX_EXAMINED_MAX) return { found, truncated: true };
    examined++;
    if (query === '' || pair[0].includes(query)) found.push(pair);
  }
  return { found, truncated: false };
}

/** The oldest entries not final (tx ids sort by begin timestamp), among the first TX_EXAMINED_MAX live ones. */
function oldestLive(node: BasaltNode, limit: number): (readonly [TxId, TxStateEntry])[] {
  const live: (readonly [TxId, TxStateEntry])[] = [];
  let examined = 0;
  for (const pair of node.txStates.entries()) {
    if (examined++ >= TX_EXAMINED_MAX) break;
    if (!isFinal(pair[1].state)) live.push(pair);
  }
  return live.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).slice(0, limit);
}

function coordinatorNames(node: BasaltNode): Map<string, string> {
  const names = new Map<string, string>([[node.self.id, node.name]]);
  for (const m of node.metastorage.view().members ?? []) {
    const id = node.membership.currentIdOf(m.name as NodeName);
    if (id !== undefined) names.set(id, m.name);
  }
  return names;
}

function entryView(txId: TxId, e: TxStateEntry, names: ReadonlyMap<string, string>, nowMs: number): ConsoleTxEntry {
  const beginMs = physicalMs(beginTimestampOf(txId));
  return {
    txId,
    state: e.state,
    coordinatorId: e.coordinatorId ?? null,
    coordinator: e.coordinatorId === undefined ? null : (names.get(e.coordinatorId as NodeId) ?? null),
    commitTs: e.commitTimestamp === undefined ? null : String(e.commitTimestamp),
    commitTsMs: e.commitTimestamp === undefined ? null : physicalMs(e.commitTimestamp),
    commitPartition: e.commitPartitionId ?? null,
    beginMs,
    ageMs: Math.max(0, nowMs - beginMs),
    cleanupCompleted: e.cleanupCompleted,
  };
}

/** Locks and waits of a tx in the lock tables this node keeps (those of the partitions it is primary of). */
function liveView(
  node: BasaltNode,
  entry: ConsoleTxEntry,
  readable: (partition: PartitionId) => boolean,
): ConsoleLiveTx {
  const txId = entry.txId as TxId;
  const locks: { partition: string; key: string | null; mode: string }[] = [];
  const waitsFor: { partition: string; key: string | null; holders: string[] }[] = [];
  let locksHeld = 0;
  for (const partition of node.hostedPartitions().keys()) {
    const table = localReplica(node, partition as PartitionId)?.locks;
    if (table === undefined) continue;
    const shown = readable(partition as PartitionId);
    const held = table.locksOf(txId);
    locksHeld += held.length;
    for (const { key, mode } of held.slice(0, LOCKS_LISTED_MAX - locks.length)) {
      locks.push({ partition, key: shown ? key : null, mode });
    }
    for (const key of table.waitsOf(txId).slice(0, LOCKS_LISTED_MAX - waitsFor.length)) {
      waitsFor.push({ partition, key: shown ? key : null, holders: table.holders(key).map((h) => h.txId) });
    }
  }
  return { ...entry, locksHeld, locks, waitsFor };
}
