import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { AssertionError } from '../../core/assert.js';
import { isBasaltError } from '../../core/errors.js';
import { nodeId, partitionId, type TxId } from '../../core/ids.js';
import { hybridTimestamp } from '../../hlc/timestamp.js';
import {
  type AcquireResult,
  acquireLock,
  type LockDenial,
  type LockGrant,
  type LockListener,
  LockManager,
  type LockWaitHandle,
} from './lock-manager.js';
import {
  isCompatible,
  joinModes,
  LOCK_MODES,
  type LockKey,
  type LockMode,
  pointLockPlan,
  scanLockPlan,
} from './lock-modes.js';
import { isOlder, makeTxId } from './tx-id.js';

/** tx(1) is the oldest; a larger number began later. */
function tx(age: number): TxId {
  return makeTxId({ beginTimestamp: hybridTimestamp(1_000 + age), nodeId: nodeId('n1'), counter: age });
}

const K = 'r:t1p0:k' as LockKey;
const J = 'r:t1p0:j' as LockKey;
const OLD = tx(1);
const MID = tx(2);
const YOUNG = tx(3);

class Recorder implements LockListener {
  readonly events: string[] = [];
  onGranted(g: LockGrant): void {
    this.events.push(`granted ${g.mode}`);
  }
  onDenied(d: LockDenial): void {
    this.events.push(`denied ${d.reason} ${d.code}`);
  }
}

function expectWaiting(r: AcquireResult): LockWaitHandle {
  assert.equal(r.kind, 'waiting');
  assert.ok(r.kind === 'waiting');
  return r.handle;
}

function expectDenied(r: AcquireResult): LockDenial {
  assert.ok(r.kind === 'denied', `expected denied, got ${r.kind}`);
  return r.denial;
}

describe('lock manager: patient requests', () => {
  it('a patient younger request waits for an older holder, names it, and is granted when it releases', () => {
    const lm = new LockManager();
    lm.acquire(OLD, K, 'X', new Recorder());
    const rec = new Recorder();
    const r = lm.acquire(YOUNG, K, 'X', rec, { patient: true });
    assert.ok(r.kind === 'waiting' && r.olderBlocker === OLD);
    assert.equal(r.handle.olderBlocker(), OLD);
    assert.deepEqual(lm.waiters(K), [{ txId: YOUNG, mode: 'X', target: 'X', upgrade: false, patient: true }]);
    lm.releaseAll(OLD);
    assert.deepEqual(rec.events, ['granted X']);
    assert.equal(lm.heldMode(YOUNG, K), 'X');
  });

  it('a patient request blocked only by younger txs waits as any other, with no older blocker', () => {
    const lm = new LockManager();
    lm.acquire(YOUNG, K, 'X', new Recorder());
    const r = lm.acquire(MID, K, 'X', new Recorder(), { patient: true });
    assert.ok(r.kind === 'waiting' && r.olderBlocker === undefined);
    assert.equal(r.handle.olderBlocker(), undefined);
  });

  it('once the older holder is gone, the waiter has no older blocker though a younger one still blocks it', () => {
    const lm = new LockManager();
    lm.acquire(OLD, K, 'S', new Recorder());
    lm.acquire(YOUNG, K, 'S', new Recorder());
    const r = lm.acquire(MID, K, 'X', new Recorder(), { patient: true });
    assert.ok(r.kind === 'waiting' && r.olderBlocker === OLD);
    lm.releaseAll(OLD);
    assert.equal(r.handle.olderBlocker(), undefined, 'only YOUNG blocks it now');
    assert.equal(lm.waitsOf(MID).length, 1);
  });

  it('a finishing older holder is waited for without patience; an upgrade is never patient', () => {
    const lm = new LockManager();
    lm.acquire(OLD, K, 'X', new Recorder());
    lm.markFinishing(OLD);
    const r = lm.acquire(YOUNG, K, 'X', new Recorder(), { patient: true });
    assert.ok(r.kind === 'waiting' && r.olderBlocker === undefined);
    const lm2 = new LockManager();
    lm2.acquire(OLD, J, 'S', new Recorder());
    lm2.acquire(YOUNG, J, 'S', new Recorder());
    const d = expectDenied(lm2.acquire(YOUNG, J, 'X', new Recorder(), { patient: true }));
    assert.equal(d.reason, 'wait-die');
  });

  it('two patient txs each waiting for the other hold a cycle that ends once one wait is cancelled', () => {
    const lm = new LockManager();
    lm.acquire(OLD, K, 'X', new Recorder());
    lm.acquire(YOUNG, J, 'X', new Recorder());
    const young = lm.acquire(YOUNG, K, 'X', new Recorder(), { patient: true });
    const oldRec = new Recorder();
    const old = lm.acquire(OLD, J, 'X', oldRec, { patient: true });
    assert.ok(young.kind === 'waiting' && old.kind === 'waiting', 'a cycle: each waits for the other');
    assert.equal(young.handle.olderBlocker(), OLD);
    assert.equal(old.handle.olderBlocker(), undefined, 'the older waits as wait-die lets it');
    // The younger one's bounded wait ends (lease-locks.ts cancels it and fails the request): the older goes on.
    assert.ok(young.handle.cancel());
    lm.releaseAll(YOUNG);
    assert.deepEqual(oldRec.events, ['granted X']);
  });
});

