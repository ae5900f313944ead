import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isBasaltError } from '../../core/errors.js';
import type { HybridTimestamp, NodeId } from '../../core/ids.js';
import { hybridTimestamp } from '../../hlc/timestamp.js';
import { makeTxId } from '../../tx/core/tx-id.js';
import { TxOperations } from './tx-operations.js';

const at = (ms: number): HybridTimestamp => hybridTimestamp(ms);
const tx = (n: number) => makeTxId({ beginTimestamp: at(1_000 + n), nodeId: 'c' as NodeId, counter: n });
const DEADLINE = at(31_000);

function deferred<T>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

describe('TxOperations (per-tx operation records of a primary)', () => {
  it('runs the operations of one tx one at a time, in arrival order', async () => {
    const ops = new TxOperations<string>();
    const order: string[] = [];
    const gate = deferred<void>();
    const first = ops.execute(tx(1), 1, DEADLINE, async () => {
      order.push('1 start');
      await gate.promise;
      order.push('1 end');
      return 'one';
    });
    const second = ops.execute(tx(1), 2, DEADLINE, async () => {
      order.push('2');
      return 'two';
    });
    assert.equal(ops.inFlight(tx(1)), 2);
    await Promise.resolve();
    gate.resolve();
    assert.deepEqual(await Promise.all([first, second]), ['one', 'two']);
    assert.deepEqual(order, ['1 start', '1 end', '2']);
    await ops.whenIdle(tx(1));
    assert.equal(ops.inFlight(tx(1)), 0);
  });

  it('a duplicate shares the first execution; an older opSeq whose response was dropped is stale', async () => {
    const ops = new TxOperations<number>({ resultsPerTxMax: 2 });
    let runs = 0;
    const op = (v: number) => async () => {
      runs++;
      return v;
    };
    assert.equal(await ops.execute(tx(1), 1, DEADLINE, op(1)), 1);
    assert.equal(await ops.execute(tx(1), 1, DEADLINE, op(99)), 1);
    assert.equal(runs, 1);
    await ops.execute(tx(1), 2, DEADLINE, op(2));
    await ops.execute(tx(1), 3, DEADLINE, op(3));
    assert.equal(await ops.execute(tx(1), 2, DEADLINE, op(99)), 2, 'still kept');
    await assert.rejects(ops.execute(tx(1), 1, DEADLINE, op(99)), (e: unknown) => isBasaltError(e, 'TX_OP_STALE'));
    assert.equal(runs, 3);
  });

  it('close: operations not started yet fail TX_ALREADY_FINISHED, new ones too; whenIdle waits for the running one', async () => {
    const ops = new TxOperations<string>();
    const gate = deferred<void>();
    const running = ops.execute(tx(1), 1, DEADLINE, async () => {
      await gate.promise;
      return 'done';
    });
    const queued = ops.execute(tx(1), 2, DEADLINE, async () => 'never');
    await new Promise((r) => setImmediate(r));
    ops.close(tx(1), DEADLINE, at(2_000));
    let idle = false;
    const whenIdle = ops.whenIdle(tx(1)).then(() => {
      idle = true;
    });
    await Promise.resolve();
    assert.equal(idle, false);
    gate.resolve();
    assert.equal(await running, 'done');
    await assert.rejects(queued, (e: unknown) => isBasaltError(e, 'TX_ALREADY_FINISHED'));
    await whenIdle;
    await assert.rejects(
      ops.execute(tx(1), 3, DEADLINE, async () => 'late'),
      (e: unknown) => isBasaltError(e, 'TX_ALREADY_FINISHED'),
    );
    assert.equal(await ops.execute(tx(1), 1, DEADLINE, async () => 'again'), 'done', 'a kept response still answers');
  });

  it('closed records stay until their deadline, then go; a full table evicts the oldest closed record first', async () => {
    const ops = new TxOperations<string>({ recordsMax: 2 });
    ops.close(tx(1), at(5_000), at(2_000));
    ops.close(tx(2), at(6_000), at(2_000));
    assert.equal(ops.size, 2);
    assert.equal(ops.purge(at(4_000)), 0);
    assert.equal(await ops.execute(tx(3), 1, DEADLINE, async () => 'ok'), 'ok', 'tx(1) was evicted for it');
    assert.equal(ops.isClosed(tx(1)), false);
    assert.equal(ops.isClosed(tx(2)), true);
    assert.equal(ops.purge(at(6_000)), 1);
    assert.equal(ops.size, 1);
    assert.equal(await ops.execute(tx(4), 1, DEADLINE, async () => 'ok'), 'ok');
    await assert.rejects(
      ops.execute(tx(5), 1, DEADLINE, async () => 'ok'),
      (e: unknown) => isBasaltError(e, 'OVERLOADED'),
    );
  });
});
