/**
 * Nothing a transaction holds outlives it (fixed seeds of the liveness workload; `npm run soak:liveness` sweeps many):
 * under minutes-long cleanup cuts, finishes held past the vacuum horizon, a coordinator crash, a clock jump beyond
 * maxClockSkew and link drops, no node is left with a lock, an intent or a non-final map entry of an older
 * transaction, and what clients were told matches the durable records.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { livenessRun } from './liveness-scenario.js';

// Seed 1 left 311 PENDING map entries behind (read-only RW txs, unlock-only cleanups) before those ended final.
for (const seed of ['liveness-soak-1']) {
  test(`no lock, intent or non-final map entry outlives its tx under cleanup cuts, late finishes, crashes and clock jumps (seed ${seed})`, async () => {
    const outcome = await livenessRun(seed);
    assert.ok(outcome.committed > 100, `transactions committed (${outcome.committed})`);
    assert.ok(outcome.checkedRecords > 0, 'some outcomes were checked against durable records');
  });
}
