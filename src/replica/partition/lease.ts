/**
 * Leases: the primary of a partition is the holder of the lease applied in the partition's own Raft log (DESIGN §2,
 * safety rules 1–5 and 19). Pure data and pure decisions; the state machine applies them, the primary logic uses them.
 *
 * Model:
 * - A lease is the half-open HLC interval `[start, expiration)` granted to one *replica incarnation*: the holder's
 *   ephemeral node id plus an incarnation drawn when the replica object is created (rule 2), so a restarted or
 *   re-created replica is a different holder and never inherits a lease, even one naming its node.
 * - The enlistment token is `(holder, start)`; an extension keeps the start (and so the token) and only raises the
 *   expiration; a new lease, whoever holds it, starts at or after the current expiration (rules 3 and 5). So leases
 *   never overlap in HLC time and a transfer never shortens one.
 * - A Lease command names the lease it extends or replaces; it applies only if that lease is still current, else it is
 *   a deterministic no-op (rule 3; design-review #4).
 * - A holder acts (grants locks, serves primary requests, proposes data commands, confirms leases) only while
 *   `start ≤ now < expiration − 2·maxClockSkew` with `now` read after absorbing the request's timestamp (rules 1, 19),
 *   and only while its node's clock is measured within the bound from the majority (rule 19: the stasis window above
 *   assumes it; a node beyond it stops acting until it is back within).
 * - "Who holds the lease as of now" has one answer, `leaseView(lease, self, now)`: the phase `now` falls in and whether
 *   `self` is the holder. Acting (`actingOf`), routing hints (`routingHolder`), the operator's primary
 *   (`startedHolder`) and hand-over (`holdsUnexpired`) all read it.
 */
import type { HybridTimestamp, NodeId, NodeName } from '../../core/ids.js';
import type { Random } from '../../env/random.js';
import { addMs } from '../../hlc/timestamp.js';

/** One replica object: its node's ephemeral id and an incarnation drawn when the replica object was created. */
export interface ReplicaIncarnation {
  readonly nodeId: NodeId;
  readonly incarnation: string;
}

/** The lease holder is a replica incarnation (rule 2). */
export type LeaseHolder = ReplicaIncarnation;

export interface Lease {
  readonly holder: LeaseHolder;
  /** The holder's stable node name: the hint sent with PRIMARY_MISS, so requests can be routed to it. */
  readonly holderName: NodeName;
  readonly start: HybridTimestamp;
  readonly expiration: HybridTimestamp;
}

/** The enlistment token: names one lease across its extensions. */
export interface LeaseToken {
  readonly holder: LeaseHolder;
  readonly start: HybridTimestamp;
}

/** Draws a fresh incarnation for a replica object being created (never reuse one across replica objects). */
export function newReplicaIncarnation(nodeId: NodeId, random: Random): ReplicaIncarnation {
  return { nodeId, incarnation: random.uuid() };
}

export function sameHolder(a: LeaseHolder, b: LeaseHolder): boolean {
  return a.nodeId === b.nodeId && a.incarnation === b.incarnation;
}

export function tokenOf(lease: Lease): LeaseToken {
  return { holder: lease.holder, start: lease.start };
}

export function sameToken(a: LeaseToken, b: LeaseToken): boolean {
  return sameHolder(a.holder, b.holder) && a.start === b.start;
}

/** True if `token` names `lease` (the lease current at some log position; none means no token matches). */
export function tokenNames(token: LeaseToken, lease: Lease | null): boolean {
  return lease !== null && sameToken(token, tokenOf(lease));
}

/** Well-formed: a non-empty interval. */
export function isWellFormedLease(lease: Lease): boolean {
  return lease.start > 0n && lease.start < lease.expiration;
}

// ------------------------------------------------------------------------------------------ rule 3 at apply

export type LeaseChange = 'first' | 'extension' | 'new-lease';

export type LeaseRejection =
  /** The command names a lease that is no longer (or not yet) current. */
  | 'replaces-not-current'
  /** Same token, but the expiration would not rise. */
  | 'not-an-extension'
  /** A different lease starting before the current expiration: it would overlap. */
  | 'overlaps-current';

export type LeaseDecision =
  | { readonly kind: 'apply'; readonly change: LeaseChange; readonly lease: Lease }
  | { readonly kind: 'reject'; readonly reason: LeaseRejection };

/**
 * Rule 3, deterministic at apply: `proposed` (naming `replaces`, null = "there is no lease yet") becomes the current
 * lease only if `replaces` names the lease current now; an extension keeps the token and raises the expiration; any
 * other lease starts at or after the current expiration. Everything else is a no-op.
 */
export function decideLease(current: Lease | null, proposed: Lease, replaces: LeaseToken | null): LeaseDecision {
  if (current === null) {
    return replaces === null
      ? { kind: 'apply', change: 'first', lease: proposed }
      : { kind: 'reject', reason: 'replaces-not-current' };
  }
  if (replaces === null || !sameToken(replaces, tokenOf(current))) {
    return { kind: 'reject', reason: 'replaces-not-current' };
  }
  if (sameToken(tokenOf(proposed), tokenOf(current))) {
    return proposed.expiration > current.expiration && proposed.holderName === current.holderName
      ? { kind: 'apply', change: 'extension', lease: proposed }
      : { kind: 'reject', reason: 'not-an-extension' };
  }
  return proposed.start >= current.expiration
    ? { kind: 'apply', change: 'new-lease', lease: proposed }
    : { kind: 'reject', reason: 'overlaps-current' };
}

