/**
 * `basalt start`: one node of a cluster as its own process. It listens for peers on `--host:--port` over TCP and keeps
 * its data in LMDB (a log and a state environment) in its own `--data` directory (or in memory). `--peers` lists the
 * other nodes as `name=host:port` or bare `host:port`; bare ones are probed until they answer with their names (discovery.ts) while
 * this node's transport already listens, and only then does the node start, with every member known. It prints its
 * address, leaders it becomes, a ready line once it knows the metastorage state, then status lines; a signal stops it
 * gracefully (also while it still waits for peers). With `--client-port` it serves `connect()` clients on its host,
 * and coordinates their transactions. Once its members are known, its transport refuses peers that run with other
 * members (handshake.ts); such a refusal is printed as a warning and logged (warn) once per peer and member set.
 */

import { existsSync, statSync } from 'node:fs';
import { hostname } from 'node:os';
import { join, resolve } from 'node:path';
import { Authenticator } from '../client/auth.js';
import { nodeClient } from '../client/node-client.js';
import { hashPassword, passwordProblem, SALT_BYTES } from '../client/passwords.js';
import { ClientServer } from '../client/server.js';
import { BasaltError, isBasaltError } from '../core/errors.js';
import { freshNodeId, type NodeIdentity, type NodeName, nodeName } from '../core/ids.js';
import { META_GROUP, tablePartitionId } from '../core/partitioning.js';
import { RealClock } from '../env/real-clock.js';
import { RealRandom, secureRandomBytes } from '../env/real-random.js';
import { RealTimers } from '../env/real-timers.js';
import { openNodeStorage } from '../harness/real-cluster.js';
import type { DiagnosticListener, NetDiagnosticKind } from '../net/diagnostics.js';
import type { PeerTlsMaterial } from '../net/peer-tls.js';
import { probePeer } from '../net/probe.js';
import { TcpTransport } from '../net/tcp-transport.js';
import type { BasaltNode, NodeStorage } from '../node/basalt-node.js';
import { type NodeOptions, startNode } from '../node/compose.js';
import { MemoryLogStorage } from '../raft/memory-log-storage.js';
import { MemoryStorageEngine } from '../storage/storage-engine.js';
import { CERT_FILES, loadPeerTls } from './certs.js';
import { log, type TableSpec, untilSignal } from './common.js';
import { discoverPeers } from './discovery.js';
import { createNodeLogger, type NodeLogger } from './logging.js';
import { MetricsServer } from './metrics-http.js';
import { advertisedHost, hostPort, type StartSettings } from './start-config.js';

/** How long a starting node waits for every bare peer address to answer (nodes started by hand, one by one). */
const PEER_DISCOVERY_TIMEOUT_MS = 120_000;
const WAITING_REPORT_MS = 5_000;
const READY_WAIT_MS = 60_000;
const POLL_MS = 50;
const JOIN_PROBE_INTERVAL_MS = 500;

