/**
 * `connectCluster(['host:port', ...])`: a client of several nodes' client ports that sends each implicit single-key
 * operation (get, put, remove) to the node of the key's primary, so that the node coordinating the operation is the
 * one that executes it, one round trip between nodes fewer than through another node. A lazy read-write transaction
 * (the default of `transaction`) begins with its first operation on the node of its first key's primary, which
 * coordinates it (its commit partition is then local there). Everything else goes to the first address's node, the
 * client's home, as `connect` sends it to its one node.
 *
 * Routes (each partition's primary by index) come from the home node's `primaries`, per table, and are refreshed in
 * the background once older than ROUTES_MAX_AGE_MS (the call that finds them old still uses them). A route is only a
 * preference: every node coordinates any operation correctly, so a stale one costs the hop it meant to save, never a
 * wrong result. A key whose route is unknown, or whose node's connection ended, goes home. A lost connection fails
 * only the calls on it, as with `connect`; later calls go elsewhere. Connecting fails if any address fails (every
 * connection made is closed again).
 */

import type {
  MemberRecord,
  ProtectedTimestamp,
  TableDescriptor,
  TableOptions,
  UserRole,
} from '../cluster/metastorage-state.js';
import { invalidArgument } from '../core/errors.js';
import type { HybridTimestamp, NodeName } from '../core/ids.js';
import { partitionIndexOf } from '../core/partitioning.js';
import type { Clock } from '../env/clock.js';
import { RealClock } from '../env/real-clock.js';
import { type BackupOptions, type BackupSummary, backup } from './backup.js';
import type { PutOptions, Value } from './client.js';
import type { Lease, LeaseKeepAlive } from './leases.js';
import {
  beginRouted,
  type ConnectOptions,
  type CreateUserOptions,
  connect,
  type DirectTargets,
  type RemoteBeginOptions,
  type RemoteClient,
  type RemoteTransaction,
  type RemoteTransactionOptions,
  type RemoteWatchOptions,
  transactionRouted,
  type UserInfo,
} from './remote.js';
import { type RestoreOptions, type RestoreSummary, restore } from './restore.js';
import type { ChangeReadPage, ChangeReadRequest, WatchStream } from './watch.js';

/** How long a table's routes are used before the next call refreshes them. */
export const ROUTES_MAX_AGE_MS = 1000;
/** Tables whose routes are kept at most (past it the oldest are forgotten). */
const ROUTED_TABLES_MAX = 1024;

/** Options of {@link connectCluster}: those of {@link connect}, for every connection. */
export interface ConnectClusterOptions extends ConnectOptions {
  /** For the age of routes (its `monotonicMs`; default the real clock). */
  readonly clock?: Clock;
  /**
   * Direct mapping (default false): a lazy read-write transaction sends its single-key operations (get, put without
   * buffering, remove) straight to the node of their key's primary, naming its coordinator, instead of through the
   * coordinator, which relays them (tx/core/direct.ts). Saves a hop between nodes per such operation on a partition
   * the coordinator's node is not primary of; the commit still goes through the coordinator.
   */
  readonly directMapping?: boolean;
}

/** Connects to every address; the first is home. */
export async function connectCluster(
  addresses: readonly string[],
  options: ConnectClusterOptions = {},
): Promise<RoutingClient> {
  if (addresses.length === 0) throw invalidArgument('connectCluster needs at least one address');
  const attempts = await Promise.allSettled(addresses.map((address) => connect(address, options)));
  const failed = attempts.find((a): a is PromiseRejectedResult => a.status === 'rejected');
  if (failed !== undefined) {
    await Promise.all(attempts.map((a) => (a.status === 'fulfilled' ? a.value.close() : undefined)));
    throw failed.reason;
  }
  const clients = attempts.map((a) => (a as PromiseFulfilledResult<RemoteClient>).value);
  const clock = options.clock ?? new RealClock();
  return new RoutingClient(clients, () => clock.monotonicMs(), options.directMapping === true);
}

interface Routes {
  readonly primaries: readonly (NodeName | null)[];
  readonly fetchedAtMs: number;
}

export class RoutingClient implements RemoteClient {
  private readonly home: RemoteClient;
  private readonly byNode = new Map<NodeName, RemoteClient>();
  private readonly routes = new Map<string, Routes>();
  private readonly refreshing = new Set<string>();

  constructor(
    private readonly clients: readonly RemoteClient[],
    private readonly now: () => number,
    private readonly directMapping = false,
  ) {
    if (clients.length === 0) throw invalidArgument('a routing client needs at least one connection');
    this.home = clients[0]!;
    for (const c of clients) if (!this.byNode.has(c.node)) this.byNode.set(c.node, c);
  }

  get node(): NodeName {
    return this.home.node;
  }

  get address(): string {
    return this.home.address;
  }

  /** True once the home connection ended (transactions can no longer be begun here). */
  get closed(): boolean {
    return this.home.closed;
  }

  /** The nodes this client reaches, home first. */
  get nodes(): NodeName[] {
    return [...this.byNode.keys()];
  }

  /** The node an implicit operation on `key` goes to now (refreshing old routes in the background). */
  routeOf(table: string, key: string): NodeName {
    return this.target(table, key).node;
  }

  /** Begins through home; a lazy transaction (`{ lazy: true }`) begins on the node of its first key's primary. */
  begin(options: RemoteBeginOptions = {}): Promise<RemoteTransaction> {
    return beginRouted(this.home, options, this.route, this.directTargets);
  }

  /** Each lazy attempt (the default: ConnectOptions.lazyBegin) begins on the node of its first key's primary. */
  transaction<T>(fn: (tx: RemoteTransaction) => Promise<T>, options: RemoteTransactionOptions = {}): Promise<T> {
    return transactionRouted(this.home, fn, options, this.route, this.directTargets);
  }

