/**
 * `basalt jepsen`: the `basalt sim` workloads against real processes, as Jepsen runs them. Nodes are `basalt start`
 * child processes (TCP, LMDB in a temp directory), every worker a `connect()` client to one node's client port. A
 * nemesis, one fault at a time, kills a node with SIGKILL and restarts it on its data, pauses it with SIGSTOP and
 * resumes it with SIGCONT, or cuts the TCP links between nodes (link-proxy.ts: every node reaches every peer through
 * a proxy per directed link; a cut isolates one node or splits a minority from the majority, both ways). Phases as in
 * the simulator: faults for `timeS`, heal (every node running and resumed, every link forwarding), liveness (10
 * operations invoked after the heal acknowledged, one for each worker, within LIVENESS_MS), final reads, then the
 * same checker over the same history format. Real time, so a run does not replay; the history is the record.
 *
 * With `tls` the nodes run as `basalt cluster --tls` runs them: a throwaway CA and a certificate directory per node
 * (`--certs-dir`; the link proxies forward the TLS bytes untouched), n1 creates the admin `root`, and every worker
 * logs in with root's client certificate over TLS. Such a run may also renew certificates (`rotate`): a node's key and
 * certificate are replaced in its directory while it runs, and the nemesis waits until a fresh TLS handshake with the
 * node's peer port and with its client port each presents the new certificate (a rotation not served in
 * `ROTATION_SERVED_MS` fails the run as a liveness failure).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { type ConnectOptions, connect, type RemoteClient } from '../client/remote.js';
import { connectCluster } from '../client/routing.js';
import { BasaltError, invalidArgument } from '../core/errors.js';
import { formatHistory, HistoryRecorder } from '../sim/check/history.js';
import { SeededRandom } from '../sim/random.js';
import { EXIT_CODES, type FailureClass, workloadNamed } from '../sim/workload/run.js';
import type { Worker, WorkloadContext, WorkloadName } from '../sim/workload/workload.js';
import { CERT_FILES, localClientCerts, localClusterCerts, renewLocalNodeCert } from './certs.js';
import { ChildNode } from './child-node.js';
import { LOCAL_ADMIN } from './cluster-command.js';
import { freePorts } from './free-ports.js';
import { LinkProxies, type LinkProxyStats } from './link-proxy.js';

export type NemesisFault = 'kill' | 'pause' | 'partition' | 'rotate';

/** Every fault; `rotate` only acts in a run with TLS (a run without it leaves it out). */
export const NEMESIS_FAULTS: readonly NemesisFault[] = ['kill', 'pause', 'partition', 'rotate'];

export interface JepsenOptions {
  readonly workload: WorkloadName;
  readonly timeS: number;
  readonly nodes: number;
  readonly workers: number;
  readonly seed: number;
  readonly history?: string;
  /** Mean seconds between nemesis actions. */
  readonly nemesisIntervalS: number;
  /** The faults the nemesis picks from (all of them by default). */
  readonly nemesis?: readonly NemesisFault[];
  /** Nodes with certificates (mutual TLS between them), clients over TLS logged in by client certificate. */
  readonly tls?: boolean;
}

export interface JepsenResult {
  /** As for `basalt sim`: 0 passed, else the exit code of the failure class. */
  readonly exitCode: number;
  readonly failure: { readonly class: FailureClass; readonly message: string } | undefined;
  readonly counts: { readonly ok: number; readonly fail: number; readonly info: number; readonly okAfterHeal: number };
  readonly kills: number;
  readonly pauses: number;
  readonly partitions: number;
  /** Certificates renewed (`rotate`), and how many of them the node's peer and client ports were seen to serve. */
  readonly rotations: { readonly renewed: number; readonly served: number };
  /** What the link proxies did over the run: connections forwarded, refused while cut, severed by a cut. */
  readonly links: LinkProxyStats;
  readonly valid: boolean;
  /** The nemesis log, one line per action. */
  readonly nemesisLog: readonly string[];
}

const TABLE = 'jepsen';
const READY_TIMEOUT_MS = 60_000;
const CALL_TIMEOUT_MS = 10_000;
const LIVENESS_MS = 60_000;
const LIVENESS_OK_MIN = 10;
const THINK_MS_MAX = 20;
const FAULT_MS_MIN = 1_000;
const FAULT_MS_MAX = 4_000;
/** A renewed certificate must be served this soon (the nodes poll their certificate directory every 5 s). */
const ROTATION_SERVED_MS = 20_000;
const CONNECT_ATTEMPTS = 20;
/** BASALT_DIRECT_MAPPING=1: workers send single-key operations straight to primaries (`connectCluster`). */
const DIRECT_MAPPING = process.env['BASALT_DIRECT_MAPPING'] === '1';

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A TLS run's certificates: the local cluster's directory, each node's directory, the admin's client material. */
interface RunTls {
  readonly dir: string;
  readonly nodeDirs: ReadonlyMap<string, string>;
  readonly client: { readonly ca: string; readonly cert: string; readonly key: string };
}

