/**
 * `basalt jepsen`: the `basalt sim` workloads against real processes, as Jepsen runs them. Nodes are `basalt start`
 * child processes (TCP, LMDB in a temp directory), every worker a `connect()` client to one node's client port. A
 * nemesis, one fault at a time, kills a node with SIGKILL and restarts it on its data, pauses it with SIGSTOP and
 * resumes it with SIGCONT, or cuts the TCP links between nodes (link-proxy.ts: every node reaches every peer through
 * a proxy per directed link; a cut isolates one node or splits a minority from the majority, both ways). Phases as in
 * the simulator: faults for `timeS`, heal (every node running and resumed, every link forwarding), liveness (10
 * operations invoked after the heal acknowledged, one for each worker, within LIVENESS_MS), final reads, then the
 * same checker over the same history format. Real time, so a run does not replay; the history is the record.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type RemoteClient } from '../client/remote.js';
import { BasaltError, invalidArgument } from '../core/errors.js';
import { formatHistory, HistoryRecorder } from '../sim/check/history.js';
import { SeededRandom } from '../sim/random.js';
import { EXIT_CODES, type FailureClass, workloadNamed } from '../sim/workload/run.js';
import type { Worker, WorkloadContext, WorkloadName } from '../sim/workload/workload.js';
import { ChildNode } from './child-node.js';
import { freePorts } from './free-ports.js';
import { LinkProxies, type LinkProxyStats } from './link-proxy.js';

export type NemesisFault = 'kill' | 'pause' | 'partition';

export const NEMESIS_FAULTS: readonly NemesisFault[] = ['kill', 'pause', 'partition'];

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
}

export interface JepsenResult {
  /** As for `basalt sim`: 0 passed, else the exit code of the failure class. */
  readonly exitCode: number;
  readonly failure: { readonly class: FailureClass; readonly message: string } | undefined;
  readonly counts: { readonly ok: number; readonly fail: number; readonly info: number; readonly okAfterHeal: number };
  readonly kills: number;
  readonly pauses: number;
  readonly partitions: number;
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

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

class Processes {
  readonly children = new Map<string, ChildNode>();

  constructor(
    private readonly dataDir: string,
    readonly names: readonly string[],
    private readonly peerPorts: readonly number[],
    readonly clientPorts: readonly number[],
    private readonly links: LinkProxies,
  ) {}

  address(name: string): string {
    return `127.0.0.1:${this.clientPorts[this.names.indexOf(name)]}`;
  }

  async launch(name: string): Promise<void> {
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
    ]);
    this.children.set(name, child);
    await child.waitFor(new RegExp(`basalt: node ${name} ready`), READY_TIMEOUT_MS);
  }

  async killAll(): Promise<void> {
    for (const child of this.children.values()) {
      child.signal('SIGCONT');
      child.signal('SIGKILL');
    }
    await Promise.all([...this.children.values()].map((c) => c.exited));
  }
}

/**
 * One fault at a time until `untilMs`: kill and restart a node, pause and resume one, or cut links (isolate one node,
 * or split a minority from the majority); every node is running and resumed, every link healed, when it resolves.
 */
async function nemesis(
  procs: Processes,
  links: LinkProxies,
  random: SeededRandom,
  options: JepsenOptions,
  untilMs: number,
  log: (line: string) => void,
): Promise<void> {
  const kinds = options.nemesis ?? NEMESIS_FAULTS;
  while (kinds.length > 0 && Date.now() < untilMs) {
    await sleep(random.between(0, 2 * options.nemesisIntervalS * 1000));
    if (Date.now() >= untilMs) break;
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
    return await connect(procs.address(name), { timeoutMs: CALL_TIMEOUT_MS, connectTimeoutMs: 2_000 });
  } catch {
    return undefined;
  }
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
  const procs = new Processes(dataDir, names, peerPorts, ports.slice(options.nodes), links);
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
    out(`starting ${options.nodes} nodes in ${dataDir}`);
    await Promise.all(procs.names.map((n) => procs.launch(n)));
    const setupClient = await connect(procs.address('n1'), { timeoutMs: CALL_TIMEOUT_MS });
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
      const client = await connect(procs.address(home), { timeoutMs: CALL_TIMEOUT_MS });
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
    const kinds = options.nemesis ?? NEMESIS_FAULTS;
    out(
      `running ${options.workload} with ${options.workers} workers for ${options.timeS} s under ` +
        `${kinds.length === 0 ? 'no faults' : kinds.map((k) => NEMESIS_NAMES[k]).join(', ')}`,
    );
    const loops = Promise.all(workers.map((w, i) => loop(w, homes[i]!)));
    loops.catch(() => {});
    await Promise.race([
      nemesis(procs, links, random.fork('nemesis'), options, Date.now() + options.timeS * 1000, log),
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
    const finalClient = await connect(procs.address('n1'), { timeoutMs: CALL_TIMEOUT_MS });
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
  const actions = (what: string) => faults.filter((f) => f.includes(what)).length;
  const result: JepsenResult = {
    exitCode: failure === undefined ? 0 : EXIT_CODES[failure.class],
    failure,
    counts: { ok: count('ok'), fail: count('fail'), info: count('info'), okAfterHeal },
    kills: actions('kill -9'),
    pauses: actions('SIGSTOP'),
    partitions: actions('cut links'),
    links: links.stats,
    valid: check.valid,
    nemesisLog: faults,
  };
  out(
    `${options.workload}: ${count('invoke')} operations in ${seconds.toFixed(1)} s: ${count('ok')} ok, ` +
      `${count('fail')} fail, ${count('info')} info; ${(count('ok') / seconds).toFixed(1)} ok/s; ` +
      `${result.kills} kills, ${result.pauses} pauses, ${result.partitions} link cuts; ` +
      `${okAfterHeal} acknowledged after the heal`,
  );
  out(
    `links: ${result.links.accepted} connections forwarded, ${result.links.severed} severed by cuts, ` +
      `${result.links.refused} refused while cut`,
  );
  out(`checker: ${check.valid ? 'valid' : 'INVALID'}: ${check.summary}`);
  for (const anomaly of check.anomalies.slice(0, 10)) out(`  ${anomaly}`);
  if (failure !== undefined) out(`FAIL ${failure.class}: ${failure.message}`);
  return result;
}

const NEMESIS_NAMES: Readonly<Record<NemesisFault, string>> = {
  kill: 'kill -9',
  pause: 'SIGSTOP',
  partition: 'link cuts',
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
