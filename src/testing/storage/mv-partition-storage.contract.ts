/**
 * The MVCC partition storage contract suite: every rule of `MvPartitionStorage`, run against each implementation
 * (`mvPartitionStorageContract('memory', ...)`, `mvPartitionStorageContract('lmdb', ...)`), plus property tests that
 * compare random operation sequences with a simple model of version chains (mv-model.ts).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AssertionError } from '../../core/assert.js';
import { isBasaltError } from '../../core/errors.js';
import type { RowId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import { type MvPartitionStorage, type ReadResult, TOMBSTONE } from '../../storage/mv-partition-storage.js';
import { idx, type OpenEngine, pid, term, ts, tx, withEngine } from './contract-harness.js';
import { mvModelProperty } from './mv-model.js';

const P1 = pid('t1p0');
const P2 = pid('t1p1');
const CP = pid('t9p0');

function committed(value: unknown, commitTs: number): ReadResult {
  return { kind: 'committed', value: value as never, commitTs: ts(commitTs) };
}

function intent(value: unknown, txName: string, newest?: [number, unknown]): ReadResult {
  return {
    kind: 'intent',
    value: value as never,
    txId: tx(txName),
    commitPartitionId: CP,
    newestCommitTimestamp: newest === undefined ? undefined : ts(newest[0]),
    newestCommittedValue: newest === undefined ? undefined : (newest[1] as never),
  };
}

const EMPTY: ReadResult = { kind: 'empty' };

function isInvalidArgument(error: unknown): boolean {
  return isBasaltError(error, 'INVALID_ARGUMENT');
}

/** A row committed at each given timestamp with value `v<ts>` (0 = tombstone). */
function rowWithVersions(s: MvPartitionStorage, key: string, commits: readonly number[]): RowId {
  const row = s.ensureRowId(key);
  for (const at of commits) s.addWriteCommitted(row, at === 0 ? TOMBSTONE : `v${at}`, ts(at));
  return row;
}

function scanKeys(s: MvPartitionStorage, range: Parameters<MvPartitionStorage['scan']>[0]): string[] {
  return s.scan(range, 'latest', LIMITS.storageScanRowsMax).rows.map((r) => r.key);
}

