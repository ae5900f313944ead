import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { HistoryRecorder, type MicroOp, type Operation } from './history.js';
import { checkListAppend, type ListAppendAnomalyKind } from './list-append.js';

type TxnOp = Extract<Operation, { f: 'txn' }>;

/** Hand-made histories: each transaction invoked and completed at once (serial) unless opened and closed apart. */
class Txns {
  readonly recorder = new HistoryRecorder(() => this.clockNs);
  clockNs = 0;

  open(ops: readonly MicroOp[]): TxnOp {
    this.clockNs += 1_000;
    const invoked = ops.map((op): MicroOp => (op[0] === 'r' ? ['r', op[1], null] : op));
    return this.recorder.invoke<TxnOp>({ process: this.recorder.process(), f: 'txn', value: invoked });
  }

  close(open: TxnOp, type: 'ok' | 'fail' | 'info', ops: readonly MicroOp[]): void {
    this.clockNs += 1_000;
    this.recorder.complete(open, type, type === 'ok' ? ops : open.value);
  }

  txn(type: 'ok' | 'fail' | 'info', ops: readonly MicroOp[]): void {
    this.close(this.open(ops), type, ops);
  }
}

const ap = (k: string, v: number): MicroOp => ['append', k, v];
const r = (k: string, list: number[]): MicroOp => ['r', k, list];

function kinds(history: readonly Operation[], options = {}): ListAppendAnomalyKind[] {
  return [...new Set(checkListAppend(history, options).anomalies.map((a) => a.kind))].sort();
}

