/**
 * `basalt jepsen`: the `basalt sim` workloads against real processes, as Jepsen runs them. Nodes are `basalt start`
 * child processes (TCP, LMDB in a temp directory), every worker a `connect()` client to one node's client port. A
 * nemesis kills a node with SIGKILL and restarts it on its data, or pauses it with SIGSTOP and resumes it with
 * SIGCONT, one node at a time. Phases as in the simulator: faults for `timeS`, heal (every node running and resumed),
 * liveness (10 operations invoked after the heal acknowledged, one for each worker, within LIVENESS_MS), final reads,
 * then the same checker over the same history format. Real time, so a run does not replay; the history is the record.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type RemoteClient } from '../client/remote.js';
import { BasaltError } from '../core/errors.js';
import { formatHistory, HistoryRecorder } from '../sim/check/history.js';
import { SeededRandom } from '../sim/random.js';
import { EXIT_CODES, type FailureClass, workloadNamed } from '../sim/workload/run.js';
import type { Worker, WorkloadContext, WorkloadName } from '../sim/workload/workload.js';
import { ChildNode } from './child-node.js';
import { freePorts } from './test-support.js';

export interface JepsenOptions {
  readonly workload: WorkloadName;
  readonly timeS: number;
  readonly nodes: number;
  readonly workers: number;
  readonly seed: number;
  readonly history?: string;
  /** Mean seconds between nemesis actions. */
  readonly nemesisIntervalS: number;
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
  readonly names: string[];

  constructor(
    private readonly dataDir: string,
    private readonly peerPorts: readonly number[],
    readonly clientPorts: readonly number[],
  ) {
    this.names = peerPorts.map((_, i) => `n${i + 1}`);
  }

  address(name: string): string {
    return `127.0.0.1:${this.clientPorts[this.names.indexOf(name)]}`;
  }

  async launch(name: string): Promise<void> {
    const i = this.names.indexOf(name);
    const peers = this.names.flatMap((n, j) => (n === name ? [] : [`${n}=127.0.0.1:${this.peerPorts[j]}`]));
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

/** Kills or pauses one node at a time until `untilMs`; every node is running and resumed when it resolves. */
async function nemesis(
  procs: Processes,
  random: SeededRandom,
  options: JepsenOptions,
  untilMs: number,
  log: (line: string) => void,
): Promise<void> {
  while (Date.now() < untilMs) {
    await sleep(random.between(0, 2 * options.nemesisIntervalS * 1000));
    if (Date.now() >= untilMs) break;
    const name = random.pick(procs.names);
    const child = procs.children.get(name)!;
    const forMs = random.between(FAULT_MS_MIN, FAULT_MS_MAX);
    if (random.chance(0.5)) {
      log(`kill -9 ${name}, restart after ${forMs} ms`);
      child.signal('SIGKILL');
      await child.exited;
      await sleep(forMs);
      await procs.launch(name);
      log(`${name} restarted`);
    } else {
      log(`SIGSTOP ${name} for ${forMs} ms`);
      child.signal('SIGSTOP');
      await sleep(forMs);
      child.signal('SIGCONT');
      log(`SIGCONT ${name}`);
    }
  }
}

/** A connected client to `name`, or undefined if the node does not answer now. */
async function connectTo(procs: Processes, name: string): Promise<RemoteClient | undefined> {
  try {
    return await connect(procs.address(name), { timeoutMs: CALL_TIMEOUT_MS, connectTimeoutMs: 2_000 });
  } catch {
    return undefined;
  }
}

export async function runJepsen(options: JepsenOptions): Promise<number> {
  const out = (line: string) => process.stdout.write(`${line}\n`);
  const dataDir = mkdtempSync(join(tmpdir(), 'basalt-jepsen-'));
  const ports = await freePorts(2 * options.nodes);
  const procs = new Processes(dataDir, ports.slice(0, options.nodes), ports.slice(options.nodes));
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
    out(`running ${options.workload} with ${options.workers} workers for ${options.timeS} s under kill -9 and SIGSTOP`);
    const loops = Promise.all(workers.map((w, i) => loop(w, homes[i]!)));
    loops.catch(() => {});
    await Promise.race([
      nemesis(procs, random.fork('nemesis'), options, Date.now() + options.timeS * 1000, log),
      loops,
    ]);
    log('healed: every node running');
    phase.healed = true;
    const deadline = sleep(LIVENESS_MS).then(() => {
      phase.stop = true;
    });
    await Promise.race([loops, deadline]);
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
  out(
    `${options.workload}: ${count('invoke')} operations in ${seconds.toFixed(1)} s: ${count('ok')} ok, ` +
      `${count('fail')} fail, ${count('info')} info; ${(count('ok') / seconds).toFixed(1)} ok/s; ` +
      `${faults.filter((f) => f.includes('kill -9')).length} kills, ${faults.filter((f) => f.includes('SIGSTOP')).length} pauses; ` +
      `${okAfterHeal} acknowledged after the heal`,
  );
  out(`checker: ${check.valid ? 'valid' : 'INVALID'}: ${check.summary}`);
  for (const anomaly of check.anomalies.slice(0, 10)) out(`  ${anomaly}`);
  if (failure !== undefined) {
    out(`FAIL ${failure.class}: ${failure.message}`);
    return EXIT_CODES[failure.class];
  }
  return 0;
}