describe('lock manager: wait-die', () => {
  it('a younger requester dies against an older holder', () => {
    const lm = new LockManager();
    assert.equal(lm.acquire(OLD, K, 'S', new Recorder()).kind, 'granted');
    const d = expectDenied(lm.acquire(YOUNG, K, 'X', new Recorder()));
    assert.deepEqual(d, { txId: YOUNG, key: K, mode: 'X', code: 'TX_LOCK_CONFLICT', reason: 'wait-die', blocker: OLD });
    assert.equal(lm.waiters(K).length, 0);
  });

  it('an older requester waits for a younger holder and is granted when it releases', () => {
    const lm = new LockManager();
    lm.acquire(YOUNG, K, 'X', new Recorder());
    const rec = new Recorder();
    const h = expectWaiting(lm.acquire(OLD, K, 'S', rec));
    assert.equal(h.txId, OLD);
    assert.deepEqual(rec.events, []);
    const { released, granted } = lm.releaseAll(YOUNG);
    assert.deepEqual(released, [K]);
    assert.deepEqual(granted, [{ txId: OLD, key: K, mode: 'S' }]);
    assert.deepEqual(rec.events, ['granted S']);
    assert.deepEqual(lm.holders(K), [{ txId: OLD, mode: 'S' }]);
  });

  it('compatible requests are granted at once regardless of age', () => {
    const lm = new LockManager();
    assert.equal(lm.acquire(YOUNG, K, 'S', new Recorder()).kind, 'granted');
    assert.equal(lm.acquire(OLD, K, 'S', new Recorder()).kind, 'granted');
    assert.equal(lm.acquire(MID, K, 'IS', new Recorder()).kind, 'granted');
    assert.equal(lm.holders(K).length, 3);
  });

  it('a request dies if an older tx waits ahead of it with a conflicting request', () => {
    const lm = new LockManager();
    lm.acquire(YOUNG, K, 'S', new Recorder());
    expectWaiting(lm.acquire(MID, K, 'X', new Recorder()));
    // tx(4) is compatible with the holder but would queue behind the older MID.
    const d = expectDenied(lm.acquire(tx(4), K, 'S', new Recorder()));
    assert.equal(d.blocker, MID);
  });

  it('the conflict listener hears of every blocking holder, whether the requester waits or dies', () => {
    const lm = new LockManager();
    const heard: string[] = [];
    const stop = lm.onConflict((holder, requester, key) => heard.push(`${holder === MID}:${requester}:${key}`));
    lm.acquire(MID, K, 'X', new Recorder());
    lm.acquire(OLD, K, 'X', new Recorder());
    lm.acquire(YOUNG, K, 'S', new Recorder());
    assert.deepEqual(heard, [`true:${OLD}:${K}`, `true:${YOUNG}:${K}`]);
    stop();
    lm.acquire(tx(4), K, 'S', new Recorder());
    assert.equal(heard.length, 2);
  });

  it('a conflict listener changing the table while a request is decided is a bug (it would queue on stale blockers)', () => {
    const lm = new LockManager();
    lm.acquire(MID, K, 'X', new Recorder());
    const stop = lm.onConflict((holder) => lm.releaseAll(holder));
    assert.throws(() => lm.acquire(OLD, K, 'X', new Recorder()), AssertionError);
    stop();
    assert.equal(lm.heldMode(MID, K), 'X', 'the holder was not released under the decision');
    assert.deepEqual(lm.waiters(K), []);
    const deferred: TxId[] = [];
    lm.onConflict((holder) => deferred.push(holder));
    assert.equal(lm.acquire(OLD, K, 'X', new Recorder()).kind, 'waiting');
    assert.deepEqual(deferred, [MID], 'a listener that defers its work is fine');
  });
});

