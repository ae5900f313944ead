/**
 * Coded errors. Every error that reaches a user carries a stable `code` and says whether retrying the same operation
 * may succeed. Errors cross the wire as data ({ code, message, details }) and become exceptions only at the API edge.
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

/** The wire form of an error. */
export interface ErrorData {
  readonly code: ErrorCode;
  readonly message: string;
  readonly details?: Readonly<Record<string, unknown>>;
}

export class BasaltError extends Error {
  override readonly name: string = 'BasaltError';
  readonly code: ErrorCode;
  readonly retryable: boolean;
  readonly details: Readonly<Record<string, unknown>> | undefined;

  constructor(code: ErrorCode, message: string, details?: Readonly<Record<string, unknown>>, options?: ErrorOptions) {
    super(`${code}: ${message}`, options);
    this.code = code;
    this.retryable = ERROR_CODES[code].retryable;
    this.details = details;
  }

  toData(): ErrorData {
    const plainMessage = this.message.startsWith(`${this.code}: `)
      ? this.message.slice(this.code.length + 2)
      : this.message;
    return this.details === undefined
      ? { code: this.code, message: plainMessage }
      : { code: this.code, message: plainMessage, details: this.details };
  }

  static fromData(data: ErrorData): BasaltError {
    const code: ErrorCode = isErrorCode(data.code) ? data.code : 'INTERNAL';
    return new BasaltError(code, String(data.message), data.details);
  }
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
