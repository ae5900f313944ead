/**
 * A Raft group's configuration (its voters and learners) and the single-step changes to it (etcd-raft's simple
 * `ConfChange`, not joint consensus).
 *
 * Invariants: voters and learners are disjoint and without duplicates, in the order given (a node added goes last,
 * so that a static configuration keeps the order its replicas were configured with); a configuration has at least one
 * voter; a change adds or removes at most one voter, so that every majority of the configuration before it overlaps
 * every majority of the configuration after it. That overlap is what makes a single-step change safe while nodes
 * switch from one configuration to the next at different times; two steps at once would lose it, which is why the
 * leader keeps at most one change in flight (see raft.ts).
 *
 * A change travels in the log as an entry of kind `conf` whose data is the change's JSON, so that both log storages
 * and the wire carry it as they carry any other entry.
 */
import { assert } from '../core/assert.js';
import { BasaltError } from '../core/errors.js';
import type { NodeName } from '../core/ids.js';

export interface ConfState {
  readonly voters: readonly NodeName[];
  /** Receive the log and snapshots, but count in no quorum and never campaign. */
  readonly learners: readonly NodeName[];
}

/**
 * `add-learner`: a node outside the configuration becomes a learner. `add-voter`: a node outside it becomes a voter
 * at once (without catching up first: prefer add-learner then promote). `promote`: a learner becomes a voter.
 * `remove`: a voter or learner leaves.
 */
export type ConfChangeType = 'add-learner' | 'add-voter' | 'promote' | 'remove';

export interface ConfChange {
  readonly type: ConfChangeType;
  readonly node: NodeName;
}

const TYPES: ReadonlySet<string> = new Set<ConfChangeType>(['add-learner', 'add-voter', 'promote', 'remove']);

/** Builds a configuration, checking its invariants (misuse throws INVALID_ARGUMENT). */
export function confState(voters: readonly NodeName[], learners: readonly NodeName[] = []): ConfState {
  const v = [...new Set(voters)];
  const l = [...new Set(learners)];
  if (v.length === 0) throw new BasaltError('INVALID_ARGUMENT', 'a Raft configuration needs at least one voter');
  const both = l.filter((n) => v.includes(n));
  if (both.length > 0) {
    throw new BasaltError('INVALID_ARGUMENT', 'a node is both voter and learner', { nodes: both });
  }
  return { voters: v, learners: l };
}

export function isMember(conf: ConfState, node: NodeName): boolean {
  return conf.voters.includes(node) || conf.learners.includes(node);
}

export function isVoter(conf: ConfState, node: NodeName): boolean {
  return conf.voters.includes(node);
}

export function sameConf(a: ConfState, b: ConfState): boolean {
  return sameList(a.voters, b.voters) && sameList(a.learners, b.learners);
}

function sameList(a: readonly NodeName[], b: readonly NodeName[]): boolean {
  return a.length === b.length && a.every((n, i) => n === b[i]);
}

/**
 * The configuration after `change`, or the reason it does not apply to `conf`: ALREADY_EXISTS (the node already has
 * the role asked for, or any role for an add), NOT_FOUND (promoting or removing a node outside the configuration),
 * INVALID_ARGUMENT (removing the last voter).
 */
export function applyConfChange(conf: ConfState, change: ConfChange): ConfState | BasaltError {
  const next = changedConf(conf, change);
  if (!(next instanceof BasaltError)) {
    assert(votersMoved(conf, next) <= 1, 'a change adds or removes at most one voter', change.type, change.node);
  }
  return next;
}

/** How many nodes are voters in one of `a`, `b` but not in the other. */
function votersMoved(a: ConfState, b: ConfState): number {
  let moved = 0;
  for (const n of a.voters) if (!b.voters.includes(n)) moved++;
  for (const n of b.voters) if (!a.voters.includes(n)) moved++;
  return moved;
}

function changedConf(conf: ConfState, change: ConfChange): ConfState | BasaltError {
  const { type, node } = change;
  const details = { type, node };
  switch (type) {
    case 'add-learner':
    case 'add-voter':
      if (isMember(conf, node)) {
        return new BasaltError('ALREADY_EXISTS', `${node} is already in the configuration`, details);
      }
      return type === 'add-voter'
        ? confState([...conf.voters, node], conf.learners)
        : confState(conf.voters, [...conf.learners, node]);
    case 'promote':
      if (isVoter(conf, node)) return new BasaltError('ALREADY_EXISTS', `${node} is already a voter`, details);
      if (!conf.learners.includes(node)) return new BasaltError('NOT_FOUND', `${node} is not a learner`, details);
      return confState(
        [...conf.voters, node],
        conf.learners.filter((n) => n !== node),
      );
    case 'remove':
      if (!isMember(conf, node)) return new BasaltError('NOT_FOUND', `${node} is not in the configuration`, details);
      if (conf.voters.length === 1 && conf.voters[0] === node) {
        return new BasaltError('INVALID_ARGUMENT', `${node} is the last voter`, details);
      }
      return confState(
        conf.voters.filter((n) => n !== node),
        conf.learners.filter((n) => n !== node),
      );
  }
}

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

export function encodeConfChange(change: ConfChange): Uint8Array {
  return encoder.encode(JSON.stringify({ type: change.type, node: change.node }));
}

/** The change a `conf` entry carries, or null when its data is not one (checked before a core sees it). */
export function decodeConfChange(data: Uint8Array): ConfChange | null {
  let v: unknown;
  try {
    v = JSON.parse(decoder.decode(data));
  } catch {
    return null;
  }
  if (typeof v !== 'object' || v === null) return null;
  const { type, node } = v as Record<string, unknown>;
  if (typeof type !== 'string' || !TYPES.has(type) || typeof node !== 'string' || node.length === 0) return null;
  return { type: type as ConfChangeType, node: node as NodeName };
}

export function isConfState(v: unknown): v is ConfState {
  if (typeof v !== 'object' || v === null) return false;
  const { voters, learners } = v as Record<string, unknown>;
  const names = (x: unknown): x is string[] =>
    Array.isArray(x) && x.every((n) => typeof n === 'string' && n.length > 0);
  if (!names(voters) || !names(learners) || voters.length === 0) return false;
  const all = [...voters, ...learners];
  return new Set(all).size === all.length;
}
