/**
 * A client backend bound to one node incarnation, without a cluster harness around it: what a `basalt node` process
 * serves on its client port. Transactions run on the node's coordinator service (read-write ones on its
 * `TxCoordinator`, read-only ones on its `ReadOnlyCoordinator`); tables go through the node's metastorage.
 *
 * Unlike the embedded client it does not wait for a new table's partitions to elect primaries: `createTable`
 * resolves once this node's metastorage view holds the table, and the first transactions on it may meet retryable
 * PRIMARY_MISS / NODE_UNAVAILABLE errors while leases settle (`transaction` retries them).
 */

import type { MemberRecord, ProtectedTimestamps, TableDescriptor, TableOptions } from '../cluster/metastorage-state.js';
import { BasaltError } from '../core/errors.js';
import { LIMITS } from '../core/limits.js';
import { sleep } from '../env/timers.js';
import type { BasaltNode } from '../node/basalt-node.js';
import { COORDINATOR_SERVICE, type CoordinatorService } from '../node/coordinator-service.js';
import { locateOr } from '../route/primary-directory.js';
import type { OnePhaseAge } from '../tx/coordinator/coordinator.js';
import type { DirectServed } from '../tx/coordinator/coordinator-direct.js';
import { beginReadOnly } from '../tx/coordinator/read-only.js';
import { retryPolicy, withRetries } from '../tx/coordinator/retry.js';
import { beginTransaction, readWriteBeginOptions, runTransaction } from '../tx/coordinator/transaction.js';
import type { PutOptions, Value } from './client.js';
import type { BackendTransaction, ClientBackend, DirectRequest, RemoteBeginOptions, UserDirectory } from './server.js';
import type { ChangeReadPage, ChangeReadRequest } from './watch.js';

/** Polling period while waiting for this node's metastorage view to show a table change. */
const TABLE_POLL_MS = 20;

/** Counters the node client bumps on its node: implicit operations asked of it (each call once, retries not counted). */
export const NODE_CLIENT_COUNTERS = {
  implicitReads: 'client.implicitReads',
  implicitWrites: 'client.implicitWrites',
} as const;

export function nodeClient(node: BasaltNode): ClientBackend {
  return new NodeClient(node);
}

class NodeClient implements ClientBackend {
  /** The cluster's users, as this node's metastorage has them; changes go through the metastorage group. */
  readonly users: UserDirectory;
  readonly protectedTimestamps: ProtectedTimestamps;

  constructor(private readonly basalt: BasaltNode) {
    this.users = this.userDirectory();
    const meta = basalt.metastorage;
    this.protectedTimestamps = {
      protect: (ts, owner, lifetimeMs) => meta.protectTimestamp(ts, owner, lifetimeMs),
      renew: (id, owner, lifetimeMs) => meta.renewTimestamp(id, owner, lifetimeMs),
      release: (id) => meta.releaseTimestamp(id),
    };
  }

  get node(): string {
    return this.basalt.name;
  }

  private userDirectory(): UserDirectory {
    const meta = this.basalt.metastorage;
    return {
      user: (name) => meta.user(name),
      users: () => meta.users(),
      createUser: (user) => meta.createUser(user),
      removeUser: (name) => meta.removeUser(name),
      setPassword: (name, password) => meta.setPassword(name, password),
      grantRole: (name, role, table) => meta.grantRole(name, role, table),
    };
  }

  async begin(options: RemoteBeginOptions = {}): Promise<BackendTransaction> {
    const service = this.service();
    if (options.readOnly !== true) {
      if (options.readTimestamp !== undefined || options.stalenessMs !== undefined) {
        throw new BasaltError('INVALID_ARGUMENT', 'readTimestamp and stalenessMs are for read-only transactions');
      }
      return beginTransaction(service.coordinator, readWriteBeginOptions(options));
    }
    if (options.timeoutMs !== undefined || options.retryOf !== undefined) {
      throw new BasaltError('INVALID_ARGUMENT', 'timeoutMs and retryOf apply to read-write transactions only');
    }
    return beginReadOnly(service.readOnly, {
      ...(options.readTimestamp !== undefined && { readTimestamp: options.readTimestamp }),
      ...(options.stalenessMs !== undefined && { stalenessMs: options.stalenessMs }),
    });
  }

