/**
 * The transaction protocol's messages between coordinators, partition primaries and commit partitions: readonly plain
 * data tagged by `kind` (the kinds harness filters match on), sent as request bodies through the Messenger. Requests
 * and their responses are paired by name (`XRequest` → `XResponse`); failures travel as coded errors, e.g.
 * PRIMARY_MISS (hint: the partition, why, and the holder's name and token if known), TX_LOCK_CONFLICT,
 * TX_ALREADY_FINISHED, TX_MISMATCHING_OUTCOME (hint: the stored outcome), TX_OUTCOME_UNKNOWN; see core/errors.ts.
 *
 * Rules carried here (DESIGN §2b): every primary-only request names the enlistment token it expects (rule 1/2/4), RW
 * requests carry `(txId, opSeq)` so a primary executes each op once (rule 7), a finish carries the commitTs chosen once
 * (rule 13), state requests carry the reader's readTs which the coordinator absorbs before reading its map (rule 8/12).
 * Timestamps are `HybridTimestamp` bigints; 0n is never sent for "none": such fields are omitted.
 */
import { BasaltError } from '../../core/errors.js';
import type { HybridTimestamp, NodeId, NodeName, PartitionId, TxId } from '../../core/ids.js';
import type { Expiry, KeyRange, Value } from '../../storage/mv-partition-storage.js';
import type { InflightWrites } from '../../storage/tx-state-storage.js';

/** The lease a primary acts under, as the coordinator enlisted it: `(holder, start)`. Equal to a replica LeaseToken. */
export interface EnlistmentToken {
  readonly holder: { readonly nodeId: NodeId; readonly incarnation: string };
  readonly start: HybridTimestamp;
}

/** What the coordinator learns of a lease with every primary response (for the commit-time lease check). */
export interface LeaseInfo {
  readonly token: EnlistmentToken;
  readonly holderName: NodeName;
  readonly expiration: HybridTimestamp;
}

// ---------------------------------------------------------------------------------------------------------------------
// Read-write operations (primary only)

/** A read of an RW tx; `forUpdate: true` locks its rows exclusively (IX + X) instead of shared (IS + S). */
export type RwOperation =
  | { readonly op: 'get'; readonly key: string; readonly forUpdate?: boolean }
  | { readonly op: 'getAll'; readonly keys: readonly string[]; readonly forUpdate?: boolean }
  | { readonly op: 'put'; readonly key: string; readonly value: Value; readonly expiry?: Expiry }
  | { readonly op: 'remove'; readonly key: string }
  | { readonly op: 'putAll'; readonly entries: readonly { readonly key: string; readonly value: Value }[] }
  | { readonly op: 'scan'; readonly range: KeyRange; readonly limit: number };

export type RwOperationKind = RwOperation['op'];

/** A value found by a read, or its absence (msgpack drops `undefined`, so absence is explicit). */
export type FoundValue = { readonly found: true; readonly value: Value } | { readonly found: false };

/**
 * What every RW read result may add: the earliest expiry among the versions it returned. The tx must then commit
 * below it (coordinator-finish.ts), so that what it read is still visible at its commit timestamp (DESIGN §4b).
 */
interface ReadExpiry {
  readonly readExpiresAt?: HybridTimestamp;
}

export type RwResult =
  | ({ readonly op: 'get'; readonly value: FoundValue } & ReadExpiry)
  | ({ readonly op: 'getAll'; readonly values: readonly FoundValue[] } & ReadExpiry)
  | { readonly op: 'written' }
  | ({
      readonly op: 'scan';
      readonly rows: readonly { readonly key: string; readonly value: Value }[];
      /** First key not returned when `limit` cut the scan short. */
      readonly nextKey?: string;
    } & ReadExpiry);

export interface ReadWriteRequest {
  readonly kind: 'ReadWriteRequest';
  readonly partitionId: PartitionId;
  readonly txId: TxId;
  readonly coordinatorId: NodeId;
  readonly commitPartitionId: PartitionId;
  /** The lease this tx enlisted the partition under; absent on the first request to the partition (enlistment). */
  readonly token?: EnlistmentToken;
  /** Per-tx operation sequence number, increasing; a primary executes each once and ignores older ones (rule 7). */
  readonly opSeq: number;
  /** One-phase commit: an implicit single-partition write, committed by one replicated command, no intent. */
  readonly full: boolean;
  /**
   * A write (not one-phase) the primary may answer once its locks are held and its command is proposed, before it
   * applies; the coordinator then asks for the apply result with a WriteConfirmRequest before it takes commitTs.
   */
  readonly pipelined?: boolean;
  /**
   * A pipelined write of a coordinator that commits in parallel: once answered it is never proposed again, since its
   * commit's record may name it (read-write.ts "Lost locks", write-check.ts). Absent: false.
   */
  readonly parallelCommit?: boolean;
  readonly operation: RwOperation;
}

