import assert from 'node:assert/strict';
import { test } from 'node:test';
import { nodeId, nodeName } from '../core/ids.js';
import { Membership, type MembershipEvent } from './membership.js';

const peer = (name: string, id: string) => ({ name: nodeName(name), id: nodeId(id) });

function setup(timeoutMs = 1_000) {
  let now = 0;
  const events: string[] = [];
  const m = new Membership({ self: peer('n1', 'self-id'), nowMs: () => now, timeoutMs });
  m.onChange((e: MembershipEvent) =>
    events.push(e.kind === 'gone' ? `gone ${e.peer.id} ${e.reason}` : `live ${e.peer.id}`),
  );
  return {
    m,
    events,
    advance(ms: number) {
      now += ms;
      m.tick();
    },
  };
}

test('rule 17: an id never seen since this node started is unknown, not gone', () => {
  const { m } = setup();
  assert.equal(m.liveness(nodeId('never-seen')), 'unknown');
  assert.equal(m.isGone(nodeId('never-seen')), false);
  assert.equal(m.liveness(nodeId('self-id')), 'self');
  assert.equal(m.isGone(nodeId('self-id')), false);
});

test('rule 17: a handshake under the same name with a different id makes the old id gone at once', () => {
  const { m, events } = setup();
  m.peerUp(peer('n2', 'a'));
  assert.equal(m.liveIdOf(nodeName('n2')), 'a');
  m.peerDown(peer('n2', 'a'));
  m.peerUp(peer('n2', 'b'));
  assert.equal(m.isGone(nodeId('a')), true, 'superseded without waiting for any timeout');
  assert.equal(m.liveness(nodeId('b')), 'live');
  assert.equal(m.liveIdOf(nodeName('n2')), 'b');
  assert.deepEqual(events, ['live a', 'gone a superseded', 'live b']);
});

test('rule 17: a connection down for less than the timeout is suspect, for the timeout gone', () => {
  const { m, events, advance } = setup(1_000);
  m.peerUp(peer('n2', 'a'));
  advance(100);
  m.peerDown(peer('n2', 'a'));
  assert.equal(m.liveness(nodeId('a')), 'suspect');
  assert.equal(m.isGone(nodeId('a')), false);
  assert.equal(m.liveIdOf(nodeName('n2')), undefined, 'not live while the connection is down');
  advance(899);
  assert.equal(m.isGone(nodeId('a')), false);
  advance(1);
  assert.equal(m.isGone(nodeId('a')), true);
  assert.deepEqual(events, ['live a', 'gone a timeout']);
});

test('rule 17: heartbeats unanswered for the timeout make a connected peer gone; answers keep it live', () => {
  const { m, advance } = setup(1_000);
  m.peerUp(peer('n2', 'a'));
  for (let i = 0; i < 10; i++) {
    advance(500);
    m.heard(peer('n2', 'a'));
  }
  assert.equal(m.liveness(nodeId('a')), 'live', 'answered every 500 ms');
  advance(999);
  assert.equal(m.liveness(nodeId('a')), 'live');
  advance(1);
  assert.equal(m.liveness(nodeId('a')), 'gone', 'connection up but silent for the timeout');
  assert.equal(m.liveIdOf(nodeName('n2')), undefined);
});

test('a timed-out id heard again (healed partition) is live again; a superseded one never is', () => {
  const { m, events, advance } = setup(1_000);
  m.peerUp(peer('n2', 'a'));
  m.peerDown(peer('n2', 'a'));
  advance(1_000);
  assert.equal(m.isGone(nodeId('a')), true);
  m.peerUp(peer('n2', 'a'));
  assert.equal(m.liveness(nodeId('a')), 'live');
  m.peerUp(peer('n2', 'b'));
  m.heard(peer('n2', 'a'));
  m.peerUp(peer('n2', 'b'));
  assert.equal(m.isGone(nodeId('a')), true, 'answers or downs from a stale id change nothing');
  assert.deepEqual(events, ['live a', 'gone a timeout', 'live a', 'gone a superseded', 'live b']);
});

