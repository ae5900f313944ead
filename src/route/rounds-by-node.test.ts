/**
 * The one round loop of the cleanups (rounds-by-node.ts): one request per node naming that node's partitions, the
 * partitions not reported done returned with the holder a PRIMARY_MISS named (and noted), and the rounds paced by
 * backoffMs.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BasaltError } from '../core/errors.js';
import type { NodeName, PartitionId } from '../core/ids.js';
import { primaryMissNaming } from '../testing/coordinator-fakes.js';
import type { PrimaryDirectory } from './primary-directory.js';
import { runRounds, sendRound } from './rounds-by-node.js';

const P0 = 't1p0' as PartitionId;
const P1 = 't1p1' as PartitionId;
const P2 = 't1p2' as PartitionId;
const N1 = 'n1' as NodeName;
const N2 = 'n2' as NodeName;

function directory(): PrimaryDirectory & { noted: string[]; forgotten: string[] } {
  const noted: string[] = [];
  const forgotten: string[] = [];
  return {
    noted,
    forgotten,
    locate: () => N1,
    note: (p, name) => noted.push(`${p}@${name}`),
    forget: (p, name) => forgotten.push(`${p}@${name}`),
  };
}

describe('sendRound', () => {
  it('sends one request per node and returns what was not reported done, with the holder a miss named', async () => {
    const dir = directory();
    const requests: string[] = [];
    const failed = await sendRound(
      [
        { partitionId: P0, node: N1 },
        { partitionId: P1, node: N2 },
        { partitionId: P2, node: N1 },
      ],
      async (node, partitions) => {
        requests.push(`${node}:${partitions.join(',')}`);
        if (node === N2) throw primaryMissNaming(P1, 'n3');
        return [P0];
      },
      dir,
    );
    assert.deepEqual(requests, ['n1:t1p0,t1p2', 'n2:t1p1']);
    assert.deepEqual(
      failed.map((f) => [f.partitionId, f.node, f.hinted, f.error === undefined]),
      [
        [P2, N1, undefined, true],
        [P1, N2, 'n3', false],
      ],
    );
    assert.deepEqual(dir.noted, ['t1p1@n3']);
  });

  it('a failure that names no holder hints nothing', async () => {
    const failed = await sendRound(
      [{ partitionId: P0, node: N1 }],
      () => Promise.reject(new BasaltError('TIMEOUT', 'no answer')),
      directory(),
    );
    assert.equal(failed.length, 1);
    assert.equal(failed[0]?.hinted, undefined);
    assert.equal((failed[0]?.error as BasaltError | undefined)?.code, 'TIMEOUT');
  });
});

describe('runRounds', () => {
  it('runs while due, pausing the doubling backoff before every round after the first', async () => {
    const pauses: number[] = [];
    const rounds: number[] = [];
    const ended = await runRounds(1, {
      due: (round) => round <= 4,
      round: async (round) => {
        rounds.push(round);
      },
      pause: async (ms) => {
        pauses.push(ms);
      },
      backoffMsMin: 10,
      backoffMsMax: 25,
    });
    assert.equal(ended, 'over');
    assert.deepEqual(rounds, [1, 2, 3, 4]);
    assert.deepEqual(pauses, [10, 20, 25]);
  });

  it('stops when proceed says so after a pause, and starts later rounds where asked', async () => {
    const rounds: number[] = [];
    const pauses: number[] = [];
    const ended = await runRounds(2, {
      due: () => true,
      round: async (round) => {
        rounds.push(round);
      },
      proceed: () => rounds.length < 2,
      pause: async (ms) => {
        pauses.push(ms);
      },
      backoffMsMin: 10,
      backoffMsMax: 100,
    });
    assert.equal(ended, 'stopped');
    assert.deepEqual(rounds, [2, 3]);
    assert.deepEqual(pauses, [10, 20, 40]);
  });
});
