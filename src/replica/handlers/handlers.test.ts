/**
 * The replica request handlers driven directly (no messenger) on three nodes, each hosting replicas of two
 * partitions (P0, the commit partition, and P1) over the real Raft driver on the simulator's virtual time (the
 * cluster of test-cluster.ts, with a LocalIntentResolver on each node). A "coordinator" is just a hybrid clock: every
 * call absorbs the sender's timestamp on arrival and the receiver's on the way back, as the messenger does. Seeds are
 * fixed; a failure message names the seed.
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BasaltError, isBasaltError } from '../../core/errors.js';
import {
  type HybridTimestamp,
  type NodeIdentity,
  type NodeName,
  nodeName,
  type PartitionId,
  type TxId,
} from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import type { HybridClock } from '../../hlc/hybrid-clock.js';
import { addMs } from '../../hlc/timestamp.js';
import type { MessageBody } from '../../net/envelope.js';
import type { Messenger } from '../../net/messenger.js';
import { isUnexecuted, mayResendAsNew } from '../../route/send-to-primary.js';
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
import { partitionLockKey, rowLockKey } from '../../tx/core/lock-modes.js';
import type {
  EnlistmentToken,
  LeaseConfirmResponse,
  ReadOnlyRequest,
  ReadOnlyResponse,
  ReadWriteRequest,
  ReadWriteResponse,
  RwOperation,
  TxCleanupResponse,
  TxFinishRequest,
  TxFinishResponse,
  TxRequest,
  TxResponse,
  WriteConfirmResponse,
} from '../../tx/core/messages.js';
import { TX_REQUEST_KINDS } from '../../tx/core/messages.js';
import { CleanupDriver, messengerCleanupSender, type RequestChannel } from '../cleanup/cleanup-driver.js';
import { tokenOf } from '../partition/lease.js';
import { registerTxRequests, type TxHandlerRegistry, txRequestTable } from '../request-table.js';
import { TxFinishHandler } from './tx-finish.js';

/** What a member of these tests has besides the common stack: its commit partitions' cleanup driver. */
interface CleanupParts {
  readonly cleanups: CleanupDriver;
}

type Member = ClusterMember<CleanupParts>;

class Cluster extends ReplicaTestCluster<CleanupParts> {
  readonly coordName = nodeName('coord');
  /** While set, cleanup requests between nodes fail (the sender sees CONNECTION_CLOSED). */
  dropCleanups = false;
  cleanupRequests = 0;

  constructor(
    seed: number,
    private readonly finish: { cleanupAttemptsMax?: number },
  ) {
    const scheduler = new Scheduler({ seed });
    super(seed, { scheduler, clock: () => new SimClock(scheduler), random: (s) => new SeededRandom(s) });
  }

  static start(seed: number, finish: { cleanupAttemptsMax?: number } = {}): Promise<Cluster> {
    return new Cluster(seed, finish).boot();
  }

  protected wire({ clock, map, timers, locator, partitions }: NodeParts): NodeWiring<CleanupParts> {
    const cleanups = new CleanupDriver({
      partitions,
      sender: {
        request: (to, body) => {
          this.cleanupRequests++;
          if (this.dropCleanups) return Promise.reject(new BasaltError('CONNECTION_CLOSED', 'dropped'));
          return this.call<TxCleanupResponse>(to, body, clock);
        },
      },
      locator,
      timers,
      cleanupBackoffMsMin: 10,
      cleanupBackoffMsMax: 50,
      ...this.finish,
    });
    const table = txRequestTable({
      partitions,
      resolver: new LocalIntentResolver(map),
      finish: new TxFinishHandler({ partitions, cleanups }),
      commitPartition: NO_COMMIT_PARTITION_STATES,
      coordinator: NO_COORDINATOR,
    });
    return { table, extra: { cleanups } };
  }

  /** A request as the messenger delivers it, from the coordinator unless `from` says otherwise. */
  call<R>(to: NodeName, body: TxRequest, from: HybridClock = this.coord): Promise<R> {
    return this.deliver<R>(to, body, from);
  }

  rw(to: Member, request: ReadWriteRequest): Promise<ReadWriteResponse> {
    return this.settle(this.call<ReadWriteResponse>(to.name, request));
  }
}

function rwRequest(
  partitionId: PartitionId,
  txId: TxId,
  opSeq: number,
  operation: RwOperation,
  options: { token?: EnlistmentToken; full?: boolean } = {},
): ReadWriteRequest {
  return {
    kind: 'ReadWriteRequest',
    partitionId,
    txId,
    coordinatorId: COORDINATOR,
    commitPartitionId: P0,
    opSeq,
    full: options.full ?? false,
    operation,
    ...(options.token === undefined ? {} : { token: options.token }),
  };
}

function roRequest(partitionId: PartitionId, key: string, readTs?: HybridTimestamp): ReadOnlyRequest {
  return {
    kind: 'ReadOnlyRequest',
    partitionId,
    coordinatorId: COORDINATOR,
    operation: { op: 'get', key },
    ...(readTs === undefined ? {} : { readTs }),
  };
}

function hasCode(code: string, check: (e: BasaltError) => boolean = () => true) {
  return (e: unknown): boolean => {
    assert.ok(isBasaltError(e), `expected a BasaltError, got ${String(e)}`);
    assert.equal(e.code, code, e.message);
    assert.ok(check(e), `details: ${JSON.stringify(e.details, (_k, v) => (typeof v === 'bigint' ? String(v) : v))}`);
    return true;
  };
}

/** Replay or vary with BASALT_HANDLERS_SEED=n. */
const SEED = Number(process.env['BASALT_HANDLERS_SEED'] ?? 7);