export interface ReadWriteResponse {
  readonly kind: 'ReadWriteResponse';
  readonly lease: LeaseInfo;
  readonly result: RwResult;
  /** Effective timestamp of the applied write (writes only): the coordinator's clock absorbs it before commitTs. */
  readonly writeTs?: HybridTimestamp;
  /** Set on a pipelined write answered before its apply (no writeTs): its result is confirmed before commit. */
  readonly pipelined?: true;
}

// ---------------------------------------------------------------------------------------------------------------------
// Read-only operations (any replica whose safe time covers readTs, or the primary)

export type RoOperation =
  | { readonly op: 'get'; readonly key: string }
  | { readonly op: 'getAll'; readonly keys: readonly string[] }
  | { readonly op: 'scan'; readonly range: KeyRange; readonly limit: number }
  /**
   * A change read (a watch's page): every committed version of the keys in `range` with commitTs in
   * `(fromTs, readTs]`, intents resolved as an RO read at readTs resolves them; at most about `limit` versions, rows
   * whole, continuing at `nextKey`.
   */
  | { readonly op: 'changes'; readonly range: KeyRange; readonly fromTs: HybridTimestamp; readonly limit: number };

/** One committed version of a key as a change read returns it: its value, or `deleted` for a removal. */
export type ChangeEntry =
  | { readonly key: string; readonly commitTs: HybridTimestamp; readonly deleted: false; readonly value: Value }
  | { readonly key: string; readonly commitTs: HybridTimestamp; readonly deleted: true };

/** A change read's page: rows in key order, each key's versions oldest first. */
export interface ChangesReadResult {
  readonly op: 'changes';
  readonly changes: readonly ChangeEntry[];
  /** First key not looked at when the page was full (the next page starts there). */
  readonly nextKey?: string;
}

export interface ReadOnlyRequest {
  readonly kind: 'ReadOnlyRequest';
  readonly partitionId: PartitionId;
  /** The RO tx (absent for an implicit single read). */
  readonly txId?: TxId;
  readonly coordinatorId: NodeId;
  /** Absent: an implicit `client.get`, read on the primary at the primary's `now` (rule 19). */
  readonly readTs?: HybridTimestamp;
  readonly operation: RoOperation;
}

export interface ReadOnlyResponse {
  readonly kind: 'ReadOnlyResponse';
  /** The read timestamp the read was served at. */
  readonly readTs: HybridTimestamp;
  readonly result: Exclude<RwResult, { readonly op: 'written' }> | ChangesReadResult;
}

// ---------------------------------------------------------------------------------------------------------------------
// Finish (coordinator → commit partition primary) and cleanup (commit partition primary → enlisted primaries)

export interface EnlistedPartition {
  readonly partitionId: PartitionId;
  /** Primary the coordinator enlisted it at (a hint for cleanup; cleanup re-resolves primaries on failure). */
  readonly primaryName: NodeName;
  readonly token: EnlistmentToken;
}

export interface TxFinishRequest {
  readonly kind: 'TxFinishRequest';
  readonly txId: TxId;
  readonly commitPartitionId: PartitionId;
  readonly commit: boolean;
  /** Chosen once by the coordinator with FINISHING and resent unchanged on every retry (rule 13). Commit only. */
  readonly commitTs?: HybridTimestamp;
  readonly enlisted: readonly EnlistedPartition[];
  /**
   * A commit carrying its writes to the commit partition, whose rows the tx holds X-locked there under `token`
   * (replica/partition/commands.ts CarriedWrites): `commitTs` is then only a lower bound, the commit partition takes
   * the real one when it writes them, below `bound`, or stores ABORTED (and says why).
   */
  readonly carried?: CarriedCommit;
  /**
   * A parallel commit (DESIGN §4b "Fewer rounds per commit"): the commit partition stores a committing record naming
   * the writes whose apply the coordinator is still confirming, and answers `committing` instead of an outcome.
   */
  readonly committing?: { readonly inflight: readonly InflightWrites[] };
  /**
   * Replaces a committing record with the outcome: `confirmed`, the coordinator confirmed every in-flight write (the
   * tx committed at the record's commitTs); `check`, the commit partition checks them itself and decides.
   */
  readonly settle?: 'confirmed' | 'check';
}

export interface CarriedCommit {
  readonly token: EnlistmentToken;
  /** The tx's deadline and every other enlisted partition's lease expiration, as the coordinator knows them: the least. */
  readonly bound: HybridTimestamp;
  /** Distinct keys: a put carries its value, a removal none. */
  readonly writes: readonly CarriedWrite[];
}

export type CarriedWrite =
  | { readonly kind: 'put'; readonly key: string; readonly value: Value }
  | { readonly kind: 'remove'; readonly key: string };

