/**
 * The volatile tx state map (seed 000; ignite3-protocol.md §4): `txId → { state, coordinatorId, commitTimestamp,
 * commitPartitionId }` plus bookkeeping. One map per node, shared by every role the node plays (coordinator, commit
 * partition replica, enlisted replica); it is lost when the node stops.
 *
 * Invariants:
 * - An update is applied only if TX_TRANSITIONS allows old state → new state; otherwise the old entry is kept and the
 *   update reports `ignored`. So a late replicated update can never turn FINISHING or a final state back into PENDING.
 * - Fields only go from empty to set (merge rule): an update without a field keeps the stored one, and an update that
 *   names a different value for a field already set keeps the stored value and reports the field in `keptFields`.
 *   In particular the commitTs stored with FINISHING is never changed (rule 13).
 * - A COMMITTED entry always carries its commitTs; an update names a commitTs only with FINISHING or COMMITTED (an
 *   ABORTED entry may still hold the commitTs of the commit attempt its FINISHING chose).
 * - Each update point moves the entry to the states it stands for only (`REASON_TARGETS`: a replica touch to PENDING,
 *   a finish or cleanup to a final state, a gone coordinator to ABANDONED, ...). A final state never changes, a set
 *   field never changes, and the bookkeeping stamps are set once; `store` checks all of this on every write.
 * - Vacuum removes only final entries, and only once their retention period has passed since `vacuumFrom`: the moment
 *   cleanup completed for entries marked `retainUntilCleanup` (coordinator, commit partition), else the moment the
 *   entry became final here. Non-final entries are never vacuumed; the only other removal is `remove`: a coordinator
 *   dropping its own entry of a tx that left no intent anywhere (ignite3-protocol.md §4), and the node's sweep
 *   dropping a non-final entry of a tx long past its deadline that the node holds nothing of (`nonFinal` lists them
 *   in bounded batches). So every entry ends final and is vacuumed, or is removed.
 * - The map holds at most `entriesMax` entries. At the bound a *new* entry is refused (`refused`, code OVERLOADED);
 *   live state is never evicted to make room, and existing entries keep updating. The caller turns a refusal into
 *   an error (begin fails, a touching request is rejected) or, for a cached resolution, simply skips the cache.
 *
 * Readers that need the final outcome of a FINISHING tx register with `whenFinal`; their callbacks run synchronously
 * inside the update that makes the entry final, after the map holds the final entry. The async layer wraps this in a
 * promise with a timeout and cancels on expiry. Observers see every update (applied, ignored or refused) with its
 * reason label, so tests and the simulator can check that each map change happens at exactly the seed's points.
 */
