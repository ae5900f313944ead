/**
 * The lease-holder logic as pure decisions over applied state (rules 1–6, 19). The replica's driver asks them after
 * every apply and on a timer, and performs what they return (propose a command, answer a request).
 *
 * - Lease proposals: only the Raft leader, and only after it applied an entry of its own term (rule 3), so that it
 *   decides from a lease state at least as new as any lease its predecessors committed. No lease → a first lease from
 *   `now`. Its own lease → an extension (same token, higher expiration) once less than `renewMarginMs` of its acting
 *   window is left, unless it is handing the lease over (rule 5: it simply stops renewing). Anyone else's lease, or an
 *   earlier incarnation's → a takeover starting at that lease's expiration (or now, if later), never earlier.
 * - Acting: `checkPrimary` is rule 1 + 19 for a request carrying an enlistment token (or none, to enlist), answering
 *   PRIMARY_MISS with the holder hint otherwise. `confirmLease` is rule 6's `{token, commitTs}` confirmation: the
 *   caller absorbs commitTs into its clock first and passes the resulting `now`.
 * - Idle safe time: the leader proposes a SafeTimeSync when applied safe time has not moved for `idleMs`.
 * - Upkeep: `decideUpkeep` is the whole of what a replica's upkeep does on one occasion (a tick, or a drain poll),
 *   built from the decisions above plus rule 19's leadership hand-off, rule 5's hand-over timing and "gained primacy:
 *   re-run the owed cleanups"; the host only performs the actions it lists.
 */
import { invalidArgument } from '../../core/errors.js';
import type { HybridTimestamp, NodeId, NodeName, Term } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import { addMs, maxTimestamp } from '../../hlc/timestamp.js';
import {
  actingEnd,
  checkActing,
  holdsUnexpired,
  type Lease,
  type LeaseToken,
  leaseView,
  type ReplicaIncarnation,
  sameHolder,
  sameToken,
  tokenOf,
} from './lease.js';

export interface LeaseTiming {
  readonly leaseDurationMs: number;
  /** Renew once less than this is left before the holder's acting window ends (expiration − 2·maxClockSkew). */
  readonly renewMarginMs: number;
  readonly maxClockSkewMs: number;
}

/**
 * Checks the limits against each other: a holder stops acting 2·maxClockSkew before expiration and renews
 * `renewMarginMs` before that, so a lease must be longer than both together (else a fresh lease would be renewed at
 * once, or would never let its holder act). Misconfiguration throws INVALID_ARGUMENT.
 */
export function leaseTiming(
  maxClockSkewMs: number,
  leaseDurationMs: number = LIMITS.leaseDurationMsDefault,
  renewMarginMs: number = LIMITS.leaseRenewMarginMsDefault,
): LeaseTiming {
  if (!Number.isInteger(leaseDurationMs) || !Number.isInteger(renewMarginMs) || renewMarginMs <= 0) {
    throw invalidArgument('lease duration and renewal margin must be positive integers (ms)');
  }
  if (leaseDurationMs <= 2 * maxClockSkewMs + renewMarginMs) {
    throw invalidArgument('a lease must last longer than 2·maxClockSkew plus the renewal margin', {
      leaseDurationMs,
      maxClockSkewMs,
      renewMarginMs,
    });
  }
  return { leaseDurationMs, renewMarginMs, maxClockSkewMs };
}

// ------------------------------------------------------------------------------------------ lease proposals

export interface LeaseActionInput {
  readonly self: ReplicaIncarnation;
  readonly selfName: NodeName;
  /** This node leads the partition's Raft group in `term`. */
  readonly isLeader: boolean;
  readonly term: Term;
  /** Term of the last entry this replica applied. */
  readonly appliedTerm: Term;
  /** The applied lease. */
  readonly lease: Lease | null;
  readonly now: HybridTimestamp;
  readonly timing: LeaseTiming;
  /** A Lease command of ours is proposed and not yet applied or abandoned: wait for it. */
  readonly leaseProposalInFlight: boolean;
  /** The holder is handing its lease over (graceful shutdown or rebalancing): it stops renewing (rule 5). */
  readonly handingOver?: boolean;
  /**
   * The leadership is about to move to another replica (a planned move): the holder stops renewing but keeps acting,
   * so that its lease runs out while it still serves and the successor's lease, starting at the expiration, follows
   * with no more than the stasis window between them (rule 5).
   */
  readonly renewalsPaused?: boolean;
  /** Rule 19: false while this node's clock is beyond the bound; it then proposes no lease at all. */
  readonly clockWithinBound?: boolean;
}

export type LeaseAction =
  | {
      readonly kind: 'none';
      readonly reason:
        | 'not-leader'
        | 'own-term-not-applied'
        | 'proposal-in-flight'
        | 'lease-fresh'
        | 'handing-over'
        | 'renewals-paused'
        | 'clock-offset'
        | 'stopped'
        | 'no-raft-group'
        | 'drain-poll'
        | 'resting';
    }
  | LeaseProposal;