export async function runStart(options: StartSettings): Promise<void> {
  const stopRequested = untilSignal();
  const name = nodeName(options.name);
  const logger = createNodeLogger({
    node: name,
    level: options.logLevel,
    ...(options.logFile !== undefined && { file: options.logFile }),
  });
  const random = new RealRandom();
  const timers = new RealTimers();
  const self = { name, id: freshNodeId(random.uuid()) };
  // Certificates before anything opens: a bad directory is one error, not peers refusing each other in a loop.
  const tls = options.certsDir === undefined ? undefined : loadPeerTls(resolve(options.certsDir), name, new Date());
  const adminPassword = initAdminPassword(options, process.env);
  // Storage before the transport: once peers can reach this node, it must be able to answer them without a pause.
  const { storage, dataDir } = await openStorage(options, name);
  // Listen first: peers started at the same time probe this node while it probes them.
  const transport = await TcpTransport.start({
    self,
    host: options.host,
    port: options.port,
    timers,
    random,
    ...(tls !== undefined && { tls }),
    onDiagnostic: transportDiagnostics(name, logger),
  }).catch(async (error: unknown) => {
    await storage.close?.();
    throw error;
  });
  // What others dial: differs from the bound address behind a wildcard host, a container or a translated network.
  const reachHost = advertisedHost(options, hostname());
  const peerAddress = hostPort(reachHost, options.advertise?.port ?? transport.port);
  const advertisedNote = peerAddress === transport.address ? '' : `, advertised as ${peerAddress}`;
  const tlsNote = tls === undefined ? '' : `, mutual TLS with the certificates in ${options.certsDir}`;
  log(`node ${name} listening on ${transport.address}${advertisedNote} (id ${self.id}${tlsNote})`);
  const aborted = new AbortController();
  void stopRequested.then(() => aborted.abort());
  const tlsTargets: TlsTarget[] = [transport];
  if (options.certsDir !== undefined) watchCertificates(resolve(options.certsDir), name, tlsTargets, aborted.signal);
  // Founders: the members the cluster was started with (every node's hello carries them). A node started with
  // --peers is one of them; a node started with --join learns them from the node it joins.
  let founders: NodeName[] | undefined;
  let joinVia: NodeName | undefined;
  try {
    if (options.join !== undefined) {
      const joined = await probeCluster({ self, address: options.join, timers, signal: aborted.signal, tls });
      if (joined !== undefined) {
        founders = [...joined.members];
        joinVia = joined.peer;
      }
    } else {
      const members = await discoverPeers({
        self,
        peers: options.peers,
        timers,
        timeoutMs: PEER_DISCOVERY_TIMEOUT_MS,
        signal: aborted.signal,
        onWaiting: waitingReporter(name),
        ...(tls !== undefined && { tls }),
      });
      if (members !== undefined) {
        founders = [name, ...members.keys()];
        for (const [peer, address] of members) transport.addPeer(peer, address);
      }
    }
  } finally {
    if (founders === undefined) {
      await transport.close();
      await storage.close?.();
    }
  }
  if (founders === undefined) {
    log(`basalt: node ${name} stopped before its peers answered`);
    logger.flush();
    return;
  }
  // Members first: the hellos to the peers then carry them, and a peer that runs with other members is refused.
  transport.setMembers(founders);
  transport.setAdvertised(peerAddress);
  if (joinVia !== undefined && options.join !== undefined) {
    transport.addPeer(joinVia, options.join);
    log(`basalt: node ${name} joins the cluster of ${joinVia} (founded by ${founders.join(', ')})`);
  } else {
    log(`basalt: node ${name} members: ${founders.join(', ')}`);
  }
  const node = await startNode({
    transport,
    clock: new RealClock(),
    timers,
    random,
    storage,
    nodes: founders,
    advertise: peerAddress,
    ...(joinVia !== undefined && { join: true, metaSeeds: [joinVia] }),
    onDiagnostic: transportDiagnostics(name, logger),
    ...environmentSwitches(process.env),
    onError: (error) => {
      log(`basalt: node ${name}: ${String(error)}`);
      logger.error({ err: String(error) }, 'background failure');
    },
  });
  logger.info(
    {
      address: transport.address,
      advertised: peerAddress,
      ephemeralId: self.id,
      dataDir: dataDir ?? 'memory',
      fsync: options.fsync,
    },
    'node started',
  );
  if (!options.fsync && !options.memory)
    log(`basalt: node ${name} runs WITHOUT fsync: a crash may lose acknowledged writes`);
  let leaderChanges = 0;
  node.onLeaderChange((change) => {
    leaderChanges++;
    logger.info({ group: change.group, role: change.role, term: change.term, leader: change.leader }, 'leader change');
    if (change.role !== 'leader') return;
    const what = change.group === META_GROUP ? 'metastorage' : `partition ${change.group}`;
    log(`${what} leader: ${name} (term ${change.term})`);
  });
  const { clientServer, metricsServer } = await openServers({
    options,
    node,
    reachHost,
    logger,
    leaderChanges: () => leaderChanges,
    tls,
    timers,
  });
  for (const server of [clientServer, metricsServer]) if (server !== undefined) tlsTargets.push(server);
  if (await until(() => aborted.signal.aborted || node.metastorage.revision > 0, READY_WAIT_MS)) {
    if (options.initAdmin !== undefined) await initAdmin(node, options.initAdmin, adminPassword);
    for (const spec of options.tables) {
      if (aborted.signal.aborted) break;
      await ensureTable(node, spec);
      await until(() => aborted.signal.aborted || node.metastorage.table(spec.name) !== undefined, READY_WAIT_MS);
    }
    // Ready means a first request can be served: every partition of these tables this node hosts has a primary, or
    // rests under a known Raft leader (the request wakes it, and its leader takes a lease). The supervisor's ready
    // line waits for every node, so every partition of the tables is covered.
    const tables = options.tables.map((t) => t.name);
    if (!(await until(() => aborted.signal.aborted || hostedPartitionsServable(node, tables), READY_WAIT_MS))) {
      logger.warn({ waitedMs: READY_WAIT_MS }, 'some partitions have no primary yet');
    }
    // A node stopped before it was ready prints no ready line: a supervisor would read it as readiness.
    if (!aborted.signal.aborted) {
      log(`basalt: node ${name} ready: ${status(node)}`);
      logger.info({ ...node.metrics(), clock: undefined }, 'node ready');
    }
  } else {
    logger.warn({ waitedMs: READY_WAIT_MS }, 'no metastorage state yet');
  }
  const timer = setInterval(() => log(`status: ${status(node)}`), options.statusIntervalMs);
  await stopRequested;
  clearInterval(timer);
  log(`basalt: stopping node ${name}`);
  logger.info({}, 'node stopping');
  await metricsServer?.close();
  await clientServer?.close();
  await node.stop();
  log(`basalt: node ${name} stopped`);
  logger.info({}, 'node stopped');
  logger.flush();
}