async function runTls(dataDir: string, names: readonly string[]): Promise<RunTls> {
  const dir = join(dataDir, 'certs');
  const nodeDirs = await localClusterCerts(dir, names);
  const clientDir = await localClientCerts(dir, LOCAL_ADMIN);
  const read = (file: string) => readFileSync(join(clientDir, file), 'utf8');
  const client = {
    ca: read(CERT_FILES.caCert),
    cert: read(CERT_FILES.clientCert(LOCAL_ADMIN)),
    key: read(CERT_FILES.clientKey(LOCAL_ADMIN)),
  };
  return { dir, nodeDirs, client };
}

class Processes {
  readonly children = new Map<string, ChildNode>();
  /** Set by `killAll`: no node is launched after it (a nemesis still running after a crash launches none). */
  stopped = false;

  constructor(
    private readonly dataDir: string,
    readonly names: readonly string[],
    private readonly peerPorts: readonly number[],
    readonly clientPorts: readonly number[],
    private readonly links: LinkProxies,
    private readonly tls: RunTls | undefined,
  ) {}

  address(name: string): string {
    return `127.0.0.1:${this.clientPorts[this.names.indexOf(name)]}`;
  }

  /**
   * A client of every node, `name` first, that sends transactions' single-key operations straight to their primaries
   * (`connectCluster` with direct mapping), for runs with BASALT_DIRECT_MAPPING=1; a plain client of `name` when some
   * node does not answer.
   */
  async connectRouted(name: string): Promise<RemoteClient> {
    const others = this.names.filter((n) => n !== name).map((n) => this.address(n));
    try {
      return await connectCluster([this.address(name), ...others], {
        timeoutMs: CALL_TIMEOUT_MS,
        connectTimeoutMs: 2_000,
        directMapping: true,
        ...this.tls?.client,
      });
    } catch {
      return this.connect(name, { connectTimeoutMs: 2_000 });
    }
  }

  /**
   * A client of `name`. With TLS a node may not know the admin yet (n1 created it, the others apply it a moment
   * later), so a refused login is tried again.
   */
  async connect(name: string, options: ConnectOptions = {}): Promise<RemoteClient> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await connect(this.address(name), { timeoutMs: CALL_TIMEOUT_MS, ...options, ...this.tls?.client });
      } catch (error) {
        if (attempt >= CONNECT_ATTEMPTS || !(error instanceof BasaltError) || error.code !== 'UNAUTHENTICATED') {
          throw error;
        }
        await sleep(250);
      }
    }
  }

  /**
   * `rotate`: renews `name`'s certificate in its directory and waits until fresh handshakes with its peer port and its
   * client port present the new one.
   */
  async rotate(name: string, log: (line: string) => void): Promise<void> {
    if (this.tls === undefined || this.stopped) return;
    const renewed = await renewLocalNodeCert(this.tls.dir, name);
    log(`renew ${name}'s certificate (serial ${renewed.serialNumber})`);
    const i = this.names.indexOf(name);
    const ports = [this.peerPorts[i]!, this.clientPorts[i]!];
    const startedMs = Date.now();
    while (Date.now() - startedMs < ROTATION_SERVED_MS && !this.stopped) {
      const served = await Promise.all(ports.map((port) => presentedFingerprint(port, this.tls!.client)));
      if (served.every((f) => f === renewed.fingerprint256)) {
        log(`${name} serves the renewed certificate on its peer and client ports after ${Date.now() - startedMs} ms`);
        return;
      }
      await sleep(200);
    }
    log(`${name} does not serve its renewed certificate after ${ROTATION_SERVED_MS} ms`);
  }

  async launch(name: string): Promise<void> {
    if (this.stopped) return;
    const i = this.names.indexOf(name);
    // Every peer through the proxy of this node's link to it, so that the nemesis can cut the link.
    const peers = this.names.flatMap((n) => (n === name ? [] : [`${n}=127.0.0.1:${this.links.port(name, n)}`]));
    const child = new ChildNode([
      'start',
      '--name',
      name,
      '--port',
      String(this.peerPorts[i]),
      '--peers',
      peers.join(','),
      '--data',
      join(this.dataDir, name),
      '--table',
      `${TABLE}:4:${Math.min(3, this.names.length)}`,
      '--client-port',
      String(this.clientPorts[i]),
      '--log-level',
      'warn',
      '--status-interval',
      '60000',
      ...(this.tls === undefined ? [] : ['--certs-dir', this.tls.nodeDirs.get(name)!]),
      ...(this.tls !== undefined && i === 0 ? ['--init-admin', LOCAL_ADMIN] : []),
    ]);
    this.children.set(name, child);
    await child.waitFor(new RegExp(`basalt: node ${name} ready`), READY_TIMEOUT_MS);
  }

  async killAll(): Promise<void> {
    this.stopped = true;
    for (const child of this.children.values()) {
      child.signal('SIGCONT');
      child.signal('SIGKILL');
    }
    await Promise.all([...this.children.values()].map((c) => c.exited));
  }
}

