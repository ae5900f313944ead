/**
 * "Coordinator gone" has one guard (coordinator-gone.ts, rule 17): only a PENDING entry this node already has, of a
 * coordinator PeerDirectory calls gone, becomes ABANDONED; nothing else is touched, not even by an ignored update.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { NodeId } from '../../core/ids.js';
import { at, COORDINATOR, ManualClock, txIdAt } from '../../testing/replica-support.js';
import { TxStateMap, type TxStateMapEvent } from '../../tx/core/tx-state-map.js';
import { markCoordinatorGone } from './coordinator-gone.js';

const gone = { isGone: (id: NodeId) => id === COORDINATOR };
const live = { isGone: () => false };

function fixture(): { map: TxStateMap; events: TxStateMapEvent[] } {
  const map = new TxStateMap({ clock: new ManualClock(1_000) });
  const events: TxStateMapEvent[] = [];
  map.observe((e) => events.push(e));
  return { map, events };
}

describe('markCoordinatorGone', () => {
  it('marks a PENDING entry of a gone coordinator ABANDONED, once', () => {
    const { map, events } = fixture();
    const tx = txIdAt(1_000);
    map.update(tx, { state: 'PENDING', reason: 'replica-touch', coordinatorId: COORDINATOR });
    assert.equal(markCoordinatorGone(map, gone, tx, COORDINATOR), true);
    assert.equal(map.entry(tx)?.state, 'ABANDONED');
    // Already ABANDONED: no second update.
    assert.equal(markCoordinatorGone(map, gone, tx, COORDINATOR), false);
    assert.deepEqual(
      events.filter((e) => e.kind === 'update' && e.reason === 'coordinator-gone').length,
      1,
      'one coordinator-gone update',
    );
  });

  it('leaves alone a coordinator that is not gone (unknown is not gone), and an unnamed one', () => {
    const { map } = fixture();
    const tx = txIdAt(1_000);
    map.update(tx, { state: 'PENDING', reason: 'replica-touch', coordinatorId: COORDINATOR });
    assert.equal(markCoordinatorGone(map, live, tx, COORDINATOR), false);
    assert.equal(markCoordinatorGone(map, gone, tx, undefined), false);
    assert.equal(map.entry(tx)?.state, 'PENDING');
  });

  it('creates no entry, and leaves FINISHING and final entries as they are', () => {
    const { map, events } = fixture();
    const absent = txIdAt(1_000, 1);
    const finishing = txIdAt(1_000, 2);
    const committed = txIdAt(1_000, 3);
    map.update(finishing, { state: 'FINISHING', reason: 'finish-started', coordinatorId: COORDINATOR });
    map.update(committed, { state: 'COMMITTED', reason: 'resolution', commitTimestamp: at(1_500) });
    const before = events.length;
    for (const tx of [absent, finishing, committed])
      assert.equal(markCoordinatorGone(map, gone, tx, COORDINATOR), false);
    assert.equal(events.length, before, 'no update, not even an ignored one');
    assert.equal(map.entry(absent), undefined);
    assert.equal(map.entry(finishing)?.state, 'FINISHING');
    assert.equal(map.entry(committed)?.state, 'COMMITTED');
  });
});
