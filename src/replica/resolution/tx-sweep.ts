/**
 * The node's tx sweep: a periodic, bounded pass that ends what transactions left behind here when nobody trips over
 * it again (DESIGN §2 "Recovery", "Vacuum"; §2b rules 15, 17). Orphan detection reacts to lock conflicts and
 * resolution to readers; this pass needs neither. Over the node's map entries that are not final (PENDING,
 * ABANDONED; FINISHING is the coordinator's own and ends with its finish), up to `scanMax` per pass from a cursor:
 *
 * - entries of a tx this node coordinates are left alone (the coordinator ends its own txs, by their timeout at the
 *   latest);
 * - an entry of a tx the node holds nothing of (no lock, lock wait, intent or operation on any hosted partition) is
 *   removed (reason `sweep`) once `now > D + maxClockSkew + graceMs`, D the tx's deadline (rule 15): by then no RW
 *   request of the tx is served anywhere, and the entry is a cache (the coordinator id is in the tx id, the durable
 *   state lives in storage). This ends the entries of a primary that lost its lease before the tx's cleanup, of a
 *   dead coordinator's read-only txs, and of backups that caught up through a snapshot;
 * - a tx whose locks or intents a partition this node is primary of still holds is recovered: its commit partition
 *   gets a TxRecoveryRequest through the orphan detector (so one rate limit per tx covers both), naming this
 *   partition, which the commit partition aborts (or, if the tx committed, commits) and cleans up. Asked when the
 *   coordinator is gone (rule 17; the entry goes ABANDONED first, as orphan detection does), or when it is alive but
 *   `now > D + maxClockSkew + recoveryAfterDeadlineMs` (past the coordinator's foreground finish window, so a commit
 *   whose user is still waiting is never aborted under it). At most `recoveriesPerPassMax` per pass.
 *
 * Intents with no map entry at all (the primary's node restarted, so its map is gone, and so did the coordinator):
 * each pass also pages through the txs holding intents on every partition this node is primary of (at most
 * `intentTxsPerPartitionMax` per partition, from a cursor), and recovers those without an entry here under the same
 * conditions (the coordinator named in the tx id gone, or the tx long past D).
 *
 * Txs an installed snapshot resolved on a partition (`forget`) are removed at once under the same "holds nothing"
 * test: their intents there are already switched, so nothing waits for their deadline.
 *
 * Time: `now` is the node's HLC; passes run on the injected timers and never overlap (a pass is synchronous; the
 * recovery requests it starts run on their own).
 */
