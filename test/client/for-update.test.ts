/**
 * Locking reads (`{ forUpdate: true }`) through the public client on simulated clusters (fixed seeds; a failure names
 * its seed). A read-modify-write whose read takes the row's X lock makes a conflicting older tx wait for it instead of
 * the younger one dying at its S→X upgrade under wait-die; misuse (an RO tx, an unknown option) is refused.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Client, ReadOptions } from '../../src/index.js';
import { rejectsWith, type TestCluster, withSimCluster } from './support.js';

const T = 'accounts';
const KEY = 'counter';
/** Virtual time the younger tx lets pass after its read, so that the older one's read reaches the primary first. */
const SETTLE_MS = 50;

interface RaceOutcome {
  readonly attempts: { old: number; young: number };
  /** What the older tx's (last) read returned. */
  readonly oldRead: number;
  readonly final: number;
}

/**
 * Two read-modify-write increments of KEY on one node: the older tx begins first, then the younger one reads KEY;
 * the older reads it next (and must wait for it when the younger holds X); after SETTLE_MS the younger writes and
 * commits, then the older writes and commits. Each runs in `client.transaction` (retried when retryable).
 */
async function race(cluster: TestCluster, client: Client, read: ReadOptions | undefined): Promise<RaceOutcome> {
  await client.put(T, KEY, 0);
  const attempts = { old: 0, young: 0 };
  let oldRead = -1;
  const oldBegun = deferred();
  const youngRead = deferred();
  const retry = { retries: 20, backoffMsMin: 5, backoffMsMax: 50 };
  const older = client.transaction(async (tx) => {
    attempts.old++;
    oldBegun.resolve();
    await youngRead.promise;
    oldRead = (await tx.get(T, KEY, read)) as number;
    await tx.put(T, KEY, oldRead + 1);
  }, retry);
  await oldBegun.promise;
  const younger = client.transaction(async (tx) => {
    attempts.young++;
    const [n] = (await tx.getAll(T, [KEY], read)) as [number];
    youngRead.resolve();
    await cluster.runFor(SETTLE_MS);
    await tx.put(T, KEY, n + 1);
  }, retry);
  await Promise.all([older, younger]);
  return { attempts, oldRead, final: (await client.get(T, KEY)) as number };
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve = (): void => {};
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

describe('locking reads: forUpdate (simulated)', () => {
  it('two read-modify-writes of one key reading forUpdate serialize: the older waits, neither dies', () =>
    withSimCluster('for-update-race', { partitions: 2 }, async (cluster, client) => {
      const outcome = await race(cluster, client, { forUpdate: true });
      assert.deepEqual(outcome.attempts, { old: 1, young: 1 }, 'both committed at their first attempt');
      assert.equal(outcome.oldRead, 1, 'the older read after the younger committed (it waited on the X lock)');
      assert.equal(outcome.final, 2, 'no lost update');
    }));

  it('the same schedule with plain reads makes the younger die at its S→X upgrade and retry', () =>
    withSimCluster('for-update-race', { partitions: 2 }, async (cluster, client) => {
      const outcome = await race(cluster, client, undefined);
      assert.equal(outcome.attempts.old, 1, 'the older never dies under wait-die');
      assert.ok(outcome.attempts.young >= 2, `the younger retried (attempts ${outcome.attempts.young})`);
      assert.equal(outcome.oldRead, 0, 'the older read before either wrote');
      assert.equal(outcome.final, 2, 'no lost update');
    }));

  it('forUpdate in a read-only tx is refused with TX_READ_ONLY; forUpdate: false is an ordinary read', () =>
    withSimCluster('for-update-ro', { partitions: 2 }, async (_cluster, client) => {
      await client.put(T, 'a', 7);
      const tx = await client.begin({ readOnly: true });
      await rejectsWith(tx.get(T, 'a', { forUpdate: true }), 'TX_READ_ONLY');
      await rejectsWith(tx.getAll(T, ['a'], { forUpdate: true }), 'TX_READ_ONLY');
      assert.equal(await tx.get(T, 'a', { forUpdate: false }), 7);
      await tx.commit();
    }));

  it('unknown or mistyped read options are refused with INVALID_ARGUMENT, on RW and RO transactions', () =>
    withSimCluster('for-update-bad', { partitions: 2 }, async (_cluster, client) => {
      const bad = [{ forupdate: true }, { forUpdate: 'yes' }, null, 'forUpdate'] as unknown as ReadOptions[];
      for (const readOnly of [false, true]) {
        const tx = await client.begin({ readOnly });
        for (const options of bad) {
          await rejectsWith(tx.get(T, 'a', options), 'INVALID_ARGUMENT');
          await rejectsWith(tx.getAll(T, ['a'], options), 'INVALID_ARGUMENT');
        }
        // Refused before anything was sent: the tx goes on.
        assert.equal(await tx.get(T, 'a'), undefined);
        await tx.commit();
      }
    }));
});
