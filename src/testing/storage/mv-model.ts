/**
 * Property test of the version-chain rules: random sequences of addWrite / commitWrite / abortWrite /
 * addWriteCommitted / read / readLatest / scan / gc / rowsWrittenBy / snapshot+restore run against a storage and
 * against a deliberately naive model (a map of key → {intent, versions}), and every result must agree. Commit
 * timestamps come from one increasing clock, so they always respect the chain order; read timestamps are arbitrary.
 * On failure fast-check prints the seed and the shrunk command list; rerun with `{ seed, path }` to replay.
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import fc from 'fast-check';
import type { HybridTimestamp, TxId } from '../../core/ids.js';
import {
  type CommittedRead,
  type Expiry,
  type MvPartitionStorage,
  type ReadResult,
  type RowValue,
  TOMBSTONE,
} from '../../storage/mv-partition-storage.js';
import { type OpenEngine, pid, ts, tx, withEngine } from './contract-harness.js';

const CP = pid('t9p0');
const KEYS = ['a', 'ab', 'b', 'é', '\uFFFF', '😀'] as const;
const TXS = [tx('tx1'), tx('tx2'), tx('tx3')] as const;

interface ModelVersion {
  commitTs: HybridTimestamp;
  value: RowValue;
  expiresAt?: HybridTimestamp;
}

interface ModelRow {
  intent: { txId: TxId; value: RowValue; expiry?: Expiry } | undefined;
  /** Newest first. */
  versions: ModelVersion[];
}

type Command =
  | { op: 'addWrite'; key: string; value: RowValue; txId: TxId; expiry: Expiry | undefined }
  | { op: 'commit'; key: string; txId: TxId; gap: number }
  | { op: 'abort'; key: string; txId: TxId }
  | { op: 'addWriteCommitted'; key: string; value: RowValue; gap: number; expiry: Expiry | undefined }
  | { op: 'read'; key: string; at: number }
  | { op: 'readLatest'; key: string }
  | { op: 'scan'; at: number | 'latest'; start: string; limit: number }
  | { op: 'gc'; watermark: number }
  | { op: 'rowsWrittenBy'; txId: TxId }
  | { op: 'snapshotRestore' };

const key = fc.constantFrom(...KEYS);
const txArb = fc.constantFrom(...TXS);
const value: fc.Arbitrary<RowValue> = fc.oneof(
  { weight: 4, arbitrary: fc.integer({ min: 0, max: 99 }) },
  { weight: 1, arbitrary: fc.constant(TOMBSTONE) },
);
const at = fc.integer({ min: 1, max: 130 });
/** Mostly none; else an absolute expiry within the clock's range, or a ttl (whole ms: beyond every test timestamp). */
const expiry: fc.Arbitrary<Expiry | undefined> = fc.oneof(
  { weight: 3, arbitrary: fc.constant(undefined) },
  { weight: 2, arbitrary: at.map((n) => ({ at: ts(n) })) },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 5 }).map((ttlMs) => ({ ttlMs })) },
);

const command: fc.Arbitrary<Command> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ op: fc.constant('addWrite' as const), key, value, txId: txArb, expiry }) },
  {
    weight: 3,
    arbitrary: fc.record({ op: fc.constant('commit' as const), key, txId: txArb, gap: fc.integer({ min: 1, max: 3 }) }),
  },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('abort' as const), key, txId: txArb }) },
  {
    weight: 3,
    arbitrary: fc.record({
      op: fc.constant('addWriteCommitted' as const),
      key,
      value,
      gap: fc.integer({ min: 1, max: 3 }),
      expiry,
    }),
  },
  { weight: 4, arbitrary: fc.record({ op: fc.constant('read' as const), key, at }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('readLatest' as const), key }) },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant('scan' as const),
      at: fc.oneof(at, fc.constant('latest' as const)),
      start: fc.constantFrom('', ...KEYS),
      limit: fc.integer({ min: 1, max: 4 }),
    }),
  },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('gc' as const), watermark: at }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('rowsWrittenBy' as const), txId: txArb }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('snapshotRestore' as const) }) },
);

function utf8Order(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a), Buffer.from(b));
}

/** The naive model: every rule written out directly over plain arrays. */
class MvModel {
  readonly rows = new Map<string, ModelRow>();
  clock = 0;