interface ServedPorts {
  readonly options: StartSettings;
  readonly node: BasaltNode;
  readonly reachHost: string;
  readonly logger: NodeLogger;
  readonly leaderChanges: () => number;
  readonly tls: PeerTlsMaterial | undefined;
  readonly timers: RealTimers;
}

/**
 * The client port (TLS with the node's certificates when it has them) and the metrics port, when asked for. Clients
 * are served from the start: until the metastorage is known, their calls fail with coded errors.
 */
async function openServers(
  served: ServedPorts,
): Promise<{ readonly clientServer?: ClientServer; readonly metricsServer?: MetricsServer }> {
  const { options, node, reachHost, logger, tls } = served;
  const host = options.host;
  const name = node.name;
  // Certificates mean users (docs/operating.md, Security): one login check for the client port and the console.
  const authenticator =
    tls === undefined
      ? undefined
      : new Authenticator({ clock: new RealClock(), salts: secureRandomBytes }, (user) => node.metastorage.user(user));
  const clientServer =
    options.clientPort === undefined
      ? undefined
      : await ClientServer.start({
          host,
          port: options.clientPort,
          client: nodeClient(node),
          timers: served.timers,
          onDiagnostic: clientDiagnostics(name, logger),
          ...(tls !== undefined && authenticator !== undefined && { tls, auth: authenticator }),
        });
  if (clientServer !== undefined) {
    const clientAddress = hostPort(reachHost, clientServer.port);
    const how = tls === undefined ? '' : ' over TLS with users (pass ca, and user and password or cert and key)';
    log(`client port of ${name} on ${clientServer.address}: connect('${clientAddress}')${how}`);
    logger.info({ clientAddress, tls: tls !== undefined }, 'client port open');
  }
  const metricsServer =
    options.metricsPort === undefined
      ? undefined
      : await MetricsServer.start({
          host,
          advertisedHost: reachHost,
          port: options.metricsPort,
          nodeName: name,
          nodeOf: () => node,
          extra: () => ({ leader_changes_total: served.leaderChanges(), ...authenticator?.counters() }),
          ...(tls !== undefined && { tls }),
          ...(authenticator !== undefined && {
            authenticator,
            onConsoleRefused: (client: string, message: string) =>
              logger.warn({ client, kind: 'console-auth-refused' }, message),
          }),
        });
  if (metricsServer !== undefined) {
    log(`metrics of ${name}: ${metricsServer.url}/metrics (health: ${metricsServer.url}/health)`);
    logger.info({ metricsUrl: `${metricsServer.url}/metrics` }, 'metrics endpoint open');
  }
  return { ...(clientServer !== undefined && { clientServer }), ...(metricsServer !== undefined && { metricsServer }) };
}

