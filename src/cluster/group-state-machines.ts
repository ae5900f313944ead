/**
 * The node's one RaftStateMachine, multiplexing every Raft group on the node to the state machine registered for it
 * (the metastorage registers `meta`; each hosted partition registers its own). A group must be registered before its
 * Raft group is added to the driver and stays registered until the group is removed; an entry for an unregistered
 * group is a bug, and the driver stops that group.
 *
 * Applying together (node setting `batchApply`, off by default): the entries the driver hands over for many groups in
 * one pass of the microtask queue (the Readies one turn of the event loop made) are applied in one storage
 * transaction, not one per group. A machine that can stage (`stage`: its storage writes, inside the caller's
 * transaction) joins the shared transaction; once it committed, each machine's volatile half runs, in the order the
 * groups were handed over, and each group's apply resolves. Nothing else runs in between: the applied state of every
 * group is visible before any of their effects. A failed shared transaction writes nothing (it aborts whole); each
 * group then applies on its own, so only a group whose own entries fail stops. A machine that cannot stage (the
 * metastorage's) applies at once, as without the setting.
 */
import { type CounterSink, NO_COUNTERS } from '../core/counters.js';
import { BasaltError } from '../core/errors.js';
import type { PartitionId } from '../core/ids.js';
import type { RaftStateMachine } from '../raft/driver.js';
import type { Entry, Snapshot } from '../raft/types.js';

/** The state machine of one group, as the multiplexer sees it. */
export interface GroupStateMachine {
  /** The index of the last entry applied (0 for a fresh state). */
  appliedIndex(): number;
  apply(entries: readonly Entry[]): void | Promise<void>;
  /**
   * Optional: the storage half of `apply`, joining the caller's storage transaction; returns the volatile half, to run
   * once that transaction committed (undefined when there is nothing to run). A throw must leave the volatile state
   * as it was: the caller then aborts the transaction and applies the same entries again.
   */
  stage?(entries: readonly Entry[]): (() => void) | undefined;
  snapshot(): Uint8Array | Promise<Uint8Array>;
  restore(snapshot: Snapshot): void | Promise<void>;
}

export interface GroupStateMachinesOptions {
  /**
   * Applying together (see the module header): runs `fn` as one storage transaction of the node's state storage (the
   * engine's `runConsistently`). Without it each group applies in a step of its own.
   */
  readonly atomically?: <T>(fn: () => T) => T;
  readonly counters?: CounterSink;
}

export const APPLY_COUNTERS = {
  /** Storage steps that applied the entries of groups whose machine can stage (the partitions): shared or not. */
  steps: 'apply.steps',
  /** Storage transactions that applied the entries of more than one group. */
  sharedTransactions: 'apply.sharedTransactions',
  /** Group applies that went into a shared transaction. */
  sharedGroups: 'apply.sharedGroups',
  /** Shared transactions that failed, after which each group applied on its own. */
  sharedFailures: 'apply.sharedFailures',
} as const;

interface GatheredApply {
  readonly machine: GroupStateMachine & Required<Pick<GroupStateMachine, 'stage'>>;
  readonly entries: readonly Entry[];
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

export class GroupStateMachines implements RaftStateMachine {
  private readonly machines = new Map<PartitionId, GroupStateMachine>();
  private readonly atomically: (<T>(fn: () => T) => T) | undefined;
  private readonly counters: CounterSink;
  /** Applies handed over since the last shared transaction, waiting for it. */
  private gathered: GatheredApply[] = [];

  constructor(options: GroupStateMachinesOptions = {}) {
    this.atomically = options.atomically;
    this.counters = options.counters ?? NO_COUNTERS;
  }

  /** Registers the state machine of `group`; returns the function that unregisters it. */
  register(group: PartitionId, machine: GroupStateMachine): () => void {
    if (this.machines.has(group)) {
      throw new BasaltError('ALREADY_EXISTS', `a state machine for ${group} is registered`, { group });
    }
    this.machines.set(group, machine);
    return () => {
      if (this.machines.get(group) === machine) this.machines.delete(group);
    };
  }

  has(group: PartitionId): boolean {
    return this.machines.has(group);
  }

  get(group: PartitionId): GroupStateMachine | undefined {
    return this.machines.get(group);
  }

  appliedIndex(group: PartitionId): number {
    return this.require(group).appliedIndex();
  }

  apply(group: PartitionId, entries: readonly Entry[]): void | Promise<void> {
    const machine = this.require(group);
    if (!canStage(machine)) return machine.apply(entries);
    if (this.atomically === undefined) {
      this.counters.add(APPLY_COUNTERS.steps);
      return machine.apply(entries);
    }
    return new Promise<void>((resolve, reject) => {
      this.gathered.push({ machine, entries, resolve, reject });
      // Every group whose Ready this turn already scheduled hands its entries over before this runs.
      if (this.gathered.length === 1) queueMicrotask(() => this.applyGathered());
    });
  }

  private applyGathered(): void {
    const batch = this.gathered;
    this.gathered = [];
    if (batch.length === 1) {
      const [one] = batch as [GatheredApply];
      this.counters.add(APPLY_COUNTERS.steps);
      settle(one, () => one.machine.apply(one.entries));
      return;
    }
    let finishers: ReadonlyArray<(() => void) | undefined>;
    try {
      finishers = this.atomically!(() => batch.map((a) => a.machine.stage(a.entries)));
    } catch {
      // The transaction aborted whole; one group's failure must not stop the others.
      this.counters.add(APPLY_COUNTERS.sharedFailures);
      this.counters.add(APPLY_COUNTERS.steps, batch.length);
      for (const a of batch) settle(a, () => a.machine.apply(a.entries));
      return;
    }
    this.counters.add(APPLY_COUNTERS.steps);
    this.counters.add(APPLY_COUNTERS.sharedTransactions);
    this.counters.add(APPLY_COUNTERS.sharedGroups, batch.length);
    batch.forEach((a, i) => {
      settle(a, () => finishers[i]?.());
    });
  }

  snapshot(group: PartitionId): Uint8Array | Promise<Uint8Array> {
    return this.require(group).snapshot();
  }

  restore(group: PartitionId, snapshot: Snapshot): void | Promise<void> {
    return this.require(group).restore(snapshot);
  }

  private require(group: PartitionId): GroupStateMachine {
    const machine = this.machines.get(group);
    if (machine === undefined) {
      throw new BasaltError('NOT_FOUND', `no state machine registered for raft group ${group}`, { group });
    }
    return machine;
  }
}

function canStage(machine: GroupStateMachine): machine is GatheredApply['machine'] {
  return machine.stage !== undefined;
}

/** Runs one gathered apply's remaining half and settles its promise with the outcome. */
function settle(apply: GatheredApply, run: () => void | Promise<void>): void {
  try {
    const done = run();
    if (done === undefined) apply.resolve();
    else done.then(apply.resolve, apply.reject);
  } catch (error) {
    apply.reject(error);
  }
}

/**
 * A state machine with no state: it only counts applied entries. It stands in for a partition's replica until the
 * replica layer registers a real one, and keeps the partition's Raft group electing and replicating meanwhile.
 */
export class EmptyStateMachine implements GroupStateMachine {
  private applied = 0;

  appliedIndex(): number {
    return this.applied;
  }

  apply(entries: readonly Entry[]): void {
    const last = entries.at(-1);
    if (last !== undefined) this.applied = last.index;
  }

  snapshot(): Uint8Array {
    return new Uint8Array(0);
  }

  restore(snapshot: Snapshot): void {
    this.applied = snapshot.index;
  }
}