describe('ReadWriteRequest on a partition primary', () => {
  it('enlistment answers the lease; a put then a get in one tx sees its own write; touch and update put PENDING everywhere', async () => {
    const h = await Cluster.start(SEED);
    const primary = h.primary(P1);
    const tx = h.newTx();
    const put = await h.rw(primary, rwRequest(P1, tx, 1, { op: 'put', key: 'k', value: 'v1' }));
    assert.equal(put.lease.holderName, primary.name);
    assert.deepEqual(put.result, { op: 'written' });
    assert.ok(put.writeTs !== undefined && put.writeTs < put.lease.expiration);
    const got = await h.rw(primary, rwRequest(P1, tx, 2, { op: 'get', key: 'k' }, { token: put.lease.token }));
    assert.deepEqual(got.result, { op: 'get', value: { found: true, value: 'v1' } });
    assert.equal(got.writeTs, undefined);
    const entry = primary.map.entry(tx);
    assert.equal(entry?.state, 'PENDING');
    assert.equal(entry?.coordinatorId, COORDINATOR);
    assert.equal(entry?.commitPartitionId, P0, 'replica touch records the commit partition');
    await h.converge();
    for (const b of h.backups(P1)) assert.equal(b.map.entry(tx)?.state, 'PENDING', `${b.name}: update applied`);
    // Another tx cannot read it: a younger reader dies on the writer's X lock (wait-die).
    const reader = h.newTx();
    await assert.rejects(
      h.rw(primary, rwRequest(P1, reader, 1, { op: 'get', key: 'k' })),
      hasCode('TX_LOCK_CONFLICT', (e) => e.details?.['reason'] === 'wait-die'),
    );
  });

  it('a wrong token or a non-primary answers PRIMARY_MISS with the holder hint', async () => {
    const h = await Cluster.start(SEED);
    const primary = h.primary(P1);
    const tx = h.newTx();
    const first = await h.rw(primary, rwRequest(P1, tx, 1, { op: 'get', key: 'a' }));
    const wrong: EnlistmentToken = { ...first.lease.token, start: (first.lease.token.start + 1n) as HybridTimestamp };
    await assert.rejects(
      h.rw(primary, rwRequest(P1, tx, 2, { op: 'get', key: 'a' }, { token: wrong })),
      hasCode('PRIMARY_MISS', (e) => e.details?.['holderName'] === primary.name),
    );
    const backup = h.backups(P1)[0]!;
    await assert.rejects(
      h.rw(backup, rwRequest(P1, tx, 3, { op: 'get', key: 'a' }, { token: first.lease.token })),
      hasCode('PRIMARY_MISS', (e) => e.details?.['holderName'] === primary.name),
    );
  });

  it('a primary change under an open tx: both the old holder and the new one refuse the old token (PRIMARY_MISS)', async () => {
    const h = await Cluster.start(SEED);
    const old = h.primary(P1);
    const tx = h.newTx();
    const put = await h.rw(old, rwRequest(P1, tx, 1, { op: 'put', key: 'm', value: 1 }));
    h.cut.add(old.name);
    await h.runUntil(() => {
      const p = h.primaryOf(P1);
      return p !== undefined && p !== old;
    });
    const next = h.primary(P1);
    assert.ok(next.replicas.get(P1)!.stateMachine.currentLease()!.start >= put.lease.expiration, 'no overlap');
    await assert.rejects(
      h.rw(next, rwRequest(P1, tx, 2, { op: 'get', key: 'm' }, { token: put.lease.token })),
      hasCode(
        'PRIMARY_MISS',
        (e) => e.details?.['reason'] === 'token-mismatch' && e.details?.['holderName'] === next.name,
      ),
    );
    await assert.rejects(
      h.rw(old, rwRequest(P1, tx, 3, { op: 'get', key: 'm' }, { token: put.lease.token })),
      hasCode('PRIMARY_MISS'),
    );
  });

  it('wait-die: an older tx waits for a younger holder and proceeds once the holder is cleaned up', async () => {
    const h = await Cluster.start(SEED);
    const primary = h.primary(P1);
    const older = h.newTx();
    const younger = h.newTx();
    await h.rw(primary, rwRequest(P1, younger, 1, { op: 'put', key: 'j', value: 1 }));
    let settled = false;
    const waiting = h.call<ReadWriteResponse>(primary.name, rwRequest(P1, older, 1, { op: 'get', key: 'j' }));
    waiting.finally(() => {
      settled = true;
    });
    waiting.catch(() => {});
    await h.scheduler.run({ forMs: 200 });
    assert.equal(settled, false, 'the older tx waits for the younger holder');
    assert.deepEqual(
      h
        .hosted(primary, P1)
        .locks.waiters(rowLockKey(P1, 'j'))
        .map((w) => w.txId),
      [older],
    );
    const cleanup = await h.settle(
      h.call<TxCleanupResponse>(primary.name, {
        kind: 'TxCleanupRequest',
        txId: younger,
        partitions: [P1],
        unlockOnly: false,
        outcome: { state: 'ABORTED' },
      }),
    );
    assert.deepEqual(cleanup.cleaned, [P1]);
    const read = await h.settle(waiting);
    assert.deepEqual(read.result, { op: 'get', value: { found: false } }, 'the aborted write is gone');
  });

  it('a lock wait is bounded: the waiter gets a retryable TX_LOCK_CONFLICT when the wait times out', async () => {
    const h = await Cluster.start(SEED);
    const primary = h.primary(P1);
    const older = h.newTx();
    const younger = h.newTx();
    await h.rw(primary, rwRequest(P1, younger, 1, { op: 'put', key: 't', value: 1 }));
    const started = h.scheduler.nowMs();
    await assert.rejects(
      h.rw(primary, rwRequest(P1, older, 1, { op: 'get', key: 't' })),
      hasCode('TX_LOCK_CONFLICT', (e) => e.details?.['reason'] === 'timeout'),
    );
    assert.ok(h.scheduler.nowMs() - started >= 3_000, 'it waited for the configured time first');
    assert.deepEqual(h.hosted(primary, P1).locks.waiters(rowLockKey(P1, 't')), [], 'the waiter was withdrawn');
  });

  it('rule 7: a duplicate opSeq is answered from the first execution, never executed twice; a forgotten old one is stale', async () => {
    const h = await Cluster.start(SEED);
    const primary = h.primary(P1);
    const sm = primary.replicas.get(P1)!.stateMachine;
    const tx = h.newTx();
    const first = await h.rw(primary, rwRequest(P1, tx, 1, { op: 'put', key: 'd', value: 1 }));
    const seqAfterFirst = sm.leaseState().lastSeq;
    const again = await h.rw(primary, rwRequest(P1, tx, 1, { op: 'put', key: 'd', value: 2 }));
    assert.deepEqual(again, first, 'the duplicate gets the first response');
    assert.equal(sm.leaseState().lastSeq, seqAfterFirst, 'no second data command');
    for (let opSeq = 2; opSeq <= 9; opSeq++) await h.rw(primary, rwRequest(P1, tx, opSeq, { op: 'get', key: 'd' }));
    const read = await h.rw(primary, rwRequest(P1, tx, 9, { op: 'get', key: 'd' }));
    assert.deepEqual(read.result, { op: 'get', value: { found: true, value: 1 } });
    await assert.rejects(
      h.rw(primary, rwRequest(P1, tx, 1, { op: 'put', key: 'd', value: 3 })),
      hasCode('TX_OP_STALE'),
    );
  });

  it('one-phase put: committed at its apply timestamp, no intent, no map entry anywhere, locks released', async () => {
    const h = await Cluster.start(SEED);
    const primary = h.primary(P1);
    const tx = h.newTx();
    const put = await h.rw(primary, rwRequest(P1, tx, 1, { op: 'put', key: 'o', value: 42 }, { full: true }));
    assert.ok(put.writeTs !== undefined);
    await h.converge();
    for (const m of h.members.values()) {
      const mv = h.hosted(m, P1).mv;
      const read = mv.readLatest(mv.rowIdOf('o')!);
      assert.ok(read.kind === 'committed' && read.value === 42 && read.commitTs === put.writeTs, `${m.name}`);
      assert.equal(m.map.entry(tx), undefined, `${m.name}: no map entry for a one-phase tx`);
    }
    assert.deepEqual(h.hosted(primary, P1).locks.locksOf(tx), []);
    await assert.rejects(
      h.rw(primary, rwRequest(P1, h.newTx(), 1, { op: 'get', key: 'o' }, { full: true })),
      hasCode('INVALID_ARGUMENT'),
    );
  });

  it('a younger write waits for the lock of a one-phase write, which asks for no more locks, instead of dying', async () => {
    const h = await Cluster.start(SEED);
    const primary = h.primary(P1);
    const older = h.newTx();
    const younger = h.newTx();
    // The older one-phase put holds X on the row while its command replicates; the younger put arrives meanwhile.
    const first = h.call<ReadWriteResponse>(
      primary.name,
      rwRequest(P1, older, 1, { op: 'put', key: 'q', value: 1 }, { full: true }),
    );
    const second = h.call<ReadWriteResponse>(
      primary.name,
      rwRequest(P1, younger, 1, { op: 'put', key: 'q', value: 2 }, { full: true }),
    );
    const [a, b] = await h.settle(Promise.all([first, second]));
    assert.ok(
      a.writeTs !== undefined && b.writeTs !== undefined && b.writeTs > a.writeTs,
      'the younger put came second',
    );
    const mv = h.hosted(primary, P1).mv;
    const read = mv.readLatest(mv.rowIdOf('q')!);
    assert.ok(read.kind === 'committed' && read.value === 2);
    assert.deepEqual(h.hosted(primary, P1).locks.holders(rowLockKey(P1, 'q')), []);
  });

  it('scan: S on the partition keeps writers out (no phantoms); it sees own intents and committed rows, paged by limit', async () => {
    const h = await Cluster.start(SEED);
    const primary = h.primary(P1);
    for (const [i, key] of ['s1', 's2', 's3'].entries()) {
      await h.rw(primary, rwRequest(P1, h.newTx(), 1, { op: 'put', key, value: i }, { full: true }));
    }
    const older = h.newTx();
    const scanner = h.newTx();
    await h.rw(primary, rwRequest(P1, scanner, 1, { op: 'put', key: 's2', value: 'mine' }));
    const page = await h.rw(
      primary,
      rwRequest(P1, scanner, 2, { op: 'scan', range: { kind: 'prefix', prefix: 's' }, limit: 2 }),
    );
    assert.deepEqual(page.result, {
      op: 'scan',
      rows: [
        { key: 's1', value: 0 },
        { key: 's2', value: 'mine' },
      ],
      nextKey: 's3',
    });
    assert.equal(h.hosted(primary, P1).locks.heldMode(scanner, partitionLockKey(P1)), 'SIX', 'IX + S after a write');
    // A younger writer of a new key in the scanned partition dies; an older one waits until the scanner is gone.
    await assert.rejects(
      h.rw(primary, rwRequest(P1, h.newTx(), 1, { op: 'put', key: 's25', value: 'phantom' })),
      hasCode('TX_LOCK_CONFLICT'),
    );
    const waiting = h.call<ReadWriteResponse>(
      primary.name,
      rwRequest(P1, older, 1, { op: 'put', key: 's25', value: 'later' }),
    );
    waiting.catch(() => {});
    await h.scheduler.run({ forMs: 100 });
    assert.equal(h.hosted(primary, P1).locks.waitsOf(older).length, 1, 'the older writer waits for the scanner');
    await h.settle(
      h.call(primary.name, {
        kind: 'TxCleanupRequest',
        txId: scanner,
        partitions: [P1],
        unlockOnly: false,
        outcome: { state: 'ABORTED' },
      }),
    );
    const written = await h.settle(waiting);
    assert.ok(written.writeTs !== undefined);
  });

  it('a foreign intent not protected by a lock (lost with a primary change) answers a retryable TX_LOCK_CONFLICT', async () => {
    const h = await Cluster.start(SEED);
    const primary = h.primary(P1);
    const writer = h.newTx();
    await h.rw(primary, rwRequest(P1, writer, 1, { op: 'put', key: 'w', value: 1 }));
    // What a primary change does to the writer's locks: the new lock table knows nothing of them.
    h.hosted(primary, P1).locks.releaseAll(writer);
    const reader = h.newTx();
    await assert.rejects(
      h.rw(primary, rwRequest(P1, reader, 1, { op: 'get', key: 'w' })),
      hasCode(
        'TX_LOCK_CONFLICT',
        (e) => e.details?.['reason'] === 'write-intent' && e.details?.['intentTxId'] === writer,
      ),
    );
    h.hosted(primary, P1).locks.releaseAll(reader); // the failed reader aborts
    const seq = primary.replicas.get(P1)!.stateMachine.leaseState().lastSeq;
    await assert.rejects(
      h.rw(primary, rwRequest(P1, h.newTx(), 1, { op: 'put', key: 'w', value: 2 }, { full: true })),
      hasCode('TX_LOCK_CONFLICT', (e) => e.details?.['reason'] === 'write-intent'),
    );
    assert.equal(primary.replicas.get(P1)!.stateMachine.leaseState().lastSeq, seq + 1, 'the write was proposed once');
    assert.deepEqual(h.hosted(primary, P1).locks.holders(rowLockKey(P1, 'w')), [], 'one-phase released its lock');
  });

  it('a duplicated one-phase write is answered from the first execution, not written again', async () => {
    const h = await Cluster.start(SEED);
    const primary = h.primary(P1);
    const tx = h.newTx();
    const request = rwRequest(P1, tx, 1, { op: 'put', key: 'dup', value: 1 }, { full: true });
    const first = await h.rw(primary, request);
    await h.rw(primary, rwRequest(P1, h.newTx(), 1, { op: 'put', key: 'dup', value: 2 }, { full: true }));
    const again = await h.rw(primary, request);
    assert.deepEqual(again, first);
    const mv = h.hosted(primary, P1).mv;
    const read = mv.readLatest(mv.rowIdOf('dup')!);
    assert.ok(read.kind === 'committed' && read.value === 2, 'the newer write stays');
  });

  it('a one-phase put whose replica stops after proposing fails with an unknown outcome, and it still applies', async () => {
    const h = await Cluster.start(SEED);
    const primary = h.primary(P1);
    const replica = primary.replicas.get(P1)!;
    const tx = h.newTx();
    const entry = primary.driver.status(P1)!.lastIndex + 1;
    const put = h.call<ReadWriteResponse>(
      primary.name,
      rwRequest(P1, tx, 1, { op: 'put', key: 'abandoned', value: 1 }, { full: true }),
    );
    const answered = put.then(
      () => undefined,
      (error: unknown) => error,
    );
    await h.runUntil(() => replica.proposals.inFlightCount > 0);
    const backups = [...h.members.values()].filter((m) => m !== primary);
    await h.runUntil(() => backups.every((m) => m.driver.status(P1)!.lastIndex >= entry));
    // The primary stops (its replica object and its Raft group) with the proposal in its followers' logs.
    replica.stop();
    h.cut.add(primary.name);
    const error = await h.settle(answered);
    assert.ok(isBasaltError(error, 'NODE_UNAVAILABLE'), `answer: ${String(error)}`);
    assert.equal(error.executed, 'unknown', 'an abandoned proposal proves nothing about its execution');
    assert.equal(isUnexecuted(error), false);
    assert.equal(mayResendAsNew(error), false, 'a coordinator must not resend it as a new one-phase write');
    await h.runUntil(() => backups.every((m) => m.driver.status(P1)!.applied >= entry));
    for (const m of backups) {
      const mv = h.hosted(m, P1).mv;
      const rowId = mv.rowIdOf('abandoned');
      const read = rowId === undefined ? undefined : mv.readLatest(rowId);
      assert.ok(read?.kind === 'committed' && read.value === 1, `${m.name} (a backup): the abandoned write applied`);
    }
  });

  it('rule 15: a request past the tx deadline is rejected; after unlock-only cleanup the tx is final here', async () => {
    const h = await Cluster.start(SEED);
    const primary = h.primary(P1);
    const stale = h.newTx(-31_000);
    await assert.rejects(h.rw(primary, rwRequest(P1, stale, 1, { op: 'get', key: 'x' })), hasCode('TX_TIMEOUT'));
    const tx = h.newTx();
    await h.rw(primary, rwRequest(P1, tx, 1, { op: 'get', key: 'x' }));
    await h.settle(
      h.call(primary.name, {
        kind: 'TxCleanupRequest',
        txId: tx,
        partitions: [P1],
        unlockOnly: true,
        outcome: { state: 'ABORTED' },
      }),
    );
    assert.deepEqual(h.hosted(primary, P1).locks.locksOf(tx), [], 'unlock-only released the read locks');
    assert.equal(primary.map.entry(tx)?.state, 'ABORTED', 'unlock-only ends the entry final, so it is vacuumed');
    await assert.rejects(h.rw(primary, rwRequest(P1, tx, 2, { op: 'get', key: 'x' })), hasCode('TX_ALREADY_FINISHED'));
  });
});

