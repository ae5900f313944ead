/**
 * Bad input on a live node (issue 7 item 6, issue 31 item 6): seeded random and mutated frames thrown at n1's client
 * port and at its peer (messenger/Raft) port over real TCP: random bytes, truncated frames, huge length prefixes,
 * valid msgpack of the wrong shape, mutated valid requests and envelopes, bad hellos. On the peer port the envelopes
 * mostly come from the identity their connection said hello with and carry bodies of every peer message kind, well
 * formed or mutated (a field removed or of the wrong type, a negative index, a COMMITTED outcome without its commitTs,
 * an unknown kind), so they get past the envelope checks to the body checks and, when well formed, to the handlers.
 * Afterwards every fuzz connection is gone, both ports answered with coded errors, n1 counted the malformed peer
 * messages, no node failed, and every Raft group of every node still applies: the node still serves transactions
 * through its client port and as a member of the cluster. The seed is printed on failure; BASALT_FUZZ_SEED replays
 * one.
 *
 * Then once more over TLS 1.3 (nodes with `--certs-dir`): the client port served with certificates, the nodes and the
 * fuzz peers on mutual TLS with certificates of one CA that name them, so the same frames reach the same checks inside
 * TLS and get the same coded errors.
 *
 * Well-formed Raft messages carry term 0, below every elected group's term, so they are answered as stale: a peer
 * that lies in well-formed messages is beyond what checks can catch (Raft trusts its members; off loopback peers
 * authenticate by mutual TLS).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { type AddressInfo, createServer, connect as netConnect, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { it } from 'node:test';
import { connect as tlsConnect, createServer as tlsCreateServer } from 'node:tls';
import { Packr } from 'msgpackr';
import { loadPeerTls, localClusterCerts } from '../cli/certs.js';
import type { BasaltError } from '../core/errors.js';
import { type NodeName, nodeId, nodeName, type PartitionId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { tablePartitionId } from '../core/partitioning.js';
import { Cluster, defaultNodeNames } from '../harness/cluster.js';
import { RealClusterEnvironment } from '../harness/real-cluster.js';
import { hybridTimestamp } from '../hlc/timestamp.js';
import { CODEC_OPTIONS, decode, encode } from '../net/codec.js';
import { FrameDecoder } from '../net/frame.js';
import type { PeerTlsMaterial } from '../net/peer-tls.js';
import { NODE_COUNTERS } from '../node/basalt-node.js';
import { SeededRandom } from '../sim/random.js';
import { makeTxId } from '../tx/core/tx-id.js';
import { type Client, embeddedClient } from './client.js';
import { startClientServer } from './cluster-server.js';
import { CLIENT_MAGIC } from './protocol.js';
import { connect } from './remote.js';

/** Packs anything msgpack can, without the codec's plain-data check: fuzz frames may hold what senders refuse. */
const hostile = new Packr(CODEC_OPTIONS);

const SEED = process.env['BASALT_FUZZ_SEED'] ?? 'client-fuzz-1';
const CLIENT_FRAMES = 2_000;
const PEER_FRAMES = 2_000;
const FRAMES_PER_CONNECTION_MAX = 40;
/** Above every id the fuzz uses. */
const SENTINEL_ID = 2_000_000;
const CONNECTIONS_AT_ONCE = 8;

/** The fuzz peer that throws batch `i` on the peer port (one per worker: see fuzzPort). */
const slotOf = (i: number): number => i % CONNECTIONS_AT_ONCE;
const peerName = (i: number): string => `fuzz-${slotOf(i)}`;
const peerId = (i: number): string => `fz-${slotOf(i)}`;
const T = 'accounts';
const FUZZ_TABLE = 'fuzz';

