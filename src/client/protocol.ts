/**
 * The client protocol on a node's client port (DESIGN §4, `connect()`): length-prefixed msgpack frames (the framing
 * and codec of `src/net`), a versioned hello, then requests and responses matched by request id.
 *
 *   client → server  hello     { magic: 'basalt-client', version, user?, password? }
 *   server → client  hello     { magic, version, node, requestsInFlightMax }   or { magic, version, error }, then close
 *   client → server  request   { id, kind, ...fields }             id: a positive safe integer, unique while in flight
 *   server → client  response  { id, result }  |  { id, error }    error: ErrorData (code, message, details, executed, hint)
 *
 * Flow control: a client keeps at most `requestsInFlightMax` requests unanswered on a connection (the server pauses
 * reading at that bound and refuses OVERLOADED past twice it), queueing the rest on its side.
 *
 * Transactions live on the server, named per connection by a small integer handle (`tx`); an operation without `tx`
 * is implicit (a one-phase write, or a single-operation transaction). Timestamps travel as bigints.
 *
 * Every decoded request is validated here before anything acts on it: exact field sets per kind (unknown fields are
 * refused), field types, an unknown kind. A request whose id can be read is answered with a coded error and the
 * connection stays open; a frame whose id cannot be read has nothing to answer to, so it is answered under id 0 and
 * the connection is closed (the peer does not speak this protocol).
 */
import { BasaltError, type ErrorData, type ErrorHint, errorHintProblem, isErrorCode } from '../core/errors.js';
import type { HybridTimestamp } from '../core/ids.js';
import { NO_CEILING } from '../net/body-checks.js';
import { type DirectHandoff, type DirectTx, directHandoffCheck, directTxCheck } from '../tx/core/direct.js';
import { isTxId } from '../tx/core/tx-id.js';

export const CLIENT_MAGIC = 'basalt-client';
export const CLIENT_PROTOCOL_VERSION = 1;

/** Request id 0 is never used by a client: the server answers frames it cannot attribute under it. */
export const UNATTRIBUTED_REQUEST_ID = 0;

/** A transaction's name on one connection, chosen by the server at begin. */
export type TxHandle = number;

export interface ClientHello {
  readonly magic: string;
  readonly version: number;
  /** Log in as this user: with `password`, or (without one) by the connection's client certificate. */
  readonly user?: string;
  readonly password?: string;
}

/** The credentials a client's hello carries. */
export interface HelloCredentials {
  readonly user?: string;
  readonly password?: string;
}

/** An accepted hello names the node and how many requests the client may have in flight on the connection. */
export type ServerHello =
  | {
      readonly magic: string;
      readonly version: number;
      readonly node: string;
      readonly requestsInFlightMax: number;
      /** The user the connection is logged in as (servers that check users). */
      readonly user?: string;
    }
  | { readonly magic: string; readonly version: number; readonly error: ErrorData };

export type ParsedServerHello =
  | { readonly ok: true; readonly node: string; readonly requestsInFlightMax: number; readonly user?: string }
  | { readonly ok: false; readonly error: BasaltError };

/** Options of a read in a transaction (`forUpdate`: lock the rows exclusively; read-write transactions only). */
interface ReadOpts {
  readonly forUpdate?: boolean;
}

/**
 * A read-write begin riding on a transaction's first request (`get`, `getAll`, or a `commit` carrying all its writes)
 * instead of a round trip of its own: the server begins the transaction, runs the request in it and answers
 * `begun: { tx, txId }` with the result, or in the error's details when the request failed (the transaction then stays
 * open, as after any failed operation). A request names `tx` or `begin`, not both.
 */
export interface PiggybackedBegin {
  readonly timeoutMs?: number;
  readonly retryOf?: string;
}

