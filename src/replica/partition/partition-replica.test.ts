/**
 * Three partition replicas over the real Raft driver on the simulator's virtual time: the leader takes a first lease
 * only after applying an entry of its own term, renews it, answers data proposals from their apply results, and when
 * it is cut off the new leader's lease starts at the old expiration (never earlier); the stale holder's writes never
 * apply; after healing every replica holds byte-identical state. Also: a re-created replica object on the same node
 * never inherits the lease (rule 2).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isBasaltError } from '../../core/errors.js';
import { type LogIndex, type NodeId, type NodeName, nodeName, type PartitionId, type Term } from '../../core/ids.js';
import { HybridClock } from '../../hlc/hybrid-clock.js';
import { RaftDriver } from '../../raft/driver.js';
import { MemoryLogStorage } from '../../raft/memory-log-storage.js';
import type { Entry, Snapshot } from '../../raft/types.js';
import { SimClock } from '../../sim/clock.js';
import { SeededRandom } from '../../sim/random.js';
import { Scheduler } from '../../sim/scheduler.js';
import { MemoryStorageEngine } from '../../storage/storage-engine.js';
import { simRaftTransport } from '../../testing/replica-cluster.js';
import {
  assertSameBytes,
  at,
  COORDINATOR,
  ManualClock,
  PARTITION,
  put,
  soloReplica,
  txIdAt,
} from '../../testing/replica-support.js';
import { TxStateMap } from '../../tx/core/tx-state-map.js';
import type { ApplyResult } from './apply-result.js';
import { decodeCommand, isDataCommand } from './commands.js';
import { sameHolder, tokenOf } from './lease.js';
import { PartitionReplica } from './partition-replica.js';
import { leaseTiming } from './primary.js';

const SKEW_MS = 20;
const TIMING = leaseTiming(SKEW_MS, 600, 150);
const NAMES = [nodeName('n1'), nodeName('n2'), nodeName('n3')];

interface Member {
  readonly name: NodeName;
  readonly driver: RaftDriver;
  readonly replica: PartitionReplica;
  readonly clock: HybridClock;
  readonly engine: MemoryStorageEngine;
  readonly storage: MemoryLogStorage;
}

class Harness {
  readonly scheduler: Scheduler;
  readonly members = new Map<NodeName, Member>();
  readonly cut = new Set<NodeName>();
  private readonly handlers = new Map<NodeName, (from: NodeName, envelope: unknown) => void>();
  private starts = 0;

  constructor(readonly seed: number) {
    this.scheduler = new Scheduler({ seed });
  }

  async start(name: NodeName, from?: Member): Promise<Member> {
    this.starts++;
    const owner = `${name}#${this.starts}`;
    const random = new SeededRandom(`${this.seed}/${owner}`);
    const physical = new SimClock(this.scheduler);
    const clock = from?.clock ?? new HybridClock(physical, { maxClockSkewMs: SKEW_MS });
    const engine = from?.engine ?? new MemoryStorageEngine();
    const storage = from?.storage ?? new MemoryLogStorage();
    let driver: RaftDriver | undefined;
    const replica = new PartitionReplica({
      partitionId: PARTITION,
      nodeId: `${name}-id` as NodeId,
      nodeName: name,
      random,
      physicalClock: physical,
      clock,
      engine,
      txStateMap: new TxStateMap({ clock: physical }),
      submit: (bytes) => driver!.propose(PARTITION, bytes),
      timing: TIMING,
      safeTimeSyncIdleMs: 50,
      timers: this.scheduler.timers(owner),
    });
    const sm = replica.stateMachine;
    driver = new RaftDriver({
      self: name,
      transport: simRaftTransport(this.scheduler, this.cut, this.handlers, name, 'raft-msg'),
      timers: this.scheduler.timers(owner),
      random: random.fork('raft'),
      storage,
      stateMachine: {
        appliedIndex: (_g: PartitionId) => sm.appliedIndex(),
        apply: (_g: PartitionId, entries: readonly Entry[]) => sm.apply(entries),
        snapshot: (_g: PartitionId) => sm.snapshot(),
        restore: (_g: PartitionId, snapshot: Snapshot) => sm.restore(snapshot),
      },
      tickIntervalMs: 10,
    });
    await driver.addGroup(PARTITION, NAMES);
    const member = { name, driver, replica, clock, engine, storage };
    this.members.set(name, member);
    const timers = this.scheduler.timers(owner);
    const upkeep = (): void => {
      if (this.members.get(name) !== member) return;
      const s = driver.status(PARTITION);
      if (s !== undefined) replica.maintain({ isLeader: s.role === 'leader', term: s.term });
      timers.setTimer(upkeep, 20);
    };
    timers.setTimer(upkeep, 20);
    return member;
  }

  member(name: NodeName): Member {
    const m = this.members.get(name);
    assert.ok(m !== undefined);
    return m;
  }

  /** The node whose replica acts as primary at its own `now`, if any. */
  primary(): Member | undefined {
    for (const m of this.members.values()) {
      if (this.cut.has(m.name)) continue;
      if (m.replica.checkPrimary(m.clock.now()).kind === 'ok') return m;
    }
    return undefined;
  }

  async runUntil(until: () => boolean, forMs = 10_000): Promise<void> {
    await this.scheduler.run({ forMs, until });
    assert.ok(until(), `condition not reached within ${forMs} ms (seed ${this.seed})`);
  }

  async settle<T>(p: Promise<T>): Promise<T> {
    let done = false;
    const tracked = p.finally(() => {
      done = true;
    });
    tracked.catch(() => {});
    await this.runUntil(() => done, 5_000);
    return tracked;
  }

  async write(m: Member, key: string, value: number): Promise<ApplyResult> {
    const check = m.replica.checkPrimary(m.clock.now());
    assert.ok(check.kind === 'ok', `${m.name} must act as primary`);
    return this.settle(
      m.replica.proposeData({
        token: check.token,
        txId: txIdAt(1_000 + value, value, 'w'),
        coordinatorId: COORDINATOR,
        commitPartitionId: PARTITION,
        full: true,
        writes: [put(key, value)],
      }),
    );
  }
}

