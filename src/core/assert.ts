/**
 * Assertions stay on in production: a failed assertion is a bug in Basalt, never an expected outcome.
 * Expected outcomes are values; misuse of the public API throws a coded BasaltError instead; what a peer or a client
 * sent is validated, never asserted.
 *
 * The message is a constant string. Values that explain a failure go in the extra arguments and are formatted only
 * when the check fails, so a passing assertion builds no string: a template literal message would be built on every
 * call, which on a hot path (every log entry, every lock, every tx state update) costs several times the check itself.
 * Once the caller is optimized the rest array of a passing call is not allocated either.
 */

export class AssertionError extends Error {
  override readonly name = 'AssertionError';
}

/** Throws AssertionError when `condition` is falsy; `details` (if any) are appended to the message then. */
export function assert(condition: unknown, message = 'assertion failed', ...details: unknown[]): asserts condition {
  if (!condition) throw new AssertionError(withDetails(message, details));
}

/** Marks a branch that exhaustive typing proves unreachable; reaching it at run time is a bug. */
export function unreachable(value: never, message = 'unreachable'): never {
  throw new AssertionError(`${message}: ${formatDetail(value)}`);
}

function withDetails(message: string, details: readonly unknown[]): string {
  return details.length === 0 ? message : `${message} (${details.map(formatDetail).join(', ')})`;
}

/** A value as a failure message shows it: bigints with their `n`, strings quoted, records as JSON. */
function formatDetail(value: unknown): string {
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value !== 'object' || value === null)
    return typeof value === 'string' ? JSON.stringify(value) : String(value);
  try {
    return JSON.stringify(value, (_k, v) => (typeof v === 'bigint' ? `${v}n` : v)) ?? String(value);
  } catch {
    return String(value);
  }
}
