/**
 * The resolution and recovery request kinds a replica node answers, beside ReplicaRequestRouter (which keeps the RW,
 * RO, finish, cleanup and lease kinds): TxStateCommitPartitionRequest and TxRecoveryRequest on a commit partition's
 * primary, TxStatePrimaryReplicaRequest on an intent partition's primary. Partitions are looked up in the same
 * registry (the ReplicaRequestRouter); a partition not hosted here answers PRIMARY_MISS (`not-hosted`).
 * TxStateCoordinatorRequest is the coordinator service's kind, not registered here.
 */
import { LIMITS } from '../../core/limits.js';
import type { PeerIdentity } from '../../env/transport.js';
import type {
  TxRecoveryRequest,
  TxStateCommitPartitionRequest,
  TxStatePrimaryReplicaRequest,
  TxStateResponse,
} from '../../tx/messages.js';
import { assertHosted, type PartitionRegistry } from '../partition-replica.js';
import { CommitPartitionStates, type CommitPartitionStatesOptions } from './commit-partition-state.js';
import { handlePrimaryReplicaState } from './primary-replica-state.js';

export type ResolutionRequest = TxStateCommitPartitionRequest | TxStatePrimaryReplicaRequest | TxRecoveryRequest;
export type ResolutionRequestKind = ResolutionRequest['kind'];

export const RESOLUTION_REQUEST_KINDS: readonly ResolutionRequestKind[] = [
  'TxStateCommitPartitionRequest',
  'TxStatePrimaryReplicaRequest',
  'TxRecoveryRequest',
];

/** The part of the Messenger the router registers with. */
export interface ResolutionHandlerRegistry {
  handle<K extends ResolutionRequestKind>(
    kind: K,
    handler: (body: Extract<ResolutionRequest, { readonly kind: K }>, from: PeerIdentity) => Promise<TxStateResponse>,
  ): () => void;
}

export type ResolutionRequestRouterOptions = CommitPartitionStatesOptions;

export class ResolutionRequestRouter {
  readonly commitPartition: CommitPartitionStates;
  private readonly partitions: PartitionRegistry;
  private readonly stateWaitMs: number;

  constructor(options: ResolutionRequestRouterOptions) {
    this.partitions = options.partitions;
    this.stateWaitMs = options.stateWaitMs ?? LIMITS.txStateWaitMsDefault;
    this.commitPartition = new CommitPartitionStates(options);
  }

  handle(request: ResolutionRequest): Promise<TxStateResponse> {
    switch (request.kind) {
      case 'TxStateCommitPartitionRequest':
        return this.commitPartition.handleStateRequest(request);
      case 'TxRecoveryRequest':
        return this.commitPartition.handleRecovery(request);
      case 'TxStatePrimaryReplicaRequest':
        return handlePrimaryReplicaState(
          assertHosted(this.partitions.get(request.partitionId), request.partitionId),
          request,
          this.stateWaitMs,
        );
    }
  }

  /** Registers every resolution request kind with `registry` (the node's messenger); returns the unregister function. */
  registerWith(registry: ResolutionHandlerRegistry): () => void {
    const undo = RESOLUTION_REQUEST_KINDS.map((kind) => registry.handle(kind, (body) => this.handle(body)));
    return () => {
      for (const u of undo) u();
    };
  }
}