  private readonly route = (table: string, key: string): RemoteClient => this.target(table, key);

  /** With direct mapping: a key's primary's client and partition, when its routes are known. */
  private get directTargets(): DirectTargets | undefined {
    return this.directMapping ? this.directTarget : undefined;
  }

  private readonly directTarget: DirectTargets = (table, key) => {
    const routes = this.routes.get(table);
    if (routes === undefined || routes.primaries.length === 0) {
      this.target(table, key); // fetches them
      return undefined;
    }
    const index = partitionIndexOf(key, routes.primaries.length);
    const primary = routes.primaries[index];
    const client = primary === null || primary === undefined ? undefined : this.byNode.get(primary);
    if (client === undefined) return undefined;
    return { client, partition: `${table}#${index}` };
  };

  get(table: string, key: string): Promise<Value | undefined> {
    return this.target(table, key).get(table, key);
  }

  /** Watches through home; after a loss it reconnects to every address of this client in turn (by default). */
  watch(table: string, options: RemoteWatchOptions = {}): WatchStream {
    return this.home.watch(table, { connect: this.clients.map((c) => c.address), ...options });
  }

  readChanges(request: ChangeReadRequest): Promise<ChangeReadPage> {
    return this.home.readChanges(request);
  }

  /** A lease write is a transaction, so it goes home; any other to the key's primary's node. */
  put(table: string, key: string, value: Value, options?: PutOptions): Promise<void> {
    const client = options?.lease === undefined ? this.target(table, key) : this.home;
    return client.put(table, key, value, options);
  }

  /** Leases live on the home connection (their transactions and the clock their ends come from). */
  grantLease(ttlMs: number): Promise<Lease> {
    return this.home.grantLease(ttlMs);
  }

  keepAliveOnce(id: string): Promise<Lease> {
    return this.home.keepAliveOnce(id);
  }

  keepAlive(lease: Lease): LeaseKeepAlive {
    return this.home.keepAlive(lease);
  }

  revokeLease(id: string): Promise<void> {
    return this.home.revokeLease(id);
  }

  remove(table: string, key: string): Promise<void> {
    return this.target(table, key).remove(table, key);
  }

  /** Creates a table through the home node. */
  createTable(name: string, options: TableOptions): Promise<TableDescriptor> {
    return this.home.createTable(name, options);
  }

  /** Drops a table through the home node. */
  dropTable(name: string): Promise<void> {
    return this.home.dropTable(name);
  }

  tables(): Promise<TableDescriptor[]> {
    return this.home.tables();
  }

  backup(options: BackupOptions): Promise<BackupSummary> {
    return backup(this, options);
  }

  restore(options: RestoreOptions): Promise<RestoreSummary> {
    return restore(this, options);
  }

  members(): Promise<MemberRecord[]> {
    return this.home.members();
  }

  removeNode(name: string, options?: { readonly dead?: boolean }): Promise<MemberRecord[]> {
    return this.home.removeNode(name, options);
  }

  primaries(table: string): Promise<(NodeName | null)[]> {
    return this.home.primaries(table);
  }

  get user(): string | undefined {
    return this.home.user;
  }

  createUser(name: string, options?: CreateUserOptions): Promise<UserInfo> {
    return this.home.createUser(name, options);
  }

  removeUser(name: string): Promise<UserInfo> {
    return this.home.removeUser(name);
  }

  setPassword(name: string, password: string | undefined): Promise<UserInfo> {
    return this.home.setPassword(name, password);
  }

  grant(name: string, role: UserRole | 'none', options?: { readonly table?: string }): Promise<UserInfo> {
    return this.home.grant(name, role, options);
  }

  users(): Promise<UserInfo[]> {
    return this.home.users();
  }

  protectTimestamp(ts: HybridTimestamp, options?: { readonly lifetimeMs?: number }): Promise<ProtectedTimestamp> {
    return this.home.protectTimestamp(ts, options);
  }

  renewProtectedTimestamp(id: string, options?: { readonly lifetimeMs?: number }): Promise<ProtectedTimestamp> {
    return this.home.renewProtectedTimestamp(id, options);
  }

  releaseProtectedTimestamp(id: string): Promise<void> {
    return this.home.releaseProtectedTimestamp(id);
  }

  async close(): Promise<void> {
    await Promise.all(this.clients.map((c) => c.close()));
  }

  private target(table: string, key: string): RemoteClient {
    const routes = this.routes.get(table);
    if (routes === undefined || this.now() - routes.fetchedAtMs >= ROUTES_MAX_AGE_MS) this.refresh(table, routes);
    if (routes === undefined || routes.primaries.length === 0) return this.home;
    const primary = routes.primaries[partitionIndexOf(key, routes.primaries.length)];
    const client = primary === null || primary === undefined ? undefined : this.byNode.get(primary);
    return client === undefined || client.closed ? this.home : client;
  }

  private refresh(table: string, previous: Routes | undefined): void {
    if (this.refreshing.has(table) || this.home.closed) return;
    this.refreshing.add(table);
    // The old routes stay in use meanwhile; a failed lookup (an unknown table, say) waits out a full age, not retried
    // by every call.
    this.remember(table, { primaries: previous?.primaries ?? [], fetchedAtMs: this.now() });
    this.home.primaries(table).then(
      (primaries) => {
        this.refreshing.delete(table);
        this.remember(table, { primaries, fetchedAtMs: this.now() });
      },
      () => this.refreshing.delete(table),
    );
  }

  private remember(table: string, routes: Routes): void {
    this.routes.delete(table);
    if (this.routes.size >= ROUTED_TABLES_MAX) this.routes.delete(this.routes.keys().next().value!);
    this.routes.set(table, routes);
  }
}
