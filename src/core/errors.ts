/**
 * Coded errors. Every error that reaches a user carries a stable `code` and says whether retrying the same operation
 * may succeed. Errors cross the wire as data ({ code, message, details, executed, hint }) and become exceptions only
 * at the API edge.
 *
 * `retryable` is about the code (a fresh attempt may succeed); `executed` is about one failed request: `'no'` only
 * where the failure proves the request did nothing (it was never sent, or the receiver refused it whole before acting),
 * `'unknown'` everywhere else (a timeout, a connection lost after sending, a proposal abandoned after it may have
 * reached followers' logs). Only a proven `'no'` lets a caller resend a non-idempotent request as if it were new
 * (rule 7); the same code may carry either, so callers ask `executed`, never the code alone.
 *
 * `details` are for people (logs, messages); what a receiver acts on travels as a typed `hint` (ErrorHint), checked
 * like `executed` when it is decoded: where a PRIMARY_MISS says the lease is, the outcome a TX_MISMATCHING_OUTCOME
 * found stored, the older tx a wait-die denial names, the foreign intent a read or write met under its lock.
 */
import type { HybridTimestamp, NodeId, NodeName, PartitionId, TxId } from './ids.js';
import { LIMITS } from './limits.js';

/**
 * Every error code a {@link BasaltError} can carry, with whether a fresh attempt of the same operation may succeed
 * (`retryable`). docs/operating.md explains each under "Troubleshooting by error code".
 */
