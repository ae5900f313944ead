/**
 * `basalt backup`, `basalt backup verify` and `basalt restore` (client/backup.ts, client/restore.ts) against a
 * running cluster. Progress goes to stderr (rows, bytes, rate, and an ETA when the total is known), at most twice a
 * second; the final summary is one JSON line on stdout. Exit codes are the data commands' (DATA_EXIT_CODES): a
 * corrupted backup, a broken chain or an unknown format is a refusal (6) whose code and file are printed.
 */
import { InvalidArgumentError } from 'commander';
import type { BackupProgress } from '../client/backup.js';
import { type RestoreProgress, verifyBackup } from '../client/restore.js';
import type { HybridTimestamp } from '../core/ids.js';
import { asTimestamp, hybridTimestamp } from '../hlc/timestamp.js';
import { log } from './common.js';
import { DATA_EXIT_CODES, reportFailure, withClient } from './data.js';

export interface BackupFlags {
  readonly connect: string;
  readonly to: string;
  readonly tables?: string;
  readonly at?: HybridTimestamp;
  readonly incrementalFrom?: string;
  readonly gzip: boolean;
  readonly concurrency?: number;
}

export interface RestoreFlags {
  readonly connect: string;
  readonly from: string;
  readonly tables?: string;
  readonly as?: string;
  readonly concurrency?: number;
}

/** `--at`: a timestamp as a manifest records it (decimal) or as `physicalMs.logical`. */
export function timestampFlag(value: string): HybridTimestamp {
  const decimal = /^[1-9]\d*$/.exec(value);
  if (decimal !== null) return asTimestamp(BigInt(value));
  const parts = /^(\d+)\.(\d+)$/.exec(value);
  if (parts !== null) return hybridTimestamp(Number(parts[1]), Number(parts[2]));
  throw new InvalidArgumentError('expected a timestamp: a decimal HybridTimestamp or physicalMs.logical');
}

function tableList(value: string | undefined): string[] | undefined {
  return value === undefined ? undefined : value.split(',').filter((t) => t.length > 0);
}

export async function backupCommand(flags: BackupFlags): Promise<number> {
  const progress = new ProgressLine('backup');
  return withClient({ connect: flags.connect.split(','), output: 'json' }, async (client) => {
    const tables = tableList(flags.tables);
    const summary = await client.backup({
      to: flags.to,
      ...(tables !== undefined && { tables }),
      ...(flags.at !== undefined && { at: flags.at }),
      ...(flags.incrementalFrom !== undefined && { incrementalFrom: flags.incrementalFrom }),
      ...(flags.concurrency !== undefined && { concurrency: flags.concurrency }),
      gzip: flags.gzip,
      onProgress: (p: BackupProgress) =>
        progress.show(p.rows, p.bytes, undefined, `${p.partitionsDone}/${p.partitionsTotal} partitions`),
    });
    progress.done(
      `${summary.kind} backup ${summary.id} at ${summary.timestamp}: ${summary.rows} records ` +
        `(${summary.deletes} deletions), ${summary.files} files, ${megabytes(summary.bytes)} in ${summary.dir}`,
    );
    log(JSON.stringify({ ...summary, timestamp: summary.timestamp.toString() }));
    return DATA_EXIT_CODES.ok;
  });
}

export async function verifyCommand(dir: string): Promise<number> {
  const progress = new ProgressLine('verify');
  try {
    const summary = await verifyBackup(dir, (p) => progress.show(p.rows, 0, p.rowsTotal));
    progress.done(
      `${dir}: ${summary.backups} backups, ${summary.files} files, ${summary.records} records, ${summary.rows} rows: all verified`,
    );
    log(JSON.stringify({ ok: true, ...summary }));
    return DATA_EXIT_CODES.ok;
  } catch (error) {
    progress.clear();
    return reportFailure(error);
  }
}

export async function restoreCommand(flags: RestoreFlags): Promise<number> {
  const progress = new ProgressLine('restore');
  let writing = false;
  const code = await withClient({ connect: flags.connect.split(','), output: 'json' }, async (client) => {
    const tables = tableList(flags.tables);
    const summary = await client.restore({
      from: flags.from,
      ...(tables !== undefined && { tables }),
      ...(flags.as !== undefined && { as: flags.as }),
      ...(flags.concurrency !== undefined && { concurrency: flags.concurrency }),
      onProgress: (p: RestoreProgress) => {
        writing ||= p.phase === 'write';
        progress.show(p.rows, 0, p.rowsTotal, p.phase);
      },
    });
    progress.done(
      `restored ${summary.tables.join(', ')}: ${summary.rows} rows from ${summary.backups} backups` +
        (summary.resumed ? ' (continued an interrupted restore)' : ''),
    );
    log(JSON.stringify(summary));
    return DATA_EXIT_CODES.ok;
  });
  if (code !== DATA_EXIT_CODES.ok && writing) {
    process.stderr.write('basalt: the restore stopped half way: run the same command again to continue it\n');
  }
  return code;
}

function megabytes(bytes: number): string {
  return `${(bytes / 1_048_576).toFixed(1)} MB`;
}

/** One progress line on stderr, rewritten in place on a terminal, at most every PROGRESS_INTERVAL_MS. */
class ProgressLine {
  private readonly startedMs = Date.now();
  private lastMs = 0;
  private shown = false;

  constructor(private readonly what: string) {}

  show(rows: number, bytes: number, rowsTotal: number | undefined, detail?: string): void {
    const now = Date.now();
    if (now - this.lastMs < PROGRESS_INTERVAL_MS) return;
    this.lastMs = now;
    const seconds = Math.max((now - this.startedMs) / 1000, 0.001);
    const parts = [`${this.what}: ${rows} rows`];
    if (rowsTotal !== undefined && rowsTotal > 0) parts[0] += ` of ${rowsTotal}`;
    if (bytes > 0) parts.push(`${megabytes(bytes)} (${megabytes(bytes / seconds)}/s)`);
    parts.push(`${Math.round(rows / seconds)} rows/s`);
    if (rowsTotal !== undefined && rows > 0 && rows < rowsTotal) {
      parts.push(`ETA ${Math.ceil(((rowsTotal - rows) * seconds) / rows)} s`);
    }
    if (detail !== undefined) parts.push(detail);
    this.write(parts.join(', '));
  }

  done(summary: string): void {
    this.clear();
    process.stderr.write(`basalt: ${summary} (${((Date.now() - this.startedMs) / 1000).toFixed(1)} s)\n`);
  }

  clear(): void {
    if (this.shown && process.stderr.isTTY) process.stderr.write('\r\x1b[K');
    this.shown = false;
  }

  private write(line: string): void {
    this.shown = true;
    if (process.stderr.isTTY) process.stderr.write(`\r\x1b[K${line}`);
    else process.stderr.write(`${line}\n`);
  }
}

const PROGRESS_INTERVAL_MS = 500;
