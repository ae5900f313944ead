/**
 * The local write intent switch a resolved *final* outcome schedules (ignite3-protocol.md §8; DESIGN §2 "Resolution";
 * rule 11): the row's intent of that tx is committed at its commitTs or removed, in this node's MVCC storage only, in
 * one `runConsistently` step. It never touches Raft: the commit partition's cleanup switches every replica through
 * the log as well, and a later Raft switch of a row already switched here finds no intent and is a no-op.
 *
 * HAZARD (why ReplicaResolution leaves it off unless asked): the state machine decides Update commands from storage
 * (`blockingIntent`: a foreign intent makes the command a no-op). A replica that switched a row here, and then
 * becomes primary and proposes another tx's write to that row before the tx's Raft switch is in the log, applies the
 * write while the other replicas, still holding the intent, apply a no-op: the replicas diverge. Enabling it safely
 * needs the data command to carry what its proposer saw (as Ignite's commands carry the row's last commit time) or
 * a state machine that switches a final foreign intent deterministically at apply.
 *
 * Invariants: only true final outcomes get here (UNKNOWN and PENDING never do); a switch checks, at run time, that
 * the row still holds an intent *of that tx* (anything else is left alone); switches are deduplicated per row while
 * queued and bounded by `queuedMax` (past it a switch is skipped: the Raft cleanup does the work later). Switches
 * run on the injected timers, never inside the resolution that scheduled them.
 */
import { assert } from '../../core/assert.js';
import { type CounterSink, NO_COUNTERS } from '../../core/counters.js';
import type { PartitionId, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import type { Timers } from '../../env/timers.js';
import type { MvPartitionStorage } from '../../storage/mv-partition-storage.js';
import type { TxOutcome } from '../../tx/core/messages.js';
import { RESOLUTION_COUNTERS } from '../ports.js';
import { isTrueOutcome } from './answers.js';

/** Finds this node's MVCC storage of a hosted partition (the node's PartitionDirectory: `get(p)?.mv`). */
export interface IntentStorages {
  mvPartition(partitionId: PartitionId): MvPartitionStorage | undefined;
}

export interface IntentSwitcherOptions {
  readonly storages: IntentStorages;
  readonly timers: Timers;
  readonly counters?: CounterSink;
  readonly queuedMax?: number;
  readonly onError?: (error: unknown) => void;
}

export type SwitchResult = 'committed' | 'aborted' | 'no-intent' | 'not-hosted';

interface QueuedSwitch {
  readonly partitionId: PartitionId;
  readonly key: string;
  readonly txId: TxId;
  readonly outcome: TxOutcome;
}

export class IntentSwitcher {
  private readonly storages: IntentStorages;
  private readonly timers: Timers;
  private readonly counters: CounterSink;
  private readonly queuedMax: number;
  private readonly onError: (error: unknown) => void;
  private readonly queued = new Map<string, QueuedSwitch>();

  constructor(options: IntentSwitcherOptions) {
    this.storages = options.storages;
    this.timers = options.timers;
    this.counters = options.counters ?? NO_COUNTERS;
    this.queuedMax = options.queuedMax ?? LIMITS.intentSwitchesQueuedMax;
    this.onError = options.onError ?? (() => {});
  }

  get queuedCount(): number {
    return this.queued.size;
  }

  /** Queues the switch of `key`'s intent of `txId` in `partitionId`; false if one is queued already or no room. */
  schedule(partitionId: PartitionId, key: string, txId: TxId, outcome: TxOutcome): boolean {
    // Rule 11: only a true final outcome switches a row (checked again when the switch runs).
    assert(isTrueOutcome(outcome), 'a scheduled switch carries a true final outcome', txId);
    const rowKey = `${partitionId}\u0000${key}`;
    if (this.queued.has(rowKey) || this.queued.size >= this.queuedMax) return false;
    this.queued.set(rowKey, { partitionId, key, txId, outcome });
    this.timers.setTimer(() => {
      const item = this.queued.get(rowKey);
      this.queued.delete(rowKey);
      if (item === undefined) return;
      try {
        this.switchNow(item.partitionId, item.key, item.txId, item.outcome);
      } catch (error) {
        this.onError(error);
      }
    }, 0);
    return true;
  }

  /** Switches at once (synchronously): the row's intent of `txId`, if it still holds one. */
  switchNow(partitionId: PartitionId, key: string, txId: TxId, outcome: TxOutcome): SwitchResult {
    assert(isTrueOutcome(outcome), 'a switch commits only at its commitTs, or aborts', txId);
    const mv = this.storages.mvPartition(partitionId);
    if (mv === undefined) return 'not-hosted';
    const rowId = mv.rowIdOf(key);
    if (rowId === undefined) return 'no-intent';
    const latest = mv.readLatest(rowId);
    if (latest.kind !== 'intent' || latest.txId !== txId) return 'no-intent';
    const result = mv.runConsistently(() =>
      outcome.state === 'COMMITTED' ? mv.commitWrite(rowId, outcome.commitTs, txId) : mv.abortWrite(rowId, txId),
    );
    if (result.status !== 'SUCCESS') return 'no-intent';
    this.counters.add(RESOLUTION_COUNTERS.switches);
    return outcome.state === 'COMMITTED' ? 'committed' : 'aborted';
  }
}
