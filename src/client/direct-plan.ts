/**
 * The client side of direct mapping (tx/core/direct.ts): which of a transaction's operations go straight to the
 * primary of their key, what those taught the client, and the handoff that gives it to the coordinator.
 *
 * A partition is named here by its table and index (`DirectRoute`), the server's id for it learned from the first
 * direct answer. Per partition, one sender in a transaction until the handoff:
 * - `viaCoordinator`: partitions an operation through the coordinator may have reached (the first operation's, a
 *   getAll's or putAll's keys'; all of them once a scan ran or a key's route was unknown): never served directly;
 * - `enlisted`: partitions served directly; an operation through the coordinator that may reach one first waits for
 *   the direct operations in flight and carries the handoff, and the partition goes to the coordinator for good.
 * Failures follow the coordinator's rules (coordinator.ts): a first request refused without effect (PRIMARY_MISS,
 * `executed: 'no'`) is sent through the coordinator instead; any other failure makes the transaction abort-only (a
 * first request's partition handed over as uncertain); an enlisted partition answering under another lease too.
 */
import { BasaltError, type Execution, isBasaltError } from '../core/errors.js';
import type { HybridTimestamp, NodeName, PartitionId } from '../core/ids.js';
import { maxTimestamp } from '../hlc/timestamp.js';
import { NO_CEILING } from '../net/body-checks.js';
import { sameEnlistmentToken } from '../tx/coordinator/coordinated-tx.js';
import {
  type DirectAnswer,
  type DirectEnlistment,
  type DirectHandoff,
  type DirectUncertain,
  directAnswerCheck,
} from '../tx/core/direct.js';
import type { LeaseInfo } from '../tx/core/messages.js';
import { isTxId } from '../tx/core/tx-id.js';
import type { ClientRequest } from './protocol.js';

/** Where a key's primary is, as the client's routes say: its node's connection and its partition's name here. */
export interface DirectTarget {
  readonly connection: DirectConnection;
  readonly node: NodeName;
  /** `table#index`: the same for every key of one partition. */
  readonly partition: string;
}

/** A key's target, or undefined when its table's routes are unknown. */
export type DirectRoute = (table: string, key: string) => DirectTarget | undefined;

/** What the plan needs of a connection (remote.ts RemoteConnection). */
export interface DirectConnection {
  readonly isClosed: boolean;
  call(request: Omit<ClientRequest, 'id'>, onLoss?: 'closed' | 'unknown'): Promise<unknown>;
}

interface Enlisted {
  readonly node: NodeName;
  readonly connection: DirectConnection;
  readonly partitionId: string;
  readonly lease: LeaseInfo;
  wrote: boolean;
  unconfirmed: boolean;
  opSeq: number;
  /** Handed to the coordinator: its operations go there from now on. */
  handed: boolean;
}

/** A single-key operation as sent directly (the request without its `direct` field). */
export type DirectCall =
  | { readonly kind: 'get'; readonly table: string; readonly key: string; readonly options?: { forUpdate: true } }
  | {
      readonly kind: 'put';
      readonly table: string;
      readonly key: string;
      readonly value: unknown;
      readonly options?: { ttlMs?: number; expiresAt?: HybridTimestamp };
    }
  | { readonly kind: 'remove'; readonly table: string; readonly key: string };

/** The direct answer's fields besides `direct` (a get's `value`), or `undefined`: send it through the coordinator. */
export type DirectResult = Readonly<Record<string, unknown>> | undefined;

export class DirectPlan {
  private tx: { readonly txId: string; readonly coordinatorId: string; readonly commitPartitionId: string } | undefined;
  /** The coordinator's node's connection (its partitions' primaries there need no direct request). */
  private coordinator: DirectConnection | undefined;
  private readonly enlisted = new Map<string, Enlisted>();
  /** First requests under way, by partition: their partition is neither enlisted nor the coordinator's yet. */
  private readonly reserved = new Set<string>();
  private readonly viaCoordinator = new Set<string>();
  private allViaCoordinator = false;
  private opSeq = 0;
  private inFlight = 0;
  private idleWaiters: (() => void)[] = [];
  private readonly uncertain: DirectUncertain[] = [];
  private writeTs: HybridTimestamp | undefined;
  private readExpiresAt: HybridTimestamp | undefined;
  /** Why the transaction can only roll back (a direct operation failed with an unknown outcome, ...). */
  abortCause: BasaltError | undefined;
  /** The commit or rollback started: no direct operation is sent any more (rule 6, as the coordinator refuses). */
  private closed = false;