import { assert } from '../../core/assert.js';
import type { HybridTimestamp, NodeId, PartitionId, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import type { Clock } from '../../env/clock.js';
import { type FinalTxState, isFinal, isLegalTransition, isTxState, type TxState } from './tx-state.js';

/** Where an update comes from: the seed's update points (ignite3-protocol.md §4 table) and recovery. */
export type TxStateUpdateReason =
  /** Coordinator: RW begin (absent → PENDING). */
  | 'coordinator-begin'
  /** Enlisted primary (commit partition included): an RW request of the tx arrived (→ PENDING). */
  | 'replica-touch'
  /** Every replica of a group: an Update/UpdateAll command of the tx was applied (→ PENDING). */
  | 'update-applied'
  /** Coordinator or recovery node: the finish compare-and-set to FINISHING (see beginFinish). */
  | 'finish-started'
  /** Every replica of the commit partition: FinishTxCommand applied, from the stored outcome (→ final). */
  | 'finish-applied'
  /** Commit partition primary: the finish command returned (→ final). */
  | 'finish-marker'
  /** Coordinator: the finish response arrived (FINISHING → final). */
  | 'finish-response'
  /** Enlisted primary: a cleanup (write-intent switch) request arrived (→ final). */
  | 'cleanup-request'
  /** Every replica of a group: the cleanup (write-intent switch) command was applied (→ final). */
  | 'cleanup-applied'
  /** A resolving replica caches a true final outcome (rule 11). */
  | 'resolution'
  /** The tx's coordinator is gone (rule 17): → ABANDONED where an entry exists. */
  | 'coordinator-gone'
  /** Coordinator: a one-phase tx finished (PENDING → final), or its entry was dropped (outcome unknown). */
  | 'one-phase'
  /** Coordinator: an RW tx that wrote nothing finished with unlock-only cleanup (→ final, then the entry is removed). */
  | 'unlock-only'
  /**
   * Removal by the node's sweep (tx-sweep.ts): a non-final entry long past its tx's deadline D (+ max clock skew +
   * grace) while this node holds nothing of the tx (no lock, intent or operation; not its coordinator). The entry is
   * a cache: the coordinator id is in the tx id, the durable state in storage.
   */
  | 'sweep'
  /**
   * A replica installed a snapshot in which the tx's intents on the partition were already switched (it never saw
   * the cleanup command): the entry goes final from the partition's own durable record when it is the tx's commit
   * partition, else it is removed if the node holds nothing else of the tx (the outcome is not known here).
   */
  | 'snapshot-restored';

export type TxStateField = 'coordinatorId' | 'commitTimestamp' | 'commitPartitionId';

export interface TxStateEntry {
  readonly state: TxState;
  readonly coordinatorId: NodeId | undefined;
  readonly commitTimestamp: HybridTimestamp | undefined;
  readonly commitPartitionId: PartitionId | undefined;
  /** Monotonic ms at which the entry became final on this node. */
  readonly finalAtMs: number | undefined;
  /** Vacuum waits for markCleanupCompleted (set once, never cleared). */
  readonly retainUntilCleanup: boolean;
  /** Monotonic ms at which cleanup completed on every enlisted partition (as reported by the caller). */
  readonly cleanupCompletedAtMs: number | undefined;
}

/** The harness view (DESIGN §4 `node.txState(txId)`). commitTimestamp is shown for FINISHING and COMMITTED only. */
export interface TxStateView {
  readonly state: TxState;
  readonly coordinatorId: NodeId | undefined;
  readonly commitTimestamp?: HybridTimestamp;
}

export interface TxStateUpdate {
  readonly state: TxState;
  readonly reason: TxStateUpdateReason;
  readonly coordinatorId?: NodeId | undefined;
  readonly commitTimestamp?: HybridTimestamp | undefined;
  readonly commitPartitionId?: PartitionId | undefined;
  /** Keep the final entry until markCleanupCompleted (+ retention): coordinator and commit partition entries. */
  readonly retainUntilCleanup?: boolean;
}

export type TxStateUpdateResult =
  | {
      readonly kind: 'applied';
      readonly entry: TxStateEntry;
      readonly previous: TxStateEntry | undefined;
      /** Fields the update named with a value different from the one already stored (the stored one was kept). */
      readonly keptFields: readonly TxStateField[];
    }
  /** The transition was illegal: `entry` is the unchanged stored entry. */
  | { readonly kind: 'ignored'; readonly entry: TxStateEntry }
  /** A new entry was refused because the map is full. */
  | { readonly kind: 'refused'; readonly code: 'OVERLOADED' };

export type BeginFinishResult =
  /** This call installed FINISHING: the caller owns the finish. */
  | { readonly kind: 'began'; readonly entry: TxStateEntry }
  /** The tx is already FINISHING or final: the earlier decision (and its commitTs) stands. */
  | { readonly kind: 'lost'; readonly entry: TxStateEntry }
  | { readonly kind: 'refused'; readonly code: 'OVERLOADED' };

export type FinalWait =
  | { readonly kind: 'final'; readonly entry: TxStateEntry }
  /** Registered; `cancel()` unregisters (true if it was still registered). */
  | { readonly kind: 'waiting'; readonly cancel: () => boolean }
  | { readonly kind: 'refused'; readonly code: 'OVERLOADED' };

export type TxStateMapEvent =
  | {
      readonly kind: 'update';
      readonly txId: TxId;
      readonly from: TxState | undefined;
      readonly to: TxState;
      readonly outcome: 'applied' | 'ignored' | 'refused';
      readonly reason: TxStateUpdateReason;
    }
  | { readonly kind: 'vacuum'; readonly txId: TxId; readonly state: FinalTxState }
  | { readonly kind: 'remove'; readonly txId: TxId; readonly state: TxState; readonly reason: TxStateUpdateReason };

export type TxStateMapObserver = (event: TxStateMapEvent) => void;
export type FinalListener = (entry: TxStateEntry) => void;

export interface TxStateMapOptions {
  /** Stamps finalAtMs / cleanupCompletedAtMs with monotonicMs(); vacuum's nowMs must come from the same clock. */
  readonly clock: Pick<Clock, 'monotonicMs'>;
  readonly entriesMax?: number;
  readonly finalWaitersMax?: number;
}

const FIELDS: readonly TxStateField[] = ['coordinatorId', 'commitTimestamp', 'commitPartitionId'];

const FINAL: readonly TxState[] = ['COMMITTED', 'ABORTED'];

/**
 * The states each update point may move an entry to (ignite3-protocol.md §4 table): an update naming another is a
 * bug in its caller, never a late update (those are legal targets that the transition table ignores).
 */
export const REASON_TARGETS: Readonly<Record<TxStateUpdateReason, readonly TxState[]>> = Object.freeze({
  'coordinator-begin': ['PENDING'],
  'replica-touch': ['PENDING'],
  'update-applied': ['PENDING'],
  'finish-started': ['FINISHING'],
  'finish-applied': FINAL,
  'finish-marker': FINAL,
  'finish-response': FINAL,
  'cleanup-request': FINAL,
  'cleanup-applied': FINAL,
  resolution: FINAL,
  'coordinator-gone': ['ABANDONED'],
  'one-phase': FINAL,
  'unlock-only': FINAL,
  // The sweep only removes entries.
  sweep: [],
  'snapshot-restored': FINAL,
});

export class TxStateMap {
  readonly entriesMax: number;
  readonly finalWaitersMax: number;
  private readonly clock: Pick<Clock, 'monotonicMs'>;
  private readonly entries = new Map<TxId, TxStateEntry>();
  private readonly finalWaiters = new Map<TxId, Set<FinalListener>>();
  private finalWaiterCount = 0;
  private readonly observers = new Set<TxStateMapObserver>();
  /**
   * Final entries in order of the moment their retention starts (monotonic stamps, appended in time order). An item
   * whose entry has since gained a different start (or lost it to retainUntilCleanup) is stale and skipped. Kept as
   * two parallel arrays (ids, and starts as unboxed doubles) rather than one object per item: a map of a million
   * entries would otherwise spend some 50 bytes per entry on its queue.
   */
  private vacuumIds: TxId[] = [];
  private vacuumFromMs: number[] = [];
  /** Where `nonFinal` resumes. */
  private sweepCursor: MapIterator<[TxId, TxStateEntry]> | undefined;
  private vacuumHead = 0;

  constructor(options: TxStateMapOptions) {
    this.clock = options.clock;
    this.entriesMax = options.entriesMax ?? LIMITS.txStateMapEntriesMax;
    this.finalWaitersMax = options.finalWaitersMax ?? LIMITS.txFinalWaitersMax;
    assert(this.entriesMax > 0 && this.finalWaitersMax >= 0, 'tx state map limits must be positive');
  }

  get size(): number {
    return this.entries.size;
  }

  /** Number of registered whenFinal callbacks (all txs). */
  get waiterCount(): number {
    return this.finalWaiterCount;
  }

  /** Every tx with an entry (diagnostics and leftover checks), in insertion order. */
  txIds(): readonly TxId[] {
    return [...this.entries.keys()];
  }

  /** The full stored entry, with bookkeeping. */
  entry(txId: TxId): TxStateEntry | undefined {
    return this.entries.get(txId);
  }

  /** The harness view: `{ state, coordinatorId, commitTimestamp? }`, or undefined when this node has no entry. */
  get(txId: TxId): TxStateView | undefined {
    const e = this.entries.get(txId);
    if (e === undefined) return undefined;
    const showsCommitTs = e.commitTimestamp !== undefined && (e.state === 'COMMITTED' || e.state === 'FINISHING');
    return showsCommitTs
      ? { state: e.state, coordinatorId: e.coordinatorId, commitTimestamp: e.commitTimestamp }
      : { state: e.state, coordinatorId: e.coordinatorId };
  }

  /** Adds an observer of every update and vacuum removal; returns its unsubscribe function. */
  observe(observer: TxStateMapObserver): () => void {
    this.observers.add(observer);
    return () => this.observers.delete(observer);
  }

  /**
   * Applies `next` if the transition from the stored state is legal (merging fields: empty → set only); otherwise
   * keeps the stored entry. Observers are told either way; whenFinal callbacks run if the entry just became final.
   */
  update(txId: TxId, next: TxStateUpdate): TxStateUpdateResult {
    const previous = this.entries.get(txId);
    const result = this.decide(txId, previous, next);
    if (result.kind === 'applied') this.store(txId, previous, result.entry);
    this.emit({
      kind: 'update',
      txId,
      from: previous?.state,
      to: next.state,
      outcome: result.kind,
      reason: next.reason,
    });
    if (result.kind === 'applied' && isFinal(result.entry.state) && !isFinal(previous?.state)) {
      this.notifyFinal(txId, result.entry);
    }
    return result;
  }

  /**
   * Rule 13's compare-and-set: installs FINISHING (with the commitTs chosen for a commit, none for an abort) only
   * from absent, PENDING or ABANDONED. Commit, rollback, timeout and recovery all start here; whoever gets `began`
   * owns the finish, everyone else gets the stored entry and must follow its decision.
   */
  beginFinish(
    txId: TxId,
    options: { readonly commitTimestamp?: HybridTimestamp; readonly coordinatorId?: NodeId } = {},
  ): BeginFinishResult {
    const result = this.update(txId, {
      state: 'FINISHING',
      reason: 'finish-started',
      commitTimestamp: options.commitTimestamp,
      coordinatorId: options.coordinatorId,
      retainUntilCleanup: true,
    });
    switch (result.kind) {
      case 'applied':
        return { kind: 'began', entry: result.entry };
      case 'ignored':
        return { kind: 'lost', entry: result.entry };
      case 'refused':
        return result;
    }
  }

  /**
   * Calls `listener` once the entry of `txId` is final. If it is final already, nothing is registered and the entry is
   * returned (`final`); callbacks never run inside this call.
   */
  whenFinal(txId: TxId, listener: FinalListener): FinalWait {
    const e = this.entries.get(txId);
    if (e !== undefined && isFinal(e.state)) return { kind: 'final', entry: e };
    if (this.finalWaiterCount >= this.finalWaitersMax) return { kind: 'refused', code: 'OVERLOADED' };
    let set = this.finalWaiters.get(txId);
    if (set === undefined) {
      set = new Set();
      this.finalWaiters.set(txId, set);
    }
    // A fresh wrapper per registration, so one listener registered twice is two waiters.
    const waiter: FinalListener = (entry) => listener(entry);
    set.add(waiter);
    this.finalWaiterCount += 1;
    assert(this.finalWaiterCount <= this.finalWaitersMax, 'at most finalWaitersMax waiters');
    return { kind: 'waiting', cancel: () => this.cancelWaiter(txId, waiter) };
  }

  /**
   * Drops an entry at once, whatever its state: for the owner of an entry nobody can ask about, i.e. a coordinator
   * whose tx left no intent anywhere (an RW tx that wrote nothing, after its unlock-only cleanup; a one-phase write
   * whose outcome it cannot learn; ignite3-protocol.md §4: "RW tx with no writes finished: coordinator entry
   * removed"), and for the node's sweep (reasons `sweep`, `snapshot-restored`: a cached entry of a tx the node
   * holds nothing of). Waiters registered for the tx stay registered (their own timeouts end them).
   */
  remove(txId: TxId, reason: TxStateUpdateReason): boolean {
    const e = this.entries.get(txId);
    if (e === undefined) return false;
    // A queued vacuum item for it becomes stale: vacuum skips items whose entry is gone.
    this.entries.delete(txId);
    this.emit({ kind: 'remove', txId, state: e.state, reason });
    return true;
  }

  /**
   * Up to `max` entries that are not final, continuing where the previous call stopped; a call that reaches the end
   * stops there and the next starts over (a live Map iterator: entries added meanwhile are visited in this lap,
   * removed ones skipped).
   * Work is bounded by `max` entries examined, final ones included.
   */
  nonFinal(max: number): [TxId, TxStateEntry][] {
    assert(Number.isInteger(max) && max > 0, 'a sweep batch examines at least one entry');
    const out: [TxId, TxStateEntry][] = [];
    let examined = 0;
    while (examined < max) {
      this.sweepCursor ??= this.entries.entries();
      const next = this.sweepCursor.next();
      if (next.done === true) {
        // The lap is over: the next call starts a new one (so no call lists an entry twice).
        this.sweepCursor = undefined;
        break;
      }
      examined += 1;
      const [txId, entry] = next.value;
      if (!isFinal(entry.state)) out.push([txId, entry]);
    }
    return out;
  }

  /** Records that cleanup completed on every enlisted partition; starts the retention of a final entry. */
  markCleanupCompleted(txId: TxId): boolean {
    const e = this.entries.get(txId);
    if (e === undefined || !isFinal(e.state)) return false;
    if (e.cleanupCompletedAtMs !== undefined) return true;
    this.store(txId, e, { ...e, cleanupCompletedAtMs: this.clock.monotonicMs() });
    return true;
  }

  /**
   * Removes final entries whose retention has passed (`nowMs ≥ vacuumFrom + retentionMs`; nowMs from the map's clock's
   * monotonicMs). Non-final entries are never removed. Work is bounded by the queue of final entries.
   */
  vacuum(nowMs: number, retentionMs: number = LIMITS.txStateRetentionMsDefault): number {
    assert(retentionMs >= 0, 'retention must be >= 0');
    let removed = 0;
    while (this.vacuumHead < this.vacuumIds.length) {
      const txId = this.vacuumIds[this.vacuumHead];
      const fromMs = this.vacuumFromMs[this.vacuumHead];
      assert(txId !== undefined && fromMs !== undefined, 'vacuum queue index in range');
      if (fromMs + retentionMs > nowMs) break;
      this.vacuumHead += 1;
      const e = this.entries.get(txId);
      const from = e === undefined ? undefined : vacuumFrom(e);
      // A stale item (the entry's retention start moved later, or it now waits for cleanup) is dropped: a newer item
      // was queued when the start changed.
      if (e === undefined || from === undefined || from + retentionMs > nowMs) continue;
      assert(isFinal(e.state), 'only final entries are vacuumed');
      this.entries.delete(txId);
      removed += 1;
      this.emit({ kind: 'vacuum', txId, state: e.state });
    }
    this.compactVacuumQueue();
    return removed;
  }

  private decide(txId: TxId, previous: TxStateEntry | undefined, next: TxStateUpdate): TxStateUpdateResult {
    assert(isTxState(next.state), 'only stored states go into the map (rule 16: UNKNOWN never)', next.state);
    assert(
      REASON_TARGETS[next.reason].includes(next.state),
      'an update point sets its own states',
      next.reason,
      next.state,
    );
    assert(
      next.commitTimestamp === undefined || next.state === 'COMMITTED' || next.state === 'FINISHING',
      'a commitTs comes with FINISHING or COMMITTED',
      txId,
      next.state,
    );
    if (!isLegalTransition(previous?.state, next.state)) {
      assert(previous !== undefined, 'every stored state is reachable from absent');
      return { kind: 'ignored', entry: previous };
    }
    if (previous === undefined && this.entries.size >= this.entriesMax) return { kind: 'refused', code: 'OVERLOADED' };
    const keptFields = FIELDS.filter((f) => conflicts(previous?.[f], next[f]));
    const becameFinal = isFinal(next.state) && !isFinal(previous?.state);
    const entry: TxStateEntry = {
      state: next.state,
      coordinatorId: previous?.coordinatorId ?? next.coordinatorId,
      commitTimestamp: previous?.commitTimestamp ?? next.commitTimestamp,
      commitPartitionId: previous?.commitPartitionId ?? next.commitPartitionId,
      finalAtMs: becameFinal ? this.clock.monotonicMs() : previous?.finalAtMs,
      retainUntilCleanup: (previous?.retainUntilCleanup ?? false) || next.retainUntilCleanup === true,
      cleanupCompletedAtMs: previous?.cleanupCompletedAtMs,
    };
    return { kind: 'applied', entry, previous, keptFields };
  }

  /** Stores `entry`; when its retention start changes, queues it for vacuum. */
  private store(txId: TxId, previous: TxStateEntry | undefined, entry: TxStateEntry): void {
    checkTxStateEntry(txId, entry);
    if (previous !== undefined) checkTxStateSuccession(txId, previous, entry);
    this.entries.set(txId, entry);
    assert(this.entries.size <= this.entriesMax, 'the map holds at most entriesMax entries', this.entries.size);
    const from = vacuumFrom(entry);
    if (from !== undefined && (previous === undefined || vacuumFrom(previous) !== from)) this.enqueueVacuum(txId, from);
  }

  private notifyFinal(txId: TxId, entry: TxStateEntry): void {
    const set = this.finalWaiters.get(txId);
    if (set === undefined) return;
    this.finalWaiters.delete(txId);
    this.finalWaiterCount -= set.size;
    assert(this.finalWaiterCount >= 0, 'every notified waiter was counted');
    callAll([...set], entry);
  }

  private cancelWaiter(txId: TxId, waiter: FinalListener): boolean {
    const set = this.finalWaiters.get(txId);
    if (set === undefined || !set.delete(waiter)) return false;
    this.finalWaiterCount -= 1;
    if (set.size === 0) this.finalWaiters.delete(txId);
    return true;
  }

  private emit(event: TxStateMapEvent): void {
    callAll([...this.observers], event);
  }

  /**
   * Appends to the time-ordered queue. A start earlier than the last item (a final entry that gains
   * retainUntilCleanup after its cleanup was already stamped) is queued at the last item's time: vacuumed a little
   * later than due, never earlier.
   */
  private enqueueVacuum(txId: TxId, fromMs: number): void {
    const last = this.vacuumFromMs[this.vacuumFromMs.length - 1];
    this.vacuumIds.push(txId);
    this.vacuumFromMs.push(last === undefined ? fromMs : Math.max(fromMs, last));
  }

  private compactVacuumQueue(): void {
    if (this.vacuumHead > 1024 && this.vacuumHead * 2 > this.vacuumIds.length) {
      this.vacuumIds = this.vacuumIds.slice(this.vacuumHead);
      this.vacuumFromMs = this.vacuumFromMs.slice(this.vacuumHead);
      this.vacuumHead = 0;
    }
  }
}

/** What every stored entry satisfies (header): checked on every write. */
export function checkTxStateEntry(txId: TxId, e: TxStateEntry): void {
  assert(e.state !== 'COMMITTED' || e.commitTimestamp !== undefined, 'a COMMITTED entry carries its commitTs', txId);
  assert(isFinal(e.state) === (e.finalAtMs !== undefined), 'finalAtMs is stamped exactly on final entries', txId);
  assert(e.cleanupCompletedAtMs === undefined || isFinal(e.state), 'cleanup completes after the outcome', txId);
}

/** `next` replaces `prev`: a final state stays, set fields and stamps stay, retainUntilCleanup is never cleared. */
export function checkTxStateSuccession(txId: TxId, prev: TxStateEntry, next: TxStateEntry): void {
  assert(
    !isFinal(prev.state) || next.state === prev.state,
    'a final state never changes',
    txId,
    prev.state,
    next.state,
  );
  assert(
    (prev.coordinatorId === undefined || next.coordinatorId === prev.coordinatorId) &&
      (prev.commitTimestamp === undefined || next.commitTimestamp === prev.commitTimestamp) &&
      (prev.commitPartitionId === undefined || next.commitPartitionId === prev.commitPartitionId),
    'a set field is never changed (rule 13 for the commitTs)',
    txId,
  );
  assert(
    (prev.finalAtMs === undefined || next.finalAtMs === prev.finalAtMs) &&
      (prev.cleanupCompletedAtMs === undefined || next.cleanupCompletedAtMs === prev.cleanupCompletedAtMs) &&
      (!prev.retainUntilCleanup || next.retainUntilCleanup),
    'bookkeeping stamps are set once',
    txId,
  );
}

/** When an entry's retention starts, or undefined while it may not be vacuumed at all. */
function vacuumFrom(e: TxStateEntry): number | undefined {
  if (!isFinal(e.state)) return undefined;
  return e.retainUntilCleanup ? e.cleanupCompletedAtMs : e.finalAtMs;
}

function conflicts<T>(stored: T | undefined, incoming: T | undefined): boolean {
  return stored !== undefined && incoming !== undefined && stored !== incoming;
}

/** Calls every callback even if one throws (the map is consistent by then); rethrows the first error afterwards. */
function callAll<T>(callbacks: readonly ((value: T) => void)[], value: T): void {
  let failure: { error: unknown } | undefined;
  for (const callback of callbacks) {
    try {
      callback(value);
    } catch (error) {
      failure ??= { error };
    }
  }
  if (failure !== undefined) throw failure.error;
}
