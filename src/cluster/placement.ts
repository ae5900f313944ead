/**
 * Where replicas go when the members change, and how a partition gets there: pure functions, the same on every node.
 *
 * `planPlacement` computes target replica lists from the current ones and the members that may hold replicas. It moves
 * as little as it can: a replica on a member stays, one on a node that is leaving or gone is replaced by the
 * least-loaded member that does not hold the partition yet, and then single replicas move from the most-loaded member
 * to the least-loaded one until loads differ by at most one (replicas are spread evenly). The first name of a list is
 * the partition's preferred leader; preferred leaders are then spread the same way, by reordering lists (which moves
 * no data). Ties go by a rotation that starts at the partition's position, so that equal loads spread as well.
 *
 * `nextMoveStep` is one step of a partition's move from its Raft configuration to a target list, replica by replica,
 * one configuration change at a time (the etcd-raft rule that conf-change.ts states): a missing replica is added as a
 * learner, promoted once it caught up with the log, and only then is a replica the target drops removed, so that the
 * partition never has fewer up-to-date replicas than it had; a voter the target drops that is no longer live is
 * removed first (adding a voter beside a dead one would make a majority need every live node); the leader is never
 * removed while it leads (leadership moves first).
 *
 * Invariants of a plan: every list has distinct names, all of them members; its length is the partition's replica
 * count, or the member count when there are fewer members; a partition whose replicas are all on members and whose
 * members are within one of each other's loads keeps its list as a set.
 */
import type { NodeName, PartitionId } from '../core/ids.js';
import type { ConfState } from '../raft/conf-change.js';

export interface PartitionPlacement {
  readonly id: PartitionId;
  /** The table's replica count. */
  readonly replicas: number;
  /** Where its replicas are now (the assignment), preferred leader first. */
  readonly current: readonly NodeName[];
}

export interface PlacementInput {
  /** The nodes that may hold replicas (active members; a leaving or dead node is not among them). */
  readonly members: readonly NodeName[];
  readonly partitions: readonly PartitionPlacement[];
}

/** Target replica lists by partition id, for every partition of the input. */
export function planPlacement(input: PlacementInput): Map<PartitionId, NodeName[]> {
  const members = [...new Set(input.members)].sort();
  const partitions = [...input.partitions].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  const plan = new Map<PartitionId, NodeName[]>();
  if (members.length === 0) {
    for (const p of partitions) plan.set(p.id, []);
    return plan;
  }
  const memberSet = new Set(members);
  const load = new Map<NodeName, number>(members.map((m) => [m, 0]));
  for (const p of partitions) {
    const kept = [...new Set(p.current)].filter((n) => memberSet.has(n)).slice(0, p.replicas);
    for (const n of kept) load.set(n, load.get(n)! + 1);
    plan.set(p.id, kept);
  }
  partitions.forEach((p, position) => {
    const list = plan.get(p.id)!;
    const want = Math.min(p.replicas, members.length);
    while (list.length < want) {
      const pick = leastLoaded(members, load, position, (n) => !list.includes(n));
      list.push(pick!);
      load.set(pick!, load.get(pick!)! + 1);
    }
  });
  balanceReplicas(members, partitions, plan, load);
  balanceLeaders(members, partitions, plan);
  return plan;
}

/** Moves single replicas from the most to the least loaded member while their loads differ by more than one. */
function balanceReplicas(
  members: readonly NodeName[],
  partitions: readonly PartitionPlacement[],
  plan: Map<PartitionId, NodeName[]>,
  load: Map<NodeName, number>,
): void {
  // Each move lowers the sum of squared loads, so this ends; the bound only guards against a mistake here.
  for (let moves = 0; moves <= partitions.length * members.length; moves++) {
    const byLoad = [...members].sort((a, b) => load.get(a)! - load.get(b)! || (a < b ? -1 : 1));
    const low = byLoad[0]!;
    const high = byLoad[byLoad.length - 1]!;
    if (load.get(high)! - load.get(low)! <= 1) return;
    const list = partitions.map((p) => plan.get(p.id)!).find((l) => l.includes(high) && !l.includes(low));
    if (list === undefined) return;
    list[list.indexOf(high)] = low;
    load.set(high, load.get(high)! - 1);
    load.set(low, load.get(low)! + 1);
  }
}

