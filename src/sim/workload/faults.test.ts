import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LIMITS } from '../../core/limits.js';
import { parseFaults, SIM_FAULTS, SKEW_MS_MAX } from './faults.js';

describe('sim fault kinds', () => {
  it('parses lists, all and none, in a fixed order', () => {
    assert.deepEqual(parseFaults('skew,crash'), ['crash', 'skew']);
    assert.deepEqual(parseFaults('all'), SIM_FAULTS);
    assert.deepEqual(parseFaults('none'), []);
    assert.deepEqual(parseFaults('drop,all'), SIM_FAULTS);
  });

  it('refuses an unknown kind', () => {
    assert.throws(() => parseFaults('drop,meteor'), /unknown fault meteor/);
  });

  it('keeps two skewed clocks within maxClockSkew of each other', () => {
    assert.ok(2 * SKEW_MS_MAX < LIMITS.maxClockSkewMsDefault);
  });
});
