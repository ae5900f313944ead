/**
 * The receive-edge checks of every peer message kind (message-checks.ts, tx/core/message-checks.ts): a well-formed
 * sample of every kind passes (the samples are a record over every kind, so a new kind needs one), and each way a
 * peer can send a malformed body is refused with a problem that names the field.
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { nodeId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { hybridTimestamp } from '../hlc/timestamp.js';
import { NO_CEILING } from '../net/body-checks.js';
import { encode } from '../net/codec.js';
import { makeTxId } from '../tx/core/tx-id.js';
import { PEER_MESSAGE_CHECKS, type PeerMessageKind } from './message-checks.js';

const txId = makeTxId({ beginTimestamp: hybridTimestamp(1_000), nodeId: nodeId('n1-id'), counter: 1 });
const ts = 5n << 16n;
const token = { holder: { nodeId: 'n1-id', incarnation: 'i1' }, start: ts };
const lease = { token, holderName: 'n1', expiration: ts + 100n };
const p = 't1p0';

const APPEND = {
  kind: 'Append',
  from: 'n2',
  to: 'n1',
  term: 2,
  prevIndex: 4,
  prevTerm: 1,
  commit: 4,
  entries: [{ index: 5, term: 2, kind: 'data', data: new Uint8Array([1]) }],
};

const VALID: { readonly [K in PeerMessageKind]: Readonly<Record<string, unknown>> } = {
  Raft: { group: p, message: APPEND },
  RaftBatch: {
    messages: [
      { group: p, message: APPEND },
      { group: 'meta', message: { ...APPEND, entries: [] } },
    ],
  },
  NodeHeartbeat: { physicalMs: 1_000 },
  NodeHeartbeatAck: {},
  NodeLeaving: {},
  MetaCommandRequest: { command: { kind: 'DropTable', requestId: 'r1', name: 't', ts, graceMs: 0 } },
  MetaCommandResponse: { result: { status: 'OK', table: { name: 't', id: 1, partitions: 2, replicas: 3 } } },
  MetaWatchRequest: { sinceRevision: -1 },
  MetaWatchResponse: { view: null, leader: 'n1' },
  ReadWriteRequest: {
    partitionId: p,
    txId,
    coordinatorId: 'n1-id',
    commitPartitionId: p,
    token,
    opSeq: 1,
    full: false,
    pipelined: true,
    operation: { op: 'putAll', entries: [{ key: 'k', value: { a: [1, 'x', null] } }] },
  },
  ReadOnlyRequest: {
    partitionId: p,
    coordinatorId: 'n1-id',
    operation: { op: 'scan', range: { kind: 'prefix', prefix: 'k' }, limit: 10 },
  },
  TxFinishRequest: {
    txId,
    commitPartitionId: p,
    commit: true,
    commitTs: ts,
    enlisted: [{ partitionId: p, primaryName: 'n1', token }],
  },
  TxCleanupRequest: {
    txId,
    partitions: [p],
    unlockOnly: false,
    outcome: { state: 'COMMITTED', commitTs: ts },
  },
  LeaseConfirmRequest: { partitionId: p, token, commitTs: ts },
  WriteConfirmRequest: { partitionId: p, txId },
  WriteCheckRequest: { partitionId: p, txId, keys: ['k'] },
  TxStateCoordinatorRequest: { txId, readTs: ts, readWrite: { partitionId: p } },
  TxStateCommitPartitionRequest: {
    txId,
    commitPartitionId: p,
    readTs: ts,
    intentPartitionId: p,
    key: 'k',
    holder: true,
  },
  TxStatePrimaryReplicaRequest: { txId, partitionId: p, key: 'k', readTs: ts, newestCommitTs: ts },
  TxRecoveryRequest: { txId, commitPartitionId: p, reporterPartitionId: p },
  ReadWriteResponse: { lease, result: { op: 'get', value: { found: true, value: new Uint8Array([1]) } }, writeTs: ts },
  ReadOnlyResponse: { readTs: ts, result: { op: 'getAll', values: [{ found: false }, { found: true, value: 1 }] } },
  TxFinishResponse: { outcome: { state: 'ABORTED' } },
  TxCleanupResponse: { txId, cleaned: [p] },
  LeaseConfirmResponse: { confirmed: true },
  WriteConfirmResponse: { writeTs: ts },
  WriteCheckResponse: { applied: true },
  TxStateResponse: { answer: { state: 'COMMITTED', commitTs: ts } },
};

function problem(kind: PeerMessageKind, body: Readonly<Record<string, unknown>>): string | undefined {
  return PEER_MESSAGE_CHECKS[kind]({ kind, ...body }, NO_CEILING);
}

function refused(kind: PeerMessageKind, change: Readonly<Record<string, unknown>>, expected: RegExp): void {
  const found = problem(kind, { ...VALID[kind], ...change });
  assert.ok(found !== undefined, `${kind} with ${Object.keys(change).join(', ')} passed its check`);
  assert.match(found, expected, kind);
}

describe('peer message checks', () => {
  it('pass a well-formed body of every kind, after an encode/decode round trip too', () => {
    for (const kind of Object.keys(VALID) as PeerMessageKind[]) {
      assert.equal(problem(kind, VALID[kind]), undefined, kind);
      assert.ok(encode({ kind, ...VALID[kind] }).length > 0);
    }
    assert.deepEqual(Object.keys(PEER_MESSAGE_CHECKS).sort(), Object.keys(VALID).sort());
  });

  it('refuse a COMMITTED outcome without its commitTs, and an ABORTED one with one', () => {
    refused('TxCleanupRequest', { outcome: { state: 'COMMITTED' } }, /^outcome commitTs must be a timestamp/);
    refused('TxCleanupRequest', { outcome: { state: 'ABORTED', commitTs: ts } }, /^outcome commitTs must be absent/);
    refused('TxCleanupRequest', { outcome: undefined }, /needs the outcome/);
    refused('TxCleanupRequest', { outcome: { state: 'PENDING' } }, /state "PENDING" is unknown/);
    refused('TxFinishRequest', { commitTs: undefined }, /a commit carries its commitTs/);
    refused('TxFinishResponse', { outcome: { state: 'COMMITTED', commitTs: 0n } }, /commitTs must be a timestamp/);
    refused('TxStateResponse', { answer: { state: 'COMMITTED' } }, /answer commitTs/);
  });

  it('refuse negative indexes, terms and counts', () => {
    const append = VALID.Raft['message'] as Readonly<Record<string, unknown>>;
    refused('Raft', { message: { ...append, prevIndex: -1 } }, /message prevIndex/);
    refused('Raft', { message: { ...append, term: -2 } }, /message term/);
    refused('Raft', { message: { ...append, commit: 1.5 } }, /message commit/);
    const part = { group: p, message: APPEND };
    refused('RaftBatch', { messages: [part, { group: p, message: { ...append, term: -2 } }] }, /\[1\] message term/);
    refused('RaftBatch', { messages: [part, { message: APPEND }] }, /\[1\] group/);
    refused('RaftBatch', { messages: part }, /^messages must be an array/);
    const tooMany = Array.from({ length: LIMITS.raftBatchMessagesMax + 1 }, () => part);
    refused('RaftBatch', { messages: tooMany }, /at most/);
    refused('ReadWriteRequest', { opSeq: -1 }, /^opSeq must be an integer >= 0/);
    refused('MetaWatchRequest', { sinceRevision: -2 }, /^sinceRevision/);
    refused('ReadOnlyRequest', { operation: { op: 'scan', range: { kind: 'prefix', prefix: '' }, limit: 0 } }, /limit/);
  });

  it('refuse fields of the wrong type, missing fields and unknown tags', () => {
    refused('ReadWriteRequest', { txId: 42 }, /^txId must be a tx id/);
    refused('ReadWriteRequest', { full: 'yes' }, /^full must be a boolean/);
    refused('ReadWriteRequest', { operation: { op: 'put', key: 'k' } }, /^operation value/);
    refused('ReadWriteRequest', { operation: { op: 'put', key: 'k', value: 1n } }, /holds a bigint/);
    refused('ReadWriteRequest', { operation: { op: 'drop', key: 'k' } }, /op "drop" is unknown/);
    const put = (expiry: unknown) => ({ operation: { op: 'put', key: 'k', value: 1, expiry } });
    for (const expiry of [{ ttlMs: 0 }, { ttlMs: 1.5 }, { ttlMs: LIMITS.ttlMsMax + 1 }, { ttlMs: '5' }, 7]) {
      refused('ReadWriteRequest', put(expiry), /^operation expiry/);
    }
    refused('ReadWriteRequest', put({ at: 0n }), /^operation expiry at/);
    refused('ReadWriteRequest', put({ at: ts, ttlMs: 5 }), /not both/);
    for (const expiry of [{ ttlMs: 5 }, { at: ts }]) {
      assert.equal(problem('ReadWriteRequest', { ...VALID.ReadWriteRequest, ...put(expiry) }), undefined);
    }
    refused('LeaseConfirmRequest', { token: { ...token, start: 5 } }, /^token start must be a timestamp/);
    refused('TxStateCoordinatorRequest', { readTs: undefined }, /^readTs/);
    refused('TxCleanupRequest', { partitions: [p, 7] }, /^partitions \[1\] must be an id/);
    refused('ReadWriteResponse', { result: { op: 'get', value: { found: 'maybe' } } }, /found must be a boolean/);
    refused('MetaCommandRequest', { command: { kind: 'DropTable' } }, /not a metastorage command/);
    refused('MetaWatchResponse', { view: { revision: 'x' } }, /not a metastorage view/);
    refused('NodeHeartbeat', { physicalMs: Number.NaN }, /physicalMs/);
  });

  it('refuse a timestamp to absorb beyond the ceiling (envelope + skew), not a lease bound ahead of it', () => {
    const ceiling = { tsCeiling: ts + 10n };
    const cleanup = { kind: 'TxCleanupRequest', ...VALID.TxCleanupRequest };
    assert.equal(PEER_MESSAGE_CHECKS.TxCleanupRequest(cleanup, ceiling), undefined);
    const ahead = { ...cleanup, outcome: { state: 'COMMITTED', commitTs: ts + 11n } };
    assert.match(PEER_MESSAGE_CHECKS.TxCleanupRequest(ahead, ceiling) ?? '', /commitTs is beyond the sender clock/);
    const state = { kind: 'TxStateCoordinatorRequest', ...VALID.TxStateCoordinatorRequest, readTs: ts + 11n };
    assert.match(PEER_MESSAGE_CHECKS.TxStateCoordinatorRequest(state, ceiling) ?? '', /readTs is beyond/);
    const response = { kind: 'ReadWriteResponse', ...VALID.ReadWriteResponse, writeTs: ts };
    assert.equal(PEER_MESSAGE_CHECKS.ReadWriteResponse(response, ceiling), undefined, 'its lease expires ahead');
  });

  it('check a change read and its page: a window, a limit, and values only on what is not a removal', () => {
    const changes = { op: 'changes', range: { kind: 'range', start: 'a' }, fromTs: ts - 5n, limit: 10 };
    const page = (entries: unknown[]) => ({ result: { op: 'changes', changes: entries } });
    assert.equal(problem('ReadOnlyRequest', { ...VALID.ReadOnlyRequest, readTs: ts, operation: changes }), undefined);
    const put = { key: 'k', commitTs: ts, deleted: false, value: null };
    const removal = { key: 'k', commitTs: ts, deleted: true };
    assert.equal(problem('ReadOnlyResponse', { ...VALID.ReadOnlyResponse, ...page([put, removal]) }), undefined);
    refused('ReadOnlyRequest', { operation: { ...changes, fromTs: 0n } }, /fromTs must be a timestamp/);
    refused('ReadOnlyRequest', { operation: { ...changes, limit: 0 } }, /limit/);
    refused('ReadOnlyResponse', page([{ key: 'k', commitTs: ts, deleted: false }]), /value/);
    refused('ReadOnlyResponse', page([{ ...put, commitTs: 3 }]), /commitTs must be a timestamp/);
    refused('ReadOnlyResponse', page([{ ...removal, key: 5 }]), /key/);
  });

  it('know no kind outside the protocol', () => {
    for (const kind of ['Nope', 'toString', '__proto__', 'constructor']) {
      assert.equal(Object.hasOwn(PEER_MESSAGE_CHECKS, kind), false, kind);
    }
  });
});
