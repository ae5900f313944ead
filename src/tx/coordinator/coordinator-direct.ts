/**
 * Direct mapping on the node side (tx/core/direct.ts): serving a transaction's operation a client sent straight to
 * this node, the key's primary's, and adopting what the client learned from such operations into the coordinator's
 * record of the transaction.
 *
 * The seed's update points on this path: the primary that serves a direct operation puts the tx into its map as
 * PENDING under the coordinator the request names, as for a relayed one (the request it executes is the same
 * ReadWriteRequest); the coordinator's own map went PENDING at the begin, which rode on the tx's first operation
 * through the coordinator; FINISHING and the outcome follow at the commit or rollback, which always goes through the
 * coordinator, after the handoff, so every partition the tx touched is in its enlisted set when it takes commitTs and
 * when its cleanup runs.
 */
import { BasaltError } from '../../core/errors.js';
import type { NodeIdentity } from '../../core/ids.js';
import { maxTimestamp } from '../../hlc/timestamp.js';
import type { Value } from '../../storage/mv-partition-storage.js';
import type { DirectAnswer, DirectHandoff, DirectTx } from '../core/direct.js';
import { expectKind, putOperation, type ReadWriteRequest, type RwOperation, type RwResult } from '../core/messages.js';
import { checkKey, checkPutOptions, checkTable, checkValue, type PutOptions } from '../core/user-input.js';
import type { CoordinatorContext } from './context.js';
import { type CoordinatedTx, primaryChangedError, sameEnlistmentToken } from './coordinated-tx.js';

/** A single-key operation a client sent straight to this node. */
export type DirectOperation =
  | { readonly op: 'get'; readonly key: string; readonly forUpdate?: boolean }
  | { readonly op: 'put'; readonly key: string; readonly value: Value; readonly options?: PutOptions }
  | { readonly op: 'remove'; readonly key: string };

export interface DirectServed {
  readonly result: RwResult;
  readonly answer: DirectAnswer;
}

/**
 * Runs `operation` of the tx `tx` names on this node's replica of the key's partition, as the ReadWriteRequest its
 * coordinator would have sent: PRIMARY_MISS when this node is not the primary (the request did nothing; the client
 * sends it through the coordinator instead), and every other failure as the primary reports it.
 */
export async function serveDirect(
  ctx: CoordinatorContext,
  self: NodeIdentity,
  table: string,
  operation: DirectOperation,
  tx: DirectTx,
): Promise<DirectServed> {
  checkTable(table);
  checkKey(operation.key);
  const rw = rwOperation(operation);
  const partitionId = ctx.placement.partitionOf(table, operation.key);
  const write = rw.op !== 'get';
  const body: ReadWriteRequest = {
    kind: 'ReadWriteRequest',
    partitionId,
    txId: tx.txId,
    coordinatorId: tx.coordinatorId,
    commitPartitionId: tx.commitPartitionId,
    opSeq: tx.opSeq,
    full: false,
    ...(tx.token !== undefined && { token: tx.token }),
    ...(write && ctx.settings.pipelinedWrites && { pipelined: true }),
    operation: rw,
  };
  const response = expectKind(
    await ctx.request(self.name, body, { timeoutMs: ctx.settings.opRequestTimeoutMs, signal: ctx.signal }),
    'ReadWriteResponse',
  );
  ctx.counters?.add('coordinator.directOperations');
  const result = response.result;
  const expiresAt = 'readExpiresAt' in result ? result.readExpiresAt : undefined;
  return {
    result,
    answer: {
      partitionId,
      lease: response.lease,
      ...(response.writeTs !== undefined && { writeTs: response.writeTs }),
      ...(response.pipelined === true && { pipelined: true }),
      ...(expiresAt !== undefined && { readExpiresAt: expiresAt }),
    },
  };
}

function rwOperation(operation: DirectOperation): RwOperation {
  switch (operation.op) {
    case 'get':
      return operation.forUpdate === true
        ? { op: 'get', key: operation.key, forUpdate: true }
        : { op: 'get', key: operation.key };
    case 'put':
      checkValue(operation.value);
      return putOperation(operation.key, operation.value, checkPutOptions(operation.options));
    case 'remove':
      return { op: 'remove', key: operation.key };
  }
}

/**
 * Takes a client's direct enlistments into the coordinator's record of `tx`, before its commit or rollback or an
 * operation that may reach their partitions: each partition enlisted under the lease the client learned (a second
 * handoff of one merges; another lease for a partition enlisted already makes the tx abort-only, its primary
 * changed), the coordinator's opSeqs raised above every direct one, the writes' effective timestamps absorbed into the
 * clock (so commitTs exceeds them), the reads' expiry noted, and the uncertain first requests noted for cleanup.
 * Refused (INVALID_ARGUMENT) for a tx whose commit partition is not fixed yet (no direct operation can name one).
 */
export function adoptDirect(ctx: CoordinatorContext, tx: CoordinatedTx, handoff: DirectHandoff): void {
  if (handoff.enlisted.length === 0 && handoff.uncertain.length === 0) return;
  if (tx.commitPartitionId === undefined) {
    throw new BasaltError('INVALID_ARGUMENT', `tx ${tx.id} sent no operation yet: it has no direct enlistment`, {
      txId: tx.id,
    });
  }
  if (handoff.writeTs !== undefined) {
    ctx.clock.checkUntrusted(handoff.writeTs, 'a direct write timestamp');
    ctx.clock.update(handoff.writeTs);
  }
  if (handoff.readExpiresAt !== undefined) tx.noteReadExpiry(handoff.readExpiresAt);
  for (const d of handoff.enlisted) {
    tx.raiseOpSeq(d.opSeq);
    if (d.wrote) tx.mayHaveWritten = true;
    const known = tx.enlistment(d.partitionId);
    if (known === undefined) {
      const e = tx.enlist(d.partitionId, d.lease, d.wrote);
      e.unconfirmed = d.unconfirmed;
      // Keys unknown here: a parallel commit confirms these writes before its record; nothing rides with the commit.
      e.pipelinedKeys = undefined;
      e.xLocked = undefined;
    } else if (!sameEnlistmentToken(known.token, d.lease.token)) {
      const why = 'a direct operation named another lease';
      tx.makeAbortOnly(primaryChangedError(tx, d.partitionId, why));
    } else {
      known.expiration = maxTimestamp(known.expiration, d.lease.expiration);
      known.wrote ||= d.wrote;
      known.unconfirmed ||= d.unconfirmed;
      if (d.unconfirmed) known.pipelinedKeys = undefined;
    }
  }
  for (const u of handoff.uncertain) {
    tx.mayHaveWritten = true;
    tx.noteUncertain(ctx.placement.partitionOf(u.table, u.key), u.node);
  }
  ctx.counters?.add('coordinator.directHandoffs');
}
