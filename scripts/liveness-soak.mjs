#!/usr/bin/env node
// Soak test of the liveness workload (simulated clusters): cleanup requests cut for minutes, finishes delayed past the
// vacuum horizon, coordinator crashes, clock jumps beyond maxClockSkew and link drops, while transfers, read-only RW
// transactions and rollbacks run. After the heal and a quiet period, no lock, intent or non-final tx state entry of an
// older transaction may be left on any node, and every outcome a client was told must match the durable record.
// Runs seeds from..from+count-1 with a progress line; prints each failing seed with the command that replays it.
// Build first (`npx tsc -p .`). Usage: node scripts/liveness-soak.mjs [--seeds 20] [--from 1]
import { livenessRun } from '../dist/test/client/liveness-scenario.js';

function option(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : fallback;
}

const count = Number(option('seeds', '20'));
const from = Number(option('from', '1'));
if (!Number.isInteger(count) || !Number.isInteger(from) || count < 1) {
  console.error('usage: node scripts/liveness-soak.mjs [--seeds N] [--from N]');
  process.exit(2);
}

const failures = [];
const totals = { committed: 0, aborted: 0, unknown: 0, readOnly: 0, rollbacks: 0, checkedRecords: 0 };
const startMs = Date.now();
const tty = process.stderr.isTTY;
for (let n = from; n < from + count; n++) {
  const seed = `liveness-soak-${n}`;
  try {
    const outcome = await livenessRun(seed);
    for (const k of Object.keys(totals)) totals[k] += outcome[k];
  } catch (error) {
    failures.push(n);
    if (tty) process.stderr.write('\n');
    console.log(`FAIL seed ${seed}: ${error instanceof Error ? error.message : error}`);
    console.log(`  replay: npx tsc -p . && node scripts/liveness-soak.mjs --from ${n} --seeds 1`);
  }
  const done = n - from + 1;
  const s = (Date.now() - startMs) / 1000;
  const line =
    `[${done}/${count}] ${(s / done).toFixed(1)} s/seed, ${failures.length} failed, ${totals.committed} committed, ` +
    `${totals.aborted} aborted, ${totals.unknown} unknown (${totals.readOnly} read-only, ${totals.rollbacks} ` +
    `rollbacks), ${totals.checkedRecords} outcomes checked against durable records`;
  if (tty) process.stderr.write(`\r${line}`);
  else console.error(line);
}
if (tty) process.stderr.write('\n');
console.log(failures.length === 0 ? `all ${count} seeds passed` : `failing seeds: ${failures.join(' ')}`);
process.exit(failures.length === 0 ? 0 : 1);
