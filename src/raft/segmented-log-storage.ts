/**
 * LogStorage as one segmented append-only log per node for the Raft logs of all its groups, with group commit (the
 * model is TiKV's raft-engine).
 *
 * Writes: `save`, `compact` and `removeGroup` check their input and apply it to the in-memory state at once (so a
 * refused write changes nothing, and `load` stays synchronous), then queue an operation into the forming batch. A
 * batch is written as one record with one positional write (on the event loop: a copy into the page cache of a
 * preallocated file; a record over INLINE_WRITE_BYTES_MAX goes to the thread pool) and one fdatasync off the event
 * loop; at most one batch is in flight, and calls made meanwhile form the next one. Every promise resolves once its
 * batch is durable. The forming batch is taken by a microtask queued by its first operation, so the calls of one synchronous stretch and of
 * the microtasks queued before that one (the Readys of every group handled in one turn) share a batch.
 *
 * On disk: files `<seq>.seg` of LIMITS.raftLogSegmentBytes (larger only for a batch that fits no normal segment), each
 * created as a temporary file holding a header and zeros, fsynced, renamed, with the directory fsynced: an fdatasync
 * of an append then never needs a metadata update. A new segment starts when the next record does not fit. A record
 * is [u32 payload length][u32 CRC32 of the payload][payload], the payload one msgpack array [batch number,
 * ...operations]; batch numbers rise by one along the whole log. Entries, hard states and snapshots are stored as the
 * plain objects they are, every field, so new entry kinds and new fields pass through unchanged.
 *
 * Recovery: segments replay in order, and the in-memory state (per group: hard state, snapshot, entries above it) is
 * rebuilt. In the last segment, the first zero, torn, CRC-failing or out-of-sequence record ends the log (a crash cut
 * that write, which nobody was told was durable), and the rest of the segment is zeroed before anything is appended.
 * The same in an earlier segment, a record that passes its CRC but does not decode, or a missing segment number is
 * STORAGE_CORRUPTED. (A flipped byte in the last segment looks like a torn tail: the log ends before it.)
 *
 * Garbage collection deletes segments oldest first only, so what is on disk is always a suffix of the log:
 *   - every live item (a group's hard state, its snapshot, each entry above it) remembers the batch that wrote it; a
 *     segment goes once every batch in it is older than every live item (removed groups hold none), counted when the
 *     next batch is taken, so every record that superseded it is durable by then;
 *   - after a batch, while more than LIMITS.raftLogSegmentsBeforeRewrite segments exist, each group with a live item
 *     older than the last that many segments (an idle group, whose hard state or snapshot sits in an old segment) has
 *     its whole live state queued as one rewrite record; once that is durable, the old segments go.
 * A suffix that holds every live item replays into the same state as the whole log: each operation replaces what it
 * writes, trims what it compacts, or replaces the whole group; replay accepts entries whose predecessors lay in
 * deleted segments and checks at the end that each group's entries directly follow its snapshot.
 */
