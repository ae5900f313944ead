/**
 * Bad input on a live node (issue 7 item 6): seeded random and mutated frames thrown at n1's client port and at its
 * peer (messenger/Raft) port over real TCP: random bytes, truncated frames, huge length prefixes, valid msgpack of
 * the wrong shape, mutated valid requests and envelopes, bad hellos. Afterwards every fuzz connection is gone, the
 * client port answered with coded errors, and the node still serves transactions through its client port and as a
 * member of the cluster. The seed is printed on failure; BASALT_FUZZ_SEED replays one.
 */
import assert from 'node:assert/strict';
import { connect as netConnect } from 'node:net';
import { it } from 'node:test';
import { Packr } from 'msgpackr';
import type { BasaltError } from '../core/errors.js';
import { type NodeName, nodeName } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { Cluster, defaultNodeNames } from '../harness/cluster.js';
import { RealClusterEnvironment } from '../harness/real-cluster.js';
import { CODEC_OPTIONS, decode, encode } from '../net/codec.js';
import { FrameDecoder } from '../net/frame.js';
import { SeededRandom } from '../sim/random.js';
import { type Client, embeddedClient } from './client.js';
import { startClientServer } from './cluster-server.js';
import { CLIENT_MAGIC } from './protocol.js';
import { connect } from './remote.js';

/** Packs anything msgpack can, without the codec's plain-data check: fuzz frames may hold what senders refuse. */
const hostile = new Packr(CODEC_OPTIONS);

const SEED = process.env['BASALT_FUZZ_SEED'] ?? 'client-fuzz-1';
const CLIENT_FRAMES = 2_000;
const PEER_FRAMES = 1_000;
const FRAMES_PER_CONNECTION_MAX = 40;
/** Above every id the fuzz uses. */
const SENTINEL_ID = 2_000_000;
const CONNECTIONS_AT_ONCE = 8;
const T = 'accounts';
const FUZZ_TABLE = 'fuzz';