/** Seeds to run; replay or widen with BASALT_REPLICA_SEEDS=1,2,3. */
const SEEDS = (process.env['BASALT_REPLICA_SEEDS'] ?? '11,23').split(',').map(Number);

describe('partition replicas over the Raft driver (virtual time)', () => {
  for (const seed of SEEDS) {
    it(`leases are taken, renewed and taken over without overlap; stale writes never apply; replicas converge (seed ${seed})`, async () => {
      const h = new Harness(seed);
      for (const n of NAMES) await h.start(n);
      await h.runUntil(() => h.primary() !== undefined);
      const first = h.primary()!;
      const firstLease = first.replica.stateMachine.currentLease()!;
      assert.ok(sameHolder(firstLease.holder, first.replica.self));
      assert.equal(first.driver.status(PARTITION)?.role, 'leader', 'the holder is the Raft leader');

      const written = await h.write(first, 'k', 1);
      assert.equal(written.kind, 'UPDATED');
      // The holder renews its lease while it leads: run past the first expiration and it still acts.
      await h.scheduler.run({ forMs: 2_000 });
      assert.equal(h.primary(), first);
      const renewed = first.replica.stateMachine.currentLease()!;
      assert.equal(renewed.start, firstLease.start, 'renewals keep the token');
      assert.ok(renewed.expiration > firstLease.expiration);

      // Cut the primary off: the others elect a leader whose lease starts at the old expiration, not before.
      h.cut.add(first.name);
      const stale = first.replica.proposeData({
        token: tokenOf(renewed),
        txId: txIdAt(5_000, 1, 'stale'),
        coordinatorId: COORDINATOR,
        commitPartitionId: PARTITION,
        full: true,
        writes: [put('k', 666)],
      });
      stale.catch(() => {});
      const others = NAMES.filter((n) => n !== first.name).map((n) => h.member(n));
      await h.runUntil(() =>
        others.some((m) => {
          const l = m.replica.stateMachine.currentLease();
          return l !== null && sameHolder(l.holder, m.replica.self);
        }),
      );
      const second = others.find((m) => sameHolder(m.replica.stateMachine.currentLease()!.holder, m.replica.self))!;
      const takeover = second.replica.stateMachine.currentLease()!;
      const lastOfFirst = first.replica.stateMachine.currentLease()!;
      assert.ok(takeover.start >= lastOfFirst.expiration, 'the new lease starts at or after the old expiration');
      await h.runUntil(() => h.primary() === second);
      assert.equal((await h.write(second, 'k', 2)).kind, 'UPDATED');

      // Heal: the stale holder's proposal was overwritten or lands as a no-op; everybody converges.
      h.cut.clear();
      await h.scheduler.run({ forMs: 1_500 });
      const staleOutcome = await stale.then(
        (r) => r.kind,
        (e: unknown) => (e as { code?: string }).code,
      );
      assert.ok(['NOT_LEADER', 'PRIMARY_MISS'].includes(String(staleOutcome)), String(staleOutcome));
      const reference = h.member(NAMES[0]!).replica.stateMachine;
      await h.runUntil(() =>
        [...h.members.values()].every((m) => m.replica.stateMachine.appliedIndex() === reference.appliedIndex()),
      );
      const snapshots = [...h.members.values()].map((m) => m.replica.stateMachine.snapshot());
      for (const s of snapshots.slice(1)) assertSameBytes(s, snapshots[0]!, 'replicas diverged');
      const mv = second.engine.mvPartition(PARTITION);
      const read = mv.readLatest(mv.rowIdOf('k')!);
      assert.ok(read.kind === 'committed' && read.value === 2, 'the stale write never applied');
    });
  }

  it("idle SafeTimeSync: without any writes, every replica's applied safe time keeps following the clock", async () => {
    const h = new Harness(13);
    for (const n of NAMES) await h.start(n);
    await h.runUntil(() => h.primary() !== undefined);
    await h.scheduler.run({ forMs: 200 });
    const before = NAMES.map((n) => h.member(n).replica.stateMachine.safeTime.current());
    await h.scheduler.run({ forMs: 1_000 });
    NAMES.forEach((n, i) => {
      const m = h.member(n);
      const advancedMs = Number((m.replica.stateMachine.safeTime.current() - before[i]!) >> 16n);
      assert.ok(advancedMs >= 800, `${n}: safe time moved only ${advancedMs} ms in 1000 ms of idle time`);
      // And never past the node's own clock: safe time is an applied timestamp, never a promise about the future.
      assert.ok(m.replica.stateMachine.safeTime.current() < m.clock.now());
    });
  });

  it('rule 2: a replica object re-created on the same node does not inherit the lease, and takes a new one later', async () => {
    const h = new Harness(12);
    for (const n of NAMES) await h.start(n);
    await h.runUntil(() => h.primary() !== undefined);
    const first = h.primary()!;
    const before = first.replica.stateMachine.currentLease()!;
    // Stop the replica object and its Raft group, and start a new replica object over the same storage.
    first.replica.stop();
    first.driver.stop();
    h.members.delete(first.name);
    const again = await h.start(first.name, first);
    assert.deepEqual(again.replica.stateMachine.currentLease(), before, 'the applied lease survives');
    assert.notEqual(again.replica.self.incarnation, first.replica.self.incarnation);
    assert.equal(again.replica.checkPrimary(again.clock.now()).kind, 'PRIMARY_MISS');
    // Whoever leads next takes a new lease from the old expiration; nobody acts under the old one any more.
    await h.runUntil(() => {
      const l = again.replica.stateMachine.currentLease();
      return l !== null && l.start >= before.expiration;
    });
    await h.runUntil(() => h.primary() !== undefined);
    const now = h.primary()!;
    assert.ok(!sameHolder(now.replica.stateMachine.currentLease()!.holder, first.replica.self));
  });
});

