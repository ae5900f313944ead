/**
 * Lock manager: per-key locks in modes IS/IX/S/SIX/X (see lock-modes.ts), deadlock prevention by **wait-die** on tx
 * age (compareTxAge: a smaller TxId began earlier). Synchronous core: `acquire` answers `granted`, `denied` or
 * `waiting`; a waiting request is settled later through its listener (`onGranted` / `onDenied`) when locks are released
 * or waiters fail. Callbacks run after the lock table is consistent, inside the call that settled them.
 *
 * Per key: a set of holders (txId → mode) and a FIFO queue of waiters. A request is *blocked by* every holder whose
 * mode is incompatible with it and every incompatible waiter queued ahead of it.
 *
 * Invariants (checked by the property test):
 * 1. Holders of one key are pairwise compatible.
 * 2. Wait-die: every tx a waiter is blocked by is younger than the waiter, unless the waiter is *patient* (below). So
 *    every wait-for edge but a patient waiter's goes from an older to a younger tx. A request that would be blocked by
 *    an older tx dies at once (`denied`, TX_LOCK_CONFLICT, retryable), unless it is patient.
 * 3. No waiter waits needlessly: every queued waiter is blocked by someone. Hence once every holder has released, every
 *    waiter has been granted or denied.
 * One exception to "dies at once": a holder marked *finishing* (`markFinishing`: its commit or rollback has begun, so
 * it will never request a lock again, here or anywhere) is waited for even by younger txs. A tx that never waits has
 * no outgoing wait-for edge, so an edge into it closes no cycle and the wait-die argument still holds for every other
 * edge. A finishing tx asking for a lock anyway is refused (TX_ALREADY_FINISHED), never queued.
 *
 * Patient requests: a fresh request made with `patient` queues even when an older tx blocks it, and the `waiting`
 * result names that tx (`olderBlocker`); the caller must bound such a wait (lease-locks.ts: `lockPatienceMs`, then it
 * dies as wait-die would have). Every wait-for cycle has an edge from a younger to an older tx, which only a patient
 * waiter has, so every cycle ends when that bounded wait does: no deadlock outlasts the patience. A younger request
 * that would die at once and retry after a backoff instead gets the lock as soon as the older holder finishes, which is
 * what a hot key needs. Upgrades are never patient (two holders upgrading is the classic cycle; they die at once).
 *
 * Re-entrancy and upgrades: a tx asking for a mode its held mode covers is granted at once. Otherwise it asks for
 * join(held, requested) (S + X → X, IX + S → SIX, ...) against the *other* holders under wait-die. An upgrade is queued
 * at the front (ahead of fresh requests, which may be waiting for the upgrader's held lock); a queued request that is
 * incompatible with the upgrade and younger than the upgrader would then wait for an older tx, so it dies instead
 * (the younger requester dies, as wait-die prescribes). Fresh requests are granted only if compatible with every holder
 * and every queued waiter (FIFO: no overtaking of a conflicting waiter); compatible waiters are granted in queue order.
 *
 * Bounds: at most `waitersPerKeyMax` waiters per key and `keysMax` keys with holders or waiters; past either a request
 * is denied with TX_LOCK_CONFLICT instead of queuing.
 *
 * Asserted as the table changes: a new holder is compatible with the other holders (1); a request queues only when
 * something blocks it (3), only behind younger or finishing txs (2), never for a finishing tx, and within the bounds;
 * a key left without holders has no waiters once its queue is processed (3).
 */