const KINDS = ['begin', 'get', 'getAll', 'put', 'putAll', 'remove', 'scan', 'commit', 'rollback', 'tables'];
const PEER_KINDS = [
  'Raft',
  'NodeHeartbeat',
  'NodeHeartbeatAck',
  'NodeLeaving',
  'MetaCommandRequest',
  'MetaCommandResponse',
  'MetaWatchRequest',
  'MetaWatchResponse',
  'ReadWriteRequest',
  'ReadOnlyRequest',
  'TxFinishRequest',
  'TxCleanupRequest',
  'LeaseConfirmRequest',
  'WriteConfirmRequest',
  'TxStateCoordinatorRequest',
  'TxStateCommitPartitionRequest',
  'TxStatePrimaryReplicaRequest',
  'TxRecoveryRequest',
  'ReadWriteResponse',
  'TxFinishResponse',
  'TxStateResponse',
  'Nope',
];
const FIELD_NAMES = [
  'id',
  'kind',
  'tx',
  'table',
  'key',
  'keys',
  'value',
  'entries',
  'range',
  'options',
  'readOnly',
  'readTimestamp',
  'stalenessMs',
  'type',
  'requestId',
  'from',
  'ts',
  'body',
  'error',
  'group',
  'magic',
  'version',
  '__proto__',
  'constructor',
];
const STRINGS = [
  ...KINDS,
  ...PEER_KINDS,
  FUZZ_TABLE,
  'k',
  '',
  'n1',
  'n2',
  'basalt',
  CLIENT_MAGIC,
  '\u{1F600}',
  '\uD800',
  'x'.repeat(2_000),
];

type Plain = null | boolean | number | bigint | string | Uint8Array | Plain[] | { [key: string]: Plain };

function randomPlain(rng: SeededRandom, depth: number): Plain {
  switch (rng.int(depth > 3 ? 7 : 9)) {
    case 0:
      return null;
    case 1:
      return rng.chance(0.5);
    case 2:
      return rng.pick([0, -1, 1, 2, 7, 2 ** 31, 2 ** 53, -(2 ** 60), 1.5, Number.NaN, Number.POSITIVE_INFINITY]);
    case 3:
      return rng.pick([0n, 1n, -5n, 2n ** 63n - 1n, 2n ** 64n + 3n, BigInt(Date.now()) << 16n]);
    case 4:
    case 5:
      return rng.pick(STRINGS);
    case 6:
      return Uint8Array.from({ length: rng.int(16) }, () => rng.int(256));
    case 7:
      return Array.from({ length: rng.int(5) }, () => randomPlain(rng, depth + 1));
    default: {
      const object: { [key: string]: Plain } = {};
      for (let i = rng.int(6); i > 0; i--) setField(object, rng.pick(FIELD_NAMES), randomPlain(rng, depth + 1));
      return object;
    }
  }
}

/** A well-formed request on the fuzz table (some valid, some naming handles that do not exist). */
function validRequest(rng: SeededRandom): Record<string, Plain> {
  const id = rng.between(1, 1_000_000);
  const tx: Record<string, Plain> = rng.chance(0.5) ? { tx: rng.between(1, 4) } : {};
  const key = `k${rng.int(20)}`;
  switch (rng.pick(KINDS)) {
    case 'begin':
      return { id, kind: 'begin', ...(rng.chance(0.2) && { readOnly: true }) };
    case 'get':
      return { id, kind: 'get', ...tx, table: FUZZ_TABLE, key };
    case 'getAll':
      return { id, kind: 'getAll', ...tx, table: FUZZ_TABLE, keys: [key, 'k1'] };
    case 'put':
      return { id, kind: 'put', ...tx, table: FUZZ_TABLE, key, value: randomPlain(rng, 2) };
    case 'putAll':
      return { id, kind: 'putAll', ...tx, table: FUZZ_TABLE, entries: [{ key, value: rng.int(100) }] };
    case 'remove':
      return { id, kind: 'remove', ...tx, table: FUZZ_TABLE, key };
    case 'scan':
      return { id, kind: 'scan', ...tx, table: FUZZ_TABLE, range: { prefix: 'k' }, options: { limit: 5 } };
    case 'commit':
      return { id, kind: 'commit', tx: rng.between(1, 4) };
    case 'rollback':
      return { id, kind: 'rollback', tx: rng.between(1, 4) };
    default:
      return { id, kind: 'tables' };
  }
}

/** What peer bodies name: the groups and partitions of the running cluster (set once the tables exist). */
interface PeerTargets {
  /** Partitions of the fuzz table: the transaction requests act on these only. */
  readonly partitions: readonly PartitionId[];
  /** Every Raft group, the metastorage's included: well-formed Raft messages to them are stale (term 0). */
  readonly groups: readonly string[];
}

const nowTs = (): bigint => BigInt(Date.now()) << 16n;