  addWrite(k: string, v: RowValue, txId: TxId, expiry: Expiry | undefined): unknown {
    const row = this.rows.get(k) ?? { intent: undefined, versions: [] };
    if (row.intent !== undefined && row.intent.txId !== txId)
      return { status: 'TX_MISMATCH', intentTxId: row.intent.txId };
    row.intent = expiry === undefined ? { txId, value: v } : { txId, value: v, expiry };
    this.rows.set(k, row);
    return { status: 'SUCCESS' };
  }

  finish(k: string, txId: TxId, commitTs: HybridTimestamp | undefined): unknown {
    const row = this.rows.get(k);
    if (row?.intent === undefined) return { status: 'NO_WRITE_INTENT' };
    if (row.intent.txId !== txId) return { status: 'TX_MISMATCH', intentTxId: row.intent.txId };
    if (commitTs !== undefined) row.versions.unshift(version(commitTs, row.intent.value, row.intent.expiry));
    row.intent = undefined;
    if (row.versions.length === 0) this.rows.delete(k);
    return { status: 'SUCCESS' };
  }

  addWriteCommitted(k: string, v: RowValue, commitTs: HybridTimestamp, expiry: Expiry | undefined): unknown {
    const row = this.rows.get(k) ?? { intent: undefined, versions: [] };
    if (row.intent !== undefined) return { status: 'WRITE_INTENT_EXISTS', intentTxId: row.intent.txId };
    row.versions.unshift(version(commitTs, v, expiry));
    this.rows.set(k, row);
    return { status: 'SUCCESS' };
  }

  read(k: string, readTs: HybridTimestamp | 'latest'): ReadResult {
    const row = this.rows.get(k);
    if (row === undefined) return { kind: 'empty' };
    const newest = row.versions[0];
    const intentVisible = readTs === 'latest' || newest === undefined || newest.commitTs <= readTs;
    if (row.intent !== undefined && intentVisible) {
      const read: ReadResult = {
        kind: 'intent',
        value: row.intent.value,
        txId: row.intent.txId,
        commitPartitionId: CP,
        newestCommitTimestamp: newest?.commitTs,
        newestCommittedValue: newest === undefined ? undefined : committed(newest, readTs).value,
      };
      return row.intent.expiry === undefined ? read : { ...read, expiry: row.intent.expiry };
    }
    const visible = readTs === 'latest' ? newest : row.versions.find((v) => v.commitTs <= readTs);
    return visible === undefined ? { kind: 'empty' } : committed(visible, readTs);
  }

  scan(readTs: HybridTimestamp | 'latest', start: string, limit: number): { keys: string[]; nextKey?: string } {
    const keys = [...this.rows.keys()].filter((k) => utf8Order(k, start) >= 0).sort(utf8Order);
    const out: string[] = [];
    for (const k of keys) {
      if (out.length === limit) return { keys: out, nextKey: k };
      const r = this.read(k, readTs);
      if (r.kind === 'empty' || (r.kind === 'committed' && r.value === TOMBSTONE)) continue;
      out.push(k);
    }
    return { keys: out };
  }

  gc(watermark: HybridTimestamp): void {
    for (const [k, row] of this.rows) {
      const floor = row.versions.findIndex((v) => v.commitTs <= watermark);
      if (floor < 0) continue;
      row.versions.length = floor + 1;
      const head = row.versions[0]!;
      const absent = head.value === TOMBSTONE || (head.expiresAt !== undefined && head.expiresAt <= watermark);
      if (floor === 0 && absent && row.intent === undefined) row.versions.length = 0;
      if (row.versions.length === 0 && row.intent === undefined) this.rows.delete(k);
    }
  }
}

/** A committed version with its expiry fixed: a ttl counts whole milliseconds (2^16 units) from its commit. */
function version(commitTs: HybridTimestamp, value: RowValue, expiry: Expiry | undefined): ModelVersion {
  if (expiry === undefined) return { commitTs, value };
  const expiresAt = 'at' in expiry ? expiry.at : ts(commitTs + BigInt(expiry.ttlMs) * 65_536n);
  return { commitTs, value, expiresAt };
}

