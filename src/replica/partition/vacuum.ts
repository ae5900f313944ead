/**
 * Tx state vacuum on one node (DESIGN §2 "Vacuum", §2b rule 15), in rounds on the injected timers:
 *
 * - the node's volatile tx state map drops final entries whose retention passed (`TxStateMap.vacuum`: entries kept
 *   until cleanup completed count from that moment, others from becoming final; non-final entries are never removed);
 * - on every commit partition this node is primary of, durable records are removed through the log: the driver
 *   proposes `VacuumTxStates` for records whose cleanup completed and whose deadline D = beginTs + the tx's timeout
 *   (the one its id carries, else txTimeout) lies below `now − maxClockSkew − retention`. The state machine re-checks both conditions against the command's
 *   effective timestamp (≥ the `now` used here) on every replica, removes the records and raises the persisted vacuum
 *   horizon to the largest removed D; a finish or recovery of a tx at or below the horizon is then not applied.
 *
 * Records are listed in txId order, which is beginTs order. D does not rise along the listing (txs have timeouts of
 * their own), so each record is checked against its own D and a long tx's record stays until its own D has passed;
 * the scan stops at the first record whose beginTs reaches the limit, since every later D is above its beginTs.
 * This keeps the horizon sound: it is the largest D removed, every removed record has D ≤ horizon, so a late finish or
 * recovery of a removed tx is refused; a tx with D ≤ horizon that is not removed either still has its record (and is
 * finished through it) or never had one, and its D is then long past (below now − maxClockSkew − retention), so no
 * commit of it can still be sent (rule 15) and refusing its finish as unknown is the rule's answer. Records whose cleanup has not completed stay (the cleanup driver re-drives them). Bounded:
 * at most scanMax records examined per partition per round (a cut-short scan resumes there next round), VacuumTxStates batches of txStateVacuumBatchMax ids,
 * rounds never overlap. Only the primary proposes, so replicas do not race each other with duplicate commands (a
 * duplicate would be harmless: it finds nothing left to remove).
 */

