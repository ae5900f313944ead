/**
 * Sending to a partition's primary: the one routing every primary-only request uses (the coordinator's enlistment and
 * one-phase writes, RO reads, finish; resolution and recovery requests; cleanup rounds). Below the whole-transaction
 * retries of retry.ts: this is one request finding the primary, not a tx being run again.
 *
 * A route, attempt by attempt:
 * - the first target is the caller's (an enlisted primary; for an RO read the local replica, which may serve without
 *   being primary) or the directory's best guess;
 * - a PRIMARY_MISS naming a holder (its typed hint): the directory learns the holder and the next attempt goes there;
 * - a miss naming no holder, or the node that just missed, and any other failure the caller retries: the directory's
 *   guess again (it rotates among the replicas when it knows no holder);
 * - a target this route already tried is sent to again only after a backoff on the injected timers (a lease not
 *   started yet, an election under way); a new target is tried at once;
 * - attempts are bounded by `attemptsMax` and, when given, by a deadline on the injected monotonic clock.
 *
 * The result is a value, never a throw (except `beforeAttempt`'s): `ok` with the response and the primary that served
 * it; `miss` when the attempts ran out on a PRIMARY_MISS (nothing executed); `failed` with the error that ended the
 * route and `executed`, which is `'no'` only when no attempt of the route may have taken effect (each failed with a
 * miss or a proven non-execution, or was never sent).
 *
 * How primaries' failures read (`executed` on the error, DESIGN rule 7): a request certainly did nothing when its
 * error proves it (`executed: 'no'`) or its code is a refusal before acting; a PRIMARY_MISS did nothing either (the
 * request was refused, or its command applied as a deterministic no-op under a stale lease: rule 4).
 */
import { assert } from '../core/assert.js';
import {
  asBasaltError,
  BasaltError,
  type ErrorHint,
  type Execution,
  hintOf,
  isBasaltError,
  provedUnexecuted,
} from '../core/errors.js';
import type { NodeName, PartitionId } from '../core/ids.js';
import type { Clock } from '../env/clock.js';
import { sleep, type Timers } from '../env/timers.js';
import type { PrimaryDirectory } from './primary-directory.js';

/** The hint a PRIMARY_MISS carries. */
export type PrimaryMissHint = Extract<ErrorHint, { kind: 'primary-miss' }>;

export interface PrimaryRouteOptions<R> {
  readonly partitionId: PartitionId;
  readonly directory: PrimaryDirectory;
  /** One attempt at `to` (its own timeout included). */
  readonly send: (to: NodeName) => Promise<R>;
  /** The first target; else the directory's guess. */
  readonly first?: NodeName;
  /** `first` is a replica that serves without being primary: its answer teaches nothing, its failure no backoff. */
  readonly firstIsReplica?: boolean;
  /** The primary a response names (e.g. its lease holder); default the node that answered. */
  readonly primaryOf?: (response: R, from: NodeName) => NodeName;
  /** Failures besides PRIMARY_MISS that are worth another attempt (default: none). Locate failures are asked too. */
  readonly retries?: (error: BasaltError) => boolean;
  readonly attemptsMax: number;
  /** The pause before a target is tried again after failed attempt number `attempt` (1-based). */
  readonly backoffMs: (attempt: number) => number;
  /** Without timers a route never pauses (its caller's own loop backs off). */
  readonly timers?: Timers;
  readonly signal?: AbortSignal;
  /** No attempt starts at or after `atMs` on `clock`, and no pause reaches past it. */
  readonly deadline?: { readonly clock: Pick<Clock, 'monotonicMs'>; readonly atMs: number };
  /** Runs before every attempt; a throw ends the route by rejecting (e.g. the tx became abort-only meanwhile). */
  readonly beforeAttempt?: () => void;
}

export type PrimaryRouteResult<R> =
  | { readonly kind: 'ok'; readonly response: R; readonly primary: NodeName | undefined }
  | { readonly kind: 'miss'; readonly hint: PrimaryMissHint | undefined; readonly error: BasaltError }
  | {
      readonly kind: 'failed';
      readonly error: BasaltError;
      readonly executed: Execution;
      /** The last node sent to, if any. */
      readonly target: NodeName | undefined;
    };

/**
 * Codes a primary answers only when it refused a request before acting, whoever sends them. NODE_UNAVAILABLE is not
 * one: a replica or Raft driver that stops abandons proposals with it, and those may still commit through another
 * leader under the same lease. It proves nothing unless the error itself says so (`executed: 'no'`).
 */
const UNEXECUTED_CODES = new Set(['OVERLOADED', 'INVALID_ARGUMENT', 'UNKNOWN_TABLE', 'NOT_FOUND']);

/** True when the failed request certainly did nothing: its error proves it, or its code is a refusal. */
export function isUnexecuted(error: BasaltError): boolean {
  return provedUnexecuted(error) || UNEXECUTED_CODES.has(error.code);
}

/**
 * A failed first request to a partition (enlistment, one-phase write) that may be sent again as if new: a PRIMARY_MISS
 * or a proven non-execution.
 */
export function mayResendAsNew(error: BasaltError): boolean {
  return error.code === 'PRIMARY_MISS' || provedUnexecuted(error);
}

/** The hint of a PRIMARY_MISS, if `error` is one that carries it. */
export function primaryMissOf(error: unknown): PrimaryMissHint | undefined {
  return isBasaltError(error, 'PRIMARY_MISS') ? hintOf(error, 'primary-miss') : undefined;
}

