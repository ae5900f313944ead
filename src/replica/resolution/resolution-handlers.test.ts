/**
 * Resolution and recovery handlers on three nodes, each hosting replicas of P0 (the commit partition) and P1, over the
 * real Raft driver on the simulator's virtual time (the cluster of handlers/test-cluster.ts, plus each node's
 * ReplicaResolution). Requests between nodes go through one `call` that absorbs timestamps both ways and passes bodies
 * and errors through the wire codec. The tx coordinator is a scripted handler reachable under the name `coord`; tests
 * declare it gone (rule 17) or script its answers. Seeds are fixed; a failure message names the seed.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BasaltError, isBasaltError } from '../../core/errors.js';
import {
  type HybridTimestamp,
  type NodeId,
  type NodeName,
  nodeName,
  type PartitionId,
  type TxId,
} from '../../core/ids.js';
import type { HybridClock } from '../../hlc/hybrid-clock.js';
import { addMs } from '../../hlc/timestamp.js';
import { SimClock } from '../../sim/clock.js';
import { SeededRandom } from '../../sim/random.js';
import { Scheduler } from '../../sim/scheduler.js';
import {
  type ClusterMember,
  COORDINATOR,
  idOf,
  NAMES,
  type NodeParts,
  type NodeWiring,
  P0,
  P1,
  ReplicaTestCluster,
} from '../../testing/replica-cluster.js';
import { rowLockKey } from '../../tx/core/lock-modes.js';
import type {
  EnlistmentToken,
  ReadOnlyResponse,
  ReadWriteRequest,
  ReadWriteResponse,
  RwOperation,
  TxFinishRequest,
  TxFinishResponse,
  TxRequest,
  TxStateAnswer,
  TxStateCommitPartitionRequest,
  TxStateResponse,
} from '../../tx/core/messages.js';
import { CleanupDriver } from '../cleanup/cleanup-driver.js';
import { TxFinishHandler } from '../handlers/tx-finish.js';
import { RESOLUTION_COUNTERS } from '../ports.js';
import { ReplicaResolution } from '../replica-resolution.js';
import { txRequestTable } from '../request-table.js';

const COORD_NAME = nodeName('coord');
/** A second, live coordinator for requesters. */
const OTHER_COORDINATOR = 'other' as NodeId;

class Counters {
  private readonly values = new Map<string, number>();
  add(name: string, n = 1): void {
    this.values.set(name, (this.values.get(name) ?? 0) + n);
  }
  get(name: string): number {
    return this.values.get(name) ?? 0;
  }
}

interface ResolutionParts {
  readonly resolution: ReplicaResolution;
  readonly counters: Counters;
}

type Member = ClusterMember<ResolutionParts>;

type CoordinatorScript = (body: TxRequest) => Promise<TxStateResponse>;

class Cluster extends ReplicaTestCluster<ResolutionParts> {
  readonly gone = new Set<NodeId>();
  /** Every request sent between nodes: [from, to, kind]. */
  readonly sent: { from: NodeName; to: NodeName; kind: string }[] = [];
  /** While set, the commit partitions' cleanup requests fail (the sender sees CONNECTION_CLOSED). */
  dropCleanups = false;
  coordinator: CoordinatorScript = () => Promise.reject(new BasaltError('CONNECTION_CLOSED', 'no coordinator'));

  constructor(seed: number) {
    const scheduler = new Scheduler({ seed });
    super(seed, { scheduler, clock: () => new SimClock(scheduler), random: (s) => new SeededRandom(s) });
  }

  static start(seed: number): Promise<Cluster> {
    return new Cluster(seed).boot();
  }

