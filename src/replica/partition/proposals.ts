/**
 * The proposals of one replica incarnation (one partition, one replica object): their timestamps in flight for the
 * primary's readable safe time, and the route of each apply result back to its proposer (rule 4: the primary answers
 * from the apply result).
 *
 * Invariants (rule 9; design-review #11 b, c):
 * - `take` reads the proposal timestamp from the clock and registers it in flight in one synchronous step, so no read
 *   can be served between taking a timestamp and registering it.
 * - Timestamps come from `clock.now()`, which is strictly increasing, so take order is timestamp order and the
 *   oldest live proposal holds the smallest in-flight timestamp.
 * - A proposal leaves the in-flight set only when it was applied here (`settleApplied`, called by the state machine)
 *   or can no longer apply here (`abandon`: Raft refused it, another leader's entry was applied in its place, a
 *   snapshot covered it, the group or node stopped).
 * - The answer to the proposer and the end of the in-flight timestamp are two things. A proposal whose entry left the
 *   local log while other logs may still hold it (`hold`, EntryLeftLogError) is answered at once with that failure
 *   (its outcome is unknown, rule 7: a tx whose write it was becomes abort-only), but stays in flight until it is
 *   decided: until the state machine applied an entry at its log index or above (then the entry there is decided, and
 *   if it was this one it was applied here and settled), or, for a data command (an UpdateBatch too: its items share
 *   one token), until the applied lease no longer names the lease it was proposed under (rule 4: it would apply as a
 *   no-op; a replaced lease never becomes current again, rule 3). Until then a later leader may still commit it with an effective timestamp at or above its
 *   proposal timestamp, so the primary's readable safe time must stay below it.
 * Each proposal's callback runs exactly once.
 */
import { assert } from '../../core/assert.js';
import { BasaltError, type ErrorCode } from '../../core/errors.js';
import type { HybridTimestamp } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import type { HybridClock } from '../../hlc/hybrid-clock.js';
import { EntryLeftLogError } from '../../raft/driver.js';
import type { ApplyResult } from './apply-result.js';
import { dataTokenOf, encodeCommand, type PartitionCommand, type ProposalId } from './commands.js';
import { type Lease, type LeaseToken, type ReplicaIncarnation, tokenNames } from './lease.js';

export type ProposalOutcome =
  | { readonly kind: 'applied'; readonly result: ApplyResult }
  | { readonly kind: 'abandoned'; readonly error: BasaltError };

export interface TakenProposal {
  readonly id: ProposalId;
  readonly ts: HybridTimestamp;
}

export type TakeResult =
  | { readonly kind: 'taken'; readonly proposal: TakenProposal }
  | { readonly kind: 'refused'; readonly code: 'OVERLOADED' };

/** Where a held proposal's entry was proposed, and the lease a data command was proposed under. */
export interface HeldAt {
  readonly index: number;
  readonly token: LeaseToken | undefined;
}

interface InFlight {
  readonly ts: HybridTimestamp;
  /** Null once the proposer was answered while the proposal may still apply (`hold`). */
  onOutcome: ((outcome: ProposalOutcome) => void) | null;
  held: HeldAt | null;
}

export class ProposalTracker {
  readonly self: ReplicaIncarnation;
  private readonly clock: HybridClock;
  private readonly inFlightMax: number;
  /** By counter, in take order (= timestamp order). */
  private readonly inFlight = new Map<number, InFlight>();
  private counter = 0;
  /** Held proposals in flight (a subset of `inFlight`), by counter: each apply looks at these only. */
  private readonly held = new Map<number, InFlight>();
  /** The applied position as the state machine last reported it (`appliedThrough`); the lease unknown before. */
  private appliedIndex = 0;
  private appliedLease: Lease | null | undefined = undefined;

  constructor(self: ReplicaIncarnation, clock: HybridClock, inFlightMax: number = LIMITS.replicaProposalsInFlightMax) {
    assert(inFlightMax > 0, 'in-flight bound must be positive');
    this.self = self;
    this.clock = clock;
    this.inFlightMax = inFlightMax;
  }

  /** Proposals whose timestamp is in flight, held ones included. */
  get inFlightCount(): number {
    return this.inFlight.size;
  }

  /** Proposals answered already that may still apply (see the module header). */
  get heldInFlightCount(): number {
    return this.held.size;
  }

  /** Takes a proposal timestamp and registers it in flight, in one step. `onOutcome` runs exactly once, later. */
  take(onOutcome: (outcome: ProposalOutcome) => void): TakeResult {
    if (this.inFlight.size >= this.inFlightMax) return { kind: 'refused', code: 'OVERLOADED' };
    const ts = this.clock.now();
    this.counter++;
    this.inFlight.set(this.counter, { ts, onOutcome, held: null });
    const id: ProposalId = { nodeId: this.self.nodeId, incarnation: this.self.incarnation, counter: this.counter };
    return { kind: 'taken', proposal: { id, ts } };
  }

  /** The smallest timestamp of a proposal that may still apply, if any. */
  smallestInFlight(): HybridTimestamp | undefined {
    for (const p of this.inFlight.values()) return p.ts;
    return undefined;
  }

  /** True if `id` was taken by this tracker (this replica incarnation), whether or not it is still in flight. */
  owns(id: ProposalId): boolean {
    return id.nodeId === this.self.nodeId && id.incarnation === this.self.incarnation;
  }