/** The password of `--init-admin`: BASALT_ADMIN_PASSWORD, checked before anything starts; none: certificate only. */
function initAdminPassword(options: StartSettings, env: NodeJS.ProcessEnv): string | undefined {
  const password = env['BASALT_ADMIN_PASSWORD'];
  if (options.initAdmin === undefined || password === undefined || password === '') return undefined;
  const problem = passwordProblem(password);
  if (problem !== undefined) throw new BasaltError('INVALID_ARGUMENT', `BASALT_ADMIN_PASSWORD: ${problem}`);
  return password;
}

/** `--init-admin`: the first admin, unless a user of that name exists (a restart, or another node made it). */
async function initAdmin(node: BasaltNode, user: string, password: string | undefined): Promise<void> {
  if (node.metastorage.user(user) !== undefined) {
    log(`basalt: node ${node.name}: user ${user} exists (--init-admin changes nothing)`);
    return;
  }
  const hash = password === undefined ? undefined : await hashPassword(password, secureRandomBytes(SALT_BYTES));
  try {
    await node.metastorage.createUser({ name: user, role: 'admin', ...(hash !== undefined && { password: hash }) });
    const how = hash === undefined ? `by its client certificate (client.${user}.crt)` : 'with BASALT_ADMIN_PASSWORD';
    log(`basalt: node ${node.name}: admin user ${user} created; it logs in ${how}`);
  } catch (error) {
    if (!isBasaltError(error, 'ALREADY_EXISTS')) throw error;
    log(`basalt: node ${node.name}: user ${user} exists (--init-admin changes nothing)`);
  }
}

/** Client port diagnostics: refused logins are warnings (logged without the password), the rest debug detail. */
function clientDiagnostics(name: NodeName, logger: NodeLogger): DiagnosticListener {
  return (diagnostic) => {
    const fields = { client: diagnostic.peer, kind: diagnostic.kind };
    if (diagnostic.kind === 'auth-refused') logger.warn(fields, diagnostic.message);
    else logger.debug({ ...fields, node: name }, diagnostic.message);
  };
}

/** Diagnostics that are warnings: each is reported once per peer and cause (or per peer and interval). */
const WARNED_DIAGNOSTICS: ReadonlySet<NetDiagnosticKind> = new Set([
  'member-mismatch',
  'clock-skew',
  'peer-cert-mismatch',
  'tls-refused',
]);

/**
 * Transport and messenger diagnostics: a refused member set, a peer refused for its clock or its certificate and a
 * refused TLS handshake are warnings (human line and structured log); the rest (a peer not up yet refuses every
 * redial) is debug detail.
 */
function transportDiagnostics(name: NodeName, logger: NodeLogger): DiagnosticListener {
  return (diagnostic) => {
    const fields = { peer: diagnostic.peer, kind: diagnostic.kind };
    if (!WARNED_DIAGNOSTICS.has(diagnostic.kind)) {
      logger.debug(fields, diagnostic.message);
      return;
    }
    log(`basalt: node ${name} warning: ${diagnostic.message}`);
    logger.warn(fields, diagnostic.message);
  };
}

/** Prints the peers still unanswered when that set changed or every `WAITING_REPORT_MS`, not on every probe round. */
function waitingReporter(name: string): (waiting: ReadonlyMap<string, string>) => void {
  let last = '';
  let lastMs = 0;
  return (waiting) => {
    const line = [...waiting.keys()].join(', ');
    if (line === last && Date.now() - lastMs < WAITING_REPORT_MS) return;
    last = line;
    lastMs = Date.now();
    log(`basalt: node ${name} waiting for peers ${line}`);
  };
}

