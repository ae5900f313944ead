/**
 * The composition root: one call builds a whole node, its request table registered with its messenger and its
 * coordinator among its services, before the node is started.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isBasaltError } from '../core/errors.js';
import { nodeId, nodeName } from '../core/ids.js';
import { MemoryNetwork } from '../harness/memory-transport.js';
import { MemoryLogStorage } from '../raft/memory-log-storage.js';
import { SimClock } from '../sim/clock.js';
import { SeededRandom } from '../sim/random.js';
import { Scheduler } from '../sim/scheduler.js';
import { MemoryStorageEngine } from '../storage/storage-engine.js';
import { TX_REQUEST_KINDS, type TxRequest, type TxResponse } from '../tx/core/messages.js';
import { composeNode } from './compose.js';
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
