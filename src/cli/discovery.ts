/**
 * Peer discovery of `basalt start`: `--peers` lists the other nodes, each as `name=host:port` or a bare `host:port`.
 * A bare address is probed (src/net/probe.ts: dial, exchange hellos, hang up) until it answers with its name, with
 * exponential backoff between rounds, until every bare peer answered or the startup timeout passed. The node's
 * transport already listens while it probes, so nodes that all start with bare addresses answer each other's probes.
 *
 * Invariant of the result: the member names (this node and every peer) are distinct, because every node must compute
 * the same member set (the metastorage group); a peer that answers with this node's name, with the name of another
 * listed peer, or an address listed twice is refused with an INVALID_ARGUMENT error naming both sides. A probed peer
 * that already runs (its hello lists its members) must list exactly the members this node is about to use; else
 * discovery fails fast with an INVALID_ARGUMENT error naming both sets, before the node disturbs the cluster.
 */
import { InvalidArgumentError } from 'commander';
import { BasaltError } from '../core/errors.js';
import { type NodeIdentity, type NodeName, nodeName } from '../core/ids.js';
import type { Timers } from '../env/timers.js';
import { sleep } from '../env/timers.js';
import { formatMembers, memberFingerprint, sameMembers } from '../net/handshake.js';
import type { PeerTlsMaterial } from '../net/peer-tls.js';
import { probePeer } from '../net/probe.js';
import { parseHostPort } from '../net/tcp-transport.js';

export interface PeerEntry {
  /** Absent for a bare `host:port`: learned by probing. */
  readonly name?: NodeName;
  readonly address: string;
}

/** Parses one `name=host:port` or `host:port`. Throws InvalidArgumentError (a command-line mistake). */
export function peerEntry(value: string): PeerEntry {
  const eq = value.indexOf('=');
  const name = eq < 0 ? undefined : value.slice(0, eq);
  const address = eq < 0 ? value : value.slice(eq + 1);
  if (name !== undefined && name.length === 0) throw new InvalidArgumentError(`no name before '=' in ${value}`);
  try {
    parseHostPort(address);
  } catch {
    throw new InvalidArgumentError(`not a host:port or name=host:port peer: ${value}`);
  }
  return name === undefined ? { address } : { name: nodeName(name), address };
}

/** Parses a comma-separated `--peers` list (an empty string is no peers). */
export function peerList(value: string): PeerEntry[] {
  return value.length === 0 ? [] : value.split(',').map((part) => peerEntry(part.trim()));
}

export interface DiscoveryOptions {
  /** The identity the node's transport says hello with (see probe.ts on why the probe must use it). */
  readonly self: NodeIdentity;
  readonly peers: readonly PeerEntry[];
  readonly timers: Timers;
  /** Give up (TIMEOUT) when some bare peer has not answered by then. */
  readonly timeoutMs: number;
  readonly probeTimeoutMs?: number;
  readonly backoffMsMin?: number;
  readonly backoffMsMax?: number;
  /** Called after a round that left peers unanswered: their addresses with the last failure of each. */
  readonly onWaiting?: (waiting: ReadonlyMap<string, string>) => void;
  /** Stops waiting: the result is then undefined. */
  readonly signal?: AbortSignal;
  /** Mutual TLS for the probes, as the node's transport uses it. */
  readonly tls?: PeerTlsMaterial;
}

const PROBE_TIMEOUT_MS = 2_000;
const BACKOFF_MS_MIN = 50;
const BACKOFF_MS_MAX = 2_000;

