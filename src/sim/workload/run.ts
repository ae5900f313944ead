/**
 * One seeded run of a workload on a simulated cluster (`basalt sim`, the sim tests and the soak), in the phases of
 * TigerBeetle's VOPR:
 *   1. safety: workers on every node run operations through the public client API while the fault schedule runs;
 *   2. heal: every fault is undone and every node is up;
 *   3. liveness: the workers go on and must get operations acknowledged: at least LIVENESS_OK_MIN in all and one
 *      for every worker (each worker's client sits on one node), invoked after the heal, within `livenessMs` (longer
 *      than the protocol's request and lock-wait timeouts, so that what the faults left behind can time out first);
 *      the phase ends as soon as they are;
 *   4. final reads, then the checker over the whole history.
 * A failure has a class, which is the exit code of `basalt sim`: crash (an exception, an assertion, a node's
 * background failure, a drive that never settled), liveness (too little progress after the heal), checker (the
 * history has an anomaly). Everything is drawn from the seed, so a seed replays the same run: the history hash and
 * the scheduler's trace hash are part of the result to check it.
 */
import { createHash } from 'node:crypto';
import { type Client, embeddedClient } from '../../client/client.js';
import { BasaltError } from '../../core/errors.js';
import { Cluster, defaultNodeNames } from '../../harness/cluster.js';
import type { BasaltNode, NodeTuning } from '../../node/basalt-node.js';
import type { NodeRoles } from '../../node/compose.js';
import { formatHistory, HistoryRecorder, type Operation } from '../check/history.js';
import { SimClusterEnvironment } from '../cluster.js';
import { SimulationError } from '../errors.js';
import { SeededRandom } from '../random.js';
import type { TraceEntry } from '../scheduler.js';
import { bankWorkload } from './bank.js';
import { FaultSchedule, type SimFault } from './faults.js';
import { listAppendWorkload } from './list-append.js';
import { type MarkHits, markHits } from './marks.js';
import { registerWorkload } from './register.js';
import type { CheckOutcome, Worker, Workload, WorkloadContext, WorkloadName } from './workload.js';

export type FailureClass = 'crash' | 'liveness' | 'checker';

/** Exit codes of `basalt sim` by failure class (the worst class over the seeds wins: checker > liveness > crash). */
export const EXIT_CODES: Readonly<Record<FailureClass, number>> = { crash: 2, liveness: 3, checker: 4 };

export interface SimRunOptions {
  readonly seed: string | number;
  /** A built-in workload, or one of the caller's (tests use deliberately broken ones to see the checkers fire). */
  readonly workload: WorkloadName | Workload;
  readonly faults: readonly SimFault[];
  readonly nodes?: number;
  /** Virtual time of the safety phase. */
  readonly durationMs?: number;
  /** Virtual time the liveness phase may take at most (it ends once its progress target is met). */
  readonly livenessMs?: number;
  /** Concurrent clients, spread over the nodes. */
  readonly workers?: number;
  /** Applied entries a Raft log keeps before it is compacted into a snapshot. */
  readonly compactEntriesMin?: number;
  /** Partitions of the workload's table (each one Raft group); fewer make a cheaper run, still multi-partition. */
  readonly partitions?: number;
  /**
   * Idle partitions rest and their Raft groups go quiet, as `basalt start` runs them (replica-host.ts "Rest"): leases
   * lapse in the workers' pauses and faults, and requests wake them. Off by default, so seeds keep their trajectories.
   */
  readonly rest?: boolean;
  /** Coordinators commit in parallel with their last writes (coordinator setting `parallelCommit`). Off by default. */
  readonly parallelCommit?: boolean;
  /** Data writes proposed in one turn on a partition share a Raft entry (replica setting `batchWrites`). Off by default. */
  readonly batchWrites?: boolean;
  /** Committed entries of the groups handed over in one turn apply in one storage transaction (node `batchApply`). */
  readonly batchApply?: boolean;
}

export interface SimRunResult {
  readonly seed: string | number;
  readonly workload: WorkloadName;
  readonly failure: { readonly class: FailureClass; readonly message: string } | undefined;
  readonly history: readonly Operation[];
  readonly check: CheckOutcome | undefined;
  readonly faultLog: readonly string[];
  /** The last scheduler events (oldest first), for the failure report; times are virtual ms since the run started. */
  readonly trace: readonly TraceEntry[];
  readonly traceHash: string;
  readonly historyHash: string;
  readonly virtualMs: number;
  readonly counts: {
    readonly ok: number;
    readonly fail: number;
    readonly info: number;
    /** Operations invoked after the heal and acknowledged. */
    readonly okAfterHeal: number;
  };
  /** Coverage marks (see marks.ts) over every node incarnation of the run. */
  readonly marks: MarkHits;
}

