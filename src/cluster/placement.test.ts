import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { type NodeName, nodeName, type PartitionId, partitionId } from '../core/ids.js';
import { applyConfChange, type ConfState, confState } from '../raft/conf-change.js';
import { type MoveInput, type MoveStep, nextMoveStep, type PartitionPlacement, planPlacement } from './placement.js';

const names = (...n: string[]): NodeName[] => n.map(nodeName);
const pid = (i: number): PartitionId => partitionId(`t1p${String(i).padStart(2, '0')}`);

function partitions(count: number, replicas: number, current: (i: number) => readonly string[] = () => []) {
  return Array.from(
    { length: count },
    (_, i): PartitionPlacement => ({
      id: pid(i),
      replicas,
      current: names(...current(i)),
    }),
  );
}

function loads(plan: ReadonlyMap<PartitionId, readonly NodeName[]>): Map<NodeName, number> {
  const load = new Map<NodeName, number>();
  for (const list of plan.values()) for (const n of list) load.set(n, (load.get(n) ?? 0) + 1);
  return load;
}

function leaders(plan: ReadonlyMap<PartitionId, readonly NodeName[]>): Map<NodeName, number> {
  const lead = new Map<NodeName, number>();
  for (const list of plan.values()) if (list[0] !== undefined) lead.set(list[0], (lead.get(list[0]) ?? 0) + 1);
  return lead;
}

/** Replicas (partition, node) a plan places where the current lists had none. */
function moved(input: readonly PartitionPlacement[], plan: ReadonlyMap<PartitionId, readonly NodeName[]>): number {
  return input.reduce((sum, p) => sum + plan.get(p.id)!.filter((n) => !p.current.includes(n)).length, 0);
}

const spread = (values: Iterable<number>): number => Math.max(...values) - Math.min(...values);

describe('planPlacement', () => {
  it('places a new table evenly: every replica count met, preferred leaders spread', () => {
    const plan = planPlacement({ members: names('n1', 'n2', 'n3', 'n4'), partitions: partitions(8, 3) });
    for (const list of plan.values()) assert.equal(new Set(list).size, 3);
    assert.deepEqual([...loads(plan).values()].sort(), [6, 6, 6, 6]);
    assert.ok(spread(leaders(plan).values()) <= 1, JSON.stringify([...leaders(plan)]));
  });

  it('two members join three: only the excess moves onto them, loads within one', () => {
    const input = partitions(8, 3, () => ['n1', 'n2', 'n3']);
    const plan = planPlacement({ members: names('n1', 'n2', 'n3', 'n4', 'n5'), partitions: input });
    const load = loads(plan);
    assert.ok(spread(load.values()) <= 1, JSON.stringify([...load]));
    assert.equal((load.get(nodeName('n4')) ?? 0) + (load.get(nodeName('n5')) ?? 0), 9);
    assert.equal(moved(input, plan), 9, 'exactly the replicas the new members take move');
    assert.equal(leaders(plan).size, 5, 'every member leads some partition');
  });

  it('a member that leaves (or died) has its replicas rebuilt on the others, nothing else moves', () => {
    const input = partitions(
      6,
      3,
      (i) =>
        [
          ['n1', 'n2', 'n3'],
          ['n2', 'n3', 'n4'],
          ['n3', 'n4', 'n1'],
        ][i % 3]!,
    );
    const plan = planPlacement({ members: names('n1', 'n2', 'n4'), partitions: input });
    for (const [id, list] of plan) {
      assert.ok(!list.includes(nodeName('n3')), `${id} left n3`);
      assert.equal(new Set(list).size, 3);
    }
    assert.equal(moved(input, plan), 6, 'one new replica per partition n3 held');
  });

  it('a balanced placement stays as it is', () => {
    const input = partitions(
      6,
      2,
      (i) =>
        [
          ['n1', 'n2'],
          ['n2', 'n3'],
          ['n3', 'n1'],
        ][i % 3]!,
    );
    const plan = planPlacement({ members: names('n1', 'n2', 'n3'), partitions: input });
    for (const p of input) assert.deepEqual([...plan.get(p.id)!].sort(), [...p.current].sort());
  });

  it('fewer members than replicas: every member holds the partition', () => {
    const plan = planPlacement({ members: names('n1', 'n2'), partitions: partitions(2, 3, () => ['n1', 'n9']) });
    for (const list of plan.values()) assert.deepEqual([...list].sort(), names('n1', 'n2'));
  });

  it('property: distinct members, replica counts met, loads within one, independent of input order', () => {
    const member = fc.constantFrom(...names('n1', 'n2', 'n3', 'n4', 'n5', 'n6', 'n7'));
    fc.assert(
      fc.property(
        fc.uniqueArray(member, { minLength: 1, maxLength: 7 }),
        fc.array(fc.record({ replicas: fc.integer({ min: 1, max: 5 }), current: fc.array(member, { maxLength: 6 }) }), {
          maxLength: 24,
        }),
        (members, specs) => {
          const input = specs.map((s, i) => ({ id: pid(i), replicas: s.replicas, current: s.current }));
          const plan = planPlacement({ members, partitions: input });
          for (const p of input) {
            const list = plan.get(p.id)!;
            assert.equal(new Set(list).size, list.length);
            assert.ok(list.every((n) => members.includes(n)));
            assert.equal(list.length, Math.min(p.replicas, members.length));
          }
          const load = loads(plan);
          for (const m of members) load.set(m, load.get(m) ?? 0);
          if (input.length > 0) assert.ok(spread(load.values()) <= 1, JSON.stringify([...load]));
          const again = planPlacement({ members: [...members].reverse(), partitions: [...input].reverse() });
          assert.deepEqual([...again].sort(), [...plan].sort());
        },
      ),
      { seed: 15, numRuns: 300 },
    );
  });
});

