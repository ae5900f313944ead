/**
 * Seeded swarm over the coordinator and fake primaries: concurrent clients run random transactions while the fake
 * cluster injects faults (lock conflicts, lost requests, executed requests whose answer is lost, primary changes,
 * lease renewals, PRIMARY_MISS on finish, recovery aborting open txs behind the coordinator's back) and readers ask
 * the coordinator for tx states at random readTs. Then faults stop and background retries settle. Checked per seed:
 * - a tx reported committed is durably COMMITTED at the commitTs its map holds; a durably COMMITTED tx was reported
 *   committed or TX_OUTCOME_UNKNOWN, never a retryable error (rule 14);
 * - every finish request of a tx carries the same decision and commitTs (rule 13); commitTs exceeds every write
 *   timestamp of the tx and lies below its deadline (rule 15);
 * - every state answer is true: COMMITTED with the final commitTs, ABORTED only for aborted txs, and PENDING at readTs
 *   only if the tx did not commit at or below readTs (rules 11, 12);
 * - at the end no tx is live on the coordinator, and every map entry left is final and matches the cluster.
 * A failure prints its seed; `SWARM_SEED=<seed>` replays one seed.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BasaltError, isBasaltError } from '../../core/errors.js';
import type { HybridTimestamp, NodeId, NodeName, TxId } from '../../core/ids.js';
import { HybridClock } from '../../hlc/hybrid-clock.js';
import { addMs } from '../../hlc/timestamp.js';
import { SimClock } from '../../sim/clock.js';
import { SeededRandom } from '../../sim/random.js';
import { Scheduler } from '../../sim/scheduler.js';
import { FakeCluster, primaryMissNaming, TABLE } from '../../testing/coordinator-fakes.js';
import type { TxFinishRequest, TxRequest, TxResponse, TxStateAnswer } from '../core/messages.js';
import { TxStateMap } from '../core/tx-state-map.js';
import type { CoordinatedTx } from './coordinated-tx.js';
import { TxCoordinator } from './coordinator.js';

const SEEDS =
  process.env['SWARM_SEED'] !== undefined ? [process.env['SWARM_SEED']] : range(40).map((i) => `swarm-${i}`);
const CLIENTS = 4;
const TXS_PER_CLIENT = 8;
const KEYS = range(12).map((i) => `key${i}`);

interface TxRecord {
  readonly tx: CoordinatedTx;
  reported?: 'committed' | 'rolled-back' | string;
}

interface StateProbe {
  readonly txId: TxId;
  readonly readTs: HybridTimestamp;
  readonly answer: TxStateAnswer | null;
}

function range(n: number): number[] {
  return Array.from({ length: n }, (_, i) => i);
}

const hang = (): Promise<TxResponse> => new Promise<TxResponse>(() => {});

async function runSeed(seed: string): Promise<void> {
  const random = new SeededRandom(seed);
  const scheduler = new Scheduler({ seed });
  const physical = new SimClock(scheduler);
  const cluster = new FakeCluster({
    physical: new SimClock(scheduler, { offsetMs: random.int(300) }),
    timers: scheduler.timers('cluster'),
    partitions: 4,
    leaseMs: 400,
  });
  const clock = new HybridClock(physical);
  const txStates = new TxStateMap({ clock: physical });
  const coordinator = new TxCoordinator({
    self: { name: 'n1' as NodeName, id: 'n1-id' as NodeId },
    clock,
    timers: scheduler.timers('coordinator'),
    txStates,
    request: cluster.request,
    placement: cluster.placement,
    options: {
      opRequestTimeoutMs: 300,
      finishRequestTimeoutMs: 300,
      finishAttemptsMax: 3,
      txTimeoutMs: 20_000,
      stateWaitMs: 500,
      cleanupRequestTimeoutMs: 300,
    },
  });
  let faults = true;
  const faultRandom = random.fork('faults');
  const records: TxRecord[] = [];
  const probes: StateProbe[] = [];

  const withFaults = (handler: (to: NodeName, body: TxRequest) => TxResponse | Promise<TxResponse>) => {
    return (to: NodeName, body: TxRequest): TxResponse | Promise<TxResponse> => {
      if (!faults) return cluster.handle(to, body);
      return handler(to, body);
    };
  };
  cluster.script(
    'ReadWriteRequest',
    withFaults((to, body) => {
      const r = faultRandom.next();
      if (body.kind === 'ReadWriteRequest' && r < 0.04)
        cluster.grantLease(body.partitionId, faultRandom.pick(cluster.nodes));
      if (r < 0.1) throw new BasaltError('TX_LOCK_CONFLICT', 'injected');
      if (r < 0.13) return hang();
      if (r < 0.16) {
        cluster.handle(to, body);
        return hang();
      }
      if (r < 0.25 && body.kind === 'ReadWriteRequest') {
        const lease = cluster.leases.get(body.partitionId)!;
        cluster.leases.set(body.partitionId, { ...lease, expiration: addMs(lease.expiration, 2_000) });
      }
      return cluster.handle(to, body);
    }),
  );
  cluster.script(
    'TxFinishRequest',
    withFaults((to, body) => {
      const r = faultRandom.next();
      if (r < 0.15) return hang();
      if (r < 0.25) {
        cluster.handle(to, body);
        return hang();
      }
      if (r < 0.35) {
        const commitPartitionId = (body as TxFinishRequest).commitPartitionId;
        throw primaryMissNaming(commitPartitionId, faultRandom.pick(cluster.nodes), 'injected');
      }
      return cluster.handle(to, body);
    }),
  );

  async function client(c: number): Promise<void> {
    const r = random.fork(`client-${c}`);
    for (let i = 0; i < TXS_PER_CLIENT; i++) {
      const tx = coordinator.begin();
      const record: TxRecord = { tx };
      records.push(record);
      try {
        const ops = 1 + r.int(4);
        for (let j = 0; j < ops; j++) await randomOp(r, tx);
        if (r.chance(0.15)) {
          await coordinator.rollback(tx);
          record.reported = 'rolled-back';
        } else {
          await coordinator.commit(tx);
          record.reported = 'committed';
        }
      } catch (error) {
        record.reported = isBasaltError(error) ? error.code : `non-coded: ${String(error)}`;
        await coordinator.rollback(tx);
      }
    }
  }

  async function randomOp(r: SeededRandom, tx: CoordinatedTx): Promise<void> {
    const key = r.pick(KEYS);
    switch (r.int(5)) {
      case 0:
        await coordinator.get(tx, TABLE, key);
        return;
      case 1:
        await coordinator.put(tx, TABLE, key, r.int(1000));
        return;
      case 2:
        await coordinator.remove(tx, TABLE, key);
        return;
      case 3:
        await coordinator.putAll(tx, TABLE, [
          { key, value: 1 },
          { key: r.pick(KEYS), value: 2 },
        ]);
        return;
      default:
        await coordinator.scan(tx, TABLE, { prefix: 'key1' }, { limit: 3 });
    }
  }

  async function prober(): Promise<void> {
    const r = random.fork('prober');
    for (let i = 0; i < 60; i++) {
      await new Promise<void>((resolve) => scheduler.schedule(r.between(1, 40), resolve, 'probe'));
      const record = records.length > 0 ? r.pick(records) : undefined;
      if (record === undefined) continue;
      const readTs = addMs(clock.current(), r.between(-50, 50));
      try {
        const response = await coordinator.handleTxStateCoordinatorRequest({
          kind: 'TxStateCoordinatorRequest',
          txId: record.tx.id,
          readTs,
        });
        probes.push({ txId: record.tx.id, readTs, answer: response.answer });
      } catch (error) {
        assert.ok(isBasaltError(error, 'TIMEOUT'), `a state request fails only by TIMEOUT: ${String(error)}`);
      }
    }
  }

  async function recoverer(): Promise<void> {
    const r = random.fork('recoverer');
    for (let i = 0; i < 10; i++) {
      await new Promise<void>((resolve) => scheduler.schedule(r.between(5, 80), resolve, 'recovery'));
      const open = records.filter((x) => !x.tx.isFinished && !cluster.outcomes.has(x.tx.id));
      if (open.length > 0) cluster.decide(r.pick(open).tx.id, { state: 'ABORTED' });
    }
  }

  let done = false;
  const work = Promise.all([...range(CLIENTS).map(client), prober(), recoverer()]).then(() => {
    done = true;
  });
  await scheduler.run({ until: () => done, forMs: 3_600_000 });
  assert.ok(done, 'the workload finished');
  await work;
  faults = false;
  await scheduler.run({ until: () => coordinator.liveCount === 0, forMs: 600_000 });
  check(cluster, txStates, records, probes, coordinator);
  if (process.env['SWARM_STATS']) console.log(seed, JSON.stringify(stats(records, probes, cluster)));
  coordinator.stop();
}

function check(
  cluster: FakeCluster,
  txStates: TxStateMap,
  records: readonly TxRecord[],
  probes: readonly StateProbe[],
  coordinator: TxCoordinator,
): void {
  assert.equal(coordinator.liveCount, 0, 'every tx settled once faults stopped');
  for (const { tx, reported } of records) {
    const stored = cluster.outcomes.get(tx.id);
    const finishes = cluster.sentOf('TxFinishRequest').filter((f) => f.txId === tx.id);
    if (reported === 'committed') {
      assert.equal(tx.outcome?.state, 'COMMITTED', `${tx.id} reported committed`);
      if (finishes.length > 0) assert.deepEqual(stored, tx.outcome, `${tx.id} durably committed as reported`);
    }
    if (stored?.state === 'COMMITTED') {
      assert.ok(
        reported === 'committed' || reported === 'TX_OUTCOME_UNKNOWN',
        `${tx.id} committed but reported ${reported}`,
      );
      const writes = cluster.writeTimestampsOf(tx.id);
      for (const w of writes) assert.ok(stored.commitTs > w, `${tx.id}: commitTs above every write`);
      assert.ok(stored.commitTs < tx.deadline, `${tx.id}: commitTs below the deadline`);
    }
    assert.ok(new Set(finishes.map((f) => f.commit)).size <= 1, `${tx.id}: one decision`);
    assert.ok(new Set(finishes.map((f) => f.commitTs)).size <= 1, `${tx.id}: one commitTs`);
    const entry = txStates.get(tx.id);
    if (entry !== undefined) {
      assert.ok(entry.state === 'COMMITTED' || entry.state === 'ABORTED', `${tx.id} final, is ${entry.state}`);
      if (stored !== undefined) assert.equal(entry.state, stored.state, `${tx.id}: map agrees with the cluster`);
    }
  }
  const finalOf = new Map(records.map((r) => [r.tx.id, r.tx.outcome]));
  for (const probe of probes) {
    const outcome = cluster.outcomes.get(probe.txId) ?? finalOf.get(probe.txId);
    const answer = probe.answer;
    if (answer === null) continue;
    if (answer.state === 'COMMITTED') assert.deepEqual(outcome, answer, 'a COMMITTED answer is the true outcome');
    if (answer.state === 'ABORTED') assert.equal(outcome?.state, 'ABORTED', 'an ABORTED answer is true');
    if (answer.state === 'PENDING' && outcome?.state === 'COMMITTED') {
      assert.ok(outcome.commitTs > probe.readTs, 'PENDING at readTs: any commit lies above readTs');
    }
  }
}

describe('coordinator swarm (seeded faults)', () => {
  it(`${SEEDS.length} seeds: outcomes reported truthfully, one commitTs per tx, state answers true`, async () => {
    for (const seed of SEEDS) {
      try {
        await runSeed(seed);
      } catch (error) {
        console.error(`coordinator swarm failed with seed ${seed} (replay: SWARM_SEED=${seed})`);
        throw error;
      }
    }
  });
});

function stats(records: readonly TxRecord[], probes: readonly StateProbe[], cluster: FakeCluster) {
  const by: Record<string, number> = {};
  for (const r of records) by[String(r.reported)] = (by[String(r.reported)] ?? 0) + 1;
  const answers: Record<string, number> = {};
  for (const p of probes) answers[p.answer?.state ?? 'null'] = (answers[p.answer?.state ?? 'null'] ?? 0) + 1;
  return {
    by,
    answers,
    confirms: cluster.sentOf('LeaseConfirmRequest').length,
    finishes: cluster.sentOf('TxFinishRequest').length,
  };
}
