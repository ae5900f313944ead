/** Properties of the log and quorum arithmetic against simple models (fast-check). */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { AssertionError } from '../core/assert.js';
import { logIndex, nodeName, term } from '../core/ids.js';
import { applyConfChange, type ConfChange, type ConfState, confState, encodeConfChange } from './conf-change.js';
import { majorityIndex, Progress, quorumSize, tally } from './progress.js';
import { makeEntry, RaftLog } from './raft-log.js';
import type { Entry } from './types.js';

const EMPTY = new Uint8Array(0);
const CONF = confState([nodeName('n1'), nodeName('n2'), nodeName('n3')]);

test('majorityIndex is the largest index held by a quorum', () => {
  fc.assert(
    fc.property(fc.array(fc.nat(50), { minLength: 1, maxLength: 7 }), (matches) => {
      const q = quorumSize(matches.length);
      const m = majorityIndex(matches);
      assert.ok(matches.filter((x) => x >= m).length >= q, 'a quorum holds it');
      assert.ok(matches.filter((x) => x >= m + 1).length < q, 'no quorum holds anything above it');
    }),
  );
});

test('a vote tally is won only with a quorum of grants and lost only when a quorum is out of reach', () => {
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 9 }), fc.nat(9), fc.nat(9), (voters, g, r) => {
      fc.pre(g + r <= voters);
      const result = tally(g, r, voters);
      const q = quorumSize(voters);
      assert.equal(result === 'won', g >= q);
      if (g < q) assert.equal(result === 'lost', voters - r < q);
    }),
  );
});

test('appending with conflicts behaves like truncate-then-append on an array, and never below commit', () => {
  // Each step: append `count` entries of `term` after a position `at` in the current log (at ≥ commit).
  const step = fc.record({ at: fc.nat(30), count: fc.integer({ min: 1, max: 5 }), termBump: fc.nat(2) });
  fc.assert(
    fc.property(fc.array(step, { maxLength: 25 }), fc.nat(10), (steps, commitAt) => {
      const log = new RaftLog(null, [], 0, 0, CONF);
      let model: number[] = []; // model[i] = term of index i + 1
      let term = 1;
      for (const s of steps) {
        const from = Math.min(s.at, model.length);
        if (from < log.committed) continue;
        term += s.termBump;
        const entries = Array.from({ length: s.count }, (_, i) => makeEntry(from + 1 + i, term, 'data', EMPTY));
        log.append(entries);
        model = [...model.slice(0, from), ...entries.map(() => term)];
        if (model.length > 0) log.commitTo(Math.min(commitAt, model.length));
        assert.equal(log.lastIndex(), model.length);
        for (let i = 1; i <= model.length; i++) assert.equal(log.term(i), model[i - 1]);
        assert.equal(log.findConflict(entries), 0, 'just-appended entries match');
      }
    }),
  );
});

test('compaction keeps terms above the snapshot and makes the prefix unknown', () => {
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 20 }), fc.nat(20), (length, cut) => {
      const entries = Array.from({ length }, (_, i) => makeEntry(i + 1, 1 + Math.floor(i / 3), 'data', EMPTY));
      const log = new RaftLog(null, entries, length, length, CONF);
      const at = Math.min(cut, length);
      const snap = log.compact(at, EMPTY);
      if (at === 0) {
        assert.equal(snap, null);
        return;
      }
      assert.equal(log.snapshotIndex(), at);
      assert.equal(log.term(at), entries[at - 1]!.term);
      if (at > 1) assert.equal(log.term(at - 1), undefined);
      for (let i = at + 1; i <= length; i++) assert.equal(log.term(i), entries[i - 1]!.term);
    }),
  );
});

