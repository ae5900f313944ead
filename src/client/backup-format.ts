/**
 * The on-disk format of a backup (format `basalt-backup`, version 1): a directory with a `manifest.json` and one file
 * of records per partition of each table (`t<table index>/p<partition>.ndjson`, `.ndjson.gz` when gzipped).
 *
 * A record is one JSON line, in strictly increasing key order (code point order, as storage and scans sort):
 * `{"k":key,"v":value}` for a JSON value, `{"k":key,"b":base64}` for a Uint8Array, and in an incremental backup
 * `{"k":key,"d":1}` for a key removed (or expired) since the parent. Sorted files let a chain be merged and a new
 * snapshot be compared with it one row at a time: memory stays bounded whatever the table size.
 *
 * The manifest records the format and version, the backup's id (a digest of its content), its kind, its timestamp,
 * the tables with their partitioning, and for every file its SHA-256, size and record counts; an incremental one
 * names its parent by relative path, id, timestamp and the SHA-256 of the parent's manifest file. The manifest
 * carries the SHA-256 of its own body (`checksum`), so a changed byte anywhere in a backup is found. It is written
 * last, and the directory appears under its final name only once complete (backup.ts).
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { basename, join, resolve } from 'node:path';
import { pipeline, Transform } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import { createGunzip } from 'node:zlib';
import { BasaltError } from '../core/errors.js';
import { LIMITS } from '../core/limits.js';
import type { Value } from '../storage/mv-partition-storage.js';
import { compareKeys } from '../tx/core/user-input.js';

export const BACKUP_FORMAT = 'basalt-backup';
export const BACKUP_FORMAT_VERSION = 1;
export const MANIFEST_FILE = 'manifest.json';

export type BackupKind = 'full' | 'incremental';
export type BackupCompression = 'none' | 'gzip';

/** One file of records: one partition of one table. */
export interface BackupFile {
  readonly partition: number;
  /** Relative to the backup directory. */
  readonly path: string;
  readonly sha256: string;
  readonly bytes: number;
  /** Records in the file: rows written, plus deletions in an incremental backup. */
  readonly rows: number;
  readonly deletes: number;
}

export interface BackupTable {
  readonly name: string;
  readonly partitions: number;
  readonly replicas: number;
  /** One per partition, in partition order. */
  readonly files: readonly BackupFile[];
}

export interface BackupParent {
  readonly id: string;
  /** The parent's directory, relative to this backup's. */
  readonly path: string;
  readonly timestamp: string;
  /** SHA-256 of the parent's manifest.json as written. */
  readonly manifestSha256: string;
}

export interface BackupManifest {
  readonly format: typeof BACKUP_FORMAT;
  readonly version: typeof BACKUP_FORMAT_VERSION;
  /** A digest of the content (timestamp, parent, files): two backups with the same id hold the same data. */
  readonly id: string;
  readonly kind: BackupKind;
  /** The snapshot timestamp (a HybridTimestamp in decimal): everything committed at or below it. */
  readonly timestamp: string;
  /** The timestamp as `physicalMs.logical`, for people. */
  readonly time: string;
  readonly compression: BackupCompression;
  readonly parent?: BackupParent;
  readonly tables: readonly BackupTable[];
  readonly totals: { readonly rows: number; readonly deletes: number; readonly bytes: number; readonly files: number };
}

/** One record read back: the line as written (for comparisons) and what it says. */
export type BackupRecord =
  | { readonly key: string; readonly line: string; readonly deleted: false; readonly value: Value }
  | { readonly key: string; readonly line: string; readonly deleted: true };

/** A loaded backup of a chain: its directory, manifest, and the SHA-256 of its manifest file. */
export interface LoadedBackup {
  readonly dir: string;
  readonly manifest: BackupManifest;
  readonly manifestSha256: string;
}

export function backupCorrupt(file: string, problem: string): BasaltError {
  return new BasaltError('BACKUP_CORRUPT', `${file}: ${problem}`, { file });
}

export function chainBroken(file: string, problem: string): BasaltError {
  return new BasaltError('BACKUP_CHAIN_BROKEN', `${file}: ${problem}`, { file });
}

// ------------------------------------------------------------------------------------------ records