  protected wire({ name, physical, clock, map, timers, locator, partitions }: NodeParts): NodeWiring<ResolutionParts> {
    const counters = new Counters();
    const request = ((to: NodeName, body: TxRequest) => this.call(name, to, body, clock)) as never;
    const cleanups = new CleanupDriver({
      partitions,
      sender: {
        request: (to, body) =>
          this.dropCleanups
            ? Promise.reject(new BasaltError('CONNECTION_CLOSED', 'dropped'))
            : (this.call(name, to, body, clock) as never),
      },
      locator,
      timers,
      cleanupBackoffMsMin: 10,
      cleanupBackoffMsMax: 50,
    });
    const resolution = new ReplicaResolution({
      self: { name, id: idOf(name) },
      clock,
      physicalClock: physical,
      timers,
      txStates: map,
      peers: {
        isGone: (id) => this.gone.has(id),
        nameOf: (id) => (id === COORDINATOR ? COORD_NAME : NAMES.find((n) => idOf(n) === id)),
      },
      request,
      locator,
      partitions,
      cleanups,
      counters,
      resolutionTimeoutMs: 4_000,
      requestTimeoutMs: 1_000,
      stateWaitMs: 500,
    });
    const table = txRequestTable({
      partitions,
      resolver: resolution.resolver,
      finish: new TxFinishHandler({ partitions, cleanups }),
      commitPartition: resolution.commitPartition,
      coordinator: {
        handleStateRequest: () => Promise.reject(new BasaltError('UNKNOWN_MESSAGE', 'no coordinator here')),
      },
      stateWaitMs: 500,
    });
    return { table, extra: { resolution, counters }, onHosted: (partition) => resolution.watch(partition) };
  }

  count(kind: string): number {
    return this.sent.filter((s) => s.kind === kind).length;
  }

  /** A request as the messenger delivers it, recorded in `sent`. */
  call<R>(fromName: NodeName, to: NodeName, body: TxRequest, from: HybridClock): Promise<R> {
    this.sent.push({ from: fromName, to, kind: body.kind });
    return this.deliver<R>(to, body, from);
  }

  protected override clockOf(to: NodeName): HybridClock {
    return to === COORD_NAME ? this.coord : super.clockOf(to);
  }

  protected override dispatch(to: NodeName, body: TxRequest): Promise<unknown> {
    if (to === COORD_NAME) return this.coordinator(body);
    return super.dispatch(to, body);
  }

  /** From the test's coordinator clock. */
  send<R>(to: Member, body: TxRequest): Promise<R> {
    return this.settle(this.call<R>(COORD_NAME, to.name, body, this.coord));
  }

  /** The key's newest version on the primary of `partitionId`: intent, committed value, or empty. */
  latest(partitionId: PartitionId, key: string): string {
    const mv = this.hosted(this.primary(partitionId), partitionId).mv;
    const rowId = mv.rowIdOf(key);
    if (rowId === undefined) return 'empty';
    const r = mv.readLatest(rowId);
    return r.kind === 'intent' ? `intent:${String(r.value)}` : r.kind === 'committed' ? String(r.value) : 'empty';
  }
}

function rw(
  partitionId: PartitionId,
  txId: TxId,
  opSeq: number,
  operation: RwOperation,
  options: { token?: EnlistmentToken; full?: boolean; coordinatorId?: NodeId } = {},
): ReadWriteRequest {
  return {
    kind: 'ReadWriteRequest',
    partitionId,
    txId,
    coordinatorId: options.coordinatorId ?? COORDINATOR,
    commitPartitionId: P0,
    opSeq,
    full: options.full ?? false,
    operation,
    ...(options.token === undefined ? {} : { token: options.token }),
  };
}

function stateRequest(txId: TxId, readTs: HybridTimestamp, key = 'k'): TxStateCommitPartitionRequest {
  return {
    kind: 'TxStateCommitPartitionRequest',
    txId,
    commitPartitionId: P0,
    readTs,
    coordinatorId: COORDINATOR,
    intentPartitionId: P1,
    key,
  };
}

function hasCode(code: string) {
  return (e: unknown): boolean => {
    assert.ok(isBasaltError(e), `expected a BasaltError, got ${String(e)}`);
    assert.equal(e.code, code, e.message);
    return true;
  };
}

/** Writes `old` committed (one-phase) and then tx's intent `new` on key k of P1; returns the intent's lease token. */
async function intentOverOld(h: Cluster, tx: TxId): Promise<ReadWriteResponse> {
  const p1 = h.primary(P1);
  await h.send(p1, rw(P1, h.newTx(), 1, { op: 'put', key: 'k', value: 'old' }, { full: true }));
  const put = await h.send<ReadWriteResponse>(p1, rw(P1, tx, 1, { op: 'put', key: 'k', value: 'new' }));
  await h.converge();
  return put;
}

function finishRequest(tx: TxId, commitTs: HybridTimestamp, put: ReadWriteResponse): TxFinishRequest {
  return {
    kind: 'TxFinishRequest',
    txId: tx,
    commitPartitionId: P0,
    commit: true,
    commitTs,
    enlisted: [{ partitionId: P1, primaryName: put.lease.holderName, token: put.lease.token }],
  };
}

