/**
 * The low watermark of one node (DESIGN §2b rule 10; ignite3-protocol.md §8): MVCC history below it may be removed
 * by this node's storage GC, and an RO read below it is refused with TX_READ_ONLY_TOO_OLD.
 *
 *     watermark = max(previous watermark,
 *                     min(clock.current() − retention, oldest readTs of an open RO tx here, floor))
 *
 * where `floor` is the smallest unexpired protected timestamp of the cluster (metastorage-state.ts), as this node
 * knows it: a protected timestamp holds the watermark of every node that learned of it before passing it.
 *
 * Invariants:
 * - the watermark never goes back, so a read that passed the check at some moment is never outrun by a GC that
 *   used an earlier value;
 * - it never passes the readTs of an open RO tx registered here: `register` checks readTs ≥ watermark and records
 *   the reader in one synchronous step, and the reader stays recorded until it is released.
 *
 * Scope: per node. RO txs coordinated on other nodes are protected by retention alone (a retention above the RO
 * timeout + the largest staleness + maxClockSkew keeps every open RO readTs above `now − retention` everywhere). A
 * cluster-wide watermark (every node publishing its oldest open readTs) can replace that later. Safety never depends
 * on it: every RO read re-checks readTs ≥ watermark on the node whose storage it reads, so a read GC may have outrun
 * fails instead of seeing a truncated history.
 */
import { assert } from '../../core/assert.js';
import { BasaltError } from '../../core/errors.js';
import type { HybridTimestamp } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import type { HybridClock } from '../../hlc/hybrid-clock.js';
import { addMs, formatTimestamp, maxTimestamp, minTimestamp } from '../../hlc/timestamp.js';

export interface LowWatermarkOptions {
  readonly clock: Pick<HybridClock, 'current'>;
  /** History newer than now − this is kept (default LIMITS.lowWatermarkRetentionMsDefault). */
  readonly retentionMs?: number;
  /** The watermark stays at or below this, when defined (the cluster's protected timestamps). */
  readonly floor?: () => HybridTimestamp | undefined;
  /** Open readers at once (default LIMITS.txReadOnlyOpenMax); more are refused OVERLOADED. */
  readonly readersMax?: number;
}

/** An open reader's hold on the watermark; `release` is idempotent. */
export interface WatermarkHold {
  readonly readTs: HybridTimestamp;
  release(): void;
}

/** Stale heap entries tolerated before the heap is rebuilt from the live counts. */
const HEAP_SLACK_MIN = 1024;

export class LowWatermark {
  readonly retentionMs: number;
  readonly readersMax: number;
  private readonly clock: Pick<HybridClock, 'current'>;
  private readonly floor: (() => HybridTimestamp | undefined) | undefined;
  private value = 0n as HybridTimestamp;
  /** Open readers per readTs. */
  private readonly counts = new Map<HybridTimestamp, number>();
  private readerCount = 0;
  /** Min-heap of readTs values; an entry with no count left is stale and dropped when it reaches the top. */
  private heap: HybridTimestamp[] = [];

  constructor(options: LowWatermarkOptions) {
    this.clock = options.clock;
    this.floor = options.floor;
    this.retentionMs = options.retentionMs ?? LIMITS.lowWatermarkRetentionMsDefault;
    this.readersMax = options.readersMax ?? LIMITS.txReadOnlyOpenMax;
    if (!Number.isInteger(this.retentionMs) || this.retentionMs < 0) {
      throw new BasaltError('INVALID_ARGUMENT', 'low watermark retention must be an integer >= 0', {
        retentionMs: this.retentionMs,
      });
    }
    assert(this.readersMax > 0, 'readersMax must be positive');
  }

