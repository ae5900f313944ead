import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { MetaView, RetiringTable, TableDescriptor } from '../cluster/metastorage-state.js';
import { type NodeName, nodeName, type PartitionId, partitionId } from '../core/ids.js';
import type { TimerHandle, Timers } from '../env/timers.js';
import { hybridTimestamp } from '../hlc/timestamp.js';
import type { PartitionHost } from './partition-host.js';
import { PartitionReconciler, type ReconcilerTime } from './partition-reconciler.js';

const SELF = nodeName('n1');

function recordingHost(calls: string[]): PartitionHost {
  return {
    start: async (p) => void calls.push(`start ${p}`),
    stop: async (p, reason) => void calls.push(`stop ${p} ${reason}`),
  };
}

function view(
  revision: number,
  nextTableId: number,
  tables: readonly TableDescriptor[],
  retiring: readonly RetiringTable[] = [],
): MetaView {
  const assignments = [...tables, ...retiring.map((r) => r.table)].map(
    (t) => [`t${t.id}p0`, [SELF as string]] as const,
  );
  return { revision, nextTableId, tables, assignments, retiring, recent: [] };
}

/** Virtual time: the HLC reads `nowMs`; timers fire when `advanceTo` passes their due time. */
class ManualTime implements ReconcilerTime, Timers {
  nowMs = 0;
  private nextId = 0;
  private readonly pending = new Map<number, { readonly fn: () => void; readonly dueMs: number }>();
  readonly timers: Timers = this;
  readonly now = () => hybridTimestamp(this.nowMs);
  setTimer(fn: () => void, delayMs: number): TimerHandle {
    const timerId = ++this.nextId;
    this.pending.set(timerId, { fn, dueMs: this.nowMs + delayMs });
    return { timerId };
  }
  clearTimer(handle: TimerHandle): void {
    this.pending.delete(handle.timerId);
  }
  get armed(): number {
    return this.pending.size;
  }
  advanceTo(ms: number): void {
    this.nowMs = ms;
    for (const [id, t] of [...this.pending]) {
      if (t.dueMs > ms) continue;
      this.pending.delete(id);
      t.fn();
    }
  }
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
    new ManualTime(),
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

test('a retiring partition keeps running until the HLC passes its deadline, then is removed (by a timer)', async () => {
  const calls: string[] = [];
  const time = new ManualTime();
  time.nowMs = 10_000;
  // Table 1 retires while assigned here; table 2 retires too, stored here but left from before (not assigned).
  const retiring = (id: number): RetiringTable => ({
    table: table(id),
    dropTs: hybridTimestamp(9_000),
    retireAfter: hybridTimestamp(40_000),
  });
  const reconciler = new PartitionReconciler(
    SELF as NodeName,
    recordingHost(calls),
    (e) => assert.fail(String(e)),
    time,
    () => [partitionId('t1p0'), partitionId('t2p0')],
  );
  const v = { ...view(3, 4, [table(3)], [retiring(1)]), retiring: [retiring(1), retiring(2)] };
  reconciler.update(v);
  await reconciler.settled();
  assert.deepEqual(calls.sort(), ['start t1p0', 'start t3p0'], 'a retiring table is not proven dropped yet');
  assert.equal(time.armed, 1, 'a timer waits for the deadline');
  calls.length = 0;
  time.advanceTo(39_000);
  await reconciler.settled();
  time.advanceTo(40_000);
  await reconciler.settled();
  assert.deepEqual(calls, [], 'at the deadline itself the partition still serves');
  time.advanceTo(40_001);
  await reconciler.settled();
  assert.deepEqual(calls.sort(), ['stop t1p0 removed', 'stop t2p0 removed'], 'past it, both are destroyed once');
  assert.equal(time.armed, 0);
  calls.length = 0;
  // A newer view (the state forgot the table) changes nothing more.
  reconciler.update(view(4, 4, [table(3)]));
  await reconciler.settled();
  assert.deepEqual(calls, []);
  assert.deepEqual([...reconciler.running().keys()], ['t3p0']);
});

test('a view arriving after the deadline removes a retiring partition at once; halting clears the timer', async () => {
  const calls: string[] = [];
  const time = new ManualTime();
  const reconciler = new PartitionReconciler(
    SELF as NodeName,
    recordingHost(calls),
    (e) => assert.fail(String(e)),
    time,
  );
  const retiring: RetiringTable = { table: table(1), dropTs: hybridTimestamp(1), retireAfter: hybridTimestamp(5_000) };
  time.nowMs = 1_000;
  reconciler.update(view(1, 2, [table(1)]));
  await reconciler.settled();
  time.nowMs = 6_000;
  reconciler.update(view(2, 2, [], [retiring]));
  await reconciler.settled();
  assert.deepEqual(calls, ['start t1p0', 'stop t1p0 removed']);
  const other = new PartitionReconciler(SELF as NodeName, recordingHost([]), (e) => assert.fail(String(e)), time);
  other.update(view(2, 3, [], [{ ...retiring, retireAfter: hybridTimestamp(60_000) }]));
  assert.equal(time.armed, 1);
  other.halt();
  assert.equal(time.armed, 0);
});

test('a partition moving onto this node runs here from the start of the move, with the voters its group began with', async () => {
  const calls: string[] = [];
  const started: [string, readonly NodeName[]][] = [];
  const host: PartitionHost = {
    start: async (p, replicas) => void started.push([p, replicas]),
    stop: async (p, reason) => void calls.push(`stop ${p} ${reason}`),
  };
  const time = new ManualTime();
  const reconciler = new PartitionReconciler(SELF, host, (e) => assert.fail(String(e)), time);
  const base = view(1, 2, [table(1)]);
  const elsewhere = [['t1p0', ['n2', 'n3', 'n4']]] as const;
  const moving: MetaView = {
    ...base,
    assignments: elsewhere,
    targets: [['t1p0', ['n2', 'n3', 'n1']]],
    origins: [['t1p0', ['n2', 'n3', 'n5']]],
  };
  reconciler.update(moving);
  await reconciler.settled();
  assert.deepEqual(started, [['t1p0', ['n2', 'n3', 'n5']]]);
  // The move is over and this node is not among the replicas it reached: the partition leaves.
  reconciler.update({ ...moving, revision: 2, targets: [], assignments: elsewhere });
  await reconciler.settled();
  assert.deepEqual(calls, ['stop t1p0 removed']);
  // Not assigned, not a target: nothing starts.
  started.length = 0;
  reconciler.update({ ...moving, revision: 3, targets: [['t1p0', ['n2', 'n3', 'n6']]] });
  await reconciler.settled();
  assert.deepEqual(started, []);
});