describe('nextMoveStep', () => {
  const everyoneLive = () => true;

  /** Runs steps to the end, applying each to the configuration; returns the steps taken. */
  function drive(start: ConfState, target: readonly NodeName[], options: Partial<MoveInput> = {}): MoveStep[] {
    let conf = start;
    const { leader: first, ...rest } = options;
    let leader = first ?? start.voters[0]!;
    const steps: MoveStep[] = [];
    // The founding voters are in step with the leader; a learner catches up after one wait.
    const caughtUp = new Set<NodeName>(start.voters);
    for (let i = 0; i < 20; i++) {
      const step = nextMoveStep({
        conf,
        target,
        leader,
        caughtUp: (n) => caughtUp.has(n),
        live: everyoneLive,
        ...rest,
      });
      steps.push(step);
      if (step.kind === 'done') return steps;
      if (step.kind === 'wait') {
        caughtUp.add(step.node);
        continue;
      }
      if (step.kind === 'transfer-leader') {
        leader = step.to;
        continue;
      }
      const type = step.kind;
      const next = applyConfChange(conf, { type, node: step.node });
      assert.ok(!(next instanceof Error), `${type} ${step.node} applies to ${JSON.stringify(conf)}`);
      conf = next as ConfState;
    }
    assert.fail(`no end after 20 steps: ${JSON.stringify(steps)}`);
  }

  it('moves one replica: learner, catch-up, promote, then remove the source', () => {
    const steps = drive(confState(names('n1', 'n2', 'n3')), names('n1', 'n2', 'n4'));
    assert.deepEqual(
      steps.map((s) => `${s.kind} ${'node' in s ? s.node : 'to' in s ? s.to : ''}`.trim()),
      ['add-learner n4', 'wait n4', 'promote n4', 'remove n3', 'done'],
    );
  });

  it('the leader is moved off before it is removed', () => {
    const steps = drive(confState(names('n1', 'n2', 'n3')), names('n2', 'n3', 'n4'), { leader: nodeName('n1') });
    const kinds = steps.map((s) => s.kind);
    assert.deepEqual(kinds, ['add-learner', 'wait', 'promote', 'transfer-leader', 'remove', 'done']);
    assert.deepEqual(steps[3], { kind: 'transfer-leader', to: 'n2' });
  });

  it('the leadership goes to a target voter that caught up, before one that lags (it may never take it)', () => {
    const lagging = nodeName('n2');
    assert.deepEqual(
      nextMoveStep({
        conf: confState(names('n1', 'n2', 'n3')),
        target: names('n2', 'n3'),
        leader: nodeName('n1'),
        caughtUp: (n) => n !== lagging,
        live: everyoneLive,
      }),
      { kind: 'transfer-leader', to: 'n3' },
    );
  });

  it('a dead voter the target drops is removed before its replacement is added', () => {
    const dead = nodeName('n3');
    const steps = drive(confState(names('n1', 'n2', 'n3')), names('n1', 'n2', 'n4'), { live: (n) => n !== dead });
    assert.deepEqual(steps[0], { kind: 'remove', node: 'n3' });
    assert.deepEqual(
      steps.slice(1).map((s) => s.kind),
      ['add-learner', 'wait', 'promote', 'done'],
    );
  });

  it('a learner the target no longer wants is removed', () => {
    assert.deepEqual(
      nextMoveStep({
        conf: confState(names('n1', 'n2', 'n3'), names('n5')),
        target: names('n1', 'n2', 'n3'),
        leader: nodeName('n1'),
        caughtUp: () => true,
        live: everyoneLive,
      }),
      { kind: 'remove', node: 'n5' },
    );
  });

  it('property: every step applies, the end is the target, and voters never drop below what both sides have', () => {
    const member = fc.constantFrom(...names('n1', 'n2', 'n3', 'n4', 'n5', 'n6'));
    fc.assert(
      fc.property(
        fc.uniqueArray(member, { minLength: 1, maxLength: 5 }),
        fc.uniqueArray(member, { minLength: 1, maxLength: 5 }),
        (voters, target) => {
          const floor = Math.min(voters.length, target.length);
          let conf = confState(voters);
          let leader = voters[0]!;
          const caught = new Set<NodeName>();
          for (let i = 0; i < 40; i++) {
            const step = nextMoveStep({ conf, target, leader, caughtUp: (n) => caught.has(n), live: everyoneLive });
            if (step.kind === 'done') {
              assert.deepEqual([...conf.voters].sort(), [...target].sort());
              assert.deepEqual(conf.learners, []);
              return;
            }
            if (step.kind === 'wait') caught.add(step.node);
            else if (step.kind === 'transfer-leader') leader = step.to;
            else {
              const next = applyConfChange(conf, { type: step.kind, node: step.node });
              assert.ok(!(next instanceof Error), String(next));
              conf = next as ConfState;
              assert.ok(conf.voters.length >= floor, `voters ${conf.voters} below ${floor}`);
              assert.ok(conf.voters.includes(leader), 'the leader is never removed');
            }
          }
          assert.fail('no end after 40 steps');
        },
      ),
      { seed: 15, numRuns: 300 },
    );
  });
});
