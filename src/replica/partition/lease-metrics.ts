/**
 * Lease changes as one replica's applied state sees them, for the node's operations counters. Counted where the
 * change happens: a replica's state machine tells its lease observers of every change of the applied lease, and
 * `leaseCounting` turns each into counter bumps on the node's counters.
 *
 * Per transition (previous lease → new lease):
 * - a holder change: the new lease's holder differs from the previous one's (a first lease counts; an extension or a
 *   new lease by the same holder does not);
 * - acquired: this replica incarnation holds the new lease and did not hold the previous one;
 * - lost: this replica incarnation held the previous lease and does not hold the new one.
 * Holders are replica incarnations (rule 2): a restarted replica never holds its predecessor's lease, so a lease
 * taken over from one's own earlier incarnation counts as acquired and not as lost.
 */
import type { CounterSink } from '../../core/counters.js';
import { type LeaseHolder, sameHolder } from './lease.js';
import type { LeaseListener, LeaseTransition } from './state-machine.js';

/** Names of the node counters bumped here. */
export const LEASE_COUNTERS = {
  changes: 'lease.changes',
  acquired: 'lease.acquired',
  lost: 'lease.lost',
} as const;

export interface LeaseTransitionFacts {
  readonly holderChanged: boolean;
  readonly acquired: boolean;
  readonly lost: boolean;
}

export function classifyLeaseTransition(transition: LeaseTransition, self: LeaseHolder): LeaseTransitionFacts {
  const { previous, lease } = transition;
  const heldBefore = previous !== null && sameHolder(previous.holder, self);
  const holdsNow = sameHolder(lease.holder, self);
  return {
    holderChanged: previous === null || !sameHolder(previous.holder, lease.holder),
    acquired: holdsNow && !heldBefore,
    lost: heldBefore && !holdsNow,
  };
}

/** A lease observer for the replica incarnation `self` that counts its transitions on `sink`. */
export function leaseCounting(sink: CounterSink, self: LeaseHolder): LeaseListener {
  return (transition) => {
    const facts = classifyLeaseTransition(transition, self);
    if (facts.holderChanged) sink.add(LEASE_COUNTERS.changes);
    if (facts.acquired) sink.add(LEASE_COUNTERS.acquired);
    if (facts.lost) sink.add(LEASE_COUNTERS.lost);
  };
}
