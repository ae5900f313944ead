import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BasaltError } from '../../core/errors.js';
import type { TxId } from '../../core/ids.js';
import { HybridClock } from '../../hlc/hybrid-clock.js';
import { SimClock } from '../../sim/clock.js';
import { Scheduler } from '../../sim/scheduler.js';
import { coordinatorOver, FakeCluster, rejectsWith, settleWithin, TABLE } from '../../testing/coordinator-fakes.js';
import type { TxResponse } from '../core/messages.js';
import { asTxId, beginTimestampOf, isOlder, txDeadline } from '../core/tx-id.js';
import { TxStateMap } from '../core/tx-state-map.js';
import { isRetryable } from './retry.js';
import type { TxCoordinatorOptions } from './settings.js';
import { beginTransaction, runTransaction, Transaction } from './transaction.js';

function setup(options?: TxCoordinatorOptions) {
  const scheduler = new Scheduler({ seed: 'transaction-test' });
  const physical = new SimClock(scheduler);
  const cluster = new FakeCluster({ physical, timers: scheduler.timers('cluster') });
  const txStates = new TxStateMap({ clock: physical });
  const coordinator = coordinatorOver(cluster, {
    clock: new HybridClock(physical),
    timers: scheduler.timers('coordinator'),
    txStates,
    options,
  });
  const run = <T>(p: Promise<T>): Promise<T> => settleWithin(scheduler, p);
  return { cluster, coordinator, txStates, run };
}

describe('Transaction', () => {
  it('delegates to the coordinator: id, readOnly, get/put/getAll/remove/putAll/scan, commit', async () => {
    const { coordinator, cluster, run } = setup();
    const tx = beginTransaction(coordinator);
    assert.equal(tx.readOnly, false);
    assert.equal(coordinator.tx(tx.id)?.id, tx.id);
    await run(tx.put(TABLE, 'alice', { balance: 100 }));
    await run(tx.putAll(TABLE, [{ key: 'bob', value: { balance: 5 } }]));
    assert.deepEqual(await run(tx.get(TABLE, 'alice')), { balance: 100 });
    await run(tx.remove(TABLE, 'bob'));
    assert.deepEqual(await run(tx.getAll(TABLE, ['bob', 'alice'])), [undefined, { balance: 100 }]);
    assert.deepEqual(await run(tx.scan(TABLE, { prefix: 'al' })), [{ key: 'alice', value: { balance: 100 } }]);
    await run(tx.commit());
    await run(tx.rollback()); // a rollback in a `finally` after commit is a no-op
    assert.deepEqual(cluster.committed.get(cluster.partitionOfKey('alice'))?.get('alice'), { balance: 100 });
    assert.equal(cluster.committed.get(cluster.partitionOfKey('bob'))?.has('bob'), false);
  });

  it('misuse is INVALID_ARGUMENT: oversized keys and values, non-JSON values, bad batches', async () => {
    const { coordinator, cluster, run } = setup();
    const tx = beginTransaction(coordinator);
    await rejectsWith(run(tx.get(TABLE, 'é'.repeat(600))), 'INVALID_ARGUMENT');
    await rejectsWith(run(tx.get(TABLE, '\ud800')), 'INVALID_ARGUMENT');
    await rejectsWith(run(tx.put(TABLE, 'k', 'x'.repeat(1024 * 1024 + 1))), 'INVALID_ARGUMENT');
    await rejectsWith(run(tx.put(TABLE, 'k', { f: () => 1 } as never)), 'INVALID_ARGUMENT');
    await rejectsWith(run(tx.put(TABLE, 'k', Infinity)), 'INVALID_ARGUMENT');
    await rejectsWith(run(tx.getAll(TABLE, 'k' as never)), 'INVALID_ARGUMENT');
    await rejectsWith(run(tx.putAll(TABLE, [{ key: 1 } as never])), 'INVALID_ARGUMENT');
    await rejectsWith(run(tx.scan(TABLE, { start: 'b', end: 'a' })), 'INVALID_ARGUMENT');
    await rejectsWith(run(tx.get(42 as never, 'k')), 'INVALID_ARGUMENT');
    assert.equal(cluster.sent.length, 0);
    await run(tx.put(TABLE, 'k', new Uint8Array([1, 2, 3])));
    await run(tx.put(TABLE, 'j', { nested: [1, 'two', null, { ok: true }] }));
    await run(tx.commit());
  });
});

