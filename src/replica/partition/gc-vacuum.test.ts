/**
 * Storage GC, the replica's low-watermark check and tx state vacuum on one replica whose Raft group is reduced to
 * "apply at once" (every proposal is applied as the next log entry inside submit), on the simulator's virtual time.
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isBasaltError } from '../../core/errors.js';
import type { HybridTimestamp, LogIndex, NodeId, NodeName, PartitionId, Term, TxId } from '../../core/ids.js';
import { HybridClock } from '../../hlc/hybrid-clock.js';
import { addMs } from '../../hlc/timestamp.js';
import { SimClock } from '../../sim/clock.js';
import { SeededRandom } from '../../sim/random.js';
import { Scheduler } from '../../sim/scheduler.js';
import type { Value } from '../../storage/mv-partition-storage.js';
import { MemoryStorageEngine } from '../../storage/storage-engine.js';
import { LocalIntentResolver } from '../../testing/local-intent-resolver.js';
import { beginReadOnly, ReadOnlyCoordinator } from '../../tx/coordinator/read-only.js';
import { LowWatermark } from '../../tx/core/low-watermark.js';
import type { ReadOnlyRequest, TxRequestFn } from '../../tx/core/messages.js';
import { makeTxId, txDeadline } from '../../tx/core/tx-id.js';
import { TxStateMap } from '../../tx/core/tx-state-map.js';
import { handleReadOnly } from '../handlers/read-only.js';
import { StorageGcDriver } from './gc.js';
import { type Lease, tokenOf } from './lease.js';
import { localReplicaView } from './local-view.js';
import { PartitionReplica } from './partition-replica.js';
import { leaseTiming } from './primary.js';
import { TxStateVacuumDriver, vacuumPartitionOf } from './vacuum.js';

const P = 't1p0' as PartitionId;
const SKEW_MS = 20;
const TX_TIMEOUT_MS = 1_000;
const RETENTION_MS = 2_000;
const COORDINATOR = 'c1' as NodeId;

async function setup(seed: string, watermarkRetentionMs = 1_000, withLease = true) {
  const scheduler = new Scheduler({ seed });
  const physical = new SimClock(scheduler);
  const clock = new HybridClock(physical, { maxClockSkewMs: SKEW_MS });
  const engine = new MemoryStorageEngine();
  const map = new TxStateMap({ clock: physical });
  let index = 0;
  const replica: PartitionReplica = new PartitionReplica({
    partitionId: P,
    nodeId: 'n1-id' as NodeId,
    nodeName: 'n1' as NodeName,
    random: new SeededRandom(seed),
    physicalClock: physical,
    clock,
    engine,
    txStateMap: map,
    submit: async (bytes) => {
      index += 1;
      replica.stateMachine.apply([{ term: 1 as Term, index: index as LogIndex, kind: 'data', data: bytes }]);
    },
    timing: leaseTiming(SKEW_MS, 24 * 3_600_000, 1_000),
    txTimeoutMs: TX_TIMEOUT_MS,
    txStateRetentionMs: RETENTION_MS,
    timers: scheduler.timers('n1'),
  });
  const start = clock.now();
  const lease: Lease = {
    holder: replica.self,
    holderName: 'n1' as NodeName,
    start,
    expiration: addMs(start, 24 * 3_600_000),
  };
  if (withLease) {
    const granted = await replica.propose((p) => ({
      kind: 'Lease',
      ts: p.ts,
      proposalId: p.id,
      lease,
      replaces: null,
    }));
    assert.equal(granted.kind, 'LEASE_APPLIED');
  } else {
    await replica.propose((p) => ({ kind: 'SafeTimeSync', ts: p.ts, proposalId: p.id }));
  }
  const watermark = new LowWatermark({ clock, retentionMs: watermarkRetentionMs });
  let counter = 0;

  function newTxId(timeoutMs?: number): TxId {
    counter += 1;
    const parts = { beginTimestamp: clock.now(), nodeId: COORDINATOR, counter };
    return makeTxId(timeoutMs === undefined ? parts : { ...parts, timeoutMs });
  }

  /** A one-phase write: a committed version at the command's effective timestamp. */
  async function write(key: string, value: Value): Promise<HybridTimestamp> {
    const result = await replica.proposeData({
      token: tokenOf(lease),
      txId: newTxId(),
      coordinatorId: COORDINATOR,
      commitPartitionId: P,
      full: true,
      writes: [{ kind: 'put', key, value }],
    });
    assert.equal(result.kind, 'UPDATED');
    return result.appliedTs;
  }

  async function read(key: string, readTs: HybridTimestamp): Promise<Value | undefined> {
    const request: ReadOnlyRequest = {
      kind: 'ReadOnlyRequest',
      partitionId: P,
      coordinatorId: COORDINATOR,
      readTs,
      operation: { op: 'get', key },
    };
    const response = await handleReadOnly(replica, request, {
      resolver: new LocalIntentResolver(map),
      lowWatermark: () => watermark.current(),
    });
    assert.equal(response.result.op, 'get');
    return response.result.op === 'get' && response.result.value.found ? response.result.value.value : undefined;
  }

  /** The durable finish of `txId` on this commit partition, then (optionally) its cleanup-completed mark. */
  async function finish(txId: TxId, cleaned: boolean) {
    const commitTs = clock.now();
    const result = await replica.propose((p) => ({
      kind: 'FinishTx',
      ts: p.ts,
      proposalId: p.id,
      txId,
      commit: true,
      commitTs,
      enlistedPartitions: [P],
    }));
    if (cleaned) await markCleaned(txId);
    return result;
  }

  async function markCleaned(txId: TxId): Promise<void> {
    const marked = await replica.propose((p) => ({
      kind: 'TxCleanupCompleted',
      ts: p.ts,
      proposalId: p.id,
      txIds: [txId],
    }));
    assert.equal(marked.kind, 'CLEANUP_MARKED');
  }

  const advance = (ms: number) => scheduler.run({ forMs: ms });
  return { scheduler, physical, clock, engine, map, replica, watermark, newTxId, write, read, finish, advance };
}

