import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SeededRandom } from '../sim/random.js';
import { runRaftSimulation } from '../testing/raft-sim-cluster.js';

/**
 * Many seeded runs of whole clusters of Raft cores under drops, duplicates, delays, partitions, crashes and restarts,
 * and then as many with random configuration changes interleaved (two spare nodes join and leave, leaders remove
 * themselves). A failure names its seed; replay it alone with RAFT_SEED=<seed> (RAFT_SEEDS=<n> and
 * RAFT_MEMBERSHIP_SEEDS=<n> change how many seeds run; RAFT_SIZE=3|5 overrides the initial number of voters, which is
 * otherwise 5 for even seeds and 3 for odd ones).
 */
const only = process.env['RAFT_SEED'];
const seedCount = Number(process.env['RAFT_SEEDS'] ?? 500);
const seeds = only !== undefined ? [Number(only)] : Array.from({ length: seedCount }, (_, i) => i + 1);
const membershipSeedCount = Number(process.env['RAFT_MEMBERSHIP_SEEDS'] ?? 200);
const membershipSeeds =
  only !== undefined ? [Number(only)] : Array.from({ length: membershipSeedCount }, (_, i) => i + 1);

function runSeed(seed: number, membership = false, quiescence = false): ReturnType<typeof runRaftSimulation> {
  const size = Number(process.env['RAFT_SIZE'] ?? (seed % 2 === 0 ? 5 : 3));
  try {
    return runRaftSimulation(new SeededRandom(seed), { size, membership, quiescence });
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    const what =
      (membership ? 'raft simulation with membership changes' : 'raft simulation') +
      (quiescence ? ' and quiescence' : '');
    throw new Error(
      `${what} failed for seed ${seed} (${size} nodes); replay with RAFT_SEED=${seed} RAFT_SIZE=${size}: ${message}`,
      {
        cause: error,
      },
    );
  }
}

test(`every seed keeps Raft safe under faults and converges after healing (${seeds.length} seeds)`, () => {
  let acked = 0;
  let elections = 0;
  let snapshots = 0;
  let crashes = 0;
  for (const seed of seeds) {
    const r = runSeed(seed);
    acked += r.acked;
    elections += r.stats.elections;
    snapshots += r.stats.snapshotsSent;
    crashes += r.stats.crashes;
  }
  // The runs must have exercised what they claim to: commits, elections, snapshots and crashes.
  assert.ok(acked > seeds.length * 10, `only ${acked} acknowledged proposals`);
  assert.ok(elections >= seeds.length, `only ${elections} elections`);
  if (seeds.length >= 50) {
    assert.ok(snapshots > 0, 'no snapshot was ever sent');
    assert.ok(crashes > 0, 'no crash was ever injected');
  }
});

test(`every seed keeps Raft safe while configurations change under faults (${membershipSeeds.length} seeds)`, () => {
  let acked = 0;
  const totals = { confProposals: 0, committedAddLearner: 0, committedAddVoter: 0, committedPromote: 0 };
  const more = { committedRemove: 0, selfRemovals: 0, crashes: 0, partitions: 0 };
  for (const seed of membershipSeeds) {
    const r = runSeed(seed, true);
    acked += r.acked;
    for (const k of Object.keys(totals) as (keyof typeof totals)[]) totals[k] += r.stats[k];
    for (const k of Object.keys(more) as (keyof typeof more)[]) more[k] += r.stats[k];
  }
  assert.ok(acked > membershipSeeds.length * 10, `only ${acked} acknowledged proposals`);
  assert.ok(totals.confProposals >= membershipSeeds.length, `only ${totals.confProposals} changes proposed`);
  // Every kind of change committed, leaders removed themselves, and faults hit while changes were made.
  if (membershipSeeds.length >= 50) {
    for (const [k, v] of Object.entries({ ...totals, ...more })) assert.ok(v > 0, `${k} never happened`);
  }
});

