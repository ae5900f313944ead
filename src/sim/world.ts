/**
 * A simulated world: one seed, one scheduler, one network, and named nodes that crash and restart. Model:
 *   - a node is a factory called with a `SimNodeEnv` at every start; one call is one *incarnation* with a fresh
 *     ephemeral id drawn from the seed, its own random stream (forked by name and incarnation), timers owned by the
 *     incarnation, a transport endpoint and a fenced view of the node's disk;
 *   - a crash discards the incarnation: its timers are cancelled and further ones ignored, its endpoint closes (peers
 *     see `down`, messages in flight to and from it are lost), its disk view is fenced, and the disk keeps what the
 *     crash kind allows (power loss: synced data only; process kill: everything written);
 *   - the clock and the disk belong to the node's machine and survive restarts;
 *   - every failure the world raises names the seed.
 */
import { type BasaltError, invalidArgument } from '../core/errors.js';
import { freshNodeId, type NodeId, type NodeName, nodeName } from '../core/ids.js';
import type { Timers } from '../env/timers.js';
import type { Transport } from '../env/transport.js';
import { SimClock, type SimClockOptions } from './clock.js';
import { type CrashKind, type DiskFaultMode, SimDisk, SimDiskView } from './disk.js';
import { SimulationError } from './errors.js';
import { SimNetwork, type SimNetworkOptions } from './network.js';
import { SeededRandom } from './random.js';
import { type EventHandle, type RunOptions, type RunResult, Scheduler } from './scheduler.js';

export interface SimWorldOptions {
  readonly seed: string | number;
  readonly network?: SimNetworkOptions;
  readonly startMs?: number;
  /** Default runaway bound of one `run` call. */
  readonly eventsMax?: number;
  /** Recent events kept for failure reports (the trace hash covers all of them regardless). */
  readonly traceMax?: number;
  readonly diskFaultMode?: DiskFaultMode;
  /** Time a `disk.syncAsync()` takes (0 = immediate). */
  readonly diskSyncLatencyMs?: number;
}

export interface SimNodeEnv {
  readonly name: NodeName;
  /** Fresh at every start. */
  readonly id: NodeId;
  /** 1 for the first start, then one more per restart. */
  readonly incarnation: number;
  readonly clock: SimClock;
  readonly timers: Timers;
  readonly random: SeededRandom;
  readonly transport: Transport;
  readonly disk: SimDiskView;
  /** Reports an error from the node's async work (e.g. a rejected background loop): the run stops with it. */
  readonly reportError: (error: unknown) => void;
}

export interface SimNodeInstance {
  /** Called by a graceful `shutdown`, never by a crash. */
  stop?(): void;
}

export type SimNodeFactory = (env: SimNodeEnv) => SimNodeInstance | undefined | Promise<SimNodeInstance | undefined>;

export interface AddNodeOptions {
  readonly clock?: SimClockOptions;
  readonly diskFaultMode?: DiskFaultMode;
}

export interface SimNodeInfo {
  readonly name: NodeName;
  readonly up: boolean;
  readonly incarnation: number;
  /** Id of the running incarnation, or of the last one if the node is down. */
  readonly id: NodeId | undefined;
  readonly instance: SimNodeInstance | undefined;
}

interface NodeSlot {
  readonly name: NodeName;
  readonly factory: SimNodeFactory;
  readonly clock: SimClock;
  readonly disk: SimDisk;
  incarnation: number;
  env: SimNodeEnv | undefined;
  instance: SimNodeInstance | undefined;
  lastId: NodeId | undefined;
}

export class SimWorld {
  readonly seed: string | number;
  readonly random: SeededRandom;
  readonly scheduler: Scheduler;
  readonly network: SimNetwork;
  private readonly ids: SeededRandom;
  private readonly slots = new Map<string, NodeSlot>();
  private readonly diskFaultMode: DiskFaultMode;
  private readonly diskSyncLatencyMs: number;
  private failure: unknown;