export function mvPartitionStorageContract(name: string, open: OpenEngine): void {
  const withPartition = (body: (s: MvPartitionStorage) => void | Promise<void>) =>
    withEngine(open, (engine) => body(engine.mvPartition(P1)));

  describe(`MvPartitionStorage contract: ${name}`, () => {
    describe('key index', () => {
      it('ensureRowId creates one row per key; rowIdOf and keyOf find it; an unknown key has no row', () =>
        withPartition((s) => {
          assert.equal(s.rowIdOf('a'), undefined);
          const a = s.ensureRowId('a');
          const b = s.ensureRowId('b');
          assert.notEqual(a, b);
          assert.equal(s.ensureRowId('a'), a);
          assert.equal(s.rowIdOf('a'), a);
          assert.equal(s.keyOf(b), 'b');
          assert.deepEqual(s.read(a, ts(100)), EMPTY);
        }));

      it('refuses keys above keyBytesMax UTF-8 bytes and lone surrogates with INVALID_ARGUMENT', () =>
        withPartition((s) => {
          s.ensureRowId('x'.repeat(LIMITS.keyBytesMax));
          // 'é' is 2 bytes: a key of keyBytesMax/2 + 1 of them is short in chars but too long in bytes.
          assert.throws(() => s.ensureRowId('é'.repeat(LIMITS.keyBytesMax / 2 + 1)), isInvalidArgument);
          assert.throws(() => s.ensureRowId('x'.repeat(LIMITS.keyBytesMax + 1)), isInvalidArgument);
          assert.throws(() => s.rowIdOf('bad\uD800'), isInvalidArgument);
        }));
    });

    describe('write intents', () => {
      it('addWrite adds an intent that reads return, with no newest commit on a fresh row', () =>
        withPartition((s) => {
          const r = s.ensureRowId('k');
          assert.deepEqual(s.addWrite(r, { n: 1 }, tx('A'), CP), { status: 'SUCCESS' });
          assert.deepEqual(s.read(r, ts(5)), intent({ n: 1 }, 'A'));
          assert.deepEqual(s.readLatest(r), intent({ n: 1 }, 'A'));
        }));

      it('addWrite by the same tx replaces its own intent', () =>
        withPartition((s) => {
          const r = s.ensureRowId('k');
          s.addWrite(r, 1, tx('A'), CP);
          assert.deepEqual(s.addWrite(r, 2, tx('A'), CP), { status: 'SUCCESS' });
          assert.deepEqual(s.readLatest(r), intent(2, 'A'));
          assert.deepEqual(s.rowsWrittenBy(tx('A')), [r]);
        }));

      it('intentTxIds lists the txs holding intents once each, in tx id order, in pages', () =>
        withPartition((s) => {
          for (const [key, t] of [
            ['a', 'B'],
            ['b', 'A'],
            ['c', 'B'],
            ['d', 'C'],
          ] as const) {
            s.addWrite(s.ensureRowId(key), key, tx(t), CP);
          }
          assert.deepEqual(s.intentTxIds(undefined, 10), [tx('A'), tx('B'), tx('C')]);
          assert.deepEqual(s.intentTxIds(undefined, 2), [tx('A'), tx('B')]);
          assert.deepEqual(s.intentTxIds(tx('B'), 2), [tx('C')], 'the page after B');
          s.abortWrite(s.rowIdOf('d')!, tx('C'));
          assert.deepEqual(s.intentTxIds(tx('B'), 2), [], 'a tx without intents is not listed');
        }));

      it("addWrite over another tx's intent yields TX_MISMATCH and keeps that intent", () =>
        withPartition((s) => {
          const r = s.ensureRowId('k');
          s.addWrite(r, 1, tx('A'), CP);
          assert.deepEqual(s.addWrite(r, 2, tx('B'), CP), { status: 'TX_MISMATCH', intentTxId: tx('A') });
          assert.deepEqual(s.readLatest(r), intent(1, 'A'));
          assert.deepEqual(s.rowsWrittenBy(tx('B')), []);
        }));

      it('commitWrite turns the intent into a version visible from commitTs on', () =>
        withPartition((s) => {
          const r = s.ensureRowId('k');
          s.addWrite(r, 'x', tx('A'), CP);
          assert.deepEqual(s.commitWrite(r, ts(10), tx('A')), { status: 'SUCCESS' });
          assert.deepEqual(s.read(r, ts(9)), EMPTY);
          assert.deepEqual(s.read(r, ts(10)), committed('x', 10));
          assert.deepEqual(s.readLatest(r), committed('x', 10));
          assert.deepEqual(s.rowsWrittenBy(tx('A')), []);
        }));

      it('commitWrite and abortWrite are idempotent: a repeat finds NO_WRITE_INTENT and changes nothing', () =>
        withPartition((s) => {
          const r = s.ensureRowId('k');
          s.addWrite(r, 'x', tx('A'), CP);
          s.commitWrite(r, ts(10), tx('A'));
          assert.deepEqual(s.commitWrite(r, ts(10), tx('A')), { status: 'NO_WRITE_INTENT' });
          assert.deepEqual(s.abortWrite(r, tx('A')), { status: 'NO_WRITE_INTENT' });
          assert.deepEqual(s.readLatest(r), committed('x', 10));
          s.addWrite(r, 'y', tx('B'), CP);
          s.abortWrite(r, tx('B'));
          assert.deepEqual(s.abortWrite(r, tx('B')), { status: 'NO_WRITE_INTENT' });
          assert.deepEqual(s.readLatest(r), committed('x', 10));
        }));

      it("commitWrite and abortWrite of another tx's intent yield TX_MISMATCH", () =>
        withPartition((s) => {
          const r = s.ensureRowId('k');
          s.addWrite(r, 'x', tx('A'), CP);
          assert.deepEqual(s.commitWrite(r, ts(10), tx('B')), { status: 'TX_MISMATCH', intentTxId: tx('A') });
          assert.deepEqual(s.abortWrite(r, tx('B')), { status: 'TX_MISMATCH', intentTxId: tx('A') });
          assert.deepEqual(s.readLatest(r), intent('x', 'A'));
        }));

      it('abortWrite restores the committed state; a row left without versions disappears with its key', () =>
        withPartition((s) => {
          const kept = rowWithVersions(s, 'kept', [5]);
          s.addWrite(kept, 'new', tx('A'), CP);
          const fresh = s.ensureRowId('fresh');
          s.addWrite(fresh, 'new', tx('A'), CP);
          assert.deepEqual(s.abortWrite(kept, tx('A')), { status: 'SUCCESS' });
          assert.deepEqual(s.abortWrite(fresh, tx('A')), { status: 'SUCCESS' });
          assert.deepEqual(s.readLatest(kept), committed('v5', 5));
          assert.equal(s.rowIdOf('fresh'), undefined);
          assert.deepEqual(s.readLatest(fresh), EMPTY);
          assert.deepEqual(scanKeys(s, { kind: 'range' }), ['kept']);
        }));

      it('addWrite on an unknown row id is refused with INVALID_ARGUMENT', () =>
        withPartition((s) => {
          assert.throws(() => s.addWrite('nope' as RowId, 1, tx('A'), CP), isInvalidArgument);
        }));
    });

    describe('visibility', () => {
      it('read returns the newest committed version at or below ts', () =>
        withPartition((s) => {
          const r = rowWithVersions(s, 'k', [10, 20, 30]);
          assert.deepEqual(s.read(r, ts(9)), EMPTY);
          assert.deepEqual(s.read(r, ts(10)), committed('v10', 10));
          assert.deepEqual(s.read(r, ts(29)), committed('v20', 20));
          assert.deepEqual(s.read(r, ts(1000)), committed('v30', 30));
        }));

      it('read returns the intent only when no committed version is newer than ts, with the newest commit', () =>
        withPartition((s) => {
          const r = rowWithVersions(s, 'k', [10, 20]);
          s.addWrite(r, 'wi', tx('A'), CP);
          assert.deepEqual(s.read(r, ts(15)), committed('v10', 10));
          assert.deepEqual(s.read(r, ts(5)), EMPTY);
          assert.deepEqual(s.read(r, ts(20)), intent('wi', 'A', [20, 'v20']));
          assert.deepEqual(s.read(r, ts(99)), intent('wi', 'A', [20, 'v20']));
          assert.deepEqual(s.readLatest(r), intent('wi', 'A', [20, 'v20']));
        }));

      it('addWriteCommitted adds a version directly and is refused while an intent exists', () =>
        withPartition((s) => {
          const r = s.ensureRowId('k');
          assert.deepEqual(s.addWriteCommitted(r, 'a', ts(10)), { status: 'SUCCESS' });
          s.addWrite(r, 'wi', tx('A'), CP);
          assert.deepEqual(s.addWriteCommitted(r, 'b', ts(20)), {
            status: 'WRITE_INTENT_EXISTS',
            intentTxId: tx('A'),
          });
          assert.deepEqual(s.read(r, ts(10)), intent('wi', 'A', [10, 'a']));
        }));

      it('a commit not newer than the newest committed version is a broken invariant (assertion)', () =>
        withPartition((s) => {
          const r = rowWithVersions(s, 'k', [10]);
          assert.throws(() => s.addWriteCommitted(r, 'b', ts(10)), AssertionError);
          s.addWrite(r, 'wi', tx('A'), CP);
          assert.throws(() => s.commitWrite(r, ts(5), tx('A')), AssertionError);
          assert.deepEqual(s.readLatest(r), intent('wi', 'A', [10, 'v10']));
        }));

      it('tombstones read as TOMBSTONE at their timestamp and hide older versions', () =>
        withPartition((s) => {
          const r = rowWithVersions(s, 'k', [10]);
          s.addWrite(r, TOMBSTONE, tx('A'), CP);
          assert.deepEqual(s.readLatest(r), intent(TOMBSTONE, 'A', [10, 'v10']));
          s.commitWrite(r, ts(20), tx('A'));
          assert.deepEqual(s.read(r, ts(15)), committed('v10', 10));
          assert.deepEqual(s.read(r, ts(20)), committed(TOMBSTONE, 20));
        }));

      it('values round-trip: JSON data, null, numbers, strings and bytes; returned bytes are copies', () =>
        withPartition((s) => {
          const values = [
            null,
            true,
            0,
            -1.5,
            2 ** 40,
            '',
            'ünïcødé 😀',
            [1, [2, { a: null }]],
            { nested: { list: ['x', 1, false] } },
            new Uint8Array([0, 1, 255]),
          ];
          values.forEach((value, i) => {
            const r = s.ensureRowId(`k${i}`);
            s.addWriteCommitted(r, value as never, ts(10));
            const read = s.read(r, ts(10));
            assert.equal(read.kind, 'committed');
            if (read.kind !== 'committed') return;
            if (value instanceof Uint8Array) {
              assert.ok(read.value instanceof Uint8Array);
              assert.deepEqual([...read.value], [...value]);
              read.value[0] = 99;
              const again = s.read(r, ts(10));
              assert.ok(again.kind === 'committed' && again.value instanceof Uint8Array && again.value[0] === 0);
            } else {
              assert.deepEqual(read.value, value);
            }
          });
        }));

      it('a value above valueBytesMax encoded is refused with INVALID_ARGUMENT and nothing is written', () =>
        withPartition((s) => {
          const r = s.ensureRowId('k');
          const big = new Uint8Array(LIMITS.valueBytesMax);
          assert.throws(() => s.addWrite(r, big, tx('A'), CP), isInvalidArgument);
          assert.throws(() => s.addWriteCommitted(r, 'y'.repeat(LIMITS.valueBytesMax), ts(5)), isInvalidArgument);
          assert.deepEqual(s.readLatest(r), EMPTY);
          assert.deepEqual(s.rowsWrittenBy(tx('A')), []);
          assert.deepEqual(s.addWrite(r, new Uint8Array(LIMITS.valueBytesMax - 8), tx('A'), CP), {
            status: 'SUCCESS',
          });
        }));
    });

    describe('scans', () => {
      const KEYS = ['b', 'a', 'ab', '\uFFFF', '😀', 'a\u0000', 'é', 'B'];

      it('scan returns rows in UTF-8 byte order of keys (astral characters after U+FFFF)', () =>
        withPartition((s) => {
          for (const k of KEYS) rowWithVersions(s, k, [10]);
          const expected = [...KEYS].sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y)));
          assert.deepEqual(expected.slice(-2), ['\uFFFF', '😀']);
          assert.deepEqual(scanKeys(s, { kind: 'range' }), expected);
        }));

      it('scan by prefix and by [start, end) bounds', () =>
        withPartition((s) => {
          for (const k of ['a', 'ab', 'abc', 'abd', 'ac', 'b']) rowWithVersions(s, k, [10]);
          assert.deepEqual(scanKeys(s, { kind: 'prefix', prefix: 'ab' }), ['ab', 'abc', 'abd']);
          assert.deepEqual(scanKeys(s, { kind: 'range', start: 'ab', end: 'ac' }), ['ab', 'abc', 'abd']);
          assert.deepEqual(scanKeys(s, { kind: 'range', start: 'abd' }), ['abd', 'ac', 'b']);
          assert.deepEqual(scanKeys(s, { kind: 'range', end: 'ab' }), ['a']);
          assert.deepEqual(scanKeys(s, { kind: 'prefix', prefix: '' }).length, 6);
          assert.deepEqual(scanKeys(s, { kind: 'range', start: 'b', end: 'a' }), []);
          assert.deepEqual(scanKeys(s, { kind: 'range', start: 'ab', end: 'ab' }), []);
          assert.deepEqual(scanKeys(s, { kind: 'prefix', prefix: 'zz' }), []);
        }));

      it('scan stops at limit rows and names the first key it did not look at; paging from it resumes', () =>
        withPartition((s) => {
          for (const k of ['a', 'b', 'c', 'd', 'e']) rowWithVersions(s, k, [10]);
          const first = s.scan({ kind: 'range' }, ts(10), 2);
          assert.deepEqual(
            first.rows.map((r) => r.key),
            ['a', 'b'],
          );
          assert.equal(first.nextKey, 'c');
          const second = s.scan({ kind: 'range', start: first.nextKey }, ts(10), 3);
          assert.deepEqual(
            second.rows.map((r) => r.key),
            ['c', 'd', 'e'],
          );
          assert.equal(second.nextKey, undefined);
          assert.throws(() => s.scan({ kind: 'range' }, ts(10), 0), isInvalidArgument);
          assert.throws(() => s.scan({ kind: 'range' }, ts(10), LIMITS.storageScanRowsMax + 1), isInvalidArgument);
        }));

      it('scan at a timestamp reports rows as read does: skips empty and committed tombstones, keeps intents', () =>
        withPartition((s) => {
          rowWithVersions(s, 'a', [10]);
          rowWithVersions(s, 'b', [10]);
          const b = s.rowIdOf('b')!;
          s.addWriteCommitted(b, TOMBSTONE, ts(20));
          rowWithVersions(s, 'c', [30]);
          const d = s.ensureRowId('d');
          s.addWrite(d, TOMBSTONE, tx('A'), CP);
          const e = rowWithVersions(s, 'e', [40]);
          s.addWrite(e, 'wi', tx('B'), CP);
          const at25 = s.scan({ kind: 'range' }, ts(25), 10).rows;
          assert.deepEqual(
            at25.map((r) => [r.key, r.read]),
            [
              ['a', committed('v10', 10)],
              ['d', intent(TOMBSTONE, 'A')],
            ],
          );
          const at15 = s.scan({ kind: 'range' }, ts(15), 10).rows;
          assert.deepEqual(
            at15.map((r) => r.key),
            ['a', 'b', 'd'],
          );
          const latest = s.scan({ kind: 'range' }, 'latest', 10).rows;
          assert.deepEqual(
            latest.map((r) => [r.key, r.read.kind]),
            [
              ['a', 'committed'],
              ['c', 'committed'],
              ['d', 'intent'],
              ['e', 'intent'],
            ],
          );
          assert.equal(latest[3]!.rowId, e);
        }));
    });

    describe('rows written by a tx', () => {
      it('rowsWrittenBy lists the rows holding intents of a tx and drops them on commit or abort', () =>
        withPartition((s) => {
          const rows = ['a', 'b', 'c'].map((k) => s.ensureRowId(k));
          for (const r of rows) s.addWrite(r, 1, tx('A'), CP);
          const other = s.ensureRowId('z');
          s.addWrite(other, 1, tx('AB'), CP);
          assert.deepEqual([...s.rowsWrittenBy(tx('A'))].sort(), [...rows].sort());
          assert.deepEqual(s.rowsWrittenBy(tx('AB')), [other]);
          s.commitWrite(rows[0]!, ts(10), tx('A'));
          s.abortWrite(rows[1]!, tx('A'));
          assert.deepEqual(s.rowsWrittenBy(tx('A')), [rows[2]]);
        }));
    });

    describe('partitions', () => {
      it('partitions of one engine are isolated: same keys, separate rows, intents and applied positions', () =>
        withEngine(open, (engine) => {
          const p1 = engine.mvPartition(P1);
          const p2 = engine.mvPartition(P2);
          rowWithVersions(p1, 'k', [10]);
          const r2 = p2.ensureRowId('k');
          p2.addWrite(r2, 'p2', tx('A'), CP);
          p1.setLastApplied(idx(7), term(2), ts(70));
          assert.deepEqual(p1.readLatest(p1.rowIdOf('k')!), committed('v10', 10));
          assert.deepEqual(p2.readLatest(r2), intent('p2', 'A'));
          assert.deepEqual(p1.rowsWrittenBy(tx('A')), []);
          assert.deepEqual(p2.lastApplied(), { index: 0, term: 0 });
          assert.equal(engine.mvPartition(P1), p1);
          assert.deepEqual(scanKeys(p2, { kind: 'range' }), ['k']);
        }));

      it('destroy removes the partition; the old object throws STORAGE_CLOSED; the engine hands out a fresh one', () =>
        withEngine(open, (engine) => {
          const p1 = engine.mvPartition(P1);
          const p2 = engine.mvPartition(P2);
          rowWithVersions(p1, 'k', [10]);
          rowWithVersions(p2, 'k', [10]);
          p1.setLastApplied(idx(3), term(1), ts(30));
          p1.destroy();
          assert.throws(
            () => p1.rowIdOf('k'),
            (e: unknown) => isBasaltError(e, 'STORAGE_CLOSED'),
          );
          const again = engine.mvPartition(P1);
          assert.notEqual(again, p1);
          assert.equal(again.rowIdOf('k'), undefined);
          assert.deepEqual(again.lastApplied(), { index: 0, term: 0 });
          assert.deepEqual(scanKeys(p2, { kind: 'range' }), ['k']);
        }));
    });

    describe('applied position and atomicity', () => {
      it('lastApplied and lastAppliedTs start at zero and record the last applied command', () =>
        withPartition(async (s) => {
          assert.deepEqual(s.lastApplied(), { index: 0, term: 0 });
          assert.equal(s.lastAppliedTs(), 0n);
          s.setLastApplied(idx(5), term(2), ts(500));
          assert.deepEqual(s.lastApplied(), { index: 5, term: 2 });
          assert.equal(s.lastAppliedTs(), 500n);
          assert.throws(() => s.setLastApplied(idx(4), term(2), ts(600)), AssertionError);
          assert.throws(() => s.setLastApplied(idx(6), term(2), ts(400)), AssertionError);
          await s.flush();
        }));

      it('runConsistently applies all writes of a command together, and none if it throws', () =>
        withPartition((s) => {
          const r = s.ensureRowId('k');
          s.runConsistently(() => {
            s.addWrite(r, 1, tx('A'), CP);
            s.setLastApplied(idx(1), term(1), ts(10));
          });
          assert.throws(
            () =>
              s.runConsistently(() => {
                s.commitWrite(r, ts(20), tx('A'));
                s.ensureRowId('other');
                s.setLastApplied(idx(2), term(1), ts(20));
                throw new Error('apply failed');
              }),
            /apply failed/,
          );
          assert.deepEqual(s.readLatest(r), intent(1, 'A'));
          assert.equal(s.rowIdOf('other'), undefined);
          assert.deepEqual(s.rowsWrittenBy(tx('A')), [r]);
          assert.deepEqual(s.lastApplied(), { index: 1, term: 1 });
          assert.equal(s.lastAppliedTs(), 10n);
        }));
    });

    describe('garbage collection', () => {
      it('gc keeps the newest version at or below the watermark and every newer one', () =>
        withPartition((s) => {
          const r = rowWithVersions(s, 'k', [10, 20, 30, 40]);
          const result = s.gc(ts(35));
          assert.deepEqual(result, { versionsRemoved: 2, rowsRemoved: 0, more: false });
          assert.deepEqual(s.read(r, ts(35)), committed('v30', 30));
          assert.deepEqual(s.read(r, ts(40)), committed('v40', 40));
          assert.deepEqual(s.read(r, ts(25)), EMPTY);
          assert.deepEqual(s.gc(ts(35)), { versionsRemoved: 0, rowsRemoved: 0, more: false });
        }));

      it('gc removes a tombstone that is the newest version at or below the watermark, and the row with it', () =>
        withPartition((s) => {
          const r = rowWithVersions(s, 'k', [10]);
          s.addWriteCommitted(r, TOMBSTONE, ts(20));
          rowWithVersions(s, 'other', [10, 20]);
          assert.deepEqual(s.gc(ts(15)), { versionsRemoved: 0, rowsRemoved: 0, more: false });
          assert.deepEqual(s.read(r, ts(10)), committed('v10', 10));
          // k loses its tombstone and v10 (the row goes), other loses v10.
          assert.deepEqual(s.gc(ts(20)), { versionsRemoved: 3, rowsRemoved: 1, more: false });
          assert.equal(s.rowIdOf('k'), undefined);
          assert.deepEqual(s.read(r, ts(30)), EMPTY);
          assert.deepEqual(scanKeys(s, { kind: 'range' }), ['other']);
        }));

      it('gc keeps a tombstone while an intent is newer, and removes it once that intent aborts', () =>
        withPartition((s) => {
          const r = rowWithVersions(s, 'k', [10]);
          s.addWriteCommitted(r, TOMBSTONE, ts(20));
          s.addWrite(r, 'wi', tx('A'), CP);
          s.gc(ts(25));
          assert.deepEqual(s.readLatest(r), intent('wi', 'A', [20, TOMBSTONE]));
          s.abortWrite(r, tx('A'));
          assert.deepEqual(s.gc(ts(25)), { versionsRemoved: 1, rowsRemoved: 1, more: false });
          assert.equal(s.rowIdOf('k'), undefined);
        }));

      it('gc handles at most limit queued rows per call and reports that more work remains', () =>
        withPartition((s) => {
          for (const k of ['a', 'b', 'c']) rowWithVersions(s, k, [10, 20]);
          assert.deepEqual(s.gc(ts(50), 2), { versionsRemoved: 2, rowsRemoved: 0, more: true });
          assert.deepEqual(s.gc(ts(50), 2), { versionsRemoved: 1, rowsRemoved: 0, more: false });
          assert.throws(() => s.gc(ts(50), LIMITS.storageGcBatchMax + 1), isInvalidArgument);
        }));
    });

    describe('snapshots', () => {
      it('snapshot and restore reproduce a partition: versions, intents, index, applied position, row ids', () =>
        withEngine(open, (engine) => {
          const source = engine.mvPartition(P1);
          const a = rowWithVersions(source, 'a', [10, 20]);
          const b = source.ensureRowId('b');
          source.addWrite(b, { x: 1 }, tx('A'), CP);
          source.setLastApplied(idx(9), term(3), ts(90));
          const chunks = [...source.snapshot()];
          const target = engine.mvPartition(P2);
          rowWithVersions(target, 'stale', [5]);
          target.restore(chunks);
          assert.equal(target.rowIdOf('stale'), undefined);
          assert.equal(target.rowIdOf('a'), a);
          assert.deepEqual(target.read(a, ts(15)), committed('v10', 10));
          assert.deepEqual(target.readLatest(b), intent({ x: 1 }, 'A'));
          assert.deepEqual(target.rowsWrittenBy(tx('A')), [b]);
          assert.deepEqual(target.lastApplied(), { index: 9, term: 3 });
          assert.equal(target.lastAppliedTs(), 90n);
          assert.equal(target.ensureRowId('new'), source.ensureRowId('new'), 'the row id counter was restored');
          assert.deepEqual(target.gc(ts(50)), { versionsRemoved: 1, rowsRemoved: 0, more: false });
        }));

      it('a large partition snapshots in several bounded chunks', () =>
        withPartition((s) => {
          const value = new Uint8Array(64 * 1024);
          const rows = 2 * Math.ceil(LIMITS.storageSnapshotChunkBytes / value.length);
          for (let i = 0; i < rows; i++) rowWithVersions(s, `k${i}`, []);
          for (let i = 0; i < rows; i++) s.addWriteCommitted(s.rowIdOf(`k${i}`)!, value, ts(10));
          const chunks = [...s.snapshot()];
          assert.ok(chunks.length >= 2, `${chunks.length} chunks`);
          for (const c of chunks) assert.ok(c.length < LIMITS.storageSnapshotChunkBytes + 2 * value.length);
        }));

      it('a snapshot is one consistent view: writes made while it is being read are not in it', () =>
        withEngine(open, (engine) => {
          const s = engine.mvPartition(P1);
          const value = new Uint8Array(64 * 1024);
          const rows = 2 * Math.ceil(LIMITS.storageSnapshotChunkBytes / value.length);
          for (let i = 0; i < rows; i++) s.addWriteCommitted(s.ensureRowId(`k${i}`), value, ts(10));
          s.setLastApplied(idx(1), term(1), ts(10));
          const iterator = s.snapshot()[Symbol.iterator]();
          const chunks: Uint8Array[] = [];
          const first = iterator.next();
          assert.ok(first.done !== true);
          chunks.push(first.value);
          // Written after the first chunk was read: a new row, a new version of every row, a new applied position.
          s.runConsistently(() => {
            s.addWriteCommitted(s.ensureRowId('late'), 'late', ts(20));
            for (let i = 0; i < rows; i++) s.addWriteCommitted(s.rowIdOf(`k${i}`)!, 'new', ts(20));
            s.setLastApplied(idx(2), term(1), ts(20));
          });
          for (let next = iterator.next(); next.done !== true; next = iterator.next()) chunks.push(next.value);
          const copy = engine.mvPartition(P2);
          copy.restore(chunks);
          assert.equal(copy.rowIdOf('late'), undefined);
          assert.deepEqual(copy.lastApplied(), { index: 1, term: 1 });
          for (let i = 0; i < rows; i++) {
            const read = copy.readLatest(copy.rowIdOf(`k${i}`)!);
            assert.ok(read.kind === 'committed' && read.commitTs === 10n, `k${i} is as of the snapshot`);
          }
        }));

      it('restore refuses a tx state snapshot and malformed chunks with STORAGE_CORRUPTED, changing nothing', () =>
        withEngine(open, (engine) => {
          const s = engine.mvPartition(P1);
          rowWithVersions(s, 'k', [10]);
          const txChunks = [...engine.txStatePartition(P2).snapshot()];
          const corrupted = (e: unknown) => isBasaltError(e, 'STORAGE_CORRUPTED');
          assert.throws(() => s.restore(txChunks), corrupted);
          assert.throws(() => s.restore([new Uint8Array([1, 2, 3])]), corrupted);
          assert.throws(() => s.restore([]), corrupted);
          assert.deepEqual(scanKeys(s, { kind: 'range' }), ['k']);
        }));
    });

    mvModelProperty(name, open);
  });
}
