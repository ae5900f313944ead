/**
 * The transaction coordinator of one node (ignite3-protocol.md §7; DESIGN §2, §2b): begins RW transactions, routes
 * their operations to partition primaries, commits and rolls them back (coordinator-finish.ts), runs one-phase
 * implicit writes, and answers coordinator-path state requests (coordinator-state-request.ts).
 *
 * Begin: beginTs = now(); the tx id embeds it (id order = age); the node's map gets PENDING with this incarnation as
 * coordinator; the deadline is D = beginTs + the tx's timeout (rule 15: `begin({ timeoutMs })` up to txTimeoutMsMax,
 * carried in the id, else txTimeout) and a timer rolls the tx back at the timeout.
 *
 * Operations, per partition: the first request carries no token and enlists the partition under the lease its
 * response names (the first partition a request goes to is the commit partition); later requests carry that token.
 * Each request has the next opSeq of the tx (rule 7). Every response's writeTs is absorbed into the clock, so the
 * commitTs taken later exceeds every write. Failures:
 * - PRIMARY_MISS on a first request, or a failure that proves the request was never executed (`executed: 'no'`, e.g.
 *   not sent to a node that is down): routed again as every primary-only request is (route/send-to-primary.ts: the hint
 *   followed, a target tried already backed off from, bounded);
 * - PRIMARY_MISS once enlisted: the primary changed under the tx; it becomes abort-only (retryable TX_ABORTED);
 * - TX_LOCK_CONFLICT (wait-die): the op fails retryably and the tx is abort-only (the whole tx is retried);
 * - a timeout, a lost connection, a proposal abandoned by a stopping replica (NODE_UNAVAILABLE without proof) or
 *   anything else whose effect is unknown: abort-only (rule 7); for a one-phase write, TX_OUTCOME_UNKNOWN;
 * - refusals that certainly did nothing (OVERLOADED, ...): the op fails, the tx goes on.
 * Operations of a tx may run concurrently; commit first refuses new ones and waits for those in flight (rule 6).
 *
 * Repeated finishing (Ignite returns the first finish's future to every later commit/rollback call): a later rollback
 * resolves once the tx is finished, whatever the outcome (so `finally { rollback() }` is always safe); a later commit
 * after a commit reports the same result, or the outcome learned since if the first reported TX_OUTCOME_UNKNOWN. Where
 * we differ from Ignite: a commit after a rollback throws TX_ALREADY_FINISHED (TX_TIMEOUT if the timeout rolled it
 * back) instead of succeeding silently: a commit is never reported for a tx that did not commit (rule 14).
 */