/** Reorders lists so that preferred leaders (first names) are spread within one of each other. */
function balanceLeaders(
  members: readonly NodeName[],
  partitions: readonly PartitionPlacement[],
  plan: Map<PartitionId, NodeName[]>,
): void {
  const leads = new Map<NodeName, number>(members.map((m) => [m, 0]));
  const lists = partitions.map((p) => plan.get(p.id)!).filter((l) => l.length > 0);
  for (const l of lists) leads.set(l[0]!, leads.get(l[0]!)! + 1);
  for (let moves = 0; moves <= lists.length * members.length; moves++) {
    const byLeads = [...members].sort((a, b) => leads.get(a)! - leads.get(b)! || (a < b ? -1 : 1));
    let moved = false;
    // The most-leading member hands one leadership to the least-leading member that holds a replica beside it.
    for (const low of byLeads) {
      const high = byLeads[byLeads.length - 1]!;
      if (leads.get(high)! - leads.get(low)! <= 1) break;
      const list = lists.find((l) => l[0] === high && l.includes(low));
      if (list === undefined) continue;
      list.splice(list.indexOf(low), 1);
      list.unshift(low);
      leads.set(high, leads.get(high)! - 1);
      leads.set(low, leads.get(low)! + 1);
      moved = true;
      break;
    }
    if (!moved) return;
  }
}

/** The least-loaded member `allowed` accepts; ties by rotation distance from `start`. */
function leastLoaded(
  members: readonly NodeName[],
  load: ReadonlyMap<NodeName, number>,
  start: number,
  allowed: (n: NodeName) => boolean,
): NodeName | undefined {
  let best: NodeName | undefined;
  let bestKey = Number.POSITIVE_INFINITY;
  members.forEach((m, i) => {
    if (!allowed(m)) return;
    const key = load.get(m)! * members.length + ((i - (start % members.length) + members.length) % members.length);
    if (key < bestKey) {
      bestKey = key;
      best = m;
    }
  });
  return best;
}

export type MoveStep =
  | { readonly kind: 'add-learner'; readonly node: NodeName }
  | { readonly kind: 'promote'; readonly node: NodeName }
  | { readonly kind: 'remove'; readonly node: NodeName }
  /** The leader is to be removed: hand the leadership to `to` first. */
  | { readonly kind: 'transfer-leader'; readonly to: NodeName }
  /** A learner is still catching up: nothing to do until it has. */
  | { readonly kind: 'wait'; readonly node: NodeName }
  | { readonly kind: 'done' };

export interface MoveInput {
  readonly conf: ConfState;
  readonly target: readonly NodeName[];
  /** The group's current leader (the node deciding). */
  readonly leader: NodeName;
  /** Whether a replica's log has caught up with the leader's (close enough to count in a quorum at once). */
  readonly caughtUp: (node: NodeName) => boolean;
  readonly live: (node: NodeName) => boolean;
}

/** The next configuration change toward `target` (see the module comment for the order). */
export function nextMoveStep(input: MoveInput): MoveStep {
  const { conf, target, leader } = input;
  const wanted = new Set(target);
  const strayLearner = conf.learners.find((n) => !wanted.has(n));
  if (strayLearner !== undefined) return { kind: 'remove', node: strayLearner };
  const deadLeaving = conf.voters.find((n) => !wanted.has(n) && n !== leader && !input.live(n));
  if (deadLeaving !== undefined && conf.voters.length > 1) return { kind: 'remove', node: deadLeaving };
  const learner = conf.learners[0];
  if (learner !== undefined) {
    return input.caughtUp(learner) ? { kind: 'promote', node: learner } : { kind: 'wait', node: learner };
  }
  const missing = target.find((n) => !conf.voters.includes(n));
  if (missing !== undefined) return { kind: 'add-learner', node: missing };
  const leaving = conf.voters.find((n) => !wanted.has(n));
  if (leaving === undefined) return { kind: 'done' };
  if (leaving !== leader) return { kind: 'remove', node: leaving };
  const successor =
    target.find((n) => n !== leader && input.live(n) && input.caughtUp(n)) ??
    target.find((n) => n !== leader && input.live(n)) ??
    target.find((n) => n !== leader);
  return successor === undefined ? { kind: 'done' } : { kind: 'transfer-leader', to: successor };
}
