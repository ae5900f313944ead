/**
 * Rule 3 and design-review #11a on disk: the applied lease, its sequence number, lastAppliedTs and the applied index
 * survive closing and reopening the LMDB environment, and a snapshot taken from LMDB restores an in-memory replica to
 * byte-identical state (and back).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import type { LogIndex, Term } from '../../core/ids.js';
import { openLmdbEnvironment } from '../../storage/lmdb-environment.js';
import { LmdbStorageEngine } from '../../storage/storage-engine.js';
import {
  applyAll,
  assertSameBytes,
  at,
  finish,
  incarnation,
  LogBuilder,
  lease,
  leaseCommand,
  PARTITION,
  put,
  testReplica,
  txIdAt,
  update,
} from '../../testing/replica-support.js';

const L1 = lease(incarnation('p1'), 10, 1_000);

describe('partition state machine on LMDB', () => {
  it('lease, sequence, lastAppliedTs and data survive reopen; snapshots move between LMDB and memory', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'basalt-replica-'));
    try {
      const log = new LogBuilder();
      const t = txIdAt(10);
      let root = openLmdbEnvironment(dir, { sync: true });
      const first = testReplica({ engine: new LmdbStorageEngine(root) });
      applyAll(first, log, [
        leaseCommand(L1, null, 5),
        update(L1, 1, put('a', { v: 1 }), 20, { txId: t }),
        update(L1, 2, put('b', 2), 21, { full: true }),
        finish(t, { commitTs: at(30) }, 31),
      ]);
      first.sm.apply([log.noop()]);
      const before = first.sm.snapshot();
      await first.engine.flush();
      await root.close();

      root = openLmdbEnvironment(dir, { sync: true });
      try {
        const reopened = testReplica({ engine: new LmdbStorageEngine(root) });
        assert.deepEqual(reopened.sm.currentLease(), L1);
        assert.equal(reopened.sm.leaseState().lastSeq, 2);
        assert.equal(reopened.sm.lastAppliedTs(), at(31));
        assert.equal(reopened.sm.appliedIndex(), 5);
        assert.equal(reopened.sm.safeTime.current(), at(31));
        assertSameBytes(reopened.sm.snapshot(), before);

        // A memory replica restored from the LMDB snapshot is byte-identical and continues the same way.
        const memory = testReplica();
        memory.sm.restore({ index: 5 as LogIndex, term: 1 as Term, data: before });
        assertSameBytes(memory.sm.snapshot(), before);
        const next = [update(L1, 3, put('c', 3), 25, { full: true }), update(L1, 3, put('d', 4), 26, { full: true })];
        const onDisk = applyAll(reopened, log, next);
        // The memory replica gets the same entries at the same indexes (6 and 7).
        const mirror = new LogBuilder();
        for (let i = 0; i < 5; i++) mirror.noop();
        const inMemory = applyAll(memory, mirror, next);
        assert.deepEqual(inMemory, onDisk);
        assert.deepEqual(
          onDisk.map((r) => r.kind),
          ['UPDATED', 'PRIMARY_MISS'],
        );
        assert.equal(onDisk[0]?.appliedTs, at(31, 1), 'effective timestamps continue after the restart');
        assertSameBytes(memory.sm.snapshot(), reopened.sm.snapshot());
        assert.equal(reopened.engine.mvPartition(PARTITION).rowIdOf('c') !== undefined, true);
      } finally {
        await root.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
