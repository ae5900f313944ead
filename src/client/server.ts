/**
 * The client server: a node's client port (protocol in `protocol.ts`), serving remote clients over a `Client`
 * backend bound to that node, so the node a client connects to coordinates its transactions.
 *
 * Per connection (a `ClientSession`):
 *   - a table of open transactions by handle, at most `txHandlesMax` (a begin past it is OVERLOADED). Handles are
 *     never reused on a connection, so a handle below the next one that is not open names a finished transaction
 *     (TX_ALREADY_FINISHED) and any other is unknown (INVALID_ARGUMENT);
 *   - at most `requestsInFlightMax` requests being processed: reaching it pauses reading the socket (the peer's sends
 *     then back up in TCP); requests already received wait in a queue of the same bound, in order, and past that
 *     they are answered OVERLOADED;
 *   - requests run concurrently and never wait on one another or on other connections;
 *   - when the connection ends, however it ends, every transaction still open on it is rolled back (its locks are
 *     released); a commit already under way is left to finish;
 *   - a frame that cannot be attributed to a request (bad msgpack, oversized length, no id, a bad hello) is answered
 *     under id 0 with a coded error and closes this connection only; a request with a readable id but a bad shape is
 *     answered with a coded error and the connection stays open.
 * Time comes from the injected timers (the hello timeout). The socket is `node:net`, or `node:tls` (TLS 1.3 only)
 * when the server is given certificates (`tls`): it serves node.crt, asks every client for a certificate and
 * verifies one it is given against ca.crt (a client may also come without one and log in with a password). Renewed
 * material (`updateTls`) is used by new connections; open ones keep theirs.
 *
 * With `auth` the server checks users (auth.ts, authorization.ts): the hello may carry a user and password, or the
 * connection's client certificate names the user (CN). A hello with a wrong password or a client certificate that
 * failed verification is refused UNAUTHENTICATED and the connection closes; a hello without credentials is accepted,
 * and every request of such a connection fails UNAUTHENTICATED. Every request of a logged-in connection is checked
 * against the user's roles as the node's metastorage has them now (so a removed user or a revoked role takes effect
 * on the next request) before anything acts on it: a refusal (PERMISSION_DENIED) has done nothing. Without `auth`
 * (a node without certificates) there are no users and every request is served, as before.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { TLSSocket, type Server as TlsServer, createServer as tlsCreateServer } from 'node:tls';
import {
  isUserRole,
  type MemberRecord,
  type PasswordHash,
  type ProtectedTimestamps,
  type TableDescriptor,
  type TableOptions,
  type UserRecord,
  type UserRole,
} from '../cluster/metastorage-state.js';
import { assert } from '../core/assert.js';
import { BasaltError, type ErrorData, toErrorData } from '../core/errors.js';
import type { HybridTimestamp, TxId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import type { TimerHandle, Timers } from '../env/timers.js';
import { decode } from '../net/codec.js';
import { type DiagnosticListener, ignoreDiagnostics, type NetDiagnosticKind } from '../net/diagnostics.js';
import { encodeFrame, FrameDecoder } from '../net/frame.js';
import { clientServerTlsOptions, type PeerTlsMaterial } from '../net/peer-tls.js';
import type { DirectOperation, DirectServed } from '../tx/coordinator/coordinator-direct.js';
import type { DirectHandoff, DirectTx } from '../tx/core/direct.js';
import type { TxWrite } from '../tx/core/user-input.js';
import { type AuthCounters, Authenticator, type ClientAuthOptions } from './auth.js';
import { denial, permissionOf } from './authorization.js';
import type { KeyValue, PutOptions, ScanOptions, ScanRange, Transaction, Value } from './client.js';
import { passwordProblem } from './passwords.js';
import {
  CLIENT_MAGIC,
  CLIENT_PROTOCOL_VERSION,
  type ClientRequest,
  type ClientResponse,
  clientHelloProblem,
  helloCredentials,
  type PiggybackedBegin,
  parseRequest,
  type RequestKind,
  type RequestOf,
  type ServerHello,
  type TxHandle,
  UNATTRIBUTED_REQUEST_ID,
} from './protocol.js';
import type { ChangeReadPage, ChangeReadRequest } from './watch.js';

/** Options of a begin as the client protocol carries them (read-only ones are the coordinator's to check). */
export interface RemoteBeginOptions {
  readonly readOnly?: boolean;
  readonly readTimestamp?: HybridTimestamp;
  readonly stalenessMs?: number;
  /** Read-write only: the transaction's own timeout. */
  readonly timeoutMs?: number;
  /** Read-write only: the attempt this transaction retries; it keeps that attempt's age (BeginTxOptions.retryOf). */
  readonly retryOf?: TxId;
}

/** A transaction of the backend; a read-only one may tell its read timestamp. */
export type BackendTransaction = Transaction & {
  readonly readTimestamp?: HybridTimestamp;
  /** Commits with the writes the client carried (the embedded client's transactions have it). */
  commitWith?(writes: readonly TxWrite[]): Promise<void>;
  /** Where the client may send this transaction's operations straight to primaries (tx/core/direct.ts). */
  directInfo?(): { readonly coordinatorId: string; readonly commitPartitionId: string } | undefined;
  /** Takes over what the client learned from its direct operations. */
  adoptDirect?(handoff: DirectHandoff): void;
};