test('a stale down (old id) does not touch the current id', () => {
  const { m } = setup();
  m.peerUp(peer('n2', 'a'));
  m.peerUp(peer('n2', 'b'));
  m.peerDown(peer('n2', 'a'));
  assert.equal(m.liveness(nodeId('b')), 'live');
});

test('superseded ids are bounded: the oldest is forgotten (unknown) past goneIdsMax', () => {
  const m = new Membership({ self: peer('n1', 's'), nowMs: () => 0, timeoutMs: 1_000, goneIdsMax: 2 });
  for (const id of ['a', 'b', 'c', 'd']) m.peerUp(peer('n2', id));
  assert.equal(m.liveness(nodeId('a')), 'unknown');
  assert.equal(m.isGone(nodeId('b')), true);
  assert.equal(m.isGone(nodeId('c')), true);
  assert.equal(m.liveness(nodeId('d')), 'live');
});

test('rule 17: an id no member presents is gone once every member is live and it stayed unknown for the timeout (whole-cluster restart)', () => {
  let now = 0;
  const m = new Membership({ self: peer('n1', 'self-id'), nowMs: () => now, timeoutMs: 1_000, memberCount: 3 });
  const old = nodeId('coordinator-before-restart');
  m.peerUp(peer('n2', 'b'));
  assert.equal(m.liveness(old), 'unknown', 'not every member is known yet');
  now += 1_500;
  m.peerUp(peer('n2', 'b'));
  assert.equal(m.liveness(old), 'unknown', 'n3 has not handshaken: the id may be its new incarnation');
  m.peerUp(peer('n3', 'c'));
  assert.equal(m.isGone(old), true, 'every member is live under another id, and the id stayed unknown that long');
  const fresh = nodeId('asked-just-now');
  assert.equal(m.liveness(fresh), 'unknown', 'an id first asked about now may still handshake within the timeout');
  now += 999;
  m.peerUp(peer('n2', 'b'));
  m.peerUp(peer('n3', 'c'));
  assert.equal(m.liveness(fresh), 'unknown');
  now += 1;
  assert.equal(m.isGone(fresh), true);
});

test('a peer that announced a graceful stop stays live but takes over nothing; its restart (a new id) may again', () => {
  const { m } = setup();
  const n2 = nodeName('n2');
  m.peerUp(peer('n2', 'a'));
  assert.equal(m.canSucceed(n2), true);
  m.peerLeaving(peer('n2', 'stale'));
  assert.equal(m.canSucceed(n2), true, "a stale incarnation's notice is ignored");
  m.peerLeaving(peer('n2', 'a'));
  assert.equal(m.liveIdOf(n2), 'a', 'still live: it serves until it stops');
  assert.equal(m.canSucceed(n2), false);
  m.peerDown(peer('n2', 'a'));
  m.peerUp(peer('n2', 'b'));
  assert.equal(m.canSucceed(n2), true, 'the restarted incarnation is a successor again');
  assert.equal(m.canSucceed(nodeName('n9')), false, 'an unknown peer is not');
  assert.equal(m.canSucceed(nodeName('n1')), true, 'this node itself');
});

test('rule 19: the clock verdict is computed at most once per whole millisecond of a fractional clock', () => {
  let now = 10.25;
  const m = new Membership({ self: peer('n1', 'self-id'), nowMs: () => now, timeoutMs: 1_000 });
  m.peerUp(peer('n2', 'a'));
  let computed = 0;
  const verdict = m.clockOffsets.verdict.bind(m.clockOffsets);
  m.clockOffsets.verdict = (...args) => {
    computed++;
    return verdict(...args);
  };
  for (const t of [10.25, 10.5, 10.75, 10.99]) {
    now = t;
    assert.equal(m.clockWithinBound(), true);
  }
  assert.equal(computed, 1, 'one computation within millisecond 10');
  now = 11.01;
  m.clockWithinBound();
  assert.equal(computed, 2, 'and another in the next one');
});
