/**
 * The driver on virtual time: three (or more) drivers on the simulator's scheduler, a small in-test transport that
 * delivers after 1 ms (and can cut links), in-memory log storage and a state machine that records applied entries.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isBasaltError } from '../core/errors.js';
import { cumulativeCounts } from '../core/histogram.js';
import { type NodeName, nodeName, type PartitionId, partitionId } from '../core/ids.js';
import { SimClock } from '../sim/clock.js';
import { SeededRandom } from '../sim/random.js';
import { Scheduler } from '../sim/scheduler.js';
import {
  type LeaderChange,
  RaftDriver,
  type RaftStateMachine,
  type RaftTransport,
  withoutSubsumedAccepts,
} from './driver.js';
import { MemoryLogStorage } from './memory-log-storage.js';
import type { Entry, Message, Snapshot } from './types.js';
import type { RaftEnvelope } from './wire.js';

const G = partitionId('t1p0');
const enc = (s: string): Uint8Array => new TextEncoder().encode(s);
const dec = (b: Uint8Array): string => new TextDecoder().decode(b);

/** Keeps the applied data of every group as a list of strings ('' for a noop). */
class RecordingStateMachine implements RaftStateMachine {
  readonly applied = new Map<PartitionId, string[]>();
  restores = 0;
  appliedIndex(group: PartitionId): number {
    return this.applied.get(group)?.length ?? 0;
  }
  apply(group: PartitionId, entries: readonly Entry[]): void {
    const list = this.applied.get(group) ?? [];
    for (const e of entries) {
      assert.equal(e.index, list.length + 1, 'entries apply in order, without gaps');
      list.push(e.kind === 'noop' ? '' : dec(e.data));
    }
    this.applied.set(group, list);
  }
  snapshot(group: PartitionId): Uint8Array {
    return enc(JSON.stringify(this.applied.get(group) ?? []));
  }
  restore(group: PartitionId, snapshot: Snapshot): void {
    this.restores++;
    this.applied.set(group, JSON.parse(dec(snapshot.data)) as string[]);
  }
  data(group: PartitionId): string[] {
    return (this.applied.get(group) ?? []).filter(Boolean);
  }
}

class TestNet {
  readonly handlers = new Map<NodeName, (from: NodeName, envelope: unknown) => void>();
  readonly cut = new Set<string>();
  sent: RaftEnvelope[] = [];
  constructor(private readonly scheduler: Scheduler) {}
  transport(self: NodeName): RaftTransport {
    return {
      send: (to, envelope) => {
        this.sent.push(envelope);
        if (this.cut.has(self) || this.cut.has(to)) return;
        this.scheduler.schedule(1, () => this.handlers.get(to)?.(self, envelope), 'raft-msg');
      },
      setHandler: (handler) => {
        this.handlers.set(self, handler);
      },
    };
  }
}

interface Member {
  driver: RaftDriver;
  storage: MemoryLogStorage;
  sm: RecordingStateMachine;
}

class Cluster {
  readonly scheduler = new Scheduler({ seed: 'driver' });
  readonly net = new TestNet(this.scheduler);
  readonly names = [nodeName('n1'), nodeName('n2'), nodeName('n3')];
  readonly members = new Map<NodeName, Member>();
  readonly changes: LeaderChange[] = [];
  private incarnation = 0;

  /** Delays of the timers each node's driver armed, in order. */
  readonly armed = new Map<NodeName, number[]>();

  constructor(
    private readonly compactEntriesMin = 10_000,
    private readonly preferredLeader?: NodeName,
  ) {}

  async start(name: NodeName, storage = new MemoryLogStorage(), sm = new RecordingStateMachine()): Promise<Member> {
    const timers = this.scheduler.timers(`${name}#${++this.incarnation}`);
    const armed: number[] = [];
    this.armed.set(name, armed);
    const driver = new RaftDriver({
      self: name,
      transport: this.net.transport(name),
      timers: {
        setTimer: (fn, delayMs) => {
          armed.push(delayMs);
          return timers.setTimer(fn, delayMs);
        },
        clearTimer: (handle) => timers.clearTimer(handle),
      },
      random: new SeededRandom(`${name}/${this.incarnation}`),
      storage,
      stateMachine: sm,
      tickIntervalMs: 10,
      compactEntriesMin: this.compactEntriesMin,
      onLeaderChange: (c) => this.changes.push(c),
      clock: new SimClock(this.scheduler),
    });
    await driver.addGroup(G, this.names, {
      ...(this.preferredLeader !== undefined && { preferredLeader: this.preferredLeader }),
    });
    const m = { driver, storage, sm };
    this.members.set(name, m);
    return m;
  }

