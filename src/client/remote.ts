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
 */
import { connect as netConnect, type Socket } from 'node:net';
import type { MemberRecord, TableDescriptor, TableOptions } from '../cluster/metastorage-state.js';
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
import { checkReadOptions } from '../tx/core/user-input.js';
import type { KeyValue, PutOptions, ReadOptions, ScanOptions, ScanRange, Transaction, Value } from './client.js';
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
  isRecord,
  parseResponse,
  parseServerHello,
  type RequestKind,
  type TxHandle,
  UNATTRIBUTED_REQUEST_ID,
} from './protocol.js';

export interface ConnectOptions {
  /** Timeout of each call (default LIMITS.clientRequestTimeoutMsDefault). */
  readonly timeoutMs?: number;
  /** Connecting and the hello exchange together (default LIMITS.handshakeTimeoutMs). */
  readonly connectTimeoutMs?: number;
  /** Timers for timeouts and retry backoff (default: the event loop's). */
  readonly timers?: Timers;
  readonly frameBytesMax?: number;
  readonly pendingCallsMax?: number;
}

export interface RemoteBeginOptions {
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
}

export interface RemoteTransactionOptions extends RemoteBeginOptions, RunTransactionOptions {}

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
  begin(options?: RemoteBeginOptions): Promise<RemoteTransaction>;
  /** Runs `fn` in a transaction and commits; retries retryable failures in a fresh transaction. */
  transaction<T>(fn: (tx: RemoteTransaction) => Promise<T>, options?: RemoteTransactionOptions): Promise<T>;
  get(table: string, key: string): Promise<Value | undefined>;
  /** An implicit write; `{ ttlMs }`, `{ expiresAt }` or `{ lease }` make it expire (docs/concepts/expiry.md). */
  put(table: string, key: string, value: Value, options?: PutOptions): Promise<void>;
  remove(table: string, key: string): Promise<void>;
  /** Grants a lease of `ttlMs`; keys put with `{ lease: id }` vanish together when it ends. */
  grantLease(ttlMs: number): Promise<Lease>;
  /** Extends lease `id` once (LEASE_NOT_FOUND if it already ended). */
  keepAliveOnce(id: string): Promise<Lease>;
  /** Keeps `lease` alive every third of its ttl until closed; `done` rejects (LEASE_NOT_FOUND) when it is lost. */
  keepAlive(lease: Lease): LeaseKeepAlive;
  /** Ends lease `id` now, removing its keys in one transaction. */
  revokeLease(id: string): Promise<void>;
  createTable(name: string, options: TableOptions): Promise<TableDescriptor>;
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
  /** Ends the connection; the server rolls back the transactions still open on it. */
  close(): Promise<void>;
}

/** Connects to a node's client port, e.g. `connect('127.0.0.1:10800')`. */
export async function connect(address: string, options: ConnectOptions = {}): Promise<RemoteClient> {
  const { host, port } = parseHostPort(address);
  const timers = options.timers ?? new RealTimers(true);
  const connection = new RemoteConnection(netConnect({ host, port }), timers, {
    timeoutMs: options.timeoutMs ?? LIMITS.clientRequestTimeoutMsDefault,
    connectTimeoutMs: options.connectTimeoutMs ?? LIMITS.handshakeTimeoutMs,
    frameBytesMax: options.frameBytesMax ?? LIMITS.frameBytesMax,
    pendingCallsMax: options.pendingCallsMax ?? LIMITS.clientPendingCallsMax,
  });
  const node = await connection.opened;
  return new TcpClient(connection, nodeName(node), address, timers);
}

/** What a lost response means for the caller: nothing happened for sure, or something may have been applied. */
type OnLoss = 'closed' | 'unknown';

interface ConnectionLimits {
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
class RemoteConnection {
  readonly opened: Promise<string>;
  private window: number = LIMITS.clientRequestsInFlightMax;
  private written = 0;
  private readonly unsent: number[] = [];
  private state: 'connecting' | 'open' | 'closed' = 'connecting';
  private readonly decoder: FrameDecoder;
  private readonly pending = new Map<number, PendingCall>();
  private nextId = 1;
  private closeReason: BasaltError | undefined;
  private settleOpen: ((node: string) => void) | undefined;
  private failOpen: ((error: BasaltError) => void) | undefined;
  private openTimer: TimerHandle | undefined;
  private readonly socketClosed: Promise<void>;

