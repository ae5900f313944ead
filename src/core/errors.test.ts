import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BasaltError, type ErrorData, type ErrorHint, errorHintProblem, hintOf, missHolder } from './errors.js';
import type { HybridTimestamp, NodeId, NodeName, PartitionId, TxId } from './ids.js';
import { LIMITS } from './limits.js';

const MISS: ErrorHint = {
  kind: 'primary-miss',
  partitionId: 't1p0' as PartitionId,
  reason: 'token-mismatch',
  holder: {
    name: 'n2' as NodeName,
    token: { holder: { nodeId: 'id-2' as NodeId, incarnation: 'i1' }, start: 5n as HybridTimestamp },
  },
};

describe('error hints', () => {
  it('cross the wire with the error and are read back typed', () => {
    const hints: ErrorHint[] = [
      MISS,
      { kind: 'primary-miss', partitionId: 't1p0' as PartitionId, reason: 'not-hosted' },
      { kind: 'mismatched-outcome', outcome: { state: 'COMMITTED', commitTs: 7n as HybridTimestamp } },
      { kind: 'mismatched-outcome', outcome: { state: 'ABORTED' } },
      { kind: 'wait-die', blocker: 'tx-old' as TxId },
      { kind: 'foreign-intent', key: 'k', intentTxId: 'tx-w' as TxId },
    ];
    for (const hint of hints) {
      const data = new BasaltError('PRIMARY_MISS', 'm', { a: 1 }, { hint }).toData();
      assert.equal(errorHintProblem(data.hint), undefined, hint.kind);
      assert.deepEqual(BasaltError.fromData(data).hint, hint);
    }
    const miss = BasaltError.fromData(new BasaltError('PRIMARY_MISS', 'moved', undefined, { hint: MISS }).toData());
    assert.equal(missHolder(miss), 'n2');
    assert.equal(hintOf(miss, 'wait-die'), undefined, 'a hint is read only as its own kind');
    assert.equal(missHolder(new BasaltError('PRIMARY_MISS', 'untyped', { holderName: 'n2' })), undefined);
    assert.equal(missHolder(new BasaltError('TIMEOUT', 'not a miss', undefined, { hint: MISS })), undefined);
  });

  it('a malformed hint of a known kind is a problem; a hint of an unknown kind passes and is dropped', () => {
    const malformed: unknown[] = [
      'miss',
      { kind: '' },
      { kind: 'primary-miss', partitionId: 't1p0', reason: 'x', holder: { name: 'n2' } },
      { kind: 'primary-miss', partitionId: 't1p0', reason: 'x', holderName: 'n2' },
      { ...MISS, holder: { ...MISS.holder, name: 7 } },
      { kind: 'mismatched-outcome', outcome: { state: 'COMMITTED' } },
      { kind: 'mismatched-outcome', outcome: { state: 'COMMITTED', commitTs: 0n } },
      { kind: 'mismatched-outcome', outcome: { state: 'PENDING' } },
      { kind: 'wait-die', blocker: 3 },
      { kind: 'wait-die', blocker: 'x'.repeat(LIMITS.identityCharsMax + 1) },
      { kind: 'foreign-intent', key: 'k' },
    ];
    for (const hint of malformed) assert.notEqual(errorHintProblem(hint), undefined, JSON.stringify(hint, bigints));
    const future = { kind: 'from-a-newer-peer', anything: 1 };
    assert.equal(errorHintProblem(future), undefined);
    const data = { code: 'PRIMARY_MISS', message: 'm', hint: future } as unknown as ErrorData;
    assert.equal(BasaltError.fromData(data).hint, undefined);
  });
});

function bigints(_key: string, value: unknown): unknown {
  return typeof value === 'bigint' ? String(value) : value;
}