describe('TxFinishRequest and cleanup', () => {
  async function writeBoth(h: Cluster, tx: TxId) {
    const p0 = h.primary(P0);
    const p1 = h.primary(P1);
    const w0 = await h.rw(p0, rwRequest(P0, tx, 1, { op: 'put', key: 'c', value: 'C' }));
    const w1 = await h.rw(p1, rwRequest(P1, tx, 1, { op: 'put', key: 'k', value: 'K' }));
    h.coord.update(w0.writeTs!);
    h.coord.update(w1.writeTs!);
    const enlisted = [
      { partitionId: P0, primaryName: p0.name, token: w0.lease.token },
      { partitionId: P1, primaryName: p1.name, token: w1.lease.token },
    ];
    return { p0, p1, enlisted };
  }

  function finishRequest(tx: TxId, commitTs: HybridTimestamp | undefined, enlisted: TxFinishRequest['enlisted']) {
    const base = { kind: 'TxFinishRequest', txId: tx, commitPartitionId: P0, enlisted } as const;
    return commitTs === undefined ? { ...base, commit: false } : { ...base, commit: true, commitTs };
  }

  it('commit: the reply comes once FinishTx applied (durable, every commit partition replica COMMITTED), without waiting for cleanup; cleanup then switches the intents and releases the locks', async () => {
    const h = await Cluster.start(SEED);
    const tx = h.newTx();
    const { p0, p1, enlisted } = await writeBoth(h, tx);
    const commitTs = h.coord.now();
    let atReply: { stored: string | undefined } | undefined;
    const finish = h.call<TxFinishResponse>(p0.name, finishRequest(tx, commitTs, enlisted)).then((r) => {
      atReply = { stored: h.hosted(p0, P0).txState.get(tx)?.state };
      return r;
    });
    const response = await h.settle(finish);
    assert.deepEqual(response.outcome, { state: 'COMMITTED', commitTs });
    assert.equal(atReply?.stored, 'COMMITTED', 'the outcome is durable when the reply goes out');
    const cleaned = () => {
      const mv = h.hosted(p1, P1).mv;
      const read = mv.readLatest(mv.rowIdOf('k')!);
      const locks = h.hosted(p1, P1).locks.locksOf(tx).length + h.hosted(p0, P0).locks.locksOf(tx).length;
      return locks === 0 && read.kind === 'committed' && read.commitTs === commitTs;
    };
    await h.runUntil(cleaned);
    await h.converge();
    for (const m of h.members.values()) {
      const entry = m.map.entry(tx);
      assert.equal(entry?.state, 'COMMITTED', `${m.name}`);
      assert.equal(entry?.commitTimestamp, commitTs, `${m.name}`);
      const stored = h.hosted(m, P0).txState.get(tx);
      assert.equal(stored?.state, 'COMMITTED', `${m.name}: durable outcome`);
    }
    await h.runUntil(() => h.hosted(p0, P0).txState.get(tx)?.cleanupCompleted === true);
    // RO reads at readTs before and after commitTs.
    const before = await h.settle(
      h.call<ReadOnlyResponse>(p1.name, roRequest(P1, 'k', (commitTs - 1n) as HybridTimestamp)),
    );
    assert.deepEqual(before.result, { op: 'get', value: { found: false } });
    const after = await h.settle(h.call<ReadOnlyResponse>(p1.name, roRequest(P1, 'k', commitTs)));
    assert.deepEqual(after.result, { op: 'get', value: { found: true, value: 'K' } });
  });

  it("the commit partition's own intents switch in the FinishTx entry: at the reply they are committed on every replica, and its cleanup proposes no switch", async () => {
    const h = await Cluster.start(SEED);
    const tx = h.newTx();
    const { p0, p1, enlisted } = await writeBoth(h, tx);
    // Backups apply the writes once they learn the commit index: the hooks below must see only what comes after.
    await h.converge();
    const kinds = new Map<string, string[]>();
    for (const m of h.members.values()) {
      const seen: string[] = [];
      kinds.set(m.name, seen);
      h.hosted(m, P0).stateMachine.onApplied((entries) => {
        for (const e of entries) if (e.command !== null) seen.push(e.command.kind);
      });
    }
    const commitTs = h.coord.now();
    const committedOn = (m: Parameters<Cluster['hosted']>[0], key: string, partitionId: typeof P0) => {
      const mv = h.hosted(m, partitionId).mv;
      const read = mv.readLatest(mv.rowIdOf(key)!);
      return read.kind === 'committed' && read.commitTs === commitTs;
    };
    let atReply = false;
    const finish = h.call<TxFinishResponse>(p0.name, finishRequest(tx, commitTs, enlisted)).then((r) => {
      atReply = committedOn(p0, 'c', P0);
      return r;
    });
    await h.settle(finish);
    assert.equal(atReply, true, "the commit partition's intent is committed when the reply goes out");
    await h.runUntil(() => h.hosted(p0, P0).txState.get(tx)?.cleanupCompleted === true);
    await h.converge();
    assert.equal(committedOn(p1, 'k', P1), true, 'the other partition is switched by the cleanup');
    assert.equal(h.hosted(p0, P0).locks.locksOf(tx).length, 0, 'the cleanup released the locks');
    for (const m of h.members.values()) {
      assert.equal(committedOn(m, 'c', P0), true, `${m.name}: committed`);
      const seen = kinds.get(m.name)!;
      assert.deepEqual(
        seen.filter((k) => k !== 'SafeTimeSync' && k !== 'Lease'),
        ['FinishTx', 'TxCleanupCompleted'],
        `${m.name}: no switch entry on the commit partition`,
      );
    }
  });

  it('finish is idempotent; a late conflicting finish gets TX_MISMATCHING_OUTCOME carrying the real outcome', async () => {
    const h = await Cluster.start(SEED);
    const tx = h.newTx();
    const { p0, enlisted } = await writeBoth(h, tx);
    const commitTs = h.coord.now();
    const first = await h.settle(h.call<TxFinishResponse>(p0.name, finishRequest(tx, commitTs, enlisted)));
    await h.runUntil(() => h.hosted(p0, P0).txState.get(tx)?.cleanupCompleted === true);
    const requestsAfterFirst = h.cleanupRequests;
    const again = await h.settle(h.call<TxFinishResponse>(p0.name, finishRequest(tx, commitTs, enlisted)));
    assert.deepEqual(again.outcome, first.outcome);
    await assert.rejects(
      h.settle(h.call(p0.name, finishRequest(tx, undefined, enlisted))),
      hasCode('TX_MISMATCHING_OUTCOME', (e) => {
        const outcome = e.details?.['outcome'] as { state: string; commitTs?: bigint };
        return outcome.state === 'COMMITTED' && outcome.commitTs === commitTs;
      }),
    );
    assert.equal(h.cleanupRequests, requestsAfterFirst, 'a cleaned-up tx is not cleaned up again');
  });

  it('a repeated finish cleans the enlisted partitions the first decider did not know (a cleaned-up record)', async () => {
    const h = await Cluster.start(SEED);
    const tx = h.newTx();
    const { p0, p1, enlisted } = await writeBoth(h, tx);
    // A decider that knew only the commit partition (as a recovery may): aborted, cleaned up, marked.
    const partial = enlisted.filter((e) => e.partitionId === P0);
    await h.settle(h.call<TxFinishResponse>(p0.name, finishRequest(tx, undefined, partial)));
    await h.runUntil(() => h.hosted(p0, P0).txState.get(tx)?.cleanupCompleted === true);
    assert.equal(h.hosted(p1, P1).mv.rowsWrittenBy(tx).length, 1, 'P1 still holds the intent');
    // The coordinator's own abort names both: P1 is cleaned too (its intent aborted, its locks released).
    const response = await h.settle(h.call<TxFinishResponse>(p0.name, finishRequest(tx, undefined, enlisted)));
    assert.deepEqual(response.outcome, { state: 'ABORTED' });
    await h.runUntil(() => h.hosted(p1, P1).mv.rowsWrittenBy(tx).length === 0);
    assert.deepEqual(h.hosted(p1, P1).locks.locksOf(tx), []);
  });

  it("rule 14: the finish handler never waits on a FINISHING entry in its own node's map", async () => {
    const h = await Cluster.start(SEED);
    const tx = h.newTx();
    const { p0, enlisted } = await writeBoth(h, tx);
    const commitTs = h.coord.now();
    // The coordinator runs on the commit partition primary's node: its map already says FINISHING.
    assert.equal(p0.map.beginFinish(tx, { commitTimestamp: commitTs, coordinatorId: COORDINATOR }).kind, 'began');
    const response = await h.settle(h.call<TxFinishResponse>(p0.name, finishRequest(tx, commitTs, enlisted)), 2_000);
    assert.deepEqual(response.outcome, { state: 'COMMITTED', commitTs });
    assert.equal(p0.map.entry(tx)?.state, 'COMMITTED');
  });

  it('rule 15: a commit with commitTs at or past the deadline is refused and nothing is stored', async () => {
    const h = await Cluster.start(SEED);
    const tx = h.newTx();
    const { p0, enlisted } = await writeBoth(h, tx);
    const late = addMs(h.coord.now(), 40_000);
    await assert.rejects(h.settle(h.call(p0.name, finishRequest(tx, late, enlisted))), hasCode('TX_TIMEOUT'));
    assert.equal(h.hosted(p0, P0).txState.get(tx), undefined);
    assert.equal(h.primaryOf(P0), p0, 'the refused commitTs did not push the primary past its lease');
  });

  it('a cleanup that could not reach the primaries is re-run from durable state by the cleanup driver (recover)', async () => {
    const h = await Cluster.start(SEED, { cleanupAttemptsMax: 2 });
    const tx = h.newTx();
    const { p0, p1, enlisted } = await writeBoth(h, tx);
    h.dropCleanups = true;
    const commitTs = h.coord.now();
    const response = await h.settle(h.call<TxFinishResponse>(p0.name, finishRequest(tx, commitTs, enlisted)));
    assert.deepEqual(response.outcome, { state: 'COMMITTED', commitTs }, 'the durable outcome is answered');
    assert.equal(h.hosted(p0, P0).txState.get(tx)?.cleanupCompleted, false);
    assert.ok(h.hosted(p1, P1).locks.locksOf(tx).length > 0, 'locks still held');
    h.dropCleanups = false;
    const recovered = await h.settle(p0.cleanups.recover(P0));
    assert.equal(recovered, 1);
    assert.deepEqual(h.hosted(p1, P1).locks.locksOf(tx), []);
    await h.runUntil(() => h.hosted(p0, P0).txState.get(tx)?.cleanupCompleted === true);
  });

  it('a cleanup run that ended unfinished is re-driven by the rescan of records whose cleanup has not completed', async () => {
    const h = await Cluster.start(SEED, { cleanupAttemptsMax: 2 });
    const tx = h.newTx();
    const { p0, p1, enlisted } = await writeBoth(h, tx);
    h.dropCleanups = true;
    const commitTs = h.coord.now();
    await h.settle(h.call<TxFinishResponse>(p0.name, finishRequest(tx, commitTs, enlisted)));
    await h.runUntil(() => p0.cleanups.runsInFlight === 0);
    assert.equal(h.hosted(p0, P0).txState.get(tx)?.cleanupCompleted, false, 'the run ended unfinished');
    assert.ok(h.hosted(p1, P1).locks.locksOf(tx).length > 0, 'locks still held');
    h.dropCleanups = false;
    assert.equal(p0.cleanups.rescan(h.hosted(p0, P0)), 1, 'one record owes a cleanup');
    assert.equal(p0.cleanups.rescan(h.hosted(p0, P0)), 0, 'a record being cleaned is not started twice');
    await h.runUntil(() => h.hosted(p0, P0).txState.get(tx)?.cleanupCompleted === true);
    assert.deepEqual(h.hosted(p1, P1).locks.locksOf(tx), []);
    assert.deepEqual(h.hosted(p1, P1).mv.rowsWrittenBy(tx), []);
    assert.equal(p0.cleanups.rescan(h.hosted(p0, P0)), 0, 'nothing left to re-drive');
    assert.equal(p1.cleanups.rescan(h.hosted(p1, P0)), 0, 'a backup of the commit partition drives nothing');
  });

  it('a caller that joins a cleanup run in progress with a partition the run does not clean has it cleaned by that run', async () => {
    const h = await Cluster.start(SEED);
    const tx = h.newTx();
    const { p0, p1, enlisted } = await writeBoth(h, tx);
    // A decider that knew only the commit partition (as a recovery may); its cleanup cannot get through yet.
    h.dropCleanups = true;
    const partial = enlisted.filter((e) => e.partitionId === P0);
    await h.settle(h.call<TxFinishResponse>(p0.name, finishRequest(tx, undefined, partial)));
    assert.equal(p0.cleanups.runsInFlight, 1);
    // A later caller (another reporter's recovery request) knows P1 too: it joins the run in progress.
    const joined = p0.cleanups.ensureCleanup(h.hosted(p0, P0), tx, { state: 'ABORTED' }, [{ partitionId: P1 }]);
    assert.equal(p0.cleanups.runsInFlight, 1, 'one run per tx');
    h.dropCleanups = false;
    assert.equal(await h.settle(joined), true);
    assert.deepEqual(h.hosted(p1, P1).mv.rowsWrittenBy(tx), [], "the joiner's partition was cleaned");
    assert.deepEqual(h.hosted(p1, P1).locks.locksOf(tx), []);
    assert.deepEqual(h.hosted(p0, P0).locks.locksOf(tx), []);
    await h.runUntil(() => h.hosted(p0, P0).txState.get(tx)?.cleanupCompleted === true);
  });

  it('rule 15: a run that cleaned only some of the partitions the record names does not mark the record cleaned up', async () => {
    const h = await Cluster.start(SEED, { cleanupAttemptsMax: 2 });
    const tx = h.newTx();
    const { p0, p1, enlisted } = await writeBoth(h, tx);
    h.dropCleanups = true;
    await h.settle(h.call<TxFinishResponse>(p0.name, finishRequest(tx, undefined, enlisted)));
    await h.runUntil(() => p0.cleanups.runsInFlight === 0);
    h.dropCleanups = false;
    // A caller that knows only P1 (a reporter's recovery request): P1 is cleaned, P0 still holds the tx's locks.
    const run = p0.cleanups.ensureCleanup(h.hosted(p0, P0), tx, { state: 'ABORTED' }, [{ partitionId: P1 }]);
    assert.equal(await h.settle(run), true);
    assert.deepEqual(h.hosted(p1, P1).locks.locksOf(tx), []);
    assert.ok(h.hosted(p0, P0).locks.locksOf(tx).length > 0, 'P0 was not cleaned by this run');
    await h.scheduler.run({ forMs: 2 * LIMITS.cleanupCompletedGatherMs });
    assert.equal(h.hosted(p0, P0).txState.get(tx)?.cleanupCompleted, false, 'vacuum may not remove the record yet');
  });

  it('messengerCleanupSender bounds each request by the cleanup timeout and checks the response kind', async () => {
    const seen: { to: string; timeoutMs: number }[] = [];
    const answers: unknown[] = [
      { kind: 'TxCleanupResponse', txId: 'x', cleaned: [P1] },
      { kind: 'LeaseConfirmResponse', confirmed: true },
    ];
    const sender = messengerCleanupSender(
      {
        request: async (to, _body, options) => {
          seen.push({ to, timeoutMs: options.timeoutMs });
          return answers.shift();
        },
      },
      1_234,
    );
    const body = {
      kind: 'TxCleanupRequest',
      txId: 'x' as TxId,
      partitions: [P1],
      unlockOnly: true,
      outcome: { state: 'ABORTED' },
    } as const;
    assert.deepEqual((await sender.request(nodeName('n2'), body)).cleaned, [P1]);
    await assert.rejects(sender.request(nodeName('n2'), body), hasCode('INTERNAL'));
    assert.deepEqual(seen, [
      { to: 'n2', timeoutMs: 1_234 },
      { to: 'n2', timeoutMs: 1_234 },
    ]);
    const fits: (messenger: Messenger<MessageBody>) => RequestChannel = (messenger) => messenger;
    assert.equal(typeof fits, 'function');
  });

  it("cleanups that arrive while a switch is replicated go into one WriteIntentSwitchAll; a commit's locks go once its switch is proposed", async () => {
    const h = await Cluster.start(SEED);
    const primary = h.primary(P1);
    const txs = [h.newTx(), h.newTx(), h.newTx()];
    for (const [i, tx] of txs.entries()) {
      await h.rw(primary, rwRequest(P1, tx, 1, { op: 'put', key: `c${i}`, value: i }));
    }
    await h.converge();
    const commitTs = h.coord.now();
    const hosted = h.hosted(primary, P1);
    const switched: { kind: string; txIds: readonly TxId[]; locked: readonly boolean[] }[] = [];
    primary.replicas.get(P1)!.stateMachine.onApplied((entries) => {
      for (const { command } of entries) {
        if (command?.kind === 'WriteIntentSwitch' || command?.kind === 'WriteIntentSwitchAll') {
          const txIds = command.kind === 'WriteIntentSwitch' ? [command.txId] : command.switches.map((s) => s.txId);
          const locked = txs.map((tx) => hosted.locks.locksOf(tx).length > 0);
          switched.push({ kind: command.kind, txIds, locked });
        }
      }
    });
    const cleanups = txs.map((txId) =>
      h.call<TxCleanupResponse>(primary.name, {
        kind: 'TxCleanupRequest',
        txId,
        partitions: [P1],
        unlockOnly: false,
        outcome: { state: 'COMMITTED', commitTs },
      }),
    );
    for (const cleanup of cleanups) assert.deepEqual((await h.settle(cleanup)).cleaned, [P1]);
    // The first tx's locks went when its switch was proposed, before it applied; the two queued behind that switch
    // kept theirs until their own command was proposed, and it holds both.
    assert.deepEqual(switched, [
      { kind: 'WriteIntentSwitch', txIds: [txs[0]], locked: [false, true, true] },
      { kind: 'WriteIntentSwitchAll', txIds: [txs[1], txs[2]], locked: [false, false, false] },
    ]);
    await h.converge();
    for (const m of h.members.values()) {
      const mv = h.hosted(m, P1).mv;
      for (const [i, tx] of txs.entries()) {
        const read = mv.readLatest(mv.rowIdOf(`c${i}`)!);
        assert.ok(read.kind === 'committed' && read.value === i && read.commitTs === commitTs, `${m.name} c${i}`);
        assert.equal(m.map.entry(tx)?.state, 'COMMITTED', `${m.name}: ${tx}`);
      }
    }
  });

  it("the next holder of a committed writer's lock reads through its intent before the switch applied; an aborted writer's lock waits for its switch", async () => {
    const h = await Cluster.start(SEED);
    const primary = h.primary(P1);
    const hosted = h.hosted(primary, P1);
    const writer = h.newTx();
    await h.rw(primary, rwRequest(P1, writer, 1, { op: 'put', key: 'r', value: 'new' }));
    await h.converge();
    const commitTs = h.coord.now();
    const reader = h.newTx();
    const readerLockedAtSwitch: boolean[] = [];
    primary.replicas.get(P1)!.stateMachine.onApplied((entries) => {
      for (const { command } of entries) {
        if (command?.kind !== 'WriteIntentSwitch' || command.txId !== writer) continue;
        readerLockedAtSwitch.push(hosted.locks.holders(rowLockKey(P1, 'r')).some((l) => l.txId === reader));
      }
    });
    const read = h.call<ReadWriteResponse>(
      primary.name,
      rwRequest(P1, reader, 1, { op: 'get', key: 'r', forUpdate: true }),
    );
    read.catch(() => {});
    await h.scheduler.run({ forMs: 20 });
    const cleanup = h.call<TxCleanupResponse>(primary.name, {
      kind: 'TxCleanupRequest',
      txId: writer,
      partitions: [P1],
      unlockOnly: false,
      outcome: { state: 'COMMITTED', commitTs },
    });
    assert.deepEqual((await h.settle(read)).result, { op: 'get', value: { found: true, value: 'new' } });
    assert.deepEqual((await h.settle(cleanup)).cleaned, [P1]);
    assert.deepEqual(readerLockedAtSwitch, [true], "the reader held the row's lock before the switch applied");

    // An abort keeps its locks until its switch applied: the reader then finds the row as it was before the intent.
    const aborted = h.newTx();
    await h.rw(primary, rwRequest(P1, aborted, 1, { op: 'put', key: 'a', value: 'gone' }));
    const second = h.newTx();
    const waiting = h.call<ReadWriteResponse>(primary.name, rwRequest(P1, second, 1, { op: 'get', key: 'a' }));
    waiting.catch(() => {});
    await h.scheduler.run({ forMs: 20 });
    const abortCleanup = h.call<TxCleanupResponse>(primary.name, {
      kind: 'TxCleanupRequest',
      txId: aborted,
      partitions: [P1],
      unlockOnly: false,
      outcome: { state: 'ABORTED' },
    });
    assert.deepEqual((await h.settle(waiting)).result, { op: 'get', value: { found: false } });
    assert.deepEqual((await h.settle(abortCleanup)).cleaned, [P1]);
  });

  it('a cleanup for a partition this node is not primary of answers PRIMARY_MISS', async () => {
    const h = await Cluster.start(SEED);
    const backup = h.backups(P1)[0]!;
    await assert.rejects(
      h.settle(
        h.call(backup.name, {
          kind: 'TxCleanupRequest',
          txId: h.newTx(),
          partitions: [P1],
          unlockOnly: false,
          outcome: { state: 'ABORTED' },
        }),
      ),
      hasCode('PRIMARY_MISS'),
    );
  });
});

