/**
 * TxStateResolver against fake peers (a scripted request function, a scripted membership) on the simulator's
 * virtual time: one test per resolution branch, named after the rule it checks (DESIGN §2b rules 11, 12, 16, 17).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BasaltError, isBasaltError } from '../../core/errors.js';
import type { HybridTimestamp, NodeId, NodeName, PartitionId, TxId } from '../../core/ids.js';
import { HybridClock } from '../../hlc/hybrid-clock.js';
import { addMs } from '../../hlc/timestamp.js';
import { SimClock } from '../../sim/clock.js';
import { Scheduler } from '../../sim/scheduler.js';
import { MemoryStorageEngine } from '../../storage/storage-engine.js';
import { primaryMissNaming } from '../../testing/coordinator-fakes.js';
import type { TxRequest, TxStateAnswer, TxStateResponse } from '../../tx/core/messages.js';
import { makeTxId } from '../../tx/core/tx-id.js';
import { TxStateMap } from '../../tx/core/tx-state-map.js';
import { RESOLUTION_COUNTERS } from '../ports.js';
import type { IntentResolutionRequest } from './intent-resolver.js';
import { IntentSwitcher } from './intent-switch.js';
import { TxStateResolver } from './resolver.js';

const SELF = { name: 'n1' as NodeName, id: 'n1-id' as NodeId };
const COORD = 'c-id' as NodeId;
const COORD_NAME = 'c' as NodeName;
const P0 = 't1p0' as PartitionId;
const P1 = 't1p1' as PartitionId;

interface Sent {
  readonly to: NodeName;
  readonly body: TxRequest;
}

type Reply = (to: NodeName, body: TxRequest) => Promise<TxStateResponse>;

class Counters {
  readonly values = new Map<string, number>();
  add(name: string, n = 1): void {
    this.values.set(name, (this.values.get(name) ?? 0) + n);
  }
  get(name: string): number {
    return this.values.get(name) ?? 0;
  }
}

class Fixture {
  readonly scheduler = new Scheduler({ seed: 1 });
  readonly physical = new SimClock(this.scheduler);
  readonly clock = new HybridClock(this.physical, { maxClockSkewMs: 20 });
  readonly timers = this.scheduler.timers('n1');
  readonly map = new TxStateMap({ clock: this.physical });
  readonly engine = new MemoryStorageEngine();
  readonly counters = new Counters();
  readonly sent: Sent[] = [];
  readonly gone = new Set<NodeId>();
  reply: Reply = () => Promise.reject(new BasaltError('NODE_UNAVAILABLE', 'no script'));
  readonly switcher = new IntentSwitcher({
    storages: { mvPartition: (p) => this.engine.mvPartition(p) },
    timers: this.timers,
    counters: this.counters,
  });
  readonly resolver = new TxStateResolver({
    self: SELF,
    clock: this.clock,
    physicalClock: this.physical,
    timers: this.timers,
    txStates: this.map,
    peers: {
      isGone: (id) => this.gone.has(id),
      nameOf: (id) => (id === COORD ? COORD_NAME : undefined),
    },
    request: ((to: NodeName, body: TxRequest) => {
      this.sent.push({ to, body });
      return this.reply(to, body);
    }) as never,
    locator: { locate: () => 'p0-primary' as NodeName },
    switcher: this.switcher,
    counters: this.counters,
    timeoutMs: 2_000,
    stateWaitMs: 500,
  });
  private counter = 0;

  tx(coordinatorNode: NodeId = COORD): TxId {
    this.counter++;
    return makeTxId({ beginTimestamp: this.clock.now(), nodeId: coordinatorNode, counter: this.counter });
  }

  request(txId: TxId, readTs: HybridTimestamp, key = 'k'): IntentResolutionRequest {
    return { txId, commitPartitionId: P0, readTs, partitionId: P1, key, newestCommitTs: undefined };
  }

  pending(txId: TxId, coordinatorId: NodeId = COORD): void {
    this.map.update(txId, { state: 'PENDING', reason: 'update-applied', coordinatorId, commitPartitionId: P0 });
  }

  kinds(): string[] {
    return this.sent.map((s) => s.body.kind);
  }

  async settle<T>(p: Promise<T>, forMs = 5_000): Promise<T> {
    let done = false;
    const tracked = p.finally(() => {
      done = true;
    });
    tracked.catch(() => {});
    await this.scheduler.run({ forMs, until: () => done });
    assert.ok(done, 'the resolution settled in virtual time');
    return tracked;
  }
}

function answer(a: TxStateAnswer | null): Promise<TxStateResponse> {
  return Promise.resolve({ kind: 'TxStateResponse', answer: a });
}

/** A reply that the test releases later. */
function held(): { reply: Reply; release: (a: TxStateAnswer) => void; count: () => number } {
  const waiting: ((r: TxStateResponse) => void)[] = [];
  return {
    reply: () => new Promise((resolve) => waiting.push(resolve)),
    release: (a) => {
      for (const w of waiting.splice(0)) w({ kind: 'TxStateResponse', answer: a });
    },
    count: () => waiting.length,
  };
}

