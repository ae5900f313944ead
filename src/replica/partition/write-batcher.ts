/**
 * Data writes of many txs on one partition primary, batched (replica setting `batchWrites`): the writes proposed
 * within one turn of the event loop go into one UpdateBatch command, one Raft entry, instead of one entry each. The
 * first write of a turn arms a 0 ms timer on the injected timers; when it fires, the pending writes are cut, in
 * submission order, into commands: a lone write is a plain Update or UpdateAll exactly as without batching, a run of
 * two or more an UpdateBatch.
 *
 * A command closes before an item that would break UpdateBatch's rules (commands.ts): a different lease token, a tx
 * that already has an item in it (its second write goes into a later command, so its order is its proposal order),
 * a key some item already writes (the items share one effective timestamp), more than updateBatchItemsMax items, or
 * more than updateAllWritesMax writes in all.
 *
 * Rule 4: each item's sequence number is drawn when its command is built (`build`, called with the command's one
 * proposal timestamp, in item order and command order), so sequence numbers rise in log order. Rules 1 and 19: the
 * primacy check a write passed before it was submitted is made again for its token when the turn ends, right before
 * its command takes its timestamp; a write that no longer acts is refused PRIMARY_MISS and proposed in no command.
 *
 * One proposal per command: each item's submitter gets its own item's apply result, as if it had proposed alone, or
 * the proposal's failure (refused, abandoned, or held when its entry left the local log: then the command's one
 * in-flight timestamp stays held under the items' common token, proposals.ts). `onProposed` runs for an item once
 * its command was handed to Raft (a later proposal lands later in the log), never earlier.
 */
import { assert } from '../../core/assert.js';
import type { BasaltError } from '../../core/errors.js';
import type { TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import type { TimerHandle, Timers } from '../../env/timers.js';
import type { ApplyResult, DataResult } from './apply-result.js';
import type { DataItem, DataProposal, PartitionCommand } from './commands.js';
import { dataCommand } from './commands.js';
import { type LeaseToken, sameToken } from './lease.js';
import type { TakenProposal } from './proposals.js';

/** What a write needs besides its sequence number, timestamp and proposal id. */
export type BatchedWrite = DataProposal;

export interface WriteBatcherOptions {
  readonly timers: Timers;
  /** Proposes one command (PartitionReplica.propose: hands it to Raft before it returns). */
  readonly propose: (build: (proposal: TakenProposal) => PartitionCommand) => Promise<ApplyResult>;
  /** The next sequence number under `token` (drawn in log order). */
  readonly nextSeq: (token: LeaseToken) => number;
  /** Rules 1, 19 when the turn ends: the error refusing a write under `token`, or undefined while it may propose. */
  readonly refusal: (token: LeaseToken) => BasaltError | undefined;
  /** Told of every command proposed with its item count. */
  readonly onCommand?: (items: number) => void;
  readonly itemsMax?: number;
  readonly writesMax?: number;
  /**
   * The timer's delay: 0 (default) closes the batch at the end of the turn. The simulator, where two deliveries never
   * share a turn of virtual time, gathers a few ms (as it rests partitions sooner than production).
   */
  readonly gatherMs?: number;
}

interface Pending {
  readonly write: BatchedWrite;
  readonly resolve: (result: ApplyResult) => void;
  readonly reject: (error: unknown) => void;
  readonly onProposed: (() => void) | undefined;
}

export class WriteBatcher {
  private pending: Pending[] = [];
  private timer: TimerHandle | undefined;
  private readonly itemsMax: number;
  private readonly writesMax: number;

  constructor(private readonly options: WriteBatcherOptions) {
    this.itemsMax = options.itemsMax ?? LIMITS.updateBatchItemsMax;
    this.writesMax = options.writesMax ?? LIMITS.updateAllWritesMax;
    assert(this.itemsMax >= 2 && this.itemsMax <= LIMITS.updateBatchItemsMax, 'a batch holds 2..updateBatchItemsMax');
  }

  /** Writes waiting for the end of the turn. */
  get pendingCount(): number {
    return this.pending.length;
  }

  /** Resolves with the write's own apply result (rule 4); rejects as its command's proposal failed. */
  submit(write: BatchedWrite, onProposed?: () => void): Promise<ApplyResult> {
    assert(write.writes.length > 0, 'a data write writes something');
    return new Promise((resolve, reject) => {
      this.pending.push({ write, resolve, reject, onProposed });
      this.timer ??= this.options.timers.setTimer(() => this.flush(), this.options.gatherMs ?? 0);
    });
  }

  /** Proposes every pending write now, in submission order (the timer's work). */
  flush(): void {
    if (this.timer !== undefined) this.options.timers.clearTimer(this.timer);
    this.timer = undefined;
    const pending = this.pending;
    this.pending = [];
    const acting: Pending[] = [];
    for (const p of pending) {
      const refusal = this.options.refusal(p.write.token);
      if (refusal === undefined) acting.push(p);
      else p.reject(refusal);
    }
    for (const group of this.cut(acting)) this.proposeGroup(group);
  }

  /** Consecutive runs of writes that one command may hold (see the module header). */
  private cut(pending: readonly Pending[]): Pending[][] {
    const groups: Pending[][] = [];
    let group: Pending[] = [];
    let txIds = new Set<TxId>();
    let keys = new Set<string>();
    for (const p of pending) {
      const { write } = p;
      const first = group[0];
      const fits =
        first === undefined ||
        (group.length < this.itemsMax &&
          sameToken(first.write.token, write.token) &&
          !txIds.has(write.txId) &&
          keys.size + write.writes.length <= this.writesMax &&
          write.writes.every((w) => !keys.has(w.key)));
      if (!fits) {
        groups.push(group);
        group = [];
        txIds = new Set();
        keys = new Set();
      }
      group.push(p);
      txIds.add(write.txId);
      for (const w of write.writes) keys.add(w.key);
    }
    if (group.length > 0) groups.push(group);
    return groups;
  }

  private proposeGroup(group: readonly Pending[]): void {
    const proposed = this.options.propose((proposal) => {
      const base = { ts: proposal.ts, proposalId: proposal.id };
      const items = group.map(
        ({ write: w }): DataItem => ({
          token: w.token,
          seq: this.options.nextSeq(w.token),
          txId: w.txId,
          coordinatorId: w.coordinatorId,
          commitPartitionId: w.commitPartitionId,
          full: w.full,
          writes: w.writes,
        }),
      );
      const [only] = items;
      return items.length === 1 && only !== undefined
        ? dataCommand(base, only)
        : { ...base, kind: 'UpdateBatch', items };
    });
    this.options.onCommand?.(group.length);
    for (const p of group) p.onProposed?.();
    proposed.then(
      (result) => {
        group.forEach((p, i) => {
          p.resolve(itemResult(result, i, group.length));
        });
      },
      (error: unknown) => {
        for (const p of group) p.reject(error);
      },
    );
  }
}

/** Item `i`'s own result out of its command's (a lone write's command is its own). */
function itemResult(result: ApplyResult, i: number, items: number): ApplyResult {
  if (items === 1) return result;
  assert(result.kind === 'UPDATED_BATCH', `an UpdateBatch answered ${result.kind}`);
  const item: DataResult | undefined = result.items[i];
  assert(item !== undefined && result.items.length === items, 'an UpdateBatch answers for each of its items');
  return item;
}
