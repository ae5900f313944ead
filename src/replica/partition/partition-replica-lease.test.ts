/**
 * A partition replica with leases applied directly to its state machine:
 * - rule 1's "before start it waits": a holder whose applied lease starts soon waits for the start instead of
 *   answering PRIMARY_MISS (a transferred lease starts at the previous one's expiration), bounded by
 *   leaseStartWaitMs; anything else (a later start, another holder) answers at once;
 * - locks belong to one lease: a new applied lease drops every lock and waiter of the previous one; an extension keeps
 *   them.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isBasaltError } from '../../core/errors.js';
import type { NodeId, NodeName } from '../../core/ids.js';
import { HybridClock } from '../../hlc/hybrid-clock.js';
import { physicalMs } from '../../hlc/timestamp.js';
import { SimClock } from '../../sim/clock.js';
import { SeededRandom } from '../../sim/random.js';
import { Scheduler } from '../../sim/scheduler.js';
import { MemoryStorageEngine } from '../../storage/storage-engine.js';
import { LogBuilder, leaseCommand, PARTITION, txIdAt } from '../../testing/replica-support.js';
import { pointLockPlan } from '../../tx/core/lock-modes.js';
import { TxStateMap } from '../../tx/core/tx-state-map.js';
import type { Lease } from './lease.js';
import { PartitionReplica, type UpkeepFacts } from './partition-replica.js';

const SKEW_MS = 20;

function setup(startInMs: number, leaseStartWaitMs: number, holder: 'self' | 'other' = 'self') {
  const scheduler = new Scheduler({ seed: 7 });
  const physical = new SimClock(scheduler);
  const clock = new HybridClock(physical, { maxClockSkewMs: SKEW_MS });
  const engine = new MemoryStorageEngine();
  const txStateMap = new TxStateMap({ clock: physical });
  const replica = new PartitionReplica({
    partitionId: PARTITION,
    nodeId: 'n1-id' as NodeId,
    nodeName: 'n1' as NodeName,
    random: new SeededRandom('lease-start'),
    physicalClock: physical,
    clock,
    engine,
    txStateMap,
    submit: () => Promise.reject(new Error('no Raft here')),
    timers: scheduler.timers('handlers'),
    leaseStartWaitMs,
  });
  const nowMs = physicalMs(clock.now());
  const lease: Lease = {
    holder: holder === 'self' ? replica.self : { nodeId: 'n2-id' as NodeId, incarnation: 'x' },
    holderName: (holder === 'self' ? 'n1' : 'n2') as NodeName,
    start: clock.now() + (BigInt(startInMs) << 16n),
    expiration: clock.now() + (BigInt(startInMs + 5_000) << 16n),
  } as Lease;
  const log = new LogBuilder();
  replica.stateMachine.apply([log.data(leaseCommand(lease, null, nowMs))]);
  const applyLease = (next: Lease, replaces: Lease) =>
    replica.stateMachine.apply([log.data(leaseCommand(next, replaces, physicalMs(clock.now())))]);
  return { scheduler, clock, partition: replica, lease, applyLease };
}

describe('PartitionReplica.untilLeaseStart', () => {
  it('waits for a start within the bound, then the holder acts', async () => {
    const { scheduler, clock, partition, lease } = setup(300, 1_000);
    assert.throws(
      () => partition.actingLease(clock.now()),
      (e) => isBasaltError(e, 'PRIMARY_MISS') && e.details?.['reason'] === 'not-started',
    );
    let now: bigint | undefined;
    void partition.untilLeaseStart(clock.now()).then((n) => {
      now = n;
    });
    await scheduler.run({ until: () => now !== undefined, forMs: 2_000 });
    assert.ok(now !== undefined && now >= lease.start, 'resolved at or after the start');
    assert.equal(partition.actingLease(clock.now()).start, lease.start);
  });

  it('answers at once when the start is beyond the bound (the caller then refuses: not-started)', async () => {
    const { clock, partition } = setup(3_000, 1_000);
    const before = clock.now();
    const now = await partition.untilLeaseStart(before);
    assert.equal(now, before);
    assert.throws(
      () => partition.actingLease(now),
      (e) => isBasaltError(e, 'PRIMARY_MISS'),
    );
  });

  it("answers at once when the lease is another replica's", async () => {
    const { clock, partition } = setup(300, 1_000, 'other');
    const before = clock.now();
    assert.equal(await partition.untilLeaseStart(before), before);
  });
});

describe('PartitionReplica lock table per lease', () => {
  const tx1 = txIdAt(1, 2);
  const tx2 = txIdAt(1, 1); // older: it waits under wait-die

  it('a new lease drops the locks and waiters of the previous one; an extension keeps them', async () => {
    const { partition, lease, applyLease } = setup(0, 1_000);
    await partition.acquire(tx1, pointLockPlan(PARTITION, 'a', 'X'));
    const extended: Lease = { ...lease, expiration: lease.expiration + (1_000n << 16n) } as Lease;
    applyLease(extended, lease);
    assert.equal(partition.locks.locksOf(tx1).length, 2, 'an extension keeps the locks');
    const waiting = partition.acquire(tx2, pointLockPlan(PARTITION, 'a', 'X')).then(
      () => 'granted',
      (e: unknown) => (isBasaltError(e) ? e.code : String(e)),
    );
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(partition.locks.waitsOf(tx2).length, 1, 'the older tx waits for the row lock');
    const next: Lease = {
      holder: { nodeId: 'n2-id' as NodeId, incarnation: 'y' },
      holderName: 'n2' as NodeName,
      start: extended.expiration,
      expiration: extended.expiration + (5_000n << 16n),
    } as Lease;
    applyLease(next, extended);
    assert.deepEqual(partition.locks.locksOf(tx1), [], 'the locks of the old lease are gone');
    assert.equal(await waiting, 'TX_ABORTED', 'the waiter of the old lease failed');
    assert.deepEqual(partition.locks.locksOf(tx2), []);
  });
});

describe('PartitionReplica.prepareHandOff', () => {
  it('pauses renewals while asked, answers ready only once the lease stops letting it act, then renews again', () => {
    const { scheduler, partition, lease } = setup(0, 1_000);
    // The holder's term: renewals need an applied entry of the leader's own term.
    const raft: UpkeepFacts = {
      raft: { isLeader: true, term: partition.stateMachine.appliedTerm() },
      successor: undefined,
      occasion: { kind: 'tick' },
    };
    // 5 s lease, renewal margin 2 s, stasis 2·20 ms: a renewal is due from 2.96 s on.
    scheduler.runSync({ forMs: 3_000 });
    assert.equal(partition.prepareHandOff(1_000), false, 'the lease still lets the holder act');
    assert.equal(partition.decideUpkeep(raft).lease.kind, 'none', 'no renewal while paused');
    assert.equal(
      (partition.decideUpkeep(raft).lease as { reason?: string }).reason,
      'renewals-paused',
      'the renewal that was due is held back',
    );
    for (let at = 3_000; at <= 4_800; at += 200) {
      assert.equal(partition.prepareHandOff(1_000), false, `still acting at ${at} ms`);
      if (at < 4_800) scheduler.runSync({ forMs: 200 });
    }
    scheduler.runSync({ forMs: 190 });
    assert.equal(partition.prepareHandOff(1_000), true, 'in the stasis window: the leadership may move');
    assert.equal(partition.leaseView().lease?.expiration, lease.expiration, 'the lease was never renewed');
    // The move gave up (nobody asks any more): once the pause ran out the holder renews again.
    scheduler.runSync({ forMs: 1_001 });
    const resumed = partition.decideUpkeep(raft).lease;
    assert.equal(resumed.kind, 'propose', 'renewals resume once the pause ran out');
  });

  it("answers ready at once for a lease that is not this replica's", () => {
    const { partition } = setup(0, 1_000, 'other');
    assert.equal(partition.prepareHandOff(1_000), true);
  });
});
