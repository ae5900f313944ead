import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BasaltError, isBasaltError } from '../../core/errors.js';
import type { HybridTimestamp, NodeName, PartitionId } from '../../core/ids.js';
import { HybridClock } from '../../hlc/hybrid-clock.js';
import { addMs, physicalMs } from '../../hlc/timestamp.js';
import { SimClock } from '../../sim/clock.js';
import { Scheduler } from '../../sim/scheduler.js';
import type { KeyRange, Value } from '../../storage/mv-partition-storage.js';
import {
  FakeCluster,
  primaryMissNaming,
  rejectsWith,
  SELF,
  settleWithin,
  TABLE,
} from '../../testing/coordinator-fakes.js';
import { LowWatermark, readOnlyTooOld } from '../core/low-watermark.js';
import type { FoundValue, ReadOnlyRequest, ReadOnlyResponse } from '../core/messages.js';
import { compareKeys } from '../core/user-input.js';
import {
  beginReadOnly,
  ReadOnlyCoordinator,
  type ReadOnlyCoordinatorOptions,
  runReadOnlyTransaction,
} from './read-only.js';

const SKEW_MS = 500;

interface Served {
  readonly to: NodeName;
  readonly body: ReadOnlyRequest;
  readonly atMs: number;
}

/**
 * Fake replicas behind the FakeCluster's request function: versioned values per partition, reads at readTs (newest
 * version at or below it), primaries answer PRIMARY_MISS unless they are the placement's primary; the coordinator's
 * own node (n1) always serves as a local replica.
 */
function setup(opts: { options?: ReadOnlyCoordinatorOptions; retentionMs?: number } = {}) {
  const scheduler = new Scheduler({ seed: 'read-only-test' });
  const physical = new SimClock(scheduler);
  const cluster = new FakeCluster({ physical: new SimClock(scheduler), timers: scheduler.timers('cluster') });
  const clock = new HybridClock(physical, { maxClockSkewMs: SKEW_MS });
  const watermark = new LowWatermark({ clock, retentionMs: opts.retentionMs ?? 60_000 });
  const localSafe = new Map<PartitionId, HybridTimestamp>();
  const versions = new Map<PartitionId, Map<string, { ts: HybridTimestamp; value: Value | null }[]>>();
  const served: Served[] = [];
  const failing = { local: undefined as BasaltError | undefined, replica: undefined as BasaltError | undefined };

  function commit(key: string, value: Value | null): HybridTimestamp {
    const p = cluster.partitionOfKey(key);
    const ts = cluster.clock.now();
    const rows = versions.get(p) ?? new Map();
    versions.set(p, rows);
    rows.set(key, [...(rows.get(key) ?? []), { ts, value }]);
    // The writer's coordinator learned the commit: this node's clock is past it (as after a commit made here).
    clock.update(ts);
    return ts;
  }

  function readAt(p: PartitionId, key: string, readTs: HybridTimestamp): FoundValue {
    const chain = versions.get(p)?.get(key) ?? [];
    const visible = chain.filter((v) => v.ts <= readTs).at(-1);
    return visible === undefined || visible.value === null ? { found: false } : { found: true, value: visible.value };
  }

  function inRange(key: string, range: KeyRange): boolean {
    if (range.kind === 'prefix') return key.startsWith(range.prefix);
    return (
      (range.start === undefined || compareKeys(key, range.start) >= 0) &&
      (range.end === undefined || compareKeys(key, range.end) < 0)
    );
  }

  cluster.script('ReadOnlyRequest', (to, b) => {
    const body = b as ReadOnlyRequest;
    const p = body.partitionId;
    const primary = cluster.primaries.get(p);
    const local = to === SELF.name && body.readTs !== undefined;
    if (local && failing.local !== undefined) throw failing.local;
    if (!local && to !== primary) {
      throw primaryMissNaming(p, primary, `${to} is not the primary of ${p}`);
    }
    if (failing.replica !== undefined) throw failing.replica;
    served.push({ to, body, atMs: scheduler.nowMs() });
    const readTs = body.readTs ?? cluster.clock.now();
    const op = body.operation;
    let result: ReadOnlyResponse['result'];
    switch (op.op) {
      case 'get':
        result = { op: 'get', value: readAt(p, op.key, readTs) };
        break;
      case 'getAll':
        result = { op: 'getAll', values: op.keys.map((k) => readAt(p, k, readTs)) };
        break;
      case 'scan': {
        const keys = [...(versions.get(p)?.keys() ?? [])].filter((k) => inRange(k, op.range)).sort(compareKeys);
        const rows = keys.flatMap((key) => {
          const v = readAt(p, key, readTs);
          return v.found ? [{ key, value: v.value }] : [];
        });
        result = { op: 'scan', rows: rows.slice(0, op.limit) };
        break;
      }
      case 'changes':
        result = { op: 'changes', changes: [] };
        break;
    }
    return { kind: 'ReadOnlyResponse', readTs, result };
  });

  const coordinator = new ReadOnlyCoordinator({
    self: SELF,
    clock,
    timers: scheduler.timers('coordinator'),
    request: cluster.request,
    placement: cluster.placement,
    local: { localSafeTime: (p) => localSafe.get(p) },
    watermark,
    options: opts.options,
  });

  const run = <T>(p: Promise<T>, forMs?: number): Promise<T> => settleWithin(scheduler, p, forMs);

  return { scheduler, physical, cluster, clock, watermark, localSafe, served, failing, commit, coordinator, run };
}

