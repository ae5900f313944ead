/**
 * `connect('host:port')`: a client over TCP to one node's client port (protocol in `protocol.ts`). The node it is
 * connected to coordinates its transactions; the API is the embedded `Client`'s (plus `close()`).
 *
 * Model: one socket, requests matched to responses by id, at most `clientPendingCallsMax` calls awaiting a response,
 * of which at most the server's `requestsInFlightMax` are on the wire (the rest wait here, in order).
 * Every call settles exactly once:
 *   - with the server's result, or its coded error rethrown as a BasaltError (same code, same `retryable`);
 *   - with TIMEOUT when no response came within the call's timeout;
 *   - with CONNECTION_CLOSED (retryable) when the connection ends first;
 *   except that a call that may have committed something (a commit, an implicit put/remove/putAll) fails
 *   TX_OUTCOME_UNKNOWN (not retryable) on a timeout or a lost connection: it may or may not have applied.
 * Arguments that cannot travel (not plain data, a frame above the limit) fail INVALID_ARGUMENT without being sent.
 * The server rolls back the open transactions of a connection that ends; there is no reconnect: after a loss, make a
 * new client with `connect`.
 *
 * With `ca` (a node started with `--certs-dir`), the connection is TLS 1.3: the server's certificate must be signed by
 * `ca` and name the host dialed (or `serverName`); `cert` and `key` present a client certificate.
 */
