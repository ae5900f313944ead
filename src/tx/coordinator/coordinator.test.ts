import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BasaltError, isBasaltError } from '../../core/errors.js';
import {
  txId as asTxIdUnchecked,
  type HybridTimestamp,
  type NodeId,
  type NodeName,
  type TxId,
} from '../../core/ids.js';
import { HybridClock } from '../../hlc/hybrid-clock.js';
import { addMs } from '../../hlc/timestamp.js';
import { SimClock } from '../../sim/clock.js';
import { Scheduler } from '../../sim/scheduler.js';
import {
  coordinatorOver,
  FakeCluster,
  primaryMissNaming,
  rejectsWith,
  SELF,
  settleWithin,
  TABLE,
} from '../../testing/coordinator-fakes.js';
import type { TxFinishRequest, TxResponse } from '../core/messages.js';
import { beginTimestampOf, compareTxAge, makeTxId } from '../core/tx-id.js';
import { TxStateMap, type TxStateMapEvent } from '../core/tx-state-map.js';
import type { OnePhaseAge } from './coordinator.js';
import type { TxCoordinatorOptions } from './settings.js';

interface SetupOptions {
  readonly options?: TxCoordinatorOptions;
  readonly partitions?: number;
  readonly leaseMs?: number;
  /** Physical clock offset of the fake primaries (ahead of the coordinator when positive). */
  readonly primaryOffsetMs?: number;
}

function setup(opts: SetupOptions = {}) {
  const scheduler = new Scheduler({ seed: 'coordinator-test' });
  const physical = new SimClock(scheduler);
  const cluster = new FakeCluster({
    physical: new SimClock(scheduler, { offsetMs: opts.primaryOffsetMs ?? 0 }),
    timers: scheduler.timers('cluster'),
    partitions: opts.partitions ?? 4,
    leaseMs: opts.leaseMs,
  });
  const clock = new HybridClock(physical);
  const txStates = new TxStateMap({ clock: physical });
  const events: TxStateMapEvent[] = [];
  txStates.observe((e) => events.push(e));
  const errors: unknown[] = [];
  const coordinator = coordinatorOver(cluster, {
    clock,
    timers: scheduler.timers('coordinator'),
    txStates,
    options: opts.options,
    onError: (e) => errors.push(e),
  });
  /** Runs virtual time until `p` settles (at most `forMs`), then returns it. */
  const run = <T>(p: Promise<T>, forMs?: number): Promise<T> => settleWithin(scheduler, p, forMs);
  /** Runs virtual time for `ms`. */
  async function advance(ms: number): Promise<void> {
    await scheduler.run({ forMs: ms });
  }
  return { scheduler, cluster, clock, txStates, events, errors, coordinator, run, advance };
}

function deferred<T>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

const hang = (): Promise<TxResponse> => new Promise<TxResponse>(() => {});

describe('coordinator: begin', () => {
  it('begin installs PENDING with this incarnation as coordinator; the id embeds beginTs; D = beginTs + timeout', () => {
    const { coordinator, txStates, events } = setup({ options: { txTimeoutMs: 7_000 } });
    const a = coordinator.begin();
    const b = coordinator.begin();
    assert.deepEqual(txStates.get(a.id), { state: 'PENDING', coordinatorId: SELF.id });
    assert.equal(beginTimestampOf(a.id), a.beginTs);
    assert.equal(a.deadline, addMs(a.beginTs, 7_000));
    assert.ok(a.id < b.id, 'a later tx has a larger (younger) id');
    const e = events.find((x) => x.kind === 'update' && x.txId === a.id);
    assert.ok(e?.kind === 'update' && e.reason === 'coordinator-begin' && e.to === 'PENDING');
  });

  it('a full tx state map refuses begin with OVERLOADED', () => {
    const { clock, scheduler, cluster } = setup();
    const full = new TxStateMap({ clock: { monotonicMs: () => 0 }, entriesMax: 1 });
    const c = coordinatorOver(cluster, { clock, timers: scheduler.timers('c'), txStates: full });
    c.begin();
    assert.throws(
      () => c.begin(),
      (e: unknown) => isBasaltError(e, 'OVERLOADED'),
    );
    assert.equal(c.liveCount, 1);
  });
});