  async startAll(): Promise<void> {
    for (const n of this.names) await this.start(n);
  }

  run(ms: number): Promise<unknown> {
    return this.scheduler.run({ forMs: ms });
  }

  async waitLeader(): Promise<NodeName> {
    await this.scheduler.run({ forMs: 5_000, until: () => this.leader() !== null });
    const l = this.leader();
    assert.ok(l !== null, 'no leader elected');
    return l;
  }

  leader(): NodeName | null {
    for (const [n, m] of this.members) if (m.driver.status(G)?.role === 'leader') return n;
    return null;
  }

  member(n: NodeName): Member {
    return this.members.get(n)!;
  }

  /** Runs the scheduler until `p` settles (or 5 s of virtual time pass). */
  async settle<T>(p: Promise<T>): Promise<T> {
    let done = false;
    const tracked = p.finally(() => {
      done = true;
    });
    tracked.catch(() => {});
    await this.scheduler.run({ forMs: 5_000, until: () => done });
    assert.ok(done, 'promise did not settle');
    return tracked;
  }
}

test('a proposal on the leader resolves once committed and applied, and every node applies the same entries', async () => {
  const c = new Cluster();
  await c.startAll();
  const leader = await c.waitLeader();
  const committed = await c.settle(c.member(leader).driver.propose(G, enc('hello')));
  assert.equal(committed.index, 2, 'after the leader noop');
  assert.deepEqual(c.member(leader).sm.data(G), ['hello'], 'applied on the leader before resolving');
  await c.run(100);
  for (const n of c.names) assert.deepEqual(c.member(n).sm.applied.get(G), ['', 'hello']);
  const last = c.changes.at(-1);
  assert.ok(c.changes.some((ch) => ch.leader === leader && ch.role === 'leader'));
  assert.equal(last?.term, committed.term);
});

test('commit latency: each resolved proposal is timed from propose to applied on the leader; followers time none', async () => {
  const c = new Cluster();
  await c.startAll();
  const leader = await c.waitLeader();
  await c.run(50);
  const driver = c.member(leader).driver;
  assert.equal(driver.commitLatencyMs().count, 0, 'the leader noop was not proposed through propose()');
  for (let i = 0; i < 5; i++) await c.settle(driver.propose(G, enc(`s${i}`)));
  await c.settle(Promise.all(Array.from({ length: 10 }, (_, i) => driver.propose(G, enc(`b${i}`)))));
  const latency = driver.commitLatencyMs();
  assert.equal(latency.count, 15);
  assert.equal(cumulativeCounts(latency).at(-1), 15, '+Inf holds every observation');
  // One round trip to a follower over the 1 ms links at least, and well under a second of virtual time.
  assert.ok(latency.sum >= 2 * 15, `sum ${latency.sum}`);
  assert.ok(latency.sum / latency.count < 100, `mean ${latency.sum / latency.count}`);
  for (const n of c.names.filter((n) => n !== leader)) assert.equal(c.member(n).driver.commitLatencyMs().count, 0);
});

test("a fresh group's first leader is its preferred leader: the other replicas campaign one timeout later", async () => {
  const firstLeaders: NodeName[] = [];
  for (const preferred of [nodeName('n1'), nodeName('n2'), nodeName('n3')]) {
    const c = new Cluster(10_000, preferred);
    await c.startAll();
    firstLeaders.push(await c.waitLeader());
    assert.equal(c.changes.find((ch) => ch.role === 'leader')?.leader, preferred);
  }
  assert.deepEqual(firstLeaders, ['n1', 'n2', 'n3']);
});

test('without the preferred leader up, another replica is elected after the longer timeout', async () => {
  const c = new Cluster(10_000, nodeName('n3'));
  await c.start(nodeName('n1'));
  await c.start(nodeName('n2'));
  const leader = await c.waitLeader();
  assert.notEqual(leader, 'n3');
});

