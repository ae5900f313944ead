/**
 * ReadWriteRequest on a partition primary (ignite3-protocol.md §7.3, DESIGN §2b rules 1, 4, 7, 15, 18).
 *
 * Order of checks: the messenger has absorbed the envelope timestamp; then the replica must act as primary at `now`
 * under the request's token (none: enlistment under the current lease, which the response carries); the tx's
 * deadline D must lie ahead of `now`; the local map must not hold the tx as FINISHING/final (TX_ALREADY_FINISHED) or
 * ABANDONED (TX_ABORTED). Then the operation runs as opSeq of its tx, after the tx's earlier operations here, once
 * (a duplicate gets the kept response).
 *
 * Running an operation: TX_ABORTED if an earlier write of the tx here was answered before its apply and then failed
 * (it could not see that write: pipelined-writes.ts), replica touch (map → PENDING with coordinator and commit
 * partition; none for one-phase), locks under wait-die (a point read: IS partition + S row, whether or not the row
 * exists; a write, or a read `forUpdate` (it will write the row: taking X now spares the S→X upgrade wait-die may
 * refuse): IX + X; a scan: S on the partition, which covers the whole range including the first key not returned),
 * then a fresh primary check under the same lease (locks may have taken a while), then:
 * - reads use `readLatest`: the tx's own intent is visible; a foreign intent under our lock means its writer's locks
 *   were lost with a primary change and its cleanup has not reached us (see "lost locks" below);
 * - writes propose Update/UpdateAll under the lease and answer from the apply result (rule 4): PRIMARY_MISS when the
 *   command applied as a no-op, a write-intent conflict is a lost lock as above, else `writeTs` = the command's
 *   effective timestamp;
 * - one-phase (`full`): writes only; once its locks are held they are marked finishing (younger requests wait for
 *   them instead of dying: the tx takes no other lock), they are released right after the apply (rule 18), and
 *   `writeTs` is the commit timestamp.
 *
 * Finished holders (DESIGN §2 "Commit acknowledgement"): a finish is answered before its cleanup reaches the enlisted
 * partitions, so a lock may still be held by a tx whose commit or rollback has returned. The in-line cleanup settles
 * every holder a lock request meets (inline-cleanup.ts): a final one is cleaned up here at once, and the request is
 * granted (a waiter) or takes its lock again (one wait-die denied for that holder, which waits for that at most
 * `inlineSettleWaitMsMax`: an unreachable commit partition must not hold its locks long). A waiter settles the key's
 * holders again while it waits, since a holder open when the wait began may finish meanwhile.
 *
 * Finished writers: a cleanup releases its tx's locks once the intent switch is proposed, so a foreign intent met under
 * our lock may be that of a tx COMMITTED here whose switch has not applied yet: a read reads through it (see
 * `committedHere`), and a write lands after the switch in the log.
 *
 * Lost locks (ignite3-protocol.md §8): any other foreign intent met under our lock is resolved to its tx's final outcome
 * (resolution/lost-locks.ts: the local map, else its coordinator, which aborts the tx if still pending, else its
 * commit partition's recovery), switched through Raft like a cleanup of that tx on this partition, and the read or
 * write runs again, still under our locks and our lease (at most `lostLockResolutionsMax` intents per operation). No
 * final outcome yet: a retryable TX_LOCK_CONFLICT (reason `write-intent`) and orphan detection hears of the intent.
 * A pipelined write of a parallel commit (`parallelCommit`) already answered "written" does not run again: its
 * coordinator may have taken commitTs meanwhile, below the timestamp a new proposal would get, and the commit's check
 * counts the intent it would leave as written below commitTs. It fails with that TX_LOCK_CONFLICT, and its tx's
 * confirmation with it. (A sequential commit absorbs the confirmed write's timestamp before it takes commitTs.)
 */
