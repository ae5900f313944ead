/**
 * Coverage marks of simulated runs: a short run under crash faults reaches the protocol paths that every seed tried
 * reached (so a change that stops reaching them, or stops counting them, fails here), the counters of every node
 * incarnation add up, and the report names the marks a run never hit.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LIMITS } from '../../src/core/limits.js';
import { parseFaults } from '../../src/sim/workload/faults.js';
import { COVERAGE_MARKS, formatMarks, MarkTally, markHits } from '../../src/sim/workload/marks.js';
import { simRun } from '../../src/sim/workload/run.js';

/**
 * Marks these seeds hit under crash and restart faults (list-append, 3 s of safety phase). Of seeds 1–16, every one hit
 * wait-die-death and inline-cleanup, and fourteen hit coordinator-finishing-wait (a state request meeting a committing
 * tx: pipelined writes made that window shorter); 6, 9 and 13 hit all three and a snapshot install.
 */
const RELIABLE = ['wait-die-death', 'inline-cleanup', 'coordinator-finishing-wait'] as const;

describe('coverage marks', () => {
  it('a short run with crash faults hits the reliable marks, and the report names the ones it missed', async () => {
    const tally = new MarkTally();
    for (const seed of [6, 9]) {
      const result = await simRun({
        seed,
        workload: 'list-append',
        faults: parseFaults('crash,restart'),
        durationMs: 3_000,
        livenessMs: 20_000,
      });
      assert.equal(result.failure, undefined, result.failure?.message);
      for (const mark of RELIABLE)
        assert.ok((result.marks[mark] ?? 0) > 0, `${mark} not hit: ${formatMarks(result.marks)}`);
      assert.ok(
        result.faultLog.some((line) => /crash|graceful stop/.test(line)),
        'a node was taken down',
      );
      tally.add(result.marks);
    }
    const report = tally.report();
    for (const mark of RELIABLE) assert.match(report, new RegExp(`^  ${mark} +\\d+ hits in 2 runs$`, 'm'));
    // Sim runs compact Raft logs after a few dozen entries, so a node back from a crash may find its leader's log
    // compacted past it and install a snapshot: not on every seed, but these two reach it.
    assert.ok(!tally.missed().includes('snapshot-install'), report);
    assert.match(report, /^ {2}snapshot-install +\d+ hits in [12] runs$/m);
    // No skew fault: no clock runs beyond the bound, so no peer is refused for its timestamps.
    assert.ok(tally.missed().includes('clock-skew-refusal'), report);
    assert.match(report, /^ {2}missed: .*clock-skew-refusal/m);
  });

  it('the snapshot installs come from the small compaction threshold of sim runs', async () => {
    const result = await simRun({
      seed: 2,
      workload: 'list-append',
      faults: parseFaults('crash,restart'),
      durationMs: 3_000,
      livenessMs: 20_000,
      compactEntriesMin: LIMITS.raftCompactEntriesMin,
    });
    assert.equal(result.failure, undefined, result.failure?.message);
    assert.equal(result.marks['snapshot-install'], 0, formatMarks(result.marks));
  });

  it('counters of every incarnation add up, and a mark whose counters stay at zero is missed', () => {
    const first = { 'locks.waitDieDeaths': 2, 'inlineCleanup.local': 1 };
    const restarted = { 'locks.waitDieDeaths': 3, 'inlineCleanup.coordinator': 4 };
    const hits = markHits([first, restarted]);
    assert.equal(hits['wait-die-death'], 5);
    assert.equal(hits['inline-cleanup'], 5);
    assert.equal(hits['snapshot-install'], 0);
    const tally = new MarkTally();
    tally.add(hits);
    tally.add(markHits([{ 'snapshot.installs': 1 }]));
    const missed = tally.missed();
    assert.deepEqual(
      missed,
      COVERAGE_MARKS.map((m) => m.name).filter(
        (n) => !['wait-die-death', 'inline-cleanup', 'snapshot-install'].includes(n),
      ),
    );
    assert.match(tally.report(), /wait-die-death +5 hits in 1 runs/);
    assert.match(tally.report(), new RegExp(`missed: ${missed.join(', ')}$`));
    assert.match(formatMarks(hits), /^marks hit: wait-die-death×5 inline-cleanup×5; missed: /);
  });
});
