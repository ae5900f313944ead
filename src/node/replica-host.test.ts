/**
 * The primary hints shared by a node's coordinator and cleanup locator, and the coordinator's metastorage placement.
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { MetaView } from '../cluster/metastorage-state.js';
import { BasaltError, isBasaltError } from '../core/errors.js';
import type { NodeName, PartitionId } from '../core/ids.js';
import { partitionIndexOf } from '../core/partitioning.js';
import { primaryMissError } from '../replica/partition/primary-miss.js';
import { PrimaryHints } from '../route/primary-directory.js';
import { sendToPrimary } from '../route/send-to-primary.js';
import { primaryMissNaming } from '../testing/coordinator-fakes.js';
import { MetaPlacement } from './coordinator-service.js';
import { holderHint, isExpectedFailure } from './replica-host.js';

const P = 't1p0' as PartitionId;
const n = (s: string) => s as NodeName;

describe('PrimaryHints', () => {
  it('prefers the local lease holder, then a learned holder, then rotates over live replicas', () => {
    let local: NodeName | undefined;
    const live = new Set(['n1', 'n2', 'n3']);
    const hints = new PrimaryHints(
      () => [n('n1'), n('n2'), n('n3')],
      () => local,
      (name) => live.has(name),
    );
    assert.deepEqual([hints.best(P), hints.best(P), hints.best(P), hints.best(P)], ['n1', 'n2', 'n3', 'n1']);
    hints.note(P, n('n3'));
    assert.equal(hints.best(P), 'n3');
    local = n('n2');
    assert.equal(hints.best(P), 'n2');
    live.delete('n2');
    assert.equal(hints.best(P), 'n3', 'a holder that is not live is passed over');
    live.delete('n3');
    local = undefined;
    assert.equal(hints.best(P), 'n1', 'the guess skips replicas that are not live');
    hints.forget(P, n('n3'));
    live.add('n3');
    assert.notEqual(hints.best(P), undefined);
  });

  it('knows nothing of a partition without replicas', () => {
    const hints = new PrimaryHints(
      () => undefined,
      () => undefined,
    );
    assert.equal(hints.best(P), undefined);
  });

  it('reads the holder of a PRIMARY_MISS and tells expected failures from bugs', () => {
    const miss = primaryMissNaming(P, 'n2');
    assert.equal(holderHint(miss), 'n2');
    assert.equal(
      holderHint(new BasaltError('PRIMARY_MISS', 'untyped', { holderName: 'n2' })),
      undefined,
      'only the hint',
    );
    assert.equal(holderHint(new BasaltError('PRIMARY_MISS', 'no hint')), undefined);
    assert.equal(holderHint(new Error('x')), undefined);
    assert.equal(isExpectedFailure(new BasaltError('NOT_LEADER', 'lost it')), true);
    assert.equal(isExpectedFailure(new BasaltError('INTERNAL', 'bug')), false);
    assert.equal(isExpectedFailure(new Error('assertion')), false);
  });
});

describe('MetaPlacement', () => {
  const view: MetaView = {
    revision: 3,
    nextTableId: 2,
    tables: [{ name: 'accounts', id: 1, partitions: 4, replicas: 3 }],
    assignments: [['t1p0', ['n1', 'n2', 'n3']]],
    retiring: [],
    recent: [],
  };
  const hints = new PrimaryHints(
    () => [n('n1')],
    () => undefined,
  );
  const placement = new MetaPlacement(() => view, hints);

  it('maps keys by the shared key hash and lists partitions in index order', () => {
    assert.equal(placement.partitionOf('accounts', 'alice'), `t1p${partitionIndexOf('alice', 4)}`);
    assert.deepEqual(placement.partitionsOf('accounts'), ['t1p0', 't1p1', 't1p2', 't1p3']);
    assert.throws(
      () => placement.partitionOf('nope', 'k'),
      (e) => isBasaltError(e, 'UNKNOWN_TABLE'),
    );
  });

  it('a learned primary that misses naming nobody (the partition moved off it) is forgotten, not asked for ever', async () => {
    // The coordinator's node had served as primary, so it learned itself; the partition then moved to n2, n3, n4.
    const moved = new PrimaryHints(
      () => [n('n2'), n('n3'), n('n4')],
      () => undefined,
    );
    const directory = new MetaPlacement(() => view, moved).primaries;
    moved.note(P, n('n1'));
    const sent: string[] = [];
    const result = await sendToPrimary({
      partitionId: P,
      directory,
      attemptsMax: 6,
      backoffMs: () => 1,
      send: async (to) => {
        sent.push(to);
        if (to === 'n1') throw primaryMissError(P, 'not-hosted', null);
        if (to !== 'n3') throw primaryMissNaming(P, 'n3');
        return 'served';
      },
    });
    assert.equal(result.kind, 'ok', `sent to ${sent.join(', ')}`);
    assert.equal(sent[0], 'n1');
    assert.equal(sent[sent.length - 1], 'n3');
  });

  it('answers primaries from the hints and learns from notes', () => {
    assert.equal(placement.primaries.locate(P), 'n1');
    placement.primaries.note?.(P, n('n9'));
    assert.equal(placement.primaries.locate(P), 'n9');
  });
});
