/**
 * The composition root: one call builds a whole node, its request table registered with its messenger and its
 * coordinator among its services, before the node is started.
 */
import assert from 'node:assert/strict';
import { describe, it, test } from 'node:test';
import { isBasaltError } from '../core/errors.js';
import { logIndex, nodeId, nodeName, term } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { MemoryNetwork } from '../harness/memory-transport.js';
import { MemoryLogStorage } from '../raft/memory-log-storage.js';
import { SimClock } from '../sim/clock.js';
import { SeededRandom } from '../sim/random.js';
import { Scheduler } from '../sim/scheduler.js';
import { MemoryStorageEngine } from '../storage/storage-engine.js';
import { TX_REQUEST_KINDS, type TxRequest, type TxResponse } from '../tx/core/messages.js';
import { composeNode, raftTransport } from './compose.js';
import { COORDINATOR_SERVICE, type CoordinatorService } from './coordinator-service.js';

function composed() {
  const scheduler = new Scheduler({ seed: 1 });
  const network = new MemoryNetwork({ timers: scheduler.timers('net') });
  const self = { name: nodeName('n1'), id: nodeId('n1-a') };
  return composeNode({
    transport: network.endpoint(self),
    clock: new SimClock(scheduler),
    timers: scheduler.timers('n1'),
    random: new SeededRandom('compose'),
    storage: { engine: new MemoryStorageEngine(), log: new MemoryLogStorage() },
    nodes: [self.name, nodeName('n2'), nodeName('n3')],
  });
}

test('a composed node answers every request kind of tx/core/messages.ts: each is registered once, by the table', async () => {
  const node = composed();
  const messenger = node.messenger.as<TxRequest | TxResponse>();
  for (const kind of TX_REQUEST_KINDS) {
    assert.throws(
      () => messenger.handle(kind, () => undefined),
      (e) => isBasaltError(e, 'ALREADY_EXISTS'),
      `${kind} has its handler already`,
    );
  }
  await node.kill();
});

test('a composed node runs the transaction coordinator as its first service', async () => {
  const node = composed();
  const service = node.service<CoordinatorService>(COORDINATOR_SERVICE);
  assert.ok(service !== undefined);
  assert.equal(typeof service.coordinator.begin, 'function');
  await node.kill();
});

describe('raft transport batching', () => {
  const append = (group: string, bytes: number) => ({
    group,
    message: {
      kind: 'Append',
      from: nodeName('n1'),
      to: nodeName('n2'),
      term: term(1),
      prevIndex: logIndex(0),
      prevTerm: term(0),
      entries: bytes === 0 ? [] : [{ term: term(1), index: logIndex(1), kind: 'data', data: new Uint8Array(bytes) }],
      commit: logIndex(0),
    },
  });

  function recording() {
    const sent: { to: string; kind: string; groups: string[] }[] = [];
    const messenger = {
      send: (to: string, body: { kind: string; group?: string; messages?: { group: string }[] }) => {
        sent.push({ to, kind: body.kind, groups: body.messages?.map((m) => m.group) ?? [body.group!] });
      },
    };
    return { sent, transport: raftTransport(messenger as never, true) };
  }

  it('the messages of one turn to one peer go as one RaftBatch, in order; a lone one as Raft', async () => {
    const { sent, transport } = recording();
    for (const g of ['g1', 'g2', 'g3']) transport.send(nodeName('n2'), append(g, 10) as never);
    transport.send(nodeName('n3'), append('g1', 10) as never);
    assert.deepEqual(sent, [], 'nothing goes before the turn is over');
    await Promise.resolve();
    assert.deepEqual(sent, [
      { to: 'n2', kind: 'RaftBatch', groups: ['g1', 'g2', 'g3'] },
      { to: 'n3', kind: 'Raft', groups: ['g1'] },
    ]);
  });

  it('a batch stays under its byte and message bounds: a large Append goes on its own, order kept', async () => {
    const { sent, transport } = recording();
    const big = LIMITS.raftBatchBytesMax;
    transport.send(nodeName('n2'), append('a', 100) as never);
    transport.send(nodeName('n2'), append('big', big) as never);
    transport.send(nodeName('n2'), append('b', 100) as never);
    for (let i = 0; i < LIMITS.raftBatchMessagesMax + 1; i++)
      transport.send(nodeName('n3'), append(`m${i}`, 0) as never);
    await Promise.resolve();
    const toN2 = sent.filter((s) => s.to === 'n2');
    assert.deepEqual(toN2, [
      { to: 'n2', kind: 'Raft', groups: ['a'] },
      { to: 'n2', kind: 'Raft', groups: ['big'] },
      { to: 'n2', kind: 'Raft', groups: ['b'] },
    ]);
    const toN3 = sent.filter((s) => s.to === 'n3');
    assert.deepEqual(
      toN3.map((s) => s.groups.length),
      [LIMITS.raftBatchMessagesMax, 1],
    );
    assert.equal(toN3.flatMap((s) => s.groups).join(), Array.from({ length: 513 }, (_, i) => `m${i}`).join());
  });

  it('a batch whose send throws is reported, and the other peers still get theirs', async () => {
    const sent: string[] = [];
    const errors: unknown[] = [];
    const messenger = {
      send: (to: string) => {
        if (to === 'n2') throw new Error('frame too large');
        sent.push(to);
      },
    };
    const transport = raftTransport(messenger as never, true, (e) => errors.push(e));
    transport.send(nodeName('n2'), append('g1', 1) as never);
    transport.send(nodeName('n3'), append('g1', 1) as never);
    await Promise.resolve();
    assert.deepEqual(sent, ['n3']);
    assert.equal(errors.length, 1);
  });
});
