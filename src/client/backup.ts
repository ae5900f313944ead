/**
 * Online backups (DESIGN §4b "Backups read a snapshot"): everything committed at or below one timestamp T, read
 * lock-free from every partition of the chosen tables in parallel (at most `concurrency` partitions at once), each
 * partition by its own read-only transaction at T, streamed page by page into its own file (backup-format.ts).
 * Memory holds a page per partition in flight, whatever the table size.
 *
 * What keeps T readable: a protected timestamp (cluster/metastorage-state.ts). A first RO transaction fixes T (and
 * holds its node's watermark while the protection is created); the protection then holds the low watermark of every
 * node at or below T for `protectionLifetimeMs` (default 2 minutes), renewed every third of that while the backup
 * runs and released when it ends or fails. A client that dies stops renewing, and the protection lapses. So a backup
 * may run as long as it needs; if its protection lapsed anyway (renewals failing for a whole lifetime), its reads
 * fail TX_READ_ONLY_TOO_OLD (every read re-checks the watermark) and nothing is published. `--at` accepts a timestamp
 * no older than the largest staleness (10 minutes). Protecting needs a cluster-wide admin or readwrite role.
 *
 * An incremental backup (`incrementalFrom`) holds only what changed after its parent's timestamp: each partition's
 * new snapshot is compared, in key order, with the state its parent chain leaves (the chain's sorted files merged),
 * giving a put for every new or changed row and a deletion for every row gone (removed or expired). The old state
 * comes from the chain's verified files, not from MVCC history, so an incremental backup does not depend on how
 * long the cluster retains history.
 *
 * Atomic: files are written into `<to>.partial`, fsynced, the manifest written last (to a temporary name, then
 * renamed), and the directory renamed to `<to>` at the end. A crash leaves at most a `.partial` directory, which no
 * reader takes for a backup (it has no manifest under `<to>`); the next backup to the same place removes it.
 */
import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, open, readdir, rename, rm, rmdir, writeFile } from 'node:fs/promises';
import { dirname, join, relative, resolve } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGzip } from 'node:zlib';
import type { ProtectedTimestamp, TableDescriptor } from '../cluster/metastorage-state.js';
import { BasaltError, invalidArgument, isBasaltError } from '../core/errors.js';
import type { HybridTimestamp } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { RealTimers } from '../env/real-timers.js';
import type { TimerHandle } from '../env/timers.js';
import { formatTimestamp } from '../hlc/timestamp.js';
import { compareKeys, type KeyValue, type ScanOptions, type ScanRange } from '../tx/core/user-input.js';
import {
  BACKUP_FORMAT,
  BACKUP_FORMAT_VERSION,
  type BackupFile,
  type BackupManifest,
  type BackupRecord,
  type BackupTable,
  chainRecords,
  encodeDelete,
  encodeRow,
  filePath,
  type LoadedBackup,
  loadChain,
  MANIFEST_FILE,
  manifestText,
  sha256Hex,
} from './backup-format.js';
import { scanPages } from './scan-pages.js';

/** A transaction that reads a snapshot: what a backup needs of a read-only transaction. */
export interface SnapshotTransaction {
  readonly readTimestamp?: HybridTimestamp | undefined;
  scan(table: string, range: ScanRange, options?: ScanOptions): Promise<KeyValue[]>;
  rollback(): Promise<void>;
}

/** What a backup needs of a client (embedded or remote). */
export interface BackupSource {
  begin(options: { readonly readOnly: true; readonly readTimestamp?: HybridTimestamp }): Promise<SnapshotTransaction>;
  tables(): Promise<TableDescriptor[]>;
  protectTimestamp(ts: HybridTimestamp, options?: { readonly lifetimeMs?: number }): Promise<ProtectedTimestamp>;
  renewProtectedTimestamp(id: string, options?: { readonly lifetimeMs?: number }): Promise<ProtectedTimestamp>;
  releaseProtectedTimestamp(id: string): Promise<void>;
}

