/**
 * The expiry part of the MVCC partition storage contract (DESIGN §4b "Expiry is part of a version"): a version
 * written with an expiry is visible to a read at T iff commitTs ≤ T < expiry, on every read path (point reads, RW
 * reads with an expiry clock, scans, the fallback an intent read carries), and GC removes it once the watermark
 * passes its expiry. Run against each implementation, as the main contract is.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isBasaltError } from '../../core/errors.js';
import type { HybridTimestamp } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import { hybridTimestamp } from '../../hlc/timestamp.js';
import { type MvPartitionStorage, TOMBSTONE } from '../../storage/mv-partition-storage.js';
import { type OpenEngine, pid, tx, withEngine } from './contract-harness.js';

const P1 = pid('t1p0');
const CP = pid('t9p0');

/** A timestamp at `ms` physical milliseconds (ttls count whole milliseconds of HLC time). */
const at = (ms: number, logical = 0): HybridTimestamp => hybridTimestamp(ms, logical);

function valueAt(s: MvPartitionStorage, key: string, readTs: HybridTimestamp): unknown {
  const rowId = s.rowIdOf(key);
  if (rowId === undefined) return undefined;
  const read = s.read(rowId, readTs);
  return read.kind === 'committed' && read.value !== TOMBSTONE ? read.value : undefined;
}

function isInvalidArgument(error: unknown): boolean {
  return isBasaltError(error, 'INVALID_ARGUMENT');
}