/** Replay or vary with BASALT_RESOLUTION_SEED=n. */
const SEED = Number(process.env['BASALT_RESOLUTION_SEED'] ?? 11);

describe('resolution through the commit partition and recovery', () => {
  it('coordinator gone → commit partition path → recovery aborts: an RO read on a backup sees the old value, ABORTED is durable, the intent is cleaned up', async () => {
    const h = await Cluster.start(SEED);
    const tx = h.newTx();
    await intentOverOld(h, tx);
    h.gone.add(COORDINATOR);
    const reader = h.backups(P1)[0]!;
    const readTs = h.coord.now();
    const read = await h.send<ReadOnlyResponse>(reader, {
      kind: 'ReadOnlyRequest',
      partitionId: P1,
      coordinatorId: OTHER_COORDINATOR,
      readTs,
      operation: { op: 'get', key: 'k' },
    });
    assert.deepEqual(read.result, { op: 'get', value: { found: true, value: 'old' } });
    assert.equal(h.count('TxStateCoordinatorRequest'), 0, 'a gone coordinator is not asked');
    assert.equal(h.count('TxStateCommitPartitionRequest'), 1);
    assert.equal(reader.counters.get(RESOLUTION_COUNTERS.commitPartition), 1);
    assert.equal(reader.map.entry(tx)?.state, 'ABORTED', 'the true final outcome is cached by the reader');
    await h.converge();
    for (const m of h.members.values()) assert.equal(h.hosted(m, P0).txState.get(tx)?.state, 'ABORTED', m.name);
    await h.runUntil(() => h.latest(P1, 'k') === 'old');
    assert.deepEqual(h.hosted(h.primary(P1), P1).locks.locksOf(tx), [], 'the orphan lock is released by cleanup');
  });

  it("rule 11: the coordinator's commit won the compare-and-set: recovery answers COMMITTED with its commitTs, never a guessed ABORTED", async () => {
    const h = await Cluster.start(SEED);
    const tx = h.newTx();
    const put = await intentOverOld(h, tx);
    h.gone.add(COORDINATOR);
    const p0 = h.primary(P0);
    const commitTs = h.coord.now();
    // The finish and a state request arrive together; the finish is proposed first.
    const finish = h.call<TxFinishResponse>(COORD_NAME, p0.name, finishRequest(tx, commitTs, put), h.coord);
    const state = h.call<TxStateResponse>(COORD_NAME, p0.name, stateRequest(tx, h.coord.now()), h.coord);
    const [finished, answered] = await h.settle(Promise.all([finish, state]));
    assert.deepEqual(finished.outcome, { state: 'COMMITTED', commitTs }, 'the finish was not overturned');
    assert.deepEqual(answered.answer, { state: 'COMMITTED', commitTs });
    assert.equal(h.hosted(p0, P0).txState.get(tx)?.state, 'COMMITTED');
    // Recovery that meets the stored commit at its own compare-and-set answers what was stored.
    const again = await h.settle(p0.resolution.commitPartition.recover(h.hosted(p0, P0), tx, [P0, P1]));
    assert.deepEqual(again, { state: 'COMMITTED', commitTs });
    assert.ok(p0.counters.get(RESOLUTION_COUNTERS.recoveryCommitWon) >= 1);
    assert.equal(p0.counters.get(RESOLUTION_COUNTERS.recoveries), 0, 'nothing was aborted');
    await h.runUntil(() => h.latest(P1, 'k') === 'new');
  });

  it('rule 12: a live coordinator is asked from the commit partition; PENDING is forwarded, a failed forward fails retryably (never PENDING), a null forward recovers', async () => {
    const h = await Cluster.start(SEED);
    const tx = h.newTx();
    await intentOverOld(h, tx);
    const p0 = h.primary(P0);
    const seenReadTs: HybridTimestamp[] = [];
    h.coordinator = (body) => {
      if (body.kind === 'TxStateCoordinatorRequest') seenReadTs.push(body.readTs);
      return Promise.resolve({ kind: 'TxStateResponse', answer: { state: 'PENDING' } });
    };
    const readTs = addMs(h.coord.now(), 1);
    const pending = await h.send<TxStateResponse>(p0, stateRequest(tx, readTs));
    assert.deepEqual(pending.answer, { state: 'PENDING' });
    assert.deepEqual(seenReadTs, [readTs], 'the forward carries the reader readTs');
    h.coordinator = () => Promise.reject(new BasaltError('TIMEOUT', 'slow'));
    await assert.rejects(h.send(p0, stateRequest(tx, h.coord.now())), (e: unknown) => {
      assert.ok(isBasaltError(e, 'NODE_UNAVAILABLE') && e.retryable, String(e));
      return true;
    });
    assert.equal(h.hosted(p0, P0).txState.get(tx), undefined, 'a live coordinator is not recovered against');
    h.coordinator = () => Promise.resolve({ kind: 'TxStateResponse', answer: null });
    const disowned = await h.send<TxStateResponse>(p0, stateRequest(tx, h.coord.now()));
    assert.deepEqual(disowned.answer, { state: 'ABORTED' });
    assert.equal(h.hosted(p0, P0).txState.get(tx)?.state, 'ABORTED');
  });

  it('rule 17: a request naming no coordinator, at a primary with no entry, asks the coordinator the tx id names instead of recovering', async () => {
    const h = await Cluster.start(SEED);
    const tx = h.newTx();
    await intentOverOld(h, tx);
    const p0 = h.primary(P0);
    p0.map.remove(tx, 'one-phase'); // as on a new primary that never applied a command of the tx
    h.coordinator = () => Promise.resolve({ kind: 'TxStateResponse', answer: { state: 'PENDING' } });
    const { coordinatorId: _named, ...anonymous } = stateRequest(tx, addMs(h.coord.now(), 1));
    const answered = await h.send<TxStateResponse>(p0, anonymous);
    assert.deepEqual(answered.answer, { state: 'PENDING' });
    assert.equal(h.count('TxStateCoordinatorRequest'), 1, 'the coordinator was asked');
    assert.equal(h.hosted(p0, P0).txState.get(tx), undefined, 'a live coordinator is not recovered against');
  });

  it('a FINISHING entry on the commit partition primary is waited for, and its outcome answers', async () => {
    const h = await Cluster.start(SEED);
    const tx = h.newTx();
    await intentOverOld(h, tx);
    const p0 = h.primary(P0);
    // A finish driven from this node by another coordinator (not this node's own) is under way.
    p0.map.update(tx, { state: 'PENDING', reason: 'replica-touch', coordinatorId: OTHER_COORDINATOR });
    assert.equal(p0.map.beginFinish(tx).kind, 'began');
    const commitTs = h.coord.now();
    h.scheduler.schedule(100, () => {
      p0.map.update(tx, { state: 'COMMITTED', reason: 'finish-response', commitTimestamp: commitTs });
    });
    const answered = await h.send<TxStateResponse>(p0, stateRequest(tx, h.coord.now()));
    assert.deepEqual(answered.answer, { state: 'COMMITTED', commitTs });
    assert.equal(h.count('TxStateCoordinatorRequest'), 0);
    assert.equal(h.hosted(p0, P0).txState.get(tx), undefined, 'no recovery was started');
  });

  it('TxRecoveryRequest for a tx already finished answers the durable outcome and proposes no second finish', async () => {
    const h = await Cluster.start(SEED);
    const tx = h.newTx();
    const put = await intentOverOld(h, tx);
    const p0 = h.primary(P0);
    const commitTs = h.coord.now();
    await h.send(p0, finishRequest(tx, commitTs, put));
    const finishes: string[] = [];
    p0.map.observe((e) => {
      if (e.kind === 'update' && e.txId === tx && e.reason.startsWith('finish')) finishes.push(e.reason);
    });
    const answered = await h.send<TxStateResponse>(p0, {
      kind: 'TxRecoveryRequest',
      txId: tx,
      commitPartitionId: P0,
      reporterPartitionId: P1,
    });
    assert.deepEqual(answered.answer, { state: 'COMMITTED', commitTs });
    assert.equal(p0.counters.get(RESOLUTION_COUNTERS.recoveries), 0);
    assert.equal(p0.counters.get(RESOLUTION_COUNTERS.recoveryCommitWon), 0);
    await h.converge();
    assert.deepEqual(finishes, [], 'no second FinishTx was applied');
  });

  // Found by the golden script recover-orphan-sweep.txt: the second reporter joined the recovery the first had
  // started, its partition was neither in that run's cleanup nor in the durable record, and its intent stayed.
  it("a TxRecoveryRequest that joins a recovery in progress has its reporter's partition cleaned with the shared outcome", async () => {
    const h = await Cluster.start(SEED);
    const tx = h.newTx();
    const p0 = h.primary(P0);
    const p1 = h.primary(P1);
    await h.send(p0, rw(P0, tx, 1, { op: 'put', key: 'c', value: 'mine' }));
    await h.send(p1, rw(P1, tx, 2, { op: 'put', key: 'k', value: 'mine' }));
    await h.converge();
    h.gone.add(COORDINATOR);
    const recovery = (reporterPartitionId: PartitionId) =>
      h.call<TxStateResponse>(
        COORD_NAME,
        p0.name,
        {
          kind: 'TxRecoveryRequest',
          txId: tx,
          commitPartitionId: P0,
          reporterPartitionId,
        },
        h.coord,
      );
    // P0's own sweep starts the recovery; P1's request arrives while it runs and joins it.
    const [first, second] = await h.settle(Promise.all([recovery(P0), recovery(P1)]));
    assert.deepEqual(first.answer, { state: 'ABORTED' });
    assert.deepEqual(second.answer, { state: 'ABORTED' });
    assert.equal(p0.counters.get(RESOLUTION_COUNTERS.recoveries), 1, 'one shared recovery');
    assert.deepEqual(h.hosted(p0, P0).txState.get(tx)?.enlistedPartitions, [P0], 'the record knows only the first');
    const decidedAtMs = h.scheduler.nowMs();
    const holdsP1 = () =>
      h.hosted(h.primary(P1), P1).mv.rowsWrittenBy(tx).length > 0 ||
      h.hosted(h.primary(P1), P1).locks.locksOf(tx).length > 0;
    await h.runUntil(() => !holdsP1(), 1_000);
    assert.ok(h.scheduler.nowMs() - decidedAtMs <= 1_000);
    assert.equal(h.latest(P1, 'k'), 'empty', "the joined reporter's intent was aborted");
    assert.equal(h.latest(P0, 'c'), 'empty');
    assert.equal(p1.map.entry(tx)?.state, 'ABORTED');
  });

  it('a reporter answered with a final outcome caches it and cleans its own partition in line, even when the commit partition cannot reach it', async () => {
    const h = await Cluster.start(SEED);
    const tx = h.newTx();
    const p1 = h.primary(P1);
    await h.send(p1, rw(P1, tx, 1, { op: 'put', key: 'k', value: 'orphaned' }));
    await h.converge();
    h.gone.add(COORDINATOR);
    h.dropCleanups = true;
    const reasons: string[] = [];
    p1.map.observe((e) => {
      if (e.kind === 'update' && e.txId === tx) reasons.push(e.reason);
    });
    assert.equal(p1.resolution.orphans.requestRecovery(tx, P0, P1), true);
    await h.runUntil(
      () => h.hosted(p1, P1).mv.rowsWrittenBy(tx).length === 0 && h.hosted(p1, P1).locks.locksOf(tx).length === 0,
      1_000,
    );
    assert.equal(h.count('TxRecoveryRequest'), 1);
    assert.ok(reasons.includes('recovery-answer'), reasons.join(','));
    assert.equal(p1.map.entry(tx)?.state, 'ABORTED');
    assert.equal(h.latest(P1, 'k'), 'empty', 'the intent was aborted without a cleanup request');
    assert.equal(h.hosted(h.primary(P0), P0).txState.get(tx)?.cleanupCompleted, false, 'the driver could not clean');
  });

  it('a commit partition replica that is not primary answers PRIMARY_MISS naming the primary', async () => {
    const h = await Cluster.start(SEED);
    const backup = h.backups(P0)[0]!;
    await assert.rejects(h.send(backup, stateRequest(h.newTx(), h.coord.now())), (e: unknown) => {
      assert.ok(isBasaltError(e, 'PRIMARY_MISS'));
      assert.equal(e.details?.['holderName'], h.primary(P0).name);
      return true;
    });
  });
});

