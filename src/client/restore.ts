/**
 * Restore of a backup chain into a running cluster (DESIGN §4b: through ordinary transactions), and verification.
 *
 * Before anything is written the whole chain is checked: every manifest (format, version, checksum), every link
 * (backup-format.ts `loadChain`), and every file of the chosen tables read to its end (SHA-256, size, record counts,
 * key order). A corrupted or truncated file, a broken chain or an unknown version is refused with a coded error that
 * names the file, and the cluster is not touched.
 *
 * Then each table is restored into an empty table (or a new one, created with the backup's partitioning): the
 * chain's files of each partition are merged in key order (the newest record of a key wins, deletions drop it), and
 * the rows written in transactions of at most restoreBatchRowsMax rows / restoreBatchBytesMax bytes, partitions in
 * parallel (bounded). Every batch also records, in the same transaction, the last key restored of its partition in a
 * marker row of the target table (keys under RESTORE_MARKER_PREFIX); a first marker names the backup. A restore that
 * stopped half way (a crash, a failure) and is run again finds the marker of the same backup, accepts the table
 * although it is not empty, and continues after the last key each partition committed: no row is written twice, and
 * puts of the backup's final values are idempotent anyway. The markers are removed when the table is complete.
 */

import type { TableDescriptor, TableOptions } from '../cluster/metastorage-state.js';
import { BasaltError, invalidArgument } from '../core/errors.js';
import { LIMITS } from '../core/limits.js';
import type { Value } from '../storage/mv-partition-storage.js';
import { compareKeys, type KeyValue, type ScanOptions, type ScanRange } from '../tx/core/user-input.js';
import { forEachBounded } from './backup.js';
import {
  type BackupRecord,
  type BackupTable,
  chainRecords,
  type LoadedBackup,
  loadChain,
  mergeRecords,
  readRecords,
  tableOf,
} from './backup-format.js';

/** Keys of the restore markers: reserved in a table being restored (a backup holding one is refused). */
export const RESTORE_MARKER_PREFIX = '\u0000\u0000basalt.restore/';
const MARKER_BACKUP = `${RESTORE_MARKER_PREFIX}backup`;
const markerOf = (partition: number): string => `${RESTORE_MARKER_PREFIX}p${partition}`;

/** What a restore needs of a transaction. */
export interface RestoreTransaction {
  get(table: string, key: string): Promise<Value | undefined>;
  getAll(table: string, keys: readonly string[]): Promise<(Value | undefined)[]>;
  putAll(table: string, entries: readonly KeyValue[]): Promise<void>;
  remove(table: string, key: string): Promise<void>;
  scan(table: string, range: ScanRange, options?: ScanOptions): Promise<KeyValue[]>;
}

/** What a restore needs of a client (embedded or remote). */
export interface RestoreTarget {
  transaction<T>(fn: (tx: RestoreTransaction) => Promise<T>, options?: { readonly readOnly?: boolean }): Promise<T>;
  tables(): Promise<TableDescriptor[]>;
  createTable(name: string, options: TableOptions): Promise<TableDescriptor>;
}

/** What `client.restore` restores, from where, into which tables, and how it reports its progress. */
export interface RestoreOptions {
  /** The backup's directory (the last of its chain). */
  readonly from: string;
  /** The tables to restore (default: every table of the backup). */
  readonly tables?: readonly string[];
  /** Restore the (one) chosen table under this name. */
  readonly as?: string;
  /** Partitions written at once (default LIMITS.backupPartitionsInFlightDefault). */
  readonly concurrency?: number;
  /** Called as files are verified and after every batch committed; a throw stops the restore (it can be rerun). */
  readonly onProgress?: (progress: RestoreProgress) => void;
}

export interface RestoreProgress {
  /** Checking the files (nothing written yet), or writing rows. */
  readonly phase: 'verify' | 'write';
  /** Records read (verify) or rows written (write) so far. */
  readonly rows: number;
  /** Records to read (verify: the chain's files) or rows to write (write: the rows the chain leaves). */
  readonly rowsTotal: number;
}