/** What `client.backup` backs up, where, as of when, and how it reports its progress. */
export interface BackupOptions {
  /** The backup's directory: it must not exist yet (or be empty); it appears only once the backup is complete. */
  readonly to: string;
  /** The tables to back up (default: every table; an incremental backup takes its parent's). */
  readonly tables?: readonly string[];
  /** The snapshot timestamp (default: the coordinator's `now`); no older than 10 minutes. */
  readonly at?: HybridTimestamp;
  /** The directory of the previous backup: only what changed since its timestamp is written, chained to it. */
  readonly incrementalFrom?: string;
  /** gzip every file (default false). */
  readonly gzip?: boolean;
  /** Partitions read at once (default LIMITS.backupPartitionsInFlightDefault). */
  readonly concurrency?: number;
  /**
   * Lifetime of the backup's protected timestamp (default 2 minutes, at most 10): renewed every third of it while
   * the backup runs; a backup whose client dies holds history back at most this long.
   */
  readonly protectionLifetimeMs?: number;
  /** Called after every page written; a throw aborts the backup (nothing is published). */
  readonly onProgress?: (progress: BackupProgress) => void;
}

export interface BackupProgress {
  /** Records written so far (rows, and deletions of an incremental backup). */
  readonly rows: number;
  /** Bytes written so far (compressed when gzipped). */
  readonly bytes: number;
  readonly partitionsDone: number;
  readonly partitionsTotal: number;
}

export interface BackupSummary {
  readonly dir: string;
  readonly id: string;
  readonly kind: 'full' | 'incremental';
  readonly timestamp: HybridTimestamp;
  readonly tables: readonly string[];
  readonly rows: number;
  readonly deletes: number;
  readonly bytes: number;
  readonly files: number;
}

interface PartitionJob {
  readonly tableIndex: number;
  readonly table: TableDescriptor;
  readonly partition: number;
}

/** Bytes of lines gathered before they are handed to the file stream. */
const CHUNK_BYTES = 64 * 1024;

/** Takes a backup (see the module header); resolves once `to` holds a complete, verified-on-read backup. */
export async function backup(source: BackupSource, options: BackupOptions): Promise<BackupSummary> {
  const concurrency = options.concurrency ?? LIMITS.backupPartitionsInFlightDefault;
  if (!Number.isSafeInteger(concurrency) || concurrency < 1) throw invalidArgument('concurrency is a positive integer');
  const to = resolve(options.to);
  await checkTarget(to);
  const parents = options.incrementalFrom === undefined ? undefined : await loadChain(options.incrementalFrom);
  const held = await holdSnapshot(source, options);
  const { timestamp } = held;
  const stage = `${to}.partial`;
  try {
    const parent = parents?.at(-1);
    if (parent !== undefined && BigInt(parent.manifest.timestamp) >= timestamp) {
      throw invalidArgument(`the backup at ${formatTimestamp(timestamp)} is not after its parent's timestamp`);
    }
    const tables = await chooseTables(source, options.tables, parent);
    await rm(stage, { recursive: true, force: true });
    for (const index of tables.keys()) await mkdir(join(stage, `t${index}`), { recursive: true });
    const jobs = tables.flatMap((table, tableIndex) =>
      Array.from({ length: table.partitions }, (_, partition) => ({ tableIndex, table, partition })),
    );
    const open = () => source.begin({ readOnly: true, readTimestamp: timestamp });
    const writer = new PartitionWriter(open, stage, options.gzip === true, parents, jobs.length, options.onProgress);
    const files = await forEachBounded(jobs, concurrency, (job) => writer.write(job));
    const manifest = buildManifest(jobs, timestamp, options.gzip === true, tables, files, to, parent);
    await publish(stage, to, manifest);
    const { totals } = manifest;
    return {
      dir: to,
      id: manifest.id,
      kind: manifest.kind,
      timestamp,
      tables: tables.map((t) => t.name),
      ...totals,
    };
  } catch (error) {
    await rm(stage, { recursive: true, force: true });
    throw snapshotLost(error);
  } finally {
    await held.release();
  }
}

/** T, protected until `release` (renewed meanwhile on the source's timers). */
interface HeldSnapshot {
  readonly timestamp: HybridTimestamp;
  release(): Promise<void>;
}

