/**
 * The coordinator's adoption of a client's direct enlistments (coordinator-direct.ts `adoptDirect`): partitions
 * enlisted under the leases the client learned, opSeqs raised above the client's, write timestamps absorbed before
 * commitTs (and refused beyond the skew bound), another lease for a partition enlisted already making the tx
 * abort-only, uncertain first requests noted for cleanup.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isBasaltError } from '../../core/errors.js';
import type { NodeId, NodeName, PartitionId } from '../../core/ids.js';
import { HybridClock } from '../../hlc/hybrid-clock.js';
import { addMs, hybridTimestamp } from '../../hlc/timestamp.js';
import { ManualClock } from '../../testing/replica-support.js';
import type { DirectEnlistment, DirectHandoff } from '../core/direct.js';
import { makeTxId } from '../core/tx-id.js';
import type { CoordinatorContext } from './context.js';
import { CoordinatedTx } from './coordinated-tx.js';
import { adoptDirect } from './coordinator-direct.js';

const NOW_MS = 1_000_000;
const P1 = 't1p1' as PartitionId;
const P2 = 't1p2' as PartitionId;

function setup() {
  const clock = new HybridClock(new ManualClock(NOW_MS), { maxClockSkewMs: 500 });
  const ctx = {
    clock,
    placement: { partitionOf: (_table: string, key: string) => (key === 'b' ? P2 : P1) },
  } as unknown as CoordinatorContext;
  const beginTs = clock.now();
  const id = makeTxId({ beginTimestamp: beginTs, nodeId: 'coord' as NodeId, counter: 1 });
  const tx = new CoordinatedTx(id, beginTs, addMs(beginTs, 10_000));
  return { clock, ctx, tx };
}

function enlisted(partitionId: PartitionId, holder: string, opSeq: number, wrote = true): DirectEnlistment {
  return {
    partitionId,
    lease: {
      token: { holder: { nodeId: holder as NodeId, incarnation: 'i1' }, start: hybridTimestamp(NOW_MS - 1_000) },
      holderName: holder as NodeName,
      expiration: hybridTimestamp(NOW_MS + 5_000),
    },
    wrote,
    unconfirmed: wrote,
    opSeq,
  };
}

const handoff = (enlist: DirectEnlistment[], more: Partial<DirectHandoff> = {}): DirectHandoff => ({
  enlisted: enlist,
  uncertain: [],
  ...more,
});

describe('adoptDirect: a client hands its direct enlistments to the coordinator', () => {
  it('enlists the partitions, raises the opSeqs and absorbs the write timestamp before commitTs', () => {
    const { clock, ctx, tx } = setup();
    tx.commitPartitionId = P1;
    tx.nextOpSeq();
    const writeTs = hybridTimestamp(NOW_MS + 200, 3);
    adoptDirect(ctx, tx, handoff([enlisted(P2, 'n2', 7)], { writeTs }));
    const e = tx.enlistment(P2);
    assert.ok(e !== undefined);
    assert.equal(e.primaryName, 'n2');
    assert.equal(e.wrote, true);
    assert.equal(e.unconfirmed, true, 'the commit confirms a write answered before it applied');
    assert.equal(e.pipelinedKeys, undefined, 'its keys are unknown: a parallel commit confirms it first');
    assert.equal(tx.mayHaveWritten, true);
    assert.equal(tx.nextOpSeq(), 8, 'above every direct opSeq');
    assert.ok(clock.now() > writeTs, 'commitTs will exceed the direct write');
  });

  it('merges a second handoff under the same lease; another lease makes the tx abort-only', () => {
    const { ctx, tx } = setup();
    tx.commitPartitionId = P1;
    adoptDirect(ctx, tx, handoff([enlisted(P2, 'n2', 2, false)]));
    assert.equal(tx.enlistment(P2)?.wrote, false);
    adoptDirect(ctx, tx, handoff([enlisted(P2, 'n2', 3, true)]));
    assert.equal(tx.enlistment(P2)?.wrote, true);
    assert.equal(tx.abortCause, undefined);
    adoptDirect(ctx, tx, handoff([enlisted(P2, 'n3', 4)]));
    // (Read again: the assertion above narrowed the field's type for the compiler.)
    const cause: unknown = Reflect.get(tx, 'abortCause');
    assert.ok(isBasaltError(cause, 'TX_ABORTED'));
    assert.equal(cause.details?.['reason'], 'primary-changed');
  });

  it('notes an uncertain first request for cleanup, and refuses what it cannot trust', () => {
    const { ctx, tx } = setup();
    assert.throws(
      () => adoptDirect(ctx, tx, handoff([enlisted(P2, 'n2', 1)])),
      (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT'),
      'no commit partition yet: no direct operation can have named one',
    );
    tx.commitPartitionId = P1;
    const far = hybridTimestamp(NOW_MS + 60_000);
    assert.throws(
      () => adoptDirect(ctx, tx, handoff([enlisted(P2, 'n2', 1)], { writeTs: far })),
      (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT'),
    );
    assert.equal(tx.enlistment(P2), undefined, 'nothing adopted from a refused handoff');
    adoptDirect(ctx, tx, handoff([], { uncertain: [{ table: 't', key: 'b', node: 'n3' as NodeName }] }));
    assert.deepEqual(tx.uncertain, [{ partitionId: P2, primaries: ['n3'] }]);
    assert.equal(tx.mayHaveWritten, true);
  });
});
