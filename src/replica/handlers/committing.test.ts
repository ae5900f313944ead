/**
 * Parallel commit on the replicas (committing-settle.ts, write-check.ts, tx-finish.ts): a commit partition stores a
 * committing record naming writes still in flight, and nobody decides that tx without checking them. Three nodes host
 * P0 (the commit partition) and P1 over the real Raft driver on virtual time (testing/replica-cluster.ts); the
 * "coordinator" is a hybrid clock. Fixed seed; a failure names it.
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type BasaltError, isBasaltError } from '../../core/errors.js';
import type { NodeName, PartitionId, TxId } from '../../core/ids.js';
import type { HybridClock } from '../../hlc/hybrid-clock.js';
import { SimClock } from '../../sim/clock.js';
import { SeededRandom } from '../../sim/random.js';
import { Scheduler } from '../../sim/scheduler.js';
import { LocalIntentResolver } from '../../testing/local-intent-resolver.js';
import {
  type ClusterMember,
  COORDINATOR,
  NO_COMMIT_PARTITION_STATES,
  NO_COORDINATOR,
  type NodeParts,
  type NodeWiring,
  P0,
  P1,
  ReplicaTestCluster,
} from '../../testing/replica-cluster.js';
import type {
  EnlistmentToken,
  ReadWriteRequest,
  ReadWriteResponse,
  TxCleanupResponse,
  TxFinishRequest,
  TxFinishResponse,
  TxRequest,
  TxRequestFn,
  WriteCheckResponse,
} from '../../tx/core/messages.js';
import { CleanupDriver } from '../cleanup/cleanup-driver.js';
import { txRequestTable } from '../request-table.js';
import { CommittingSettler } from './committing-settle.js';
import { TxFinishHandler } from './tx-finish.js';

interface Parts {
  readonly settler: CommittingSettler;
}

type Member = ClusterMember<Parts>;

class Cluster extends ReplicaTestCluster<Parts> {
  readonly checks: TxRequest[] = [];

  constructor(seed: number) {
    const scheduler = new Scheduler({ seed });
    super(seed, { scheduler, clock: () => new SimClock(scheduler), random: (s) => new SeededRandom(s) });
  }

  static start(seed: number): Promise<Cluster> {
    return new Cluster(seed).boot();
  }

  protected wire({ clock, map, timers, locator, partitions }: NodeParts): NodeWiring<Parts> {
    const request = ((to: NodeName, body: TxRequest) => {
      if (body.kind === 'WriteCheckRequest') this.checks.push(body);
      return this.call(to, body, clock);
    }) as TxRequestFn;
    const cleanups = new CleanupDriver({
      partitions,
      sender: { request: (to, body) => this.call<TxCleanupResponse>(to, body, clock) },
      locator,
      timers,
      cleanupBackoffMsMin: 10,
      cleanupBackoffMsMax: 50,
    });
    const settler = new CommittingSettler({ request, locator, timers, requestTimeoutMs: 1_000 });
    const table = txRequestTable({
      partitions,
      resolver: new LocalIntentResolver(map),
      finish: new TxFinishHandler({ partitions, cleanups, settle: settler.settle }),
      commitPartition: NO_COMMIT_PARTITION_STATES,
      coordinator: NO_COORDINATOR,
    });
    return { table, extra: { settler } };
  }

  call<R>(to: NodeName, body: TxRequest, from: HybridClock = this.coord): Promise<R> {
    return this.deliver<R>(to, body, from);
  }

  /** A write of `txId` on P1, answered once proposed. */
  pipelinedPut(to: Member, txId: TxId, key: string, value: string): Promise<ReadWriteResponse> {
    const request: ReadWriteRequest = {
      kind: 'ReadWriteRequest',
      partitionId: P1,
      txId,
      coordinatorId: COORDINATOR,
      commitPartitionId: P0,
      opSeq: 1,
      full: false,
      pipelined: true,
      operation: { op: 'put', key, value },
    };
    return this.settle(this.call<ReadWriteResponse>(to.name, request));
  }

  /** A pipelined put of `txId` at `to`, then its commit record naming `keys` (the put's key) as in flight on P1. */
  async stage(to: Member, txId: TxId, key: string, value: string, keys: readonly string[] = [key]) {
    const put = await this.pipelinedPut(to, txId, key, value);
    const commitTs = this.coord.now();
    const enlisted = enlistedP1(to.name, put.lease.token);
    const inflight = [{ partitionId: P1, keys }];
    const staged = await this.finish({ txId, commit: true, commitTs, enlisted, committing: { inflight } });
    return { put, commitTs, enlisted, inflight, staged };
  }

  finish(body: Omit<TxFinishRequest, 'kind' | 'commitPartitionId'>): Promise<TxFinishResponse> {
    const request: TxFinishRequest = { kind: 'TxFinishRequest', commitPartitionId: P0, ...body };
    return this.settle(this.call<TxFinishResponse>(this.primary(P0).name, request));
  }

  /** The version of `key` on P1 at `m`, as its latest read sees it. */
  latest(m: Member, key: string) {
    const mv = this.hosted(m, P1).mv;
    const rowId = mv.rowIdOf(key);
    return rowId === undefined ? undefined : mv.readLatest(rowId);
  }
}