test('the configuration at an index is the initial one with every conf entry up to it applied, across compaction', () => {
  const nodes = ['n1', 'n2', 'n3', 'n4', 'n5'].map(nodeName);
  const change = fc.record({
    type: fc.constantFrom<ConfChange['type']>('add-learner', 'add-voter', 'promote', 'remove'),
    node: fc.constantFrom(...nodes),
  });
  const item = fc.oneof(fc.constant(null), change);
  fc.assert(
    fc.property(fc.array(item, { minLength: 1, maxLength: 30 }), fc.nat(30), (items, cut) => {
      // The model: configurations after each index, skipping changes that do not apply (a leader refuses them).
      const entries: Entry[] = [];
      const model: ConfState[] = [CONF];
      for (const it of items) {
        const before = model[model.length - 1]!;
        const next = it === null ? null : applyConfChange(before, it);
        const index = entries.length + 1;
        if (it === null || next instanceof Error || next === null) {
          entries.push(makeEntry(index, 1, 'data', EMPTY));
          model.push(before);
        } else {
          entries.push(makeEntry(index, 1, 'conf', encodeConfChange(it)));
          model.push(next);
        }
      }
      const log = new RaftLog(null, entries, entries.length, entries.length, CONF);
      for (let i = 0; i <= entries.length; i++) assert.deepEqual(log.confAt(i), model[i]);
      const at = Math.min(cut, entries.length);
      const snap = log.compact(at, EMPTY);
      if (at > 0) assert.deepEqual(snap?.conf, model[at], 'the snapshot carries the configuration at its index');
      for (let i = at; i <= entries.length; i++) assert.deepEqual(log.confAt(i), model[i]);
    }),
  );
});

test('appending a batch that is not contiguous or whose terms decrease is a bug, and the log is left as it was', () => {
  const log = new RaftLog(null, [makeEntry(1, 1, 'data', EMPTY)], 0, 0, CONF);
  assert.throws(() => log.append([makeEntry(2, 2, 'data', EMPTY), makeEntry(4, 2, 'data', EMPTY)]), AssertionError);
  assert.equal(log.lastIndex(), 1);
  const decreasing = new RaftLog(null, [makeEntry(1, 1, 'data', EMPTY)], 0, 0, CONF);
  assert.throws(
    () => decreasing.append([makeEntry(2, 3, 'data', EMPTY), makeEntry(3, 2, 'data', EMPTY)]),
    AssertionError,
  );
  assert.throws(() => decreasing.append([makeEntry(2, 0, 'data', EMPTY)]), AssertionError, 'below the term before it');
  assert.equal(decreasing.lastIndex(), 1);
  const ok = new RaftLog(null, [makeEntry(1, 1, 'data', EMPTY)], 0, 0, CONF);
  ok.append([makeEntry(2, 1, 'data', EMPTY), makeEntry(3, 2, 'data', EMPTY)]);
  assert.equal(ok.lastIndex(), 3);
  ok.checkInvariants();
});

test('the index invariants hold through commit, apply, compaction and a snapshot restore', () => {
  const entries = Array.from({ length: 5 }, (_, i) => makeEntry(i + 1, 1, 'data', EMPTY));
  const log = new RaftLog(null, entries, 0, 0, CONF);
  log.checkInvariants();
  log.commitTo(4);
  log.appliedTo(3);
  log.compact(2, EMPTY);
  log.checkInvariants();
  log.restore({ index: logIndex(9), term: term(2), data: EMPTY, conf: CONF });
  log.checkInvariants();
  assert.ok(log.applied < log.snapshotIndex(), 'applied lags while the snapshot is pending');
  log.pendingSnapshot = null;
  assert.throws(() => log.checkInvariants(), AssertionError, 'not once it is no longer pending');
});

test('a follower progress keeps match < next and its inflight Appends ascending', () => {
  const pr = new Progress(6, 2);
  pr.maybeUpdate(5);
  pr.becomeReplicate();
  pr.sentEntries(8, 3);
  assert.throws(() => pr.sentEntries(7, 1), AssertionError, 'an Append below one in flight');
  pr.sentEntries(9, 1);
  assert.throws(() => pr.sentEntries(10, 1), AssertionError, 'no free inflight slot');
  const behind = new Progress(6, 2);
  behind.maybeUpdate(5);
  behind.becomeReplicate();
  assert.throws(() => behind.sentEntries(4, 1), AssertionError, 'next would fall to match');
});