describe('coordinator: operations', () => {
  it('the first request enlists without a token, later ones carry it; opSeq increases; first partition commits', async () => {
    const { coordinator, cluster, run } = setup();
    const tx = coordinator.begin();
    const k0 = cluster.keyIn(0);
    const k1 = cluster.keyIn(1);
    await run(coordinator.put(tx, TABLE, k1, { v: 1 }));
    await run(coordinator.put(tx, TABLE, k0, { v: 2 }));
    assert.deepEqual(await run(coordinator.get(tx, TABLE, k1)), { v: 1 });
    const rw = cluster.sentOf('ReadWriteRequest');
    assert.equal(rw.length, 3);
    assert.equal(rw[0]!.token, undefined);
    assert.equal(rw[1]!.token, undefined, 'a new partition enlists afresh');
    assert.deepEqual(rw[2]!.token, cluster.leases.get(cluster.partition(1))!.token);
    assert.deepEqual(
      rw.map((r) => r.opSeq),
      [1, 2, 3],
    );
    assert.ok(rw.every((r) => r.commitPartitionId === cluster.partition(1) && r.coordinatorId === SELF.id));
    assert.equal(tx.commitPartitionId, cluster.partition(1));
  });

  it('a first request over several partitions makes the one whose primary is this node the commit partition', async () => {
    const { coordinator, cluster, run } = setup();
    // Partition 0's primary is n1, this coordinator's node; partitions 1 and 2 have theirs elsewhere.
    assert.equal(cluster.primaries.get(cluster.partition(0)), SELF.name);
    const local = coordinator.begin();
    await run(coordinator.getAll(local, TABLE, [cluster.keyIn(1), cluster.keyIn(0)], { forUpdate: true }));
    assert.equal(local.commitPartitionId, cluster.partition(0));
    const rw = cluster.sentOf('ReadWriteRequest');
    assert.ok(rw.every((r) => r.commitPartitionId === cluster.partition(0)));
    await run(
      coordinator.putAll(local, TABLE, [
        { key: cluster.keyIn(1), value: 1 },
        { key: cluster.keyIn(0), value: 2 },
      ]),
    );
    await run(coordinator.commit(local));
    assert.deepEqual(
      cluster.sentOf('TxFinishRequest').map((f) => f.commitPartitionId),
      [cluster.partition(0)],
    );
    const remote = coordinator.begin();
    await run(
      coordinator.putAll(remote, TABLE, [
        { key: cluster.keyIn(2), value: 3 },
        { key: cluster.keyIn(1), value: 4 },
      ]),
    );
    assert.equal(remote.commitPartitionId, cluster.partition(2), 'no local primary: the first partition');
  });

  it('concurrent first operations on one partition share its enlistment: one token-less request, then the token', async () => {
    const { coordinator, cluster, run } = setup();
    const tx = coordinator.begin();
    const p = cluster.partition(1);
    const [a, b, c] = [cluster.keyIn(1, 0), cluster.keyIn(1, 1), cluster.keyIn(1, 2)];
    await run(
      Promise.all([coordinator.put(tx, TABLE, a, 1), coordinator.put(tx, TABLE, b, 2), coordinator.get(tx, TABLE, c)]),
    );
    const rw = cluster.sentOf('ReadWriteRequest');
    assert.equal(rw.length, 3);
    assert.equal(rw.filter((r) => r.token === undefined).length, 1, 'one enlistment');
    const token = cluster.leases.get(p)!.token;
    assert.ok(rw.slice(1).every((r) => r.token !== undefined && r.token.start === token.start));
    assert.deepEqual(new Set(rw.map((r) => r.opSeq)).size, 3, 'every request its own opSeq');
  });

  it('a first operation that failed certainly leaves the partition to be enlisted by the next one', async () => {
    const { coordinator, cluster, run } = setup();
    const tx = coordinator.begin();
    cluster.script('ReadWriteRequest', () => {
      throw new BasaltError('OVERLOADED', 'busy');
    });
    const first = coordinator.put(tx, TABLE, cluster.keyIn(0, 0), 1);
    const second = coordinator.put(tx, TABLE, cluster.keyIn(0, 1), 2);
    const [a, b] = await run(Promise.allSettled([first, second]));
    assert.ok(a.status === 'rejected' && isBasaltError(a.reason, 'OVERLOADED'));
    assert.ok(b.status === 'rejected' && isBasaltError(b.reason, 'OVERLOADED'), 'the waiter shares the failure');
    assert.equal(cluster.sentOf('ReadWriteRequest').length, 1);
    cluster.unscript('ReadWriteRequest');
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0, 1), 3));
    assert.equal(cluster.sentOf('ReadWriteRequest').at(-1)?.token, undefined, 'enlisted afresh');
    assert.ok(tx.enlistment(cluster.partition(0)) !== undefined);
  });

  it('PRIMARY_MISS on the first request follows the holder hint and retries', async () => {
    const { coordinator, cluster, run } = setup();
    const p = cluster.partition(2);
    cluster.grantLease(p, 'n2' as NodeName);
    cluster.hints.set(p, 'n3' as NodeName);
    const tx = coordinator.begin();
    await run(coordinator.put(tx, TABLE, cluster.keyIn(2), 1));
    const rw = cluster.sentOf('ReadWriteRequest');
    assert.deepEqual(
      cluster.sent.filter((s) => s.body.kind === 'ReadWriteRequest').map((s) => s.to),
      ['n3', 'n2'],
    );
    assert.ok(rw.every((r) => r.token === undefined));
    assert.equal(tx.enlistment(p)?.primaryName, 'n2');
    assert.ok(cluster.notedPrimaries.some((n) => n.partitionId === p && n.name === 'n2'));
    assert.equal(tx.abortCause, undefined);
  });

  it('PRIMARY_MISS after enlistment (the primary changed) makes the tx abort-only with a retryable TX_ABORTED', async () => {
    const { coordinator, cluster, run, txStates } = setup();
    const tx = coordinator.begin();
    const key = cluster.keyIn(0);
    await run(coordinator.put(tx, TABLE, key, 1));
    cluster.grantLease(cluster.partition(0), 'n3' as NodeName);
    const err = await rejectsWith(run(coordinator.put(tx, TABLE, key, 2)), 'TX_ABORTED');
    assert.equal(err.retryable, true);
    assert.equal(err.details?.['reason'], 'primary-changed');
    // Abort-only: every later operation and the commit fail with the cause; the commit rolls back.
    await rejectsWith(run(coordinator.get(tx, TABLE, cluster.keyIn(1))), 'TX_ABORTED');
    const commitErr = await rejectsWith(run(coordinator.commit(tx)), 'TX_ABORTED');
    assert.equal(commitErr.retryable, true);
    const finish = cluster.sentOf('TxFinishRequest');
    assert.equal(finish.length, 1);
    assert.equal(finish[0]!.commit, false);
    assert.equal(txStates.get(tx.id)?.state, 'ABORTED');
    assert.deepEqual(cluster.outcomes.get(tx.id), { state: 'ABORTED' });
  });

  it('TX_LOCK_CONFLICT fails the op retryably and makes the tx abort-only', async () => {
    const { coordinator, cluster, run } = setup();
    cluster.script('ReadWriteRequest', () => {
      throw new BasaltError('TX_LOCK_CONFLICT', 'wait-die: younger dies');
    });
    const tx = coordinator.begin();
    const err = await rejectsWith(run(coordinator.get(tx, TABLE, cluster.keyIn(0))), 'TX_LOCK_CONFLICT');
    assert.equal(err.retryable, true);
    assert.equal(tx.abortCause?.code, 'TX_LOCK_CONFLICT');
    cluster.unscript('ReadWriteRequest');
    await rejectsWith(run(coordinator.commit(tx)), 'TX_LOCK_CONFLICT');
    // It wrote nothing: no durable abort; the primary tried gets an unlock-only cleanup (it may hold locks).
    assert.equal(cluster.sentOf('TxFinishRequest').length, 0);
    const cleanups = cluster.sentOf('TxCleanupRequest');
    assert.equal(cleanups.length, 1);
    assert.equal(cleanups[0]!.unlockOnly, true);
    assert.deepEqual(cleanups[0]!.partitions, [cluster.partition(0)]);
  });

  it('a timed-out write (outcome unknown) makes the tx abort-only; rollback aborts durably and cleans the partition', async () => {
    const { coordinator, cluster, run, txStates } = setup({ options: { opRequestTimeoutMs: 500 } });
    const tx = coordinator.begin();
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1));
    cluster.script('ReadWriteRequest', hang);
    const err = await rejectsWith(run(coordinator.put(tx, TABLE, cluster.keyIn(1), 2)), 'TX_ABORTED');
    assert.equal(err.details?.['code'], 'TIMEOUT');
    cluster.unscript('ReadWriteRequest');
    await run(coordinator.rollback(tx));
    const finish = cluster.sentOf('TxFinishRequest');
    assert.equal(finish.length, 1);
    assert.equal(finish[0]!.commit, false);
    assert.deepEqual(
      finish[0]!.enlisted.map((e) => e.partitionId),
      [cluster.partition(0)],
    );
    // The uncertain partition is not in the enlisted set (no token known): the coordinator cleans it up itself.
    const cleanups = cluster.sentOf('TxCleanupRequest');
    assert.ok(cleanups.some((c) => c.partitions.includes(cluster.partition(1)) && c.outcome?.state === 'ABORTED'));
    assert.equal(txStates.get(tx.id)?.state, 'ABORTED');
  });

  it('a refusal that did nothing (OVERLOADED) fails the op but leaves the tx usable', async () => {
    const { coordinator, cluster, run } = setup();
    cluster.script('ReadWriteRequest', () => {
      throw new BasaltError('OVERLOADED', 'busy');
    });
    const tx = coordinator.begin();
    await rejectsWith(run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1)), 'OVERLOADED');
    cluster.unscript('ReadWriteRequest');
    assert.equal(tx.abortCause, undefined);
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 2));
    await run(coordinator.commit(tx));
    assert.equal(cluster.committed.get(cluster.partition(0))?.get(cluster.keyIn(0)), 2);
  });

  it('getAll splits by partition and keeps the order of the keys', async () => {
    const { coordinator, cluster, run } = setup();
    const keys = [cluster.keyIn(0), cluster.keyIn(1), cluster.keyIn(0, 1), 'missing-key', cluster.keyIn(2)];
    cluster.committed.get(cluster.partitionOfKey(keys[0]!))!.set(keys[0]!, 'a');
    cluster.committed.get(cluster.partitionOfKey(keys[1]!))!.set(keys[1]!, 'b');
    cluster.committed.get(cluster.partitionOfKey(keys[2]!))!.set(keys[2]!, 'c');
    cluster.committed.get(cluster.partitionOfKey(keys[4]!))!.set(keys[4]!, 'e');
    const tx = coordinator.begin();
    assert.deepEqual(await run(coordinator.getAll(tx, TABLE, keys)), ['a', 'b', 'c', undefined, 'e']);
    const partitionsAsked = new Set(keys.map((k) => cluster.partitionOfKey(k)));
    assert.equal(cluster.sentOf('ReadWriteRequest').length, partitionsAsked.size);
  });

  it('putAll splits by partition; scan merges every partition in key order up to the limit', async () => {
    const { coordinator, cluster, run } = setup();
    const tx = coordinator.begin();
    const entries = Array.from({ length: 12 }, (_, i) => ({ key: `row${String(i).padStart(2, '0')}`, value: i }));
    await run(coordinator.putAll(tx, TABLE, entries));
    const puts = cluster.sentOf('ReadWriteRequest');
    assert.equal(puts.length, new Set(entries.map((e) => cluster.partitionOfKey(e.key))).size);
    const rows = await run(coordinator.scan(tx, TABLE, { prefix: 'row' }, { limit: 5 }));
    assert.deepEqual(rows, entries.slice(0, 5));
    const all = await run(coordinator.scan(tx, TABLE, { start: 'row03', end: 'row07' }));
    assert.deepEqual(all, entries.slice(3, 7));
    await run(coordinator.commit(tx));
    assert.equal(cluster.outcomes.get(tx.id)?.state, 'COMMITTED');
  });

  it('API misuse is INVALID_ARGUMENT and sends nothing; an unknown table is UNKNOWN_TABLE', async () => {
    const { coordinator, cluster, run } = setup();
    const tx = coordinator.begin();
    await rejectsWith(run(coordinator.put(tx, TABLE, 'x'.repeat(2_000), 1)), 'INVALID_ARGUMENT');
    await rejectsWith(run(coordinator.put(tx, TABLE, 'k', { n: Number.NaN })), 'INVALID_ARGUMENT');
    await rejectsWith(run(coordinator.put(tx, TABLE, 'k', undefined as never)), 'INVALID_ARGUMENT');
    await rejectsWith(run(coordinator.put(tx, TABLE, 'k', new Map() as never)), 'INVALID_ARGUMENT');
    await rejectsWith(run(coordinator.get(tx, '', 'k')), 'INVALID_ARGUMENT');
    await rejectsWith(run(coordinator.scan(tx, TABLE, { prefix: 'a' }, { limit: 0 })), 'INVALID_ARGUMENT');
    await rejectsWith(run(coordinator.get(tx, 'nope', 'k')), 'UNKNOWN_TABLE');
    assert.equal(cluster.sent.length, 0);
    assert.equal(tx.abortCause, undefined);
  });
});