/** The line of a record (without its newline). */
export function encodeRow(key: string, value: Value): string {
  if (value instanceof Uint8Array) {
    return JSON.stringify({
      k: key,
      b: Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64'),
    });
  }
  return JSON.stringify({ k: key, v: value });
}

export function encodeDelete(key: string): string {
  return JSON.stringify({ k: key, d: 1 });
}

function decodeRecord(line: string, file: string, lineNo: number): BackupRecord {
  let parsed: unknown;
  try {
    parsed = JSON.parse(line);
  } catch {
    throw backupCorrupt(file, `line ${lineNo} is not JSON`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw backupCorrupt(file, `line ${lineNo} is not a record`);
  }
  const o = parsed as Record<string, unknown>;
  const key = o['k'];
  if (typeof key !== 'string') throw backupCorrupt(file, `line ${lineNo} has no key`);
  if (o['d'] === 1) return { key, line, deleted: true };
  if ('v' in o) return { key, line, deleted: false, value: o['v'] as Value };
  if (typeof o['b'] === 'string')
    return { key, line, deleted: false, value: new Uint8Array(Buffer.from(o['b'], 'base64')) };
  throw backupCorrupt(file, `line ${lineNo} has no value`);
}

/**
 * The records of one file of `backup`, checked as they are read: strictly increasing keys, no deletion in a full
 * backup, and at the end the size, SHA-256 and counts the manifest recorded (BACKUP_CORRUPT naming the file if not:
 * a consumer that reads to the end has read only verified data, and one that stops early writes nothing final before
 * the whole chain was verified; see restore.ts).
 */
export async function* readRecords(backup: LoadedBackup, entry: BackupFile): AsyncGenerator<BackupRecord> {
  const path = join(backup.dir, entry.path);
  const hash = createHash('sha256');
  let bytes = 0;
  const tap = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      hash.update(chunk);
      bytes += chunk.length;
      done(null, chunk);
    },
  });
  const noop = (): void => {};
  const raw = createReadStream(path);
  const out =
    backup.manifest.compression === 'gzip' ? pipeline(raw, tap, createGunzip(), noop) : pipeline(raw, tap, noop);
  const decoder = new StringDecoder('utf8');
  let rest = '';
  let rows = 0;
  let deletes = 0;
  let last: string | undefined;
  const take = (line: string): BackupRecord => {
    const record = decodeRecord(line, path, rows + 1);
    if (last !== undefined && compareKeys(last, record.key) >= 0) {
      throw backupCorrupt(path, `line ${rows + 1}: keys out of order`);
    }
    if (record.deleted && backup.manifest.kind === 'full') throw backupCorrupt(path, 'a deletion in a full backup');
    last = record.key;
    rows += 1;
    if (record.deleted) deletes += 1;
    return record;
  };
  try {
    for await (const chunk of out) {
      rest += decoder.write(chunk as Buffer);
      let start = 0;
      for (let newline = rest.indexOf('\n'); newline >= 0; newline = rest.indexOf('\n', start)) {
        yield take(rest.slice(start, newline));
        start = newline + 1;
      }
      rest = rest.slice(start);
      if (rest.length > LIMITS.frameBytesMax) throw backupCorrupt(path, `a line longer than ${LIMITS.frameBytesMax}`);
    }
  } catch (error) {
    if (error instanceof BasaltError) throw error;
    throw backupCorrupt(path, `unreadable (${error instanceof Error ? error.message : String(error)})`);
  } finally {
    // A consumer that stops early (or a failure) closes the file.
    raw.destroy();
  }
  rest += decoder.end();
  if (rest.length > 0) throw backupCorrupt(path, 'truncated (the last line has no end)');
  const sha256 = hash.digest('hex');
  if (bytes !== entry.bytes) throw backupCorrupt(path, `${bytes} bytes, the manifest says ${entry.bytes}`);
  if (sha256 !== entry.sha256) throw backupCorrupt(path, 'SHA-256 does not match the manifest');
  if (rows !== entry.rows || deletes !== entry.deletes) {
    throw backupCorrupt(
      path,
      `${rows} records (${deletes} deletions), the manifest says ${entry.rows} (${entry.deletes})`,
    );
  }
}