describe('RO tx: read timestamp', () => {
  it("default readTs is the coordinator's now: it sees a commit just before begin and none after", async () => {
    const { coordinator, clock, commit, cluster, run, served } = setup();
    const key = cluster.keyIn(1);
    commit(key, 'before');
    const before = clock.current();
    const tx = beginReadOnly(coordinator);
    assert.ok(tx.readTimestamp > before && tx.readTimestamp < clock.now(), 'readTs = now() at begin');
    cluster.clock.update(tx.readTimestamp);
    commit(key, 'after');
    assert.equal(await run(tx.get(TABLE, key)), 'before');
    assert.equal(served.at(-1)?.body.readTs, tx.readTimestamp);
    assert.equal(tx.readOnly, true);
  });

  it('rule 8: an explicit readTs beyond physical time + maxClockSkew is rejected with INVALID_ARGUMENT', () => {
    const { coordinator, clock, watermark } = setup();
    const tooFar = addMs(clock.physicalNow(), SKEW_MS + 1);
    assert.throws(
      () => beginReadOnly(coordinator, { readTimestamp: tooFar }),
      (e) => isBasaltError(e, 'INVALID_ARGUMENT'),
    );
    assert.ok(clock.current() < tooFar, 'the rejected readTs did not move the clock');
    assert.equal(watermark.openCount, 0);
  });

  it('rule 8: a future readTs within the skew bound is served by waiting until the clock passes it', async () => {
    const { coordinator, clock, cluster, run, served, scheduler } = setup();
    const readTs = addMs(clock.physicalNow(), SKEW_MS - 100);
    const tx = beginReadOnly(coordinator, { readTimestamp: readTs });
    assert.ok(clock.current() < readTs, 'begin did not absorb the future readTs');
    await run(tx.get(TABLE, cluster.keyIn(0)));
    const sent = served.at(-1);
    assert.ok(sent !== undefined && sent.body.readTs === readTs);
    assert.ok(sent.atMs >= physicalMs(readTs), `sent at ${sent.atMs}, readTs ${physicalMs(readTs)}`);
    assert.ok(scheduler.nowMs() >= physicalMs(readTs));
  });

  it('bounded staleness fixes readTs = now − bound once at begin, for every read of the tx', async () => {
    const { coordinator, clock, cluster, run, served, commit, scheduler } = setup();
    const key = cluster.keyIn(2);
    commit(key, 'old');
    await scheduler.run({ forMs: 2_000 });
    commit(key, 'new');
    const now = clock.current();
    const tx = beginReadOnly(coordinator, { stalenessMs: 1_000 });
    assert.ok(tx.readTimestamp < addMs(now, -999) && tx.readTimestamp > addMs(now, -1_001));
    assert.equal(await run(tx.get(TABLE, key)), 'old');
    await scheduler.run({ forMs: 5_000 });
    assert.equal(await run(tx.get(TABLE, key)), 'old');
    const reads = served.filter((s) => s.body.txId === tx.id);
    assert.equal(reads.length, 2);
    assert.ok(reads.every((s) => s.body.readTs === tx.readTimestamp));
  });

  it('an explicit readTs and a staleness bound together, or a staleness above the maximum, are INVALID_ARGUMENT', () => {
    const { coordinator, clock } = setup({ options: { stalenessMsMax: 10_000 } });
    assert.throws(
      () => coordinator.begin({ readTimestamp: clock.now(), stalenessMs: 10 }),
      (e) => isBasaltError(e, 'INVALID_ARGUMENT'),
    );
    assert.throws(
      () => coordinator.begin({ stalenessMs: 10_001 }),
      (e) => isBasaltError(e, 'INVALID_ARGUMENT'),
    );
  });
});