/** A single-key operation of a transaction, sent straight to this node (tx/core/direct.ts). */
export interface DirectRequest {
  readonly table: string;
  readonly operation: DirectOperation;
  readonly tx: DirectTx;
}

/** What the server needs of a client bound to its node: the embedded `Client` fits. */
export interface ClientBackend {
  readonly node: string;
  begin(options?: RemoteBeginOptions): Promise<BackendTransaction>;
  transaction<T>(fn: (tx: BackendTransaction) => Promise<T>): Promise<T>;
  get(table: string, key: string): Promise<Value | undefined>;
  put(table: string, key: string, value: Value, options?: PutOptions): Promise<void>;
  remove(table: string, key: string): Promise<void>;
  createTable(name: string, options: TableOptions): Promise<TableDescriptor>;
  dropTable(name: string): Promise<void>;
  tables(): readonly TableDescriptor[] | Promise<readonly TableDescriptor[]>;
  /** The cluster's members as the metastorage records them (absent: this backend cannot tell). */
  members?(): readonly MemberRecord[];
  /** Starts removing a member: gracefully (its replicas move first), or `dead` (rebuilt from the survivors). */
  removeNode?(name: string, dead: boolean): Promise<readonly MemberRecord[]>;
  /** Each partition's primary as this node knows it, null where it knows none (absent: this backend cannot tell). */
  primaries?(table: string): readonly (string | null)[];
  /** One page of one partition's changes (a watch's step); absent: this backend serves no watches. */
  readChanges?(request: ChangeReadRequest): Promise<ChangeReadPage>;
  /** Users, as the metastorage keeps them (absent: this backend has none; a server with `auth` needs them). */
  readonly users?: UserDirectory;
  /** Protected timestamps (absent: this backend keeps no history worth protecting). */
  readonly protectedTimestamps?: ProtectedTimestamps;
  /** Serves a direct operation (absent: this backend serves none; the client then goes through the coordinator). */
  direct?(request: DirectRequest): Promise<DirectServed>;
}

/** The users of the cluster: looked up at every login and request, changed by the admin requests. */
export interface UserDirectory {
  user(name: string): UserRecord | undefined;
  users(): readonly UserRecord[];
  createUser(user: UserRecord): Promise<UserRecord>;
  removeUser(name: string): Promise<UserRecord>;
  setPassword(name: string, password: PasswordHash | undefined): Promise<UserRecord>;
  grantRole(name: string, role: UserRole | 'none', table?: string): Promise<UserRecord>;
}

/** A user as `users` answers it: without the password hash. */
export interface UserInfo {
  readonly name: string;
  readonly role?: UserRole;
  readonly tables?: readonly (readonly [string, string])[];
  /** Whether the user may log in with a password (else by client certificate only). */
  readonly password: boolean;
}

/** Options of a node's client server. */
export interface ClientServerOptions {
  /** The interface to listen on. */
  readonly host: string;
  /** 0 picks an ephemeral port; read it back from `port`. */
  readonly port: number;
  /** The client whose calls the server's connections make (the node's coordinator). */
  readonly client: ClientBackend;
  /** Timers of handshake timeouts. */
  readonly timers: Timers;
  /** Connections accepted at a time (default 1,024). */
  readonly connectionsMax?: number;
  /** Open transactions of one connection; a begin past it is OVERLOADED (default 1,024). */
  readonly txHandlesMax?: number;
  /** Requests of one connection processed at once; past it the socket is not read (default 256). */
  readonly requestsInFlightMax?: number;
  /** Largest frame accepted (default 16 MiB). */
  readonly frameBytesMax?: number;
  /** A connection must say hello within this (default 5 s). */
  readonly handshakeTimeoutMs?: number;
  /** Bytes buffered for one slow connection before it is dropped (default 64 MiB). */
  readonly writeBufferBytesMax?: number;
  /** Told of refused connections and malformed frames. */
  readonly onDiagnostic?: DiagnosticListener;
  /** Serve TLS 1.3 with this CA, server certificate and key (the node's `--certs-dir`); plain TCP without. */
  readonly tls?: PeerTlsMaterial;
  /**
   * Check users (the client's backend must have `users`); without it every request is served. An `Authenticator`
   * given here is shared (the node's console checks its logins with the same one, so failures count together).
   */
  readonly auth?: ClientAuthOptions | Authenticator;
}

interface SessionLimits {
  readonly txHandlesMax: number;
  readonly requestsInFlightMax: number;
  readonly frameBytesMax: number;
  readonly handshakeTimeoutMs: number;
  readonly writeBufferBytesMax: number;
}

/** A node's client port: serves the client protocol that {@link connect} speaks. */
export class ClientServer {
  private readonly sessions = new Set<ClientSession>();
  /** Rollbacks of closed connections' transactions still running; `close()` waits for them. */
  private readonly rollbacks = new Set<Promise<void>>();
  private readonly requestCounts = new Map<RequestKind | 'beginPiggybacked', number>();
  private readonly limits: SessionLimits;
  private readonly authenticator: Authenticator | undefined;
  private closed = false;
  private boundPort: number;

