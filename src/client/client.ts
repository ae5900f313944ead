/**
 * The embedded client (DESIGN §4): a `Client` bound to one node of an in-process cluster, whose transactions that
 * node's coordinator runs. The coordinator is looked up on every call, so a client outlives a restart of its node
 * (calls made while the node is down fail NODE_UNAVAILABLE, which is retryable).
 *
 * Under the simulator nothing moves unless the harness drives virtual time, so every method of the client and of its
 * transactions settles through `cluster.drive` (the identity on real time); calls made inside a driven call join the
 * same run.
 *
 * A call in flight when its node stops (a crash, whose timers never fire again) settles at once instead of hanging:
 * an operation fails TX_ABORTED (retryable: a transaction whose coordinator is gone never commits), a commit or an
 * implicit write TX_OUTCOME_UNKNOWN (it may have reached its commit partition), a rollback resolves. `transaction`
 * looks its coordinator up again for every attempt, so it retries on the restarted node.
 *
 * Implicit operations: `put`/`remove` are one-phase writes (one replicated command, no intent). `get` is one
 * lock-free read on the key's primary at the primary's `now` (rule 19: a linearizable single-key read while clocks
 * stay within maxClockSkew), retried on retryable errors.
 *
 * Watches (`watch`) are rounds of change reads on the node's RO coordinator (client/watch.ts); a read while the node
 * is down or stopping fails NODE_UNAVAILABLE, and the stream retries it at the same position once the node is back.
 */

