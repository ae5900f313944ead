import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { AssertionError } from '../../core/assert.js';
import { nodeId, partitionId, type TxId } from '../../core/ids.js';
import { hybridTimestamp } from '../../hlc/timestamp.js';
import { makeTxId } from './tx-id.js';
import { isFinal, isLegalTransition, TX_STATES, type TxState } from './tx-state.js';
import {
  checkTxStateEntry,
  checkTxStateSuccession,
  REASON_TARGETS,
  type TxStateEntry,
  TxStateMap,
  type TxStateMapEvent,
  type TxStateUpdate,
  type TxStateUpdateReason,
} from './tx-state-map.js';

class ManualClock {
  ms = 1_000;
  monotonicMs(): number {
    return this.ms;
  }
}

const COORD = nodeId('coord-1');
const OTHER = nodeId('coord-2');
const CP = partitionId('t1p0');
const TS1 = hybridTimestamp(5_000, 1);
const TS2 = hybridTimestamp(6_000, 0);

function tx(n: number): TxId {
  return makeTxId({ beginTimestamp: hybridTimestamp(1_000 + n), nodeId: nodeId('n1'), counter: n });
}

function newMap(options: { entriesMax?: number; finalWaitersMax?: number } = {}) {
  const clock = new ManualClock();
  const map = new TxStateMap({ clock, ...options });
  const events: TxStateMapEvent[] = [];
  map.observe((e) => events.push(e));
  return { clock, map, events };
}

/** An update point that sets `state` (REASON_TARGETS): a final outcome comes from a resolution. */
function reasonFor(state: TxState): TxStateUpdateReason {
  switch (state) {
    case 'PENDING':
      return 'update-applied';
    case 'FINISHING':
      return 'finish-started';
    case 'ABANDONED':
      return 'coordinator-gone';
    case 'COMMITTED':
    case 'ABORTED':
      return 'resolution';
  }
}

/** Only FINISHING and COMMITTED updates name a commitTs. */
function carriesCommitTs(state: TxState): boolean {
  return state === 'FINISHING' || state === 'COMMITTED';
}

/** Reaches `state` from absent along legal transitions. */
function put(map: TxStateMap, id: TxId, state: TxState): void {
  const commitTimestamp = state === 'COMMITTED' ? TS1 : undefined;
  const r = map.update(id, { state, reason: reasonFor(state), coordinatorId: COORD, commitTimestamp });
  assert.equal(r.kind, 'applied');
}

describe('tx state map: transitions', () => {
  it('coordinator begin stores PENDING with the coordinator id', () => {
    const { map } = newMap();
    const r = map.update(tx(1), { state: 'PENDING', reason: 'coordinator-begin', coordinatorId: COORD });
    assert.equal(r.kind, 'applied');
    assert.deepEqual(map.get(tx(1)), { state: 'PENDING', coordinatorId: COORD });
    assert.equal(map.get(tx(2)), undefined);
  });

  it('an illegal transition keeps the old entry and reports it was ignored', () => {
    const { map, events } = newMap();
    put(map, tx(1), 'COMMITTED');
    const before = map.entry(tx(1));
    const r = map.update(tx(1), { state: 'PENDING', reason: 'update-applied', coordinatorId: OTHER });
    assert.equal(r.kind, 'ignored');
    assert.equal(r.kind === 'ignored' && r.entry, before);
    assert.equal(map.entry(tx(1)), before);
    assert.deepEqual(events.at(-1), {
      kind: 'update',
      txId: tx(1),
      from: 'COMMITTED',
      to: 'PENDING',
      outcome: 'ignored',
      reason: 'update-applied',
    });
  });

  it('every (stored state, update) pair is applied exactly when the transition table allows it', () => {
    let pairs = 0;
    for (const from of [undefined, ...TX_STATES]) {
      for (const to of TX_STATES) {
        const { map } = newMap();
        const id = tx(1);
        if (from !== undefined) put(map, id, from);
        const commitTimestamp = carriesCommitTs(to) ? TS1 : undefined;
        const r = map.update(id, { state: to, reason: reasonFor(to), commitTimestamp });
        const legal = isLegalTransition(from, to);
        assert.equal(r.kind, legal ? 'applied' : 'ignored', `${from ?? 'absent'} → ${to}`);
        assert.equal(map.entry(id)?.state, legal ? to : from);
        pairs += 1;
      }
    }
    assert.equal(pairs, 6 * 5);
  });

  it('a late replicated update cannot turn FINISHING back into PENDING', () => {
    const { map } = newMap();
    map.update(tx(1), { state: 'PENDING', reason: 'coordinator-begin', coordinatorId: COORD });
    assert.equal(map.beginFinish(tx(1), { commitTimestamp: TS1 }).kind, 'began');
    assert.equal(
      map.update(tx(1), { state: 'PENDING', reason: 'update-applied', coordinatorId: COORD }).kind,
      'ignored',
    );
    assert.deepEqual(map.get(tx(1)), { state: 'FINISHING', coordinatorId: COORD, commitTimestamp: TS1 });
  });
});

