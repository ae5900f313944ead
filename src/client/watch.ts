/**
 * Watches (DESIGN §4b "Change streams are MVCC reads in commit order"): a change stream over a table's key range as
 * a sequence of change reads, each an RO read of the versions committed in a window `(from, to]`.
 *
 * One round reads every partition of the table in the same window, `to` being the serving coordinator's `now` when the
 * round starts: a read at `to` waits for safe time and resolves intents exactly as an RO snapshot at `to` does, so
 * once every partition answered, nothing committed at or below `to` in the range is still to come, and the round
 * ends with the progress mark `{ resolvedTs: to }`; the next round reads `(to, to']`. Within a partition a window is
 * read in pages (rows whole, so every version of a key in the window is in one page, oldest first); at most
 * `concurrency` partitions are read at once, one page each, so memory is bounded by concurrency × pageSize versions.
 *
 * Exactly once: windows never overlap, and the stream remembers its position inside a round (the window's `to`, the
 * partitions done, the next key of each partition in progress). A failed page (a lost connection, a node restarting,
 * a primary moving) is retried from that position with the same `to`: a read at a fixed timestamp answers the same on
 * every replica, so nothing is delivered twice and nothing is skipped. A watch started again from a resolved
 * timestamp R (`fromTimestamp: R`) gets every change above R, so a consumer that dedupes on (key, commitTs) across
 * its own restarts sees each change once.
 *
 * Back-pressure: the stream is pulled; no read is made while the consumer has not taken what was read. A consumer
 * that stays away past the retention window finds its next window gone: WATCH_FELL_BEHIND (a `fromTimestamp` already
 * too old at the start is WATCH_TOO_OLD). Both name the oldest timestamp still available; neither is ever a gap.
 * Nothing is held on the nodes between reads, so a watch costs the write path nothing.
 */
import { asBasaltError, BasaltError, invalidArgument } from '../core/errors.js';
import type { HybridTimestamp } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { backoffMs } from '../route/backoff.js';
import type { Value } from '../storage/mv-partition-storage.js';
import type { ChangeReadPage, ChangeReadRequest } from '../tx/coordinator/read-only.js';
import type { ChangeEntry } from '../tx/core/messages.js';
import { compareKeys } from '../tx/core/user-input.js';
import { boundsOf } from './scan-pages.js';

export type { ChangeReadPage, ChangeReadRequest } from '../tx/coordinator/read-only.js';

/** What a watch watches and from when. */
export interface WatchOptions {
  /** Only keys that start with this prefix. */
  readonly prefix?: string;
  /** Only keys in `[start, end)` (either bound optional). Not with `prefix`. */
  readonly range?: { readonly start?: string; readonly end?: string };
  /**
   * Deliver every change committed above this timestamp (default: the coordinator's `now` at the start). Below what
   * the cluster still retains, the stream fails WATCH_TOO_OLD.
   */
  readonly fromTimestamp?: HybridTimestamp;
  /** Pause between rounds that found no change (default 100 ms). */
  readonly pollMs?: number;
  /** Versions per page read (default 1,000; at most LIMITS.storageScanRowsMax). */
  readonly pageSize?: number;
  /** Partitions read at once (default 4). */
  readonly concurrency?: number;
}

/** A committed write of a key. */
export interface WatchPut {
  readonly kind: 'put';
  readonly key: string;
  readonly value: Value;
  readonly commitTs: HybridTimestamp;
}

/** A committed removal of a key. */
export interface WatchDelete {
  readonly kind: 'delete';
  readonly key: string;
  readonly deleted: true;
  readonly commitTs: HybridTimestamp;
}

/** Progress: every change at or below `resolvedTs` in the watched range has been delivered. */
export interface WatchResolved {
  readonly kind: 'resolved';
  readonly resolvedTs: HybridTimestamp;
}

export type WatchEvent = WatchPut | WatchDelete | WatchResolved;

/** A watch: pull events with `for await`; `return()` (or `break`) ends it. */
export type WatchStream = AsyncGenerator<WatchEvent, void, undefined>;

/** Where a watch reads: one page of one partition's changes, and a pause in the source's time. */
export interface ChangeSource {
  readChanges(request: ChangeReadRequest): Promise<ChangeReadPage>;
  sleep(ms: number): Promise<void>;
}