export const ERROR_CODES = {
  /** A bad option or value (a timeout above its maximum, a read timestamp too far in the future, …): misuse, fixed by the caller. */
  INVALID_ARGUMENT: { retryable: false },
  /** Something named does not exist where it was looked for (a Raft group that does not run on that node, a harness node). */
  NOT_FOUND: { retryable: false },
  /** Creating what exists already: a table, or a harness node name in use. */
  ALREADY_EXISTS: { retryable: false },
  /** A request or a write intent resolution timed out; whether a request took effect is in `executed`. */
  TIMEOUT: { retryable: true },
  /** The request was cancelled before or while it was sent, or its coordinator stopped. */
  CANCELLED: { retryable: false },
  /** A node could not be reached, or a commit partition waits for a coordinator to count as gone; retry with backoff. */
  NODE_UNAVAILABLE: { retryable: true },
  /** The connection dropped; a request in flight may have taken effect unless `executed` is `'no'`. */
  CONNECTION_CLOSED: { retryable: true },
  /** Bytes that are not a well-formed frame: a peer or client of another version, or not a Basalt peer. */
  MALFORMED_FRAME: { retryable: false },
  /**
   * A peer message whose envelope is sound but whose body is not a well-formed message of its kind (a missing or
   * mistyped field, a negative index, an outcome without its commitTs): refused whole before any handler ran.
   */
  MALFORMED_MESSAGE: { retryable: false },
  /** A frame above the size limit: refused, and the connection closed. */
  FRAME_TOO_LARGE: { retryable: false },
  /** A peer or client hello failed or was refused (none in time, a refused peer); the node's log says why. */
  HANDSHAKE_FAILED: { retryable: true },
  /** A message kind no handler is registered for on the receiving node. */
  UNKNOWN_MESSAGE: { retryable: false },
  /** A bounded queue or table is full (e.g. pending requests); retry after backing off. */
  OVERLOADED: { retryable: true },
  /** The replica asked does not act as the partition's primary now; the `hint` names the lease it knows, clients follow it. */
  PRIMARY_MISS: { retryable: true },
  /** The Raft group's leader is elsewhere or changed; retry. */
  NOT_LEADER: { retryable: true },
  /** A Raft group refuses a configuration change while an earlier one is not yet applied on its leader. */
  CONF_CHANGE_IN_FLIGHT: { retryable: true },
  /** No table of that name, or it was dropped. */
  UNKNOWN_TABLE: { retryable: false },
  /** The transaction was aborted (a write could not be confirmed, an orphan it waited for was recovered, a lease ended before commit); run it again. */
  TX_ABORTED: { retryable: true },
  /** Wait-die: the request died against an older transaction's lock, or a foreign intent under its lock; retry the transaction. */
  TX_LOCK_CONFLICT: { retryable: true },
  /** An operation on a transaction that is finished, finishing or rolled back. */
  TX_ALREADY_FINISHED: { retryable: false },
  /** A finish arrived after recovery stored another outcome; the `hint` carries the stored one (rule 14). */
  TX_MISMATCHING_OUTCOME: { retryable: false },
  /** A commit, or an implicit write, may or may not have applied: read the data to find out; never retried blindly. */
  TX_OUTCOME_UNKNOWN: { retryable: false },
  /** The read timestamp is below the node's low watermark: the versions it needs may be gone. */
  TX_READ_ONLY_TOO_OLD: { retryable: false },
  /** A write (put, remove, putAll) or a locking read (forUpdate) in a read-only transaction: misuse, nothing sent. */
  TX_READ_ONLY: { retryable: false },
  /**
   * An RW request's opSeq is older than the operations already executed for its tx and its response is no longer
   * kept: its outcome is unknown to the sender (rule 7), so the tx must abort; a new tx may retry.
   */
  TX_OP_STALE: { retryable: true },
  /**
   * The id of a transaction begun lazily (`{ lazy: true }`, `transaction()` over TCP) was read before its first
   * operation reached its node.
   */
  TX_NOT_BEGUN: { retryable: false },
  /** The transaction outlived its timeout (`timeoutMs`, 30 s by default); no commit is sent at or past its deadline. */
  TX_TIMEOUT: { retryable: true },
  /**
   * A watch asked for changes from a timestamp below what the serving node still retains (its low watermark, the
   * storage GC horizon): the details name the oldest timestamp still available. Never a silent gap.
   */
  WATCH_TOO_OLD: { retryable: false },
  /** A watch whose consumer fell so far behind that the changes it still had to read are no longer retained. */
  WATCH_FELL_BEHIND: { retryable: false },
  /** The storage was closed: the node is stopping. */
  STORAGE_CLOSED: { retryable: false },
  /** Stored data failed a check (a hole in the Raft log, a malformed record); read the node's log. */
  STORAGE_CORRUPTED: { retryable: false },
  /** A message's timestamp was more than the maximum clock skew ahead of the receiver's clock; fix the clocks. */
  CLOCK_SKEW: { retryable: true },
  /**
   * Certificates or keys that cannot be used: a file missing or unreadable, a key that is not its certificate's, a
   * certificate expired or not yet valid, or one that does not name this node. Fixed by new material, not by retrying.
   */
  TLS_CONFIG_INVALID: { retryable: false },
  /** A peer whose TLS certificate does not name the member its hello claims to be: refused, never trusted. */
  PEER_CERT_MISMATCH: { retryable: false },
  /**
   * A backup file that does not match its manifest (checksum, size, row count, order of keys), is missing, truncated
   * or unreadable, or a manifest that is not valid: refused before anything is restored; the message names the file.
   */
  BACKUP_CORRUPT: { retryable: false },
  /** An incremental backup whose parent is missing, is another backup than the one recorded, or does not precede it. */
  BACKUP_CHAIN_BROKEN: { retryable: false },
  /** A manifest of another format or of a version this release cannot read. */
  BACKUP_FORMAT: { retryable: false },
  /** A restore into a table that holds rows not written by a restore of the same backup. */
  RESTORE_TARGET_NOT_EMPTY: { retryable: false },
  /**
   * A client request on a node that checks users, from a connection that has not logged in (no credentials, a wrong
   * password, a client certificate that failed, a user since removed, too many failed logins): refused, nothing done.
   */
  UNAUTHENTICATED: { retryable: false },
  /** A logged-in user's request that its roles do not allow: refused before anything was done. */
  PERMISSION_DENIED: { retryable: false },
  /** `basalt start` on an address other than loopback without `--certs-dir` (or `--insecure` to run without TLS). */
  CERTS_REQUIRED: { retryable: false },
  /**
   * A lease that was never granted, was revoked, or ended (its ttl passed without a keepalive): the keys attached to
   * it are gone. Grant a new lease.
   */
  LEASE_NOT_FOUND: { retryable: false },
  /** A key attached to a lease that already holds LIMITS.leaseKeysMax keys: nothing was written. */
  LEASE_KEYS_MAX: { retryable: false },
  /** A bug: an invariant did not hold. Report it with the node's log. */
  INTERNAL: { retryable: false },
  /** A feature of the public API that this version does not provide yet. */
  NOT_IMPLEMENTED: { retryable: false },
} as const satisfies Record<string, { retryable: boolean }>;

