import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { AssertionError } from '../../core/assert.js';
import { isBasaltError } from '../../core/errors.js';
import { type HybridTimestamp, nodeId } from '../../core/ids.js';
import { asTimestamp, hybridTimestamp, MAX_TIMESTAMP, NULL_TIMESTAMP, physicalMs } from '../../hlc/timestamp.js';
import {
  asTxId,
  beginTimestampOf,
  compareTxAge,
  isOlder,
  isTxId,
  makeTxId,
  nodeIdOf,
  parseTxId,
  TX_ID_COUNTER_MAX,
  TX_ID_TIMEOUT_MS_MAX,
  TxIdGenerator,
  timeoutOf,
  txDeadline,
} from './tx-id.js';

const nodeIdArb = fc.stringMatching(/^[A-Za-z0-9_-]{1,64}$/);
const tsArb = fc.bigInt({ min: 1n, max: MAX_TIMESTAMP }).map((v) => asTimestamp(v));
const counterArb = fc.integer({ min: 0, max: TX_ID_COUNTER_MAX });
const partsArb = fc.record({ beginTimestamp: tsArb, nodeId: nodeIdArb.map(nodeId), counter: counterArb });
const timeoutArb = fc.integer({ min: 1, max: TX_ID_TIMEOUT_MS_MAX });
/** Parts with or without a timeout of their own. */
const anyPartsArb = fc.record(
  { beginTimestamp: tsArb, nodeId: nodeIdArb.map(nodeId), counter: counterArb, timeoutMs: timeoutArb },
  { requiredKeys: ['beginTimestamp', 'nodeId', 'counter'] },
);

function tupleOrder(a: { beginTimestamp: HybridTimestamp; nodeId: string; counter: number }, b: typeof a): number {
  if (a.beginTimestamp !== b.beginTimestamp) return a.beginTimestamp < b.beginTimestamp ? -1 : 1;
  if (a.nodeId !== b.nodeId) return a.nodeId < b.nodeId ? -1 : 1;
  return Math.sign(a.counter - b.counter);
}

