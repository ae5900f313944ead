/**
 * Raft messages as they cross the network: `{ group, message }`. Whatever arrives is checked for shape before a core
 * sees it, because the core treats a malformed message as a bug (assertions) and must never be crashed by a peer.
 */
import type { PartitionId } from '../core/ids.js';
import { decodeConfChange, isConfState } from './conf-change.js';
import type { Message, MessageKind } from './types.js';

export interface RaftEnvelope {
  readonly group: PartitionId;
  readonly message: Message;
}

type FieldType = 'index' | 'bool' | 'optionalBool' | 'entries' | 'snapshot';

/** Fields each kind carries besides from, to and term. */
const FIELDS: Readonly<Record<MessageKind, Readonly<Record<string, FieldType>>>> = {
  PreVote: { lastIndex: 'index', lastTerm: 'index' },
  PreVoteResp: { reject: 'bool' },
  Vote: { lastIndex: 'index', lastTerm: 'index', transfer: 'bool' },
  VoteResp: { reject: 'bool' },
  Append: { prevIndex: 'index', prevTerm: 'index', entries: 'entries', commit: 'index' },
  AppendResp: { reject: 'bool', index: 'index', hintIndex: 'index', hintTerm: 'index' },
  Heartbeat: { commit: 'index', quiesce: 'optionalBool' },
  HeartbeatResp: { wake: 'optionalBool' },
  Snapshot: { snapshot: 'snapshot' },
  TimeoutNow: {},
};

/** FIELDS as lists, so that checking a message allocates nothing. */
const FIELD_LISTS = Object.fromEntries(
  Object.entries(FIELDS).map(([kind, fields]) => [kind, Object.entries(fields)]),
) as unknown as Readonly<Record<MessageKind, readonly (readonly [string, FieldType])[]>>;

const isIndex = (v: unknown): boolean => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
const isBytes = (v: unknown): boolean => v instanceof Uint8Array;
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null;

function isEntry(v: unknown): boolean {
  if (!isObject(v) || !isIndex(v['index']) || !isIndex(v['term']) || !isBytes(v['data'])) return false;
  if (v['kind'] === 'data' || v['kind'] === 'noop') return true;
  // A configuration change is applied by every core that commits it, so it must be one.
  return v['kind'] === 'conf' && decodeConfChange(v['data'] as Uint8Array) !== null;
}

function isEntries(v: unknown): boolean {
  if (!Array.isArray(v)) return false;
  for (let i = 0; i < v.length; i++) {
    const e = v[i] as unknown;
    if (!isEntry(e)) return false;
    // Consecutive indexes with non-decreasing terms, as the core assumes.
    if (i > 0) {
      const prev = v[i - 1] as { index: number; term: number };
      const cur = e as { index: number; term: number };
      if (cur.index !== prev.index + 1 || cur.term < prev.term) return false;
    }
  }
  return true;
}

function checkField(type: FieldType, v: unknown): boolean {
  switch (type) {
    case 'index':
      return isIndex(v);
    case 'bool':
      return typeof v === 'boolean';
    case 'optionalBool':
      return v === undefined || typeof v === 'boolean';
    case 'entries':
      return isEntries(v);
    case 'snapshot':
      return (
        isObject(v) &&
        isIndex(v['index']) &&
        isIndex(v['term']) &&
        isBytes(v['data']) &&
        (v['conf'] === undefined || isConfState(v['conf']))
      );
  }
}

/** What is wrong with `v` as a Raft message (the field at fault), or undefined when it is one. */
export function raftMessageProblem(v: unknown): string | undefined {
  if (!isObject(v)) return 'is not a record';
  if (typeof v['kind'] !== 'string' || !Object.hasOwn(FIELDS, v['kind'])) return 'has an unknown kind';
  if (typeof v['from'] !== 'string' || typeof v['to'] !== 'string') return 'from and to must be node names';
  if (!isIndex(v['term'])) return 'term must be an integer >= 0';
  for (const [name, type] of FIELD_LISTS[v['kind'] as MessageKind]) {
    if (!checkField(type, v[name])) return `${name} is not a well-formed ${type}`;
  }
  if (v['kind'] === 'Append') {
    const entries = v['entries'] as { index: number }[];
    if (entries.length > 0 && entries[0]!.index !== (v['prevIndex'] as number) + 1) {
      return 'entries must follow prevIndex';
    }
  }
  return undefined;
}

export function isRaftMessage(v: unknown): v is Message {
  return raftMessageProblem(v) === undefined;
}

export function isRaftEnvelope(v: unknown): v is RaftEnvelope {
  return isObject(v) && typeof v['group'] === 'string' && isRaftMessage(v['message']);
}
