import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatHistory, HistoryRecorder, type Operation, pairOperations, parseHistory } from './history.js';

type TxnOp = Extract<Operation, { f: 'txn' }>;

describe('history', () => {
  it('round-trips through JSON Lines with strictly increasing times', () => {
    let now = 5;
    const recorder = new HistoryRecorder(() => now);
    const p = recorder.process();
    const op = recorder.invoke<TxnOp>({
      process: p,
      f: 'txn',
      value: [
        ['append', 'x', 1],
        ['r', 'x', null],
      ],
    });
    recorder.complete(op, 'ok', [
      ['append', 'x', 1],
      ['r', 'x', [1]],
    ]);
    now = 3; // a clock that stands still or goes back still gives increasing times
    const again = recorder.invoke<TxnOp>({ process: p, f: 'txn', value: [['r', 'y', null]] });
    recorder.complete(again, 'info', again.value, 'TX_OUTCOME_UNKNOWN');
    const text = formatHistory(recorder.ops);
    assert.equal(text.split('\n').filter((l) => l !== '').length, 4);
    const parsed = parseHistory(text);
    assert.deepEqual(parsed, recorder.ops);
    assert.deepEqual(
      parsed.map((o) => o.time),
      [5, 6, 7, 8],
    );
    assert.equal(parsed[3]!.error, 'TX_OUTCOME_UNKNOWN');
  });

  it('refuses lines out of time order and unknown types', () => {
    assert.throws(
      () =>
        parseHistory(
          '{"process":0,"type":"invoke","f":"read","time":2}\n{"process":0,"type":"ok","f":"read","time":2}',
        ),
      /does not increase/,
    );
    assert.throws(() => parseHistory('{"process":0,"type":"done","f":"read","time":2}'), /type must be/);
  });

  it('refuses a process that runs again after an info', () => {
    const text = [
      { process: 0, type: 'invoke', f: 'write', value: 1, time: 1 },
      { process: 0, type: 'info', f: 'write', value: 1, time: 2 },
      { process: 0, type: 'invoke', f: 'write', value: 2, time: 3 },
    ]
      .map((o) => JSON.stringify(o))
      .join('\n');
    assert.throws(() => pairOperations(parseHistory(text)), /runs again after an info/);
  });
});