describe('RO tx: no writes, local finish', () => {
  it('a write in an RO tx fails with TX_READ_ONLY and sends nothing', async () => {
    const { coordinator, cluster } = setup();
    const tx = beginReadOnly(coordinator);
    await rejectsWith(tx.put(TABLE, 'k', 1), 'TX_READ_ONLY');
    await rejectsWith(tx.remove(TABLE, 'k'), 'TX_READ_ONLY');
    await rejectsWith(tx.putAll(TABLE, [{ key: 'k', value: 1 }]), 'TX_READ_ONLY');
    assert.equal(cluster.sent.length, 0);
  });

  it('ops after commit or rollback fail with TX_ALREADY_FINISHED; finish sends nothing and releases the watermark', async () => {
    const { coordinator, cluster, watermark } = setup();
    const a = beginReadOnly(coordinator);
    const b = beginReadOnly(coordinator);
    assert.equal(watermark.openCount, 2);
    await a.commit();
    await a.commit();
    await a.rollback();
    await b.rollback();
    await b.rollback();
    assert.equal(watermark.openCount, 0);
    assert.equal(coordinator.openCount, 0);
    await rejectsWith(a.get(TABLE, 'k'), 'TX_ALREADY_FINISHED');
    await rejectsWith(a.getAll(TABLE, ['k']), 'TX_ALREADY_FINISHED');
    await rejectsWith(b.scan(TABLE, { prefix: 'k' }), 'TX_ALREADY_FINISHED');
    await rejectsWith(b.commit(), 'TX_ALREADY_FINISHED');
    assert.equal(cluster.sent.length, 0, 'finish is local');
  });

  it('an RO tx is closed by its timeout: reads then fail TX_TIMEOUT and the watermark is released', async () => {
    const { coordinator, watermark, scheduler } = setup({ options: { timeoutMs: 5_000 } });
    const tx = beginReadOnly(coordinator);
    await scheduler.run({ forMs: 4_999 });
    assert.equal(watermark.openCount, 1);
    await scheduler.run({ forMs: 2 });
    assert.equal(watermark.openCount, 0);
    await rejectsWith(tx.get(TABLE, 'k'), 'TX_TIMEOUT');
    await rejectsWith(tx.commit(), 'TX_TIMEOUT');
    await tx.rollback();
  });

  it('a read in flight at commit keeps the watermark hold until it ends', async () => {
    const { coordinator, watermark, cluster, run } = setup();
    const tx = beginReadOnly(coordinator);
    const read = tx.get(TABLE, cluster.keyIn(0));
    await Promise.resolve();
    await tx.commit();
    assert.equal(watermark.openCount, 1, 'held while the read is in flight');
    await run(read);
    assert.equal(watermark.openCount, 0);
  });
});

