/**
 * What write intent resolution and recovery need from the node, as narrow injected interfaces (DESIGN §2b rules 12,
 * 16, 17): who is gone and how to reach a node id, a typed request function (the node's Messenger fits), a locator of
 * partition primaries, and a counter sink for metrics. The node wires them in one place (see index.ts).
 *
 * Rule 17 lives in `PeerDirectory.isGone`: an id is gone only when superseded by a newer incarnation of its node name
 * or unheard for the liveness timeout; an id never seen is *unknown*, not gone, and is tried first.
 */
import type { NodeId, NodeName } from '../core/ids.js';

export interface PeerDirectory {
  /** Rule 17: true only for a superseded id or one not heard for the liveness timeout. */
  isGone(id: NodeId): boolean;
  /** The node name a live (or at least connected) id belongs to; undefined when this node cannot reach it. */
  nameOf(id: NodeId): NodeName | undefined;
}

/** Counter names this directory bumps (the node's `metrics()` reports the `resolution.<path>` ones). */
export const RESOLUTION_COUNTERS = {
  local: 'resolution.local',
  coordinator: 'resolution.coordinator',
  commitPartition: 'resolution.commitPartition',
  shared: 'resolution.shared',
  failed: 'resolution.failed',
  latencyMsTotal: 'resolution.latencyMsTotal',
  switches: 'resolution.switches',
  recoveries: 'recovery.aborts',
  recoveryCommitWon: 'recovery.commitWon',
  orphans: 'recovery.orphans',
  primaryReplica: 'resolution.primaryReplica',
} as const;

export function outcomeCounter(state: string): string {
  return `resolution.outcome.${state}`;
}