import { connect as netConnect, type Socket } from 'node:net';
import { checkServerIdentity, TLSSocket, connect as tlsConnect } from 'node:tls';
import {
  isProtectedTimestamp,
  type MemberRecord,
  type ProtectedTimestamp,
  type TableDescriptor,
  type TableOptions,
  type UserRole,
} from '../cluster/metastorage-state.js';
import { assert } from '../core/assert.js';
import { BasaltError, isBasaltError } from '../core/errors.js';
import { type HybridTimestamp, type NodeName, nodeName, type TxId, txId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { RealTimers } from '../env/real-timers.js';
import { sleep, type TimerHandle, type Timers } from '../env/timers.js';
import { decode } from '../net/codec.js';
import { encodeFrame, FrameDecoder } from '../net/frame.js';
import { parseHostPort } from '../net/tcp-transport.js';
import { commitOrRollBack, retryPolicy, withRetries } from '../tx/coordinator/retry.js';
import type { RunTransactionOptions } from '../tx/coordinator/transaction.js';
import type { DirectHandoff } from '../tx/core/direct.js';
import type { ChangeEntry } from '../tx/core/messages.js';
import { isTxId } from '../tx/core/tx-id.js';
import { checkReadOptions } from '../tx/core/user-input.js';
import { type BackupOptions, type BackupSummary, backup } from './backup.js';
import type { KeyValue, PutOptions, ReadOptions, ScanOptions, ScanRange, Transaction, Value } from './client.js';
import { DirectPlan, type DirectRoute } from './direct-plan.js';
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
import {
  type ClientRequest,
  clientHello,
  type HelloCredentials,
  isRecord,
  type PiggybackedBegin,
  parseResponse,
  parseServerHello,
  type RequestKind,
  type TxHandle,
  UNATTRIBUTED_REQUEST_ID,
} from './protocol.js';
import { type RestoreOptions, type RestoreSummary, restore } from './restore.js';
import {
  type ChangeReadPage,
  type ChangeReadRequest,
  type ChangeSource,
  type WatchOptions,
  type WatchStream,
  watchChanges,
} from './watch.js';
import { WriteBuffer, type WriteSink } from './write-buffer.js';

/** Options of {@link connect}. */
export interface ConnectOptions {
  /** Timeout of each call (default LIMITS.clientRequestTimeoutMsDefault). */
  readonly timeoutMs?: number;
  /** Connecting and the hello exchange together (default LIMITS.handshakeTimeoutMs). */
  readonly connectTimeoutMs?: number;
  /** Timers for timeouts and retry backoff (default: the event loop's). */
  readonly timers?: Timers;
  /** Largest frame sent or accepted (default 16 MiB). */
  readonly frameBytesMax?: number;
  /** Calls awaited at once; more fail OVERLOADED without being sent (default 100,000). */
  readonly pendingCallsMax?: number;
  /**
   * Read-write transactions keep their writes here until the commit, which carries them (default true): a transfer
   * is one round trip less to the node and one confirmation round less between the nodes. A write's error (a lock
   * conflict, an unknown table) is then reported by the commit, and the transaction rolled back. A read or scan in
   * the same transaction sends the writes kept so far first, so it reads them. False sends each write at once.
   */
  readonly bufferWrites?: boolean;
  /**
   * `transaction` begins its read-write attempts lazily (RemoteBeginOptions.lazy; default true): one round trip less
   * per transaction, and with `connectCluster` coordinated on the node of its first key's primary. False: each attempt
   * begins with a request of its own, on the home node.
   */
  readonly lazyBegin?: boolean;
  /** The cluster CA's certificate (PEM): connect over TLS and trust only servers it signed. */
  readonly ca?: string | Buffer;
  /** A client certificate (PEM) signed by the cluster CA, with `key`: its CN is the user it logs in as. */
  readonly cert?: string | Buffer;
  /** The private key (PEM) of `cert`. */
  readonly key?: string | Buffer;
  /**
   * The name the server's certificate must carry, when it is not the host dialed (e.g. the node's member name when
   * dialing it by an address its certificate does not list).
   */
  readonly serverName?: string;
  /** The user to log in as: with `password`, or without one by the client certificate (whose CN must match). */
  readonly user?: string;
  /** The password of `user` (sent inside TLS only; a node without certificates checks no users). */
  readonly password?: string;
}

/** A user as the server lists it (no password hash travels). */
export interface UserInfo {
  readonly name: string;
  readonly role?: UserRole;
  /** Roles on single tables: [table, role]. */
  readonly tables?: readonly (readonly [string, 'readwrite' | 'readonly'])[];
  /** Whether the user may log in with a password (else by client certificate only). */
  readonly password: boolean;
}

/** A new user's password and role (`createUser`). */
export interface CreateUserOptions {
  /** Absent: the user logs in by client certificate only. */
  readonly password?: string;
  /** The cluster-wide role (`admin`, `readwrite` or `readonly`); absent: none until granted. */
  readonly role?: UserRole;
}

/** Options of a remote `begin` (as {@link BeginOptions}). */
export interface RemoteBeginOptions {
  /** A lock-free read-only transaction reading a snapshot at its read timestamp. */
  readonly readOnly?: boolean;
  /** Read-only: read at this timestamp. */
  readonly readTimestamp?: HybridTimestamp;
  /** Read-only: read at now − stalenessMs (any replica may serve). */
  readonly stalenessMs?: number;
  /** Read-write: the transaction's own timeout, up to the cluster's maximum (default 30 s). */
  readonly timeoutMs?: number;
  /**
   * Read-write: the id of an earlier attempt, on this node, that this transaction retries: it keeps that attempt's
   * age for wait-die (`transaction` passes it on each retry).
   */
  readonly retryOf?: TxId;
  /**
   * Read-write: begin with the first operation instead of a round trip of its own (default false for `begin`; the
   * default of `transaction` is ConnectOptions.lazyBegin). The begin rides on the first get, getAll, or on a commit
   * carrying all the writes, and with `connectCluster` the transaction begins on the node of the first key's primary,
   * which then coordinates it: its reads and writes there need no hop between nodes, and the commit partition is
   * local. `id` is known once the first operation reached the node (TX_NOT_BEGUN before); a transaction that made no
   * request and kept no writes never begins at all.
   */
  readonly lazy?: boolean;
}

/** Options of a remote `transaction` (as {@link TransactionOptions}). */
export interface RemoteTransactionOptions extends RemoteBeginOptions, RunTransactionOptions {}

/** A transaction of a remote client. */
export interface RemoteTransaction extends Transaction {
  /** Read-only transactions: the timestamp they read at. */
  readonly readTimestamp: HybridTimestamp | undefined;
}

/** A `Client` over TCP. */
export interface RemoteClient {
  /** The node the server runs on: it coordinates this client's transactions. */
  readonly node: NodeName;
  /** 'host:port' this client is connected to. */
  readonly address: string;
  /** True once the connection ended (`close()`, or lost). */
  readonly closed: boolean;
  /** Begins a transaction (as {@link Client.begin}). */
  begin(options?: RemoteBeginOptions): Promise<RemoteTransaction>;
  /** Runs `fn` in a transaction and commits; retries retryable failures in a fresh transaction. */
  transaction<T>(fn: (tx: RemoteTransaction) => Promise<T>, options?: RemoteTransactionOptions): Promise<T>;
  /** Implicit read (as {@link Client.get}). */
  get(table: string, key: string): Promise<Value | undefined>;
  /** An implicit write; `{ ttlMs }`, `{ expiresAt }` or `{ lease }` make it expire (docs/concepts/expiry.md). */
  put(table: string, key: string, value: Value, options?: PutOptions): Promise<void>;
  /** Implicit one-phase removal (as {@link Client.remove}). */
  remove(table: string, key: string): Promise<void>;
  /** Grants a lease of `ttlMs`; keys put with `{ lease: id }` vanish together when it ends. */
  grantLease(ttlMs: number): Promise<Lease>;
  /** Extends lease `id` once (LEASE_NOT_FOUND if it already ended). */
  keepAliveOnce(id: string): Promise<Lease>;
  /** Keeps `lease` alive every third of its ttl until closed; `done` rejects (LEASE_NOT_FOUND) when it is lost. */
  keepAlive(lease: Lease): LeaseKeepAlive;
  /** Ends lease `id` now, removing its keys in one transaction. */
  revokeLease(id: string): Promise<void>;
  /** Creates a table (as {@link Client.createTable}). */
  createTable(name: string, options: TableOptions): Promise<TableDescriptor>;
  /** Drops a table (as {@link Client.dropTable}). */
  dropTable(name: string): Promise<void>;
  /** Unlike the embedded client's, a Promise: the list is the server's. */
  tables(): Promise<TableDescriptor[]>;
  /** The cluster's members (name, address, active or leaving), as the server's node knows them. */
  members(): Promise<MemberRecord[]>;
  /**
   * Removes a member: gracefully (its replicas move to the others first), or `dead` (it is gone for good: its
   * replicas are rebuilt from the survivors). Resolves once the removal is recorded; the moves follow.
   */
  removeNode(name: string, options?: { readonly dead?: boolean }): Promise<MemberRecord[]>;
  /** The primary of each partition of `table` by index, as the server's node knows it (null: none known). */
  primaries(table: string): Promise<(NodeName | null)[]>;
  /** A backup of the cluster's tables at one timestamp, as `Client.backup` (client/backup.ts). */
  backup(options: BackupOptions): Promise<BackupSummary>;
  /** A restore of a backup chain into empty or new tables, as `Client.restore` (client/restore.ts). */
  restore(options: RestoreOptions): Promise<RestoreSummary>;
  /**
   * The change stream of `table` (client/watch.ts), read over this connection. When the connection is lost it
   * reconnects by itself, to `connect`'s addresses in turn (default: this client's address), and resumes where it
   * stood: no gap, no duplicate. Connections it opened close when the stream ends.
   */
  watch(table: string, options?: RemoteWatchOptions): WatchStream;
  /** One page of one partition's changes in a window (the protocol's `changes`; what `watch` is built from). */
  readChanges(request: ChangeReadRequest): Promise<ChangeReadPage>;
  /** The user this connection is logged in as (undefined on a node that does not check users, or without login). */
  readonly user: string | undefined;
  /** Users (admin): adds one; ALREADY_EXISTS if the name is taken. */
  createUser(name: string, options?: CreateUserOptions): Promise<UserInfo>;
  removeUser(name: string): Promise<UserInfo>;
  /** A user's new password (its own, or any user's for an admin); undefined: client certificate only. */
  setPassword(name: string, password: string | undefined): Promise<UserInfo>;
  /** Sets a user's cluster-wide role, or with `table` its role on that table; `none` takes it away. */
  grant(name: string, role: UserRole | 'none', options?: { readonly table?: string }): Promise<UserInfo>;
  users(): Promise<UserInfo[]>;
  /**
   * Protects `ts` from the storage GC of every node for `lifetimeMs` (default 2 minutes, at most 10): reads at `ts`
   * keep finding their history until it lapses or is released. Needs a cluster-wide admin or readwrite role;
   * INVALID_ARGUMENT when the cluster holds its maximum (64).
   */
  protectTimestamp(ts: HybridTimestamp, options?: { readonly lifetimeMs?: number }): Promise<ProtectedTimestamp>;
  /** Moves a protected timestamp's expiry to `lifetimeMs` from now; NOT_FOUND once it lapsed or was released. */
  renewProtectedTimestamp(id: string, options?: { readonly lifetimeMs?: number }): Promise<ProtectedTimestamp>;
  /** Releases a protected timestamp (one that lapsed already: nothing to do). */
  releaseProtectedTimestamp(id: string): Promise<void>;
  /** Ends the connection; the server rolls back the transactions still open on it. */
  close(): Promise<void>;
}

/** A watch over TCP: WatchOptions, plus the addresses it may reconnect to. */
export interface RemoteWatchOptions extends WatchOptions {
  /** Addresses `host:port` to reconnect to, in turn, after the connection is lost (default: this client's). */
  readonly connect?: readonly string[];
}

/** Connects to a node's client port, e.g. `connect('127.0.0.1:10800')`. */
export async function connect(address: string, options: ConnectOptions = {}): Promise<RemoteClient> {
  const { host, port } = parseHostPort(address);
  const timers = options.timers ?? new RealTimers(true);
  if (options.password !== undefined && options.user === undefined) {
    throw new BasaltError('INVALID_ARGUMENT', 'a password needs a user');
  }
  const connection = new RemoteConnection(dial(host, port, options), timers, {
    credentials: {
      ...(options.user !== undefined && { user: options.user }),
      ...(options.password !== undefined && { password: options.password }),
    },
    timeoutMs: options.timeoutMs ?? LIMITS.clientRequestTimeoutMsDefault,
    connectTimeoutMs: options.connectTimeoutMs ?? LIMITS.handshakeTimeoutMs,
    frameBytesMax: options.frameBytesMax ?? LIMITS.frameBytesMax,
    pendingCallsMax: options.pendingCallsMax ?? LIMITS.clientPendingCallsMax,
  });
  const opened = await connection.opened;
  return new TcpClient(connection, nodeName(opened.node), address, timers, options, opened.user);
}

const TLS_VERSION = 'TLSv1.3';

/** Plain TCP, or TLS 1.3 when the options carry TLS material. */
function dial(host: string, port: number, options: ConnectOptions): Socket {
  const { ca, cert, key, serverName } = options;
  if (ca === undefined && cert === undefined && key === undefined) return netConnect({ host, port });
  if (ca === undefined) {
    throw new BasaltError('INVALID_ARGUMENT', 'a TLS connection needs the cluster CA (ca) to check the server');
  }
  if ((cert === undefined) !== (key === undefined)) {
    throw new BasaltError('INVALID_ARGUMENT', 'a client certificate needs its key (cert and key go together)');
  }
  return tlsConnect({
    host,
    port,
    ca,
    ...(cert !== undefined && key !== undefined && { cert, key }),
    minVersion: TLS_VERSION,
    maxVersion: TLS_VERSION,
    rejectUnauthorized: true,
    ...(serverName !== undefined && {
      checkServerIdentity: (_host: string, peer: Parameters<typeof checkServerIdentity>[1]) =>
        checkServerIdentity(serverName, peer),
    }),
  });
}

/** What a lost response means for the caller: nothing happened for sure, or something may have been applied. */
type OnLoss = 'closed' | 'unknown';

interface ConnectionLimits {
  readonly credentials: HelloCredentials;
  readonly timeoutMs: number;
  readonly connectTimeoutMs: number;
  readonly frameBytesMax: number;
  readonly pendingCallsMax: number;
}

interface PendingCall {
  readonly kind: RequestKind;
  readonly onLoss: OnLoss;
  /** The encoded request while it waits for a window slot; undefined once written. */
  unsent: Buffer | undefined;
  readonly resolve: (result: unknown) => void;
  readonly reject: (error: BasaltError) => void;
  readonly timer: TimerHandle;
}

/** Distributes a request type over its union members, so that `Omit` keeps each kind's own fields. */
type WithoutId<R> = R extends ClientRequest ? Omit<R, 'id'> : never;

/**
 * The socket, the hello and the table of pending calls. Invariants (asserted where they change): request ids are
 * positive and never reused on the connection; `pending.size <= pendingCallsMax`; at most `window` (the server's
 * requestsInFlightMax) of them are written and unanswered, the others wait in `unsent`, in call order.
 */
export class RemoteConnection {
  readonly opened: Promise<{ readonly node: string; readonly user: string | undefined }>;
  private window: number = LIMITS.clientRequestsInFlightMax;
  private written = 0;
  private readonly unsent: number[] = [];
  private flushScheduled = false;
  private state: 'connecting' | 'open' | 'closed' = 'connecting';
  private readonly decoder: FrameDecoder;
  private readonly pending = new Map<number, PendingCall>();
  private nextId = 1;
  private closeReason: BasaltError | undefined;
  private settleOpen: ((opened: { readonly node: string; readonly user: string | undefined }) => void) | undefined;
  private failOpen: ((error: BasaltError) => void) | undefined;
  private openTimer: TimerHandle | undefined;
  private readonly socketClosed: Promise<void>;

  constructor(
    private readonly socket: Socket,
    private readonly timers: Timers,
    private readonly limits: ConnectionLimits,
  ) {
    this.decoder = new FrameDecoder(limits.frameBytesMax);
    this.opened = new Promise((resolve, reject) => {
      this.settleOpen = resolve;
      this.failOpen = reject;
    });
    this.socketClosed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    this.openTimer = timers.setTimer(() => {
      this.fail(new BasaltError('TIMEOUT', `no connection and hello within ${limits.connectTimeoutMs} ms`));
    }, limits.connectTimeoutMs);
    socket.setNoDelay(true);
    socket.on(socket instanceof TLSSocket ? 'secureConnect' : 'connect', () =>
      this.write(clientHello(limits.credentials)),
    );
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('error', (error: Error) => this.fail(new BasaltError('CONNECTION_CLOSED', error.message)));
    socket.on('close', () => this.fail(new BasaltError('CONNECTION_CLOSED', 'the server closed the connection')));
  }

  get isClosed(): boolean {
    return this.state === 'closed';
  }

  /** Sends one request and settles with its result (see the module comment for failures). */
  call(request: WithoutId<ClientRequest>, onLoss: OnLoss = 'closed'): Promise<unknown> {
    // Not sent, so nothing was applied: a plain CONNECTION_CLOSED whatever the call.
    if (this.state !== 'open') return Promise.reject(this.lostError('closed', request.kind));
    if (this.pending.size >= this.limits.pendingCallsMax) {
      return Promise.reject(
        new BasaltError('OVERLOADED', `more than ${this.limits.pendingCallsMax} calls pending on this client`),
      );
    }
    const id = this.nextId++;
    let frame: readonly [Buffer, Buffer];
    try {
      frame = encodeFrame({ ...request, id }, this.limits.frameBytesMax);
    } catch (error) {
      const message = isBasaltError(error) ? error.message : String(error);
      return Promise.reject(
        new BasaltError('INVALID_ARGUMENT', `${request.kind}: the request cannot be sent: ${message}`),
      );
    }
    return new Promise<unknown>((resolve, reject) => {
      const timer = this.timers.setTimer(() => this.timeOut(id), this.limits.timeoutMs);
      assert(id > UNATTRIBUTED_REQUEST_ID && !this.pending.has(id), 'a request id is used once', id);
      this.pending.set(id, { kind: request.kind, onLoss, unsent: Buffer.concat(frame), resolve, reject, timer });
      assert(this.pending.size <= this.limits.pendingCallsMax, 'at most pendingCallsMax calls pending');
      this.unsent.push(id);
      this.scheduleFlush();
    });
  }

  /**
   * The calls made in one turn of work go out in one socket write: flushed from a microtask, so a lone call waits
   * for nothing else.
   */
  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    queueMicrotask(this.flushNow);
  }

  private readonly flushNow = (): void => {
    this.flushScheduled = false;
    this.flush();
  };

  /** Writes waiting requests while the window has room, in one socket write. */
  private flush(): void {
    const batch: Buffer[] = [];
    try {
      this.fillWindow(batch);
    } finally {
      if (batch.length > 0 && this.state === 'open')
        this.socket.write(batch.length === 1 ? batch[0]! : Buffer.concat(batch));
    }
  }

  private fillWindow(batch: Buffer[]): void {
    while (this.written < this.window && this.state === 'open') {
      const id = this.unsent.shift();
      if (id === undefined) return;
      const call = this.pending.get(id);
      if (call?.unsent === undefined) continue; // timed out while waiting
      batch.push(call.unsent);
      call.unsent = undefined;
      this.written++;
      assert(
        this.written <= this.window,
        "at most the server's requestsInFlightMax requests on the wire",
        this.written,
      );
    }
  }

  /** A written call got its answer or gave up on it: its window slot is free again. */
  private release(call: PendingCall): void {
    if (call.unsent !== undefined) return;
    assert(this.written > 0, 'a written call holds a window slot');
    this.written--;
    this.flush();
  }

  /** Ends the connection; pending calls fail as on a lost connection. */
  close(): Promise<void> {
    this.fail(new BasaltError('CONNECTION_CLOSED', 'the client closed the connection'));
    return this.socketClosed;
  }

  private timeOut(id: number): void {
    const call = this.pending.get(id);
    if (call === undefined) return;
    this.pending.delete(id);
    const message = `no response to ${call.kind} within ${this.limits.timeoutMs} ms`;
    // A call still waiting for the window was never sent: nothing of it can have applied.
    const mayHaveApplied = call.onLoss === 'unknown' && call.unsent === undefined;
    this.release(call);
    call.reject(
      mayHaveApplied
        ? new BasaltError('TX_OUTCOME_UNKNOWN', `${message}: it may or may not have applied`)
        : new BasaltError('TIMEOUT', message),
    );
  }

  private onData(chunk: Buffer): void {
    const output = this.decoder.push(chunk);
    for (const frame of output.frames) {
      if (this.state === 'closed') return;
      this.onFrame(frame);
    }
    if (!output.ok) {
      this.fail(new BasaltError('FRAME_TOO_LARGE', `the server sent a frame of ${output.frameBytes} bytes`));
    }
  }

  private onFrame(frame: Buffer): void {
    let payload: unknown;
    try {
      payload = decode(frame);
    } catch (error) {
      this.fail(new BasaltError('MALFORMED_FRAME', `from the server: ${String(error)}`));
      return;
    }
    if (this.state === 'connecting') this.onHello(payload);
    else this.onResponse(payload);
  }

  private onHello(payload: unknown): void {
    const hello = parseServerHello(payload);
    if (!hello.ok) {
      this.fail(hello.error);
      return;
    }
    this.clearOpenTimer();
    this.state = 'open';
    this.window = hello.requestsInFlightMax;
    this.settleOpen?.({ node: hello.node, user: hello.user });
  }

  private onResponse(payload: unknown): void {
    const response = parseResponse(payload);
    if (!response.ok) {
      this.fail(new BasaltError('MALFORMED_FRAME', `from the server: ${response.problem}`));
      return;
    }
    const call = this.pending.get(response.id);
    if (call === undefined) {
      // id 0: the server refused something we sent and is closing; anything else answers a call that timed out.
      if ('error' in response && response.id === 0) this.fail(response.error);
      return;
    }
    this.pending.delete(response.id);
    this.timers.clearTimer(call.timer);
    this.release(call);
    if ('error' in response) call.reject(response.error);
    else call.resolve(response.result);
  }

  private write(payload: unknown): void {
    this.socket.write(Buffer.concat(encodeFrame(payload, this.limits.frameBytesMax)));
  }

  /** Ends the connection for `reason`: the open fails with it, pending calls fail as lost. Idempotent. */
  private fail(reason: BasaltError): void {
    if (this.state === 'closed') return;
    const wasConnecting = this.state === 'connecting';
    this.state = 'closed';
    this.closeReason = reason;
    this.clearOpenTimer();
    this.socket.destroy();
    if (wasConnecting) this.failOpen?.(reason);
    const calls = [...this.pending.values()];
    this.pending.clear();
    this.unsent.length = 0;
    for (const call of calls) {
      this.timers.clearTimer(call.timer);
      call.reject(this.lostError(call.unsent === undefined ? call.onLoss : 'closed', call.kind));
    }
  }

  private lostError(onLoss: OnLoss, kind: RequestKind): BasaltError {
    const why = this.closeReason?.message ?? 'the connection is not open';
    return onLoss === 'unknown'
      ? new BasaltError('TX_OUTCOME_UNKNOWN', `connection lost during ${kind} (${why}): it may or may not have applied`)
      : new BasaltError('CONNECTION_CLOSED', `${kind}: ${why}`);
  }

  private clearOpenTimer(): void {
    if (this.openTimer === undefined) return;
    this.timers.clearTimer(this.openTimer);
    this.openTimer = undefined;
  }
}

