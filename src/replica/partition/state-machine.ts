/**
 * The replicated state machine of one partition: applies committed Raft entries, in log order, to the partition's
 * MVCC storage and tx state storage, the node's tx state map and its hybrid clock. Every replica fed the same log
 * reaches the same storage state and computes the same result for every entry (nothing here reads the clock, a
 * random source or any replica-local state other than what the log built).
 *
 * Per command (rule 9): the effective timestamp `e = max(proposed, lastAppliedTs + 1)` is what every use of the
 * command's time sees: the one-phase commit timestamp, the clock update, safe time and the result's `appliedTs`.
 *
 * One apply call (a batch of committed entries from the driver) is one `engine.runConsistently` step holding every
 * command's data changes, the lease record (current lease + last data sequence number under it, rules 3 and 4) and
 * the applied position `(index, term, lastAppliedTs)` on both storages. Only after that step returned, so that the
 * applied state is visible to reads, the clock absorbs the last `e`, the tx state map is updated, safe time advances,
 * and results are handed to this replica's own proposals (the primary answers from them, rule 4). `stage` is that
 * step alone, joining a storage transaction its caller holds open (the node applies many groups' entries in one,
 * group-state-machines.ts), and returns the volatile half to run once that transaction committed.
 *
 * Lease observers (`onLeaseChange`) hear of every change of the applied lease, from an applied Lease command or from
 * an installed snapshot, once the change is visible here; they are told the lease before and after (for metrics:
 * holder changes, leases this replica gained or lost).
 *
 * Snapshot install: a replica that catches up through a snapshot never applies the cleanup commands the snapshot
 * covers, so the map entries its applied updates made would stay PENDING. The machine remembers which txs' updates it
 * applied (until their switch applies); after a restore, a tx whose intents the snapshot no longer has is final: its
 * entry goes final from this partition's durable record when it is the tx's commit partition (reason
 * `snapshot-restored`), else the tx is reported to `onSnapshotResolved` observers (the node removes the entry if it
 * holds nothing else of the tx; the outcome is not known here).
 *
 * Invariants: both storages of the partition always agree on the applied position; the lease and lastAppliedTs are
 * durable with it and part of snapshots; the applied index rises by exactly one per entry; effective timestamps rise
 * strictly. A malformed entry throws before anything is written, and the Raft driver stops the group.
 */