export interface LeaseProposal {
  readonly kind: 'propose';
  readonly change: 'first' | 'renewal' | 'takeover';
  readonly lease: Lease;
  readonly replaces: LeaseToken | null;
}

export function decideLeaseAction(input: LeaseActionInput): LeaseAction {
  const { self, selfName, lease, now, timing } = input;
  if (!input.isLeader) return { kind: 'none', reason: 'not-leader' };
  if (input.appliedTerm !== input.term) return { kind: 'none', reason: 'own-term-not-applied' };
  if (input.leaseProposalInFlight) return { kind: 'none', reason: 'proposal-in-flight' };
  if (input.clockWithinBound === false) return { kind: 'none', reason: 'clock-offset' };
  const duration = timing.leaseDurationMs;
  if (lease === null) {
    const first: Lease = { holder: self, holderName: selfName, start: now, expiration: addMs(now, duration) };
    return { kind: 'propose', change: 'first', lease: first, replaces: null };
  }
  if (sameHolder(lease.holder, self)) {
    if (input.handingOver === true) return { kind: 'none', reason: 'handing-over' };
    if (input.renewalsPaused === true) return { kind: 'none', reason: 'renewals-paused' };
    const renewAt = addMs(actingEnd(lease, timing.maxClockSkewMs), -timing.renewMarginMs);
    if (now < renewAt) return { kind: 'none', reason: 'lease-fresh' };
    // duration > 2·skew + margin and now ≥ expiration − 2·skew − margin, so this always raises the expiration.
    const extended: Lease = { ...lease, expiration: maxTimestamp(addMs(now, duration), addMs(lease.expiration, 1)) };
    return { kind: 'propose', change: 'renewal', lease: extended, replaces: tokenOf(lease) };
  }
  // Rule 5: the next lease starts at the current expiration, never earlier, so the two never overlap.
  const start = maxTimestamp(lease.expiration, now);
  const takeover: Lease = { holder: self, holderName: selfName, start, expiration: addMs(start, duration) };
  return { kind: 'propose', change: 'takeover', lease: takeover, replaces: tokenOf(lease) };
}

// ------------------------------------------------------------------------------------------ acting as primary

export interface HolderHint {
  readonly nodeName: NodeName;
  readonly nodeId: NodeId;
}

export type PrimaryCheck =
  | { readonly kind: 'ok'; readonly lease: Lease; readonly token: LeaseToken }
  | {
      readonly kind: 'PRIMARY_MISS';
      readonly reason: 'no-lease' | 'not-holder' | 'not-started' | 'ended' | 'token-mismatch' | 'clock-offset';
      /** The applied lease's holder, if any: where the request should go instead (may be this node, later). */
      readonly hint: HolderHint | null;
      /** For `not-started`: the lease start, so the caller may choose to wait until then instead. */
      readonly start?: HybridTimestamp;
    };

/**
 * Rules 1 and 19 for a primary-only request: this replica must hold the applied lease and be inside its acting
 * window at `now` (read after absorbing the request's timestamp), and the request's enlistment token, if it has one,
 * must name that lease. A request without a token enlists: the returned token is the one to record. While this node's
 * clock is beyond the bound (`clockWithinBound` false) it answers PRIMARY_MISS `clock-offset` (rule 19).
 */
export function checkPrimary(
  lease: Lease | null,
  self: ReplicaIncarnation,
  now: HybridTimestamp,
  maxClockSkewMs: number,
  token?: LeaseToken,
  clockWithinBound = true,
): PrimaryCheck {
  const acting = checkActing(lease, self, now, maxClockSkewMs, clockWithinBound);
  const hint = lease === null ? null : { nodeName: lease.holderName, nodeId: lease.holder.nodeId };
  switch (acting.kind) {
    case 'acting': {
      const current = tokenOf(acting.lease);
      if (token !== undefined && !sameToken(token, current))
        return { kind: 'PRIMARY_MISS', reason: 'token-mismatch', hint };
      return { kind: 'ok', lease: acting.lease, token: current };
    }
    case 'not-started':
      return { kind: 'PRIMARY_MISS', reason: 'not-started', hint, start: acting.lease.start };
    case 'no-lease':
    case 'not-holder':
    case 'ended':
    case 'clock-offset':
      return { kind: 'PRIMARY_MISS', reason: acting.kind, hint };
  }
}

export type LeaseConfirmation =
  | { readonly confirmed: true; readonly lease: Lease }
  | { readonly confirmed: false; readonly hint: HolderHint | null };

