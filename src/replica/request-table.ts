/**
 * The one table of the transaction protocol's request kinds (tx/core/messages.ts) a node answers: kind → handler, one
 * handler file per kind. The table's type is a record over every `TxRequestKind`, so a kind added to the protocol
 * without a handler here does not compile; the node registers the whole table with its messenger in one call.
 *
 * Replica kinds look their partition up in the node's PartitionDirectory; a partition not hosted here answers
 * PRIMARY_MISS (`not-hosted`, no hint), and the sender re-resolves the primary. The coordinator's kind is answered by
 * the node's transaction coordinator. The messenger has absorbed the envelope timestamp before any handler runs
 * (rule 1 reads `now` after that).
 */
import type { HybridTimestamp, NodeIdentity, PartitionId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import type {
  TxRequestKind,
  TxRequestOf,
  TxResponseOf,
  TxStateCoordinatorRequest,
  TxStateResponse,
} from '../tx/core/messages.js';
import type { InlineCleanup } from './cleanup/inline-cleanup.js';
import type { CommitPartitionStates } from './handlers/commit-partition-state.js';
import { handleLeaseConfirm } from './handlers/lease-confirm.js';
import { handlePrimaryReplicaState } from './handlers/primary-replica-state.js';
import { handleReadOnly } from './handlers/read-only.js';
import { handleReadWrite } from './handlers/read-write.js';
import { handleTxCleanup } from './handlers/tx-cleanup.js';
import type { TxFinishHandler } from './handlers/tx-finish.js';
import { handleWriteCheck } from './handlers/write-check.js';
import { handleWriteConfirm } from './handlers/write-confirm.js';
import { assertHosted, type PartitionRegistry } from './partition/partition-replica.js';
import type { IntentResolver } from './resolution/intent-resolver.js';

/** Answers one request kind (errors reject as coded BasaltErrors, which the messenger sends as error data). */
export type TxRequestHandler<K extends TxRequestKind> = (
  body: TxRequestOf<K>,
  from: NodeIdentity,
) => Promise<TxResponseOf[K]>;

/** Every request kind of the protocol, each with its handler. */
export type TxRequestTable = { readonly [K in TxRequestKind]: TxRequestHandler<K> };

/** What the handlers of the table use. */
export interface TxRequestTableParts {
  readonly partitions: PartitionRegistry;
  /** Resolves foreign write intents met by reads. */
  readonly resolver: IntentResolver;
  /** Cleans finished lock holders in line for RW requests (absent: requests wait or die on them as wait-die says). */
  readonly inline?: InlineCleanup;
  /** The node's low watermark: RO reads below it fail TX_READ_ONLY_TOO_OLD (rule 10); absent: no check. */
  readonly lowWatermark?: () => HybridTimestamp;
  readonly finish: Pick<TxFinishHandler, 'handle'>;
  /** The commit partition's state and recovery answers. */
  readonly commitPartition: Pick<CommitPartitionStates, 'handleStateRequest' | 'handleRecovery'>;
  /** The coordinator path of write intent resolution (the node's transaction coordinator). */
  readonly coordinator: {
    handleStateRequest(request: TxStateCoordinatorRequest): Promise<TxStateResponse>;
  };
  /** How long the primary replica path waits for a FINISHING tx (default LIMITS.txStateWaitMsDefault). */
  readonly stateWaitMs?: number;
}

export function txRequestTable(parts: TxRequestTableParts): TxRequestTable {
  const { partitions, resolver, inline, finish, commitPartition, coordinator } = parts;
  const stateWaitMs = parts.stateWaitMs ?? LIMITS.txStateWaitMsDefault;
  const readOnly = { resolver, ...(parts.lowWatermark !== undefined && { lowWatermark: parts.lowWatermark }) };
  // Every request to a hosted partition uses it: a resting replica wakes (partition-replica.ts "Rest").
  const hosted = (body: { readonly partitionId: PartitionId }) => {
    const p = assertHosted(partitions.get(body.partitionId), body.partitionId);
    p.touch();
    return p;
  };
  return {
    ReadWriteRequest: async (body) => handleReadWrite(hosted(body), body, resolver, inline),
    ReadOnlyRequest: async (body) => handleReadOnly(hosted(body), body, readOnly),
    TxFinishRequest: async (body) => finish.handle(body),
    TxCleanupRequest: async (body) => handleTxCleanup(partitions, body),
    LeaseConfirmRequest: async (body) => handleLeaseConfirm(hosted(body), body),
    WriteConfirmRequest: async (body) => handleWriteConfirm(hosted(body), body),
    WriteCheckRequest: async (body) => handleWriteCheck(hosted(body), body),
    TxStateCoordinatorRequest: async (body) => coordinator.handleStateRequest(body),
    TxStateCommitPartitionRequest: async (body) => commitPartition.handleStateRequest(body),
    TxStatePrimaryReplicaRequest: async (body) => handlePrimaryReplicaState(hosted(body), body, stateWaitMs),
    TxRecoveryRequest: async (body) => commitPartition.handleRecovery(body),
  };
}

/** The part of the Messenger the table registers with (the node's messenger seen with the tx protocol's kinds). */
export interface TxHandlerRegistry {
  handle<K extends TxRequestKind>(
    kind: K,
    handler: (body: TxRequestOf<K>, from: NodeIdentity) => Promise<TxResponseOf[K]>,
  ): () => void;
}

/** The kinds the table answers, in its order. */
export function tableKinds(table: TxRequestTable): TxRequestKind[] {
  return Object.keys(table) as TxRequestKind[];
}

/** Registers every kind of `table` with `registry`; returns the function that unregisters them all. */
export function registerTxRequests(registry: TxHandlerRegistry, table: TxRequestTable): () => void {
  const undo = tableKinds(table).map((kind) => registerKind(registry, table, kind));
  return () => {
    for (const u of undo) u();
  };
}

function registerKind<K extends TxRequestKind>(registry: TxHandlerRegistry, table: TxRequestTable, kind: K) {
  return registry.handle(kind, table[kind]);
}

/** Answers `body` from `table`, as the messenger would (in-process test harnesses deliver requests this way). */
export function dispatchTxRequest<K extends TxRequestKind>(
  table: TxRequestTable,
  body: TxRequestOf<K>,
  from: NodeIdentity,
): Promise<TxResponseOf[K]> {
  const handler: TxRequestHandler<K> = table[body.kind as K];
  return handler(body, from);
}