describe('coordinator: commit', () => {
  it('commitTs is chosen and FINISHING installed in one synchronous step; the finish request carries that commitTs', async () => {
    const { coordinator, cluster, run, txStates, clock } = setup();
    const tx = coordinator.begin();
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1));
    let clockAtFinishing: HybridTimestamp | undefined;
    let lastAdvance: HybridTimestamp | undefined;
    const afterAdvance = new Map<HybridTimestamp, ReturnType<TxStateMap['get']>>();
    clock.onAdvance((ts) => {
      lastAdvance = ts;
      // The first continuation after the step that took `ts` sees the map as that step left it.
      queueMicrotask(() => afterAdvance.set(ts, txStates.get(tx.id)));
    });
    txStates.observe((e) => {
      if (e.kind === 'update' && e.txId === tx.id && e.to === 'FINISHING') clockAtFinishing = lastAdvance;
    });
    let finishingSeenByHandler: ReturnType<TxStateMap['get']>;
    cluster.script('TxFinishRequest', (to, body) => {
      finishingSeenByHandler = txStates.get(tx.id);
      return cluster.handle(to, body);
    });
    await run(coordinator.commit(tx));
    const finish = cluster.sentOf('TxFinishRequest');
    assert.equal(finish.length, 1);
    const commitTs = finish[0]!.commitTs;
    assert.ok(commitTs !== undefined);
    assert.deepEqual(finishingSeenByHandler, { state: 'FINISHING', coordinatorId: SELF.id, commitTimestamp: commitTs });
    // No clock reading came between commitTs and FINISHING.
    assert.equal(clockAtFinishing, commitTs);
    assert.deepEqual(afterAdvance.get(commitTs), {
      state: 'FINISHING',
      coordinatorId: SELF.id,
      commitTimestamp: commitTs,
    });
    assert.deepEqual(txStates.get(tx.id), { state: 'COMMITTED', coordinatorId: SELF.id, commitTimestamp: commitTs });
  });

  it('commitTs exceeds every write timestamp, even from primaries whose clocks run ahead', async () => {
    const { coordinator, cluster, run } = setup({ primaryOffsetMs: 400 });
    const tx = coordinator.begin();
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1));
    await run(coordinator.putAll(tx, TABLE, [{ key: cluster.keyIn(1), value: 2 }]));
    await run(coordinator.get(tx, TABLE, cluster.keyIn(2)));
    await run(coordinator.commit(tx));
    const commitTs = cluster.sentOf('TxFinishRequest')[0]!.commitTs!;
    const writes = cluster.writeTimestampsOf(tx.id);
    assert.equal(writes.length, 2);
    for (const w of writes) assert.ok(commitTs > w, 'commitTs > writeTs');
    assert.equal(tx.outcome?.state, 'COMMITTED');
  });

  it('a finish retried after PRIMARY_MISS and timeouts resends the same commitTs, following the hint', async () => {
    const { coordinator, cluster, run, txStates } = setup({ options: { finishRequestTimeoutMs: 300 } });
    const tx = coordinator.begin();
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1));
    let calls = 0;
    cluster.script('TxFinishRequest', (to, body) => {
      calls += 1;
      if (calls === 1) throw primaryMissNaming(cluster.partition(0), 'n3', 'moved');
      if (calls === 2) return hang();
      return cluster.handle(to, body);
    });
    await run(coordinator.commit(tx));
    const finishes = cluster.sent.filter((s) => s.body.kind === 'TxFinishRequest');
    assert.equal(finishes.length, 3);
    assert.equal(finishes[1]!.to, 'n3', 'the second attempt follows the hint');
    const ts = finishes.map((s) => (s.body as TxFinishRequest).commitTs);
    assert.ok(ts[0] !== undefined && ts.every((t) => t === ts[0]), 'every attempt carries the same commitTs');
    assert.deepEqual(txStates.get(tx.id)?.commitTimestamp, ts[0]);
  });

  it('a finish whose commit partition primary is unknown at first retries until the placement names one', async () => {
    const { coordinator, cluster, run, scheduler } = setup();
    const tx = coordinator.begin();
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1));
    let calls = 0;
    cluster.script('TxFinishRequest', () => {
      calls += 1;
      // The commit partition's primary is gone, and for a while no replica of it is known.
      cluster.unknownPrimaries.add(cluster.partition(0));
      throw new BasaltError('PRIMARY_MISS', 'stopped');
    });
    const commit = coordinator.commit(tx);
    await scheduler.run({ until: () => calls === 1, forMs: 1_000 });
    cluster.unscript('TxFinishRequest');
    await scheduler.run({ forMs: 100 });
    cluster.unknownPrimaries.clear();
    await run(commit);
    assert.equal(tx.outcome?.state, 'COMMITTED');
    assert.equal(cluster.sentOf('TxFinishRequest').length, 2);
  });

  it('a mismatch sets the map to the real outcome, cleans up the whole enlisted set and is not retryable', async () => {
    const { coordinator, cluster, run, txStates } = setup();
    const tx = coordinator.begin();
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1));
    await run(coordinator.get(tx, TABLE, cluster.keyIn(1)));
    // Recovery (e.g. orphan detection) aborted the tx durably behind the coordinator's back.
    cluster.decide(tx.id, { state: 'ABORTED' });
    const err = await rejectsWith(run(coordinator.commit(tx)), 'TX_MISMATCHING_OUTCOME');
    assert.equal(err.retryable, false);
    assert.deepEqual(err.details?.['outcome'], { state: 'ABORTED' });
    assert.equal(txStates.get(tx.id)?.state, 'ABORTED');
    const cleaned = cluster
      .sentOf('TxCleanupRequest')
      .flatMap((c) => (c.outcome?.state === 'ABORTED' ? c.partitions : []));
    assert.deepEqual(new Set(cleaned), new Set([cluster.partition(0), cluster.partition(1)]));
    // A repeated commit reports the same.
    await rejectsWith(run(coordinator.commit(tx)), 'TX_MISMATCHING_OUTCOME');
  });

  it('no answer after finishAttemptsMax: TX_OUTCOME_UNKNOWN; background retries later settle the map', async () => {
    const { coordinator, cluster, run, advance, txStates } = setup({
      options: { finishAttemptsMax: 3, finishRequestTimeoutMs: 200 },
    });
    const tx = coordinator.begin();
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1));
    cluster.script('TxFinishRequest', hang);
    const err = await rejectsWith(run(coordinator.commit(tx)), 'TX_OUTCOME_UNKNOWN');
    assert.equal(err.retryable, false);
    assert.equal(cluster.sentOf('TxFinishRequest').length, 3);
    assert.equal(txStates.get(tx.id)?.state, 'FINISHING');
    const commitTs = txStates.get(tx.id)?.commitTimestamp;
    await advance(3_000);
    assert.ok(cluster.sentOf('TxFinishRequest').length > 3, 'retries go on in the background');
    assert.equal(txStates.get(tx.id)?.state, 'FINISHING');
    cluster.unscript('TxFinishRequest');
    await advance(10_000);
    assert.deepEqual(txStates.get(tx.id), { state: 'COMMITTED', coordinatorId: SELF.id, commitTimestamp: commitTs });
    assert.ok(cluster.sentOf('TxFinishRequest').every((f) => f.commitTs === commitTs));
    // Once known, a repeated commit reports the stored outcome.
    await run(coordinator.commit(tx));
    assert.equal(coordinator.tx(tx.id), undefined);
  });

  it('an expiration not known to cover commitTs is confirmed with the primary before committing', async () => {
    const { coordinator, cluster, run, advance } = setup({ leaseMs: 1_000 });
    const tx = coordinator.begin();
    const p = cluster.partition(0);
    await run(coordinator.get(tx, TABLE, cluster.keyIn(0)));
    await run(coordinator.put(tx, TABLE, cluster.keyIn(1), 1));
    // The primary of partition 0 renewed its lease (same token); the coordinator only knows the old expiration.
    const lease = cluster.leases.get(p)!;
    cluster.leases.set(p, { ...lease, expiration: addMs(lease.expiration, 60_000) });
    const p1 = cluster.partition(1);
    const lease1 = cluster.leases.get(p1)!;
    cluster.leases.set(p1, { ...lease1, expiration: addMs(lease1.expiration, 60_000) });
    await advance(2_000);
    await run(coordinator.commit(tx));
    const confirms = cluster.sentOf('LeaseConfirmRequest');
    assert.deepEqual(new Set(confirms.map((c) => c.partitionId)), new Set([p, p1]), 'read-only partitions included');
    const commitTs = cluster.sentOf('TxFinishRequest')[0]!.commitTs;
    assert.ok(confirms.every((c) => c.commitTs === commitTs));
    assert.deepEqual(confirms.find((c) => c.partitionId === p)?.token, lease.token);
    assert.equal(tx.outcome?.state, 'COMMITTED');
  });

  it('a known expiration above commitTs needs no confirmation', async () => {
    const { coordinator, cluster, run } = setup({ leaseMs: 60_000 });
    const tx = coordinator.begin();
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1));
    await run(coordinator.commit(tx));
    assert.equal(cluster.sentOf('LeaseConfirmRequest').length, 0);
  });

  it('a failed lease check aborts instead of committing (retryable), through the commit partition', async () => {
    const { coordinator, cluster, run, advance, txStates } = setup({ leaseMs: 1_000 });
    const tx = coordinator.begin();
    await run(coordinator.get(tx, TABLE, cluster.keyIn(1)));
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1));
    cluster.grantLease(cluster.partition(1), 'n3' as NodeName);
    await advance(2_000);
    const err = await rejectsWith(run(coordinator.commit(tx)), 'TX_ABORTED');
    assert.equal(err.retryable, true);
    assert.equal(err.details?.['reason'], 'lease-expired');
    const finish = cluster.sentOf('TxFinishRequest');
    assert.equal(finish.length, 1);
    assert.equal(finish[0]!.commit, false);
    assert.equal(txStates.get(tx.id)?.state, 'ABORTED');
    assert.equal(cluster.committed.get(cluster.partition(0))?.size, 0);
  });

  it('an RW tx that only read: lease check, unlock-only cleanup, no finish request, entry removed', async () => {
    const { coordinator, cluster, run, txStates, events, advance } = setup({ leaseMs: 1_000 });
    const tx = coordinator.begin();
    await run(coordinator.get(tx, TABLE, cluster.keyIn(0)));
    await run(coordinator.get(tx, TABLE, cluster.keyIn(2)));
    const p0 = cluster.partition(0);
    const lease = cluster.leases.get(p0)!;
    cluster.leases.set(p0, { ...lease, expiration: addMs(lease.expiration, 60_000) });
    cluster.grantLease(cluster.partition(2), 'n1' as NodeName);
    await advance(2_000);
    // Partition 2's primary changed: even a read-only tx must not commit (rule 6).
    await rejectsWith(run(coordinator.commit(tx)), 'TX_ABORTED');
    const tx2 = coordinator.begin();
    await run(coordinator.get(tx2, TABLE, cluster.keyIn(0)));
    await run(coordinator.commit(tx2));
    assert.equal(cluster.sentOf('TxFinishRequest').length, 0);
    const cleanups = cluster.sentOf('TxCleanupRequest').filter((c) => c.txId === tx2.id);
    assert.equal(cleanups.length, 1);
    assert.equal(cleanups[0]!.unlockOnly, true);
    assert.equal(txStates.get(tx2.id), undefined, 'the coordinator entry is removed');
    const seq = events
      .filter((e) => e.txId === tx2.id)
      .map((e) => (e.kind === 'update' ? `${e.to}:${e.reason}` : e.kind));
    assert.deepEqual(seq, ['PENDING:coordinator-begin', 'FINISHING:finish-started', 'COMMITTED:unlock-only', 'remove']);
    assert.equal(tx2.outcome?.state, 'COMMITTED');
  });

  it('an empty tx commits locally without any request', async () => {
    const { coordinator, cluster, run, txStates } = setup();
    const tx = coordinator.begin();
    await run(coordinator.commit(tx));
    assert.equal(cluster.sent.length, 0);
    assert.equal(txStates.get(tx.id), undefined);
    assert.equal(tx.outcome?.state, 'COMMITTED');
  });

  it('commit waits for every operation in flight, reads included (rule 6), and refuses new ones', async () => {
    const { coordinator, cluster, run, txStates, scheduler } = setup();
    const tx = coordinator.begin();
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1));
    const gate = deferred<void>();
    cluster.script('ReadWriteRequest', async (to, body) => {
      await gate.promise;
      return cluster.handle(to, body);
    });
    const read = coordinator.get(tx, TABLE, cluster.keyIn(1));
    const commit = coordinator.commit(tx);
    await rejectsWith(run(coordinator.get(tx, TABLE, cluster.keyIn(2))), 'TX_ALREADY_FINISHED');
    await scheduler.run({ forMs: 100 });
    assert.equal(txStates.get(tx.id)?.state, 'PENDING', 'no commitTs while a read is in flight');
    assert.equal(cluster.sentOf('TxFinishRequest').length, 0);
    gate.resolve();
    await run(read);
    await run(commit);
    assert.equal(tx.outcome?.state, 'COMMITTED');
  });

  it('an operation after commit is TX_ALREADY_FINISHED; commit/rollback repeat idempotently', async () => {
    const { coordinator, cluster, run } = setup();
    const tx = coordinator.begin();
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1));
    await run(coordinator.commit(tx));
    await rejectsWith(run(coordinator.get(tx, TABLE, cluster.keyIn(0))), 'TX_ALREADY_FINISHED');
    await run(coordinator.commit(tx));
    await run(coordinator.rollback(tx));
    assert.equal(cluster.sentOf('TxFinishRequest').length, 1, 'finished once');
    const rolled = coordinator.begin();
    await run(coordinator.put(rolled, TABLE, cluster.keyIn(0), 2));
    await run(coordinator.rollback(rolled));
    await run(coordinator.rollback(rolled));
    await rejectsWith(run(coordinator.commit(rolled)), 'TX_ALREADY_FINISHED');
    await rejectsWith(run(coordinator.put(rolled, TABLE, cluster.keyIn(0), 3)), 'TX_ALREADY_FINISHED');
    assert.equal(cluster.committed.get(cluster.partition(0))?.get(cluster.keyIn(0)), 1);
  });

  it('commitTs at or past the deadline aborts with TX_TIMEOUT instead (rule 15)', async () => {
    const { coordinator, cluster, run, clock, txStates } = setup({ options: { txTimeoutMs: 5_000 } });
    const tx = coordinator.begin();
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1));
    // A peer's timestamp pushed the HLC past D while physical time (and the timer) lag behind.
    clock.update(addMs(tx.deadline, 10));
    await rejectsWith(run(coordinator.commit(tx)), 'TX_TIMEOUT');
    assert.equal(cluster.sentOf('TxFinishRequest')[0]?.commit, false);
    assert.equal(txStates.get(tx.id)?.state, 'ABORTED');
  });

  it('the tx timeout rolls the tx back; later operations and commit get TX_TIMEOUT', async () => {
    const { coordinator, cluster, run, advance, txStates } = setup({ options: { txTimeoutMs: 2_000 } });
    const tx = coordinator.begin();
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1));
    await advance(2_500);
    assert.equal(txStates.get(tx.id)?.state, 'ABORTED');
    assert.equal(cluster.sentOf('TxFinishRequest')[0]?.commit, false);
    await rejectsWith(run(coordinator.put(tx, TABLE, cluster.keyIn(0), 2)), 'TX_TIMEOUT');
    const err = await rejectsWith(run(coordinator.commit(tx)), 'TX_TIMEOUT');
    assert.equal(err.retryable, true);
    await run(coordinator.rollback(tx));
    assert.equal(coordinator.liveCount, 0);
  });

  it('a finish decided by recovery on this node (lost compare-and-set) is followed, not overridden', async () => {
    const { coordinator, cluster, run, txStates } = setup();
    const tx = coordinator.begin();
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1));
    // The commit partition primary on this node recovered the tx: its map entry went final.
    txStates.update(tx.id, { state: 'ABORTED', reason: 'finish-applied' });
    const err = await rejectsWith(run(coordinator.commit(tx)), 'TX_ABORTED');
    assert.equal(err.details?.['reason'], 'recovered');
    assert.equal(cluster.sentOf('TxFinishRequest').length, 0);
    assert.ok(cluster.sentOf('TxCleanupRequest').some((c) => c.outcome?.state === 'ABORTED'));
  });
});