test("a proposal's bytes are kept in a buffer of their own, not as a view pinning the larger buffer they came from", async () => {
  const c = new Cluster();
  await c.startAll();
  const leader = await c.waitLeader();
  const shared = new Uint8Array(8192);
  const view = shared.subarray(100, 105);
  view.set(enc('hello'));
  const committed = await c.settle(c.member(leader).driver.propose(G, view));
  const stored = c
    .member(leader)
    .storage.load(G)
    .entries.find((e) => e.index === committed.index);
  assert.ok(stored !== undefined && stored.kind === 'data');
  assert.equal(stored.data.byteLength, 5);
  assert.equal(stored.data.buffer.byteLength, 5, 'an exact-size copy, not a view of the 8 KiB buffer');
  assert.deepEqual(c.member(leader).sm.data(G), ['hello']);
});

test('a follower refuses a proposal with NOT_LEADER and names the leader', async () => {
  const c = new Cluster();
  await c.startAll();
  const leader = await c.waitLeader();
  await c.run(50);
  const follower = c.names.find((n) => n !== leader)!;
  await assert.rejects(c.member(follower).driver.propose(G, enc('x')), (e) => {
    assert.ok(isBasaltError(e, 'NOT_LEADER'));
    assert.equal(e.details?.['leader'], leader);
    return true;
  });
});

test('64 concurrent proposals are batched into few Appends and all resolve in proposal order', async () => {
  const c = new Cluster();
  await c.startAll();
  const leader = await c.waitLeader();
  await c.run(50);
  c.net.sent = [];
  const ps = Array.from({ length: 64 }, (_, i) => c.member(leader).driver.propose(G, enc(`p${i}`)));
  const results = await c.settle(Promise.all(ps));
  const indexes = results.map((r) => r.index);
  assert.deepEqual(
    indexes,
    [...indexes].sort((a, b) => a - b),
  );
  assert.equal(new Set(indexes).size, 64);
  const appends = c.net.sent.filter((e) => e.message.kind === 'Append' && e.message.entries.length > 0);
  assert.ok(appends.length <= 4, `${appends.length} Appends carried 64 proposals`);
  assert.deepEqual(
    c.member(leader).sm.data(G),
    Array.from({ length: 64 }, (_, i) => `p${i}`),
  );
});

test('a restarted node recovers its log and vote from storage and rejoins', async () => {
  const c = new Cluster();
  await c.startAll();
  const leader = await c.waitLeader();
  for (let i = 0; i < 5; i++) await c.settle(c.member(leader).driver.propose(G, enc(`a${i}`)));
  await c.run(50);
  const victim = c.names.find((n) => n !== leader)!;
  const old = c.member(victim);
  const termBefore = old.driver.status(G)!.term;
  old.driver.stop();
  // The state machine is volatile here: a fresh one re-applies everything from the stored log.
  const fresh = new RecordingStateMachine();
  const restarted = await c.start(victim, old.storage, fresh);
  const s = restarted.driver.status(G)!;
  assert.equal(s.term, termBefore);
  assert.equal(s.lastIndex, 6);
  await c.settle(c.member(leader).driver.propose(G, enc('after')));
  await c.run(100);
  assert.deepEqual(fresh.data(G), ['a0', 'a1', 'a2', 'a3', 'a4', 'after']);
});

test('a follower cut off while the log was compacted catches up through a snapshot', async () => {
  const c = new Cluster(5);
  await c.startAll();
  const leader = await c.waitLeader();
  await c.run(50);
  const lagging = c.names.find((n) => n !== leader)!;
  c.net.cut.add(lagging);
  for (let i = 0; i < 20; i++) await c.settle(c.member(leader).driver.propose(G, enc(`s${i}`)));
  assert.ok(c.member(leader).driver.status(G)!.snapshotIndex >= 15, 'the leader compacted its log');
  c.net.cut.clear();
  await c.run(500);
  assert.equal(c.member(lagging).sm.restores, 1);
  assert.deepEqual(c.member(lagging).sm.data(G), c.member(leader).sm.data(G));
  assert.ok(c.net.sent.some((e) => e.message.kind === 'Snapshot' && e.message.to === lagging));
});