/** Fixes T by a first RO transaction (at `options.at`, else now) and protects it before that transaction ends. */
async function holdSnapshot(source: BackupSource, options: BackupOptions): Promise<HeldSnapshot> {
  const lifetimeMs = options.protectionLifetimeMs ?? LIMITS.protectedTimestampLifetimeMsDefault;
  if (!Number.isSafeInteger(lifetimeMs) || lifetimeMs < 3) throw invalidArgument('protectionLifetimeMs is >= 3');
  const first = await source.begin({ readOnly: true, ...(options.at !== undefined && { readTimestamp: options.at }) });
  let record: ProtectedTimestamp;
  try {
    const timestamp = first.readTimestamp;
    if (timestamp === undefined) throw new BasaltError('INTERNAL', 'a read-only transaction without a read timestamp');
    record = await source.protectTimestamp(timestamp, { lifetimeMs });
  } finally {
    await first.rollback().catch(() => {});
  }
  // The event loop's timers, not keeping the process alive (a backup runs on a real client).
  const timers = new RealTimers(true);
  let stopped = false;
  let handle: TimerHandle | undefined;
  // A failed renewal is tried again at the next one: two more come before the protection could lapse.
  const renew = (): void => {
    void source
      .renewProtectedTimestamp(record.id, { lifetimeMs })
      .catch(() => {})
      .then(() => {
        if (!stopped) handle = timers.setTimer(renew, Math.floor(lifetimeMs / 3));
      });
  };
  handle = timers.setTimer(renew, Math.floor(lifetimeMs / 3));
  return {
    timestamp: record.ts,
    release: async () => {
      stopped = true;
      if (handle !== undefined) timers.clearTimer(handle);
      await source.releaseProtectedTimestamp(record.id).catch(() => {});
    },
  };
}

/** A read that failed because the snapshot was no longer held says so (same code), so that it is not just retried. */
function snapshotLost(error: unknown): unknown {
  if (!isBasaltError(error) || (error.code !== 'TX_TIMEOUT' && error.code !== 'TX_READ_ONLY_TOO_OLD')) return error;
  return new BasaltError(
    error.code,
    `the backup's snapshot was no longer held (its protected timestamp lapsed: renewals failed for a whole ` +
      `lifetime): ${error.message}`,
    error.details,
  );
}

/** `to` must not exist, or be an empty directory. */
async function checkTarget(to: string): Promise<void> {
  let entries: string[];
  try {
    entries = await readdir(to);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw invalidArgument(`cannot use ${to} for a backup: ${String(error)}`);
  }
  if (entries.length > 0) throw new BasaltError('ALREADY_EXISTS', `${to} is not empty`, { dir: to });
}

/** The tables to back up, sorted by name: the named ones (or all); an incremental backup's parent's, same partitioning. */
async function chooseTables(
  source: BackupSource,
  names: readonly string[] | undefined,
  parent: LoadedBackup | undefined,
): Promise<TableDescriptor[]> {
  const all = new Map((await source.tables()).map((t) => [t.name, t]));
  const wanted = parent?.manifest.tables.map((t) => t.name) ?? names ?? [...all.keys()];
  if (parent !== undefined && names !== undefined && [...names].sort().join('\n') !== [...wanted].sort().join('\n')) {
    throw invalidArgument('an incremental backup covers the tables of its parent', { parent: wanted.join(',') });
  }
  const chosen = [...new Set(wanted)].sort(compareKeys).map((name) => {
    const table = all.get(name);
    if (table === undefined) throw new BasaltError('UNKNOWN_TABLE', `no table ${name}`, { table: name });
    const before = parent?.manifest.tables.find((t) => t.name === name);
    if (before !== undefined && before.partitions !== table.partitions) {
      throw invalidArgument(
        `table ${name} has ${table.partitions} partitions, ${before.partitions} in the parent backup: take a full backup`,
      );
    }
    return table;
  });
  if (chosen.length === 0) throw invalidArgument('no table to back up');
  return chosen;
}

/** Writes one partition's file: a snapshot (full) or its difference with the parent chain (incremental). */
class PartitionWriter {
  private rows = 0;
  private bytes = 0;
  private done = 0;