/** One of the codes of {@link ERROR_CODES}. */
export type ErrorCode = keyof typeof ERROR_CODES;

/** Whether a failed request certainly did nothing (`'no'`) or may have taken effect (`'unknown'`). */
export type Execution = 'no' | 'unknown';

/** A lease holder as a PRIMARY_MISS names it: its node name and the lease token (holder, start). */
export interface MissHolder {
  readonly name: NodeName;
  readonly token: {
    readonly holder: { readonly nodeId: NodeId; readonly incarnation: string };
    readonly start: HybridTimestamp;
  };
}

/** A tx outcome as a mismatch carries it (the shape of tx/core/messages.ts's TxOutcome). */
export type HintOutcome =
  | { readonly state: 'ABORTED' }
  | { readonly state: 'COMMITTED'; readonly commitTs: HybridTimestamp };

/** What an error tells its receiver to do next, by kind (see the module header). */
export type ErrorHint =
  /** PRIMARY_MISS: this replica does not act as primary of `partitionId` (`reason`); the lease it knows, if any. */
  | {
      /** The kind of hint. */
      readonly kind: 'primary-miss';
      /** The partition asked for. */
      readonly partitionId: PartitionId;
      /** Why this replica does not act as primary. */
      readonly reason: string;
      /** The lease holder this replica knows of, if any: where to ask next. */
      readonly holder?: MissHolder;
    }
  /** TX_MISMATCHING_OUTCOME: the outcome the commit partition stored (rule 14). */
  | {
      /** The kind of hint. */
      readonly kind: 'mismatched-outcome';
      /** The outcome stored first, which stands. */
      readonly outcome: HintOutcome;
    }
  /** TX_LOCK_CONFLICT by wait-die: the older tx whose lock the request died against. */
  | {
      /** The kind of hint. */
      readonly kind: 'wait-die';
      /** The older transaction holding the lock. */
      readonly blocker: TxId;
    }
  /** TX_LOCK_CONFLICT on a foreign intent under the request's lock (its writer lost its locks). */
  | {
      /** The kind of hint. */
      readonly kind: 'foreign-intent';
      /** The key of the intent. */
      readonly key: string;
      /** The transaction that wrote the intent. */
      readonly intentTxId: TxId;
    };

export type ErrorHintKind = ErrorHint['kind'];

/** The wire form of an error. `executed` is sent only when it is `'no'`: absent means unknown. */
export interface ErrorData {
  /** The error's code. */
  readonly code: ErrorCode;
  /** What happened, for people. */
  readonly message: string;
  /** Facts for people (see {@link BasaltError.details}). */
  readonly details?: Readonly<Record<string, unknown>>;
  /** Present, as `'no'`, only when the request certainly did nothing. */
  readonly executed?: 'no';
  /** What the receiver should do next (see {@link ErrorHint}). */
  readonly hint?: ErrorHint;
}

export interface BasaltErrorOptions extends ErrorOptions {
  /** Default `'unknown'`: only the place that can prove a request did nothing says `'no'`. */
  readonly executed?: Execution;
  readonly hint?: ErrorHint;
}

/**
 * The error every Basalt API throws or rejects with: a stable `code`, whether retrying may succeed, and whether the
 * failed request certainly did nothing.
 *
 * ```ts
 * try {
 *   await client.put('demo', 'k', 1);
 * } catch (error) {
 *   if (isBasaltError(error, 'TX_OUTCOME_UNKNOWN')) console.log('read k to learn whether the put applied');
 * }
 * ```
 */
