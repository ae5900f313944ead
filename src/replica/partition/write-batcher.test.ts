/**
 * Batched data writes on a partition primary (replica setting `batchWrites`, write-batcher.ts): the writes proposed
 * within one turn become one UpdateBatch entry, a lone write a plain Update or UpdateAll, a long turn or a tx's second
 * write further entries; sequence numbers rise in log order; each writer gets its own item's result, or its entry's
 * proposal failure; a writer hears "proposed" only once its entry was handed to Raft.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isBasaltError } from '../../core/errors.js';
import type { LogIndex, NodeId, Term, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import type { TimerHandle, Timers } from '../../env/timers.js';
import { HybridClock } from '../../hlc/hybrid-clock.js';
import { EntryLeftLogError } from '../../raft/driver.js';
import { COORDINATOR, ManualClock, PARTITION, put, soloReplica, txIdAt } from '../../testing/replica-support.js';
import type { ApplyResult } from './apply-result.js';
import { decodeCommand, type PartitionCommand, type RowWrite } from './commands.js';
import { tokenOf } from './lease.js';
import { type DataProposal, type PartitionReplica, WRITE_BATCH_COUNTERS } from './partition-replica.js';
import { leaseTiming } from './primary.js';
import type { TakenProposal } from './proposals.js';
import { WriteBatcher } from './write-batcher.js';

/** Timers fired by hand: `fire` runs what is due, as the end of the turn would. */
class HandTimers implements Timers {
  private next = 0;
  private readonly due = new Map<number, () => void>();
  setTimer(fn: () => void, _delayMs: number): TimerHandle {
    this.next++;
    this.due.set(this.next, fn);
    return { timerId: this.next };
  }
  clearTimer(handle: TimerHandle): void {
    this.due.delete(handle.timerId);
  }
  get armed(): number {
    return this.due.size;
  }
  fire(): void {
    const fns = [...this.due.values()];
    this.due.clear();
    for (const fn of fns) fn();
  }
}

type SubmitMode = 'apply' | 'fail' | 'left-log';

function batchingReplica() {
  const physical = new ManualClock(1_000);
  const clock = new HybridClock(physical, { maxClockSkewMs: 20 });
  const timers = new HandTimers();
  const submitted: PartitionCommand[] = [];
  const counts = new Map<string, number>();
  let mode: SubmitMode = 'apply';
  let replica: PartitionReplica | undefined;
  const submit = async (bytes: Uint8Array): Promise<void> => {
    submitted.push(decodeCommand(bytes));
    await Promise.resolve();
    // Entries submitted together apply in submission order, each at the next index.
    const index = (replica!.stateMachine.appliedIndex() + 1) as LogIndex;
    if (mode === 'fail') throw new Error('raft refused');
    if (mode === 'left-log') throw new EntryLeftLogError(index, 1 as Term, {});
    replica!.stateMachine.apply([{ term: 1 as Term, index, kind: 'data', data: bytes }]);
  };
  replica = soloReplica(physical, clock, submit, {
    timing: leaseTiming(20, 600, 150),
    timers,
    batchWrites: true,
    counters: { add: (name, n = 1) => counts.set(name, (counts.get(name) ?? 0) + n) },
  });
  const setMode = (m: SubmitMode) => {
    mode = m;
  };
  return { replica, physical, clock, timers, submitted, counts, setMode };
}

/** A replica holding its first lease, and a writer of one tx's writes under it. */
async function primary() {
  const r = batchingReplica();
  r.replica.stateMachine.apply([{ term: 1 as Term, index: 1 as LogIndex, kind: 'noop', data: new Uint8Array() }]);
  r.replica.maintain({ isLeader: true, term: 1 as Term });
  await new Promise((resolve) => setImmediate(resolve));
  const check = r.replica.checkPrimary(r.clock.now());
  assert.ok(check.kind === 'ok', 'the replica holds its lease');
  r.submitted.length = 0;
  const data = (n: number, writes: readonly RowWrite[] = [put(`k${n}`, n)], txId?: TxId): DataProposal => ({
    token: check.token,
    txId: txId ?? txIdAt(1_000, n),
    coordinatorId: COORDINATOR,
    commitPartitionId: PARTITION,
    full: false,
    writes,
  });
  return { ...r, data };
}

