import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { nodeId, nodeName } from '../core/ids.js';
import type { Transport, TransportEvent } from '../env/transport.js';
import { SimNetwork, type SimNetworkOptions } from './network.js';
import { SeededRandom } from './random.js';
import { Scheduler, SIM_EPOCH_MS } from './scheduler.js';

interface Received {
  readonly atMs: number;
  readonly event: TransportEvent;
}

interface Net {
  readonly scheduler: Scheduler;
  readonly network: SimNetwork;
  readonly ends: Map<string, Transport>;
  readonly inbox: Map<string, Received[]>;
  open(name: string, id?: string): Transport;
  messages(name: string): unknown[];
  events(name: string): string[];
}

function makeNet(seed: string | number, names: string[], options: SimNetworkOptions = {}): Net {
  const scheduler = new Scheduler({ seed });
  const network = new SimNetwork(scheduler, new SeededRandom(seed).fork('net'), options);
  const ends = new Map<string, Transport>();
  const inbox = new Map<string, Received[]>();
  const open = (name: string, id = `${name}-1`): Transport => {
    const t = network.endpoint({ name: nodeName(name), id: nodeId(id) });
    const box: Received[] = [];
    inbox.set(name, box);
    t.setHandler((event) => box.push({ atMs: scheduler.nowMs() - SIM_EPOCH_MS, event }));
    ends.set(name, t);
    return t;
  };
  for (const name of names) open(name);
  return {
    scheduler,
    network,
    ends,
    inbox,
    open,
    messages: (name) => (inbox.get(name) ?? []).flatMap((r) => (r.event.kind === 'message' ? [r.event.payload] : [])),
    events: (name) =>
      (inbox.get(name) ?? []).flatMap((r) =>
        r.event.kind === 'message' ? [] : [`${r.event.kind}:${r.event.peer.name}/${r.event.peer.id}`],
      ),
  };
}

const send = (net: Net, from: string, to: string, payload: unknown): void =>
  net.ends.get(from)!.send(nodeName(to), payload);