/** A committed version as read at `readTs`: at or past its expiry, a tombstone. */
function committed(v: ModelVersion, readTs: HybridTimestamp | 'latest'): CommittedRead {
  if (v.expiresAt === undefined) return { kind: 'committed', commitTs: v.commitTs, value: v.value };
  if (readTs !== 'latest' && v.expiresAt <= readTs)
    return { kind: 'committed', commitTs: v.commitTs, value: TOMBSTONE };
  return { kind: 'committed', commitTs: v.commitTs, value: v.value, expiresAt: v.expiresAt };
}

function rowId(s: MvPartitionStorage, k: string) {
  return s.rowIdOf(k);
}

/** Applies one command to both; asserts that they agree. Returns the storage to continue with. */
function step(model: MvModel, s: MvPartitionStorage, c: Command, fresh: () => MvPartitionStorage): MvPartitionStorage {
  switch (c.op) {
    case 'addWrite':
      assert.deepEqual(
        s.addWrite(s.ensureRowId(c.key), c.value, c.txId, CP, c.expiry),
        model.addWrite(c.key, c.value, c.txId, c.expiry),
      );
      return s;
    case 'commit': {
      model.clock += c.gap;
      const r = rowId(s, c.key);
      const actual = r === undefined ? { status: 'NO_WRITE_INTENT' } : s.commitWrite(r, ts(model.clock), c.txId);
      assert.deepEqual(actual, model.finish(c.key, c.txId, ts(model.clock)));
      return s;
    }
    case 'abort': {
      const r = rowId(s, c.key);
      const actual = r === undefined ? { status: 'NO_WRITE_INTENT' } : s.abortWrite(r, c.txId);
      assert.deepEqual(actual, model.finish(c.key, c.txId, undefined));
      return s;
    }
    case 'addWriteCommitted':
      model.clock += c.gap;
      assert.deepEqual(
        s.addWriteCommitted(s.ensureRowId(c.key), c.value, ts(model.clock), c.expiry),
        model.addWriteCommitted(c.key, c.value, ts(model.clock), c.expiry),
      );
      return s;
    case 'read':
    case 'readLatest': {
      const r = rowId(s, c.key);
      const readTs = c.op === 'read' ? ts(c.at) : 'latest';
      const actual: ReadResult =
        r === undefined ? { kind: 'empty' } : readTs === 'latest' ? s.readLatest(r) : s.read(r, readTs);
      assert.deepEqual(actual, model.read(c.key, readTs));
      assert.equal(r !== undefined, model.rows.has(c.key), 'a key has a row exactly when the model has one');
      return s;
    }
    case 'scan': {
      const readTs = c.at === 'latest' ? 'latest' : ts(c.at);
      const result = s.scan({ kind: 'range', start: c.start }, readTs, c.limit);
      const expected = model.scan(readTs, c.start, c.limit);
      assert.deepEqual(
        result.rows.map((row) => row.key),
        expected.keys,
      );
      assert.equal(result.nextKey, expected.nextKey);
      for (const row of result.rows) assert.deepEqual(row.read, model.read(row.key, readTs));
      return s;
    }
    case 'gc':
      s.gc(ts(c.watermark));
      model.gc(ts(c.watermark));
      return s;
    case 'rowsWrittenBy': {
      const expected = [...model.rows].filter(([, row]) => row.intent?.txId === c.txId).map(([k]) => rowId(s, k));
      assert.deepEqual([...s.rowsWrittenBy(c.txId)].sort(), expected.sort());
      return s;
    }
    case 'snapshotRestore': {
      const target = fresh();
      target.restore([...s.snapshot()]);
      return target;
    }
  }
}

export function mvModelProperty(name: string, open: OpenEngine): void {
  const numRuns = name === 'memory' ? 300 : 120;
  it(`agrees with a naive model of version chains on random operation sequences (${numRuns} runs)`, () =>
    withEngine(open, (engine) => {
      let partitions = 0;
      const fresh = () => engine.mvPartition(pid(`model${partitions++}`));
      fc.assert(
        fc.property(fc.array(command, { minLength: 1, maxLength: 50 }), (commands) => {
          const model = new MvModel();
          let s = fresh();
          for (const c of commands) s = step(model, s, c, fresh);
          // Final sweep: every key agrees at every timestamp.
          for (const k of KEYS) {
            for (let t = 1; t <= model.clock + 1; t++) {
              const r = rowId(s, k);
              assert.deepEqual(r === undefined ? { kind: 'empty' } : s.read(r, ts(t)), model.read(k, ts(t)));
            }
          }
        }),
        { numRuns },
      );
    }));
}