export class BasaltError extends Error {
  /** Always `'BasaltError'`. */
  override readonly name: string = 'BasaltError';
  /** The stable code of the condition (see {@link ERROR_CODES}). */
  readonly code: ErrorCode;
  /** Whether a fresh attempt of the same operation may succeed: the code's `retryable`. */
  readonly retryable: boolean;
  /** Facts for people (logs, messages); programs act on `code`, `executed` and `hint`. */
  readonly details: Readonly<Record<string, unknown>> | undefined;
  /** `'no'` only where the failure proves the request did nothing; `'unknown'` otherwise. */
  readonly executed: Execution;
  /** What the receiver should do next, for the codes that say (a PRIMARY_MISS's lease, a mismatch's outcome, …). */
  readonly hint: ErrorHint | undefined;

  constructor(
    code: ErrorCode,
    message: string,
    details?: Readonly<Record<string, unknown>>,
    options?: BasaltErrorOptions,
  ) {
    super(`${code}: ${message}`, options);
    this.code = code;
    this.retryable = ERROR_CODES[code].retryable;
    this.details = details;
    this.executed = options?.executed ?? 'unknown';
    this.hint = options?.hint;
  }

  /** The wire form of this error. */
  toData(): ErrorData {
    const plainMessage = this.message.startsWith(`${this.code}: `)
      ? this.message.slice(this.code.length + 2)
      : this.message;
    return {
      code: this.code,
      message: plainMessage,
      ...(this.details !== undefined && { details: this.details }),
      ...(this.executed === 'no' && { executed: 'no' as const }),
      ...(this.hint !== undefined && { hint: this.hint }),
    };
  }

  /** `data` as checked on decode (errorHintProblem); a hint of a kind this node does not know is dropped. */
  static fromData(data: ErrorData): BasaltError {
    const code: ErrorCode = isErrorCode(data.code) ? data.code : 'INTERNAL';
    const executed: Execution = data.executed === 'no' ? 'no' : 'unknown';
    const hint = isKnownHint(data.hint) ? data.hint : undefined;
    return new BasaltError(code, String(data.message), data.details, { executed, ...(hint !== undefined && { hint }) });
  }
}

/** The hint of kind `kind` that `error` carries, if it is a BasaltError carrying one. */
export function hintOf<K extends ErrorHintKind>(error: unknown, kind: K): Extract<ErrorHint, { kind: K }> | undefined {
  if (!(error instanceof BasaltError) || error.hint?.kind !== kind) return undefined;
  return error.hint as Extract<ErrorHint, { kind: K }>;
}

/** The holder a PRIMARY_MISS names, if it names one. */
export function missHolder(error: unknown): NodeName | undefined {
  return isBasaltError(error, 'PRIMARY_MISS') ? hintOf(error, 'primary-miss')?.holder?.name : undefined;
}

// ---- hint validation (what a peer sent) ----------------------------------------------------------------------------

/** Bounds of a hybrid timestamp (hlc/timestamp.ts's MIN_TIMESTAMP and MAX_TIMESTAMP; core imports nothing above). */
const TIMESTAMP_MIN = 1n;
const TIMESTAMP_MAX = (1n << 64n) - 1n;

const HINT_FIELDS: Readonly<Record<ErrorHintKind, readonly string[]>> = {
  'primary-miss': ['kind', 'partitionId', 'reason', 'holder'],
  'mismatched-outcome': ['kind', 'outcome'],
  'wait-die': ['kind', 'blocker'],
  'foreign-intent': ['kind', 'key', 'intentTxId'],
};

/**
 * Why `value` is not a well-formed hint, or undefined if it is one. A hint of a kind this node does not know passes
 * (a newer peer may send it; fromData drops it), as unknown codes do.
 */
export function errorHintProblem(value: unknown): string | undefined {
  if (!isPlainRecord(value)) return 'error.hint is not an object';
  const kind = value['kind'];
  if (typeof kind !== 'string' || kind.length === 0) return 'error.hint.kind is not a non-empty string';
  if (!Object.hasOwn(HINT_FIELDS, kind)) return undefined;
  const fields = HINT_FIELDS[kind as ErrorHintKind];
  const extra = Object.keys(value).find((key) => !fields.includes(key));
  if (extra !== undefined) return `unexpected field error.hint.${extra}`;
  switch (kind as ErrorHintKind) {
    case 'primary-miss':
      return (
        stringProblem(value['partitionId'], 'partitionId') ??
        stringProblem(value['reason'], 'reason') ??
        (value['holder'] === undefined ? undefined : holderProblem(value['holder']))
      );
    case 'mismatched-outcome':
      return outcomeProblem(value['outcome']);
    case 'wait-die':
      return stringProblem(value['blocker'], 'blocker');
    case 'foreign-intent':
      // A key's UTF-8 form has at least as many bytes as it has characters.
      return (
        stringProblem(value['key'], 'key', LIMITS.keyBytesMax, true) ?? stringProblem(value['intentTxId'], 'intentTxId')
      );
  }
}