import { invalidArgument } from '../../core/errors.js';
import type { HybridTimestamp, PartitionId, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import type { Clock } from '../../env/clock.js';
import { PeriodicTask, type Timers } from '../../env/timers.js';
import type { HybridClock } from '../../hlc/hybrid-clock.js';
import { addMs } from '../../hlc/timestamp.js';
import type { TxStateStorage } from '../../storage/tx-state-storage.js';
import { beginTimestampOf, txDeadline } from '../../tx/core/tx-id.js';
import type { TxStateMap } from '../../tx/core/tx-state-map.js';
import type { ApplyResult } from './apply-result.js';
import type { PartitionReplica } from './partition-replica.js';

/** What durable vacuum needs of one commit partition replica on this node. */
export interface VacuumPartition {
  readonly partitionId: PartitionId;
  readonly txState: Pick<TxStateStorage, 'records'>;
  /** True while this replica acts as primary at `now` (rule 1). */
  isPrimary(now: HybridTimestamp): boolean;
  /** Proposes `VacuumTxStates` for `txIds`; resolves with its apply result here. */
  proposeVacuum(txIds: readonly TxId[]): Promise<ApplyResult>;
}

/** A hosted partition as a vacuum target. */
export function vacuumPartitionOf(p: PartitionReplica): VacuumPartition {
  return {
    partitionId: p.partitionId,
    txState: p.txState,
    isPrimary: (now) => p.checkPrimary(now).kind === 'ok',
    proposeVacuum: (txIds) =>
      p.propose((proposal) => ({ kind: 'VacuumTxStates', ts: proposal.ts, proposalId: proposal.id, txIds })),
  };
}

export interface TxStateVacuumOptions {
  readonly timers: Timers;
  readonly clock: HybridClock;
  /** The clock the tx state map stamps its entries with (its monotonicMs is the map vacuum's `now`). */
  readonly mapClock: Pick<Clock, 'monotonicMs'>;
  readonly txStates: TxStateMap;
  /** Commit partitions hosted now (read at every round; non-primaries are skipped). */
  readonly partitions: () => Iterable<VacuumPartition>;
  /** Cluster-wide tx timeout (D = beginTs + this); must equal the state machines'. */
  readonly txTimeoutMs?: number;
  /** Durable retention; must equal the state machines' txStateRetentionMs. */
  readonly retentionMs?: number;
  /** Retention of final entries in the volatile map. */
  readonly mapRetentionMs?: number;
  readonly intervalMs?: number;
  readonly scanMax?: number;
  readonly batchMax?: number;
  readonly onError?: (error: unknown) => void;
}

export interface VacuumRound {
  /** Entries removed from the volatile map. */
  readonly mapRemoved: number;
  /** Durable records named in VacuumTxStates proposals. */
  readonly proposed: number;
  /** Durable records the applied commands removed. */
  readonly removed: number;
}

export class TxStateVacuumDriver {
  readonly txTimeoutMs: number;
  readonly retentionMs: number;
  readonly mapRetentionMs: number;
  readonly intervalMs: number;
  readonly scanMax: number;
  readonly batchMax: number;
  private readonly options: TxStateVacuumOptions;
  private readonly task: PeriodicTask;
  private roundInFlight: Promise<VacuumRound> | undefined;
  /** Where a scan cut short by scanMax resumes, per hosted partition (pruned to the hosted ones every round). */
  private readonly cursors = new Map<PartitionId, TxId>();

  constructor(options: TxStateVacuumOptions) {
    this.options = options;
    this.txTimeoutMs = options.txTimeoutMs ?? LIMITS.txTimeoutMsDefault;
    this.retentionMs = options.retentionMs ?? LIMITS.txStateRetentionMsDefault;
    this.mapRetentionMs = options.mapRetentionMs ?? LIMITS.txStateRetentionMsDefault;
    this.intervalMs = options.intervalMs ?? LIMITS.txStateVacuumIntervalMsDefault;
    this.scanMax = options.scanMax ?? LIMITS.txStateVacuumScanMax;
    this.batchMax = options.batchMax ?? LIMITS.txStateVacuumBatchMax;
    const positive = [this.txTimeoutMs, this.intervalMs, this.scanMax, this.batchMax];
    if (positive.some((v) => !Number.isInteger(v) || v < 1) || this.retentionMs < 0 || this.mapRetentionMs < 0) {
      throw invalidArgument('vacuum settings must be positive integers (retentions >= 0)');
    }
    if (this.batchMax > LIMITS.txStateVacuumBatchMax) {
      throw invalidArgument(`a VacuumTxStates command names at most ${LIMITS.txStateVacuumBatchMax} txs`);
    }
    this.task = new PeriodicTask(
      options.timers,
      this.intervalMs,
      () => this.runRound(),
      (error) => options.onError?.(error),
    );
  }

  start(): void {
    this.task.start();
  }

  stop(): void {
    this.task.stop();
  }

  /** One round: the map, then every commit partition this node is primary of. Concurrent calls share one round. */
  runRound(): Promise<VacuumRound> {
    this.roundInFlight ??= this.round().finally(() => {
      this.roundInFlight = undefined;
    });
    return this.roundInFlight;
  }

  /** Final map entries past their retention are removed; returns how many. */
  vacuumMap(): number {
    return this.options.txStates.vacuum(this.options.mapClock.monotonicMs(), this.mapRetentionMs);
  }

  /**
   * Rule 15: records of `p` that may go now (cleanup completed, D < now − maxClockSkew − retention), from at most
   * scanMax records. A scan cut short by scanMax (many old records still waiting for their cleanup) resumes after
   * its last record next round, and starts over once it reaches records too young to go.
   */
  candidates(p: VacuumPartition, now: HybridTimestamp): TxId[] {
    const limit = addMs(now, -(this.options.clock.maxClockSkewMs + this.retentionMs));
    const out: TxId[] = [];
    let after = this.cursors.get(p.partitionId);
    this.cursors.delete(p.partitionId);
    let examined = 0;
    while (examined < this.scanMax) {
      const page = p.txState.records(after, Math.min(LIMITS.txStateListMax, this.scanMax - examined));
      for (const record of page) {
        // Begin order: every later record began at or after this one, so its deadline (> beginTs) is past the limit.
        if (beginTimestampOf(record.txId) >= limit) return out;
        if (record.cleanupCompleted && txDeadline(record.txId, this.txTimeoutMs) < limit) out.push(record.txId);
      }
      examined += page.length;
      const last = page.at(-1);
      if (last === undefined) return out;
      after = last.txId;
    }
    if (after !== undefined) this.cursors.set(p.partitionId, after);
    return out;
  }

  /** Proposes VacuumTxStates for the candidates of `p` if it is primary; resolves with [proposed, removed]. */
  async vacuumPartition(p: VacuumPartition): Promise<{ proposed: number; removed: number }> {
    const now = this.options.clock.now();
    if (!p.isPrimary(now)) return { proposed: 0, removed: 0 };
    const txIds = this.candidates(p, now);
    let removed = 0;
    for (let i = 0; i < txIds.length; i += this.batchMax) {
      const result = await p.proposeVacuum(txIds.slice(i, i + this.batchMax));
      if (result.kind === 'VACUUMED') removed += result.removed.length;
    }
    return { proposed: txIds.length, removed };
  }

  private async round(): Promise<VacuumRound> {
    const mapRemoved = this.vacuumMap();
    let proposed = 0;
    let removed = 0;
    const partitions = [...this.options.partitions()];
    const hosted = new Set(partitions.map((p) => p.partitionId));
    for (const id of [...this.cursors.keys()]) if (!hosted.has(id)) this.cursors.delete(id);
    for (const p of partitions) {
      try {
        const r = await this.vacuumPartition(p);
        proposed += r.proposed;
        removed += r.removed;
      } catch (error) {
        // A lost leadership or a stopped replica: the next round (or the next primary) tries again.
        this.options.onError?.(error);
      }
    }
    return { mapRemoved, proposed, removed };
  }
}
