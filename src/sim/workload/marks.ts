/**
 * Coverage marks: rare protocol paths a simulated run should reach, read from the node counters the protocol code
 * bumps where each path runs. A seed that passes without reaching them says little about them, so `basalt sim`
 * reports which marks a run hit and, over many seeds, which it never hit.
 *
 * A node that crashes or restarts comes back as a new incarnation with fresh counters, so a run collects every
 * incarnation it saw (each just before it is taken down, and those running at the end) and sums their counters.
 */

/** One mark: hit when the sum of its counters over every node incarnation of the run is above zero. */
export interface CoverageMark {
  readonly name: string;
  readonly description: string;
  readonly counters: readonly string[];
}

export const COVERAGE_MARKS: readonly CoverageMark[] = [
  {
    name: 'commit-partition-resolution',
    description: 'a write intent resolved by asking its commit partition',
    counters: ['resolution.commitPartition'],
  },
  { name: 'recovery-abort', description: 'a commit partition aborted a tx by recovery', counters: ['recovery.aborts'] },
  {
    name: 'coordinator-finishing-wait',
    description: 'a state request waited at the coordinator for a FINISHING tx',
    counters: ['coordinator.finishingWaits'],
  },
  {
    name: 'lease-change-mid-tx',
    description: 'a lease changed while txs held or awaited locks under it',
    counters: ['lease.txsLosingLocks'],
  },
  {
    name: 'snapshot-install',
    description: 'a partition replica restored from a Raft snapshot',
    counters: ['snapshot.installs'],
  },
  {
    name: 'carried-commit',
    description: 'a commit carried its writes to its commit partition and committed them in the finish entry',
    counters: ['finish.carriedCommits'],
  },
  {
    name: 'carried-refusal',
    description: 'a commit carrying writes was aborted by its commit partition (locks or lease lost, bound reached)',
    counters: ['finish.carriedRefusals'],
  },
  {
    name: 'parallel-commit',
    description: 'a commit sent its committing record in parallel with its writes',
    counters: ['coordinator.parallelCommits'],
  },
  {
    name: 'committing-settled',
    description: 'a committing record settled by checking its writes (a failed confirmation, or a dead coordinator)',
    counters: ['committing.settledCommitted', 'committing.settledAborted'],
  },
  {
    name: 'write-batch',
    description: 'data writes of several txs shared one Raft entry (an UpdateBatch)',
    counters: ['replica.writeBatches'],
  },
  {
    name: 'shared-apply',
    description: 'the committed entries of several Raft groups applied in one storage transaction',
    counters: ['apply.sharedTransactions'],
  },
  { name: 'wait-die-death', description: 'a lock request died under wait-die', counters: ['locks.waitDieDeaths'] },
  {
    name: 'committed-read-through',
    description: "a read under a lock read through a committed writer's intent before its switch applied",
    counters: ['locks.committedReadThroughs'],
  },
  {
    name: 'cleanup-rescan',
    description: 'the cleanup driver re-drove an unfinished cleanup from its rescan',
    counters: ['cleanup.rescanRuns'],
  },
  {
    name: 'inline-cleanup',
    description: 'a finished lock holder cleaned up in line by an RW request',
    counters: ['inlineCleanup.local', 'inlineCleanup.commitPartition', 'inlineCleanup.coordinator'],
  },
  {
    name: 'tx-sweep-recovery',
    description: 'the tx sweep asked a commit partition to recover a tx',
    counters: ['txSweep.recoveries'],
  },
  {
    name: 'partition-rest',
    description: 'an idle partition replica rested (its lease lapses until a request wakes it)',
    counters: ['replica.rests'],
  },
  {
    name: 'clock-skew-refusal',
    description: 'a peer message refused for a timestamp beyond the skew bound',
    counters: ['clock.skewRefusals'],
  },
];

/** Hits per mark name (0 for a mark not hit), in COVERAGE_MARKS order. */
export type MarkHits = Readonly<Record<string, number>>;

/** The marks' hits from counters summed over a run's node incarnations. */
export function markHits(counters: readonly Readonly<Record<string, number>>[]): MarkHits {
  const hits: Record<string, number> = {};
  for (const mark of COVERAGE_MARKS) {
    let n = 0;
    for (const c of counters) for (const name of mark.counters) n += c[name] ?? 0;
    hits[mark.name] = n;
  }
  return hits;
}

/** Aggregates marks over runs: total hits, and in how many runs each mark was hit. */
export class MarkTally {
  private readonly totals = new Map<string, number>(COVERAGE_MARKS.map((m) => [m.name, 0]));
  private readonly runsHit = new Map<string, number>(COVERAGE_MARKS.map((m) => [m.name, 0]));
  runs = 0;

  add(hits: MarkHits): void {
    this.runs++;
    for (const mark of COVERAGE_MARKS) {
      const n = hits[mark.name] ?? 0;
      this.totals.set(mark.name, this.totals.get(mark.name)! + n);
      if (n > 0) this.runsHit.set(mark.name, this.runsHit.get(mark.name)! + 1);
    }
  }

  missed(): string[] {
    return COVERAGE_MARKS.filter((m) => this.runsHit.get(m.name) === 0).map((m) => m.name);
  }

  /** One line per mark hit (total hits, runs that hit it), then `missed: ...` (or `missed: none`). */
  report(): string {
    const lines = [`coverage marks over ${this.runs} run${this.runs === 1 ? '' : 's'}:`];
    for (const mark of COVERAGE_MARKS) {
      const runs = this.runsHit.get(mark.name)!;
      if (runs === 0) continue;
      lines.push(`  ${mark.name.padEnd(28)} ${String(this.totals.get(mark.name)).padStart(7)} hits in ${runs} runs`);
    }
    const missed = this.missed();
    lines.push(`  missed: ${missed.length === 0 ? 'none' : missed.join(', ')}`);
    return lines.join('\n');
  }
}

/** A run's marks on one line: `name×hits` for each mark hit, then the ones missed. */
export function formatMarks(hits: MarkHits): string {
  const hit = COVERAGE_MARKS.filter((m) => (hits[m.name] ?? 0) > 0).map((m) => `${m.name}×${hits[m.name]}`);
  const missed = COVERAGE_MARKS.filter((m) => (hits[m.name] ?? 0) === 0).map((m) => m.name);
  return `marks hit: ${hit.length === 0 ? 'none' : hit.join(' ')}; missed: ${missed.length === 0 ? 'none' : missed.join(', ')}`;
}
