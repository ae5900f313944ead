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
 * - Vacuum removes only final entries, and only once their retention period has passed since `retentionFromMs`: the
 *   moment cleanup completed for entries marked `retainUntilCleanup` (coordinator, commit partition), else the moment
 *   the entry became final here (for an entry that gains retainUntilCleanup after its cleanup was reported, the moment
 *   it gained it: later than either, never earlier). Non-final entries are never vacuumed; the only other removal is `remove`: a coordinator
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
import { type FinalTxState, isFinal, isLegalTransition, isTxState, TX_STATES, type TxState } from './tx-state.js';

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
  /**
   * An orphan's reporter (orphan detection, the tx sweep) caches the final outcome its TxRecoveryRequest was answered:
   * what the commit partition's compare-and-set stored (rule 11), so that it neither asks again nor sweeps the tx.
   */
  | 'recovery-answer'
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
  /** Vacuum waits for markCleanupCompleted (set once, never cleared). */
  readonly retainUntilCleanup: boolean;
  /** markCleanupCompleted was called: cleanup completed on every enlisted partition (set once, never cleared). */
  readonly cleanupCompleted: boolean;
  /**
   * Monotonic ms (whole, rounded up) from which the retention period of a final entry runs; undefined while the
   * entry may not be vacuumed at all (not final, or waiting for its cleanup).
   */
  readonly retentionFromMs: number | undefined;
  /**
   * FINISHING of a commit that carries its writes to its commit partition: `commitTimestamp` is only a lower bound,
   * and COMMITTED replaces it with the commitTs the commit partition stored (at or above it). It answers as any
   * FINISHING does: not visible at a readTs below the bound, waited for otherwise.
   */
  readonly commitTsLowerBound?: boolean;
}

/** The harness view (DESIGN §4 `node.txState(txId)`). commitTimestamp is shown for FINISHING and COMMITTED only. */
/** One node's entry for a transaction in its tx state map (docs/concepts/tx-state-map.md). */
export interface TxStateView {
  /** PENDING, FINISHING, ABANDONED, COMMITTED or ABORTED. */
  readonly state: TxState;
  /** The ephemeral id of the transaction's coordinator, when this node knows it. */
  readonly coordinatorId: NodeId | undefined;
  /** The commit timestamp, once chosen (FINISHING of a commit) or known (COMMITTED). */
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
  /** FINISHING only: commitTimestamp is a lower bound (TxStateEntry.commitTsLowerBound). */
  readonly commitTsLowerBound?: boolean;
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
  /** Stamps retentionFromMs with monotonicMs(); vacuum's nowMs must come from the same clock. */
  readonly clock: Pick<Clock, 'monotonicMs'>;
  readonly entriesMax?: number;
  readonly finalWaitersMax?: number;
}

const FIELDS: readonly TxStateField[] = ['coordinatorId', 'commitTimestamp', 'commitPartitionId'];

/** StoredEntry.code: the state's index in TX_STATES in the low bits, then the two flags. */
const STATE_BITS = 0b111;
const RETAIN_BIT = 0b1000;
const CLEANED_BIT = 0b10000;
const BOUND_BIT = 0b100000;

/**
 * How the map stores an entry: five fields (the state and both flags packed into one small integer), so that a map of
 * a million entries spends no more than it must on each (bench/memory.ts measures it).
 */
class StoredEntry implements TxStateEntry {
  constructor(
    private readonly code: number,
    readonly coordinatorId: NodeId | undefined,
    readonly commitTimestamp: HybridTimestamp | undefined,
    readonly commitPartitionId: PartitionId | undefined,
    readonly retentionFromMs: number | undefined,
  ) {}

  get state(): TxState {
    return TX_STATES[this.code & STATE_BITS]!;
  }

  get retainUntilCleanup(): boolean {
    return (this.code & RETAIN_BIT) !== 0;
  }

  get cleanupCompleted(): boolean {
    return (this.code & CLEANED_BIT) !== 0;
  }

  get commitTsLowerBound(): boolean {
    return (this.code & BOUND_BIT) !== 0;
  }
}

