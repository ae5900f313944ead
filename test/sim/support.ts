/** Shared by the simulated workload tests: one seed of a workload, failing with its report if the run failed. */
import assert from 'node:assert/strict';
import { parseFaults } from '../../src/sim/workload/faults.js';
import { type SimRunOptions, type SimRunResult, simRun } from '../../src/sim/workload/run.js';

/** Short phases keep a seed at a few seconds of real time; the soak runs the long ones. */
export const SHORT = { durationMs: 3_000, livenessMs: 20_000 } as const;

/** Fault sets the fixed seeds cycle through: everything, node faults alone, network and clock faults alone. */
export const FAULT_SETS = ['all', 'crash,restart', 'drop,dup,delay,partition,skew'] as const;

export async function passes(
  workload: SimRunOptions['workload'],
  seed: number,
  faults: string,
  workers?: number,
): Promise<SimRunResult> {
  const result = await simRun({
    seed,
    workload,
    faults: parseFaults(faults),
    ...SHORT,
    ...(workers !== undefined && { workers }),
  });
  if (result.failure !== undefined) {
    const name = typeof workload === 'string' ? workload : workload.name;
    assert.fail(
      `${result.failure.class} failure: ${result.failure.message}\n` +
        `replay: basalt sim --seed ${seed} --workload ${name} --faults ${faults} --duration 3` +
        `${workers === undefined ? '' : ` --workers ${workers}`}\n` +
        `anomalies: ${result.check?.anomalies.slice(0, 5).join('\n  ')}\nfaults: ${result.faultLog.join('; ')}`,
    );
  }
  assert.ok(result.counts.okAfterHeal > 0, 'progress after the heal');
  return result;
}

/**
 * The seed budget: seeds 100.. of each workload under every fault, on top of the fixed ones above. A budget seed
 * takes 2.2–2.9 s of real time on an otherwise idle 2-core machine (3 workers, 3 s of safety phase), but 7–17 s when
 * the machine is shared; 40 per workload then ran a test file past the runner's 300 s per-file timeout. So the
 * default is 15 per workload: 45 seeds, 54 with the fixed ones, about a minute of added wall time at test
 * concurrency 2 when idle and under the timeout when not. A few hundred do not fit in minutes on such a machine.
 * `SIM_SEEDS=<n>` runs n per workload instead (0 for none); `npm run soak` runs thousands.
 */
export const EXTRA_SEEDS = Number(process.env['SIM_SEEDS'] ?? 15);

/** Fewer workers than the fixed seeds: as many protocol paths per seed at less real time. */
export const BUDGET = { workers: 3 } as const;