describe('orphan detection', () => {
  it('a lock conflict with a holder whose coordinator is gone: ABANDONED, exactly one TxRecoveryRequest, the requester fails retryably, recovery releases the lock', async () => {
    const h = await Cluster.start(SEED);
    const older = h.newTx();
    const alsoOlder = h.newTx();
    const orphan = h.newTx();
    const p1 = h.primary(P1);
    await h.send(p1, rw(P1, orphan, 1, { op: 'put', key: 'k', value: 'orphaned' }));
    h.gone.add(COORDINATOR);
    // Older requesters would wait for the younger holder (wait-die); with an orphan holder they fail at once.
    for (const requester of [older, alsoOlder]) {
      await assert.rejects(
        h.send(p1, rw(P1, requester, 1, { op: 'put', key: 'k', value: 'mine' }, { coordinatorId: OTHER_COORDINATOR })),
        (e: unknown) => {
          assert.ok(isBasaltError(e) && e.retryable, String(e));
          return true;
        },
      );
    }
    assert.equal(h.count('TxRecoveryRequest'), 1, 'one recovery request within the interval');
    assert.equal(p1.counters.get(RESOLUTION_COUNTERS.orphans), 1);
    await h.runUntil(() => h.hosted(h.primary(P0), P0).txState.get(orphan)?.state === 'ABORTED');
    await h.runUntil(() => h.hosted(p1, P1).locks.holders(rowLockKey(P1, 'k')).length === 0);
    assert.equal(h.latest(P1, 'k'), 'empty', 'the orphan intent was aborted');
    const next = h.newTx();
    const put = await h.send<ReadWriteResponse>(
      p1,
      rw(P1, next, 1, { op: 'put', key: 'k', value: 'after' }, { coordinatorId: OTHER_COORDINATOR }),
    );
    assert.deepEqual(put.result, { op: 'written' });
  });

  // Found by the bank sweep (seed bank-soak-14): a recovery aborted a tx knowing only its commit partition and the
  // reporter; the node hosting the commit partition's primary also held the tx's locks on another partition, and its
  // shared map said ABORTED, so conflicts there never counted the holder as an orphan and the lock stayed.
  it('a holder ABORTED in the map but still holding its lock here (its cleanup missed this partition): one TxRecoveryRequest, the commit partition cleans this partition up', async () => {
    const h = await Cluster.start(SEED);
    const holder = h.newTx();
    const p1 = h.primary(P1);
    await h.send(p1, rw(P1, holder, 1, { op: 'put', key: 'k', value: 'left' }));
    assert.equal(p1.map.entry(holder)?.commitPartitionId, P0);
    p1.map.update(holder, { state: 'ABORTED', reason: 'resolution' });
    // A younger requester waits for the older holder (a patient request); the conflict asks the commit partition to
    // clean this partition up, which aborts the intent and releases the lock, and the requester's put goes through.
    const requester = h.newTx();
    const put = await h.send<ReadWriteResponse>(
      p1,
      rw(P1, requester, 1, { op: 'put', key: 'k', value: 'mine' }, { coordinatorId: OTHER_COORDINATOR }),
    );
    assert.deepEqual(put.result, { op: 'written' });
    assert.equal(h.count('TxRecoveryRequest'), 1);
    assert.deepEqual(h.hosted(p1, P1).locks.holders(rowLockKey(P1, 'k')), [{ txId: requester, mode: 'X' }]);
    assert.equal(h.latest(P1, 'k'), 'intent:mine', "the holder's intent was aborted, the requester's written");
    assert.equal(h.hosted(h.primary(P0), P0).txState.get(holder)?.state, 'ABORTED');
  });

  it('an unprotected intent (its locks lost with a primary change) of a gone coordinator: recovery, the intent is aborted', async () => {
    const h = await Cluster.start(SEED);
    const orphan = h.newTx();
    const p1 = h.primary(P1);
    await h.send(p1, rw(P1, orphan, 1, { op: 'put', key: 'k', value: 'orphaned' }));
    // What a new lease does to the old lock table: the intent stays, its locks are gone.
    h.hosted(p1, P1).locks.releaseAll(orphan);
    h.gone.add(COORDINATOR);
    // The read resolves the intent in line: recovery at the commit partition aborts it, it is switched, the read runs.
    const requester = h.newTx();
    const read = await h.send<ReadWriteResponse>(
      p1,
      rw(P1, requester, 1, { op: 'get', key: 'k' }, { coordinatorId: OTHER_COORDINATOR }),
    );
    assert.deepEqual(read.result, { op: 'get', value: { found: false } });
    assert.equal(h.count('TxRecoveryRequest'), 1, 'one recovery request');
    await h.runUntil(() => h.hosted(h.primary(P0), P0).txState.get(orphan)?.state === 'ABORTED');
    assert.equal(h.latest(P1, 'k'), 'empty');
    h.hosted(p1, P1).locks.releaseAll(requester);
    const put = await h.send<ReadWriteResponse>(
      p1,
      rw(P1, h.newTx(), 1, { op: 'put', key: 'k', value: 'after' }, { coordinatorId: OTHER_COORDINATOR }),
    );
    assert.deepEqual(put.result, { op: 'written' });
  });

  it('an unprotected intent of a live coordinator asks for no recovery', async () => {
    const h = await Cluster.start(SEED);
    const writer = h.newTx();
    const p1 = h.primary(P1);
    await h.send(p1, rw(P1, writer, 1, { op: 'put', key: 'k', value: 'w' }));
    h.hosted(p1, P1).locks.releaseAll(writer);
    await assert.rejects(
      h.send(p1, rw(P1, h.newTx(), 1, { op: 'get', key: 'k' }, { coordinatorId: OTHER_COORDINATOR })),
    );
    await h.scheduler.run({ forMs: 200 });
    assert.equal(h.count('TxRecoveryRequest'), 0);
  });

  it('rule 17: a holder whose coordinator is merely unknown or live is not an orphan: no recovery, the requester waits', async () => {
    const h = await Cluster.start(SEED);
    const older = h.newTx();
    const holder = h.newTx();
    const p1 = h.primary(P1);
    await h.send(p1, rw(P1, holder, 1, { op: 'put', key: 'k', value: 'held' }));
    let settled = false;
    const waiting = h.call(COORD_NAME, p1.name, rw(P1, older, 1, { op: 'get', key: 'k' }), h.coord);
    waiting.then(
      () => {
        settled = true;
      },
      () => {
        settled = true;
      },
    );
    await h.scheduler.run({ forMs: 500 });
    assert.equal(settled, false, 'the older requester still waits');
    assert.equal(h.count('TxRecoveryRequest'), 0);
    assert.equal(p1.map.entry(holder)?.state, 'PENDING');
  });
});

