/**
 * Lease counting from the state machine's lease observer: holder changes (a first lease counts, extensions and a
 * same-holder new lease do not), leases acquired and lost by one replica incarnation, rejected Lease commands that
 * change nothing, and a lease brought by an installed snapshot.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { LogIndex, Term } from '../../core/ids.js';
import { applyAll, incarnation, LogBuilder, lease, leaseCommand, testReplica } from '../../testing/replica-support.js';
import { LEASE_COUNTERS, leaseCounting } from './lease-metrics.js';
import type { LeaseTransition } from './state-machine.js';

class Counts {
  readonly values = new Map<string, number>();
  add(name: string, n = 1): void {
    this.values.set(name, (this.values.get(name) ?? 0) + n);
  }
  get(): { changes: number; acquired: number; lost: number } {
    return {
      changes: this.values.get(LEASE_COUNTERS.changes) ?? 0,
      acquired: this.values.get(LEASE_COUNTERS.acquired) ?? 0,
      lost: this.values.get(LEASE_COUNTERS.lost) ?? 0,
    };
  }
}

const SELF = incarnation('n1');
const OTHER = incarnation('n2');

describe('lease counting', () => {
  it('counts holder changes on every replica, and acquired/lost only for the holder incarnation', () => {
    const r = testReplica();
    const log = new LogBuilder();
    const mine = new Counts();
    const theirs = new Counts();
    const seen: LeaseTransition[] = [];
    r.sm.onLeaseChange(leaseCounting(mine, SELF));
    r.sm.onLeaseChange(leaseCounting(theirs, OTHER));
    r.sm.onLeaseChange((t) => seen.push(t));

    const first = lease(SELF, 10, 100);
    applyAll(r, log, [leaseCommand(first, null, 10)]);
    assert.deepEqual(mine.get(), { changes: 1, acquired: 1, lost: 0 }, 'a first lease is a holder change');

    const extended = { ...first, expiration: lease(SELF, 10, 200).expiration };
    applyAll(r, log, [leaseCommand(extended, first, 20)]);
    assert.deepEqual(mine.get(), { changes: 1, acquired: 1, lost: 0 }, 'an extension changes nothing counted');

    const again = lease(SELF, 200, 300);
    applyAll(r, log, [leaseCommand(again, extended, 200)]);
    assert.deepEqual(mine.get(), { changes: 1, acquired: 1, lost: 0 }, 'a new lease by the same holder');

    const takeover = lease(OTHER, 300, 400);
    applyAll(r, log, [leaseCommand(takeover, again, 300)]);
    assert.deepEqual(mine.get(), { changes: 2, acquired: 1, lost: 1 });
    assert.deepEqual(theirs.get(), { changes: 2, acquired: 1, lost: 0 });

    // A stale takeover (it names a lease that is no longer current) is rejected: no transition at all.
    applyAll(r, log, [leaseCommand(lease(SELF, 400, 500), again, 301)]);
    assert.deepEqual(mine.get(), { changes: 2, acquired: 1, lost: 1 });
    assert.deepEqual(
      seen.map((t) => [t.previous?.holder.nodeId ?? null, t.lease.holder.nodeId, t.via]),
      [
        [null, 'n1', 'apply'],
        ['n1', 'n1', 'apply'],
        ['n1', 'n1', 'apply'],
        ['n1', 'n2', 'apply'],
      ],
    );
  });

  it("a restarted replica (new incarnation) acquiring its node's old lease counts as acquired, never as lost", () => {
    const r = testReplica();
    const log = new LogBuilder();
    const restarted = new Counts();
    r.sm.onLeaseChange(leaseCounting(restarted, incarnation('n1', 'i2')));
    const old = lease(SELF, 10, 100);
    applyAll(r, log, [leaseCommand(old, null, 10)]);
    applyAll(r, log, [leaseCommand(lease(incarnation('n1', 'i2'), 100, 200), old, 100)]);
    assert.deepEqual(restarted.get(), { changes: 2, acquired: 1, lost: 0 });
  });

  it('a snapshot that brings another lease is a transition; one that brings the same lease is not', () => {
    const source = testReplica();
    const log = new LogBuilder();
    const first = lease(SELF, 10, 100);
    applyAll(source, log, [leaseCommand(first, null, 10), leaseCommand(lease(OTHER, 100, 200), first, 100)]);

    const target = testReplica();
    const targetLog = new LogBuilder();
    applyAll(target, targetLog, [leaseCommand(first, null, 10)]);
    const counts = new Counts();
    const seen: LeaseTransition[] = [];
    target.sm.onLeaseChange(leaseCounting(counts, SELF));
    target.sm.onLeaseChange((t) => seen.push(t));
    const snapshot = { index: 2 as LogIndex, term: 1 as Term, data: source.sm.snapshot() };
    target.sm.restore(snapshot);
    assert.deepEqual(counts.get(), { changes: 1, acquired: 0, lost: 1 });
    assert.equal(seen[0]?.via, 'snapshot');
    target.sm.restore(snapshot);
    assert.equal(seen.length, 1, 'restoring the same lease again is no transition');
  });
});
