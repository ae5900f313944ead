/**
 * The segmented log beyond the shared contract: group commit, torn tails, corruption, segment roll-over and deletion,
 * and a model check that a reopen after every step loads exactly what the resolved writes stored.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { isBasaltError } from '../core/errors.js';
import { logIndex, nodeName, type PartitionId, partitionId, term } from '../core/ids.js';
import type { LogStorage } from './log-storage.js';
import { MemoryLogStorage } from './memory-log-storage.js';
import { makeEntry } from './raft-log.js';
import { SegmentedLogStorage } from './segmented-log-storage.js';
import type { Entry, Snapshot } from './types.js';

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-seglog-'));
  dirs.push(dir);
  return dir;
}

const SMALL = { segmentBytes: 4096 };
/** Large enough that the recovery tests stay in one segment, small enough to create quickly. */
const ONE_SEGMENT = { segmentBytes: 256 * 1024 };
const groupsOf = (n: number): PartitionId[] => Array.from({ length: n }, (_, i) => partitionId(`t1p${i}`));
const bytes = (s: string): Uint8Array => new TextEncoder().encode(s);

function entries(from: number, to: number, t: number, tag = ''): Entry[] {
  const out: Entry[] = [];
  for (let i = from; i <= to; i++) out.push(makeEntry(i, t, 'data', bytes(`e${i}t${t}${tag}`)));
  return out;
}

function segmentFiles(dir: string): string[] {
  return readdirSync(dir)
    .filter((n) => n.endsWith('.seg'))
    .sort();
}

/** The end of the records in a segment: its last non-zero byte + 1 (test data never ends in a zero byte). */
function recordsEnd(path: string): number {
  const b = readFileSync(path);
  let end = b.length;
  while (end > 0 && b[end - 1] === 0) end--;
  return end;
}

function flipByte(path: string, at: number): void {
  const b = readFileSync(path);
  b[at] = b[at]! ^ 0xff;
  writeFileSync(path, b);
}

function assertSameState(actual: LogStorage, expected: LogStorage, context: string): void {
  assert.deepEqual(actual.groups(), expected.groups(), `${context}: groups`);
  for (const g of expected.groups()) assert.deepEqual(actual.load(g), expected.load(g), `${context}: ${g}`);
}

describe('segmented log: group commit', () => {
  test('saves of many groups in one turn are one batch with one datasync, and all resolve durable', async () => {
    const log = await SegmentedLogStorage.open(tempDir(), ONE_SEGMENT);
    const before = log.stats();
    await Promise.all(
      groupsOf(16).map((g) => log.save(g, { hardState: null, snapshot: null, entries: entries(1, 2, 1) })),
    );
    const after = log.stats();
    assert.equal(after.batches - before.batches, 1);
    assert.equal(after.datasyncs - before.datasyncs, 1);
    await log.close();
  });

  test('calls made while a batch is being written form the next batch, one write and one sync for all of them', async () => {
    const log = await SegmentedLogStorage.open(tempDir(), ONE_SEGMENT);
    const [a, b, c] = groupsOf(3) as [PartitionId, PartitionId, PartitionId];
    const first = log.save(a, { hardState: null, snapshot: null, entries: entries(1, 1, 1) });
    // The flush microtask has run: the first batch is in flight, waiting for the disk.
    for (let i = 0; i < 5; i++) await Promise.resolve();
    const later = [
      log.save(b, { hardState: null, snapshot: null, entries: entries(1, 1, 1) }),
      log.save(c, { hardState: null, snapshot: null, entries: entries(1, 1, 1) }),
      log.compact(a, { index: logIndex(1), term: term(1), data: bytes('s1') }),
    ];
    await Promise.all([first, ...later]);
    assert.deepEqual(log.stats(), { batches: 2, datasyncs: 2, segments: 1, rewrites: 0 });
    await log.close();
  });

  test('without sync nothing is fdatasynced, and the data still reads back after a reopen', async () => {
    const dir = tempDir();
    const log = await SegmentedLogStorage.open(dir, { ...ONE_SEGMENT, sync: false });
    const g = partitionId('t1p0');
    await log.save(g, { hardState: null, snapshot: null, entries: entries(1, 3, 1) });
    assert.equal(log.stats().datasyncs, 0);
    await log.close();
    const again = await SegmentedLogStorage.open(dir, { ...ONE_SEGMENT, sync: false });
    assert.equal(again.load(g).entries.length, 3);
    await again.close();
  });

  test('a closed log refuses writes with STORAGE_CLOSED', async () => {
    const log = await SegmentedLogStorage.open(tempDir(), ONE_SEGMENT);
    await log.close();
    await assert.rejects(
      log.save(partitionId('t1p0'), { hardState: null, snapshot: null, entries: entries(1, 1, 1) }),
      (e: unknown) => isBasaltError(e, 'STORAGE_CLOSED'),
    );
  });
});

