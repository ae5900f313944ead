/**
 * The data Raft exchanges and persists. Everything here is plain data (numbers, strings, booleans, null, arrays,
 * Uint8Array) so that it can be msgpack-encoded onto the wire and onto disk without per-field fixups.
 *
 * Invariants carried by these shapes:
 *   - entries of one log have consecutive indexes; an entry's term never decreases along the log;
 *   - two logs holding an entry with the same (index, term) are identical up to that index (log matching);
 *   - a snapshot at (index, term) stands for every entry up to and including index.
 */
import type { BasaltError } from '../core/errors.js';
import type { LogIndex, NodeName, Term } from '../core/ids.js';
import type { ConfState } from './conf-change.js';

/**
 * `noop` is the empty entry a new leader appends so that it can commit entries of earlier terms; `conf` carries a
 * configuration change (its data is `encodeConfChange`), which takes effect on each node when it is applied there.
 */
export type EntryKind = 'data' | 'noop' | 'conf';

export interface Entry {
  readonly term: Term;
  readonly index: LogIndex;
  readonly kind: EntryKind;
  readonly data: Uint8Array;
}

/** What must survive a restart besides the log: the current term, the vote cast in it, and the commit index. */
export interface HardState {
  readonly term: Term;
  readonly vote: NodeName | null;
  readonly commit: LogIndex;
}

export interface SnapshotMeta {
  readonly index: LogIndex;
  readonly term: Term;
  /**
   * The configuration after every entry up to `index`; every snapshot the core makes carries it. Absent from one
   * stored or sent before configurations were recorded: that one stands for the group's initial configuration
   * (membership was static until then).
   */
  readonly conf?: ConfState;
}

/** The state machine's state after applying every entry up to `index`, opaque to Raft. */
export interface Snapshot extends SnapshotMeta {
  readonly data: Uint8Array;
}

interface Envelope {
  readonly from: NodeName;
  readonly to: NodeName;
  /** The sender's term; for PreVote, the term the sender would campaign in. */
  readonly term: Term;
}

export type PreVoteMessage = Envelope & {
  readonly kind: 'PreVote';
  readonly lastIndex: LogIndex;
  readonly lastTerm: Term;
};
export type PreVoteRespMessage = Envelope & { readonly kind: 'PreVoteResp'; readonly reject: boolean };
export type VoteMessage = Envelope & {
  readonly kind: 'Vote';
  readonly lastIndex: LogIndex;
  readonly lastTerm: Term;
  /** Set by a campaign started by MsgTimeoutNow: the leader asked for it, so voters ignore their leader lease. */
  readonly transfer: boolean;
};
export type VoteRespMessage = Envelope & { readonly kind: 'VoteResp'; readonly reject: boolean };
export type AppendMessage = Envelope & {
  readonly kind: 'Append';
  readonly prevIndex: LogIndex;
  readonly prevTerm: Term;
  readonly entries: readonly Entry[];
  readonly commit: LogIndex;
};
/**
 * Accepted: `index` is the follower's last index known to match the leader. Rejected: `index` is the rejected
 * prevIndex and (hintIndex, hintTerm) the follower's largest entry at or below it whose term is ≤ the prevTerm asked,
 * so that the leader can skip a whole conflicting term in one round trip.
 */
export type AppendRespMessage = Envelope & {
  readonly kind: 'AppendResp';
  readonly reject: boolean;
  readonly index: LogIndex;
  readonly hintIndex: LogIndex;
  readonly hintTerm: Term;
};
/**
 * `commit` is min(follower's match, leader's commit), so a follower never commits beyond what it is known to hold.
 * `quiesce`: the leader goes quiet (raft.ts "Quiescence"); a follower holding exactly the log up to `commit` goes
 * quiet too and does not answer.
 */
export type HeartbeatMessage = Envelope & {
  readonly kind: 'Heartbeat';
  readonly commit: LogIndex;
  readonly quiesce?: boolean;
};
/** `wake`: a follower asks its leader's node for attention (a read there waits for safe time, raft.ts "Quiescence"). */
export type HeartbeatRespMessage = Envelope & { readonly kind: 'HeartbeatResp'; readonly wake?: boolean };
export type SnapshotMessage = Envelope & { readonly kind: 'Snapshot'; readonly snapshot: Snapshot };
/** The leader tells a caught-up transferee to campaign at once. */
export type TimeoutNowMessage = Envelope & { readonly kind: 'TimeoutNow' };

export type Message =
  | PreVoteMessage
  | PreVoteRespMessage
  | VoteMessage
  | VoteRespMessage
  | AppendMessage
  | AppendRespMessage
  | HeartbeatMessage
  | HeartbeatRespMessage
  | SnapshotMessage
  | TimeoutNowMessage;

export type MessageKind = Message['kind'];

/**
 * One batch of work for the driver, in this order: send `leaderMessages` (they may go at once); persist `hardState`,
 * `entries` (replacing any stored entries at or above the first one's index) and `snapshot` atomically and durably;
 * then send `messages`; then restore `snapshot` into the state machine and apply `committedEntries` in order; then
 * call `advance(ready)`.
 */
export interface Ready {
  readonly hardState: HardState | null;
  readonly entries: readonly Entry[];
  readonly snapshot: Snapshot | null;
  /**
   * A leader's Append, Heartbeat, Snapshot and TimeoutNow messages. They need not wait for this Ready to be durable
   * (the leader's disk write runs in parallel with replication, Raft thesis §10.2.1), but may; every other message
   * (votes, answers) must wait, since it promises what the disk must then hold.
   */
  readonly leaderMessages: readonly Message[];
  /** Sent only once this Ready is durable. */
  readonly messages: readonly Message[];
  readonly committedEntries: readonly Entry[];
}

export type Role = 'follower' | 'precandidate' | 'candidate' | 'leader';

export interface Status {
  readonly self: NodeName;
  readonly role: Role;
  readonly term: Term;
  readonly vote: NodeName | null;
  /** The leader this node currently follows (itself when leader); null when it knows none. */
  readonly leader: NodeName | null;
  readonly commit: LogIndex;
  readonly applied: LogIndex;
  readonly lastIndex: LogIndex;
  /** Index of the latest snapshot; the log holds entries above it only. */
  readonly snapshotIndex: LogIndex;
  /** The peer a leadership transfer is under way to, or null. */
  readonly transferee: NodeName | null;
  /** The configuration as of the applied index. */
  readonly voters: readonly NodeName[];
  readonly learners: readonly NodeName[];
  /** Leader: the index of the latest configuration change it may not have applied yet (0 when none). */
  readonly pendingConfIndex: LogIndex;
  /** The group is quiet here: ticks do nothing until a message, a proposal or `wake` (raft.ts "Quiescence"). */
  readonly quiet?: boolean;
}

/** A proposal is an expected outcome, never an exception: only a leader not transferring away accepts one. */
export type ProposeResult =
  | { readonly status: 'OK'; readonly index: LogIndex; readonly term: Term }
  | { readonly status: 'NOT_LEADER'; readonly leader: NodeName | null }
  | { readonly status: 'OVERLOADED'; readonly uncommitted: number };

/**
 * A configuration change proposal: accepted like a proposal, or refused with a coded error (CONF_CHANGE_IN_FLIGHT,
 * ALREADY_EXISTS, NOT_FOUND, INVALID_ARGUMENT); the caller decides whether to throw it.
 */
export type ConfChangeResult = ProposeResult | { readonly status: 'REFUSED'; readonly error: BasaltError };
