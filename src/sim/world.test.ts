import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { nodeName } from '../core/ids.js';
import { sleep } from '../env/timers.js';
import type { TransportEvent } from '../env/transport.js';
import { SimClock } from './clock.js';
import { SimDisk } from './disk.js';
import { SimulationError } from './errors.js';
import { SeededRandom } from './random.js';
import { Scheduler, SIM_EPOCH_MS } from './scheduler.js';
import { type SimNodeEnv, SimWorld } from './world.js';

describe('SimClock', () => {
  it('reads virtual time plus an offset that can be changed at any time, in either direction', () => {
    const s = new Scheduler({ seed: 'clock' });
    const c = new SimClock(s);
    assert.equal(c.nowMs(), SIM_EPOCH_MS);
    c.offsetMs = 250;
    assert.equal(c.nowMs(), SIM_EPOCH_MS + 250);
    s.schedule(100, () => {});
    s.runSync();
    assert.equal(c.nowMs(), SIM_EPOCH_MS + 350);
    c.offsetMs = -40;
    assert.equal(c.nowMs(), SIM_EPOCH_MS + 60);
    assert.equal(c.monotonicMs(), SIM_EPOCH_MS + 100);
  });

  it('drifts by the configured ppm, and changing the drift does not make the clock jump', () => {
    const s = new Scheduler({ seed: 'drift' });
    const c = new SimClock(s, { driftPpm: 1000 });
    s.runSync({ forMs: 10_000 });
    assert.equal(c.exactMs(), SIM_EPOCH_MS + 10_000 + 10);
    const before = c.exactMs();
    c.driftPpm = -500;
    assert.equal(c.exactMs(), before);
    s.runSync({ forMs: 10_000 });
    assert.equal(c.exactMs(), SIM_EPOCH_MS + 20_000 + 10 - 5);
    assert.equal(c.errorMs(), 5);
    assert.equal(c.monotonicMs(), SIM_EPOCH_MS + 20_000);
    assert.throws(() => {
      c.driftPpm = -2_000_000;
    }, /drift/);
  });
});

describe('SimDisk', () => {
  it('a power loss keeps synced writes and loses unsynced ones; a process crash keeps both', () => {
    const disk = new SimDisk(new SeededRandom('disk'));
    disk.set('log', 'a', 1);
    disk.sync();
    disk.set('log', 'b', 2);
    disk.delete('log', 'a');
    assert.equal(disk.get('log', 'b'), 2);
    assert.equal(disk.get('log', 'a'), undefined);
    disk.crash('process');
    assert.deepEqual(disk.entries('log'), [['b', 2]]);
    disk.crash('power-loss');
    assert.deepEqual(disk.entries('log'), [['a', 1]]);
    assert.equal(disk.unsyncedCount, 0);
  });

  it('keep-prefix keeps an in-order prefix of unsynced writes; tear-last may cut the last byte array short', () => {
    let sawPartial = false;
    let sawTorn = false;
    for (let i = 0; i < 40; i++) {
      const disk = new SimDisk(new SeededRandom(`prefix-${i}`), i % 2 === 0 ? 'keep-prefix' : 'tear-last');
      for (let k = 0; k < 5; k++) disk.set('s', `k${k}`, new Uint8Array([k, k, k, k]));
      disk.crash('power-loss');
      const keys = disk.keys('s');
      assert.deepEqual(keys, ['k0', 'k1', 'k2', 'k3', 'k4'].slice(0, keys.length), 'survivors are a prefix');
      if (keys.length > 0 && keys.length < 5) sawPartial = true;
      for (const [j, key] of keys.entries()) {
        const value = disk.get('s', key) as Uint8Array;
        if (value.length < 4) {
          assert.equal(j, keys.length - 1, 'only the last surviving write is torn');
          assert.equal(i % 2, 1, 'only tear-last tears');
          sawTorn = true;
        }
      }
    }
    assert.ok(sawPartial && sawTorn);
  });

  it('copies byte arrays on write', () => {
    const disk = new SimDisk(new SeededRandom('copy'));
    const bytes = new Uint8Array([1, 2]);
    disk.set('s', 'k', bytes);
    bytes[0] = 9;
    assert.deepEqual(disk.get('s', 'k'), new Uint8Array([1, 2]));
  });
});