const KINDS = ['begin', 'get', 'getAll', 'put', 'putAll', 'remove', 'scan', 'commit', 'rollback', 'tables'];
const PEER_KINDS = [
  'NodeHeartbeat',
  'NodeHeartbeatAck',
  'MetaCommandRequest',
  'ReadWriteRequest',
  'Raft',
  'TxFinishRequest',
  'TxStateCoordinatorRequest',
  'TxRecoveryRequest',
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

/** A messenger envelope from an unknown sender, with a timestamp near now (a far-future one is refused for its clock). */
function validEnvelope(rng: SeededRandom): Record<string, Plain> {
  const from = { name: `fuzz-${rng.int(4)}`, id: `fz-${rng.int(4)}` };
  const ts = BigInt(Date.now()) << 16n;
  const body = { kind: rng.pick(PEER_KINDS), ...(rng.chance(0.5) && { group: rng.pick(['meta', 't1p0']) }) };
  switch (rng.int(3)) {
    case 0:
      return { type: 'oneway', from, ts, body };
    case 1:
      return { type: 'request', requestId: rng.between(1, 1000), from, ts, body };
    default:
      return { type: 'response', requestId: rng.between(1, 1000), from, ts, body };
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

/**
 * One fuzz item the port should answer and survive: a valid payload, one mutated around its id, or a wrong shape
 * carrying an id. `idField` names the field that attributes a reply ('id' on the client port).
 */
function survivableItem(
  rng: SeededRandom,
  valid: (rng: SeededRandom) => Record<string, Plain>,
  idField: string,
): Buffer {
  switch (rng.int(5)) {
    case 0:
      return framed(hostile.pack(valid(rng)));
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
      return framed(hostile.pack(mutate(rng, valid(rng), idField)));
  }
}

/** One fuzz item after which the port may (and usually does) close the connection. */
function killerItem(rng: SeededRandom, valid: (rng: SeededRandom) => Record<string, Plain>): Buffer {
  switch (rng.int(6)) {
    case 0:
      return framed(randomBytes(rng, 64));
    case 1: {
      const whole = framed(hostile.pack(valid(rng)));
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
      return framed(hostile.pack(mutate(rng, valid(rng))));
    default:
      return randomBytes(rng, 48);
  }
}

interface PortFuzz {
  readonly port: number;
  readonly hello: (rng: SeededRandom, i: number) => Plain;
  readonly valid: (rng: SeededRandom) => Record<string, Plain>;
  readonly idField: string;
  /** Called with every decoded frame the port sent back. */
  readonly onReply: (payload: unknown) => void;
  /** A request sent after each batch, whose reply tells that the batch was read. */
  readonly sentinel?: { readonly request: Plain; readonly isReply: (payload: unknown) => boolean };
}

/** Throws `frames` fuzz items at a port over many short connections; resolves once every connection ended. */
async function fuzzPort(rng: SeededRandom, frames: number, target: PortFuzz): Promise<void> {
  const batches: Buffer[] = [];
  for (let sent = 0, i = 0; sent < frames; i++) {
    const n = Math.min(frames - sent, rng.between(1, FRAMES_PER_CONNECTION_MAX));
    const parts: Buffer[] = [];
    if (rng.chance(0.85)) parts.push(framed(hostile.pack(target.hello(rng, i))));
    // Items the port survives, then often one that ends the connection (anything after it would go unread).
    for (let j = 1; j < n; j++) parts.push(survivableItem(rng, target.valid, target.idField));
    parts.push(rng.chance(0.7) ? killerItem(rng, target.valid) : survivableItem(rng, target.valid, target.idField));
    batches.push(Buffer.concat(parts));
    sent += n;
  }
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < batches.length) await throwBatch(target, batches[next++]!);
  };
  await Promise.all(Array.from({ length: CONNECTIONS_AT_ONCE }, worker));
}

/**
 * Sends one batch on a fresh connection and reads what comes back until the port closes it, or answers the sentinel
 * request that follows the batch (replies to the batch's validation failures precede it), or 5 s passed (a
 * truncated frame swallows the sentinel). Without a sentinel the batch is followed by a half-close.
 */
function throwBatch(target: PortFuzz, bytes: Buffer): Promise<void> {
  return new Promise((resolve) => {
    const socket = netConnect({ host: '127.0.0.1', port: target.port });
    const decoder = new FrameDecoder(LIMITS.frameBytesMax);
    const done = (): void => {
      clearTimeout(safety);
      socket.destroy();
      resolve();
    };
    // Generous: on a loaded machine the replies to a batch can take well over a second.
    const safety = setTimeout(done, 5_000);
    socket.on('connect', () => {
      if (target.sentinel === undefined) socket.end(bytes);
      else socket.write(Buffer.concat([bytes, framed(encode(target.sentinel.request))]));
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

async function until(condition: () => boolean, what: string, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

it(`fuzzed client and peer ports leave the node serving transactions (seed ${SEED})`, async () => {
  const names = defaultNodeNames(3);
  const errors: string[] = [];
  const env = new RealClusterEnvironment({
    names,
    transport: 'tcp',
    onError: (node: NodeName, error: unknown) => errors.push(`${node}: ${String(error)}`),
  });
  const cluster = await Cluster.start<Client>(env, names, embeddedClient);
  const server = await startClientServer(cluster, 'n1');
  try {
    await cluster.client('n1').createTable(T, { partitions: 4, replicas: 3 });
    await cluster.client('n1').createTable(FUZZ_TABLE, { partitions: 2, replicas: 3 });
    const rng = new SeededRandom(SEED);
    const codes = new Map<string, number>();
    await fuzzPort(rng.fork('client'), CLIENT_FRAMES, {
      port: server.port,
      hello: (r) => (r.chance(0.9) ? { magic: CLIENT_MAGIC, version: 1 } : randomPlain(r, 0)),
      valid: validRequest,
      idField: 'id',
      sentinel: {
        request: { id: SENTINEL_ID, kind: 'tables' },
        isReply: (payload) => (payload as { id?: unknown }).id === SENTINEL_ID,
      },
      onReply: (payload) => {
        const code = (payload as { error?: { code?: string } }).error?.code ?? 'ok';
        codes.set(code, (codes.get(code) ?? 0) + 1);
      },
    });
    const peerAddress = env.address(nodeName('n1'));
    assert.ok(peerAddress !== undefined);
    await fuzzPort(rng.fork('peer'), PEER_FRAMES, {
      port: Number(peerAddress.slice(peerAddress.lastIndexOf(':') + 1)),
      hello: (r, i) =>
        r.chance(0.9) ? { magic: 'basalt', protocolVersion: 1, name: `fuzz-${i}`, id: `fz-${i}` } : randomPlain(r, 0),
      valid: validEnvelope,
      idField: 'requestId',
      onReply: () => {},
    });

    const replies = [...codes.values()].reduce((a, b) => a + b, 0);
    assert.ok(
      replies >= CLIENT_FRAMES / 2,
      `only ${replies} replies (${JSON.stringify([...codes])}): the fuzz did not get past the first frames`,
    );
    // connect() to a peer port is refused at the hello: it is not a client port.
    await assert.rejects(connect(peerAddress), (e: BasaltError) => e.code === 'HANDSHAKE_FAILED');
    // The client port refused bad input with coded errors, not silence.
    for (const code of ['ok', 'INVALID_ARGUMENT', 'MALFORMED_FRAME', 'UNKNOWN_MESSAGE', 'FRAME_TOO_LARGE']) {
      assert.ok((codes.get(code) ?? 0) > 0, `no ${code} reply among ${JSON.stringify([...codes])}`);
    }
    // Every fuzz connection is closed and every transaction they opened was rolled back.
    await until(() => server.connections === 0 && server.openTransactions === 0, 'fuzz connections to close');

    // n1 still serves: through its client port, and as a peer (a transaction over every partition via n2).
    const remote = await connect(server.address);
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
    assert.deepEqual(errors, [], 'no node reported a background failure');
  } catch (error) {
    console.error(`client fuzz failed with seed ${SEED} (replay: BASALT_FUZZ_SEED=${SEED})`);
    throw error;
  } finally {
    await server.close();
    await cluster.stop();
  }
});