export interface RestoreSummary {
  /** The tables written, by their names in the cluster. */
  readonly tables: readonly string[];
  readonly rows: number;
  /** Backups of the chain applied (the full one and its incrementals). */
  readonly backups: number;
  /** Whether an earlier, interrupted restore of the same backup was continued. */
  readonly resumed: boolean;
}

export interface VerifySummary {
  readonly backups: number;
  readonly files: number;
  /** Records in the files (rows, and deletions of incremental backups). */
  readonly records: number;
  /** Rows the chain leaves: what a restore writes. */
  readonly rows: number;
  readonly bytes: number;
}

/** Checks every manifest, link and file of the chain ending at `dir` (coded errors naming the file). */
export async function verifyBackup(
  dir: string,
  onProgress?: (progress: RestoreProgress) => void,
): Promise<VerifySummary> {
  const chain = await loadChain(dir);
  const tables = chain.at(-1)!.manifest.tables.map((t) => t.name);
  const { records, rows } = await verifyFiles(chain, tables, onProgress);
  const files = chain.reduce((n, b) => n + b.manifest.totals.files, 0);
  const bytes = chain.reduce((n, b) => n + b.manifest.totals.bytes, 0);
  return { backups: chain.length, files, records, rows, bytes };
}

/**
 * Reads every file of `tables` in the chain to its end (readRecords checks each), merged per partition as a restore
 * merges them: the records read, and the rows the chain leaves (what a restore writes).
 */
async function verifyFiles(
  chain: readonly LoadedBackup[],
  tables: readonly string[],
  onProgress: ((progress: RestoreProgress) => void) | undefined,
): Promise<{ records: number; rows: number }> {
  const rowsTotal = chain.reduce(
    (n, b) => n + b.manifest.tables.filter((t) => tables.includes(t.name)).reduce((m, t) => m + sumRows(t), 0),
    0,
  );
  let records = 0;
  async function* counted(source: AsyncIterable<BackupRecord>): AsyncGenerator<BackupRecord> {
    for await (const record of source) {
      records += 1;
      if (records % LIMITS.restoreBatchRowsMax === 0) onProgress?.({ phase: 'verify', rows: records, rowsTotal });
      yield record;
    }
  }
  let rows = 0;
  for (const name of tables) {
    for (let partition = 0; partition < tableOf(chain[0]!, name).partitions; partition++) {
      const sources = chain.map((b) => counted(readRecords(b, tableOf(b, name).files[partition]!)));
      for await (const record of mergeRecords(sources)) {
        if (record.key.startsWith(RESTORE_MARKER_PREFIX)) {
          throw invalidArgument(`table ${name} holds the reserved key ${JSON.stringify(record.key)}`);
        }
        rows += 1;
      }
    }
  }
  onProgress?.({ phase: 'verify', rows: records, rowsTotal });
  return { records, rows };
}

function sumRows(table: BackupTable): number {
  return table.files.reduce((n, f) => n + f.rows, 0);
}