/**
 * Rule 6: the coordinator asks whether this primary still acts under `token` at `commitTs`. The caller has absorbed
 * commitTs (so `now > commitTs`); yes only if this replica still acts under that very token at `now`, which also
 * puts commitTs below the lease's expiration.
 */
export function confirmLease(
  lease: Lease | null,
  self: ReplicaIncarnation,
  now: HybridTimestamp,
  maxClockSkewMs: number,
  token: LeaseToken,
  commitTs: HybridTimestamp,
  clockWithinBound = true,
): LeaseConfirmation {
  const check = checkPrimary(lease, self, now, maxClockSkewMs, token, clockWithinBound);
  if (check.kind === 'ok' && commitTs < check.lease.expiration && commitTs < now) {
    return { confirmed: true, lease: check.lease };
  }
  return { confirmed: false, hint: check.kind === 'ok' ? null : check.hint };
}

// ------------------------------------------------------------------------------------------ data sequence numbers

/** Hands out rule 4's per-lease sequence numbers on the holder: 1, 2, ... under each token, restarting per token. */
export class DataSequence {
  private token: LeaseToken | undefined;
  private last = 0;

  next(token: LeaseToken): number {
    if (this.token === undefined || !sameToken(this.token, token)) {
      this.token = token;
      this.last = 0;
    }
    this.last++;
    return this.last;
  }
}

// ------------------------------------------------------------------------------------------ idle safe time

export interface SafeTimeSyncInput {
  readonly isLeader: boolean;
  readonly term: Term;
  readonly appliedTerm: Term;
  /** Monotonic ms when applied safe time last moved on this replica. */
  readonly lastAdvanceMs: number;
  readonly nowMs: number;
  /** Proposals of this replica in flight (any of them will advance safe time when it applies). */
  readonly inFlight: number;
  readonly idleMs?: number;
}

/** True when the leader should propose an idle SafeTimeSync now. */
export function shouldProposeSafeTimeSync(input: SafeTimeSyncInput): boolean {
  const idleMs = input.idleMs ?? LIMITS.safeTimeSyncIdleMsDefault;
  return (
    input.isLeader &&
    input.appliedTerm === input.term &&
    input.inFlight === 0 &&
    input.nowMs - input.lastAdvanceMs >= idleMs
  );
}

// ------------------------------------------------------------------------------------------ upkeep

/** What a graceful hand-over leaves for the leadership to move and the successor's lease to commit. */
export const HAND_OVER_MARGIN_MS = 500;

/** The Raft state of a partition on this node, as the host reads it from the driver. */
export interface RaftView {
  readonly isLeader: boolean;
  readonly term: Term;
}

export type UpkeepOccasion =
  /** A timer tick, a leader change or an apply. */
  | { readonly kind: 'tick' }
  /** One poll of a graceful drain (rule 5), `remainingMs` before the drain's bound. */
  | { readonly kind: 'drain'; readonly remainingMs: number };

export interface UpkeepInput {
  readonly occasion: UpkeepOccasion;
  readonly self: ReplicaIncarnation;
  readonly selfName: NodeName;
  readonly timing: LeaseTiming;
  /** The partition's Raft state here; undefined while its group does not run on this node. */
  readonly raft: RaftView | undefined;
  /** Term of the last entry this replica applied. */
  readonly appliedTerm: Term;
  /** The applied lease. */
  readonly lease: Lease | null;
  readonly now: HybridTimestamp;
  readonly leaseProposalInFlight: boolean;
  /** The holder is handing its lease over (rule 5): it stops renewing. */
  readonly handingOver: boolean;
  /** A planned leadership move: the holder stops renewing, and keeps acting until its lease runs out. */
  readonly renewalsPaused?: boolean;
  /** Rule 19: false while this node's clock is beyond the bound from the majority. */
  readonly clockWithinBound: boolean;
  /** The replica object stopped: it proposes nothing any more. */
  readonly stopped: boolean;
  /** Nobody uses the partition (partition-replica.ts "Rest"): no lease renewal and no idle SafeTimeSync. */
  readonly resting?: boolean;
  /** Monotonic ms when applied safe time last moved here, and now. */
  readonly lastSafeTimeAdvanceMs: number;
  readonly nowMs: number;
  readonly proposalsInFlight: number;
  readonly safeTimeSyncIdleMs?: number;
  /** The first live replica of the partition, other than this node, that can take the leadership. */
  readonly successor: NodeName | undefined;
  /** This replica acted as primary at the previous tick. */
  readonly wasActing: boolean;
}

export type UpkeepAction =
  | { readonly kind: 'propose-lease'; readonly proposal: LeaseProposal }
  | { readonly kind: 'propose-safe-time-sync' }
  | { readonly kind: 'transfer-leadership'; readonly to: NodeName; readonly why: 'clock-offset' | 'hand-over' }
  /** Gained primacy: re-run the cleanups this commit partition's records still owe (idempotent). */
  | { readonly kind: 'recover-cleanups' };