  private constructor(
    private readonly server: Server,
    private readonly options: ClientServerOptions,
  ) {
    this.limits = {
      txHandlesMax: options.txHandlesMax ?? LIMITS.clientTxHandlesMax,
      requestsInFlightMax: options.requestsInFlightMax ?? LIMITS.clientRequestsInFlightMax,
      frameBytesMax: options.frameBytesMax ?? LIMITS.frameBytesMax,
      handshakeTimeoutMs: options.handshakeTimeoutMs ?? LIMITS.handshakeTimeoutMs,
      writeBufferBytesMax: options.writeBufferBytesMax ?? LIMITS.peerWriteBufferBytesMax,
    };
    server.maxConnections = options.connectionsMax ?? LIMITS.clientConnectionsMax;
    this.boundPort = options.port;
    const users = options.client.users;
    if (options.auth !== undefined && users === undefined) {
      throw new BasaltError('INVALID_ARGUMENT', 'a client server that checks users needs a backend with users');
    }
    this.authenticator =
      options.auth === undefined || users === undefined
        ? undefined
        : options.auth instanceof Authenticator
          ? options.auth
          : new Authenticator(options.auth, (name) => users.user(name));
  }

  /** Logins and refusals so far (all zero on a server that does not check users), for /metrics. */
  /** Well-formed requests received, by kind, over every connection so far (`beginPiggybacked`: begins riding on another). */
  requestsByKind(): ReadonlyMap<RequestKind | 'beginPiggybacked', number> {
    return new Map(this.requestCounts);
  }

  authCounters(): AuthCounters {
    return this.authenticator?.counters() ?? { auth_logins_total: 0, auth_failures_total: 0, auth_throttled_total: 0 };
  }

  /** Listens on host:port and serves every accepted connection. */
  static async start(options: ClientServerOptions): Promise<ClientServer> {
    const handshakeTimeout = options.handshakeTimeoutMs ?? LIMITS.handshakeTimeoutMs;
    const server =
      options.tls === undefined
        ? createServer()
        : tlsCreateServer({ ...clientServerTlsOptions(options.tls), handshakeTimeout });
    const clientServer = new ClientServer(server, options);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port, options.host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    const address = server.address();
    if (typeof address === 'object' && address !== null) clientServer.boundPort = address.port;
    server.on('error', (error) => clientServer.diagnose('connection-error', `client server: ${error.message}`));
    if (options.tls === undefined) server.on('connection', (socket) => clientServer.accept(socket));
    else {
      server.on('secureConnection', (socket: Socket) => clientServer.accept(socket));
      server.on('tlsClientError', (error: Error, socket: Socket) => {
        clientServer.diagnose('tls-refused', `client TLS handshake failed: ${error.message}`, remoteOf(socket));
        socket.destroy();
      });
    }
    return clientServer;
  }

  /** Whether clients connect over TLS. */
  get secure(): boolean {
    return this.options.tls !== undefined;
  }

  /** Renewed certificates, key or CA for new connections (rotation without a restart); open ones keep theirs. */
  updateTls(material: PeerTlsMaterial): void {
    if (this.options.tls === undefined) return;
    (this.server as TlsServer).setSecureContext(clientServerTlsOptions(material));
  }

  /** The port listened on (still known after `close()`). */
  get port(): number {
    return this.boundPort;
  }

  /** 'host:port' as `connect()` takes it. */
  get address(): string {
    const host = this.options.host;
    return host.includes(':') ? `[${host}]:${this.port}` : `${host}:${this.port}`;
  }

  /** Connections currently open (handshaking or established). */
  get connections(): number {
    return this.sessions.size;
  }

  /** Transactions open on all connections. */
  get openTransactions(): number {
    let n = 0;
    for (const session of this.sessions) n += session.openTransactions;
    return n;
  }

  /** Stops accepting, closes every connection (rolling back their open transactions) and waits for the rollbacks. */
  async close(): Promise<void> {
    if (!this.closed) {
      this.closed = true;
      const listening = new Promise<void>((resolve) => this.server.close(() => resolve()));
      for (const session of [...this.sessions]) session.close();
      await listening;
    }
    while (this.rollbacks.size > 0) await Promise.all([...this.rollbacks]);
  }

  private accept(socket: Socket): void {
    if (this.closed) {
      socket.destroy();
      return;
    }
    const session = new ClientSession(
      socket,
      this.options.client,
      this.options.timers,
      this.limits,
      this.authenticator,
      {
        diagnose: (kind, message) => this.diagnose(kind, message, remoteOf(socket)),
        onRequest: (kind) => this.requestCounts.set(kind, (this.requestCounts.get(kind) ?? 0) + 1),
        onRollback: (rollback) => {
          this.rollbacks.add(rollback);
          void rollback.finally(() => this.rollbacks.delete(rollback));
        },
        onClose: () => this.sessions.delete(session),
      },
    );
    this.sessions.add(session);
  }

  private diagnose(kind: NetDiagnosticKind, message: string, peer?: string): void {
    try {
      (this.options.onDiagnostic ?? ignoreDiagnostics)({ kind, message, peer });
    } catch {
      // A failing diagnostics sink must not break the server.
    }
  }
}

interface SessionEvents {
  readonly diagnose: (kind: NetDiagnosticKind, message: string) => void;
  /** A well-formed request arrived (a begin riding on another request counts as `beginPiggybacked`). */
  readonly onRequest: (kind: RequestKind | 'beginPiggybacked') => void;
  readonly onRollback: (rollback: Promise<void>) => void;
  readonly onClose: () => void;
}

/**
 * One client connection. Invariants (asserted where they change): `txs.size + beginsInFlight <= txHandlesMax`;
 * `inFlight <= requestsInFlightMax`; `queued.length <= requestsInFlightMax`, and requests are queued only while
 * `inFlight` is at its bound; a handle is given out once.
 */
