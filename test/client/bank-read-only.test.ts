/**
 * The bank workload with read-only auditors under faults, simulated over fixed seeds (a failure names its seed and
 * prints the fault log): see `bank-ro-scenario.ts`. Every RO sum equals the initial total, the total is conserved once
 * healed, and across the seeds every resolution path (local map, coordinator, commit partition) was taken.
 * `npm run soak:bank -- --scenario ro` sweeps many more seeds.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { bankReadOnlyRun, type Paths } from './bank-ro-scenario.js';

const acrossSeeds: Paths = { local: 0, coordinator: 0, commitPartition: 0 };

async function run(seed: string): Promise<void> {
  const outcome = await bankReadOnlyRun(seed);
  acrossSeeds.local += outcome.paths.local;
  acrossSeeds.coordinator += outcome.paths.coordinator;
  acrossSeeds.commitPartition += outcome.paths.commitPartition;
  if (process.env['BANK_VERBOSE'] !== undefined) {
    const { log, ...counts } = outcome;
    console.log(seed, counts, log);
  }
}

const SEEDS = [
  'bank-ro-1',
  'bank-ro-2',
  'bank-ro-3',
  ...Array.from({ length: Number(process.env['BANK_RO_SEEDS'] ?? 0) }, (_, i) => `bank-ro-sweep-${i}`),
];

describe('bank with read-only auditors under faults (simulated)', () => {
  for (const seed of SEEDS) {
    it(`every RO sum equals the total; the total is conserved (seed ${seed})`, () => run(seed));
  }
  after(() => {
    // Across the seeds, every resolution path was exercised.
    assert.ok(acrossSeeds.local > 0, `local path: ${JSON.stringify(acrossSeeds)}`);
    assert.ok(acrossSeeds.coordinator > 0, `coordinator path: ${JSON.stringify(acrossSeeds)}`);
    assert.ok(acrossSeeds.commitPartition > 0, `commit partition path: ${JSON.stringify(acrossSeeds)}`);
  });
});