describe('ReadOnlyRequest and LeaseConfirmRequest', () => {
  it('a backup serves readTs only once its applied safe time covers it; a far readTs times out', async () => {
    const h = await Cluster.start(SEED);
    const primary = h.primary(P1);
    const tx = h.newTx();
    const put = await h.rw(primary, rwRequest(P1, tx, 1, { op: 'put', key: 'r', value: 1 }, { full: true }));
    const backup = h.backups(P1)[0]!;
    const readTs = h.coord.now();
    assert.ok(readTs > put.writeTs!);
    assert.ok(backup.replicas.get(P1)!.stateMachine.safeTime.current() < readTs, 'the backup cannot serve at once');
    let servedAtSafeTime: HybridTimestamp | undefined;
    const read = h.call<ReadOnlyResponse>(backup.name, roRequest(P1, 'r', readTs)).then((r) => {
      servedAtSafeTime = backup.replicas.get(P1)!.stateMachine.safeTime.current();
      return r;
    });
    const response = await h.settle(read);
    assert.ok(servedAtSafeTime !== undefined && servedAtSafeTime >= readTs, 'served only once safe time covered it');
    assert.deepEqual(response.result, { op: 'get', value: { found: true, value: 1 } });
    assert.equal(response.readTs, readTs);
    await assert.rejects(
      h.settle(h.call(backup.name, roRequest(P1, 'r', addMs(h.coord.now(), 60_000)))),
      hasCode('TIMEOUT'),
    );
    assert.equal(h.hosted(backup, P1).readWaiterCount, 0);
  });

  it('implicit read (no readTs) is served on the primary at its now; a foreign intent of a PENDING tx is not visible', async () => {
    const h = await Cluster.start(SEED);
    const primary = h.primary(P1);
    await h.rw(primary, rwRequest(P1, h.newTx(), 1, { op: 'put', key: 'i', value: 'old' }, { full: true }));
    const tx = h.newTx();
    await h.rw(primary, rwRequest(P1, tx, 1, { op: 'put', key: 'i', value: 'new' }));
    const sent = h.coord.now();
    const read = await h.settle(h.call<ReadOnlyResponse>(primary.name, roRequest(P1, 'i')));
    assert.ok(read.readTs > sent, "served at the primary's now, after absorbing the request");
    assert.deepEqual(read.result, { op: 'get', value: { found: true, value: 'old' } });
    const backup = h.backups(P1)[0]!;
    await assert.rejects(h.settle(h.call(backup.name, roRequest(P1, 'i'))), hasCode('PRIMARY_MISS'));
  });

  it('local resolution: an intent of a tx final here is visible only when COMMITTED at or below readTs', async () => {
    const h = await Cluster.start(SEED);
    const primary = h.primary(P1);
    for (const key of ['a', 'b']) {
      await h.rw(primary, rwRequest(P1, h.newTx(), 1, { op: 'put', key, value: 'old' }, { full: true }));
    }
    const committed = h.newTx();
    const aborted = h.newTx();
    await h.rw(primary, rwRequest(P1, committed, 1, { op: 'put', key: 'a', value: 'new' }));
    await h.rw(primary, rwRequest(P1, aborted, 1, { op: 'put', key: 'b', value: 'new' }));
    const commitTs = h.coord.now();
    // Outcomes known on this node before any intent was switched (as a resolution would cache them).
    primary.map.update(committed, { state: 'COMMITTED', commitTimestamp: commitTs, reason: 'resolution' });
    primary.map.update(aborted, { state: 'ABORTED', reason: 'resolution' });
    const readA = async (readTs: HybridTimestamp) =>
      (await h.settle(h.call<ReadOnlyResponse>(primary.name, roRequest(P1, 'a', readTs)))).result;
    assert.deepEqual(await readA(commitTs), { op: 'get', value: { found: true, value: 'new' } });
    assert.deepEqual(await readA((commitTs - 1n) as HybridTimestamp), {
      op: 'get',
      value: { found: true, value: 'old' },
    });
    const readB = await h.settle(h.call<ReadOnlyResponse>(primary.name, roRequest(P1, 'b', h.coord.now())));
    assert.deepEqual(readB.result, { op: 'get', value: { found: true, value: 'old' } });
    const mv = h.hosted(primary, P1).mv;
    assert.equal(mv.readLatest(mv.rowIdOf('a')!).kind, 'intent', 'the reads switched nothing');
  });

  it('a change read: versions in (fromTs, readTs], an intent at its commitTs only when committed inside the window', async () => {
    const h = await Cluster.start(SEED);
    const primary = h.primary(P1);
    const before = h.coord.now();
    for (const key of ['a', 'b', 'c']) {
      await h.rw(primary, rwRequest(P1, h.newTx(), 1, { op: 'put', key, value: 'old' }, { full: true }));
    }
    const committed = h.newTx();
    const aborted = h.newTx();
    await h.rw(primary, rwRequest(P1, committed, 1, { op: 'put', key: 'a', value: 'new' }));
    await h.rw(primary, rwRequest(P1, aborted, 1, { op: 'remove', key: 'b' }));
    const commitTs = h.coord.now();
    primary.map.update(committed, { state: 'COMMITTED', commitTimestamp: commitTs, reason: 'resolution' });
    primary.map.update(aborted, { state: 'ABORTED', reason: 'resolution' });
    const changes = async (fromTs: HybridTimestamp, readTs: HybridTimestamp) => {
      const request: ReadOnlyRequest = {
        kind: 'ReadOnlyRequest',
        partitionId: P1,
        coordinatorId: COORDINATOR,
        readTs,
        operation: { op: 'changes', range: { kind: 'range' }, fromTs, limit: 100 },
      };
      const { result } = await h.settle(h.call<ReadOnlyResponse>(primary.name, request));
      assert.equal(result.op, 'changes');
      return result.op === 'changes' ? result.changes.map((c) => [c.key, c.deleted ? 'x' : c.value, c.commitTs]) : [];
    };
    const upToCommit = await changes(before, commitTs);
    assert.deepEqual(
      upToCommit.map(([key, value]) => [key, value]),
      [
        ['a', 'old'],
        ['a', 'new'],
        ['b', 'old'],
        ['c', 'old'],
      ],
      'the old versions, and the committed intent; never the aborted removal',
    );
    assert.equal(upToCommit[1]![2], commitTs, "the intent's change is at its tx's commitTs");
    assert.deepEqual(await changes(before, (commitTs - 1n) as HybridTimestamp).then((c) => c.length), 3);
    assert.deepEqual(await changes((commitTs - 1n) as HybridTimestamp, h.coord.now()), [['a', 'new', commitTs]]);
    assert.deepEqual(await changes(commitTs, h.coord.now()), [], 'nothing above the commit');
    await assert.rejects(
      h.settle(
        h.call(primary.name, {
          ...roRequest(P1, 'a', commitTs),
          operation: { op: 'changes', range: { kind: 'range' }, fromTs: commitTs, limit: 1 },
        }),
      ),
      hasCode('INVALID_ARGUMENT'),
      'a window needs readTs above fromTs',
    );
  });

  it('rule 6: lease confirmation says yes under the current token and no under another', async () => {
    const h = await Cluster.start(SEED);
    const primary = h.primary(P1);
    const got = await h.rw(primary, rwRequest(P1, h.newTx(), 1, { op: 'get', key: 'z' }));
    const commitTs = h.coord.now();
    const yes = await h.settle(
      h.call<LeaseConfirmResponse>(primary.name, {
        kind: 'LeaseConfirmRequest',
        partitionId: P1,
        token: got.lease.token,
        commitTs,
      }),
    );
    assert.equal(yes.confirmed, true);
    assert.ok(primary.clock.current() > commitTs, 'commitTs absorbed');
    const other = { ...got.lease.token, start: (got.lease.token.start - 1n) as HybridTimestamp };
    const no = await h.settle(
      h.call<LeaseConfirmResponse>(primary.name, {
        kind: 'LeaseConfirmRequest',
        partitionId: P1,
        token: other,
        commitTs: h.coord.now(),
      }),
    );
    assert.equal(no.confirmed, false);
  });

  it('registerTxRequests: every request kind of the table is registered with a messenger-shaped registry', async () => {
    const h = await Cluster.start(SEED);
    const m = h.primary(P1);
    const handlers = new Map<string, (body: never, from: NodeIdentity) => Promise<unknown>>();
    const registry: TxHandlerRegistry = {
      handle: (kind, handler) => {
        handlers.set(kind, handler as (body: never, from: NodeIdentity) => Promise<unknown>);
        return () => handlers.delete(kind);
      },
    };
    // The node's messenger, seen with the tx protocol's kinds, fits the registry type.
    const fits: (messenger: Messenger<MessageBody>) => TxHandlerRegistry = (messenger) =>
      messenger.as<TxRequest | TxResponse>();
    assert.equal(typeof fits, 'function');
    const undo = registerTxRequests(registry, m.table);
    assert.deepEqual([...handlers.keys()].sort(), [...TX_REQUEST_KINDS].sort());
    const confirm = handlers.get('LeaseConfirmRequest')!;
    const answer = await h.settle(
      confirm(
        {
          kind: 'LeaseConfirmRequest',
          partitionId: P1,
          token: tokenOf(m.replicas.get(P1)!.stateMachine.currentLease()!),
          commitTs: h.coord.now(),
        } as never,
        { name: h.coordName, id: COORDINATOR },
      ),
    );
    assert.deepEqual(answer, { kind: 'LeaseConfirmResponse', confirmed: true });
    undo();
    assert.equal(handlers.size, 0);
  });

  it('the request table answers PRIMARY_MISS for a partition not hosted here', async () => {
    const h = await Cluster.start(SEED);
    const m = h.primary(P1);
    await assert.rejects(
      h.settle(h.call(m.name, { ...roRequest('t9p9' as PartitionId, 'k'), readTs: h.coord.now() })),
      hasCode('PRIMARY_MISS', (e) => e.details?.['reason'] === 'not-hosted'),
    );
  });
});

