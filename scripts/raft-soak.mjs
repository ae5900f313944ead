#!/usr/bin/env node
import { runRaftSimulation } from '../dist/src/raft/sim-cluster.js';
// Soak test of the Raft core: runs many seeds of the fault-injecting cluster simulation (3 and 5 nodes) with a
// progress line, and prints every failing seed with the command that replays it. Build first (`npx tsc -p .`).
// Usage: node scripts/raft-soak.mjs [--seeds 5000] [--from 1] [--size 3|5]
import { SeededRandom } from '../dist/src/sim/random.js';

function option(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? Number(process.argv[i + 1]) : fallback;
}

const count = option('seeds', 5000);
const from = option('from', 1);
const fixedSize = option('size', 0);
const failures = [];
let acked = 0;
let elections = 0;
let snapshots = 0;
let crashes = 0;
const startMs = Date.now();
const tty = process.stderr.isTTY;

for (let seed = from; seed < from + count; seed++) {
  const size = fixedSize || (seed % 2 === 0 ? 5 : 3);
  try {
    const r = runRaftSimulation(new SeededRandom(seed), { size });
    acked += r.acked;
    elections += r.stats.elections;
    snapshots += r.stats.snapshotsSent;
    crashes += r.stats.crashes;
  } catch (error) {
    failures.push(seed);
    console.log(`FAIL seed ${seed} (${size} nodes): ${error instanceof Error ? error.message : error}`);
    console.log(
      `  replay: npx tsc -p . && RAFT_SEED=${seed} RAFT_SIZE=${size} node --test dist/src/raft/raft-sim.test.js`,
    );
  }
  const done = seed - from + 1;
  if (done % 50 === 0 || done === count) {
    const rate = (done / ((Date.now() - startMs) / 1000)).toFixed(1);
    const line = `[${done}/${count}] ${rate} seeds/s, ${failures.length} failed, ${acked} acked, ${elections} elections, ${snapshots} snapshots, ${crashes} crashes`;
    if (tty) process.stderr.write(`\r${line}`);
    else console.error(line);
  }
}
if (tty) process.stderr.write('\n');
console.log(failures.length === 0 ? `all ${count} seeds passed` : `failing seeds: ${failures.join(' ')}`);
process.exit(failures.length === 0 ? 0 : 1);