/** A tx's true outcome as stored by the commit partition's compare-and-set (rule 14). */
export type TxOutcome =
  | { readonly state: 'COMMITTED'; readonly commitTs: HybridTimestamp }
  | { readonly state: 'ABORTED' };

export interface TxFinishResponse {
  readonly kind: 'TxFinishResponse';
  /** Absent exactly when `committing` is set. */
  readonly outcome?: TxOutcome;
  /** A committing record is stored, with this commitTs (a parallel commit's first answer). */
  readonly committing?: HybridTimestamp;
  /** A carried commit that stored ABORTED instead (the outcome then says ABORTED): why it could not commit. */
  readonly refused?: string;
}

export interface TxCleanupRequest {
  readonly kind: 'TxCleanupRequest';
  readonly txId: TxId;
  /** Partitions of this tx whose primary is the receiving node. */
  readonly partitions: readonly PartitionId[];
  /**
   * Unlock only: a tx that wrote nothing anywhere (no intents to switch, no record at its commit partition): locks are
   * released and the map entry goes to `outcome`.
   */
  readonly unlockOnly: boolean;
  /** The tx's true outcome: intents are switched to it; the primary's map entry ends with it. */
  readonly outcome: TxOutcome;
}

export interface TxCleanupResponse {
  readonly kind: 'TxCleanupResponse';
  readonly txId: TxId;
  /** Partitions whose intents were switched locally and whose locks were released. */
  readonly cleaned: readonly PartitionId[];
}

/** Rule 6: confirms the primary still acts under `token` at `commitTs` (the primary absorbs commitTs first). */
export interface LeaseConfirmRequest {
  readonly kind: 'LeaseConfirmRequest';
  readonly partitionId: PartitionId;
  readonly token: EnlistmentToken;
  readonly commitTs: HybridTimestamp;
}

export interface LeaseConfirmResponse {
  readonly kind: 'LeaseConfirmResponse';
  readonly confirmed: boolean;
}

/**
 * Rules 4 and 6: before taking commitTs, the coordinator asks each primary that answered a write of the tx before
 * applying it for the apply results of every write of the tx there. The primary answers once they all applied.
 */
export interface WriteConfirmRequest {
  readonly kind: 'WriteConfirmRequest';
  readonly partitionId: PartitionId;
  readonly txId: TxId;
}

export interface WriteConfirmResponse {
  readonly kind: 'WriteConfirmResponse';
  /** The largest effective timestamp among the confirmed writes: the coordinator's clock absorbs it. */
  readonly writeTs: HybridTimestamp;
}

/**
 * A parallel commit's check of its in-flight writes on one partition (replica/handlers/write-check.ts): once every
 * proposal made before the check is decided there, did every one of `keys` get an intent of the tx?
 */
export interface WriteCheckRequest {
  readonly kind: 'WriteCheckRequest';
  readonly partitionId: PartitionId;
  readonly txId: TxId;
  readonly keys: readonly string[];
}

export interface WriteCheckResponse {
  readonly kind: 'WriteCheckResponse';
  readonly applied: boolean;
}

// ---------------------------------------------------------------------------------------------------------------------
// Write intent resolution and recovery

/** A state answer. Never FINISHING (the answerer waits); COMMITTED always carries its commitTs (rule 11). */
export type TxStateAnswer =
  | { readonly state: 'PENDING' }
  | { readonly state: 'COMMITTED'; readonly commitTs: HybridTimestamp }
  | { readonly state: 'ABORTED' }
  | { readonly state: 'UNKNOWN' };

export interface TxStateCoordinatorRequest {
  readonly kind: 'TxStateCoordinatorRequest';
  readonly txId: TxId;
  /** The reader's readTs: the coordinator absorbs it before reading its map (rule 8, 12). */
  readonly readTs: HybridTimestamp;
  /**
   * Set by a read-write request that met the tx's intent without its lock (the intent's primary changed, so the tx
   * lost its locks there): the coordinator aborts the tx if it is still PENDING and answers its final outcome
   * (ignite3-protocol.md §8). `partitionId` is the partition of the intent.
   */
  readonly readWrite?: { readonly partitionId: PartitionId };
}

export interface TxStateCommitPartitionRequest {
  readonly kind: 'TxStateCommitPartitionRequest';
  readonly txId: TxId;
  readonly commitPartitionId: PartitionId;
  readonly readTs: HybridTimestamp;
  /** The coordinator the reader knows of (the commit partition may forward a coordinator request to it). */
  readonly coordinatorId?: NodeId;
  /** Where the intent lives, for the primary-replica path when no state exists anywhere (rule 16). */
  readonly intentPartitionId: PartitionId;
  readonly key: string;
  readonly newestCommitTs?: HybridTimestamp;
  /**
   * Set by the primary of `intentPartitionId` asking about a tx that holds a lock or intent there: with no record at
   * or below the vacuum horizon the commit partition answers UNKNOWN with `vacuumed` (rule 15) instead of taking the
   * primary-replica path, which would only ask the sender back.
   */
  readonly holder?: boolean;
}