describe('RO tx: routing', () => {
  it('a local replica serves only when its safe time covers readTs; otherwise the primary serves at once', async () => {
    const { coordinator, cluster, localSafe, served, run, clock } = setup();
    const p0 = cluster.partition(0);
    const p1 = cluster.partition(1);
    const tx = beginReadOnly(coordinator);
    localSafe.set(p0, addMs(tx.readTimestamp, -1));
    localSafe.set(p1, tx.readTimestamp);
    await run(tx.get(TABLE, cluster.keyIn(0)));
    assert.equal(served.at(-1)?.to, cluster.primaries.get(p0), 'safe time behind readTs: the primary');
    assert.notEqual(cluster.primaries.get(p1), SELF.name, 'the test needs p1 primary elsewhere');
    await run(tx.get(TABLE, cluster.keyIn(1)));
    assert.equal(served.at(-1)?.to, SELF.name, 'safe time covers readTs: the local replica');
    await run(tx.get(TABLE, cluster.keyIn(2)));
    assert.equal(served.at(-1)?.to, cluster.primaries.get(cluster.partition(2)), 'not hosted here: the primary');
    assert.ok(clock.current() > tx.readTimestamp);
  });

  it('bounded staleness lets the hosted local replica serve even when its safe time is behind', async () => {
    const { coordinator, cluster, localSafe, served, run } = setup();
    const p1 = cluster.partition(1);
    localSafe.set(p1, 1n as HybridTimestamp);
    const tx = beginReadOnly(coordinator, { stalenessMs: 100 });
    await run(tx.get(TABLE, cluster.keyIn(1)));
    assert.equal(served.at(-1)?.to, SELF.name);
  });

  it('a failed local read is retried at the primary; PRIMARY_MISS follows the hint', async () => {
    const { coordinator, cluster, localSafe, served, failing, run } = setup();
    const p1 = cluster.partition(1);
    const tx = beginReadOnly(coordinator);
    localSafe.set(p1, tx.readTimestamp);
    failing.local = new BasaltError('TIMEOUT', 'safe time did not reach readTs');
    cluster.hints.set(p1, 'n3' as NodeName);
    await run(tx.get(TABLE, cluster.keyIn(1)));
    const last = served.at(-1);
    assert.equal(last?.to, cluster.primaries.get(p1));
    const targets = cluster.sentOf('ReadOnlyRequest').length;
    assert.equal(targets, 3, 'local, stale hint, then the real primary');
  });

  it('TX_READ_ONLY_TOO_OLD from a replica is not retried', async () => {
    const { coordinator, cluster, failing, run, clock } = setup();
    const tx = beginReadOnly(coordinator);
    failing.replica = readOnlyTooOld(tx.readTimestamp, clock.now());
    await rejectsWith(run(tx.get(TABLE, cluster.keyIn(0))), 'TX_READ_ONLY_TOO_OLD');
    assert.equal(cluster.sentOf('ReadOnlyRequest').length, 1);
  });

  it('rule 19: an implicit get sends no readTs, goes to the primary, and the clock absorbs the served readTs', async () => {
    const { coordinator, cluster, localSafe, served, run, commit, clock } = setup();
    const key = cluster.keyIn(1);
    localSafe.set(cluster.partition(1), clock.now());
    commit(key, 7);
    assert.equal(await run(coordinator.getImplicit(TABLE, key)), 7);
    const last = served.at(-1);
    assert.equal(last?.to, cluster.primaries.get(cluster.partition(1)));
    assert.equal(last?.body.readTs, undefined);
    assert.equal(last?.body.txId, undefined);
    assert.ok(clock.current() >= cluster.clock.current() || clock.current() > 0n);
  });
});

