/**
 * Assertions stay on in production: a failed assertion is a bug in Basalt, never an expected outcome.
 * Expected outcomes are values; misuse of the public API throws a coded BasaltError instead.
 */

export class AssertionError extends Error {
  override readonly name = 'AssertionError';
}

export function assert(condition: unknown, message = 'assertion failed'): asserts condition {
  if (!condition) throw new AssertionError(message);
}

/** Marks a branch that exhaustive typing proves unreachable; reaching it at run time is a bug. */
export function unreachable(value: never, message = 'unreachable'): never {
  throw new AssertionError(`${message}: ${JSON.stringify(value, (_k, v) => (typeof v === 'bigint' ? `${v}n` : v))}`);
}