/** A well-formed body of a peer message kind, as connection `i`'s node would send it. */
function validPeerBody(rng: SeededRandom, i: number, targets: PeerTargets): Record<string, Plain> {
  const kind = rng.pick(PEER_KINDS);
  const self = peerId(i);
  const p = rng.pick(targets.partitions);
  const txId = makeTxId({ beginTimestamp: hybridTimestamp(Date.now()), nodeId: nodeId(self), counter: rng.int(8) });
  const ts = nowTs();
  const token = { holder: { nodeId: self, incarnation: 'fz' }, start: ts };
  const key = `fk${rng.int(10)}`;
  const outcome: Plain = rng.chance(0.5) ? { state: 'COMMITTED', commitTs: ts } : { state: 'ABORTED' };
  switch (kind) {
    case 'Raft': {
      const message = rng.pick<Record<string, Plain>>([
        { kind: 'Heartbeat', commit: 0 },
        { kind: 'Append', prevIndex: 0, prevTerm: 0, entries: [], commit: 0 },
        { kind: 'PreVote', lastIndex: 0, lastTerm: 0 },
        { kind: 'AppendResp', reject: false, index: 0, hintIndex: 0, hintTerm: 0 },
        { kind: 'VoteResp', reject: true },
      ]);
      return { kind, group: rng.pick(targets.groups), message: { ...message, from: peerName(i), to: 'n1', term: 0 } };
    }
    case 'NodeHeartbeat':
    case 'NodeHeartbeatAck':
      return { kind, physicalMs: Date.now() };
    case 'MetaCommandRequest':
      return {
        kind,
        command: { kind: 'DropTable', requestId: `fz-${rng.int(1_000)}`, name: 'no-such', ts, graceMs: 0 },
      };
    case 'MetaCommandResponse':
      return { kind, result: { status: 'UNKNOWN_TABLE', name: 'no-such' } };
    case 'MetaWatchRequest':
      return { kind, sinceRevision: -1 };
    case 'MetaWatchResponse':
      return { kind, view: null, leader: 'n1' };
    case 'ReadWriteRequest': {
      const operation = rng.pick<Record<string, Plain>>([
        { op: 'get', key },
        { op: 'put', key, value: rng.int(100) },
        { op: 'remove', key },
        { op: 'scan', range: { kind: 'prefix', prefix: 'fk' }, limit: 5 },
      ]);
      const full = operation['op'] !== 'get' && operation['op'] !== 'scan' && rng.chance(0.5);
      return { kind, partitionId: p, txId, coordinatorId: self, commitPartitionId: p, opSeq: 1, full, operation };
    }
    case 'ReadOnlyRequest':
      return { kind, partitionId: p, coordinatorId: self, readTs: ts, operation: { op: 'get', key } };
    case 'TxFinishRequest': {
      const commit = rng.chance(0.5);
      const enlisted = [{ partitionId: p, primaryName: 'n1', token }];
      return { kind, txId, commitPartitionId: p, commit, ...(commit && { commitTs: ts }), enlisted };
    }
    case 'TxCleanupRequest':
      return { kind, txId, partitions: [p], unlockOnly: false, outcome };
    case 'LeaseConfirmRequest':
      return { kind, partitionId: p, token, commitTs: ts };
    case 'WriteConfirmRequest':
      return { kind, partitionId: p, txId };
    case 'TxStateCoordinatorRequest':
      return { kind, txId, readTs: ts };
    case 'TxStateCommitPartitionRequest':
      return { kind, txId, commitPartitionId: p, readTs: ts, intentPartitionId: p, key };
    case 'TxStatePrimaryReplicaRequest':
      return { kind, txId, partitionId: p, key, readTs: ts };
    case 'TxRecoveryRequest':
      return { kind, txId, commitPartitionId: p, reporterPartitionId: p };
    case 'ReadWriteResponse':
      return { kind, lease: { token, holderName: 'n1', expiration: ts + 1n }, result: { op: 'written' } };
    case 'TxFinishResponse':
      return { kind, outcome };
    case 'TxStateResponse':
      return { kind, answer: rng.pick([null, { state: 'PENDING' }, outcome]) };
    default:
      return { kind };
  }
}

/** Values no field of a peer message accepts where its check expects something else: each breaks some check. */
const BAD_VALUES: readonly Plain[] = [-1, -5n, 0n, 1.5, 'x', '', true, null, [], {}, Number.NaN, 2 ** 53];

/**
 * Breaks 1–2 things of a well-formed body: a field removed or set to a bad value (one level deep too), the kind
 * changed, a COMMITTED outcome stripped of its commitTs. A Raft message keeps its term 0, so whatever passes its
 * checks is still stale.
 */