  /** The state machine applied the command of `id` with `result`; false if it was not in flight here. */
  settleApplied(id: ProposalId, result: ApplyResult): boolean {
    return this.settle(id, { kind: 'applied', result });
  }

  /** True while the proposal of `id` may still apply here. */
  isInFlight(id: ProposalId): boolean {
    return this.owns(id) && this.inFlight.has(id.counter);
  }

  /** The proposal of `id` can no longer apply here; false if it was not in flight. */
  abandon(id: ProposalId, error: BasaltError): boolean {
    return this.settle(id, { kind: 'abandoned', error });
  }

  /**
   * The entry of `id` left the local log but may still apply (EntryLeftLogError): its proposer is answered with
   * `error` now, and its timestamp stays in flight until `at` is decided (see the module header). False if it was not
   * in flight or was answered already.
   */
  hold(id: ProposalId, error: BasaltError, at: HeldAt): boolean {
    if (!this.owns(id)) return false;
    const p = this.inFlight.get(id.counter);
    if (p === undefined || p.onOutcome === null) return false;
    const answer = p.onOutcome;
    p.onOutcome = null;
    p.held = at;
    this.held.set(id.counter, p);
    if (this.decided(at)) this.remove(id.counter, p);
    answer({ kind: 'abandoned', error });
    return true;
  }

  /**
   * The state machine applied everything up to `index` and `lease` is the applied lease (after each apply, after a
   * restore, and once at its start): held proposals that this decides leave the in-flight set.
   */
  appliedThrough(index: number, lease: Lease | null): void {
    assert(index >= this.appliedIndex, 'the applied index never goes back', this.appliedIndex, index);
    this.appliedIndex = index;
    this.appliedLease = lease;
    if (this.held.size === 0) return;
    for (const [counter, p] of [...this.held]) {
      if (p.held !== null && this.decided(p.held)) this.remove(counter, p);
    }
  }

  /** A held proposal can no longer apply here (see the module header). */
  private decided(at: HeldAt): boolean {
    if (at.index <= this.appliedIndex) return true;
    return at.token !== undefined && this.appliedLease !== undefined && !tokenNames(at.token, this.appliedLease);
  }

  /** Abandons every proposal in flight (the replica stops). */
  abandonAll(error: BasaltError): void {
    for (const counter of [...this.inFlight.keys()]) {
      this.settle(
        { nodeId: this.self.nodeId, incarnation: this.self.incarnation, counter },
        { kind: 'abandoned', error },
      );
    }
  }

  /** Removes `id` from the in-flight set and answers its proposer unless a `hold` did already. */
  private settle(id: ProposalId, outcome: ProposalOutcome): boolean {
    if (!this.owns(id)) return false;
    const p = this.inFlight.get(id.counter);
    if (p === undefined) return false;
    this.remove(id.counter, p);
    p.onOutcome?.(outcome);
    return true;
  }

  private remove(counter: number, p: InFlight): void {
    this.inFlight.delete(counter);
    if (p.held !== null) this.held.delete(counter);
  }
}

/** Submits encoded bytes to Raft; resolves once committed and applied here (the RaftDriver's `propose`). */
export type SubmitProposal = (bytes: Uint8Array) => Promise<unknown>;

/**
 * Proposes one command and resolves with its apply result on this replica. `build` receives the proposal id and
 * timestamp taken in one step with registering it in flight. Rejects (and abandons the proposal) when the tracker is
 * full, the command is malformed, or Raft refuses or loses it; those errors keep their codes (NOT_LEADER, TIMEOUT for
 * "outcome unknown", OVERLOADED, ...). When its entry left the local log but may still commit elsewhere, it rejects
 * as well, and the proposal is held in flight until that is decided (`hold`).
 */
export function proposeCommand(
  tracker: ProposalTracker,
  build: (proposal: TakenProposal) => PartitionCommand,
  submit: SubmitProposal,
): Promise<ApplyResult> {
  return new Promise((resolve, reject) => {
    const taken = tracker.take((outcome) => {
      if (outcome.kind === 'applied') resolve(outcome.result);
      else reject(outcome.error);
    });
    if (taken.kind === 'refused') {
      reject(new BasaltError('OVERLOADED', 'too many replica proposals in flight'));
      return;
    }
    const { id } = taken.proposal;
    let bytes: Uint8Array;
    let token: LeaseToken | undefined;
    try {
      const command = build(taken.proposal);
      token = dataTokenOf(command);
      bytes = encodeCommand(command);
    } catch (error) {
      tracker.abandon(id, asBasaltError(error, 'INVALID_ARGUMENT'));
      return;
    }
    submit(bytes).then(
      // Applied here means settled already by the state machine; still in flight would be a lost result. The error is
      // built only then: a BasaltError captures a stack, and every proposal comes this way.
      () => {
        if (tracker.isInFlight(id)) {
          tracker.abandon(id, new BasaltError('INTERNAL', 'the proposal was applied but its result was not seen'));
        }
      },
      (error: unknown) => {
        if (error instanceof EntryLeftLogError) tracker.hold(id, error, { index: error.index, token });
        else tracker.abandon(id, asBasaltError(error, 'INTERNAL'));
      },
    );
  });
}

function asBasaltError(error: unknown, code: ErrorCode): BasaltError {
  if (error instanceof BasaltError) return error;
  return new BasaltError(code, error instanceof Error ? error.message : String(error), undefined, { cause: error });
}
