/**
 * The receive-edge checks of every transaction protocol message (messages.ts), requests and responses: one entry per
 * kind, in a record over every kind, so a kind added to the protocol without its check does not compile. The node
 * joins this table with its own (node/message-checks.ts) and the messenger refuses a body that fails it with
 * MALFORMED_MESSAGE before any handler runs, so handlers and the replicas' applies trust these shapes:
 *   - every COMMITTED outcome or state answer carries its commitTs, an ABORTED one none (rules 11, 14); a finish
 *     carries its commitTs exactly when it commits (rule 13); a cleanup that switches intents names its outcome;
 *   - ids are bounded strings, tx ids parse, counts and sequence numbers are integers >= 0; every timestamp the
 *     receiver absorbs (commitTs, readTs, writeTs) is at most the envelope's timestamp + maxClockSkew (rule 8 for the
 *     body: a well-formed cleanup with a commitTs a year ahead dragged its primary's clock a year ahead, and every
 *     peer then refused that node's messages as CLOCK_SKEW); lease bounds are only in range, being ahead by design;
 *   - operations, results and values have the shapes of their `op` (values JSON-compatible or bytes).
 * Bounds that depend on this node's state (deadlines, leases, a partition being hosted) stay with the handlers.
 */
import { LIMITS } from '../../core/limits.js';
import {
  absent,
  arrayOf,
  type BodyCheck,
  boolean,
  bytes,
  type Check,
  fields,
  fieldsCheck,
  id,
  index,
  isRecord,
  json,
  leaseBound,
  literal,
  nullable,
  optional,
  positive,
  string,
  tagged,
  timestamp,
} from '../../net/body-checks.js';
import type { TxRequestKind, TxResponse } from './messages.js';
import { isTxId } from './tx-id.js';

export type TxResponseKind = TxResponse['kind'];

const txId: Check = (v) => (isTxId(v) ? undefined : 'must be a tx id');
const key = string;
const jsonValue = json(LIMITS.codecDepthMax);
/** A stored value: JSON-compatible data, or bytes at the top level (storage's `Value`). */
const value: Check = (v, context) => (bytes(v, context) === undefined ? undefined : jsonValue(v, context));
const keys = arrayOf(key, LIMITS.txBatchKeysMax);
const keyValues = (max: number) => arrayOf(fields({ key, value }), max);
const partitionIds = arrayOf(id, LIMITS.finishEnlistedPartitionsMax);

const token = fields({ holder: fields({ nodeId: id, incarnation: id }), start: leaseBound });
const leaseInfo = fields({ token, holderName: id, expiration: leaseBound });

const keyRange = tagged('kind', {
  prefix: fields({ prefix: string }),
  range: fields({ start: optional(string), end: optional(string) }),
});
/** A version's expiry: a ttl in 1..ttlMsMax, or an absolute timestamp (a lease's end, ahead by design). */
const expiry: Check = (v, context) => {
  if (!isRecord(v)) return 'must be a record';
  if ('at' in v) return 'ttlMs' in v ? 'must hold ttlMs or at, not both' : fields({ at: leaseBound })(v, context);
  const ttlMs = v['ttlMs'];
  return Number.isSafeInteger(ttlMs) && (ttlMs as number) >= 1 && (ttlMs as number) <= LIMITS.ttlMsMax
    ? undefined
    : `ttlMs must be an integer in 1..${LIMITS.ttlMsMax}`;
};
const scanLimit: Check = (v, context) =>
  positive(v, context) ?? ((v as number) <= LIMITS.storageScanRowsMax ? undefined : 'is above storageScanRowsMax');

const reads = {
  get: fields({ key, forUpdate: optional(boolean) }),
  getAll: fields({ keys, forUpdate: optional(boolean) }),
  scan: fields({ range: keyRange, limit: scanLimit }),
};
const rwOperation = tagged('op', {
  ...reads,
  put: fields({ key, value, expiry: optional(expiry) }),
  remove: fields({ key }),
  putAll: fields({ entries: keyValues(LIMITS.txBatchKeysMax) }),
});
const roOperation = tagged('op', {
  get: fields({ key }),
  getAll: fields({ keys }),
  scan: reads.scan,
  changes: fields({ range: keyRange, fromTs: timestamp, limit: scanLimit }),
});

/** A value found by a read, or its absence: `{ found: true, value }` or `{ found: false }`. */
const found: Check = (v, context) => {
  if (!isRecord(v)) return 'must be a record';
  if (v['found'] === false) return undefined;
  if (v['found'] !== true) return 'found must be a boolean';
  const problem = value(v['value'], context);
  return problem === undefined ? undefined : `value ${problem}`;
};
const readResults = {
  get: fields({ value: found }),
  getAll: fields({ values: arrayOf(found, LIMITS.txBatchKeysMax) }),
  scan: fields({ rows: keyValues(LIMITS.storageScanRowsMax), nextKey: optional(key) }),
};
const readExpiresAt = optional(leaseBound);
const rwResult = tagged('op', {
  get: fields({ value: found, readExpiresAt }),
  getAll: fields({ values: arrayOf(found, LIMITS.txBatchKeysMax), readExpiresAt }),
  scan: fields({ rows: keyValues(LIMITS.storageScanRowsMax), nextKey: optional(key), readExpiresAt }),
  written: fields({}),
});
const deletedChange = fields({ key, commitTs: timestamp, deleted: literal(true) });
const valueChange = fields({ key, commitTs: timestamp, deleted: literal(false), value });
/** A change read's entry: a removal carries no value, any other version its value. */
const change: Check = (v, context) =>
  isRecord(v) && v['deleted'] === true ? deletedChange(v, context) : valueChange(v, context);
