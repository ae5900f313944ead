/**
 * Moves partitions to their targets (metastorage `targets`), on the node that leads each partition's Raft group. One
 * step at a time per partition (placement.ts `nextMoveStep`): a learner is added on a target node, promoted once its
 * log caught up with the leader's, and only then is a replica the target drops removed; a dead voter the target drops
 * is removed first; a leader the target drops hands its leadership to a target voter before it is removed. That
 * hand-off is planned (rule 5): the leader's replica first stops renewing its lease and keeps serving until the lease
 * no longer lets it act, and only then does the leadership move, so the successor's lease, which starts at the
 * current expiration, follows within the stasis window, rather than a whole lease after a leader that left an
 * unexpired lease behind. Every configuration the group
 * reaches is reported to the metastorage (`ReportReplicas`), which makes it the assignment and drops the target once
 * reached; a leader that finds its group already at the target (its predecessor died before reporting) reports it.
 *
 * The metastorage group moves by the same steps toward the view's `metaTarget`, on the node that leads it; its reports
 * set the members' `meta` flags.
 *
 * Nothing here reads a clock or a timer directly: a `PeriodicTask` on the injected timers checks every
 * `MOVE_CHECK_INTERVAL_MS` while anything moves (every `MOVE_IDLE_CHECK_INTERVAL_MS` while the view names no target,
 * and at once when a new view arrives: `viewChanged`), and a partition whose step is in flight is skipped until it
 * settled. A step that fails (lost leadership, a change refused, a timeout) is counted and tried again on a later
 * check, from the configuration as it is then: the steps are decided from the group's state, never from memory of
 * earlier steps.
 */
import type { NodeName, PartitionId } from '../core/ids.js';
import { partitionId } from '../core/ids.js';
import { META_GROUP } from '../core/partitioning.js';
import { PeriodicTask, type Timers } from '../env/timers.js';
import type { ConfChange } from '../raft/conf-change.js';
import type { Status } from '../raft/types.js';
import type { MetaView } from './metastorage-state.js';
import { nextMoveStep } from './placement.js';

export const MOVE_CHECK_INTERVAL_MS = 200;
/** Between two checks while nothing moves (a new view brings the next one forward). */
export const MOVE_IDLE_CHECK_INTERVAL_MS = 2_000;
/** A learner within this many entries of the leader's last index counts as caught up. */
export const MOVE_CATCH_UP_LAG_MAX = 16;
/** A planned hand-off pauses the leader's lease renewals this long per check (renewals resume once checks stop). */
export const HAND_OFF_PAUSE_MS = 5 * MOVE_CHECK_INTERVAL_MS;
/**
 * A planned hand-off is tried for this many checks (enough for a whole lease to run out, and an election); if the
 * leadership has not moved by then (the successor cannot take it), the leader renews its lease again and goes on with
 * plain transfers, so a hand-off that cannot happen never leaves its partition without a lease for long.
 */
export const HAND_OFF_PLANNED_CHECKS = 40;

export const MOVE_COUNTERS = {
  steps: 'moves.steps',
  failures: 'moves.failures',
  completed: 'moves.completed',
} as const;

export interface PartitionMoverPorts {
  readonly self: NodeName;
  readonly view: () => MetaView | undefined;
  /** The Raft status of a group this node runs (undefined if it runs none). */
  readonly status: (group: PartitionId) => Status | undefined;
  /** Leader only: the highest log index `node` is known to hold (undefined when not leading or not a member). */
  readonly matchOf: (group: PartitionId, node: NodeName) => number | undefined;
  readonly proposeConfChange: (group: PartitionId, change: ConfChange) => Promise<unknown>;
  readonly transferLeader: (group: PartitionId, to: NodeName) => boolean;
  /**
   * Before the leadership moves away: pauses this node's lease renewals on `group` for `pauseMs`, and says whether its
   * lease no longer lets it act (true also when it holds none), i.e. whether the leadership may move now.
   */
  readonly readyToHandOff: (group: PartitionId, pauseMs: number) => boolean;
  /** Records the voters a group reached (metastorage ReportReplicas). */
  readonly report: (group: PartitionId, voters: readonly NodeName[]) => Promise<unknown>;
  readonly isLive: (node: NodeName) => boolean;
  readonly timers: Timers;
  readonly count: (name: string) => void;
  readonly onError: (error: unknown) => void;
}