import { assert } from '../../core/assert.js';
import { BasaltError, invalidArgument } from '../../core/errors.js';
import type { TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import { isCompatible, joinModes, type LockKey, type LockMode } from './lock-modes.js';
import { isOlder } from './tx-id.js';

export type LockDenialReason =
  /** Blocked by an older tx (wait-die): the requester dies. */
  | 'wait-die'
  /** The key's waiter queue is full. */
  | 'queue-full'
  /** The lock table has no room for another key. */
  | 'table-full'
  /** failWaiters(txId): the tx is being aborted. */
  | 'failed'
  /** releaseAll(txId) while the tx still had a request waiting. */
  | 'released'
  /** The tx was marked finishing: it takes no new locks. */
  | 'finishing';

export interface LockDenial {
  readonly txId: TxId;
  readonly key: LockKey;
  readonly mode: LockMode;
  readonly code: 'TX_LOCK_CONFLICT' | 'TX_ABORTED' | 'TX_ALREADY_FINISHED';
  readonly reason: LockDenialReason;
  /** For wait-die: the older tx the requester would have waited for. */
  readonly blocker?: TxId;
}

export interface LockGrant {
  readonly txId: TxId;
  readonly key: LockKey;
  /** The mode now held (the join of the previously held and the requested mode). */
  readonly mode: LockMode;
}

export interface LockListener {
  onGranted(grant: LockGrant): void;
  onDenied(denial: LockDenial): void;
}

export interface LockWaitHandle {
  readonly txId: TxId;
  readonly key: LockKey;
  readonly mode: LockMode;
  /** Withdraws the request without calling its listener; true if it was still waiting. */
  cancel(): boolean;
  /** An older tx, not finishing, that blocks the request now (only a patient request has one); undefined if none. */
  olderBlocker(): TxId | undefined;
}

export type AcquireResult =
  | { readonly kind: 'granted'; readonly mode: LockMode }
  /** `olderBlocker`: a patient request waits for this older tx (its caller bounds the wait). */
  | { readonly kind: 'waiting'; readonly handle: LockWaitHandle; readonly olderBlocker?: TxId }
  | { readonly kind: 'denied'; readonly denial: LockDenial };

export interface LockHolder {
  readonly txId: TxId;
  readonly mode: LockMode;
}

export interface LockWaiterView {
  readonly txId: TxId;
  /** The mode asked for. */
  readonly mode: LockMode;
  /** The mode it will hold once granted: join(held, requested). */
  readonly target: LockMode;
  readonly upgrade: boolean;
  readonly patient: boolean;
}

export interface AcquireOptions {
  /** Queue behind an older tx instead of dying at once; the caller bounds the wait (see the header). */
  readonly patient?: boolean;
}

export type ConflictListener = (holderTxId: TxId, requesterTxId: TxId, key: LockKey) => void;

export interface LockManagerOptions {
  readonly waitersPerKeyMax?: number;
  readonly keysMax?: number;
}

interface Waiter {
  readonly txId: TxId;
  readonly key: LockKey;
  readonly mode: LockMode;
  readonly target: LockMode;
  readonly upgrade: boolean;
  readonly patient: boolean;
  readonly listener: LockListener;
}

interface KeyLocks {
  readonly holders: Map<TxId, LockMode>;
  queue: Waiter[];
}

type Effect =
  | { readonly kind: 'grant'; readonly waiter: Waiter }
  | { readonly kind: 'deny'; readonly waiter: Waiter; readonly denial: LockDenial };

export class LockManager {
  readonly waitersPerKeyMax: number;
  readonly keysMax: number;
  private readonly keys = new Map<LockKey, KeyLocks>();
  /** Keys each tx holds, in acquisition order (release order is deterministic). */
  private readonly heldByTx = new Map<TxId, Set<LockKey>>();
  private readonly waitingByTx = new Map<TxId, Map<LockKey, Waiter>>();
  /** Holders that take no new locks (see the header); a subset of heldByTx's keys. */
  private readonly finishing = new Set<TxId>();
  private readonly conflictListeners = new Set<ConflictListener>();
  /** Conflict listeners run in the middle of a decision: the table must not change under it. */
  private reportingConflicts = false;

  constructor(options: LockManagerOptions = {}) {
    this.waitersPerKeyMax = options.waitersPerKeyMax ?? LIMITS.lockWaitersPerKeyMax;
    this.keysMax = options.keysMax ?? LIMITS.lockKeysMax;
    assert(this.waitersPerKeyMax >= 0 && this.keysMax > 0, 'lock manager limits must be positive');
  }

  /**
   * Requests `mode` on `key` for `txId`. `listener` is called later only if the result is `waiting`. A tx may have
   * at most one waiting request per key: asking again for a mode its held lock covers is granted at once, anything
   * else while it waits is API misuse (INVALID_ARGUMENT).
   */
  acquire(
    txId: TxId,
    key: LockKey,
    mode: LockMode,
    listener: LockListener,
    options: AcquireOptions = {},
  ): AcquireResult {
    this.checkNotReporting();
    const locks = this.keys.get(key);
    const held = locks?.holders.get(txId);
    const target = held === undefined ? mode : joinModes(held, mode);
    if (held === target) return { kind: 'granted', mode: target };
    if (this.waitingByTx.get(txId)?.has(key)) {
      throw invalidArgument('tx already waits for this lock', { txId, key });
    }
    if (this.finishing.has(txId)) {
      return { kind: 'denied', denial: { txId, key, mode, code: 'TX_ALREADY_FINISHED', reason: 'finishing' } };
    }
    if (locks === undefined && this.keys.size >= this.keysMax) {
      return { kind: 'denied', denial: { txId, key, mode, code: 'TX_LOCK_CONFLICT', reason: 'table-full' } };
    }
    const k = locks ?? this.createKey(key);
    const upgrade = held !== undefined;
    const waiter: Waiter = {
      txId,
      key,
      mode,
      target,
      upgrade,
      patient: !upgrade && options.patient === true,
      listener,
    };
    const result = waiter.upgrade ? this.requestUpgrade(k, waiter) : this.requestFresh(k, waiter);
    if (k.holders.size === 0 && k.queue.length === 0) this.keys.delete(key);
    return result;
  }

  /**
   * `txId` requests no more locks: its commit or rollback has begun. From now on younger requests wait for its locks
   * instead of dying (see the header). Only a tx that holds locks and waits for none is marked; the mark goes with
   * `releaseAll`. Returns whether it was marked.
   */
  markFinishing(txId: TxId): boolean {
    this.checkNotReporting();
    if (!this.heldByTx.has(txId) || this.waitingByTx.has(txId)) return false;
    this.finishing.add(txId);
    return true;
  }

  isFinishing(txId: TxId): boolean {
    return this.finishing.has(txId);
  }

  /** Releases every lock of `txId` (cleanup) and grants waiters in queue order; a still-waiting request is denied. */
  releaseAll(txId: TxId): { readonly released: readonly LockKey[]; readonly granted: readonly LockGrant[] } {
    this.checkNotReporting();
    this.finishing.delete(txId);
    const effects: Effect[] = [];
    const touched = this.removeWaiters(txId, 'released', effects);
    const released = [...(this.heldByTx.get(txId) ?? [])];
    this.heldByTx.delete(txId);
    for (const key of released) assert(this.keys.get(key)?.holders.delete(txId), 'a held key has its holder');
    for (const key of [...released, ...touched]) this.grantWaiters(key, effects);
    this.deliver(effects);
    const granted = effects.flatMap((e) => (e.kind === 'grant' ? [grantOf(e.waiter)] : []));
    return { released, granted };
  }

  /** Denies every waiting request of `txId` with TX_ABORTED (the tx is aborting); its held locks stay until release. */
  failWaiters(txId: TxId): number {
    this.checkNotReporting();
    const effects: Effect[] = [];
    const touched = this.removeWaiters(txId, 'failed', effects);
    const failed = effects.length;
    for (const key of touched) this.grantWaiters(key, effects);
    this.deliver(effects);
    return failed;
  }

  /**
   * Called with each holder that blocks a request (which then waits or dies); orphan detection hooks in here. The
   * listener runs while the request is being decided: it must not call back into this lock manager (asserted), and
   * defers whatever it starts.
   */
  onConflict(listener: ConflictListener): () => void {
    this.conflictListeners.add(listener);
    return () => this.conflictListeners.delete(listener);
  }

  holders(key: LockKey): readonly LockHolder[] {
    return [...(this.keys.get(key)?.holders ?? [])].map(([txId, mode]) => ({ txId, mode }));
  }

  waiters(key: LockKey): readonly LockWaiterView[] {
    return (this.keys.get(key)?.queue ?? []).map((w) => ({
      txId: w.txId,
      mode: w.mode,
      target: w.target,
      upgrade: w.upgrade,
      patient: w.patient,
    }));
  }

  /** Locks held by `txId`, in acquisition order. */
  locksOf(txId: TxId): readonly { readonly key: LockKey; readonly mode: LockMode }[] {
    return [...(this.heldByTx.get(txId) ?? [])].map((key) => {
      const mode = this.keys.get(key)?.holders.get(txId);
      assert(mode !== undefined, 'a held key has its holder');
      return { key, mode };
    });
  }

  /** Txs holding at least one lock (diagnostics and leftover checks), in the order they first locked. */
  holderTxIds(): readonly TxId[] {
    return [...this.heldByTx.keys()];
  }

  /** Keys `txId` is waiting for. */
  waitsOf(txId: TxId): readonly LockKey[] {
    return [...(this.waitingByTx.get(txId)?.keys() ?? [])];
  }

  heldMode(txId: TxId, key: LockKey): LockMode | undefined {
    return this.keys.get(key)?.holders.get(txId);
  }

  /** Keys with at least one holder or waiter. */
  get keyCount(): number {
    return this.keys.size;
  }

  private requestFresh(k: KeyLocks, w: Waiter): AcquireResult {
    const blockers = this.blockersOf(k, w, k.queue);
    if (blockers.length === 0) {
      this.hold(k, w);
      return { kind: 'granted', mode: w.target };
    }
    this.reportConflicts(k, w);
    const older = blockers.find((b) => isOlder(b, w.txId) && !this.finishing.has(b));
    if (older !== undefined && !w.patient) {
      return { kind: 'denied', denial: denial(w, 'TX_LOCK_CONFLICT', 'wait-die', older) };
    }
    if (k.queue.length >= this.waitersPerKeyMax)
      return { kind: 'denied', denial: denial(w, 'TX_LOCK_CONFLICT', 'queue-full') };
    this.checkMayWait(k, w, blockers);
    k.queue.push(w);
    const handle = this.register(w);
    return older === undefined ? { kind: 'waiting', handle } : { kind: 'waiting', handle, olderBlocker: older };
  }

  /** Invariants 2 and 3 for a request about to queue behind `blockers` (holders and waiters ahead of it). */
  private checkMayWait(k: KeyLocks, w: Waiter, blockers: readonly TxId[]): void {
    assert(blockers.length > 0, 'a request waits only when something blocks it', w.txId, w.key);
    assert(!this.finishing.has(w.txId), 'a finishing tx never waits', w.txId, w.key);
    assert(k.queue.length < this.waitersPerKeyMax, 'a key queues at most waitersPerKeyMax waiters', w.key);
    for (const b of blockers) {
      assert(
        w.patient || isOlder(w.txId, b) || this.finishing.has(b),
        'wait-die: a waiter waits only for younger txs unless patient',
        w.txId,
        b,
      );
    }
  }

  private requestUpgrade(k: KeyLocks, w: Waiter): AcquireResult {
    const blockers = this.blockingHolders(k, w);
    if (blockers.length > 0) this.reportConflicts(k, w);
    const older = blockers.find((b) => isOlder(b, w.txId) && !this.finishing.has(b));
    if (older !== undefined) return { kind: 'denied', denial: denial(w, 'TX_LOCK_CONFLICT', 'wait-die', older) };
    if (blockers.length > 0 && k.queue.length >= this.waitersPerKeyMax) {
      return { kind: 'denied', denial: denial(w, 'TX_LOCK_CONFLICT', 'queue-full') };
    }
    // The upgrade goes ahead of every queued request; those it conflicts with now wait for it, which wait-die allows
    // only for older ones: younger ones die.
    const effects: Effect[] = [];
    k.queue = k.queue.filter((q) => {
      if (isCompatible(q.target, w.target) || isOlder(q.txId, w.txId)) return true;
      this.unregister(q);
      effects.push({ kind: 'deny', waiter: q, denial: denial(q, 'TX_LOCK_CONFLICT', 'wait-die', w.txId) });
      return false;
    });
    let result: AcquireResult;
    if (blockers.length === 0) {
      this.hold(k, w);
      result = { kind: 'granted', mode: w.target };
    } else {
      this.checkMayWait(k, w, blockers);
      k.queue.unshift(w);
      result = { kind: 'waiting', handle: this.register(w) };
    }
    // Denied waiters may have been blocking compatible requests behind them.
    if (effects.length > 0) this.grantWaiters(w.key, effects);
    this.deliver(effects);
    return result;
  }

  /** Who `w` is blocked by: the conflicting holders, then the conflicting waiters among `ahead` (queued before it). */
  private blockersOf(k: KeyLocks, w: Waiter, ahead: readonly Waiter[]): TxId[] {
    const waiters = ahead.filter((q) => !isCompatible(q.target, w.target)).map((q) => q.txId);
    return [...this.blockingHolders(k, w), ...waiters];
  }

  /** Holders other than the requester whose mode conflicts with the requested target. */
  private blockingHolders(k: KeyLocks, w: Waiter): TxId[] {
    const out: TxId[] = [];
    for (const [txId, mode] of k.holders) if (txId !== w.txId && !isCompatible(mode, w.target)) out.push(txId);
    return out;
  }

  private reportConflicts(k: KeyLocks, w: Waiter): void {
    if (this.conflictListeners.size === 0) return;
    this.reportingConflicts = true;
    try {
      for (const holder of this.blockingHolders(k, w)) {
        for (const listener of [...this.conflictListeners]) listener(holder, w.txId, w.key);
      }
    } finally {
      this.reportingConflicts = false;
    }
  }

  private checkNotReporting(): void {
    assert(!this.reportingConflicts, 'a conflict listener does not change the lock table');
  }

  /** Grants, in queue order, every waiter no longer blocked by a holder or by a remaining waiter ahead of it. */
  private grantWaiters(key: LockKey, effects: Effect[]): void {
    const k = this.keys.get(key);
    if (k === undefined) return;
    const remaining: Waiter[] = [];
    for (const w of k.queue) {
      const blocked =
        this.blockingHolders(k, w).length > 0 || remaining.some((ahead) => !isCompatible(ahead.target, w.target));
      if (blocked) {
        remaining.push(w);
      } else {
        this.unregister(w);
        this.hold(k, w);
        effects.push({ kind: 'grant', waiter: w });
      }
    }
    k.queue = remaining;
    // The first waiter of a key nobody holds is blocked by nothing, so it was just granted (invariant 3).
    assert(k.holders.size > 0 || k.queue.length === 0, 'no waiter waits for a key nobody holds', key);
    if (k.holders.size === 0 && k.queue.length === 0) this.keys.delete(key);
  }

  private removeWaiters(txId: TxId, reason: 'failed' | 'released', effects: Effect[]): LockKey[] {
    const waits = this.waitingByTx.get(txId);
    if (waits === undefined) return [];
    const code = reason === 'failed' ? 'TX_ABORTED' : 'TX_ALREADY_FINISHED';
    const keys = [...waits.keys()];
    for (const w of [...waits.values()]) {
      this.dequeue(w);
      effects.push({ kind: 'deny', waiter: w, denial: denial(w, code, reason) });
    }
    return keys;
  }

  private createKey(key: LockKey): KeyLocks {
    const k: KeyLocks = { holders: new Map(), queue: [] };
    this.keys.set(key, k);
    assert(this.keys.size <= this.keysMax, 'the table holds at most keysMax keys', this.keys.size);
    return k;
  }

  private hold(k: KeyLocks, w: Waiter): void {
    for (const [txId, mode] of k.holders) {
      assert(txId === w.txId || isCompatible(mode, w.target), 'holders of a key are compatible', w.key, txId, w.txId);
    }
    k.holders.set(w.txId, w.target);
    let held = this.heldByTx.get(w.txId);
    if (held === undefined) {
      held = new Set();
      this.heldByTx.set(w.txId, held);
    }
    held.add(w.key);
  }

  private register(w: Waiter): LockWaitHandle {
    let waits = this.waitingByTx.get(w.txId);
    if (waits === undefined) {
      waits = new Map();
      this.waitingByTx.set(w.txId, waits);
    }
    waits.set(w.key, w);
    return {
      txId: w.txId,
      key: w.key,
      mode: w.mode,
      cancel: () => this.cancel(w),
      olderBlocker: () => this.olderBlockerOf(w),
    };
  }

  private unregister(w: Waiter): void {
    const waits = this.waitingByTx.get(w.txId);
    assert(waits?.get(w.key) === w, 'a queued waiter is registered');
    waits.delete(w.key);
    if (waits.size === 0) this.waitingByTx.delete(w.txId);
  }

  /** Removes a registered waiter from its key's queue and from the registry. */
  private dequeue(w: Waiter): void {
    const k = this.keys.get(w.key);
    assert(k !== undefined, 'a waiter has its key');
    const before = k.queue.length;
    k.queue = k.queue.filter((q) => q !== w);
    assert(k.queue.length === before - 1, 'a registered waiter is queued once');
    this.unregister(w);
  }

  private olderBlockerOf(w: Waiter): TxId | undefined {
    const k = this.keys.get(w.key);
    if (k === undefined || this.waitingByTx.get(w.txId)?.get(w.key) !== w) return undefined;
    const blockers = this.blockersOf(k, w, k.queue.slice(0, k.queue.indexOf(w)));
    return blockers.find((b) => isOlder(b, w.txId) && !this.finishing.has(b));
  }

  private cancel(w: Waiter): boolean {
    this.checkNotReporting();
    if (this.waitingByTx.get(w.txId)?.get(w.key) !== w) return false;
    this.dequeue(w);
    const effects: Effect[] = [];
    this.grantWaiters(w.key, effects);
    this.deliver(effects);
    return true;
  }

  /** Runs listeners after the table is consistent; every one runs even if one throws (the first error is rethrown). */
  private deliver(effects: readonly Effect[]): void {
    let failure: { error: unknown } | undefined;
    for (const e of effects) {
      try {
        if (e.kind === 'grant') e.waiter.listener.onGranted(grantOf(e.waiter));
        else e.waiter.listener.onDenied(e.denial);
      } catch (error) {
        failure ??= { error };
      }
    }
    if (failure !== undefined) throw failure.error;
  }
}

function grantOf(w: Waiter): LockGrant {
  return { txId: w.txId, key: w.key, mode: w.target };
}

function denial(w: Waiter, code: LockDenial['code'], reason: LockDenialReason, blocker?: TxId): LockDenial {
  const base = { txId: w.txId, key: w.key, mode: w.mode, code, reason };
  return blocker === undefined ? base : { ...base, blocker };
}

/** Turns a denial into the coded error the client sees (TX_LOCK_CONFLICT is retryable). */
export function lockDenialError(d: LockDenial): BasaltError {
  const message =
    d.reason === 'wait-die'
      ? `lock conflict on ${d.key}: tx ${d.txId} is younger than ${d.blocker ?? 'a holder'}`
      : `lock request on ${d.key} denied (${d.reason})`;
  const details = { txId: d.txId, key: d.key, mode: d.mode, reason: d.reason, blocker: d.blocker };
  if (d.reason !== 'wait-die' || d.blocker === undefined) return new BasaltError(d.code, message, details);
  return new BasaltError(d.code, message, details, { hint: { kind: 'wait-die', blocker: d.blocker } });
}

/**
 * Promise form of acquire for async callers (no timeout here: the caller cancels through `onWaiting`'s handle).
 * Resolves with the held mode; rejects with lockDenialError.
 */
export function acquireLock(
  manager: LockManager,
  txId: TxId,
  key: LockKey,
  mode: LockMode,
  onWaiting?: (handle: LockWaitHandle) => void,
): Promise<LockMode> {
  return new Promise((resolve, reject) => {
    const result = manager.acquire(txId, key, mode, {
      onGranted: (g) => resolve(g.mode),
      onDenied: (d) => reject(lockDenialError(d)),
    });
    switch (result.kind) {
      case 'granted':
        resolve(result.mode);
        return;
      case 'denied':
        reject(lockDenialError(result.denial));
        return;
      case 'waiting':
        onWaiting?.(result.handle);
        return;
    }
  });
}