function storedEntry(
  e: Omit<TxStateEntry, 'retentionFromMs'> & { readonly retentionFromMs: number | undefined },
): StoredEntry {
  const code =
    TX_STATES.indexOf(e.state) |
    (e.retainUntilCleanup ? RETAIN_BIT : 0) |
    (e.cleanupCompleted ? CLEANED_BIT : 0) |
    (e.commitTsLowerBound === true && e.state === 'FINISHING' ? BOUND_BIT : 0);
  return new StoredEntry(code, e.coordinatorId, e.commitTimestamp, e.commitPartitionId, e.retentionFromMs);
}

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
  'recovery-answer': FINAL,
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
  /**
   * Entries split by vacuum: `live` holds those that may not be vacuumed yet (not final, or waiting for cleanup);
   * `retained` those whose retention runs, in the order it started (entries move there when it starts, and their
   * starts are stamped in time order), so the oldest are first and vacuum only ever looks at the front.
   */
  private readonly live = new Map<TxId, StoredEntry>();
  private readonly retained = new Map<TxId, StoredEntry>();
  private readonly finalWaiters = new Map<TxId, Set<FinalListener>>();
  private finalWaiterCount = 0;
  private readonly observers = new Set<TxStateMapObserver>();
  /** Where `nonFinal` resumes (over `live`). */
  private sweepCursor: MapIterator<[TxId, StoredEntry]> | undefined;
  /** Where `vacuum` resumes (over `retained`), and the first entry it found not yet due. */
  private vacuumCursor: MapIterator<TxId> | undefined;
  private vacuumNext: TxId | undefined;
  private vacuumNextFromMs: number | undefined;

  constructor(options: TxStateMapOptions) {
    this.clock = options.clock;
    this.entriesMax = options.entriesMax ?? LIMITS.txStateMapEntriesMax;
    this.finalWaitersMax = options.finalWaitersMax ?? LIMITS.txFinalWaitersMax;
    assert(this.entriesMax > 0 && this.finalWaitersMax >= 0, 'tx state map limits must be positive');
  }

  get size(): number {
    return this.live.size + this.retained.size;
  }

  /** Number of registered whenFinal callbacks (all txs). */
  get waiterCount(): number {
    return this.finalWaiterCount;
  }

  /** Every tx with an entry (diagnostics and leftover checks), in insertion order. */
  txIds(): readonly TxId[] {
    return [...this.live.keys(), ...this.retained.keys()];
  }

  /**
   * Every entry, live ones first (each part in insertion order), read lazily: a reader that stops after n entries
   * does work for n only (the console lists pages of the map). The map must not change while it is iterated.
   */
  *entries(): Generator<readonly [TxId, TxStateEntry], void, undefined> {
    yield* this.live;
    yield* this.retained;
  }

  /** The full stored entry, with bookkeeping. */
  entry(txId: TxId): TxStateEntry | undefined {
    return this.lookup(txId);
  }

  /** The harness view: `{ state, coordinatorId, commitTimestamp? }`, or undefined when this node has no entry. */
  get(txId: TxId): TxStateView | undefined {
    const e = this.lookup(txId);
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
    const previous = this.lookup(txId);
    const result = this.decide(txId, previous, next);
    if (result.kind === 'applied') this.store(txId, previous, result.entry as StoredEntry); // decide builds every applied entry as one
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
    options: {
      readonly commitTimestamp?: HybridTimestamp;
      readonly coordinatorId?: NodeId;
      /** The commitTs is a carried commit's lower bound (TxStateEntry.commitTsLowerBound). */
      readonly commitTsLowerBound?: boolean;
    } = {},
  ): BeginFinishResult {
    const result = this.update(txId, {
      state: 'FINISHING',
      reason: 'finish-started',
      commitTimestamp: options.commitTimestamp,
      coordinatorId: options.coordinatorId,
      retainUntilCleanup: true,
      ...(options.commitTsLowerBound === true && { commitTsLowerBound: true }),
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
    const e = this.lookup(txId);
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
    const e = this.lookup(txId);
    if (e === undefined) return false;
    if (!this.live.delete(txId)) this.retained.delete(txId);
    this.emit({ kind: 'remove', txId, state: e.state, reason });
    return true;
  }

  /**
   * Up to `max` entries that are not final, continuing where the previous call stopped; a call that reaches the end
   * stops there and the next starts over (a live Map iterator: entries added meanwhile are visited in this lap,
   * removed ones skipped). Entries whose retention runs are not examined: they are final.
   * Work is bounded by `max` entries examined, final ones waiting for cleanup included.
   */
  nonFinal(max: number): [TxId, TxStateEntry][] {
    assert(Number.isInteger(max) && max > 0, 'a sweep batch examines at least one entry');
    const out: [TxId, TxStateEntry][] = [];
    let examined = 0;
    while (examined < max) {
      this.sweepCursor ??= this.live.entries();
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
    const e = this.lookup(txId);
    if (e === undefined || !isFinal(e.state)) return false;
    if (e.cleanupCompleted) return true;
    const retentionFromMs = e.retainUntilCleanup ? this.stampMs() : e.retentionFromMs;
    this.store(txId, e, storedEntry({ ...fieldsOf(e), cleanupCompleted: true, retentionFromMs }));
    return true;
  }

  /**
   * Removes final entries whose retention has passed (`nowMs ≥ vacuumFrom + retentionMs`; nowMs from the map's clock's
   * monotonicMs). Non-final entries are never removed. Work is bounded by the entries removed, plus one: entries are
   * examined in the order their retention started, and the first one not yet due ends the call.
   */
  vacuum(nowMs: number, retentionMs: number = LIMITS.txStateRetentionMsDefault): number {
    assert(retentionMs >= 0, 'retention must be >= 0');
    let removed = 0;
    for (;;) {
      if (this.vacuumNext === undefined) {
        this.vacuumCursor ??= this.retained.keys();
        const next = this.vacuumCursor.next();
        if (next.done === true) {
          // A finished Map iterator never sees later additions: the next call starts over from the front.
          this.vacuumCursor = undefined;
          break;
        }
        this.vacuumNext = next.value;
        this.vacuumNextFromMs = this.retained.get(next.value)?.retentionFromMs;
      }
      const txId = this.vacuumNext;
      const e = this.retained.get(txId);
      // Gone meanwhile (removed, or back in `live` waiting for cleanup), or moved to the back with a later start (the
      // cursor meets it there again): nothing to do at this place.
      if (e === undefined || e.retentionFromMs !== this.vacuumNextFromMs) {
        this.vacuumNext = undefined;
        continue;
      }
      const from = e.retentionFromMs;
      assert(from !== undefined && isFinal(e.state), 'only final entries whose retention runs are retained');
      // Starts are in time order, so nothing after this one is due either.
      if (from + retentionMs > nowMs) break;
      this.vacuumNext = undefined;
      this.retained.delete(txId);
      removed += 1;
      this.emit({ kind: 'vacuum', txId, state: e.state });
    }
    return removed;
  }

  private lookup(txId: TxId): StoredEntry | undefined {
    return this.live.get(txId) ?? this.retained.get(txId);
  }

  /** A stamp for retentionFromMs: the map's clock in whole ms, rounded up (so retention never ends early). */
  private stampMs(): number {
    return Math.ceil(this.clock.monotonicMs());
  }

  private decide(txId: TxId, previous: StoredEntry | undefined, next: TxStateUpdate): TxStateUpdateResult {
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
    if (previous === undefined && this.size >= this.entriesMax) return { kind: 'refused', code: 'OVERLOADED' };
    // A carried commit's lower bound gives way to the commitTs its commit partition stored (never below it).
    const boundReplaced =
      previous?.commitTsLowerBound === true && next.state === 'COMMITTED' && next.commitTimestamp !== undefined;
    assert(
      !boundReplaced || (previous?.commitTimestamp ?? 0n) <= (next.commitTimestamp ?? 0n),
      'a carried commit commits at or above its lower bound',
      txId,
    );
    const keptFields = FIELDS.filter(
      (f) => !(boundReplaced && f === 'commitTimestamp') && conflicts(previous?.[f], next[f]),
    );
    const retainUntilCleanup = (previous?.retainUntilCleanup ?? false) || next.retainUntilCleanup === true;
    const cleanupCompleted = previous?.cleanupCompleted ?? false;
    const entry = storedEntry({
      state: next.state,
      coordinatorId: previous?.coordinatorId ?? next.coordinatorId,
      commitTimestamp: boundReplaced ? next.commitTimestamp : (previous?.commitTimestamp ?? next.commitTimestamp),
      commitTsLowerBound: next.state === 'FINISHING' && next.commitTsLowerBound === true,
      commitPartitionId: previous?.commitPartitionId ?? next.commitPartitionId,
      retainUntilCleanup,
      cleanupCompleted,
      retentionFromMs: this.retentionFrom(previous, next.state, retainUntilCleanup, cleanupCompleted),
    });
    return { kind: 'applied', entry, previous, keptFields };
  }

  /** retentionFromMs of an entry updated to `state` (cleanup reports go through markCleanupCompleted instead). */
  private retentionFrom(
    previous: StoredEntry | undefined,
    state: TxState,
    retainUntilCleanup: boolean,
    cleanupCompleted: boolean,
  ): number | undefined {
    if (!isFinal(state)) return undefined;
    const gainedRetain = retainUntilCleanup && previous?.retainUntilCleanup !== true;
    if (!isFinal(previous?.state)) {
      // Just became final: retention runs from now, or from the cleanup report for an entry that waits for it.
      return retainUntilCleanup && !cleanupCompleted ? undefined : this.stampMs();
    }
    if (!gainedRetain) return previous?.retentionFromMs;
    // A final entry that now waits for its cleanup: it waits, or runs from now if the cleanup was already reported.
    return cleanupCompleted ? this.stampMs() : undefined;
  }

  /**
   * Stores `entry`: in `live` while it may not be vacuumed, else in `retained`, at the back when its retention start
   * changed (so `retained` stays in start order), in its place otherwise.
   */
  private store(txId: TxId, previous: StoredEntry | undefined, entry: StoredEntry): void {
    checkTxStateEntry(txId, entry);
    if (previous !== undefined) checkTxStateSuccession(txId, previous, entry);
    if (entry.retentionFromMs === undefined) {
      this.retained.delete(txId);
      this.live.set(txId, entry);
    } else {
      this.live.delete(txId);
      if (previous?.retentionFromMs !== entry.retentionFromMs) this.retained.delete(txId);
      this.retained.set(txId, entry);
    }
    assert(this.size <= this.entriesMax, 'the map holds at most entriesMax entries', this.size);
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
}

/** The fields of an entry as a plain object (to derive a changed one from it). */
function fieldsOf(e: TxStateEntry): TxStateEntry {
  return {
    state: e.state,
    coordinatorId: e.coordinatorId,
    commitTimestamp: e.commitTimestamp,
    commitPartitionId: e.commitPartitionId,
    retainUntilCleanup: e.retainUntilCleanup,
    cleanupCompleted: e.cleanupCompleted,
    retentionFromMs: e.retentionFromMs,
    commitTsLowerBound: e.commitTsLowerBound === true,
  };
}

/** What every stored entry satisfies (header): checked on every write. */
export function checkTxStateEntry(txId: TxId, e: TxStateEntry): void {
  assert(e.state !== 'COMMITTED' || e.commitTimestamp !== undefined, 'a COMMITTED entry carries its commitTs', txId);
  assert(!e.cleanupCompleted || isFinal(e.state), 'cleanup completes after the outcome', txId);
  assert(
    isFinal(e.state)
      ? (e.retentionFromMs === undefined) === (e.retainUntilCleanup && !e.cleanupCompleted)
      : e.retentionFromMs === undefined,
    'retention runs exactly for final entries that wait for no cleanup',
    txId,
  );
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
      (prev.commitTimestamp === undefined ||
        next.commitTimestamp === prev.commitTimestamp ||
        (prev.commitTsLowerBound === true &&
          next.state === 'COMMITTED' &&
          next.commitTimestamp !== undefined &&
          next.commitTimestamp >= prev.commitTimestamp)) &&
      (prev.commitPartitionId === undefined || next.commitPartitionId === prev.commitPartitionId),
    'a set field is never changed (rule 13 for the commitTs)',
    txId,
  );
  assert(
    (!prev.cleanupCompleted || next.cleanupCompleted) && (!prev.retainUntilCleanup || next.retainUntilCleanup),
    'bookkeeping flags are set once',
    txId,
  );
  assert(
    prev.retentionFromMs === undefined ||
      next.retentionFromMs === prev.retentionFromMs ||
      (next.retainUntilCleanup && !prev.retainUntilCleanup),
    'a retention start stays, unless the entry just gained retainUntilCleanup',
    txId,
  );
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