describe('runTransaction', () => {
  it('retries a TX_LOCK_CONFLICT in a new tx after rolling the failed attempt back', async () => {
    const { coordinator, cluster, run } = setup();
    let conflicts = 1;
    cluster.script('ReadWriteRequest', (to, body) => {
      if (conflicts > 0) {
        conflicts -= 1;
        throw new BasaltError('TX_LOCK_CONFLICT', 'an older tx holds the lock');
      }
      return cluster.handle(to, body);
    });
    const ids: string[] = [];
    const result = await run(
      runTransaction(coordinator, async (tx) => {
        ids.push(tx.id);
        const balance = ((await tx.get(TABLE, 'acct')) as number | undefined) ?? 0;
        await tx.put(TABLE, 'acct', balance + 1);
        return balance + 1;
      }),
    );
    assert.equal(result, 1);
    assert.equal(ids.length, 2);
    assert.notEqual(ids[0], ids[1]);
    assert.ok(ids[0]! < ids[1]!, 'the retry is a new tx, ordered right after the attempt it retries');
    // It keeps the first attempt's age for wait-die, not its deadline.
    const [first, retry] = ids.map(asTxId) as [TxId, TxId];
    assert.equal(beginTimestampOf(retry), beginTimestampOf(first));
    const fresh = coordinator.begin();
    assert.ok(isOlder(retry, fresh.id), 'older than a tx begun after it');
    assert.ok(txDeadline(retry, 30_000) > txDeadline(first, 30_000), 'a deadline of its own');
    await run(beginTransaction(coordinator).rollback());
    await run(new Transaction(coordinator, fresh).rollback());
    // The failed attempt released what it may hold (an unlock-only cleanup at the primary it tried).
    assert.ok(cluster.sentOf('TxCleanupRequest').some((c) => c.txId === ids[0] && c.unlockOnly));
    assert.equal(cluster.committed.get(cluster.partitionOfKey('acct'))?.get('acct'), 1);
    assert.equal(coordinator.liveCount, 0);
  });

  it('never retries TX_OUTCOME_UNKNOWN (the attempt may have committed)', async () => {
    const { coordinator, cluster, run } = setup({ finishAttemptsMax: 2, finishRequestTimeoutMs: 100 });
    cluster.script('TxFinishRequest', () => new Promise<TxResponse>(() => {}));
    let calls = 0;
    const err = await rejectsWith(
      run(
        runTransaction(coordinator, async (tx) => {
          calls += 1;
          await tx.put(TABLE, 'k', calls);
        }),
      ),
      'TX_OUTCOME_UNKNOWN',
    );
    assert.equal(calls, 1);
    assert.equal(err.retryable, false);
    coordinator.stop();
  });

  it('does not retry a non-retryable failure of the function, and rolls its tx back', async () => {
    const { coordinator, cluster, run, txStates } = setup();
    let calls = 0;
    let id: string | undefined;
    await rejectsWith(
      run(
        runTransaction(coordinator, async (tx) => {
          calls += 1;
          id = tx.id;
          await tx.put(TABLE, 'a', 1);
          throw new BasaltError('INVALID_ARGUMENT', 'the application gave up');
        }),
      ),
      'INVALID_ARGUMENT',
    );
    assert.equal(calls, 1);
    assert.equal(cluster.sentOf('TxFinishRequest')[0]?.commit, false);
    assert.equal(txStates.get(id as never)?.state, 'ABORTED');
  });

  it('gives up after `retries` retries with the last retryable error', async () => {
    const { coordinator, cluster, run } = setup();
    cluster.script('ReadWriteRequest', () => {
      throw new BasaltError('TX_LOCK_CONFLICT', 'always');
    });
    let calls = 0;
    await rejectsWith(
      run(
        runTransaction(
          coordinator,
          async (tx) => {
            calls += 1;
            await tx.get(TABLE, 'k');
          },
          { retries: 3 },
        ),
      ),
      'TX_LOCK_CONFLICT',
    );
    assert.equal(calls, 4);
  });

  it('isRetryable: retryable coded errors only, never an outcome that may have been a commit', () => {
    assert.equal(isRetryable(new BasaltError('TX_LOCK_CONFLICT', 'x')), true);
    assert.equal(isRetryable(new BasaltError('TX_ABORTED', 'x')), true);
    assert.equal(isRetryable(new BasaltError('TX_OUTCOME_UNKNOWN', 'x')), false);
    assert.equal(isRetryable(new BasaltError('TX_MISMATCHING_OUTCOME', 'x')), false);
    assert.equal(isRetryable(new Error('plain')), false);
  });
});
