import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type NodeName, nodeName, type PartitionId, partitionId } from '../core/ids.js';
import type { MetaView, TableDescriptor } from './metastorage-state.js';
import type { PartitionHost } from './partition-host.js';
import { PartitionReconciler } from './partition-reconciler.js';

const SELF = nodeName('n1');

function recordingHost(calls: string[]): PartitionHost {
  return {
    start: async (p) => void calls.push(`start ${p}`),
    stop: async (p, reason) => void calls.push(`stop ${p} ${reason}`),
  };
}

function view(revision: number, nextTableId: number, tables: readonly TableDescriptor[]): MetaView {
  const assignments = tables.map((t) => [`t${t.id}p0`, [SELF as string]] as const);
  return { revision, nextTableId, tables, assignments, recent: [] };
}

const table = (id: number): TableDescriptor => ({ name: `t${id}`, id, partitions: 1, replicas: 1 });

test('stored partitions of tables a view proves dropped are removed; unknown tables wait for a newer view', async () => {
  const calls: string[] = [];
  const stored: PartitionId[] = ['t1p0', 't2p0', 't3p0', 'meta'].map(partitionId);
  let listings = 0;
  const reconciler = new PartitionReconciler(
    SELF as NodeName,
    recordingHost(calls),
    (e) => assert.fail(String(e)),
    () => {
      listings++;
      return stored;
    },
  );
  // An old revision replayed at startup: it knows table 1 (dropped since), not tables 2 and 3.
  reconciler.update(view(1, 2, []));
  await reconciler.settled();
  assert.deepEqual(calls, ['stop t1p0 removed']);
  calls.length = 0;
  // The newest view: table 2 was dropped, table 3 lives and is assigned here.
  reconciler.update(view(5, 4, [table(3)]));
  await reconciler.settled();
  assert.deepEqual(calls, ['stop t2p0 removed', 'start t3p0']);
  calls.length = 0;
  reconciler.update(view(6, 5, [table(3)]));
  await reconciler.settled();
  assert.deepEqual(calls, [], 'each leftover is removed once; the meta group and live tables are never touched');
  assert.equal(listings, 1, 'storage is listed once, on the first view');
});