const TABLE = 'sim';
const PARTITIONS = 4;
const DURATION_MS_DEFAULT = 6_000;
const LIVENESS_MS_DEFAULT = 20_000;
const WORKERS_DEFAULT = 5;
const THINK_MS_MAX = 40;
/** Pause before each operation of a worker that has already shown progress after the heal. */
const PACE_MS_AFTER_PROGRESS = 250;
const BACKOFF_MS_AFTER_FAILURE = 50;
/** Acknowledged operations the liveness phase needs at least, over all workers. */
const LIVENESS_OK_MIN = 10;
const TRACE_MAX = 400;
/**
 * Raft logs are compacted after this many applied entries (the production default is far larger): within a few
 * seconds of virtual time a leader compacts past a follower that was down or cut off, which then catches up by
 * installing a snapshot, so the snapshot paths run under the same faults as everything else.
 */
const COMPACT_ENTRIES_MIN_DEFAULT = 40;
/**
 * With `rest`, a partition unused this long rests (production: 3 s): the workers' pauses and the faults then leave
 * partitions resting often, so that requests meet lapsed leases and quiet groups under every fault.
 */
const SIM_REST_AFTER_MS = 200;
/**
 * With `batchWrites`, a partition's writes gather this long into one entry (production: the rest of the turn, 0 ms):
 * message delays are continuous in virtual time, so two deliveries never share a turn and nothing would batch.
 */
const SIM_BATCH_GATHER_MS = 5;
/** Steps of `runFor`: one drive may take at most the drive timeout of virtual time. */
const RUN_STEP_MS = 10_000;

export function workloadNamed(name: WorkloadName): Workload {
  switch (name) {
    case 'bank':
      return bankWorkload();
    case 'register':
      return registerWorkload();
    case 'list-append':
      return listAppendWorkload();
  }
}

/** The node roles a run's options ask for: resting partitions, batched writes, parallel commit. */
function simRoles(options: SimRunOptions): NodeRoles {
  const replicas = {
    ...(options.rest === true && { rest: true, restAfterMs: SIM_REST_AFTER_MS }),
    ...(options.batchWrites === true && { batchWrites: true, batchWritesGatherMs: SIM_BATCH_GATHER_MS }),
  };
  return {
    ...(Object.keys(replicas).length > 0 && { replicas }),
    ...(options.parallelCommit === true && { coordinator: { parallelCommit: true } }),
  };
}

function simTuning(options: SimRunOptions): NodeTuning {
  return {
    raftCompactEntriesMin: options.compactEntriesMin ?? COMPACT_ENTRIES_MIN_DEFAULT,
    ...(options.batchApply === true && { batchApply: true }),
  };
}

