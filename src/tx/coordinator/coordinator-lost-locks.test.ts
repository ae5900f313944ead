/**
 * The read-write flavour of the coordinator state request (ignite3-protocol.md §8): a PENDING tx whose intent was met
 * without its lock is aborted by its coordinator, which answers ABORTED and rolls it back at once; the tx's later
 * operations and commit fail TX_ABORTED (retryable). A finishing commit is waited for; a final outcome is
 * answered as is; a plain (read-only) request still answers PENDING without aborting anything.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isBasaltError } from '../../core/errors.js';
import type { HybridTimestamp, NodeId, PartitionId, TxId } from '../../core/ids.js';
import { HybridClock } from '../../hlc/hybrid-clock.js';
import { SimClock } from '../../sim/clock.js';
import { Scheduler } from '../../sim/scheduler.js';
import { coordinatorOver, FakeCluster, settleWithin, TABLE } from '../../testing/coordinator-fakes.js';
import type { TxResponse } from '../core/messages.js';
import { makeTxId } from '../core/tx-id.js';
import { TxStateMap } from '../core/tx-state-map.js';

function setup() {
  const scheduler = new Scheduler({ seed: 'coordinator-lost-locks' });
  const physical = new SimClock(scheduler);
  const cluster = new FakeCluster({ physical: new SimClock(scheduler), timers: scheduler.timers('c'), partitions: 4 });
  const clock = new HybridClock(physical);
  const txStates = new TxStateMap({ clock: physical });
  const coordinator = coordinatorOver(cluster, { clock, timers: scheduler.timers('coordinator'), txStates });
  const run = <T>(p: Promise<T>): Promise<T> => settleWithin(scheduler, p);
  return { scheduler, cluster, clock, txStates, coordinator, run };
}

function rwRequest(txId: TxId, readTs: HybridTimestamp) {
  const partitionId = 't1p0' as PartitionId;
  return { kind: 'TxStateCoordinatorRequest', txId, readTs, readWrite: { partitionId } } as const;
}

async function codeOf(p: Promise<unknown>): Promise<{ code: string; retryable: boolean } | undefined> {
  try {
    await p;
    return undefined;
  } catch (error) {
    assert.ok(isBasaltError(error), String(error));
    return { code: error.code, retryable: error.retryable };
  }
}

describe('coordinator: read-write state requests (lost locks)', () => {
  it('a PENDING tx is aborted: ABORTED answer, rolled back at once, later ops and commit fail TX_ABORTED', async () => {
    const { coordinator, cluster, run, clock, txStates, scheduler } = setup();
    const tx = coordinator.begin();
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1));
    const plain = await run(
      coordinator.handleTxStateCoordinatorRequest({
        kind: 'TxStateCoordinatorRequest',
        txId: tx.id,
        readTs: tx.beginTs,
      }),
    );
    assert.deepEqual(plain.answer, { state: 'PENDING' }, 'a read-only request aborts nothing');
    assert.equal(txStates.get(tx.id)?.state, 'PENDING');

    const answer = await run(coordinator.handleTxStateCoordinatorRequest(rwRequest(tx.id, clock.now())));
    assert.deepEqual(answer.answer, { state: 'ABORTED' });
    // The coordinator rolls the tx back by itself: the commit partition stores the abort without any user call.
    await scheduler.run({ until: () => txStates.get(tx.id)?.state === 'ABORTED', forMs: 10_000 });
    assert.equal(cluster.outcomes.get(tx.id)?.state, 'ABORTED', 'the commit partition stored the abort');
    assert.deepEqual(await codeOf(coordinator.put(tx, TABLE, cluster.keyIn(1), 2)), {
      code: 'TX_ABORTED',
      retryable: true,
    });
    assert.deepEqual(await codeOf(run(coordinator.commit(tx))), { code: 'TX_ABORTED', retryable: true });
    await run(coordinator.rollback(tx));
    const again = await run(coordinator.handleTxStateCoordinatorRequest(rwRequest(tx.id, clock.now())));
    assert.deepEqual(again.answer, { state: 'ABORTED' });
  });

  it('a commit in flight (FINISHING with commitTs) is waited for and answered COMMITTED, whatever readTs', async () => {
    const { coordinator, cluster, run, scheduler, txStates } = setup();
    const tx = coordinator.begin();
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1));
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    cluster.script('TxFinishRequest', async (to, body): Promise<TxResponse> => {
      await gate;
      return cluster.handle(to, body);
    });
    const commit = coordinator.commit(tx);
    await scheduler.run({ until: () => txStates.get(tx.id)?.state === 'FINISHING', forMs: 1_000 });
    const commitTs = txStates.get(tx.id)!.commitTimestamp!;
    let answered: TxResponse | undefined;
    const waiting = coordinator.handleTxStateCoordinatorRequest(rwRequest(tx.id, tx.beginTs)).then((r) => {
      answered = r;
      return r;
    });
    await scheduler.run({ forMs: 100 });
    assert.equal(answered, undefined, 'it waits for the outcome even though commitTs > readTs');
    release();
    assert.deepEqual((await run(waiting)).answer, { state: 'COMMITTED', commitTs });
    await run(commit);
  });

  it('a tx this coordinator does not own answers null and is left alone (the sender goes to the commit partition)', async () => {
    const { coordinator, run, clock, txStates } = setup();
    const foreign = makeTxId({ beginTimestamp: clock.now(), nodeId: 'n9-id' as NodeId, counter: 1 });
    txStates.update(foreign, { state: 'PENDING', reason: 'update-applied', coordinatorId: 'n9-id' as NodeId });
    const answer = await run(coordinator.handleTxStateCoordinatorRequest(rwRequest(foreign, clock.now())));
    assert.equal(answer.answer, null);
    assert.equal(txStates.get(foreign)?.state, 'PENDING');
  });
});

describe('coordinator: a commit racing a lost-lock abort', () => {
  /**
   * The commit waits for a pipelined write's confirmation when a read-write state request arrives from a partition
   * whose primary changed: the abort decision (FINISHING without commitTs) is installed while the commit is under
   * way. Nothing else carries it to the commit partition here (no recovery, no other coordinator), so the commit
   * itself must honour it: roll back at once, report TX_ABORTED (retryable) and end final. Before, the commit lost
   * its compare-and-set to the installed abort, waited for a final state nobody brought, and reported
   * TX_OUTCOME_UNKNOWN after finishAttemptsMax finish timeouts with the entry left FINISHING.
   */
  it('the commit sees the installed abort after its confirmations and rolls back at once (TX_ABORTED)', async () => {
    const { coordinator, cluster, run, scheduler, clock, txStates } = setup();
    cluster.script('ReadWriteRequest', (to, body) => {
      const answer = cluster.handle(to, body);
      if (answer.kind !== 'ReadWriteResponse' || body.kind !== 'ReadWriteRequest') return answer;
      const { writeTs: _applied, ...proposed } = answer;
      return body.operation.op === 'put' ? { ...proposed, pipelined: true } : answer;
    });
    let confirm!: () => void;
    const confirmed = new Promise<void>((resolve) => {
      confirm = resolve;
    });
    cluster.script('WriteConfirmRequest', async () => {
      await confirmed;
      return { kind: 'WriteConfirmResponse', writeTs: clock.now() };
    });
    const tx = coordinator.begin();
    await run(coordinator.put(tx, TABLE, cluster.keyIn(0), 1));
    await run(coordinator.put(tx, TABLE, cluster.keyIn(1), 2));
    let result: { code: string; retryable: boolean } | undefined | 'pending' = 'pending';
    const commit = codeOf(coordinator.commit(tx)).then((r) => {
      result = r;
    });
    await scheduler.run({ until: () => cluster.sentOf('WriteConfirmRequest').length === 2, forMs: 1_000 });
    assert.equal(cluster.sentOf('WriteConfirmRequest').length, 2, 'the commit waits for both confirmations');

    const answer = await run(coordinator.handleTxStateCoordinatorRequest(rwRequest(tx.id, clock.now())));
    assert.deepEqual(answer.answer, { state: 'ABORTED' });
    assert.equal(txStates.get(tx.id)?.state, 'FINISHING', 'the abort decision is installed');
    assert.equal(txStates.get(tx.id)?.commitTimestamp, undefined);

    confirm();
    await scheduler.run({ until: () => result !== 'pending', forMs: 5_000 });
    assert.deepEqual(result, { code: 'TX_ABORTED', retryable: true }, 'the commit reports the abort within 5 s');
    await run(commit);
    assert.equal(txStates.get(tx.id)?.state, 'ABORTED', 'the entry ends final');
    assert.equal(cluster.outcomes.get(tx.id)?.state, 'ABORTED', 'the commit partition stored the abort');
    const finishes = cluster.sentOf('TxFinishRequest');
    assert.ok(finishes.length > 0 && finishes.every((f) => !f.commit), 'no commit was ever sent');
    assert.equal(coordinator.liveCount, 0, 'the coordinator forgot the tx');
  });
});