function mutateBody(rng: SeededRandom, body: Record<string, Plain>): Record<string, Plain> {
  const copy: Record<string, Plain> = { ...body };
  for (let n = rng.between(1, 2); n > 0; n--) {
    const fields = Object.keys(copy).filter((f) => f !== 'kind');
    switch (rng.int(6)) {
      case 0:
        if (fields.length > 0) delete copy[rng.pick(fields)];
        break;
      case 1:
        if (fields.length > 0) setField(copy, rng.pick(fields), rng.pick(BAD_VALUES));
        break;
      case 2: {
        const field = fields.length > 0 ? rng.pick(fields) : undefined;
        const inner = field === undefined ? undefined : copy[field];
        if (field === undefined || typeof inner !== 'object' || inner === null || Array.isArray(inner)) break;
        if (inner instanceof Uint8Array) break;
        const nested: Record<string, Plain> = { ...inner };
        const names = Object.keys(nested).filter(
          (f) => !(copy['kind'] === 'Raft' && ['term', 'from', 'to'].includes(f)),
        );
        if (names.length === 0) break;
        if (rng.chance(0.3)) delete nested[rng.pick(names)];
        else setField(nested, rng.pick(names), rng.pick(BAD_VALUES));
        copy[field] = nested;
        break;
      }
      case 3:
        copy['kind'] = rng.pick(['Nope', '', 'raft', 'TxCleanup', '__proto__', 'toString']);
        break;
      case 4:
        // The case: an outcome that says COMMITTED and carries no commitTs.
        copy['outcome'] = { state: 'COMMITTED' };
        break;
      default:
        setField(copy, rng.pick(FIELD_NAMES), rng.pick(BAD_VALUES));
    }
  }
  return copy;
}

/**
 * A messenger envelope with a timestamp near now (a far-future one is refused for its clock), mostly from the
 * identity connection `i` said hello with (any other is dropped as a sender mismatch), with a well-formed or mutated
 * body of a peer kind.
 */
function validEnvelope(rng: SeededRandom, i: number, targets: PeerTargets): Record<string, Plain> {
  const from = rng.chance(0.9) ? { name: peerName(i), id: peerId(i) } : { name: peerName(rng.int(64)), id: 'fz-x' };
  const ts = nowTs();
  const well = validPeerBody(rng, i, targets);
  const body = rng.chance(0.5) ? well : mutateBody(rng, well);
  switch (rng.int(4)) {
    case 0:
      return { type: 'oneway', from, ts, body };
    case 3:
      return { type: 'response', requestId: rng.between(1, 1000), from, ts, body };
    default:
      return { type: 'request', requestId: rng.between(1, 1000), from, ts, body };
  }
}

/** Changes 1–3 fields of `value`; `keep` names a field left alone (the request id, so that the reply is attributed). */
function mutate(rng: SeededRandom, value: Record<string, Plain>, keep?: string): Plain {
  const copy: Record<string, Plain> = { ...value };
  const fields = Object.keys(copy).filter((f) => f !== keep);
  for (let n = rng.between(1, 3); n > 0; n--) {
    switch (rng.int(keep === undefined ? 5 : 4)) {
      case 0:
        delete copy[rng.pick(fields)];
        break;
      case 1:
        setField(copy, rng.pick(fields), randomPlain(rng, 1));
        break;
      case 2:
        setField(copy, rng.pick(FIELD_NAMES.filter((f) => f !== keep)), randomPlain(rng, 1));
        break;
      case 3:
        copy['kind'] = rng.pick(STRINGS);
        break;
      default:
        return [copy];
    }
  }
  return copy;
}

/** An own property even for `__proto__` (plain assignment would change the object's prototype instead). */
function setField(object: Record<string, Plain>, name: string, value: Plain): void {
  Object.defineProperty(object, name, { value, enumerable: true, writable: true, configurable: true });
}

function framed(body: Uint8Array): Buffer {
  const header = Buffer.alloc(4);
  header.writeUInt32BE(body.length, 0);
  return Buffer.concat([header, body]);
}

function randomBytes(rng: SeededRandom, max: number): Buffer {
  return Buffer.from(Array.from({ length: rng.int(max) }, () => rng.int(256)));
}

/** A well-formed payload for connection `i` (the index its hello used). */
type Valid = (rng: SeededRandom, i: number) => Record<string, Plain>;

/**
 * One fuzz item the port should answer and survive: a valid payload, one mutated around its id, or a wrong shape
 * carrying an id. `idField` names the field that attributes a reply ('id' on the client port).
 */