describe('segmented log: recovery', () => {
  const g = partitionId('t1p0');
  const hs = { term: term(2), vote: nodeName('n1'), commit: logIndex(3) };

  /** Two batches in one segment; returns where each ends. */
  async function twoBatches(dir: string): Promise<{ path: string; end1: number; end2: number }> {
    let log = await SegmentedLogStorage.open(dir, ONE_SEGMENT);
    await log.save(g, { hardState: hs, snapshot: null, entries: entries(1, 3, 2) });
    await log.close();
    const path = join(dir, segmentFiles(dir)[0]!);
    const end1 = recordsEnd(path);
    log = await SegmentedLogStorage.open(dir, ONE_SEGMENT);
    await log.save(g, { hardState: null, snapshot: null, entries: entries(4, 6, 2) });
    await log.close();
    return { path, end1, end2: recordsEnd(path) };
  }

  /** The log holds the first batch only, takes a new write there, and keeps it across another reopen. */
  async function assertFirstBatchThenAppend(dir: string): Promise<void> {
    let log = await SegmentedLogStorage.open(dir, ONE_SEGMENT);
    assert.deepEqual(log.load(g), { hardState: hs, snapshot: null, entries: entries(1, 3, 2) });
    await log.save(g, { hardState: null, snapshot: null, entries: entries(4, 4, 3, 'new') });
    await log.close();
    log = await SegmentedLogStorage.open(dir, ONE_SEGMENT);
    assert.deepEqual(log.load(g).entries, [...entries(1, 3, 2), ...entries(4, 4, 3, 'new')]);
    await log.close();
  }

  test('a file cut in the middle of the last record recovers to the batch before it', async () => {
    const dir = tempDir();
    const { path, end1, end2 } = await twoBatches(dir);
    truncateSync(path, Math.floor((end1 + end2) / 2));
    await assertFirstBatchThenAppend(dir);
  });

  test('a flipped byte in the last record fails its CRC and ends the log before it', async () => {
    const dir = tempDir();
    const { path, end1, end2 } = await twoBatches(dir);
    flipByte(path, end2 - 2);
    assert.ok(end2 - 2 > end1);
    await assertFirstBatchThenAppend(dir);
  });

  test('garbage after the last record is ignored and cleared, and later writes survive reopening', async () => {
    const dir = tempDir();
    const { path, end2 } = await twoBatches(dir);
    const b = readFileSync(path);
    for (let i = 0; i < 100; i++) b[end2 + i] = (i * 37 + 11) & 0xff || 1;
    writeFileSync(path, b);
    let log = await SegmentedLogStorage.open(dir, ONE_SEGMENT);
    assert.deepEqual(log.load(g).entries, entries(1, 6, 2));
    await log.save(g, { hardState: null, snapshot: null, entries: entries(7, 7, 2) });
    await log.close();
    assert.equal(
      readFileSync(path)
        .subarray(recordsEnd(path))
        .every((x) => x === 0),
      true,
    );
    log = await SegmentedLogStorage.open(dir, ONE_SEGMENT);
    assert.deepEqual(log.load(g).entries, entries(1, 7, 2));
    await log.close();
  });

  test('a damaged record in a segment before the last one is STORAGE_CORRUPTED', async () => {
    const dir = tempDir();
    const log = await SegmentedLogStorage.open(dir, SMALL);
    for (let i = 1; i <= 40; i++) {
      await log.save(g, { hardState: null, snapshot: null, entries: entries(i, i, 1, 'x'.repeat(200)) });
    }
    await log.close();
    const files = segmentFiles(dir);
    assert.ok(files.length >= 2, `rolled over into ${files.length} segments`);
    flipByte(join(dir, files[0]!), 40);
    await assert.rejects(SegmentedLogStorage.open(dir, SMALL), (e: unknown) => isBasaltError(e, 'STORAGE_CORRUPTED'));
  });

  test('a missing segment in the middle is STORAGE_CORRUPTED', async () => {
    const dir = tempDir();
    const log = await SegmentedLogStorage.open(dir, SMALL);
    for (let i = 1; i <= 60; i++) {
      await log.save(g, { hardState: null, snapshot: null, entries: entries(i, i, 1, 'x'.repeat(200)) });
    }
    await log.close();
    const files = segmentFiles(dir);
    assert.ok(files.length >= 2);
    // Renaming the last segment one number up leaves a hole where it was.
    const last = files[files.length - 1]!;
    const moved = `${String(Number(last.slice(0, 16)) + 1).padStart(16, '0')}.seg`;
    renameSync(join(dir, last), join(dir, moved));
    await assert.rejects(SegmentedLogStorage.open(dir, SMALL), (e: unknown) => isBasaltError(e, 'STORAGE_CORRUPTED'));
  });

  test('fields and entry kinds the log does not know pass through unchanged', async () => {
    const dir = tempDir();
    let log = await SegmentedLogStorage.open(dir, ONE_SEGMENT);
    const config = { ...makeEntry(2, 1, 'data', bytes('cc')), kind: 'config', change: { add: ['n4'], learner: true } };
    const snapshot = { index: logIndex(1), term: term(1), data: bytes('s'), voters: ['n1', 'n2'], learners: ['n4'] };
    await log.save(g, { hardState: null, snapshot: snapshot as Snapshot, entries: [config as unknown as Entry] });
    await log.close();
    log = await SegmentedLogStorage.open(dir, ONE_SEGMENT);
    const loaded = log.load(g);
    assert.deepEqual(loaded.snapshot, snapshot);
    assert.deepEqual(loaded.entries, [config]);
    await log.close();
  });
});