describe('coordinator: cleanup and stop', () => {
  it('unlock-only cleanup not acknowledged is retried in the background at the current primary', async () => {
    const { coordinator, cluster, run, advance } = setup();
    const tx = coordinator.begin();
    const p = cluster.partition(0);
    await run(coordinator.get(tx, TABLE, cluster.keyIn(0)));
    let refusals = 2;
    cluster.script('TxCleanupRequest', (to, body) => {
      if (refusals > 0) {
        refusals -= 1;
        throw new BasaltError('PRIMARY_MISS', 'moved');
      }
      return cluster.handle(to, body);
    });
    // The placement now believes n3 holds the partition: retries go there.
    cluster.hints.set(p, 'n3' as NodeName);
    await run(coordinator.commit(tx));
    assert.equal(tx.outcome?.state, 'COMMITTED', 'an unacknowledged unlock does not change the outcome');
    await advance(5_000);
    const targets = cluster.sent.filter((s) => s.body.kind === 'TxCleanupRequest').map((s) => s.to);
    assert.deepEqual(targets, ['n1', 'n3', 'n3']);
  });

  it('stop ends background finish retries and cancels what is pending', async () => {
    const { coordinator, cluster, run, advance } = setup({
      options: { finishAttemptsMax: 2, finishRequestTimeoutMs: 100 },
    });
    const tx = coordinator.begin();
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1));
    cluster.script('TxFinishRequest', hang);
    await rejectsWith(run(coordinator.commit(tx)), 'TX_OUTCOME_UNKNOWN');
    coordinator.stop();
    const sent = cluster.sentOf('TxFinishRequest').length;
    await advance(60_000);
    assert.equal(cluster.sentOf('TxFinishRequest').length, sent, 'no retry after stop');
    assert.throws(
      () => coordinator.begin(),
      (e: unknown) => isBasaltError(e, 'NODE_UNAVAILABLE'),
    );
  });
});

