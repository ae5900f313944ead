/**
 * Applying together (group-state-machines.ts): the entries several groups hand over in one turn apply in one storage
 * transaction, every group's applied state is visible before any group's volatile half runs, a failed shared
 * transaction leaves the other groups applied on their own, and machines that cannot stage apply at once.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import type { LogIndex, PartitionId, Term } from '../core/ids.js';
import type { Entry } from '../raft/types.js';
import { openLmdbEnvironment } from '../storage/lmdb-environment.js';
import { LmdbStorageEngine, MemoryStorageEngine, type StorageEngine } from '../storage/storage-engine.js';
import {
  incarnation,
  LogBuilder,
  lease,
  leaseCommand,
  OTHER_PARTITION,
  PARTITION,
  put,
  type TestReplica,
  testReplica,
  txIdAt,
  update,
} from '../testing/replica-support.js';
import { APPLY_COUNTERS, EmptyStateMachine, GroupStateMachines } from './group-state-machines.js';

class CountingSink {
  private readonly values = new Map<string, number>();
  add(name: string, n = 1): void {
    this.values.set(name, this.get(name) + n);
  }
  get(name: string): number {
    return this.values.get(name) ?? 0;
  }
}

const L1 = lease(incarnation('self'), 10, 1_000);
const META = 'meta' as PartitionId;

interface Setup {
  readonly machines: GroupStateMachines;
  readonly a: TestReplica;
  readonly b: TestReplica;
  readonly logA: LogBuilder;
  readonly logB: LogBuilder;
  readonly counters: CountingSink;
  /** Outer storage transactions the multiplexer opened. */
  readonly transactions: () => number;
}

function setup(engine: StorageEngine, together = true): Setup {
  const counters = new CountingSink();
  let transactions = 0;
  const machines = new GroupStateMachines({
    counters,
    ...(together && {
      atomically: <T>(fn: () => T): T => {
        transactions++;
        return engine.runConsistently(fn);
      },
    }),
  });
  const a = testReplica({ engine });
  const b = testReplica({ engine, partitionId: OTHER_PARTITION, txStateMap: a.map, clock: a.clock });
  machines.register(PARTITION, a.sm);
  machines.register(OTHER_PARTITION, b.sm);
  const logA = new LogBuilder();
  const logB = new LogBuilder();
  return { machines, a, b, logA, logB, counters, transactions: () => transactions };
}

function firstEntries(s: Setup): { a: Entry[]; b: Entry[] } {
  const t1 = txIdAt(20);
  const t2 = txIdAt(21);
  return {
    a: [s.logA.data(leaseCommand(L1, null, 5)), s.logA.data(update(L1, 1, put('x', 1), 20, { txId: t1 }))],
    b: [s.logB.data(leaseCommand(L1, null, 6)), s.logB.data(update(L1, 1, put('y', 2), 22, { txId: t2 }))],
  };
}

function malformed(log: LogBuilder): Entry {
  const e = log.noop();
  return { ...e, kind: 'data', data: new Uint8Array([0xc1, 0xff, 0x00]) };
}

