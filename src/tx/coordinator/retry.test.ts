import assert from 'node:assert/strict';
import { test } from 'node:test';
import { BasaltError, isBasaltError } from '../../core/errors.js';
import { backoffMs } from '../../route/backoff.js';
import { SeededRandom } from '../../sim/random.js';
import { isRetryable, retryPolicy, withRetries } from './retry.js';

const conflict = () => new BasaltError('TX_LOCK_CONFLICT', 'died under wait-die');

test('withRetries retries a retryable failure `retries` times, pausing with doubling backoff', async () => {
  const pauses: number[] = [];
  let calls = 0;
  await assert.rejects(
    withRetries(
      retryPolicy({ retries: 3, backoffMsMin: 10, backoffMsMax: 25 }),
      async (ms) => {
        pauses.push(ms);
      },
      async () => {
        calls++;
        throw conflict();
      },
    ),
    (e: unknown) => isBasaltError(e, 'TX_LOCK_CONFLICT'),
  );
  assert.equal(calls, 4, 'the first attempt and three retries');
  assert.deepEqual(pauses, [10, 20, 25]);
});

test('an outcome that may have been a commit, an uncoded error, or a caller veto is never retried', async () => {
  for (const error of [
    new BasaltError('TX_OUTCOME_UNKNOWN', 'may have applied'),
    new BasaltError('TX_MISMATCHING_OUTCOME', 'aborted instead'),
    new Error('bug'),
  ]) {
    let calls = 0;
    await assert.rejects(
      withRetries(
        retryPolicy(),
        async () => {},
        async () => {
          calls++;
          throw error;
        },
      ),
    );
    assert.equal(calls, 1, String(error));
    assert.equal(isRetryable(error), false);
  }
  let vetoed = 0;
  await assert.rejects(
    withRetries(
      retryPolicy(),
      async () => {},
      async () => {
        vetoed++;
        throw conflict();
      },
      () => false,
    ),
  );
  assert.equal(vetoed, 1);
});

test('a success after failures resolves with its value; attempts are numbered from 1', async () => {
  const seen: number[] = [];
  const value = await withRetries(
    retryPolicy({ retries: 5 }),
    async () => {},
    async (n) => {
      seen.push(n);
      if (n < 3) throw conflict();
      return 'done';
    },
  );
  assert.equal(value, 'done');
  assert.deepEqual(seen, [1, 2, 3]);
});

test('jitter spreads each pause over [0.5, 1.5) of its backoff, reproducibly from the seed', async () => {
  const run = async (seed: string) => {
    const pauses: number[] = [];
    await withRetries(
      retryPolicy({ retries: 6, backoffMsMin: 100, backoffMsMax: 100 }, new SeededRandom(seed)),
      async (ms) => {
        pauses.push(ms);
      },
      async (n) => {
        if (n <= 6) throw conflict();
      },
    );
    return pauses;
  };
  const pauses = await run('jitter');
  assert.ok(
    pauses.every((ms) => ms >= 50 && ms < 150),
    pauses.join(','),
  );
  assert.ok(new Set(pauses).size > 1, 'not all equal');
  assert.deepEqual(await run('jitter'), pauses, 'the same seed, the same pauses');
});

test('malformed options are INVALID_ARGUMENT; backoff is capped', () => {
  assert.throws(
    () => retryPolicy({ retries: -1 }),
    (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT'),
  );
  assert.throws(
    () => retryPolicy({ backoffMsMin: 0 }),
    (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT'),
  );
  assert.throws(
    () => retryPolicy({ backoffMsMin: 10, backoffMsMax: 5 }),
    (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT'),
  );
  assert.equal(backoffMs(100, 20, 1_000), 1_000);
});
