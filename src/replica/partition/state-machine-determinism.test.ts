/**
 * Determinism of the partition state machine: replicas fed the same committed log reach byte-identical storage (the
 * partition snapshot covers every table, the lease record and the applied position), the same tx state map entries
 * and the same results, whatever the batches the driver hands them, and a replica restored from a snapshot midway
 * continues identically. Effective timestamps rise strictly along the log (rule 9) even though the generated
 * proposal timestamps wander backwards. Each run is one seed; a failure prints it (fast-check) and replays from it.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import type { HybridTimestamp, LogIndex, Term, TxId } from '../../core/ids.js';
import type { Entry } from '../../raft/types.js';
import { SeededRandom } from '../../sim/random.js';
import {
  assertSameBytes,
  at,
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
  type TestReplica,
  testReplica,
  txIdAt,
  update,
  updateAll,
} from '../../testing/replica-support.js';
import type { ApplyResult } from './apply-result.js';
import type { PartitionCommand, RowWrite } from './commands.js';
import { type Lease, tokenOf } from './lease.js';

const HOLDERS = [incarnation('p1'), incarnation('p2'), incarnation('p1', 'i2')];
const KEYS = ['a', 'b', 'c', 'd', 'e', 'f'];
const COMMANDS_PER_RUN = 150;

/** Generates a plausible, adversarial log, using a reference replica (A) to aim commands at its current state. */
class LogGenerator {
  private readonly log = new LogBuilder();
  private maxMs = 10;
  private txCounter = 0;
  private active: TxId[] = [];
  private readonly retired: TxId[] = [];
  readonly entries: Entry[] = [];

  constructor(
    private readonly random: SeededRandom,
    private readonly reference: TestReplica,
  ) {
    for (let i = 0; i < 4; i++) this.active.push(this.freshTx());
  }

  run(count: number): void {
    for (let i = 0; i < count; i++) {
      const entry = this.random.chance(0.05) ? this.log.noop() : this.log.data(this.next());
      if (this.random.chance(0.02)) this.log.term++;
      this.entries.push(entry);
      this.reference.sm.apply([entry]);
    }
  }

  private freshTx(): TxId {
    this.txCounter++;
    return txIdAt(5, this.txCounter, 'gen');
  }

  /** A proposal timestamp that wanders: mostly forward, sometimes behind what was already applied. */
  private proposalMs(): number {
    const ms = Math.max(1, this.maxMs + this.random.between(-6, 3));
    this.maxMs = Math.max(this.maxMs, ms);
    return ms;
  }

  private next(): PartitionCommand {
    const roll = this.random.next();
    if (roll < 0.2) return this.leaseCommand();
    if (roll < 0.55) return this.dataCommand();
    if (roll < 0.7) return this.switchCommand();
    if (roll < 0.85) return this.finishCommand();
    return safeTimeSync(this.proposalMs());
  }

  private leaseCommand(): PartitionCommand {
    const current = this.reference.sm.currentLease();
    const ts = this.proposalMs();
    const holder = this.random.pick(HOLDERS);
    if (current === null) return leaseCommand(lease(holder, ts, ts + 60), null, ts);
    const exp = Number(current.expiration >> 16n);
    switch (this.random.int(4)) {
      case 0:
        return leaseCommand({ ...current, expiration: at(exp + this.random.between(-5, 40)) }, current, ts);
      case 1:
        return leaseCommand(lease(holder, exp + this.random.between(-3, 5), exp + 80), current, ts);
      case 2:
        return leaseCommand(lease(holder, Math.max(1, ts), ts + 60), lease(holder, 1, 2), ts);
      default:
        return leaseCommand(lease(holder, exp, exp + 70), this.random.chance(0.5) ? current : null, ts);
    }
  }

  private dataCommand(): PartitionCommand {
    const current = this.reference.sm.currentLease();
    const lastSeq = this.reference.sm.leaseState().lastSeq;
    const under: Lease = current !== null && this.random.chance(0.9) ? current : lease(this.random.pick(HOLDERS), 3, 9);
    const seq = this.random.chance(0.9) ? lastSeq + 1 : Math.max(1, lastSeq);
    const txId = this.random.pick(this.active);
    const full = this.random.chance(0.25);
    const keys = this.random.shuffle([...KEYS]).slice(0, 1 + this.random.int(3));
    const writes: RowWrite[] = keys.map((k) => (this.random.chance(0.2) ? remove(k) : put(k, this.random.int(1000))));
    const ts = this.proposalMs();
    const options = { txId, full };
    return writes.length === 1
      ? update(tokenOf(under), seq, writes[0]!, ts, options)
      : updateAll(tokenOf(under), seq, writes, ts, options);
  }