interface RequestFields {
  readonly begin: {
    readonly readOnly?: boolean;
    readonly readTimestamp?: bigint;
    readonly stalenessMs?: number;
    readonly timeoutMs?: number;
    /** Read-write: the id of the attempt this transaction retries (it keeps that attempt's wait-die age). */
    readonly retryOf?: string;
  };
  readonly get: {
    readonly tx?: TxHandle;
    readonly begin?: PiggybackedBegin;
    /** Sent straight to the key's primary's node (tx/core/direct.ts): names the transaction instead of `tx`. */
    readonly direct?: DirectTx;
    readonly table: string;
    readonly key: string;
    readonly options?: ReadOpts;
  };
  readonly getAll: {
    readonly tx?: TxHandle;
    readonly begin?: PiggybackedBegin;
    readonly handoff?: DirectHandoff;
    readonly table: string;
    readonly keys: readonly string[];
    readonly options?: ReadOpts;
  };
  readonly put: {
    readonly tx?: TxHandle;
    readonly direct?: DirectTx;
    readonly table: string;
    readonly key: string;
    readonly value: unknown;
    /** An expiry (a lease is resolved to its end by the client); its range is the coordinator's to check. */
    readonly options?: { readonly ttlMs?: number; readonly expiresAt?: HybridTimestamp };
  };
  readonly putAll: {
    readonly tx?: TxHandle;
    readonly handoff?: DirectHandoff;
    readonly table: string;
    readonly entries: readonly { readonly key: string; readonly value: unknown }[];
  };
  readonly remove: { readonly tx?: TxHandle; readonly direct?: DirectTx; readonly table: string; readonly key: string };
  readonly scan: {
    readonly tx?: TxHandle;
    readonly handoff?: DirectHandoff;
    readonly table: string;
    readonly range: Readonly<Record<string, string>>;
    readonly options?: { readonly limit?: number; readonly partition?: number };
  };
  /** `writes`: the writes the client buffered, carried with the commit (a removal has no value). */
  readonly commit: {
    readonly tx?: TxHandle;
    readonly begin?: PiggybackedBegin;
    /** What the client learned from its direct operations, taken over before the commit. */
    readonly handoff?: DirectHandoff;
    readonly writes?: readonly { readonly table: string; readonly key: string; readonly value?: unknown }[];
  };
  readonly rollback: { readonly tx: TxHandle; readonly handoff?: DirectHandoff };
  readonly createTable: { readonly name: string; readonly options: { partitions: number; replicas: number } };
  readonly dropTable: { readonly name: string };
  readonly tables: Readonly<Record<never, never>>;
  readonly members: Readonly<Record<never, never>>;
  readonly removeNode: { readonly name: string; readonly dead?: boolean };
  /** The primary of each partition of a table, as the server's node knows it (for clients that route by key). */
  readonly primaries: { readonly table: string };
  /** One page of one partition's changes in `(fromTs, toTs]` (a watch's step; toTs absent: the server's `now`). */
  readonly changes: {
    readonly table: string;
    readonly partition: number;
    readonly range: Readonly<Record<string, string>>;
    readonly fromTs?: bigint;
    readonly toTs?: bigint;
    readonly limit?: number;
  };
  /** Users (authorization.ts): the password travels in clear inside TLS and is hashed by the server. */
  readonly createUser: { readonly name: string; readonly password?: string; readonly role?: string };
  readonly removeUser: { readonly name: string };
  /** No password: the user logs in by client certificate only from now on. */
  readonly setPassword: { readonly name: string; readonly password?: string };
  /** A cluster-wide role, or with `table` a role on that table; `none` takes it away. */
  readonly grant: { readonly name: string; readonly role: string; readonly table?: string };
  readonly users: Readonly<Record<never, never>>;
  /** Protected timestamps (metastorage-state.ts): history at `ts` kept cluster-wide for `lifetimeMs`, until renewed. */
  readonly protect: { readonly ts: bigint; readonly lifetimeMs?: number };
  /** `protection`: the protected timestamp's id (`id` is the request's). */
  readonly renew: { readonly protection: string; readonly lifetimeMs?: number };
  readonly release: { readonly protection: string };
}

export type RequestKind = keyof RequestFields;

/** A request as it travels: `{ id, kind, ...fields }`. */
export type ClientRequest = {
  readonly [K in RequestKind]: { readonly id: number; readonly kind: K } & RequestFields[K];
}[RequestKind];

export type RequestOf<K extends RequestKind> = Extract<ClientRequest, { readonly kind: K }>;

export type ClientResponse =
  | { readonly id: number; readonly result: unknown }
  | { readonly id: number; readonly error: ErrorData };

// ---- hello ------------------------------------------------------------------------------------------------------

export function clientHello(credentials: HelloCredentials = {}): ClientHello {
  return {
    magic: CLIENT_MAGIC,
    version: CLIENT_PROTOCOL_VERSION,
    ...(credentials.user !== undefined && { user: credentials.user }),
    ...(credentials.password !== undefined && { password: credentials.password }),
  };
}

/** Longest user name and password a hello may carry. */
const HELLO_USER_CHARS_MAX = 256;
const HELLO_PASSWORD_CHARS_MAX = 1_024;

