import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SeededRandom } from './random.js';

describe('SeededRandom', () => {
  it('replays the same sequence from the same seed', () => {
    const a = new SeededRandom(42);
    const b = new SeededRandom(42);
    for (let i = 0; i < 1000; i++) assert.equal(a.next(), b.next());
  });

  it('gives different sequences for different seeds', () => {
    const a = new SeededRandom(1);
    const b = new SeededRandom(2);
    const same = Array.from({ length: 100 }, () => a.next() === b.next()).filter(Boolean).length;
    assert.ok(same < 5);
  });

  it('forks by label, independent of draws already taken by the parent', () => {
    const a = new SeededRandom('s');
    const b = new SeededRandom('s');
    for (let i = 0; i < 17; i++) b.next();
    assert.equal(a.fork('raft').next(), b.fork('raft').next());
    assert.notEqual(a.fork('raft').next(), a.fork('net').next());
  });

  it('stays in range and is roughly uniform', () => {
    const r = new SeededRandom(7);
    const buckets = new Array<number>(10).fill(0);
    for (let i = 0; i < 100_000; i++) {
      const x = r.next();
      assert.ok(x >= 0 && x < 1);
      const k = r.int(10);
      buckets[k] = (buckets[k] ?? 0) + 1;
    }
    for (const count of buckets) assert.ok(count > 9_000 && count < 11_000, `bucket ${count}`);
  });

  it('draws well-formed uuids', () => {
    const r = new SeededRandom(9);
    const id = r.uuid();
    assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.notEqual(id, r.uuid());
  });
});