describe('SimNetwork', () => {
  it('a payload of several messages (split) is counted as each, and goes whole unless a rule catches one', () => {
    const split = (p: unknown): readonly unknown[] => (Array.isArray(p) ? p : [p]);
    const net = makeNet('split', ['n1', 'n2'], { split, copy: 'none' });
    net.scheduler.runSync();
    send(net, 'n1', 'n2', ['a', 'b', 'c']);
    net.scheduler.runSync();
    assert.deepEqual(net.messages('n2'), [['a', 'b', 'c']], 'no rule: one delivery');
    assert.equal(net.network.count({ match: (p) => p === 'b' }), 1);
    assert.equal(net.network.count({}), 3);
    const dropped = net.network.drop({ match: (p) => p === 'b' });
    send(net, 'n1', 'n2', ['a', 'b', 'c']);
    net.scheduler.runSync();
    assert.equal(dropped.droppedCount, 1);
    assert.deepEqual(net.messages('n2').slice(1), ['a', 'c'], 'the others on their own, in order');
    assert.equal(net.network.count({}), 6);
  });

  it('reports up to both ends of a new connection, with the peer identity', () => {
    const net = makeNet(1, ['n1', 'n2']);
    net.scheduler.runSync();
    assert.deepEqual(net.events('n1'), ['up:n2/n2-1']);
    assert.deepEqual(net.events('n2'), ['up:n1/n1-1']);
    assert.ok(net.network.isConnected('n1', 'n2'));
  });

  it('delivers within the configured delay bounds', () => {
    const net = makeNet(2, ['n1', 'n2'], { link: { delay: { kind: 'uniform', minMs: 4, maxMs: 9 }, reorder: true } });
    net.scheduler.runSync();
    const sentAt = net.scheduler.nowMs();
    const latencies: number[] = [];
    net.ends.get('n2')!.setHandler((e) => {
      if (e.kind === 'message') latencies.push(net.scheduler.nowMs() - sentAt);
    });
    for (let i = 0; i < 500; i++) send(net, 'n1', 'n2', i);
    net.scheduler.runSync();
    assert.equal(latencies.length, 500);
    assert.ok(Math.min(...latencies) >= 4 && Math.max(...latencies) <= 9);
    assert.ok(Math.max(...latencies) - Math.min(...latencies) > 4, 'delays spread over the range');
  });

  it('keeps each directed link FIFO by default even with random delays', () => {
    const net = makeNet(3, ['n1', 'n2', 'n3'], { link: { delay: { kind: 'uniform', minMs: 1, maxMs: 50 } } });
    net.scheduler.runSync();
    for (let i = 0; i < 300; i++) {
      send(net, 'n1', 'n3', `a${i}`);
      send(net, 'n2', 'n3', `b${i}`);
    }
    net.scheduler.runSync();
    const got = net.messages('n3') as string[];
    assert.equal(got.length, 600);
    const a = got.filter((m) => m.startsWith('a'));
    const b = got.filter((m) => m.startsWith('b'));
    assert.deepEqual(
      a,
      Array.from({ length: 300 }, (_, i) => `a${i}`),
    );
    assert.deepEqual(
      b,
      Array.from({ length: 300 }, (_, i) => `b${i}`),
    );
    // Different links interleave: FIFO is per link, not global.
    assert.notDeepEqual(got.slice(0, 300), a);
  });

  it('with reorder on, later messages can overtake earlier ones', () => {
    const net = makeNet(4, ['n1', 'n2'], { link: { delay: { kind: 'uniform', minMs: 1, maxMs: 50 }, reorder: true } });
    net.scheduler.runSync();
    for (let i = 0; i < 100; i++) send(net, 'n1', 'n2', i);
    net.scheduler.runSync();
    const got = net.messages('n2') as number[];
    assert.equal(got.length, 100);
    assert.notDeepEqual(
      got,
      [...got].sort((x, y) => x - y),
    );
  });

  it('drops and duplicates at the configured rates', () => {
    const net = makeNet(5, ['n1', 'n2'], { link: { dropRate: 0.2, duplicateRate: 0.1 } });
    net.scheduler.runSync();
    const n = 5000;
    for (let i = 0; i < n; i++) send(net, 'n1', 'n2', i);
    net.scheduler.runSync();
    const got = net.messages('n2') as number[];
    const distinct = new Set(got).size;
    const dropFraction = 1 - distinct / n;
    const dupFraction = (got.length - distinct) / distinct;
    assert.ok(Math.abs(dropFraction - 0.2) < 0.03, `drop fraction ${dropFraction}`);
    assert.ok(Math.abs(dupFraction - 0.1) < 0.03, `dup fraction ${dupFraction}`);
    const stats = net.network.stats;
    assert.equal(stats.sent, n);
    assert.equal(stats.delivered, got.length);
  });

  it('copies payloads so that sender and receiver never share an object', () => {
    const net = makeNet(6, ['n1', 'n2']);
    net.scheduler.runSync();
    const payload = { list: [1, 2], bytes: new Uint8Array([1, 2, 3]), big: 5n };
    send(net, 'n1', 'n2', payload);
    payload.list.push(3);
    net.scheduler.runSync();
    assert.deepEqual(net.messages('n2'), [{ list: [1, 2], bytes: new Uint8Array([1, 2, 3]), big: 5n }]);
  });

  it('passes payloads through an injected codec, so non-serialisable ones fail at the sender', () => {
    const codec = {
      encode: (p: unknown): Uint8Array => {
        if (typeof p === 'function') throw new TypeError('not serialisable');
        return new TextEncoder().encode(JSON.stringify(p));
      },
      decode: (b: Uint8Array): unknown => JSON.parse(new TextDecoder().decode(b)),
    };
    const net = makeNet(7, ['n1', 'n2'], { codec });
    net.scheduler.runSync();
    send(net, 'n1', 'n2', { a: 1 });
    assert.throws(() => send(net, 'n1', 'n2', () => 1), /not serialisable/);
    net.scheduler.runSync();
    assert.deepEqual(net.messages('n2'), [{ a: 1 }]);
  });

  it('a partition reports down to both sides, loses messages in flight and across it, and heal brings it back up', () => {
    const net = makeNet(8, ['n1', 'n2', 'n3'], { link: { delay: { kind: 'fixed', ms: 10 } }, detectDownMs: 5 });
    net.scheduler.runSync();
    send(net, 'n1', 'n3', 'in-flight');
    send(net, 'n1', 'n2', 'same-side');
    net.scheduler.runSync({ forMs: 2 });
    net.network.partition(['n1', 'n2'], ['n3']);
    send(net, 'n1', 'n3', 'across');
    net.scheduler.runSync();
    assert.deepEqual(net.messages('n3'), []);
    assert.deepEqual(net.messages('n2'), ['same-side']);
    assert.deepEqual(net.events('n3').slice(0, 2), ['up:n1/n1-1', 'up:n2/n2-1']);
    assert.deepEqual(net.events('n3').slice(2).sort(), ['down:n1/n1-1', 'down:n2/n2-1']);
    assert.deepEqual(net.events('n1'), ['up:n2/n2-1', 'up:n3/n3-1', 'down:n3/n3-1']);
    net.network.heal();
    net.scheduler.runSync();
    send(net, 'n1', 'n3', 'after-heal');
    net.scheduler.runSync();
    assert.deepEqual(net.messages('n3'), ['after-heal']);
    assert.deepEqual(net.events('n3').slice(-2), ['up:n1/n1-1', 'up:n2/n2-1']);
  });

  it('isolate cuts one node from all, and a one-way cut takes the connection down at both ends', () => {
    const net = makeNet(9, ['n1', 'n2', 'n3']);
    net.scheduler.runSync();
    net.network.isolate('n2');
    assert.ok(!net.network.isConnected('n1', 'n2') && !net.network.isConnected('n3', 'n2'));
    assert.ok(net.network.isConnected('n1', 'n3'));
    net.network.heal();
    net.network.cut('n1', 'n3');
    assert.ok(!net.network.isConnected('n1', 'n3') && !net.network.isConnected('n3', 'n1'));
    net.scheduler.runSync();
    assert.equal(net.events('n1').at(-1), 'down:n3/n3-1');
    assert.equal(net.events('n3').at(-1), 'down:n1/n1-1');
    net.network.healLink('n1', 'n3');
    assert.ok(net.network.isConnected('n1', 'n3'));
  });

  it('a heal before the down was detected still reports down before up, and nothing of the old connection arrives', () => {
    const net = makeNet(10, ['n1', 'n2'], {
      detectDownMs: 20,
      connectMs: 1,
      link: { delay: { kind: 'fixed', ms: 5 } },
    });
    net.scheduler.runSync();
    send(net, 'n1', 'n2', 'old');
    net.network.cut('n1', 'n2');
    net.network.heal();
    send(net, 'n1', 'n2', 'new');
    net.scheduler.runSync();
    assert.deepEqual(net.events('n2'), ['up:n1/n1-1', 'down:n1/n1-1', 'up:n1/n1-1']);
    assert.deepEqual(net.messages('n2'), ['new']);
    const box = net.inbox.get('n2')!;
    const lastUp = box.findLastIndex((r) => r.event.kind === 'up');
    const msg = box.findIndex((r) => r.event.kind === 'message');
    assert.ok(lastUp < msg, 'the message arrives after the up of its connection');
  });

  it('a closed endpoint gets nothing more, peers see down, and a reopened name comes back up with its new id', () => {
    const net = makeNet(11, ['n1', 'n2']);
    net.scheduler.runSync();
    send(net, 'n2', 'n1', 'lost');
    void net.ends.get('n1')!.close();
    send(net, 'n1', 'n2', 'from-closed');
    net.scheduler.runSync();
    assert.deepEqual(net.messages('n1'), []);
    assert.deepEqual(net.messages('n2'), []);
    assert.deepEqual(net.events('n2'), ['up:n1/n1-1', 'down:n1/n1-1']);
    net.open('n1', 'n1-2');
    net.scheduler.runSync();
    assert.deepEqual(net.events('n2').at(-1), 'up:n1/n1-2');
    assert.deepEqual(net.events('n1'), ['up:n2/n2-1']);
    assert.throws(() => net.open('n1', 'n1-3'), /already has an open endpoint/);
  });

  it('hold keeps matching messages and releases them in send order; other messages flow', () => {
    const net = makeNet(12, ['n1', 'n2'], { link: { delay: { kind: 'uniform', minMs: 1, maxMs: 20 } } });
    net.scheduler.runSync();
    const h = net.network.hold({ from: 'n1', match: (p) => (p as { kind: string }).kind === 'Finish' });
    for (let i = 0; i < 5; i++) send(net, 'n1', 'n2', { kind: 'Finish', i });
    send(net, 'n1', 'n2', { kind: 'Other' });
    send(net, 'n2', 'n1', { kind: 'Finish', i: 99 });
    net.scheduler.runSync();
    assert.equal(h.heldCount, 5);
    assert.deepEqual(net.messages('n2'), [{ kind: 'Other' }]);
    assert.deepEqual(net.messages('n1'), [{ kind: 'Finish', i: 99 }]);
    assert.equal(h.releaseNext(2), 2);
    assert.equal(h.heldCount, 3);
    assert.equal(h.release(), 3);
    send(net, 'n1', 'n2', { kind: 'Finish', i: 5 });
    net.scheduler.runSync();
    assert.deepEqual(
      net.messages('n2').slice(1),
      [0, 1, 2, 3, 4, 5].map((i) => ({ kind: 'Finish', i })),
    );
  });

  it('held messages of a connection that broke are lost on release', () => {
    const net = makeNet(13, ['n1', 'n2']);
    net.scheduler.runSync();
    const h = net.network.hold({ to: 'n2' });
    send(net, 'n1', 'n2', 'held');
    net.network.isolate('n2');
    net.network.heal();
    net.scheduler.runSync();
    assert.equal(h.release(), 1);
    net.scheduler.runSync();
    assert.deepEqual(net.messages('n2'), []);
  });

  it('drop loses matching messages until undone; count sees every send', () => {
    const net = makeNet(14, ['n1', 'n2', 'n3']);
    net.scheduler.runSync();
    const d = net.network.drop({ from: 'n3' });
    send(net, 'n3', 'n1', { kind: 'A' });
    send(net, 'n3', 'n2', { kind: 'B' });
    send(net, 'n1', 'n2', { kind: 'A' });
    net.scheduler.runSync();
    assert.equal(d.droppedCount, 2);
    assert.deepEqual(net.messages('n1'), []);
    assert.deepEqual(net.messages('n2'), [{ kind: 'A' }]);
    d.undo();
    send(net, 'n3', 'n1', { kind: 'A' });
    net.scheduler.runSync();
    assert.deepEqual(net.messages('n1'), [{ kind: 'A' }]);
    const isA = (p: unknown): boolean => (p as { kind: string }).kind === 'A';
    assert.equal(net.network.count({ match: isA }), 3);
    assert.equal(net.network.count({ from: 'n3' }), 3);
    assert.equal(net.network.count({ from: 'n3', to: 'n1', match: isA }), 2);
    assert.equal(net.network.count(), 4);
  });

  it('count refuses to answer once its send log overflowed', () => {
    const net = makeNet(15, ['n1', 'n2'], { sentLogMax: 3 });
    net.scheduler.runSync();
    for (let i = 0; i < 4; i++) send(net, 'n1', 'n2', i);
    assert.throws(() => net.network.count(), /overflowed/);
  });

  it('the observer sees sends, drops with reasons and deliveries', () => {
    const net = makeNet(16, ['n1', 'n2']);
    net.scheduler.runSync();
    const seen: string[] = [];
    const stop = net.network.observe((o) => seen.push(o.kind === 'drop' ? `drop:${o.reason}` : o.kind));
    const d = net.network.drop({ match: (p) => p === 'x' });
    send(net, 'n1', 'n2', 'x');
    send(net, 'n1', 'n2', 'y');
    send(net, 'n1', 'n9', 'z');
    net.scheduler.runSync();
    d.undo();
    stop();
    send(net, 'n1', 'n2', 'w');
    assert.deepEqual(seen, ['send', 'drop:filter', 'send', 'send', 'drop:unknown-peer', 'deliver']);
  });

  it('per-link configuration overrides the default for one direction only', () => {
    const net = makeNet(17, ['n1', 'n2'], { link: { delay: { kind: 'fixed', ms: 2 } } });
    net.scheduler.runSync();
    net.network.setLink('n1', 'n2', { dropRate: 1 });
    send(net, 'n1', 'n2', 'lost');
    send(net, 'n2', 'n1', 'kept');
    net.scheduler.runSync();
    assert.deepEqual(net.messages('n2'), []);
    assert.deepEqual(net.messages('n1'), ['kept']);
    net.network.setLink('n1', 'n2', undefined);
    send(net, 'n1', 'n2', 'now-kept');
    net.scheduler.runSync();
    assert.deepEqual(net.messages('n2'), ['now-kept']);
    assert.throws(() => net.network.setDefaultLink({ dropRate: 2 }), /probabilities/);
  });

  it('exponential delays stay at or above the floor and under the cap, with roughly the configured mean', () => {
    const net = makeNet(18, ['n1', 'n2'], {
      link: { delay: { kind: 'exponential', minMs: 2, meanMs: 6, maxMs: 40 }, reorder: true },
    });
    net.scheduler.runSync();
    const t0 = net.scheduler.nowMs();
    const lat: number[] = [];
    net.ends.get('n2')!.setHandler((e) => {
      if (e.kind === 'message') lat.push(net.scheduler.nowMs() - t0);
    });
    for (let i = 0; i < 4000; i++) send(net, 'n1', 'n2', i);
    net.scheduler.runSync();
    const mean = lat.reduce((a, b) => a + b, 0) / lat.length;
    assert.ok(Math.min(...lat) >= 2 && Math.max(...lat) <= 40);
    assert.ok(Math.abs(mean - 6) < 0.5, `mean ${mean}`);
  });

  it('loopback sends reach the sender itself', () => {
    const net = makeNet(19, ['n1']);
    send(net, 'n1', 'n1', 'self');
    net.scheduler.runSync();
    assert.deepEqual(net.messages('n1'), ['self']);
  });
});
