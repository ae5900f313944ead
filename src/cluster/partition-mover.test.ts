import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type NodeName, nodeName, type PartitionId, partitionId } from '../core/ids.js';
import type { TimerHandle, Timers } from '../env/timers.js';
import { applyConfChange, type ConfChange, type ConfState, confState } from '../raft/conf-change.js';
import type { Status } from '../raft/types.js';
import { EMPTY_META_VIEW, type MetaView } from './metastorage-state.js';
import {
  HAND_OFF_PAUSE_MS,
  HAND_OFF_PLANNED_CHECKS,
  MOVE_CHECK_INTERVAL_MS,
  MOVE_COUNTERS,
  PartitionMover,
} from './partition-mover.js';

const P = partitionId('t1p0');
const names = (...n: string[]): NodeName[] => n.map(nodeName);
const flush = () => new Promise((r) => setImmediate(r));

const noTimers: Timers = {
  setTimer: (): TimerHandle => ({ timerId: 0 }),
  clearTimer: () => {},
};

/** One Raft group as its leader sees it, and the metastorage view of its move. */
class Group {
  conf: ConfState;
  role: Status['role'] = 'leader';
  lastIndex = 100;
  readonly caughtUp = new Set<NodeName>();
  readonly changes: string[] = [];
  readonly reports: string[] = [];
  readonly counts = new Map<string, number>();
  readonly transfers: string[] = [];
  /** Checks the leader's lease still lets it act for (a planned hand-off waits them out); the pauses asked. */
  actingChecks = 0;
  /** A transfer makes this node a follower (false: the successor never takes the leadership). */
  transferTakes = true;
  readonly pauses: number[] = [];
  failNext = false;
  view: MetaView;

  constructor(voters: readonly string[], target: readonly string[]) {
    this.conf = confState(names(...voters));
    // The voters are in step with the leader; a learner catches up when a test says so.
    for (const voter of voters) this.caughtUp.add(nodeName(voter));
    this.view = { ...EMPTY_META_VIEW, assignments: [[P, voters]], targets: [[P, target]] };
  }

  status(): Status {
    return {
      self: nodeName('n1'),
      role: this.role,
      term: 3 as never,
      vote: null,
      leader: this.role === 'leader' ? nodeName('n1') : null,
      commit: this.lastIndex as never,
      applied: this.lastIndex as never,
      lastIndex: this.lastIndex as never,
      snapshotIndex: 0 as never,
      transferee: null,
      voters: this.conf.voters,
      learners: this.conf.learners,
      pendingConfIndex: 0 as never,
    };
  }

  mover(dead: readonly string[] = []): PartitionMover {
    return new PartitionMover({
      self: nodeName('n1'),
      view: () => this.view,
      status: (g: PartitionId) => (g === P ? this.status() : undefined),
      matchOf: (_g, node) => (this.caughtUp.has(node) ? this.lastIndex : 0),
      proposeConfChange: async (_g, change: ConfChange) => {
        if (this.failNext) {
          this.failNext = false;
          throw new Error('leadership lost');
        }
        const next = applyConfChange(this.conf, change);
        if (next instanceof Error) throw next;
        this.conf = next;
        this.lastIndex++;
        this.changes.push(`${change.type} ${change.node}`);
      },
      readyToHandOff: (_g, pauseMs) => {
        this.pauses.push(pauseMs);
        return this.actingChecks-- <= 0;
      },
      transferLeader: (_g, to) => {
        this.transfers.push(to);
        if (this.transferTakes) this.role = 'follower';
        return true;
      },
      report: async (_g, voters) => {
        this.reports.push(voters.join(','));
        const target = this.view.targets?.[0]?.[1] ?? [];
        const reached = voters.length === target.length && voters.every((v) => target.includes(v));
        this.view = { ...this.view, assignments: [[P, voters]], targets: reached ? [] : this.view.targets! };
      },
      isLive: (node) => !dead.includes(node),
      timers: noTimers,
      count: (name) => this.counts.set(name, (this.counts.get(name) ?? 0) + 1),
      onError: (error) => assert.fail(String(error)),
    });
  }
}

async function checks(mover: PartitionMover, n: number, between: () => void = () => {}): Promise<void> {
  for (let i = 0; i < n; i++) {
    mover.check();
    await flush();
    between();
  }
}

