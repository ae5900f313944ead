/**
 * Durability of the LMDB implementation: data, applied positions and the vacuum horizon survive closing and
 * reopening the environment, and every write acknowledged after `flush()` survives SIGKILL of the writing process
 * (a child running dist/test/storage/crash-child.js), with the data and the applied position still in agreement.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { RootDatabase } from 'lmdb';
import { CRASH_PARTITION, crashTxId, crashValue } from '../../test/storage/crash-child.js';
import { isBasaltError } from '../core/errors.js';
import type { PartitionId } from '../core/ids.js';
import { idx, pid, term, ts, tx } from '../testing/storage/contract-harness.js';
import { partitionPrefix, prefixEnd } from './keys.js';
import { TABLES } from './kv-store.js';
import { openLmdbEnvironment } from './lmdb-environment.js';
import { TOMBSTONE } from './mv-partition-storage.js';
import { LmdbStorageEngine } from './storage-engine.js';

const P = pid('t1p0');

function tempDir(): string {
  return mkdtempSync(join(tmpdir(), 'basalt-lmdb-'));
}

async function withDir(body: (dir: string) => Promise<void>): Promise<void> {
  const dir = tempDir();
  try {
    await body(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('LMDB read transactions', () => {
  it('listing intent txs leaves no read transaction open, so freed pages are reused and the file stays small', () =>
    withDir(async (dir) => {
      const root = openLmdbEnvironment(dir, { sync: false });
      const engine = new LmdbStorageEngine(root);
      const mv = engine.mvPartition(P);
      const rows = ['a', 'b', 'c'].map((k) => mv.ensureRowId(k));
      for (const [i, r] of rows.entries()) mv.addWrite(r, i, tx(`T${i}`), P);
      const readers = () => (root as unknown as { readerList(): string }).readerList().trim().split('\n').length;
      const before = readers();
      for (let i = 0; i < 300; i++) {
        assert.equal(mv.intentTxIds(undefined, 10).length, 3);
        // Writes between listings: each one frees pages a pinned reader would keep from reuse.
        mv.runConsistently(() => mv.addWriteCommitted(mv.ensureRowId(`k${i % 10}`), i, ts(i + 1)));
        if (i % 20 === 0) await new Promise((resolve) => setTimeout(resolve, 0));
      }
      await new Promise((resolve) => setTimeout(resolve, 0));
      assert.ok(readers() <= before + 1, `read transactions left open: ${readers() - before}`);
      await root.close();
    }));
});

describe('LMDB storage durability', () => {
  it('data, intents, tx state, applied positions and the vacuum horizon survive close and reopen', () =>
    withDir(async (dir) => {
      let root: RootDatabase = openLmdbEnvironment(dir, { sync: true });
      let engine = new LmdbStorageEngine(root);
      const mv = engine.mvPartition(P);
      const a = mv.ensureRowId('a');
      const b = mv.ensureRowId('b');
      mv.runConsistently(() => {
        mv.addWriteCommitted(a, { v: 1 }, ts(10));
        mv.addWriteCommitted(a, TOMBSTONE, ts(20));
        mv.addWrite(b, new Uint8Array([7]), tx('A'), P);
        mv.setLastApplied(idx(5), term(2), ts(20));
      });
      const txState = engine.txStatePartition(P);
      txState.compareAndSet(tx('T'), null, { state: 'COMMITTED', commitTs: ts(15), enlistedPartitions: [P] });
      txState.setVacuumHorizon(ts(3));
      txState.setLastApplied(idx(4), term(2), ts(15));
      await engine.flush();
      await root.close();

      root = openLmdbEnvironment(dir, { sync: true });
      engine = new LmdbStorageEngine(root);
      const mv2 = engine.mvPartition(P);
      const tx2 = engine.txStatePartition(P);
      try {
        assert.equal(mv2.rowIdOf('a'), a);
        assert.deepEqual(mv2.read(a, ts(15)), { kind: 'committed', value: { v: 1 }, commitTs: ts(10) });
        assert.deepEqual(mv2.read(a, ts(25)), { kind: 'committed', value: TOMBSTONE, commitTs: ts(20) });
        const wi = mv2.readLatest(b);
        assert.ok(wi.kind === 'intent' && wi.txId === 'A' && wi.value instanceof Uint8Array && wi.value[0] === 7);
        assert.deepEqual(mv2.rowsWrittenBy(tx('A')), [b]);
        assert.deepEqual(mv2.lastApplied(), { index: 5, term: 2 });
        assert.equal(mv2.lastAppliedTs(), 20n);
        assert.notEqual(mv2.ensureRowId('c'), a, 'the row id counter survived: no id is handed out twice');
        assert.notEqual(mv2.rowIdOf('c'), b);
        assert.equal(tx2.get(tx('T'))?.commitTs, 15n);
        assert.equal(tx2.vacuumHorizon(), 3n);
        assert.deepEqual(tx2.lastApplied(), { index: 4, term: 2 });
        assert.equal(mv2.gc(ts(25)).rowsRemoved, 1, 'the GC queue survived too');
      } finally {
        await root.close();
      }
    }));

  it('rows written before expiry existed reopen unchanged and then take expiring versions, which survive reopen', () =>
    withDir(async (dir) => {
      let root: RootDatabase = openLmdbEnvironment(dir, { sync: true });
      let engine = new LmdbStorageEngine(root);
      const mv = engine.mvPartition(P);
      const a = mv.ensureRowId('a');
      // No expiry: the row record is written in the form of earlier versions (version-chain.test.ts, byte for byte).
      mv.addWriteCommitted(a, 'old', ts(10));
      await engine.flush();
      await root.close();

      root = openLmdbEnvironment(dir, { sync: true });
      engine = new LmdbStorageEngine(root);
      const mv2 = engine.mvPartition(P);
      assert.deepEqual(mv2.read(a, ts(15)), { kind: 'committed', value: 'old', commitTs: ts(10) });
      const ms = 1n << 16n;
      mv2.addWriteCommitted(a, 'expiring', ts(20), { ttlMs: 1 });
      await engine.flush();
      await root.close();

      root = openLmdbEnvironment(dir, { sync: true });
      engine = new LmdbStorageEngine(root);
      const mv3 = engine.mvPartition(P);
      try {
        assert.deepEqual(mv3.read(a, ts(15)), { kind: 'committed', value: 'old', commitTs: ts(10) });
        assert.deepEqual(mv3.read(a, ts(20n + ms - 1n)), {
          kind: 'committed',
          value: 'expiring',
          commitTs: ts(20),
          expiresAt: ts(20n + ms),
        });
        assert.deepEqual(mv3.read(a, ts(20n + ms)), { kind: 'committed', value: TOMBSTONE, commitTs: ts(20) });
        assert.deepEqual(mv3.gc(ts(20n + ms)), { versionsRemoved: 2, rowsRemoved: 1, more: false });
      } finally {
        await root.close();
      }
    }));

  it('using storage after its environment was closed throws STORAGE_CLOSED', () =>
    withDir(async (dir) => {
      const root = openLmdbEnvironment(dir, { sync: false });
      const mv = new LmdbStorageEngine(root).mvPartition(P);
      const row = mv.ensureRowId('k');
      await root.close();
      const closed = (e: unknown) => isBasaltError(e, 'STORAGE_CLOSED');
      assert.throws(() => mv.readLatest(row), closed);
      assert.throws(() => mv.addWriteCommitted(row, 1, ts(5)), closed);
      assert.throws(() => [...mv.snapshot()], closed);
    }));

  it('destroyPartition after a reopen leaves no key of the partition in any LMDB sub-database, others intact', () =>
    withDir(async (dir) => {
      const other = pid('t2p0');
      let root: RootDatabase = openLmdbEnvironment(dir, { sync: false });
      let engine = new LmdbStorageEngine(root);
      for (const p of [P, other]) {
        const mv = engine.mvPartition(p);
        mv.runConsistently(() => {
          for (let i = 0; i < 50; i++) mv.addWriteCommitted(mv.ensureRowId(`k${i}`), i, ts(10 + i));
          mv.addWrite(mv.ensureRowId('w'), 1, tx('A'), P);
          mv.setMeta('replica.lease', new Uint8Array([1]));
          mv.setLastApplied(idx(3), term(1), ts(60));
          engine.txStatePartition(p).compareAndSet(tx('T'), null, {
            state: 'COMMITTED',
            commitTs: ts(15),
            enlistedPartitions: [p],
          });
          engine.txStatePartition(p).setLastApplied(idx(3), term(1), ts(60));
        });
      }
      await engine.flush();
      await root.close();
      // A new incarnation destroys the partition without having opened its storages (the restart sweep's case).
      root = openLmdbEnvironment(dir, { sync: false });
      engine = new LmdbStorageEngine(root);
      try {
        const before = rawKeyCounts(root, P);
        assert.ok(before['mv:rows']! >= 51 && before['mv:keys']! >= 51 && before['txstate:records']! >= 1);
        const otherBefore = rawKeyCounts(root, other);
        engine.destroyPartition(P);
        await engine.flush();
        assert.deepEqual(
          Object.entries(rawKeyCounts(root, P)).filter(([, n]) => n > 0),
          [],
          'every sub-database is empty under the prefix',
        );
        assert.deepEqual(rawKeyCounts(root, other), otherBefore);
        assert.deepEqual(engine.partitions(), [other]);
      } finally {
        await root.close();
      }
    }));

  it('every write acknowledged after flush survives SIGKILL of the writer, in 3 kill/restart rounds', () =>
    withDir(async (dir) => {
      const acksBeforeKill = [7, 23, 41];
      let acked = 0;
      for (const target of acksBeforeKill) {
        acked = Math.max(acked, await runChildUntilKilled(dir, target));
        await checkAfterCrash(dir, acked);
      }
    }));
});

/** Keys under the partition's prefix in each storage sub-database, read with lmdb directly (not through the engine). */
function rawKeyCounts(root: RootDatabase, partition: PartitionId): Record<string, number> {
  const start = Buffer.from(partitionPrefix(partition));
  const end = Buffer.from(prefixEnd(start)!);
  const counts: Record<string, number> = {};
  for (const name of TABLES) {
    const db = root.openDB<Buffer, Buffer>({ name, keyEncoding: 'binary', encoding: 'binary' });
    counts[name] = db.getKeysCount({ start, end });
  }
  return counts;
}