async function ensureTable(node: BasaltNode, spec: TableSpec): Promise<void> {
  try {
    const t = await node.metastorage.createTable(spec.name, { partitions: spec.partitions, replicas: spec.replicas });
    log(`table ${t.name} created (id ${t.id}, ${t.partitions} partitions, ${t.replicas} replicas)`);
  } catch (error) {
    if (!isBasaltError(error, 'ALREADY_EXISTS')) throw error;
    log(`table ${spec.name} exists`);
  }
}

function status(node: BasaltNode): string {
  const m = node.metrics();
  const meta = node.metastorage.leader() ?? 'none';
  return (
    `metastorage revision ${m.metaRevision} leader ${meta}, tables: ${node.metastorage.tables().length}, ` +
    `hosted partitions: ${m.hostedPartitions}, raft leaderships: ${m.raftLeaderships} (quiet groups: ${m.raftQuietGroups}), ` +
    `live peers: ${m.livePeers.join(',') || 'none'}`
  );
}

/** Opens this node's storage: LMDB in its data directory, or memory. */
async function openStorage(
  options: StartSettings,
  name: NodeName,
): Promise<{ readonly storage: NodeStorage; readonly dataDir: string | undefined }> {
  const dataDir = options.data === undefined ? undefined : resolve(options.data);
  const storage: NodeStorage =
    options.memory || dataDir === undefined
      ? { engine: new MemoryStorageEngine(), log: new MemoryLogStorage() }
      : await openNodeStorage(dataDir, options.fsync);
  if ('stateOpening' in storage && storage.stateOpening === 'rebuilt') {
    log(`basalt: node ${name}: the state was not synced before a reboot; it is rebuilt from the Raft logs`);
  }
  return { storage, dataDir };
}

interface ClusterProbe {
  readonly self: NodeIdentity;
  /** The peer address of `--join`. */
  readonly address: string;
  readonly timers: RealTimers;
  readonly signal: AbortSignal;
  readonly tls: PeerTlsMaterial | undefined;
}

/**
 * Probes the node at `address` until it answers as a member of a running cluster (its hello lists the founders), for
 * at most the discovery timeout; undefined if stopped first. A founder's name may not join (it restarts with --peers).
 */
async function probeCluster(
  probe: ClusterProbe,
): Promise<{ readonly peer: NodeName; readonly members: readonly NodeName[] } | undefined> {
  const { self, address, timers, signal, tls } = probe;
  const name = self.name;
  const deadline = Date.now() + PEER_DISCOVERY_TIMEOUT_MS;
  let reported = '';
  while (!signal.aborted) {
    const result = await probePeer({ self, address, timers, ...(tls !== undefined && { tls }) });
    if (result.ok && result.members !== undefined) {
      if (result.members.includes(name)) {
        throw new BasaltError(
          'INVALID_ARGUMENT',
          `${name} founded this cluster: restart it with the --peers it was started with, not --join`,
        );
      }
      return { peer: result.peer.name, members: result.members };
    }
    const why = result.ok ? `${result.peer.name} at ${address} is not part of a running cluster yet` : result.reason;
    if (why !== reported) log(`basalt: node ${name} waiting to join through ${address}: ${why}`);
    reported = why;
    if (Date.now() > deadline) {
      throw new BasaltError(
        'TIMEOUT',
        `no running cluster answered at ${address} within ${PEER_DISCOVERY_TIMEOUT_MS} ms`,
      );
    }
    await new Promise((r) => setTimeout(r, JOIN_PROBE_INTERVAL_MS));
  }
  return undefined;
}

/** Polls `condition` on real time; false if it did not hold within `timeoutMs`. */
/** True once every partition of `tables` that `node` hosts has a current primary as the node knows it. */
/**
 * Every partition of `tables` assigned to this node is hosted here and has a primary, or rests: its Raft group is
 * quiet under a known leader (an idle partition's lease lapses by design, so a node restarted while partitions rest
 * would otherwise never be ready).
 */