function survivableItem(rng: SeededRandom, valid: Valid, i: number, idField: string): Buffer {
  switch (rng.int(5)) {
    case 0:
      return framed(hostile.pack(valid(rng, i)));
    case 1: {
      const shape = randomPlain(rng, 0);
      const object: Record<string, Plain> =
        typeof shape === 'object' && shape !== null && !Array.isArray(shape) && !(shape instanceof Uint8Array)
          ? shape
          : {};
      setField(object, idField, rng.between(1, 1_000_000));
      return framed(hostile.pack(object));
    }
    default:
      return framed(hostile.pack(mutate(rng, valid(rng, i), idField)));
  }
}

/** One fuzz item after which the port may (and usually does) close the connection. */
function killerItem(rng: SeededRandom, valid: Valid, i: number): Buffer {
  switch (rng.int(6)) {
    case 0:
      return framed(randomBytes(rng, 64));
    case 1: {
      const whole = framed(hostile.pack(valid(rng, i)));
      return whole.subarray(0, rng.int(whole.length));
    }
    case 2: {
      const header = Buffer.alloc(4);
      header.writeUInt32BE(rng.pick([LIMITS.frameBytesMax + 1, 0xffffffff, 2 ** 31]), 0);
      return Buffer.concat([header, randomBytes(rng, 32)]);
    }
    case 3:
      return framed(hostile.pack(randomPlain(rng, 0)));
    case 4:
      return framed(hostile.pack(mutate(rng, valid(rng, i))));
    default:
      return randomBytes(rng, 48);
  }
}

interface PortFuzz {
  readonly port: number;
  /** Dial batch `i` with TLS 1.3: the CA to trust, and a certificate to present (the peer port wants one). */
  readonly tls?: (i: number) => { readonly ca: string; readonly cert?: string; readonly key?: string };
  readonly hello: (rng: SeededRandom, i: number) => Plain;
  readonly valid: Valid;
  readonly idField: string;
  /** Called with every decoded frame the port sent back. */
  readonly onReply: (payload: unknown) => void;
  /** A request sent after each batch, whose reply tells that the batch was read. */
  readonly sentinel?: {
    readonly request: (i: number) => Plain;
    /** True for the sentinel's reply on the fuzz connection itself. */
    readonly isReply: (payload: unknown) => boolean;
    /** Resolves once batch `i`'s sentinel was answered elsewhere (the peer port answers on a connection it dials). */
    readonly answered?: (i: number) => Promise<void>;
  };
}

/** Throws `frames` fuzz items at a port over many short connections; resolves once every connection ended. */
async function fuzzPort(rng: SeededRandom, frames: number, target: PortFuzz): Promise<void> {
  const batches: { readonly bytes: Buffer; readonly i: number }[] = [];
  for (let sent = 0, i = 0; sent < frames; i++) {
    const n = Math.min(frames - sent, rng.between(1, FRAMES_PER_CONNECTION_MAX));
    const parts: Buffer[] = [];
    if (rng.chance(0.85)) parts.push(framed(hostile.pack(target.hello(rng, i))));
    // Items the port survives, then often one that ends the connection (anything after it would go unread).
    for (let j = 1; j < n; j++) parts.push(survivableItem(rng, target.valid, i, target.idField));
    parts.push(
      rng.chance(0.7) ? killerItem(rng, target.valid, i) : survivableItem(rng, target.valid, i, target.idField),
    );
    batches.push({ bytes: Buffer.concat(parts), i });
    sent += n;
  }
  // Worker w throws batches w, w + CONNECTIONS_AT_ONCE, ...: on the peer port a worker is one fuzz peer (slotOf), and
  // two connections of one peer at once would supersede each other.
  const worker = async (w: number): Promise<void> => {
    for (let b = w; b < batches.length; b += CONNECTIONS_AT_ONCE)
      await throwBatch(target, batches[b]!.bytes, batches[b]!.i);
  };
  await Promise.all(Array.from({ length: CONNECTIONS_AT_ONCE }, (_, w) => worker(w)));
}

/**
 * Sends one batch on a fresh connection and reads what comes back until the port closes it, or answers the sentinel
 * request that follows the batch (replies to the batch's validation failures precede it), or 5 s passed (a
 * truncated frame swallows the sentinel). Without a sentinel the batch is followed by a half-close.
 */