  constructor(private readonly route: DirectRoute) {}

  /** The begun transaction as its first answer named it (`begun`), on the coordinator's `connection`. */
  noteBegun(named: Readonly<Record<string, unknown>>, connection: DirectConnection): void {
    const { txId, coordinatorId, commitPartitionId } = named;
    if (!isTxId(txId) || typeof coordinatorId !== 'string' || typeof commitPartitionId !== 'string') return;
    this.tx = { txId, coordinatorId, commitPartitionId };
    this.coordinator = connection;
  }

  /**
   * Sends `call` straight to its key's primary when the plan allows (see the module header), else answers undefined
   * and counts the key's partition as the coordinator's.
   */
  async send(call: DirectCall): Promise<DirectResult> {
    let target = this.target(call.table, call.key);
    // A first request to the partition is under way: what it enlists decides where this one goes.
    while (target !== undefined && this.reserved.has(target.partition)) {
      await this.idle();
      target = this.target(call.table, call.key);
    }
    if (target === undefined) return undefined;
    const known = this.enlisted.get(target.partition);
    if (known === undefined) this.reserved.add(target.partition);
    this.inFlight++;
    try {
      return await this.attempt(call, target, known);
    } finally {
      this.reserved.delete(target.partition);
      this.inFlight--;
      if (this.inFlight === 0) for (const wake of this.idleWaiters.splice(0)) wake();
    }
  }

  private target(table: string, key: string): DirectTarget | undefined {
    if (this.closed) {
      throw new BasaltError('TX_ALREADY_FINISHED', `tx ${this.tx?.txId} is finishing`, undefined, { executed: 'no' });
    }
    if (this.abortCause !== undefined) throw rolledBack(this.abortCause);
    if (this.tx === undefined || this.allViaCoordinator) return this.toCoordinator(table, [key]);
    const target = this.route(table, key);
    if (target === undefined) return this.toCoordinator(table, [key]);
    if (this.reserved.has(target.partition)) return target;
    const known = this.enlisted.get(target.partition);
    if (known !== undefined) {
      if (known.handed) return this.toCoordinator(table, [key]);
      return { connection: known.connection, node: known.node, partition: target.partition };
    }
    if (this.viaCoordinator.has(target.partition) || target.connection === this.coordinator) {
      return this.toCoordinator(table, [key]);
    }
    return target.connection.isClosed ? this.toCoordinator(table, [key]) : target;
  }

  private async attempt(call: DirectCall, target: DirectTarget, known: Enlisted | undefined): Promise<DirectResult> {
    const tx = this.tx!;
    const opSeq = ++this.opSeq;
    const direct = { ...tx, opSeq, ...(known !== undefined && { token: known.lease.token }) };
    let result: unknown;
    try {
      result = await target.connection.call({ ...call, direct } as unknown as Omit<ClientRequest, 'id'>, 'unknown');
    } catch (error) {
      const failure = isBasaltError(error) ? error : new BasaltError('INTERNAL', String(error));
      return this.failed(call, target, known, failure);
    }
    let answer: DirectAnswer;
    try {
      answer = answerOf(result);
    } catch (error) {
      // Executed there, but not understood here: as an unknown outcome.
      return this.failed(call, target, known, error as BasaltError);
    }
    if (known === undefined) {
      this.enlisted.set(target.partition, {
        node: target.node,
        connection: target.connection,
        partitionId: answer.partitionId,
        lease: answer.lease,
        wrote: false,
        unconfirmed: false,
        opSeq,
        handed: false,
      });
    } else if (!sameEnlistmentToken(known.lease.token, answer.lease.token)) {
      throw this.abortOnly(
        new BasaltError('TX_ABORTED', `the primary of ${known.partitionId} changed under tx ${tx.txId}`, {
          txId: tx.txId,
          partitionId: known.partitionId,
          reason: 'primary-changed',
        }),
      );
    }
    this.absorb(this.enlisted.get(target.partition)!, call, answer, opSeq);
    const { direct: _answer, ...rest } = result as Record<string, unknown>;
    return rest;
  }

  private absorb(e: Enlisted, call: DirectCall, answer: DirectAnswer, opSeq: number): void {
    e.opSeq = Math.max(e.opSeq, opSeq);
    if (call.kind !== 'get') e.wrote = true;
    if (answer.pipelined === true) e.unconfirmed = true;
    if (answer.writeTs !== undefined) this.writeTs = maxTimestamp(this.writeTs ?? answer.writeTs, answer.writeTs);
    const expiry = answer.readExpiresAt;
    if (expiry !== undefined && (this.readExpiresAt === undefined || expiry < this.readExpiresAt)) {
      this.readExpiresAt = expiry;
    }
  }