describe('segmented log: segments', () => {
  test('segments roll over, an idle group is rewritten forward, obsolete segments are deleted, and nothing is lost', async () => {
    const dir = tempDir();
    const [idle, busy] = groupsOf(2) as [PartitionId, PartitionId];
    let log = await SegmentedLogStorage.open(dir, SMALL);
    const model = new MemoryLogStorage();
    const both = async (f: (s: LogStorage) => Promise<void>) => {
      await f(model);
      await f(log);
    };
    const idleHs = { term: term(1), vote: nodeName('n1'), commit: logIndex(1) };
    await both((s) => s.save(idle, { hardState: idleHs, snapshot: null, entries: entries(1, 2, 1) }));
    await both((s) => s.compact(idle, { index: logIndex(1), term: term(1), data: bytes('idle@1') }));
    const firstSegment = segmentFiles(dir)[0]!;
    let maxFiles = 0;
    for (let i = 1; i <= 300; i++) {
      await both((s) => s.save(busy, { hardState: null, snapshot: null, entries: entries(i, i, 1, 'y'.repeat(100)) }));
      if (i % 10 === 0) await both((s) => s.compact(busy, { index: logIndex(i - 2), term: term(1), data: bytes('b') }));
      maxFiles = Math.max(maxFiles, segmentFiles(dir).length);
    }
    const stats = log.stats();
    assert.ok(stats.rewrites > 0, 'the idle group was rewritten');
    assert.equal(segmentFiles(dir).includes(firstSegment), false, 'the first segment was deleted');
    assert.ok(maxFiles <= 4, `at most 4 segments at a time (saw ${maxFiles})`);
    assertSameState(log, model, 'before reopen');
    await log.close();
    log = await SegmentedLogStorage.open(dir, SMALL);
    assertSameState(log, model, 'after reopen');
    await log.close();
  });

  test('files a crash left half made (a segment under creation, a spare) are removed at open, never replayed', async () => {
    const dir = tempDir();
    const g = partitionId('t1p0');
    let log = await SegmentedLogStorage.open(dir, SMALL);
    await log.save(g, { hardState: null, snapshot: null, entries: entries(1, 2, 1) });
    await log.close();
    writeFileSync(join(dir, '0000000000000002.seg.tmp'), Buffer.alloc(SMALL.segmentBytes, 7));
    writeFileSync(join(dir, 'spare.tmp'), Buffer.alloc(100, 7));
    log = await SegmentedLogStorage.open(dir, SMALL);
    assert.deepEqual(readdirSync(dir), ['0000000000000001.seg']);
    assert.deepEqual(log.load(g).entries, entries(1, 2, 1));
    await log.close();
  });

  test('a batch larger than a segment gets a segment of its own size', async () => {
    const dir = tempDir();
    const g = partitionId('t1p0');
    let log = await SegmentedLogStorage.open(dir, SMALL);
    const big = { index: logIndex(5), term: term(1), data: new Uint8Array(20_000).fill(9) };
    await log.save(g, { hardState: null, snapshot: big, entries: entries(6, 7, 1) });
    await log.close();
    log = await SegmentedLogStorage.open(dir, SMALL);
    assert.deepEqual(log.load(g).snapshot, big);
    assert.equal(log.load(g).entries.length, 2);
    await log.close();
  });
});

