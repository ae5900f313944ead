/**
 * The connection handshake. Both ends send a hello as their first frame, `{ magic, protocolVersion, name, id }` plus,
 * once the node knows them, `members`: the cluster's member names, sorted and distinct, this node's own among them.
 * A connection is open only once the other end's hello arrived and checked out. The hello is how a node learns a
 * peer's ephemeral id (DESIGN §2 node identity): a restarted peer says hello with a new id.
 *
 * `members` is the cluster fingerprint: every node must run with the same member set (the metastorage voters and the
 * assignments derive from it), so when both hellos carry one and they differ, each end refuses the connection. A
 * hello without it (a probe, sent before its node knows the members) is accepted by anyone. The parser is strict:
 * exactly these fields, `members` bounded by `clusterMembersMax` names of at most `identityCharsMax` characters.
 */
import { BasaltError } from '../core/errors.js';
import type { NodeId, NodeIdentity, NodeName } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { nameProblem } from './envelope.js';

export const HANDSHAKE_MAGIC = 'basalt';
export const PROTOCOL_VERSION = 1;

/** Names listed in a mismatch reason before it says how many more there are. */
const REASON_NAMES_MAX = 16;

export interface Hello {
  readonly magic: string;
  readonly protocolVersion: number;
  readonly name: NodeName;
  readonly id: NodeId;
  /**
   * The cluster's founding members, sorted and distinct; absent while the node does not know them yet. A node that
   * joined the cluster later carries them too, without its own name.
   */
  readonly members?: readonly NodeName[];
  /** Where this node's peers dial it (`host:port`, its advertised address), when it listens for peers. */
  readonly address?: string;
}

/** What a peer's accepted hello says about it. */
export interface PeerHello {
  readonly peer: NodeIdentity;
  readonly members?: readonly NodeName[];
  /** Where the peer says it is dialed. */
  readonly address?: string;
}

/** Our hello; `members` must be a fingerprint (see `memberFingerprint`). */
export function hello(self: NodeIdentity, members?: readonly NodeName[], address?: string): Hello {
  const base = { magic: HANDSHAKE_MAGIC, protocolVersion: PROTOCOL_VERSION, name: self.name, id: self.id };
  return {
    ...base,
    ...(members !== undefined && { members }),
    ...(address !== undefined && { address }),
  };
}

/**
 * The fingerprint of a member list: its distinct names, sorted by code unit (the same order on every node). Throws
 * INVALID_ARGUMENT for a list the hello parser would refuse (empty, too many names, a name too long or empty).
 */
export function memberFingerprint(names: readonly NodeName[]): readonly NodeName[] {
  const sorted = [...new Set(names)].sort();
  const problem = membersProblem(sorted);
  if (problem !== undefined) throw new BasaltError('INVALID_ARGUMENT', `cluster members: ${problem}`);
  return sorted;
}

export type ParsedHello = ({ readonly ok: true } & PeerHello) | { readonly ok: false; readonly reason: string };

export function parseHello(value: unknown): ParsedHello {
  const reason = helloProblem(value);
  if (reason !== undefined) return { ok: false, reason };
  const { name, id, members, address } = value as Hello;
  return {
    ok: true,
    peer: { name, id },
    ...(members !== undefined && { members }),
    ...(address !== undefined && { address }),
  };
}

/**
 * Why a peer's hello is refused for its member set, or undefined when either side has none or both agree. `where`
 * locates the peer for the reader (`at host:port`).
 */
export function memberMismatch(
  ours: readonly NodeName[] | undefined,
  peer: PeerHello,
  where: string,
): string | undefined {
  const theirs = peer.members;
  if (ours === undefined || theirs === undefined || sameMembers(ours, theirs)) return undefined;
  return (
    `member sets differ: this node has ${formatMembers(ours)}, ` +
    `peer ${peer.peer.name} ${where} has ${formatMembers(theirs)}`
  );
}

export function sameMembers(a: readonly NodeName[], b: readonly NodeName[]): boolean {
  return a.length === b.length && a.every((name, i) => name === b[i]);
}

/** `n1,n2,n3`; a long list is cut after REASON_NAMES_MAX names, saying how many it has. */
export function formatMembers(names: readonly NodeName[]): string {
  if (names.length <= REASON_NAMES_MAX) return names.join(',');
  return `${names.slice(0, REASON_NAMES_MAX).join(',')},… (${names.length} in all)`;
}

function helloProblem(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return 'hello is not an object';
  const fields = value as Readonly<Record<string, unknown>>;
  if (fields['magic'] !== HANDSHAKE_MAGIC) return 'hello has the wrong magic';
  if (fields['protocolVersion'] !== PROTOCOL_VERSION) {
    return `protocol version ${String(fields['protocolVersion'])}, expected ${PROTOCOL_VERSION}`;
  }
  const hasMembers = Object.hasOwn(fields, 'members');
  const hasAddress = Object.hasOwn(fields, 'address');
  if (Object.keys(fields).length !== 4 + (hasMembers ? 1 : 0) + (hasAddress ? 1 : 0)) {
    return 'hello must have exactly magic, protocolVersion, name, id and optionally members and address';
  }
  const identity = nameProblem(fields['name'], 'hello.name') ?? nameProblem(fields['id'], 'hello.id');
  if (identity !== undefined) return identity;
  if (hasAddress && addressProblem(fields['address']) !== undefined) {
    return `hello.address: ${addressProblem(fields['address'])}`;
  }
  if (!hasMembers) return undefined;
  const problem = membersProblem(fields['members']);
  return problem === undefined ? undefined : `hello.members: ${problem}`;
}

function addressProblem(address: unknown): string | undefined {
  if (typeof address !== 'string' || address.length === 0 || address.length > LIMITS.identityCharsMax) {
    return `not a string of 1 to ${LIMITS.identityCharsMax} characters`;
  }
  const colon = address.lastIndexOf(':');
  const port = Number(address.slice(colon + 1));
  return colon > 0 && Number.isInteger(port) && port >= 1 && port <= 65_535 ? undefined : 'not a host:port';
}

function membersProblem(members: unknown): string | undefined {
  if (!Array.isArray(members)) return 'not an array';
  if (members.length === 0) return 'empty';
  if (members.length > LIMITS.clusterMembersMax) return `more than ${LIMITS.clusterMembersMax} names`;
  for (const [i, name] of members.entries()) {
    const problem = nameProblem(name, `member ${i}`);
    if (problem !== undefined) return problem;
    if (i > 0 && !(members[i - 1] < name)) return 'names are not sorted and distinct';
  }
  return undefined;
}