test('leadership transfer moves the leader; proposals on the old one are refused with the new one as hint', async () => {
  const c = new Cluster();
  await c.startAll();
  const leader = await c.waitLeader();
  await c.run(50);
  const target = c.names.find((n) => n !== leader)!;
  assert.equal(c.member(leader).driver.transferLeader(G, target), true);
  await c.scheduler.run({ forMs: 1_000, until: () => c.leader() === target });
  assert.equal(c.leader(), target);
  await assert.rejects(c.member(leader).driver.propose(G, enc('x')), (e) => isBasaltError(e, 'NOT_LEADER'));
  const r = await c.settle(c.member(target).driver.propose(G, enc('y')));
  assert.ok(r.index > 0);
});

test('malformed or misaddressed envelopes are dropped without harming the group', async () => {
  const c = new Cluster();
  await c.startAll();
  const leader = await c.waitLeader();
  const handler = c.net.handlers.get(leader)!;
  const bad: unknown[] = [
    null,
    { group: G, message: { kind: 'Append', from: 'n2', to: leader, term: 1 } },
    { group: G, message: { kind: 'Nope', from: 'n2', to: leader, term: 1 } },
    { group: G, message: { kind: 'HeartbeatResp', from: 'n3', to: leader, term: 1 } },
    { group: 'unknown', message: { kind: 'HeartbeatResp', from: 'n2', to: leader, term: 1 } },
  ];
  for (const b of bad) handler(nodeName('n2'), b);
  const r = await c.settle(c.member(leader).driver.propose(G, enc('still fine')));
  assert.ok(r.index > 0);
});

test('stop rejects pending proposals with NODE_UNAVAILABLE', async () => {
  const c = new Cluster();
  await c.startAll();
  const leader = await c.waitLeader();
  for (const n of c.names) if (n !== leader) c.net.cut.add(n);
  const p = c.member(leader).driver.propose(G, enc('never'));
  await c.run(30);
  c.member(leader).driver.stop();
  await assert.rejects(p, (e) => isBasaltError(e, 'NODE_UNAVAILABLE'));
});

test('removeGroup stops one group: pending proposals reject with NOT_FOUND, nothing more is stored, peers elect anew', async () => {
  const c = new Cluster();
  await c.startAll();
  const leader = await c.waitLeader();
  for (const n of c.names) if (n !== leader) c.net.cut.add(n);
  const p = c.member(leader).driver.propose(G, enc('orphan'));
  const rejected = assert.rejects(p, (e) => isBasaltError(e, 'NOT_FOUND'));
  await c.run(30);
  assert.equal(await c.settle(c.member(leader).driver.removeGroup(G)), true);
  await rejected;
  assert.equal(c.member(leader).driver.status(G), undefined);
  assert.deepEqual(c.member(leader).driver.groupIds(), []);
  assert.equal(await c.settle(c.member(leader).driver.removeGroup(G)), false, 'removing twice is a no-op');
  const stored = c.member(leader).storage.load(G).entries.length;
  c.net.cut.clear();
  await c.run(2_000);
  assert.equal(c.member(leader).storage.load(G).entries.length, stored, 'a removed group persists nothing more');
  const others = c.names.filter((n) => n !== leader);
  assert.ok(
    others.some((n) => c.member(n).driver.status(G)?.role === 'leader'),
    'the remaining voters elect a leader without it',
  );
});

/** Memory storage whose writes complete only when the test says so: "durable" is then observable. */
class GatedStorage extends MemoryLogStorage {
  private readonly gates: (() => void)[] = [];
  override async save(...args: Parameters<MemoryLogStorage['save']>): Promise<void> {
    await new Promise<void>((resolve) => this.gates.push(resolve));
    await super.save(...args);
  }
  get waiting(): number {
    return this.gates.length;
  }
  releaseAll(): void {
    for (const open of this.gates.splice(0)) open();
  }
}

/** Follower n2 of a group n1..n3 on gated storage, fed by hand: what it sends and applies is observable. */
async function gatedFollower(seed: string) {
  const scheduler = new Scheduler({ seed });
  const storage = new GatedStorage();
  const machine = new RecordingStateMachine();
  const sent: RaftEnvelope[] = [];
  let handler: (from: NodeName, envelope: unknown) => void = () => {};
  const [n1, n2, n3] = [nodeName('n1'), nodeName('n2'), nodeName('n3')];
  const driver = new RaftDriver({
    self: n2,
    transport: { send: (_to, e) => sent.push(e), setHandler: (h) => (handler = h) },
    timers: scheduler.timers('n2'),
    random: new SeededRandom(seed),
    storage,
    stateMachine: machine,
    tickIntervalMs: 60_000,
  });
  await driver.addGroup(G, [n1, n2, n3]);
  const deliver = (from: NodeName, envelope: unknown): void => handler(from, envelope);
  const settle = (): Promise<unknown> => scheduler.run({ forMs: 1 });
  return { driver, storage, machine, sent, deliver, settle, n1, n2 };
}