describe('rule 16: the primary-replica path', () => {
  it('below the vacuum horizon with no record, the intent partition primary infers COMMITTED from its version chain', async () => {
    const h = await Cluster.start(SEED);
    const tx = h.newTx();
    const put = await intentOverOld(h, tx);
    const p0 = h.primary(P0);
    const commitTs = h.coord.now();
    await h.send(p0, finishRequest(tx, commitTs, put));
    await h.runUntil(() => h.hosted(p0, P0).txState.get(tx)?.cleanupCompleted === true);
    // Vacuum on the commit partition primary: the record and the map entry are gone, the horizon covers the tx.
    const store = h.hosted(p0, P0).txState;
    store.runConsistently(() => {
      store.remove(tx);
      store.setVacuumHorizon(addMs(h.hosted(p0, P0).deadlineOf(tx), 1));
    });
    p0.map.remove(tx, 'resolution');
    const readTs = h.coord.now();
    const answered = await h.send<TxStateResponse>(p0, { ...stateRequest(tx, readTs), newestCommitTs: undefined });
    assert.deepEqual(answered.answer, { state: 'COMMITTED', commitTs });
    assert.equal(h.count('TxStatePrimaryReplicaRequest'), 1);
    assert.equal(p0.counters.get(RESOLUTION_COUNTERS.primaryReplica), 1);
  });

  it('the primary that still holds the intent never infers from its own chain (UNKNOWN); a backup answers PRIMARY_MISS', async () => {
    const h = await Cluster.start(SEED);
    const tx = h.newTx();
    await intentOverOld(h, tx);
    const p1 = h.primary(P1);
    const body = {
      kind: 'TxStatePrimaryReplicaRequest',
      txId: tx,
      partitionId: P1,
      key: 'k',
      readTs: h.coord.now(),
    } as const;
    const answered = await h.send<TxStateResponse>(p1, body);
    assert.deepEqual(answered.answer, { state: 'UNKNOWN' } satisfies TxStateAnswer);
    await assert.rejects(h.send(h.backups(P1)[0]!, body), hasCode('PRIMARY_MISS'));
  });
});
