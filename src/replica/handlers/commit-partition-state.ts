/**
 * The commit partition's side of resolution and recovery (ignite3-protocol.md §8, §9; DESIGN §2 "Recovery", §2b rules
 * 11, 12, 14, 15, 16, 17), on the commit partition's primary.
 *
 * TxStateCommitPartitionRequest, in order: act as primary (else PRIMARY_MISS with the holder hint); a local FINISHING
 * is waited for (bounded); a local final entry, or else the durable record (what the compare-and-set stored: rule 14),
 * is the answer. A tx at or below the vacuum horizon with no record takes the primary-replica path (rule 16). Else,
 * with the coordinator (from the map, the request, else the tx id, which always names it) not gone (rule 17: unknown
 * is not gone), a coordinator request is forwarded from here
 * (on this very node the coordinator rule runs locally): a final or PENDING answer is the answer; a failed forward
 * never becomes PENDING (rule 12): it fails retryably unless the coordinator is gone by now, and a null forward (the
 * coordinator disowns the tx, so it will never commit it) leads to recovery. Else (coordinator gone) → recovery.
 *
 * Recovery aborts through the durable compare-and-set: FinishTx{commit: false} is proposed and the answer is what was
 * *stored*, possibly COMMITTED when the coordinator's commit won the race (rule 11). Abort cleanup (or, if the commit
 * won, commit cleanup) then runs in the background over the enlisted set known: the stored set plus the commit
 * partition and the reporter's partition. Concurrent recoveries of one tx share one run, and every one of them has
 * its own partitions cleaned with the shared outcome: a request that joins a run has not told it its reporter's (or
 * reader's intent) partition, which the record does not name either, so without that nothing would clean it until
 * somebody met its intents. Below the vacuum horizon the
 * FinishTx is not applied (TX_OUTCOME_UNKNOWN): the state request takes the primary-replica path instead, except
 * for a request from a holder's primary (`holder`), which is answered UNKNOWN with `vacuumed` (inline-cleanup.ts).
 *
 * TxRecoveryRequest (orphan detection): a durable final outcome is answered (after scheduling cleanup of the
 * reporter's partition, with the record's enlisted set while its cleanup has not completed, so that the run may mark
 * it completed); else recovery as above. Below the horizon it answers UNKNOWN and cleans nothing: the request
 * names no row to infer from, and no outcome may be guessed.
 */

