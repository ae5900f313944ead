/**
 * Structured logs of the `basalt` commands: pino JSON lines, one per event, each with the node name, to stderr or a
 * file. Human progress lines stay on stdout (`log` in common.ts); these are for machines. pino is imported here only:
 * protocol code never logs directly, the command logs at the node's edges (start, leader changes, background
 * failures, readiness, stop).
 */
import { InvalidArgumentError } from 'commander';
import { pino } from 'pino';

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** The small interface the command code uses (pino's, narrowed). */
export interface NodeLogger {
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
  error(fields: object, message: string): void;
  debug(fields: object, message: string): void;
  flush(): void;
}

export interface LoggerOptions {
  readonly node: string;
  readonly level: LogLevel;
  /** Append to this file; stderr when absent. */
  readonly file?: string;
}

export function createNodeLogger(options: LoggerOptions): NodeLogger {
  // Synchronous writes: a line logged just before a crash or kill -9 is not lost in a buffer.
  const destination = pino.destination({ dest: options.file ?? 2, sync: true, mkdir: true, append: true });
  return pino({ level: options.level, base: { node: options.node } }, destination);
}

export function logLevel(value: string): LogLevel {
  if (!(LOG_LEVELS as readonly string[]).includes(value)) {
    throw new InvalidArgumentError(`expected a log level: ${LOG_LEVELS.join(', ')}`);
  }
  return value as LogLevel;
}