/**
 * The state a chain leaves for one partition: k sorted sources (oldest first) merged in key order, the newest
 * record of a key winning, deletions dropped. One record per source in memory.
 */
export async function* mergeRecords(sources: readonly AsyncIterator<BackupRecord>[]): AsyncGenerator<BackupRecord> {
  try {
    const heads = await Promise.all(sources.map((s) => s.next()));
    for (;;) {
      let key: string | undefined;
      for (const head of heads) {
        if (!head.done && (key === undefined || compareKeys(head.value.key, key) < 0)) key = head.value.key;
      }
      if (key === undefined) return;
      let winner: BackupRecord | undefined;
      for (let i = 0; i < heads.length; i++) {
        const head = heads[i]!;
        if (head.done || head.value.key !== key) continue;
        winner = head.value;
        heads[i] = await sources[i]!.next();
      }
      if (winner !== undefined && !winner.deleted) yield winner;
    }
  } finally {
    // A consumer that stops early closes every file (a finished source ignores it).
    await Promise.all(sources.map((s) => s.return?.()));
  }
}

/** The merged records of partition `partition` of `table` over a chain (oldest first). */
export function chainRecords(
  chain: readonly LoadedBackup[],
  table: string,
  partition: number,
): AsyncGenerator<BackupRecord> {
  const sources = chain.map((backup) => {
    const entry = tableOf(backup, table).files[partition];
    if (entry === undefined) throw backupCorrupt(join(backup.dir, MANIFEST_FILE), `no file for ${table} p${partition}`);
    return readRecords(backup, entry);
  });
  return mergeRecords(sources);
}

export function tableOf(backup: LoadedBackup, name: string): BackupTable {
  const table = backup.manifest.tables.find((t) => t.name === name);
  if (table === undefined) throw chainBroken(join(backup.dir, MANIFEST_FILE), `table ${name} is not in this backup`);
  return table;
}

// ------------------------------------------------------------------------------------------ manifest

export function sha256Hex(data: string | Uint8Array): string {
  return createHash('sha256').update(data).digest('hex');
}

/** The manifest file's text: the body and the SHA-256 of the body (`checksum`). */
export function manifestText(manifest: BackupManifest): string {
  return `${JSON.stringify({ ...manifest, checksum: sha256Hex(JSON.stringify(manifest)) }, null, 2)}\n`;
}