export function mvExpiryContract(name: string, open: OpenEngine): void {
  const withPartition = (body: (s: MvPartitionStorage) => void | Promise<void>) =>
    withEngine(open, (engine) => body(engine.mvPartition(P1)));

  describe(`MvPartitionStorage expiry contract: ${name}`, () => {
    it('a one-phase version with a ttl is visible from its commit up to just below commitTs + ttl', () =>
      withPartition((s) => {
        const r = s.ensureRowId('k');
        s.addWriteCommitted(r, 'v', at(1_000, 5), { ttlMs: 100 });
        assert.equal(valueAt(s, 'k', at(1_000, 4)), undefined);
        assert.equal(valueAt(s, 'k', at(1_000, 5)), 'v');
        assert.equal(valueAt(s, 'k', at(1_100, 4)), 'v');
        assert.equal(valueAt(s, 'k', at(1_100, 5)), undefined);
        assert.equal(valueAt(s, 'k', at(5_000)), undefined);
      }));

    it('an intent with a ttl expires counted from the commit timestamp it gets', () =>
      withPartition((s) => {
        const r = s.ensureRowId('k');
        s.addWrite(r, 'v', tx('A'), CP, { ttlMs: 50 });
        const seen = s.readLatest(r);
        assert.equal(seen.kind, 'intent');
        assert.deepEqual(seen.kind === 'intent' ? seen.expiry : undefined, { ttlMs: 50 });
        s.commitWrite(r, at(2_000), tx('A'));
        assert.equal(valueAt(s, 'k', at(2_049)), 'v');
        assert.equal(valueAt(s, 'k', at(2_050)), undefined);
      }));

    it('an absolute expiry (a lease end) applies as written, whatever the commit timestamp', () =>
      withPartition((s) => {
        const r = s.ensureRowId('k');
        s.addWrite(r, 'v', tx('A'), CP, { at: at(3_000) });
        s.commitWrite(r, at(2_500), tx('A'));
        assert.equal(valueAt(s, 'k', at(2_999)), 'v');
        assert.equal(valueAt(s, 'k', at(3_000)), undefined);
      }));

    it('readLatest and latest scans apply expiry only with an expiry clock; scans skip expired rows', () =>
      withPartition((s) => {
        s.addWriteCommitted(s.ensureRowId('a'), 'va', at(1_000), { ttlMs: 10 });
        s.addWriteCommitted(s.ensureRowId('b'), 'vb', at(1_000));
        const a = s.rowIdOf('a')!;
        const noClock = s.readLatest(a);
        assert.equal(noClock.kind === 'committed' ? noClock.value : undefined, 'va');
        const before = s.readLatest(a, at(1_005));
        assert.equal(before.kind === 'committed' ? before.value : undefined, 'va');
        const after = s.readLatest(a, at(1_010));
        assert.equal(after.kind === 'committed' ? after.value : undefined, TOMBSTONE);
        const keys = (rows: { key: string }[]) => rows.map((row) => row.key);
        assert.deepEqual(keys([...s.scan({ kind: 'range' }, at(1_005), 10).rows]), ['a', 'b']);
        assert.deepEqual(keys([...s.scan({ kind: 'range' }, at(1_010), 10).rows]), ['b']);
        assert.deepEqual(keys([...s.scan({ kind: 'range' }, 'latest', 10, at(1_010)).rows]), ['b']);
      }));

    it('an intent read carries its fallback as of the read: an expired newest version falls back to a tombstone', () =>
      withPartition((s) => {
        const r = s.ensureRowId('k');
        s.addWriteCommitted(r, 'old', at(1_000), { ttlMs: 10 });
        s.addWrite(r, 'new', tx('A'), CP);
        const early = s.read(r, at(1_005));
        const late = s.read(r, at(1_020));
        assert.equal(early.kind === 'intent' ? early.newestCommittedValue : undefined, 'old');
        assert.equal(late.kind === 'intent' ? late.newestCommittedValue : undefined, TOMBSTONE);
      }));

    it('a newer write replaces an expiring version; an older snapshot still sees the expiring one', () =>
      withPartition((s) => {
        const r = s.ensureRowId('k');
        s.addWriteCommitted(r, 'short', at(1_000), { ttlMs: 10 });
        s.addWriteCommitted(r, 'forever', at(1_005));
        assert.equal(valueAt(s, 'k', at(1_002)), 'short');
        assert.equal(valueAt(s, 'k', at(9_000)), 'forever');
      }));

    it('gc keeps an expiring version until the watermark passes its expiry, then removes it and its row', () =>
      withPartition((s) => {
        s.addWriteCommitted(s.ensureRowId('k'), 'v', at(1_000), { ttlMs: 100 });
        assert.deepEqual(s.gc(at(1_050)), { versionsRemoved: 0, rowsRemoved: 0, more: false });
        assert.equal(valueAt(s, 'k', at(1_050)), 'v');
        assert.deepEqual(s.gc(at(1_100)), { versionsRemoved: 1, rowsRemoved: 1, more: false });
        assert.equal(s.rowIdOf('k'), undefined);
      }));

    it('gc removes a version whose absolute expiry lies below its commit once the watermark reaches the commit', () =>
      withPartition((s) => {
        s.addWriteCommitted(s.ensureRowId('k'), 'v', at(1_000), { at: at(500) });
        assert.equal(valueAt(s, 'k', at(1_000)), undefined, 'expired from the start');
        assert.deepEqual(s.gc(at(700)), { versionsRemoved: 0, rowsRemoved: 0, more: false });
        assert.deepEqual(s.gc(at(1_000)), { versionsRemoved: 1, rowsRemoved: 1, more: false });
        assert.equal(s.rowIdOf('k'), undefined);
      }));

    it('gc keeps an expired version while an intent is newer, and removes it once that intent aborts', () =>
      withPartition((s) => {
        const r = s.ensureRowId('k');
        s.addWriteCommitted(r, 'v', at(1_000), { ttlMs: 10 });
        s.addWrite(r, 'wi', tx('A'), CP);
        s.gc(at(2_000));
        assert.equal(s.rowIdOf('k'), r);
        s.abortWrite(r, tx('A'));
        assert.deepEqual(s.gc(at(2_000)), { versionsRemoved: 1, rowsRemoved: 1, more: false });
        assert.equal(s.rowIdOf('k'), undefined);
      }));

    it('refuses a ttl that is not a positive integer up to ttlMsMax, writing nothing', () =>
      withPartition((s) => {
        const r = s.ensureRowId('k');
        for (const ttlMs of [0, -1, 1.5, Number.NaN, LIMITS.ttlMsMax + 1]) {
          assert.throws(() => s.addWriteCommitted(r, 'v', at(1_000), { ttlMs }), isInvalidArgument);
          assert.throws(() => s.addWrite(r, 'v', tx('A'), CP, { ttlMs }), isInvalidArgument);
        }
        assert.throws(() => s.addWrite(r, 'v', tx('A'), CP, { at: 0n as HybridTimestamp }), isInvalidArgument);
        assert.deepEqual(s.readLatest(r), { kind: 'empty' });
      }));
  });
}