describe('TxStateResolver: local path', () => {
  it('rule 11: a local COMMITTED above readTs is answered with its true commitTs, and no message is sent', async () => {
    const f = new Fixture();
    const tx = f.tx();
    const readTs = f.clock.now();
    const commitTs = addMs(readTs, 100);
    f.map.update(tx, { state: 'COMMITTED', reason: 'finish-applied', commitTimestamp: commitTs });
    const a = await f.settle(f.resolver.resolve(f.request(tx, readTs)));
    assert.deepEqual(a, { state: 'COMMITTED', commitTs });
    assert.equal(f.sent.length, 0);
    assert.equal(f.counters.get(RESOLUTION_COUNTERS.local), 1);
  });

  it('a local FINISHING of another coordinator is waited for, and its final outcome answers (no message)', async () => {
    const f = new Fixture();
    const tx = f.tx();
    f.pending(tx);
    f.map.beginFinish(tx);
    const readTs = f.clock.now();
    f.timers.setTimer(() => f.map.update(tx, { state: 'ABORTED', reason: 'finish-response' }), 100);
    const a = await f.settle(f.resolver.resolve(f.request(tx, readTs)));
    assert.deepEqual(a, { state: 'ABORTED' });
    assert.equal(f.sent.length, 0);
    assert.ok(f.physical.monotonicMs() >= 100, 'it waited for the outcome');
  });

  it('rule 12: a local PENDING on a node that is not the coordinator is no answer: the coordinator is asked', async () => {
    const f = new Fixture();
    const tx = f.tx();
    f.pending(tx);
    const readTs = f.clock.now();
    f.reply = () => answer({ state: 'PENDING' });
    const a = await f.settle(f.resolver.resolve(f.request(tx, readTs)));
    assert.deepEqual(a, { state: 'PENDING' });
    assert.deepEqual(f.sent, [{ to: COORD_NAME, body: { kind: 'TxStateCoordinatorRequest', txId: tx, readTs } }]);
    assert.equal(f.counters.get(RESOLUTION_COUNTERS.coordinator), 1);
    assert.equal(f.map.entry(tx)?.state, 'PENDING', 'PENDING is not cached over anything');
  });

  it("rule 12: on the coordinator's own node a local PENDING applies the coordinator rule (clock absorbs readTs)", async () => {
    const f = new Fixture();
    const tx = f.tx(SELF.id);
    f.pending(tx, SELF.id);
    const readTs = addMs(f.clock.now(), 5_000);
    const a = await f.settle(f.resolver.resolve(f.request(tx, readTs)));
    assert.deepEqual(a, { state: 'PENDING' });
    assert.ok(f.clock.current() > readTs, 'the clock is above readTs after a PENDING answer');
    assert.equal(f.sent.length, 0);
    // Any later commitTs taken from this clock is above readTs.
    assert.ok(f.clock.now() > readTs);
  });
});