import { assert } from '../../core/assert.js';
import { asBasaltError, BasaltError, hintOf, invalidArgument } from '../../core/errors.js';
import type { HybridTimestamp, PartitionId, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import type { TimerHandle } from '../../env/timers.js';
import { formatTimestamp } from '../../hlc/timestamp.js';
import { type KeyRange, type ReadResult, TOMBSTONE, type Value } from '../../storage/mv-partition-storage.js';
import { type LockStep, partitionLockKey, pointLockPlan, scanLockPlan } from '../../tx/core/lock-modes.js';
import type { FoundValue, ReadWriteRequest, ReadWriteResponse, RwOperation, RwResult } from '../../tx/core/messages.js';
import { isFinal } from '../../tx/core/tx-state.js';
import type { InlineCleanup } from '../cleanup/inline-cleanup.js';
import { cleanupPartition } from '../cleanup/partition-cleanup.js';
import type { ApplyResult } from '../partition/apply-result.js';
import type { RowWrite } from '../partition/commands.js';
import { type Lease, tokenOf } from '../partition/lease.js';
import type { PartitionReplica } from '../partition/partition-replica.js';
import { primaryMissError } from '../partition/primary-miss.js';
import type { IntentResolver } from '../resolution/intent-resolver.js';

export async function handleReadWrite(
  p: PartitionReplica,
  request: ReadWriteRequest,
  resolver?: IntentResolver,
  inline?: InlineCleanup,
): Promise<ReadWriteResponse> {
  assert(request.partitionId === p.partitionId, 'routed to its partition');
  const now = await p.untilLeaseStart(p.clock.now(), request.token);
  const lease = p.lockingLease(now, request.token);
  checkDeadline(p, request.txId, now);
  checkTxState(p, request.txId);
  if (request.full && !isWrite(request.operation)) {
    throw invalidArgument('a one-phase request must be a write', { op: request.operation.op });
  }
  checkForUpdate(request.operation);
  const deadline = p.deadlineOf(request.txId);
  if (request.pipelined === true && !request.full && isWrite(request.operation) && p.pipeline.admits(request.txId)) {
    return pipelined(p, request, deadline, lease, resolver, inline);
  }
  const response = p.operations.execute(request.txId, request.opSeq, deadline, () =>
    runOperation(p, request, lease, resolver, inline),
  );
  if (!request.full) return response;
  // A one-phase tx is over after its one operation: close its record (a duplicate still gets the kept response).
  return response.finally(() => p.operations.close(request.txId, deadline, p.clock.current()));
}

/**
 * A pipelined write (pipelined-writes.ts): answered once its command is proposed, or with its error if it fails
 * before that; from the proposal on, its apply result is kept for the coordinator's WriteConfirmRequest. The tx's
 * operation chain here still ends with the apply, so its next operation here sees the write, or, if it failed after
 * its answer, fails TX_ABORTED (reason `pipelined-write-failed`).
 */
function pipelined(
  p: PartitionReplica,
  request: ReadWriteRequest,
  deadline: HybridTimestamp,
  lease: Lease,
  resolver: IntentResolver | undefined,
  inline: InlineCleanup | undefined,
): Promise<ReadWriteResponse> {
  let answerEarly: (response: ReadWriteResponse) => void = () => {};
  const early = new Promise<ReadWriteResponse>((resolve) => {
    answerEarly = resolve;
  });
  let proposed = false;
  const onProposed = (response: ReadWriteResponse): void => {
    if (proposed) return;
    proposed = true;
    p.pipeline.track(
      request.txId,
      applied.then((done) => writeTsOf(done)),
    );
    answerEarly(response);
  };
  const applied = p.operations.execute(request.txId, request.opSeq, deadline, async () => {
    try {
      return await runOperation(p, request, lease, resolver, inline, onProposed);
    } catch (error) {
      // Answered "written" already: the tx's next operation here (queued behind this one) must not run as if it had
      // applied, so the failure is recorded before it leaves this operation.
      if (proposed) p.pipeline.fail(request.txId, asBasaltError(error));
      throw error;
    }
  });
  return Promise.race([early, applied]);
}

function writeTsOf(response: ReadWriteResponse): HybridTimestamp {
  assert(response.writeTs !== undefined, 'an applied write has its effective timestamp');
  return response.writeTs;
}

function checkDeadline(p: PartitionReplica, txId: TxId, now: HybridTimestamp): void {
  const deadline = p.deadlineOf(txId);
  if (deadline > now) return;
  throw new BasaltError('TX_TIMEOUT', `tx ${txId} is past its deadline`, {
    txId,
    deadline: formatTimestamp(deadline),
  });
}

function checkTxState(p: PartitionReplica, txId: TxId): void {
  const state = p.txStateMap.entry(txId)?.state;
  if (state === 'FINISHING' || isFinal(state)) {
    throw new BasaltError('TX_ALREADY_FINISHED', `tx ${txId} is ${state}`, { txId, state });
  }
  if (state === 'ABANDONED') throw new BasaltError('TX_ABORTED', `tx ${txId} was abandoned`, { txId });
}

/** Called once a pipelined write's command is proposed, with the answer that may go out before it applies. */
type OnProposed = (response: ReadWriteResponse) => void;

async function runOperation(
  p: PartitionReplica,
  request: ReadWriteRequest,
  lease: Lease,
  resolver: IntentResolver | undefined,
  inline: InlineCleanup | undefined,
  onProposed?: OnProposed,
): Promise<ReadWriteResponse> {
  const { txId, operation } = request;
  // Cleanup may have run while this operation waited for the tx's earlier ones.
  checkTxState(p, txId);
  // An earlier write of the tx here was answered before its apply and then failed: this operation cannot see it.
  const failed = p.pipeline.failedError(txId);
  if (failed !== undefined) throw failed;
  if (!request.full) touch(p, request);
  try {
    await acquireLocks(p, txId, operationLockPlan(p.partitionId, operation), inline, request.full);
    // A one-phase tx now holds every lock it will take: younger requests wait for them rather than die (its command
    // replicates and the locks go right after its apply), as for a committing tx (lock-manager.ts, "finishing").
    if (request.full) p.locks.markFinishing(txId);
    // Locks may have taken a while: act only if still primary under the very lease the request was served under.
    const token = tokenOf(lease);
    p.lockingLease(p.clock.now(), token);
    const info = p.leaseInfo(token, lease);
    const proposed =
      onProposed === undefined
        ? undefined
        : () => onProposed({ kind: 'ReadWriteResponse', lease: info, result: { op: 'written' }, pipelined: true });
    const done = await perform(p, request, lease, resolver, proposed);
    return { kind: 'ReadWriteResponse', lease: p.leaseInfo(token, lease), ...done };
  } finally {
    if (request.full) p.locks.releaseAll(txId);
  }
}

/** Replica touch (seed 000): the enlisted primary learns the tx's coordinator and commit partition. */
function touch(p: PartitionReplica, request: ReadWriteRequest): void {
  const result = p.txStateMap.update(request.txId, {
    state: 'PENDING',
    reason: 'replica-touch',
    coordinatorId: request.coordinatorId,
    commitPartitionId: request.commitPartitionId,
  });
  if (result.kind === 'refused') throw new BasaltError('OVERLOADED', 'tx state map is full');
}

// ------------------------------------------------------------------------------------------ locks

function isWrite(operation: RwOperation): boolean {
  return operation.op === 'put' || operation.op === 'remove' || operation.op === 'putAll';
}

/** A read that locks its rows exclusively: `forUpdate` (on reads only, a boolean when present). */
function locksForUpdate(operation: RwOperation): boolean {
  return (operation.op === 'get' || operation.op === 'getAll') && operation.forUpdate === true;
}

function checkForUpdate(operation: RwOperation): void {
  if (!('forUpdate' in operation)) return;
  const readOp = operation.op === 'get' || operation.op === 'getAll';
  if (!readOp || typeof operation.forUpdate !== 'boolean') {
    throw invalidArgument('forUpdate is a boolean of a get or getAll', { op: operation.op });
  }
}

function keysOf(operation: RwOperation): readonly string[] {
  switch (operation.op) {
    case 'get':
    case 'put':
    case 'remove':
      return [operation.key];
    case 'getAll':
      return operation.keys;
    case 'putAll':
      return operation.entries.map((e) => e.key);
    case 'scan':
      return [];
  }
}

/**
 * The locks of `operation` on `partition`, in acquisition order: the partition intention once, then the row locks in
 * key order (one order for every tx). Reads take IS + S, writes and reads `forUpdate` IX + X, a scan S on the partition.
 */
export function operationLockPlan(partition: PartitionId, operation: RwOperation): readonly LockStep[] {
  if (operation.op === 'scan') return scanLockPlan(partition);
  const mode = isWrite(operation) || locksForUpdate(operation) ? 'X' : 'S';
  const keys = [...new Set(keysOf(operation))].sort();
  const partitionKey = partitionLockKey(partition);
  const rows = keys.flatMap((k) => pointLockPlan(partition, k, mode).filter((s) => s.key !== partitionKey));
  const [intention] = pointLockPlan(partition, keys[0] ?? '', mode);
  assert(intention !== undefined && intention.key === partitionKey, 'a point plan starts with the partition');
  return [intention, ...rows];
}

/**
 * Takes the plan's locks in order. A holder in the way is settled by the in-line cleanup (inline-cleanup.ts, which
 * hears of every conflict): a waiter is granted once a finished holder's cleanup here releases it, and a request
 * wait-die denied for an older holder that turns out finished takes its lock again (at most
 * `inlineCleanupsPerLockMax` times per lock).
 */
async function acquireLocks(
  p: PartitionReplica,
  txId: TxId,
  plan: readonly LockStep[],
  inline: InlineCleanup | undefined,
  onePhase: boolean,
): Promise<void> {
  if (inline === undefined) return p.acquire(txId, plan, onePhase);
  for (const step of plan) {
    for (let settled = 0; ; settled++) {
      const since = inline.mark();
      const acquired = p.acquire(txId, [step], onePhase);
      const rechecks = recheckWhileWaiting(p, txId, step, inline);
      try {
        await acquired;
        break;
      } catch (error) {
        // The older holder a wait-die denial names.
        const blocker = hintOf(error, 'wait-die')?.blocker;
        if (blocker === undefined || settled >= LIMITS.inlineCleanupsPerLockMax) throw error;
        if (!(await settledWithin(p, inline.settle(p, blocker, since)))) throw error;
      } finally {
        rechecks();
      }
    }
  }
}

/**
 * While the request for `step` waits, settles the key's holders again every `inlineRecheckIntervalMs` (at most
 * `inlineRechecksPerWaitMax` times): a holder that was open when the wait began may have finished since. Returns the
 * function that stops it (nothing is scheduled for a request granted or denied at once).
 */
function recheckWhileWaiting(p: PartitionReplica, txId: TxId, step: LockStep, inline: InlineCleanup): () => void {
  if (!p.locks.waitsOf(txId).includes(step.key)) return () => {};
  let timer: TimerHandle | undefined;
  let rechecks = 0;
  const arm = (): void => {
    timer = p.timers.setTimer(() => {
      timer = undefined;
      for (const holder of p.locks.holders(step.key)) {
        if (holder.txId !== txId) void inline.settle(p, holder.txId).catch(() => false);
      }
      if (++rechecks < LIMITS.inlineRechecksPerWaitMax) arm();
    }, LIMITS.inlineRecheckIntervalMs);
  };
  arm();
  return () => {
    rechecks = LIMITS.inlineRechecksPerWaitMax;
    if (timer !== undefined) p.timers.clearTimer(timer);
    timer = undefined;
  };
}

/** The settle's answer, or false once `inlineSettleWaitMsMax` passed first (the settle goes on regardless). */
function settledWithin(p: PartitionReplica, settle: Promise<boolean>): Promise<boolean> {
  return new Promise((resolve) => {
    const timer = p.timers.setTimer(() => resolve(false), LIMITS.inlineSettleWaitMsMax);
    settle.then(
      (done) => {
        p.timers.clearTimer(timer);
        resolve(done);
      },
      () => {
        p.timers.clearTimer(timer);
        resolve(false);
      },
    );
  });
}

// ------------------------------------------------------------------------------------------ lost locks

/** The read or write; each foreign intent it meets is resolved and switched, then it runs again (see header). */
async function perform(
  p: PartitionReplica,
  request: ReadWriteRequest,
  lease: Lease,
  resolver: IntentResolver | undefined,
  onProposed: (() => void) | undefined,
): Promise<Done> {
  const { txId, operation } = request;
  let answered = false;
  const proposed =
    onProposed === undefined
      ? undefined
      : () => {
          answered = true;
          onProposed();
        };
  for (let resolved = 0; ; resolved++) {
    try {
      return isWrite(operation) ? await write(p, request, lease, proposed) : read(p, txId, operation);
    } catch (error) {
      // The key of a foreign-intent error (see `foreignIntent`).
      const key = hintOf(error, 'foreign-intent')?.key;
      if (key === undefined) throw error;
      // A write of a parallel commit answered "written" before it applied is never proposed again: its coordinator
      // may have taken commitTs since, below the new proposal's timestamp, and the commit's check would take the
      // intent it leaves for one written below commitTs (write-check.ts). It fails instead, and its confirmation too.
      if (
        (answered && request.parallelCommit === true) ||
        resolved >= LIMITS.lostLockResolutionsMax ||
        !(await switchLostLock(p, txId, key, resolver))
      ) {
        // No outcome yet: orphan detection hears of the intent (it recovers it once its coordinator is gone).
        reportIntentOf(p, key);
        throw error;
      }
      // The resolution took a while: go on only under the very lease the request was served under.
      p.actingLease(p.clock.now(), tokenOf(lease));
    }
  }
}

/** True once the key's foreign intent is gone (switched here to its tx's final outcome, or already). */
async function switchLostLock(
  p: PartitionReplica,
  txId: TxId,
  key: string,
  resolver: IntentResolver | undefined,
): Promise<boolean> {
  const intent = intentAt(p, key);
  if (intent === undefined) return true;
  assert(intent.txId !== txId, 'a lost lock is met on a foreign intent');
  if (resolver?.resolveLostLock === undefined) return false;
  const request = { ...intent, partitionId: p.partitionId, key };
  const outcome = await resolver.resolveLostLock(request);
  if (outcome === undefined) return false;
  // The cleanup of that tx on this partition, as its finish would send it: map final, WriteIntentSwitch through Raft.
  await cleanupPartition(p, {
    kind: 'TxCleanupRequest',
    txId: intent.txId,
    partitions: [p.partitionId],
    unlockOnly: false,
    outcome,
  });
  return true;
}

function intentAt(p: PartitionReplica, key: string): { txId: TxId; commitPartitionId: PartitionId } | undefined {
  const rowId = p.mv.rowIdOf(key);
  const read = rowId === undefined ? undefined : p.mv.readLatest(rowId);
  return read?.kind === 'intent' ? { txId: read.txId, commitPartitionId: read.commitPartitionId } : undefined;
}

// ------------------------------------------------------------------------------------------ reads

type Done = { readonly result: RwResult; readonly writeTs?: HybridTimestamp };

function read(p: PartitionReplica, txId: TxId, operation: RwOperation): Done {
  // Expiry is read at this primary's clock: a version expired by now reads as absent (DESIGN §4b); the earliest
  // expiry among the versions returned goes back with the result, and the tx commits below it.
  const expiry = new EarliestExpiry(p.clock.now());
  switch (operation.op) {
    case 'get':
      return { result: expiry.on({ op: 'get', value: readKey(p, txId, operation.key, expiry) }) };
    case 'getAll': {
      const values = operation.keys.map((k) => readKey(p, txId, k, expiry));
      return { result: expiry.on({ op: 'getAll', values }) };
    }
    case 'scan':
      return { result: expiry.on(scan(p, txId, operation.range, operation.limit, expiry)) };
    default:
      throw invalidArgument(`not a read: ${operation.op}`);
  }
}

/** The expiry clock of one RW read request, and the earliest expiry among the versions it returns. */
class EarliestExpiry {
  private earliest: HybridTimestamp | undefined;

  constructor(readonly now: HybridTimestamp) {}

  note(read: ReadResult): ReadResult {
    const at = read.kind === 'committed' ? read.expiresAt : undefined;
    if (at !== undefined && (this.earliest === undefined || at < this.earliest)) this.earliest = at;
    return read;
  }

  on<R extends RwResult>(result: R): R {
    return this.earliest === undefined ? result : { ...result, readExpiresAt: this.earliest };
  }
}

function readKey(p: PartitionReplica, txId: TxId, key: string, expiry: EarliestExpiry): FoundValue {
  const rowId = p.mv.rowIdOf(key);
  return rowId === undefined ? { found: false } : latest(p, txId, key, expiry.note(p.mv.readLatest(rowId, expiry.now)));
}

/**
 * The latest value: own intent or committed version. A foreign intent under our lock is that of a finished writer
 * whose switch is in the log (read through it when it committed), or else a lost lock (see header).
 */
function latest(p: PartitionReplica, txId: TxId, key: string, read: ReadResult): FoundValue {
  if (read.kind === 'empty') return { found: false };
  if (read.kind === 'intent' && read.txId !== txId) {
    if (!committedHere(p, read)) throw foreignIntent(p, key, read.txId);
  }
  return read.value === TOMBSTONE ? { found: false } : { found: true, value: read.value };
}

/**
 * Finished writers: a cleanup releases a tx's locks once its intent switch is proposed (partition-cleanup.ts), so
 * the next holder of a lock may meet that tx's intent before the switch applied. When this node's map holds the tx
 * COMMITTED (a true outcome: rule 11), the intent is the latest committed version, and a read under our lock reads it
 * (its commitTs absorbed first, rule 8): every write of ours here is proposed after that switch and applies after it.
 * An intent with an expiry, or of an aborted or unfinished tx, goes the lost-lock way (resolved, switched, read again).
 */
function committedHere(p: PartitionReplica, read: ReadResult & { readonly kind: 'intent' }): boolean {
  if (read.expiry !== undefined) return false;
  const entry = p.txStateMap.entry(read.txId);
  if (entry?.state !== 'COMMITTED' || entry.commitTimestamp === undefined) return false;
  p.clock.update(entry.commitTimestamp);
  p.counters.add(READ_WRITE_COUNTERS.committedReadThroughs);
  return true;
}

/** Names of the node counters bumped here. */
export const READ_WRITE_COUNTERS = {
  /** Reads under a lock that read through the intent of a tx COMMITTED here whose switch had not applied yet. */
  committedReadThroughs: 'locks.committedReadThroughs',
} as const;

function scan(p: PartitionReplica, txId: TxId, range: KeyRange, limit: number, expiry: EarliestExpiry): RwResult {
  const rows: { key: string; value: Value }[] = [];
  const limited = Math.max(1, Math.min(limit, LIMITS.storageScanRowsMax));
  const result = p.mv.scan(range, 'latest', limited, expiry.now);
  for (const row of result.rows) {
    const value = latest(p, txId, row.key, expiry.note(row.read));
    if (value.found) rows.push({ key: row.key, value: value.value });
  }
  return result.nextKey === undefined ? { op: 'scan', rows } : { op: 'scan', rows, nextKey: result.nextKey };
}

function reportIntentOf(p: PartitionReplica, key: string): void {
  const rowId = p.mv.rowIdOf(key);
  const read = rowId === undefined ? undefined : p.mv.readLatest(rowId);
  if (read?.kind === 'intent') p.reportUnprotectedIntent(read.txId, read.commitPartitionId);
}

function foreignIntent(p: PartitionReplica, key: string, intentTxId: TxId): BasaltError {
  return new BasaltError(
    'TX_LOCK_CONFLICT',
    `key ${key} holds an intent of ${intentTxId} not protected by a lock`,
    { partitionId: p.partitionId, key, intentTxId, reason: 'write-intent' },
    { hint: { kind: 'foreign-intent', key, intentTxId } },
  );
}

// ------------------------------------------------------------------------------------------ writes

function writesOf(operation: RwOperation): readonly RowWrite[] {
  switch (operation.op) {
    case 'put':
      return [
        operation.expiry === undefined
          ? { kind: 'put', key: operation.key, value: operation.value }
          : { kind: 'put', key: operation.key, value: operation.value, expiry: operation.expiry },
      ];
    case 'remove':
      return [{ kind: 'remove', key: operation.key }];
    case 'putAll': {
      // UpdateAll needs distinct keys: the last entry of a key wins, as sequential puts would.
      const byKey = new Map<string, RowWrite>();
      for (const e of operation.entries) byKey.set(e.key, { kind: 'put', key: e.key, value: e.value });
      return [...byKey.values()];
    }
    default:
      throw invalidArgument(`not a write: ${operation.op}`);
  }
}

async function write(
  p: PartitionReplica,
  request: ReadWriteRequest,
  lease: Lease,
  onProposed: (() => void) | undefined,
): Promise<Done> {
  const writes = writesOf(request.operation);
  if (writes.length === 0) return { result: { op: 'written' } };
  if (writes.length > LIMITS.updateAllWritesMax) {
    throw invalidArgument(`at most ${LIMITS.updateAllWritesMax} writes per request`, { writes: writes.length });
  }
  const applied = p.proposeData(
    {
      token: tokenOf(lease),
      txId: request.txId,
      coordinatorId: request.coordinatorId,
      commitPartitionId: request.commitPartitionId,
      full: request.full,
      writes,
    },
    onProposed,
  );
  return { result: { op: 'written' }, writeTs: writeTimestamp(p, await applied) };
}

/** Rule 4: the answer comes from the apply result. */
function writeTimestamp(p: PartitionReplica, applied: ApplyResult): HybridTimestamp {
  switch (applied.kind) {
    case 'UPDATED':
      return applied.appliedTs;
    case 'PRIMARY_MISS':
      throw primaryMissError(p.partitionId, applied.reason, applied.current);
    case 'WRITE_INTENT_CONFLICT':
      // Under our X lock a foreign intent means its writer lost its locks with a primary change and its cleanup has
      // not switched the intent yet: `perform` resolves it.
      throw foreignIntent(p, applied.key, applied.intentTxId);
    default:
      throw new BasaltError('INTERNAL', `data command answered ${applied.kind}`);
  }
}