/** Rule 16: the intent's partition primary infers the state from its own version chain. */
export interface TxStatePrimaryReplicaRequest {
  readonly kind: 'TxStatePrimaryReplicaRequest';
  readonly txId: TxId;
  readonly partitionId: PartitionId;
  readonly key: string;
  readonly readTs: HybridTimestamp;
  readonly newestCommitTs?: HybridTimestamp;
}

export interface TxStateResponse {
  readonly kind: 'TxStateResponse';
  /** null: the answerer has no state for the tx (a coordinator that never knew it, or forgot it). */
  readonly answer: TxStateAnswer | null;
  /**
   * With UNKNOWN from a commit partition asked by a holder's primary: no record, and the tx is at or below the vacuum
   * horizon, so no finish of it can ever be applied (rule 15).
   */
  readonly vacuumed?: boolean;
}

/** Orphan detection: a lock holder's coordinator is gone; the commit partition must decide the tx (abort). */
export interface TxRecoveryRequest {
  readonly kind: 'TxRecoveryRequest';
  readonly txId: TxId;
  readonly commitPartitionId: PartitionId;
  /** The partition (and its primary) that found the orphan, to be cleaned up with the commit partition. */
  readonly reporterPartitionId: PartitionId;
}

export type TxRequest =
  | ReadWriteRequest
  | ReadOnlyRequest
  | TxFinishRequest
  | TxCleanupRequest
  | LeaseConfirmRequest
  | WriteConfirmRequest
  | WriteCheckRequest
  | TxStateCoordinatorRequest
  | TxStateCommitPartitionRequest
  | TxStatePrimaryReplicaRequest
  | TxRecoveryRequest;

export type TxResponse =
  | ReadWriteResponse
  | ReadOnlyResponse
  | TxFinishResponse
  | TxCleanupResponse
  | LeaseConfirmResponse
  | WriteConfirmResponse
  | WriteCheckResponse
  | TxStateResponse;

export type TxRequestKind = TxRequest['kind'];

/** Request kind → response body type, for typed request helpers. */
export interface TxResponseOf {
  ReadWriteRequest: ReadWriteResponse;
  ReadOnlyRequest: ReadOnlyResponse;
  TxFinishRequest: TxFinishResponse;
  TxCleanupRequest: TxCleanupResponse;
  LeaseConfirmRequest: LeaseConfirmResponse;
  WriteConfirmRequest: WriteConfirmResponse;
  WriteCheckRequest: WriteCheckResponse;
  TxStateCoordinatorRequest: TxStateResponse;
  TxStateCommitPartitionRequest: TxStateResponse;
  TxStatePrimaryReplicaRequest: TxStateResponse;
  TxRecoveryRequest: TxStateResponse;
}

export const TX_REQUEST_KINDS: readonly TxRequestKind[] = [
  'ReadWriteRequest',
  'ReadOnlyRequest',
  'TxFinishRequest',
  'TxCleanupRequest',
  'LeaseConfirmRequest',
  'WriteConfirmRequest',
  'WriteCheckRequest',
  'TxStateCoordinatorRequest',
  'TxStateCommitPartitionRequest',
  'TxStatePrimaryReplicaRequest',
  'TxRecoveryRequest',
];

/** A response of the wrong kind is a protocol violation by the peer (never expected from a correct node). */
/** A put operation, with its expiry only when it has one (older peers' checks know no `expiry` field otherwise). */
export function putOperation(key: string, value: Value, expiry: Expiry | undefined): RwOperation {
  return expiry === undefined ? { op: 'put', key, value } : { op: 'put', key, value, expiry };
}

export function expectKind<R extends { readonly kind: string }>(response: R, kind: R['kind']): R {
  if (response?.kind !== kind) {
    throw new BasaltError('INTERNAL', `expected a ${kind}, got ${String(response?.kind)}`);
  }
  return response;
}

// ------------------------------------------------------------------------------------------ the request port

export type TxRequestOf<K extends TxRequestKind> = Extract<TxRequest, { readonly kind: K }>;

export interface TxRequestOptions {
  readonly timeoutMs: number;
  readonly signal?: AbortSignal;
}

/**
 * Sends `body` to node `to` and resolves with its response body, or rejects with a coded BasaltError: the remote
 * error as sent (PRIMARY_MISS, TX_LOCK_CONFLICT, ...), TIMEOUT, CONNECTION_CLOSED (outcome unknown), CANCELLED, ...
 */
export type TxRequestFn = <K extends TxRequestKind>(
  to: NodeName,
  body: TxRequestOf<K>,
  options: TxRequestOptions,
) => Promise<TxResponseOf[K]>;
