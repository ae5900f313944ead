/**
 * The register workload on simulated 3-node clusters under seeded faults (see src/sim/workload/register.ts): every seed's history
 * passes the checker, and the cluster makes progress after the heal: the fixed seeds, then the seed budget (15 by
 * default, `SIM_SEEDS`; see support.ts). `npm run soak` runs many more seeds.
 */
import { describe, it } from 'node:test';
import { BUDGET, EXTRA_SEEDS, FAULT_SETS, passes } from './support.js';

describe('register workload (simulated)', () => {
  FAULT_SETS.forEach((faults, i) => {
    const seed = i + 1;
    it(`history checks out under ${faults} faults (seed ${seed})`, async () => {
      await passes('register', seed, faults);
    });
  });
  for (let seed = 100; seed < 100 + EXTRA_SEEDS; seed++) {
    it(`history checks out under all faults (seed ${seed})`, async () => {
      await passes('register', seed, 'all', BUDGET.workers);
    });
  }
});
