import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isBasaltError } from '../core/errors.js';
import { type NodeName, nodeId, nodeName } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { decode, encode } from './codec.js';
import {
  formatMembers,
  HANDSHAKE_MAGIC,
  hello,
  memberFingerprint,
  memberMismatch,
  PROTOCOL_VERSION,
  parseHello,
} from './handshake.js';

const self = { name: nodeName('n2'), id: nodeId('id-2') };
const names = (...list: string[]): NodeName[] => list.map(nodeName);
const base = { magic: HANDSHAKE_MAGIC, protocolVersion: PROTOCOL_VERSION, name: 'n2', id: 'id-2' };

describe('handshake', () => {
  it('a hello with a member fingerprint survives the wire and parses back to the sorted distinct names', () => {
    const members = memberFingerprint(names('n3', 'n1', 'n2', 'n1'));
    assert.deepEqual(members, ['n1', 'n2', 'n3']);
    const parsed = parseHello(decode(encode(hello(self, members))));
    assert.deepEqual(parsed, { ok: true, peer: self, members: ['n1', 'n2', 'n3'] });
  });

  it('accepts an old-style hello without members, and parses it without a fingerprint', () => {
    const parsed = parseHello(decode(encode(hello(self))));
    assert.deepEqual(parsed, { ok: true, peer: self });
    assert.equal(Object.hasOwn(parsed, 'members'), false);
  });

  it('states both member sets, the peer name and where it is when the sets differ', () => {
    const peer = { peer: { name: nodeName('n4'), id: nodeId('id-4') }, members: names('n1', 'n4') };
    assert.equal(
      memberMismatch(names('n1', 'n2', 'n3'), peer, 'at 127.0.0.1:7004'),
      'member sets differ: this node has n1,n2,n3, peer n4 at 127.0.0.1:7004 has n1,n4',
    );
    assert.equal(memberMismatch(names('n1', 'n4'), peer, 'at x:1'), undefined, 'equal sets agree');
    assert.equal(memberMismatch(undefined, peer, 'at x:1'), undefined, 'no fingerprint here: anyone is accepted');
    const probe = { peer: peer.peer };
    assert.equal(memberMismatch(names('n1', 'n2'), probe, 'at x:1'), undefined, 'a hello without one is accepted');
  });

  it('a node that joined later carries the founders without its own name, and the address it is dialed at', () => {
    const parsed = parseHello({ ...base, members: ['n1', 'n3'], address: '10.0.0.2:7000' });
    assert.deepEqual(parsed, {
      ok: true,
      peer: { name: base.name, id: base.id },
      members: ['n1', 'n3'],
      address: '10.0.0.2:7000',
    });
  });

  it('refuses malformed fingerprints and extra fields', () => {
    const long = 'x'.repeat(LIMITS.identityCharsMax + 1);
    const many = Array.from({ length: LIMITS.clusterMembersMax + 1 }, (_, i) => `n${String(i).padStart(5, '0')}`);
    const bad: Array<[unknown, RegExp]> = [
      [{ ...base, members: 'n1,n2' }, /members: not an array/],
      [{ ...base, members: [] }, /members: empty/],
      [{ ...base, members: ['n2', 'n1'] }, /not sorted and distinct/],
      [{ ...base, members: ['n1', 'n2', 'n2'] }, /not sorted and distinct/],
      [{ ...base, members: ['n1', 2] }, /member 1 is not a non-empty string/],
      [{ ...base, members: ['n2', long] }, /longer than/],
      [{ ...base, members: many }, /more than 1024 names/],
      [{ ...base, members: ['n2'], extra: 1 }, /exactly magic, protocolVersion, name, id and optionally members/],
      [{ ...base, address: 'nowhere' }, /address: not a host:port/],
      [{ ...base, address: 7000 }, /address: not a string/],
      [{ ...base, extra: 1 }, /exactly/],
      [{ ...base, members: undefined }, /members: not an array/],
    ];
    for (const [value, reason] of bad) {
      const parsed = parseHello(value);
      assert.equal(parsed.ok, false, JSON.stringify(value).slice(0, 80));
      if (!parsed.ok) assert.match(parsed.reason, reason);
    }
  });

  it('memberFingerprint throws INVALID_ARGUMENT for a list no peer would accept', () => {
    assert.throws(
      () => memberFingerprint([]),
      (e) => isBasaltError(e, 'INVALID_ARGUMENT'),
    );
    assert.throws(
      () => memberFingerprint(names('n1', 'x'.repeat(LIMITS.identityCharsMax + 1))),
      (e) => isBasaltError(e, 'INVALID_ARGUMENT'),
    );
  });

  it('cuts a long member list in a reason, saying how many it has', () => {
    const list = names(...Array.from({ length: 20 }, (_, i) => `n${String(i).padStart(2, '0')}`));
    const text = formatMembers(list);
    assert.match(text, /^n00,n01,.*,n15,… \(20 in all\)$/);
    assert.equal(formatMembers(names('a', 'b')), 'a,b');
  });
});