function isKnownHint(value: unknown): value is ErrorHint {
  return (
    isPlainRecord(value) && Object.hasOwn(HINT_FIELDS, String(value['kind'])) && errorHintProblem(value) === undefined
  );
}

function holderProblem(holder: unknown): string | undefined {
  if (!isPlainRecord(holder)) return 'error.hint.holder is not an object';
  const token = holder['token'];
  if (!isPlainRecord(token)) return 'error.hint.holder.token is not an object';
  const tokenHolder = token['holder'];
  if (!isPlainRecord(tokenHolder)) return 'error.hint.holder.token.holder is not an object';
  return (
    stringProblem(holder['name'], 'holder.name') ??
    stringProblem(tokenHolder['nodeId'], 'holder.token.holder.nodeId') ??
    stringProblem(tokenHolder['incarnation'], 'holder.token.holder.incarnation') ??
    timestampProblem(token['start'], 'holder.token.start')
  );
}

function outcomeProblem(outcome: unknown): string | undefined {
  if (!isPlainRecord(outcome)) return 'error.hint.outcome is not an object';
  if (outcome['state'] === 'ABORTED') return outcome['commitTs'] === undefined ? undefined : 'ABORTED with a commitTs';
  if (outcome['state'] === 'COMMITTED') return timestampProblem(outcome['commitTs'], 'outcome.commitTs');
  return 'error.hint.outcome.state is not COMMITTED or ABORTED';
}

/** An id (node, partition, tx, incarnation) or a reason: a non-empty string of bounded length. */
function stringProblem(
  value: unknown,
  what: string,
  charsMax: number = LIMITS.identityCharsMax,
  mayBeEmpty = false,
): string | undefined {
  if (typeof value !== 'string' || (!mayBeEmpty && value.length === 0)) return `error.hint.${what} is not a string`;
  return value.length > charsMax ? `error.hint.${what} is longer than ${charsMax} characters` : undefined;
}

function timestampProblem(value: unknown, what: string): string | undefined {
  if (typeof value !== 'bigint' || value < TIMESTAMP_MIN || value >= TIMESTAMP_MAX) {
    return `error.hint.${what} is not a timestamp`;
  }
  return undefined;
}

function isPlainRecord(value: unknown): value is Readonly<Record<string, unknown>> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Uint8Array);
}

/** True only when `error` proves its request did nothing, so that resending it cannot make it take effect twice. */
export function provedUnexecuted(error: unknown): boolean {
  return error instanceof BasaltError && error.executed === 'no';
}

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === 'string' && Object.hasOwn(ERROR_CODES, value);
}

/** Whether `value` is a {@link BasaltError}, and when `code` is given, one with that code. */
export function isBasaltError(value: unknown, code?: ErrorCode): value is BasaltError {
  return value instanceof BasaltError && (code === undefined || value.code === code);
}

/** Anything thrown as a BasaltError; an uncoded failure becomes INTERNAL (with it as the cause). */
export function asBasaltError(error: unknown): BasaltError {
  if (error instanceof BasaltError) return error;
  return new BasaltError('INTERNAL', error instanceof Error ? error.message : String(error), undefined, {
    cause: error,
  });
}

/** Converts anything thrown into wire data; unknown failures become INTERNAL. */
export function toErrorData(error: unknown): ErrorData {
  if (error instanceof BasaltError) return error.toData();
  const message = error instanceof Error ? error.message : String(error);
  return { code: 'INTERNAL', message };
}

export function invalidArgument(message: string, details?: Readonly<Record<string, unknown>>): BasaltError {
  return new BasaltError('INVALID_ARGUMENT', message, details);
}
