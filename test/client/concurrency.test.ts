/**
 * Concurrent read-write transactions through the public client on simulated clusters (fixed seeds; a failure names
 * its seed): lost updates are impossible, and wait-die never deadlocks whatever order transactions lock keys in.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SeededRandom } from '../../src/sim/random.js';
import { withSimCluster } from './support.js';

const T = 'accounts';

describe('concurrent RW transactions (simulated)', () => {
  for (const seed of ['counter-1', 'counter-2']) {
    it(`a counter incremented by many concurrent transactions loses no update (seed ${seed})`, () =>
      withSimCluster(seed, { partitions: 4 }, async (cluster) => {
        const clients = cluster.nodes.map((n) => cluster.client(n));
        await clients[0]!.put(T, 'counter', 0);
        const increments = 24;
        const attempts = new Array<number>(increments).fill(0);
        const results = await Promise.allSettled(
          Array.from({ length: increments }, (_, i) =>
            clients[i % clients.length]!.transaction(
              async (tx) => {
                attempts[i]!++;
                const value = (await tx.get(T, 'counter')) as number;
                await tx.put(T, 'counter', value + 1);
              },
              { retries: 100, backoffMsMin: 5, backoffMsMax: 200 },
            ),
          ),
        );
        const failed = results.filter((r) => r.status === 'rejected');
        assert.deepEqual(failed, [], 'every increment commits eventually');
        assert.equal(await clients[1]!.get(T, 'counter'), increments);
        assert.ok(
          attempts.some((a) => a > 1),
          'the increments really conflicted (some were retried)',
        );
      }));
  }

  it('implicit puts on one hot key from every node all succeed: a wait-die death proves nothing ran, so it is retried', () =>
    withSimCluster('implicit-hot-key', { partitions: 2 }, async (cluster) => {
      const clients = cluster.nodes.map((n) => cluster.client(n));
      const deathsOf = (): number =>
        cluster.nodes.reduce((sum, n) => sum + (cluster.node(n).metrics().counters['locks.waitDieDeaths'] ?? 0), 0);
      const deathsBefore = deathsOf();
      // An older transaction holds the key longer than a one-phase write waits for it (1 s), so the puts die.
      const holder = await clients[0]!.begin();
      await holder.put(T, 'hot', -1);
      const puts = 30;
      const results = Promise.allSettled(
        Array.from({ length: puts }, (_, i) => clients[i % clients.length]!.put(T, 'hot', i)),
      );
      await cluster.runFor(1_500);
      await holder.commit();
      assert.deepEqual(
        (await results).filter((r) => r.status === 'rejected'),
        [],
        'every implicit put succeeds',
      );
      assert.ok(
        deathsOf() - deathsBefore > 0,
        'the puts really conflicted (some died under wait-die and were retried)',
      );
      const last = await clients[0]!.get(T, 'hot');
      assert.ok(typeof last === 'number' && last >= 0 && last < puts, `one of the puts won: ${String(last)}`);
    }));

  for (const seed of ['wait-die-1', 'wait-die-2', 'wait-die-3']) {
    it(`wait-die never deadlocks: random lock orders over a few keys all finish (seed ${seed})`, () =>
      withSimCluster(seed, { partitions: 3 }, async (cluster) => {
        const random = new SeededRandom(`${seed}/orders`);
        const keys = ['a', 'b', 'c', 'd'];
        const client = cluster.client();
        for (const k of keys) await client.put(T, k, 0);
        const clients = cluster.nodes.map((n) => cluster.client(n));
        const txCount = 16;
        const plans = Array.from({ length: txCount }, () => random.shuffle([...keys]).slice(0, 2 + random.int(3)));
        let firstAttemptFailures = 0;
        const outcomes = await Promise.allSettled(
          plans.map((plan, i) => {
            let attempt = 0;
            return clients[i % clients.length]!.transaction(
              async (tx) => {
                attempt++;
                try {
                  for (const k of plan) {
                    const v = (await tx.get(T, k)) as number;
                    await tx.put(T, k, v + 1);
                  }
                } catch (error) {
                  if (attempt === 1) firstAttemptFailures++;
                  assert.equal((error as { retryable?: boolean }).retryable, true, `a retryable failure: ${error}`);
                  throw error;
                }
              },
              { retries: 100, backoffMsMin: 5, backoffMsMax: 200 },
            );
          }),
        );
        assert.deepEqual(
          outcomes.filter((o) => o.status === 'rejected'),
          [],
          'every transaction finished and committed in the end',
        );
        const expected = new Map(keys.map((k) => [k, 0]));
        for (const plan of plans) for (const k of plan) expected.set(k, expected.get(k)! + 1);
        const values = await client.transaction((tx) => tx.getAll(T, keys));
        assert.deepEqual(values, [...expected.values()]);
        assert.ok(firstAttemptFailures > 0, 'some transactions died under wait-die and were retried');
      }));
  }
});