export const WATCH_POLL_MS_DEFAULT = 100;
export const WATCH_PAGE_SIZE_DEFAULT = 1_000;
export const WATCH_CONCURRENCY_DEFAULT = 4;

interface Settings {
  readonly table: string;
  readonly range: { readonly start?: string; readonly end?: string };
  readonly fromTimestamp: HybridTimestamp | undefined;
  readonly pollMs: number;
  readonly pageSize: number;
  readonly concurrency: number;
}

/** Checks a watch's options (INVALID_ARGUMENT) before anything is read. */
export function watchSettings(table: string, options: WatchOptions = {}): Settings {
  if (typeof table !== 'string' || table === '') throw invalidArgument('a watch needs a table name');
  const { prefix, range, fromTimestamp } = options;
  if (prefix !== undefined && range !== undefined) throw invalidArgument('a watch takes a prefix or a range, not both');
  if (prefix !== undefined && typeof prefix !== 'string') throw invalidArgument('a watch prefix is a string');
  if (range !== undefined) checkRange(range);
  if (fromTimestamp !== undefined && (typeof fromTimestamp !== 'bigint' || fromTimestamp <= 0n)) {
    throw invalidArgument('fromTimestamp must be a positive timestamp (a bigint)');
  }
  const pollMs = integerIn('pollMs', options.pollMs ?? WATCH_POLL_MS_DEFAULT, 1, LIMITS.watchPollMsMax);
  const pageSize = integerIn('pageSize', options.pageSize ?? WATCH_PAGE_SIZE_DEFAULT, 1, LIMITS.storageScanRowsMax);
  const concurrency = integerIn(
    'concurrency',
    options.concurrency ?? WATCH_CONCURRENCY_DEFAULT,
    1,
    LIMITS.watchConcurrencyMax,
  );
  const bounds = prefix !== undefined ? boundsOf({ prefix }) : (range ?? {});
  return { table, range: bounds, fromTimestamp, pollMs, pageSize, concurrency };
}

function checkRange(range: unknown): void {
  if (typeof range !== 'object' || range === null) throw invalidArgument('a watch range is { start?, end? }');
  const r = range as Record<string, unknown>;
  for (const [name, bound] of Object.entries(r)) {
    if ((name !== 'start' && name !== 'end') || (bound !== undefined && typeof bound !== 'string')) {
      throw invalidArgument('a watch range is { start?, end? } with string bounds', { field: name });
    }
  }
  const { start, end } = r as { start?: string; end?: string };
  if (start !== undefined && end !== undefined && compareKeys(start, end) > 0) {
    throw invalidArgument('a watch range must not start after its end', { start, end });
  }
}

function integerIn(name: string, value: number, min: number, max: number): number {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw invalidArgument(`${name} must be an integer in [${min}, ${max}]`, { [name]: value });
  }
  return value;
}

/** Where a round stands in one partition: the key its next page starts at, or done. */
interface Cursor {
  readonly partition: number;
  start: string | undefined;
  done: boolean;
}

/** The change stream of `table` read from `source` (see the module header). */
export function watchChanges(source: ChangeSource, table: string, options: WatchOptions = {}): WatchStream {
  // Checked now, so a bad option fails the call itself rather than the first pull.
  return stream(source, watchSettings(table, options));
}

async function* stream(source: ChangeSource, settings: Settings): WatchStream {
  const reader = new RoundReader(source, settings);
  let resolved = settings.fromTimestamp ?? (await reader.start());
  for (let round = 0; ; round++) {
    let delivered = 0;
    for await (const batch of reader.round(resolved, round === 0 && settings.fromTimestamp !== undefined)) {
      delivered += batch.length;
      yield* batch;
    }
    // A window that could not open yet (its start ahead of the coordinator's clock) resolves nothing new.
    if (reader.toTs > resolved) {
      resolved = reader.toTs;
      yield { kind: 'resolved', resolvedTs: resolved };
    }
    if (delivered === 0) await source.sleep(settings.pollMs);
  }
}

class RoundReader {
  /** The partition count, learned from the first read. */
  private partitions = 0;
  /** The upper bound of the current round's window. */
  toTs = 0n as HybridTimestamp;

  constructor(
    private readonly source: ChangeSource,
    private readonly settings: Settings,
  ) {}

  /** The timestamp a watch without `fromTimestamp` starts from: the coordinator's `now`. */
  async start(): Promise<HybridTimestamp> {
    const page = await this.retrying(() => this.source.readChanges(this.request(0, undefined, undefined, undefined)));
    this.partitions = page.partitions;
    return page.toTs;
  }

