import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  isFinal,
  isLegalTransition,
  isTxResolutionState,
  isTxState,
  TX_RESOLUTION_STATES,
  TX_STATES,
  TX_TRANSITIONS,
  type TxResolutionState,
} from './tx-state.js';

/** ignite3-protocol.md §3, transcribed row by row: Y = legal. Columns: PENDING FINISHING ABORTED COMMITTED ABANDONED UNKNOWN. */
const COLUMNS: readonly TxResolutionState[] = ['PENDING', 'FINISHING', 'ABORTED', 'COMMITTED', 'ABANDONED', 'UNKNOWN'];
const SPEC: ReadonlyArray<readonly [TxResolutionState | undefined, string]> = [
  [undefined, 'YYYYY-'],
  ['PENDING', 'YYYYY-'],
  ['FINISHING', '--YYY-'],
  ['ABORTED', '--Y---'],
  ['COMMITTED', '---Y--'],
  ['ABANDONED', '-YYYY-'],
  ['UNKNOWN', '------'],
];

describe('tx state transition table', () => {
  it('every (from, to) pair is legal exactly as in the protocol table', () => {
    let checked = 0;
    for (const [from, row] of SPEC) {
      COLUMNS.forEach((to, i) => {
        assert.equal(isLegalTransition(from, to), row[i] === 'Y', `${from ?? 'absent'} → ${to}`);
        checked += 1;
      });
    }
    assert.equal(checked, 7 * 6);
  });

  it('the table has a row for every state and for absence, and nothing leads to UNKNOWN', () => {
    assert.deepEqual(Object.keys(TX_TRANSITIONS).sort(), [...TX_RESOLUTION_STATES, 'ABSENT'].sort());
    for (const targets of Object.values(TX_TRANSITIONS)) assert.ok(!targets.includes('UNKNOWN'));
  });

  it('a final state only moves to itself', () => {
    for (const from of TX_STATES) {
      if (!isFinal(from)) continue;
      for (const to of TX_RESOLUTION_STATES) assert.equal(isLegalTransition(from, to), to === from);
    }
  });

  it('only COMMITTED and ABORTED are final', () => {
    assert.deepEqual(
      TX_RESOLUTION_STATES.filter((s) => isFinal(s)),
      ['COMMITTED', 'ABORTED'],
    );
    assert.equal(isFinal(undefined), false);
  });

  it('UNKNOWN is a resolution state but not a stored one', () => {
    assert.equal(isTxState('UNKNOWN'), false);
    assert.equal(isTxResolutionState('UNKNOWN'), true);
    assert.equal(isTxState('PENDING'), true);
    assert.equal(isTxState('pending'), false);
    assert.equal(isTxResolutionState(3), false);
  });
});