test('a vote and an append are answered only after the write holding them is durable', async () => {
  const { driver, storage, sent, deliver, settle, n1, n2 } = await gatedFollower('gated');
  const kinds = (): string[] => sent.map((e) => e.message.kind);

  deliver(n1, {
    group: G,
    message: { kind: 'Vote', from: n1, to: n2, term: 1, lastIndex: 0, lastTerm: 0, transfer: false },
  });
  await settle();
  assert.equal(storage.waiting, 1, 'the vote is being written');
  assert.deepEqual(kinds(), [], 'no answer before it is durable');
  storage.releaseAll();
  await settle();
  assert.deepEqual(kinds(), ['VoteResp']);
  assert.equal(storage.load(G).hardState?.vote, n1);

  const entry = { index: 1, term: 1, kind: 'data', data: enc('x') };
  deliver(n1, {
    group: G,
    message: { kind: 'Append', from: n1, to: n2, term: 1, prevIndex: 0, prevTerm: 0, entries: [entry], commit: 0 },
  });
  await settle();
  assert.deepEqual(kinds(), ['VoteResp'], 'the append is not acknowledged before its entry is durable');
  assert.equal(storage.load(G).entries.length, 0);
  storage.releaseAll();
  await settle();
  assert.deepEqual(kinds(), ['VoteResp', 'AppendResp']);
  assert.equal(storage.load(G).entries.length, 1);
  await driver.stop();
});

test('committed entries already durable apply while the next append is written; ones arriving with it wait', async () => {
  const { driver, storage, machine, deliver, settle, n1, n2 } = await gatedFollower('gated-apply');
  const entry = (index: number) => ({ index, term: 1, kind: 'data' as const, data: enc(`e${index}`) });
  const append = (prevIndex: number, index: number, commit: number) =>
    deliver(n1, {
      group: G,
      message: {
        kind: 'Append',
        from: n1,
        to: n2,
        term: 1,
        prevIndex,
        prevTerm: prevIndex === 0 ? 0 : 1,
        entries: [entry(index)],
        commit,
      },
    });

  append(0, 1, 0);
  await settle();
  storage.releaseAll();
  await settle();
  assert.deepEqual(machine.applied.get(G) ?? [], [], 'nothing committed yet');

  append(1, 2, 1);
  await settle();
  assert.equal(storage.waiting, 1, 'entry 2 is being written');
  assert.deepEqual(machine.applied.get(G), ['e1'], 'entry 1 (durable, now committed) applies meanwhile');
  storage.releaseAll();
  await settle();

  append(2, 3, 3);
  await settle();
  assert.equal(storage.waiting, 1, 'entry 3 is being written');
  assert.deepEqual(machine.applied.get(G), ['e1', 'e2'], 'entry 3 is committed but not yet durable here: it waits');
  storage.releaseAll();
  await settle();
  assert.deepEqual(machine.applied.get(G), ['e1', 'e2', 'e3']);
  await driver.stop();
});

test('a configuration change through the driver resolves once applied, refuses a second in flight, and the learner catches up', async () => {
  const c = new Cluster();
  await c.startAll();
  const leader = await c.waitLeader();
  const n4 = nodeName('n4');
  await c.start(n4);
  const d = c.member(leader).driver;
  await c.settle(d.propose(G, enc('a')));
  const adding = d.proposeConfChange(G, { type: 'add-learner', node: n4 });
  await assert.rejects(d.proposeConfChange(G, { type: 'promote', node: n4 }), (e) =>
    isBasaltError(e, 'CONF_CHANGE_IN_FLIGHT'),
  );
  const added = await c.settle(adding);
  assert.deepEqual(d.status(G)?.learners, [n4]);
  assert.ok(added.index > 0);
  await c.run(200);
  assert.deepEqual(c.member(n4).sm.data(G), c.member(leader).sm.data(G));
  assert.deepEqual(c.member(n4).driver.status(G)?.learners, [n4]);
  await c.settle(d.proposeConfChange(G, { type: 'promote', node: n4 }));
  await c.run(200);
  for (const n of [...c.names, n4]) assert.deepEqual(c.member(n).driver.status(G)?.voters, [...c.names, n4].sort());
  const follower = c.names.find((n) => n !== leader)!;
  await assert.rejects(c.member(follower).driver.proposeConfChange(G, { type: 'remove', node: n4 }), (e) =>
    isBasaltError(e, 'NOT_LEADER'),
  );
  await assert.rejects(d.proposeConfChange(G, { type: 'add-learner', node: n4 }), (e) =>
    isBasaltError(e, 'ALREADY_EXISTS'),
  );
});

