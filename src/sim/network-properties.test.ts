/**
 * Properties of the simulated network under random sequences of sends, partitions, one-way cuts, isolations, heals,
 * closes and reopens. Without link faults the network must keep the Transport promise: per connection, messages arrive
 * in send order, at most once, only between that connection's `up` and `down`; nothing vanishes unaccounted; and once
 * everything is healed and open, every pair is connected and each end's last word about each peer is `up` with the
 * peer's current id.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { nodeId, nodeName } from '../core/ids.js';
import type { Transport } from '../env/transport.js';
import { type DropReason, SimNetwork } from './network.js';
import { SeededRandom } from './random.js';
import { Scheduler } from './scheduler.js';

const NAMES = ['n1', 'n2', 'n3', 'n4'];

type Op =
  | { readonly kind: 'send'; readonly from: number; readonly to: number; readonly burst: number }
  | { readonly kind: 'partition'; readonly mask: number }
  | { readonly kind: 'cut'; readonly from: number; readonly to: number }
  | { readonly kind: 'isolate'; readonly node: number }
  | { readonly kind: 'heal' }
  | { readonly kind: 'close'; readonly node: number }
  | { readonly kind: 'reopen'; readonly node: number }
  | { readonly kind: 'advance'; readonly ms: number };

const node = fc.integer({ min: 0, max: NAMES.length - 1 });
const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant('send' as const),
      from: node,
      to: node,
      burst: fc.integer({ min: 1, max: 4 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant('partition' as const), mask: fc.integer({ min: 1, max: 14 }) }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('cut' as const), from: node, to: node }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('isolate' as const), node }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('heal' as const) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('close' as const), node }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('reopen' as const), node }) },
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 30 }) }) },
);

interface Session {
  /** The peer id announced by the current `up`, or undefined while down. */
  upId: string | undefined;
  lastSeq: number;
}

/** Checks every event an endpoint incarnation receives as it arrives. */
class Receiver {
  readonly sessions = new Map<string, Session>();
  readonly seen = new Set<number>();
  constructor(
    readonly name: string,
    id: string,
  ) {
    // Loopback needs no connection: an endpoint hears itself from the start.
    this.sessions.set(name, { upId: id, lastSeq: 0 });
  }

  onUp(peer: string, id: string): void {
    const s = this.session(peer);
    assert.equal(s.upId, undefined, `${this.name}: up from ${peer} while already up`);
    s.upId = id;
    s.lastSeq = 0;
  }

  onDown(peer: string, id: string): void {
    const s = this.session(peer);
    assert.equal(s.upId, id, `${this.name}: down from ${peer} does not match its up`);
    s.upId = undefined;
  }

  onMessage(peer: string, id: string, seq: number): void {
    const s = this.session(peer);
    assert.equal(s.upId, id, `${this.name}: message from ${peer}/${id} outside its connection`);
    assert.ok(seq > s.lastSeq, `${this.name}: message ${seq} from ${peer} after ${s.lastSeq}`);
    assert.ok(!this.seen.has(seq), `${this.name}: duplicate ${seq}`);
    this.seen.add(seq);
    s.lastSeq = seq;
  }

  private session(peer: string): Session {
    let s = this.sessions.get(peer);
    if (s === undefined) {
      s = { upId: undefined, lastSeq: 0 };
      this.sessions.set(peer, s);
    }
    return s;
  }
}

function runOps(seed: number, ops: readonly Op[]): void {
  const scheduler = new Scheduler({ seed });
  const network = new SimNetwork(scheduler, new SeededRandom(seed), {
    link: { delay: { kind: 'uniform', minMs: 0, maxMs: 15 } },
    detectDownMs: 4,
  });
  const ends = new Map<string, { transport: Transport; receiver: Receiver; open: boolean }>();
  const incarnations = new Map<string, number>();
  const drops = new Map<DropReason, number>();
  network.observe((o) => {
    if (o.kind === 'drop') drops.set(o.reason, (drops.get(o.reason) ?? 0) + 1);
  });
  const open = (name: string): void => {
    const incarnation = (incarnations.get(name) ?? 0) + 1;
    incarnations.set(name, incarnation);
    const id = `${name}-${incarnation}`;
    const transport = network.endpoint({ name: nodeName(name), id: nodeId(id) });
    const receiver = new Receiver(name, id);
    transport.setHandler((e) => {
      if (e.kind === 'up') receiver.onUp(e.peer.name, e.peer.id);
      else if (e.kind === 'down') receiver.onDown(e.peer.name, e.peer.id);
      else receiver.onMessage(e.from.name, e.from.id, (e.payload as { seq: number }).seq);
    });
    ends.set(name, { transport, receiver, open: true });
  };
  for (const name of NAMES) open(name);
  let seq = 0;
  for (const o of ops) {
    switch (o.kind) {
      case 'send': {
        const end = ends.get(NAMES[o.from]!)!;
        // A closed endpoint's sends are ignored, not counted.
        if (!end.open) break;
        for (let i = 0; i < o.burst; i++) end.transport.send(nodeName(NAMES[o.to]!), { seq: ++seq });
        break;
      }
      case 'partition':
        network.partition(NAMES.filter((_, i) => (o.mask >> i) & 1));
        break;
      case 'cut':
        network.cut(NAMES[o.from]!, NAMES[o.to]!);
        break;
      case 'isolate':
        network.isolate(NAMES[o.node]!);
        break;
      case 'heal':
        network.heal();
        break;
      case 'close': {
        const end = ends.get(NAMES[o.node]!)!;
        void end.transport.close();
        end.open = false;
        break;
      }
      case 'reopen':
        if (!ends.get(NAMES[o.node]!)!.open) open(NAMES[o.node]!);
        break;
      case 'advance':
        scheduler.runSync({ forMs: o.ms });
        break;
    }
  }
  network.heal();
  for (const name of NAMES) if (!ends.get(name)!.open) open(name);
  scheduler.runSync();

  const stats = network.stats;
  assert.equal(stats.sent, seq);
  assert.equal(stats.delivered + stats.dropped, stats.sent, 'every message is delivered or dropped, once');
  for (const reason of drops.keys()) {
    assert.ok(['disconnected', 'connection-lost'].includes(reason), `unexpected drop reason ${reason}`);
  }
  for (const a of NAMES) {
    for (const b of NAMES) {
      if (a === b) continue;
      assert.ok(network.isConnected(a, b));
      const session = ends.get(a)!.receiver.sessions.get(b);
      assert.equal(session?.upId, `${b}-${incarnations.get(b)}`, `${a} last heard ${b} is up with its current id`);
    }
  }
}

describe('SimNetwork properties', () => {
  it('keeps the Transport promise under random partitions, cuts, closes and reopens', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 1_000_000 }), fc.array(op, { maxLength: 60 }), (seed, ops) =>
        runOps(seed, ops),
      ),
      { numRuns: 150 },
    );
  });
});