test('a replica moves: learner, caught up, promoted, source removed; each reached configuration is reported', async () => {
  const group = new Group(['n1', 'n2', 'n3'], ['n1', 'n2', 'n4']);
  const mover = group.mover();
  await checks(mover, 3);
  assert.deepEqual(group.changes, ['add-learner n4'], 'the learner waits until it caught up');
  group.caughtUp.add(nodeName('n4'));
  await checks(mover, 4);
  assert.deepEqual(group.changes, ['add-learner n4', 'promote n4', 'remove n3']);
  assert.deepEqual(group.reports, ['n1,n2,n3,n4', 'n1,n2,n4']);
  assert.deepEqual(group.view.targets, [], 'the target was reached');
  assert.equal(group.counts.get(MOVE_COUNTERS.steps), 3);
});

test('a leader the target drops hands its leadership over and stops moving the partition', async () => {
  const group = new Group(['n1', 'n2', 'n3'], ['n2', 'n3', 'n4']);
  group.caughtUp.add(nodeName('n4'));
  const mover = group.mover();
  await checks(mover, 6);
  assert.deepEqual(group.changes, ['add-learner n4', 'promote n4']);
  assert.deepEqual(group.transfers, ['n2']);
  assert.equal(group.role, 'follower', 'the new leader removes n1');
});

test('the leadership moves only once the leader lease no longer lets it act; renewals are paused meanwhile', async () => {
  const group = new Group(['n1', 'n2', 'n3', 'n4'], ['n2', 'n3', 'n4']);
  group.actingChecks = 3;
  const mover = group.mover();
  await checks(mover, 3);
  assert.deepEqual(group.transfers, [], 'no transfer while the lease still lets n1 act');
  assert.deepEqual(group.pauses, [HAND_OFF_PAUSE_MS, HAND_OFF_PAUSE_MS, HAND_OFF_PAUSE_MS], 'each check pauses again');
  assert.ok(HAND_OFF_PAUSE_MS > MOVE_CHECK_INTERVAL_MS, 'a pause outlasts the interval between two checks');
  await checks(mover, 1);
  assert.deepEqual(group.transfers, ['n2']);
});

test('a hand-off whose successor never takes the leadership stops pausing renewals after a bounded number of checks', async () => {
  const group = new Group(['n1', 'n2', 'n3', 'n4'], ['n2', 'n3', 'n4']);
  group.actingChecks = Number.POSITIVE_INFINITY;
  group.transferTakes = false;
  const mover = group.mover();
  await checks(mover, HAND_OFF_PLANNED_CHECKS + 5);
  assert.equal(group.pauses.length, HAND_OFF_PLANNED_CHECKS, 'renewals were paused for the planned checks only');
  assert.deepEqual(group.transfers, ['n2', 'n2', 'n2', 'n2', 'n2'], 'then plain transfers are tried, as at any time');
});

test('a dead voter the target drops is removed before its replacement is added', async () => {
  const group = new Group(['n1', 'n2', 'n3'], ['n1', 'n2', 'n4']);
  group.caughtUp.add(nodeName('n4'));
  await checks(group.mover(['n3']), 5);
  assert.deepEqual(group.changes, ['remove n3', 'add-learner n4', 'promote n4']);
  assert.deepEqual(group.view.targets, []);
});

test('a failed step is counted and decided again from the group as it is; a follower does nothing', async () => {
  const group = new Group(['n1', 'n2', 'n3'], ['n1', 'n2', 'n4']);
  group.failNext = true;
  const mover = group.mover();
  await checks(mover, 1);
  assert.equal(group.counts.get(MOVE_COUNTERS.failures), 1);
  assert.deepEqual(group.changes, []);
  group.role = 'follower';
  await checks(mover, 2);
  assert.deepEqual(group.changes, [], 'only the leader moves a partition');
  group.role = 'leader';
  await checks(mover, 1);
  assert.deepEqual(group.changes, ['add-learner n4']);
});

test('a leader that finds its group at the target (its predecessor did not report) reports it', async () => {
  const group = new Group(['n1', 'n2', 'n4'], ['n1', 'n2', 'n4']);
  group.view = { ...group.view, assignments: [[P, ['n1', 'n2', 'n3']]] };
  await checks(group.mover(), 2);
  assert.deepEqual(group.reports, ['n1,n2,n4']);
  assert.deepEqual(group.view.targets, []);
  assert.equal(group.counts.get(MOVE_COUNTERS.completed), 1);
});