describe('storage GC driver and the RO watermark check (rule 10)', () => {
  it('GC removes old versions but keeps what an open RO tx can read; then the old readTs is TX_READ_ONLY_TOO_OLD', async () => {
    const s = await setup('gc-keeps-open-ro');
    await s.write('k', 'v0');
    await s.advance(100);
    const t1 = await s.write('k', 'v1');
    await s.advance(100);
    await s.write('k', 'v2');
    await s.advance(100);
    await s.write('k', 'v3');
    const hold = s.watermark.register(t1);
    const gc = new StorageGcDriver({
      timers: s.scheduler.timers('gc'),
      partitions: () => [s.replica.mv],
      lowWatermark: () => s.watermark.current(),
    });
    await s.advance(10_000);
    const held = gc.runRound();
    assert.equal(held.watermark, t1, 'the open RO tx holds the watermark at its readTs');
    assert.equal(held.versionsRemoved, 1, 'only v0, older than the newest version at or below the watermark');
    assert.equal(await s.read('k', t1), 'v1', 'the open RO tx still reads its snapshot');
    hold.release();
    gc.start();
    await s.advance(gc.intervalMs + 1);
    gc.stop();
    assert.equal(gc.versionsRemoved, 3, 'after release, v1 and v2 go too (v3 is the newest)');
    await assert.rejects(s.read('k', t1), (e) => isBasaltError(e, 'TX_READ_ONLY_TOO_OLD'));
    assert.equal(await s.read('k', s.clock.now()), 'v3');
  });

  it('the replica refuses a read below the watermark with TX_READ_ONLY_TOO_OLD, even with GC never run', async () => {
    const s = await setup('replica-too-old');
    const t = await s.write('k', 'v');
    await s.advance(5_000);
    assert.ok(s.watermark.current() > t);
    await assert.rejects(s.read('k', t), (e) => isBasaltError(e, 'TX_READ_ONLY_TOO_OLD'));
    assert.equal(await s.read('k', s.watermark.current()), 'v');
  });

  it('a partition whose gc fails is reported and the others are still collected', async () => {
    const s = await setup('gc-failure');
    await s.write('k', 'a');
    await s.write('k', 'b');
    await s.advance(5_000);
    const errors: PartitionId[] = [];
    const broken = {
      partitionId: 't9p9' as PartitionId,
      gc: () => {
        throw new Error('destroyed');
      },
    };
    const gc = new StorageGcDriver({
      timers: s.scheduler.timers('gc'),
      partitions: () => [broken, s.replica.mv],
      lowWatermark: () => s.watermark.current(),
      onError: (_e, partitionId) => errors.push(partitionId),
    });
    const round = gc.runRound();
    assert.deepEqual(errors, ['t9p9']);
    assert.equal(round.versionsRemoved, 1);
  });
});

