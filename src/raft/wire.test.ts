/** The shape check of Raft messages from peers, for what configuration changes add to them. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { logIndex, nodeName, term } from '../core/ids.js';
import { encodeConfChange } from './conf-change.js';
import { makeEntry } from './raft-log.js';
import type { Entry, Message } from './types.js';
import { isRaftMessage } from './wire.js';

const bytes = (s: string): Uint8Array => new TextEncoder().encode(s);
const n1 = nodeName('n1');
const n2 = nodeName('n2');

function append(entries: readonly Entry[]): Message {
  return {
    kind: 'Append',
    from: n1,
    to: n2,
    term: term(1),
    prevIndex: logIndex(0),
    prevTerm: term(0),
    entries,
    commit: logIndex(0),
  };
}

function snapshot(conf: unknown): unknown {
  const s = { index: 3, term: 1, data: bytes('s'), ...(conf === undefined ? {} : { conf }) };
  return { kind: 'Snapshot', from: n1, to: n2, term: 1, snapshot: s };
}

test('an Append may carry configuration changes, but only well-formed ones', () => {
  const change = makeEntry(1, 1, 'conf', encodeConfChange({ type: 'promote', node: nodeName('n4') }));
  assert.ok(isRaftMessage(append([change])));
  for (const data of ['not json', '{"type":"demote","node":"n4"}', '{"type":"remove","node":""}', '[]', 'null']) {
    assert.ok(!isRaftMessage(append([makeEntry(1, 1, 'conf', bytes(data))])), data);
  }
  assert.ok(!isRaftMessage(append([makeEntry(1, 1, 'other' as Entry['kind'], bytes(''))])));
});

test('a snapshot carries a valid configuration, or none (sent by a node that did not record one)', () => {
  assert.ok(isRaftMessage(snapshot({ voters: ['n1', 'n2'], learners: ['n3'] })));
  assert.ok(isRaftMessage(snapshot(undefined)));
  assert.ok(!isRaftMessage(snapshot({ voters: [], learners: ['n3'] })), 'no voter');
  assert.ok(!isRaftMessage(snapshot({ voters: ['n1'], learners: ['n1'] })), 'voter and learner');
  assert.ok(!isRaftMessage(snapshot({ voters: ['n1', 'n1'], learners: [] })), 'duplicate');
  assert.ok(!isRaftMessage(snapshot({ voters: ['n1', 7], learners: [] })), 'not a name');
  assert.ok(!isRaftMessage(snapshot({ voters: ['n1'] })), 'no learners list');
});
