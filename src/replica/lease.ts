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
 */
import type { HybridTimestamp, NodeId, NodeName } from '../core/ids.js';
import type { Random } from '../env/random.js';
import { addMs } from '../hlc/timestamp.js';

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

// ------------------------------------------------------------------------------------------ rules 1 and 19

/** The end of the holder's acting window: it stops `2·maxClockSkew` before the expiration (rule 19, stasis). */
export function actingEnd(lease: Lease, maxClockSkewMs: number): HybridTimestamp {
  return addMs(lease.expiration, -2 * maxClockSkewMs);
}

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
 * Whether replica `self` may act as primary at `now` (read after absorbing the request's timestamp) under the
 * applied lease `lease`: rules 1 and 19. `clockWithinBound` is false while this node's measured clock offset from the
 * majority exceeds the bound.
 */
export function checkActing(
  lease: Lease | null,
  self: ReplicaIncarnation,
  now: HybridTimestamp,
  maxClockSkewMs: number,
  clockWithinBound = true,
): ActingCheck {
  if (lease === null) return { kind: 'no-lease' };
  if (!sameHolder(lease.holder, self)) return { kind: 'not-holder', lease };
  if (!clockWithinBound) return { kind: 'clock-offset', lease };
  if (now < lease.start) return { kind: 'not-started', lease };
  if (now >= actingEnd(lease, maxClockSkewMs)) return { kind: 'ended', lease };
  return { kind: 'acting', lease };
}