  constructor(
    private readonly open: () => Promise<SnapshotTransaction>,
    private readonly stage: string,
    private readonly gzip: boolean,
    private readonly parents: readonly LoadedBackup[] | undefined,
    private readonly total: number,
    private readonly onProgress: ((progress: BackupProgress) => void) | undefined,
  ) {}

  async write(job: PartitionJob): Promise<BackupFile> {
    const path = filePath(job.tableIndex, job.partition, this.gzip);
    const counts = { rows: 0, deletes: 0 };
    const rows = this.snapshot(job);
    const lines =
      this.parents === undefined
        ? fullLines(rows, counts)
        : diffLines(chainRecords(this.parents, job.table.name, job.partition), rows, counts);
    const hash = createHash('sha256');
    let bytes = 0;
    const tap = new Transform({
      transform: (chunk: Buffer, _encoding, next) => {
        hash.update(chunk);
        bytes += chunk.length;
        this.bytes += chunk.length;
        next(null, chunk);
      },
    });
    const progress = new Transform({
      transform: (chunk: Buffer, _encoding, next) => {
        this.report();
        next(null, chunk);
      },
    });
    const file = join(this.stage, path);
    const input = Readable.from(counted(lines, (n) => (this.rows += n)));
    if (this.gzip) await pipeline(input, createGzip(), tap, progress, createWriteStream(file));
    else await pipeline(input, tap, progress, createWriteStream(file));
    await fsync(file);
    this.done += 1;
    this.report();
    return { partition: job.partition, path, sha256: hash.digest('hex'), bytes, ...counts };
  }

  private report(): void {
    this.onProgress?.({
      rows: this.rows,
      bytes: this.bytes,
      partitionsDone: this.done,
      partitionsTotal: this.total,
    });
  }

  /** The partition's rows at the snapshot, in key order. */
  private async *snapshot(job: PartitionJob): AsyncGenerator<KeyValue> {
    // A read-only transaction per partition, so no one transaction's timeout bounds the backup.
    const tx = await this.open();
    try {
      const partitionScan = {
        scan: (table: string, range: ScanRange, options?: { readonly limit?: number }) =>
          tx.scan(table, range, { ...options, partition: job.partition }),
      };
      const pages = scanPages(partitionScan, job.table.name, {}, { pageSize: LIMITS.backupScanPageRows });
      for await (const page of pages) yield* page;
    } finally {
      await tx.rollback().catch(() => {});
    }
  }
}

interface Counts {
  rows: number;
  deletes: number;
}

/** Chunks of lines (`{ text, records }`), each at most about CHUNK_BYTES. */
interface Chunk {
  readonly text: string;
  readonly records: number;
}

async function* counted(chunks: AsyncIterable<Chunk>, onRecords: (n: number) => void): AsyncGenerator<string> {
  for await (const chunk of chunks) {
    onRecords(chunk.records);
    yield chunk.text;
  }
}

async function* fullLines(rows: AsyncIterable<KeyValue>, counts: Counts): AsyncGenerator<Chunk> {
  const batch = new LineBatch();
  for await (const row of rows) {
    counts.rows += 1;
    const chunk = batch.add(encodeRow(row.key, row.value));
    if (chunk !== undefined) yield chunk;
  }
  const last = batch.flush();
  if (last !== undefined) yield last;
}

/**
 * The difference between the state a chain left (`old`, sorted) and the new snapshot (`rows`, sorted): a put for
 * every new or changed row, a deletion for every old key gone. `old` is read to its end, so its files are verified.
 */