/**
 * One fault at a time until `untilMs`: kill and restart a node, pause and resume one, cut links (isolate one node,
 * or split a minority from the majority), or renew a node's certificate; every node is running and resumed, every
 * link healed, when it resolves.
 */
async function nemesis(
  procs: Processes,
  links: LinkProxies,
  random: SeededRandom,
  options: JepsenOptions & { readonly nemesis: readonly NemesisFault[] },
  untilMs: number,
  log: (line: string) => void,
): Promise<void> {
  const kinds = options.nemesis;
  while (kinds.length > 0 && Date.now() < untilMs && !procs.stopped) {
    await sleep(random.between(0, 2 * options.nemesisIntervalS * 1000));
    if (Date.now() >= untilMs || procs.stopped) break;
    const name = random.pick(procs.names);
    const child = procs.children.get(name)!;
    const forMs = random.between(FAULT_MS_MIN, FAULT_MS_MAX);
    switch (random.pick(kinds)) {
      case 'kill':
        log(`kill -9 ${name}, restart after ${forMs} ms`);
        child.signal('SIGKILL');
        await child.exited;
        await sleep(forMs);
        await procs.launch(name);
        log(`${name} restarted`);
        break;
      case 'pause':
        log(`SIGSTOP ${name} for ${forMs} ms`);
        child.signal('SIGSTOP');
        await sleep(forMs);
        child.signal('SIGCONT');
        log(`SIGCONT ${name}`);
        break;
      case 'partition': {
        // With three nodes a split is an isolation too; with five it may cut two nodes off together.
        const isolate = random.chance(0.5);
        const side = isolate ? [name] : minorityWith(procs.names, name, random);
        const rest = procs.names.filter((n) => !side.includes(n));
        const shape = isolate ? `isolate ${name}` : `split [${side.join(',')}] | [${rest.join(',')}]`;
        log(`cut links: ${shape} for ${forMs} ms`);
        links.partition(side);
        await sleep(forMs);
        links.heal();
        log(`heal links: ${shape}`);
        break;
      }
      case 'rotate':
        await procs.rotate(name, log);
        break;
    }
  }
}

/** A minority of the nodes that includes `name`: one node, or up to (n − 1) / 2 of them. */
function minorityWith(names: readonly string[], name: string, random: SeededRandom): string[] {
  const size = 1 + random.int(Math.floor((names.length - 1) / 2));
  const others = random.shuffle(names.filter((n) => n !== name));
  return [name, ...others.slice(0, size - 1)];
}

/** A connected client to `name`, or undefined if the node does not answer now. */
async function connectTo(procs: Processes, name: string): Promise<RemoteClient | undefined> {
  try {
    return DIRECT_MAPPING ? await procs.connectRouted(name) : await procs.connect(name, { connectTimeoutMs: 2_000 });
  } catch {
    return undefined;
  }
}

/**
 * The SHA-256 fingerprint of the certificate a fresh TLS handshake with 127.0.0.1:`port` presents (undefined if none
 * completes in time). The peer port wants a client certificate of the cluster CA: the admin's serves.
 */
export function presentedFingerprint(port: number, material: RunTls['client']): Promise<string | undefined> {
  return new Promise((resolve) => {
    const socket = tlsConnect({ host: '127.0.0.1', port, ...material, minVersion: 'TLSv1.3' });
    const done = (fingerprint: string | undefined) => {
      socket.destroy();
      resolve(fingerprint);
    };
    socket.once('secureConnect', () => done(socket.getPeerCertificate().fingerprint256));
    socket.once('error', () => done(undefined));
    socket.setTimeout(2_000, () => done(undefined));
  });
}

/** Runs `basalt jepsen`, printing progress and the figures; returns the exit code. */
export async function runJepsen(options: JepsenOptions): Promise<number> {
  return (await jepsen(options, (line) => process.stdout.write(`${line}\n`))).exitCode;
}