describe('pipelined writes (answered once proposed, confirmed before commit)', () => {
  function pipelinedPut(txId: TxId, opSeq: number, key: string, value: string, token?: EnlistmentToken) {
    const request = rwRequest(P1, txId, opSeq, { op: 'put', key, value }, token === undefined ? {} : { token });
    return { ...request, pipelined: true };
  }

  it("a lease move drops the old holder's pipelined-write records: after a rollback cleaned up at the new primary, the old one tracks nothing and may rest", async () => {
    const h = await Cluster.start(SEED);
    const old = h.primary(P1);
    const tx = h.newTx();
    const put = await h.rw(old, pipelinedPut(tx, 1, 'q', 'Q'));
    assert.equal(put.pipelined, true, 'answered before its apply');
    const oldReplica = h.hosted(old, P1);
    await h.converge();
    assert.equal(oldReplica.pipeline.size, 1, 'the write awaits its confirmation');
    // The leadership moves; the old lease runs out unrenewed and the new leader takes the next one.
    const next = h.backups(P1)[0]!;
    assert.ok(old.driver.transferLeader(P1, next.name));
    await h.runUntil(() => h.primaryOf(P1) === next);
    await h.converge();
    // Roll back: the commit partition's cleanup of P1 reaches the new primary only.
    const p0 = h.primary(P0);
    const enlisted = [{ partitionId: P1, primaryName: old.name, token: put.lease.token }];
    const finish = await h.settle(
      h.call<TxFinishResponse>(p0.name, {
        kind: 'TxFinishRequest',
        txId: tx,
        commitPartitionId: P0,
        enlisted,
        commit: false,
      }),
    );
    assert.deepEqual(finish.outcome, { state: 'ABORTED' });
    await h.runUntil(() => h.hosted(p0, P0).txState.get(tx)?.cleanupCompleted === true);
    assert.equal(h.hosted(next, P1).mv.rowsWrittenBy(tx).length, 0, 'the new primary aborted the intent');
    assert.equal(oldReplica.pipeline.size, 0, 'the old holder tracks nothing of the tx');
    await h.scheduler.run({ forMs: LIMITS.replicaRestAfterMsDefault });
    assert.equal(oldReplica.mayRest(), true, 'the partition rests on the old holder again');
  });

  it('read your own writes: once a pipelined write of the tx failed to apply, its next operation there fails TX_ABORTED instead of reading the old value', async () => {
    const h = await Cluster.start(SEED);
    const holder = h.primary(P1);
    await h.rw(holder, rwRequest(P1, h.newTx(), 1, { op: 'put', key: 'r', value: 'old' }, { full: true }));
    const tx = h.newTx();
    const first = await h.rw(holder, rwRequest(P1, tx, 1, { op: 'get', key: 'r' }));
    const token = first.lease.token;
    // The Raft leadership moves away while the lease stays: the holder still acts, but its proposals fail.
    const leader = h.backups(P1)[0]!;
    assert.ok(holder.driver.transferLeader(P1, leader.name));
    await h.runUntil(() => leader.driver.status(P1)?.role === 'leader');
    assert.equal(h.primaryOf(P1), holder, 'the lease has not moved');
    const put = await h.rw(holder, pipelinedPut(tx, 2, 'r', 'new', token));
    assert.deepEqual([put.result, put.pipelined], [{ op: 'written' }, true], 'answered before its apply');
    await assert.rejects(
      h.rw(holder, rwRequest(P1, tx, 3, { op: 'get', key: 'r' }, { token })),
      hasCode('TX_ABORTED', (e) => e.details?.['reason'] === 'pipelined-write-failed'),
    );
    await assert.rejects(
      h.rw(holder, pipelinedPut(tx, 4, 's', 'S', token)),
      hasCode('TX_ABORTED', (e) => e.details?.['reason'] === 'pipelined-write-failed'),
    );
    await assert.rejects(
      h.settle(h.call<WriteConfirmResponse>(holder.name, { kind: 'WriteConfirmRequest', partitionId: P1, txId: tx })),
      hasCode('NOT_LEADER'),
      "the confirmation answers the write's own failure: the commit is refused too",
    );
  });
});