function hostedPartitionsServable(node: BasaltNode, tables: readonly string[]): boolean {
  const hosted = node.hostedPartitions();
  const assigned = new Map(node.metastorage.view().assignments);
  for (const name of tables) {
    const table = node.metastorage.table(name);
    if (table === undefined) return false;
    for (let i = 0; i < table.partitions; i++) {
      const partition = tablePartitionId(table.id, i);
      if (!assigned.get(partition)?.includes(node.self.name)) continue;
      if (!hosted.has(partition)) return false;
      const resting = node.raft.isQuiet(partition) && (node.raft.status(partition)?.leader ?? null) !== null;
      if (node.partitions.primaryOf?.(partition) === undefined && !resting) return false;
    }
  }
  return true;
}

async function until(condition: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() >= deadline) return false;
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
  return true;
}

/**
 * Switches read from the environment, for comparisons: idle partitions rest and their Raft groups go quiet
 * (replica-host.ts "Rest") unless BASALT_IDLE_REST=0; BASALT_PIPELINED_WRITES=0 answers writes after their apply (no
 * confirmation round at commit); BASALT_CARRIED_COMMIT=0 sends a commit's writes to its commit partition as writes
 * of their own instead of carrying them in the finish; BASALT_PARALLEL_COMMIT=1 sends a commit's record in parallel
 * with its last writes (coordinator setting `parallelCommit`); BASALT_BATCH_WRITES=1 puts the data writes of many txs
 * proposed in one turn on a partition into one Raft entry (replica setting `batchWrites`); BASALT_BATCH_APPLY=1 applies
 * the committed entries of every Raft group handed over in one turn in one storage transaction (node setting
 * `batchApply`); BASALT_RAFT_BATCHING=0 sends every Raft message on its own (compose.ts).
 */
export function environmentSwitches(env: NodeJS.ProcessEnv): Pick<NodeOptions, 'replicas' | 'coordinator' | 'tuning'> {
  const coordinator = {
    ...(env['BASALT_PIPELINED_WRITES'] === '0' && { pipelinedWrites: false }),
    ...(env['BASALT_CARRIED_COMMIT'] === '0' && { carriedCommit: false }),
    ...(env['BASALT_PARALLEL_COMMIT'] === '1' && { parallelCommit: true }),
  };
  const replicas = {
    ...(env['BASALT_IDLE_REST'] !== '0' && { rest: true }),
    ...(env['BASALT_BATCH_WRITES'] === '1' && { batchWrites: true }),
  };
  const tuning = {
    ...(env['BASALT_RAFT_BATCHING'] === '0' && { raftBatching: false }),
    ...(env['BASALT_BATCH_APPLY'] === '1' && { batchApply: true }),
  };
  return {
    ...(Object.keys(replicas).length > 0 && { replicas }),
    ...(Object.keys(coordinator).length > 0 && { coordinator }),
    ...(Object.keys(tuning).length > 0 && { tuning }),
  };
}

/** How often `basalt start --certs-dir` looks for renewed certificates. */
const CERT_POLL_MS = 5_000;

/** What takes renewed certificates: the peer transport and the client port. */
export interface TlsTarget {
  updateTls(material: PeerTlsMaterial): void;
}

/**
 * Rotation without a restart: polls the certificate files' modification times and, when one changed, loads and
 * checks them again (the same checks as at start) and hands them to the peer transport and the client port, which
 * use them for new connections. Material that fails its checks is logged and the node keeps what it has.
 */
export function watchCertificates(dir: string, name: string, targets: readonly TlsTarget[], signal: AbortSignal): void {
  const files = [CERT_FILES.caCert, CERT_FILES.nodeCert, CERT_FILES.nodeKey].map((f) => join(dir, f));
  const stamp = (): string => files.map((f) => (existsSync(f) ? statSync(f).mtimeMs : 0)).join(',');
  let seen = stamp();
  const timer = setInterval(() => {
    const now = stamp();
    if (now === seen) return;
    seen = now;
    try {
      const material = loadPeerTls(dir, name, new Date());
      for (const target of targets) target.updateTls(material);
      log(`basalt: node ${name}: renewed certificates in ${dir} are used for new peer, client and metrics connections`);
    } catch (error) {
      log(`basalt: node ${name}: renewed certificates in ${dir} refused, keeping the current ones: ${String(error)}`);
    }
  }, CERT_POLL_MS);
  timer.unref();
  signal.addEventListener('abort', () => clearInterval(timer), { once: true });
}
