import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { checkBank } from './bank.js';
import { HistoryRecorder, type Operation } from './history.js';

type BankOp = Extract<Operation, { f: 'read' | 'transfer' }>;
const MODEL = { accounts: ['a', 'b', 'c'], initialBalance: 10 };

class Bank {
  clockNs = 0;
  readonly recorder = new HistoryRecorder(() => this.clockNs++);

  transfer(from: string, to: string, amount: number, type: 'ok' | 'fail' | 'info'): void {
    const op = this.recorder.invoke<BankOp>({
      process: this.recorder.process(),
      f: 'transfer',
      value: { from, to, amount },
    });
    this.recorder.complete(op, type);
  }

  read(balances: Record<string, number>): void {
    const op = this.recorder.invoke<BankOp>({ process: this.recorder.process(), f: 'read', value: null });
    this.recorder.complete(op, 'ok', balances);
  }
}

const kinds = (h: Bank) => checkBank(h.recorder.ops, MODEL).anomalies.map((a) => a.kind);

describe('bank checker', () => {
  it('accepts reads that sum to the total and a final read the transfers explain', () => {
    const h = new Bank();
    h.transfer('a', 'b', 5, 'ok');
    h.read({ a: 5, b: 15, c: 10 });
    h.transfer('b', 'c', 50, 'fail');
    h.transfer('c', 'a', 3, 'info');
    h.read({ a: 8, b: 15, c: 7 });
    const result = checkBank(h.recorder.ops, MODEL);
    assert.deepEqual(result.anomalies, []);
    assert.deepEqual(result.counts, { reads: 2, ok: 1, fail: 1, info: 1 });
  });

  it('accepts a final read in which an indeterminate transfer did not apply', () => {
    const h = new Bank();
    h.transfer('c', 'a', 3, 'info');
    h.read({ a: 10, b: 10, c: 10 });
    assert.deepEqual(kinds(h), []);
  });

  it('finds a read that saw half a transfer', () => {
    const h = new Bank();
    h.transfer('a', 'b', 5, 'ok');
    h.read({ a: 5, b: 10, c: 10 });
    h.read({ a: 5, b: 15, c: 10 });
    assert.deepEqual(kinds(h), ['wrong-total']);
  });

  it('finds a negative balance', () => {
    const h = new Bank();
    h.transfer('a', 'b', 8, 'ok');
    h.transfer('a', 'c', 8, 'ok');
    h.read({ a: -6, b: 18, c: 18 });
    assert.ok(kinds(h).includes('negative-balance'));
  });

  it('finds a lost acknowledged transfer, a duplicated one and a failed one that applied', () => {
    const lost = new Bank();
    lost.transfer('a', 'b', 5, 'ok');
    lost.read({ a: 10, b: 10, c: 10 });
    assert.deepEqual(kinds(lost), ['unexplained-final']);
    const twice = new Bank();
    twice.transfer('a', 'b', 5, 'ok');
    twice.read({ a: 0, b: 20, c: 10 });
    assert.deepEqual(kinds(twice), ['unexplained-final']);
    const failed = new Bank();
    failed.transfer('a', 'b', 5, 'fail');
    failed.read({ a: 5, b: 15, c: 10 });
    assert.deepEqual(kinds(failed), ['unexplained-final']);
  });

  it('needs a read to check the balances', () => {
    const h = new Bank();
    h.transfer('a', 'b', 5, 'ok');
    assert.deepEqual(kinds(h), ['no-final-read']);
  });
});