describe('coordinator: one-phase writes', () => {
  it('an implicit put commits with one full request; the map goes PENDING → COMMITTED at the write timestamp', async () => {
    const { coordinator, cluster, run, txStates, events } = setup();
    const key = cluster.keyIn(3);
    const { txId, commitTs } = await run(coordinator.putImplicit(TABLE, key, { x: 1 }));
    const rw = cluster.sentOf('ReadWriteRequest');
    assert.equal(rw.length, 1);
    assert.equal(rw[0]!.full, true);
    assert.equal(rw[0]!.commitPartitionId, cluster.partition(3));
    assert.deepEqual(cluster.writeTimestampsOf(txId), [commitTs]);
    assert.deepEqual(txStates.get(txId), { state: 'COMMITTED', coordinatorId: SELF.id, commitTimestamp: commitTs });
    const seq = events.filter((e) => e.txId === txId).map((e) => (e.kind === 'update' ? `${e.to}:${e.reason}` : ''));
    assert.deepEqual(seq, ['PENDING:coordinator-begin', 'COMMITTED:one-phase']);
    assert.equal(cluster.sentOf('TxFinishRequest').length, 0);
    assert.deepEqual(cluster.committed.get(cluster.partition(3))?.get(key), { x: 1 });
    await run(coordinator.removeImplicit(TABLE, key));
    assert.equal(cluster.committed.get(cluster.partition(3))?.has(key), false);
  });

  it('a one-phase lock conflict is ABORTED and retryable; an unknown outcome is TX_OUTCOME_UNKNOWN', async () => {
    const { coordinator, cluster, run, txStates } = setup({ options: { opRequestTimeoutMs: 300 } });
    cluster.script('ReadWriteRequest', () => {
      throw new BasaltError('TX_LOCK_CONFLICT', 'held');
    });
    await rejectsWith(run(coordinator.putImplicit(TABLE, 'a', 1)), 'TX_LOCK_CONFLICT');
    const first = cluster.sentOf('ReadWriteRequest')[0]!.txId;
    assert.equal(txStates.get(first)?.state, 'ABORTED');
    cluster.script('ReadWriteRequest', hang);
    const err = await rejectsWith(run(coordinator.putImplicit(TABLE, 'a', 1)), 'TX_OUTCOME_UNKNOWN');
    assert.equal(err.retryable, false);
    assert.equal(txStates.get(cluster.sentOf('ReadWriteRequest')[1]!.txId), undefined);
  });

  it('a one-phase write retried with its age keeps the age of its first attempt (older than a tx begun since)', async () => {
    const { coordinator, cluster, run, advance } = setup();
    cluster.script('ReadWriteRequest', () => {
      throw new BasaltError('TX_LOCK_CONFLICT', 'held');
    });
    const age: OnePhaseAge = {};
    await rejectsWith(run(coordinator.putImplicit(TABLE, 'a', 1, undefined, age)), 'TX_LOCK_CONFLICT');
    const first = cluster.sentOf('ReadWriteRequest')[0]!.txId;
    assert.equal(age.last, first);
    await advance(40);
    // A writer that began meanwhile, without an age: younger than the first attempt.
    await rejectsWith(run(coordinator.removeImplicit(TABLE, 'a')), 'TX_LOCK_CONFLICT');
    const meanwhile = cluster.sentOf('ReadWriteRequest')[1]!.txId;
    await advance(40);
    cluster.unscript('ReadWriteRequest');
    await run(coordinator.putImplicit(TABLE, 'a', 2, undefined, age));
    const retry = cluster.sentOf('ReadWriteRequest')[2]!.txId;
    assert.equal(age.last, retry);
    assert.notEqual(retry, first);
    assert.equal(beginTimestampOf(retry), beginTimestampOf(first), 'the retry began as the first attempt did');
    assert.ok(compareTxAge(retry, meanwhile) < 0, 'and is older than the writer that began between the attempts');
    assert.ok(compareTxAge(meanwhile, first) > 0);
  });

  it('a one-phase write whose proposal was abandoned by a stopping replica is not resent: TX_OUTCOME_UNKNOWN', async () => {
    const { coordinator, cluster, run, txStates } = setup();
    const key = cluster.keyIn(1);
    const applied: number[] = [];
    cluster.script('ReadWriteRequest', async (to, body) => {
      // The primary proposed the write, which still commits through its followers; its replica then stopped and
      // abandoned the proposal, answering as PartitionReplica.stop does, across the wire.
      const answer = await cluster.handle(to, body);
      applied.push(applied.length + 1);
      if (applied.length === 1) {
        const abandoned = new BasaltError('NODE_UNAVAILABLE', 'replica of t1p1 stopped with the proposal in flight');
        throw BasaltError.fromData(abandoned.toData());
      }
      return answer;
    });
    const error = await rejectsWith(run(coordinator.putImplicit(TABLE, key, 'once')), 'TX_OUTCOME_UNKNOWN');
    assert.equal(error.retryable, false, 'client.transaction and callers must not re-run it');
    assert.equal(error.details?.['code'], 'NODE_UNAVAILABLE');
    assert.equal(cluster.sentOf('ReadWriteRequest').length, 1, 'sent once: a resend could apply it twice');
    assert.deepEqual(applied, [1]);
    const txId = cluster.sentOf('ReadWriteRequest')[0]!.txId;
    assert.equal(txStates.get(txId), undefined, 'no outcome is claimed for it');
  });

  it('a one-phase write refused unsent (NODE_UNAVAILABLE, executed no) or missed (PRIMARY_MISS) is resent', async () => {
    const { coordinator, cluster, run } = setup();
    const key = cluster.keyIn(2);
    let attempts = 0;
    cluster.script('ReadWriteRequest', (to, body) => {
      attempts++;
      if (attempts === 1) {
        throw new BasaltError('NODE_UNAVAILABLE', `no connection to ${to}: not sent`, undefined, { executed: 'no' });
      }
      if (attempts === 2) throw new BasaltError('PRIMARY_MISS', 'applied as a no-op under a stale lease');
      return cluster.handle(to, body);
    });
    const { commitTs } = await run(coordinator.putImplicit(TABLE, key, 'v'));
    assert.equal(attempts, 3);
    assert.ok(commitTs !== undefined);
    assert.equal(cluster.committed.get(cluster.partition(2))?.get(key), 'v');
  });

  it('an RW write that failed with an unproven NODE_UNAVAILABLE makes the tx abort-only (rule 7)', async () => {
    const { coordinator, cluster, run } = setup();
    const tx = coordinator.begin();
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1));
    cluster.script('ReadWriteRequest', () => {
      throw BasaltError.fromData({ code: 'NODE_UNAVAILABLE', message: 'raft stopped with the proposal pending' });
    });
    await rejectsWith(run(coordinator.put(tx, TABLE, cluster.keyIn(1), 2)), 'TX_ABORTED');
    assert.equal(cluster.sentOf('ReadWriteRequest').length, 2, 'the failed enlistment was not resent');
    await rejectsWith(run(coordinator.commit(tx)), 'TX_ABORTED');
  });

  it('an implicit putAll over several partitions runs as an ordinary tx', async () => {
    const { coordinator, cluster, run } = setup();
    const entries = [
      { key: cluster.keyIn(0), value: 1 },
      { key: cluster.keyIn(1), value: 2 },
    ];
    const result = await run(coordinator.putAllImplicit(TABLE, entries));
    assert.equal(
      cluster.sentOf('ReadWriteRequest').every((r) => !r.full),
      true,
    );
    assert.equal(cluster.outcomes.get(result!.txId)?.state, 'COMMITTED');
    const single = await run(coordinator.putAllImplicit(TABLE, [{ key: cluster.keyIn(2), value: 3 }]));
    assert.equal(cluster.sentOf('ReadWriteRequest').at(-1)?.full, true);
    assert.ok(single !== undefined);
  });
});