import { type CounterSink, NO_COUNTERS } from '../../core/counters.js';
import { BasaltError, invalidArgument } from '../../core/errors.js';
import type { NodeId, NodeIdentity, PartitionId, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import type { PrimaryDirectory } from '../../route/primary-directory.js';
import { answerCoordinatorStateRequest } from '../../tx/coordinator/coordinator-state-request.js';
import type {
  TxOutcome,
  TxRecoveryRequest,
  TxRequestFn,
  TxStateAnswer,
  TxStateCommitPartitionRequest,
  TxStateResponse,
} from '../../tx/core/messages.js';
import { isTimestamp, outcomeOfEntry, waitForFinal } from '../../tx/core/outcome.js';
import { isTxId, nodeIdOf } from '../../tx/core/tx-id.js';
import { isFinal } from '../../tx/core/tx-state.js';
import type { CleanupDriver } from '../cleanup/cleanup-driver.js';
import { assertHosted, type PartitionRegistry, type PartitionReplica } from '../partition/partition-replica.js';
import { type PeerDirectory, RESOLUTION_COUNTERS } from '../ports.js';
import { answerOf, outcomeOfRecord, stateResponse } from '../resolution/answers.js';
import { markCoordinatorGone } from '../resolution/coordinator-gone.js';
import { requestPrimary } from '../resolution/primary-requests.js';
import { type Decided, decideOutcome, type Settle } from './outcome-decision.js';

export interface CommitPartitionStatesOptions {
  readonly partitions: PartitionRegistry;
  /** The commit partitions' cleanup driver: recovery's cleanups share its runs with finishes. */
  readonly finish: Pick<CleanupDriver, 'ensureCleanup'>;
  readonly self: NodeIdentity;
  readonly peers: PeerDirectory;
  readonly request: TxRequestFn;
  readonly locator: PrimaryDirectory;
  readonly counters?: CounterSink;
  readonly onError?: (error: unknown) => void;
  readonly requestTimeoutMs?: number;
  readonly stateWaitMs?: number;
  readonly recoveriesInFlightMax?: number;
  /** Settles a parallel commit's committing record (committing-settle.ts). */
  readonly settle?: Settle;
}

/** What this commit partition knows of a tx without asking anyone. */
type Known =
  | { readonly kind: 'final'; readonly outcome: TxOutcome }
  /** No record, and the tx is at or below the vacuum horizon: its record may have been vacuumed (rule 15). */
  | { readonly kind: 'vacuumed' }
  | { readonly kind: 'none' };

type Forward =
  | { readonly kind: 'answer'; readonly answer: TxStateAnswer }
  /** The coordinator has no state for the tx (it will never commit it). */
  | { readonly kind: 'disowned' }
  | { readonly kind: 'failed'; readonly error: unknown };

export class CommitPartitionStates {
  private readonly o: CommitPartitionStatesOptions;
  private readonly counters: CounterSink;
  private readonly onError: (error: unknown) => void;
  private readonly requestTimeoutMs: number;
  private readonly stateWaitMs: number;
  private readonly recoveriesMax: number;
  private readonly recoveries = new Map<TxId, Promise<Decided>>();
  private readonly settle: Settle | undefined;

  constructor(options: CommitPartitionStatesOptions) {
    this.o = options;
    this.settle = options.settle;
    this.counters = options.counters ?? NO_COUNTERS;
    this.onError = options.onError ?? (() => {});
    this.requestTimeoutMs = options.requestTimeoutMs ?? LIMITS.resolutionRequestTimeoutMs;
    this.stateWaitMs = options.stateWaitMs ?? LIMITS.txStateWaitMsDefault;
    this.recoveriesMax = options.recoveriesInFlightMax ?? LIMITS.recoveriesInFlightMax;
  }

  get recoveriesInFlight(): number {
    return this.recoveries.size;
  }

  // ---------------------------------------------------------------------------------------- state requests

  async handleStateRequest(request: TxStateCommitPartitionRequest): Promise<TxStateResponse> {
    validateState(request.txId, request.readTs);
    const p = assertHosted(this.o.partitions.get(request.commitPartitionId), request.commitPartitionId);
    // A peer's readTs is absorbed (rule 8): a forward below carries it on to the coordinator anyway.
    p.actingLease(await p.untilLeaseStart(p.clock.update(request.readTs)));
    const known = await this.known(p, request.txId);
    if (known.kind === 'final') return stateResponse(known.outcome);
    if (known.kind === 'vacuumed') return this.belowHorizon(request);
    // Rule 17: the tx id names its coordinator, so a request without one (and no entry here) is no reason to take
    // the tx for coordinator-less and recover it.
    const coordinatorId =
      p.txStateMap.entry(request.txId)?.coordinatorId ?? request.coordinatorId ?? nodeIdOf(request.txId);
    if (coordinatorId !== undefined && !this.o.peers.isGone(coordinatorId)) {
      const forward = await this.forward(p, request, coordinatorId);
      if (forward.kind === 'answer') return stateResponse(forward.answer);
      if (forward.kind === 'failed' && !this.o.peers.isGone(coordinatorId)) {
        // Rule 12: never PENDING; rule 17: not gone, so not recovered either. The reader retries.
        throw new BasaltError('NODE_UNAVAILABLE', `coordinator of ${request.txId} did not answer`, {
          txId: request.txId,
        });
      }
    }
    const recovered = await this.recover(p, request.txId, [request.commitPartitionId, request.intentPartitionId]);
    return recovered === 'vacuumed' ? this.belowHorizon(request) : stateResponse(recovered);
  }

  /**
   * No record at or below the horizon: a holder's primary is told so (it still holds the tx's intent or lock, which
   * proves the tx never committed, and aborts it there); a reader takes the primary-replica path (rule 16).
   */
  private async belowHorizon(request: TxStateCommitPartitionRequest): Promise<TxStateResponse> {
    if (request.holder === true) return { kind: 'TxStateResponse', answer: { state: 'UNKNOWN' }, vacuumed: true };
    return stateResponse(await this.primaryReplicaPath(request));
  }

  private async known(p: PartitionReplica, txId: TxId): Promise<Known> {
    const entry = p.txStateMap.entry(txId);
    // A FINISHING of this node's own coordinator is left to the coordinator rule (it answers "not visible" at once
    // when commitTs > readTs); any other FINISHING here is a finish about to store its outcome.
    if (entry?.state === 'FINISHING' && entry.coordinatorId !== this.o.self.id) {
      const final = await waitForFinal(p.txStateMap, p.timers, txId, this.stateWaitMs);
      if (final !== undefined) return { kind: 'final', outcome: outcomeOfEntry(final) };
    } else if (entry !== undefined && isFinal(entry.state)) {
      return { kind: 'final', outcome: outcomeOfEntry(entry) };
    }
    const record = p.txState.get(txId);
    if (record !== undefined) return { kind: 'final', outcome: outcomeOfRecord(record) };
    // A committing record is no outcome yet, whatever the horizon: its coordinator, or a recovery, settles it.
    if (p.txState.committing(txId) === undefined && p.deadlineOf(txId) <= p.txState.vacuumHorizon()) {
      return { kind: 'vacuumed' };
    }
    return { kind: 'none' };
  }

  private async forward(
    p: PartitionReplica,
    request: TxStateCommitPartitionRequest,
    coordinatorId: NodeId,
  ): Promise<Forward> {
    const body = { kind: 'TxStateCoordinatorRequest', txId: request.txId, readTs: request.readTs } as const;
    try {
      const response =
        coordinatorId === this.o.self.id
          ? await answerCoordinatorStateRequest(
              { self: this.o.self, clock: p.clock, timers: p.timers, txStates: p.txStateMap },
              body,
              this.stateWaitMs,
            )
          : await this.requestCoordinator(coordinatorId, body);
      const answer = answerOf(response);
      return answer === null || answer.state === 'UNKNOWN' ? { kind: 'disowned' } : { kind: 'answer', answer };
    } catch (error) {
      return { kind: 'failed', error };
    }
  }

  private requestCoordinator(
    coordinatorId: NodeId,
    body: { kind: 'TxStateCoordinatorRequest'; txId: TxId; readTs: TxStateCommitPartitionRequest['readTs'] },
  ): Promise<TxStateResponse> {
    const name = this.o.peers.nameOf(coordinatorId);
    if (name === undefined) {
      return Promise.reject(new BasaltError('NODE_UNAVAILABLE', `coordinator ${coordinatorId} is not reachable`));
    }
    return this.o.request(name, body, { timeoutMs: this.requestTimeoutMs });
  }

  /** Rule 16: the intent partition's current primary infers from its own version chain. */
  private async primaryReplicaPath(request: TxStateCommitPartitionRequest): Promise<TxStateAnswer> {
    this.counters.add(RESOLUTION_COUNTERS.primaryReplica);
    const response = await requestPrimary(
      this.o,
      request.intentPartitionId,
      {
        kind: 'TxStatePrimaryReplicaRequest',
        txId: request.txId,
        partitionId: request.intentPartitionId,
        key: request.key,
        readTs: request.readTs,
        ...(request.newestCommitTs === undefined ? {} : { newestCommitTs: request.newestCommitTs }),
      },
      { timeoutMs: this.requestTimeoutMs },
    );
    const answer = answerOf(response);
    if (answer === null) throw new BasaltError('INTERNAL', 'the intent partition primary answered no state');
    return answer;
  }

  // ---------------------------------------------------------------------------------------- recovery requests

  async handleRecovery(request: TxRecoveryRequest): Promise<TxStateResponse> {
    validate(request.txId);
    const p = assertHosted(this.o.partitions.get(request.commitPartitionId), request.commitPartitionId);
    p.actingLease(await p.untilLeaseStart(p.clock.now()));
    const record = p.txState.get(request.txId);
    if (record !== undefined) {
      const outcome = outcomeOfRecord(record);
      const enlisted = record.cleanupCompleted ? [] : record.enlistedPartitions;
      this.cleanupInBackground(p, request.txId, outcome, unique([...enlisted, request.reporterPartitionId]));
      return stateResponse(outcome);
    }
    const committing = p.txState.committing(request.txId) !== undefined;
    if (!committing && p.deadlineOf(request.txId) <= p.txState.vacuumHorizon()) {
      return stateResponse({ state: 'UNKNOWN' });
    }
    const recovered = await this.recover(p, request.txId, [request.commitPartitionId, request.reporterPartitionId]);
    return stateResponse(recovered === 'vacuumed' ? { state: 'UNKNOWN' } : recovered);
  }

  // ---------------------------------------------------------------------------------------- recovery

  /**
   * Aborts `txId` through the durable compare-and-set (shared per tx); resolves with what was stored. `partitions`
   * are cleaned with it, whether this call starts the recovery or joins one.
   */
  recover(p: PartitionReplica, txId: TxId, partitions: readonly PartitionId[]): Promise<Decided> {
    const running = this.recoveries.get(txId);
    if (running !== undefined) {
      return running.then((recovered) => {
        if (recovered !== 'vacuumed') {
          const stored = p.txState.get(txId)?.enlistedPartitions ?? [];
          this.cleanupInBackground(p, txId, recovered, unique([...stored, ...partitions]));
        }
        return recovered;
      });
    }
    if (this.recoveries.size >= this.recoveriesMax) {
      return Promise.reject(new BasaltError('OVERLOADED', 'too many recoveries in progress', { txId }));
    }
    const run = this.runRecovery(p, txId, partitions).finally(() => this.recoveries.delete(txId));
    this.recoveries.set(txId, run);
    return run;
  }

  private async runRecovery(p: PartitionReplica, txId: TxId, partitions: readonly PartitionId[]): Promise<Decided> {
    markCoordinatorGone(p.txStateMap, this.o.peers, txId, p.txStateMap.entry(txId)?.coordinatorId ?? nodeIdOf(txId));
    const enlisted = unique(partitions);
    // A committing tx is settled from its in-flight writes instead (committing-settle.ts): it may have committed.
    const outcome = await decideOutcome(
      p,
      { txId, commit: false, commitTs: undefined, enlistedPartitions: enlisted },
      this.settle,
    );
    if (outcome === 'vacuumed') return 'vacuumed';
    this.counters.add(
      outcome.state === 'COMMITTED' ? RESOLUTION_COUNTERS.recoveryCommitWon : RESOLUTION_COUNTERS.recoveries,
    );
    const stored = p.txState.get(txId)?.enlistedPartitions ?? [];
    this.cleanupInBackground(p, txId, outcome, unique([...stored, ...enlisted]));
    return outcome;
  }

  private cleanupInBackground(
    p: PartitionReplica,
    txId: TxId,
    outcome: TxOutcome,
    partitions: readonly PartitionId[],
  ): void {
    this.o.finish
      .ensureCleanup(
        p,
        txId,
        outcome,
        partitions.map((partitionId) => ({ partitionId })),
      )
      .catch(this.onError);
  }
}

function unique(partitions: readonly PartitionId[]): PartitionId[] {
  return [...new Set(partitions)];
}

function validate(txId: TxId): void {
  if (!isTxId(txId)) throw invalidArgument('malformed tx id in a state request');
}

function validateState(txId: TxId, readTs: unknown): void {
  validate(txId);
  if (!isTimestamp(readTs)) throw invalidArgument('a state request carries a readTs');
}