describe('TxStateResolver: coordinator and commit partition paths', () => {
  it('rule 17: a gone coordinator is not asked; the entry becomes ABANDONED and the commit partition answers', async () => {
    const f = new Fixture();
    const tx = f.tx();
    f.pending(tx);
    f.gone.add(COORD);
    f.reply = () => answer({ state: 'ABORTED' });
    const a = await f.settle(f.resolver.resolve(f.request(tx, f.clock.now())));
    assert.deepEqual(a, { state: 'ABORTED' });
    assert.deepEqual(f.kinds(), ['TxStateCommitPartitionRequest']);
    const body = f.sent[0]!.body;
    assert.ok(body.kind === 'TxStateCommitPartitionRequest');
    assert.equal(body.coordinatorId, COORD);
    assert.equal(body.intentPartitionId, P1);
    assert.equal(f.map.entry(tx)?.state, 'ABORTED', 'ABANDONED, then the cached final outcome');
    assert.equal(f.counters.get(RESOLUTION_COUNTERS.commitPartition), 1);
  });

  it('a reader with no entry for the tx asks the coordinator named in the tx id first (rule 17)', async () => {
    const f = new Fixture();
    const tx = f.tx();
    f.reply = (_to, body) =>
      body.kind === 'TxStateCoordinatorRequest' ? answer({ state: 'PENDING' }) : answer({ state: 'ABORTED' });
    const a = await f.settle(f.resolver.resolve(f.request(tx, f.clock.now())));
    assert.deepEqual(a, { state: 'PENDING' });
    assert.deepEqual(f.kinds(), ['TxStateCoordinatorRequest']);
    assert.deepEqual(
      f.sent.map((s) => s.to),
      [COORD_NAME],
    );
  });

  it('a null or failed coordinator answer falls through to the commit partition path', async () => {
    for (const coordinatorReply of ['null', 'error'] as const) {
      const f = new Fixture();
      const tx = f.tx();
      f.pending(tx);
      const commitTs = addMs(f.clock.now(), -5);
      f.reply = (_to, body) => {
        if (body.kind === 'TxStateCommitPartitionRequest') return answer({ state: 'COMMITTED', commitTs });
        return coordinatorReply === 'null' ? answer(null) : Promise.reject(new BasaltError('TIMEOUT', 'slow'));
      };
      const a = await f.settle(f.resolver.resolve(f.request(tx, f.clock.now())));
      assert.deepEqual(a, { state: 'COMMITTED', commitTs }, coordinatorReply);
      assert.deepEqual(f.kinds(), ['TxStateCoordinatorRequest', 'TxStateCommitPartitionRequest']);
    }
  });

  it('PRIMARY_MISS at the commit partition is retried at the holder it names', async () => {
    const f = new Fixture();
    const tx = f.tx();
    f.gone.add(COORD);
    f.reply = (to) =>
      to === 'p0-primary' ? Promise.reject(primaryMissNaming(P0, 'n3', 'moved')) : answer({ state: 'ABORTED' });
    const a = await f.settle(f.resolver.resolve(f.request(tx, f.clock.now())));
    assert.deepEqual(a, { state: 'ABORTED' });
    assert.deepEqual(
      f.sent.map((s) => s.to),
      ['p0-primary', 'n3'],
    );
  });

  it('a commit partition that cannot answer makes the resolution fail TIMEOUT after the resolution timeout, never PENDING', async () => {
    const f = new Fixture();
    const tx = f.tx();
    f.gone.add(COORD);
    f.reply = () => Promise.reject(new BasaltError('NODE_UNAVAILABLE', 'down'));
    await assert.rejects(f.settle(f.resolver.resolve(f.request(tx, f.clock.now())), 10_000), (e: unknown) => {
      assert.ok(isBasaltError(e, 'TIMEOUT'), String(e));
      return true;
    });
    assert.ok(f.sent.length > 1, 'retried with backoff');
    assert.ok(f.physical.monotonicMs() >= 2_000);
    assert.equal(f.counters.get(RESOLUTION_COUNTERS.failed), 1);
    assert.equal(f.map.entry(tx), undefined);
  });

  it('concurrent resolutions of one tx at the same or a lower readTs share one request', async () => {
    const f = new Fixture();
    const tx = f.tx();
    f.pending(tx);
    const h = held();
    f.reply = h.reply;
    const readTs = f.clock.now();
    const first = f.resolver.resolve(f.request(tx, readTs, 'a'));
    const second = f.resolver.resolve(f.request(tx, readTs, 'b'));
    const third = f.resolver.resolve(f.request(tx, addMs(readTs, -1), 'c'));
    await f.scheduler.run({ forMs: 10 });
    assert.equal(f.sent.length, 1, 'one request');
    h.release({ state: 'PENDING' });
    const answers = await f.settle(Promise.all([first, second, third]));
    assert.deepEqual(answers, [{ state: 'PENDING' }, { state: 'PENDING' }, { state: 'PENDING' }]);
    assert.equal(f.counters.get(RESOLUTION_COUNTERS.shared), 2);
    assert.equal(f.resolver.inFlight, 0);
  });

  it("rule 12: a PENDING answer obtained at readTs r is not shared with a reader at r' > r", async () => {
    const f = new Fixture();
    const tx = f.tx();
    f.pending(tx);
    const h = held();
    f.reply = h.reply;
    const r = f.clock.now();
    const later = addMs(r, 50);
    const low = f.resolver.resolve(f.request(tx, r));
    const high = f.resolver.resolve(f.request(tx, later));
    await f.scheduler.run({ forMs: 10 });
    assert.deepEqual(
      f.sent.map((s) => (s.body.kind === 'TxStateCoordinatorRequest' ? s.body.readTs : undefined)),
      [r, later],
      'the later reader sends its own request with its own readTs',
    );
    h.release({ state: 'PENDING' });
    assert.deepEqual(await f.settle(Promise.all([low, high])), [{ state: 'PENDING' }, { state: 'PENDING' }]);
  });
});