describe('tx state vacuum (rule 15)', () => {
  it('removes durable records only after cleanup completed and past D + maxClockSkew + retention, raising the horizon', async () => {
    const s = await setup('vacuum-rule-15');
    const driver = new TxStateVacuumDriver({
      timers: s.scheduler.timers('vacuum'),
      clock: s.clock,
      mapClock: s.physical,
      txStates: s.map,
      partitions: () => [vacuumPartitionOf(s.replica)],
      txTimeoutMs: TX_TIMEOUT_MS,
      retentionMs: RETENTION_MS,
      mapRetentionMs: 500,
    });
    const a = s.newTxId();
    const b = s.newTxId();
    await s.finish(a, true);
    await s.finish(b, false);
    await s.advance(1_000);
    const c = s.newTxId();
    await s.finish(c, true);
    const dA = txDeadline(a, TX_TIMEOUT_MS);
    const dC = txDeadline(c, TX_TIMEOUT_MS);

    // Just before D_A + skew + retention nothing goes.
    const dueA = Number((dA >> 16n) - (s.clock.now() >> 16n)) + SKEW_MS + RETENTION_MS;
    await s.advance(dueA - 2);
    assert.equal((await driver.runRound()).removed, 0);
    assert.notEqual(s.replica.txState.get(a), undefined);
    assert.equal(s.replica.txState.vacuumHorizon(), 0n);

    await s.advance(5);
    const round = await driver.runRound();
    assert.equal(round.removed, 1);
    assert.equal(s.replica.txState.get(a), undefined, 'A: cleaned and past its deadline + skew + retention');
    assert.notEqual(s.replica.txState.get(b), undefined, 'B: cleanup never completed, kept');
    assert.notEqual(s.replica.txState.get(c), undefined, 'C: too young');
    assert.equal(s.replica.txState.vacuumHorizon(), dA);

    // A finish of a tx at or below the horizon with no record left is not applied (rule 15).
    const late = await s.replica.propose((p) => ({
      kind: 'FinishTx',
      ts: p.ts,
      proposalId: p.id,
      txId: a,
      commit: false,
      commitTs: null,
      enlistedPartitions: [P],
    }));
    assert.equal(late.kind, 'TX_OUTCOME_UNKNOWN');

    await s.advance(1_100);
    await driver.runRound();
    assert.equal(s.replica.txState.get(c), undefined);
    assert.notEqual(s.replica.txState.get(b), undefined);
    assert.equal(s.replica.txState.vacuumHorizon(), dC);

    // The volatile map: cleaned-up entries went after their retention; B's waits for its cleanup.
    assert.equal(s.map.get(a), undefined);
    assert.equal(s.map.get(c), undefined);
    assert.equal(s.map.get(b)?.state, 'COMMITTED');
  });

  it('a long tx record stays until its own deadline, and younger short ones behind it still go', async () => {
    const s = await setup('vacuum-long-tx');
    const driver = new TxStateVacuumDriver({
      timers: s.scheduler.timers('vacuum'),
      clock: s.clock,
      mapClock: s.physical,
      txStates: s.map,
      partitions: () => [vacuumPartitionOf(s.replica)],
      txTimeoutMs: TX_TIMEOUT_MS,
      retentionMs: RETENTION_MS,
    });
    const long = s.newTxId(20 * TX_TIMEOUT_MS);
    await s.advance(10);
    const short = s.newTxId();
    await s.finish(long, true);
    await s.finish(short, true);
    const dLong = txDeadline(long, TX_TIMEOUT_MS);
    const dShort = txDeadline(short, TX_TIMEOUT_MS);
    assert.ok(dShort < dLong, 'the younger tx has the earlier deadline');

    await s.advance(TX_TIMEOUT_MS + SKEW_MS + RETENTION_MS + 100);
    assert.equal((await driver.runRound()).removed, 1);
    assert.notEqual(s.replica.txState.get(long), undefined, 'the long tx is kept: its own deadline is far ahead');
    assert.equal(s.replica.txState.get(short), undefined, 'the short one behind it in id order went');
    assert.equal(s.replica.txState.vacuumHorizon(), dShort);

    await s.advance(19 * TX_TIMEOUT_MS);
    assert.equal((await driver.runRound()).removed, 1);
    assert.equal(s.replica.txState.get(long), undefined, 'past its own deadline + skew + retention');
    assert.equal(s.replica.txState.vacuumHorizon(), dLong);
  });

  it('a scan cut short by scanMax resumes next round, so old records still waiting for cleanup never block vacuum', async () => {
    const s = await setup('vacuum-scan-resumes');
    const stuck = [s.newTxId(), s.newTxId(), s.newTxId(), s.newTxId(), s.newTxId()];
    for (const txId of stuck) await s.finish(txId, false);
    const cleaned = [s.newTxId(), s.newTxId()];
    for (const txId of cleaned) await s.finish(txId, true);
    await s.advance(10_000);
    const driver = new TxStateVacuumDriver({
      timers: s.scheduler.timers('vacuum'),
      clock: s.clock,
      mapClock: s.physical,
      txStates: s.map,
      partitions: () => [vacuumPartitionOf(s.replica)],
      txTimeoutMs: TX_TIMEOUT_MS,
      retentionMs: RETENTION_MS,
      scanMax: 3,
    });
    assert.equal((await driver.runRound()).removed, 0, 'the first 3 records all wait for their cleanup');
    assert.equal((await driver.runRound()).removed, 1, 'resumed after them: two stuck, then the first cleaned one');
    assert.equal((await driver.runRound()).removed, 1, 'resumed again: the second cleaned one');
    assert.equal((await driver.runRound()).removed, 0, 'started over from the oldest: nothing left to remove');
    assert.deepEqual(
      s.replica.txState.records(undefined).map((r) => r.txId),
      stuck,
    );
  });

  it('a replica that is not primary proposes nothing', async () => {
    const s = await setup('vacuum-not-primary');
    const a = s.newTxId();
    await s.finish(a, true);
    await s.advance(10_000);
    let proposals = 0;
    const target = { ...vacuumPartitionOf(s.replica), isPrimary: () => false };
    const driver = new TxStateVacuumDriver({
      timers: s.scheduler.timers('vacuum'),
      clock: s.clock,
      mapClock: s.physical,
      txStates: s.map,
      partitions: () => [
        {
          ...target,
          proposeVacuum: (ids) => {
            proposals += 1;
            return target.proposeVacuum(ids);
          },
        },
      ],
      txTimeoutMs: TX_TIMEOUT_MS,
      retentionMs: RETENTION_MS,
    });
    await driver.runRound();
    assert.equal(proposals, 0);
    assert.notEqual(s.replica.txState.get(a), undefined);
  });

  it('under a steady workload the tx state map and the durable records stay bounded', async () => {
    const s = await setup('vacuum-steady');
    const intervalMs = 200;
    const mapRetentionMs = 500;
    const driver = new TxStateVacuumDriver({
      timers: s.scheduler.timers('vacuum'),
      clock: s.clock,
      mapClock: s.physical,
      txStates: s.map,
      partitions: () => [vacuumPartitionOf(s.replica)],
      txTimeoutMs: TX_TIMEOUT_MS,
      retentionMs: RETENTION_MS,
      mapRetentionMs,
      intervalMs,
    });
    driver.start();
    const txs = 2_000;
    const gapMs = 20;
    let mapMax = 0;
    let recordsMax = 0;
    for (let i = 0; i < txs; i++) {
      await s.advance(gapMs);
      const txId = s.newTxId();
      // An enlisted partition's entry elsewhere on this node: PENDING on an update, final on cleanup.
      const other = s.newTxId();
      s.map.update(other, { state: 'PENDING', coordinatorId: COORDINATOR, reason: 'update-applied' });
      await s.finish(txId, true);
      s.map.update(other, { state: 'ABORTED', reason: 'cleanup-applied' });
      mapMax = Math.max(mapMax, s.map.size);
      recordsMax = Math.max(recordsMax, s.replica.txState.records(undefined).length);
    }
    driver.stop();
    const perSecond = 1_000 / gapMs;
    // Records live D − beginTs + skew + retention (+ one round); map entries live their retention (+ one round).
    const recordsBound = Math.ceil(perSecond * ((TX_TIMEOUT_MS + SKEW_MS + RETENTION_MS + 2 * intervalMs) / 1_000));
    const mapBound = Math.ceil(2 * perSecond * ((mapRetentionMs + 2 * intervalMs) / 1_000));
    assert.ok(recordsMax <= recordsBound, `durable records peaked at ${recordsMax}, bound ${recordsBound}`);
    assert.ok(mapMax <= mapBound, `map entries peaked at ${mapMax}, bound ${mapBound}`);
    assert.ok(recordsMax < txs / 4 && mapMax < txs / 4, 'far below the number of txs run');
    assert.ok(s.replica.txState.vacuumHorizon() > 0n);
  });
});