class TcpClient implements RemoteClient {
  constructor(
    private readonly connection: RemoteConnection,
    readonly node: NodeName,
    readonly address: string,
    private readonly timers: Timers,
    private readonly options: ConnectOptions,
    readonly user: string | undefined,
  ) {}

  get closed(): boolean {
    return this.connection.isClosed;
  }

  watch(table: string, options: RemoteWatchOptions = {}): WatchStream {
    const { connect: addresses, ...watchOptions } = options;
    if (addresses !== undefined && (!Array.isArray(addresses) || addresses.length === 0)) {
      throw new BasaltError('INVALID_ARGUMENT', 'connect lists at least one address');
    }
    // The default timers are unref'd; a watch pausing before it reconnects must keep its process alive.
    const timers = this.options.timers ?? new RealTimers();
    const source = new ReconnectingSource(this, addresses ?? [this.address], { ...this.options, timers });
    return closingAfter(watchChanges(source, table, watchOptions), () => source.close());
  }

  async readChanges(request: ChangeReadRequest): Promise<ChangeReadPage> {
    const { table, partition, range, fromTs, toTs, limit } = request;
    const result = await this.connection.call({
      kind: 'changes',
      table,
      partition,
      range: range as Readonly<Record<string, string>>,
      ...(fromTs !== undefined && { fromTs }),
      ...(toTs !== undefined && { toTs }),
      ...(limit !== undefined && { limit }),
    });
    return changePageOf(result);
  }