const CHILD = fileURLToPath(new URL('../../test/storage/crash-child.js', import.meta.url));
const CHILD_TIMEOUT_MS = 30_000;

/** Runs the child until it has printed `acks` acknowledgements, kills it with SIGKILL; returns the last acked index. */
function runChildUntilKilled(dir: string, acks: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CHILD, dir], { stdio: ['ignore', 'pipe', 'pipe'] });
    let lastAck = 0;
    let seen = 0;
    let buffered = '';
    let stderr = '';
    const guard = setTimeout(() => child.kill('SIGKILL'), CHILD_TIMEOUT_MS);
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    child.stdout.on('data', (d: Buffer) => {
      buffered += d.toString();
      const lines = buffered.split('\n');
      buffered = lines.pop() ?? '';
      for (const line of lines) {
        const m = /^ack (\d+)$/.exec(line);
        if (m === null) continue;
        lastAck = Number(m[1]);
        if (++seen === acks) child.kill('SIGKILL');
      }
    });
    child.on('exit', (code, signal) => {
      clearTimeout(guard);
      if (signal === 'SIGKILL' && seen >= acks) resolve(lastAck);
      else reject(new Error(`crash child ended early (code ${code}, signal ${signal}) after ${seen} acks: ${stderr}`));
    });
  });
}