describe('TxStateResolver: storms of readers of one orphaned tx', () => {
  it('once the coordinator is gone, readers at any readTs share one commit partition request, and its final answer answers them all', async () => {
    const f = new Fixture();
    const tx = f.tx();
    f.pending(tx);
    f.gone.add(COORD);
    const h = held();
    f.reply = h.reply;
    const r = f.clock.now();
    const readers = [0, 50, 100, 150].map((ms, i) => f.resolver.resolve(f.request(tx, addMs(r, ms), `k${i}`)));
    await f.scheduler.run({ forMs: 10 });
    assert.deepEqual(f.kinds(), ['TxStateCommitPartitionRequest'], 'one request, whatever the readTs');
    h.release({ state: 'ABORTED' });
    const answers = await f.settle(Promise.all(readers));
    assert.deepEqual(
      answers,
      [0, 1, 2, 3].map(() => ({ state: 'ABORTED' })),
    );
    assert.equal(f.sent.length, 1);
  });

  it('readers retrying while the commit partition has no primary share each failure: one request in flight per tx, spaced by the backoff', async () => {
    const f = new Fixture();
    const tx = f.tx();
    f.pending(tx);
    let inFlight = 0;
    let inFlightMax = 0;
    f.reply = (_to, body) => {
      if (body.kind === 'TxStateCoordinatorRequest') return Promise.reject(new BasaltError('TIMEOUT', 'unreachable'));
      inFlight += 1;
      inFlightMax = Math.max(inFlightMax, inFlight);
      return new Promise((_resolve, reject) => {
        f.scheduler.schedule(5, () => {
          inFlight -= 1;
          reject(new BasaltError('NODE_UNAVAILABLE', 'the primary is down'));
        });
      });
    };
    const r = f.clock.now();
    const readers = Array.from({ length: 8 }, (_, i) => f.resolver.resolve(f.request(tx, addMs(r, 10 * i), `k${i}`)));
    await f.scheduler.run({ forMs: 1_000 });
    const toCommitPartition = () => f.kinds().filter((k) => k === 'TxStateCommitPartitionRequest').length;
    assert.equal(inFlightMax, 1, 'one commit partition request in flight at a time');
    assert.ok(toCommitPartition() <= 10, `${toCommitPartition()} requests in 1 s for 8 readers`);
    // The coordinator goes gone and the commit partition recovers: the final answer reaches every reader.
    f.gone.add(COORD);
    f.reply = (_to, body) =>
      body.kind === 'TxStateCommitPartitionRequest' ? answer({ state: 'ABORTED' }) : answer(null);
    const answers = await f.settle(Promise.all(readers));
    assert.deepEqual(
      answers,
      readers.map(() => ({ state: 'ABORTED' })),
    );
  });
});