  begin(options: RemoteBeginOptions = {}): Promise<RemoteTransaction> {
    return this.beginRouted(options, () => this.connection);
  }

  /** As `begin`; a lazy transaction begins on the connection `route` chooses for its first key. */
  async beginRouted(options: RemoteBeginOptions, route: BeginRoute, direct?: DirectRoute): Promise<RemoteTransaction> {
    const bufferWrites = this.options.bufferWrites ?? true;
    if (isLazy(options)) {
      const begin = {
        ...(options.timeoutMs !== undefined && { timeoutMs: options.timeoutMs }),
        ...(options.retryOf !== undefined && { retryOf: options.retryOf }),
      };
      return new TcpTransaction({ route, begin, direct }, false, undefined, bufferWrites);
    }
    const result = await this.connection.call({ kind: 'begin', ...beginOptionsOf(options) });
    if (!isRecord(result) || typeof result['tx'] !== 'number' || typeof result['txId'] !== 'string') {
      throw new BasaltError('MALFORMED_FRAME', 'the server answered begin without a transaction');
    }
    const readTimestamp = typeof result['readTimestamp'] === 'bigint' ? result['readTimestamp'] : undefined;
    return new TcpTransaction(
      { connection: this.connection, handle: result['tx'], id: txId(result['txId']) },
      result['readOnly'] === true,
      readTimestamp as HybridTimestamp | undefined,
      bufferWrites && result['readOnly'] !== true,
    );
  }