/** Restores the chain ending at `options.from` (see the module header). */
export async function restore(target: RestoreTarget, options: RestoreOptions): Promise<RestoreSummary> {
  const concurrency = options.concurrency ?? LIMITS.backupPartitionsInFlightDefault;
  if (!Number.isSafeInteger(concurrency) || concurrency < 1) throw invalidArgument('concurrency is a positive integer');
  const chain = await loadChain(options.from);
  const last = chain.at(-1)!;
  const tables = chooseTables(last, options);
  const verified = await verifyFiles(
    chain,
    tables.map((t) => t.name),
    options.onProgress,
  );
  const rowsTotal = verified.rows;
  const progress = { rows: 0 };
  const report = (): void => options.onProgress?.({ phase: 'write', rows: progress.rows, rowsTotal });
  // Every table is prepared first and its markers stay until all are complete, so a rerun after a crash anywhere
  // finds each table either empty or marked by this backup.
  const prepared: { table: BackupTable; name: string; from: Map<number, string>; resumed: boolean }[] = [];
  for (const table of tables) {
    const name = options.as ?? table.name;
    prepared.push({ table, name, ...(await prepareTable(target, name, table, last.manifest.id)) });
  }
  const jobs = prepared.flatMap((t) =>
    Array.from({ length: t.table.partitions }, (_, partition) => ({ ...t, partition })),
  );
  await forEachBounded(jobs, concurrency, async ({ table, name, from, partition }) => {
    const after = from.get(partition);
    let batch: KeyValue[] = [];
    let bytes = 0;
    const flush = async (): Promise<void> => {
      const rows = batch;
      const lastKey = rows.at(-1)!.key;
      await target.transaction((tx) => tx.putAll(name, [...rows, { key: markerOf(partition), value: { lastKey } }]));
      progress.rows += rows.length;
      batch = [];
      bytes = 0;
      report();
    };
    for await (const record of chainRecords(chain, table.name, partition)) {
      if (record.deleted || (after !== undefined && compareKeys(record.key, after) <= 0)) continue;
      batch.push({ key: record.key, value: record.value });
      bytes += record.line.length;
      if (batch.length >= LIMITS.restoreBatchRowsMax || bytes >= LIMITS.restoreBatchBytesMax) await flush();
    }
    if (batch.length > 0) await flush();
  });
  await target.transaction(async (tx) => {
    for (const { table, name } of prepared) {
      const markers = Array.from({ length: table.partitions }, (_, p) => markerOf(p));
      for (const key of [MARKER_BACKUP, ...markers]) await tx.remove(name, key);
    }
  });
  const resumed = prepared.some((t) => t.resumed);
  return { tables: tables.map((t) => options.as ?? t.name), rows: progress.rows, backups: chain.length, resumed };
}

function chooseTables(last: LoadedBackup, options: RestoreOptions): BackupTable[] {
  const all = last.manifest.tables;
  const tables =
    options.tables === undefined
      ? [...all]
      : options.tables.map((name) => {
          const table = all.find((t) => t.name === name);
          if (table === undefined) throw invalidArgument(`the backup has no table ${name}`, { table: name });
          return table;
        });
  if (options.as !== undefined && tables.length !== 1) throw invalidArgument('--as renames one table: name it');
  if (tables.length === 0) throw invalidArgument('no table to restore');
  return tables;
}

/**
 * Makes `name` ready: created if missing (the backup's partitioning), else empty or holding this backup's restore
 * markers (a rerun). Returns the last key restored per partition by an earlier run.
 */
async function prepareTable(
  target: RestoreTarget,
  name: string,
  table: BackupTable,
  backupId: string,
): Promise<{ from: Map<number, string>; resumed: boolean }> {
  const existing = (await target.tables()).find((t) => t.name === name);
  if (existing === undefined) {
    await target.createTable(name, { partitions: table.partitions, replicas: table.replicas });
  }
  const done = new Map<number, string>();
  const resumed = await target.transaction(async (tx) => {
    done.clear();
    const marker = (await tx.get(name, MARKER_BACKUP)) as { backup?: unknown } | undefined;
    if (marker === undefined) {
      // No restore of this table began: it must be empty (markers aside, at most partitions + 1 of them).
      const rows = await tx.scan(name, {}, { limit: table.partitions + 2 });
      const foreign = rows.find((r) => !r.key.startsWith(RESTORE_MARKER_PREFIX));
      if (foreign !== undefined) {
        throw new BasaltError(
          'RESTORE_TARGET_NOT_EMPTY',
          `table ${name} is not empty (it holds ${JSON.stringify(foreign.key)})`,
          {
            table: name,
          },
        );
      }
      await tx.putAll(name, [{ key: MARKER_BACKUP, value: { backup: backupId } }]);
      return false;
    }
    if (marker.backup !== backupId) {
      throw new BasaltError('RESTORE_TARGET_NOT_EMPTY', `table ${name} is being restored from another backup`, {
        table: name,
      });
    }
    const partitions = Array.from({ length: table.partitions }, (_, p) => markerOf(p));
    const values = await tx.getAll(name, partitions);
    values.forEach((value, p) => {
      const lastKey = (value as { lastKey?: unknown } | undefined)?.lastKey;
      if (typeof lastKey === 'string') done.set(p, lastKey);
    });
    return true;
  });
  return { from: done, resumed };
}