export async function simRun(options: SimRunOptions): Promise<SimRunResult> {
  const names = defaultNodeNames(options.nodes ?? 3);
  const env = new SimClusterEnvironment({
    seed: options.seed,
    names,
    traceMax: TRACE_MAX,
    // Nothing here counts messages, so the network keeps no log of every payload sent (memory and GC a run pays for).
    network: { sentLogMax: 0 },
    tuning: simTuning(options),
    ...simRoles(options),
  });
  const world = env.world;
  const startMs = world.nowMs();
  const recorder = new HistoryRecorder(() => (world.nowMs() - startMs) * 1_000_000);
  const workload = typeof options.workload === 'string' ? workloadNamed(options.workload) : options.workload;
  const random = new SeededRandom(`${String(options.seed)}/sim`);
  let faults: FaultSchedule | undefined;
  let failure: SimRunResult['failure'];
  let okAfterHeal = 0;
  const workersAcked = new Set<Worker>();
  let cluster: Cluster<Client> | undefined;
  // Every node incarnation the run saw: a restart brings fresh counters, and the marks sum them all.
  const incarnations = new Set<BasaltNode>();
  const seen = (name: string): void => {
    const node = cluster?.basaltNode(name);
    if (node !== undefined) incarnations.add(node);
  };
  try {
    cluster = await Cluster.start(env, names, embeddedClient);
    const c = cluster;
    await c.createTable(TABLE, { partitions: options.partitions ?? PARTITIONS, replicas: Math.min(3, names.length) });
    const ctx: WorkloadContext = { recorder, table: TABLE, setupClient: c.client(), sleep: (ms) => c.runFor(ms) };
    await workload.setup(ctx);
    faults = new FaultSchedule(c, world, random.fork('faults'), options.faults, seen);
    const workers: Worker[] = Array.from({ length: options.workers ?? WORKERS_DEFAULT }, (_, i) => ({
      client: c.client(names[i % names.length]),
      random: random.fork(`worker/${i}`),
      process: recorder.process(),
    }));
    const phase = { healed: false, endMs: Number.POSITIVE_INFINITY };
    const progressed = (): boolean => okAfterHeal >= LIVENESS_OK_MIN && workersAcked.size === workers.length;
    const loop = async (worker: Worker): Promise<void> => {
      for (;;) {
        await c.runFor(1 + worker.random.int(THINK_MS_MAX));
        if (world.nowMs() >= phase.endMs || (phase.healed && progressed())) return;
        // A worker that got its acknowledgement after the heal, once the total is met too, has shown what it can: it
        // goes on at a trickle, so that a run waiting for a slower worker (an operation lost to a fault waits out its
        // request timeout) does not pay for the others' full load meanwhile, while the cluster still sees traffic
        // (stopping outright cost the sweeps every cleanup re-driven by the rescan).
        if (phase.healed && workersAcked.has(worker) && okAfterHeal >= LIVENESS_OK_MIN) {
          await c.runFor(PACE_MS_AFTER_PROGRESS);
          if (world.nowMs() >= phase.endMs || progressed()) return;
        }
        // A client whose node is down would only fail fast (NODE_UNAVAILABLE): wait for the node instead.
        if (!c.node(worker.client.node).up) continue;
        const afterHeal = phase.healed;
        const type = await workload.operation(ctx, worker);
        if (type === 'ok' && afterHeal) {
          okAfterHeal++;
          workersAcked.add(worker);
        }
        if (type !== 'ok') await c.runFor(BACKOFF_MS_AFTER_FAILURE);
      }
    };
    const loops = Promise.all(workers.map(loop));
    // Workers that fail make the whole run fail at once, not when the schedule ends.
    loops.catch(() => {});
    const safetyEndMs = world.nowMs() + (options.durationMs ?? DURATION_MS_DEFAULT);
    await Promise.race([faults.run(safetyEndMs), loops]);
    await runUntil(c, () => world.nowMs(), safetyEndMs);
    await faults.heal();
    phase.healed = true;
    const healedMs = world.nowMs();
    phase.endMs = healedMs + (options.livenessMs ?? LIVENESS_MS_DEFAULT);
    await loops;
    await workload.final(ctx, {
      client: c.client(names[0]),
      random: random.fork('final'),
      process: recorder.process(),
    });
    if (!progressed()) {
      failure = {
        class: 'liveness',
        message:
          `${okAfterHeal} operations invoked after the heal were acknowledged (at least ${LIVENESS_OK_MIN} needed), ` +
          `${workersAcked.size} of ${workers.length} workers got one, within ${phase.endMs - healedMs} ms`,
      };
    } else if (!finalReadOk(recorder.ops, workload.name)) {
      failure = { class: 'liveness', message: 'the final read did not succeed after the heal' };
    }
  } catch (error) {
    failure = { class: classify(error), message: error instanceof Error ? error.message : String(error) };
  } finally {
    for (const name of names) seen(name);
    await cluster?.stop().catch(() => {});
  }
  const history = [...recorder.ops];
  let check: CheckOutcome | undefined;
  try {
    check = workload.check(history);
    if (!check.valid && failure?.class !== 'crash') {
      failure = { class: 'checker', message: `${check.anomalies.length} anomalies: ${check.anomalies[0] ?? ''}` };
    }
  } catch (error) {
    failure ??= { class: 'crash', message: `the checker failed: ${String(error)}` };
  }
  const count = (type: string) => history.filter((op) => op.type === type).length;
  return {
    seed: options.seed,
    workload: workload.name,
    failure,
    history,
    check,
    faultLog: faults?.log ?? [],
    trace: world.scheduler.trace().map((e) => ({ timeMs: e.timeMs - startMs, label: e.label })),
    traceHash: world.traceHash(),
    historyHash: createHash('sha256').update(formatHistory(history)).digest('hex').slice(0, 16),
    virtualMs: world.nowMs() - startMs,
    counts: { ok: count('ok'), fail: count('fail'), info: count('info'), okAfterHeal },
    marks: markHits([...incarnations].map((node) => node.counters.snapshot())),
  };
}

/** Lets virtual time pass up to `untilMs`, in steps a single drive may take. */
async function runUntil(cluster: Cluster<Client>, nowMs: () => number, untilMs: number): Promise<void> {
  while (nowMs() < untilMs) await cluster.runFor(Math.min(RUN_STEP_MS, untilMs - nowMs()));
}

/** Workloads with final reads need the last one to have succeeded. */
function finalReadOk(history: readonly Operation[], workload: WorkloadName): boolean {
  if (workload === 'register') return true;
  const last = history[history.length - 1];
  return last !== undefined && last.type === 'ok';
}

/** A drive that never settled or a wait that timed out is a liveness failure; anything else a crash. */
function classify(error: unknown): FailureClass {
  if (error instanceof SimulationError && /did not settle|deadlock/.test(error.message)) return 'liveness';
  if (error instanceof BasaltError && error.code === 'TIMEOUT') return 'liveness';
  return 'crash';
}