const roResult = tagged('op', {
  ...readResults,
  changes: fields({ changes: arrayOf(change, 2 * LIMITS.storageScanRowsMax), nextKey: optional(key) }),
});

/** Rules 11 and 14: a COMMITTED outcome carries its commitTs, an ABORTED one none. */
const outcome = tagged('state', {
  COMMITTED: fields({ commitTs: timestamp }),
  ABORTED: fields({ commitTs: absent }),
});
const stateAnswer = tagged('state', {
  PENDING: fields({ commitTs: absent }),
  COMMITTED: fields({ commitTs: timestamp }),
  ABORTED: fields({ commitTs: absent }),
  UNKNOWN: fields({ commitTs: absent }),
});

const enlisted = arrayOf(fields({ partitionId: id, primaryName: id, token }), LIMITS.finishEnlistedPartitionsMax);

const carried = fields({
  token,
  bound: leaseBound,
  writes: arrayOf(tagged('kind', { put: fields({ key, value }), remove: fields({ key }) }), LIMITS.updateAllWritesMax),
});

const committing = fields({
  inflight: arrayOf(
    fields({ partitionId: id, keys: arrayOf(key, LIMITS.updateAllWritesMax) }),
    LIMITS.finishEnlistedPartitionsMax,
  ),
});

/** Fields first, then a rule that ties two of them together. */
function withRule(spec: Readonly<Record<string, Check>>, rule: BodyCheck): BodyCheck {
  const check = fieldsCheck(spec);
  return (body, context) => check(body, context) ?? rule(body, context);
}

export const TX_MESSAGE_CHECKS: { readonly [K in TxRequestKind | TxResponseKind]: BodyCheck } = {
  ReadWriteRequest: fieldsCheck({
    partitionId: id,
    txId,
    coordinatorId: id,
    commitPartitionId: id,
    token: optional(token),
    opSeq: index,
    full: boolean,
    pipelined: optional(boolean),
    parallelCommit: optional(boolean),
    operation: rwOperation,
  }),
  ReadOnlyRequest: fieldsCheck({
    partitionId: id,
    txId: optional(txId),
    coordinatorId: id,
    readTs: optional(timestamp),
    operation: roOperation,
  }),
  // Rule 13: a commit carries the commitTs chosen once, an abort none.
  TxFinishRequest: withRule(
    {
      txId,
      commitPartitionId: id,
      commit: boolean,
      commitTs: optional(timestamp),
      enlisted,
      carried: optional(carried),
      committing: optional(committing),
      settle: optional(literal('confirmed', 'check')),
    },
    (body) =>
      body['commit'] === (body['commitTs'] !== undefined)
        ? body['carried'] === undefined || body['commit'] === true
          ? body['committing'] === undefined || (body['commit'] === true && body['settle'] === undefined)
            ? undefined
            : 'only a commit is committing, and it settles nothing'
          : 'only a commit carries writes'
        : 'a commit carries its commitTs, an abort none',
  ),
  TxCleanupRequest: withRule(
    { txId, partitions: partitionIds, unlockOnly: boolean, outcome: optional(outcome) },
    (body) =>
      body['unlockOnly'] === true || body['outcome'] !== undefined ? undefined : 'a cleanup needs the outcome',
  ),
  LeaseConfirmRequest: fieldsCheck({ partitionId: id, token, commitTs: timestamp }),
  WriteConfirmRequest: fieldsCheck({ partitionId: id, txId }),
  WriteCheckRequest: fieldsCheck({ partitionId: id, txId, keys: arrayOf(key, LIMITS.updateAllWritesMax) }),
  TxStateCoordinatorRequest: fieldsCheck({
    txId,
    readTs: timestamp,
    readWrite: optional(fields({ partitionId: id })),
  }),
  TxStateCommitPartitionRequest: fieldsCheck({
    txId,
    commitPartitionId: id,
    readTs: timestamp,
    coordinatorId: optional(id),
    intentPartitionId: id,
    key,
    newestCommitTs: optional(timestamp),
    holder: optional(boolean),
  }),
  TxStatePrimaryReplicaRequest: fieldsCheck({
    txId,
    partitionId: id,
    key,
    readTs: timestamp,
    newestCommitTs: optional(timestamp),
  }),
  TxRecoveryRequest: fieldsCheck({ txId, commitPartitionId: id, reporterPartitionId: id }),

  ReadWriteResponse: fieldsCheck({
    lease: leaseInfo,
    result: rwResult,
    writeTs: optional(timestamp),
    pipelined: optional(literal(true)),
  }),
  ReadOnlyResponse: fieldsCheck({ readTs: timestamp, result: roResult }),
  TxFinishResponse: withRule(
    { outcome: optional(outcome), committing: optional(timestamp), refused: optional(string) },
    (body) =>
      (body['outcome'] === undefined) !== (body['committing'] === undefined)
        ? undefined
        : 'a finish answers an outcome or a committing record',
  ),
  TxCleanupResponse: fieldsCheck({ txId, cleaned: partitionIds }),
  LeaseConfirmResponse: fieldsCheck({ confirmed: boolean }),
  WriteConfirmResponse: fieldsCheck({ writeTs: timestamp }),
  WriteCheckResponse: fieldsCheck({ applied: boolean }),
  TxStateResponse: fieldsCheck({ answer: nullable(stateAnswer), vacuumed: optional(boolean) }),
};