import { writeSync } from 'node:fs';
import { type FileHandle, mkdir, open, readdir, readFile, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { Packr } from 'msgpackr';
import { assert } from '../core/assert.js';
import { BasaltError, invalidArgument } from '../core/errors.js';
import { type PartitionId, partitionId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import type { LogStorage, RaftLogUpdate, StoredRaftState } from './log-storage.js';
import type { Entry, HardState, Snapshot } from './types.js';

export interface SegmentedLogOptions {
  /** fdatasync every batch and fsync new segments (default true); false only for benchmarks that say so. */
  readonly sync?: boolean;
  readonly segmentBytes?: number;
}

/** What the log did so far (tests count syncs to check group commit; benchmarks report batches). */
export interface SegmentedLogStats {
  readonly batches: number;
  readonly datasyncs: number;
  readonly segments: number;
  readonly rewrites: number;
}

const MAGIC = Buffer.from('BASALTRL', 'latin1');
const FORMAT_VERSION = 1;
/** Magic, format version, reserved. */
const SEGMENT_HEADER_BYTES = 16;
/** Payload length and CRC32. */
const RECORD_HEADER_BYTES = 8;
const SEGMENT_NAME = /^(\d{16})\.seg$/;
const TEMPORARY_SUFFIX = '.tmp';
/** Zeros are written in chunks of this size when a segment is created or its torn tail is cleared. */
const ZERO_CHUNK_BYTES = 1024 * 1024;
/** Records up to this size are written on the event loop (a page-cache copy); larger ones on the thread pool. */
const INLINE_WRITE_BYTES_MAX = 256 * 1024;
const ZEROS = Buffer.alloc(ZERO_CHUNK_BYTES);

type Operation =
  | {
      readonly op: 'save';
      readonly group: string;
      readonly hardState: HardState | null;
      readonly snapshot: Snapshot | null;
      readonly entries: readonly Entry[];
    }
  | { readonly op: 'compact'; readonly group: string; readonly snapshot: Snapshot }
  | { readonly op: 'remove'; readonly group: string }
  | {
      readonly op: 'rewrite';
      readonly group: string;
      readonly hardState: HardState | null;
      readonly snapshot: Snapshot | null;
      readonly entries: readonly Entry[];
    };

/** One group's state; each `*Batch` is the batch that wrote the item (entryBatches runs parallel to entries). */
interface GroupState {
  hardState: HardState | null;
  hardBatch: number;
  snapshot: Snapshot | null;
  snapshotBatch: number;
  entries: Entry[];
  /** Non-decreasing: a later write replaces a suffix, a compaction trims a prefix. */
  entryBatches: number[];
}

interface Segment {
  readonly seq: number;
  readonly path: string;
  /** The first batch written into it (for an empty segment: the next batch). */
  readonly firstBatch: number;
  readonly sizeBytes: number;
}

interface Batch {
  readonly number: number;
  readonly operations: Operation[];
  readonly done: Promise<void>;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

const packr = new Packr({ useRecords: false, mapsAsObjects: true, copyBuffers: true });

export class SegmentedLogStorage implements LogStorage {
  private readonly dir: string;
  private readonly sync: boolean;
  private readonly segmentBytes: number;
  private readonly state: Map<PartitionId, GroupState>;
  private readonly segments: Segment[];
  private handle: FileHandle;
  /** Where the next record goes in the last segment. */
  private offset: number;
  private nextBatch: number;
  private forming: Batch | null = null;
  /** The batch being written and synced, if any. */
  private writing: Batch | null = null;
  private flushQueued = false;
  private loop: Promise<void> | null = null;
  /** The next segment being prepared (its temporary path once ready; null if that failed). */
  private spare: Promise<string | null> | null = null;
  private failure: BasaltError | null = null;
  private closed = false;
  private counts = { batches: 0, datasyncs: 0, rewrites: 0 };

  private constructor(dir: string, options: Required<SegmentedLogOptions>, recovered: Recovered, handle: FileHandle) {
    this.dir = dir;
    this.sync = options.sync;
    this.segmentBytes = options.segmentBytes;
    this.state = recovered.state;
    this.segments = recovered.segments;
    this.offset = recovered.offset;
    this.nextBatch = recovered.nextBatch;
    this.handle = handle;
  }

  /** Opens (creating it if needed) the log in `dir` and replays it; STORAGE_CORRUPTED if it cannot be trusted. */
  static async open(dir: string, options: SegmentedLogOptions = {}): Promise<SegmentedLogStorage> {
    const resolved = { sync: options.sync ?? true, segmentBytes: options.segmentBytes ?? LIMITS.raftLogSegmentBytes };
    if (!Number.isSafeInteger(resolved.segmentBytes) || resolved.segmentBytes < LIMITS.raftLogSegmentBytesMin) {
      throw invalidArgument(`segment size ${resolved.segmentBytes} below ${LIMITS.raftLogSegmentBytesMin} bytes`);
    }
    await mkdir(dir, { recursive: true });
    const recovered = await recover(dir, resolved);
    const last = recovered.segments[recovered.segments.length - 1]!;
    const handle = await open(last.path, 'r+');
    return new SegmentedLogStorage(dir, resolved, recovered, handle);
  }

  async save(group: PartitionId, update: RaftLogUpdate): Promise<void> {
    this.checkOpen();
    const g = this.state.get(group);
    const first = update.entries[0];
    if (first !== undefined) {
      const base = update.snapshot?.index ?? g?.snapshot?.index ?? 0;
      const last = update.snapshot !== null ? base : base + (g?.entries.length ?? 0);
      assert(first.index > base && first.index <= last + 1, 'an append leaves a gap', group, first.index);
    }
    const operation: Operation = {
      op: 'save',
      group,
      hardState: update.hardState,
      snapshot: update.snapshot,
      entries: update.entries,
    };
    return this.enqueue(operation);
  }

  async compact(group: PartitionId, snapshot: Snapshot): Promise<void> {
    this.checkOpen();
    const g = this.state.get(group);
    if (g !== undefined && g.snapshot !== null && snapshot.index <= g.snapshot.index) return this.durable();
    const last = (g?.snapshot?.index ?? 0) + (g?.entries.length ?? 0);
    assert(snapshot.index <= last, 'compaction beyond the stored log', snapshot.index, last);
    return this.enqueue({ op: 'compact', group, snapshot });
  }

  load(group: PartitionId): StoredRaftState {
    const g = this.state.get(group);
    if (g === undefined) return { hardState: null, snapshot: null, entries: [] };
    return { hardState: g.hardState, snapshot: g.snapshot, entries: [...g.entries] };
  }

  groups(): PartitionId[] {
    return [...this.state.keys()].sort();
  }

  async removeGroup(group: PartitionId): Promise<void> {
    this.checkOpen();
    return this.enqueue({ op: 'remove', group });
  }

  stats(): SegmentedLogStats {
    return { ...this.counts, segments: this.segments.length };
  }

  /** Writes what is queued, waits for it, and closes the segment; later calls fail with STORAGE_CLOSED. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const pending = this.forming?.done;
    if (pending !== undefined) this.queueFlush();
    await pending?.catch(() => {});
    await this.loop;
    const spare = await this.spare;
    if (spare !== null) await rm(spare, { force: true });
    await this.handle.close();
  }

  // ---------------------------------------------------------------- the write path

  private checkOpen(): void {
    if (this.closed) throw new BasaltError('STORAGE_CLOSED', 'the segmented Raft log is closed');
    if (this.failure !== null) throw this.failure;
  }

  private enqueue(operation: Operation): Promise<void> {
    const batch = this.formingBatch();
    applyOperation(this.state, operation, batch.number);
    batch.operations.push(operation);
    this.queueFlush();
    return batch.done;
  }

  /** Resolves once everything queued so far is durable. */
  private durable(): Promise<void> {
    return this.forming?.done ?? this.writing?.done ?? Promise.resolve();
  }

  private formingBatch(): Batch {
    if (this.forming !== null) return this.forming;
    let resolve!: () => void;
    let reject!: (error: unknown) => void;
    const done = new Promise<void>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    // A batch may carry only rewrites, which nobody awaits: its failure is kept in `failure` and thrown from there.
    done.catch(() => {});
    this.forming = { number: this.nextBatch++, operations: [], done, resolve, reject };
    return this.forming;
  }

  private queueFlush(): void {
    if (this.flushQueued || this.loop !== null) return;
    this.flushQueued = true;
    queueMicrotask(() => {
      this.flushQueued = false;
      if (this.loop === null && this.forming !== null) {
        this.loop = this.flushLoop().finally(() => {
          this.loop = null;
          // A call made after the loop's last look at the forming batch, before it ended.
          if (this.forming !== null) this.queueFlush();
        });
      }
    });
  }

  private async flushLoop(): Promise<void> {
    while (this.forming !== null) {
      const batch = this.forming;
      this.forming = null;
      this.writing = batch;
      // Every live item is written by this batch or an earlier one, so all of them are durable once it is.
      const collectBelow = this.segments.length > 1 ? this.oldestLiveBatch(batch.number + 1) : 0;
      try {
        if (this.failure !== null) throw this.failure;
        await this.writeBatch(batch);
        batch.resolve();
        await this.collect(collectBelow);
        this.queueRewrites();
      } catch (error) {
        // After a failed write or sync nothing says what reached the disk: the log takes no further writes.
        this.failure ??= new BasaltError(
          'INTERNAL',
          `a write to the Raft log in ${this.dir} failed; it takes no further writes`,
          { dir: this.dir },
          { cause: error },
        );
        batch.reject(this.failure);
      }
      this.writing = null;
    }
  }

  private async writeBatch(batch: Batch): Promise<void> {
    const payload = packr.pack([batch.number, ...batch.operations]);
    const recordBytes = RECORD_HEADER_BYTES + payload.length;
    assert(payload.length <= 0xffff_ffff, 'a batch too large for one record');
    const record = Buffer.allocUnsafe(recordBytes);
    record.writeUInt32LE(payload.length, 0);
    record.writeUInt32LE(crc32(payload), 4);
    payload.copy(record, RECORD_HEADER_BYTES);
    const current = this.segments[this.segments.length - 1]!;
    if (this.offset + recordBytes > current.sizeBytes) await this.roll(batch.number, recordBytes);
    if (recordBytes <= INLINE_WRITE_BYTES_MAX) writeFullySync(this.handle.fd, record, this.offset);
    else await writeFully(this.handle, record, this.offset);
    if (this.sync) {
      await this.handle.datasync();
      this.counts.datasyncs++;
    }
    this.offset += recordBytes;
    this.counts.batches++;
    if (this.offset > this.segments[this.segments.length - 1]!.sizeBytes / 2) this.prepareSpare();
  }

  /**
   * Prepares the next segment in the background once the current one is half full, so that a roll-over renames a
   * ready file instead of making the batch wait for a segment's worth of zeros. It keeps a temporary name until then:
   * an empty segment after the current one would make a torn tail there look like corruption.
   */
  private prepareSpare(): void {
    if (this.spare !== null || this.closed) return;
    const path = join(this.dir, `spare${TEMPORARY_SUFFIX}`);
    // A failed preparation only costs the roll-over its wait: it then creates the segment itself.
    this.spare = prepareSegmentFile(path, this.segmentBytes, this.sync).then(
      () => path,
      () => null,
    );
  }

  private async roll(firstBatch: number, recordBytes: number): Promise<void> {
    const seq = this.segments[this.segments.length - 1]!.seq + 1;
    const sizeBytes = Math.max(this.segmentBytes, SEGMENT_HEADER_BYTES + recordBytes);
    let spare: string | null = null;
    if (sizeBytes === this.segmentBytes && this.spare !== null) {
      spare = await this.spare;
      this.spare = null;
    }
    const segment =
      spare === null
        ? await createSegment(this.dir, seq, firstBatch, sizeBytes, this.sync)
        : await installSegment(spare, this.dir, seq, firstBatch, sizeBytes, this.sync);
    const handle = await open(segment.path, 'r+');
    await this.handle.close();
    this.handle = handle;
    this.segments.push(segment);
    this.offset = SEGMENT_HEADER_BYTES;
  }

  /** The oldest batch any live item was written by; `none` when nothing is live. */
  private oldestLiveBatch(none: number): number {
    let oldest = none;
    for (const g of this.state.values()) oldest = Math.min(oldest, oldestBatchOf(g, none));
    return oldest;
  }

  /** Deletes the oldest segments while every batch in them is older than `below`; never the last segment. */
  private async collect(below: number): Promise<void> {
    let removed = false;
    while (this.segments.length > 1 && this.segments[1]!.firstBatch <= below) {
      const oldest = this.segments.shift()!;
      await rm(oldest.path);
      removed = true;
    }
    // Durably gone before anything relies on it: a crash may never bring back an old segment behind a gap.
    if (removed && this.sync) await syncDirectory(this.dir);
  }

  private queueRewrites(): void {
    const keep = LIMITS.raftLogSegmentsBeforeRewrite;
    if (this.segments.length <= keep || this.closed) return;
    const threshold = this.segments[this.segments.length - keep]!.firstBatch;
    for (const [group, g] of this.state) {
      if (oldestBatchOf(g, threshold) >= threshold) continue;
      this.counts.rewrites++;
      this.enqueue({
        op: 'rewrite',
        group,
        hardState: g.hardState,
        snapshot: g.snapshot,
        entries: [...g.entries],
      });
    }
  }
}

function oldestBatchOf(g: GroupState, none: number): number {
  let oldest = none;
  if (g.hardState !== null) oldest = Math.min(oldest, g.hardBatch);
  if (g.snapshot !== null) oldest = Math.min(oldest, g.snapshotBatch);
  if (g.entryBatches.length > 0) oldest = Math.min(oldest, g.entryBatches[0]!);
  return oldest;
}

// ---------------------------------------------------------------- the state, live and in replay

function emptyGroup(): GroupState {
  return { hardState: null, hardBatch: 0, snapshot: null, snapshotBatch: 0, entries: [], entryBatches: [] };
}

function ensureGroup(state: Map<PartitionId, GroupState>, group: PartitionId): GroupState {
  let g = state.get(group);
  if (g === undefined) {
    g = emptyGroup();
    state.set(group, g);
  }
  return g;
}

/**
 * Applies one operation, the same way on the write path (after its checks) and in replay. In replay the group may
 * lack entries that lay in deleted segments, so entries that do not extend the stored ones replace them.
 */
function applyOperation(state: Map<PartitionId, GroupState>, o: Operation, batch: number): void {
  const group = partitionId(o.group);
  switch (o.op) {
    case 'save': {
      const g = ensureGroup(state, group);
      if (o.snapshot !== null) setSnapshot(g, o.snapshot, batch, true);
      appendEntries(g, o.entries, batch);
      if (o.hardState !== null) {
        g.hardState = o.hardState;
        g.hardBatch = batch;
      }
      return;
    }
    case 'compact': {
      const g = ensureGroup(state, group);
      if (g.snapshot !== null && o.snapshot.index <= g.snapshot.index) return;
      setSnapshot(g, o.snapshot, batch, false);
      return;
    }
    case 'remove':
      state.delete(group);
      return;
    case 'rewrite': {
      const g = emptyGroup();
      g.hardState = o.hardState;
      g.hardBatch = batch;
      g.snapshot = o.snapshot;
      g.snapshotBatch = batch;
      g.entries = [...o.entries];
      g.entryBatches = o.entries.map(() => batch);
      state.set(group, g);
      return;
    }
  }
}

function setSnapshot(g: GroupState, snapshot: Snapshot, batch: number, replaceLog: boolean): void {
  g.snapshot = snapshot;
  g.snapshotBatch = batch;
  const head = g.entries[0]?.index ?? 0;
  const drop = replaceLog ? g.entries.length : Math.min(g.entries.length, Math.max(0, snapshot.index - head + 1));
  g.entries.splice(0, drop);
  g.entryBatches.splice(0, drop);
}

function appendEntries(g: GroupState, entries: readonly Entry[], batch: number): void {
  const first = entries[0];
  if (first === undefined) return;
  const head = g.entries[0]?.index;
  let keep = head === undefined ? 0 : first.index - head;
  if (keep < 0 || keep > g.entries.length) keep = 0;
  g.entries.length = keep;
  g.entryBatches.length = keep;
  for (const e of entries) {
    g.entries.push(e);
    g.entryBatches.push(batch);
  }
}

// ---------------------------------------------------------------- recovery

interface Recovered {
  readonly state: Map<PartitionId, GroupState>;
  readonly segments: Segment[];
  readonly offset: number;
  readonly nextBatch: number;
}

function segmentPath(dir: string, seq: number): string {
  return join(dir, `${String(seq).padStart(16, '0')}.seg`);
}

function corrupted(message: string, details: Record<string, unknown>): BasaltError {
  return new BasaltError('STORAGE_CORRUPTED', message, details);
}

async function recover(dir: string, options: Required<SegmentedLogOptions>): Promise<Recovered> {
  const names = await readdir(dir);
  // A segment still under creation when the process died: never used.
  for (const name of names) if (name.endsWith(TEMPORARY_SUFFIX)) await rm(join(dir, name));
  const seqs = names
    .map((n) => SEGMENT_NAME.exec(n)?.[1])
    .filter((s): s is string => s !== undefined)
    .map(Number)
    .sort((a, b) => a - b);
  seqs.forEach((seq, i) => {
    if (seq !== seqs[0]! + i) throw corrupted(`segment ${seqs[0]! + i} of the Raft log in ${dir} is missing`, { dir });
  });
  const state = new Map<PartitionId, GroupState>();
  const segments: Segment[] = [];
  let nextBatch: number | null = null;
  let offset = SEGMENT_HEADER_BYTES;
  for (const [i, seq] of seqs.entries()) {
    const path = segmentPath(dir, seq);
    const bytes = await readFile(path);
    const isLast = i === seqs.length - 1;
    const scanned = scanSegment(bytes, path, isLast, nextBatch, state);
    segments.push({
      seq,
      path,
      firstBatch: scanned.firstBatch ?? nextBatch ?? 1,
      sizeBytes: Math.max(bytes.length, options.segmentBytes),
    });
    nextBatch = scanned.nextBatch ?? nextBatch;
    offset = scanned.end;
    if (isLast) await clearTail(path, bytes, scanned.end, options);
  }
  checkReplayed(state, dir);
  if (segments.length === 0) {
    segments.push(await createSegment(dir, 1, 1, options.segmentBytes, options.sync));
    offset = SEGMENT_HEADER_BYTES;
  }
  return { state, segments, offset, nextBatch: nextBatch ?? 1 };
}

interface Scanned {
  /** Where the valid records end. */
  readonly end: number;
  readonly firstBatch: number | null;
  /** The batch after the last one replayed (null if the segment held none). */
  readonly nextBatch: number | null;
}

function scanSegment(
  bytes: Buffer,
  path: string,
  isLast: boolean,
  expected: number | null,
  state: Map<PartitionId, GroupState>,
): Scanned {
  if (bytes.length < SEGMENT_HEADER_BYTES || !bytes.subarray(0, MAGIC.length).equals(MAGIC)) {
    throw corrupted(`${path} is not a Raft log segment`, { path });
  }
  const version = bytes.readUInt32LE(MAGIC.length);
  if (version !== FORMAT_VERSION) throw corrupted(`${path} has format version ${version}`, { path, version });
  let off = SEGMENT_HEADER_BYTES;
  let firstBatch: number | null = null;
  let next = expected;
  const bad = (why: string): BasaltError => corrupted(`${path}: ${why} at offset ${off}`, { path, offset: off });
  while (off + RECORD_HEADER_BYTES <= bytes.length) {
    const length = bytes.readUInt32LE(off);
    const crc = bytes.readUInt32LE(off + 4);
    if (length === 0 && crc === 0) break;
    const start = off + RECORD_HEADER_BYTES;
    const intact = length > 0 && length <= bytes.length - start && crc32(bytes.subarray(start, start + length)) === crc;
    if (!intact) {
      if (isLast) break;
      throw bad('a torn or damaged record');
    }
    const [batch, operations] = decodeRecord(bytes.subarray(start, start + length), bad);
    if (next !== null && batch !== next) {
      if (isLast) break;
      throw bad(`batch ${batch} where ${next} was due`);
    }
    for (const o of operations) applyOperation(state, o, batch);
    firstBatch ??= batch;
    next = batch + 1;
    off = start + length;
  }
  return { end: off, firstBatch, nextBatch: firstBatch === null ? null : next };
}

function decodeRecord(payload: Buffer, bad: (why: string) => BasaltError): [number, Operation[]] {
  let decoded: unknown;
  try {
    decoded = packr.unpack(payload);
  } catch {
    throw bad('a record that passes its CRC but does not decode');
  }
  if (!Array.isArray(decoded) || !Number.isSafeInteger(decoded[0]) || (decoded[0] as number) < 1) {
    throw bad('a record without a batch number');
  }
  const operations = decoded.slice(1).map((o: unknown) => {
    const op = asPlainBytes(o);
    if (!isOperation(op)) throw bad('a malformed operation');
    return op;
  });
  return [decoded[0] as number, operations];
}

const isIndex = (v: unknown): boolean => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null;
const isSnapshot = (v: unknown): boolean =>
  isObject(v) && isIndex(v['index']) && isIndex(v['term']) && v['data'] instanceof Uint8Array;

function isEntries(v: unknown): boolean {
  if (!Array.isArray(v)) return false;
  return v.every(
    (e: unknown, i) =>
      isObject(e) &&
      isIndex(e['index']) &&
      isIndex(e['term']) &&
      (i === 0 || e['index'] === (v[i - 1] as { index: number }).index + 1),
  );
}

function isOperation(v: unknown): v is Operation {
  if (!isObject(v) || typeof v['group'] !== 'string') return false;
  const hardOk = v['hardState'] === null || isObject(v['hardState']);
  const snapshotOk = v['snapshot'] === null || isSnapshot(v['snapshot']);
  switch (v['op']) {
    case 'save':
    case 'rewrite':
      return hardOk && snapshotOk && isEntries(v['entries']);
    case 'compact':
      return isSnapshot(v['snapshot']);
    case 'remove':
      return true;
    default:
      return false;
  }
}

/** Decoded byte fields are Node Buffers; they are handed out as plain Uint8Arrays, as they were stored. */
function asPlainBytes(v: unknown): unknown {
  if (v instanceof Uint8Array) return Buffer.isBuffer(v) ? new Uint8Array(v.buffer, v.byteOffset, v.byteLength) : v;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) v[i] = asPlainBytes(v[i]);
    return v;
  }
  if (isObject(v)) {
    for (const key of Object.keys(v)) v[key] = asPlainBytes(v[key]);
  }
  return v;
}

/** After replay every group's entries directly follow its snapshot; anything else means the log lost records. */
function checkReplayed(state: Map<PartitionId, GroupState>, dir: string): void {
  for (const [group, g] of state) {
    const first = g.entries[0];
    const base = g.snapshot?.index ?? 0;
    if (first !== undefined && first.index !== base + 1) {
      throw corrupted(`the Raft log of ${group} in ${dir} has a hole after ${base}`, {
        dir,
        group,
        index: first.index,
      });
    }
  }
}

/**
 * Zeroes the last segment after its valid records where it is not zero already (a torn record, garbage), and up to
 * its full size if it was cut short, so that the next record written there is followed by zeros.
 */
async function clearTail(path: string, bytes: Buffer, end: number, options: Required<SegmentedLogOptions>) {
  let dirtyEnd = bytes.length;
  while (dirtyEnd > end) {
    const from = Math.max(end, dirtyEnd - ZERO_CHUNK_BYTES);
    const chunk = bytes.subarray(from, dirtyEnd);
    if (!chunk.equals(ZEROS.subarray(0, chunk.length))) break;
    dirtyEnd = from;
  }
  while (dirtyEnd > end && bytes[dirtyEnd - 1] === 0) dirtyEnd--;
  const sizeBytes = Math.max(bytes.length, options.segmentBytes);
  if (dirtyEnd <= end && bytes.length >= sizeBytes) return;
  const handle = await open(path, 'r+');
  try {
    await writeZeros(handle, end, dirtyEnd);
    await writeZeros(handle, bytes.length, sizeBytes);
    if (options.sync) await handle.sync();
  } finally {
    await handle.close();
  }
}

// ---------------------------------------------------------------- files

async function createSegment(
  dir: string,
  seq: number,
  firstBatch: number,
  sizeBytes: number,
  sync: boolean,
): Promise<Segment> {
  const temporary = `${segmentPath(dir, seq)}${TEMPORARY_SUFFIX}`;
  await prepareSegmentFile(temporary, sizeBytes, sync);
  return installSegment(temporary, dir, seq, firstBatch, sizeBytes, sync);
}

/** Writes a segment's header and zeros to `temporary` (a name recovery removes), fsynced. */
async function prepareSegmentFile(temporary: string, sizeBytes: number, sync: boolean): Promise<void> {
  const handle = await open(temporary, 'w');
  try {
    const header = Buffer.alloc(SEGMENT_HEADER_BYTES);
    MAGIC.copy(header, 0);
    header.writeUInt32LE(FORMAT_VERSION, MAGIC.length);
    await writeFully(handle, header, 0);
    await writeZeros(handle, SEGMENT_HEADER_BYTES, sizeBytes);
    if (sync) await handle.sync();
  } finally {
    await handle.close();
  }
}

/** Gives a prepared file its segment name, durably: only then can recovery see it. */
async function installSegment(
  temporary: string,
  dir: string,
  seq: number,
  firstBatch: number,
  sizeBytes: number,
  sync: boolean,
): Promise<Segment> {
  const path = segmentPath(dir, seq);
  await rename(temporary, path);
  if (sync) await syncDirectory(dir);
  return { seq, path, firstBatch, sizeBytes };
}

async function writeZeros(handle: FileHandle, from: number, to: number): Promise<void> {
  for (let at = from; at < to; at += ZERO_CHUNK_BYTES) {
    await writeFully(handle, ZEROS.subarray(0, Math.min(ZERO_CHUNK_BYTES, to - at)), at);
  }
}

async function writeFully(handle: FileHandle, bytes: Uint8Array, position: number): Promise<void> {
  let done = 0;
  while (done < bytes.length) {
    const { bytesWritten } = await handle.write(bytes, done, bytes.length - done, position + done);
    done += bytesWritten;
  }
}

/** A copy into the page cache of a preallocated file: cheaper on the event loop than a hop to the thread pool. */
function writeFullySync(fd: number, bytes: Uint8Array, position: number): void {
  let done = 0;
  while (done < bytes.length) done += writeSync(fd, bytes, done, bytes.length - done, position + done);
}

async function syncDirectory(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