  /** coordinator.ts `operationFailed`, for a direct operation. */
  private failed(
    call: DirectCall,
    target: DirectTarget,
    known: Enlisted | undefined,
    error: BasaltError,
  ): DirectResult {
    const executed: Execution = error.executed ?? 'unknown';
    if (known === undefined && (executed === 'no' || error.code === 'PRIMARY_MISS')) {
      // Did nothing there: the coordinator routes it (and owns the partition from now on).
      this.viaCoordinator.add(target.partition);
      return undefined;
    }
    if (executed === 'no') throw error;
    if (known === undefined) this.uncertain.push({ table: call.table, key: call.key, node: target.node });
    switch (error.code) {
      case 'TX_LOCK_CONFLICT':
      case 'TX_ABORTED':
      case 'TX_TIMEOUT':
      case 'TX_OP_STALE':
        throw this.abortOnly(error);
      default: {
        const txId = this.tx?.txId;
        const message = `the outcome of a direct operation of tx ${txId} is unknown: ${error.message}`;
        const details = { txId, reason: 'operation-failed', code: error.code };
        throw this.abortOnly(new BasaltError('TX_ABORTED', message, details, { cause: error }));
      }
    }
  }

  private abortOnly(cause: BasaltError): BasaltError {
    this.abortCause ??= cause;
    return cause;
  }

  /** Counts `keys`' partitions (all, for none) as the coordinator's; undefined: send through the coordinator. */
  private toCoordinator(table: string, keys: readonly string[] | undefined): undefined {
    if (keys === undefined) {
      this.allViaCoordinator = true;
      return undefined;
    }
    for (const key of keys) {
      const target = this.route(table, key);
      if (target === undefined) this.allViaCoordinator = true;
      else this.viaCoordinator.add(target.partition);
    }
    return undefined;
  }

  /**
   * Before an operation through the coordinator that may reach `keys`' partitions (every partition for a scan:
   * `keys` undefined): those count as the coordinator's from now on; if one was served directly, the direct
   * operations in flight are waited for and the handoff returned for the request to carry.
   */
  async beforeCoordinator(table: string, keys: readonly string[] | undefined): Promise<DirectHandoff | undefined> {
    if (this.abortCause !== undefined) throw rolledBack(this.abortCause);
    this.toCoordinator(table, keys);
    const overlaps = [...this.enlisted.keys(), ...this.reserved].some(
      (p) => this.allViaCoordinator || this.viaCoordinator.has(p),
    );
    if (!overlaps) return undefined;
    await this.idle();
    return this.handoff();
  }

  /** At the commit or rollback: every direct operation settled, and the handoff (undefined: nothing to hand). */
  async finishing(): Promise<DirectHandoff | undefined> {
    this.closed = true;
    await this.idle();
    return this.handoff();
  }

  private idle(): Promise<void> {
    if (this.inFlight === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Everything learned so far; partitions handed go through the coordinator from now on. */
  private handoff(): DirectHandoff | undefined {
    if (this.enlisted.size === 0 && this.uncertain.length === 0) return undefined;
    const enlisted: DirectEnlistment[] = [];
    for (const e of this.enlisted.values()) {
      e.handed = true;
      const { lease, wrote, unconfirmed, opSeq } = e;
      enlisted.push({ partitionId: e.partitionId as PartitionId, lease, wrote, unconfirmed, opSeq });
    }
    return {
      enlisted,
      uncertain: [...this.uncertain],
      ...(this.writeTs !== undefined && { writeTs: this.writeTs }),
      ...(this.readExpiresAt !== undefined && { readExpiresAt: this.readExpiresAt }),
    };
  }
}

function answerOf(result: unknown): DirectAnswer {
  const answer = typeof result === 'object' && result !== null ? (result as Record<string, unknown>)['direct'] : null;
  const problem = directAnswerCheck(answer, NO_CEILING);
  if (problem !== undefined) throw new BasaltError('MALFORMED_FRAME', `a direct answer: ${problem}`);
  return answer as DirectAnswer;
}

/** An operation of an abort-only transaction: the cause's code, so a retryable cause stays retryable. */
function rolledBack(cause: BasaltError): BasaltError {
  return new BasaltError(cause.code, `this transaction can only roll back: ${cause.message}`, cause.details, {
    cause,
  });
}