  transaction<T>(fn: (tx: RemoteTransaction) => Promise<T>, options: RemoteTransactionOptions = {}): Promise<T> {
    return this.transactionRouted(fn, options, () => this.connection);
  }

  /** As `transaction`; each lazy attempt begins on the connection `route` chooses for its first key. */
  transactionRouted<T>(
    fn: (tx: RemoteTransaction) => Promise<T>,
    options: RemoteTransactionOptions,
    route: BeginRoute,
    direct?: DirectRoute,
  ): Promise<T> {
    // A read-write retry keeps the age of the attempt before it (RemoteBeginOptions.retryOf).
    let previous = options.retryOf;
    const lazy = options.readOnly !== true && (options.lazy ?? this.options.lazyBegin ?? true);
    return withRetries(
      retryPolicy(options),
      (delayMs) => sleep(this.timers, delayMs),
      async () => {
        const retryOf = options.readOnly === true || previous === undefined ? {} : { retryOf: previous };
        const begin = { ...beginOptionsOf(options), ...retryOf, lazy };
        const tx = (await this.beginRouted(begin, route, direct)) as TcpTransaction;
        try {
          return await commitOrRollBack(tx, fn);
        } finally {
          // An attempt that never began leaves the age of the one before it.
          if (!tx.readOnly) previous = tx.begunId ?? previous;
        }
      },
      // A lost connection does not come back: retrying on it could only fail the same way.
      () => !this.connection.isClosed,
    );
  }

  /** The connection of this client (the one a lazy transaction routed here begins on). */
  get wire(): RemoteConnection {
    return this.connection;
  }

  async get(table: string, key: string): Promise<Value | undefined> {
    return readValue(await this.connection.call({ kind: 'get', table, key }));
  }

  async put(table: string, key: string, value: Value, options?: PutOptions): Promise<void> {
    const lease = leaseOption(options);
    if (lease !== undefined) return this.transaction((tx) => tx.put(table, key, value, { lease }));
    await this.connection.call({ kind: 'put', table, key, value, ...putOptionsOf(options) }, 'unknown');
  }

  grantLease(ttlMs: number): Promise<Lease> {
    return grantLease(this, ttlMs);
  }

  keepAliveOnce(id: string): Promise<Lease> {
    return keepLeaseAlive(this, id);
  }

  keepAlive(lease: Lease): LeaseKeepAlive {
    return startKeepAlive(this, lease, (ms, signal) => sleep(this.timers, ms, signal));
  }

  revokeLease(id: string): Promise<void> {
    return revokeLease(this, id);
  }

  async remove(table: string, key: string): Promise<void> {
    await this.connection.call({ kind: 'remove', table, key }, 'unknown');
  }

  async createTable(name: string, options: TableOptions): Promise<TableDescriptor> {
    const result = await this.connection.call({ kind: 'createTable', name, options: tableOptionsOf(options) });
    if (!isRecord(result) || !isTable(result['table'])) {
      throw new BasaltError('MALFORMED_FRAME', 'the server answered createTable without a table');
    }
    return result['table'];
  }

  async dropTable(name: string): Promise<void> {
    await this.connection.call({ kind: 'dropTable', name });
  }

  backup(options: BackupOptions): Promise<BackupSummary> {
    return backup(this, options);
  }

  restore(options: RestoreOptions): Promise<RestoreSummary> {
    return restore(this, options);
  }

  async tables(): Promise<TableDescriptor[]> {
    const result = await this.connection.call({ kind: 'tables' });
    const tables = isRecord(result) ? result['tables'] : undefined;
    if (!Array.isArray(tables) || !tables.every(isTable)) {
      throw new BasaltError('MALFORMED_FRAME', 'the server answered tables without a list of tables');
    }
    return tables;
  }

  async members(): Promise<MemberRecord[]> {
    return membersOf(await this.connection.call({ kind: 'members' }));
  }

  async removeNode(name: string, options: { readonly dead?: boolean } = {}): Promise<MemberRecord[]> {
    return membersOf(await this.connection.call({ kind: 'removeNode', name, dead: options.dead === true }));
  }

  async primaries(table: string): Promise<(NodeName | null)[]> {
    const result = await this.connection.call({ kind: 'primaries', table });
    const primaries = isRecord(result) ? result['primaries'] : undefined;
    if (!Array.isArray(primaries) || !primaries.every((p) => p === null || typeof p === 'string')) {
      throw new BasaltError('MALFORMED_FRAME', 'the server answered primaries without a list of node names');
    }
    return primaries.map((p: string | null) => (p === null ? null : nodeName(p)));
  }

  async createUser(name: string, options: CreateUserOptions = {}): Promise<UserInfo> {
    const { password, role } = options;
    const request = {
      kind: 'createUser',
      name,
      ...(password !== undefined && { password }),
      ...(role !== undefined && { role }),
    } as const;
    return userOf(await this.connection.call(request));
  }

  async removeUser(name: string): Promise<UserInfo> {
    return userOf(await this.connection.call({ kind: 'removeUser', name }));
  }

  async setPassword(name: string, password: string | undefined): Promise<UserInfo> {
    return userOf(
      await this.connection.call({ kind: 'setPassword', name, ...(password !== undefined && { password }) }),
    );
  }

  async grant(name: string, role: UserRole | 'none', options: { readonly table?: string } = {}): Promise<UserInfo> {
    const table = options.table;
    return userOf(await this.connection.call({ kind: 'grant', name, role, ...(table !== undefined && { table }) }));
  }

  async users(): Promise<UserInfo[]> {
    const result = await this.connection.call({ kind: 'users' });
    const users = isRecord(result) ? result['users'] : undefined;
    if (!Array.isArray(users) || !users.every(isUserInfo)) {
      throw new BasaltError('MALFORMED_FRAME', 'the server answered users without a list of users');
    }
    return users;
  }

  async protectTimestamp(
    ts: HybridTimestamp,
    options: { readonly lifetimeMs?: number } = {},
  ): Promise<ProtectedTimestamp> {
    const lifetimeMs = options.lifetimeMs;
    return protectedOf(
      await this.connection.call({ kind: 'protect', ts, ...(lifetimeMs !== undefined && { lifetimeMs }) }),
    );
  }