/**
 * Seeds on which the simulation lost a committed entry (leader completeness failed) when a rule of raft.ts's
 * membership comment was left out of the core: 558 without rule 3 (a node campaigned, and won, with a committed
 * change not yet applied on it), 984 without rule 2's wait for a new leader's own noop (each with the simulation's
 * in-flight check off; with it on, that check fails them first). Both run 5 voters and 2 spares.
 */
const quietSeedCount = Number(process.env['RAFT_QUIET_SEEDS'] ?? 200);
const quietSeeds = only !== undefined ? [Number(only)] : Array.from({ length: quietSeedCount }, (_, i) => i + 1);

test(`every seed keeps Raft safe and converges with idle groups going quiet under faults (${quietSeeds.length} seeds)`, () => {
  const totals = { acked: 0, quiesced: 0, leaderGoneWakes: 0, quorumGoneWakes: 0, elections: 0, confApplied: 0 };
  for (const seed of quietSeeds) {
    // Odd seeds also change configurations, so that quiet groups meet membership changes too.
    const r = runSeed(seed, seed % 2 === 1, true);
    totals.acked += r.acked;
    totals.quiesced += r.stats.quiesced;
    totals.leaderGoneWakes += r.stats.leaderGoneWakes;
    totals.quorumGoneWakes += r.stats.quorumGoneWakes;
    totals.elections += r.stats.elections;
    totals.confApplied += r.stats.confApplied;
  }
  // Groups went quiet often, quiet followers woke when their leader's node went away, and work still got done.
  assert.ok(totals.quiesced >= quietSeeds.length, `only ${totals.quiesced} quiescences`);
  assert.ok(totals.acked > quietSeeds.length * 10, `only ${totals.acked} acknowledged proposals`);
  if (quietSeeds.length >= 50) {
    assert.ok(totals.leaderGoneWakes > 0, 'no quiet follower ever woke for a gone leader');
    assert.ok(totals.quorumGoneWakes > 0, 'no quiet leader ever woke for a lost quorum');
    assert.ok(totals.confApplied > 0, 'no configuration change met quiescence');
  }
});

test('fixed seeds that lost committed entries without the membership rules stay safe', () => {
  for (const seed of [558, 984]) {
    const r = runRaftSimulation(new SeededRandom(seed), { size: 5, membership: true });
    assert.ok(r.stats.confProposals > 0 && r.acked > 0);
  }
});

/**
 * Seed 1266 (3 voters, no snapshots): a voter added late must fetch a log of about 800 entries from the start; it
 * does not fit the convergence budget of runs without membership. (Seed 2077 showed it before commit indexes went to
 * followers on ticks instead of in empty Appends, which changed every run's course.)
 */
test('a voter added late catches up the whole log within the convergence budget (seed 1266)', () => {
  const r = runRaftSimulation(new SeededRandom(1266), { size: 3, membership: true });
  assert.ok(r.acked > 700, `acked ${r.acked}`);
  assert.ok(r.stats.committedAddVoter > 0 && r.stats.snapshotsSent === 0, 'a voter joined without a snapshot');
  assert.ok(r.unitsToConverge > 6000, `converged in ${r.unitsToConverge} units`);
});

/**
 * Seed 2539 (3 voters): a leader removed itself and only it learned the removal was committed; the survivors' pre-vote
 * needed the vote of a learner that had not applied its promotion, whose leader lease never ran out because its
 * election count started over at every timeout. The cluster never elected a leader again.
 */
test('a learner unaware of its promotion answers pre-votes once its leader is gone (seed 2539)', () => {
  const r = runRaftSimulation(new SeededRandom(2539), { size: 3, membership: true });
  assert.ok(r.stats.confApplied > 0);
});

test('one seed replays identically', () => {
  const a = runRaftSimulation(new SeededRandom(4242), { size: 5 });
  const b = runRaftSimulation(new SeededRandom(4242), { size: 5 });
  assert.deepEqual(a, b);
});

test('one seed with membership changes replays identically', () => {
  const a = runRaftSimulation(new SeededRandom(4243), { size: 3, membership: true });
  const b = runRaftSimulation(new SeededRandom(4243), { size: 3, membership: true });
  assert.ok(a.stats.confProposals > 0);
  assert.deepEqual(a, b);
});
