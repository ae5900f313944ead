import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isBasaltError } from '../core/errors.js';
import { nodeName } from '../core/ids.js';
import { RejoinGuard } from './cluster-members.js';
import { EMPTY_META_VIEW, type MetaView } from './metastorage-state.js';

const n4 = nodeName('n4');
const view = (
  members: readonly string[],
  assignments: readonly (readonly [string, readonly string[]])[],
): MetaView => ({
  ...EMPTY_META_VIEW,
  revision: 5,
  members: members.map((name) => ({ name, state: 'active' as const })),
  assignments,
});

describe('RejoinGuard', () => {
  it('refuses an empty node joining under a name that still votes in a partition, once, and admits nothing after', () => {
    const guard = new RejoinGuard(n4, true);
    const first = guard.admit(view(['n1', 'n4'], [['t1p0', ['n1', 'n4']]]));
    assert.equal(first.admit, false);
    assert.ok(isBasaltError(first.refusal, 'INVALID_ARGUMENT') && /remove --dead n4/.test(first.refusal.message));
    const later = guard.admit(view(['n1', 'n4'], [['t1p0', ['n1']]]));
    assert.deepEqual(later, { admit: false }, 'refused for good, reported once');
  });

  it('refuses an empty node joining under a name that votes in the metastorage group', () => {
    const guard = new RejoinGuard(n4, true);
    const base = view(['n1', 'n4'], [['t1p0', ['n1']]]);
    const members = (base.members ?? []).map((m) => (m.name === 'n4' ? { ...m, meta: true } : m));
    const refused = guard.admit({ ...base, members });
    assert.equal(refused.admit, false);
    assert.ok(isBasaltError(refused.refusal, 'INVALID_ARGUMENT'));
  });

  it('admits a new name: no record yet, then a record with no replicas (moves onto it come later)', () => {
    const guard = new RejoinGuard(n4, true);
    assert.deepEqual(guard.admit(view(['n1'], [['t1p0', ['n1']]])), { admit: true });
    assert.deepEqual(guard.admit(view(['n1', 'n4'], [['t1p0', ['n1']]])), { admit: true });
    assert.deepEqual(guard.admit(view(['n1', 'n4'], [['t1p0', ['n1', 'n4']]])), { admit: true }, 'decided once');
  });

  it('never stands in the way of a node with data or one that does not join', () => {
    const guard = new RejoinGuard(n4, false);
    assert.deepEqual(guard.admit(view(['n1', 'n4'], [['t1p0', ['n1', 'n4']]])), { admit: true });
  });
});
