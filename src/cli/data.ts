/**
 * `basalt get | put | rm | scan | txn`: data commands against a running cluster over the client protocol, as etcdctl
 * is for etcd. Values are JSON in and out (`--output json`, one line per result, the default) or tab-separated text
 * (`--output table`). `--connect` takes several addresses, tried in order until one answers.
 *
 * Exit codes a script can rely on (DATA_EXIT_CODES): 0 done, 2 invalid input (malformed JSON, a bad script or
 * argument: nothing was sent, so nothing was written), 3 not found (`get` of a missing key), 4 unavailable or
 * retryable (no node answered, or the cluster refused for now: trying again may succeed), 5 the outcome is unknown
 * (a write that may or may not have applied), 6 any other refusal (its code is printed).
 *
 * `scan` without `--limit` streams the whole range from one snapshot, page by page (client/scan-pages.ts).
 *
 * `watch` prints every committed change of a table, a prefix or a range, one line each, as it happens (client/watch.ts):
 * `{ key, value, commitTs }` or `{ key, deleted: true, commitTs }`, and with `--progress` `{ resolvedTs }` marks. It
 * reconnects by itself across the `--connect` addresses and resumes where it stood; a watch started again with
 * `--from <the last resolvedTs printed>` misses nothing (changes above it may repeat: dedupe on key and commitTs).
 * Timestamps print as decimal strings and `--from` takes one. It runs until interrupted (exit 0) or it fails.
 *
 * `txn` runs a JSON script as one read-write transaction (retried as `client.transaction` retries), or read-only with
 * `--read-only`: an array of `{ op: 'get' | 'put' | 'rm' | 'scan', table, key?, value?, prefix?, start?, end?,
 * limit? }`, a put optionally with `ttlMs` or `lease` (docs/concepts/expiry.md). The whole script is checked before
 * anything is sent.
 */
import { readFileSync } from 'node:fs';
import { type ConnectOptions, connect, type RemoteClient, type RemoteTransaction } from '../client/remote.js';
import { scanPages } from '../client/scan-pages.js';
import { BasaltError, invalidArgument, isBasaltError } from '../core/errors.js';
import type { HybridTimestamp } from '../core/ids.js';
import type { Value } from '../storage/mv-partition-storage.js';
import type { PutOptions, ScanRange } from '../tx/core/user-input.js';
import { log } from './common.js';
import { type CredentialFlags, credentialOptions } from './users.js';

export const DATA_EXIT_CODES = {
  ok: 0,
  invalid: 2,
  notFound: 3,
  unavailable: 4,
  unknown: 5,
  refused: 6,
} as const;

export type Output = 'json' | 'table';

export interface DataOptions {
  /** Addresses `host:port`, tried in order. */
  readonly connect: readonly string[];
  readonly output: Output;
  /** `--certs-dir` and `--user` (users.ts): TLS and a login, for nodes with certificates. */
  readonly credentials?: CredentialFlags;
}

export type DataOp =
  | { readonly op: 'get'; readonly table: string; readonly key: string }
  | {
      readonly op: 'put';
      readonly table: string;
      readonly key: string;
      readonly value: Value;
      readonly options?: PutOptions;
    }
  | { readonly op: 'rm'; readonly table: string; readonly key: string }
  | { readonly op: 'scan'; readonly table: string; readonly range: ScanRange; readonly limit?: number };

/** Parses a JSON value given on the command line (or read from stdin for `-`); INVALID_ARGUMENT if malformed. */
export function parseValue(text: string): Value {
  try {
    return JSON.parse(text) as Value;
  } catch (error) {
    throw invalidArgument(`the value is not JSON: ${error instanceof Error ? error.message : String(error)}`);
  }
}

/** A `txn` script: an array of operations, every one checked before anything runs. */
export function parseScript(text: string): DataOp[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw invalidArgument(`the script is not JSON: ${error instanceof Error ? error.message : String(error)}`);
  }
  if (!Array.isArray(parsed)) throw invalidArgument('a txn script is a JSON array of operations');
  return parsed.map((item, i) => parseOp(item, i));
}

