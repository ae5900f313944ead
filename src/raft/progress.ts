/**
 * What a leader knows about one follower's log (etcd's tracker.Progress).
 *
 *   probe      the leader does not know where the logs agree: one Append at a time, waiting for its answer
 *              (or a heartbeat answer) before the next;
 *   replicate  the follower is in step: Appends are pipelined optimistically (`next` runs ahead of `match`), at most
 *              `inflightMax` unanswered at once;
 *   snapshot   a snapshot is on its way; nothing else is sent until it is acknowledged or `snapshotTicksMax` pass.
 *
 * Invariants: match < next; in replicate, inflight holds the last index of each unanswered Append, ascending, at most
 * `inflightMax` of them (asserted where they change).
 */
import { assert } from '../core/assert.js';
import type { NodeName } from '../core/ids.js';

export type ProgressState = 'probe' | 'replicate' | 'snapshot';

export class Progress {
  match = 0;
  next: number;
  state: ProgressState = 'probe';
  /** Probe: an Append was sent and neither it nor a heartbeat has been answered since. */
  probeSent = false;
  pendingSnapshot = 0;
  snapshotTicks = 0;
  /** Heard from within the current check-quorum period. */
  recentActive = false;
  /** An Append went to the follower since the last heartbeat round (`Raft.broadcastHeartbeat`). */
  appendedSinceHeartbeat = false;
  /** The highest commit index sent to the follower that its log lets it take (Appends and heartbeats). */
  commitSent = 0;
  readonly inflight: number[] = [];

  constructor(
    next: number,
    private readonly inflightMax: number,
  ) {
    this.next = next;
  }

  isPaused(): boolean {
    switch (this.state) {
      case 'probe':
        return this.probeSent;
      case 'replicate':
        return this.inflight.length >= this.inflightMax;
      case 'snapshot':
        return true;
    }
  }

  /** An Append covering up to `lastIndex` with `count` entries was just sent. */
  sentEntries(lastIndex: number, count: number): void {
    if (this.state === 'replicate') {
      if (count > 0) {
        const newest = this.inflight[this.inflight.length - 1];
        assert(newest === undefined || lastIndex > newest, 'inflight Appends are ascending', newest, lastIndex);
        assert(this.inflight.length < this.inflightMax, 'an Append is sent only into a free inflight slot');
        this.next = lastIndex + 1;
        this.inflight.push(lastIndex);
      }
    } else if (this.state === 'probe') {
      this.probeSent = true;
    }
    assert(this.match < this.next, 'match < next', this.match, this.next);
  }

  /** The follower holds the leader's log up to `index`; false for a stale answer. */
  maybeUpdate(index: number): boolean {
    let updated = false;
    if (this.match < index) {
      this.match = index;
      updated = true;
      this.probeSent = false;
    }
    this.next = Math.max(this.next, index + 1);
    assert(this.match < this.next, 'match < next', this.match, this.next);
    return updated;
  }

  /** The follower rejected an Append at `rejected`; `matchHint` bounds where the logs agree. False if stale. */
  maybeDecrTo(rejected: number, matchHint: number): boolean {
    if (this.state === 'replicate') {
      if (rejected <= this.match) return false;
      this.next = this.match + 1;
      return true;
    }
    if (this.next - 1 !== rejected) return false;
    this.next = Math.max(Math.min(rejected, matchHint + 1), this.match + 1);
    this.probeSent = false;
    assert(this.match < this.next, 'match < next', this.match, this.next);
    return true;
  }

  /** Frees the inflight slots of every Append up to `index`. */
  freeTo(index: number): void {
    let n = 0;
    while (n < this.inflight.length && this.inflight[n]! <= index) n++;
    this.inflight.splice(0, n);
  }

  becomeProbe(): void {
    this.next = this.state === 'snapshot' ? Math.max(this.match + 1, this.pendingSnapshot + 1) : this.match + 1;
    this.state = 'probe';
    this.probeSent = false;
    this.pendingSnapshot = 0;
    this.inflight.length = 0;
  }

  becomeReplicate(): void {
    this.next = this.match + 1;
    this.state = 'replicate';
    this.probeSent = false;
    this.inflight.length = 0;
  }

  becomeSnapshot(index: number): void {
    assert(index > this.match, 'snapshot sent to a follower that already holds it');
    this.state = 'snapshot';
    this.pendingSnapshot = index;
    this.snapshotTicks = 0;
    this.inflight.length = 0;
  }
}

/** The largest index a majority holds, given every voter's match index (voters include the leader). */
export function majorityIndex(matches: readonly number[]): number {
  const sorted = [...matches].sort((a, b) => b - a);
  return sorted[quorumSize(matches.length) - 1] ?? 0;
}

export function quorumSize(voters: number): number {
  return Math.floor(voters / 2) + 1;
}

/** Whether a quorum of `voters` is live as `self` sees it (`self` counts as live): quiescence asks this of node liveness. */
export function liveQuorum(self: NodeName, voters: readonly NodeName[], live: (name: NodeName) => boolean): boolean {
  let count = 0;
  for (const v of voters) if (v === self || live(v)) count++;
  return count >= quorumSize(voters.length);
}

export type VoteTally = 'won' | 'lost' | 'pending';

export function tally(granted: number, rejected: number, voters: number): VoteTally {
  const q = quorumSize(voters);
  if (granted >= q) return 'won';
  if (rejected > voters - q) return 'lost';
  return 'pending';
}
