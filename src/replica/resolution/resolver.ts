/**
 * Write intent resolution for RO reads (seed 001; ignite3-protocol.md §8; DESIGN §2 "Resolution", §2b rules 11, 12,
 * 16, 17): given a foreign intent met at readTs, the intent's tx's *true* state. Paths, in order:
 *
 * 1. **local**: a final entry in this node's map is the answer (COMMITTED with its commitTs even above readTs: the
 *    reader decides visibility). A local PENDING is never an answer (rule 12): if this node is the tx's coordinator,
 *    the coordinator rule runs here (absorb readTs into the clock, then read the map); a local FINISHING of another
 *    coordinator is waited for, bounded by `stateWaitMs`.
 * 2. **coordinator**: the coordinator id is known, not this node and not gone (rule 17: unknown is not gone) →
 *    TxStateCoordinatorRequest{txId, readTs}. A final or PENDING answer is the answer; null, UNKNOWN, an error or a
 *    timeout falls through.
 * 3. **commit partition**: TxStateCommitPartitionRequest to the commit partition's primary, naming the coordinator
 *    (from the map, else from the tx id; also when this node is the coordinator and its FINISHING wait timed out),
 *    following PRIMARY_MISS hints and retrying retryable failures with backoff until the resolution timeout (a named
 *    limit), then TIMEOUT.
 *
 * Sharing (rule 12): concurrent resolutions of one tx share one request when the request's readTs covers theirs. A
 * PENDING answer obtained at readTs r says "any commit is above r", so it serves readers with readTs ≤ r only; a
 * reader with a larger readTs sends its own request. UNKNOWN ("not committed at or below r") likewise.
 * Once the tx's coordinator is gone (rule 17), the commit partition recovers the tx, so its answer is final and
 * serves every reader: then one *recovering* flight per tx runs on this node whatever the readers' readTs (readers
 * whose readTs it does not cover still go their own way if it ends with a non-final answer, which only the
 * primary-replica path below the vacuum horizon gives). A flight already retrying (the commit partition has no
 * primary, or cannot reach the coordinator) checks before every retry whether the local map became final (another
 * flight's answer is cached there) or the coordinator went gone (it then joins the recovering flight). And all flights
 * of a tx on this node pass one gate to the commit partition: one request in flight at a time, a failure shared (the
 * others back off instead of repeating it), a final answer shared. So a storm of readers settles on one request in
 * flight per node and tx, retried with backoff, whose final outcome answers them all.
 *
 * A final answer is cached in the local map (reason `resolution`; transition rules apply; UNKNOWN and PENDING never
 * are) and, when a switcher is given, schedules a local write intent switch of the row (storage only, never Raft;
 * see intent-switch.ts for why the node leaves it off by default).
 * Counters: `resolution.local|coordinator|commitPartition` per answering path, `resolution.outcome.<state>`,
 * `resolution.shared`, `resolution.failed`, `resolution.latencyMsTotal`.
 */

