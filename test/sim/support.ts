/** Shared by the simulated workload tests: one seed of a workload, failing with its report if the run failed. */
import assert from 'node:assert/strict';
import { parseFaults } from '../../src/sim/workload/faults.js';
import { type SimRunOptions, type SimRunResult, simRun } from '../../src/sim/workload/run.js';

/** Short phases keep a seed at a few seconds of real time; the soak runs the long ones. */
export const SHORT = { durationMs: 3_000, livenessMs: 20_000 } as const;

/** Fault sets the fixed seeds cycle through: everything, node faults alone, network and clock faults alone. */
export const FAULT_SETS = ['all', 'crash,restart', 'drop,dup,delay,partition,skew'] as const;

export async function passes(workload: SimRunOptions['workload'], seed: number, faults: string): Promise<SimRunResult> {
  const result = await simRun({ seed, workload, faults: parseFaults(faults), ...SHORT });
  if (result.failure !== undefined) {
    const name = typeof workload === 'string' ? workload : workload.name;
    assert.fail(
      `${result.failure.class} failure: ${result.failure.message}\n` +
        `replay: basalt sim --seed ${seed} --workload ${name} --faults ${faults} --duration 3\n` +
        `anomalies: ${result.check?.anomalies.slice(0, 5).join('\n  ')}\nfaults: ${result.faultLog.join('; ')}`,
    );
  }
  assert.ok(result.counts.okAfterHeal > 0, 'progress after the heal');
  return result;
}

/** `SIM_SEEDS=<n>` runs n more seeds per workload (with every fault), for a longer search. */
export const EXTRA_SEEDS = Number(process.env['SIM_SEEDS'] ?? 0);
