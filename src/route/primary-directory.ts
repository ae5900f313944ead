/**
 * Where a partition's primary is, as this node knows it: the one interface every route to a primary takes
 * (send-to-primary.ts), whether the coordinator, write intent resolution, recovery or cleanup is sending.
 *
 * A directory answers with its best guess at once and learns as routes go: a response or a PRIMARY_MISS that names
 * the holder (`note`), a miss that names nobody (`forget`: that node is not guessed first again). The node's
 * directory is `hintsDirectory` over its `PrimaryHints`: a locally hosted replica's applied lease is the truth, then
 * the holder learned last, then a guess that rotates among the partition's live replicas. A test implements the
 * interface with whatever fixed or scripted answers it needs.
 */
import { assert } from '../core/assert.js';
import { BasaltError } from '../core/errors.js';
import type { NodeName, PartitionId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';

export interface PrimaryDirectory {
  /** The best guess now; throws NODE_UNAVAILABLE (`executed: 'no'`) when no replica of the partition is known here. */
  locate(partitionId: PartitionId): NodeName;
  /** Learns that `name` is (or was just now) the primary; a directory that only guesses leaves it out. */
  note?(partitionId: PartitionId, name: NodeName): void;
  /** Learns that `name` is not the primary and named none (a miss without a holder): guess again next time. */
  forget?(partitionId: PartitionId, name: NodeName): void;
}

/**
 * `directory.locate`, or `fallback` when it throws: no replica of the partition is known here, or its table is gone.
 * For callers to whom a guess is only a preference (cleanup targets, the commit partition choice, client routing).
 */
export function locateOr<T>(directory: PrimaryDirectory, partitionId: PartitionId, fallback: T): NodeName | T {
  try {
    return directory.locate(partitionId);
  } catch {
    return fallback;
  }
}

/**
 * Best-known primaries of partitions: learned from responses and PRIMARY_MISS hints, else guessed among the assigned
 * replicas (rotating, so that repeated guesses try every replica).
 */
export class PrimaryHints {
  private readonly learned = new Map<PartitionId, NodeName>();
  private readonly rotation = new Map<PartitionId, number>();

  constructor(
    private readonly replicasOf: (partitionId: PartitionId) => readonly NodeName[] | undefined,
    private readonly localHolder: (partitionId: PartitionId) => NodeName | undefined,
    private readonly isLive: (name: NodeName) => boolean = () => true,
  ) {}

  note(partitionId: PartitionId, name: NodeName): void {
    if (this.learned.size >= LIMITS.txStateMapEntriesMax && !this.learned.has(partitionId)) this.learned.clear();
    this.learned.set(partitionId, name);
    assert(this.learned.size <= LIMITS.txStateMapEntriesMax, 'learned primaries stay bounded', this.learned.size);
  }

  /** Forgets a learned primary that turned out wrong. */
  forget(partitionId: PartitionId, name: NodeName): void {
    if (this.learned.get(partitionId) === name) this.learned.delete(partitionId);
  }

  /**
   * The local lease holder, else the learned holder, else the next guess; a learned or guessed node that is not live
   * is passed over (a crashed primary must not be asked forever). Undefined for an unknown partition.
   */
  best(partitionId: PartitionId): NodeName | undefined {
    const local = this.localHolder(partitionId);
    if (local !== undefined && this.isLive(local)) return local;
    const learned = this.learned.get(partitionId);
    if (learned !== undefined && this.isLive(learned)) return learned;
    return this.guess(partitionId);
  }

  /** The next live replica of the partition, round robin (any replica when none is known live). */
  guess(partitionId: PartitionId): NodeName | undefined {
    const replicas = this.replicasOf(partitionId);
    if (replicas === undefined || replicas.length === 0) return undefined;
    const start = this.rotation.get(partitionId) ?? 0;
    for (let k = 0; k < replicas.length; k++) {
      const i = (start + k) % replicas.length;
      const name = replicas[i];
      if (name !== undefined && this.isLive(name)) {
        this.rotation.set(partitionId, (i + 1) % replicas.length);
        return name;
      }
    }
    this.rotation.set(partitionId, (start + 1) % replicas.length);
    return replicas[start % replicas.length];
  }
}

/** The directory over `hints`: NODE_UNAVAILABLE, certainly not executed, for a partition with no known replica. */
export function hintsDirectory(hints: PrimaryHints): PrimaryDirectory {
  return {
    locate: (partitionId) => {
      const name = hints.best(partitionId);
      if (name === undefined) {
        throw new BasaltError(
          'NODE_UNAVAILABLE',
          `no replica of ${partitionId} is known here`,
          { partitionId },
          {
            executed: 'no',
          },
        );
      }
      return name;
    },
    note: (partitionId, name) => hints.note(partitionId, name),
    forget: (partitionId, name) => hints.forget(partitionId, name),
  };
}