/** Why a client's hello is refused (HANDSHAKE_FAILED), or undefined when it is acceptable. */
export function clientHelloProblem(value: unknown): string | undefined {
  if (!isRecord(value)) return 'hello is not an object';
  if (value['magic'] !== CLIENT_MAGIC) return 'hello has the wrong magic (not a basalt client)';
  if (value['version'] !== CLIENT_PROTOCOL_VERSION) {
    return `client protocol version ${describe(value['version'])} is not supported (server speaks ${CLIENT_PROTOCOL_VERSION})`;
  }
  const { user, password } = value;
  if (!Object.keys(value).every((k) => ['magic', 'version', 'user', 'password'].includes(k))) {
    return 'hello has only magic, version, user and password';
  }
  if (user !== undefined && !(typeof user === 'string' && user.length > 0 && user.length <= HELLO_USER_CHARS_MAX)) {
    return `hello: user must be a name of 1 to ${HELLO_USER_CHARS_MAX} characters`;
  }
  if (password !== undefined && !(typeof password === 'string' && password.length <= HELLO_PASSWORD_CHARS_MAX)) {
    return `hello: password must be a string of at most ${HELLO_PASSWORD_CHARS_MAX} characters`;
  }
  if (password !== undefined && user === undefined) return 'hello: a password needs a user';
  return undefined;
}

/** The credentials of a hello that `clientHelloProblem` accepted. */
export function helloCredentials(value: unknown): HelloCredentials {
  if (!isRecord(value)) return {};
  const { user, password } = value;
  return {
    ...(typeof user === 'string' && { user }),
    ...(typeof password === 'string' && { password }),
  };
}

/** The server's hello, checked by the client: the node's name, or the coded error the server refused us with. */
export function parseServerHello(value: unknown): ParsedServerHello {
  const refuse = (message: string) => ({ ok: false as const, error: new BasaltError('HANDSHAKE_FAILED', message) });
  if (!isRecord(value) || value['magic'] !== CLIENT_MAGIC) return refuse('the server is not a basalt client port');
  const error = parseErrorData(value['error']);
  if (error !== undefined) return { ok: false, error: BasaltError.fromData(error) };
  if (value['version'] !== CLIENT_PROTOCOL_VERSION) {
    return refuse(`server speaks client protocol version ${describe(value['version'])}`);
  }
  const { node, requestsInFlightMax } = value;
  if (typeof node !== 'string') return refuse('the server hello names no node');
  if (!isPositiveSafeInt(requestsInFlightMax)) return refuse('the server hello has no requestsInFlightMax');
  const user = value['user'];
  return { ok: true, node, requestsInFlightMax, ...(typeof user === 'string' && { user }) };
}

// ---- requests -----------------------------------------------------------------------------------------------------

export type ParsedRequest =
  | { readonly ok: true; readonly request: ClientRequest }
  /** `id` is undefined when the frame could not be attributed to a request: the connection must then close. */
  | { readonly ok: false; readonly id: number | undefined; readonly error: ErrorData };

/** A field's check: a problem description, or undefined when the value is acceptable. */
type FieldCheck = (value: unknown) => string | undefined;

interface Schema {
  readonly required: Readonly<Record<string, FieldCheck>>;
  readonly optional: Readonly<Record<string, FieldCheck>>;
}

const string: FieldCheck = (v) => (typeof v === 'string' ? undefined : 'must be a string');
const boolean: FieldCheck = (v) => (typeof v === 'boolean' ? undefined : 'must be a boolean');
const handle: FieldCheck = (v) => (isPositiveSafeInt(v) ? undefined : 'must be a transaction handle (integer > 0)');
const count: FieldCheck = (v) => (isNonNegativeSafeInt(v) ? undefined : 'must be an integer >= 0');
const timestamp: FieldCheck = (v) => (typeof v === 'bigint' && v > 0n ? undefined : 'must be a positive bigint');
const anything: FieldCheck = () => undefined;
const txIdText: FieldCheck = (v) => (isTxId(v) ? undefined : 'must be a transaction id');

const strings: FieldCheck = (v) =>
  Array.isArray(v) && v.every((s) => typeof s === 'string') ? undefined : 'must be an array of strings';