interface EchoNode {
  readonly received: unknown[];
  readonly events: string[];
  counter: number;
}

function echoWorld(seed: string | number): { world: SimWorld; nodes: Map<string, EchoNode[]> } {
  const world = new SimWorld({ seed, network: { link: { delay: { kind: 'fixed', ms: 10 } }, detectDownMs: 3 } });
  const nodes = new Map<string, EchoNode[]>();
  const factory = (env: SimNodeEnv) => {
    const state: EchoNode = { received: [], events: [], counter: 0 };
    const list = nodes.get(env.name) ?? [];
    list.push(state);
    nodes.set(env.name, list);
    env.transport.setHandler((e: TransportEvent) => {
      if (e.kind === 'message') state.received.push(e.payload);
      else state.events.push(`${e.kind}:${e.peer.name}/${e.peer.id}`);
    });
    const tick = (): void => {
      state.counter++;
      env.timers.setTimer(tick, 7);
    };
    env.timers.setTimer(tick, 7);
    return {};
  };
  for (const name of ['n1', 'n2', 'n3']) world.addNode(name, factory);
  return { world, nodes };
}

describe('SimWorld crash and restart', () => {
  it('a crash loses volatile state, timers and messages in flight; a synced write survives and an unsynced one does not', async () => {
    const { world, nodes } = echoWorld('crash');
    await world.run({ forMs: 20 });
    const n2 = world.env('n2')!;
    n2.disk.set('meta', 'synced', 'yes');
    n2.disk.sync();
    n2.disk.set('meta', 'unsynced', 'lost');
    world.env('n1')!.transport.send(nodeName('n2'), 'in-flight');
    await world.run({ forMs: 5 });
    const ticksBefore = nodes.get('n2')![0]!.counter;
    world.crash('n2');
    assert.equal(world.isUp('n2'), false);
    await world.run({ forMs: 50 });
    assert.equal(nodes.get('n2')![0]!.counter, ticksBefore, 'the dead incarnation’s timers never fire');
    assert.deepEqual(nodes.get('n2')![0]!.received, []);
    n2.disk.set('meta', 'zombie', 'write');
    assert.equal(n2.disk.ignoredCount, 1);
    const env = world.restart('n2');
    assert.equal(env.incarnation, 2);
    assert.equal(env.disk.get('meta', 'synced'), 'yes');
    assert.equal(env.disk.get('meta', 'unsynced'), undefined);
    assert.equal(env.disk.get('meta', 'zombie'), undefined);
    await world.run({ forMs: 30 });
    const fresh = nodes.get('n2')![1]!;
    assert.deepEqual(fresh.received, [], 'the message in flight to the old incarnation is never delivered');
    assert.equal(fresh.counter, 4, 'volatile state starts over: 4 ticks of 7 ms in 30 ms');
  });

  it('restart gives a new ephemeral id; peers see down with the old id, then up with the new one', async () => {
    const { world, nodes } = echoWorld('restart');
    await world.run({ forMs: 5 });
    const oldId = world.node('n3').id;
    world.crash('n3');
    await world.run({ forMs: 10 });
    const newId = world.restart('n3').id;
    await world.run({ forMs: 10 });
    assert.notEqual(oldId, newId);
    assert.equal(world.node('n3').id, newId);
    const n1 = nodes.get('n1')![0]!;
    assert.deepEqual(n1.events.slice(-2), [`down:n3/${oldId}`, `up:n3/${newId}`]);
    assert.deepEqual(nodes.get('n3')![1]!.events.sort(), [
      `up:n1/${world.node('n1').id}`,
      `up:n2/${world.node('n2').id}`,
    ]);
  });

  it('misuse names the seed: crashing a down node, restarting an up one, an unknown name', () => {
    const { world } = echoWorld('misuse-seed');
    assert.throws(() => world.restart('n1'), /it is up.*misuse-seed/);
    world.crash('n1');
    assert.throws(() => world.crash('n1'), /it is down.*misuse-seed/);
    assert.throws(() => world.node('n9'), /unknown node n9.*misuse-seed/);
  });

  it('shutdown calls stop and keeps unsynced writes (the page cache survives a process exit)', () => {
    const world = new SimWorld({ seed: 'shutdown' });
    let stopped = 0;
    world.addNode('n1', (env) => {
      env.disk.set('s', 'k', 'v');
      return { stop: () => stopped++ };
    });
    world.shutdown('n1');
    assert.equal(stopped, 1);
    assert.equal(world.restart('n1').disk.get('s', 'k'), 'v');
  });

  it('an error a node reports stops the run and is thrown with the seed', async () => {
    const world = new SimWorld({ seed: 'reported' });
    world.addNode('n1', (env) => {
      const loop = async (): Promise<void> => {
        await sleep(env.timers, 5);
        throw new Error('loop failed');
      };
      loop().catch(env.reportError);
      return {};
    });
    await assert.rejects(
      world.run({ forMs: 100 }),
      (e: unknown) => e instanceof SimulationError && /loop failed/.test(e.message) && /"reported"/.test(e.message),
    );
    assert.ok(world.nowMs() < SIM_EPOCH_MS + 100);
  });

  it('syncAsync makes the writes before it durable after the sync latency, unless the node dies first', async () => {
    const world = new SimWorld({ seed: 'fsync', diskSyncLatencyMs: 2 });
    const synced: number[] = [];
    world.addNode('n1', (env) => {
      env.disk.set('log', '1', 'a');
      void env.disk.syncAsync().then(() => synced.push(world.nowMs() - SIM_EPOCH_MS));
      env.disk.set('log', '2', 'b');
      return {};
    });
    await world.run();
    assert.deepEqual(synced, [2]);
    assert.equal(world.disk('n1').unsyncedCount, 1, 'the write after the sync call is still pending');
    world.env('n1')!.disk.set('log', '3', 'c');
    void world
      .env('n1')!
      .disk.syncAsync()
      .then(() => synced.push(-1));
    await world.run({ forMs: 1 });
    world.crash('n1');
    await world.run();
    assert.deepEqual(synced, [2], 'the sync of a dead node never completes');
    assert.deepEqual(world.disk('n1').keys('log'), ['1']);
  });

  it('runUntil fails with the seed when a condition does not hold in time', async () => {
    const { world, nodes } = echoWorld('liveness');
    await world.runUntil(() => nodes.get('n1')![0]!.counter >= 3, 100, 'three ticks');
    assert.equal(world.nowMs(), SIM_EPOCH_MS + 21);
    await assert.rejects(
      world.runUntil(() => nodes.get('n1')![0]!.counter >= 1000, 100, 'a thousand ticks'),
      /a thousand ticks did not hold within 100 ms.*"liveness"/,
    );
  });

  it('a factory that throws leaves the node down, with the seed in the error', () => {
    const world = new SimWorld({ seed: 'bad-factory' });
    let attempts = 0;
    world.addNode('n1', (env) => {
      env.transport.setHandler(() => {});
      return {};
    });
    assert.throws(
      () =>
        world.addNode('n2', () => {
          attempts++;
          if (attempts === 1) throw new Error('no config');
          return {};
        }),
      /n2 failed to start: Error: no config.*"bad-factory"/,
    );
    assert.equal(world.isUp('n2'), false);
    assert.equal(world.restart('n2').incarnation, 2);
    assert.ok(world.network.isConnected('n1', 'n2'));
  });

  it('setClockOffset shifts one node’s clock and survives restarts', () => {
    const { world } = echoWorld('skew');
    world.setClockOffset('n2', 250);
    assert.equal(world.env('n2')!.clock.nowMs() - world.env('n1')!.clock.nowMs(), 250);
    world.crash('n2');
    assert.equal(world.restart('n2').clock.nowMs() - world.nowMs(), 250);
  });
});