describe('RO tx: multi-partition reads', () => {
  it('getAll answers in key order of the request across partitions', async () => {
    const { coordinator, cluster, commit, run } = setup();
    const keys = [cluster.keyIn(3), cluster.keyIn(0), cluster.keyIn(2, 1), 'missing'];
    keys.slice(0, 3).forEach((k, i) => {
      commit(k, i);
    });
    const tx = beginReadOnly(coordinator);
    assert.deepEqual(await run(tx.getAll(TABLE, keys)), [0, 1, 2, undefined]);
  });

  it('scan merges the partitions in key order and honours limit', async () => {
    const { coordinator, cluster, commit, run } = setup();
    const keys = Array.from({ length: 40 }, (_, i) => `s${String(i).padStart(3, '0')}`);
    for (const k of keys) commit(k, k.toUpperCase());
    commit('t000', 'outside');
    commit(keys[5]!, null);
    const tx = beginReadOnly(coordinator);
    const all = await run(tx.scan(TABLE, { prefix: 's' }));
    const expected = keys.filter((_, i) => i !== 5);
    assert.deepEqual(
      all.map((r) => r.key),
      expected,
    );
    assert.equal(all[0]?.value, 'S000');
    const partitionsSeen = new Set(expected.map((k) => cluster.partitionOfKey(k)));
    assert.ok(partitionsSeen.size > 1, 'the keys span several partitions');
    const limited = await run(tx.scan(TABLE, { start: 's010', end: 's030' }, { limit: 7 }));
    assert.deepEqual(
      limited.map((r) => r.key),
      expected.filter((k) => k >= 's010' && k < 's030').slice(0, 7),
    );
  });
});

describe('RO tx: low watermark', () => {
  it('a readTs below the watermark at begin fails TX_READ_ONLY_TOO_OLD; an open tx holds the watermark', async () => {
    const { coordinator, clock, watermark, scheduler, cluster, run } = setup({ retentionMs: 1_000 });
    const old = addMs(clock.now(), -2_000);
    assert.throws(
      () => coordinator.begin({ readTimestamp: old }),
      (e) => isBasaltError(e, 'TX_READ_ONLY_TOO_OLD'),
    );
    const { coordinator: strict, clock: strictClock } = setup({ options: { stalenessMsMax: 5_000 } });
    assert.throws(
      () => strict.begin({ readTimestamp: addMs(strictClock.now(), -5_001) }),
      (e) => isBasaltError(e, 'TX_READ_ONLY_TOO_OLD'),
      'an explicit readTs older than the largest staleness is too old, even above the watermark',
    );
    strict.begin({ readTimestamp: addMs(strictClock.now(), -4_000) });
    const tx = beginReadOnly(coordinator);
    await scheduler.run({ forMs: 10_000 });
    assert.ok(watermark.current() <= tx.readTimestamp, 'the watermark never passes an open readTs');
    await run(tx.get(TABLE, cluster.keyIn(0)));
    await tx.commit();
    assert.ok(watermark.current() > tx.readTimestamp, 'released: the watermark moves on');
  });
});

describe('RO tx: runReadOnlyTransaction', () => {
  it('retries a retryable failure in a new RO tx and closes every attempt; a non-retryable one is thrown at once', async () => {
    const { coordinator, cluster, failing, run, watermark, commit } = setup();
    const key = cluster.keyIn(0);
    commit(key, 'v');
    const seen: bigint[] = [];
    let calls = 0;
    const value = await run(
      runReadOnlyTransaction(coordinator, async (tx) => {
        calls += 1;
        seen.push(tx.readTimestamp);
        failing.replica = calls === 1 ? new BasaltError('TX_TIMEOUT', 'closed') : undefined;
        return tx.get(TABLE, key);
      }),
    );
    assert.equal(value, 'v');
    assert.equal(calls, 2);
    assert.ok(seen[1]! > seen[0]!, 'the retry reads at a new readTs');
    assert.equal(watermark.openCount, 0, 'every attempt was closed');
    let writes = 0;
    await rejectsWith(
      run(
        runReadOnlyTransaction(coordinator, async (tx) => {
          writes += 1;
          await tx.put(TABLE, key, 1);
        }),
      ),
      'TX_READ_ONLY',
    );
    assert.equal(writes, 1);
  });
});
