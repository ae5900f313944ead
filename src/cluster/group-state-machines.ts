/**
 * The node's one RaftStateMachine, multiplexing every Raft group on the node to the state machine registered for it
 * (the metastorage registers `meta`; each hosted partition registers its own). A group must be registered before its
 * Raft group is added to the driver and stays registered until the group is removed; an entry for an unregistered
 * group is a bug, and the driver stops that group.
 */
import { BasaltError } from '../core/errors.js';
import type { PartitionId } from '../core/ids.js';
import type { RaftStateMachine } from '../raft/driver.js';
import type { Entry, Snapshot } from '../raft/types.js';

/** The state machine of one group, as the multiplexer sees it. */
export interface GroupStateMachine {
  /** The index of the last entry applied (0 for a fresh state). */
  appliedIndex(): number;
  apply(entries: readonly Entry[]): void | Promise<void>;
  snapshot(): Uint8Array | Promise<Uint8Array>;
  restore(snapshot: Snapshot): void | Promise<void>;
}

export class GroupStateMachines implements RaftStateMachine {
  private readonly machines = new Map<PartitionId, GroupStateMachine>();

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
    return this.require(group).apply(entries);
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