  constructor(
    private readonly socket: Socket,
    private readonly timers: Timers,
    private readonly limits: ConnectionLimits,
  ) {
    this.decoder = new FrameDecoder(limits.frameBytesMax);
    this.opened = new Promise<string>((resolve, reject) => {
      this.settleOpen = resolve;
      this.failOpen = reject;
    });
    this.socketClosed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    this.openTimer = timers.setTimer(() => {
      this.fail(new BasaltError('TIMEOUT', `no connection and hello within ${limits.connectTimeoutMs} ms`));
    }, limits.connectTimeoutMs);
    socket.setNoDelay(true);
    socket.on('connect', () => this.write(clientHello()));
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
      this.flush();
    });
  }

  /** Writes waiting requests while the window has room. */
  private flush(): void {
    while (this.written < this.window && this.state === 'open') {
      const id = this.unsent.shift();
      if (id === undefined) return;
      const call = this.pending.get(id);
      if (call?.unsent === undefined) continue; // timed out while waiting
      this.socket.write(call.unsent);
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
    this.settleOpen?.(hello.node);
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
  ) {}

  get closed(): boolean {
    return this.connection.isClosed;
  }

  async begin(options: RemoteBeginOptions = {}): Promise<RemoteTransaction> {
    const result = await this.connection.call({ kind: 'begin', ...beginOptionsOf(options) });
    if (!isRecord(result) || typeof result['tx'] !== 'number' || typeof result['txId'] !== 'string') {
      throw new BasaltError('MALFORMED_FRAME', 'the server answered begin without a transaction');
    }
    const readTimestamp = typeof result['readTimestamp'] === 'bigint' ? result['readTimestamp'] : undefined;
    return new TcpTransaction(
      this.connection,
      result['tx'],
      txId(result['txId']),
      result['readOnly'] === true,
      readTimestamp as HybridTimestamp | undefined,
    );
  }

  transaction<T>(fn: (tx: RemoteTransaction) => Promise<T>, options: RemoteTransactionOptions = {}): Promise<T> {
    // A read-write retry keeps the age of the attempt before it (RemoteBeginOptions.retryOf).
    let previous = options.retryOf;
    return withRetries(
      retryPolicy(options),
      (delayMs) => sleep(this.timers, delayMs),
      async () => {
        const retryOf = options.readOnly === true || previous === undefined ? {} : { retryOf: previous };
        const tx = await this.begin({ ...beginOptionsOf(options), ...retryOf });
        if (!tx.readOnly) previous = tx.id;
        return commitOrRollBack(tx, fn);
      },
      // A lost connection does not come back: retrying on it could only fail the same way.
      () => !this.connection.isClosed,
    );
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

  close(): Promise<void> {
    return this.connection.close();
  }
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

class TcpTransaction implements RemoteTransaction {
  /** Set once commit or rollback was sent: a later rollback is a local no-op. */
  private finishing = false;

  constructor(
    private readonly connection: RemoteConnection,
    private readonly handle: TxHandle,
    readonly id: TxId,
    readonly readOnly: boolean,
    readonly readTimestamp: HybridTimestamp | undefined,
  ) {}

  async get(table: string, key: string, options?: ReadOptions): Promise<Value | undefined> {
    const read = readOptionsOf(options);
    return readValue(await this.connection.call({ kind: 'get', tx: this.handle, table, key, ...read }));
  }

  async getAll(table: string, keys: readonly string[], options?: ReadOptions): Promise<(Value | undefined)[]> {
    const read = readOptionsOf(options);
    const result = await this.connection.call({ kind: 'getAll', tx: this.handle, table, keys, ...read });
    const values = isRecord(result) ? result['values'] : undefined;
    if (!Array.isArray(values)) throw new BasaltError('MALFORMED_FRAME', 'the server answered getAll without values');
    return values as (Value | undefined)[];
  }

  async put(table: string, key: string, value: Value, options?: PutOptions): Promise<void> {
    const lease = leaseOption(options);
    if (lease !== undefined) return putWithLease(this, lease, table, key, value);
    await this.connection.call({ kind: 'put', tx: this.handle, table, key, value, ...putOptionsOf(options) });
  }

  async putAll(table: string, entries: readonly KeyValue[]): Promise<void> {
    await this.connection.call({ kind: 'putAll', tx: this.handle, table, entries });
  }

  async remove(table: string, key: string): Promise<void> {
    await this.connection.call({ kind: 'remove', tx: this.handle, table, key });
  }

  async scan(table: string, range: ScanRange, options?: ScanOptions): Promise<KeyValue[]> {
    const result = await this.connection.call({
      kind: 'scan',
      tx: this.handle,
      table,
      range: range as Readonly<Record<string, string>>,
      ...(options !== undefined && { options }),
    });
    const entries = isRecord(result) ? result['entries'] : undefined;
    if (!Array.isArray(entries)) throw new BasaltError('MALFORMED_FRAME', 'the server answered scan without entries');
    return entries as KeyValue[];
  }

  async commit(): Promise<void> {
    this.finishing = true;
    await this.connection.call({ kind: 'commit', tx: this.handle }, 'unknown');
  }

  async rollback(): Promise<void> {
    if (this.finishing) return;
    this.finishing = true;
    // On a lost connection the server rolls the transaction back itself.
    if (this.connection.isClosed) return;
    await this.connection.call({ kind: 'rollback', tx: this.handle });
  }
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