async function* diffLines(
  old: AsyncIterator<BackupRecord>,
  rows: AsyncIterable<KeyValue>,
  counts: Counts,
): AsyncGenerator<Chunk> {
  const batch = new LineBatch();
  const emit = (line: string, deleted: boolean): Chunk | undefined => {
    counts.rows += 1;
    if (deleted) counts.deletes += 1;
    return batch.add(line);
  };
  try {
    let head = await old.next();
    for await (const row of rows) {
      while (!head.done && compareKeys(head.value.key, row.key) < 0) {
        const chunk = emit(encodeDelete(head.value.key), true);
        if (chunk !== undefined) yield chunk;
        head = await old.next();
      }
      const line = encodeRow(row.key, row.value);
      const same = !head.done && head.value.key === row.key;
      const chunk = same && head.value!.line === line ? undefined : emit(line, false);
      if (chunk !== undefined) yield chunk;
      if (same) head = await old.next();
    }
    while (!head.done) {
      const chunk = emit(encodeDelete(head.value.key), true);
      if (chunk !== undefined) yield chunk;
      head = await old.next();
    }
  } finally {
    await old.return?.();
  }
  const last = batch.flush();
  if (last !== undefined) yield last;
}

/** Lines gathered into chunks of about CHUNK_BYTES. */
class LineBatch {
  private lines: string[] = [];
  private size = 0;

  add(line: string): Chunk | undefined {
    this.lines.push(line);
    this.size += line.length + 1;
    return this.size >= CHUNK_BYTES ? this.flush() : undefined;
  }

  flush(): Chunk | undefined {
    if (this.lines.length === 0) return undefined;
    const chunk = { text: `${this.lines.join('\n')}\n`, records: this.lines.length };
    this.lines = [];
    this.size = 0;
    return chunk;
  }
}

function buildManifest(
  jobs: readonly PartitionJob[],
  timestamp: HybridTimestamp,
  gzip: boolean,
  tables: readonly TableDescriptor[],
  files: readonly BackupFile[],
  to: string,
  parent: LoadedBackup | undefined,
): BackupManifest {
  const entries: BackupTable[] = tables.map((t, index) => ({
    name: t.name,
    partitions: t.partitions,
    replicas: t.replicas,
    files: files.filter((_, i) => jobs[i]!.tableIndex === index),
  }));
  const link =
    parent === undefined
      ? undefined
      : {
          id: parent.manifest.id,
          path: relative(to, parent.dir),
          timestamp: parent.manifest.timestamp,
          manifestSha256: parent.manifestSha256,
        };
  const sum = (f: (file: BackupFile) => number): number => files.reduce((n, file) => n + f(file), 0);
  const content = { timestamp: timestamp.toString(), parent: link?.id ?? null, tables: entries };
  return {
    format: BACKUP_FORMAT,
    version: BACKUP_FORMAT_VERSION,
    id: sha256Hex(JSON.stringify(content)).slice(0, 32),
    kind: link === undefined ? 'full' : 'incremental',
    timestamp: timestamp.toString(),
    time: formatTimestamp(timestamp),
    compression: gzip ? 'gzip' : 'none',
    ...(link !== undefined && { parent: link }),
    tables: entries,
    totals: {
      rows: sum((f) => f.rows),
      deletes: sum((f) => f.deletes),
      bytes: sum((f) => f.bytes),
      files: files.length,
    },
  };
}

/** Manifest last (temporary name, fsync, rename), then the directory under its final name. */
async function publish(stage: string, to: string, manifest: BackupManifest): Promise<void> {
  const temporary = join(stage, `${MANIFEST_FILE}.tmp`);
  await writeFile(temporary, manifestText(manifest));
  await fsync(temporary);
  await rename(temporary, join(stage, MANIFEST_FILE));
  await fsync(stage);
  await rmdir(to).catch((error: NodeJS.ErrnoException) => {
    if (error.code !== 'ENOENT') throw error;
  });
  await rename(stage, to);
  await fsync(dirname(to));
}

async function fsync(path: string): Promise<void> {
  const handle = await open(path, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/**
 * `fn` over `items` with at most `limit` at once, results in order. After a failure no new item starts, the ones
 * running settle, and the first failure is thrown (so nothing still writes once the caller cleans up).
 */
export async function forEachBounded<T, R>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<R>,
): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  let failure: { error: unknown } | undefined;
  const worker = async (): Promise<void> => {
    while (failure === undefined && next < items.length) {
      const index = next++;
      try {
        results[index] = await fn(items[index]!);
      } catch (error) {
        failure ??= { error };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  if (failure !== undefined) throw failure.error;
  return results;
}