import { assert } from '../../core/assert.js';
import { type CounterSink, NO_COUNTERS } from '../../core/counters.js';
import { BasaltError, isBasaltError } from '../../core/errors.js';
import type { HybridTimestamp, NodeId, NodeIdentity, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import type { Clock } from '../../env/clock.js';
import { sleep, type Timers } from '../../env/timers.js';
import type { HybridClock } from '../../hlc/hybrid-clock.js';
import { backoffMs } from '../../route/backoff.js';
import type { PrimaryDirectory } from '../../route/primary-directory.js';
import { answerCoordinatorStateRequest } from '../../tx/coordinator/coordinator-state-request.js';
import type { TxOutcome, TxRequestFn, TxStateAnswer, TxStateCommitPartitionRequest } from '../../tx/core/messages.js';
import { outcomeOfEntry, waitForFinal } from '../../tx/core/outcome.js';
import { nodeIdOf } from '../../tx/core/tx-id.js';
import { isFinal } from '../../tx/core/tx-state.js';
import type { TxStateMap } from '../../tx/core/tx-state-map.js';
import { outcomeCounter, type PeerDirectory, RESOLUTION_COUNTERS } from '../ports.js';
import { answerOf, isFinalAnswer, isTrueOutcome, timeoutError } from './answers.js';
import { markCoordinatorGone } from './coordinator-gone.js';
import type { IntentResolutionRequest, IntentResolver, LostLockRequest } from './intent-resolver.js';
import type { IntentSwitcher } from './intent-switch.js';
import { resolveLostLock } from './lost-locks.js';
import { requestPrimary } from './primary-requests.js';

export interface TxStateResolverOptions {
  readonly self: NodeIdentity;
  readonly clock: HybridClock;
  /** Monotonic ms for the resolution deadline. */
  readonly physicalClock: Pick<Clock, 'monotonicMs'>;
  readonly timers: Timers;
  readonly txStates: TxStateMap;
  readonly peers: PeerDirectory;
  readonly request: TxRequestFn;
  readonly locator: PrimaryDirectory;
  /** Switches the row locally once a final outcome is known; absent: no local switch (the Raft cleanup does it). */
  readonly switcher?: IntentSwitcher;
  readonly counters?: CounterSink;
  readonly timeoutMs?: number;
  readonly requestTimeoutMs?: number;
  /** How long a local FINISHING (or, on the coordinator's node, a FINISHING with commitTs ≤ readTs) is waited for. */
  readonly stateWaitMs?: number;
  readonly inFlightMax?: number;
  readonly backoffMsMin?: number;
  readonly backoffMsMax?: number;
}

type Path = 'local' | 'coordinator' | 'commitPartition';

interface Resolved {
  readonly answer: TxStateAnswer;
  readonly path: Path;
}

type LocalStep =
  | { readonly kind: 'answer'; readonly answer: TxStateAnswer }
  | { readonly kind: 'remote'; readonly coordinatorId: NodeId | undefined };

interface Flight {
  readonly readTs: HybridTimestamp;
  readonly answer: Promise<TxStateAnswer>;
}

/**
 * Per tx, the readers on the commit partition path of this node: at most one request of theirs is in flight; a
 * failure is shared (the others back off rather than repeat it), and so is a final answer (rule 12); a PENDING or
 * UNKNOWN answer serves only the reader that asked. At most one gate per flight in flight, so bounded alike.
 */
interface CommitPartitionGate {
  busy: Promise<void> | undefined;
  failures: number;
  lastError: unknown;
  final: TxStateAnswer | undefined;
  users: number;
}

export class TxStateResolver implements IntentResolver {
  private readonly o: TxStateResolverOptions;
  private readonly counters: CounterSink;
  private readonly timeoutMs: number;
  private readonly requestTimeoutMs: number;
  private readonly stateWaitMs: number;
  private readonly inFlightMax: number;
  private readonly backoffMsMin: number;
  private readonly backoffMsMax: number;
  /** Remote resolutions in flight, by tx; each serves readers with readTs ≤ its own. */
  private readonly flights = new Map<TxId, Flight[]>();
  /** The one flight per tx whose coordinator is gone: its answer is final, so it serves readers at any readTs. */
  private readonly recovering = new Map<TxId, Flight>();
  private readonly gates = new Map<TxId, CommitPartitionGate>();
  private flightCount = 0;

  constructor(options: TxStateResolverOptions) {
    this.o = options;
    this.counters = options.counters ?? NO_COUNTERS;
    this.timeoutMs = options.timeoutMs ?? LIMITS.resolutionTimeoutMsDefault;
    this.requestTimeoutMs = options.requestTimeoutMs ?? LIMITS.resolutionRequestTimeoutMs;
    this.stateWaitMs = options.stateWaitMs ?? LIMITS.txStateWaitMsDefault;
    this.inFlightMax = options.inFlightMax ?? LIMITS.resolutionsInFlightMax;
    this.backoffMsMin = options.backoffMsMin ?? LIMITS.resolutionBackoffMsMin;
    this.backoffMsMax = options.backoffMsMax ?? LIMITS.resolutionBackoffMsMax;
  }

  /** Remote resolutions in flight (shared ones count once). */
  get inFlight(): number {
    return this.flightCount;
  }

  async resolve(request: IntentResolutionRequest): Promise<TxStateAnswer> {
    const startMs = this.o.physicalClock.monotonicMs();
    try {
      const answer = await this.resolveOnce(request);
      this.counters.add(outcomeCounter(answer.state));
      if (isFinalAnswer(answer)) this.onFinal(request, answer);
      return answer;
    } catch (error) {
      this.counters.add(RESOLUTION_COUNTERS.failed);
      throw error;
    } finally {
      this.counters.add(RESOLUTION_COUNTERS.latencyMsTotal, this.o.physicalClock.monotonicMs() - startMs);
    }
  }

  /** A foreign intent met by a read-write request without its lock: its final outcome, if any yet (lost-locks.ts). */
  resolveLostLock(request: LostLockRequest): Promise<TxOutcome | undefined> {
    const { clock, txStates, peers, locator } = this.o;
    const deps = { clock, txStates, peers, locator, request: this.o.request, counters: this.counters };
    return resolveLostLock({ ...deps, requestTimeoutMs: this.requestTimeoutMs }, request);
  }

  private async resolveOnce(request: IntentResolutionRequest): Promise<TxStateAnswer> {
    const local = await this.localStep(request);
    if (local.kind === 'answer') {
      this.counters.add(RESOLUTION_COUNTERS.local);
      return local.answer;
    }
    return this.shared(request, local.coordinatorId);
  }

  // ---------------------------------------------------------------------------------------- local path

  private async localStep(request: IntentResolutionRequest): Promise<LocalStep> {
    const { txId, readTs } = request;
    const entry = this.o.txStates.entry(txId);
    if (entry !== undefined && isFinal(entry.state)) return { kind: 'answer', answer: outcomeOfEntry(entry) };
    // The coordinator's ephemeral id is part of the tx id, so a reader without an entry (it restarted, or its entry
    // was vacuumed) still knows whom to ask first (rule 17: an id it never saw is unknown, not gone).
    const coordinatorId = entry?.coordinatorId ?? coordinatorOf(txId);
    if (coordinatorId === this.o.self.id) {
      // Rule 12: on the coordinator's own node the coordinator rule applies (absorb readTs, then read).
      const own = await this.coordinatorRule(txId, readTs);
      // The commit partition still learns who the coordinator is: without it, a primary there with no entry of the
      // tx would take it for coordinator-less and recover (abort) a tx this very node is committing (rule 17).
      return own === undefined ? { kind: 'remote', coordinatorId } : { kind: 'answer', answer: own };
    }
    if (entry?.state === 'FINISHING') {
      const final = await waitForFinal(this.o.txStates, this.o.timers, txId, this.stateWaitMs);
      if (final !== undefined) return { kind: 'answer', answer: outcomeOfEntry(final) };
    }
    return { kind: 'remote', coordinatorId };
  }

  /** The coordinator's answer on this node; undefined when it has none (null) or its FINISHING wait timed out. */
  private async coordinatorRule(txId: TxId, readTs: HybridTimestamp): Promise<TxStateAnswer | undefined> {
    const deps = { self: this.o.self, clock: this.o.clock, timers: this.o.timers, txStates: this.o.txStates };
    try {
      const response = await answerCoordinatorStateRequest(
        deps,
        { kind: 'TxStateCoordinatorRequest', txId, readTs },
        this.stateWaitMs,
      );
      return response.answer ?? undefined;
    } catch (error) {
      if (isBasaltError(error, 'TIMEOUT')) return undefined;
      throw error;
    }
  }

  // ---------------------------------------------------------------------------------------- sharing

  private shared(request: IntentResolutionRequest, coordinatorId: NodeId | undefined): Promise<TxStateAnswer> {
    if (coordinatorId !== undefined && coordinatorId !== this.o.self.id && this.o.peers.isGone(coordinatorId)) {
      return this.joinRecovering(request, coordinatorId);
    }
    const { txId, readTs } = request;
    const flights = this.flights.get(txId) ?? [];
    const covering = flights.find((f) => f.readTs >= readTs);
    if (covering !== undefined) {
      this.counters.add(RESOLUTION_COUNTERS.shared);
      return covering.answer;
    }
    if (this.flightCount >= this.inFlightMax) {
      return Promise.reject(new BasaltError('OVERLOADED', 'too many write intent resolutions in flight', { txId }));
    }
    const answer = this.remote(request, coordinatorId).then((r) => {
      this.counters.add(RESOLUTION_COUNTERS[r.path]);
      return r.answer;
    });
    const flight: Flight = { readTs, answer };
    this.flights.set(txId, [...flights, flight]);
    this.flightCount += 1;
    assert(this.flightCount <= this.inFlightMax, 'resolutions in flight stay within their limit', this.flightCount);
    const done = (): void => this.land(txId, flight);
    answer.then(done, done);
    return answer;
  }

  /**
   * The recovering flight of a tx whose coordinator is gone (started by the first reader): shared by every reader, at
   * any readTs, when it ends final; a reader it does not cover resolves on its own after a non-final answer.
   */
  private async joinRecovering(request: IntentResolutionRequest, coordinatorId: NodeId): Promise<TxStateAnswer> {
    const { txId, readTs } = request;
    let flight = this.recovering.get(txId);
    if (flight !== undefined) {
      this.counters.add(RESOLUTION_COUNTERS.shared);
    } else {
      if (this.flightCount >= this.inFlightMax) {
        throw new BasaltError('OVERLOADED', 'too many write intent resolutions in flight', { txId });
      }
      const answer = this.remote(request, coordinatorId, true).then((r) => {
        this.counters.add(RESOLUTION_COUNTERS[r.path]);
        return r.answer;
      });
      const started: Flight = { readTs, answer };
      flight = started;
      this.recovering.set(txId, started);
      this.flightCount += 1;
      assert(this.flightCount <= this.inFlightMax, 'resolutions in flight stay within their limit', this.flightCount);
      const done = (): void => {
        if (this.recovering.get(txId) === started) this.recovering.delete(txId);
        this.flightCount -= 1;
        assert(this.flightCount >= 0, 'a landed recovering flight was counted', txId, this.flightCount);
      };
      answer.then(done, done);
    }
    const answer = await flight.answer;
    if (isFinalAnswer(answer) || readTs <= flight.readTs) return answer;
    // Rule 12: a non-final answer at r serves readers at or below r only. This reader's own resolution does not join
    // a recovering flight again, so a reader waits for at most one flight besides its own.
    return this.remote(request, coordinatorId, true).then((r) => r.answer);
  }

  private land(txId: TxId, flight: Flight): void {
    const rest = (this.flights.get(txId) ?? []).filter((f) => f !== flight);
    if (rest.length === 0) this.flights.delete(txId);
    else this.flights.set(txId, rest);
    this.flightCount -= 1;
    assert(this.flightCount >= 0, 'a landed flight was counted', txId, this.flightCount);
  }

  // ---------------------------------------------------------------------------------------- remote paths

  /**
   * `recovering`: this is the tx's recovering flight, or a reader's own resolution after one (neither joins a
   * recovering flight, see settledMeanwhile: the first would wait for itself, the second would wait twice).
   */
  private async remote(
    request: IntentResolutionRequest,
    coordinatorId: NodeId | undefined,
    recovering = false,
  ): Promise<Resolved> {
    const viaCoordinator = await this.coordinatorPath(request, coordinatorId);
    if (viaCoordinator !== undefined) return { answer: viaCoordinator, path: 'coordinator' };
    return { answer: await this.commitPartitionPath(request, coordinatorId, recovering), path: 'commitPartition' };
  }

  /** A final or PENDING answer of the live coordinator; undefined when the path cannot answer. */
  private async coordinatorPath(
    request: IntentResolutionRequest,
    coordinatorId: NodeId | undefined,
  ): Promise<TxStateAnswer | undefined> {
    if (coordinatorId === undefined || coordinatorId === this.o.self.id) return undefined;
    if (this.o.peers.isGone(coordinatorId)) {
      markCoordinatorGone(this.o.txStates, this.o.peers, request.txId, coordinatorId);
      return undefined;
    }
    const name = this.o.peers.nameOf(coordinatorId);
    if (name === undefined) return undefined;
    try {
      const response = await this.o.request(
        name,
        { kind: 'TxStateCoordinatorRequest', txId: request.txId, readTs: request.readTs },
        { timeoutMs: this.requestTimeoutMs },
      );
      const answer = answerOf(response);
      return answer === null || answer.state === 'UNKNOWN' ? undefined : answer;
    } catch {
      // Error or timeout: the commit partition decides (it may still reach the coordinator, or recover the tx).
      return undefined;
    }
  }

  private async commitPartitionPath(
    request: IntentResolutionRequest,
    coordinatorId: NodeId | undefined,
    recovering = false,
  ): Promise<TxStateAnswer> {
    const gate = this.enterGate(request.txId);
    try {
      return await this.commitPartitionAttempts(request, coordinatorId, recovering, gate);
    } finally {
      this.leaveGate(request.txId, gate);
    }
  }

  private async commitPartitionAttempts(
    request: IntentResolutionRequest,
    coordinatorId: NodeId | undefined,
    recovering: boolean,
    gate: CommitPartitionGate,
  ): Promise<TxStateAnswer> {
    const body = commitPartitionRequest(request, coordinatorId);
    const deadlineMs = this.o.physicalClock.monotonicMs() + this.timeoutMs;
    let lastError: unknown;
    for (let attempt = 0; ; attempt++) {
      if (deadlineMs - this.o.physicalClock.monotonicMs() <= 0) {
        throw timeoutError(request.txId, 'write intent resolution', lastError);
      }
      if (attempt > 0) {
        const settled = this.settledMeanwhile(request, coordinatorId, recovering);
        if (settled !== undefined) return settled;
      }
      const failuresSeen = gate.failures;
      // Each turn waits for one request (≤ requestTimeoutMs); the resolution timeout bounds the whole wait.
      while (gate.busy !== undefined) {
        if (deadlineMs - this.o.physicalClock.monotonicMs() <= 0) {
          throw timeoutError(request.txId, 'write intent resolution', lastError ?? gate.lastError);
        }
        await gate.busy;
      }
      if (gate.final !== undefined) {
        // Rule 12: a gate shares only final answers; a PENDING or UNKNOWN one served only the reader that asked.
        assert(isFinalAnswer(gate.final), 'a gate shares only a final answer', request.txId, gate.final.state);
        return gate.final;
      }
      const remainingMs = deadlineMs - this.o.physicalClock.monotonicMs();
      if (gate.failures > failuresSeen || remainingMs <= 0) {
        // Another reader's request failed while this one waited (no primary, coordinator unreachable): this one
        // would fail alike, so it backs off instead of sending.
        lastError = gate.lastError;
      } else {
        const outcome = await this.sendThroughGate(gate, request, body, remainingMs);
        if (outcome.kind === 'answer') return outcome.answer;
        lastError = outcome.error;
      }
      const pauseMs = backoffMs(attempt + 1, this.backoffMsMin, this.backoffMsMax);
      await sleep(this.o.timers, Math.min(pauseMs, Math.max(1, deadlineMs - this.o.physicalClock.monotonicMs())));
    }
  }

  /** The one commit partition request in flight for the tx from this node; a final answer is kept for every reader. */
  private async sendThroughGate(
    gate: CommitPartitionGate,
    request: IntentResolutionRequest,
    body: TxStateCommitPartitionRequest,
    remainingMs: number,
  ): Promise<
    { readonly kind: 'answer'; readonly answer: TxStateAnswer } | { readonly kind: 'failed'; readonly error: unknown }
  > {
    let release = (): void => {};
    gate.busy = new Promise((resolve) => {
      release = resolve;
    });
    try {
      const response = await requestPrimary(this.o, request.commitPartitionId, body, {
        timeoutMs: Math.max(1, Math.min(this.requestTimeoutMs, remainingMs)),
        timers: this.o.timers,
        deadline: { clock: this.o.physicalClock, atMs: this.o.physicalClock.monotonicMs() + remainingMs },
      });
      const answer = answerOf(response);
      if (answer !== null) {
        if (isFinalAnswer(answer)) gate.final = answer;
        return { kind: 'answer', answer };
      }
      return this.gateFailed(gate, new BasaltError('INTERNAL', 'the commit partition answered no state'));
    } catch (error) {
      if (!isBasaltError(error) || !error.retryable) throw error;
      return this.gateFailed(gate, error);
    } finally {
      gate.busy = undefined;
      release();
    }
  }

  private gateFailed(gate: CommitPartitionGate, error: unknown): { readonly kind: 'failed'; readonly error: unknown } {
    gate.failures += 1;
    gate.lastError = error;
    return { kind: 'failed', error };
  }

  private enterGate(txId: TxId): CommitPartitionGate {
    let gate = this.gates.get(txId);
    if (gate === undefined) {
      gate = { busy: undefined, failures: 0, lastError: undefined, final: undefined, users: 0 };
      this.gates.set(txId, gate);
    }
    gate.users += 1;
    assert(gate.users >= 1, 'a gate entered counts its user', txId, gate.users);
    return gate;
  }

  private leaveGate(txId: TxId, gate: CommitPartitionGate): void {
    gate.users -= 1;
    assert(gate.users >= 0, 'a gate left was entered first', txId, gate.users);
    if (gate.users === 0 && this.gates.get(txId) === gate) this.gates.delete(txId);
  }

  /**
   * Before a retry: a final outcome cached here meanwhile (another flight's answer) is the answer; a coordinator that
   * went gone meanwhile hands this reader to the tx's recovering flight (one request in flight per node and tx).
   */
  private settledMeanwhile(
    request: IntentResolutionRequest,
    coordinatorId: NodeId | undefined,
    recovering: boolean,
  ): Promise<TxStateAnswer> | undefined {
    const entry = this.o.txStates.entry(request.txId);
    if (entry !== undefined && isFinal(entry.state)) return Promise.resolve(outcomeOfEntry(entry));
    // The recovering flight itself keeps retrying.
    if (recovering || coordinatorId === undefined || coordinatorId === this.o.self.id) return undefined;
    if (!this.o.peers.isGone(coordinatorId)) return undefined;
    return this.joinRecovering(request, coordinatorId);
  }

  // ---------------------------------------------------------------------------------------- final outcomes

  /** Rule 11: only a true final outcome is cached and switches the row. */
  private onFinal(request: IntentResolutionRequest, outcome: TxStateAnswer & { state: 'COMMITTED' | 'ABORTED' }): void {
    assert(isTrueOutcome(outcome), 'only a true final outcome is cached or switches a row', request.txId);
    this.o.txStates.update(request.txId, {
      state: outcome.state,
      commitTimestamp: outcome.state === 'COMMITTED' ? outcome.commitTs : undefined,
      commitPartitionId: request.commitPartitionId,
      reason: 'resolution',
    });
    this.o.switcher?.schedule(request.partitionId, request.key, request.txId, outcome);
  }
}

function commitPartitionRequest(
  request: IntentResolutionRequest,
  coordinatorId: NodeId | undefined,
): TxStateCommitPartitionRequest {
  return {
    kind: 'TxStateCommitPartitionRequest',
    txId: request.txId,
    commitPartitionId: request.commitPartitionId,
    readTs: request.readTs,
    intentPartitionId: request.partitionId,
    key: request.key,
    ...(coordinatorId === undefined ? {} : { coordinatorId }),
    ...(request.newestCommitTs === undefined ? {} : { newestCommitTs: request.newestCommitTs }),
  };
}

/** The coordinator id embedded in a tx id; undefined for an id that does not parse (never from our own writes). */
function coordinatorOf(txId: TxId): NodeId | undefined {
  try {
    return nodeIdOf(txId);
  } catch {
    return undefined;
  }
}
