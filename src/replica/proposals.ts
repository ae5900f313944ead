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
 *   or can no longer apply here (`abandon`: Raft refused it, another leader overwrote its entry, a snapshot covered
 *   it, the group or node stopped).
 * Each proposal's callback runs exactly once.
 */
import { assert } from '../core/assert.js';
import { BasaltError, type ErrorCode } from '../core/errors.js';
import type { HybridTimestamp } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import type { HybridClock } from '../hlc/hybrid-clock.js';
import type { ApplyResult } from './apply-result.js';
import { encodeCommand, type PartitionCommand, type ProposalId } from './commands.js';
import type { ReplicaIncarnation } from './lease.js';

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

interface InFlight {
  readonly ts: HybridTimestamp;
  readonly onOutcome: (outcome: ProposalOutcome) => void;
}

export class ProposalTracker {
  readonly self: ReplicaIncarnation;
  private readonly clock: HybridClock;
  private readonly inFlightMax: number;
  /** By counter, in take order (= timestamp order). */
  private readonly inFlight = new Map<number, InFlight>();
  private counter = 0;

  constructor(self: ReplicaIncarnation, clock: HybridClock, inFlightMax: number = LIMITS.replicaProposalsInFlightMax) {
    assert(inFlightMax > 0, 'in-flight bound must be positive');
    this.self = self;
    this.clock = clock;
    this.inFlightMax = inFlightMax;
  }

  get inFlightCount(): number {
    return this.inFlight.size;
  }

  /** Takes a proposal timestamp and registers it in flight, in one step. `onOutcome` runs exactly once, later. */
  take(onOutcome: (outcome: ProposalOutcome) => void): TakeResult {
    if (this.inFlight.size >= this.inFlightMax) return { kind: 'refused', code: 'OVERLOADED' };
    const ts = this.clock.now();
    this.counter++;
    this.inFlight.set(this.counter, { ts, onOutcome });
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

  /** Abandons every proposal in flight (the replica stops). */
  abandonAll(error: BasaltError): void {
    for (const counter of [...this.inFlight.keys()]) {
      this.settle(
        { nodeId: this.self.nodeId, incarnation: this.self.incarnation, counter },
        { kind: 'abandoned', error },
      );
    }
  }

  private settle(id: ProposalId, outcome: ProposalOutcome): boolean {
    if (!this.owns(id)) return false;
    const p = this.inFlight.get(id.counter);
    if (p === undefined) return false;
    this.inFlight.delete(id.counter);
    p.onOutcome(outcome);
    return true;
  }
}

/** Submits encoded bytes to Raft; resolves once committed and applied here (the RaftDriver's `propose`). */
export type SubmitProposal = (bytes: Uint8Array) => Promise<unknown>;

/**
 * Proposes one command and resolves with its apply result on this replica. `build` receives the proposal id and
 * timestamp taken in one step with registering it in flight. Rejects (and abandons the proposal) when the tracker is
 * full, the command is malformed, or Raft refuses or loses it; those errors keep their codes (NOT_LEADER, TIMEOUT for
 * "outcome unknown", OVERLOADED, ...).
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
    try {
      bytes = encodeCommand(build(taken.proposal));
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
      (error: unknown) => tracker.abandon(id, asBasaltError(error, 'INTERNAL')),
    );
  });
}

function asBasaltError(error: unknown, code: ErrorCode): BasaltError {
  if (error instanceof BasaltError) return error;
  return new BasaltError(code, error instanceof Error ? error.message : String(error), undefined, { cause: error });
}
