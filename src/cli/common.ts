/** Helpers shared by the `basalt` subcommands: output, option parsing, signals. */
import { InvalidArgumentError } from 'commander';

export interface TableSpec {
  readonly name: string;
  readonly partitions: number;
  readonly replicas: number;
}

export function log(line: string): void {
  process.stdout.write(`${line}\n`);
}

export function positiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 1) throw new InvalidArgumentError('expected a positive integer');
  return n;
}

/** A TCP port; 0 picks an ephemeral one. */
export function port(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0 || n > 65_535) throw new InvalidArgumentError('expected a port (0-65535)');
  return n;
}

/** `name[:partitions[:replicas]]`, accumulated over repeated options. */
export function tableSpec(value: string, previous: readonly TableSpec[]): TableSpec[] {
  const [name, partitions = '8', replicas = '3'] = value.split(':');
  if (name === undefined || name.length === 0) throw new InvalidArgumentError('expected name[:partitions[:replicas]]');
  return [...previous, { name, partitions: positiveInt(partitions), replicas: positiveInt(replicas) }];
}

/**
 * Resolves on the first SIGINT or SIGTERM; a second SIGINT exits at once. Call it before printing anything a parent
 * process may react to: a signal that arrives before a listener exists kills the process outright.
 */
export function untilSignal(): Promise<void> {
  return new Promise((resolve) => {
    const onSignal = (signal: NodeJS.Signals): void => {
      log(`basalt: ${signal} received`);
      process.once('SIGINT', () => process.exit(130));
      resolve();
    };
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
  });
}