  /** Cleanup: commitTs above everything proposed so far, and the command's own ts absorbs it (rule 8). */
  private switchCommand(): PartitionCommand {
    const mv = this.reference.engine.mvPartition(PARTITION);
    const writers = this.active.filter((t) => mv.rowsWrittenBy(t).length > 0);
    const txId =
      writers.length > 0 && this.random.chance(0.8) ? this.random.pick(writers) : this.random.pick(this.active);
    this.retire(txId);
    if (this.random.chance(0.3)) return switchIntents(txId, 'abort', this.proposalMs());
    this.maxMs += 1;
    return switchIntents(txId, { commitTs: at(this.maxMs) }, this.maxMs);
  }

  private finishCommand(): PartitionCommand {
    const pool = this.retired.length > 0 && this.random.chance(0.5) ? this.retired : this.active;
    const txId = this.random.pick(pool);
    const ts = this.proposalMs();
    return this.random.chance(0.5) ? finish(txId, 'abort', ts) : finish(txId, { commitTs: at(ts) }, ts);
  }

  private retire(txId: TxId): void {
    this.active = this.active.map((t) => (t === txId ? this.freshTx() : t));
    this.retired.push(txId);
  }
}

/** Applies `entries` in random batches, collecting results. */
function applyInBatches(replica: TestReplica, entries: readonly Entry[], random: SeededRandom): (ApplyResult | null)[] {
  const results: (ApplyResult | null)[] = [];
  const stop = replica.sm.onApplied((applied) => {
    for (const a of applied) results.push(a.result);
  });
  for (let i = 0; i < entries.length; ) {
    const n = 1 + random.int(12);
    replica.sm.apply(entries.slice(i, i + n));
    i += n;
  }
  stop();
  return results;
}

function mapState(replica: TestReplica, txIds: readonly TxId[]): unknown[] {
  return txIds.map((t) => replica.map.entry(t) ?? null);
}

function allTxIds(count: number): TxId[] {
  return Array.from({ length: count }, (_, i) => txIdAt(5, i + 1, 'gen'));
}

describe('determinism of the partition state machine', () => {
  it('replicas fed the same log in different batches reach identical storage, map and results (property)', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 2 ** 31 - 1 }), (seed) => {
        const random = new SeededRandom(seed);
        const a = testReplica();
        const aResults: (ApplyResult | null)[] = [];
        a.sm.onApplied((applied) => {
          for (const x of applied) aResults.push(x.result);
        });
        const generator = new LogGenerator(random.fork('log'), a);
        generator.run(COMMANDS_PER_RUN);
        const b = testReplica();
        const bResults = applyInBatches(b, generator.entries, random.fork('batches'));

        assertSameBytes(b.sm.snapshot(), a.sm.snapshot(), `storage differs (seed ${seed})`);
        assert.deepEqual(bResults, aResults, `results differ (seed ${seed})`);
        const txIds = allTxIds(COMMANDS_PER_RUN + 4);
        assert.deepEqual(mapState(b, txIds), mapState(a, txIds), `map differs (seed ${seed})`);
        assert.deepEqual(b.sm.currentLease(), a.sm.currentLease());
        assert.equal(b.sm.lastAppliedTs(), a.sm.lastAppliedTs());

        // Rule 9: effective timestamps rise strictly along the log.
        const applied = aResults.filter((r) => r !== null).map((r) => r.appliedTs);
        for (let i = 1; i < applied.length; i++) {
          assert.ok(applied[i]! > applied[i - 1]!, `effective timestamps must rise (seed ${seed})`);
        }
        const kinds = new Set(aResults.map((r) => r?.kind ?? 'noop'));
        return kinds.size >= 6;
      }),
      { numRuns: 25 },
    );
  });

  it('a replica restored from a snapshot midway continues exactly like one that applied the whole log', () => {
    const seed = 20_261_130;
    const random = new SeededRandom(seed);
    const a = testReplica();
    const generator = new LogGenerator(random.fork('log'), a);
    generator.run(COMMANDS_PER_RUN);
    const cut = 70;
    const prefix = testReplica();
    prefix.sm.apply(generator.entries.slice(0, cut));
    const restored = testReplica();
    const last = generator.entries[cut - 1]!;
    restored.sm.restore({ index: last.index as LogIndex, term: last.term as Term, data: prefix.sm.snapshot() });
    restored.sm.apply(generator.entries.slice(cut));
    assertSameBytes(restored.sm.snapshot(), a.sm.snapshot(), `seed ${seed}`);
    assert.equal(restored.sm.lastAppliedTs(), a.sm.lastAppliedTs() as HybridTimestamp);
  });
});