/** Reads and checks the manifest of `dir` (BACKUP_FORMAT for another format or version, BACKUP_CORRUPT otherwise). */
export async function readManifest(dir: string): Promise<LoadedBackup> {
  const path = join(dir, MANIFEST_FILE);
  let bytes: Buffer;
  try {
    bytes = await readFile(path);
  } catch (error) {
    throw backupCorrupt(path, `no manifest (${(error as NodeJS.ErrnoException).code ?? String(error)})`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(bytes.toString('utf8'));
  } catch {
    throw backupCorrupt(path, 'the manifest is not JSON');
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw backupCorrupt(path, 'the manifest is not an object');
  }
  const { checksum, ...body } = parsed as Record<string, unknown>;
  if (body['format'] !== BACKUP_FORMAT || body['version'] !== BACKUP_FORMAT_VERSION) {
    throw new BasaltError(
      'BACKUP_FORMAT',
      `${path}: format ${JSON.stringify(body['format'])} version ${JSON.stringify(body['version'])}; this release reads ${BACKUP_FORMAT} version ${BACKUP_FORMAT_VERSION}`,
      { file: path },
    );
  }
  if (checksum !== sha256Hex(JSON.stringify(body))) throw backupCorrupt(path, 'the manifest checksum does not match');
  const problem = manifestProblem(body);
  if (problem !== undefined) throw backupCorrupt(path, problem);
  return { dir, manifest: body as unknown as BackupManifest, manifestSha256: sha256Hex(bytes) };
}

const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
const isHex64 = (v: unknown): boolean => typeof v === 'string' && /^[0-9a-f]{64}$/.test(v);
const isTimestamp = (v: unknown): v is string => typeof v === 'string' && /^[1-9]\d*$/.test(v);

/** What is wrong with a manifest body whose checksum matched (written by another tool, or by a bug). */
function manifestProblem(m: Record<string, unknown>): string | undefined {
  if (typeof m['id'] !== 'string' || (m['kind'] !== 'full' && m['kind'] !== 'incremental')) return 'bad id or kind';
  if (!isTimestamp(m['timestamp'])) return 'bad timestamp';
  if (m['compression'] !== 'none' && m['compression'] !== 'gzip') return 'bad compression';
  if ((m['kind'] === 'incremental') !== (m['parent'] !== undefined))
    return 'an incremental backup, and only one, has a parent';
  const parent = m['parent'] as Record<string, unknown> | undefined;
  if (parent !== undefined) {
    const ok =
      typeof parent['id'] === 'string' && typeof parent['path'] === 'string' && isTimestamp(parent['timestamp']);
    if (!ok || !isHex64(parent['manifestSha256'])) return 'bad parent';
  }
  if (!Array.isArray(m['tables'])) return 'no tables';
  for (const [index, t] of (m['tables'] as unknown[]).entries()) {
    const problem = tableProblem(t, index, m['compression'] === 'gzip');
    if (problem !== undefined) return problem;
  }
  return undefined;
}

function tableProblem(t: unknown, index: number, gzip: boolean): string | undefined {
  if (typeof t !== 'object' || t === null) return `table ${index} is not an object`;
  const table = t as Record<string, unknown>;
  if (typeof table['name'] !== 'string' || !isCount(table['partitions']) || !isCount(table['replicas'])) {
    return `table ${index}: bad name or partitioning`;
  }
  const files = table['files'];
  if (!Array.isArray(files) || files.length !== table['partitions']) return `table ${index}: one file per partition`;
  for (const [p, f] of (files as unknown[]).entries()) {
    const file = (f ?? {}) as Record<string, unknown>;
    const ok =
      file['partition'] === p &&
      file['path'] === filePath(index, p, gzip) &&
      isHex64(file['sha256']) &&
      isCount(file['bytes']) &&
      isCount(file['rows']) &&
      isCount(file['deletes']);
    if (!ok) return `table ${index}: bad entry for partition ${p}`;
  }
  return undefined;
}

/** The path of a partition's file inside a backup (table by index: any table name stays a safe path). */
export function filePath(tableIndex: number, partition: number, gzip: boolean): string {
  return `t${tableIndex}/p${partition}.ndjson${gzip ? '.gz' : ''}`;
}

/**
 * The chain ending at `dir`, oldest (the full backup) first, every manifest checked and every link: the parent is
 * found at its recorded path, is the backup recorded (id and manifest SHA-256), precedes its child, and holds the
 * same tables with the same partitioning. BACKUP_CHAIN_BROKEN naming the manifest whose link fails.
 */
export async function loadChain(dir: string): Promise<LoadedBackup[]> {
  const chain: LoadedBackup[] = [await readManifest(resolve(dir))];
  for (;;) {
    const child = chain[0]!;
    const link = child.manifest.parent;
    if (link === undefined) return chain;
    const at = join(child.dir, MANIFEST_FILE);
    if (chain.length >= LIMITS.backupChainLengthMax) {
      throw chainBroken(at, `a chain longer than ${LIMITS.backupChainLengthMax} backups`);
    }
    const parentDir = resolve(child.dir, link.path);
    let parent: LoadedBackup;
    try {
      parent = await readManifest(parentDir);
    } catch (error) {
      const why = error instanceof Error ? error.message : String(error);
      throw chainBroken(at, `its parent ${link.path} (${basename(parentDir)}) cannot be read: ${why}`);
    }
    if (parent.manifest.id !== link.id || parent.manifestSha256 !== link.manifestSha256) {
      throw chainBroken(at, `its parent at ${link.path} is not the backup it was taken from (id ${link.id})`);
    }
    if (BigInt(parent.manifest.timestamp) >= BigInt(child.manifest.timestamp)) {
      throw chainBroken(at, 'its parent is not older');
    }
    const shape = (b: LoadedBackup): string => JSON.stringify(b.manifest.tables.map((t) => [t.name, t.partitions]));
    if (shape(parent) !== shape(child)) throw chainBroken(at, 'its tables or partitioning differ from its parent');
    chain.unshift(parent);
  }
}