describe('group state machines applying together', () => {
  it('entries two groups hand over in one turn apply in one transaction, storage visible before any effect', async () => {
    const s = setup(new MemoryStorageEngine());
    const { a, b } = firstEntries(s);
    // When the first group's volatile half runs, the second group's rows are already stored.
    let seenFromA: boolean | undefined;
    s.a.sm.onApplied(() => {
      seenFromA = s.b.engine.mvPartition(OTHER_PARTITION).rowIdOf('y') !== undefined;
    });
    const pa = s.machines.apply(PARTITION, a);
    const pb = s.machines.apply(OTHER_PARTITION, b);
    assert.ok(pa instanceof Promise && pb instanceof Promise, 'a staging machine applies once the turn ends');
    assert.equal(s.a.sm.appliedIndex(), 0, 'nothing applies before the gathered applies run');
    await Promise.all([pa, pb]);
    assert.equal(s.transactions(), 1);
    assert.equal(seenFromA, true);
    assert.equal(s.a.sm.appliedIndex(), 2);
    assert.equal(s.b.sm.appliedIndex(), 2);
    assert.equal(s.counters.get(APPLY_COUNTERS.sharedTransactions), 1);
    assert.equal(s.counters.get(APPLY_COUNTERS.sharedGroups), 2);
    assert.equal(s.counters.get(APPLY_COUNTERS.steps), 1);
    assert.equal(s.a.map.get(txIdAt(20))?.state, 'PENDING');
    assert.equal(s.a.map.get(txIdAt(21))?.state, 'PENDING');
  });

  it('on LMDB the shared transaction is one commit holding both groups; a reopen finds both applied', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'basalt-apply-together-'));
    try {
      let root = openLmdbEnvironment(dir, { sync: true });
      const s = setup(new LmdbStorageEngine(root));
      const { a, b } = firstEntries(s);
      await Promise.all([s.machines.apply(PARTITION, a), s.machines.apply(OTHER_PARTITION, b)]);
      assert.equal(s.transactions(), 1);
      await s.a.engine.flush();
      await root.close();
      root = openLmdbEnvironment(dir, { sync: true });
      try {
        const engine = new LmdbStorageEngine(root);
        assert.equal(testReplica({ engine }).sm.appliedIndex(), 2);
        assert.equal(testReplica({ engine, partitionId: OTHER_PARTITION }).sm.appliedIndex(), 2);
        assert.notEqual(engine.mvPartition(OTHER_PARTITION).rowIdOf('y'), undefined);
      } finally {
        await root.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a group whose entries fail stops alone: the others apply on their own, once', async () => {
    for (const engine of [new MemoryStorageEngine(), undefined]) {
      const dir = engine === undefined ? mkdtempSync(join(tmpdir(), 'basalt-apply-together-')) : undefined;
      const root = dir === undefined ? undefined : openLmdbEnvironment(dir, { sync: true });
      try {
        const s = setup(engine ?? new LmdbStorageEngine(root!));
        const { a } = firstEntries(s);
        const results: string[] = [];
        s.a.sm.onApplied((applied) => {
          for (const x of applied) if (x.result !== null) results.push(x.result.kind);
        });
        const pa = s.machines.apply(PARTITION, a);
        const pb = s.machines.apply(OTHER_PARTITION, [malformed(s.logB)]);
        await pa;
        await assert.rejects(Promise.resolve(pb));
        assert.deepEqual(results, ['LEASE_APPLIED', 'UPDATED'], 'each result delivered once');
        assert.equal(s.a.sm.appliedIndex(), 2);
        assert.equal(s.b.sm.appliedIndex(), 0);
        assert.equal(s.b.engine.mvPartition(OTHER_PARTITION).lastApplied().index, 0, 'nothing of the failed group');
        assert.notEqual(s.a.engine.mvPartition(PARTITION).rowIdOf('x'), undefined);
        assert.equal(s.counters.get(APPLY_COUNTERS.sharedFailures), 1);
        assert.equal(s.counters.get(APPLY_COUNTERS.sharedTransactions), 0);
        assert.equal(s.counters.get(APPLY_COUNTERS.steps), 2, 'each group then applies in a step of its own');
      } finally {
        await root?.close();
        if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
      }
    }
  });

  it('a machine that cannot stage applies at once; a lone group applies on its own', async () => {
    const s = setup(new MemoryStorageEngine());
    const empty = new EmptyStateMachine();
    s.machines.register(META, empty);
    const noop: Entry = { index: 1 as LogIndex, term: 1 as Term, kind: 'noop', data: new Uint8Array(0) };
    assert.equal(s.machines.apply(META, [noop]), undefined);
    assert.equal(empty.appliedIndex(), 1);
    const { a } = firstEntries(s);
    await s.machines.apply(PARTITION, a);
    assert.equal(s.a.sm.appliedIndex(), 2);
    assert.equal(s.transactions(), 0, 'a lone group applies in its own step');
    assert.equal(s.counters.get(APPLY_COUNTERS.sharedTransactions), 0);
  });

  it('without the setting every group applies at once, in a step of its own', () => {
    const s = setup(new MemoryStorageEngine(), false);
    const { a, b } = firstEntries(s);
    assert.equal(s.machines.apply(PARTITION, a), undefined);
    assert.equal(s.a.sm.appliedIndex(), 2);
    assert.equal(s.machines.apply(OTHER_PARTITION, b), undefined);
    assert.equal(s.b.sm.appliedIndex(), 2);
    assert.equal(s.counters.get(APPLY_COUNTERS.steps), 2);
    assert.equal(s.counters.get(APPLY_COUNTERS.sharedTransactions), 0);
  });
});