describe('PartitionReplica on its own (submit applies at once)', () => {
  function single() {
    const physical = new ManualClock(1_000);
    const clock = new HybridClock(physical, { maxClockSkewMs: SKEW_MS });
    let replica: PartitionReplica | undefined;
    const submitted: Uint8Array[] = [];
    let hold = false;
    const submit = async (bytes: Uint8Array): Promise<void> => {
      submitted.push(bytes);
      await Promise.resolve();
      if (hold) return new Promise(() => {});
      const index = (replica!.stateMachine.appliedIndex() + 1) as LogIndex;
      replica!.stateMachine.apply([{ term: 1 as Term, index, kind: 'data', data: bytes }]);
    };
    replica = soloReplica(physical, clock, submit, {
      timing: TIMING,
      timers: new Scheduler({ seed: 1 }).timers('solo'),
    });
    return { replica, clock, physical, submitted, setHold: (h: boolean) => (hold = h) };
  }

  it('takes a first lease as leader of an applied term, then proposes data with rising sequence numbers', async () => {
    const { replica, clock, submitted } = single();
    // Nothing applied in term 1 yet: no lease proposal (rule 3).
    assert.equal(replica.maintain({ isLeader: true, term: 1 as Term }).lease.kind, 'none');
    replica.stateMachine.apply([{ term: 1 as Term, index: 1 as LogIndex, kind: 'noop', data: new Uint8Array() }]);
    const outcome = replica.maintain({ isLeader: true, term: 1 as Term });
    assert.equal(outcome.lease.kind, 'propose');
    assert.equal(replica.maintain({ isLeader: true, term: 1 as Term }).lease.kind, 'none', 'one at a time');
    await new Promise((r) => setImmediate(r));
    const check = replica.checkPrimary(clock.now());
    assert.ok(check.kind === 'ok');
    const base = { token: check.token, coordinatorId: COORDINATOR, commitPartitionId: PARTITION, full: true };
    const one = await replica.proposeData({ ...base, txId: txIdAt(1_001), writes: [put('a', 1)] });
    const two = await replica.proposeData({ ...base, txId: txIdAt(1_002), writes: [put('b', 1), put('c', 2)] });
    assert.deepEqual([one.kind, two.kind], ['UPDATED', 'UPDATED']);
    const kinds = submitted.map((b) => decodeCommand(b)).map((c) => (isDataCommand(c) ? `${c.kind}#${c.seq}` : c.kind));
    assert.deepEqual(kinds, ['Lease', 'Update#1', 'UpdateAll#2']);
  });

  it('readable safe time stays below an in-flight proposal; confirmLease absorbs commitTs first', async () => {
    const { replica, clock, setHold } = single();
    replica.stateMachine.apply([{ term: 1 as Term, index: 1 as LogIndex, kind: 'noop', data: new Uint8Array() }]);
    replica.maintain({ isLeader: true, term: 1 as Term });
    await new Promise((r) => setImmediate(r));
    const check = replica.checkPrimary(clock.now());
    assert.ok(check.kind === 'ok');
    setHold(true);
    const pending = replica.proposeData({
      token: check.token,
      coordinatorId: COORDINATOR,
      commitPartitionId: PARTITION,
      full: true,
      txId: txIdAt(1_003),
      writes: [put('a', 1)],
    });
    pending.catch(() => {});
    const inFlight = replica.proposals.smallestInFlight();
    assert.ok(inFlight !== undefined);
    assert.ok(replica.readableSafeTime(clock.now()) < inFlight);
    const commitTs = at(1_200);
    const confirmation = replica.confirmLease(check.token, commitTs);
    assert.equal(confirmation.confirmed, true);
    assert.ok(clock.current() > commitTs, 'commitTs was absorbed');
    replica.stop();
    await assert.rejects(pending, (e: unknown) => isBasaltError(e, 'NODE_UNAVAILABLE'));
    assert.equal(replica.proposals.inFlightCount, 0);
    assert.deepEqual(replica.maintain({ isLeader: true, term: 1 as Term }).lease, { kind: 'none', reason: 'stopped' });
    await assert.rejects(
      replica.propose((p) => ({ kind: 'SafeTimeSync', ts: p.ts, proposalId: p.id })),
      (e: unknown) => isBasaltError(e, 'NODE_UNAVAILABLE'),
    );
  });
});
