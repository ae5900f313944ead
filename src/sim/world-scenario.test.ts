/**
 * Acceptance of the simulator: a small async gossip protocol (a grow-only max register spread by ping/pong requests
 * with timeouts) runs on 4 nodes over the injected env while the world injects random delays, drops, duplicates,
 * reordering, a partition and its heal, a clock step, and a crash/restart. The same seed must replay bit for bit, a
 * different seed must differ, and after the faults stop the live nodes must agree.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { NodeIdentity, NodeName } from '../core/ids.js';
import { sleep } from '../env/timers.js';
import { Nemesis } from './nemesis.js';
import { type SimNodeEnv, SimWorld } from './world.js';

type GossipMessage =
  | { readonly kind: 'ping'; readonly requestId: number; readonly value: number }
  | { readonly kind: 'pong'; readonly requestId: number; readonly value: number };

interface GossipNode {
  value: number;
  pongs: number;
}

const REQUEST_TIMEOUT_MS = 40;
const NAMES = ['n1', 'n2', 'n3', 'n4'];

/** One node of the gossip protocol, written as protocol code would be: async at the edges, env injected. */
function gossipNode(env: SimNodeEnv, world: SimWorld, control: { writing: boolean }, out: Map<string, GossipNode>) {
  const node: GossipNode = { value: Number(env.disk.get('state', 'value') ?? 0), pongs: 0 };
  out.set(env.name, node);
  const peers = new Map<string, NodeIdentity>();
  const pending = new Map<number, (value: number | undefined) => void>();
  let nextRequestId = 1;
  let writes = 0;

  const merge = (value: number): void => {
    if (value > node.value) node.value = value;
  };
  const send = (to: NodeName, message: GossipMessage): void => env.transport.send(to, message);

  env.transport.setHandler((event) => {
    if (event.kind === 'up') peers.set(event.peer.name, event.peer);
    else if (event.kind === 'down') peers.delete(event.peer.name);
    else {
      const message = event.payload as GossipMessage;
      merge(message.value);
      if (message.kind === 'ping')
        send(event.from.name, { kind: 'pong', requestId: message.requestId, value: node.value });
      else pending.get(message.requestId)?.(message.value);
    }
  });

  const request = (to: NodeName): Promise<number | undefined> =>
    new Promise((resolve) => {
      const requestId = nextRequestId++;
      const timer = env.timers.setTimer(() => finish(undefined), REQUEST_TIMEOUT_MS);
      const finish = (value: number | undefined): void => {
        pending.delete(requestId);
        env.timers.clearTimer(timer);
        resolve(value);
      };
      pending.set(requestId, finish);
      send(to, { kind: 'ping', requestId, value: node.value });
    });

  const write = (): void => {
    node.value++;
    writes++;
    env.disk.set('state', 'value', node.value);
    if (writes % 3 === 0) env.disk.sync();
  };

  const loop = async (): Promise<void> => {
    for (;;) {
      await sleep(env.timers, env.random.between(5, 25));
      if (control.writing && env.random.chance(0.3)) write();
      const names = [...peers.keys()].sort();
      if (names.length === 0) continue;
      const to = env.random.pick(names) as NodeName;
      const value = await request(to);
      if (value === undefined) continue;
      node.pongs++;
      world.note(`${env.name}<${to}:${value}@${env.clock.nowMs()}`);
    }
  };
  loop().catch(env.reportError);
  return {};
}

interface Outcome {
  readonly hash: string;
  readonly values: Record<string, number>;
  readonly pongs: number;
  readonly events: number;
}