function parseOp(item: unknown, i: number): DataOp {
  if (typeof item !== 'object' || item === null) throw invalidArgument(`operation ${i} is not an object`);
  const o = item as Record<string, unknown>;
  const table = o['table'];
  if (typeof table !== 'string' || table === '') throw invalidArgument(`operation ${i} needs a table`);
  const key = o['key'];
  const needKey = (): string => {
    if (typeof key !== 'string') throw invalidArgument(`operation ${i} (${String(o['op'])}) needs a string key`);
    return key;
  };
  switch (o['op']) {
    case 'get':
      return { op: 'get', table, key: needKey() };
    case 'rm':
      return { op: 'rm', table, key: needKey() };
    case 'put':
      if (!('value' in o)) throw invalidArgument(`operation ${i} (put) needs a value`);
      return { op: 'put', table, key: needKey(), value: o['value'] as Value, ...putOptionsOf(o, i) };
    case 'scan': {
      const limit = o['limit'];
      if (limit !== undefined && (typeof limit !== 'number' || !Number.isSafeInteger(limit) || limit < 1)) {
        throw invalidArgument(`operation ${i} (scan) has a bad limit`);
      }
      return { op: 'scan', table, range: rangeOf(o, i), ...(typeof limit === 'number' && { limit }) };
    }
    default:
      throw invalidArgument(`operation ${i} has an unknown op ${JSON.stringify(o['op'])}: get, put, rm or scan`);
  }
}

/** A put's `ttlMs` or `lease` (at most one); their ranges are the cluster's to check. */
function putOptionsOf(o: Record<string, unknown>, i: number): { options?: PutOptions } {
  const { ttlMs, lease } = o;
  if (ttlMs !== undefined && lease !== undefined)
    throw invalidArgument(`operation ${i} (put): ttlMs or lease, not both`);
  if (ttlMs !== undefined) {
    if (typeof ttlMs !== 'number') throw invalidArgument(`operation ${i} (put): ttlMs is a number`);
    return { options: { ttlMs } };
  }
  if (lease !== undefined) {
    if (typeof lease !== 'string') throw invalidArgument(`operation ${i} (put): lease is a lease id`);
    return { options: { lease } };
  }
  return {};
}

function rangeOf(o: Record<string, unknown>, i: number): ScanRange {
  const { prefix, start, end } = o;
  const bad = [prefix, start, end].some((v) => v !== undefined && typeof v !== 'string');
  if (bad) throw invalidArgument(`operation ${i} (scan): prefix, start and end are strings`);
  if (prefix !== undefined) return { prefix: prefix as string };
  return { ...(start !== undefined && { start: start as string }), ...(end !== undefined && { end: end as string }) };
}

/** The first of `addresses` that answers; NODE_UNAVAILABLE naming them all if none does. */
export async function connectAny(addresses: readonly string[], options: ConnectOptions = {}): Promise<RemoteClient> {
  const failures: string[] = [];
  for (const address of addresses) {
    try {
      return await connect(address, options);
    } catch (error) {
      failures.push(`${address}: ${error instanceof Error ? error.message : String(error)}`);
    }
  }
  throw new BasaltError('NODE_UNAVAILABLE', `no node answered (${failures.join('; ')})`);
}

/** Runs `fn` on a client of the cluster and closes it; returns the exit code, printing an error if there was one. */
export async function withClient(options: DataOptions, fn: (client: RemoteClient) => Promise<number>): Promise<number> {
  let client: RemoteClient | undefined;
  try {
    client = await connectAny(options.connect, await credentialOptions(options.credentials ?? {}));
    return await fn(client);
  } catch (error) {
    return reportFailure(error);
  } finally {
    await client?.close().catch(() => {});
  }
}

/** Prints a failure on stderr and returns its exit code (see the module header). */
export function reportFailure(error: unknown): number {
  const message = error instanceof Error ? error.message : String(error);
  if (!isBasaltError(error)) {
    process.stderr.write(`basalt: ${message}\n`);
    return DATA_EXIT_CODES.refused;
  }
  process.stderr.write(`basalt: ${error.code}: ${message}\n`);
  if (error.code === 'INVALID_ARGUMENT') return DATA_EXIT_CODES.invalid;
  if (error.code === 'TX_OUTCOME_UNKNOWN') return DATA_EXIT_CODES.unknown;
  if (error.retryable || error.code === 'NODE_UNAVAILABLE' || error.code === 'CONNECTION_CLOSED') {
    return DATA_EXIT_CODES.unavailable;
  }
  return DATA_EXIT_CODES.refused;
}

export async function getCommand(client: RemoteClient, table: string, key: string, output: Output): Promise<number> {
  const value = await client.get(table, key);
  if (value === undefined) return DATA_EXIT_CODES.notFound;
  log(output === 'json' ? JSON.stringify(value) : `${key}\t${JSON.stringify(value)}`);
  return DATA_EXIT_CODES.ok;
}