/** Each submitted command as `kind#seq,seq…`. */
function shapes(commands: readonly PartitionCommand[]): string[] {
  return commands.map((c) => {
    if (c.kind === 'UpdateBatch') return `UpdateBatch#${c.items.map((i) => i.seq).join(',')}`;
    return c.kind === 'Update' || c.kind === 'UpdateAll' ? `${c.kind}#${c.seq}` : c.kind;
  });
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

describe('batched data writes on a partition primary', () => {
  it('writes proposed in one turn become one UpdateBatch entry, and each writer gets its own item result', async () => {
    const r = await primary();
    const writes = [1, 2, 3].map((n) => r.replica.proposeData(r.data(n)));
    assert.equal(r.submitted.length, 0, 'nothing is proposed before the turn ends');
    assert.equal(r.timers.armed, 1, 'the first write armed one timer');
    r.timers.fire();
    const results = await Promise.all(writes);
    assert.deepEqual(shapes(r.submitted), ['UpdateBatch#1,2,3']);
    assert.deepEqual(
      results.map((x) => x.kind),
      ['UPDATED', 'UPDATED', 'UPDATED'],
    );
    assert.equal(r.counts.get(WRITE_BATCH_COUNTERS.writeBatches), 1);
    assert.equal(r.counts.get(WRITE_BATCH_COUNTERS.batchedWrites), 3);
    assert.equal(r.replica.stateMachine.leaseState().lastSeq, 3);
  });

  it('a lone write is a plain Update or UpdateAll, as without batching', async () => {
    const r = await primary();
    const one = r.replica.proposeData(r.data(1));
    r.timers.fire();
    assert.equal((await one).kind, 'UPDATED');
    const all = r.replica.proposeData(r.data(2, [put('x', 1), put('y', 2)]));
    r.timers.fire();
    assert.equal((await all).kind, 'UPDATED');
    assert.deepEqual(shapes(r.submitted), ['Update#1', 'UpdateAll#2']);
    assert.equal(r.counts.get(WRITE_BATCH_COUNTERS.writeBatches), undefined);
  });

  it('more writes than one batch holds, or a tx written twice, split into entries in order with rising seqs', async () => {
    const r = await primary();
    const max = LIMITS.updateBatchItemsMax;
    const writes = Array.from({ length: max + 1 }, (_, i) => r.replica.proposeData(r.data(i + 1)));
    const same = txIdAt(1_000, 1);
    const again = r.replica.proposeData(r.data(500, [put('again', 1)], same));
    r.timers.fire();
    const results = await Promise.all([...writes, again]);
    assert.ok(results.every((x) => x.kind === 'UPDATED'));
    const all = Array.from({ length: max }, (_, i) => i + 1).join(',');
    assert.deepEqual(shapes(r.submitted), [`UpdateBatch#${all}`, `UpdateBatch#${max + 1},${max + 2}`]);
    const items = r.submitted.flatMap((c) => (c.kind === 'UpdateBatch' ? c.items : []));
    assert.deepEqual(
      items.filter((i) => i.txId === same).map((i) => i.seq),
      [1, max + 2],
      "the tx's second write comes later in the log",
    );
  });

  it('a failed proposal fails every write of its entry; a held one keeps its one timestamp in flight', async () => {
    const r = await primary();
    r.setMode('fail');
    const failing = [1, 2].map((n) => r.replica.proposeData(r.data(n)));
    r.timers.fire();
    for (const w of failing) await assert.rejects(w, /raft refused/);
    r.setMode('left-log');
    const held = [3, 4, 5].map((n) => r.replica.proposeData(r.data(n)));
    r.timers.fire();
    for (const w of held) await assert.rejects(w, (e: unknown) => e instanceof EntryLeftLogError);
    assert.equal(r.replica.proposals.heldInFlightCount, 1, 'one proposal, held until decided');
    assert.equal(r.replica.proposals.inFlightCount, 1);
    assert.deepEqual(shapes(r.submitted), ['UpdateBatch#1,2', 'UpdateBatch#3,4,5']);
  });

  it('a writer hears "proposed" only once its entry was handed to Raft', async () => {
    const r = await primary();
    const heard: number[] = [];
    const writes = [1, 2].map((n) => r.replica.proposeData(r.data(n), () => heard.push(r.submitted.length)));
    await settle();
    assert.deepEqual(heard, [], 'not while the batch gathers');
    r.timers.fire();
    assert.deepEqual(heard, [1, 1]);
    await Promise.all(writes);
  });

  it('a write whose primacy ended before its turn did is refused PRIMARY_MISS and proposed in no entry', async () => {
    const r = await primary();
    const late = r.replica.proposeData(r.data(1));
    r.physical.ms += 10_000;
    r.timers.fire();
    await assert.rejects(late, (e: unknown) => isBasaltError(e, 'PRIMARY_MISS'));
    assert.deepEqual(r.submitted, []);
    assert.equal(r.replica.proposals.inFlightCount, 0);
  });
});

describe('WriteBatcher on its own', () => {
  it('writes under different lease tokens go into different entries', async () => {
    const timers = new HandTimers();
    const built: PartitionCommand[] = [];
    let counter = 0;
    const batcher = new WriteBatcher({
      timers,
      propose: (build: (p: TakenProposal) => PartitionCommand): Promise<ApplyResult> => {
        counter++;
        const ts = (1_000_000n + BigInt(counter)) as never;
        built.push(build({ id: { nodeId: 'n' as NodeId, incarnation: 'i', counter }, ts }));
        return new Promise(() => {});
      },
      nextSeq: () => counter + 1,
      refusal: () => undefined,
    });
    const token = (node: string) => tokenOf({ holder: { nodeId: node as NodeId, incarnation: 'i' } } as never);
    const write = (node: string, n: number) => ({
      token: { ...token(node), start: 5n as never },
      txId: txIdAt(1_000, n),
      coordinatorId: COORDINATOR,
      commitPartitionId: PARTITION,
      full: false,
      writes: [put(`k${n}`, n)],
    });
    for (const [node, n] of [
      ['a', 1],
      ['a', 2],
      ['b', 3],
      ['a', 4],
    ] as const) {
      void batcher.submit(write(node, n));
    }
    timers.fire();
    assert.deepEqual(
      built.map((c) => c.kind),
      ['UpdateBatch', 'Update', 'Update'],
    );
  });
});