  /** The watermark now (raising it if time or closed readers allow). */
  current(): HybridTimestamp {
    const byTime = addMs(this.clock.current(), -this.retentionMs);
    const oldest = this.oldestOpen();
    const floor = this.floor?.();
    const held = oldest === undefined ? byTime : minTimestamp(byTime, oldest);
    const next = floor === undefined ? held : minTimestamp(held, floor);
    this.value = maxTimestamp(this.value, next);
    assert(
      oldest === undefined || this.value <= oldest,
      'the watermark never passes an open readTs',
      oldest,
      this.value,
    );
    return this.value;
  }

  /** Throws TX_READ_ONLY_TOO_OLD when `readTs` is below the watermark. */
  check(readTs: HybridTimestamp): void {
    const watermark = this.current();
    if (readTs < watermark) throw readOnlyTooOld(readTs, watermark);
  }

  /**
   * Records an open reader at `readTs`, after checking it is not below the watermark (TX_READ_ONLY_TOO_OLD); the
   * watermark stays at or below `readTs` until the hold is released. OVERLOADED when readersMax are open.
   */
  register(readTs: HybridTimestamp): WatermarkHold {
    this.check(readTs);
    if (this.readerCount >= this.readersMax) {
      throw new BasaltError('OVERLOADED', `${this.readersMax} read-only transactions are open on this node`);
    }
    const count = this.counts.get(readTs) ?? 0;
    if (count === 0) this.push(readTs);
    this.counts.set(readTs, count + 1);
    this.readerCount += 1;
    // Checked and recorded in one step: the watermark now sits at or below this readTs until the hold is released
    // (current() checks the same on every read of it).
    assert(this.value <= readTs, 'a registered reader is not below the watermark', readTs, this.value);
    assert(this.readerCount <= this.readersMax, 'at most readersMax readers are open', this.readerCount);
    let released = false;
    return {
      readTs,
      release: () => {
        if (released) return;
        released = true;
        this.unregister(readTs);
      },
    };
  }

  /** The smallest unexpired protected timestamp this node knows, if any (the watermark stays at or below it). */
  protectedFloor(): HybridTimestamp | undefined {
    return this.floor?.();
  }

  /** Open readers. */
  get openCount(): number {
    return this.readerCount;
  }

  /** The smallest readTs of an open reader. */
  oldestOpen(): HybridTimestamp | undefined {
    while (this.heap.length > 0) {
      const top = this.heap[0];
      assert(top !== undefined, 'heap top exists');
      if (this.counts.has(top)) return top;
      this.pop();
    }
    return undefined;
  }

  private unregister(readTs: HybridTimestamp): void {
    const count = this.counts.get(readTs);
    assert(count !== undefined && count > 0, 'a released reader was registered');
    if (count === 1) this.counts.delete(readTs);
    else this.counts.set(readTs, count - 1);
    this.readerCount -= 1;
    assert(this.readerCount >= this.counts.size, 'every readTs with a count has a reader', this.readerCount);
    if (this.heap.length > HEAP_SLACK_MIN + 2 * this.counts.size) this.rebuild();
  }

  private rebuild(): void {
    this.heap = [...this.counts.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  }

  private push(ts: HybridTimestamp): void {
    const heap = this.heap;
    heap.push(ts);
    let i = heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (heap[parent]! <= ts) break;
      heap[i] = heap[parent]!;
      i = parent;
    }
    heap[i] = ts;
  }

  private pop(): void {
    const heap = this.heap;
    const last = heap.pop();
    if (last === undefined || heap.length === 0) return;
    let i = 0;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= heap.length) break;
      const right = left + 1;
      const child = right < heap.length && heap[right]! < heap[left]! ? right : left;
      if (heap[child]! >= last) break;
      heap[i] = heap[child]!;
      i = child;
    }
    heap[i] = last;
  }
}

export function readOnlyTooOld(readTs: HybridTimestamp, watermark: HybridTimestamp): BasaltError {
  return new BasaltError(
    'TX_READ_ONLY_TOO_OLD',
    `readTs ${formatTimestamp(readTs)} is below the low watermark ${formatTimestamp(watermark)}`,
    { readTs: formatTimestamp(readTs), lowWatermark: formatTimestamp(watermark) },
  );
}