  transaction<T>(fn: (tx: BackendTransaction) => Promise<T>): Promise<T> {
    return runTransaction(this.service().coordinator, fn);
  }

  /** One lock-free read on the key's primary at the primary's `now` (as the embedded client), retried when retryable. */
  get(table: string, key: string): Promise<Value | undefined> {
    this.basalt.counters.add(NODE_CLIENT_COUNTERS.implicitReads);
    return this.retrying(() => this.service().readOnly.getImplicit(table, key));
  }

  /**
   * An implicit one-phase write; a failure that proves it did not apply (retryable) is retried as a new one, which
   * keeps the age of the attempt before it (OnePhaseAge).
   */
  async put(table: string, key: string, value: Value, options?: PutOptions): Promise<void> {
    this.basalt.counters.add(NODE_CLIENT_COUNTERS.implicitWrites);
    const age: OnePhaseAge = {};
    await this.retrying(() => this.service().coordinator.putImplicit(table, key, value, options, age));
  }

  async remove(table: string, key: string): Promise<void> {
    this.basalt.counters.add(NODE_CLIENT_COUNTERS.implicitWrites);
    const age: OnePhaseAge = {};
    await this.retrying(() => this.service().coordinator.removeImplicit(table, key, age));
  }

  private retrying<T>(attempt: () => Promise<T>): Promise<T> {
    const policy = retryPolicy({}, this.service().coordinator.retryJitter);
    return withRetries(policy, (delayMs) => sleep(this.basalt.timers, delayMs), attempt);
  }

  async createTable(name: string, options: TableOptions): Promise<TableDescriptor> {
    const table = await this.basalt.metastorage.createTable(name, options);
    await this.untilKnown(name, true);
    return table;
  }

  async dropTable(name: string): Promise<void> {
    await this.basalt.metastorage.dropTable(name);
    await this.untilKnown(name, false);
  }

  tables(): Promise<TableDescriptor[]> {
    return Promise.resolve(this.basalt.metastorage.tables());
  }

  members(): readonly MemberRecord[] {
    return this.basalt.metastorage.view().members ?? [];
  }

  primaries(table: string): readonly (string | null)[] {
    const placement = this.service().placement;
    return placement.partitionsOf(table).map((partitionId) => locateOr(placement.primaries, partitionId, null));
  }

  /** A direct operation on this node's replica of the key's partition (tx/core/direct.ts). */
  direct(request: DirectRequest): Promise<DirectServed> {
    return this.service().coordinator.serveDirect(request.table, request.operation, request.tx);
  }

  readChanges(request: ChangeReadRequest): Promise<ChangeReadPage> {
    return this.service().readOnly.readChanges(request);
  }

  removeNode(name: string, dead: boolean): Promise<readonly MemberRecord[]> {
    return this.basalt.metastorage.removeNode(name, { dead });
  }

  /** Waits (bounded by the metastorage command timeout) until this node's view has, or lacks, the table. */
  private async untilKnown(name: string, present: boolean): Promise<void> {
    for (let waitedMs = 0; (this.basalt.metastorage.table(name) !== undefined) !== present; waitedMs += TABLE_POLL_MS) {
      if (waitedMs >= LIMITS.metaCommandTimeoutMs) {
        throw new BasaltError('TIMEOUT', `table ${name} not ${present ? 'known' : 'dropped'} on ${this.node} yet`);
      }
      await sleep(this.basalt.timers, TABLE_POLL_MS);
    }
  }

  private service(): CoordinatorService {
    const service = this.basalt.service<CoordinatorService>(COORDINATOR_SERVICE);
    if (service === undefined) {
      throw new BasaltError('NOT_IMPLEMENTED', `node ${this.node} runs no transaction coordinator`);
    }
    return service;
  }
}