import { type CounterSink, NO_COUNTERS } from '../../core/counters.js';
import type { HybridTimestamp, NodeId, NodeIdentity, PartitionId, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import { PeriodicTask, type Timers } from '../../env/timers.js';
import type { HybridClock } from '../../hlc/hybrid-clock.js';
import { addMs } from '../../hlc/timestamp.js';
import { nodeIdOf, txDeadline } from '../../tx/core/tx-id.js';
import type { TxStateEntry, TxStateMap, TxStateUpdateReason } from '../../tx/core/tx-state-map.js';
import type { PartitionReplica } from '../partition/partition-replica.js';
import type { PeerDirectory } from '../ports.js';
import { markCoordinatorGone } from './coordinator-gone.js';
import type { OrphanDetector } from './orphan-detector.js';

/** Names of the node counters bumped here. */
export const TX_SWEEP_COUNTERS = {
  /** Recovery requests the sweep sent to commit partitions for txs past their deadline or of a gone coordinator. */
  recoveries: 'txSweep.recoveries',
} as const;

export interface TxSweepOptions {
  readonly self: NodeIdentity;
  readonly clock: HybridClock;
  readonly timers: Timers;
  readonly txStates: TxStateMap;
  readonly peers: Pick<PeerDirectory, 'isGone'>;
  /** The node's hosted partitions, read at every pass. */
  readonly partitions: () => Iterable<PartitionReplica>;
  readonly orphans: Pick<OrphanDetector, 'requestRecovery'>;
  /** Cluster-wide tx timeout (D = beginTs + this); must equal the replicas'. */
  readonly txTimeoutMs?: number;
  readonly intervalMs?: number;
  readonly scanMax?: number;
  readonly graceMs?: number;
  readonly recoveryAfterDeadlineMs?: number;
  readonly recoveriesPerPassMax?: number;
  readonly intentTxsPerPartitionMax?: number;
  readonly onError?: (error: unknown) => void;
  readonly counters?: CounterSink;
}

export interface SweepPass {
  readonly examined: number;
  readonly removed: number;
  readonly recoveries: number;
}

export class TxSweep {
  private readonly o: TxSweepOptions;
  private readonly task: PeriodicTask;
  private readonly txTimeoutMs: number;
  private readonly intervalMs: number;
  private readonly scanMax: number;
  private readonly graceMs: number;
  private readonly recoveryAfterDeadlineMs: number;
  private readonly recoveriesPerPassMax: number;
  private readonly intentTxsPerPartitionMax: number;
  /** Where each hosted partition's intent listing resumes (pruned to the hosted ones every pass). */
  private readonly intentCursors = new Map<PartitionId, TxId>();

  constructor(options: TxSweepOptions) {
    this.o = options;
    this.txTimeoutMs = options.txTimeoutMs ?? LIMITS.txTimeoutMsDefault;
    this.intervalMs = options.intervalMs ?? LIMITS.txStateSweepIntervalMs;
    this.scanMax = options.scanMax ?? LIMITS.txStateSweepScanMax;
    this.graceMs = options.graceMs ?? LIMITS.txStateSweepGraceMs;
    this.recoveryAfterDeadlineMs = options.recoveryAfterDeadlineMs ?? LIMITS.txSweepRecoveryAfterDeadlineMs;
    this.recoveriesPerPassMax = options.recoveriesPerPassMax ?? LIMITS.txSweepRecoveriesPerPassMax;
    this.intentTxsPerPartitionMax = options.intentTxsPerPartitionMax ?? LIMITS.txSweepIntentTxsPerPartitionMax;
    this.task = new PeriodicTask(
      options.timers,
      this.intervalMs,
      () => void this.runPass(),
      (error) => options.onError?.(error),
    );
  }

  start(): void {
    this.task.start();
  }

  stop(): void {
    this.task.stop();
  }

  /** One pass (see the module header). */
  runPass(): SweepPass {
    const now = this.o.clock.now();
    const partitions = [...this.o.partitions()];
    const batch = this.o.txStates.nonFinal(this.scanMax);
    let removed = 0;
    let recoveries = 0;
    for (const [txId, entry] of batch) {
      if (entry.state === 'FINISHING') continue;
      const coordinatorId = entry.coordinatorId ?? nodeIdOf(txId);
      if (coordinatorId === this.o.self.id) continue;
      const removable = now > this.past(txId, this.graceMs);
      const recoverable = this.o.peers.isGone(coordinatorId) || now > this.past(txId, this.recoveryAfterDeadlineMs);
      // The common case, a live tx of a live coordinator, costs no storage look-up.
      if (!removable && !recoverable) continue;
      const holding = partitions.filter((p) => holdsAnything(p, txId));
      if (holding.length === 0) {
        if (removable && this.o.txStates.remove(txId, 'sweep')) removed += 1;
        continue;
      }
      if (!recoverable || recoveries >= this.recoveriesPerPassMax) continue;
      recoveries += this.recover(txId, entry, coordinatorId, holding, now);
    }
    recoveries += this.recoverUnknownIntents(partitions, now, this.recoveriesPerPassMax - recoveries);
    if (recoveries > 0) (this.o.counters ?? NO_COUNTERS).add(TX_SWEEP_COUNTERS.recoveries, recoveries);
    return { examined: batch.length, removed, recoveries };
  }

  /** Intents on primaries here of txs the map has no entry of (see the module header); returns requests sent. */
  private recoverUnknownIntents(partitions: readonly PartitionReplica[], now: HybridTimestamp, budget: number): number {
    const hosted = new Set(partitions.map((p) => p.partitionId));
    for (const id of [...this.intentCursors.keys()]) if (!hosted.has(id)) this.intentCursors.delete(id);
    let sent = 0;
    for (const p of partitions) {
      if (sent >= budget) break;
      if (p.checkPrimary(now).kind !== 'ok') continue;
      const txIds = p.mv.intentTxIds(this.intentCursors.get(p.partitionId), this.intentTxsPerPartitionMax);
      const last = txIds.at(-1);
      if (txIds.length < this.intentTxsPerPartitionMax || last === undefined) this.intentCursors.delete(p.partitionId);
      else this.intentCursors.set(p.partitionId, last);
      for (const txId of txIds) {
        if (sent >= budget) break;
        if (this.o.txStates.entry(txId) !== undefined) continue;
        const coordinatorId = nodeIdOf(txId);
        if (coordinatorId === this.o.self.id) continue;
        if (!this.o.peers.isGone(coordinatorId) && now <= this.past(txId, this.recoveryAfterDeadlineMs)) continue;
        const commitPartitionId = commitPartitionOfIntent(p, txId);
        if (commitPartitionId === undefined) continue;
        if (this.o.orphans.requestRecovery(txId, commitPartitionId, p.partitionId)) sent += 1;
      }
    }
    return sent;
  }

  /**
   * Txs an installed snapshot resolved on one partition (its intents there already switched, no record there):
   * their entries are removed now unless the node still holds something of them or coordinates them.
   */
  forget(txIds: readonly TxId[], reason: TxStateUpdateReason = 'snapshot-restored'): number {
    const partitions = [...this.o.partitions()];
    let removed = 0;
    for (const txId of txIds) {
      const entry = this.o.txStates.entry(txId);
      if (entry === undefined || (entry.state !== 'PENDING' && entry.state !== 'ABANDONED')) continue;
      if ((entry.coordinatorId ?? nodeIdOf(txId)) === this.o.self.id) continue;
      if (partitions.some((p) => holdsAnything(p, txId))) continue;
      if (this.o.txStates.remove(txId, reason)) removed += 1;
    }
    return removed;
  }

  /** D + maxClockSkew + `extraMs` of the tx. */
  private past(txId: TxId, extraMs: number): HybridTimestamp {
    return addMs(txDeadline(txId, this.txTimeoutMs), this.o.clock.maxClockSkewMs + extraMs);
  }

  /** Asks the commit partition to recover the tx for every primary here that holds it; returns requests sent. */
  private recover(
    txId: TxId,
    entry: TxStateEntry,
    coordinatorId: NodeId,
    holding: readonly PartitionReplica[],
    now: HybridTimestamp,
  ): number {
    let sent = 0;
    for (const p of holding) {
      if (p.checkPrimary(now).kind !== 'ok') continue;
      const commitPartitionId = entry.commitPartitionId ?? commitPartitionOfIntent(p, txId);
      if (commitPartitionId === undefined) continue;
      markCoordinatorGone(this.o.txStates, this.o.peers, txId, coordinatorId);
      if (this.o.orphans.requestRecovery(txId, commitPartitionId, p.partitionId)) sent += 1;
    }
    return sent;
  }
}

/** The tx holds a lock, waits for one, has an intent or an operation in flight on `p`. */
function holdsAnything(p: PartitionReplica, txId: TxId): boolean {
  return (
    p.locks.locksOf(txId).length > 0 ||
    p.locks.waitsOf(txId).length > 0 ||
    p.operations.inFlight(txId) > 0 ||
    p.mv.rowsWrittenBy(txId).length > 0
  );
}

/** The commit partition an intent of the tx on `p` names (every intent carries it). */
function commitPartitionOfIntent(p: PartitionReplica, txId: TxId): PartitionId | undefined {
  for (const rowId of p.mv.rowsWrittenBy(txId)) {
    const read = p.mv.readLatest(rowId);
    if (read.kind === 'intent' && read.txId === txId) return read.commitPartitionId;
  }
  return undefined;
}