  async renewProtectedTimestamp(
    id: string,
    options: { readonly lifetimeMs?: number } = {},
  ): Promise<ProtectedTimestamp> {
    const lifetimeMs = options.lifetimeMs;
    return protectedOf(
      await this.connection.call({ kind: 'renew', protection: id, ...(lifetimeMs !== undefined && { lifetimeMs }) }),
    );
  }

  async releaseProtectedTimestamp(id: string): Promise<void> {
    await this.connection.call({ kind: 'release', protection: id });
  }

  close(): Promise<void> {
    return this.connection.close();
  }
}

/**
 * A watch's source over TCP: the client's own connection first; once a connection is lost, a new one to the next
 * address (a failed connect is a retryable error, so the watch backs off and tries the next). Owns what it opened.
 */
class ReconnectingSource implements ChangeSource {
  private active: RemoteClient;
  private owned: RemoteClient | undefined;
  private next = 0;

  constructor(
    first: RemoteClient,
    private readonly addresses: readonly string[],
    private readonly options: ConnectOptions & { readonly timers: Timers },
  ) {
    this.active = first;
  }

  async readChanges(request: ChangeReadRequest): Promise<ChangeReadPage> {
    if (this.active.closed) await this.reconnect();
    return this.active.readChanges(request);
  }

  sleep(ms: number): Promise<void> {
    return sleep(this.options.timers, ms);
  }

  private async reconnect(): Promise<void> {
    await this.close();
    const address = this.addresses[this.next % this.addresses.length]!;
    this.next += 1;
    try {
      this.owned = await connect(address, this.options);
    } catch (error) {
      const e = isBasaltError(error) ? error : undefined;
      throw new BasaltError('CONNECTION_CLOSED', `cannot reconnect to ${address}: ${e?.message ?? String(error)}`);
    }
    this.active = this.owned;
  }

  async close(): Promise<void> {
    const owned = this.owned;
    this.owned = undefined;
    await owned?.close().catch(() => {});
  }
}

/** `stream`, then `cleanup` however it ends (exhausted, failed, or `return()`ed by the consumer). */
async function* closingAfter(stream: WatchStream, cleanup: () => Promise<void>): WatchStream {
  try {
    yield* stream;
  } finally {
    await cleanup();
  }
}

/** A `changes` result checked as it arrives. */
function changePageOf(result: unknown): ChangeReadPage {
  const malformed = () => new BasaltError('MALFORMED_FRAME', 'the server answered changes without a page');
  if (!isRecord(result)) throw malformed();
  const { toTs, partitions, changes, nextKey } = result;
  if (typeof toTs !== 'bigint' || !Number.isSafeInteger(partitions) || !Array.isArray(changes)) throw malformed();
  if (nextKey !== undefined && typeof nextKey !== 'string') throw malformed();
  const entries = changes.map((c: unknown): ChangeEntry => {
    if (!isRecord(c) || typeof c['key'] !== 'string' || typeof c['commitTs'] !== 'bigint') throw malformed();
    const { key } = c;
    const commitTs = c['commitTs'] as HybridTimestamp;
    if (c['deleted'] === true) return { key, commitTs, deleted: true };
    if (c['deleted'] !== false || !('value' in c)) throw malformed();
    return { key, commitTs, deleted: false, value: c['value'] as Value };
  });
  return {
    toTs: toTs as HybridTimestamp,
    partitions: partitions as number,
    changes: entries,
    ...(nextKey !== undefined && { nextKey }),
  };
}

function userOf(result: unknown): UserInfo {
  const user = isRecord(result) ? result['user'] : undefined;
  if (!isUserInfo(user)) throw new BasaltError('MALFORMED_FRAME', 'the server answered without a user');
  return user;
}

function protectedOf(result: unknown): ProtectedTimestamp {
  const record = isRecord(result) ? result['protected'] : undefined;
  if (!isProtectedTimestamp(record)) {
    throw new BasaltError('MALFORMED_FRAME', 'the server answered without a protected timestamp');
  }
  return record;
}

function isUserInfo(value: unknown): value is UserInfo {
  return isRecord(value) && typeof value['name'] === 'string' && typeof value['password'] === 'boolean';
}

function membersOf(result: unknown): MemberRecord[] {
  const members = isRecord(result) ? result['members'] : undefined;
  const valid = (m: unknown): m is MemberRecord =>
    isRecord(m) && typeof m['name'] === 'string' && (m['state'] === 'active' || m['state'] === 'leaving');
  if (!Array.isArray(members) || !members.every(valid)) {
    throw new BasaltError('MALFORMED_FRAME', 'the server answered without a list of members');
  }
  return members;
}

/** A begun transaction: its connection, its handle there and its id. */
interface Begun {
  readonly connection: RemoteConnection;
  readonly handle: TxHandle;
  readonly id: TxId;
}

/**
 * The connection a transaction that has not begun yet begins on, chosen by its first operation's key (none: a scan's
 * or a begin's own; the chooser then takes the client's home).
 */
export type BeginRoute = (table: string | undefined, key: string | undefined) => RemoteConnection;

/** A read-write transaction that begins with its first operation (`RemoteBeginOptions.lazy`). */
interface LazyStart {
  readonly route: BeginRoute;
  readonly begin: PiggybackedBegin;
  /** Where its single-key operations may go straight to their primaries (direct-plan.ts); absent: never. */
  readonly direct: DirectRoute | undefined;
}

/**
 * A transaction of a TCP client: begun already (`begin` answered its handle), or lazy, begun by its first request on
 * the connection its key chooses, the begin riding on a `get`, `getAll` or a `commit` carrying all its writes
 * (protocol.ts PiggybackedBegin), or sent ahead of any other first request. Requests wait for a begin under way, so
 * that a transaction begins once.
 */
class TcpTransaction implements RemoteTransaction {
  /** Set once commit or rollback was sent: a later rollback is a local no-op. */
  private finishing = false;
  /** Writes kept for the commit (ConnectOptions.bufferWrites); undefined: each write is sent at once. */
  private readonly buffer: WriteBuffer | undefined;
  private begun: Begun | undefined;
  private readonly lazy: LazyStart | undefined;
  /** The first request of a lazy transaction, while it is under way; it never rejects. */
  private beginning: Promise<void> | undefined;
  /** Direct mapping (direct-plan.ts), for a lazy transaction of a client routing by key that asked for it. */
  private readonly plan: DirectPlan | undefined;

  constructor(
    start: Begun | LazyStart,
    readonly readOnly: boolean,
    readonly readTimestamp: HybridTimestamp | undefined,
    bufferWrites: boolean,
  ) {
    if ('handle' in start) this.begun = start;
    else this.lazy = start;
    this.plan = 'handle' in start || start.direct === undefined ? undefined : new DirectPlan(start.direct);
    this.buffer = bufferWrites ? new WriteBuffer(() => this.begun?.id ?? 'not begun yet', this.sink()) : undefined;
  }