import type {
  ProtectedTimestamp,
  ProtectedTimestamps,
  TableDescriptor,
  TableOptions,
} from '../cluster/metastorage-state.js';
import { BasaltError } from '../core/errors.js';
import type { HybridTimestamp, NodeName, TxId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import type { Cluster } from '../harness/cluster.js';
import type { BasaltNode } from '../node/basalt-node.js';
import { COORDINATOR_SERVICE, type CoordinatorService } from '../node/coordinator-service.js';
import type { Value } from '../storage/mv-partition-storage.js';
import type { OnePhaseAge, TxCoordinator } from '../tx/coordinator/coordinator.js';
import { beginReadOnly, type ReadOnlyCoordinator, runReadOnlyTransaction } from '../tx/coordinator/read-only.js';
import { retryPolicy, withRetries } from '../tx/coordinator/retry.js';
import {
  beginTransaction,
  type Transaction as CoordinatedTransaction,
  type RunTransactionOptions,
  readWriteBeginOptions,
  runTransaction,
} from '../tx/coordinator/transaction.js';
import type { KeyValue, PutOptions, ReadOptions, ScanOptions, ScanRange, TxWrite } from '../tx/core/user-input.js';
import { type BackupOptions, type BackupSummary, backup } from './backup.js';
import {
  grantLease,
  keepLeaseAlive,
  type Lease,
  type LeaseKeepAlive,
  leaseOption,
  putWithLease,
  revokeLease,
  startKeepAlive,
} from './leases.js';
import { type RestoreOptions, type RestoreSummary, restore } from './restore.js';
import {
  type ChangeReadPage,
  type ChangeReadRequest,
  type WatchOptions,
  type WatchStream,
  watchChanges,
} from './watch.js';

export type { Value } from '../storage/mv-partition-storage.js';
export type { KeyValue, PutOptions, ReadOptions, ScanOptions, ScanRange } from '../tx/core/user-input.js';
export type { Lease, LeaseKeepAlive } from './leases.js';

/** Options of `begin`: the kind of transaction, and for each kind its timestamp or timeout. */
export interface BeginOptions {
  /** A lock-free read-only transaction reading a snapshot at its read timestamp (the coordinator's `now`). */
  readonly readOnly?: boolean;
  /** Read-only only: read at this timestamp (at most maxClockSkew ahead of physical time; a future one waits). */
  readonly readTimestamp?: HybridTimestamp;
  /** Read-only only: bounded staleness, read at `now − stalenessMs` (fixed at begin); any replica may serve. */
  readonly stalenessMs?: number;
  /**
   * Read-write only: this transaction's timeout (default 30 s), a positive integer up to the cluster's maximum
   * (LIMITS.txTimeoutMsMax, 10 minutes, unless configured); past it the tx fails TX_TIMEOUT.
   */
  readonly timeoutMs?: number;
  /**
   * Read-write only: the id of an earlier attempt, on this node, that this transaction retries: it keeps that
   * attempt's age for wait-die, so that it is not younger than the txs it lost to (`transaction` does this itself).
   */
  readonly retryOf?: TxId;
}

/** Options of `transaction`: those of `begin`, and how often and how patiently a retryable failure is retried. */
export interface TransactionOptions extends BeginOptions, RunTransactionOptions {}

/** A read-write transaction (DESIGN §4). Values are JSON-compatible or Uint8Array; a missing key reads `undefined`. */
export interface Transaction {
  /** The transaction's id (it carries its begin timestamp and timeout). */
  readonly id: TxId;
  /** Whether this is a read-only transaction. */
  readonly readOnly: boolean;
  /** The snapshot timestamp of a read-only transaction (undefined for a read-write one). */
  readonly readTimestamp?: HybridTimestamp | undefined;
  /**
   * `{ forUpdate: true }` (read-write transactions only, TX_READ_ONLY otherwise): lock the row exclusively, as a write
   * of it would, so that a read-modify-write waits for another one instead of failing under wait-die.
   */
  get(table: string, key: string, options?: ReadOptions): Promise<Value | undefined>;
  /** The values of `keys`, in their order (`undefined` for a missing key); `forUpdate` as for `get`. */
  getAll(table: string, keys: readonly string[], options?: ReadOptions): Promise<(Value | undefined)[]>;
  /** `{ ttlMs }`, `{ expiresAt }` or `{ lease }`: the version expires (docs/concepts/expiry.md). */
  put(table: string, key: string, value: Value, options?: PutOptions): Promise<void>;
  /** Writes every entry, as `put` would each. */
  putAll(table: string, entries: readonly KeyValue[]): Promise<void>;
  /** Removes `key` (a missing key is no error). TX_READ_ONLY in a read-only transaction. */
  remove(table: string, key: string): Promise<void>;
  /** The rows of `range` in key order, at most `limit`; a read-write transaction locks the range it read. */
  scan(table: string, range: ScanRange, options?: ScanOptions): Promise<KeyValue[]>;
  /** Commits: resolves once the outcome is durable on the commit partition (TX_OUTCOME_UNKNOWN if that is unknown). */
  commit(): Promise<void>;
  /** A no-op once the transaction finished, so it is safe in a `finally`. */
  rollback(): Promise<void>;
}

/** The client API, the same for an embedded cluster (`cluster.client()`) and a TCP connection (`connect`). */
export interface Client {
  /** The node whose coordinator runs this client's transactions. */
  readonly node: NodeName;
  /** Begins a transaction: read-write by default, read-only with `{ readOnly: true }`. */
  begin(options?: BeginOptions): Promise<Transaction>;
  /** Runs `fn` in a transaction and commits; retries retryable failures in a fresh transaction. */
  transaction<T>(fn: (tx: Transaction) => Promise<T>, options?: TransactionOptions): Promise<T>;
  /** Implicit read: lock-free, linearizable, on the key's primary at its `now`. */
  get(table: string, key: string): Promise<Value | undefined>;
  /** An implicit write; `{ ttlMs }`, `{ expiresAt }` or `{ lease }` make it expire (docs/concepts/expiry.md). */
  put(table: string, key: string, value: Value, options?: PutOptions): Promise<void>;
  /** Implicit one-phase removal, as `put`. */
  remove(table: string, key: string): Promise<void>;
  /** Creates a table; resolves once every partition has a primary. ALREADY_EXISTS if it exists. */
  createTable(name: string, options: TableOptions): Promise<TableDescriptor>;
  /** Drops a table and its data. UNKNOWN_TABLE if there is none. */
  dropTable(name: string): Promise<void>;
  /** The tables of the cluster (a Promise, so that the embedded and the remote client share one interface). */
  tables(): Promise<TableDescriptor[]>;
  /**
   * Backs up the cluster's tables (or `options.tables`) as of one timestamp into the directory `options.to`: one
   * read-only snapshot read lock-free from every partition, streamed to files with a manifest, written atomically;
   * `incrementalFrom` writes only what changed since an earlier backup (client/backup.ts).
   */
  backup(options: BackupOptions): Promise<BackupSummary>;
  /**
   * Protects `ts` from the storage GC of every node for `lifetimeMs` (default 2 minutes, at most 10): reads at `ts`
   * keep finding their history until it lapses or is released. INVALID_ARGUMENT when the cluster holds its maximum
   * (64). A backup protects its timestamp by itself.
   */
  protectTimestamp(ts: HybridTimestamp, options?: { readonly lifetimeMs?: number }): Promise<ProtectedTimestamp>;
  /** Moves a protected timestamp's expiry to `lifetimeMs` from now; NOT_FOUND once it lapsed or was released. */
  renewProtectedTimestamp(id: string, options?: { readonly lifetimeMs?: number }): Promise<ProtectedTimestamp>;
  /** Releases a protected timestamp (one that lapsed already: nothing to do). */
  releaseProtectedTimestamp(id: string): Promise<void>;
  /**
   * Restores a backup (and the chain it ends) into empty or new tables, after checking every file; a restore that
   * stopped half way continues when run again (client/restore.ts).
   */
  restore(options: RestoreOptions): Promise<RestoreSummary>;
  /**
   * The change stream of `table` (or of a prefix or range of it): every committed change above `fromTimestamp`, once,
   * in commit order per key, with progress marks `{ resolvedTs }` (client/watch.ts). It resumes by itself across node
   * restarts and primary changes; see WatchOptions.
   */
  watch(table: string, options?: WatchOptions): WatchStream;
  /** One page of one partition's changes in a window: what `watch` is built from (and the protocol's `changes`). */
  readChanges(request: ChangeReadRequest): Promise<ChangeReadPage>;
  /** Grants a lease of `ttlMs` (1..LIMITS.ttlMsMax); keys put with `{ lease: id }` vanish together when it ends. */
  grantLease(ttlMs: number): Promise<Lease>;
  /** Extends lease `id` once, to the node's clock + its ttl (LEASE_NOT_FOUND if it already ended). */
  keepAliveOnce(id: string): Promise<Lease>;
  /** Keeps `lease` alive every third of its ttl until closed; `done` rejects (LEASE_NOT_FOUND) when it is lost. */
  keepAlive(lease: Lease): LeaseKeepAlive;
  /** Ends lease `id` now, removing its keys in one transaction. */
  revokeLease(id: string): Promise<void>;
}

/** The `ClientFactory` of the cluster harness. */
export function embeddedClient(cluster: Cluster<Client>, node: NodeName): Client {
  return new EmbeddedClient(cluster, node);
}

class EmbeddedClient implements Client {
  /** The node's protected timestamps, held in this client's node's name (what a client server serves from it). */
  readonly protectedTimestamps: ProtectedTimestamps;

  constructor(
    private readonly cluster: Cluster<Client>,
    readonly node: NodeName,
  ) {
    const meta = () => this.current().node.metastorage;
    this.protectedTimestamps = {
      protect: (ts, owner, lifetimeMs) => this.run(() => meta().protectTimestamp(ts, owner, lifetimeMs)),
      renew: (id, owner, lifetimeMs) => this.run(() => meta().renewTimestamp(id, owner, lifetimeMs)),
      release: (id) => this.run(() => meta().releaseTimestamp(id)),
    };
  }

  protectTimestamp(ts: HybridTimestamp, options: { readonly lifetimeMs?: number } = {}): Promise<ProtectedTimestamp> {
    const lifetimeMs = options.lifetimeMs ?? LIMITS.protectedTimestampLifetimeMsDefault;
    return this.protectedTimestamps.protect(ts, this.node, lifetimeMs);
  }

  renewProtectedTimestamp(id: string, options: { readonly lifetimeMs?: number } = {}): Promise<ProtectedTimestamp> {
    const lifetimeMs = options.lifetimeMs ?? LIMITS.protectedTimestampLifetimeMsDefault;
    return this.protectedTimestamps.renew(id, this.node, lifetimeMs);
  }

  releaseProtectedTimestamp(id: string): Promise<void> {
    return this.protectedTimestamps.release(id);
  }

  begin(options: BeginOptions = {}): Promise<Transaction> {
    return this.run(async () => {
      const { node, coordinator, readOnly } = this.current();
      if (options.readOnly === true) {
        return new DrivenTransaction(this.cluster, node, beginReadOnly(readOnly, readOnlyOptions(options)));
      }
      rejectReadOnlyOptions(options);
      return new DrivenTransaction(this.cluster, node, beginTransaction(coordinator, readWriteBeginOptions(options)));
    });
  }

  transaction<T>(fn: (tx: Transaction) => Promise<T>, options: TransactionOptions = {}): Promise<T> {
    return this.run(async () => {
      if (options.readOnly !== true) rejectReadOnlyOptions(options);
      // A read-write retry keeps the age of the attempt before it (BeginTxOptions.retryOf).
      const previous: { id?: TxId } = {};
      return this.retrying(() => this.attempt(fn, options, previous), options);
    });
  }

  /** One attempt of `transaction` on the current incarnation of the node (its coordinator retries nothing here). */
  private attempt<T>(
    fn: (tx: Transaction) => Promise<T>,
    options: TransactionOptions,
    previous: { id?: TxId },
  ): Promise<T> {
    const { node, coordinator, readOnly } = this.current();
    if (options.readOnly === true) {
      // Finishing an RO tx is local: nothing of it can be in doubt when its node stops.
      const run = runReadOnlyTransaction(readOnly, (tx) => fn(new DrivenTransaction(this.cluster, node, tx)), {
        ...readOnlyOptions(options),
        retries: 0,
      });
      return whileAlive(node, run, () => coordinatorGone(node.name));
    }
    let committing = false;
    const run = runTransaction(
      coordinator,
      async (tx) => {
        previous.id = tx.id;
        const result = await fn(new DrivenTransaction(this.cluster, node, tx));
        committing = true;
        return result;
      },
      { ...options, retries: 0, ...(previous.id !== undefined && { retryOf: previous.id }) },
    );
    return whileAlive(node, run, () => (committing ? outcomeUnknown(node.name) : coordinatorGone(node.name)));
  }

  /** One lock-free read on the key's primary at the primary's `now` (rule 19), retried on retryable errors. */
  get(table: string, key: string): Promise<Value | undefined> {
    return this.run(() =>
      this.retrying(() => {
        const { node, readOnly } = this.current();
        return whileAlive(node, readOnly.getImplicit(table, key), () => coordinatorGone(node.name));
      }, {}),
    );
  }

  /**
   * An implicit one-phase write; a failure that proves it did not apply (retryable) is retried as a new one. With a
   * lease it is a transaction (the write and the lease's key list change together).
   */
  async put(table: string, key: string, value: Value, options?: PutOptions): Promise<void> {
    const lease = leaseOption(options);
    if (lease !== undefined) return this.transaction((tx) => tx.put(table, key, value, { lease }));
    const age: OnePhaseAge = {};
    return this.run(() =>
      this.retrying(async () => {
        const { node, coordinator } = this.current();
        const written = coordinator.putImplicit(table, key, value, options, age);
        await whileAlive(node, written, () => outcomeUnknown(node.name));
      }, {}),
    );
  }

  grantLease(ttlMs: number): Promise<Lease> {
    return grantLease(this, ttlMs);
  }

  keepAliveOnce(id: string): Promise<Lease> {
    return keepLeaseAlive(this, id);
  }

  keepAlive(lease: Lease): LeaseKeepAlive {
    return startKeepAlive(this, lease, (ms) => this.cluster.runFor(ms));
  }

  revokeLease(id: string): Promise<void> {
    return revokeLease(this, id);
  }

  remove(table: string, key: string): Promise<void> {
    const age: OnePhaseAge = {};
    return this.run(() =>
      this.retrying(async () => {
        const { node, coordinator } = this.current();
        await whileAlive(node, coordinator.removeImplicit(table, key, age), () => outcomeUnknown(node.name));
      }, {}),
    );
  }

  /** Creates the table and waits until its partitions have primaries and this client's node knows it. */
  createTable(name: string, options: TableOptions): Promise<TableDescriptor> {
    return this.run(async () => {
      const table = await this.cluster.createTable(name, options);
      await this.cluster.waitFor(() => this.knows(name, true), { what: `table ${name} known to ${this.node}` });
      return table;
    });
  }

  dropTable(name: string): Promise<void> {
    return this.run(async () => {
      await this.cluster.dropTable(name);
      await this.cluster.waitFor(() => this.knows(name, false), { what: `table ${name} dropped on ${this.node}` });
    });
  }

  tables(): Promise<TableDescriptor[]> {
    return Promise.resolve(this.cluster.tables());
  }

  backup(options: BackupOptions): Promise<BackupSummary> {
    return backup(this, options);
  }

  restore(options: RestoreOptions): Promise<RestoreSummary> {
    return restore(this, options);
  }

  watch(table: string, options?: WatchOptions): WatchStream {
    const source = {
      readChanges: (r: ChangeReadRequest) => this.readChanges(r),
      sleep: (ms: number) => this.cluster.runFor(ms),
    };
    return watchChanges(source, table, options);
  }

  readChanges(request: ChangeReadRequest): Promise<ChangeReadPage> {
    return this.run(async () => {
      const { node, readOnly } = this.current();
      try {
        return await whileAlive(node, readOnly.readChanges(request), () => nodeStopped(node.name));
      } catch (error) {
        // A read cancelled by its coordinator stopping is retried like a read on a node that is down.
        if (error instanceof BasaltError && error.code === 'CANCELLED') throw nodeStopped(node.name);
        throw error;
      }
    });
  }

  private knows(name: string, present: boolean): boolean {
    const node = this.cluster.basaltNode(this.node);
    if (node === undefined) return false;
    return node.metastorage.view().tables.some((t) => t.name === name) === present;
  }

  /** The running incarnation of this client's node and its coordinator (NODE_UNAVAILABLE while it is down). */
  private current(): { node: BasaltNode; coordinator: TxCoordinator; readOnly: ReadOnlyCoordinator } {
    const node = this.cluster.basaltNode(this.node);
    const service = serviceOf(node, this.node);
    return { node: node as BasaltNode, coordinator: service.coordinator, readOnly: service.readOnly };
  }

  /** Runs `attempt` again after a retryable failure, with backoff in the cluster's time, at most `retries` times. */
  private retrying<T>(attempt: () => Promise<T>, options: RunTransactionOptions): Promise<T> {
    // One stream per coordinator, drawn at each retry: concurrent clients of a node pause differently.
    const jitter =
      this.cluster.basaltNode(this.node) === undefined ? undefined : this.current().coordinator.retryJitter;
    return withRetries(retryPolicy(options, jitter), (delayMs) => this.cluster.runFor(delayMs), attempt);
  }

  private run<T>(fn: () => Promise<T>): Promise<T> {
    return driven(this.cluster, fn);
  }
}

/** What a coordinator's transaction object offers: the read-write one, or the read-only one. */
type InnerTransaction = Omit<CoordinatedTransaction, 'readOnly' | 'commitWith' | 'directInfo' | 'adoptDirect'> & {
  readonly commitWith?: CoordinatedTransaction['commitWith'];
  readonly readOnly: boolean;
  readonly readTimestamp?: HybridTimestamp;
};

class DrivenTransaction implements Transaction {
  constructor(
    private readonly cluster: Cluster<Client>,
    private readonly node: BasaltNode,
    private readonly tx: InnerTransaction,
  ) {}

  get id(): TxId {
    return this.tx.id;
  }

  get readOnly(): boolean {
    return this.tx.readOnly;
  }

  get readTimestamp(): HybridTimestamp | undefined {
    return this.tx.readTimestamp;
  }

  get(table: string, key: string, options?: ReadOptions): Promise<Value | undefined> {
    return this.drive(() => this.tx.get(table, key, options), coordinatorGone);
  }

  getAll(table: string, keys: readonly string[], options?: ReadOptions): Promise<(Value | undefined)[]> {
    return this.drive(() => this.tx.getAll(table, keys, options), coordinatorGone);
  }

  async put(table: string, key: string, value: Value, options?: PutOptions): Promise<void> {
    const lease = leaseOption(options);
    if (lease !== undefined) return putWithLease(this, lease, table, key, value);
    return this.drive(() => this.tx.put(table, key, value, options), coordinatorGone);
  }

  putAll(table: string, entries: readonly KeyValue[]): Promise<void> {
    return this.drive(() => this.tx.putAll(table, entries), coordinatorGone);
  }

  remove(table: string, key: string): Promise<void> {
    return this.drive(() => this.tx.remove(table, key), coordinatorGone);
  }

  scan(table: string, range: ScanRange, options?: ScanOptions): Promise<KeyValue[]> {
    return this.drive(() => this.tx.scan(table, range, options), coordinatorGone);
  }

  commit(): Promise<void> {
    // An RO commit only closes the tx on its coordinator: nothing is in doubt if that node stops.
    return this.drive(() => this.tx.commit(), this.tx.readOnly ? undefined : outcomeUnknown);
  }

  /**
   * Commits with the writes a client buffered (the TCP server passes those its client carried with the commit). A
   * read-only transaction takes none: INVALID_ARGUMENT if there are any.
   */
  commitWith(writes: readonly TxWrite[]): Promise<void> {
    const commitWith = this.tx.commitWith;
    if (commitWith === undefined) {
      if (writes.length > 0) {
        return Promise.reject(new BasaltError('INVALID_ARGUMENT', 'a read-only transaction cannot write'));
      }
      return this.commit();
    }
    return this.drive(() => commitWith.call(this.tx, writes), outcomeUnknown);
  }

  rollback(): Promise<void> {
    // A tx whose coordinator is gone never commits: nothing is left to roll back here.
    return this.drive(() => this.tx.rollback().catch(ignore), undefined);
  }

  /** Drives `fn`; if this tx's node stops first, fails with `gone` (or resolves when there is none). */
  private drive<T>(fn: () => Promise<T>, gone: ((node: NodeName) => BasaltError) | undefined): Promise<T> {
    return driven(this.cluster, () =>
      whileAlive(this.node, fn(), gone === undefined ? undefined : () => gone(this.node.name)),
    );
  }
}

/** Runs `fn` under the cluster's drive; a synchronous throw (argument checks) becomes a rejection like any error. */
function driven<T>(cluster: Cluster<Client>, fn: () => Promise<T>): Promise<T> {
  let promise: Promise<T>;
  try {
    promise = fn();
  } catch (error) {
    promise = Promise.reject(error);
  }
  return cluster.drive(promise);
}

/**
 * Settles with `promise`, unless `node` stops first: then rejects with `gone()`, or resolves (undefined) when `gone`
 * is undefined. The abandoned promise's later settlement is absorbed.
 */
function whileAlive<T>(node: BasaltNode, promise: Promise<T>, gone: (() => BasaltError) | undefined): Promise<T> {
  const signal = node.lifetime;
  return new Promise<T>((resolve, reject) => {
    const onStop = (): void => {
      if (gone === undefined) resolve(undefined as T);
      else reject(gone());
    };
    if (signal.aborted) return onStop();
    signal.addEventListener('abort', onStop, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onStop);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onStop);
        reject(error);
      },
    );
  });
}