  /**
   * The changes of one round above `fromTs`, batch by batch (one page of each partition in the group, sorted by
   * commitTs). `first`: `fromTs` is the caller's, so a window already gone is WATCH_TOO_OLD, else WATCH_FELL_BEHIND.
   */
  async *round(fromTs: HybridTimestamp, first: boolean): AsyncGenerator<WatchEvent[], void, undefined> {
    const { concurrency } = this.settings;
    // The window's `to` is fixed by the first page of partition 0; every later page of the round reads at it.
    const opening = await this.read(0, fromTs, undefined, undefined, first);
    this.toTs = opening.toTs;
    this.partitions = opening.partitions;
    const cursors: Cursor[] = [];
    for (let partition = 0; partition < this.partitions; partition++) {
      cursors.push({ partition, start: this.settings.range.start, done: false });
    }
    // Partition 0's first page joins the first batch of its group, so a small round comes out in commit order.
    let carried: (WatchPut | WatchDelete)[] = this.advance(cursors[0]!, opening);
    for (let group = 0; group < cursors.length; group += concurrency) {
      const lanes = cursors.slice(group, group + concurrency);
      for (let open = lanes.filter((c) => !c.done); open.length > 0; open = lanes.filter((c) => !c.done)) {
        const pages = await Promise.all(open.map((c) => this.read(c.partition, fromTs, this.toTs, c.start, first)));
        const batch = [...carried, ...open.flatMap((c, i) => this.advance(c, pages[i]!))];
        carried = [];
        // Stable: each key's versions stay oldest first.
        batch.sort((a, b) => (a.commitTs < b.commitTs ? -1 : a.commitTs > b.commitTs ? 1 : 0));
        if (batch.length > 0) yield batch;
      }
    }
    if (carried.length > 0) yield carried;
  }

  /** Moves a cursor past a page; the page's events, in commit order per key. */
  private advance(cursor: Cursor, page: ChangeReadPage): (WatchPut | WatchDelete)[] {
    if (page.nextKey === undefined) cursor.done = true;
    else cursor.start = page.nextKey;
    return page.changes.map(eventOf);
  }

  private async read(
    partition: number,
    fromTs: HybridTimestamp,
    toTs: HybridTimestamp | undefined,
    start: string | undefined,
    first: boolean,
  ): Promise<ChangeReadPage> {
    try {
      return await this.retrying(() => this.source.readChanges(this.request(partition, fromTs, toTs, start)));
    } catch (error) {
      const e = asBasaltError(error);
      if (e.code !== 'WATCH_TOO_OLD' || first) throw e;
      throw new BasaltError(
        'WATCH_FELL_BEHIND',
        `the watch of ${this.settings.table} fell behind: changes above ${String(fromTs)} are no longer retained`,
        { ...e.details, resolvedTs: String(fromTs) },
        { cause: e },
      );
    }
  }

  private request(
    partition: number,
    fromTs: HybridTimestamp | undefined,
    toTs: HybridTimestamp | undefined,
    start: string | undefined,
  ): ChangeReadRequest {
    const { table, range, pageSize } = this.settings;
    // Continuation keys are at or after the range's start: no key means the start of the range.
    const from = start ?? range.start;
    return {
      table,
      partition,
      range: { ...(from !== undefined && { start: from }), ...(range.end !== undefined && { end: range.end }) },
      ...(fromTs !== undefined && { fromTs }),
      ...(toTs !== undefined && { toTs }),
      limit: pageSize,
    };
  }

  /** Runs `read` again after a retryable failure (same window, same position), at most LIMITS.watchRetriesMax times. */
  private async retrying(read: () => Promise<ChangeReadPage>): Promise<ChangeReadPage> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await read();
      } catch (error) {
        const e = asBasaltError(error);
        if (!e.retryable || attempt >= LIMITS.watchRetriesMax) throw e;
        await this.source.sleep(backoffMs(attempt, LIMITS.txRetryBackoffMsMin, LIMITS.watchRetryBackoffMsMax));
      }
    }
  }
}

function eventOf(change: ChangeEntry): WatchPut | WatchDelete {
  const { key, commitTs } = change;
  return change.deleted
    ? { kind: 'delete', key, deleted: true, commitTs }
    : { kind: 'put', key, value: change.value, commitTs };
}
