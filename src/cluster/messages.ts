/**
 * Message bodies the node layer itself exchanges (the replica and coordinator layers add their own kinds on the same
 * messenger). Every kind is visible to harness network filters by its `kind`; Raft traffic of every group travels as
 * one-way `Raft` messages carrying the group id, so a filter can match `{ kind: 'Raft', group }`. The messages of one
 * event-loop turn to one peer, of all groups, may travel together as one `RaftBatch` (one envelope, one dispatch);
 * the harness's filters see a batch as the `Raft` messages it carries (harness/network-filters.ts `unbatched`).
 */
import type { Message } from '../raft/types.js';
import type { MetaCommand, MetaResult, MetaView } from './metastorage-state.js';

/** One group's Raft message. */
export interface RaftPart {
  readonly group: string;
  readonly message: Message;
}

export type NodeMessage =
  | ({ readonly kind: 'Raft' } & RaftPart)
  | { readonly kind: 'RaftBatch'; readonly messages: readonly RaftPart[] }
  /** Liveness probe; answered at once by a live node. Both carry the sender's physical time (clock offsets). */
  | { readonly kind: 'NodeHeartbeat'; readonly physicalMs?: number }
  | { readonly kind: 'NodeHeartbeatAck'; readonly physicalMs?: number }
  /** One-way, from a node starting a graceful stop: do not hand it leases or leaderships. */
  | { readonly kind: 'NodeLeaving' }
  /** To a metastorage member: apply `command` (the leader proposes it; others answer NOT_LEADER with a hint). */
  | { readonly kind: 'MetaCommandRequest'; readonly command: MetaCommand }
  | { readonly kind: 'MetaCommandResponse'; readonly result: MetaResult }
  /**
   * To a metastorage member: answer once its revision exceeds `sinceRevision` (-1: at once, from a member that applied
   * its whole log), or after a wait with `view: null`.
   */
  | { readonly kind: 'MetaWatchRequest'; readonly sinceRevision: number }
  | { readonly kind: 'MetaWatchResponse'; readonly view: MetaView | null; readonly leader: string | null };

export type NodeMessageKind = NodeMessage['kind'];