describe('list-append checker', () => {
  it('accepts a serial history whose reads follow the appends', () => {
    const h = new Txns();
    h.txn('ok', [ap('x', 1), ap('y', 1)]);
    h.txn('ok', [r('x', [1]), ap('x', 2)]);
    h.txn('ok', [r('x', [1, 2]), r('y', [1])]);
    h.txn('fail', [ap('y', 2)]);
    const result = checkListAppend(h.recorder.ops);
    assert.deepEqual(result.anomalies, []);
    assert.equal(result.valid, true);
    assert.equal(result.counts.ok, 3);
    assert.equal(result.counts.fail, 1);
  });

  it('accepts concurrent transactions that serialize in an order other than real time', () => {
    const h = new Txns();
    const a = h.open([ap('x', 1)]);
    const b = h.open([r('x', [])]);
    h.close(a, 'ok', [ap('x', 1)]);
    h.close(b, 'ok', [r('x', [])]);
    h.txn('ok', [r('x', [1])]);
    assert.deepEqual(kinds(h.recorder.ops), []);
  });

  it('finds G0: write cycle through two keys, with the cycle', () => {
    const h = new Txns();
    h.txn('ok', [ap('x', 1), ap('y', 2)]);
    h.txn('ok', [ap('x', 2), ap('y', 1)]);
    h.txn('ok', [r('x', [1, 2]), r('y', [1, 2])]);
    const result = checkListAppend(h.recorder.ops);
    const g0 = result.anomalies.find((a) => a.kind === 'G0');
    assert.ok(g0?.cycle !== undefined, JSON.stringify(result.anomalies));
    assert.deepEqual(
      g0.cycle.map((s) => s.why.type),
      ['ww', 'ww'],
    );
    assert.equal(g0.cycle[0]!.from, g0.cycle[1]!.to, 'the steps close a cycle');
  });

  it('finds G1a: a committed read of an append whose transaction failed', () => {
    const h = new Txns();
    h.txn('fail', [ap('x', 1)]);
    h.txn('ok', [r('x', [1])]);
    assert.deepEqual(kinds(h.recorder.ops), ['G1a']);
  });

  it('finds G1b: a read ending on an intermediate append of another transaction', () => {
    const h = new Txns();
    h.txn('ok', [ap('x', 1), ap('x', 2)]);
    h.txn('ok', [r('x', [1])]);
    assert.ok(kinds(h.recorder.ops).includes('G1b'));
  });

  it('finds G1c: a cycle of write-read dependencies', () => {
    const h = new Txns();
    const a = h.open([ap('x', 1), r('y', [1])]);
    const b = h.open([ap('y', 1), r('x', [1])]);
    h.close(a, 'ok', [ap('x', 1), r('y', [1])]);
    h.close(b, 'ok', [ap('y', 1), r('x', [1])]);
    const result = checkListAppend(h.recorder.ops);
    assert.deepEqual(kinds(h.recorder.ops), ['G1c']);
    const cycle = result.anomalies[0]!.cycle!;
    assert.deepEqual(
      cycle.map((s) => s.why.type),
      ['wr', 'wr'],
    );
  });

  it('finds G-single: read skew, one anti-dependency in the cycle', () => {
    const h = new Txns();
    h.txn('ok', [ap('x', 1), ap('y', 1)]);
    // Sees y's append but not x's, which the same transaction made.
    h.txn('ok', [r('x', []), r('y', [1])]);
    h.txn('ok', [r('x', [1])]);
    assert.deepEqual(kinds(h.recorder.ops), ['G-single']);
  });

  it('finds G2 and not G-single: write skew, two anti-dependencies', () => {
    const h = new Txns();
    const a = h.open([r('x', []), ap('y', 1)]);
    const b = h.open([r('y', []), ap('x', 1)]);
    h.close(a, 'ok', [r('x', []), ap('y', 1)]);
    h.close(b, 'ok', [r('y', []), ap('x', 1)]);
    h.txn('ok', [r('x', [1]), r('y', [1])]);
    const result = checkListAppend(h.recorder.ops);
    assert.deepEqual(kinds(h.recorder.ops), ['G2']);
    assert.deepEqual(
      result.anomalies[0]!.cycle!.map((s) => s.why.type),
      ['rw', 'rw'],
    );
  });

  it('finds G2 against appends no read observed (they come after the longest read)', () => {
    const h = new Txns();
    const a = h.open([r('x', []), ap('y', 1)]);
    const b = h.open([r('y', []), ap('x', 1)]);
    h.close(a, 'ok', [r('x', []), ap('y', 1)]);
    h.close(b, 'ok', [r('y', []), ap('x', 1)]);
    assert.deepEqual(kinds(h.recorder.ops), ['G2']);
  });

  it('finds reads that are not prefixes of one order, duplicates, and values nobody appended', () => {
    const h = new Txns();
    h.txn('ok', [ap('x', 1)]);
    h.txn('ok', [ap('x', 2)]);
    h.txn('ok', [ap('x', 3)]);
    h.txn('ok', [r('x', [1, 2])]);
    h.txn('ok', [r('x', [1, 3, 2])]);
    h.txn('ok', [ap('y', 1)]);
    h.txn('ok', [r('y', [1, 1])]);
    h.txn('ok', [r('z', [7])]);
    const found = kinds(h.recorder.ops);
    for (const kind of ['duplicate-elements', 'garbage-read', 'incompatible-order'] as const) {
      assert.ok(found.includes(kind), `${kind} in ${found.join(', ')}`);
    }
  });

  it('finds an internal inconsistency: a read missing the transaction’s own earlier append', () => {
    const h = new Txns();
    h.txn('ok', [ap('x', 5), r('x', [])]);
    assert.deepEqual(kinds(h.recorder.ops), ['internal']);
  });

  it('counts an indeterminate transaction as committed only once one of its appends was read', () => {
    const h = new Txns();
    h.txn('info', [ap('x', 1)]);
    h.txn('info', [ap('x', 2)]);
    h.txn('ok', [r('x', [1])]);
    const result = checkListAppend(h.recorder.ops);
    assert.deepEqual(result.anomalies, []);
    assert.equal(result.counts.info, 2);
  });

  it('finds a lost append only when asked, and only past the real-time slack', () => {
    const h = new Txns();
    h.txn('ok', [ap('x', 1)]);
    h.clockNs += 5_000_000;
    h.txn('ok', [r('x', [])]);
    assert.deepEqual(kinds(h.recorder.ops), [], 'serializable: the read may come first');
    assert.deepEqual(kinds(h.recorder.ops, { realtimeSlackNs: 1_000_000 }), ['lost-append']);
    assert.deepEqual(kinds(h.recorder.ops, { realtimeSlackNs: 10_000_000 }), []);
  });
});