import { setMaxListeners } from 'node:events';
import { assert } from '../../core/assert.js';
import type { CounterSink } from '../../core/counters.js';
import { asBasaltError, BasaltError, type Execution } from '../../core/errors.js';
import type { HybridTimestamp, NodeId, NodeIdentity, NodeName, PartitionId, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import type { Random } from '../../env/random.js';
import type { Timers } from '../../env/timers.js';
import type { HybridClock } from '../../hlc/hybrid-clock.js';
import { addMs, maxTimestamp } from '../../hlc/timestamp.js';
import { backoffMs } from '../../route/backoff.js';
import { locateOr } from '../../route/primary-directory.js';
import { isUnexecuted, mayResendAsNew, sendToPrimary } from '../../route/send-to-primary.js';
import type { KeyRange, Value } from '../../storage/mv-partition-storage.js';
import type { DirectHandoff, DirectTx } from '../core/direct.js';
import type {
  ReadWriteRequest,
  ReadWriteResponse,
  RwOperation,
  RwResult,
  TxRequestFn,
  TxStateCoordinatorRequest,
  TxStateResponse,
} from '../core/messages.js';
import { expectKind, putOperation } from '../core/messages.js';
import { TxIdGenerator, txDeadline } from '../core/tx-id.js';
import type { TxStateMap } from '../core/tx-state-map.js';
import {
  checkEntries,
  checkKey,
  checkKeys,
  checkPutOptions,
  checkReadOptions,
  checkScanLimit,
  checkScanRange,
  checkTable,
  checkValue,
  checkWrites,
  compareKeys,
  type KeyValue,
  type PutOptions,
  type ReadOptions,
  type ScanOptions,
  type ScanRange,
  scanPartitions,
  type TxWrite,
} from '../core/user-input.js';
import { type CoordinatorContext, groupByPartition, settleAll } from './context.js';
import {
  type CarriedPlan,
  CoordinatedTx,
  type Enlistment,
  primaryChangedError,
  sameEnlistmentToken,
} from './coordinated-tx.js';
import { adoptDirect, type DirectOperation, type DirectServed, serveDirect } from './coordinator-direct.js';
import { CARRIED_COMMIT_MARGIN_MS, carriedBound, FinishDriver } from './coordinator-finish.js';
import type { TxPlacement } from './coordinator-ports.js';
import { answerCoordinatorStateRequest } from './coordinator-state-request.js';
import { resolveSettings, type TxCoordinatorOptions } from './settings.js';

export interface TxCoordinatorDeps {
  readonly self: NodeIdentity;
  readonly clock: HybridClock;
  readonly timers: Timers;
  /** The node's tx state map (shared with every other role of the node). */
  readonly txStates: TxStateMap;
  readonly request: TxRequestFn;
  readonly placement: TxPlacement;
  readonly options?: TxCoordinatorOptions;
  /** Failures of background work (finish retries after TX_OUTCOME_UNKNOWN, cleanups that gave up). */
  readonly onError?: (error: unknown) => void;
  /** Rule 19: false while this node's clock is beyond the bound from the majority; `begin` then refuses (CLOCK_SKEW). */
  readonly clockWithinBound?: () => boolean;
  /** The node's counters (structurally; the node layer sits above this one). */
  readonly counters?: CounterSink;
  /** Spreads the retries of clients on this coordinator (retry.ts); without it they back off in lockstep. */
  readonly random?: Random;
}

export interface CoordinatorScanOptions extends ScanOptions {
  /** Scan only this partition of the table (default: every partition, merged in key order). */
  readonly partitionId?: PartitionId;
}

/** The result of a one-phase (implicit) write: its tx id and commit timestamp (the command's effective timestamp). */
export interface OnePhaseResult {
  readonly txId: TxId;
  readonly commitTs: HybridTimestamp;
}

/**
 * Carried by the caller across the attempts of one implicit write: each attempt begins as a retry of the one before
 * (TxIdGenerator.nextRetry), so it keeps its age under wait-die instead of starting as the youngest writer of a hot
 * key each time, as a read-write transaction's retries do (BeginTxOptions.retryOf).
 */
export interface OnePhaseAge {
  /** The id of the last attempt; set by each attempt. */
  last?: TxId;
}

/** Error codes of a one-phase write that prove it did not apply. */
const ONE_PHASE_NOT_APPLIED = new Set(['PRIMARY_MISS', 'TX_LOCK_CONFLICT', 'TX_TIMEOUT', 'TX_ABORTED']);

export class TxCoordinator {
  readonly self: NodeIdentity;
  readonly clock: HybridClock;
  readonly timers: Timers;
  readonly txStates: TxStateMap;
  /** Spreads the retry pauses of the transactions and implicit writes run on this coordinator. */
  readonly retryJitter: Random | undefined;
  private readonly ctx: CoordinatorContext;
  private readonly ids: TxIdGenerator;
  private readonly finisher: FinishDriver;
  private readonly live = new Map<TxId, CoordinatedTx>();
  private readonly stopper = new AbortController();
  private readonly clockWithinBound: () => boolean;

  constructor(deps: TxCoordinatorDeps) {
    this.self = deps.self;
    this.clock = deps.clock;
    this.timers = deps.timers;
    this.txStates = deps.txStates;
    this.retryJitter = deps.random;
    this.ids = new TxIdGenerator(deps.self.id);
    // Every pending request and pause listens to the stop signal: as many as requests may be pending.
    setMaxListeners(LIMITS.pendingRequestsMax, this.stopper.signal);
    this.ctx = {
      self: deps.self,
      clock: deps.clock,
      timers: deps.timers,
      txStates: deps.txStates,
      request: deps.request,
      placement: deps.placement,
      settings: resolveSettings(deps.options),
      signal: this.stopper.signal,
      onError: deps.onError ?? (() => {}),
      ...(deps.counters !== undefined && { counters: deps.counters }),
    };
    this.finisher = new FinishDriver(this.ctx, (tx) => this.forget(tx));
    this.clockWithinBound = deps.clockWithinBound ?? (() => true);
  }

  get txTimeoutMs(): number {
    return this.ctx.settings.txTimeoutMs;
  }

  /** Transactions begun here and not finished yet (finishing ones included). */
  get liveCount(): number {
    return this.live.size;
  }

  /** A live transaction by id (e.g. for a remote client naming it). */
  tx(txId: TxId): CoordinatedTx | undefined {
    return this.live.get(txId);
  }

  // ------------------------------------------------------------------------------------------ begin

  /** `options.timeoutMs`: this tx's own timeout (rule 15 deadline), at most txTimeoutMsMax; default txTimeoutMs. */
  begin(options: BeginTxOptions = {}): CoordinatedTx {
    this.checkRunning();
    const timeoutMs = checkTimeoutMs(options.timeoutMs, this.ctx.settings.txTimeoutMsMax);
    if (!this.clockWithinBound()) {
      // Rule 19: a beginTs from a clock this far off would break the real-time order; another node can serve.
      throw new BasaltError('CLOCK_SKEW', `${this.self.name}'s clock is beyond the skew bound; no tx begins here now`, {
        node: this.self.name,
      });
    }
    const tx = this.newTx(timeoutMs, options.retryOf);
    tx.timeoutTimer = this.timers.setTimer(() => this.timeOut(tx), timeoutMs ?? this.ctx.settings.txTimeoutMs);
    this.live.set(tx.id, tx);
    return tx;
  }

  /** beginTs, id, PENDING in the map (refused when the map is full: OVERLOADED). */
  private newTx(timeoutMs?: number, retryOf?: TxId): CoordinatedTx {
    const beginTs = this.clock.now();
    const { txTimeoutMs, txTimeoutMsMax } = this.ctx.settings;
    const id =
      (retryOf === undefined
        ? undefined
        : this.ids.nextRetry(retryOf, beginTs, timeoutMs ?? txTimeoutMs, txTimeoutMsMax)) ??
      this.ids.next(beginTs, timeoutMs);
    const result = this.txStates.update(id, {
      state: 'PENDING',
      reason: 'coordinator-begin',
      coordinatorId: this.self.id,
    });
    if (result.kind === 'refused') {
      throw new BasaltError('OVERLOADED', 'the tx state map is full; no tx can begin now', { txId: id });
    }
    assert(result.kind === 'applied', 'a fresh tx id has no entry yet');
    return new CoordinatedTx(id, beginTs, txDeadline(id, this.ctx.settings.txTimeoutMs));
  }

  // ------------------------------------------------------------------------------------------ operations

  /** `options.forUpdate`: the primary locks the row as a write would (X), see ReadOptions. */
  async get(tx: CoordinatedTx, table: string, key: string, options?: ReadOptions): Promise<Value | undefined> {
    checkTable(table);
    checkKey(key);
    const lock = lockingRead(checkReadOptions(options));
    return this.operation(tx, async () => {
      const result = await this.execute(tx, this.ctx.placement.partitionOf(table, key), { op: 'get', key, ...lock });
      const r = expectResult(result, 'get');
      return r.value.found ? r.value.value : undefined;
    });
  }

  /** Values of `keys` in their order (undefined where absent); one request per partition. */
  async getAll(
    tx: CoordinatedTx,
    table: string,
    keys: readonly string[],
    options?: ReadOptions,
  ): Promise<(Value | undefined)[]> {
    checkTable(table);
    checkKeys(keys);
    const lock = lockingRead(checkReadOptions(options));
    return this.operation(tx, async () => {
      const out: (Value | undefined)[] = new Array(keys.length).fill(undefined);
      const groups = groupByPartition(keys, (key) => this.ctx.placement.partitionOf(table, key));
      this.chooseCommitPartition(tx, groups);
      await settleAll(
        [...groups].map(async ([partitionId, items]) => {
          const keysHere = items.map((i) => keys[i]!);
          const result = await this.execute(tx, partitionId, { op: 'getAll', keys: keysHere, ...lock });
          const values = expectResult(result, 'getAll').values;
          if (values.length !== items.length) throw protocolError(`getAll answered ${values.length} values`);
          items.forEach((index, j) => {
            const v = values[j]!;
            out[index] = v.found ? v.value : undefined;
          });
        }),
      );
      return out;
    });
  }

  /** A write; `options` may give it an expiry (ttlMs or expiresAt; a lease is resolved by the client first). */
  async put(tx: CoordinatedTx, table: string, key: string, value: Value, options?: PutOptions): Promise<void> {
    checkTable(table);
    checkKey(key);
    checkValue(value);
    const operation = putOperation(key, value, checkPutOptions(options));
    await this.operation(tx, async () => {
      const result = await this.execute(tx, this.ctx.placement.partitionOf(table, key), operation);
      expectResult(result, 'written');
    });
  }

  async remove(tx: CoordinatedTx, table: string, key: string): Promise<void> {
    checkTable(table);
    checkKey(key);
    await this.operation(tx, async () => {
      const result = await this.execute(tx, this.ctx.placement.partitionOf(table, key), { op: 'remove', key });
      expectResult(result, 'written');
    });
  }

  async putAll(tx: CoordinatedTx, table: string, entries: readonly KeyValue[]): Promise<void> {
    checkTable(table);
    checkEntries(entries);
    await this.operation(tx, async () => {
      const groups = groupByPartition(entries, (e) => this.ctx.placement.partitionOf(table, e.key));
      this.chooseCommitPartition(tx, groups);
      await settleAll(
        [...groups].map(async ([partitionId, items]) => {
          const here = items.map((i) => entries[i]!);
          expectResult(await this.execute(tx, partitionId, { op: 'putAll', entries: here }), 'written');
        }),
      );
    });
  }

  /** Rows of `range` in key order, at most `limit`; each partition scanned locks its range (rule 18). */
  async scan(
    tx: CoordinatedTx,
    table: string,
    range: ScanRange,
    options: CoordinatorScanOptions = {},
  ): Promise<KeyValue[]> {
    checkTable(table);
    const keyRange = checkScanRange(range);
    const limit = checkScanLimit(options);
    return this.operation(tx, async () => {
      const partitions =
        options.partitionId === undefined
          ? scanPartitions(this.ctx.placement.partitionsOf(table), options)
          : [options.partitionId];
      const pages = await settleAll(partitions.map((p) => this.scanPartition(tx, p, keyRange, limit)));
      // Every partition returned its first `limit` rows, so the first `limit` of the union are among them, and each
      // partition locked at least up to the last key kept.
      return pages
        .flat()
        .sort((a, b) => compareKeys(a.key, b.key))
        .slice(0, limit);
    });
  }

  private async scanPartition(
    tx: CoordinatedTx,
    partitionId: PartitionId,
    range: KeyRange,
    limit: number,
  ): Promise<KeyValue[]> {
    const result = expectResult(await this.execute(tx, partitionId, { op: 'scan', range, limit }), 'scan');
    return result.rows.map((row) => ({ key: row.key, value: row.value }));
  }

  /** Runs one user operation: refused once the tx is finishing or abort-only; counted while in flight. */
  private async operation<T>(tx: CoordinatedTx, fn: () => Promise<T>): Promise<T> {
    this.checkOperable(tx);
    tx.operationStarted();
    try {
      return await fn();
    } finally {
      tx.operationEnded();
    }
  }

  private checkOperable(tx: CoordinatedTx): void {
    if (!tx.isActive) {
      if (tx.finish?.timedOut === true) throw timeoutError(tx);
      if (tx.finish?.cause !== undefined) throw rolledBackErrorForOp(tx, tx.finish.cause);
      throw new BasaltError('TX_ALREADY_FINISHED', `tx ${tx.id} is finished or finishing`, { txId: tx.id });
    }
    if (tx.abortCause !== undefined) throw rolledBackErrorForOp(tx, tx.abortCause);
  }

  /** One request of `tx` to `partitionId`: enlisting the partition first if needed. */
  private async execute(
    tx: CoordinatedTx,
    partitionId: PartitionId,
    operation: RwOperation,
    pipelined = this.ctx.settings.pipelinedWrites,
  ): Promise<RwResult> {
    const result = await this.route(tx, partitionId, operation, pipelined);
    // A value read that expires binds the commit below its expiry (DESIGN §4b; coordinator-finish.ts).
    if ('readExpiresAt' in result && result.readExpiresAt !== undefined) tx.noteReadExpiry(result.readExpiresAt);
    if ((operation.op === 'get' || operation.op === 'getAll') && operation.forUpdate === true) {
      this.noteLocked(tx, partitionId, operation);
    }
    return result;
  }

  /** The operation's request to the partition's primary, enlisting the partition first if it is new to the tx. */
  private async route(
    tx: CoordinatedTx,
    partitionId: PartitionId,
    operation: RwOperation,
    pipelined: boolean,
  ): Promise<RwResult> {
    let enlisted = tx.enlistment(partitionId);
    if (enlisted === undefined) {
      const pending = tx.enlisting.get(partitionId);
      if (pending === undefined) return this.enlist(tx, partitionId, operation, pipelined);
      // Another operation is enlisting the partition: its failure is ours too.
      await pending;
      enlisted = tx.enlistment(partitionId);
      assert(enlisted !== undefined, 'a successful enlistment records the partition');
    }
    if (tx.abortCause !== undefined) throw rolledBackErrorForOp(tx, tx.abortCause);
    return this.sendEnlisted(tx, enlisted, operation, pipelined);
  }

  /**
   * A first request that enlists several partitions at once fixes the commit partition among them: one whose primary
   * is this node, as far as it knows, so that the finish is a local call rather than a round trip; else the first.
   * (Any enlisted partition may be the commit partition; it only has to be fixed before the first request.)
   */
  private chooseCommitPartition(tx: CoordinatedTx, groups: ReadonlyMap<PartitionId, unknown>): void {
    if (tx.commitPartitionId !== undefined || groups.size < 2) return;
    const partitions = [...groups.keys()];
    const self = this.self.name;
    tx.commitPartitionId =
      partitions.find((p) => locateOr(this.ctx.placement.primaries, p, null) === self) ?? partitions[0];
  }

  private async enlist(
    tx: CoordinatedTx,
    partitionId: PartitionId,
    operation: RwOperation,
    pipelined: boolean,
  ): Promise<RwResult> {
    tx.commitPartitionId ??= partitionId;
    const attempt = this.enlistAttempts(tx, partitionId, operation, pipelined);
    tx.enlisting.set(partitionId, attempt);
    try {
      return await attempt;
    } finally {
      tx.enlisting.delete(partitionId);
    }
  }

  /**
   * The first request to a partition, routed to its primary (route/send-to-primary.ts), at most enlistAttemptsMax attempts. A
   * miss did nothing; neither did a request proven unexecuted (e.g. never sent to a node that is down): both are sent
   * again as new. Anything else (a proposal abandoned by a stopping replica, a timeout) may have applied: rule 7.
   */
  private async enlistAttempts(
    tx: CoordinatedTx,
    partitionId: PartitionId,
    operation: RwOperation,
    pipelined: boolean,
  ): Promise<RwResult> {
    const write = isWrite(operation);
    const routed = await sendToPrimary({
      ...this.firstRequestRoute(partitionId),
      beforeAttempt: () => {
        if (tx.abortCause !== undefined) throw rolledBackErrorForOp(tx, tx.abortCause);
      },
      send: (to) => {
        // Set before a write is sent (and only then): the finish must then go to the commit partition.
        if (write) tx.mayHaveWritten = true;
        return this.send(tx, partitionId, to, operation, undefined, pipelined);
      },
      primaryOf: (response) => response.lease.holderName,
    });
    switch (routed.kind) {
      case 'ok': {
        const e = tx.enlist(partitionId, routed.response.lease, write);
        this.absorb(e, routed.response, operation);
        return routed.response.result;
      }
      case 'miss':
        throw routed.error;
      case 'failed':
        throw this.operationFailed(tx, partitionId, routed.target, routed.error, routed.executed, false);
    }
  }

  /** How a tx's first request to a partition, or a one-phase write, is routed (both may be resent only as new). */
  private firstRequestRoute(partitionId: PartitionId) {
    const { retryBackoffMsMin, retryBackoffMsMax, enlistAttemptsMax } = this.ctx.settings;
    return {
      partitionId,
      directory: this.ctx.placement.primaries,
      retries: mayResendAsNew,
      attemptsMax: enlistAttemptsMax,
      backoffMs: (attempt: number) => backoffMs(attempt, retryBackoffMsMin, retryBackoffMsMax),
      timers: this.ctx.timers,
      signal: this.ctx.signal,
    } as const;
  }

  private async sendEnlisted(
    tx: CoordinatedTx,
    e: Enlistment,
    operation: RwOperation,
    pipelined: boolean,
  ): Promise<RwResult> {
    if (isWrite(operation)) {
      e.wrote = true;
      tx.mayHaveWritten = true;
    }
    let response: ReadWriteResponse;
    try {
      response = await this.send(tx, e.partitionId, e.primaryName, operation, e.token, pipelined);
    } catch (error) {
      const failure = asBasaltError(error);
      const executed = isUnexecuted(failure) ? 'no' : 'unknown';
      throw this.operationFailed(tx, e.partitionId, e.primaryName, failure, executed, true);
    }
    if (!sameEnlistmentToken(response.lease.token, e.token)) {
      throw this.abortOnly(tx, primaryChangedError(tx, e.partitionId, 'a response named another lease'));
    }
    e.expiration = maxTimestamp(e.expiration, response.lease.expiration);
    this.absorb(e, response, operation);
    return response.result;
  }

  private async send(
    tx: CoordinatedTx,
    partitionId: PartitionId,
    to: NodeName,
    operation: RwOperation,
    token: Enlistment['token'] | undefined,
    pipelined: boolean,
  ): Promise<ReadWriteResponse> {
    const commitPartitionId = tx.commitPartitionId;
    assert(commitPartitionId !== undefined, 'the commit partition is fixed before the first request');
    const base = {
      kind: 'ReadWriteRequest',
      partitionId,
      txId: tx.id,
      coordinatorId: this.self.id,
      commitPartitionId,
      opSeq: tx.nextOpSeq(),
      full: false,
      ...(pipelined && isWrite(operation) && { pipelined: true }),
      ...(pipelined && isWrite(operation) && this.ctx.settings.parallelCommit && { parallelCommit: true }),
      operation,
    } as const;
    const body: ReadWriteRequest = token === undefined ? base : { ...base, token };
    const response = await this.ctx.request(to, body, {
      timeoutMs: this.ctx.settings.opRequestTimeoutMs,
      signal: this.ctx.signal,
    });
    return expectKind(response, 'ReadWriteResponse');
  }

  /**
   * What an operation's failure does to the tx, and the error the operation reports. `primary`: where the request
   * whose outcome is unknown went (none: it was never sent).
   */
  private operationFailed(
    tx: CoordinatedTx,
    partitionId: PartitionId,
    primary: NodeName | undefined,
    error: BasaltError,
    executed: Execution,
    enlisted: boolean,
  ): BasaltError {
    // A refusal that did nothing, or a first request that never found a primary: the tx may go on.
    if (executed === 'no' || (!enlisted && error.code === 'PRIMARY_MISS')) return error;
    if (!enlisted && primary !== undefined) tx.noteUncertain(partitionId, primary);
    switch (error.code) {
      case 'PRIMARY_MISS':
        return this.abortOnly(tx, primaryChangedError(tx, partitionId, error.toData().message, error));
      case 'TX_LOCK_CONFLICT':
      case 'TX_ABORTED':
      case 'TX_TIMEOUT':
      case 'TX_OP_STALE':
        return this.abortOnly(tx, error);
      default: {
        const message = `the outcome of an operation of tx ${tx.id} on ${partitionId} is unknown: ${error.toData().message}`;
        const details = { txId: tx.id, partitionId, reason: 'operation-failed', code: error.code };
        return this.abortOnly(tx, new BasaltError('TX_ABORTED', message, details, { cause: error }));
      }
    }
  }

  private abortOnly(tx: CoordinatedTx, cause: BasaltError): BasaltError {
    tx.makeAbortOnly(cause);
    return cause;
  }

  /** A write's effective timestamp goes into the clock now, or, answered before it applied, at its confirmation. */
  private absorb(e: Enlistment, response: ReadWriteResponse, operation: RwOperation): void {
    if (response.writeTs !== undefined) this.clock.update(response.writeTs);
    else if (response.pipelined === true) {
      e.unconfirmed = true;
      // Only a parallel commit names them (Enlistment.pipelinedKeys).
      if (this.ctx.settings.parallelCommit) notePipelined(e, operation);
    }
  }

  // ------------------------------------------------------------------------------------------ direct mapping

  /** A single-key operation of a tx coordinated elsewhere, sent straight to this node (coordinator-direct.ts). */
  serveDirect(table: string, operation: DirectOperation, tx: DirectTx): Promise<DirectServed> {
    this.checkRunning();
    return serveDirect(this.ctx, this.self, table, operation, tx);
  }

  /** What a client learned from its direct operations of `tx`, taken over while the tx is active. */
  adoptDirect(tx: CoordinatedTx, handoff: DirectHandoff): void {
    if (!tx.isActive) return;
    adoptDirect(this.ctx, tx, handoff);
  }

  /** Where a client sends `tx`'s direct operations: once its commit partition is fixed. */
  directInfo(
    tx: CoordinatedTx,
  ): { readonly coordinatorId: NodeId; readonly commitPartitionId: PartitionId } | undefined {
    const commitPartitionId = tx.commitPartitionId;
    return commitPartitionId === undefined ? undefined : { coordinatorId: this.self.id, commitPartitionId };
  }

  // ------------------------------------------------------------------------------------------ commit / rollback

  commit(tx: CoordinatedTx): Promise<void> {
    if (tx.finish !== undefined) return this.repeatedCommit(tx);
    this.stopTimer(tx);
    tx.startFinishing('commit', false);
    const promise = this.finisher.commit(tx);
    tx.finishPromise = promise;
    return promise;
  }

  /**
   * Commits with the writes a client buffered until now (DESIGN §4b "Fewer rounds per commit"): each partition's
   * writes go to its primary answered once applied (not pipelined), so their effective timestamps are absorbed before
   * commitTs and no confirmation round is needed; then the ordinary commit. If a write fails the tx is rolled back
   * and the write's error reported (a lock conflict stays retryable).
   */
  async commitWith(tx: CoordinatedTx, writes: readonly TxWrite[]): Promise<void> {
    checkWrites(writes);
    if (writes.length > 0 && tx.finish === undefined) {
      try {
        await this.operation(tx, () => this.writeForCommit(tx, writes));
      } catch (error) {
        await this.rollback(tx);
        throw error;
      }
    }
    return this.commit(tx);
  }

  /**
   * Per partition (in parallel), the last write of each key: the puts as one putAll, then each removal; those the
   * commit can carry to the commit partition are kept for the finish instead (`carriable`).
   */
  private async writeForCommit(tx: CoordinatedTx, writes: readonly TxWrite[]): Promise<void> {
    for (const w of writes) checkTable(w.table);
    const groups = groupByPartition(writes, (w) => this.ctx.placement.partitionOf(w.table, w.key));
    this.chooseCommitPartition(tx, groups);
    const perPartition = [...groups].map(([partitionId, items]) => {
      const last = new Map<string, TxWrite>();
      for (const i of items) last.set(writes[i]!.key, writes[i]!);
      return [partitionId, [...last.values()]] as const;
    });
    const carried = this.ctx.settings.carriedCommit ? this.carriable(tx, perPartition) : undefined;
    await settleAll(
      perPartition.map(async ([partitionId, last]) => {
        if (partitionId === carried?.partitionId) return;
        const entries: KeyValue[] = [];
        const removals: string[] = [];
        for (const w of last) {
          if (w.value === undefined) removals.push(w.key);
          else entries.push({ key: w.key, value: w.value });
        }
        // A parallel commit confirms these while its record is written: they may be answered before they apply.
        const pipelined = this.ctx.settings.parallelCommit && this.ctx.settings.pipelinedWrites;
        if (entries.length > 0) {
          expectResult(await this.execute(tx, partitionId, { op: 'putAll', entries }, pipelined), 'written');
        }
        for (const key of removals) {
          expectResult(await this.execute(tx, partitionId, { op: 'remove', key }, pipelined), 'written');
        }
      }),
    );
    if (carried !== undefined) {
      tx.carried = carried;
      tx.mayHaveWritten = true;
    }
  }

  /**
   * The writes the commit can carry: those to the commit partition, if the tx wrote nothing there yet and holds
   * every one of their rows X-locked there, and if the leases of its other partitions and its deadline leave room
   * for the commit partition to take the commitTs (CARRIED_COMMIT_MARGIN_MS).
   */
  private carriable(
    tx: CoordinatedTx,
    perPartition: readonly (readonly [PartitionId, readonly TxWrite[]])[],
  ): CarriedPlan | undefined {
    const partitionId = tx.commitPartitionId;
    const writes = perPartition.find(([p]) => p === partitionId)?.[1];
    const e = partitionId === undefined ? undefined : tx.enlistment(partitionId);
    if (writes === undefined || e === undefined || e.wrote || e.unconfirmed || e.xLocked === undefined)
      return undefined;
    const locked = e.xLocked;
    if (writes.length > LIMITS.updateAllWritesMax || !writes.every((w) => locked.has(w.key))) return undefined;
    if (carriedBound(tx, e.partitionId) <= addMs(this.clock.now(), CARRIED_COMMIT_MARGIN_MS)) return undefined;
    return {
      partitionId: e.partitionId,
      writes: writes.map((w) =>
        w.value === undefined ? { kind: 'remove', key: w.key } : { kind: 'put', key: w.key, value: w.value },
      ),
    };
  }

  /** Rows a read `forUpdate` locked exclusively: noted on the partition's enlistment (Enlistment.xLocked). */
  private noteLocked(tx: CoordinatedTx, partitionId: PartitionId, operation: RwOperation): void {
    const e = tx.enlistment(partitionId);
    if (e?.xLocked === undefined) return;
    const keys = operation.op === 'get' ? [operation.key] : operation.op === 'getAll' ? operation.keys : [];
    for (const key of keys) e.xLocked.add(key);
    if (e.xLocked.size > LIMITS.txBatchKeysMax) e.xLocked = undefined;
  }

  rollback(tx: CoordinatedTx): Promise<void> {
    if (tx.finishPromise !== undefined) return tx.finishPromise.then(ignore, ignore);
    this.stopTimer(tx);
    tx.startFinishing('rollback', false);
    const promise = this.finisher.rollback(tx);
    tx.finishPromise = promise;
    return promise;
  }

  private async repeatedCommit(tx: CoordinatedTx): Promise<void> {
    const finish = tx.finish;
    assert(finish !== undefined && tx.finishPromise !== undefined, 'a repeated commit follows a finish');
    if (finish.kind === 'rollback') {
      if (finish.timedOut) throw timeoutError(tx);
      if (finish.cause !== undefined) throw rolledBackErrorForOp(tx, finish.cause);
      throw new BasaltError('TX_ALREADY_FINISHED', `tx ${tx.id} was rolled back`, { txId: tx.id });
    }
    try {
      await tx.finishPromise;
    } catch (error) {
      // The first commit could not tell; the background retries may have learned the outcome since.
      const outcome = tx.outcome;
      if (!(error instanceof BasaltError && error.code === 'TX_OUTCOME_UNKNOWN') || outcome === undefined) throw error;
      if (outcome.state === 'COMMITTED') return;
      throw new BasaltError('TX_ABORTED', `tx ${tx.id} was aborted`, { txId: tx.id, reason: 'finished-aborted' });
    }
  }

  private timeOut(tx: CoordinatedTx): void {
    tx.timeoutTimer = undefined;
    if (!tx.isActive) return;
    tx.makeAbortOnly(timeoutError(tx));
    tx.startFinishing('rollback', true);
    tx.finishPromise = this.finisher.rollback(tx);
    tx.finishPromise.catch(this.ctx.onError);
  }

  private stopTimer(tx: CoordinatedTx): void {
    if (tx.timeoutTimer !== undefined) this.timers.clearTimer(tx.timeoutTimer);
    tx.timeoutTimer = undefined;
  }

  private forget(tx: CoordinatedTx): void {
    tx.markFinished();
    this.live.delete(tx.id);
  }

  // ------------------------------------------------------------------------------------------ one-phase writes

  /** An implicit `put` outside a transaction: one replicated command, no intent (one-phase commit). */
  putImplicit(
    table: string,
    key: string,
    value: Value,
    options?: PutOptions,
    age?: OnePhaseAge,
  ): Promise<OnePhaseResult> {
    checkTable(table);
    checkKey(key);
    checkValue(value);
    const operation = putOperation(key, value, checkPutOptions(options));
    return this.onePhase(this.ctx.placement.partitionOf(table, key), operation, age);
  }

  removeImplicit(table: string, key: string, age?: OnePhaseAge): Promise<OnePhaseResult> {
    checkTable(table);
    checkKey(key);
    return this.onePhase(this.ctx.placement.partitionOf(table, key), { op: 'remove', key }, age);
  }

  /**
   * An implicit `putAll`: one-phase when every key is in one partition; otherwise an ordinary tx (begin, putAll,
   * commit). Undefined for an empty batch (nothing to do).
   */
  async putAllImplicit(table: string, entries: readonly KeyValue[]): Promise<OnePhaseResult | undefined> {
    checkTable(table);
    checkEntries(entries);
    const partitions = new Set(entries.map((e) => this.ctx.placement.partitionOf(table, e.key)));
    const [only] = partitions;
    if (only === undefined) return undefined;
    if (partitions.size === 1) return this.onePhase(only, { op: 'putAll', entries });
    const tx = this.begin();
    try {
      await this.putAll(tx, table, entries);
      await this.commit(tx);
    } catch (error) {
      await this.rollback(tx);
      throw error;
    }
    const outcome = tx.outcome;
    assert(outcome?.state === 'COMMITTED', 'a commit that returned is COMMITTED');
    return { txId: tx.id, commitTs: outcome.commitTs };
  }

  /**
   * Resending a write that may have applied could apply it twice (not linearizable): only a proven non-execution or a
   * miss is sent again; anything else reports TX_OUTCOME_UNKNOWN (onePhaseFailed).
   */
  private async onePhase(partitionId: PartitionId, operation: RwOperation, age?: OnePhaseAge): Promise<OnePhaseResult> {
    this.checkRunning();
    const tx = this.newTx(undefined, age?.last);
    if (age !== undefined) age.last = tx.id;
    tx.commitPartitionId = partitionId;
    const routed = await sendToPrimary({
      ...this.firstRequestRoute(partitionId),
      send: async (to) => {
        const body = onePhaseRequest(this, tx, partitionId, operation);
        const options = { timeoutMs: this.ctx.settings.opRequestTimeoutMs, signal: this.ctx.signal };
        const response = expectKind(await this.ctx.request(to, body, options), 'ReadWriteResponse');
        if (response.writeTs === undefined) throw protocolError('a one-phase write answered without its writeTs');
        return { writeTs: response.writeTs, primary: response.lease.holderName };
      },
      primaryOf: (written) => written.primary,
    });
    if (routed.kind !== 'ok') {
      throw this.onePhaseFailed(tx, routed.error, routed.kind === 'miss' ? 'no' : routed.executed);
    }
    const commitTs = routed.response.writeTs;
    this.clock.update(commitTs);
    this.txStates.update(tx.id, { state: 'COMMITTED', commitTimestamp: commitTs, reason: 'one-phase' });
    return { txId: tx.id, commitTs };
  }

  /** A failed one-phase write: ABORTED if it certainly did not apply; else its entry is dropped (nobody can ask). */
  private onePhaseFailed(tx: CoordinatedTx, error: BasaltError, executed: Execution): BasaltError {
    if (executed === 'no' || ONE_PHASE_NOT_APPLIED.has(error.code)) {
      this.txStates.update(tx.id, { state: 'ABORTED', reason: 'one-phase' });
      return error;
    }
    this.txStates.remove(tx.id, 'one-phase');
    return new BasaltError('TX_OUTCOME_UNKNOWN', `a one-phase write may or may not have applied: ${error.message}`, {
      txId: tx.id,
      code: error.code,
    });
  }

  // ------------------------------------------------------------------------------------------ state requests

  /** The coordinator path of write intent resolution: see coordinator-state-request.ts. */
  handleTxStateCoordinatorRequest(request: TxStateCoordinatorRequest): Promise<TxStateResponse> {
    if (request.readWrite !== undefined) this.abortForLostLocks(request);
    return answerCoordinatorStateRequest(this.ctx, request, this.ctx.settings.stateWaitMs);
  }

  /**
   * ignite3-protocol.md §8: a read-write request met the intent of a tx this coordinator still holds PENDING, without
   * its lock: the intent's primary changed and the tx lost its locks there, so it can no longer commit serializably.
   * It becomes abort-only and the abort decision is installed at once (the compare-and-set to FINISHING without a
   * commitTs), so the answer is ABORTED; the rollback then runs at once (its other locks are released), and the
   * user's next operation or commit fails TX_ABORTED (retryable). A tx already finishing is left alone.
   */
  private abortForLostLocks(request: TxStateCoordinatorRequest): void {
    const tx = this.live.get(request.txId);
    const entry = this.txStates.entry(request.txId);
    if (tx === undefined || entry?.state !== 'PENDING' || entry.coordinatorId !== this.self.id) return;
    const partitionId = request.readWrite?.partitionId;
    const cause = new BasaltError(
      'TX_ABORTED',
      `tx ${tx.id} lost its locks on ${String(partitionId)} with a primary change`,
      { txId: tx.id, partitionId, reason: 'lost-locks' },
    );
    tx.makeAbortOnly(cause);
    if (this.txStates.beginFinish(tx.id).kind === 'began') tx.finishingInstalled = true;
    // A commit waiting for its operations or its writes' confirmations sees the cause and rolls back.
    if (tx.finish !== undefined) return;
    this.stopTimer(tx);
    tx.startFinishing('rollback', false, cause);
    tx.finishPromise = this.finisher.rollback(tx);
    tx.finishPromise.catch(this.ctx.onError);
  }

  // ------------------------------------------------------------------------------------------ lifecycle

  /**
   * Stops: background retries end, pending requests and pauses are cancelled (their operations fail), timers are
   * cleared. Transactions left open are not finished (their primaries' recovery handles them once this node is gone).
   */
  stop(): void {
    if (this.stopper.signal.aborted) return;
    this.stopper.abort(new BasaltError('CANCELLED', `the coordinator of ${this.self.name} stopped`));
    for (const tx of this.live.values()) this.stopTimer(tx);
  }

  private checkRunning(): void {
    if (this.stopper.signal.aborted) {
      throw new BasaltError('NODE_UNAVAILABLE', `the coordinator of ${this.self.name} is stopped`, undefined, {
        executed: 'no',
      });
    }
  }
}

function onePhaseRequest(
  coordinator: TxCoordinator,
  tx: CoordinatedTx,
  partitionId: PartitionId,
  operation: RwOperation,
): ReadWriteRequest {
  return {
    kind: 'ReadWriteRequest',
    partitionId,
    txId: tx.id,
    coordinatorId: coordinator.self.id,
    commitPartitionId: partitionId,
    opSeq: tx.nextOpSeq(),
    full: true,
    operation,
  };
}

/** The field a read carries when it locks for update (omitted otherwise: the common case stays as it was). */
function lockingRead(forUpdate: boolean): { readonly forUpdate?: true } {
  return forUpdate ? { forUpdate: true } : {};
}

/** The keys of a write answered before it applied, for a parallel commit's record (Enlistment.pipelinedKeys). */
function notePipelined(e: Enlistment, operation: RwOperation): void {
  const keys = e.pipelinedKeys;
  if (keys === undefined) return;
  if (operation.op === 'put' || operation.op === 'remove') keys.add(operation.key);
  else if (operation.op === 'putAll') for (const entry of operation.entries) keys.add(entry.key);
  if (keys.size > LIMITS.updateAllWritesMax) e.pipelinedKeys = undefined;
}

function isWrite(operation: RwOperation): boolean {
  return operation.op === 'put' || operation.op === 'remove' || operation.op === 'putAll';
}

type ResultOf<K extends RwResult['op']> = Extract<RwResult, { readonly op: K }>;

function expectResult<K extends RwResult['op']>(result: RwResult, op: K): ResultOf<K> {
  if (result?.op !== op) throw protocolError(`expected a ${op} result, got ${String(result?.op)}`);
  return result as ResultOf<K>;
}

function protocolError(message: string): BasaltError {
  return new BasaltError('INTERNAL', message);
}

function timeoutError(tx: CoordinatedTx): BasaltError {
  return new BasaltError('TX_TIMEOUT', `tx ${tx.id} timed out and was rolled back`, { txId: tx.id });
}

/** An operation of an abort-only tx: the cause's code, so that a retryable cause stays retryable. */
function rolledBackErrorForOp(tx: CoordinatedTx, cause: BasaltError): BasaltError {
  const message = `tx ${tx.id} can only roll back: ${cause.toData().message}`;
  return new BasaltError(cause.code, message, { ...cause.details, txId: tx.id }, { cause });
}

function ignore(): void {}

export interface BeginTxOptions {
  /** This tx's own timeout in ms, carried in its id (default: the coordinator's txTimeoutMs). */
  readonly timeoutMs?: number;
  /**
   * The attempt this tx retries (an id this coordinator made): the tx keeps that attempt's age for wait-die, so that
   * a retry is not younger than the txs it lost to (TxIdGenerator.nextRetry); its deadline is still its own timeout
   * from now. Ignored for an id of another node, or once the kept age would stretch the timeout past txTimeoutMsMax.
   */
  readonly retryOf?: TxId;
}

/** A positive integer up to `maxMs`, or undefined; anything else is INVALID_ARGUMENT. */
export function checkTimeoutMs(timeoutMs: unknown, maxMs: number): number | undefined {
  if (timeoutMs === undefined) return undefined;
  if (typeof timeoutMs !== 'number' || !Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > maxMs) {
    throw new BasaltError('INVALID_ARGUMENT', `timeoutMs must be an integer from 1 to ${maxMs}`, {
      timeoutMs: typeof timeoutMs === 'number' ? timeoutMs : String(timeoutMs),
      txTimeoutMsMax: maxMs,
    });
  }
  return timeoutMs;
}
