#!/usr/bin/env node
// Soak test of the bank workload under faults (simulated clusters, crashes and graceful stops mixed in by the seed):
// runs seeds from..from+count-1 one after another with a progress line, and prints every failing seed with its error
// and the command that replays it. Build first (`npx tsc -p .`).
// Usage: node scripts/bank-soak.mjs [--seeds 100] [--from 1] [--scenario rw|ro] [--faults plain|coordinator]
//   rw (default): transfers checked against the acknowledged ones; seeds bank-soak-<n>, odd n with the plain fault
//   schedule, even n with the coordinator-crash schedule (unless --faults picks one).
//   ro: transfers plus read-only auditors whose every sum must be the total; seeds bank-ro-soak-<n>.
import { bankReadOnlyRun } from '../dist/test/client/bank-ro-scenario.js';
import { bankRun, FAULTS, FAULTS_COORDINATOR } from '../dist/test/client/bank-scenario.js';

function option(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : fallback;
}

const count = Number(option('seeds', '100'));
const from = Number(option('from', '1'));
const scenario = option('scenario', 'rw');
const faults = option('faults', '');
if (!['rw', 'ro'].includes(scenario) || !['', 'plain', 'coordinator'].includes(faults)) {
  console.error(
    'usage: node scripts/bank-soak.mjs [--seeds N] [--from N] [--scenario rw|ro] [--faults plain|coordinator]',
  );
  process.exit(2);
}

function schedule(n) {
  if (faults !== '') return faults;
  return n % 2 === 0 ? 'coordinator' : 'plain';
}

function seedOf(n) {
  return scenario === 'ro' ? `bank-ro-soak-${n}` : `bank-soak-${n}`;
}

/** The options that replay seed n alone. */
function replayOf(n) {
  return scenario === 'ro' ? `--scenario ro --from ${n} --seeds 1` : `--faults ${schedule(n)} --from ${n} --seeds 1`;
}

function runSeed(n) {
  if (scenario === 'ro') return bankReadOnlyRun(seedOf(n));
  return bankRun(seedOf(n), schedule(n) === 'coordinator' ? FAULTS_COORDINATOR : FAULTS);
}

const failures = [];
const totals = { acknowledged: 0, uncertain: 0, crashes: 0, gracefulStops: 0, drainTimeouts: 0 };
const startMs = Date.now();
const tty = process.stderr.isTTY;

for (let n = from; n < from + count; n++) {
  try {
    const outcome = await runSeed(n);
    totals.acknowledged += outcome.acknowledged;
    totals.uncertain += outcome.uncertain ?? 0;
    totals.crashes += outcome.log.filter((e) => e.startsWith('crash ')).length;
    totals.gracefulStops += outcome.log.filter((e) => e.startsWith('graceful stop ')).length;
    const timeouts = outcome.log.filter((e) => e.endsWith('(drain timed out)'));
    totals.drainTimeouts += timeouts.length;
    // Not a safety failure, but a graceful stop that could not hand everything over in one lease duration.
    if (timeouts.length > 0) console.log(`note seed ${seedOf(n)}: ${timeouts.join('; ')}`);
  } catch (error) {
    failures.push(n);
    if (tty) process.stderr.write('\n');
    console.log(`FAIL seed ${seedOf(n)}: ${error instanceof Error ? error.message : error}`);
    console.log(`  replay: npx tsc -p . && node scripts/bank-soak.mjs ${replayOf(n)}`);
  }
  const done = n - from + 1;
  const s = (Date.now() - startMs) / 1000;
  const line =
    `[${done}/${count}] ${(s / done).toFixed(1)} s/seed, ${failures.length} failed, ` +
    `${totals.acknowledged} acked, ${totals.uncertain} uncertain, ${totals.crashes} crashes, ` +
    `${totals.gracefulStops} graceful stops (${totals.drainTimeouts} drain timeouts)`;
  if (tty) process.stderr.write(`\r${line}`);
  else console.error(line);
}
if (tty) process.stderr.write('\n');
console.log(failures.length === 0 ? `all ${count} seeds passed` : `failing seeds: ${failures.join(' ')}`);
process.exit(failures.length === 0 ? 0 : 1);