class ClientSession {
  private state: 'handshaking' | 'authenticating' | 'open' | 'closed' = 'handshaking';
  /** The user this connection logged in as (servers that check users); undefined: not logged in. */
  private user: string | undefined;
  private readonly decoder: FrameDecoder;
  private readonly txs = new Map<TxHandle, BackendTransaction>();
  private nextHandle: TxHandle = 1;
  private beginsInFlight = 0;
  private inFlight = 0;
  /** Requests that arrived while `inFlight` was at its bound; at most `requestsInFlightMax`. */
  private readonly queued: ClientRequest[] = [];
  private paused = false;
  private timer: TimerHandle | undefined;
  /** Frames answered during this event-loop iteration, written together by one `flush`. */
  private batch: Buffer[] = [];
  private flushScheduled = false;

  constructor(
    private readonly socket: Socket,
    private readonly backend: ClientBackend,
    private readonly timers: Timers,
    private readonly limits: SessionLimits,
    private readonly authenticator: Authenticator | undefined,
    private readonly events: SessionEvents,
  ) {
    this.decoder = new FrameDecoder(limits.frameBytesMax);
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('error', (error: Error) => {
      events.diagnose('connection-error', error.message);
      this.close();
    });
    socket.on('close', () => {
      this.clearTimer();
      this.close();
    });
    this.timer = timers.setTimer(() => {
      this.timer = undefined;
      this.refuse('HANDSHAKE_FAILED', `no hello within ${limits.handshakeTimeoutMs} ms`);
    }, limits.handshakeTimeoutMs);
  }

  get openTransactions(): number {
    return this.txs.size;
  }

  /** Ends the connection at once and rolls back its open transactions. Idempotent. */
  close(): void {
    if (this.state === 'closed') return;
    this.socket.destroy();
    this.finish();
  }

  /** Flushes what was written, then closes: the peer reads the refusal before the connection ends. */
  private end(): void {
    if (this.state === 'closed') return;
    this.flush();
    this.socket.end();
    this.finish();
    // A peer that does not read must not keep the socket: it is destroyed after the hello timeout at the latest.
    this.timer = this.timers.setTimer(() => this.socket.destroy(), this.limits.handshakeTimeoutMs);
  }

  private finish(): void {
    this.state = 'closed';
    this.clearTimer();
    const open = [...this.txs.values()];
    this.txs.clear();
    for (const tx of open) this.events.onRollback(tx.rollback().catch(() => {}));
    this.events.onClose();
  }

  private isClosed(): boolean {
    return this.state === 'closed';
  }

  private onData(chunk: Buffer): void {
    if (this.state === 'closed') return;
    const output = this.decoder.push(chunk);
    for (const frame of output.frames) {
      // A frame may have closed the connection; the frames after it are not served.
      if (this.isClosed()) return;
      this.onFrame(frame);
    }
    if (!output.ok) {
      this.refuse('FRAME_TOO_LARGE', `a frame of ${output.frameBytes} bytes exceeds ${this.limits.frameBytesMax}`);
    }
  }

  private onFrame(frame: Buffer): void {
    let payload: unknown;
    try {
      payload = decode(frame);
    } catch (error) {
      this.refuse('MALFORMED_FRAME', error instanceof Error ? error.message : String(error));
      return;
    }
    if (this.state === 'handshaking') this.onHello(payload);
    else if (this.state === 'open') this.onRequest(payload);
    else this.refuse('HANDSHAKE_FAILED', 'a request before the server answered the hello');
  }

  private onHello(payload: unknown): void {
    const problem = clientHelloProblem(payload);
    if (problem !== undefined) {
      this.refuse('HANDSHAKE_FAILED', problem);
      return;
    }
    this.clearTimer();
    if (this.authenticator === undefined) {
      this.open();
      return;
    }
    // The login may take a password check: nothing else is read meanwhile.
    this.state = 'authenticating';
    this.socket.pause();
    void this.login(this.authenticator, payload).then(
      (user) => {
        if (this.state !== 'authenticating') return;
        this.user = user;
        this.socket.resume();
        this.open();
      },
      (error: unknown) => {
        if (this.state !== 'authenticating') return;
        const data = toErrorData(error);
        this.state = 'handshaking';
        this.refuse(data.code, data.message);
      },
    );
  }

  private open(): void {
    this.state = 'open';
    const hello: ServerHello = {
      magic: CLIENT_MAGIC,
      version: CLIENT_PROTOCOL_VERSION,
      node: this.backend.node,
      requestsInFlightMax: this.limits.requestsInFlightMax,
      ...(this.user !== undefined && { user: this.user }),
    };
    this.send(hello);
  }

  /**
   * The user this connection logs in as: by password (the hello's user), or by the client certificate's CN; undefined
   * for a connection with no credentials (its requests are refused). Throws UNAUTHENTICATED.
   */
  private async login(authenticator: Authenticator, hello: unknown): Promise<string | undefined> {
    const { user, password } = helloCredentials(hello);
    const certified = this.certificateUser(authenticator);
    if (certified !== undefined && user !== undefined && certified !== user) {
      authenticator.countRefusal();
      throw new BasaltError('UNAUTHENTICATED', `the client certificate names ${certified}, not user ${user}`);
    }
    if (user !== undefined && password !== undefined) {
      return (await authenticator.loginWithPassword(this.remoteHost(), user, password)).name;
    }
    if (certified !== undefined) return authenticator.loginWithCertificate(certified).name;
    if (user !== undefined) {
      authenticator.countRefusal();
      throw new BasaltError('UNAUTHENTICATED', `user ${user} came without a password or a client certificate`);
    }
    return undefined;
  }