  get id(): TxId {
    if (this.begun === undefined) {
      throw new BasaltError(
        'TX_NOT_BEGUN',
        'this transaction begins with its first operation on its node; its id is known from then on',
      );
    }
    return this.begun.id;
  }

  /** The id once the transaction began; undefined for a lazy one that has not. */
  get begunId(): TxId | undefined {
    return this.begun?.id;
  }

  async get(table: string, key: string, options?: ReadOptions): Promise<Value | undefined> {
    const read = readOptionsOf(options);
    await this.buffer?.flush();
    const direct = await this.plan?.send({ kind: 'get', table, key, ...read });
    if (direct !== undefined) return readValue(direct);
    const result = await this.first(
      table,
      key,
      (b) => b.connection.call({ kind: 'get', tx: b.handle, table, key, ...read }),
      (connection, begin) => connection.call({ kind: 'get', begin, table, key, ...read }),
    );
    return readValue(result);
  }

  async getAll(table: string, keys: readonly string[], options?: ReadOptions): Promise<(Value | undefined)[]> {
    const read = readOptionsOf(options);
    await this.buffer?.flush();
    const handoff = await this.handoffBefore(table, keys);
    const result = await this.first(
      table,
      keys[0],
      (b) => b.connection.call({ kind: 'getAll', tx: b.handle, table, keys, ...read, ...handoff }),
      (connection, begin) => connection.call({ kind: 'getAll', begin, table, keys, ...read }),
    );
    const values = isRecord(result) ? result['values'] : undefined;
    if (!Array.isArray(values)) throw new BasaltError('MALFORMED_FRAME', 'the server answered getAll without values');
    return values as (Value | undefined)[];
  }

  async put(table: string, key: string, value: Value, options?: PutOptions): Promise<void> {
    const lease = leaseOption(options);
    if (lease !== undefined) {
      await this.buffer?.flush();
      return putWithLease(this, lease, table, key, value);
    }
    // A write that expires is sent at once: the commit carries plain writes only.
    if (this.buffer !== undefined && options === undefined) return this.buffer.put(table, key, value);
    await this.buffer?.flush();
    const wire = putOptionsOf(options);
    if ((await this.plan?.send({ kind: 'put', table, key, value, ...wire })) !== undefined) return;
    const b = await this.ensureBegun(table, key);
    await b.connection.call({ kind: 'put', tx: b.handle, table, key, value, ...wire });
  }

  putAll(table: string, entries: readonly KeyValue[]): Promise<void> {
    return this.buffer?.putAll(table, entries) ?? this.sink().putAll(table, entries);
  }

  remove(table: string, key: string): Promise<void> {
    return this.buffer?.remove(table, key) ?? this.sink().remove(table, key);
  }

  async scan(table: string, range: ScanRange, options?: ScanOptions): Promise<KeyValue[]> {
    await this.buffer?.flush();
    const handoff = await this.handoffBefore(table, undefined);
    const b = await this.ensureBegun(undefined, undefined);
    const result = await b.connection.call({
      kind: 'scan',
      tx: b.handle,
      ...handoff,
      table,
      range: range as Readonly<Record<string, string>>,
      ...(options !== undefined && { options }),
    });
    const entries = isRecord(result) ? result['entries'] : undefined;
    if (!Array.isArray(entries)) throw new BasaltError('MALFORMED_FRAME', 'the server answered scan without entries');
    return entries as KeyValue[];
  }

  async commit(): Promise<void> {
    if (this.finishing) {
      await this.settledBegin();
      // A transaction that never began committed nothing. Otherwise the server knows how the first finish went (a
      // repeated commit reports it, as on the embedded client).
      if (this.begun !== undefined)
        await this.begun.connection.call({ kind: 'commit', tx: this.begun.handle }, 'unknown');
      return;
    }
    this.finishing = true;
    const writes = this.buffer?.close() ?? [];
    await this.settledBegin();
    // A lazy transaction that made no request and keeps no writes has nothing to commit, and never begins.
    if (this.begun === undefined && writes.length === 0) return;
    const handoff = await this.finishingHandoff();
    const cause = this.plan?.abortCause;
    if (cause !== undefined && this.begun !== undefined) {
      // A direct operation made the transaction abort-only: it is rolled back, with what the coordinator must clean.
      await this.begun.connection.call({ kind: 'rollback', tx: this.begun.handle, ...handoff }).catch(() => {});
      throw new BasaltError(cause.code, `the transaction was rolled back: ${cause.message}`, cause.details, { cause });
    }
    const carried = writes.length > 0 ? { writes } : {};
    try {
      await this.first(
        writes[0]?.table,
        writes[0]?.key,
        (b) => b.connection.call({ kind: 'commit', tx: b.handle, ...carried, ...handoff }, 'unknown'),
        (connection, begin) => connection.call({ kind: 'commit', begin, ...carried }, 'unknown'),
      );
    } catch (error) {
      // Refused before the server acted on it (e.g. PERMISSION_DENIED for the writes it carried): the transaction is
      // still open there, so it is rolled back rather than left holding its locks until its timeout.
      const b = this.begun;
      if (b !== undefined && isBasaltError(error) && error.executed === 'no' && !b.connection.isClosed) {
        await b.connection.call({ kind: 'rollback', tx: b.handle }).catch(() => {});
      }
      throw error;
    }
  }

  async rollback(): Promise<void> {
    this.buffer?.close();
    if (this.finishing) return;
    this.finishing = true;
    await this.settledBegin();
    const handoff = await this.finishingHandoff();
    const b = this.begun;
    // Never begun: nothing to release. On a lost connection the server rolls the transaction back itself (the
    // partitions served directly and never handed over are then the primaries' tx sweep's to recover).
    if (b === undefined || b.connection.isClosed) return;
    await b.connection.call({ kind: 'rollback', tx: b.handle, ...handoff });
  }

  /** The handoff an operation through the coordinator carries (direct-plan.ts), as request fields. */
  private async handoffBefore(
    table: string,
    keys: readonly string[] | undefined,
  ): Promise<{ readonly handoff?: DirectHandoff }> {
    const handoff = await this.plan?.beforeCoordinator(table, keys);
    return handoff === undefined ? {} : { handoff };
  }

  private async finishingHandoff(): Promise<{ readonly handoff?: DirectHandoff }> {
    const handoff = await this.plan?.finishing();
    return handoff === undefined ? {} : { handoff };
  }

  /** Writes sent to the server as they are (unbuffered, or a buffer's flush). */
  private sink(): WriteSink {
    return {
      putAll: async (table, entries) => {
        const handoff = await this.handoffBefore(
          table,
          entries.map((e) => e.key),
        );
        const b = await this.ensureBegun(table, entries[0]?.key);
        await b.connection.call({ kind: 'putAll', tx: b.handle, table, entries, ...handoff });
      },
      remove: async (table, key) => {
        if ((await this.plan?.send({ kind: 'remove', table, key })) !== undefined) return;
        const b = await this.ensureBegun(table, key);
        await b.connection.call({ kind: 'remove', tx: b.handle, table, key });
      },
    };
  }

