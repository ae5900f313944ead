/**
 * Direct mapping (DESIGN §4b "Operations straight to the primaries"; Ignite 3's IGNITE-24561): a client that knows
 * the routes sends a single-key operation of a read-write transaction straight to the node of the key's primary,
 * naming the transaction, its coordinator and its commit partition, instead of through the coordinator, which would
 * relay it. The node serving it sends its own partition replica the ReadWriteRequest the coordinator would have sent,
 * and answers what the coordinator would have learned (`DirectAnswer`). The client keeps those as its enlistments and
 * hands them to the coordinator (`DirectHandoff`) with the commit or the rollback, or with an operation that may
 * reach one of their partitions through the coordinator; from then on the coordinator owns them as if it had
 * enlisted them itself (coordinator-direct.ts).
 *
 * Invariants the client keeps (remote.ts `DirectPlan`):
 * - a partition is served either directly or through the coordinator in one transaction, never both, until the
 *   handoff: the two send opSeqs from different counters, and a primary executes a tx's operations on a partition
 *   in rising opSeq order only (rule 7); after the handoff the coordinator's opSeqs lie above every direct one;
 * - the commit waits for every direct operation, and hands every enlistment over before the coordinator takes the
 *   commitTs (rule 6), so a commit never misses a partition with the tx's locks or intents;
 * - a direct operation whose outcome is unknown makes the tx abort-only (rule 7): it is then rolled back, its
 *   partition handed over as uncertain so the coordinator cleans it up.
 */
import type { HybridTimestamp, NodeId, NodeName, PartitionId, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import {
  arrayOf,
  boolean,
  type Check,
  fields,
  id,
  leaseBound,
  optional,
  positive,
  string,
  timestamp,
} from '../../net/body-checks.js';
import type { EnlistmentToken, LeaseInfo } from './messages.js';
import { isTxId } from './tx-id.js';

/** What a direct operation names of its transaction (the fields of the ReadWriteRequest the serving node sends). */
export interface DirectTx {
  readonly txId: TxId;
  readonly coordinatorId: NodeId;
  readonly commitPartitionId: PartitionId;
  readonly opSeq: number;
  /** The lease the partition was enlisted under by an earlier direct operation; absent on the first. */
  readonly token?: EnlistmentToken;
}

/** What the serving node answers besides the operation's result: what the coordinator would have learned. */
export interface DirectAnswer {
  readonly partitionId: PartitionId;
  readonly lease: LeaseInfo;
  /** The write applied at this effective timestamp (the coordinator's clock absorbs it before the commitTs). */
  readonly writeTs?: HybridTimestamp;
  /** The write was answered before it applied: the commit confirms it. */
  readonly pipelined?: true;
  /** The value read expires then: the commit must come before it. */
  readonly readExpiresAt?: HybridTimestamp;
}

/** A partition a client enlisted directly, as it hands it to the coordinator. */
export interface DirectEnlistment {
  readonly partitionId: PartitionId;
  readonly lease: LeaseInfo;
  readonly wrote: boolean;
  /** A write there was answered before it applied. */
  readonly unconfirmed: boolean;
  /** The highest opSeq sent there. */
  readonly opSeq: number;
}

/** A first direct operation whose outcome is unknown: the node it went to may hold the tx's locks or an intent. */
export interface DirectUncertain {
  readonly table: string;
  readonly key: string;
  readonly node: NodeName;
}

/** Everything a client learned from its direct operations, handed to the coordinator. */
export interface DirectHandoff {
  readonly enlisted: readonly DirectEnlistment[];
  readonly uncertain: readonly DirectUncertain[];
  /** The largest effective timestamp of the direct writes answered after their apply. */
  readonly writeTs?: HybridTimestamp;
  /** The earliest expiry among the values read directly. */
  readonly readExpiresAt?: HybridTimestamp;
}

const txId: Check = (v) => (isTxId(v) ? undefined : 'must be a tx id');
const token = fields({ holder: fields({ nodeId: id, incarnation: id }), start: leaseBound });
const leaseInfo = fields({ token, holderName: id, expiration: leaseBound });

/** The check of a direct operation's `direct` field. */
export const directTxCheck: Check = fields({
  txId,
  coordinatorId: id,
  commitPartitionId: id,
  opSeq: positive,
  token: optional(token),
});

/** The check of a handoff (its timestamps are checked against the coordinator's clock when adopted). */
export const directHandoffCheck: Check = fields({
  enlisted: arrayOf(
    fields({ partitionId: id, lease: leaseInfo, wrote: boolean, unconfirmed: boolean, opSeq: positive }),
    LIMITS.finishEnlistedPartitionsMax,
  ),
  uncertain: arrayOf(fields({ table: string, key: string, node: id }), LIMITS.finishEnlistedPartitionsMax),
  writeTs: optional(timestamp),
  readExpiresAt: optional(timestamp),
});

/** The check of a direct answer, on the client. */
export const directAnswerCheck: Check = fields({
  partitionId: id,
  lease: leaseInfo,
  writeTs: optional(timestamp),
  pipelined: optional((v) => (v === true ? undefined : 'must be true')),
  readExpiresAt: optional(timestamp),
});