  /** The CN of a verified client certificate; throws UNAUTHENTICATED for one that failed verification. */
  private certificateUser(authenticator: Authenticator): string | undefined {
    if (!(this.socket instanceof TLSSocket)) return undefined;
    const certificate = this.socket.getPeerCertificate();
    if (certificate === null || Object.keys(certificate).length === 0) return undefined;
    const cn: unknown = certificate.subject?.CN;
    if (!this.socket.authorized) {
      authenticator.countRefusal();
      const why = String(this.socket.authorizationError ?? 'not verified');
      const dates = `valid from ${certificate.valid_from} to ${certificate.valid_to}`;
      throw new BasaltError(
        'UNAUTHENTICATED',
        `the client certificate of ${typeof cn === 'string' ? cn : 'no single CN'} was refused: ${why} (${dates})`,
      );
    }
    if (typeof cn !== 'string') {
      authenticator.countRefusal();
      throw new BasaltError('UNAUTHENTICATED', 'the client certificate names no user (no single CN)');
    }
    return cn;
  }

  private remoteHost(): string {
    return this.socket.remoteAddress ?? '?';
  }

  /** Throws UNAUTHENTICATED or PERMISSION_DENIED unless this connection's user may make `request`. */
  private authorize(request: ClientRequest): void {
    if (this.authenticator === undefined) return;
    if (this.user === undefined) {
      throw new BasaltError(
        'UNAUTHENTICATED',
        'this connection has not logged in: connect with a user and password or a client certificate',
        undefined,
        { executed: 'no' },
      );
    }
    const record = this.backend.users?.user(this.user);
    if (record === undefined) {
      throw new BasaltError('UNAUTHENTICATED', `user ${this.user} no longer exists`, undefined, { executed: 'no' });
    }
    const why = denial(record, permissionOf(request));
    if (why !== undefined) {
      throw new BasaltError('PERMISSION_DENIED', `${request.kind}: ${why}`, { user: this.user }, { executed: 'no' });
    }
  }

  private onRequest(payload: unknown): void {
    const parsed = parseRequest(payload);
    if (!parsed.ok) {
      if (parsed.id === undefined) this.refuse(parsed.error.code, parsed.error.message);
      else this.respond({ id: parsed.id, error: parsed.error });
      return;
    }
    this.events.onRequest(parsed.request.kind);
    if (Object.hasOwn(parsed.request, 'begin')) this.events.onRequest('beginPiggybacked');
    if (this.inFlight < this.limits.requestsInFlightMax) {
      this.start(parsed.request);
    } else if (this.queued.length < this.limits.requestsInFlightMax) {
      assert(this.inFlight === this.limits.requestsInFlightMax, 'requests queue only at the in-flight bound');
      this.queued.push(parsed.request);
    } else {
      const message = `more than ${2 * this.limits.requestsInFlightMax} requests in flight or queued on this connection`;
      this.respond({ id: parsed.request.id, error: { code: 'OVERLOADED', message } });
    }
    // At the bound, stop reading: what already arrived is queued, the rest waits in TCP.
    if (this.inFlight >= this.limits.requestsInFlightMax && !this.paused) {
      this.paused = true;
      this.socket.pause();
    }
  }

  private start(request: ClientRequest): void {
    this.inFlight++;
    assert(this.inFlight <= this.limits.requestsInFlightMax, 'at most requestsInFlightMax requests run', this.inFlight);
    void this.run(request).then((response) => {
      this.inFlight--;
      assert(this.inFlight >= 0, 'a request ends after it started');
      this.respond(response);
      if (this.isClosed()) return;
      const next = this.queued.shift();
      if (next !== undefined) this.start(next);
      else if (this.paused) {
        this.paused = false;
        this.socket.resume();
      }
    });
  }

  /** Runs one request to its response; never rejects. */
  private async run(request: ClientRequest): Promise<ClientResponse> {
    try {
      return { id: request.id, result: await this.execute(request) };
    } catch (error) {
      return { id: request.id, error: toErrorData(error) };
    }
  }