async function checkAfterCrash(dir: string, acked: number): Promise<void> {
  const root = openLmdbEnvironment(dir, { sync: true });
  try {
    const engine = new LmdbStorageEngine(root);
    const mv = engine.mvPartition(CRASH_PARTITION);
    const txState = engine.txStatePartition(CRASH_PARTITION);
    const applied = mv.lastApplied().index;
    assert.ok(applied >= acked, `applied index ${applied} is behind the acknowledged ${acked}`);
    assert.equal(mv.lastAppliedTs(), BigInt(applied));
    // Every command up to the applied index is there in full (so every acknowledged one), and none after it.
    for (let i = 1; i <= applied; i++) {
      const row = mv.rowIdOf(`k${i}`);
      assert.ok(row !== undefined, `row k${i} lost (applied ${applied}, acked ${acked})`);
      assert.deepEqual(mv.readLatest(row), { kind: 'committed', value: crashValue(i), commitTs: ts(i) });
      if (i % 2 === 0) assert.equal(txState.get(crashTxId(i))?.state, 'COMMITTED');
    }
    assert.equal(mv.rowIdOf(`k${applied + 1}`), undefined, 'a write beyond the applied index survived');
    assert.deepEqual(mv.rowsWrittenBy(crashTxId(applied)), []);
  } finally {
    await root.close();
  }
}