test('a follower answers several accepted Appends of one Ready once per leader and term, with the largest index; rejections all go', () => {
  const resp = (to: string, term: number, index: number, reject = false): Message =>
    ({ kind: 'AppendResp', from: 'n2', to, term, reject, index, hintIndex: 0, hintTerm: 0 }) as unknown as Message;
  const heartbeatResp = { kind: 'HeartbeatResp', from: 'n2', to: 'n1', term: 3 } as unknown as Message;
  const one = [resp('n1', 3, 10), heartbeatResp];
  assert.equal(withoutSubsumedAccepts(one), one, 'a lone accept: the same array, nothing built');
  const messages = [
    resp('n1', 3, 12),
    resp('n1', 3, 10),
    resp('n1', 3, 9, true),
    heartbeatResp,
    resp('n1', 3, 14),
    resp('n1', 4, 11),
    resp('n3', 3, 13),
  ];
  assert.deepEqual(withoutSubsumedAccepts(messages), [
    resp('n1', 3, 9, true),
    heartbeatResp,
    resp('n1', 3, 14),
    resp('n1', 4, 11),
    resp('n3', 3, 13),
  ]);
});

test('while every group is quiet the tick timer sleeps from one quiet check to the next; a wake re-arms it one tick ahead', async () => {
  const c = new Cluster();
  await c.startAll();
  const leader = await c.waitLeader();
  for (const m of c.members.values()) m.driver.quiesceWith({ peerLive: () => true, idle: () => true });
  await c.settle(c.member(leader).driver.propose(G, enc('a')));
  await c.run(500);
  for (const [n, m] of c.members) assert.ok(m.driver.isQuiet(G), `${n} is quiet`);

  for (const armed of c.armed.values()) armed.length = 0;
  await c.run(1_000);
  for (const [n, armed] of c.armed) {
    // Ticks are 10 ms and quiet checks every 10 ticks (the election timeout's): 10 timers a second, not 100.
    assert.ok(armed.length >= 9 && armed.length <= 11, `${n} armed ${armed.length} timers in a quiet second`);
    assert.ok(
      armed.every((d) => d === 100),
      `${n}: ${armed.join(',')}`,
    );
  }

  // A proposal wakes the leader's group at once (nothing waits for a long timer), and the followers with it.
  for (const armed of c.armed.values()) armed.length = 0;
  const startMs = c.scheduler.nowMs();
  await c.settle(c.member(leader).driver.propose(G, enc('b')));
  assert.ok(c.scheduler.nowMs() - startMs < 10, `the proposal took ${c.scheduler.nowMs() - startMs} ms`);
  await c.run(20);
  for (const [n, armed] of c.armed) assert.ok(armed.includes(10), `${n} ticks again: ${armed.join(',')}`);
  for (const m of c.members.values()) assert.deepEqual(m.sm.data(G), ['a', 'b']);
});

test('a quiet leader whose voters are no longer live wakes, and check-quorum steps it down', async () => {
  const c = new Cluster();
  await c.startAll();
  const leader = await c.waitLeader();
  const live = new Set(c.names);
  for (const m of c.members.values()) m.driver.quiesceWith({ peerLive: (n) => live.has(n), idle: () => true });
  await c.settle(c.member(leader).driver.propose(G, enc('a')));
  await c.run(500);
  assert.ok(c.member(leader).driver.isQuiet(G));
  // Its followers are gone as its node liveness sees it, and cut off: it must not stay a quiet leader for ever.
  for (const n of c.names) if (n !== leader) live.delete(n);
  c.net.cut.add(leader);
  await c.run(2_000);
  assert.notEqual(c.member(leader).driver.status(G)?.role, 'leader', 'the cut-off leader stepped down');
});