function enlistedP1(primary: NodeName, token: EnlistmentToken) {
  return [{ partitionId: P1 as PartitionId, primaryName: primary, token }];
}

function hasCode(code: string, check: (e: BasaltError) => boolean = () => true) {
  return (e: unknown): boolean => {
    assert.ok(isBasaltError(e), `expected a BasaltError, got ${String(e)}`);
    assert.equal(e.code, code, e.message);
    assert.ok(
      check(e),
      JSON.stringify(e.details, (_k, v) => (typeof v === 'bigint' ? String(v) : v)),
    );
    return true;
  };
}

function outcomeState(e: BasaltError): unknown {
  return (e.details?.['outcome'] as { state?: unknown } | undefined)?.state;
}

/** Replay or vary with BASALT_COMMITTING_SEED=n. */
const SEED = Number(process.env['BASALT_COMMITTING_SEED'] ?? 11);

describe('parallel commit: the committing record on the commit partition', () => {
  it('the record answers the commit; the confirmation stores COMMITTED at its commitTs and the cleanup switches the writes', async () => {
    const h = await Cluster.start(SEED);
    const p1 = h.primary(P1);
    const tx = h.newTx();
    const { put, commitTs, enlisted, inflight, staged } = await h.stage(p1, tx, 'a', 'A');
    assert.equal(put.pipelined, true, 'answered before its apply');
    assert.equal(staged.committing, commitTs);
    assert.equal(staged.outcome, undefined);
    const p0 = h.hosted(h.primary(P0), P0);
    assert.deepEqual(p0.txState.committing(tx)?.inflight, inflight);
    assert.equal(p0.txState.get(tx), undefined, 'no outcome is stored yet');
    // A repeated first request is answered by the record.
    const again = await h.finish({ txId: tx, commit: true, commitTs, enlisted, committing: { inflight } });
    assert.equal(again.committing, commitTs);
    const confirmed = await h.finish({ txId: tx, commit: true, commitTs, enlisted, settle: 'confirmed' });
    assert.deepEqual(confirmed.outcome, { state: 'COMMITTED', commitTs });
    assert.equal(h.checks.length, 0, 'a confirmation checks nothing');
    assert.equal(p0.txState.committing(tx), undefined, 'the outcome replaced the record');
    await h.runUntil(() => p0.txState.get(tx)?.cleanupCompleted === true);
    await h.converge();
    for (const m of h.members.values()) {
      assert.deepEqual(h.latest(m, 'a'), { kind: 'committed', value: 'A', commitTs }, `${m.name}`);
    }
  });

  it('an abort meeting a committing record whose writes all applied stores COMMITTED: nobody aborts a tx its coordinator may have reported committed', async () => {
    const h = await Cluster.start(SEED);
    const p1 = h.primary(P1);
    const tx = h.newTx();
    const { commitTs, enlisted } = await h.stage(p1, tx, 'b', 'B');
    // A recovery's abort (its coordinator gone, say) is a finish without commit.
    await assert.rejects(
      h.finish({ txId: tx, commit: false, enlisted }),
      hasCode('TX_MISMATCHING_OUTCOME', (e) => outcomeState(e) === 'COMMITTED'),
    );
    assert.equal(h.checks.length, 1, 'the write was checked once');
    const p0 = h.hosted(h.primary(P0), P0);
    assert.deepEqual(p0.txState.get(tx)?.state, 'COMMITTED');
    assert.equal(p0.txState.get(tx)?.commitTs, commitTs);
    await h.runUntil(() => p0.txState.get(tx)?.cleanupCompleted === true);
    assert.deepEqual(h.latest(p1, 'b'), { kind: 'committed', value: 'B', commitTs });
  });

  it('a settle finds a named write missing: ABORTED, and the commit it answers is refused', async () => {
    const h = await Cluster.start(SEED);
    const p1 = h.primary(P1);
    const tx = h.newTx();
    const { commitTs, enlisted } = await h.stage(p1, tx, 'c', 'C', ['c', 'never-written']);
    await assert.rejects(
      h.finish({ txId: tx, commit: true, commitTs, enlisted, settle: 'check' }),
      hasCode('TX_MISMATCHING_OUTCOME', (e) => outcomeState(e) === 'ABORTED'),
    );
    const p0 = h.hosted(h.primary(P0), P0);
    assert.equal(p0.txState.get(tx)?.state, 'ABORTED');
    await h.runUntil(() => p0.txState.get(tx)?.cleanupCompleted === true);
    const read = h.latest(p1, 'c');
    assert.ok(read === undefined || read.kind === 'empty', 'the write that did apply was aborted');
  });

  it('a write whose entry was lost with its leader: the check, after a proposal of its own applied under the new primary, finds it missing, and the old entry never lands', async () => {
    const h = await Cluster.start(SEED);
    const old = h.primary(P1);
    const tx = h.newTx();
    // Cut off before the write: it is proposed (and answered) on the old primary but reaches no follower.
    h.cut.add(old.name);
    const put = await h.pipelinedPut(old, tx, 'd', 'D');
    assert.equal(put.pipelined, true);
    // Both partitions get a primary among the other two nodes (the cut node may have held P0's lease too).
    await h.runUntil(() =>
      [P0, P1].every((g) => {
        const p = h.primaryOf(g);
        return p !== undefined && p !== old;
      }),
    );
    const commitTs = h.coord.now();
    const enlisted = enlistedP1(old.name, put.lease.token);
    const inflight = [{ partitionId: P1, keys: ['d'] }];
    const staged = await h.finish({ txId: tx, commit: true, commitTs, enlisted, committing: { inflight } });
    assert.equal(staged.committing, commitTs);
    await assert.rejects(
      h.finish({ txId: tx, commit: true, commitTs, enlisted, settle: 'check' }),
      hasCode('TX_MISMATCHING_OUTCOME', (e) => outcomeState(e) === 'ABORTED'),
    );
    h.cut.delete(old.name);
    await h.scheduler.run({ forMs: 5_000 });
    await h.converge();
    for (const m of h.members.values()) {
      assert.equal(h.hosted(m, P1).mv.rowsWrittenBy(tx).length, 0, `${m.name}: no intent of the tx`);
      assert.notEqual(h.latest(m, 'd')?.kind, 'committed', `${m.name}: the lost write never committed`);
    }
  });

  it('a committing record survives a restart of the commit partition primary and is still settled by a check', async () => {
    const h = await Cluster.start(SEED);
    const p1 = h.primary(P1);
    const tx = h.newTx();
    const { commitTs, enlisted } = await h.stage(p1, tx, 'e', 'E');
    await h.converge();
    for (const m of h.members.values()) {
      assert.equal(h.hosted(m, P0).txState.committing(tx)?.commitTs, commitTs, `${m.name}: the record replicated`);
    }
    // Another replica becomes the commit partition's primary: the record is in its storage, not in anyone's memory.
    const oldP0 = h.primary(P0);
    const next = h.backups(P0)[0]!;
    assert.ok(oldP0.driver.transferLeader(P0, next.name));
    await h.runUntil(() => h.primaryOf(P0) === next);
    const settled = await h.finish({ txId: tx, commit: true, commitTs, enlisted, settle: 'check' });
    assert.deepEqual(settled.outcome, { state: 'COMMITTED', commitTs });
  });
});

describe('WriteCheckRequest', () => {
  it('answers whether every key holds an intent of the tx', async () => {
    const h = await Cluster.start(SEED);
    const p1 = h.primary(P1);
    const tx = h.newTx();
    await h.pipelinedPut(p1, tx, 'f', 'F');
    const check = (keys: string[], txId: TxId = tx) =>
      h.settle(h.call<WriteCheckResponse>(p1.name, { kind: 'WriteCheckRequest', partitionId: P1, txId, keys }));
    assert.equal((await check(['f'])).applied, true);
    assert.equal((await check(['f', 'g'])).applied, false);
    assert.equal((await check(['f'], h.newTx())).applied, false, "another tx's intent is not this tx's write");
    await assert.rejects(
      h.settle(h.call(h.backups(P1)[0]!.name, { kind: 'WriteCheckRequest', partitionId: P1, txId: tx, keys: ['f'] })),
      (e: unknown) => isBasaltError(e) && e.code === 'PRIMARY_MISS',
    );
  });
});
