import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isBasaltError } from '../core/errors.js';
import { nodeId, nodeName } from '../core/ids.js';
import type { TransportEvent } from '../env/transport.js';
import { OwnedTimers } from '../node/owned-timers.js';
import { Scheduler } from '../sim/scheduler.js';
import { MemoryNetwork } from './memory-transport.js';
import { NetworkFilters } from './network-filters.js';

const peer = (name: string, id: string) => ({ name: nodeName(name), id: nodeId(id) });
const show = (v: unknown): string => JSON.stringify(v, (_k, x) => (typeof x === 'bigint' ? `${x}n` : x));

function setup() {
  const scheduler = new Scheduler({ seed: 'memory-transport' });
  const network = new MemoryNetwork({ timers: scheduler.timers('net') });
  const log: string[] = [];
  const open = (name: string, id: string) => {
    const t = network.endpoint(peer(name, id));
    t.setHandler((e: TransportEvent) => {
      if (e.kind === 'message') log.push(`${name}<-${e.from.name}/${e.from.id}:${show(e.payload)}`);
      else log.push(`${name}:${e.kind} ${e.peer.name}/${e.peer.id}`);
    });
    return t;
  };
  return { scheduler, network, log, open };
}

test('memory transport: up before messages, FIFO per direction, payloads copied through the codec', () => {
  const { scheduler, log, open } = setup();
  const a = open('a', 'a1');
  const b = open('b', 'b1');
  const payload = { n: 1, big: 5n, bytes: new Uint8Array([1, 2]) };
  for (let i = 0; i < 3; i++) a.send(nodeName('b'), { i });
  b.send(nodeName('a'), payload);
  payload.n = 99;
  scheduler.runSync();
  const at = (name: string) => log.filter((l) => l.startsWith(name));
  assert.deepEqual(at('b'), ['b:up a/a1', 'b<-a/a1:{"i":0}', 'b<-a/a1:{"i":1}', 'b<-a/a1:{"i":2}']);
  assert.deepEqual(at('a'), ['a:up b/b1', 'a<-b/b1:{"n":1,"big":"5n","bytes":{"type":"Buffer","data":[1,2]}}']);
  assert.throws(
    () => a.send(nodeName('b'), { f: () => 1 }),
    (e) => isBasaltError(e, 'MALFORMED_FRAME'),
  );
});

test('memory transport: close reports down after in-flight messages; a restart comes back up with its new id', () => {
  const { scheduler, log, open } = setup();
  const a = open('a', 'a1');
  const b = open('b', 'b1');
  scheduler.runSync();
  log.length = 0;
  b.send(nodeName('a'), 'last words');
  void b.close();
  a.send(nodeName('b'), 'to the dead');
  scheduler.runSync();
  assert.deepEqual(log, ['a<-b/b1:"last words"', 'a:down b/b1']);
  log.length = 0;
  open('b', 'b2');
  a.send(nodeName('b'), 'hello again');
  scheduler.runSync();
  assert.deepEqual(
    log.filter((l) => l.startsWith('a')),
    ['a:up b/b2'],
  );
  assert.deepEqual(
    log.filter((l) => l.startsWith('b')),
    ['b:up a/a1', 'b<-a/a1:"hello again"'],
  );
});

test('network filters on a real transport: drop, hold in order then release, count by kind and group', () => {
  const { scheduler, log, open } = setup();
  const filters = new NetworkFilters();
  const a = filters.wrap(open('a', 'a1'));
  open('b', 'b1');
  const msg = (kind: string, extra: object = {}) => ({ type: 'oneway', body: { kind, ...extra } });
  const dropped = filters.drop({ kind: 'Raft', group: 'g1' });
  const held = filters.hold({ kind: 'Ping', to: 'b' });
  a.send(nodeName('b'), msg('Raft', { group: 'g1' }));
  a.send(nodeName('b'), msg('Raft', { group: 'g2' }));
  a.send(nodeName('b'), msg('Ping', { n: 1 }));
  a.send(nodeName('b'), msg('Ping', { n: 2 }));
  scheduler.runSync();
  assert.equal(dropped.droppedCount, 1);
  assert.equal(held.heldCount, 2);
  assert.equal(log.filter((l) => l.startsWith('b<-')).length, 1, 'only the g2 message went through');
  assert.equal(held.release(), 2);
  scheduler.runSync();
  const got = log.filter((l) => l.includes('Ping'));
  assert.deepEqual(
    got.map((l) => /"n":(\d)/.exec(l)![1]),
    ['1', '2'],
    'released in send order',
  );
  assert.equal(filters.count({ kind: 'Raft' }), 2);
  assert.equal(filters.count({ kind: 'Raft', group: 'g1' }), 1);
  assert.equal(filters.count({ from: 'a', to: 'b' }), 4);
  assert.equal(filters.count({ from: 'b' }), 0);
  dropped.undo();
  a.send(nodeName('b'), msg('Raft', { group: 'g1' }));
  assert.equal(dropped.droppedCount, 1, 'an undone rule drops nothing more');
});

test('network filters see a RaftBatch as the Raft messages it carries: counted each, whole unless a rule catches one', () => {
  const { scheduler, log, open } = setup();
  const filters = new NetworkFilters();
  const a = filters.wrap(open('a', 'a1'));
  open('b', 'b1');
  const batch = (...groups: string[]) => ({
    type: 'oneway',
    ts: 7,
    body: { kind: 'RaftBatch', messages: groups.map((group) => ({ group, message: { kind: 'Heartbeat' } })) },
  });
  a.send(nodeName('b'), batch('g1', 'g2', 'g3'));
  scheduler.runSync();
  const delivered = () => log.filter((l) => l.startsWith('b<-'));
  assert.equal(delivered().length, 1, 'no rule: the batch goes whole');
  assert.match(delivered()[0]!, /RaftBatch/);
  assert.equal(filters.count({ kind: 'Raft' }), 3);
  assert.equal(filters.count({ kind: 'Raft', group: 'g2' }), 1);
  assert.equal(filters.count({ kind: 'RaftBatch' }), 0);

  const dropped = filters.drop({ kind: 'Raft', group: 'g2' });
  a.send(nodeName('b'), batch('g1', 'g2', 'g3'));
  scheduler.runSync();
  assert.equal(dropped.droppedCount, 1, 'only the caught message is dropped');
  const split = delivered().slice(1);
  assert.deepEqual(
    split.map((l) => /"group":"(g\d)"/.exec(l)?.[1]),
    ['g1', 'g3'],
    'the others go on their own, in order',
  );
  assert.ok(
    split.every((l) => l.includes('"kind":"Raft"') && l.includes('"ts":7')),
    'as Raft messages of the same envelope',
  );
  assert.equal(filters.count({ kind: 'Raft' }), 6);
});

test('owned timers: retire cancels pending timers and makes later ones inert', () => {
  const scheduler = new Scheduler({ seed: 'owned' });
  const timers = new OwnedTimers(scheduler.timers('x'));
  const fired: number[] = [];
  timers.setTimer(() => fired.push(1), 10);
  const h = timers.setTimer(() => fired.push(2), 20);
  timers.clearTimer(h);
  timers.setTimer(() => fired.push(3), 30);
  scheduler.runSync({ untilMs: scheduler.nowMs() + 15 });
  assert.equal(timers.pendingCount, 1);
  timers.retire();
  timers.setTimer(() => fired.push(4), 1);
  scheduler.runSync();
  assert.deepEqual(fired, [1]);
  assert.equal(timers.pendingCount, 0);
});