  /** Waits out a lazy begin under way (whatever came of it). */
  private async settledBegin(): Promise<void> {
    while (this.beginning !== undefined) await this.beginning;
  }

  /**
   * Sends a request under the transaction's handle, or, for a lazy transaction that has not begun, with the begin
   * riding on it to the connection `table`/`key` chooses; the answer (or the error's details) names the transaction.
   */
  private async first(
    table: string | undefined,
    key: string | undefined,
    named: (begun: Begun) => Promise<unknown>,
    piggybacked: (connection: RemoteConnection, begin: PiggybackedBegin) => Promise<unknown>,
    namesIn: (result: unknown) => unknown = (result) => (isRecord(result) ? result['begun'] : undefined),
  ): Promise<unknown> {
    // Checked again after every wait, in the same turn as the begin is started: two first requests begin once.
    while (this.beginning !== undefined) await this.beginning;
    if (this.begun !== undefined) return named(this.begun);
    const lazy = this.lazy;
    assert(lazy !== undefined, 'a transaction is begun or lazy');
    const connection = lazy.route(table, key);
    const answer = piggybacked(connection, lazy.begin);
    const beginning = answer.then(
      (result) => this.noteBegun(connection, namesIn(result)),
      (error: unknown) => this.noteBegun(connection, isBasaltError(error) ? error.details?.['begun'] : undefined),
    );
    this.beginning = beginning;
    try {
      return await answer;
    } finally {
      await beginning;
      if (this.beginning === beginning) this.beginning = undefined;
    }
  }

  /** The begun transaction; a lazy one that has not begun begins now, with a begin request of its own. */
  private async ensureBegun(table: string | undefined, key: string | undefined): Promise<Begun> {
    await this.first(
      table,
      key,
      async () => undefined,
      (connection, begin) => connection.call({ kind: 'begin', ...begin }),
      (result) => result,
    );
    if (this.begun === undefined) {
      throw new BasaltError('MALFORMED_FRAME', 'the server answered begin without a transaction');
    }
    return this.begun;
  }

  private noteBegun(connection: RemoteConnection, named: unknown): void {
    if (this.begun !== undefined || !isRecord(named)) return;
    const handle = named['tx'];
    const id = named['txId'];
    if (typeof handle !== 'number' || typeof id !== 'string' || !isTxId(id)) return;
    this.begun = { connection, handle, id };
    this.plan?.noteBegun(named, connection);
  }
}

/** A read-write begin asked to be lazy, with no read-only option (those need the server's answer at once). */
function isLazy(options: RemoteBeginOptions): boolean {
  return (
    options.lazy === true &&
    options.readOnly !== true &&
    options.readTimestamp === undefined &&
    options.stalenessMs === undefined
  );
}

/**
 * `begin` of `home`, a lazy transaction beginning on the node `route` picks for its first key (connectCluster: the
 * key's primary's); a client that is not a TCP one, or a closed connection, falls back to home.
 */
export function beginRouted(
  home: RemoteClient,
  options: RemoteBeginOptions,
  route: (table: string, key: string) => RemoteClient,
  direct?: DirectTargets,
): Promise<RemoteTransaction> {
  if (!(home instanceof TcpClient)) return home.begin(options);
  return home.beginRouted(options, wireRoute(home, route), wireDirect(direct));
}

/**
 * A key's primary's client and its partition's name (`table#index`), or undefined when the routes are unknown: where
 * a client routing by key sends a transaction's single-key operations directly (direct-plan.ts).
 */
export type DirectTargets = (
  table: string,
  key: string,
) => { readonly client: RemoteClient; readonly partition: string } | undefined;

function wireDirect(direct: DirectTargets | undefined): DirectRoute | undefined {
  if (direct === undefined) return undefined;
  return (table, key) => {
    const target = direct(table, key);
    if (target === undefined || !(target.client instanceof TcpClient) || target.client.closed) return undefined;
    return { connection: target.client.wire, node: target.client.node, partition: target.partition };
  };
}

/** `transaction` of `home`, each lazy attempt beginning where `route` picks (as `beginRouted`). */
export function transactionRouted<T>(
  home: RemoteClient,
  fn: (tx: RemoteTransaction) => Promise<T>,
  options: RemoteTransactionOptions,
  route: (table: string, key: string) => RemoteClient,
  direct?: DirectTargets,
): Promise<T> {
  if (!(home instanceof TcpClient)) return home.transaction(fn, options);
  return home.transactionRouted(fn, options, wireRoute(home, route), wireDirect(direct));
}

function wireRoute(home: TcpClient, route: (table: string, key: string) => RemoteClient): BeginRoute {
  return (table, key) => {
    if (table === undefined || key === undefined) return home.wire;
    const chosen = route(table, key);
    return chosen instanceof TcpClient && !chosen.closed ? chosen.wire : home.wire;
  };
}

function beginOptionsOf(options: RemoteBeginOptions): RemoteBeginOptions {
  return {
    ...(options.readOnly !== undefined && { readOnly: options.readOnly }),
    ...(options.readTimestamp !== undefined && { readTimestamp: options.readTimestamp }),
    ...(options.stalenessMs !== undefined && { stalenessMs: options.stalenessMs }),
    ...(options.timeoutMs !== undefined && { timeoutMs: options.timeoutMs }),
    ...(options.retryOf !== undefined && { retryOf: options.retryOf }),
  };
}

/** Read options checked here (a misspelt one is INVALID_ARGUMENT); only a locking read sends any. */
function readOptionsOf(options: ReadOptions | undefined): { readonly options?: { readonly forUpdate: true } } {
  return checkReadOptions(options) ? { options: { forUpdate: true } } : {};
}

/** Only the fields the protocol carries (a caller's object may hold more). */
function tableOptionsOf(options: TableOptions): TableOptions {
  return { partitions: options.partitions, replicas: options.replicas };
}

function readValue(result: unknown): Value | undefined {
  if (result !== undefined && !isRecord(result))
    throw new BasaltError('MALFORMED_FRAME', 'the server answered get without a value record');
  return result?.['value'] as Value | undefined;
}

function isTable(value: unknown): value is TableDescriptor {
  return (
    isRecord(value) &&
    typeof value['name'] === 'string' &&
    typeof value['id'] === 'number' &&
    typeof value['partitions'] === 'number' &&
    typeof value['replicas'] === 'number'
  );
}

/** The wire form of put options: an expiry only (a lease is resolved to its end before anything is sent). */
function putOptionsOf(options: PutOptions | undefined): { options?: { ttlMs?: number; expiresAt?: HybridTimestamp } } {
  if (options === undefined) return {};
  const { ttlMs, expiresAt } = options;
  return {
    options: { ...(ttlMs !== undefined && { ttlMs }), ...(expiresAt !== undefined && { expiresAt }) },
  };
}