/**
 * Where to go after `error` from `missed` for `partitionId`: the holder a PRIMARY_MISS of that partition names, unless
 * it names `missed` itself; undefined asks the directory. The holder is noted in `directory` first.
 */
export function followMiss(
  error: unknown,
  partitionId: PartitionId,
  missed: NodeName | undefined,
  directory?: PrimaryDirectory,
): NodeName | undefined {
  const hint = primaryMissOf(error);
  const holder = hint?.partitionId === partitionId ? hint.holder?.name : undefined;
  if (holder === undefined) {
    // A miss that names nobody (the node does not host the partition, or knows no holder): not to be asked first again.
    if (hint !== undefined && missed !== undefined) directory?.forget?.(partitionId, missed);
    return undefined;
  }
  directory?.note?.(partitionId, holder);
  return holder === missed ? undefined : holder;
}

/** Sends to the partition's primary as the module header says; never rejects except with `beforeAttempt`'s error. */
export async function sendToPrimary<R>(o: PrimaryRouteOptions<R>): Promise<PrimaryRouteResult<R>> {
  const tried = new Set<NodeName>();
  let next = o.first;
  let replicaFirst = o.first !== undefined && o.firstIsReplica === true;
  let executed: Execution = 'no';
  let sentTo: NodeName | undefined;
  let last: BasaltError | undefined;
  for (let attempt = 1; attempt <= o.attemptsMax; attempt++) {
    if (attempt > 1 && pastDeadline(o)) break;
    o.beforeAttempt?.();
    let to: NodeName;
    try {
      to = next ?? (await o.directory.locate(o.partitionId));
    } catch (error) {
      last = asBasaltError(error);
      if (!o.retries?.(last) || attempt >= o.attemptsMax) break;
      const paused = await pause(o, attempt);
      if (paused !== undefined) return failed(paused, executed, sentTo);
      continue;
    }
    const asReplica = replicaFirst;
    replicaFirst = false;
    try {
      const response = await o.send(to);
      const primary = asReplica ? undefined : (o.primaryOf?.(response, to) ?? to);
      if (primary !== undefined) o.directory.note?.(o.partitionId, primary);
      return { kind: 'ok', response, primary };
    } catch (error) {
      last = asBasaltError(error);
      sentTo = to;
      const miss = last.code === 'PRIMARY_MISS';
      if (!miss && !isUnexecuted(last)) executed = 'unknown';
      if (!miss && !o.retries?.(last)) return failed(last, executed, sentTo);
      if (!asReplica) tried.add(to);
      assert(tried.size <= attempt, 'a route sends to at most one new target per attempt', tried.size, attempt);
      const hinted = followMiss(last, o.partitionId, to, o.directory);
      if (attempt >= o.attemptsMax) break;
      const step = await retarget(o, tried, hinted, attempt);
      if (step.kind === 'cancelled') return failed(step.error, executed, sentTo);
      next = step.to;
    }
  }
  assert(executed === 'no' || sentTo !== undefined, 'an attempt that may have acted was sent somewhere');
  if (last === undefined) {
    const timeout = new BasaltError('TIMEOUT', `no attempt to reach the primary of ${o.partitionId} in time`);
    return failed(timeout, executed, sentTo);
  }
  if (last.code === 'PRIMARY_MISS' && executed === 'no')
    return { kind: 'miss', hint: primaryMissOf(last), error: last };
  return failed(last, executed, sentTo);
}

/** `executed` is the route's: every failed send has been counted in it (a locate or a pause sends nothing). */
function failed<R>(error: BasaltError, executed: Execution, target: NodeName | undefined): PrimaryRouteResult<R> {
  return { kind: 'failed', error, executed, target };
}

/**
 * The target after failed attempt `attempt`: the hinted holder, else the directory's guess (undefined if it has none
 * now: the next attempt asks again). Only a target this route tried already, or none, waits its backoff first.
 */
async function retarget(
  o: Pacing & Pick<PrimaryRouteOptions<unknown>, 'directory' | 'partitionId'>,
  tried: ReadonlySet<NodeName>,
  hinted: NodeName | undefined,
  attempt: number,
): Promise<
  | { readonly kind: 'go'; readonly to: NodeName | undefined }
  | { readonly kind: 'cancelled'; readonly error: BasaltError }
> {
  let to = hinted;
  if (to === undefined) {
    try {
      to = await o.directory.locate(o.partitionId);
    } catch {
      to = undefined;
    }
  }
  if (to !== undefined && !tried.has(to)) return { kind: 'go', to };
  const cancelled = await pause(o, attempt);
  return cancelled === undefined ? { kind: 'go', to } : { kind: 'cancelled', error: cancelled };
}

/** The part of a route's options that paces it. */
type Pacing = Pick<PrimaryRouteOptions<unknown>, 'backoffMs' | 'timers' | 'signal' | 'deadline'>;

function pastDeadline(o: Pacing): boolean {
  return o.deadline !== undefined && o.deadline.clock.monotonicMs() >= o.deadline.atMs;
}

/** Backs off after failed attempt `attempt`; the error if the wait was cancelled, else undefined. */
async function pause(o: Pacing, attempt: number): Promise<BasaltError | undefined> {
  if (o.timers === undefined) return undefined;
  let ms = o.backoffMs(attempt);
  if (o.deadline !== undefined) ms = Math.min(ms, Math.max(1, o.deadline.atMs - o.deadline.clock.monotonicMs()));
  try {
    await sleep(o.timers, ms, o.signal);
    return undefined;
  } catch (error) {
    return asBasaltError(error);
  }
}