/** A fixed-seed LCG: the same sequence of operations on every run. */
function lcg(seed: number): (n: number) => number {
  let state = seed >>> 0;
  return (n) => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return Math.floor((state / 2 ** 32) * n);
  };
}

test('segmented log: a reopen after every step loads exactly what the resolved writes stored (model check)', async () => {
  const dir = tempDir();
  const random = lcg(7);
  const groups = groupsOf(3);
  const model = new MemoryLogStorage();
  let log = await SegmentedLogStorage.open(dir, SMALL);
  let currentTerm = 1;
  for (let step = 0; step < 250; step++) {
    const g = groups[random(groups.length)]!;
    const stored = model.load(g);
    const base = stored.snapshot?.index ?? 0;
    const last = base + stored.entries.length;
    const choice = random(10);
    let write: (s: LogStorage) => Promise<void>;
    if (choice < 5) {
      // Append, or overwrite a suffix (a new leader's conflicting entries), with a hard state now and then.
      const from = last > base && random(4) === 0 ? base + 1 + random(last - base) : last + 1;
      if (random(5) === 0) currentTerm++;
      const es = entries(from, from + random(4), currentTerm, `s${step}`.repeat(random(20)));
      const hs = random(2) === 0 ? { term: term(currentTerm), vote: null, commit: logIndex(base) } : null;
      write = (s) => s.save(g, { hardState: hs, snapshot: null, entries: es });
    } else if (choice < 7 && last > base) {
      const at = base + 1 + random(last - base);
      write = (s) => s.compact(g, { index: logIndex(at), term: term(1), data: bytes(`snap${step}`) });
    } else if (choice < 8) {
      const at = last + 1 + random(5);
      const snapshot = { index: logIndex(at), term: term(currentTerm), data: bytes(`recv${step}`) };
      write = (s) => s.save(g, { hardState: null, snapshot, entries: entries(at + 1, at + 1, currentTerm) });
    } else if (choice < 9) {
      write = (s) => s.removeGroup(g);
    } else {
      const hs = { term: term(++currentTerm), vote: nodeName('n2'), commit: logIndex(base) };
      write = (s) => s.save(g, { hardState: hs, snapshot: null, entries: [] });
    }
    await write(model);
    await write(log);
    await log.close();
    log = await SegmentedLogStorage.open(dir, SMALL);
    assertSameState(log, model, `step ${step}`);
  }
  assert.ok(log.stats().segments <= 4);
  await log.close();
});