/** Every peer's name → address, once each bare address answered; undefined if aborted. */
export async function discoverPeers(options: DiscoveryOptions): Promise<Map<NodeName, string> | undefined> {
  const members = namedMembers(options.self.name, options.peers);
  const named = new Set(members.keys());
  const waiting = new Map<string, string>(
    options.peers.filter((p) => p.name === undefined).map((p) => [p.address, 'not probed yet']),
  );
  const runningWith = new Map<string, readonly NodeName[]>();
  const deadline = Date.now() + options.timeoutMs;
  let backoffMs = options.backoffMsMin ?? BACKOFF_MS_MIN;
  while (waiting.size > 0) {
    if (options.signal?.aborted) return undefined;
    await probeRound(options, members, named, waiting, runningWith);
    if (waiting.size === 0) break;
    if (Date.now() >= deadline) {
      const list = [...waiting].map(([address, reason]) => `${address} (${reason})`).join(', ');
      throw new BasaltError('TIMEOUT', `no answer within ${options.timeoutMs} ms from peers ${list}`);
    }
    options.onWaiting?.(waiting);
    try {
      await sleep(options.timers, Math.min(backoffMs, Math.max(0, deadline - Date.now())), options.signal);
    } catch {
      return undefined;
    }
    backoffMs = Math.min(options.backoffMsMax ?? BACKOFF_MS_MAX, backoffMs * 2);
  }
  checkRunningPeers(options.self.name, members, runningWith);
  return members;
}

/** Throws INVALID_ARGUMENT when a running peer (address → its members) lists other members than this node will. */
function checkRunningPeers(
  self: NodeName,
  members: ReadonlyMap<NodeName, string>,
  runningWith: ReadonlyMap<string, readonly NodeName[]>,
): void {
  const ours = memberFingerprint([self, ...members.keys()]);
  for (const [address, theirs] of runningWith) {
    if (sameMembers(ours, theirs)) continue;
    const peer = [...members].find(([, a]) => a === address)?.[0] ?? '?';
    throw new BasaltError(
      'INVALID_ARGUMENT',
      `member sets differ: this node would run with ${formatMembers(ours)}, the running peer ${peer} at ${address} ` +
        `has ${formatMembers(theirs)} (start every node with the same members)`,
    );
  }
}

/** Probes every waiting address once, in parallel; an answer moves the address from `waiting` to `members`. */
async function probeRound(
  options: DiscoveryOptions,
  members: Map<NodeName, string>,
  named: ReadonlySet<NodeName>,
  waiting: Map<string, string>,
  runningWith: Map<string, readonly NodeName[]>,
): Promise<void> {
  const addresses = [...waiting.keys()];
  const results = await Promise.all(
    addresses.map((address) =>
      probePeer({
        self: options.self,
        address,
        timers: options.timers,
        timeoutMs: options.probeTimeoutMs ?? PROBE_TIMEOUT_MS,
        ...(options.tls !== undefined && { tls: options.tls }),
      }),
    ),
  );
  for (const [i, result] of results.entries()) {
    const address = addresses[i]!;
    if (!result.ok) {
      waiting.set(address, result.reason);
      continue;
    }
    const name = result.peer.name;
    if (name === options.self.name) {
      throw clash(`the peer at ${address} says it is ${name}, this node's own name (--peers lists the other nodes)`);
    }
    const known = members.get(name);
    if (known !== undefined && named.has(name)) {
      throw clash(`--peers names ${name} at ${known}, and the peer at ${address} says it is ${name} too`);
    }
    if (known !== undefined) throw clash(`the peers at ${known} and ${address} both say they are ${name}`);
    members.set(name, address);
    waiting.delete(address);
    if (result.members !== undefined) runningWith.set(address, result.members);
  }
}

/** The named entries, checked: no name twice, not this node's name, no address twice in the whole list. */
function namedMembers(self: NodeName, peers: readonly PeerEntry[]): Map<NodeName, string> {
  const members = new Map<NodeName, string>();
  const addresses = new Set<string>();
  for (const peer of peers) {
    if (addresses.has(peer.address)) throw clash(`peer address ${peer.address} is listed twice`);
    addresses.add(peer.address);
    if (peer.name === undefined) continue;
    if (peer.name === self) throw clash(`--peers names ${self}, this node's own name (it lists the other nodes)`);
    if (members.has(peer.name)) throw clash(`peer ${peer.name} is listed twice`);
    members.set(peer.name, peer.address);
  }
  return members;
}

function clash(message: string): BasaltError {
  return new BasaltError('INVALID_ARGUMENT', `member names must be distinct: ${message}`);
}