describe('lock manager: re-entrancy and upgrades', () => {
  it('re-acquiring a held mode or a weaker one is immediate and changes nothing', () => {
    const lm = new LockManager();
    lm.acquire(YOUNG, K, 'X', new Recorder());
    expectWaiting(lm.acquire(OLD, K, 'S', new Recorder()));
    for (const m of LOCK_MODES)
      assert.deepEqual(lm.acquire(YOUNG, K, m, new Recorder()), { kind: 'granted', mode: 'X' });
    assert.deepEqual(lm.locksOf(YOUNG), [{ key: K, mode: 'X' }]);
  });

  it('an S to X upgrade with no other holder is immediate', () => {
    const lm = new LockManager();
    lm.acquire(OLD, K, 'S', new Recorder());
    assert.deepEqual(lm.acquire(OLD, K, 'X', new Recorder()), { kind: 'granted', mode: 'X' });
  });

  it('an S to X upgrade waits for a younger S holder', () => {
    const lm = new LockManager();
    lm.acquire(OLD, K, 'S', new Recorder());
    lm.acquire(YOUNG, K, 'S', new Recorder());
    const rec = new Recorder();
    expectWaiting(lm.acquire(OLD, K, 'X', rec));
    assert.deepEqual(lm.waiters(K), [{ txId: OLD, mode: 'X', target: 'X', upgrade: true, patient: false }]);
    lm.releaseAll(YOUNG);
    assert.deepEqual(rec.events, ['granted X']);
    assert.deepEqual(lm.holders(K), [{ txId: OLD, mode: 'X' }]);
  });

  it('an S to X upgrade dies against an older S holder', () => {
    const lm = new LockManager();
    lm.acquire(OLD, K, 'S', new Recorder());
    lm.acquire(YOUNG, K, 'S', new Recorder());
    assert.equal(expectDenied(lm.acquire(YOUNG, K, 'X', new Recorder())).blocker, OLD);
    assert.deepEqual(lm.locksOf(YOUNG), [{ key: K, mode: 'S' }], 'the held S lock stays');
  });

  it('two S holders upgrading at once: the older waits, the younger dies, no deadlock', () => {
    const lm = new LockManager();
    lm.acquire(OLD, K, 'S', new Recorder());
    lm.acquire(YOUNG, K, 'S', new Recorder());
    const oldRec = new Recorder();
    expectWaiting(lm.acquire(OLD, K, 'X', oldRec));
    expectDenied(lm.acquire(YOUNG, K, 'X', new Recorder()));
    lm.releaseAll(YOUNG); // the younger tx aborts
    assert.deepEqual(oldRec.events, ['granted X']);
  });

  it('an upgrade goes ahead of an older request waiting for the upgrader', () => {
    const lm = new LockManager();
    lm.acquire(YOUNG, K, 'S', new Recorder());
    const oldRec = new Recorder();
    expectWaiting(lm.acquire(OLD, K, 'X', oldRec));
    assert.deepEqual(lm.acquire(YOUNG, K, 'X', new Recorder()), { kind: 'granted', mode: 'X' });
    assert.deepEqual(oldRec.events, []);
    lm.releaseAll(YOUNG);
    assert.deepEqual(oldRec.events, ['granted X']);
  });

  it('a waiting upgrade queues ahead of an older request, which waits for it (no deadlock)', () => {
    const lm = new LockManager();
    lm.acquire(MID, K, 'S', new Recorder());
    lm.acquire(YOUNG, K, 'S', new Recorder());
    const oldRec = new Recorder();
    expectWaiting(lm.acquire(OLD, K, 'X', oldRec));
    const midRec = new Recorder();
    expectWaiting(lm.acquire(MID, K, 'X', midRec));
    assert.deepEqual(
      lm.waiters(K).map((w) => w.txId),
      [MID, OLD],
    );
    lm.releaseAll(YOUNG);
    assert.deepEqual(midRec.events, ['granted X']);
    assert.deepEqual(oldRec.events, []);
    lm.releaseAll(MID);
    assert.deepEqual(oldRec.events, ['granted X']);
  });

  it('an upgrade makes a younger waiter that conflicts with it die', () => {
    const lm = new LockManager();
    lm.acquire(OLD, K, 'IS', new Recorder());
    lm.acquire(YOUNG, K, 'IX', new Recorder());
    const midRec = new Recorder();
    expectWaiting(lm.acquire(MID, K, 'S', midRec)); // blocked by the younger IX holder only
    assert.deepEqual(lm.acquire(OLD, K, 'IX', new Recorder()), { kind: 'granted', mode: 'IX' });
    assert.deepEqual(midRec.events, ['denied wait-die TX_LOCK_CONFLICT']);
    assert.equal(lm.waiters(K).length, 0);
  });

  it('a request blocked only by a waiter that an upgrade made die is granted at once', () => {
    const lm = new LockManager();
    const [a, w, v, y] = [tx(1), tx(2), tx(3), tx(4)];
    lm.acquire(a, K, 'IS', new Recorder());
    lm.acquire(y, K, 'IX', new Recorder());
    const vRec = new Recorder();
    expectWaiting(lm.acquire(v, K, 'S', vRec)); // blocked by y's IX
    const wRec = new Recorder();
    expectWaiting(lm.acquire(w, K, 'IX', wRec)); // blocked only by v's queued S
    assert.deepEqual(lm.acquire(a, K, 'IX', new Recorder()), { kind: 'granted', mode: 'IX' });
    assert.deepEqual(vRec.events, ['denied wait-die TX_LOCK_CONFLICT']);
    assert.deepEqual(wRec.events, ['granted IX']);
  });

  it('IX then S in one tx holds SIX (a scan after a write)', () => {
    const lm = new LockManager();
    lm.acquire(OLD, K, 'IX', new Recorder());
    assert.deepEqual(lm.acquire(OLD, K, 'S', new Recorder()), { kind: 'granted', mode: 'SIX' });
    assert.equal(expectDenied(lm.acquire(YOUNG, K, 'IX', new Recorder())).reason, 'wait-die');
    assert.equal(lm.acquire(YOUNG, K, 'IS', new Recorder()).kind, 'granted');
  });

  it('asking twice for a lock the tx already waits for is API misuse', () => {
    const lm = new LockManager();
    lm.acquire(YOUNG, K, 'X', new Recorder());
    lm.acquire(OLD, K, 'S', new Recorder());
    assert.throws(
      () => lm.acquire(OLD, K, 'X', new Recorder()),
      (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT'),
    );
  });

  it('while an upgrade waits, re-reading under the held lock is still immediate', () => {
    const lm = new LockManager();
    lm.acquire(OLD, K, 'S', new Recorder());
    lm.acquire(YOUNG, K, 'S', new Recorder());
    expectWaiting(lm.acquire(OLD, K, 'X', new Recorder()));
    assert.deepEqual(lm.acquire(OLD, K, 'S', new Recorder()), { kind: 'granted', mode: 'S' });
    assert.throws(
      () => lm.acquire(OLD, K, 'SIX', new Recorder()),
      (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT'),
    );
  });
});

describe('lock manager: queues, release order and failures', () => {
  it('waiters are granted in FIFO order; compatible ones together', () => {
    const lm = new LockManager();
    const holder = tx(10);
    lm.acquire(holder, K, 'X', new Recorder());
    const order: string[] = [];
    const listener = (name: string): LockListener => ({
      onGranted: (g) => order.push(`${name}:${g.mode}`),
      onDenied: () => order.push(`${name}:denied`),
    });
    expectWaiting(lm.acquire(tx(5), K, 'S', listener('a')));
    expectWaiting(lm.acquire(tx(4), K, 'S', listener('b')));
    expectWaiting(lm.acquire(tx(3), K, 'X', listener('c')));
    expectWaiting(lm.acquire(tx(2), K, 'S', listener('d')));
    const { granted } = lm.releaseAll(holder);
    assert.deepEqual(order, ['a:S', 'b:S']);
    assert.deepEqual(
      granted.map((g) => g.txId),
      [tx(5), tx(4)],
    );
    lm.releaseAll(tx(5));
    assert.deepEqual(order, ['a:S', 'b:S']);
    lm.releaseAll(tx(4));
    assert.deepEqual(order, ['a:S', 'b:S', 'c:X']);
    lm.releaseAll(tx(3));
    assert.deepEqual(order, ['a:S', 'b:S', 'c:X', 'd:S']);
  });

  it('a request compatible with the holders still queues behind a conflicting waiter (no overtaking)', () => {
    const lm = new LockManager();
    lm.acquire(YOUNG, K, 'S', new Recorder());
    expectWaiting(lm.acquire(MID, K, 'X', new Recorder()));
    expectWaiting(lm.acquire(OLD, K, 'S', new Recorder()));
    assert.deepEqual(
      lm.waiters(K).map((w) => w.txId),
      [MID, OLD],
    );
  });

  it('the waiter queue of a key is bounded: past it the request fails with TX_LOCK_CONFLICT', () => {
    const lm = new LockManager({ waitersPerKeyMax: 2 });
    lm.acquire(tx(10), K, 'X', new Recorder());
    expectWaiting(lm.acquire(tx(2), K, 'X', new Recorder()));
    expectWaiting(lm.acquire(tx(1), K, 'X', new Recorder()));
    const d = expectDenied(lm.acquire(tx(0), K, 'X', new Recorder()));
    assert.equal(d.reason, 'queue-full');
    assert.equal(d.code, 'TX_LOCK_CONFLICT');
  });

  it('the number of locked keys is bounded', () => {
    const lm = new LockManager({ keysMax: 1 });
    lm.acquire(OLD, K, 'S', new Recorder());
    assert.equal(expectDenied(lm.acquire(OLD, J, 'S', new Recorder())).reason, 'table-full');
    assert.equal(lm.acquire(YOUNG, K, 'S', new Recorder()).kind, 'granted', 'an existing key still works');
    lm.releaseAll(OLD);
    lm.releaseAll(YOUNG);
    assert.equal(lm.keyCount, 0);
    assert.equal(lm.acquire(OLD, J, 'S', new Recorder()).kind, 'granted');
  });

  it('failWaiters denies the waits of an aborting tx with TX_ABORTED, keeps its locks and lets others proceed', () => {
    const lm = new LockManager();
    lm.acquire(YOUNG, K, 'S', new Recorder());
    lm.acquire(OLD, J, 'X', new Recorder());
    const oldRec = new Recorder();
    expectWaiting(lm.acquire(OLD, K, 'X', oldRec));
    const oldestRec = new Recorder();
    expectWaiting(lm.acquire(tx(0), K, 'S', oldestRec)); // compatible with the holder, queued behind the X request
    assert.equal(lm.failWaiters(OLD), 1);
    assert.deepEqual(oldRec.events, ['denied failed TX_ABORTED']);
    assert.deepEqual(oldestRec.events, ['granted S'], 'no longer queued behind the failed X request');
    assert.deepEqual(lm.locksOf(OLD), [{ key: J, mode: 'X' }]);
    assert.deepEqual(lm.waitsOf(OLD), []);
  });

  it('releaseAll denies a request the tx still had waiting', () => {
    const lm = new LockManager();
    lm.acquire(YOUNG, K, 'X', new Recorder());
    lm.acquire(OLD, J, 'S', new Recorder());
    const rec = new Recorder();
    expectWaiting(lm.acquire(OLD, K, 'S', rec));
    const { released } = lm.releaseAll(OLD);
    assert.deepEqual(released, [J]);
    assert.deepEqual(rec.events, ['denied released TX_ALREADY_FINISHED']);
    assert.deepEqual(lm.waiters(K), []);
  });

  it('a cancelled wait is withdrawn silently and unblocks the requests behind it', () => {
    const lm = new LockManager();
    lm.acquire(YOUNG, K, 'S', new Recorder());
    const rec = new Recorder();
    const h = expectWaiting(lm.acquire(MID, K, 'X', rec));
    const oldRec = new Recorder();
    expectWaiting(lm.acquire(OLD, K, 'S', oldRec));
    assert.equal(h.cancel(), true);
    assert.equal(h.cancel(), false);
    assert.deepEqual(rec.events, []);
    assert.deepEqual(oldRec.events, ['granted S']);
  });

  it('releasing every lock leaves an empty table', () => {
    const lm = new LockManager();
    lm.acquire(OLD, K, 'S', new Recorder());
    lm.acquire(OLD, J, 'X', new Recorder());
    assert.deepEqual(
      lm.locksOf(OLD).map((l) => l.key),
      [K, J],
    );
    lm.releaseAll(OLD);
    assert.equal(lm.keyCount, 0);
    assert.deepEqual(lm.locksOf(OLD), []);
  });
});

describe('lock manager: phantom protection through partition locks', () => {
  const p = partitionId('t1p0');

  function run(lm: LockManager, t: TxId, steps: ReturnType<typeof pointLockPlan>): AcquireResult[] {
    return steps.map((s) => lm.acquire(t, s.key, s.mode, new Recorder()));
  }

  it('a get of a missing key conflicts with a later insert of that key', () => {
    const lm = new LockManager();
    assert.ok(run(lm, OLD, pointLockPlan(p, 'absent', 'S')).every((r) => r.kind === 'granted'));
    const [intent, row] = run(lm, YOUNG, pointLockPlan(p, 'absent', 'X'));
    assert.equal(intent?.kind, 'granted', 'IX on the partition is compatible with IS');
    assert.equal(row?.kind === 'denied' && row.denial.reason, 'wait-die');
  });

  it('a scan blocks a later insert anywhere in the scanned partition until it finishes', () => {
    const lm = new LockManager();
    assert.ok(run(lm, OLD, scanLockPlan(p)).every((r) => r.kind === 'granted'));
    const [intent] = run(lm, YOUNG, pointLockPlan(p, 'new-key', 'X'));
    assert.equal(intent?.kind, 'denied');
    const ins = tx(0);
    const [waiting] = run(lm, ins, pointLockPlan(p, 'new-key', 'X').slice(0, 1));
    assert.equal(waiting?.kind, 'waiting', 'an older inserter waits for the scan');
    lm.releaseAll(OLD);
    assert.equal(lm.heldMode(ins, pointLockPlan(p, 'new-key', 'X')[0]!.key), 'IX');
  });

  it('a scan waits for (or dies against) a writer in the partition', () => {
    const lm = new LockManager();
    run(lm, MID, pointLockPlan(p, 'k', 'X'));
    assert.equal(run(lm, OLD, scanLockPlan(p))[0]?.kind, 'waiting');
    assert.equal(run(lm, YOUNG, scanLockPlan(p))[0]?.kind, 'denied');
  });

  it('point reads and writes of different keys do not conflict', () => {
    const lm = new LockManager();
    assert.ok(run(lm, OLD, pointLockPlan(p, 'a', 'X')).every((r) => r.kind === 'granted'));
    assert.ok(run(lm, YOUNG, pointLockPlan(p, 'b', 'X')).every((r) => r.kind === 'granted'));
    assert.ok(run(lm, MID, pointLockPlan(p, 'c', 'S')).every((r) => r.kind === 'granted'));
  });
});

describe('lock manager: promise wrapper', () => {
  it('resolves when granted after a wait and rejects a dying request with a retryable TX_LOCK_CONFLICT', async () => {
    const lm = new LockManager();
    assert.equal(await acquireLock(lm, YOUNG, K, 'X'), 'X');
    let handle: LockWaitHandle | undefined;
    const waiting = acquireLock(lm, OLD, K, 'S', (h) => {
      handle = h;
    });
    assert.equal(handle?.txId, OLD);
    await assert.rejects(acquireLock(lm, tx(4), K, 'S'), (e: unknown) => {
      return isBasaltError(e, 'TX_LOCK_CONFLICT') && e.retryable;
    });
    lm.releaseAll(YOUNG);
    assert.equal(await waiting, 'S');
  });
});

describe('lock manager: invariants under random schedules', () => {
  type Op =
    | { kind: 'acquire'; tx: number; key: number; mode: LockMode; patient: boolean }
    | { kind: 'release'; tx: number }
    | { kind: 'fail'; tx: number }
    | { kind: 'finish'; tx: number }
    | { kind: 'cancel'; pick: number };

  const ALL_KEYS = ['r:p:a', 'p:p', 'r:p:b'] as LockKey[];

  function opArb(txs: number, keys: number): fc.Arbitrary<Op> {
    return fc.oneof(
      {
        weight: 6,
        arbitrary: fc.record({
          kind: fc.constant('acquire' as const),
          tx: fc.nat(txs - 1),
          key: fc.nat(keys - 1),
          mode: fc.constantFrom(...LOCK_MODES),
          patient: fc.boolean(),
        }),
      },
      { weight: 2, arbitrary: fc.record({ kind: fc.constant('release' as const), tx: fc.nat(txs - 1) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('fail' as const), tx: fc.nat(txs - 1) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('finish' as const), tx: fc.nat(txs - 1) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('cancel' as const), pick: fc.nat(100) }) },
    );
  }

  /** Who a request (holder target or queued waiter at `index`) is blocked by, read from the inspection API. */
  function blockersOf(lm: LockManager, key: LockKey, txId: TxId, target: LockMode, queueIndex: number): TxId[] {
    const holders = lm.holders(key).filter((h) => h.txId !== txId && !isCompatible(h.mode, target));
    const ahead = lm
      .waiters(key)
      .slice(0, queueIndex)
      .filter((w) => !isCompatible(w.target, target));
    return [...holders.map((h) => h.txId), ...ahead.map((w) => w.txId)];
  }

  function checkInvariants(lm: LockManager): void {
    for (const key of ALL_KEYS) {
      const holders = lm.holders(key);
      for (const a of holders)
        for (const b of holders) if (a !== b) assert.ok(isCompatible(a.mode, b.mode), `incompatible holders on ${key}`);
      lm.waiters(key).forEach((w, i) => {
        const blockers = blockersOf(lm, key, w.txId, w.target, i);
        assert.ok(blockers.length > 0, `waiter ${w.txId} on ${key} is not blocked by anyone`);
        for (const b of blockers) {
          assert.ok(
            w.patient || isOlder(w.txId, b) || lm.isFinishing(b),
            `waiter ${w.txId} waits for an older tx ${b} without patience`,
          );
        }
      });
    }
  }

  // Few keys and txs make contention (and upgrades behind queued requests) frequent; more keys add cross-key cycles.
  for (const { txs, keys, runs } of [
    { txs: 4, keys: 1, runs: 1000 },
    { txs: 4, keys: 2, runs: 400 },
    { txs: 6, keys: 3, runs: 200 },
  ]) {
    it(`no incompatible holders, waits for older txs only when patient, every waiter settled once all release or patience ends (${txs} txs, ${keys} keys)`, () => {
      const KEYS = ALL_KEYS.slice(0, keys);
      fc.assert(
        fc.property(
          fc.array(opArb(txs, keys), { minLength: 1, maxLength: 80 }),
          fc.shuffledSubarray([...Array(txs).keys()], { minLength: txs }),
          (ops, agePerm) => {
            const ids = agePerm.map((age) => tx(age + 1));
            const lm = new LockManager({ waitersPerKeyMax: 4 });
            const settled = new Map<LockWaitHandle, number>();
            const pending: LockWaitHandle[] = [];
            const cancelled = new Set<LockWaitHandle>();
            for (const op of ops) {
              if (op.kind === 'acquire') {
                const t = ids[op.tx]!;
                const key = KEYS[op.key]!;
                if (lm.waitsOf(t).includes(key)) continue;
                if (lm.isFinishing(t)) {
                  const r = lm.acquire(t, key, op.mode, { onGranted: () => {}, onDenied: () => {} });
                  const refused = r.kind === 'denied' && r.denial.reason === 'finishing';
                  assert.ok(
                    refused || (r.kind === 'granted' && lm.heldMode(t, key) !== undefined),
                    'finishing: no wait',
                  );
                  continue;
                }
                const held = lm.heldMode(t, key);
                const target = held === undefined ? op.mode : joinModes(held, op.mode);
                const holderBlockers = blockersOf(lm, key, t, target, 0);
                const queueBlockers =
                  held === undefined ? blockersOf(lm, key, t, target, lm.waiters(key).length) : holderBlockers;
                let handle: LockWaitHandle | undefined;
                const listener: LockListener = {
                  onGranted: () => settled.set(handle!, (settled.get(handle!) ?? 0) + 1),
                  onDenied: () => settled.set(handle!, (settled.get(handle!) ?? 0) + 1),
                };
                const r = lm.acquire(t, key, op.mode, listener, { patient: op.patient });
                const patient = op.patient && held === undefined;
                if (r.kind === 'granted') {
                  assert.ok(held === target || queueBlockers.length === 0, 'granted although blocked');
                  assert.equal(lm.heldMode(t, key), target);
                } else if (r.kind === 'waiting') {
                  handle = r.handle;
                  pending.push(handle);
                  assert.ok(
                    queueBlockers.length > 0 &&
                      queueBlockers.every((b) => patient || isOlder(t, b) || lm.isFinishing(b)),
                    'waits although it should die or be granted',
                  );
                  const older = queueBlockers.find((b) => isOlder(b, t) && !lm.isFinishing(b));
                  assert.equal(r.olderBlocker, older, 'a patient wait names the older tx it waits for');
                } else if (r.denial.reason === 'wait-die') {
                  assert.ok(!patient, 'a patient fresh request never dies at once');
                  assert.ok(
                    r.denial.blocker !== undefined &&
                      isOlder(r.denial.blocker, t) &&
                      !lm.isFinishing(r.denial.blocker) &&
                      queueBlockers.includes(r.denial.blocker),
                  );
                } else {
                  assert.equal(r.denial.reason, 'queue-full');
                }
              } else if (op.kind === 'release') {
                lm.releaseAll(ids[op.tx]!);
              } else if (op.kind === 'fail') {
                lm.failWaiters(ids[op.tx]!);
              } else if (op.kind === 'finish') {
                const t = ids[op.tx]!;
                const marked = lm.markFinishing(t);
                assert.equal(marked, lm.locksOf(t).length > 0 && lm.waitsOf(t).length === 0, 'who may be marked');
              } else if (pending.length > 0) {
                const h = pending[op.pick % pending.length]!;
                if (h.cancel()) cancelled.add(h);
              }
              checkInvariants(lm);
            }
            // Liveness: let every tx run to completion. A tx waiting for nothing can always finish. Without one, every
            // active tx waits, so there is a wait-for cycle, and it has an edge from a younger tx to an older one: a
            // patient wait, which its caller ends once the patience runs out (cancels it). One always exists then.
            for (let round = 0; round <= 2 * txs * keys + txs; round++) {
              const active = ids.filter((t) => lm.locksOf(t).length > 0 || lm.waitsOf(t).length > 0);
              if (active.length === 0) break;
              const runnable = active.find((t) => lm.waitsOf(t).length === 0);
              if (runnable !== undefined) lm.releaseAll(runnable);
              else {
                const impatient = pending.find(
                  (h) => !cancelled.has(h) && settled.get(h) === undefined && h.olderBlocker() !== undefined,
                );
                assert.ok(impatient !== undefined, 'every tx waits, and none for an older one: a deadlock');
                assert.ok(impatient.cancel());
                cancelled.add(impatient);
              }
              checkInvariants(lm);
            }
            assert.equal(lm.keyCount, 0);
            for (const h of pending) {
              assert.equal(
                settled.get(h) ?? 0,
                cancelled.has(h) ? 0 : 1,
                'each wait settles exactly once (or was cancelled)',
              );
            }
          },
        ),
        { numRuns: runs },
      );
    });
  }
});
