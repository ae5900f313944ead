/**
 * The replica side of the tx protocol on one node: a registry of hosted partitions and the dispatch of each request
 * kind to its handler (one file per kind). The node registers `handle` for every kind in REPLICA_REQUEST_KINDS with
 * its messenger (or calls `registerWith(messenger)`), registers each partition it hosts when its replica starts, and
 * unregisters it when the replica stops. A request for a partition not hosted here answers PRIMARY_MISS (reason
 * `not-hosted`, no hint): the sender re-resolves the primary.
 *
 * The messenger has absorbed the envelope timestamp before any handler runs (rule 1 reads `now` after that).
 */
import { BasaltError } from '../../core/errors.js';
import type { HybridTimestamp, PartitionId } from '../../core/ids.js';
import type { Timers } from '../../env/timers.js';
import type { PeerIdentity } from '../../env/transport.js';
import type {
  LeaseConfirmRequest,
  ReadOnlyRequest,
  ReadWriteRequest,
  TxCleanupRequest,
  TxFinishRequest,
  TxResponseOf,
  WriteConfirmRequest,
} from '../../tx/messages.js';
import {
  CleanupDriver,
  type CleanupDriverOptions,
  type CleanupSender,
  type HostedPartitions,
  type PrimaryLocator,
} from '../cleanup-driver.js';
import type { InlineCleanup } from '../inline-cleanup.js';
import { assertHosted, type PartitionReplica } from '../partition-replica.js';
import type { IntentResolver } from './intent-resolver.js';
import { handleLeaseConfirm } from './lease-confirm.js';
import { handleReadOnly } from './read-only.js';
import { handleReadWrite } from './read-write.js';
import { handleTxCleanup } from './tx-cleanup.js';
import { TxFinishHandler } from './tx-finish.js';
import { handleWriteConfirm } from './write-confirm.js';

export type ReplicaRequest =
  | ReadWriteRequest
  | ReadOnlyRequest
  | TxFinishRequest
  | TxCleanupRequest
  | LeaseConfirmRequest
  | WriteConfirmRequest;

export type ReplicaRequestKind = ReplicaRequest['kind'];

export const REPLICA_REQUEST_KINDS: readonly ReplicaRequestKind[] = [
  'ReadWriteRequest',
  'ReadOnlyRequest',
  'TxFinishRequest',
  'TxCleanupRequest',
  'LeaseConfirmRequest',
  'WriteConfirmRequest',
];

export type ReplicaResponse = TxResponseOf[ReplicaRequestKind];

/** The part of the Messenger the router registers with. */
export interface HandlerRegistry {
  handle<K extends ReplicaRequestKind>(
    kind: K,
    handler: (body: Extract<ReplicaRequest, { readonly kind: K }>, from: PeerIdentity) => Promise<ReplicaResponse>,
  ): () => void;
}

export interface ReplicaRequestRouterOptions {
  readonly sender: CleanupSender;
  readonly locator: PrimaryLocator;
  readonly timers: Timers;
  /** Resolves foreign write intents met by RO reads; the node passes a LocalIntentResolver until the full one. */
  readonly resolver: IntentResolver;
  /** The node's low watermark: RO reads below it fail TX_READ_ONLY_TOO_OLD (rule 10). */
  readonly lowWatermark?: () => HybridTimestamp;
  readonly onError?: (error: unknown) => void;
  /** Cleans finished lock holders in line for RW requests (absent: requests wait or die on them as wait-die says). */
  readonly inline?: InlineCleanup;
  readonly finish?: Partial<
    Pick<
      CleanupDriverOptions,
      | 'cleanupAttemptsMax'
      | 'cleanupBackoffMsMin'
      | 'cleanupBackoffMsMax'
      | 'finishesInFlightMax'
      | 'rescanIntervalMs'
      | 'rescanBatchMax'
      | 'counters'
    >
  >;
}

export class ReplicaRequestRouter implements HostedPartitions {
  readonly finish: TxFinishHandler;
  /** The commit partitions' cleanup driver, shared by the finish handler and recovery. */
  readonly cleanups: CleanupDriver;
  private readonly resolver: IntentResolver;
  private readonly inline: InlineCleanup | undefined;
  private readonly lowWatermark: (() => HybridTimestamp) | undefined;
  private readonly hostedById = new Map<PartitionId, PartitionReplica>();

  constructor(options: ReplicaRequestRouterOptions) {
    this.resolver = options.resolver;
    this.lowWatermark = options.lowWatermark;
    this.inline = options.inline;
    const onError = options.onError === undefined ? {} : { onError: options.onError };
    this.cleanups = new CleanupDriver({
      ...options.finish,
      partitions: this,
      sender: options.sender,
      locator: options.locator,
      timers: options.timers,
      ...onError,
    });
    this.finish = new TxFinishHandler({ partitions: this, cleanups: this.cleanups, ...onError });
  }

  /** Hosts `partition` here; returns the function that unregisters it (and stops its waiters). */
  register(partition: PartitionReplica): () => void {
    if (this.hostedById.has(partition.partitionId)) {
      throw new BasaltError('ALREADY_EXISTS', `partition ${partition.partitionId} is registered`);
    }
    this.hostedById.set(partition.partitionId, partition);
    return () => {
      if (this.hostedById.get(partition.partitionId) !== partition) return;
      this.hostedById.delete(partition.partitionId);
      partition.stop();
    };
  }

  get(partitionId: PartitionId): PartitionReplica | undefined {
    return this.hostedById.get(partitionId);
  }

  hosted(): Iterable<PartitionReplica> {
    return [...this.hostedById.values()];
  }

  /** The commit partition's new primary re-runs cleanup of finished txs from durable state (call on gaining primacy). */
  recoverCleanups(partitionId: PartitionId): Promise<number> {
    return this.cleanups.recover(partitionId);
  }

  /** Answers one request (errors reject as coded BasaltErrors, which the messenger sends as error data). */
  async handle<R extends ReplicaRequest>(request: R): Promise<TxResponseOf[R['kind']]> {
    return (await this.dispatch(request)) as TxResponseOf[R['kind']];
  }

  private async dispatch(request: ReplicaRequest): Promise<ReplicaResponse> {
    switch (request.kind) {
      case 'ReadWriteRequest':
        return handleReadWrite(this.partition(request.partitionId), request, this.resolver, this.inline);
      case 'ReadOnlyRequest':
        return handleReadOnly(this.partition(request.partitionId), request, {
          resolver: this.resolver,
          ...(this.lowWatermark === undefined ? {} : { lowWatermark: this.lowWatermark }),
        });
      case 'TxFinishRequest':
        return this.finish.handle(request);
      case 'TxCleanupRequest':
        return handleTxCleanup(this, request);
      case 'LeaseConfirmRequest':
        return handleLeaseConfirm(this.partition(request.partitionId), request);
      case 'WriteConfirmRequest':
        return handleWriteConfirm(this.partition(request.partitionId), request);
    }
  }

  private partition(partitionId: PartitionId): PartitionReplica {
    return assertHosted(this.hostedById.get(partitionId), partitionId);
  }

  /** Registers every replica request kind with `registry` (the node's messenger); returns the unregister function. */
  registerWith(registry: HandlerRegistry): () => void {
    const undo = REPLICA_REQUEST_KINDS.map((kind) => registry.handle(kind, (body) => this.dispatch(body)));
    return () => {
      for (const u of undo) u();
    };
  }
}