describe('tx state map: merge rule', () => {
  it('fields only go from empty to set: a missing field keeps the stored value', () => {
    const { map } = newMap();
    map.update(tx(1), { state: 'PENDING', reason: 'replica-touch', coordinatorId: COORD, commitPartitionId: CP });
    map.update(tx(1), { state: 'COMMITTED', reason: 'cleanup-applied', commitTimestamp: TS1 });
    const e = map.entry(tx(1));
    assert.equal(e?.coordinatorId, COORD);
    assert.equal(e?.commitPartitionId, CP);
    assert.equal(e?.commitTimestamp, TS1);
  });

  it('an empty field is filled by a later update', () => {
    const { map } = newMap();
    map.update(tx(1), { state: 'PENDING', reason: 'update-applied' });
    const r = map.update(tx(1), {
      state: 'PENDING',
      reason: 'replica-touch',
      coordinatorId: COORD,
      commitPartitionId: CP,
    });
    assert.equal(r.kind, 'applied');
    assert.deepEqual(r.kind === 'applied' && r.keptFields, []);
    assert.equal(map.entry(tx(1))?.coordinatorId, COORD);
    assert.equal(map.entry(tx(1))?.commitPartitionId, CP);
  });

  it('a different value for a set field keeps the stored value and reports the field', () => {
    const { map } = newMap();
    map.update(tx(1), { state: 'PENDING', reason: 'coordinator-begin', coordinatorId: COORD });
    map.beginFinish(tx(1), { commitTimestamp: TS1 });
    const r = map.update(tx(1), {
      state: 'COMMITTED',
      reason: 'finish-response',
      coordinatorId: OTHER,
      commitTimestamp: TS2,
      commitPartitionId: CP,
    });
    assert.equal(r.kind, 'applied');
    assert.deepEqual(r.kind === 'applied' && r.keptFields, ['coordinatorId', 'commitTimestamp']);
    assert.deepEqual(map.get(tx(1)), { state: 'COMMITTED', coordinatorId: COORD, commitTimestamp: TS1 });
    assert.equal(map.entry(tx(1))?.commitPartitionId, CP);
  });

  it("a carried commit's FINISHING holds a lower bound: COMMITTED replaces it with the stored commitTs, never a lower one", () => {
    const { map } = newMap();
    map.update(tx(1), { state: 'PENDING', reason: 'coordinator-begin', coordinatorId: COORD });
    map.beginFinish(tx(1), { commitTimestamp: TS1, commitTsLowerBound: true });
    assert.equal(map.entry(tx(1))?.commitTsLowerBound, true);
    const r = map.update(tx(1), { state: 'COMMITTED', reason: 'finish-response', commitTimestamp: TS2 });
    assert.deepEqual(r.kind === 'applied' && r.keptFields, []);
    assert.deepEqual(map.get(tx(1)), { state: 'COMMITTED', coordinatorId: COORD, commitTimestamp: TS2 });
    assert.equal(map.entry(tx(1))?.commitTsLowerBound, false);

    map.update(tx(2), { state: 'PENDING', reason: 'coordinator-begin', coordinatorId: COORD });
    map.beginFinish(tx(2), { commitTimestamp: TS2, commitTsLowerBound: true });
    assert.throws(
      () => map.update(tx(2), { state: 'COMMITTED', reason: 'finish-response', commitTimestamp: TS1 }),
      AssertionError,
    );
  });

  it('UNKNOWN is never stored: putting it into the map is a bug', () => {
    const { map } = newMap();
    const unknown = { state: 'UNKNOWN', reason: 'resolution' } as unknown as TxStateUpdate;
    assert.throws(() => map.update(tx(1), unknown), AssertionError);
    put(map, tx(1), 'PENDING');
    assert.throws(() => map.update(tx(1), unknown), AssertionError);
    assert.equal(map.entry(tx(1))?.state, 'PENDING');
  });

  it('a COMMITTED entry without a commit timestamp is a bug', () => {
    const { map } = newMap();
    assert.throws(() => map.update(tx(1), { state: 'COMMITTED', reason: 'resolution' }), AssertionError);
    assert.equal(map.entry(tx(1)), undefined);
  });

  it('an update point setting a state it does not stand for is a bug, whatever the stored state', () => {
    for (const [reason, targets] of Object.entries(REASON_TARGETS) as [TxStateUpdateReason, readonly TxState[]][]) {
      for (const state of TX_STATES) {
        const { map } = newMap();
        const commitTimestamp = state === 'COMMITTED' ? TS1 : undefined;
        const update = () => map.update(tx(1), { state, reason, commitTimestamp });
        if (targets.includes(state)) assert.equal(update().kind, 'applied', `${reason} → ${state}`);
        else assert.throws(update, AssertionError, `${reason} → ${state}`);
      }
    }
    const { map } = newMap();
    put(map, tx(1), 'COMMITTED');
    assert.throws(
      () => map.update(tx(1), { state: 'PENDING', reason: 'finish-response' }),
      AssertionError,
      'checked before the transition table would ignore it',
    );
    assert.equal(map.entry(tx(1))?.state, 'COMMITTED');
  });

  it('the write check refuses a changed final state, a changed field or retention start, a cleared flag', () => {
    const committed: TxStateEntry = {
      state: 'COMMITTED',
      coordinatorId: COORD,
      commitTimestamp: TS1,
      commitPartitionId: CP,
      retainUntilCleanup: true,
      cleanupCompleted: false,
      retentionFromMs: undefined,
    };
    checkTxStateEntry(tx(1), committed);
    const done = { ...committed, cleanupCompleted: true, retentionFromMs: 20 };
    checkTxStateSuccession(tx(1), committed, done);
    const broken: Partial<TxStateEntry>[] = [
      { state: 'ABORTED' },
      { coordinatorId: OTHER },
      { commitTimestamp: TS2 },
      { commitPartitionId: partitionId('t1p1') },
      { retentionFromMs: 30 },
      { cleanupCompleted: false },
    ];
    for (const change of broken) {
      assert.throws(
        () => checkTxStateSuccession(tx(1), done, { ...done, ...change }),
        AssertionError,
        Object.keys(change)[0],
      );
    }
    assert.throws(
      () => checkTxStateSuccession(tx(1), committed, { ...committed, retainUntilCleanup: false }),
      AssertionError,
    );
    // Gaining retainUntilCleanup is the one change of a retention start allowed.
    const unheld = { ...committed, retainUntilCleanup: false, retentionFromMs: 10 };
    checkTxStateSuccession(tx(1), unheld, committed);
    assert.throws(() => checkTxStateEntry(tx(1), { ...committed, commitTimestamp: undefined }), AssertionError);
    assert.throws(() => checkTxStateEntry(tx(1), { ...committed, retentionFromMs: 5 }), AssertionError);
    assert.throws(() => checkTxStateEntry(tx(1), { ...unheld, retentionFromMs: undefined }), AssertionError);
    const pending = { ...committed, state: 'PENDING' as const };
    assert.throws(() => checkTxStateEntry(tx(1), { ...pending, retentionFromMs: 5 }), AssertionError);
    assert.throws(() => checkTxStateEntry(tx(1), { ...pending, cleanupCompleted: true }), AssertionError);
  });

  it('a commitTs named with any state but FINISHING or COMMITTED is a bug', () => {
    const { map } = newMap();
    for (const state of ['PENDING', 'ABANDONED', 'ABORTED'] as const) {
      assert.throws(
        () => map.update(tx(1), { state, reason: reasonFor(state), commitTimestamp: TS1 }),
        AssertionError,
        state,
      );
    }
    assert.equal(map.entry(tx(1)), undefined);
  });

  it('the harness view shows commitTimestamp for FINISHING and COMMITTED, not for an aborted commit attempt', () => {
    const { map } = newMap();
    map.update(tx(1), { state: 'PENDING', reason: 'coordinator-begin', coordinatorId: COORD });
    map.beginFinish(tx(1), { commitTimestamp: TS1 });
    assert.equal(map.get(tx(1))?.commitTimestamp, TS1);
    map.update(tx(1), { state: 'ABORTED', reason: 'finish-response' });
    assert.deepEqual(map.get(tx(1)), { state: 'ABORTED', coordinatorId: COORD });
    assert.equal(map.entry(tx(1))?.commitTimestamp, TS1, 'the stored field is never cleared');
  });

  it('random update sequences follow the table and first-set-wins fields (model check)', () => {
    const stateArb = fc.constantFrom(...TX_STATES);
    const updateArb = fc.record({
      tx: fc.integer({ min: 0, max: 3 }),
      state: stateArb,
      coord: fc.option(fc.constantFrom(COORD, OTHER), { nil: undefined }),
      ts: fc.option(fc.constantFrom(TS1, TS2), { nil: undefined }),
    });
    fc.assert(
      fc.property(fc.array(updateArb, { maxLength: 40 }), (updates) => {
        const { map } = newMap();
        const model = new Map<number, { state: TxState; coord: string | undefined; ts: bigint | undefined }>();
        for (const u of updates) {
          const old = model.get(u.tx);
          const ts = carriesCommitTs(u.state) ? (u.ts ?? (u.state === 'COMMITTED' ? TS1 : undefined)) : undefined;
          const r = map.update(tx(u.tx), {
            state: u.state,
            reason: reasonFor(u.state),
            coordinatorId: u.coord,
            commitTimestamp: ts,
          });
          if (isLegalTransition(old?.state, u.state)) {
            assert.equal(r.kind, 'applied');
            model.set(u.tx, { state: u.state, coord: old?.coord ?? u.coord, ts: old?.ts ?? ts });
          } else {
            assert.equal(r.kind, 'ignored');
          }
          const m = model.get(u.tx);
          const e = map.entry(tx(u.tx));
          assert.deepEqual(
            e && { state: e.state, coord: e.coordinatorId, ts: e.commitTimestamp },
            m && { state: m.state, coord: m.coord, ts: m.ts },
          );
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe('tx state map: finish compare-and-set (rule 13)', () => {
  for (const from of [undefined, 'PENDING', 'ABANDONED'] as const) {
    it(`beginFinish succeeds from ${from ?? 'absent'} and stores the chosen commitTs`, () => {
      const { map, events } = newMap();
      if (from !== undefined) put(map, tx(1), from);
      const r = map.beginFinish(tx(1), { commitTimestamp: TS1, coordinatorId: COORD });
      assert.equal(r.kind, 'began');
      assert.deepEqual(map.get(tx(1)), { state: 'FINISHING', coordinatorId: COORD, commitTimestamp: TS1 });
      assert.deepEqual(events.at(-1), {
        kind: 'update',
        txId: tx(1),
        from,
        to: 'FINISHING',
        outcome: 'applied',
        reason: 'finish-started',
      });
    });
  }

  for (const from of ['FINISHING', 'COMMITTED', 'ABORTED'] as const) {
    it(`beginFinish loses against ${from} and the earlier decision stands`, () => {
      const { map } = newMap();
      if (from === 'FINISHING') map.beginFinish(tx(1), { commitTimestamp: TS1 });
      else put(map, tx(1), from);
      const before = map.entry(tx(1));
      const r = map.beginFinish(tx(1), { commitTimestamp: TS2 });
      assert.equal(r.kind, 'lost');
      assert.equal(r.kind === 'lost' && r.entry, before);
      assert.equal(map.entry(tx(1)), before);
    });
  }

  it('a rollback racing a commit: the second compare-and-set loses and the commitTs is never changed', () => {
    const { map } = newMap();
    map.update(tx(1), { state: 'PENDING', reason: 'coordinator-begin', coordinatorId: COORD });
    assert.equal(map.beginFinish(tx(1), { commitTimestamp: TS1 }).kind, 'began');
    const rollback = map.beginFinish(tx(1));
    assert.equal(rollback.kind, 'lost');
    assert.equal(rollback.kind === 'lost' && rollback.entry.commitTimestamp, TS1);
    const retry = map.beginFinish(tx(1), { commitTimestamp: TS2 });
    assert.equal(retry.kind === 'lost' && retry.entry.commitTimestamp, TS1);
  });
});

describe('tx state map: waiting for the final outcome', () => {
  it('a waiter on a FINISHING tx is called once, when the entry becomes final, and sees the map already final', () => {
    const { map } = newMap();
    map.beginFinish(tx(1), { commitTimestamp: TS1, coordinatorId: COORD });
    const seen: Array<{ arg: TxStateEntry; stored: TxStateEntry | undefined }> = [];
    const w = map.whenFinal(tx(1), (entry) => seen.push({ arg: entry, stored: map.entry(tx(1)) }));
    assert.equal(w.kind, 'waiting');
    map.update(tx(1), { state: 'ABANDONED', reason: 'coordinator-gone' });
    assert.equal(seen.length, 0, 'a non-final update does not wake waiters');
    map.update(tx(1), { state: 'COMMITTED', reason: 'finish-response', commitTimestamp: TS1 });
    assert.equal(seen.length, 1);
    assert.equal(seen[0]?.arg.state, 'COMMITTED');
    assert.equal(seen[0]?.stored, seen[0]?.arg);
    map.update(tx(1), { state: 'COMMITTED', reason: 'cleanup-applied', commitTimestamp: TS1 });
    assert.equal(seen.length, 1, 'a repeated final update does not call it again');
    assert.equal(map.waiterCount, 0);
  });

  it('an illegal update to a final state wakes nobody', () => {
    const { map } = newMap();
    put(map, tx(1), 'ABORTED');
    let calls = 0;
    assert.equal(map.whenFinal(tx(1), () => calls++).kind, 'final');
    map.update(tx(1), { state: 'COMMITTED', reason: 'resolution', commitTimestamp: TS1 });
    assert.equal(calls, 0);
  });

  it('whenFinal on a final entry returns it without registering or calling back', () => {
    const { map } = newMap();
    put(map, tx(1), 'COMMITTED');
    let calls = 0;
    const w = map.whenFinal(tx(1), () => calls++);
    assert.equal(w.kind, 'final');
    assert.equal(w.kind === 'final' && w.entry.commitTimestamp, TS1);
    assert.equal(calls, 0);
    assert.equal(map.waiterCount, 0);
  });

  it('a cancelled waiter is not called, and cancelling twice reports false', () => {
    const { map } = newMap();
    map.beginFinish(tx(1));
    let calls = 0;
    const w = map.whenFinal(tx(1), () => calls++);
    const kept = map.whenFinal(tx(1), () => calls++);
    assert.ok(w.kind === 'waiting' && kept.kind === 'waiting');
    assert.equal(w.cancel(), true);
    assert.equal(w.cancel(), false);
    assert.equal(map.waiterCount, 1);
    map.update(tx(1), { state: 'ABORTED', reason: 'finish-response' });
    assert.equal(calls, 1);
  });

  it('a waiter may register before the map knows the tx', () => {
    const { map } = newMap();
    const states: string[] = [];
    map.whenFinal(tx(7), (e) => states.push(e.state));
    map.update(tx(7), { state: 'ABORTED', reason: 'finish-applied' });
    assert.deepEqual(states, ['ABORTED']);
  });

  it('waiters are bounded: past the limit whenFinal is refused with OVERLOADED', () => {
    const { map } = newMap({ finalWaitersMax: 2 });
    map.beginFinish(tx(1));
    assert.equal(map.whenFinal(tx(1), () => {}).kind, 'waiting');
    const second = map.whenFinal(tx(1), () => {});
    assert.deepEqual(
      map.whenFinal(tx(1), () => {}),
      { kind: 'refused', code: 'OVERLOADED' },
    );
    assert.ok(second.kind === 'waiting' && second.cancel());
    assert.equal(map.whenFinal(tx(1), () => {}).kind, 'waiting');
  });

  it('every waiter runs even if one throws; the first error is rethrown after the map is final', () => {
    const { map } = newMap();
    map.beginFinish(tx(1));
    let secondRan = false;
    map.whenFinal(tx(1), () => {
      throw new Error('boom');
    });
    map.whenFinal(tx(1), () => {
      secondRan = true;
    });
    assert.throws(() => map.update(tx(1), { state: 'ABORTED', reason: 'finish-response' }), /boom/);
    assert.ok(secondRan);
    assert.equal(map.entry(tx(1))?.state, 'ABORTED');
  });
});

describe('tx state map: vacuum', () => {
  it('removes a final entry once the retention period after it became final has passed', () => {
    const { map, clock, events } = newMap();
    put(map, tx(1), 'ABORTED');
    clock.ms += 100;
    assert.equal(map.vacuum(clock.ms, 101), 0);
    assert.equal(map.vacuum(clock.ms + 1, 101), 1);
    assert.equal(map.entry(tx(1)), undefined);
    assert.deepEqual(events.at(-1), { kind: 'vacuum', txId: tx(1), state: 'ABORTED' });
  });

  it('vacuum never removes non-final entries, however old', () => {
    const { map, clock } = newMap();
    put(map, tx(1), 'PENDING');
    map.beginFinish(tx(2));
    put(map, tx(3), 'ABANDONED');
    clock.ms += 10_000_000;
    assert.equal(map.vacuum(clock.ms, 0), 0);
    assert.equal(map.size, 3);
  });

  it('a coordinator or commit partition entry waits for cleanup completion, then for the retention period', () => {
    const { map, clock } = newMap();
    map.update(tx(1), { state: 'PENDING', reason: 'coordinator-begin', coordinatorId: COORD });
    map.beginFinish(tx(1), { commitTimestamp: TS1 });
    map.update(tx(1), { state: 'COMMITTED', reason: 'finish-response' });
    clock.ms += 1_000_000;
    assert.equal(map.vacuum(clock.ms, 10), 0, 'cleanup not completed yet');
    assert.equal(map.markCleanupCompleted(tx(1)), true);
    assert.equal(map.vacuum(clock.ms + 9, 10), 0);
    assert.equal(map.vacuum(clock.ms + 10, 10), 1);
  });

  it('markCleanupCompleted is refused for a missing or non-final entry', () => {
    const { map } = newMap();
    assert.equal(map.markCleanupCompleted(tx(1)), false);
    put(map, tx(1), 'PENDING');
    assert.equal(map.markCleanupCompleted(tx(1)), false);
  });

  it('an entry that gains retainUntilCleanup after becoming final waits for cleanup', () => {
    const { map, clock } = newMap();
    put(map, tx(1), 'COMMITTED');
    put(map, tx(2), 'COMMITTED');
    clock.ms += 5;
    map.update(tx(1), { state: 'COMMITTED', reason: 'finish-applied', retainUntilCleanup: true });
    assert.equal(map.vacuum(clock.ms + 100, 10), 1, 'only the entry not held');
    assert.equal(map.entry(tx(1))?.state, 'COMMITTED');
    map.markCleanupCompleted(tx(1));
    assert.equal(map.vacuum(clock.ms + 9, 10), 0);
    assert.equal(map.vacuum(clock.ms + 10, 10), 1);
    assert.equal(map.size, 0);
  });

  it('random histories: vacuum removes exactly the final entries whose retention has passed', () => {
    const opArb = fc.oneof(
      fc.record({
        kind: fc.constant('update' as const),
        tx: fc.integer({ min: 0, max: 5 }),
        state: fc.constantFrom(...TX_STATES),
        hold: fc.boolean(),
      }),
      fc.record({ kind: fc.constant('cleanup' as const), tx: fc.integer({ min: 0, max: 5 }) }),
      fc.record({ kind: fc.constant('tick' as const), ms: fc.integer({ min: 0, max: 50 }) }),
      fc.record({ kind: fc.constant('vacuum' as const) }),
    );
    fc.assert(
      fc.property(fc.array(opArb, { maxLength: 60 }), (ops) => {
        const { map, clock } = newMap();
        const retentionMs = 20;
        // The header's rule, kept beside the map: when each entry's retention starts (undefined: it may not be
        // vacuumed yet).
        const model = new Map<number, { retain: boolean; cleaned: boolean; from: number | undefined }>();
        for (const op of ops) {
          if (op.kind === 'update') {
            const commitTimestamp = op.state === 'COMMITTED' ? TS1 : undefined;
            const u: TxStateUpdate = {
              state: op.state,
              reason: reasonFor(op.state),
              commitTimestamp,
              retainUntilCleanup: op.hold,
            };
            const wasFinal = isFinal(map.entry(tx(op.tx))?.state);
            if (map.update(tx(op.tx), u).kind !== 'applied') continue;
            const m = model.get(op.tx) ?? { retain: false, cleaned: false, from: undefined };
            model.set(op.tx, m);
            const gained = op.hold && !m.retain;
            m.retain ||= op.hold;
            if (!isFinal(op.state)) continue;
            if (!wasFinal) m.from = m.retain && !m.cleaned ? undefined : clock.ms;
            else if (gained) m.from = m.cleaned ? clock.ms : undefined;
          } else if (op.kind === 'cleanup') {
            const m = model.get(op.tx);
            if (!map.markCleanupCompleted(tx(op.tx))) continue;
            assert.ok(m !== undefined);
            if (m.retain && !m.cleaned) m.from = clock.ms;
            m.cleaned = true;
          } else if (op.kind === 'tick') clock.ms += op.ms;
          else {
            map.vacuum(clock.ms, retentionMs);
            for (const [n, m] of model) {
              const due = m.from !== undefined && m.from + retentionMs <= clock.ms;
              assert.equal(map.entry(tx(n)) === undefined, due, `tx ${n} from ${m.from}`);
              if (due) model.delete(n);
              else assert.equal(map.entry(tx(n))?.retentionFromMs, m.from, `tx ${n}'s retention start`);
            }
          }
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe('tx state map: remove (a coordinator dropping its own entry)', () => {
  it('removes the entry whatever its state, tells observers, and a queued vacuum item for it is skipped', () => {
    const { map, clock, events } = newMap();
    put(map, tx(1), 'ABORTED');
    put(map, tx(2), 'PENDING');
    put(map, tx(3), 'ABORTED');
    assert.equal(map.remove(tx(1), 'unlock-only'), true);
    assert.equal(map.remove(tx(2), 'one-phase'), true);
    assert.equal(map.remove(tx(2), 'one-phase'), false, 'already gone');
    assert.deepEqual(events.at(-1), { kind: 'remove', txId: tx(2), state: 'PENDING', reason: 'one-phase' });
    assert.equal(map.get(tx(1)), undefined);
    assert.equal(map.size, 1);
    clock.ms += 1_000;
    assert.equal(map.vacuum(clock.ms, 0), 1, 'only the entry still present is vacuumed');
    assert.equal(map.size, 0);
  });
});

describe('tx state map: size bound', () => {
  it('at the bound a new entry is refused with OVERLOADED, existing entries still update', () => {
    const { map, events, clock } = newMap({ entriesMax: 2 });
    put(map, tx(1), 'PENDING');
    put(map, tx(2), 'ABORTED');
    assert.deepEqual(map.update(tx(3), { state: 'PENDING', reason: 'coordinator-begin', coordinatorId: COORD }), {
      kind: 'refused',
      code: 'OVERLOADED',
    });
    assert.deepEqual(map.beginFinish(tx(3)), { kind: 'refused', code: 'OVERLOADED' });
    assert.equal(map.entry(tx(3)), undefined);
    const last = events.at(-1);
    assert.equal(last?.kind === 'update' && last.outcome, 'refused');
    assert.equal(map.update(tx(1), { state: 'ABORTED', reason: 'finish-response' }).kind, 'applied');
    assert.equal(map.size, 2, 'nothing was evicted');
    clock.ms += 100;
    assert.equal(map.vacuum(clock.ms, 50), 2);
    assert.equal(map.update(tx(3), { state: 'PENDING', reason: 'coordinator-begin' }).kind, 'applied');
  });
});

describe('tx state map: observers', () => {
  it('the observer sees every update with its from/to states, outcome and reason label, until unsubscribed', () => {
    const { map } = newMap();
    const seen: TxStateMapEvent[] = [];
    const stop = map.observe((e) => seen.push(e));
    map.update(tx(1), { state: 'PENDING', reason: 'coordinator-begin', coordinatorId: COORD });
    map.beginFinish(tx(1), { commitTimestamp: TS1 });
    map.beginFinish(tx(1), { commitTimestamp: TS2 });
    map.update(tx(1), { state: 'COMMITTED', reason: 'finish-response' });
    stop();
    map.update(tx(1), { state: 'COMMITTED', reason: 'cleanup-applied' });
    assert.deepEqual(
      seen.map((e) => (e.kind === 'update' ? `${e.from ?? '-'}>${e.to}:${e.outcome}:${e.reason}` : e.kind)),
      [
        '->PENDING:applied:coordinator-begin',
        'PENDING>FINISHING:applied:finish-started',
        'FINISHING>FINISHING:ignored:finish-started',
        'FINISHING>COMMITTED:applied:finish-response',
      ],
    );
  });
});

describe('tx state map: the sweep cursor over non-final entries', () => {
  it('lists non-final entries in bounded batches, resumes where it stopped, skips removed and final ones', () => {
    const { map } = newMap();
    for (let i = 1; i <= 5; i++) put(map, tx(i), i === 3 ? 'ABORTED' : 'PENDING');
    const first = map.nonFinal(2).map(([id]) => id);
    assert.deepEqual(first, [tx(1), tx(2)], 'at most two entries examined');
    map.remove(tx(4), 'sweep');
    const second = map.nonFinal(10).map(([id]) => id);
    assert.deepEqual(second, [tx(5)], 'tx 3 is final, tx 4 removed; the lap ends there');
    const lap = map.nonFinal(10).map(([id]) => id);
    assert.deepEqual(lap, [tx(1), tx(2), tx(5)], 'the next call starts a new lap, listing each entry once');
  });
});

describe('tx state map: entries for readers (the console)', () => {
  it('lists every entry once, live ones first, and reads only as far as the reader goes', () => {
    const { map } = newMap();
    map.update(tx(1), { state: 'PENDING', reason: 'coordinator-begin', coordinatorId: COORD });
    map.beginFinish(tx(1), { commitTimestamp: TS1 });
    map.update(tx(1), { state: 'COMMITTED', reason: 'finish-response' });
    assert.equal(map.markCleanupCompleted(tx(1)), true, 'tx 1 is retained, no longer live');
    map.update(tx(2), { state: 'PENDING', reason: 'coordinator-begin', coordinatorId: COORD });
    map.update(tx(3), { state: 'ABORTED', reason: 'resolution' });
    const listed = [...map.entries()].map(([id, e]) => [id, e.state]);
    // The live entry, then the retained ones in the order their retention started (a cached outcome at once).
    assert.deepEqual(listed, [
      [tx(2), 'PENDING'],
      [tx(1), 'COMMITTED'],
      [tx(3), 'ABORTED'],
    ]);
    const reader = map.entries();
    assert.equal(reader.next().value?.[0], tx(2));
    assert.equal(reader.return().done, true, 'a reader may stop after the first entry');
  });
});