function throwBatch(target: PortFuzz, bytes: Buffer, i: number): Promise<void> {
  return new Promise((resolve) => {
    const tls = target.tls?.(i);
    const socket =
      tls === undefined
        ? netConnect({ host: '127.0.0.1', port: target.port })
        : tlsConnect({ host: '127.0.0.1', port: target.port, ...tls, minVersion: 'TLSv1.3' });
    const decoder = new FrameDecoder(LIMITS.frameBytesMax);
    const done = (): void => {
      clearTimeout(safety);
      socket.destroy();
      resolve();
    };
    // Generous: on a loaded machine the replies to a batch can take well over a second.
    const safety = setTimeout(done, 5_000);
    target.sentinel?.answered?.(i).then(done);
    socket.on(tls === undefined ? 'connect' : 'secureConnect', () => {
      if (target.sentinel === undefined) socket.end(bytes);
      else socket.write(Buffer.concat([bytes, framed(encode(target.sentinel.request(i)))]));
    });
    socket.on('data', (chunk: Buffer) => {
      for (const frame of decoder.push(chunk).frames) {
        const payload = decode(frame);
        if (target.sentinel?.isReply(payload)) return done();
        target.onReply(payload);
      }
    });
    socket.on('error', () => {});
    socket.on('close', done);
  });
}

/**
 * Listeners standing in for the fuzz peers, one per slot: a node sends everything it has for a peer, answers
 * included, on a connection it dials to the address the peer's hello named. Each answers n1's hello with its slot's
 * identity and hands every envelope it then reads to `onEnvelope`, or to the batch waiting for it as its sentinel.
 */
class FakePeers {
  private readonly servers: Server[] = [];
  private readonly addresses: string[] = [];
  private readonly waiting = new Map<number, () => void>();
  private readonly sockets = new Set<Socket>();

  private constructor(private readonly onEnvelope: (payload: unknown) => void) {}

  /** With `tls`, each listener takes n1's dials with mutual TLS, presenting its slot's certificate. */
  static async start(
    onEnvelope: (payload: unknown) => void,
    tls?: (slot: number) => PeerTlsMaterial,
  ): Promise<FakePeers> {
    const fakes = new FakePeers(onEnvelope);
    for (let slot = 0; slot < CONNECTIONS_AT_ONCE; slot++) {
      const serve = (socket: Socket) => fakes.serve(socket, slot);
      const material = tls?.(slot);
      const server =
        material === undefined
          ? createServer(serve)
          : tlsCreateServer({ ...material, requestCert: true, rejectUnauthorized: true, minVersion: 'TLSv1.3' }, serve);
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      fakes.servers.push(server);
      fakes.addresses.push(`127.0.0.1:${(server.address() as AddressInfo).port}`);
    }
    return fakes;
  }

  address(i: number): string {
    return this.addresses[slotOf(i)]!;
  }

  /** Resolves when the response to `requestId` arrives. */
  answered(requestId: number): Promise<void> {
    return new Promise((resolve) => this.waiting.set(requestId, resolve));
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await Promise.all(
      this.servers.map((server) => {
        return new Promise<void>((resolve) => server.close(() => resolve()));
      }),
    );
  }

  private serve(socket: Socket, slot: number): void {
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
    const decoder = new FrameDecoder(LIMITS.frameBytesMax);
    let greeted = false;
    socket.on('data', (chunk: Buffer) => {
      for (const frame of decoder.push(chunk).frames) {
        const payload = decode(frame) as { type?: unknown; requestId?: unknown };
        if (!greeted) {
          greeted = true;
          socket.write(framed(encode({ magic: 'basalt', protocolVersion: 1, name: peerName(slot), id: peerId(slot) })));
          continue;
        }
        const waiter = typeof payload.requestId === 'number' ? this.waiting.get(payload.requestId) : undefined;
        if (payload.type === 'response' && waiter !== undefined) {
          this.waiting.delete(payload.requestId as number);
          waiter();
          continue;
        }
        this.onEnvelope(payload);
      }
    });
    socket.on('error', () => {});
  }
}