  private execute(request: ClientRequest): Promise<unknown> {
    this.authorize(request);
    if ('direct' in request && request.direct !== undefined) return this.direct(request);
    if ('handoff' in request) this.adopt(request);
    switch (request.kind) {
      case 'begin':
        return this.begin(request);
      case 'get':
        if (request.begin === undefined) return this.get(request);
        return this.beginning(request.begin, (tx) => this.get({ ...request, tx }));
      case 'getAll':
        if (request.begin === undefined) return this.getAll(request);
        return this.beginning(request.begin, (tx) => this.getAll({ ...request, tx }));
      case 'put':
        return this.put(request);
      case 'putAll':
        return this.onTx(request.tx, (tx) => tx.putAll(request.table, request.entries as readonly KeyValue[])).then(
          () => ({}),
        );
      case 'remove':
        return this.remove(request);
      case 'scan':
        return this.onTx(request.tx, (tx) =>
          tx.scan(request.table, request.range as ScanRange, request.options as ScanOptions | undefined),
        ).then((entries) => ({ entries }));
      case 'commit': {
        const writes = (request.writes ?? []) as readonly TxWrite[];
        if (request.begin === undefined) return this.commit(request.tx!, writes);
        return this.beginning(request.begin, (tx) => this.commit(tx, writes));
      }
      case 'rollback':
        return this.rollback(request.tx);
      case 'createTable':
        return this.backend.createTable(request.name, request.options).then((table) => ({ table }));
      case 'dropTable':
        return this.backend.dropTable(request.name).then(() => ({}));
      case 'tables':
        return Promise.resolve(this.backend.tables()).then((tables) => ({ tables: [...tables] }));
      case 'members': {
        const members = this.backend.members?.();
        if (members === undefined) throw new BasaltError('NOT_IMPLEMENTED', 'this server does not know the members');
        return Promise.resolve({ members: [...members] });
      }
      case 'primaries': {
        const primaries = this.backend.primaries?.(request.table);
        if (primaries === undefined) throw new BasaltError('NOT_IMPLEMENTED', 'this server does not know primaries');
        return Promise.resolve({ primaries: [...primaries] });
      }
      case 'changes':
        return this.changes(request);
      case 'removeNode': {
        const remove = this.backend.removeNode?.bind(this.backend);
        if (remove === undefined) throw new BasaltError('NOT_IMPLEMENTED', 'this server cannot remove nodes');
        return remove(request.name, request.dead === true).then((members) => ({ members: [...members] }));
      }
      case 'createUser':
      case 'removeUser':
      case 'setPassword':
      case 'grant':
      case 'users':
        return this.userRequest(request);
      case 'protect':
      case 'renew':
      case 'release':
        return this.protectRequest(request);
      default:
        throw new BasaltError('INTERNAL', `request kind ${String((request as { kind: unknown }).kind)} has no handler`);
    }
  }

  /** The user admin requests (authorized already): passwords are hashed here, on the node, with a fresh salt. */
  private async userRequest(
    request: RequestOf<'createUser' | 'removeUser' | 'setPassword' | 'grant' | 'users'>,
  ): Promise<unknown> {
    const users = this.backend.users;
    const authenticator = this.authenticator;
    if (users === undefined || authenticator === undefined) {
      throw new BasaltError('INVALID_ARGUMENT', 'this node does not check users (it runs without --certs-dir)');
    }
    const hash = async (password: string | undefined) => {
      if (password === undefined) return undefined;
      const problem = passwordProblem(password);
      if (problem !== undefined) throw new BasaltError('INVALID_ARGUMENT', problem);
      return authenticator.hash(password);
    };
    switch (request.kind) {
      case 'createUser': {
        const role = request.role;
        if (role !== undefined && !isUserRole(role)) throw badRole(role);
        const password = await hash(request.password);
        const user = await users.createUser({
          name: userName(request.name),
          ...(role !== undefined && { role }),
          ...(password !== undefined && { password }),
        });
        return { user: userInfo(user) };
      }
      case 'removeUser':
        return { user: userInfo(await users.removeUser(request.name)) };
      case 'setPassword':
        return { user: userInfo(await users.setPassword(request.name, await hash(request.password))) };
      case 'grant': {
        const role = request.role;
        if (role !== 'none' && !isUserRole(role)) throw badRole(role);
        return { user: userInfo(await users.grantRole(request.name, role, request.table)) };
      }
      case 'users':
        return { users: users.users().map(userInfo) };
    }
  }

  /** Protected timestamp requests (authorized already); the owner is the connection's user, else the node. */
  private async protectRequest(request: RequestOf<'protect' | 'renew' | 'release'>): Promise<unknown> {
    const directory = this.backend.protectedTimestamps;
    if (directory === undefined) throw new BasaltError('INVALID_ARGUMENT', 'this node keeps no protected timestamps');
    const owner = this.user ?? this.backend.node;
    const lifetimeMs =
      request.kind === 'release' ? 0 : (request.lifetimeMs ?? LIMITS.protectedTimestampLifetimeMsDefault);
    switch (request.kind) {
      case 'protect':
        return { protected: await directory.protect(request.ts as HybridTimestamp, owner, lifetimeMs) };
      case 'renew':
        return { protected: await directory.renew(request.protection, owner, lifetimeMs) };
      case 'release':
        await directory.release(request.protection);
        return {};
    }
  }

  /**
   * Begins a transaction for a request that carries a begin (protocol.ts PiggybackedBegin), then runs the request in
   * it: its handle and id are answered with the result, or in the error's details, since the transaction stays open
   * when the request failed (the client rolls it back, as after any failed operation).
   */
  private async beginning(begin: PiggybackedBegin, run: (tx: TxHandle) => Promise<unknown>): Promise<unknown> {
    const begun = await this.begin({ id: UNATTRIBUTED_REQUEST_ID, kind: 'begin', ...begin });
    const backendTx = this.txs.get(begun.tx);
    // The coordinator and commit partition are known once the first request ran: a client routing by key may then
    // send the transaction's single-key operations straight to their primaries.
    const named = () => ({ tx: begun.tx, txId: begun.txId, ...backendTx?.directInfo?.() });
    let result: unknown;
    try {
      result = await run(begun.tx);
    } catch (error) {
      const e = error instanceof BasaltError ? error : new BasaltError('INTERNAL', String(error), undefined);
      throw new BasaltError(
        e.code,
        e.toData().message,
        { ...e.details, begun: named() },
        {
          cause: error,
          executed: e.executed,
          ...(e.hint !== undefined && { hint: e.hint }),
        },
      );
    }
    return { ...(result as Record<string, unknown>), begun: named() };
  }