export interface UpkeepDecision {
  /** In the order to perform them: proposals, then leadership, then cleanups. */
  readonly actions: readonly UpkeepAction[];
  /** The lease decision of a tick (why nothing is proposed, or the proposal among `actions`). */
  readonly lease: LeaseAction;
  /** This replica acts as primary now: the next occasion's `wasActing`. */
  readonly acting: boolean;
  /** Drain: nothing is left to hand over on this partition. */
  readonly handedOver: boolean;
}

/**
 * Everything the upkeep of one replica decides, as a pure function of what it sees:
 * - a tick proposes what `decideLeaseAction` calls for and an idle SafeTimeSync (never both: a lease proposal in
 *   flight advances safe time too), and neither while the replica rests (nobody uses the partition: its lease may
 *   lapse, rules 1 and 3 still decide when it acts, and the first request wakes it); a leader whose clock is beyond the bound hands its group to a live successor
 *   (rule 19: it proposes no lease, so that one takes the lease over once the current one lapses); and a replica that
 *   acts as primary now but did not at the previous tick re-runs the cleanups it owes;
 * - a drain poll times the hand-over (rule 5): a leader keeps serving under its own lease while that lets it act, unless
 *   its acting window would outlast the drain's bound (a takeover lease can end up to two durations ahead), then hands
 *   the leadership to the successor, whose takeover lease starts at the current expiration. A partition is handed over
 *   once this replica leads nothing and holds no unexpired lease, or has nobody to hand to.
 */
export function decideUpkeep(input: UpkeepInput): UpkeepDecision {
  return input.occasion.kind === 'drain' ? decideDrainPoll(input, input.occasion.remainingMs) : decideTick(input);
}

function decideTick(input: UpkeepInput): UpkeepDecision {
  const { raft, clockWithinBound } = input;
  if (raft === undefined) {
    return {
      actions: [],
      lease: { kind: 'none', reason: 'no-raft-group' },
      acting: input.wasActing,
      handedOver: false,
    };
  }
  const actions: UpkeepAction[] = [];
  const lease: LeaseAction = input.stopped
    ? { kind: 'none', reason: 'stopped' }
    : input.resting === true
      ? { kind: 'none', reason: 'resting' }
      : decideLeaseAction({
          self: input.self,
          selfName: input.selfName,
          isLeader: raft.isLeader,
          term: raft.term,
          appliedTerm: input.appliedTerm,
          lease: input.lease,
          now: input.now,
          timing: input.timing,
          leaseProposalInFlight: input.leaseProposalInFlight,
          handingOver: input.handingOver,
          renewalsPaused: input.renewalsPaused,
          clockWithinBound,
        });
  if (lease.kind === 'propose') actions.push({ kind: 'propose-lease', proposal: lease });
  const sync =
    !input.stopped &&
    input.resting !== true &&
    lease.kind !== 'propose' &&
    shouldProposeSafeTimeSync({
      isLeader: raft.isLeader,
      term: raft.term,
      appliedTerm: input.appliedTerm,
      lastAdvanceMs: input.lastSafeTimeAdvanceMs,
      nowMs: input.nowMs,
      inFlight: input.proposalsInFlight,
      idleMs: input.safeTimeSyncIdleMs,
    });
  if (sync) actions.push({ kind: 'propose-safe-time-sync' });
  if (raft.isLeader && !clockWithinBound && input.successor !== undefined) {
    actions.push({ kind: 'transfer-leadership', to: input.successor, why: 'clock-offset' });
  }
  const acting =
    checkActing(input.lease, input.self, input.now, input.timing.maxClockSkewMs, clockWithinBound).kind === 'acting';
  if (acting && !input.wasActing) actions.push({ kind: 'recover-cleanups' });
  return { actions, lease, acting, handedOver: false };
}

function decideDrainPoll(input: UpkeepInput, remainingMs: number): UpkeepDecision {
  const poll = { lease: { kind: 'none', reason: 'drain-poll' }, acting: input.wasActing } as const;
  const { raft, successor, now } = input;
  if (raft === undefined || successor === undefined) return { ...poll, actions: [], handedOver: true };
  const view = leaseView(input.lease, input.self, now, input.timing.maxClockSkewMs);
  const holds = holdsUnexpired(view);
  if (!raft.isLeader) return { ...poll, actions: [], handedOver: !holds };
  const end = holds && view.lease !== null ? actingEnd(view.lease, input.timing.maxClockSkewMs) : now;
  const serve = now < end && end <= addMs(now, remainingMs - HAND_OVER_MARGIN_MS);
  const actions: UpkeepAction[] = serve ? [] : [{ kind: 'transfer-leadership', to: successor, why: 'hand-over' }];
  return { ...poll, actions, handedOver: false };
}