  constructor(options: SimWorldOptions) {
    this.seed = options.seed;
    this.random = new SeededRandom(options.seed);
    this.scheduler = new Scheduler({
      seed: options.seed,
      ...(options.startMs !== undefined && { startMs: options.startMs }),
      ...(options.eventsMax !== undefined && { eventsMax: options.eventsMax }),
      ...(options.traceMax !== undefined && { traceMax: options.traceMax }),
    });
    this.network = new SimNetwork(this.scheduler, this.random.fork('net'), options.network);
    this.ids = this.random.fork('node-ids');
    this.diskFaultMode = options.diskFaultMode ?? 'lose-unsynced';
    this.diskSyncLatencyMs = options.diskSyncLatencyMs ?? 0;
  }

  /** Adds a node and starts its first incarnation. */
  addNode(name: string, factory: SimNodeFactory, options: AddNodeOptions = {}): SimNodeEnv {
    if (this.slots.has(name)) throw invalidArgument(`node ${name} already exists`, { seed: this.seed });
    const slot: NodeSlot = {
      name: nodeName(name),
      factory,
      clock: new SimClock(this.scheduler, options.clock),
      disk: new SimDisk(this.random.fork(`disk/${name}`), options.diskFaultMode ?? this.diskFaultMode),
      incarnation: 0,
      env: undefined,
      instance: undefined,
      lastId: undefined,
    };
    this.slots.set(name, slot);
    return this.start(slot);
  }

  /** Kills the node's incarnation; `power-loss` (default) also loses unsynced disk writes. */
  crash(name: string, kind: CrashKind = 'power-loss'): void {
    const slot = this.upSlot(name, 'crash');
    this.teardown(slot, kind);
  }

  /** Stops the node gracefully: the instance's `stop()` runs first; the disk keeps everything written. */
  shutdown(name: string): void {
    const slot = this.upSlot(name, 'shut down');
    slot.instance?.stop?.();
    this.teardown(slot, 'process');
  }

  /** Starts a new incarnation of a down node on the same disk and clock. */
  restart(name: string): SimNodeEnv {
    const slot = this.slot(name);
    if (slot.env !== undefined) throw this.misuse(`cannot restart node ${name}: it is up`);
    return this.start(slot);
  }

  isUp(name: string): boolean {
    return this.slot(name).env !== undefined;
  }

  nodeNames(): NodeName[] {
    return [...this.slots.values()].map((s) => s.name);
  }

  node(name: string): SimNodeInfo {
    const slot = this.slot(name);
    return {
      name: slot.name,
      up: slot.env !== undefined,
      incarnation: slot.incarnation,
      id: slot.lastId,
      instance: slot.instance,
    };
  }

  /** The running incarnation's env (undefined while the node is down). */
  env(name: string): SimNodeEnv | undefined {
    return this.slot(name).env;
  }

  clock(name: string): SimClock {
    return this.slot(name).clock;
  }

  disk(name: string): SimDisk {
    return this.slot(name).disk;
  }

  setClockOffset(name: string, offsetMs: number): void {
    this.slot(name).clock.offsetMs = offsetMs;
  }

  setClockDrift(name: string, driftPpm: number): void {
    this.slot(name).clock.driftPpm = driftPpm;
  }

  /** Schedules a world-level action (a fault, a check) that belongs to no node. */
  schedule(delayMs: number, fn: () => void, label = 'world'): EventHandle {
    return this.scheduler.schedule(delayMs, fn, label);
  }

  nowMs(): number {
    return this.scheduler.nowMs();
  }

  /** Runs the world; stops at the first error a node reported and throws it with the seed. */
  async run(options: RunOptions = {}): Promise<RunResult> {
    const result = await this.scheduler.run({ ...options, until: this.untilOrFailure(options) });
    this.throwReported();
    return result;
  }

