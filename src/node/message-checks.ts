/**
 * The receive-edge check of every message kind a node speaks with its peers: the node layer's own (messages.ts:
 * Raft, heartbeats, leaving, metastorage) joined with the transaction protocol's (tx/core/message-checks.ts). The
 * table is a record over every kind, so a kind added to either union without its check does not compile; the node
 * hands it to its messenger (compose.ts), which refuses a body that fails it, or a kind not in it, before dispatch.
 *
 * A Raft message is checked whole here (raft/wire.ts: indexes and terms are integers >= 0, entries consecutive, a
 * configuration change decodes), because the Raft core asserts on its input; a metastorage command as the log would
 * decode it, because the leader proposes it as it came.
 */

import type { NodeMessageKind } from '../cluster/messages.js';
import {
  isMemberRecord,
  isProtectedTimestamp,
  isTableDescriptor,
  isUserRecord,
  parseMetaCommand,
  parseMetaView,
} from '../cluster/metastorage-state.js';
import { LIMITS } from '../core/limits.js';
import {
  arrayOf,
  type BodyCheck,
  type Check,
  fields,
  fieldsCheck,
  id,
  index,
  nullable,
  optional,
  string,
  tagged,
} from '../net/body-checks.js';
import { raftMessageProblem } from '../raft/wire.js';
import { TX_MESSAGE_CHECKS, type TxResponseKind } from '../tx/core/message-checks.js';
import type { TxRequestKind } from '../tx/core/messages.js';

export type PeerMessageKind = NodeMessageKind | TxRequestKind | TxResponseKind;

const raftPart = { group: id, message: raftMessageProblem };
const physicalMs = optional((v) =>
  typeof v === 'number' && Number.isFinite(v) && v >= 0 ? undefined : 'must be >= 0',
);
const table: Check = (v) => (isTableDescriptor(v) ? undefined : 'must be a table descriptor');
const members = arrayOf((v) => (isMemberRecord(v) ? undefined : 'must be a member record'), LIMITS.clusterMembersMax);

const metaResult = tagged('status', {
  OK: fields({ table }),
  ALREADY_EXISTS: fields({ table }),
  UNKNOWN_TABLE: fields({ name: string }),
  INVALID: fields({ message: string }),
  MEMBERS: fields({ members }),
  UNKNOWN_NODE: fields({ name: string }),
  ASSIGNED: fields({ partition: id, replicas: arrayOf(id, LIMITS.clusterMembersMax) }),
  USER: fields({ user: (v) => (isUserRecord(v) ? undefined : 'must be a user record') }),
  USER_EXISTS: fields({ name: string }),
  UNKNOWN_USER: fields({ name: string }),
  PROTECTED: fields({ record: (v) => (isProtectedTimestamp(v) ? undefined : 'must be a protected timestamp') }),
  UNKNOWN_PROTECTED_TS: fields({ id: string }),
});

export const NODE_MESSAGE_CHECKS: { readonly [K in NodeMessageKind]: BodyCheck } = {
  Raft: fieldsCheck(raftPart),
  RaftBatch: fieldsCheck({ messages: arrayOf(fields(raftPart), LIMITS.raftBatchMessagesMax) }),
  NodeHeartbeat: fieldsCheck({ physicalMs }),
  NodeHeartbeatAck: fieldsCheck({ physicalMs }),
  NodeLeaving: fieldsCheck({}),
  MetaCommandRequest: fieldsCheck({
    command: (v) => (parseMetaCommand(v) !== undefined ? undefined : 'is not a metastorage command'),
  }),
  MetaCommandResponse: fieldsCheck({ result: metaResult }),
  // -1 asks for the view at once: a confirmation that this node's metadata is current (metastorage.ts `confirm`).
  MetaWatchRequest: fieldsCheck({ sinceRevision: (v, context) => (v === -1 ? undefined : index(v, context)) }),
  MetaWatchResponse: fieldsCheck({
    view: nullable((v) => (parseMetaView(v) !== undefined ? undefined : 'is not a metastorage view')),
    leader: nullable(id),
  }),
};

/** Every kind a node speaks with its peers, each with its check (the messenger's `bodyChecks`). */
export const PEER_MESSAGE_CHECKS: { readonly [K in PeerMessageKind]: BodyCheck } = {
  ...NODE_MESSAGE_CHECKS,
  ...TX_MESSAGE_CHECKS,
};
