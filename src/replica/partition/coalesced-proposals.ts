/**
 * Proposals of one command kind on one partition, coalesced: at most one such command is in flight; the items
 * submitted while it is replicated wait, and when it settles they go into the next command together (at most
 * `batchMax` of them, and no two with the same `distinct` key; the others wait for the one after). Under load the
 * partition then spends one Raft entry on many txs' cleanup bookkeeping instead of one each, and with nothing in flight
 * an item is proposed at once, so a lone one waits for nothing (unless the coalescer gathers: see `gather`).
 *
 * Each `submit` settles exactly once, as the command holding its item settled: resolved once that command applied here,
 * rejected with its proposal's failure. Items with equal `key`s are one item whose submitters share that outcome.
 * Invariant: every queued item is in `byKey` under its key, and a queued item always has a drain running or about to
 * start (`draining`), so none waits for a later submit.
 */
import { assert } from '../../core/assert.js';
import type { TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import { sleep, type Timers } from '../../env/timers.js';
import type { PartitionReplica } from './partition-replica.js';

export interface CoalescerOptions<I> {
  /** Items one command holds at most (the command kind's own bound). */
  readonly batchMax: number;
  /** Items with equal keys are the same item. */
  readonly key: (item: I) => string;
  /** One command holds no two items with the same distinct key (a tx switched twice, say). */
  readonly distinct: (item: I) => string;
  /**
   * Proposes one command holding `items`, handing it to Raft before its first await; resolves once it applied here,
   * rejects as the proposal failed.
   */
  readonly propose: (items: readonly I[]) => Promise<void>;
  /**
   * For bookkeeping nobody waits on: a command is proposed only `delayMs` after the first item reached an idle
   * coalescer, so that the items of that window share it. Absent: with nothing in flight an item is proposed at once.
   */
  readonly gather?: { readonly timers: Timers; readonly delayMs: number };
}

interface Waiter {
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
  /** Told once the command holding the item was proposed (its place in the log is then before any later proposal). */
  readonly onProposed: (() => void) | undefined;
}

interface Queued<I> {
  readonly item: I;
  readonly key: string;
  readonly waiters: Waiter[];
}

export class ProposalCoalescer<I> {
  private queue: Queued<I>[] = [];
  private readonly byKey = new Map<string, Queued<I>>();
  private draining = false;

  constructor(private readonly options: CoalescerOptions<I>) {
    assert(options.batchMax > 0, 'a command holds at least one item');
  }

  /** Items waiting for a command (not the ones in flight). */
  get queuedCount(): number {
    return this.queue.length;
  }

  /**
   * `onProposed` runs once the command holding the item has been handed to Raft (before it applies): a proposal made
   * after that lands later in the partition's log.
   */
  submit(item: I, onProposed?: () => void): Promise<void> {
    return new Promise((resolve, reject) => {
      const key = this.options.key(item);
      const queued = this.byKey.get(key);
      if (queued !== undefined) queued.waiters.push({ resolve, reject, onProposed });
      else {
        const entry: Queued<I> = { item, key, waiters: [{ resolve, reject, onProposed }] };
        this.queue.push(entry);
        this.byKey.set(key, entry);
      }
      if (!this.draining) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.draining = true;
    const gather = this.options.gather;
    if (gather !== undefined) await sleep(gather.timers, gather.delayMs);
    while (this.queue.length > 0) {
      const batch = this.take();
      let failure: { readonly error: unknown } | undefined;
      try {
        // `propose` hands the command to Raft before its first await (PartitionReplica.propose is synchronous up to
        // the Raft queue), so the command is in place once it returned its promise.
        const proposed = this.options.propose(batch.map((q) => q.item));
        for (const q of batch) for (const w of q.waiters) w.onProposed?.();
        await proposed;
      } catch (error) {
        failure = { error };
      }
      for (const q of batch) {
        for (const w of q.waiters) {
          if (failure === undefined) w.resolve();
          else w.reject(failure.error);
        }
      }
    }
    this.draining = false;
  }

  /** The oldest queued items with distinct `distinct` keys, at most batchMax; the others stay queued in order. */
  private take(): Queued<I>[] {
    const batch: Queued<I>[] = [];
    const rest: Queued<I>[] = [];
    const seen = new Set<string>();
    for (const q of this.queue) {
      const distinct = this.options.distinct(q.item);
      if (batch.length < this.options.batchMax && !seen.has(distinct)) {
        batch.push(q);
        seen.add(distinct);
        this.byKey.delete(q.key);
      } else rest.push(q);
    }
    this.queue = rest;
    assert(batch.length > 0, 'a drain takes at least the oldest queued item');
    assert(this.byKey.size === rest.length, 'every queued item is indexed by its key');
    return batch;
  }
}

/** One coalescer per owner object (a hosted partition), created on first use. */
export function coalescerOf<O extends object, I>(
  registry: WeakMap<O, ProposalCoalescer<I>>,
  owner: O,
  create: (owner: O) => ProposalCoalescer<I>,
): ProposalCoalescer<I> {
  let coalescer = registry.get(owner);
  if (coalescer === undefined) {
    coalescer = create(owner);
    registry.set(owner, coalescer);
  }
  return coalescer;
}

const cleanupMarks = new WeakMap<PartitionReplica, ProposalCoalescer<TxId>>();

/**
 * Commit partition: proposes TxCleanupCompleted for `txId`, together with the other txs whose cleanup completed
 * within cleanupCompletedGatherMs or while the previous such command was replicated (at most txStateVacuumBatchMax
 * per command); resolves once the command holding it applied here. Nobody waits on it: the mark only lets vacuum
 * remove the record and ends the rescan's interest in it, so a short delay costs nothing and saves Raft entries.
 */
export function proposeCleanupCompleted(p: PartitionReplica, txId: TxId): Promise<void> {
  const coalescer = coalescerOf(cleanupMarks, p, () => {
    return new ProposalCoalescer<TxId>({
      batchMax: LIMITS.txStateVacuumBatchMax,
      gather: { timers: p.timers, delayMs: LIMITS.cleanupCompletedGatherMs },
      key: (tx) => tx,
      distinct: (tx) => tx,
      propose: async (txIds) => {
        await p.propose((proposal) => ({
          kind: 'TxCleanupCompleted',
          ts: proposal.ts,
          proposalId: proposal.id,
          txIds,
        }));
      },
    });
  });
  return coalescer.submit(txId);
}