/** One run against real processes; `out` gets every line of the report. */
export async function jepsen(options: JepsenOptions, out: (line: string) => void): Promise<JepsenResult> {
  const dataDir = mkdtempSync(join(tmpdir(), 'basalt-jepsen-'));
  const ports = await freePorts(2 * options.nodes);
  const names = Array.from({ length: options.nodes }, (_, i) => `n${i + 1}`);
  const peerPorts = ports.slice(0, options.nodes);
  const links = await LinkProxies.start(names, peerPorts);
  const tls = options.tls === true ? await runTls(dataDir, names) : undefined;
  const procs = new Processes(dataDir, names, peerPorts, ports.slice(options.nodes), links, tls);
  const kinds = (options.nemesis ?? NEMESIS_FAULTS).filter((k) => k !== 'rotate' || tls !== undefined);
  const random = new SeededRandom(`jepsen/${options.seed}`);
  const t0 = process.hrtime.bigint();
  const recorder = new HistoryRecorder(() => Number(process.hrtime.bigint() - t0));
  const workload = workloadNamed(options.workload);
  const faults: string[] = [];
  const log = (line: string) => {
    const entry = `t=${(Number(process.hrtime.bigint() - t0) / 1e9).toFixed(3)}s ${line}`;
    faults.push(entry);
    out(`nemesis ${entry}`);
  };
  const clients: RemoteClient[] = [];
  let failure: { class: FailureClass; message: string } | undefined;
  let okAfterHeal = 0;
  const startedMs = Date.now();
  try {
    out(
      `starting ${options.nodes} nodes in ${dataDir}${tls === undefined ? '' : `, TLS with the certificates in ${tls.dir}`}`,
    );
    await Promise.all(procs.names.map((n) => procs.launch(n)));
    const setupClient = await procs.connect('n1');
    clients.push(setupClient);
    const ctx: WorkloadContext = { recorder, table: TABLE, setupClient, sleep };
    for (let attempt = 1; ; attempt++) {
      try {
        await workload.setup(ctx);
        break;
      } catch (error) {
        if (attempt >= 30 || !(error instanceof BasaltError)) throw error;
        await sleep(500);
      }
    }
    const workers: Worker[] = [];
    const homes: string[] = [];
    for (let i = 0; i < options.workers; i++) {
      const home = procs.names[i % procs.names.length]!;
      const client = DIRECT_MAPPING ? await procs.connectRouted(home) : await procs.connect(home);
      clients.push(client);
      workers.push({ client, random: random.fork(`worker/${i}`), process: recorder.process() });
      homes.push(home);
    }
    const phase = { healed: false, stop: false };
    const acked = new Set<Worker>();
    const progressed = () => okAfterHeal >= LIVENESS_OK_MIN && acked.size === workers.length;
    const loop = async (worker: Worker, home: string): Promise<void> => {
      while (!phase.stop && !(phase.healed && progressed())) {
        await sleep(1 + worker.random.int(THINK_MS_MAX));
        if ((worker.client as RemoteClient).closed) {
          const again = await connectTo(procs, home);
          if (again === undefined) {
            await sleep(200);
            continue;
          }
          clients.push(again);
          worker.client = again;
        }
        const afterHeal = phase.healed;
        const type = await workload.operation(ctx, worker);
        if (type === 'ok' && afterHeal) {
          okAfterHeal++;
          acked.add(worker);
        }
        if (type !== 'ok') await sleep(50);
      }
    };
    out(
      `running ${options.workload} with ${options.workers} workers for ${options.timeS} s under ` +
        `${kinds.length === 0 ? 'no faults' : kinds.map((k) => NEMESIS_NAMES[k]).join(', ')}`,
    );
    const loops = Promise.all(workers.map((w, i) => loop(w, homes[i]!)));
    loops.catch(() => {});
    await Promise.race([
      nemesis(
        procs,
        links,
        random.fork('nemesis'),
        { ...options, nemesis: kinds },
        Date.now() + options.timeS * 1000,
        log,
      ),
      loops,
    ]);
    links.heal();
    log('healed: every node running, every link forwarding');
    phase.healed = true;
    // A timer cleared once the loops are done: a pending one would keep an embedding process (a test) alive.
    let livenessTimer: NodeJS.Timeout | undefined;
    const deadline = new Promise<void>((resolve) => {
      livenessTimer = setTimeout(() => {
        phase.stop = true;
        resolve();
      }, LIVENESS_MS);
    });
    await Promise.race([loops, deadline]).finally(() => clearTimeout(livenessTimer));
    phase.stop = true;
    await loops;
    if (!progressed()) {
      failure = {
        class: 'liveness',
        message: `${okAfterHeal} operations acknowledged after the heal, ${acked.size} of ${workers.length} workers`,
      };
    }
    failure ??= unservedRotations(faults);
    const finalClient = await procs.connect('n1');
    clients.push(finalClient);
    await workload.final(ctx, { client: finalClient, random: random.fork('final'), process: recorder.process() });
  } catch (error) {
    failure = { class: 'crash', message: error instanceof Error ? error.message : String(error) };
  } finally {
    await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
    await procs.killAll();
    await links.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
  const history = recorder.ops;
  if (options.history !== undefined) writeFileSync(options.history, formatHistory(history));
  const check = workload.check(history);
  if (!check.valid && failure?.class !== 'crash') {
    failure = { class: 'checker', message: `${check.anomalies.length} anomalies: ${check.anomalies[0] ?? ''}` };
  }
  const count = (type: string) => history.filter((op) => op.type === type).length;
  const seconds = (Date.now() - startedMs) / 1000;
  const result: JepsenResult = {
    exitCode: failure === undefined ? 0 : EXIT_CODES[failure.class],
    failure,
    counts: { ok: count('ok'), fail: count('fail'), info: count('info'), okAfterHeal },
    kills: actions(faults, 'kill -9'),
    pauses: actions(faults, 'SIGSTOP'),
    partitions: actions(faults, 'cut links'),
    rotations: { renewed: actions(faults, 'renew '), served: actions(faults, 'serves the renewed') },
    links: links.stats,
    valid: check.valid,
    nemesisLog: faults,
  };
  const ops = `${count('invoke')} operations in ${seconds.toFixed(1)} s: ${count('ok')} ok, `;
  report(result, `${options.workload}: ${ops}`, seconds, check, out);
  return result;
}

/** The report's last lines: the figures, the link proxies' counts, the checker's verdict, the failure. */
function report(
  result: JepsenResult,
  head: string,
  seconds: number,
  check: { readonly valid: boolean; readonly summary: string; readonly anomalies: readonly string[] },
  out: (line: string) => void,
): void {
  const { counts, failure } = result;
  out(
    `${head}${counts.fail} fail, ${counts.info} info; ${(counts.ok / seconds).toFixed(1)} ok/s; ` +
      `${result.kills} kills, ${result.pauses} pauses, ${result.partitions} link cuts, ` +
      `${result.rotations.renewed} certificate renewals (${result.rotations.served} served); ` +
      `${counts.okAfterHeal} acknowledged after the heal`,
  );
  out(
    `links: ${result.links.accepted} connections forwarded, ${result.links.severed} severed by cuts, ` +
      `${result.links.refused} refused while cut`,
  );
  out(`checker: ${check.valid ? 'valid' : 'INVALID'}: ${check.summary}`);
  for (const anomaly of check.anomalies.slice(0, 10)) out(`  ${anomaly}`);
  if (failure !== undefined) out(`FAIL ${failure.class}: ${failure.message}`);
}

/** A liveness failure if a renewed certificate was not served in time. */
function unservedRotations(log: readonly string[]): { class: FailureClass; message: string } | undefined {
  const unserved = actions(log, 'renew ') - actions(log, 'serves the renewed');
  return unserved > 0 ? { class: 'liveness', message: `${unserved} renewed certificates not served` } : undefined;
}

/** The nemesis log's lines that contain `what`. */
function actions(log: readonly string[], what: string): number {
  return log.filter((line) => line.includes(what)).length;
}

const NEMESIS_NAMES: Readonly<Record<NemesisFault, string>> = {
  kill: 'kill -9',
  pause: 'SIGSTOP',
  partition: 'link cuts',
  rotate: 'certificate renewals',
};

/** `all`, `none`, or a comma-separated list of nemesis faults. */
export function parseNemesis(spec: string): NemesisFault[] {
  const parts = spec
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p !== '');
  if (parts.length === 1 && parts[0] === 'none') return [];
  const kinds = new Set<NemesisFault>();
  for (const part of parts) {
    if (part === 'all') for (const k of NEMESIS_FAULTS) kinds.add(k);
    else if ((NEMESIS_FAULTS as readonly string[]).includes(part)) kinds.add(part as NemesisFault);
    else throw invalidArgument(`unknown nemesis fault ${part} (expected ${NEMESIS_FAULTS.join(', ')}, all or none)`);
  }
  return NEMESIS_FAULTS.filter((k) => kinds.has(k));
}
