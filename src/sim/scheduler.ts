/**
 * Virtual time. The scheduler holds every future event of a simulated world in one binary heap ordered by
 * (time, insertion sequence) and runs them one at a time; nothing else advances time. Invariants:
 *   - events run in nondecreasing time; two events at the same time run in the order they were scheduled;
 *   - `nowMs()` is the time of the event being run (or the time a run stopped at) and never goes back;
 *   - an event belongs to at most one owner (a node incarnation); `cancelOwner` cancels all of an owner's pending
 *     events and `retireOwner` also makes the owner's later `setTimer` calls inert, so a crashed node's leftover
 *     promise continuations cannot schedule work;
 *   - every run event is folded into a running hash of (time, label): the same seed must give the same `traceHash()`.
 * `run` drains the microtask queue after each event, so the continuations an event released (promises settled by a
 * timer or a delivered message) all run before the next event: async code interleaves in one reproducible order.
 */
import { invalidArgument } from '../core/errors.js';
import { LIMITS } from '../core/limits.js';
import type { TimerHandle, Timers } from '../env/timers.js';
import { SimulationError } from './errors.js';

/** Virtual time starts here so that hybrid timestamps built from it look like real ones (Nov 2023). */
export const SIM_EPOCH_MS = 1_700_000_000_000;

/** Pending events at once; more means a runaway producer (e.g. a timer loop scheduling several per firing). */
const PENDING_EVENTS_MAX = 10_000_000;

/** Compaction of cancelled heap entries starts above this many (and when they are at least half the heap). */
const CANCELLED_COMPACT_MIN = 4096;

export interface SchedulerOptions {
  /** The seed of the world, printed in every failure. */
  readonly seed: string | number;
  readonly startMs?: number;
  /** Default runaway bound for one `run`/`runSync` call. */
  readonly eventsMax?: number;
  /** Keep the last `traceMax` run events in memory for debugging (0 = keep none; the hash is always kept). */
  readonly traceMax?: number;
}

export interface RunOptions {
  /** Stop before the first event later than this absolute virtual time, and advance the clock to it. */
  readonly untilMs?: number;
  /** Same as `untilMs: nowMs() + forMs`. */
  readonly forMs?: number;
  /** Stop as soon as this returns true (checked before every event, after the microtasks drained). */
  readonly until?: () => boolean;
  /** Runaway bound for this call: running more events throws a SimulationError with the seed. */
  readonly maxEvents?: number;
}

export type RunStop = 'until' | 'time' | 'idle';

export interface RunResult {
  /** Why the run stopped: `until` returned true, the time bound was reached, or no events were left. */
  readonly stop: RunStop;
  readonly events: number;
  readonly nowMs: number;
}

export interface TraceEntry {
  readonly timeMs: number;
  readonly label: string;
}

export type EventHandle = TimerHandle;

class SimEvent implements TimerHandle {
  live = true;
  constructor(
    readonly timeMs: number,
    readonly timerId: number,
    readonly label: string,
    readonly fn: () => void,
    readonly owner: string | undefined,
  ) {}
}

function before(a: SimEvent, b: SimEvent): boolean {
  return a.timeMs < b.timeMs || (a.timeMs === b.timeMs && a.timerId < b.timerId);
}

const FNV_PRIME = 0x01000193;
const MIX_PRIME = 0x5bd1e995;

export class Scheduler {
  readonly seed: string | number;
  readonly startMs: number;
  private now: number;
  private seq = 0;
  private readonly heap: SimEvent[] = [];
  private cancelledInHeap = 0;
  private readonly byOwner = new Map<string, Set<SimEvent>>();
  private readonly retired = new Set<string>();
  private readonly eventsMax: number;
  private readonly traceMax: number;
  private readonly traceRing: TraceEntry[] = [];
  private traceNext = 0;
  private hashA = 0x811c9dc5;
  private hashB = 0x2f0bc6a7;
  private eventsRun = 0;
  private running = false;
  private current: SimEvent | undefined;

  constructor(options: SchedulerOptions) {
    this.seed = options.seed;
    this.startMs = options.startMs ?? SIM_EPOCH_MS;
    this.now = this.startMs;
    this.eventsMax = options.eventsMax ?? LIMITS.simEventsMax;
    this.traceMax = options.traceMax ?? 0;
  }

  /** Current virtual time in milliseconds since the Unix epoch. */
  nowMs(): number {
    return this.now;
  }

  /** Events run so far, over the scheduler's whole life. */
  get eventCount(): number {
    return this.eventsRun;
  }

  /** Events scheduled and not yet run or cancelled. */
  get pendingCount(): number {
    return this.heap.length - this.cancelledInHeap;
  }

  /** Label of the event being run, for diagnostics. */
  get currentLabel(): string | undefined {
    return this.current?.label;
  }