const entries: FieldCheck = (v) => {
  if (!Array.isArray(v)) return 'must be an array of { key, value }';
  for (const entry of v) {
    if (
      !isRecord(entry) ||
      typeof entry['key'] !== 'string' ||
      !('value' in entry) ||
      Object.keys(entry).length !== 2
    ) {
      return 'must be an array of { key, value } with string keys';
    }
  }
  return undefined;
};

const writes: FieldCheck = (v) => {
  if (!Array.isArray(v)) return 'must be an array of { table, key, value? }';
  for (const write of v) {
    if (
      !isRecord(write) ||
      typeof write['table'] !== 'string' ||
      typeof write['key'] !== 'string' ||
      !Object.keys(write).every((k) => k === 'table' || k === 'key' || k === 'value')
    ) {
      return 'must be an array of { table, key, value? } with string tables and keys';
    }
  }
  return undefined;
};

const range: FieldCheck = (v) => {
  if (!isRecord(v)) return 'must be { prefix } or { start?, end? }';
  const keys = Object.keys(v);
  const allowed = 'prefix' in v ? ['prefix'] : ['start', 'end'];
  if (!keys.every((k) => allowed.includes(k) && typeof v[k] === 'string')) {
    return 'must be { prefix } or { start?, end? } with string bounds';
  }
  return undefined;
};

const record =
  (schema: Schema): FieldCheck =>
  (v) =>
    isRecord(v) ? fieldsProblem(v, schema) : 'must be an object';

const tableOptions = record({ required: { partitions: count, replicas: count }, optional: {} });
const scanOptions = record({ required: {}, optional: { limit: count, partition: count } });
const readOptions = record({ required: {}, optional: { forUpdate: boolean } });
const piggybackedBegin = record({ required: {}, optional: { timeoutMs: count, retryOf: txIdText } });
const putOptions = record({ required: {}, optional: { ttlMs: anything, expiresAt: timestamp } });
const direct: FieldCheck = (v) => directTxCheck(v, NO_CEILING);
const handoff: FieldCheck = (v) => directHandoffCheck(v, NO_CEILING);

const SCHEMAS: Readonly<Record<RequestKind, Schema>> = {
  begin: {
    required: {},
    // timeoutMs: its range (up to the cluster's maximum) is the coordinator's to check.
    optional: { readOnly: boolean, readTimestamp: timestamp, stalenessMs: count, timeoutMs: count, retryOf: txIdText },
  },
  get: {
    required: { table: string, key: string },
    optional: { tx: handle, begin: piggybackedBegin, direct, options: readOptions },
  },
  getAll: {
    required: { table: string, keys: strings },
    optional: { tx: handle, begin: piggybackedBegin, handoff, options: readOptions },
  },
  put: {
    required: { table: string, key: string, value: anything },
    optional: { tx: handle, direct, options: putOptions },
  },
  putAll: { required: { table: string, entries }, optional: { tx: handle, handoff } },
  remove: { required: { table: string, key: string }, optional: { tx: handle, direct } },
  scan: { required: { table: string, range }, optional: { tx: handle, handoff, options: scanOptions } },
  commit: { required: {}, optional: { tx: handle, begin: piggybackedBegin, writes, handoff } },
  rollback: { required: { tx: handle }, optional: { handoff } },
  createTable: { required: { name: string, options: tableOptions }, optional: {} },
  dropTable: { required: { name: string }, optional: {} },
  tables: { required: {}, optional: {} },
  members: { required: {}, optional: {} },
  removeNode: { required: { name: string }, optional: { dead: boolean } },
  primaries: { required: { table: string }, optional: {} },
  changes: {
    required: { table: string, partition: count, range },
    optional: { fromTs: timestamp, toTs: timestamp, limit: count },
  },
  createUser: { required: { name: string }, optional: { password: string, role: string } },
  removeUser: { required: { name: string }, optional: {} },
  setPassword: { required: { name: string }, optional: { password: string } },
  grant: { required: { name: string, role: string }, optional: { table: string } },
  users: { required: {}, optional: {} },
  protect: { required: { ts: timestamp }, optional: { lifetimeMs: count } },
  renew: { required: { protection: string }, optional: { lifetimeMs: count } },
  release: { required: { protection: string }, optional: {} },
};

/** Every request kind the protocol has. */
export const REQUEST_KINDS: readonly RequestKind[] = Object.keys(SCHEMAS) as RequestKind[];