  /** A direct operation (tx/core/direct.ts): its result and what the coordinator would have learned of it. */
  private async direct(request: RequestOf<'get'> | RequestOf<'put'> | RequestOf<'remove'>): Promise<unknown> {
    if (this.backend.direct === undefined) {
      throw new BasaltError('NOT_IMPLEMENTED', 'this server serves no direct operations', undefined, {
        executed: 'no',
      });
    }
    const { table, key, direct } = request;
    const operation: DirectOperation =
      request.kind === 'get'
        ? { op: 'get', key, forUpdate: request.options?.forUpdate === true }
        : request.kind === 'put'
          ? {
              op: 'put',
              key,
              value: request.value as Value,
              ...(request.options !== undefined && { options: request.options }),
            }
          : { op: 'remove', key };
    const served = await this.backend.direct({ table, operation, tx: direct! });
    const result = served.result;
    if (result.op === 'get') return { direct: served.answer, ...(result.value.found && { value: result.value.value }) };
    return { direct: served.answer };
  }

  /** The handoff a request of a named transaction carries, taken over before the request runs. */
  private adopt(request: { readonly tx?: TxHandle; readonly handoff?: DirectHandoff }): void {
    if (request.handoff === undefined || request.tx === undefined) return;
    const tx = this.txs.get(request.tx);
    if (tx?.adoptDirect === undefined) return;
    tx.adoptDirect(request.handoff);
  }

  private async begin(
    request: RequestOf<'begin'>,
  ): Promise<{ tx: TxHandle; txId: TxId; readOnly: boolean; readTimestamp: HybridTimestamp | undefined }> {
    if (this.txs.size + this.beginsInFlight >= this.limits.txHandlesMax) {
      throw new BasaltError('OVERLOADED', `at most ${this.limits.txHandlesMax} open transactions per connection`, {
        txHandlesMax: this.limits.txHandlesMax,
      });
    }
    const options: RemoteBeginOptions = {
      ...(request.readOnly !== undefined && { readOnly: request.readOnly }),
      ...(request.readTimestamp !== undefined && { readTimestamp: request.readTimestamp as HybridTimestamp }),
      ...(request.stalenessMs !== undefined && { stalenessMs: request.stalenessMs }),
      ...(request.timeoutMs !== undefined && { timeoutMs: request.timeoutMs }),
      ...(request.retryOf !== undefined && { retryOf: request.retryOf as TxId }),
    };
    this.beginsInFlight++;
    let tx: BackendTransaction;
    try {
      tx = await this.backend.begin(options);
    } finally {
      this.beginsInFlight--;
    }
    if (this.state === 'closed') {
      // Nobody will ever name this transaction: release it now.
      this.events.onRollback(tx.rollback().catch(() => {}));
      throw new BasaltError('CONNECTION_CLOSED', 'the connection closed during begin');
    }
    const handle = this.nextHandle++;
    assert(!this.txs.has(handle), 'a transaction handle is given out once', handle);
    this.txs.set(handle, tx);
    assert(this.txs.size + this.beginsInFlight <= this.limits.txHandlesMax, 'at most txHandlesMax transactions');
    return { tx: handle, txId: tx.id, readOnly: tx.readOnly, readTimestamp: tx.readTimestamp };
  }

  private async changes(request: RequestOf<'changes'>): Promise<unknown> {
    if (this.backend.readChanges === undefined) {
      throw new BasaltError('NOT_IMPLEMENTED', 'this server serves no watches');
    }
    const { table, partition, range, fromTs, toTs, limit } = request;
    return this.backend.readChanges({
      table,
      partition,
      range: range as ScanRange,
      ...(fromTs !== undefined && { fromTs: fromTs as HybridTimestamp }),
      ...(toTs !== undefined && { toTs: toTs as HybridTimestamp }),
      ...(limit !== undefined && { limit }),
    });
  }

  private async get(request: RequestOf<'get'>): Promise<unknown> {
    const { tx, table, key, options } = request;
    if (tx === undefined) checkImplicitRead(request);
    const value = tx === undefined ? await this.backend.get(table, key) : await this.txOf(tx).get(table, key, options);
    return { value };
  }

  private async getAll(request: RequestOf<'getAll'>): Promise<unknown> {
    const { tx, table, keys, options } = request;
    if (tx === undefined) checkImplicitRead(request);
    const values = await this.onTx(tx, (t) => t.getAll(table, keys, options));
    return { values };
  }

  private async put(request: RequestOf<'put'>): Promise<unknown> {
    const value = request.value as Value;
    const { options } = request;
    if (request.tx === undefined) await this.backend.put(request.table, request.key, value, options);
    else await this.txOf(request.tx).put(request.table, request.key, value, options);
    return {};
  }

  private async remove(request: RequestOf<'remove'>): Promise<unknown> {
    if (request.tx === undefined) await this.backend.remove(request.table, request.key);
    else await this.txOf(request.tx).remove(request.table, request.key);
    return {};
  }

  /** Runs `op` in the named transaction, or without a handle in an implicit transaction of its own. */
  private onTx<T>(handle: TxHandle | undefined, op: (tx: BackendTransaction) => Promise<T>): Promise<T> {
    return handle === undefined ? this.backend.transaction(op) : op(this.txOf(handle));
  }