import { assert, unreachable } from '../../core/assert.js';
import { BasaltError } from '../../core/errors.js';
import type { HybridTimestamp, LogIndex, PartitionId, Term, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import type { HybridClock } from '../../hlc/hybrid-clock.js';
import { addMs, maxTimestamp } from '../../hlc/timestamp.js';
import { decode, encode } from '../../net/codec.js';
import type { Entry, Snapshot } from '../../raft/types.js';
import type { MvPartitionStorage } from '../../storage/mv-partition-storage.js';
import { TOMBSTONE } from '../../storage/mv-partition-storage.js';
import type { StorageEngine } from '../../storage/storage-engine.js';
import type { InflightWrites, TxMeta, TxStateStorage } from '../../storage/tx-state-storage.js';
import { txDeadline } from '../../tx/core/tx-id.js';
import type { TxStateMap } from '../../tx/core/tx-state-map.js';
import type { ApplyResult, CarriedRefusal, DataResult, PrimaryMissReason } from './apply-result.js';
import {
  type CarriedWrites,
  type DataCommand,
  decodeCommand,
  type FinishTxCommand,
  type IntentSwitch,
  itemCommand,
  type LeaseCommand,
  leaseProblem,
  type PartitionCommand,
  type TxCleanupCompletedCommand,
  type VacuumTxStatesCommand,
  writesOf,
} from './commands.js';
import { decideLease, type Lease, sameToken, tokenNames, tokenOf } from './lease.js';
import type { ProposalTracker } from './proposals.js';
import { AppliedSafeTime } from './safe-time.js';

/** Name of the durable lease record in the partition's MVCC storage metadata. */
export const LEASE_META_NAME = 'replica.lease';

/** The durable lease state: the current lease and the last data sequence number applied under it. */
export interface LeaseRecord {
  readonly lease: Lease | null;
  readonly lastSeq: number;
}

const NO_LEASE: LeaseRecord = { lease: null, lastSeq: 0 };

export interface PartitionStateMachineOptions {
  readonly partitionId: PartitionId;
  readonly engine: StorageEngine;
  readonly txStateMap: TxStateMap;
  readonly clock: HybridClock;
  /** This replica object's proposals: results of commands it proposed are handed to it. */
  readonly proposals?: ProposalTracker;
  /** Cluster-wide tx timeout: a tx's hard deadline is beginTs + this (rule 15). */
  readonly txTimeoutMs?: number;
  /** Durable tx state records are vacuumed only when deadline < e − maxClockSkew − this. */
  readonly txStateRetentionMs?: number;
  readonly safeTimeWaitersMax?: number;
}

/** One applied entry, as observers see it (noop entries have no command and no result). */
export interface AppliedEntry {
  readonly index: LogIndex;
  readonly term: Term;
  readonly command: PartitionCommand | null;
  readonly result: ApplyResult | null;
}

export type AppliedListener = (entries: readonly AppliedEntry[]) => void;

/** One change of the applied lease: a first lease, an extension, a new lease, or one an installed snapshot brought. */
export interface LeaseTransition {
  readonly previous: Lease | null;
  readonly lease: Lease;
  readonly via: 'apply' | 'snapshot';
}

export type LeaseListener = (transition: LeaseTransition) => void;

/** Txs whose intents here an installed snapshot had already switched, with no record of them on this partition. */
export type SnapshotResolvedListener = (txIds: readonly TxId[]) => void;

/** The state an apply batch works on; copied back to the machine only once the storage step returned. */
interface Working {
  ts: HybridTimestamp;
  leaseRecord: LeaseRecord;
  leaseChanged: boolean;
  /** Lease commands applied in this batch, in log order (for the lease observers). */
  readonly leaseTransitions: LeaseTransition[];
  /** Volatile effects (tx state map), run in log order after the storage step. */
  readonly effects: (() => void)[];
}

const SNAPSHOT_MAGIC = 'basalt-replica-snapshot';
const SNAPSHOT_VERSION = 1;

export class PartitionStateMachine {
  readonly partitionId: PartitionId;
  readonly safeTime: AppliedSafeTime;
  private readonly engine: StorageEngine;
  private readonly mv: MvPartitionStorage;
  private readonly txState: TxStateStorage;
  private readonly txStateMap: TxStateMap;
  private readonly clock: HybridClock;
  private readonly proposals: ProposalTracker | undefined;
  private readonly txTimeoutMs: number;
  private readonly txStateRetentionMs: number;
  private readonly listeners = new Set<AppliedListener>();
  private readonly leaseListeners = new Set<LeaseListener>();
  private readonly snapshotListeners = new Set<SnapshotResolvedListener>();
  /**
   * Txs whose Update/UpdateAll (or UpdateBatch item) this machine applied and whose switch it has not applied: what a restore checks.
   * At most txStateMapEntriesMax (past it a tx is not remembered, and the node's sweep ends its entry after D).
   */
  private readonly intentTxs = new Set<TxId>();
  private index: LogIndex;
  private term: Term;
  private ts: HybridTimestamp;
  private leaseRecord: LeaseRecord;

  constructor(options: PartitionStateMachineOptions) {
    this.partitionId = options.partitionId;
    this.engine = options.engine;
    this.mv = options.engine.mvPartition(options.partitionId);
    this.txState = options.engine.txStatePartition(options.partitionId);
    this.txStateMap = options.txStateMap;
    this.clock = options.clock;
    this.proposals = options.proposals;
    this.txTimeoutMs = options.txTimeoutMs ?? LIMITS.txTimeoutMsDefault;
    this.txStateRetentionMs = options.txStateRetentionMs ?? LIMITS.txStateRetentionMsDefault;
    const loaded = this.load();
    this.index = loaded.index;
    this.term = loaded.term;
    this.ts = loaded.ts;
    this.leaseRecord = loaded.leaseRecord;
    this.safeTime = new AppliedSafeTime(this.ts, options.safeTimeWaitersMax);
    this.proposals?.appliedThrough(this.index, this.leaseRecord.lease);
  }

  // ---------------------------------------------------------------------------------------- reads

  appliedIndex(): LogIndex {
    return this.index;
  }

  /** Term of the last applied entry (a leader proposes a lease only after applying an entry of its own term). */
  appliedTerm(): Term {
    return this.term;
  }

  /** Effective timestamp of the last applied command (0 before any). */
  lastAppliedTs(): HybridTimestamp {
    return this.ts;
  }

  /** The applied lease: the only one anybody may act on (rule 3). */
  currentLease(): Lease | null {
    return this.leaseRecord.lease;
  }

  /** The applied lease and the last data sequence number applied under it. */
  leaseState(): LeaseRecord {
    return this.leaseRecord;
  }

  /** Adds an observer of every applied batch (after its effects ran); returns its unsubscribe function. */
  onApplied(listener: AppliedListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Adds an observer of every change of the applied lease (after it is visible); returns its unsubscribe function. */
  onLeaseChange(listener: LeaseListener): () => void {
    this.leaseListeners.add(listener);
    return () => this.leaseListeners.delete(listener);
  }

  /** Adds an observer of txs an installed snapshot resolved here (see the module header); returns its unsubscribe. */
  onSnapshotResolved(listener: SnapshotResolvedListener): () => void {
    this.snapshotListeners.add(listener);
    return () => this.snapshotListeners.delete(listener);
  }

  // ---------------------------------------------------------------------------------------- apply

  /** Applies committed entries in log order (entries at or below the applied index are skipped). */
  apply(entries: readonly Entry[]): void {
    this.stage(entries)?.();
  }

  /**
   * The storage half of `apply`: writes the entries' changes in one `runConsistently` step, which joins the caller's
   * if it runs inside one (the node then applies several groups' entries in one storage transaction), and returns
   * the volatile half, to run once that transaction committed and before anything else is staged here. Undefined
   * when every entry was applied already. A throw leaves nothing changed here: the volatile state is untouched until
   * the returned function runs, and an aborted transaction undoes the writes.
   */
  stage(entries: readonly Entry[]): (() => void) | undefined {
    const fresh = entries.filter((e) => e.index > this.index);
    const last = fresh.at(-1);
    if (last === undefined) return undefined;
    fresh.forEach((e, i) => {
      assert(e.index === this.index + 1 + i, `partition ${this.partitionId}: applied entries must be contiguous`);
    });
    // Decode everything first: a malformed entry fails the group before any effect.
    // Only data entries are commands: a noop, or a Raft configuration change, only advances the applied index.
    const commands = fresh.map((e) => (e.kind === 'data' ? decodeCommand(e.data) : null));
    const work: Working = {
      ts: this.ts,
      leaseRecord: this.leaseRecord,
      leaseChanged: false,
      leaseTransitions: [],
      effects: [],
    };
    const results = this.engine.runConsistently(() => {
      const out = commands.map((command) => (command === null ? null : this.applyCommand(command, work)));
      this.mv.setLastApplied(last.index, last.term, work.ts);
      this.txState.setLastApplied(last.index, last.term, work.ts);
      if (work.leaseChanged) this.mv.setMeta(LEASE_META_NAME, encodeLeaseRecord(work.leaseRecord));
      return out;
    });
    return () => this.applied(fresh, commands, results, work);
  }

  /** The volatile half of an apply, once its step committed and the applied state is visible to reads. */
  private applied(
    fresh: readonly Entry[],
    commands: readonly (PartitionCommand | null)[],
    results: readonly (ApplyResult | null)[],
    work: Working,
  ): void {
    const last = fresh.at(-1)!;
    const advanced = work.ts > this.ts;
    this.index = last.index;
    this.term = last.term;
    this.ts = work.ts;
    this.leaseRecord = work.leaseRecord;
    if (advanced) this.clock.update(work.ts);
    for (const effect of work.effects) effect();
    this.safeTime.advance(work.ts);
    const applied: AppliedEntry[] = fresh.map((e, i) => ({
      index: e.index,
      term: e.term,
      command: commands[i] ?? null,
      result: results[i] ?? null,
    }));
    this.deliverResults(applied);
    this.proposals?.appliedThrough(this.index, this.leaseRecord.lease);
    this.notifyLease(work.leaseTransitions);
    for (const listener of this.listeners) listener(applied);
  }

  private notifyLease(transitions: readonly LeaseTransition[]): void {
    for (const transition of transitions) {
      for (const listener of this.leaseListeners) listener(transition);
    }
  }

  private deliverResults(applied: readonly AppliedEntry[]): void {
    const tracker = this.proposals;
    if (tracker === undefined) return;
    for (const { command, result } of applied) {
      if (command !== null && result !== null && tracker.owns(command.proposalId)) {
        tracker.settleApplied(command.proposalId, result);
      }
    }
  }

  private applyCommand(command: PartitionCommand, work: Working): ApplyResult {
    // Rule 9: the effective timestamp, computed the same way on every replica.
    const e = maxTimestamp(command.ts, (work.ts + 1n) as HybridTimestamp);
    work.ts = e;
    switch (command.kind) {
      case 'Lease':
        return this.applyLease(command, e, work);
      case 'Update':
      case 'UpdateAll':
        return this.applyData(command, e, work);
      case 'UpdateBatch':
        // Each item as its own command would apply right after the previous one, all at this entry's e.
        return {
          kind: 'UPDATED_BATCH',
          appliedTs: e,
          items: command.items.map((item) => this.applyData(itemCommand(command, item), e, work)),
        };
      case 'FinishTx':
        return this.applyFinish(command, e, work);
      case 'WriteIntentSwitch':
        return { kind: 'SWITCHED', appliedTs: e, rows: this.applySwitch(command, work) };
      case 'WriteIntentSwitchAll': {
        let rows = 0;
        for (const one of command.switches) rows += this.applySwitch(one, work);
        return { kind: 'SWITCHED', appliedTs: e, rows };
      }
      case 'SafeTimeSync':
        return { kind: 'SAFE_TIME', appliedTs: e };
      case 'TxCleanupCompleted':
        return this.applyCleanupCompleted(command, e, work);
      case 'VacuumTxStates':
        return this.applyVacuum(command, e);
      default:
        return unreachable(command, 'unknown partition command');
    }
  }

  /** Rule 3: a compare-and-set against the lease current at this log position. */
  private applyLease(command: LeaseCommand, e: HybridTimestamp, work: Working): ApplyResult {
    const current = work.leaseRecord.lease;
    const decision = decideLease(current, command.lease, command.replaces);
    if (decision.kind === 'reject') return { kind: 'LEASE_REJECTED', appliedTs: e, reason: decision.reason, current };
    // An extension keeps the token, so the data sequence continues; a new lease starts a new sequence.
    const lastSeq = decision.change === 'extension' ? work.leaseRecord.lastSeq : 0;
    work.leaseRecord = { lease: decision.lease, lastSeq };
    work.leaseChanged = true;
    work.leaseTransitions.push({ previous: current, lease: decision.lease, via: 'apply' });
    return { kind: 'LEASE_APPLIED', appliedTs: e, change: decision.change, lease: decision.lease };
  }

  /** Rule 4: applies only under the lease current here, within it, in sequence; else a deterministic no-op. */
  private applyData(command: DataCommand, e: HybridTimestamp, work: Working): DataResult {
    const { lease, lastSeq } = work.leaseRecord;
    const miss = dataMiss(command, e, lease, lastSeq);
    if (miss !== undefined) return { kind: 'PRIMARY_MISS', appliedTs: e, reason: miss, current: lease };
    work.leaseRecord = { lease, lastSeq: command.seq };
    work.leaseChanged = true;
    const writes = writesOf(command);
    // Several writes are checked first, so that a conflict on any of them leaves all undone; a single write's own
    // storage call makes the same check (another tx's intent; any intent for a one-phase write) without reading twice.
    if (writes.length > 1) {
      for (const w of writes) {
        const intentTxId = this.blockingIntent(w.key, command);
        if (intentTxId !== undefined) return { kind: 'WRITE_INTENT_CONFLICT', appliedTs: e, key: w.key, intentTxId };
      }
    }
    for (const w of writes) {
      const rowId = this.mv.ensureRowId(w.key);
      const value = w.kind === 'put' ? w.value : TOMBSTONE;
      const expiry = w.kind === 'put' ? w.expiry : undefined;
      const written = command.full
        ? this.mv.addWriteCommitted(rowId, value, e, expiry)
        : this.mv.addWrite(rowId, value, command.txId, command.commitPartitionId, expiry);
      if (written.status !== 'SUCCESS' && writes.length === 1) {
        return { kind: 'WRITE_INTENT_CONFLICT', appliedTs: e, key: w.key, intentTxId: written.intentTxId };
      }
      assert(
        written.status === 'SUCCESS',
        `write of ${command.kind} refused after the intent check: ${written.status}`,
      );
    }
    if (!command.full) {
      const { txId, coordinatorId } = command;
      work.effects.push(() => {
        if (this.intentTxs.size < LIMITS.txStateMapEntriesMax) this.intentTxs.add(txId);
        this.txStateMap.update(txId, { state: 'PENDING', coordinatorId, reason: 'update-applied' });
      });
    }
    return { kind: 'UPDATED', appliedTs: e, full: command.full, rows: writes.length };
  }

  /** The tx whose intent on `key` stops this write: another tx's intent, or any intent for a one-phase write. */
  private blockingIntent(key: string, command: DataCommand): TxId | undefined {
    const rowId = this.mv.rowIdOf(key);
    if (rowId === undefined) return undefined;
    const read = this.mv.readLatest(rowId);
    if (read.kind !== 'intent') return undefined;
    return command.full || read.txId !== command.txId ? read.txId : undefined;
  }

  /**
   * The durable finish (rule 14): compare-and-set, map set from the stored outcome; rule 15's horizon. A parallel
   * commit stores a committing record instead (`committing`), and only a settled finish replaces it with an outcome.
   */
  private applyFinish(command: FinishTxCommand, e: HybridTimestamp, work: Working): ApplyResult {
    const { txId } = command;
    const existing = this.txState.get(txId);
    const staged = existing === undefined ? this.txState.committing(txId) : undefined;
    if (staged !== undefined) {
      // Nobody takes a committing tx for aborted (or committed) without having checked its in-flight writes.
      if (command.settled !== true) {
        return { kind: 'COMMITTING', appliedTs: e, commitTs: staged.commitTs, stored: false };
      }
      const meta: TxMeta = {
        state: command.commit ? 'COMMITTED' : 'ABORTED',
        commitTs: command.commit ? staged.commitTs : undefined,
        enlistedPartitions: staged.enlistedPartitions,
      };
      return this.storeOutcome(command, meta, e, work, undefined);
    }
    if (existing === undefined && txDeadline(txId, this.txTimeoutMs) <= this.txState.vacuumHorizon()) {
      return { kind: 'TX_OUTCOME_UNKNOWN', appliedTs: e };
    }
    // A commit carrying writes decides here, at e, whether it can commit (commands.ts CarriedWrites).
    const carried = existing === undefined ? command.carried : undefined;
    const refused = carried === undefined ? undefined : this.carriedRefusal(command, carried, e, work);
    const commit = command.commit && refused === undefined;
    if (existing === undefined && commit && command.committing !== undefined) {
      return this.applyCommitting(command, command.committing.inflight, carried, e, work);
    }
    const meta: TxMeta = {
      state: commit ? 'COMMITTED' : 'ABORTED',
      commitTs: !commit ? undefined : carried !== undefined ? e : (command.commitTs ?? undefined),
      enlistedPartitions: command.enlistedPartitions,
    };
    if (commit && carried !== undefined) {
      for (const w of carried.writes) {
        const written = this.mv.addWriteCommitted(
          this.mv.ensureRowId(w.key),
          w.kind === 'put' ? w.value : TOMBSTONE,
          e,
        );
        assert(
          written.status === 'SUCCESS',
          `carried write of ${txId} refused after the intent check: ${written.status}`,
        );
      }
    }
    return this.storeOutcome(command, meta, e, work, refused);
  }

  /**
   * A parallel commit's record: commitTs is e when writes are carried (they become intents here, switched with the
   * outcome), else the command's. The coordinator's map keeps FINISHING; nothing here goes final.
   */
  private applyCommitting(
    command: FinishTxCommand,
    inflight: readonly InflightWrites[],
    carried: CarriedWrites | undefined,
    e: HybridTimestamp,
    work: Working,
  ): ApplyResult {
    const { txId } = command;
    const commitTs = carried !== undefined ? e : command.commitTs;
    assert(commitTs !== null, 'a committing finish carries its commitTs');
    if (carried !== undefined) {
      for (const w of carried.writes) {
        const value = w.kind === 'put' ? w.value : TOMBSTONE;
        const written = this.mv.addWrite(this.mv.ensureRowId(w.key), value, txId, this.partitionId);
        assert(
          written.status === 'SUCCESS',
          `carried write of ${txId} refused after the intent check: ${written.status}`,
        );
      }
      work.effects.push(() => {
        if (this.intentTxs.size < LIMITS.txStateMapEntriesMax) this.intentTxs.add(txId);
      });
    }
    this.txState.putCommitting(txId, { commitTs, enlistedPartitions: command.enlistedPartitions, inflight });
    return { kind: 'COMMITTING', appliedTs: e, commitTs, stored: true };
  }

  /** Stores `meta` (the first outcome wins), the map goes final, the intents here switch when asked. */
  private storeOutcome(
    command: FinishTxCommand,
    meta: TxMeta,
    e: HybridTimestamp,
    work: Working,
    refused: CarriedRefusal | undefined,
  ): ApplyResult {
    const { txId } = command;
    const cas = this.txState.compareAndSet(txId, null, meta);
    const { state, commitTs } = cas.stored;
    const partitionId = this.partitionId;
    work.effects.push(() => {
      this.txStateMap.update(txId, {
        state,
        commitTimestamp: commitTs,
        commitPartitionId: partitionId,
        reason: 'finish-applied',
        retainUntilCleanup: true,
      });
    });
    // The stored outcome (the first one wins), never the command's: as the cleanup that follows it would.
    if (command.switchIntents === true) {
      this.applySwitch({ txId, commit: state === 'COMMITTED', commitTs: commitTs ?? null }, work);
    }
    return {
      kind: 'FINISHED',
      appliedTs: e,
      outcome: { state, commitTs },
      stored: cas.status === 'SUCCESS',
      mismatch: state !== meta.state || commitTs !== meta.commitTs,
      ...(refused !== undefined && { refused }),
    };
  }

  /** Why a commit carrying writes cannot commit at e (it then stores ABORTED), or undefined when it can. */
  private carriedRefusal(
    command: FinishTxCommand,
    carried: CarriedWrites,
    e: HybridTimestamp,
    work: Working,
  ): CarriedRefusal | undefined {
    const { lease } = work.leaseRecord;
    if (lease === null || !tokenNames(carried.token, lease) || e >= lease.expiration) return 'lease-changed';
    if (e >= carried.bound || (command.commitTs !== null && e < command.commitTs)) return 'commit-bound';
    for (const w of carried.writes) {
      const rowId = this.mv.rowIdOf(w.key);
      if (rowId !== undefined && this.mv.readLatest(rowId).kind === 'intent') return 'write-intent';
    }
    return undefined;
  }

  /** Cleanup: every intent of the tx committed at commitTs or aborted; the map goes final. Returns the rows switched. */
  private applySwitch(command: IntentSwitch, work: Working): number {
    const { txId, commit, commitTs } = command;
    const rows = this.mv.rowsWrittenBy(txId);
    for (const rowId of rows) {
      const status = commitTs !== null ? this.mv.commitWrite(rowId, commitTs, txId) : this.mv.abortWrite(rowId, txId);
      assert(status.status === 'SUCCESS', `write-intent switch of ${txId} found ${status.status}`);
    }
    work.effects.push(() => {
      this.intentTxs.delete(txId);
      this.txStateMap.update(txId, {
        state: commit ? 'COMMITTED' : 'ABORTED',
        commitTimestamp: commitTs ?? undefined,
        reason: 'cleanup-applied',
      });
    });
    return rows.length;
  }

  private applyCleanupCompleted(command: TxCleanupCompletedCommand, e: HybridTimestamp, work: Working): ApplyResult {
    let marked = 0;
    for (const txId of command.txIds) {
      if (this.txState.markCleanupCompleted(txId).status !== 'SUCCESS') continue;
      marked++;
      work.effects.push(() => this.txStateMap.markCleanupCompleted(txId));
    }
    return { kind: 'CLEANUP_MARKED', appliedTs: e, marked };
  }

  /**
   * Rule 15: removes records whose cleanup completed and whose deadline D < e − maxClockSkew − retention, and raises
   * the persisted vacuum horizon to the largest removed D. `e` stands for "now" so that every replica decides alike.
   */
  private applyVacuum(command: VacuumTxStatesCommand, e: HybridTimestamp): ApplyResult {
    const limit = addMs(e, -(this.clock.maxClockSkewMs + this.txStateRetentionMs));
    let horizon = this.txState.vacuumHorizon();
    const removed: TxId[] = [];
    for (const txId of command.txIds) {
      const record = this.txState.get(txId);
      const deadline = txDeadline(txId, this.txTimeoutMs);
      if (record === undefined || !record.cleanupCompleted || deadline >= limit) continue;
      this.txState.remove(txId);
      removed.push(txId);
      horizon = maxTimestamp(horizon, deadline);
    }
    this.txState.setVacuumHorizon(horizon);
    return { kind: 'VACUUMED', appliedTs: e, removed, horizon: this.txState.vacuumHorizon() };
  }

  // ---------------------------------------------------------------------------------------- snapshots

  /** The whole partition (both storages, lease record and applied position included) at the applied index. */
  snapshot(): Uint8Array {
    // Both iterations run to the end synchronously, so no apply can slip between them.
    return encode([SNAPSHOT_MAGIC, SNAPSHOT_VERSION, [...this.mv.snapshot()], [...this.txState.snapshot()]]);
  }

  /** Replaces the partition's whole state with a snapshot received from the leader, atomically. */
  restore(snapshot: Snapshot): void {
    const { mvChunks, txChunks } = decodeSnapshot(snapshot.data);
    const previous = this.leaseRecord.lease;
    this.engine.runConsistently(() => {
      this.mv.restore(mvChunks);
      this.txState.restore(txChunks);
    });
    const loaded = this.load();
    assert(loaded.index === snapshot.index, `snapshot data at ${loaded.index} does not match its index`);
    this.index = loaded.index;
    this.term = loaded.term;
    this.ts = loaded.ts;
    this.leaseRecord = loaded.leaseRecord;
    this.clock.update(loaded.ts);
    this.safeTime.advance(loaded.ts);
    this.proposals?.appliedThrough(this.index, this.leaseRecord.lease);
    const lease = loaded.leaseRecord.lease;
    if (lease !== null && !sameLease(previous, lease)) this.notifyLease([{ previous, lease, via: 'snapshot' }]);
    this.settleSnapshotResolved();
  }

  /** After a restore: txs whose intents the snapshot no longer holds are final (see the module header). */
  private settleSnapshotResolved(): void {
    const unknown: TxId[] = [];
    for (const txId of [...this.intentTxs]) {
      if (this.mv.rowsWrittenBy(txId).length > 0) continue;
      this.intentTxs.delete(txId);
      const record = this.txState.get(txId);
      if (record === undefined) {
        unknown.push(txId);
        continue;
      }
      this.txStateMap.update(txId, {
        state: record.state,
        commitTimestamp: record.commitTs,
        commitPartitionId: this.partitionId,
        reason: 'snapshot-restored',
        retainUntilCleanup: true,
      });
      if (record.cleanupCompleted) this.txStateMap.markCleanupCompleted(txId);
    }
    if (unknown.length === 0) return;
    for (const listener of [...this.snapshotListeners]) listener(unknown);
  }

  private load(): { index: LogIndex; term: Term; ts: HybridTimestamp; leaseRecord: LeaseRecord } {
    const { index, term } = this.mv.lastApplied();
    const ts = this.mv.lastAppliedTs();
    const tx = this.txState.lastApplied();
    assert(
      tx.index === index && this.txState.lastAppliedTs() === ts,
      `partition ${this.partitionId}: MVCC and tx state storage disagree on the applied position`,
    );
    const bytes = this.mv.getMeta(LEASE_META_NAME);
    return { index, term, ts, leaseRecord: bytes === undefined ? NO_LEASE : decodeLeaseRecord(bytes) };
  }
}

function sameLease(a: Lease | null, b: Lease): boolean {
  return a !== null && sameToken(tokenOf(a), tokenOf(b)) && a.expiration === b.expiration;
}

function dataMiss(
  command: DataCommand,
  e: HybridTimestamp,
  lease: Lease | null,
  lastSeq: number,
): PrimaryMissReason | undefined {
  if (lease === null || !tokenNames(command.token, lease)) return 'token-not-current';
  if (e >= lease.expiration) return 'lease-expired';
  if (command.seq <= lastSeq) return 'stale-sequence';
  // A tx write applies at its proposal timestamp or not at all: its coordinator took commitTs above that timestamp,
  // and a parallel commit's check of the write (committing-settle.ts) sees only that the intent is there.
  if (!command.full && e !== command.ts) return 'timestamp-moved';
  return undefined;
}

// ---------------------------------------------------------------------------------------- encodings

function encodeLeaseRecord(record: LeaseRecord): Uint8Array {
  return encode({ lease: record.lease, lastSeq: record.lastSeq });
}

function corrupted(what: string): BasaltError {
  return new BasaltError('STORAGE_CORRUPTED', `malformed replica ${what}`);
}

function decodeLeaseRecord(bytes: Uint8Array): LeaseRecord {
  const value = decode(bytes) as { lease?: unknown; lastSeq?: unknown } | null;
  if (typeof value !== 'object' || value === null) throw corrupted('lease record');
  const { lease, lastSeq } = value;
  if (lease !== null && leaseProblem(lease) !== undefined) throw corrupted('lease');
  if (typeof lastSeq !== 'number' || !Number.isSafeInteger(lastSeq) || lastSeq < 0) throw corrupted('lease sequence');
  return { lease: lease as Lease | null, lastSeq };
}

function decodeSnapshot(data: Uint8Array): { mvChunks: Uint8Array[]; txChunks: Uint8Array[] } {
  const fields = decode(data);
  if (!Array.isArray(fields) || fields.length !== 4 || fields[0] !== SNAPSHOT_MAGIC) throw corrupted('snapshot');
  if (fields[1] !== SNAPSHOT_VERSION) throw corrupted(`snapshot version ${String(fields[1])}`);
  const [, , mvChunks, txChunks] = fields as [unknown, unknown, unknown, unknown];
  const isChunks = (v: unknown): v is Uint8Array[] => Array.isArray(v) && v.every((c) => c instanceof Uint8Array);
  if (!isChunks(mvChunks) || !isChunks(txChunks)) throw corrupted('snapshot chunks');
  return { mvChunks, txChunks };
}
