/**
 * The partition state machine, driven directly with committed entries on memory storage: one test per safety rule it
 * enforces (rules 3, 4, 9, 14, 15), the design-review scenarios it closes (#3, #4, #11a, #12b), the tx state map
 * update points it owns, result routing to the proposer, snapshots, and loud failure on malformed entries.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BasaltError, isBasaltError } from '../../core/errors.js';
import type { HybridTimestamp, LogIndex, NodeName, Term } from '../../core/ids.js';
import { addMs } from '../../hlc/timestamp.js';
import { encode } from '../../net/codec.js';
import { encodeConfChange } from '../../raft/conf-change.js';
import { TOMBSTONE } from '../../storage/mv-partition-storage.js';
import { MemoryStorageEngine } from '../../storage/storage-engine.js';
import {
  applyAll,
  assertSameBytes,
  at,
  COORDINATOR,
  finish,
  incarnation,
  LogBuilder,
  lease,
  leaseCommand,
  PARTITION,
  put,
  remove,
  safeTimeSync,
  switchIntents,
  testReplica,
  txIdAt,
  update,
  updateAll,
} from '../../testing/replica-support.js';
import { txDeadline } from '../../tx/core/tx-id.js';
import type { TxStateMapEvent } from '../../tx/core/tx-state-map.js';
import type { ApplyResult } from './apply-result.js';
import type { PartitionCommand } from './commands.js';
import { tokenOf } from './lease.js';
import { proposeCommand } from './proposals.js';

const P1 = incarnation('p1');
const P2 = incarnation('p2');
const L1 = lease(P1, 10, 100);

function kinds(results: readonly ApplyResult[]): string[] {
  return results.map((r) => r.kind);
}

function latest(replica: ReturnType<typeof testReplica>, key: string) {
  const mv = replica.engine.mvPartition(PARTITION);
  const row = mv.rowIdOf(key);
  return row === undefined ? undefined : mv.readLatest(row);
}

describe('rule 9: effective timestamps', () => {
  it('effective timestamps rise strictly even when proposals arrive out of timestamp order', () => {
    const r = testReplica();
    const log = new LogBuilder();
    const results = applyAll(r, log, [
      leaseCommand(L1, null, 20),
      safeTimeSync(50),
      update(L1, 1, put('a', 1), 30, { full: true }),
      update(L1, 2, put('a', 2), 30, { full: true }),
      safeTimeSync(60),
    ]);
    const applied = results.map((x) => x.appliedTs);
    assert.deepEqual(applied, [at(20), at(50), at(50, 1), at(50, 2), at(60)]);
    for (let i = 1; i < applied.length; i++) assert.ok(applied[i]! > applied[i - 1]!);
    assert.equal(r.sm.lastAppliedTs(), at(60));
    assert.equal(r.engine.mvPartition(PARTITION).lastAppliedTs(), at(60));
    assert.equal(r.engine.txStatePartition(PARTITION).lastAppliedTs(), at(60));
  });

  it('a one-phase write is committed at its effective timestamp, not at its proposed one', () => {
    const r = testReplica();
    const log = new LogBuilder();
    applyAll(r, log, [leaseCommand(L1, null, 20), safeTimeSync(70)]);
    const [result] = applyAll(r, log, [update(L1, 1, put('k', 'v'), 40, { full: true })]);
    assert.deepEqual(result, { kind: 'UPDATED', appliedTs: at(70, 1), full: true, rows: 1 });
    assert.deepEqual(latest(r, 'k'), { kind: 'committed', value: 'v', commitTs: at(70, 1) });
  });

  it('the clock absorbs the effective timestamp of applied commands', () => {
    const r = testReplica({ physicalMs: 1 });
    applyAll(r, new LogBuilder(), [safeTimeSync(5_000)]);
    assert.ok(r.clock.current() > at(5_000));
    assert.ok(r.clock.now() > at(5_000));
  });

  it('design-review #11a: lastAppliedTs is durable, so a restarted replica keeps effective timestamps rising', () => {
    const engine = new MemoryStorageEngine();
    const first = testReplica({ engine });
    const log = new LogBuilder();
    applyAll(first, log, [leaseCommand(L1, null, 20), safeTimeSync(80)]);
    const restarted = testReplica({ engine });
    assert.equal(restarted.sm.lastAppliedTs(), at(80));
    assert.equal(restarted.sm.appliedIndex(), 2);
    assert.equal(restarted.sm.safeTime.current(), at(80));
    const [result] = applyAll(restarted, log, [update(L1, 1, put('k', 1), 30, { full: true })]);
    assert.equal(result?.appliedTs, at(80, 1));
  });

  it('noop entries advance the applied index only', () => {
    const r = testReplica();
    const log = new LogBuilder();
    applyAll(r, log, [safeTimeSync(30)]);
    r.sm.apply([log.noop(), log.noop()]);
    assert.equal(r.sm.appliedIndex(), 3);
    assert.equal(r.sm.lastAppliedTs(), at(30));
    assert.deepEqual(r.engine.mvPartition(PARTITION).lastApplied(), { index: 3, term: 1 });
  });

  it('entries at or below the applied index are skipped; a gap is a broken invariant', () => {
    const r = testReplica();
    const log = new LogBuilder();
    const e1 = log.data(safeTimeSync(30));
    const e2 = log.data(safeTimeSync(40));
    r.sm.apply([e1]);
    r.sm.apply([e1, e2]);
    assert.equal(r.sm.appliedIndex(), 2);
    assert.equal(r.sm.lastAppliedTs(), at(40));
    const gap = { ...log.data(safeTimeSync(50)), index: 9 as LogIndex };
    assert.throws(() => r.sm.apply([gap]), /contiguous/);
  });
});

describe('rule 3: leases at apply', () => {
  it('a first lease, an extension and a new lease at the expiration apply; the lease record is durable', () => {
    const r = testReplica();
    const log = new LogBuilder();
    const extended = { ...L1, expiration: at(200) };
    const L2 = lease(P2, 200, 400);
    const results = applyAll(r, log, [
      leaseCommand(L1, null, 5),
      leaseCommand(extended, L1, 50),
      leaseCommand(L2, extended, 60),
    ]);
    assert.deepEqual(
      results.map((x) => (x.kind === 'LEASE_APPLIED' ? x.change : x.kind)),
      ['first', 'extension', 'new-lease'],
    );
    assert.deepEqual(r.sm.currentLease(), L2);
    assert.deepEqual(testReplica({ engine: r.engine }).sm.currentLease(), L2);
  });

  it('a lease naming a lease that is not current, an extension that lowers, and an overlap are no-ops', () => {
    const r = testReplica();
    const log = new LogBuilder();
    applyAll(r, log, [leaseCommand(L1, null, 5)]);
    const results = applyAll(r, log, [
      leaseCommand(lease(P2, 100, 300), null, 6),
      leaseCommand(lease(P2, 100, 300), lease(P2, 1, 2), 7),
      leaseCommand({ ...L1, expiration: at(90) }, L1, 8),
      leaseCommand(lease(P2, 99, 300), L1, 9),
      leaseCommand(lease(P1, 50, 300), L1, 10),
    ]);
    assert.deepEqual(
      results.map((x) => (x.kind === 'LEASE_REJECTED' ? x.reason : x.kind)),
      ['replaces-not-current', 'replaces-not-current', 'not-an-extension', 'overlaps-current', 'overlaps-current'],
    );
    assert.deepEqual(r.sm.currentLease(), L1);
    assert.equal(r.sm.appliedIndex(), 6);
  });

  it("design-review #4: a deposed leader's renewal committed before the new lease wins; the new lease is a no-op", () => {
    // L1 = {P1, [10, 100)}; X extends it to 200 (proposed by P1, committed later by P2); P2's L2 = [100, 300) named L1.
    const r = testReplica();
    const log = new LogBuilder();
    applyAll(r, log, [leaseCommand(L1, null, 5)]);
    const X = leaseCommand({ ...L1, expiration: at(200) }, L1, 90);
    const L2 = leaseCommand(lease(P2, 100, 300), L1, 95);
    const results = applyAll(r, log, [X, L2]);
    assert.deepEqual(kinds(results), ['LEASE_APPLIED', 'LEASE_REJECTED']);
    assert.deepEqual(r.sm.currentLease(), { ...L1, expiration: at(200) });
    // No two leases overlap: P2 gets a lease only from the extended expiration on.
    const [retry] = applyAll(r, log, [leaseCommand(lease(P2, 200, 400), r.sm.currentLease(), 96)]);
    assert.equal(retry?.kind, 'LEASE_APPLIED');
  });
});

describe('rule 4: data commands apply only under the current lease, in sequence', () => {
  it('a data command whose token is not the current lease is a no-op answered PRIMARY_MISS with the holder', () => {
    const r = testReplica();
    const log = new LogBuilder();
    const L2 = lease(P2, 100, 300);
    applyAll(r, log, [leaseCommand(L1, null, 5), leaseCommand(L2, L1, 50)]);
    const [miss] = applyAll(r, log, [update(L1, 1, put('k', 1), 60)]);
    assert.equal(miss?.kind, 'PRIMARY_MISS');
    assert.ok(miss?.kind === 'PRIMARY_MISS' && miss.reason === 'token-not-current');
    assert.deepEqual(miss.current, L2);
    assert.equal(r.engine.mvPartition(PARTITION).rowIdOf('k'), undefined, 'no row, not even an empty one');
    assert.equal(r.map.get(txIdAt(1)), undefined, 'no map entry for a no-op');
  });

  it('a data command without any lease applied is a no-op', () => {
    const r = testReplica();
    const [miss] = applyAll(r, new LogBuilder(), [update(L1, 1, put('k', 1), 20)]);
    assert.ok(miss?.kind === 'PRIMARY_MISS' && miss.reason === 'token-not-current' && miss.current === null);
  });

  it('a sequence number not above the last one applied under the lease is a no-op', () => {
    const r = testReplica();
    const log = new LogBuilder();
    const results = applyAll(r, log, [
      leaseCommand(L1, null, 5),
      update(L1, 1, put('a', 1), 20, { full: true }),
      update(L1, 3, put('b', 1), 21, { full: true }),
      update(L1, 2, put('c', 1), 22, { full: true }),
      update(L1, 3, put('d', 1), 23, { full: true }),
    ]);
    assert.deepEqual(kinds(results), ['LEASE_APPLIED', 'UPDATED', 'UPDATED', 'PRIMARY_MISS', 'PRIMARY_MISS']);
    assert.ok(results[3]?.kind === 'PRIMARY_MISS' && results[3].reason === 'stale-sequence');
    assert.equal(latest(r, 'c'), undefined);
    assert.equal(r.sm.leaseState().lastSeq, 3);
  });

  it('an extension keeps the sequence; a new lease of the same holder restarts it', () => {
    const r = testReplica();
    const log = new LogBuilder();
    const extended = { ...L1, expiration: at(150) };
    const renewed = lease(P1, 150, 300);
    const results = applyAll(r, log, [
      leaseCommand(L1, null, 5),
      update(L1, 5, put('a', 1), 20, { full: true }),
      leaseCommand(extended, L1, 30),
      update(L1, 5, put('b', 1), 31, { full: true }),
      leaseCommand(renewed, extended, 40),
      update(renewed, 1, put('c', 1), 160, { full: true }),
    ]);
    assert.deepEqual(kinds(results), [
      'LEASE_APPLIED',
      'UPDATED',
      'LEASE_APPLIED',
      'PRIMARY_MISS',
      'LEASE_APPLIED',
      'UPDATED',
    ]);
  });

  it('a data command whose effective timestamp reaches the lease expiration is a no-op (outside the lease)', () => {
    const r = testReplica();
    const log = new LogBuilder();
    applyAll(r, log, [leaseCommand(L1, null, 5), safeTimeSync(100)]);
    const [miss] = applyAll(r, log, [update(L1, 1, put('k', 1), 90, { full: true })]);
    assert.ok(miss?.kind === 'PRIMARY_MISS' && miss.reason === 'lease-expired');
    assert.equal(latest(r, 'k'), undefined);
  });

  it("design-review #3: a stale primary's one-phase write landing after the lease changed is not applied", () => {
    // P1 holds [10, 100) and proposes C = put(k, 5) at 95; L2 = {P2, [100, 300)} commits first; T3 at P2 writes k
    // and commits at 120; then C lands. C must not apply above T3's write.
    const r = testReplica();
    const log = new LogBuilder();
    const L2 = lease(P2, 100, 300);
    const t3 = txIdAt(100, 3);
    applyAll(r, log, [
      leaseCommand(L1, null, 5),
      update(L1, 1, put('k', 0), 20, { full: true }),
      leaseCommand(L2, L1, 60),
      update(L2, 1, put('k', 1), 110, { txId: t3 }),
      switchIntents(t3, { commitTs: at(120) }, 121),
    ]);
    const [c] = applyAll(r, log, [update(L1, 2, put('k', 5), 95, { full: true })]);
    assert.equal(c?.kind, 'PRIMARY_MISS');
    assert.deepEqual(latest(r, 'k'), { kind: 'committed', value: 1, commitTs: at(120) });
  });
});

describe('data commands', () => {
  it('Update and UpdateAll write intents and set the map PENDING with the coordinator (update-applied)', () => {
    const r = testReplica();
    const events: TxStateMapEvent[] = [];
    r.map.observe((e) => events.push(e));
    const log = new LogBuilder();
    const t = txIdAt(10);
    const results = applyAll(r, log, [
      leaseCommand(L1, null, 5),
      update(L1, 1, put('a', { n: 1 }), 20, { txId: t }),
      updateAll(L1, 2, [put('b', 'x'), remove('c')], 21, { txId: t }),
    ]);
    assert.deepEqual(kinds(results), ['LEASE_APPLIED', 'UPDATED', 'UPDATED']);
    const a = latest(r, 'a');
    assert.ok(a?.kind === 'intent' && a.txId === t && a.commitPartitionId === PARTITION);
    assert.deepEqual(a.value, { n: 1 });
    const c = latest(r, 'c');
    assert.ok(c?.kind === 'intent' && c.value === TOMBSTONE);
    assert.equal(r.engine.mvPartition(PARTITION).rowsWrittenBy(t).length, 3);
    assert.deepEqual(r.map.get(t), { state: 'PENDING', coordinatorId: COORDINATOR });
    assert.deepEqual(
      events.map((e) => (e.kind === 'update' ? `${e.reason}:${e.to}:${e.outcome}` : e.kind)),
      ['update-applied:PENDING:applied', 'update-applied:PENDING:applied'],
    );
  });

  it('a one-phase write commits directly at the effective timestamp and leaves no map entry', () => {
    const r = testReplica();
    const log = new LogBuilder();
    const t = txIdAt(10);
    const [, u] = applyAll(r, log, [
      leaseCommand(L1, null, 5),
      updateAll(L1, 1, [put('a', 1), remove('b')], 20, { txId: t, full: true }),
    ]);
    assert.deepEqual(latest(r, 'a'), { kind: 'committed', value: 1, commitTs: u?.appliedTs });
    assert.deepEqual(latest(r, 'b'), { kind: 'committed', value: TOMBSTONE, commitTs: u?.appliedTs });
    assert.equal(r.map.get(t), undefined);
    assert.equal(r.map.size, 0);
  });

  it("a write over another tx's intent applies nothing of the command (WRITE_INTENT_CONFLICT)", () => {
    const r = testReplica();
    const log = new LogBuilder();
    const t1 = txIdAt(10, 1);
    const t2 = txIdAt(11, 2);
    applyAll(r, log, [leaseCommand(L1, null, 5), update(L1, 1, put('b', 'mine'), 20, { txId: t1 })]);
    const results = applyAll(r, log, [
      updateAll(L1, 2, [put('a', 'x'), put('b', 'y')], 21, { txId: t2 }),
      update(L1, 3, put('b', 'z'), 22, { txId: t2, full: true }),
      update(L1, 4, put('b', 'again'), 23, { txId: t1 }),
    ]);
    assert.deepEqual(kinds(results), ['WRITE_INTENT_CONFLICT', 'WRITE_INTENT_CONFLICT', 'UPDATED']);
    assert.ok(results[0]?.kind === 'WRITE_INTENT_CONFLICT' && results[0].key === 'b' && results[0].intentTxId === t1);
    assert.equal(latest(r, 'a'), undefined, 'the first key of the conflicting UpdateAll was not written');
    assert.equal(r.map.get(t2), undefined);
    const b = latest(r, 'b');
    assert.ok(b?.kind === 'intent' && b.value === 'again', 'a tx may replace its own intent');
  });
});

describe('write-intent switch (cleanup)', () => {
  it('commit turns every intent of the tx into a version at commitTs; the map goes COMMITTED (cleanup-applied)', () => {
    const r = testReplica();
    const events: TxStateMapEvent[] = [];
    r.map.observe((e) => events.push(e));
    const log = new LogBuilder();
    const t = txIdAt(10);
    const other = txIdAt(10, 2);
    const results = applyAll(r, log, [
      leaseCommand(L1, null, 5),
      updateAll(L1, 1, [put('a', 1), put('b', 2)], 20, { txId: t }),
      update(L1, 2, put('c', 3), 21, { txId: other }),
      switchIntents(t, { commitTs: at(40) }, 41),
    ]);
    assert.deepEqual(results[3], { kind: 'SWITCHED', appliedTs: at(41), rows: 2 });
    assert.deepEqual(latest(r, 'a'), { kind: 'committed', value: 1, commitTs: at(40) });
    assert.deepEqual(latest(r, 'b'), { kind: 'committed', value: 2, commitTs: at(40) });
    assert.equal(latest(r, 'c')?.kind, 'intent', "another tx's intent is untouched");
    assert.deepEqual(r.map.get(t), { state: 'COMMITTED', coordinatorId: COORDINATOR, commitTimestamp: at(40) });
    const last = events.at(-1);
    assert.ok(last?.kind === 'update' && last.reason === 'cleanup-applied' && last.to === 'COMMITTED');
  });

  it('abort removes the intents (rows without versions vanish) and the map goes ABORTED; a repeat is harmless', () => {
    const r = testReplica();
    const log = new LogBuilder();
    const t = txIdAt(10);
    applyAll(r, log, [
      leaseCommand(L1, null, 5),
      update(L1, 1, put('a', 0), 15, { full: true }),
      updateAll(L1, 2, [put('a', 1), put('new', 2)], 20, { txId: t }),
    ]);
    const results = applyAll(r, log, [switchIntents(t, 'abort', 30), switchIntents(t, 'abort', 31)]);
    assert.deepEqual(
      results.map((x) => (x.kind === 'SWITCHED' ? x.rows : -1)),
      [2, 0],
    );
    assert.equal(latest(r, 'a')?.kind, 'committed');
    assert.equal(latest(r, 'new'), undefined);
    assert.equal(r.map.get(t)?.state, 'ABORTED');
  });
});

describe('parallel commit: FinishTx with a committing record', () => {
  const inflight = [{ partitionId: PARTITION, keys: ['a'] }];

  it('stores the record instead of an outcome; a finish without `settled` then changes nothing; a settled one stores the outcome at the record commitTs and switches the intents', () => {
    const r = testReplica();
    const t = txIdAt(10);
    const log = new LogBuilder();
    const staging = { ...finish(t, { commitTs: at(40) }, 41), committing: { inflight } };
    const [staged, abort, commitOther] = applyAll(r, log, [
      leaseCommand(L1, null, 5),
      update(L1, 1, put('a', 1), 20, { txId: t }),
      staging,
      finish(t, 'abort', 42),
      { ...finish(t, { commitTs: at(60) }, 61) },
    ]).slice(2);
    assert.deepEqual(staged, { kind: 'COMMITTING', appliedTs: at(41), commitTs: at(40), stored: true });
    assert.deepEqual(abort, { kind: 'COMMITTING', appliedTs: at(42), commitTs: at(40), stored: false });
    assert.equal(commitOther?.kind, 'COMMITTING', 'an unsettled commit changes nothing either');
    const storage = r.engine.txStatePartition(PARTITION);
    assert.equal(storage.get(t), undefined);
    assert.equal(storage.committing(t)?.commitTs, at(40));
    assert.equal(latest(r, 'a')?.kind, 'intent');
    const settled = { ...finish(t, { commitTs: at(40) }, 70), settled: true, switchIntents: true };
    const [result] = applyAll(r, log, [settled]);
    assert.deepEqual(result, {
      kind: 'FINISHED',
      appliedTs: at(70),
      outcome: { state: 'COMMITTED', commitTs: at(40) },
      stored: true,
      mismatch: false,
    });
    assert.equal(storage.committing(t), undefined);
    assert.deepEqual(latest(r, 'a'), { kind: 'committed', value: 1, commitTs: at(40) });
  });

  it('a settled abort stores ABORTED and removes the intents', () => {
    const r = testReplica();
    const t = txIdAt(10);
    const results = applyAll(r, new LogBuilder(), [
      leaseCommand(L1, null, 5),
      update(L1, 1, put('a', 1), 20, { txId: t }),
      { ...finish(t, { commitTs: at(40) }, 41), committing: { inflight } },
      { ...finish(t, 'abort', 50), settled: true, switchIntents: true },
    ]);
    assert.ok(results[3]?.kind === 'FINISHED' && results[3].outcome.state === 'ABORTED');
    assert.equal(r.engine.txStatePartition(PARTITION).get(t)?.state, 'ABORTED');
    assert.notEqual(latest(r, 'a')?.kind, 'intent');
  });

  it('a committing record survives the vacuum horizon: a finish of a tx below it still meets the record, not TX_OUTCOME_UNKNOWN', () => {
    const r = testReplica();
    const t = txIdAt(10);
    const log = new LogBuilder();
    applyAll(r, log, [{ ...finish(t, { commitTs: at(40) }, 41), committing: { inflight } }]);
    r.engine.txStatePartition(PARTITION).setVacuumHorizon(at(1_000_000_000));
    const [result] = applyAll(r, log, [finish(t, 'abort', 50)]);
    assert.equal(result?.kind, 'COMMITTING');
  });
});

describe('a tx write applies at its proposal timestamp or not at all', () => {
  it('a tx write behind an entry with a higher timestamp is a no-op (timestamp-moved); a one-phase write takes the next timestamp', () => {
    const r = testReplica();
    const t = txIdAt(10);
    const results = applyAll(r, new LogBuilder(), [
      leaseCommand(L1, null, 5),
      safeTimeSync(40),
      update(L1, 1, put('k', 1), 30, { txId: t }),
      update(L1, 2, put('j', 1), 31, { full: true }),
    ]);
    assert.ok(results[2]?.kind === 'PRIMARY_MISS' && results[2].reason === 'timestamp-moved');
    assert.equal(latest(r, 'k'), undefined, 'nothing written');
    assert.equal(r.map.get(t), undefined, 'no map entry for a no-op');
    assert.ok(results[3]?.kind === 'UPDATED' && results[3].appliedTs > at(40));
  });
});

describe('rule 14: FinishTx', () => {
  it('the first finish is stored; the map on every replica is set final from the stored outcome (finish-applied)', () => {
    const r = testReplica();
    const events: TxStateMapEvent[] = [];
    r.map.observe((e) => events.push(e));
    const t = txIdAt(10);
    const [result] = applyAll(r, new LogBuilder(), [finish(t, { commitTs: at(50) }, 51)]);
    assert.deepEqual(result, {
      kind: 'FINISHED',
      appliedTs: at(51),
      outcome: { state: 'COMMITTED', commitTs: at(50) },
      stored: true,
      mismatch: false,
    });
    assert.equal(r.engine.txStatePartition(PARTITION).get(t)?.state, 'COMMITTED');
    const entry = r.map.entry(t);
    assert.ok(entry !== undefined && entry.state === 'COMMITTED' && entry.commitTimestamp === at(50));
    assert.equal(entry.commitPartitionId, PARTITION);
    assert.equal(entry.retainUntilCleanup, true);
    const last = events.at(-1);
    assert.ok(last?.kind === 'update' && last.reason === 'finish-applied');
  });

  it('a late conflicting finish gets the mismatch and the real outcome, and never changes the stored one', () => {
    const r = testReplica();
    const t = txIdAt(10);
    const results = applyAll(r, new LogBuilder(), [finish(t, 'abort', 40), finish(t, { commitTs: at(50) }, 51)]);
    assert.deepEqual(results[1], {
      kind: 'FINISHED',
      appliedTs: at(51),
      outcome: { state: 'ABORTED', commitTs: undefined },
      stored: false,
      mismatch: true,
    });
    assert.equal(r.engine.txStatePartition(PARTITION).get(t)?.state, 'ABORTED');
    assert.equal(r.map.get(t)?.state, 'ABORTED');
  });

  it('design-review #12b: a replica with an empty map (restored, restarted) caches the stored outcome, not the command', () => {
    const engine = new MemoryStorageEngine();
    const t = txIdAt(10);
    const log = new LogBuilder();
    applyAll(testReplica({ engine }), log, [finish(t, 'abort', 40)]);
    const fresh = testReplica({ engine });
    assert.equal(fresh.map.get(t), undefined);
    const [result] = applyAll(fresh, log, [finish(t, { commitTs: at(50) }, 51)]);
    assert.ok(result?.kind === 'FINISHED' && result.mismatch);
    assert.equal(fresh.map.get(t)?.state, 'ABORTED');
  });

  it('an identical repeated finish is not a mismatch', () => {
    const r = testReplica();
    const t = txIdAt(10);
    const results = applyAll(r, new LogBuilder(), [
      finish(t, { commitTs: at(50) }, 51),
      finish(t, { commitTs: at(50) }, 52),
    ]);
    assert.ok(results[1]?.kind === 'FINISHED' && !results[1].stored && !results[1].mismatch);
  });
});

describe('rule 15: vacuum horizon', () => {
  const TIMEOUT_MS = 1_000;
  const RETENTION_MS = 500;
  const opts = { txTimeoutMs: TIMEOUT_MS, txStateRetentionMs: RETENTION_MS, maxClockSkewMs: 10 } as const;

  function vacuum(txIds: readonly ReturnType<typeof txIdAt>[], tsMs: number): PartitionCommand {
    return {
      kind: 'VacuumTxStates',
      ts: at(tsMs),
      proposalId: { nodeId: 'x' as never, incarnation: 'x', counter: tsMs },
      txIds,
    };
  }
  function cleanupCompleted(txIds: readonly ReturnType<typeof txIdAt>[], tsMs: number): PartitionCommand {
    return {
      kind: 'TxCleanupCompleted',
      ts: at(tsMs),
      proposalId: { nodeId: 'x' as never, incarnation: 'x', counter: tsMs },
      txIds,
    };
  }

  it('vacuum removes only records whose cleanup completed and whose deadline is old enough, raising the horizon', () => {
    const r = testReplica(opts);
    const log = new LogBuilder();
    const old = txIdAt(100, 1);
    const notCleaned = txIdAt(100, 2);
    const recent = txIdAt(5_000, 3);
    applyAll(r, log, [
      finish(old, 'abort', 200),
      finish(notCleaned, { commitTs: at(300) }, 301),
      finish(recent, 'abort', 5_001),
      cleanupCompleted([old, recent], 5_002),
    ]);
    // now = 6_000: limit = 6_000 − 10 − 500 = 5_490. D(old) = 1_100 < limit; D(recent) = 6_000 is not.
    const [result] = applyAll(r, log, [vacuum([old, notCleaned, recent], 6_000)]);
    assert.deepEqual(result, {
      kind: 'VACUUMED',
      appliedTs: at(6_000),
      removed: [old],
      horizon: txDeadline(old, TIMEOUT_MS),
    });
    const storage = r.engine.txStatePartition(PARTITION);
    assert.equal(storage.get(old), undefined);
    assert.notEqual(storage.get(notCleaned), undefined);
    assert.notEqual(storage.get(recent), undefined);
    assert.equal(storage.vacuumHorizon(), txDeadline(old, TIMEOUT_MS));
  });

  it('a finish for a tx at or below the horizon with no record is not applied: TX_OUTCOME_UNKNOWN', () => {
    const r = testReplica(opts);
    const log = new LogBuilder();
    const old = txIdAt(100, 1);
    applyAll(r, log, [finish(old, 'abort', 200), cleanupCompleted([old], 201), vacuum([old], 6_000)]);
    // design-review #8: a late commit from a partitioned coordinator must not reopen the compare-and-set.
    const [late] = applyAll(r, log, [finish(old, { commitTs: at(150) }, 6_001)]);
    assert.deepEqual(late, { kind: 'TX_OUTCOME_UNKNOWN', appliedTs: at(6_001) });
    assert.equal(r.engine.txStatePartition(PARTITION).get(old), undefined);
    // Another tx below the horizon that never had a record is refused too.
    const [other] = applyAll(r, log, [finish(txIdAt(50, 9), 'abort', 6_002)]);
    assert.equal(other?.kind, 'TX_OUTCOME_UNKNOWN');
  });

  it('a finish below the horizon whose record still exists answers the stored outcome', () => {
    const r = testReplica(opts);
    const log = new LogBuilder();
    const a = txIdAt(100, 1);
    const b = txIdAt(90, 2);
    applyAll(r, log, [
      finish(a, 'abort', 200),
      finish(b, 'abort', 201),
      cleanupCompleted([a], 202),
      vacuum([a], 6_000),
    ]);
    assert.ok(txDeadline(b, TIMEOUT_MS) <= r.engine.txStatePartition(PARTITION).vacuumHorizon());
    const [result] = applyAll(r, log, [finish(b, { commitTs: at(150) }, 6_001)]);
    assert.ok(result?.kind === 'FINISHED' && result.outcome.state === 'ABORTED' && result.mismatch);
  });

  it('TxCleanupCompleted marks durable records and starts the map retention', () => {
    const r = testReplica(opts);
    const t = txIdAt(100);
    const results = applyAll(r, new LogBuilder(), [finish(t, 'abort', 200), cleanupCompleted([t, txIdAt(1, 7)], 201)]);
    assert.deepEqual(results[1], { kind: 'CLEANUP_MARKED', appliedTs: at(201), marked: 1 });
    assert.equal(r.engine.txStatePartition(PARTITION).get(t)?.cleanupCompleted, true);
    assert.equal(r.map.entry(t)?.cleanupCompleted, true);
    assert.notEqual(r.map.entry(t)?.retentionFromMs, undefined);
  });
});

describe('apply results reach the proposer (rule 4: answer from the apply result)', () => {
  it("a command this replica proposed settles its proposal with the apply result; others' commands do not", async () => {
    const r = testReplica({ self: P1 });
    const log = new LogBuilder();
    applyAll(r, log, [leaseCommand(L1, null, 5)]);
    let submitted: Uint8Array | undefined;
    const pending = proposeCommand(
      r.tracker,
      (p) => ({ ...update(L1, 1, put('k', 1), 0, { full: true }), ts: p.ts, proposalId: p.id }),
      async (bytes) => {
        await Promise.resolve();
        submitted = bytes;
        // The driver resolves after the apply; the apply itself hands over the result.
        r.sm.apply([{ term: 1 as Term, index: 2 as LogIndex, kind: 'data', data: bytes }]);
      },
    );
    assert.equal(r.tracker.inFlightCount, 1);
    const result = await pending;
    assert.ok(submitted !== undefined);
    assert.equal(result.kind, 'UPDATED');
    assert.equal(r.tracker.inFlightCount, 0);
  });

  it('a proposal overwritten by another leader is abandoned with the driver error and leaves the in-flight set', async () => {
    const r = testReplica({ self: P1 });
    const pending = proposeCommand(
      r.tracker,
      (p) => ({ kind: 'SafeTimeSync', ts: p.ts, proposalId: p.id }),
      () => Promise.reject(new BasaltError('NOT_LEADER', 'the proposal was overwritten by a new leader')),
    );
    assert.equal(r.tracker.inFlightCount, 1);
    await assert.rejects(pending, (e: unknown) => isBasaltError(e, 'NOT_LEADER'));
    assert.equal(r.tracker.inFlightCount, 0);
  });

  it('a stale primary learns PRIMARY_MISS from the apply result of its own proposal', async () => {
    const r = testReplica({ self: P1 });
    const log = new LogBuilder();
    applyAll(r, log, [leaseCommand(L1, null, 5), leaseCommand(lease(P2, 100, 300), L1, 6)]);
    const result = await proposeCommand(
      r.tracker,
      (p) => ({ ...update(L1, 1, put('k', 1), 0, { full: true }), ts: p.ts, proposalId: p.id }),
      async (bytes) => r.sm.apply([{ term: 1 as Term, index: 3 as LogIndex, kind: 'data', data: bytes }]),
    );
    assert.equal(result.kind, 'PRIMARY_MISS');
  });
});

describe('safe time and visibility', () => {
  it('a safe-time waiter runs after the applied state is visible to reads, with the map already updated', () => {
    const r = testReplica();
    const log = new LogBuilder();
    applyAll(r, log, [leaseCommand(L1, null, 5)]);
    const t = txIdAt(10);
    let seen: unknown;
    const wait = r.sm.safeTime.waitFor(at(20), () => {
      seen = { row: latest(r, 'k')?.kind, map: r.map.get(t)?.state, ts: r.sm.lastAppliedTs() };
    });
    assert.equal(wait.kind, 'waiting');
    applyAll(r, log, [update(L1, 1, put('k', 1), 20, { txId: t })]);
    assert.deepEqual(seen, { row: 'intent', map: 'PENDING', ts: at(20) });
  });
});

describe('entries that are not commands', () => {
  it('a Raft configuration change applies as a no-op that advances the applied index', () => {
    const r = testReplica();
    const log = new LogBuilder();
    const first = log.data(safeTimeSync(30));
    const data = encodeConfChange({ type: 'add-learner', node: 'n4' as NodeName });
    const change = { ...log.noop(), kind: 'conf' as const, data };
    r.sm.apply([first, change]);
    assert.equal(r.sm.appliedIndex(), 2);
  });
});

describe('failures are loud', () => {
  it('a malformed entry fails the apply before anything of the batch is written', () => {
    const r = testReplica();
    const log = new LogBuilder();
    const good = log.data(safeTimeSync(30));
    const bad = { ...log.data(safeTimeSync(31)), data: encode({ kind: 'Update', ts: at(1) }) };
    assert.throws(
      () => r.sm.apply([good, bad]),
      (e: unknown) => isBasaltError(e, 'INTERNAL'),
    );
    assert.equal(r.sm.appliedIndex(), 0);
    assert.deepEqual(r.engine.mvPartition(PARTITION).lastApplied(), { index: 0, term: 0 });
  });
});

describe('rule 3: the lease and lastAppliedTs are part of snapshots', () => {
  it('restore reproduces data, tx state, lease, sequence and applied position; apply continues from there', () => {
    const source = testReplica();
    const log = new LogBuilder();
    const t = txIdAt(10);
    applyAll(source, log, [
      leaseCommand(L1, null, 5),
      update(L1, 1, put('a', 1), 20, { txId: t }),
      update(L1, 2, put('b', 2), 21, { full: true }),
      finish(t, { commitTs: at(30) }, 31),
    ]);
    const target = testReplica();
    applyAll(target, new LogBuilder(), [safeTimeSync(1)]);
    const waiter: HybridTimestamp[] = [];
    target.sm.safeTime.waitFor(at(31), () => waiter.push(target.sm.lastAppliedTs()));
    target.sm.restore({ index: 4 as LogIndex, term: 1 as Term, data: source.sm.snapshot() });
    assert.deepEqual(target.sm.currentLease(), L1);
    assert.equal(target.sm.leaseState().lastSeq, 2);
    assert.equal(target.sm.lastAppliedTs(), at(31));
    assert.equal(target.sm.appliedIndex(), 4);
    assert.deepEqual(waiter, [at(31)]);
    assertSameBytes(target.sm.snapshot(), source.sm.snapshot());
    assert.equal(target.engine.txStatePartition(PARTITION).get(t)?.state, 'COMMITTED');
    assert.ok(target.clock.current() > at(31));
    const [next] = applyAll(target, log, [update(L1, 2, put('c', 1), 25, { full: true })]);
    assert.ok(next?.kind === 'PRIMARY_MISS' && next.reason === 'stale-sequence', 'the sequence survived');
    assert.equal(next.appliedTs, at(31, 1));
  });

  it('a snapshot whose data does not match its index, or that is not a replica snapshot, is refused', () => {
    const source = testReplica();
    applyAll(source, new LogBuilder(), [safeTimeSync(10)]);
    const target = testReplica();
    assert.throws(() => target.sm.restore({ index: 7 as LogIndex, term: 1 as Term, data: source.sm.snapshot() }));
    assert.throws(
      () => target.sm.restore({ index: 1 as LogIndex, term: 1 as Term, data: encode(['nope']) }),
      (e: unknown) => isBasaltError(e, 'STORAGE_CORRUPTED'),
    );
  });
});

describe('a lease token is (holder, start)', () => {
  it('tokenOf ignores the expiration, so an extension keeps data commands valid', () => {
    assert.deepEqual(tokenOf({ ...L1, expiration: addMs(L1.expiration, 5) }), tokenOf(L1));
  });
});