async function scenario(seed: string | number): Promise<Outcome> {
  const world: SimWorld = new SimWorld({
    seed,
    traceMax: 50,
    network: { link: { delay: { kind: 'uniform', minMs: 1, maxMs: 12 }, dropRate: 0.05, duplicateRate: 0.05 } },
  });
  const control = { writing: true };
  const nodes = new Map<string, GossipNode>();
  for (const name of NAMES) world.addNode(name, (env) => gossipNode(env, world, control, nodes));
  world.network.setLink('n1', 'n4', { reorder: true });
  world.schedule(100, () => world.network.partition(['n1', 'n2'], ['n3', 'n4']), 'partition');
  world.schedule(250, () => world.network.heal(), 'heal');
  world.schedule(300, () => world.crash('n3'), 'crash n3');
  world.schedule(320, () => world.setClockOffset('n2', 250), 'skew n2');
  world.schedule(400, () => world.restart('n3'), 'restart n3');
  world.schedule(
    600,
    () => {
      control.writing = false;
      world.network.setDefaultLink({ dropRate: 0, duplicateRate: 0 });
    },
    'quiet',
  );
  const result = await world.run({ untilMs: world.nowMs() + 900, maxEvents: 100_000 });
  const values = Object.fromEntries(NAMES.map((n) => [n, nodes.get(n)!.value]));
  const max = Math.max(...Object.values(values));
  world.check(
    NAMES.every((n) => values[n] === max),
    'live nodes did not converge after the faults stopped',
    { values },
  );
  world.check(max > 10, 'too few writes for a meaningful run', { values });
  const pongs = [...nodes.values()].reduce((sum, node) => sum + node.pongs, 0);
  return { hash: world.traceHash(), values, pongs, events: result.events };
}

interface SwarmOutcome {
  readonly hash: string;
  readonly faults: readonly string[];
  readonly maxDownSeen: number;
}

/** Safety phase under a seeded swarm of faults, then a liveness phase: healed, the nodes must converge. */
async function swarm(seed: string | number): Promise<SwarmOutcome> {
  const names = ['n1', 'n2', 'n3', 'n4', 'n5'];
  const world = new SimWorld({ seed, network: { link: { delay: { kind: 'exponential', minMs: 1, meanMs: 4 } } } });
  const control = { writing: true };
  const nodes = new Map<string, GossipNode>();
  for (const name of names) world.addNode(name, (env) => gossipNode(env, world, control, nodes));
  const nemesis = new Nemesis(world, { meanIntervalMs: 25 });
  nemesis.start();
  let maxDownSeen = 0;
  const watch = (): void => {
    maxDownSeen = Math.max(maxDownSeen, names.filter((n) => !world.isUp(n)).length);
    world.schedule(1, watch, 'watch');
  };
  watch();
  await world.run({ forMs: 600 });
  nemesis.healAll();
  control.writing = false;
  const converged = (): boolean => new Set(names.map((n) => nodes.get(n)!.value)).size === 1;
  await world.runUntil(converged, 1000, 'convergence after heal');
  return { hash: world.traceHash(), faults: nemesis.log, maxDownSeen };
}

describe('simulated world scenario (acceptance)', () => {
  it('the same seed replays the same trace; different seeds give different traces', async () => {
    const first = await scenario('acceptance-1');
    const again = await scenario('acceptance-1');
    const other = await scenario('acceptance-2');
    assert.equal(again.hash, first.hash, 'seed acceptance-1 did not replay');
    assert.deepEqual(again.values, first.values);
    assert.notEqual(other.hash, first.hash);
    assert.ok(first.pongs > 50, `the protocol made progress (${first.pongs} pongs)`);
  });

  it('converges after the faults stop, for several seeds', async () => {
    for (let seed = 100; seed < 110; seed++) {
      const outcome = await scenario(seed);
      assert.ok(
        outcome.events > 300 && outcome.pongs > 50,
        `seed ${seed}: ${outcome.events} events, ${outcome.pongs} pongs`,
      );
    }
  });

  it('a seeded swarm of faults replays, keeps a majority up, and the healed cluster converges', async () => {
    const first = await swarm('swarm-1');
    const again = await swarm('swarm-1');
    assert.equal(again.hash, first.hash);
    assert.deepEqual(again.faults, first.faults);
    assert.ok(first.maxDownSeen <= 2, `at most a minority down (saw ${first.maxDownSeen})`);
    const kinds = new Set(first.faults.map((line) => line.split(' ')[1]));
    for (const kind of ['partition', 'isolate', 'cut', 'heal', 'crash', 'restart', 'lossy', 'skew']) {
      assert.ok(kinds.has(kind), `fault ${kind} was injected (seed swarm-1): ${[...kinds].join(',')}`);
    }
    for (const seed of ['swarm-2', 'swarm-3', 'swarm-4']) {
      const outcome = await swarm(seed);
      assert.notEqual(outcome.hash, first.hash);
    }
  });
});