async function until(condition: () => boolean, what: string, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * Every Raft group of every node still applies: a write to every partition of both tables and a metastorage command
 * (a new table), then every node's applied index of every group it hosts moves past where it was.
 */
async function everyGroupApplies(cluster: Cluster<Client>): Promise<void> {
  const nodes = cluster.nodes.map((n) => cluster.basaltNode(n)!);
  const before = nodes.map((node) => new Map(node.raft.groupIds().map((g) => [g, node.raft.status(g)!.applied])));
  await cluster.client('n2').transaction(async (tx) => {
    for (const table of [T, FUZZ_TABLE]) {
      const { partitions } = cluster.tables().find((t) => t.name === table)!;
      const written = new Set<string>();
      for (let j = 0; written.size < partitions; j++) {
        const key = `applies-${j}`;
        const { partition } = cluster.placement(table, key);
        if (written.has(partition)) continue;
        written.add(partition);
        await tx.put(table, key, j);
      }
    }
  });
  await cluster.client('n3').createTable('after-fuzz', { partitions: 1, replicas: 3 });
  await until(
    () =>
      nodes.every((node, i) => [...before[i]!].every(([g, applied]) => (node.raft.status(g)?.applied ?? -1) > applied)),
    'every group on every node to apply past its index before the checks',
  );
}

/** Every node's and every fuzz peer's certificate of one CA, for the run over TLS. */
async function fuzzCertificates(dir: string, names: readonly string[]): Promise<Map<string, PeerTlsMaterial>> {
  const all = [...names, ...Array.from({ length: CONNECTIONS_AT_ONCE }, (_, slot) => peerName(slot))];
  const dirs = await localClusterCerts(dir, all);
  return new Map(all.map((name) => [name, loadPeerTls(dirs.get(name)!, name, new Date())]));
}

async function fuzzNode(withTls: boolean): Promise<void> {
  const names = defaultNodeNames(3);
  const errors: string[] = [];
  const certsDir = mkdtempSync(join(tmpdir(), 'basalt-fuzz-certs-'));
  const certs = withTls ? await fuzzCertificates(certsDir, names) : undefined;
  const material = (name: string): PeerTlsMaterial => certs!.get(name)!;
  const env = new RealClusterEnvironment({
    names,
    transport: 'tcp',
    onError: (node: NodeName, error: unknown) => errors.push(`${node}: ${String(error)}`),
    ...(certs !== undefined && { peerTls: material }),
  });
  const cluster = await Cluster.start<Client>(env, names, embeddedClient);
  const server = await startClientServer(cluster, 'n1', certs === undefined ? {} : { tls: material('n1') });
  assert.equal(server.secure, withTls);
  const ca = certs === undefined ? {} : { ca: material('n1').ca };
  const peerCodes = new Map<string, number>();
  // n1 answers a peer on the connection it dials to the address the peer's hello named.
  const fakes = await FakePeers.start(
    (payload) => {
      const reply = payload as { type?: string; error?: { code?: string } };
      if (reply.type !== 'response') return;
      const code = reply.error?.code ?? 'ok';
      peerCodes.set(code, (peerCodes.get(code) ?? 0) + 1);
    },
    certs && ((slot) => material(peerName(slot))),
  );
  try {
    await cluster.client('n1').createTable(T, { partitions: 4, replicas: 3 });
    await cluster.client('n1').createTable(FUZZ_TABLE, { partitions: 2, replicas: 3 });
    const rng = new SeededRandom(SEED);
    const codes = new Map<string, number>();
    await fuzzPort(rng.fork('client'), CLIENT_FRAMES, {
      port: server.port,
      ...(certs !== undefined && { tls: () => ({ ca: material('n1').ca }) }),
      hello: (r) => (r.chance(0.9) ? { magic: CLIENT_MAGIC, version: 1 } : randomPlain(r, 0)),
      valid: validRequest,
      idField: 'id',
      sentinel: {
        request: () => ({ id: SENTINEL_ID, kind: 'tables' }),
        isReply: (payload) => (payload as { id?: unknown }).id === SENTINEL_ID,
      },
      onReply: (payload) => {
        const code = (payload as { error?: { code?: string } }).error?.code ?? 'ok';
        codes.set(code, (codes.get(code) ?? 0) + 1);
      },
    });
    // Every group elected and applying before the peer fuzz (well-formed Raft messages at term 0 are then stale).
    await cluster.client('n1').put(FUZZ_TABLE, 'warm', 1);
    const fuzzTable = cluster.tables().find((t) => t.name === FUZZ_TABLE)!;
    const targets: PeerTargets = {
      partitions: Array.from({ length: fuzzTable.partitions }, (_, i) => tablePartitionId(fuzzTable.id, i)),
      groups: cluster.basaltNode('n1')!.raft.groupIds(),
    };
    const peerAddress = env.address(nodeName('n1'));
    assert.ok(peerAddress !== undefined);
    await fuzzPort(rng.fork('peer'), PEER_FRAMES, {
      port: Number(peerAddress.slice(peerAddress.lastIndexOf(':') + 1)),
      ...(certs !== undefined && { tls: (i: number) => material(peerName(i)) }),
      hello: (r, i) =>
        r.chance(0.9)
          ? { magic: 'basalt', protocolVersion: 1, name: peerName(i), id: peerId(i), address: fakes.address(i) }
          : randomPlain(r, 0),
      valid: (r, i) => validEnvelope(r, i, targets),
      idField: 'requestId',
      sentinel: {
        request: (i) => ({
          type: 'request',
          requestId: SENTINEL_ID + i,
          from: { name: peerName(i), id: peerId(i) },
          ts: nowTs(),
          body: { kind: 'NodeHeartbeat' },
        }),
        isReply: () => false,
        answered: (i) => fakes.answered(SENTINEL_ID + i),
      },
      onReply: () => {},
    });
    // The peer port refused malformed bodies with coded errors and counted them; well-formed ones were answered.
    for (const code of ['ok', 'MALFORMED_MESSAGE', 'UNKNOWN_MESSAGE', 'MALFORMED_FRAME']) {
      assert.ok((peerCodes.get(code) ?? 0) > 0, `no ${code} peer reply among ${JSON.stringify([...peerCodes])}`);
    }
    const malformed = cluster.node('n1').metrics().counters[NODE_COUNTERS.malformedPeerMessages] ?? 0;
    assert.ok(malformed >= (peerCodes.get('MALFORMED_MESSAGE') ?? 0), `n1 counted ${malformed} malformed messages`);

    const replies = [...codes.values()].reduce((a, b) => a + b, 0);
    assert.ok(
      replies >= CLIENT_FRAMES / 2,
      `only ${replies} replies (${JSON.stringify([...codes])}): the fuzz did not get past the first frames`,
    );
    // connect() to a peer port is refused at the hello: it is not a client port.
    const asPeer = certs === undefined ? {} : { ...ca, cert: material('fuzz-0').cert, key: material('fuzz-0').key };
    // Over TLS the client sees the refusal as the peer port closing the connection (CONNECTION_CLOSED) or, as over
    // TCP, as an answer it cannot take for a client port's hello (HANDSHAKE_FAILED).
    const refusedAs = certs === undefined ? ['HANDSHAKE_FAILED'] : ['HANDSHAKE_FAILED', 'CONNECTION_CLOSED'];
    await assert.rejects(connect(peerAddress, asPeer), (e: BasaltError) => refusedAs.includes(e.code));
    // The client port refused bad input with coded errors, not silence.
    for (const code of ['ok', 'INVALID_ARGUMENT', 'MALFORMED_FRAME', 'UNKNOWN_MESSAGE', 'FRAME_TOO_LARGE']) {
      assert.ok((codes.get(code) ?? 0) > 0, `no ${code} reply among ${JSON.stringify([...codes])}`);
    }
    // Every fuzz connection is closed and every transaction they opened was rolled back.
    await until(() => server.connections === 0 && server.openTransactions === 0, 'fuzz connections to close');

    // n1 still serves: through its client port, and as a peer (a transaction over every partition via n2).
    const remote = await connect(server.address, ca);
    try {
      await remote.transaction(async (tx) => {
        for (const k of ['a', 'b', 'c', 'd', 'e', 'f']) await tx.put(T, k, k);
      });
      assert.deepEqual(await remote.transaction((tx) => tx.getAll(T, ['a', 'f'])), ['a', 'f']);
    } finally {
      await remote.close();
    }
    assert.ok(cluster.node('n1').up);
    await cluster.client('n2').transaction(async (tx) => {
      for (const k of ['a', 'b', 'c', 'd', 'e', 'f']) assert.equal(await tx.get(T, k), k);
      await tx.put(T, 'after-fuzz', 1);
    });
    assert.equal(await cluster.client('n1').get(T, 'after-fuzz'), 1);
    await everyGroupApplies(cluster);
    for (const n of names) assert.ok(cluster.node(n).up, `${n} is up`);
    assert.deepEqual(errors, [], 'no node reported a background failure');
  } catch (error) {
    console.error(`client fuzz failed with seed ${SEED} (replay: BASALT_FUZZ_SEED=${SEED})`);
    throw error;
  } finally {
    await server.close();
    await cluster.stop();
    await fakes.close();
    rmSync(certsDir, { recursive: true, force: true });
  }
}

it(`fuzzed client and peer ports leave the node serving transactions (seed ${SEED})`, () => fuzzNode(false));

it(`the same over TLS: mutual TLS between the nodes and the fuzz peers, TLS on the client port (seed ${SEED})`, () =>
  fuzzNode(true));