function coordinatorGone(node: NodeName): BasaltError {
  return new BasaltError('TX_ABORTED', `the coordinator on ${node} stopped: the transaction can never commit`, {
    node,
    reason: 'coordinator-gone',
  });
}

function nodeStopped(node: NodeName): BasaltError {
  return new BasaltError('NODE_UNAVAILABLE', `node ${node} stopped`, { node }, { executed: 'no' });
}

function outcomeUnknown(node: NodeName): BasaltError {
  return new BasaltError('TX_OUTCOME_UNKNOWN', `the coordinator on ${node} stopped while committing`, { node });
}

function ignore(): void {}

function readOnlyOptions(options: BeginOptions): { readTimestamp?: HybridTimestamp; stalenessMs?: number } {
  if (options.timeoutMs !== undefined || options.retryOf !== undefined) {
    throw new BasaltError('INVALID_ARGUMENT', 'timeoutMs and retryOf apply to read-write transactions only');
  }
  return {
    ...(options.readTimestamp !== undefined && { readTimestamp: options.readTimestamp }),
    ...(options.stalenessMs !== undefined && { stalenessMs: options.stalenessMs }),
  };
}

function rejectReadOnlyOptions(options: BeginOptions): void {
  if (options.readTimestamp !== undefined || options.stalenessMs !== undefined) {
    throw new BasaltError('INVALID_ARGUMENT', 'readTimestamp and stalenessMs apply to read-only transactions only');
  }
}

function serviceOf(node: BasaltNode | undefined, name: NodeName): CoordinatorService {
  if (node === undefined) {
    throw new BasaltError('NODE_UNAVAILABLE', `node ${name} is down`, { node: name }, { executed: 'no' });
  }
  const service = node.service<CoordinatorService>(COORDINATOR_SERVICE);
  if (service === undefined) {
    throw new BasaltError('NOT_IMPLEMENTED', `node ${name} runs no transaction coordinator`, { node: name });
  }
  return service;
}
