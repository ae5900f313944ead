/**
 * The bank workload on simulated 3-node clusters under seeded faults (see src/sim/workload/bank.ts): every seed's history
 * passes the checker, and the cluster makes progress after the heal: the fixed seeds here; the seed sweep is in
 * the sweep files beside this one (see support.ts). `npm run soak` runs many more seeds.
 */
import { describe, it } from 'node:test';
import { FAULT_SETS, passes } from './support.js';

describe('bank workload (simulated)', () => {
  FAULT_SETS.forEach((faults, i) => {
    const seed = i + 1;
    it(`history checks out under ${faults} faults (seed ${seed})`, async () => {
      await passes('bank', seed, faults);
    });
  });
});
