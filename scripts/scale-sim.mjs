#!/usr/bin/env node
// Raft traffic at scale, on a simulated cluster (virtual time, deterministic from --seed): messages per second between
// the nodes while idle and under a light load, and the time until every partition whose primary was on a crashed node
// has a new primary. Run it with and without --no-raft-batching to compare (after a build).
// Usage: node scripts/scale-sim.mjs [--nodes 30] [--partitions 3000] [--seconds 10] [--no-raft-batching] [--no-rest]
//        [--seed 1]   (--no-rest keeps every partition awake, ticking and heartbeating, as BASALT_IDLE_REST=0 does)
import { parseArgs } from 'node:util';
import { startCluster } from '../dist/src/index.js';

const { values } = parseArgs({
  options: {
    nodes: { type: 'string', default: '30' },
    partitions: { type: 'string', default: '3000' },
    seconds: { type: 'string', default: '10' },
    seed: { type: 'string', default: '1' },
    'no-raft-batching': { type: 'boolean', default: false },
    'no-rest': { type: 'boolean', default: false },
  },
});
const nodes = Number(values.nodes);
const partitions = Number(values.partitions);
const windowMs = Number(values.seconds) * 1000;
const batching = !values['no-raft-batching'];
const realStart = Date.now();
const say = (line) => console.log(`[${((Date.now() - realStart) / 1000).toFixed(1)} s real] ${line}`);

const cluster = await startCluster({
  simulation: { seed: values.seed },
  nodes,
  tuning: { raftBatching: batching },
  replicas: { rest: !values['no-rest'] },
});
const sent = () =>
  cluster.nodes.reduce((sum, n) => sum + (cluster.node(n).metrics().peerTraffic?.messagesSent ?? 0), 0);
try {
  const client = cluster.client('n1');
  say(
    `${nodes} nodes, raft batching ${batching ? 'on' : 'off'}, rest ${values['no-rest'] ? 'off' : 'on'}: creating ${partitions} partitions...`,
  );
  await client.createTable('t', { partitions, replicas: 3 });
  await cluster.runFor(5_000);
  const keys = new Map();
  for (let i = 0; keys.size < partitions && i < partitions * 50; i++) {
    const p = cluster.placement('t', `k${i}`).partition;
    if (!keys.has(p)) keys.set(p, `k${i}`);
  }
  say('idle window...');
  let before = sent();
  await cluster.runFor(windowMs);
  const idle = (sent() - before) / (windowMs / 1000);
  say(`idle: ${idle.toFixed(0)} messages/s between the nodes`);

  say('light load: 50 puts per virtual second on random partitions...');
  const keyList = [...keys.values()];
  before = sent();
  const loadStart = cluster.simulation.nowMs();
  let puts = 0;
  while (cluster.simulation.nowMs() - loadStart < windowMs) {
    await Promise.all(
      Array.from({ length: 5 }, (_, j) => client.put('t', keyList[(puts * 7 + j * 13) % keyList.length], puts + j)),
    );
    puts += 5;
    await cluster.runFor(100);
  }
  const loadSeconds = (cluster.simulation.nowMs() - loadStart) / 1000;
  say(`light load: ${puts} puts, ${((sent() - before) / loadSeconds).toFixed(0)} messages/s between the nodes`);

  const victim = cluster.nodes[cluster.nodes.length - 1];
  const owned = keyList.filter((k) => cluster.placement('t', k).primary === victim);
  say(`crashing ${victim}, primary of ${owned.length} partitions...`);
  const crashAt = cluster.simulation.nowMs();
  await cluster.stopNode(victim);
  await cluster.waitFor(
    () =>
      owned.every((k) => {
        const primary = cluster.placement('t', k).primary;
        return primary !== undefined && primary !== victim;
      }),
    { what: 'every partition of the crashed node has a new primary', timeoutMs: 120_000 },
  );
  say(
    `every partition of ${victim} has a new primary after ${((cluster.simulation.nowMs() - crashAt) / 1000).toFixed(2)} virtual s`,
  );
} finally {
  await cluster.stop();
}