  schedule(delayMs: number, fn: () => void, label = 'event', owner?: string): EventHandle {
    if (!(delayMs >= 0)) {
      if (Number.isNaN(delayMs)) throw invalidArgument('delayMs is NaN', { label });
      delayMs = 0;
    }
    return this.push(this.now + delayMs, fn, label, owner);
  }

  /** Schedules at an absolute virtual time; a time in the past means "now". */
  scheduleAt(timeMs: number, fn: () => void, label = 'event', owner?: string): EventHandle {
    if (Number.isNaN(timeMs)) throw invalidArgument('timeMs is NaN', { label });
    return this.push(Math.max(this.now, timeMs), fn, label, owner);
  }

  /** Cancels a pending event; cancelling a run or cancelled event is a no-op. */
  cancel(handle: EventHandle): void {
    const event = handle as SimEvent;
    if (!event.live) return;
    event.live = false;
    this.cancelledInHeap++;
    if (event.owner !== undefined) this.byOwner.get(event.owner)?.delete(event);
    this.maybeCompact();
  }

  /** Cancels every pending event of `owner`. */
  cancelOwner(owner: string): number {
    const events = this.byOwner.get(owner);
    if (events === undefined) return 0;
    const cancelled = events.size;
    for (const event of events) {
      event.live = false;
      this.cancelledInHeap++;
    }
    this.byOwner.delete(owner);
    this.maybeCompact();
    return cancelled;
  }

  /** Cancels the owner's events and ignores its future `schedule` calls (a crashed node incarnation). */
  retireOwner(owner: string): void {
    this.retired.add(owner);
    this.cancelOwner(owner);
  }

  isRetired(owner: string): boolean {
    return this.retired.has(owner);
  }

  /** An env `Timers` whose timers belong to `owner`. */
  timers(owner: string): Timers {
    const label = `timer:${owner}`;
    return {
      setTimer: (fn, delayMs) => this.schedule(delayMs, fn, label, owner),
      clearTimer: (handle) => this.cancel(handle),
    };
  }

  /** Folds an extra observation into the trace hash (e.g. a value a workload read), without an event. */
  note(label: string): void {
    this.fold(this.now, label);
  }

  /** A hex digest of every event run so far (time and label) and every note. */
  traceHash(): string {
    return (this.hashA >>> 0).toString(16).padStart(8, '0') + (this.hashB >>> 0).toString(16).padStart(8, '0');
  }

  /** The last `traceMax` entries, oldest first. */
  trace(): TraceEntry[] {
    if (this.traceRing.length < this.traceMax) return [...this.traceRing];
    return [...this.traceRing.slice(this.traceNext), ...this.traceRing.slice(0, this.traceNext)];
  }

  /** Runs one event, if any; returns false when none is pending. */
  step(): boolean {
    const next = this.peek();
    if (next === undefined) return false;
    this.fire(next);
    return true;
  }

  /** Runs events for purely synchronous code (no promise continuations between events). */
  runSync(options: RunOptions = {}): RunResult {
    this.enter();
    try {
      const untilMs = this.untilMsOf(options);
      const bound = options.maxEvents ?? this.eventsMax;
      let events = 0;
      for (;;) {
        const stop = this.stopReason(options, untilMs);
        if (stop !== undefined) return { stop, events, nowMs: this.now };
        this.checkBound(events, bound);
        this.fire(this.peek()!);
        events++;
      }
    } finally {
      this.running = false;
    }
  }

  /** Runs events, draining the microtask queue before the first and after every event. */
  async run(options: RunOptions = {}): Promise<RunResult> {
    this.enter();
    try {
      const untilMs = this.untilMsOf(options);
      const bound = options.maxEvents ?? this.eventsMax;
      let events = 0;
      await drainMicrotasks();
      for (;;) {
        const stop = this.stopReason(options, untilMs);
        if (stop !== undefined) return { stop, events, nowMs: this.now };
        this.checkBound(events, bound);
        this.fire(this.peek()!);
        events++;
        await drainMicrotasks();
      }
    } finally {
      this.running = false;
    }
  }

  private enter(): void {
    if (this.running) throw invalidArgument('the scheduler is already running (run called from inside an event?)');
    this.running = true;
  }

  private untilMsOf(options: RunOptions): number | undefined {
    if (options.forMs !== undefined) return this.now + options.forMs;
    return options.untilMs;
  }

  /** Undefined = keep going; there is then a pending event within the time bound. */
  private stopReason(options: RunOptions, untilMs: number | undefined): RunStop | undefined {
    if (options.until?.()) return 'until';
    const next = this.peek();
    if (untilMs !== undefined && (next === undefined || next.timeMs > untilMs)) {
      this.now = Math.max(this.now, untilMs);
      return next === undefined ? 'idle' : 'time';
    }
    return next === undefined ? 'idle' : undefined;
  }

