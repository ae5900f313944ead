/**
 * Coded errors. Every error that reaches a user carries a stable `code` and says whether retrying the same operation
 * may succeed. Errors cross the wire as data ({ code, message, details, executed }) and become exceptions only at the
 * API edge.
 *
 * `retryable` is about the code (a fresh attempt may succeed); `executed` is about one failed request: `'no'` only
 * where the failure proves the request did nothing (it was never sent, or the receiver refused it whole before acting),
 * `'unknown'` everywhere else (a timeout, a connection lost after sending, a proposal abandoned after it may have
 * reached followers' logs). Only a proven `'no'` lets a caller resend a non-idempotent request as if it were new
 * (rule 7); the same code may carry either, so callers ask `executed`, never the code alone.
 */

export const ERROR_CODES = {
  INVALID_ARGUMENT: { retryable: false },
  NOT_FOUND: { retryable: false },
  ALREADY_EXISTS: { retryable: false },
  TIMEOUT: { retryable: true },
  CANCELLED: { retryable: false },
  NODE_UNAVAILABLE: { retryable: true },
  CONNECTION_CLOSED: { retryable: true },
  MALFORMED_FRAME: { retryable: false },
  FRAME_TOO_LARGE: { retryable: false },
  HANDSHAKE_FAILED: { retryable: true },
  /** A message kind no handler is registered for on the receiving node. */
  UNKNOWN_MESSAGE: { retryable: false },
  /** A bounded queue or table is full (e.g. pending requests); retry after backing off. */
  OVERLOADED: { retryable: true },
  PRIMARY_MISS: { retryable: true },
  NOT_LEADER: { retryable: true },
  /** A Raft group refuses a configuration change while an earlier one is not yet applied on its leader. */
  CONF_CHANGE_IN_FLIGHT: { retryable: true },
  UNKNOWN_TABLE: { retryable: false },
  TX_ABORTED: { retryable: true },
  TX_LOCK_CONFLICT: { retryable: true },
  TX_ALREADY_FINISHED: { retryable: false },
  TX_MISMATCHING_OUTCOME: { retryable: false },
  TX_OUTCOME_UNKNOWN: { retryable: false },
  TX_READ_ONLY_TOO_OLD: { retryable: false },
  /** A write (put, remove, putAll) or a locking read (forUpdate) in a read-only transaction: misuse, nothing sent. */
  TX_READ_ONLY: { retryable: false },
  /**
   * An RW request's opSeq is older than the operations already executed for its tx and its response is no longer
   * kept: its outcome is unknown to the sender (rule 7), so the tx must abort; a new tx may retry.
   */
  TX_OP_STALE: { retryable: true },
  TX_TIMEOUT: { retryable: true },
  STORAGE_CLOSED: { retryable: false },
  STORAGE_CORRUPTED: { retryable: false },
  CLOCK_SKEW: { retryable: true },
  INTERNAL: { retryable: false },
  /** A feature of the public API that this version does not provide yet. */
  NOT_IMPLEMENTED: { retryable: false },
} as const satisfies Record<string, { retryable: boolean }>;

export type ErrorCode = keyof typeof ERROR_CODES;

/** Whether a failed request certainly did nothing (`'no'`) or may have taken effect (`'unknown'`). */
export type Execution = 'no' | 'unknown';

/** The wire form of an error. `executed` is sent only when it is `'no'`: absent means unknown. */
export interface ErrorData {
  readonly code: ErrorCode;
  readonly message: string;
  readonly details?: Readonly<Record<string, unknown>>;
  readonly executed?: 'no';
}

export interface BasaltErrorOptions extends ErrorOptions {
  /** Default `'unknown'`: only the place that can prove a request did nothing says `'no'`. */
  readonly executed?: Execution;
}

export class BasaltError extends Error {
  override readonly name: string = 'BasaltError';
  readonly code: ErrorCode;
  readonly retryable: boolean;
  readonly details: Readonly<Record<string, unknown>> | undefined;
  readonly executed: Execution;

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
  }

  toData(): ErrorData {
    const plainMessage = this.message.startsWith(`${this.code}: `)
      ? this.message.slice(this.code.length + 2)
      : this.message;
    return {
      code: this.code,
      message: plainMessage,
      ...(this.details !== undefined && { details: this.details }),
      ...(this.executed === 'no' && { executed: 'no' as const }),
    };
  }

  static fromData(data: ErrorData): BasaltError {
    const code: ErrorCode = isErrorCode(data.code) ? data.code : 'INTERNAL';
    const executed: Execution = data.executed === 'no' ? 'no' : 'unknown';
    return new BasaltError(code, String(data.message), data.details, { executed });
  }
}

/** True only when `error` proves its request did nothing, so that resending it cannot make it take effect twice. */
export function provedUnexecuted(error: unknown): boolean {
  return error instanceof BasaltError && error.executed === 'no';
}

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === 'string' && Object.hasOwn(ERROR_CODES, value);
}

export function isBasaltError(value: unknown, code?: ErrorCode): value is BasaltError {
  return value instanceof BasaltError && (code === undefined || value.code === code);
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