// ------------------------------------------------------------------------------------------ the lease as of now

/** The end of the holder's acting window: it stops `2·maxClockSkew` before the expiration (rule 19, stasis). */
export function actingEnd(lease: Lease, maxClockSkewMs: number): HybridTimestamp {
  return addMs(lease.expiration, -2 * maxClockSkewMs);
}

/**
 * Where `now` falls in a lease `[start, expiration)`: before its start, inside the holder's acting window
 * `[start, expiration − 2·maxClockSkew)`, in the stasis before the expiration (rule 19), or past the expiration.
 * Applied leases are well-formed (start < expiration, checked where they are decoded), so the phases follow each other.
 */
export type LeasePhase = 'none' | 'not-started' | 'acting' | 'stasis' | 'expired';

/** The applied lease as one replica sees it at one `now`: every "who holds the lease now" question reads this. */
export interface LeaseView {
  readonly lease: Lease | null;
  readonly phase: LeasePhase;
  /** This very replica incarnation holds `lease`, whatever its phase (rule 2). */
  readonly mine: boolean;
}

export function leaseView(
  lease: Lease | null,
  self: ReplicaIncarnation,
  now: HybridTimestamp,
  maxClockSkewMs: number,
): LeaseView {
  if (lease === null) return { lease, phase: 'none', mine: false };
  return { lease, phase: phaseAt(lease, now, maxClockSkewMs), mine: sameHolder(lease.holder, self) };
}

function phaseAt(lease: Lease, now: HybridTimestamp, maxClockSkewMs: number): LeasePhase {
  if (now < lease.start) return 'not-started';
  if (now >= lease.expiration) return 'expired';
  if (now >= actingEnd(lease, maxClockSkewMs)) return 'stasis';
  return 'acting';
}

/**
 * The holder a request should be routed to: the lease's holder while the lease has not expired, started or not (a
 * holder waits for a start that is near, rule 1).
 */
export function routingHolder(view: LeaseView): NodeName | undefined {
  const unexpired = view.phase === 'not-started' || view.phase === 'acting' || view.phase === 'stasis';
  return unexpired ? view.lease?.holderName : undefined;
}

/** The primary as an operator sees it: the holder of a lease that has started and not expired. */
export function startedHolder(view: LeaseView): NodeName | undefined {
  return view.phase === 'acting' || view.phase === 'stasis' ? view.lease?.holderName : undefined;
}

/** This replica holds a lease that has not expired yet (it may still serve finish, cleanup and confirmations). */
export function holdsUnexpired(view: LeaseView): boolean {
  return view.mine && routingHolder(view) !== undefined;
}

// ------------------------------------------------------------------------------------------ rules 1 and 19

export type ActingCheck =
  | { readonly kind: 'acting'; readonly lease: Lease }
  | { readonly kind: 'no-lease' }
  /** Someone else (or an earlier incarnation of this replica) holds the lease. */
  | { readonly kind: 'not-holder'; readonly lease: Lease }
  /** This replica holds the lease but `now` is before its start: wait until then, or answer PRIMARY_MISS. */
  | { readonly kind: 'not-started'; readonly lease: Lease }
  /** Within `2·maxClockSkew` of the expiration, or past it: this replica must not act any more under it. */
  | { readonly kind: 'ended'; readonly lease: Lease }
  /** This replica holds the lease but its node's clock is beyond the bound from the majority (rule 19). */
  | { readonly kind: 'clock-offset'; readonly lease: Lease };

/**
 * Whether the replica whose view this is may act as primary (rules 1 and 19): it holds the lease, `now` (read after
 * absorbing the request's timestamp) is inside the acting window, and `clockWithinBound` (false while this node's
 * measured clock offset from the majority exceeds the bound).
 */
export function actingOf(view: LeaseView, clockWithinBound = true): ActingCheck {
  const { lease } = view;
  if (lease === null) return { kind: 'no-lease' };
  if (!view.mine) return { kind: 'not-holder', lease };
  if (!clockWithinBound) return { kind: 'clock-offset', lease };
  switch (view.phase) {
    case 'not-started':
      return { kind: 'not-started', lease };
    case 'stasis':
    case 'expired':
      return { kind: 'ended', lease };
    case 'acting':
      return { kind: 'acting', lease };
    case 'none':
      return { kind: 'no-lease' };
  }
}

/** `actingOf` the view of `self` on `lease` at `now`. */
export function checkActing(
  lease: Lease | null,
  self: ReplicaIncarnation,
  now: HybridTimestamp,
  maxClockSkewMs: number,
  clockWithinBound = true,
): ActingCheck {
  return actingOf(leaseView(lease, self, now, maxClockSkewMs), clockWithinBound);
}