describe('local replica view (RO routing)', () => {
  it("a primary's local safe time covers a fresh readTs; a replica without a lease offers its applied safe time", async () => {
    const primary = await setup('local-view-primary');
    const view = localReplicaView({ get: (p) => (p === P ? primary.replica : undefined) });
    const fresh = primary.clock.now();
    const safe = view.localSafeTime(P);
    assert.ok(safe !== undefined && safe >= fresh, 'the primary serves a fresh read at once');
    assert.ok(primary.replica.readableAt(fresh));
    assert.equal(view.localSafeTime('t1p9' as PartitionId), undefined, 'not hosted here');

    const backup = await setup('local-view-backup', 1_000, false);
    const backupView = localReplicaView({ get: () => backup.replica });
    await backup.advance(50);
    const applied = backup.replica.stateMachine.safeTime.current();
    assert.equal(backupView.localSafeTime(P), applied);
    assert.ok(applied < backup.clock.now(), 'a fresh readTs is not covered: the read goes to the primary');
  });
});

describe('RO coordinator over a real replica (wiring)', () => {
  it('an RO tx reads its snapshot on the local primary while GC runs; once closed, GC collects and old reads fail', async () => {
    const s = await setup('ro-over-replica');
    const self = { name: 'n1' as NodeName, id: 'n1-id' as NodeId };
    const served: NodeName[] = [];
    const request = (async (to: NodeName, body: { kind: string }) => {
      assert.equal(body.kind, 'ReadOnlyRequest');
      served.push(to);
      return handleReadOnly(s.replica, body as ReadOnlyRequest, {
        resolver: new LocalIntentResolver(s.map),
        lowWatermark: () => s.watermark.current(),
      });
    }) as TxRequestFn;
    const coordinator = new ReadOnlyCoordinator({
      self,
      clock: s.clock,
      timers: s.scheduler.timers('ro'),
      request,
      placement: {
        partitionOf: () => P,
        partitionsOf: () => [P],
        primaries: { locate: () => 'n2' as NodeName },
      },
      local: localReplicaView({ get: (p) => (p === P ? s.replica : undefined) }),
      watermark: s.watermark,
    });
    const gc = new StorageGcDriver({
      timers: s.scheduler.timers('gc'),
      partitions: () => [s.replica.mv],
      lowWatermark: () => s.watermark.current(),
      intervalMs: 100,
    });
    gc.start();
    await s.write('k', 'old');
    const tx = beginReadOnly(coordinator);
    await s.write('k', 'new');
    await s.advance(5_000);
    assert.equal(await tx.get('t', 'k'), 'old');
    assert.deepEqual(served, ['n1'], 'served by the local primary, whose safe time covers readTs');
    assert.equal(gc.versionsRemoved, 0, 'the open tx holds the watermark at its readTs');
    await tx.commit();
    await s.advance(200);
    assert.equal(gc.versionsRemoved, 1);
    assert.throws(
      () => beginReadOnly(coordinator, { readTimestamp: tx.readTimestamp }),
      (e) => isBasaltError(e, 'TX_READ_ONLY_TOO_OLD'),
    );
    const fresh = beginReadOnly(coordinator);
    assert.equal(await fresh.get('t', 'k'), 'new');
    gc.stop();
  });
});