export async function scanCommand(
  client: RemoteClient,
  table: string,
  range: ScanRange,
  limit: number | undefined,
  output: Output,
): Promise<number> {
  if (limit !== undefined) {
    const rows = await client.transaction((tx) => tx.scan(table, range, { limit }), { readOnly: true });
    for (const row of rows) printRow(row.key, row.value, output);
    return DATA_EXIT_CODES.ok;
  }
  // The whole range, page by page from one snapshot, printed as it comes (no retry: it would print rows twice).
  await client.transaction(
    async (tx) => {
      for await (const page of scanPages(tx, table, range))
        for (const row of page) printRow(row.key, row.value, output);
    },
    { readOnly: true, retries: 0 },
  );
  return DATA_EXIT_CODES.ok;
}

export interface WatchCommandOptions {
  readonly range: ScanRange;
  readonly from?: HybridTimestamp;
  readonly progress: boolean;
  readonly connect: readonly string[];
}

/** Parses `--from`: a timestamp as the watch prints them (a positive decimal integer). */
export function parseTimestamp(text: string): HybridTimestamp {
  if (!/^[0-9]{1,20}$/.test(text) || BigInt(text) <= 0n || BigInt(text) >= 2n ** 64n) {
    throw invalidArgument(`--from takes a timestamp as a watch prints it (a positive decimal integer): ${text}`);
  }
  return BigInt(text) as HybridTimestamp;
}

/** Prints the change stream of `table` until it fails or the process is interrupted. */
export async function watchCommand(
  client: RemoteClient,
  table: string,
  options: WatchCommandOptions,
  output: Output,
): Promise<number> {
  const stream = client.watch(table, {
    ...('prefix' in options.range ? { prefix: options.range.prefix } : { range: options.range }),
    ...(options.from !== undefined && { fromTimestamp: options.from }),
    connect: options.connect,
  });
  for await (const event of stream) {
    if (event.kind === 'resolved') {
      if (!options.progress) continue;
      log(
        output === 'json' ? JSON.stringify({ resolvedTs: String(event.resolvedTs) }) : `resolved\t${event.resolvedTs}`,
      );
    } else if (event.kind === 'put') {
      const { key, value, commitTs } = event;
      log(
        output === 'json'
          ? JSON.stringify({ key, value, commitTs: String(commitTs) })
          : `put\t${key}\t${JSON.stringify(value)}\t${commitTs}`,
      );
    } else {
      const { key, commitTs } = event;
      log(
        output === 'json'
          ? JSON.stringify({ key, deleted: true, commitTs: String(commitTs) })
          : `delete\t${key}\t\t${commitTs}`,
      );
    }
  }
  return DATA_EXIT_CODES.ok;
}

/** Runs a checked script as one transaction; prints one result per operation (get: value or null; scan: rows). */
export async function txnCommand(
  client: RemoteClient,
  script: readonly DataOp[],
  readOnly: boolean,
  output: Output,
): Promise<number> {
  if (readOnly && script.some((op) => op.op === 'put' || op.op === 'rm')) {
    throw invalidArgument('a read-only txn cannot put or rm');
  }
  const results = await client.transaction((tx) => runScript(tx, script), { readOnly });
  for (const [i, result] of results.entries()) {
    if (output === 'json') log(JSON.stringify({ op: script[i]!.op, ...result }));
    else if (result.rows !== undefined) for (const row of result.rows) printRow(row.key, row.value, output);
    else if ('value' in result) log(`${(script[i] as { key: string }).key}\t${JSON.stringify(result.value)}`);
  }
  return DATA_EXIT_CODES.ok;
}

interface OpResult {
  readonly value?: Value | null;
  readonly rows?: readonly { readonly key: string; readonly value: Value }[];
}

async function runScript(tx: RemoteTransaction, script: readonly DataOp[]): Promise<OpResult[]> {
  const results: OpResult[] = [];
  for (const op of script) {
    switch (op.op) {
      case 'get':
        results.push({ value: (await tx.get(op.table, op.key)) ?? null });
        break;
      case 'put':
        await tx.put(op.table, op.key, op.value, op.options);
        results.push({});
        break;
      case 'rm':
        await tx.remove(op.table, op.key);
        results.push({});
        break;
      case 'scan':
        results.push({ rows: await tx.scan(op.table, op.range, op.limit === undefined ? {} : { limit: op.limit }) });
        break;
    }
  }
  return results;
}

function printRow(key: string, value: Value, output: Output): void {
  log(output === 'json' ? JSON.stringify({ key, value }) : `${key}\t${JSON.stringify(value)}`);
}

/** The text of `source`: standard input for `-`, else the file. */
export function readSource(source: string): string {
  try {
    return readFileSync(source === '-' ? 0 : source, 'utf8');
  } catch (error) {
    throw invalidArgument(`cannot read ${source === '-' ? 'standard input' : source}: ${String(error)}`);
  }
}