  private checkBound(events: number, bound: number): void {
    if (events >= bound) {
      throw new SimulationError(this.seed, `runaway simulation: more than ${bound} events in one run`, {
        nowMs: this.now,
        trace: this.trace().slice(-20),
      });
    }
  }

  private push(timeMs: number, fn: () => void, label: string, owner: string | undefined): EventHandle {
    const event = new SimEvent(timeMs, ++this.seq, label, fn, owner);
    if (owner !== undefined) {
      if (this.retired.has(owner)) {
        event.live = false;
        return event;
      }
      let set = this.byOwner.get(owner);
      if (set === undefined) {
        set = new Set();
        this.byOwner.set(owner, set);
      }
      set.add(event);
    }
    if (this.heap.length >= PENDING_EVENTS_MAX) {
      throw new SimulationError(this.seed, `more than ${PENDING_EVENTS_MAX} pending events`, { label });
    }
    this.heap.push(event);
    this.siftUp(this.heap.length - 1);
    return event;
  }

  /** The next live event, discarding cancelled ones at the top of the heap. */
  private peek(): SimEvent | undefined {
    for (;;) {
      const top = this.heap[0];
      if (top === undefined || top.live) return top;
      this.popTop();
      this.cancelledInHeap--;
    }
  }

  private fire(event: SimEvent): void {
    this.popTop();
    event.live = false;
    if (event.owner !== undefined) this.byOwner.get(event.owner)?.delete(event);
    this.now = event.timeMs;
    this.eventsRun++;
    this.fold(event.timeMs, event.label);
    this.current = event;
    try {
      event.fn();
    } catch (error) {
      if (error instanceof SimulationError) throw error;
      throw new SimulationError(
        this.seed,
        `event '${event.label}' at t=${event.timeMs - this.startMs}ms threw: ${String(error)}`,
        { label: event.label, nowMs: event.timeMs },
        error,
      );
    } finally {
      this.current = undefined;
    }
  }

  private fold(timeMs: number, label: string): void {
    const relMs = timeMs - this.startMs;
    const whole = Math.floor(relMs);
    this.mixWord(whole >>> 0);
    this.mixWord(Math.floor(whole / 4294967296) >>> 0);
    this.mixWord(Math.round((relMs - whole) * 1048576));
    let a = this.hashA;
    let b = this.hashB;
    for (let i = 0; i < label.length; i++) {
      const c = label.charCodeAt(i);
      a = Math.imul(a ^ c, FNV_PRIME);
      b = Math.imul(b ^ c, MIX_PRIME);
      b ^= b >>> 13;
    }
    this.hashA = a;
    this.hashB = b;
    if (this.traceMax > 0) this.record({ timeMs, label });
  }

  private mixWord(word: number): void {
    this.hashA = Math.imul(this.hashA ^ word, FNV_PRIME);
    const b = Math.imul(this.hashB ^ word, MIX_PRIME);
    this.hashB = b ^ (b >>> 15);
  }

  private record(entry: TraceEntry): void {
    if (this.traceRing.length < this.traceMax) this.traceRing.push(entry);
    else this.traceRing[this.traceNext] = entry;
    this.traceNext = (this.traceNext + 1) % this.traceMax;
  }

  private maybeCompact(): void {
    if (this.cancelledInHeap < CANCELLED_COMPACT_MIN || this.cancelledInHeap * 2 < this.heap.length) return;
    const live = this.heap.filter((e) => e.live);
    this.heap.length = 0;
    for (const event of live) {
      this.heap.push(event);
      this.siftUp(this.heap.length - 1);
    }
    this.cancelledInHeap = 0;
  }

  private popTop(): void {
    const last = this.heap.pop()!;
    if (this.heap.length > 0) {
      this.heap[0] = last;
      this.siftDown(0);
    }
  }

  private siftUp(index: number): void {
    const heap = this.heap;
    const event = heap[index]!;
    while (index > 0) {
      const parent = (index - 1) >> 1;
      const p = heap[parent]!;
      if (!before(event, p)) break;
      heap[index] = p;
      index = parent;
    }
    heap[index] = event;
  }

  private siftDown(index: number): void {
    const heap = this.heap;
    const n = heap.length;
    const event = heap[index]!;
    for (;;) {
      const left = 2 * index + 1;
      if (left >= n) break;
      const right = left + 1;
      const child = right < n && before(heap[right]!, heap[left]!) ? right : left;
      const c = heap[child]!;
      if (!before(c, event)) break;
      heap[index] = c;
      index = child;
    }
    heap[index] = event;
  }
}

/**
 * Resolves once every microtask queued so far, and every microtask those queue, has run: an immediate callback runs
 * only after the microtask queue is empty. Real I/O never happens inside a simulation, so nothing else can interleave.
 */
export function drainMicrotasks(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