describe('coordinator: state requests (coordinator path)', () => {
  it('absorbs readTs before reading the map: after a PENDING answer the clock is above readTs', async () => {
    const { coordinator, run, clock } = setup();
    const tx = coordinator.begin();
    const readTs = addMs(clock.current(), 10_000);
    const response = await run(coordinator.handleTxStateCoordinatorRequest(stateRequest(tx.id, readTs)));
    assert.deepEqual(response.answer, { state: 'PENDING' });
    assert.ok(clock.current() > readTs);
    // Any commitTs taken from now on is above readTs.
    assert.ok(clock.now() > readTs);
  });

  it('answers COMMITTED with its commitTs even above readTs; ABORTED; null for unknown or foreign txs', async () => {
    const { coordinator, cluster, run, txStates } = setup();
    const tx = coordinator.begin();
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1));
    const readTs = tx.beginTs;
    await run(coordinator.commit(tx));
    const commitTs = txStates.get(tx.id)!.commitTimestamp!;
    assert.ok(commitTs > readTs);
    const a = await run(coordinator.handleTxStateCoordinatorRequest(stateRequest(tx.id, readTs)));
    assert.deepEqual(a.answer, { state: 'COMMITTED', commitTs });
    const other = makeTxId({ beginTimestamp: readTs, nodeId: 'n9-id' as NodeId, counter: 1 });
    txStates.update(other, { state: 'PENDING', reason: 'update-applied', coordinatorId: 'n9-id' as NodeId });
    assert.equal((await run(coordinator.handleTxStateCoordinatorRequest(stateRequest(other, readTs)))).answer, null);
    const absent = makeTxId({ beginTimestamp: readTs, nodeId: SELF.id, counter: 999 });
    assert.equal((await run(coordinator.handleTxStateCoordinatorRequest(stateRequest(absent, readTs)))).answer, null);
    const rolled = coordinator.begin();
    await run(coordinator.put(rolled, TABLE, cluster.keyIn(1), 1));
    await run(coordinator.rollback(rolled));
    const r = await run(coordinator.handleTxStateCoordinatorRequest(stateRequest(rolled.id, readTs)));
    assert.deepEqual(r.answer, { state: 'ABORTED' });
  });

  it('FINISHING with commitTs > readTs is "not visible" at once; with commitTs ≤ readTs it waits for the outcome', async () => {
    const { coordinator, cluster, run, txStates, scheduler } = setup();
    const tx = coordinator.begin();
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1));
    const gate = deferred<void>();
    cluster.script('TxFinishRequest', async (to, body) => {
      await gate.promise;
      return cluster.handle(to, body);
    });
    const commit = coordinator.commit(tx);
    await scheduler.run({ until: () => txStates.get(tx.id)?.state === 'FINISHING', forMs: 1_000 });
    const commitTs = txStates.get(tx.id)!.commitTimestamp!;
    const early = await run(coordinator.handleTxStateCoordinatorRequest(stateRequest(tx.id, tx.beginTs)));
    assert.deepEqual(early.answer, { state: 'PENDING' });
    let late: TxResponse | undefined;
    const waiting = coordinator.handleTxStateCoordinatorRequest(stateRequest(tx.id, commitTs)).then((r) => {
      late = r;
      return r;
    });
    await scheduler.run({ forMs: 100 });
    assert.equal(late, undefined, 'it waits while the outcome is unknown');
    gate.resolve();
    const answer = await run(waiting);
    assert.deepEqual(answer.answer, { state: 'COMMITTED', commitTs });
    await run(commit);
  });

  it('a FINISHING wait that times out answers an error, never PENDING', async () => {
    const { coordinator, cluster, run, txStates, scheduler } = setup({ options: { stateWaitMs: 500 } });
    const tx = coordinator.begin();
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1));
    cluster.script('TxFinishRequest', hang);
    void coordinator.commit(tx).catch(() => {});
    await scheduler.run({ until: () => txStates.get(tx.id)?.state === 'FINISHING', forMs: 1_000 });
    const commitTs = txStates.get(tx.id)!.commitTimestamp!;
    await rejectsWith(run(coordinator.handleTxStateCoordinatorRequest(stateRequest(tx.id, commitTs))), 'TIMEOUT');
    coordinator.stop();
  });

  it('a malformed state request is INVALID_ARGUMENT', async () => {
    const { coordinator, run } = setup();
    await rejectsWith(
      run(coordinator.handleTxStateCoordinatorRequest(stateRequest(asTxIdUnchecked('nope'), 5n as HybridTimestamp))),
      'INVALID_ARGUMENT',
    );
  });
});

function stateRequest(id: TxId, readTs: HybridTimestamp) {
  return { kind: 'TxStateCoordinatorRequest', txId: id, readTs } as const;
}