describe('TxStateResolver: caching and the local switch', () => {
  it('rule 16: UNKNOWN is answered but never cached and never switches the row', async () => {
    const f = new Fixture();
    const tx = f.tx();
    const mv = f.engine.mvPartition(P1);
    const rowId = mv.runConsistently(() => mv.ensureRowId('k'));
    mv.runConsistently(() => mv.addWrite(rowId, 'v', tx, P0));
    f.reply = () => answer({ state: 'UNKNOWN' });
    const a = await f.settle(f.resolver.resolve(f.request(tx, f.clock.now())));
    assert.deepEqual(a, { state: 'UNKNOWN' });
    await f.scheduler.run({ forMs: 10 });
    assert.equal(f.map.entry(tx), undefined, 'not cached');
    assert.equal(mv.readLatest(rowId).kind, 'intent', 'not switched');
    assert.equal(f.counters.get(RESOLUTION_COUNTERS.switches), 0);
  });

  it('a final answer is cached (reason resolution) and switches the row locally: COMMITTED at its commitTs', async () => {
    const f = new Fixture();
    const tx = f.tx();
    const mv = f.engine.mvPartition(P1);
    const rowId = mv.runConsistently(() => mv.ensureRowId('k'));
    mv.runConsistently(() => mv.addWrite(rowId, 'v', tx, P0));
    const readTs = f.clock.now();
    const commitTs = addMs(readTs, 40);
    const reasons: string[] = [];
    f.map.observe((e) => {
      if (e.kind === 'update' && e.outcome === 'applied') reasons.push(e.reason);
    });
    f.reply = () => answer({ state: 'COMMITTED', commitTs });
    const a = await f.settle(f.resolver.resolve(f.request(tx, readTs)));
    assert.deepEqual(a, { state: 'COMMITTED', commitTs }, 'the true state even above readTs');
    assert.deepEqual(reasons, ['resolution']);
    assert.equal(f.map.entry(tx)?.commitTimestamp, commitTs);
    await f.scheduler.run({ forMs: 10 });
    const latest = mv.readLatest(rowId);
    assert.equal(latest.kind, 'committed');
    assert.ok(latest.kind === 'committed' && latest.commitTs === commitTs && latest.value === 'v');
    assert.equal(f.counters.get(RESOLUTION_COUNTERS.switches), 1);
  });

  it('an ABORTED answer removes the intent locally; switches are deduplicated per row and skip foreign intents', async () => {
    const f = new Fixture();
    const tx = f.tx();
    const other = f.tx();
    const mv = f.engine.mvPartition(P1);
    const k = mv.runConsistently(() => mv.ensureRowId('k'));
    const j = mv.runConsistently(() => mv.ensureRowId('j'));
    mv.runConsistently(() => {
      mv.addWriteCommitted(k, 'old', addMs(f.clock.now(), -100));
      mv.addWrite(k, 'new', tx, P0);
      mv.addWrite(j, 'theirs', other, P0);
    });
    assert.equal(f.switcher.schedule(P1, 'k', tx, { state: 'ABORTED' }), true);
    assert.equal(f.switcher.schedule(P1, 'k', tx, { state: 'ABORTED' }), false, 'deduplicated while queued');
    assert.equal(f.switcher.switchNow(P1, 'j', tx, { state: 'ABORTED' }), 'no-intent', "another tx's intent stays");
    await f.scheduler.run({ forMs: 10 });
    const latest = mv.readLatest(k);
    assert.ok(latest.kind === 'committed' && latest.value === 'old');
    assert.equal(mv.readLatest(j).kind, 'intent');
  });
});