function expectInvalid(fn: () => unknown): void {
  assert.throws(fn, (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT'));
}

describe('tx ids', () => {
  it('text order of ids is the order of (begin timestamp, node id, counter)', () => {
    fc.assert(
      fc.property(partsArb, partsArb, (a, b) => {
        const ia = makeTxId(a);
        const ib = makeTxId(b);
        const textOrder = ia === ib ? 0 : ia < ib ? -1 : 1;
        assert.equal(textOrder, tupleOrder(a, b));
        assert.equal(Math.sign(compareTxAge(ia, ib)), tupleOrder(a, b));
      }),
      { numRuns: 2000 },
    );
  });

  it('a node id that is a prefix of another still orders as the shorter string', () => {
    const ts = hybridTimestamp(1000);
    const short = makeTxId({ beginTimestamp: ts, nodeId: nodeId('ab'), counter: TX_ID_COUNTER_MAX });
    const long = makeTxId({ beginTimestamp: ts, nodeId: nodeId('ab-'), counter: 0 });
    assert.ok(isOlder(short, long));
  });

  it('an older tx (smaller begin timestamp) has a smaller id whatever its node and counter', () => {
    const older = makeTxId({ beginTimestamp: hybridTimestamp(5, 1), nodeId: nodeId('zzzz'), counter: 99 });
    const younger = makeTxId({ beginTimestamp: hybridTimestamp(5, 2), nodeId: nodeId('A'), counter: 0 });
    assert.ok(older < younger);
    assert.ok(isOlder(older, younger));
    assert.ok(!isOlder(younger, older));
    assert.equal(compareTxAge(older, older), 0);
  });

  it('round-trips parts through the text form', () => {
    fc.assert(
      fc.property(partsArb, (parts) => {
        const id = makeTxId(parts);
        assert.ok(isTxId(id));
        assert.deepEqual(parseTxId(id), { ...parts });
        assert.equal(asTxId(id), id);
        assert.equal(beginTimestampOf(id), parts.beginTimestamp);
        assert.equal(nodeIdOf(id), parts.nodeId);
      }),
      { numRuns: 500 },
    );
  });

  it('a malformed id from the wire is INVALID_ARGUMENT', () => {
    const good = makeTxId({ beginTimestamp: hybridTimestamp(0xabcdef), nodeId: nodeId('n1'), counter: 0xfe });
    const bad: unknown[] = [
      undefined,
      42,
      '',
      good.toUpperCase(),
      `${good}0`,
      good.slice(1),
      good.replace('+n1+', '+n 1+'),
      good.replace('+n1+', '++'),
      `0000000000000000+n1+000000000001`,
      `${'0'.repeat(15)}1+${'x'.repeat(65)}+000000000001`,
    ];
    for (const text of bad) {
      assert.equal(isTxId(text), false, String(text));
      expectInvalid(() => parseTxId(text));
      expectInvalid(() => asTxId(text));
    }
  });

  it('refuses to build an id from a null timestamp, a bad node id or a counter out of range', () => {
    expectInvalid(() => makeTxId({ beginTimestamp: NULL_TIMESTAMP, nodeId: nodeId('n1'), counter: 0 }));
    expectInvalid(() => makeTxId({ beginTimestamp: hybridTimestamp(1), nodeId: nodeId('a+b'), counter: 0 }));
    expectInvalid(() => makeTxId({ beginTimestamp: hybridTimestamp(1), nodeId: nodeId(''), counter: 0 }));
    expectInvalid(() => makeTxId({ beginTimestamp: hybridTimestamp(1), nodeId: nodeId('n1'), counter: -1 }));
    expectInvalid(() => makeTxId({ beginTimestamp: hybridTimestamp(1), nodeId: nodeId('n1'), counter: 0.5 }));
    expectInvalid(() => new TxIdGenerator(nodeId('bad id')));
  });

  it('a generator makes distinct, increasing ids even for one begin timestamp', () => {
    const gen = new TxIdGenerator(nodeId('3f2504e0-4f89-11d3-9a0c-0305e82c3301'));
    const ts = hybridTimestamp(1_700_000_000_000, 3);
    const ids = [gen.next(ts), gen.next(ts), gen.next(hybridTimestamp(1_700_000_000_000, 4))];
    assert.equal(new Set(ids).size, 3);
    assert.deepEqual([...ids].sort(), ids);
    for (const id of ids) assert.equal(nodeIdOf(id), gen.nodeId);
  });

  it('a generator fed a begin timestamp older than its last one is a bug: its ids would not be in age order', () => {
    const gen = new TxIdGenerator(nodeId('n1'));
    gen.next(hybridTimestamp(2_000));
    assert.throws(() => gen.next(hybridTimestamp(1_000)), AssertionError);
    assert.ok(isOlder(gen.next(hybridTimestamp(2_000)), gen.next(hybridTimestamp(2_000, 1))), 'equal or later is fine');
  });

  it('the hard deadline is the begin timestamp plus the tx timeout (rule 15)', () => {
    const id = makeTxId({ beginTimestamp: hybridTimestamp(10_000, 9), nodeId: nodeId('n1'), counter: 1 });
    const d = txDeadline(id, 30_000);
    assert.equal(physicalMs(d), 40_000);
    assert.equal(d, hybridTimestamp(40_000, 9));
  });

  it('with or without a timeout field, text order of ids is still (begin timestamp, node id, counter) order', () => {
    fc.assert(
      fc.property(anyPartsArb, anyPartsArb, (a, b) => {
        const ia = makeTxId(a);
        const ib = makeTxId(b);
        const expected = tupleOrder(a, b);
        // The same (beginTs, node, counter) is one tx: its timeout cannot differ, so that tie never occurs.
        fc.pre(expected !== 0 || a.timeoutMs === b.timeoutMs);
        assert.equal(ia === ib ? 0 : ia < ib ? -1 : 1, expected);
        assert.equal(Math.sign(compareTxAge(ia, ib)), expected);
      }),
      { numRuns: 2000 },
    );
  });

  it('a timeout round-trips through the id and sets the deadline every node derives from it', () => {
    fc.assert(
      fc.property(anyPartsArb, (parts) => {
        const id = makeTxId(parts);
        assert.ok(isTxId(id));
        assert.deepEqual(parseTxId(id), { ...parts });
        assert.equal(asTxId(id), id);
        assert.equal(beginTimestampOf(id), parts.beginTimestamp);
        assert.equal(nodeIdOf(id), parts.nodeId);
        assert.equal(timeoutOf(id), parts.timeoutMs);
      }),
      { numRuns: 500 },
    );
    const long = makeTxId({
      beginTimestamp: hybridTimestamp(10_000),
      nodeId: nodeId('n1'),
      counter: 1,
      timeoutMs: 120_000,
    });
    assert.match(long, /\+0001d4c0$/, 'eight hex digits after the counter');
    assert.equal(physicalMs(txDeadline(long, 30_000)), 130_000, 'its own timeout, not the default');
    const plain = makeTxId({ beginTimestamp: hybridTimestamp(10_000), nodeId: nodeId('n1'), counter: 1 });
    assert.equal(timeoutOf(plain), undefined);
    assert.equal(physicalMs(txDeadline(plain, 30_000)), 40_000, 'an id without one keeps the default');
    const gen = new TxIdGenerator(nodeId('n2'));
    assert.equal(timeoutOf(gen.next(hybridTimestamp(1), 2_000)), 2_000);
    assert.equal(timeoutOf(gen.next(hybridTimestamp(1))), undefined);
  });

  it('a malformed timeout field is INVALID_ARGUMENT, and so is building one out of range', () => {
    const good = makeTxId({ beginTimestamp: hybridTimestamp(0xabcdef), nodeId: nodeId('n1'), counter: 0xfe });
    for (const text of [`${good}+00000000`, `${good}+1d4c0`, `${good}+0001D4C0`, `${good}+0001d4c00`, `${good}+`]) {
      assert.equal(isTxId(text), false, text);
      expectInvalid(() => parseTxId(text));
    }
    const base = { beginTimestamp: hybridTimestamp(1), nodeId: nodeId('n1'), counter: 0 };
    for (const timeoutMs of [0, -1, 1.5, TX_ID_TIMEOUT_MS_MAX + 1, Number.NaN]) {
      expectInvalid(() => makeTxId({ ...base, timeoutMs }));
    }
  });
});

describe('a retry that keeps its age (TxIdGenerator.nextRetry)', () => {
  const TIMEOUT = 30_000;
  const MAX = 600_000;

  it('is as old as the attempt it retries, older than every tx begun since, and its deadline is still its timeout from now', () => {
    const gen = new TxIdGenerator(nodeId('n1'));
    const first = gen.next(hybridTimestamp(10_000));
    const since = gen.next(hybridTimestamp(10_200));
    const now = hybridTimestamp(10_500, 3);
    const retry = gen.nextRetry(first, now, TIMEOUT, MAX);
    assert.ok(retry !== undefined);
    assert.equal(beginTimestampOf(retry), beginTimestampOf(first), 'the age of the first attempt');
    assert.ok(isOlder(first, retry) && isOlder(retry, since), 'after the first attempt, before every later tx');
    assert.notEqual(retry, first);
    assert.ok(txDeadline(retry, TIMEOUT) >= txDeadline(gen.next(now), TIMEOUT), 'its deadline is its timeout from now');
    assert.ok(physicalMs(txDeadline(retry, TIMEOUT)) <= 10_500 + TIMEOUT + 2, 'and not much later');
    const again = gen.nextRetry(retry, hybridTimestamp(11_000), TIMEOUT, MAX);
    assert.ok(again !== undefined && beginTimestampOf(again) === beginTimestampOf(first), 'a retry of a retry too');
    assert.ok(txDeadline(again, TIMEOUT) >= txDeadline(gen.next(hybridTimestamp(11_000)), TIMEOUT));
    // Fresh ids still increase: a retry took no place in their order.
    assert.ok(isOlder(since, gen.next(hybridTimestamp(12_000))));
  });

  it("takes a fresh age for another node's id, after one timeout, or past the largest timeout", () => {
    const gen = new TxIdGenerator(nodeId('n1'));
    const foreign = new TxIdGenerator(nodeId('n2')).next(hybridTimestamp(10_000));
    assert.equal(gen.nextRetry(foreign, hybridTimestamp(10_001), TIMEOUT, MAX), undefined);
    const first = gen.next(hybridTimestamp(10_000));
    assert.equal(gen.nextRetry(first, hybridTimestamp(10_000 + TIMEOUT + 1), TIMEOUT, MAX), undefined);
    assert.equal(gen.nextRetry(first, hybridTimestamp(10_100), TIMEOUT, TIMEOUT + 50), undefined);
    assert.ok(gen.nextRetry(first, hybridTimestamp(10_100), TIMEOUT, MAX) !== undefined);
  });
});