/** Validates one decoded frame as a request. Never throws. */
export function parseRequest(value: unknown): ParsedRequest {
  if (!isRecord(value)) return unattributed('a request must be an object { id, kind, ... }');
  const id = value['id'];
  if (!isPositiveSafeInt(id)) return unattributed('a request id must be an integer > 0');
  const kind = value['kind'];
  if (typeof kind !== 'string' || !Object.hasOwn(SCHEMAS, kind)) {
    return { ok: false, id, error: { code: 'UNKNOWN_MESSAGE', message: `unknown request kind ${describe(kind)}` } };
  }
  const { id: _id, kind: _kind, ...fields } = value;
  const problem = fieldsProblem(fields, SCHEMAS[kind as RequestKind]);
  const problemOrPairing = problem ?? beginPairingProblem(kind, fields);
  if (problemOrPairing !== undefined)
    return { ok: false, id, error: { code: 'INVALID_ARGUMENT', message: `${kind}: ${problemOrPairing}` } };
  return { ok: true, request: value as unknown as ClientRequest };
}

/**
 * A request names its transaction by `tx` or begins one with `begin`, never both; a commit needs one of them. A direct
 * operation names its transaction in `direct` instead; a handoff rides on a request naming its `tx`.
 */
function beginPairingProblem(kind: string, fields: Readonly<Record<string, unknown>>): string | undefined {
  const named = Object.hasOwn(fields, 'tx');
  const begins = Object.hasOwn(fields, 'begin');
  if (named && begins) return 'names a transaction (tx) and begins one (begin): at most one of them';
  if (Object.hasOwn(fields, 'direct') && (named || begins))
    return 'a direct operation (direct) names no tx and no begin';
  if (Object.hasOwn(fields, 'handoff') && !named) return 'a handoff needs the transaction (tx) it belongs to';
  if (kind === 'commit' && !named && !begins) return 'field tx is missing';
  return undefined;
}

function fieldsProblem(fields: Readonly<Record<string, unknown>>, schema: Schema): string | undefined {
  for (const name of Object.keys(schema.required)) {
    if (!Object.hasOwn(fields, name)) return `field ${name} is missing`;
  }
  for (const [name, v] of Object.entries(fields)) {
    const check = Object.hasOwn(schema.required, name)
      ? schema.required[name]
      : Object.hasOwn(schema.optional, name)
        ? schema.optional[name]
        : undefined;
    if (check === undefined) return `unknown field ${JSON.stringify(name.slice(0, 64))}`;
    const problem = check(v);
    if (problem !== undefined) return `${name} ${problem}`;
  }
  return undefined;
}

function unattributed(message: string): ParsedRequest {
  return { ok: false, id: undefined, error: { code: 'MALFORMED_FRAME', message } };
}

// ---- responses ----------------------------------------------------------------------------------------------------

export type ParsedResponse =
  | { readonly ok: true; readonly id: number; readonly result: unknown }
  | { readonly ok: true; readonly id: number; readonly error: BasaltError }
  | { readonly ok: false; readonly problem: string };

/** Checks one decoded frame from the server as a response. Never throws. */
export function parseResponse(value: unknown): ParsedResponse {
  if (!isRecord(value) || !isNonNegativeSafeInt(value['id'])) return { ok: false, problem: 'response without an id' };
  const id = value['id'];
  if (Object.hasOwn(value, 'error')) {
    const error = parseErrorData(value['error']);
    if (error === undefined) return { ok: false, problem: 'response with a malformed error' };
    return { ok: true, id, error: BasaltError.fromData(error) };
  }
  return { ok: true, id, result: value['result'] };
}

function parseErrorData(value: unknown): ErrorData | undefined {
  if (!isRecord(value) || !isErrorCode(value['code']) || typeof value['message'] !== 'string') return undefined;
  const details = value['details'];
  return {
    code: value['code'],
    message: value['message'],
    ...(isRecord(details) && { details }),
    // Anything but a proven "no" reads as unknown: the safe side for a client deciding whether to resend.
    ...(value['executed'] === 'no' && { executed: 'no' as const }),
    // A malformed hint is dropped: the error still reads, only without what it would have steered.
    ...(value['hint'] !== undefined &&
      errorHintProblem(value['hint']) === undefined && { hint: value['hint'] as ErrorHint }),
  };
}

// ---- helpers ------------------------------------------------------------------------------------------------------

export function isRecord(value: unknown): value is Readonly<Record<string, unknown>> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Uint8Array);
}

function isPositiveSafeInt(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) > 0;
}

function isNonNegativeSafeInt(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 0;
}

function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.slice(0, 64));
  return typeof value === 'number' ? String(value) : typeof value;
}