export class PartitionMover {
  private readonly task: PeriodicTask;
  private readonly inFlight = new Set<PartitionId>();
  /** Consecutive checks at a `transfer-leader` step, per partition. */
  private readonly handOffChecks = new Map<PartitionId, number>();

  constructor(private readonly ports: PartitionMoverPorts) {
    this.task = new PeriodicTask(ports.timers, MOVE_CHECK_INTERVAL_MS, () => this.check(), ports.onError);
  }

  start(): void {
    this.task.start();
  }

  stop(): void {
    this.task.stop();
  }

  /** Partitions with a step in flight here. */
  get moving(): number {
    return this.inFlight.size;
  }

  /** The metastorage view changed: the next check runs now. */
  viewChanged(): void {
    this.task.runSoon();
  }

  /**
   * One check: a step for every moving partition this node leads and has no step in flight for. Returns the delay
   * before the next check.
   */
  check(): number {
    const view = this.ports.view();
    const handingOff = new Set<PartitionId>();
    const moving = [...(view?.targets ?? [])];
    // The metastorage group moves the same way, on the node that leads it.
    if (view?.metaTarget !== undefined) moving.push([META_GROUP, view.metaTarget]);
    for (const [id, target] of moving) {
      const group = partitionId(id);
      if (this.inFlight.has(group)) continue;
      const status = this.ports.status(group);
      if (status === undefined || status.role !== 'leader' || status.pendingConfIndex > status.applied) continue;
      if (this.step(group, status, target as NodeName[])) handingOff.add(group);
    }
    for (const group of this.handOffChecks.keys()) if (!handingOff.has(group)) this.handOffChecks.delete(group);
    return moving.length === 0 && this.inFlight.size === 0 ? MOVE_IDLE_CHECK_INTERVAL_MS : MOVE_CHECK_INTERVAL_MS;
  }

  /** Takes the next step of `group`; true if that step is handing the leadership off. */
  private step(group: PartitionId, status: Status, target: readonly NodeName[]): boolean {
    const { ports } = this;
    const step = nextMoveStep({
      conf: { voters: status.voters, learners: status.learners },
      target,
      leader: ports.self,
      caughtUp: (node) => (ports.matchOf(group, node) ?? -1) >= status.lastIndex - MOVE_CATCH_UP_LAG_MAX,
      live: ports.isLive,
    });
    switch (step.kind) {
      case 'wait':
        return false;
      case 'transfer-leader': {
        const checks = (this.handOffChecks.get(group) ?? 0) + 1;
        this.handOffChecks.set(group, checks);
        const planned = checks <= HAND_OFF_PLANNED_CHECKS;
        if (planned && !ports.readyToHandOff(group, HAND_OFF_PAUSE_MS)) return true;
        if (ports.transferLeader(group, step.to)) ports.count(MOVE_COUNTERS.steps);
        return true;
      }
      case 'done':
        // At the target, and the view still lists it: the report of the last step is missing or not applied yet.
        this.run(group, () => ports.report(group, status.voters), MOVE_COUNTERS.completed);
        return false;
      default: {
        const change: ConfChange = { type: step.kind, node: step.node };
        this.run(
          group,
          async () => {
            await ports.proposeConfChange(group, change);
            // Voters changed: the metastorage learns where the partition's replicas are now.
            if (change.type !== 'add-learner') {
              const now = ports.status(group);
              if (now !== undefined) await ports.report(group, now.voters);
            }
          },
          MOVE_COUNTERS.steps,
        );
        return false;
      }
    }
  }

  private run(group: PartitionId, work: () => Promise<unknown>, counter: string): void {
    this.inFlight.add(group);
    work().then(
      () => {
        this.inFlight.delete(group);
        this.ports.count(counter);
      },
      () => {
        this.inFlight.delete(group);
        this.ports.count(MOVE_COUNTERS.failures);
      },
    );
  }
}