  /**
   * Runs until `condition` holds, failing with the seed if it does not within `withinMs` of virtual time (a liveness
   * check: after the faults heal, the cluster must converge).
   */
  async runUntil(condition: () => boolean, withinMs: number, what = 'condition'): Promise<RunResult> {
    const deadlineMs = this.nowMs() + withinMs;
    const result = await this.run({ until: condition, untilMs: deadlineMs });
    if (!condition()) this.fail(`${what} did not hold within ${withinMs} ms`, { stop: result.stop });
    return result;
  }

  runSync(options: RunOptions = {}): RunResult {
    const result = this.scheduler.runSync({ ...options, until: this.untilOrFailure(options) });
    this.throwReported();
    return result;
  }

  traceHash(): string {
    return this.scheduler.traceHash();
  }

  note(label: string): void {
    this.scheduler.note(label);
  }

  /** Throws a SimulationError naming the seed. */
  fail(message: string, details?: Readonly<Record<string, unknown>>): never {
    throw new SimulationError(this.seed, message, { ...details, nowMs: this.nowMs() });
  }

  check(condition: unknown, message: string, details?: Readonly<Record<string, unknown>>): asserts condition {
    if (!condition) this.fail(message, details);
  }

  private start(slot: NodeSlot): SimNodeEnv {
    slot.incarnation++;
    const id = freshNodeId(this.ids.uuid());
    slot.lastId = id;
    const owner = `${slot.name}#${slot.incarnation}`;
    const timers = this.scheduler.timers(owner);
    const env: SimNodeEnv = {
      name: slot.name,
      id,
      incarnation: slot.incarnation,
      clock: slot.clock,
      timers,
      random: this.random.fork(`node/${slot.name}/${slot.incarnation}`),
      transport: this.network.endpoint({ name: slot.name, id }),
      disk: new SimDiskView(slot.disk, timers, this.diskSyncLatencyMs),
      reportError: (error) => this.report(error),
    };
    slot.env = env;
    let made: ReturnType<SimNodeFactory>;
    try {
      made = slot.factory(env);
    } catch (error) {
      this.teardown(slot, 'process');
      throw new SimulationError(this.seed, `node ${slot.name} failed to start: ${String(error)}`, {}, error);
    }
    if (made instanceof Promise) {
      made.then(
        (instance) => {
          if (slot.env === env) slot.instance = instance;
        },
        (error: unknown) => this.report(error),
      );
    } else slot.instance = made;
    return env;
  }

  private teardown(slot: NodeSlot, kind: CrashKind): void {
    const env = slot.env!;
    this.scheduler.retireOwner(`${slot.name}#${slot.incarnation}`);
    void env.transport.close();
    env.disk.fence();
    slot.disk.crash(kind);
    slot.env = undefined;
    slot.instance = undefined;
  }

  private report(error: unknown): void {
    this.failure ??= error ?? new Error('a node reported an undefined error');
  }

  private untilOrFailure(options: RunOptions): () => boolean {
    const until = options.until;
    return () => this.failure !== undefined || (until?.() ?? false);
  }

  private throwReported(): void {
    const failure = this.failure;
    if (failure === undefined) return;
    this.failure = undefined;
    if (failure instanceof SimulationError) throw failure;
    throw new SimulationError(this.seed, `a node reported an error: ${String(failure)}`, {}, failure);
  }

  private slot(name: string): NodeSlot {
    const slot = this.slots.get(name);
    if (slot === undefined) throw this.misuse(`unknown node ${name}`);
    return slot;
  }

  private upSlot(name: string, action: string): NodeSlot {
    const slot = this.slot(name);
    if (slot.env === undefined) throw this.misuse(`cannot ${action} node ${name}: it is down`);
    return slot;
  }

  private misuse(message: string): BasaltError {
    return invalidArgument(`${message} (seed=${JSON.stringify(this.seed)})`, { seed: this.seed });
  }
}