  private async commit(handle: TxHandle, writes: readonly TxWrite[]): Promise<unknown> {
    const tx = this.txOf(handle);
    // From here on the transaction is finishing: a dropped connection must not roll it back.
    this.txs.delete(handle);
    if (writes.length === 0) await tx.commit();
    else if (tx.commitWith !== undefined) await tx.commitWith(writes);
    else {
      // Only a read-only transaction's commit cannot carry writes (a client never sends it any).
      await tx.rollback();
      throw new BasaltError('INVALID_ARGUMENT', 'this transaction cannot carry writes with its commit');
    }
    return {};
  }

  private async rollback(handle: TxHandle): Promise<unknown> {
    const tx = this.txs.get(handle);
    if (tx === undefined) {
      if (handle < this.nextHandle) return {}; // finished already: rollback is a no-op, as on the embedded client
      throw unknownHandle(handle);
    }
    this.txs.delete(handle);
    await tx.rollback();
    return {};
  }

  private txOf(handle: TxHandle): BackendTransaction {
    const tx = this.txs.get(handle);
    if (tx !== undefined) return tx;
    if (handle < this.nextHandle) {
      throw new BasaltError('TX_ALREADY_FINISHED', `transaction ${handle} of this connection is finished`, {
        tx: handle,
      });
    }
    throw unknownHandle(handle);
  }

  private respond(response: ClientResponse): void {
    if (this.state === 'closed') return;
    try {
      this.write(encodeFrame(response, this.limits.frameBytesMax));
    } catch (error) {
      // The result itself cannot travel (too large, not plain data): the request fails with that error instead.
      const data: ErrorData = toErrorData(error);
      this.write(encodeFrame({ id: response.id, error: data }, this.limits.frameBytesMax));
    }
  }

  private send(payload: unknown): void {
    this.write(encodeFrame(payload, this.limits.frameBytesMax));
  }

  /** Queues a frame; the frames answered in one turn of work go out in one socket write. */
  private write(frame: readonly [Buffer, Buffer]): void {
    if (this.state === 'closed') return;
    this.batch.push(frame[0], frame[1]);
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    // Before the event loop moves on: the responses settled by one batch of work share a write, and a lone one
    // waits for nothing else (a 0 ms timer would hold it for the rest of the loop's iteration).
    queueMicrotask(this.flushNow);
  }

  private readonly flushNow = (): void => this.flush();

  private flush(): void {
    this.flushScheduled = false;
    if (this.batch.length === 0 || this.socket.destroyed) {
      this.batch = [];
      return;
    }
    const bytes = Buffer.concat(this.batch);
    this.batch = [];
    this.socket.write(bytes);
    if (this.socket.writableLength > this.limits.writeBufferBytesMax) {
      this.events.diagnose('connection-error', `client does not drain: ${this.socket.writableLength} bytes buffered`);
      this.close();
    }
  }

  /** Answers a frame that breaks the protocol under id 0 (or the hello) and ends the connection. */
  private refuse(code: ErrorData['code'], message: string): void {
    if (this.state === 'closed') return;
    const kind: NetDiagnosticKind =
      code === 'UNAUTHENTICATED'
        ? 'auth-refused'
        : code === 'FRAME_TOO_LARGE'
          ? 'frame-too-large'
          : code === 'HANDSHAKE_FAILED'
            ? 'handshake-failed'
            : 'malformed-frame';
    this.events.diagnose(kind, message);
    const error = { code, message };
    if (this.state === 'handshaking') this.send({ magic: CLIENT_MAGIC, version: CLIENT_PROTOCOL_VERSION, error });
    else this.respond({ id: UNATTRIBUTED_REQUEST_ID, error });
    this.end();
  }

  private clearTimer(): void {
    if (this.timer === undefined) return;
    this.timers.clearTimer(this.timer);
    this.timer = undefined;
  }
}

/** An implicit read (no transaction handle) holds no lock past its own end: `forUpdate` there is refused. */
function checkImplicitRead(request: RequestOf<'get'> | RequestOf<'getAll'>): void {
  if (request.options?.forUpdate === true) {
    throw new BasaltError('INVALID_ARGUMENT', `${request.kind}: forUpdate needs a transaction (tx)`);
  }
}

/** A user name: also a client certificate's CN and part of its file name (`client.<user>.crt`). */
const USER_NAME_PATTERN = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}$/;

function userName(name: string): string {
  if (!USER_NAME_PATTERN.test(name)) {
    throw new BasaltError(
      'INVALID_ARGUMENT',
      `user name ${JSON.stringify(name.slice(0, 64))} may hold letters, digits, _ . and - (at most 63)`,
    );
  }
  return name;
}

function badRole(role: string): BasaltError {
  return new BasaltError(
    'INVALID_ARGUMENT',
    `role ${JSON.stringify(role.slice(0, 64))}: expected admin, readwrite, readonly or none`,
  );
}

function userInfo(user: UserRecord): UserInfo {
  return {
    name: user.name,
    ...(user.role !== undefined && { role: user.role }),
    ...(user.tables !== undefined && { tables: user.tables }),
    password: user.password !== undefined,
  };
}

function unknownHandle(handle: TxHandle): BasaltError {
  return new BasaltError('INVALID_ARGUMENT', `no transaction ${handle} was begun on this connection`, { tx: handle });
}

function remoteOf(socket: Socket): string {
  return `${socket.remoteAddress ?? '?'}:${socket.remotePort ?? '?'}`;
}
