import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { HistoryRecorder, type Operation, type RegisterValue } from './history.js';
import { checkRegister } from './register.js';

type RegOp = Extract<Operation, { f: 'read' | 'write' | 'cas' }>;

class Registers {
  readonly recorder = new HistoryRecorder(() => this.clockNs);
  clockNs = 0;
  private readonly processes = new Map<string, number>();

  private processOf(client: string): number {
    let p = this.processes.get(client);
    if (p === undefined) {
      p = this.recorder.process();
      this.processes.set(client, p);
    }
    return p;
  }

  call(client: string, f: RegOp['f'], key: string, value: RegOp['value']): RegOp {
    this.clockNs += 10;
    const process = this.processOf(client);
    return this.recorder.invoke<RegOp>({ process, f, key, value } as Omit<RegOp, 'type' | 'time' | 'index'>);
  }

  ret(op: RegOp, type: 'ok' | 'fail' | 'info', value: RegOp['value'] = op.value): void {
    this.clockNs += 10;
    this.recorder.complete(op, type, value);
    if (type === 'info') this.processes.delete(this.clientOf(op.process));
  }

  private clientOf(process: number): string {
    for (const [c, p] of this.processes) if (p === process) return c;
    return '';
  }

  read(client: string, key: string, value: RegisterValue): void {
    this.ret(this.call(client, 'read', key, null), 'ok', value);
  }

  write(client: string, key: string, value: number, type: 'ok' | 'fail' | 'info' = 'ok'): void {
    this.ret(this.call(client, 'write', key, value), type);
  }
}

describe('register linearizability checker', () => {
  it('accepts a sequential history of reads, writes and compare-and-sets', () => {
    const h = new Registers();
    h.read('a', 'x', null);
    h.write('a', 'x', 1);
    h.ret(h.call('b', 'cas', 'x', [1, 2]), 'ok');
    h.ret(h.call('b', 'cas', 'x', [1, 3]), 'fail');
    h.read('a', 'x', 2);
    const result = checkRegister(h.recorder.ops);
    assert.equal(result.valid, true, result.message);
  });

  it('accepts a read concurrent with a write that returns either value', () => {
    for (const seen of [null, 1]) {
      const h = new Registers();
      const w = h.call('a', 'write', 'x', 1);
      const rd = h.call('b', 'read', 'x', null);
      h.ret(rd, 'ok', seen);
      h.ret(w, 'ok');
      h.read('b', 'x', 1);
      assert.equal(checkRegister(h.recorder.ops).valid, true, `concurrent read of ${seen}`);
    }
  });

  it('rejects a stale read after a write completed (real-time order)', () => {
    const h = new Registers();
    h.write('a', 'x', 1);
    h.write('a', 'x', 2);
    h.read('b', 'x', 1);
    const result = checkRegister(h.recorder.ops);
    assert.equal(result.valid, false);
    assert.match(result.message, /key x: not linearizable/);
    assert.deepEqual(result.keys[0]?.deepest?.linearized, 2);
  });

  it('rejects two reads that see a concurrent write in opposite orders', () => {
    const h = new Registers();
    h.write('a', 'x', 0);
    const w = h.call('a', 'write', 'x', 1);
    h.read('b', 'x', 1);
    h.read('c', 'x', 0);
    h.ret(w, 'ok');
    assert.equal(checkRegister(h.recorder.ops).valid, false);
  });

  it('rejects an acknowledged cas whose expected value the register did not hold', () => {
    const h = new Registers();
    h.write('a', 'x', 1);
    h.ret(h.call('a', 'cas', 'x', [5, 6]), 'ok');
    assert.equal(checkRegister(h.recorder.ops).valid, false);
  });

  it('lets an indeterminate write take effect late or never', () => {
    const late = new Registers();
    late.write('a', 'x', 1);
    late.write('a', 'x', 2, 'info');
    late.read('b', 'x', 1);
    late.read('b', 'x', 2);
    assert.equal(checkRegister(late.recorder.ops).valid, true, 'took effect after the first read');
    const never = new Registers();
    never.write('a', 'x', 1);
    never.write('a', 'x', 2, 'info');
    never.read('b', 'x', 1);
    assert.equal(checkRegister(never.recorder.ops).valid, true, 'never took effect');
    const before = new Registers();
    before.write('a', 'x', 1);
    before.read('b', 'x', 2);
    before.write('a', 'x', 2, 'info');
    assert.equal(checkRegister(before.recorder.ops).valid, false, 'it cannot take effect before it was invoked');
  });

  it('ignores failed writes, and rejects a read of a value only a failed write wrote', () => {
    const h = new Registers();
    h.write('a', 'x', 1);
    h.write('a', 'x', 9, 'fail');
    h.read('b', 'x', 1);
    assert.equal(checkRegister(h.recorder.ops).valid, true);
    h.read('b', 'x', 9);
    assert.equal(checkRegister(h.recorder.ops).valid, false);
  });

  it('checks keys independently and names the one that is not linearizable', () => {
    const h = new Registers();
    h.write('a', 'x', 1);
    h.write('a', 'y', 1);
    h.read('b', 'x', 1);
    h.read('b', 'y', null);
    const result = checkRegister(h.recorder.ops);
    assert.equal(result.valid, false);
    assert.deepEqual(
      result.keys.map((k) => [k.key, k.valid]),
      [
        ['x', true],
        ['y', false],
      ],
    );
  });

  it('decides a history of many concurrent operations quickly thanks to memoization', () => {
    const h = new Registers();
    // 12 clients write concurrently, then everyone reads the same final value: 12! orders without the cache.
    const writes = Array.from({ length: 12 }, (_, i) => h.call(`c${i}`, 'write', 'x', i));
    for (const w of writes) h.ret(w, 'ok');
    for (let i = 0; i < 12; i++) h.read(`c${i}`, 'x', 7);
    const result = checkRegister(h.recorder.ops, { stepsMax: 200_000 });
    assert.equal(result.valid, true, result.message);
  });
});
