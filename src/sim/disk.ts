/**
 * A node's simulated durable storage: named stores of key → value, like files in a data directory. Model:
 *   - a write is visible to reads at once (the OS page cache) but durable only after `sync()` (fsync);
 *   - a power loss keeps exactly the synced state, or, under a fault mode, also a prefix of the unsynced writes in
 *     the order they were made, the last of which may be torn (a byte array cut short);
 *   - a process crash (`kill -9`) keeps everything written, synced or not, because the page cache survives it.
 * The disk outlives node incarnations. Each incarnation writes through its own `SimDiskView`, which the world fences
 * when the incarnation dies: a dead node's leftover continuations can read but no longer write.
 * Values are kept by reference except byte arrays, which are copied; callers treat stored values as immutable.
 */
import { assert } from '../core/assert.js';
import { invalidArgument } from '../core/errors.js';
import type { Timers } from '../env/timers.js';
import type { SeededRandom } from './random.js';

export type DiskFaultMode =
  /** Only synced writes survive a power loss. */
  | 'lose-unsynced'
  /** A random prefix of the unsynced writes survives, in order. */
  | 'keep-prefix'
  /** As keep-prefix, and the last surviving write, if a byte array, may be cut short. */
  | 'tear-last';

export type CrashKind = 'power-loss' | 'process';

interface PendingWrite {
  readonly store: string;
  readonly key: string;
  /** undefined = delete. */
  readonly value: unknown;
}

/** Unsynced writes a disk holds before `sync` is required; a bound on a node that never syncs. */
const PENDING_WRITES_MAX = 1_000_000;

export class SimDisk {
  /** What survives a power loss. */
  private readonly durable = new Map<string, Map<string, unknown>>();
  /** What reads see: durable state plus pending writes. */
  private readonly visible = new Map<string, Map<string, unknown>>();
  private pending: PendingWrite[] = [];
  /** Writes ever made, and how many of them are durable: the first `durableWrites` of the sequence. */
  private writes = 0;
  private durableWrites = 0;
  private syncs = 0;

  constructor(
    private readonly random: SeededRandom,
    readonly faultMode: DiskFaultMode = 'lose-unsynced',
  ) {}

  get(store: string, key: string): unknown {
    return this.visible.get(store)?.get(key);
  }

  has(store: string, key: string): boolean {
    return this.visible.get(store)?.has(key) ?? false;
  }

  set(store: string, key: string, value: unknown): void {
    if (value === undefined) throw invalidArgument('disk values cannot be undefined; use delete', { store, key });
    const stored = value instanceof Uint8Array ? value.slice() : value;
    this.write({ store, key, value: stored });
  }

  delete(store: string, key: string): void {
    this.write({ store, key, value: undefined });
  }

  /** Keys of `store` in insertion order of the visible state. */
  keys(store: string): string[] {
    return [...(this.visible.get(store)?.keys() ?? [])];
  }

  entries(store: string): Array<[string, unknown]> {
    return [...(this.visible.get(store)?.entries() ?? [])];
  }

  stores(): string[] {
    return [...this.visible.keys()].filter((s) => (this.visible.get(s)?.size ?? 0) > 0);
  }

  /** Makes every write so far durable. */
  sync(): void {
    this.syncThrough(this.writes);
  }

  /** Position in the write sequence, to make durable later with `syncThrough` (an fsync that takes time). */
  get writeMark(): number {
    return this.writes;
  }

  /** Makes durable the writes made before `mark` was read; later ones stay pending. */
  syncThrough(mark: number): void {
    assert(mark <= this.writes, 'a write mark comes from this disk');
    const count = mark - this.durableWrites;
    if (count > 0) {
      for (const write of this.pending.slice(0, count)) apply(this.durable, write);
      this.pending = this.pending.slice(count);
      this.durableWrites = mark;
    }
    this.syncs++;
  }

  get unsyncedCount(): number {
    return this.pending.length;
  }

  get syncCount(): number {
    return this.syncs;
  }

  /** What survives a crash of the machine (`power-loss`, per the fault mode) or of the process only. */
  crash(kind: CrashKind): void {
    if (kind === 'process') return;
    const survivors = this.survivingWrites();
    for (const write of survivors) apply(this.durable, write);
    this.pending = [];
    this.durableWrites = this.writes;
    this.visible.clear();
    for (const [store, map] of this.durable) this.visible.set(store, new Map(map));
  }

  private write(write: PendingWrite): void {
    assert(this.pending.length < PENDING_WRITES_MAX, 'too many unsynced disk writes: sync() is never called?');
    this.pending.push(write);
    this.writes++;
    apply(this.visible, write);
  }

  private survivingWrites(): PendingWrite[] {
    if (this.faultMode === 'lose-unsynced' || this.pending.length === 0) return [];
    const kept = this.pending.slice(0, this.random.int(this.pending.length + 1));
    const last = kept[kept.length - 1];
    if (this.faultMode === 'tear-last' && last?.value instanceof Uint8Array && last.value.length > 0) {
      kept[kept.length - 1] = { ...last, value: last.value.slice(0, this.random.int(last.value.length)) };
    }
    return kept;
  }
}

/** A node incarnation's handle on its disk; after `fence()` writes are ignored (a dead process writes nothing). */
export class SimDiskView {
  private fenced = false;
  private ignored = 0;

  constructor(
    readonly disk: SimDisk,
    private readonly timers?: Timers,
    private readonly syncLatencyMs = 0,
  ) {}

  get(store: string, key: string): unknown {
    return this.disk.get(store, key);
  }

  has(store: string, key: string): boolean {
    return this.disk.has(store, key);
  }

  keys(store: string): string[] {
    return this.disk.keys(store);
  }

  entries(store: string): Array<[string, unknown]> {
    return this.disk.entries(store);
  }

  set(store: string, key: string, value: unknown): void {
    if (this.fenced) this.ignored++;
    else this.disk.set(store, key, value);
  }

  delete(store: string, key: string): void {
    if (this.fenced) this.ignored++;
    else this.disk.delete(store, key);
  }

  sync(): void {
    if (this.fenced) this.ignored++;
    else this.disk.sync();
  }

  /**
   * An fsync that takes the disk's sync latency: the writes made before the call become durable when the promise
   * resolves. If the incarnation dies first they stay unsynced and the promise never settles (the process is gone).
   */
  syncAsync(): Promise<void> {
    if (this.fenced) {
      this.ignored++;
      return new Promise(() => {});
    }
    const mark = this.disk.writeMark;
    const timers = this.timers;
    if (timers === undefined || this.syncLatencyMs <= 0) {
      this.disk.syncThrough(mark);
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      timers.setTimer(() => {
        if (this.fenced) return;
        this.disk.syncThrough(mark);
        resolve();
      }, this.syncLatencyMs);
    });
  }

  /** @internal Called by the world when the incarnation dies. */
  fence(): void {
    this.fenced = true;
  }

  /** Writes and syncs attempted after the incarnation died (a sign of work not stopped on crash). */
  get ignoredCount(): number {
    return this.ignored;
  }
}

function apply(target: Map<string, Map<string, unknown>>, write: PendingWrite): void {
  let store = target.get(write.store);
  if (store === undefined) {
    store = new Map();
    target.set(write.store, store);
  }
  if (write.value === undefined) store.delete(write.key);
  else store.set(write.key, write.value);
}
