/**
 * The partition command codec: every kind round-trips exactly through the bytes Raft carries, and validation is
 * strict on both sides (a malformed command is refused before it is proposed, and is a loud failure when read back).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { isBasaltError } from '../../core/errors.js';
import { LIMITS } from '../../core/limits.js';
import { encode } from '../../net/codec.js';
import {
  assertCommandRefused,
  at,
  finish,
  foreignProposal,
  incarnation,
  lease,
  leaseCommand,
  PARTITION,
  put,
  remove,
  safeTimeSync,
  switchIntents,
  txIdAt,
  update,
  updateAll,
} from '../../testing/replica-support.js';
import { decodeCommand, encodeCommand, isDataCommand, type PartitionCommand, writesOf } from './commands.js';

const L = lease(incarnation('p1'), 10, 100);
const t = txIdAt(5);

const SAMPLES: readonly PartitionCommand[] = [
  leaseCommand(L, null, 5),
  leaseCommand(lease(incarnation('p2'), 100, 200), L, 6),
  update(L, 1, put('k', { a: [1, 'x', null, true], b: { c: 1.5 } }), 20, { txId: t }),
  update(L, 2, put('bytes', new Uint8Array([0, 1, 255])), 21, { full: true }),
  update(L, 3, remove('gone'), 22),
  updateAll(L, 4, [put('a', 1), remove('b'), put('é🙂', 'unicode')], 23),
  finish(t, { commitTs: at(50) }, 51, [PARTITION, 't2p3' as never]),
  finish(t, 'abort', 52, []),
  switchIntents(t, { commitTs: at(50) }, 53),
  switchIntents(t, 'abort', 54),
  {
    kind: 'WriteIntentSwitchAll',
    ts: at(55),
    proposalId: foreignProposal(),
    switches: [
      { txId: t, commit: true, commitTs: at(50) },
      { txId: txIdAt(6), commit: false, commitTs: null },
    ],
  },
  safeTimeSync(60),
  { kind: 'TxCleanupCompleted', ts: at(61), proposalId: foreignProposal(), txIds: [t] },
  { kind: 'VacuumTxStates', ts: at(62), proposalId: foreignProposal(), txIds: [t, txIdAt(6)] },
];

const isInvalid = (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT');
const isInternal = (e: unknown) => isBasaltError(e, 'INTERNAL');

describe('partition command codec', () => {
  it('every command kind round-trips exactly', () => {
    for (const command of SAMPLES) {
      const decoded = decodeCommand(encodeCommand(command));
      assert.deepEqual(normalize(decoded), normalize(command));
      assert.equal(typeof decoded.ts, 'bigint');
    }
  });

  it('data commands are recognised and list their writes', () => {
    assert.deepEqual(
      SAMPLES.filter(isDataCommand).map((c) => writesOf(c).length),
      [1, 1, 1, 3],
    );
  });

  it('JSON values of any shape round-trip (property)', () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 4 }), (value) => {
        fc.pre(!JSON.stringify(value).includes('"__proto__"'));
        const command = update(L, 1, put('k', value as never), 20);
        const decoded = decodeCommand(encodeCommand(command));
        assert.ok(decoded.kind === 'Update' && decoded.write.kind === 'put');
        assert.deepEqual(decoded.write.value, normalizeJson(value));
      }),
      { numRuns: 200 },
    );
  });

  it('undecodable bytes are an INTERNAL failure (the group stops)', () => {
    assert.throws(() => decodeCommand(new Uint8Array([0xc1])), isInternal);
    assert.throws(() => decodeCommand(new Uint8Array(0)), isInternal);
    assert.throws(() => decodeCommand(encode([1, 2, 3])), isInternal);
  });

  it('refuses missing and unknown fields, and unknown kinds', () => {
    const { seq: _seq, ...noSeq } = update(L, 1, put('k', 1), 20);
    assertCommandRefused(noSeq, /missing field seq/);
    assertCommandRefused({ ...safeTimeSync(5), extra: 1 }, /unknown field extra/);
    assertCommandRefused({ ...safeTimeSync(5), kind: 'Explode' }, /unknown kind/);
    assertCommandRefused({ ...safeTimeSync(5), ts: 5 }, /ts is not a timestamp/);
    assertCommandRefused({ ...safeTimeSync(5), ts: 0n }, /ts is not a timestamp/);
    assertCommandRefused({ ...safeTimeSync(5), proposalId: { nodeId: 'n', incarnation: 'i', counter: 0 } }, /counter/);
  });

  it('refuses malformed leases and tokens', () => {
    assertCommandRefused(leaseCommand({ ...L, expiration: L.start }, null, 5), /below its expiration/);
    assertCommandRefused(leaseCommand({ ...L, holder: { nodeId: '', incarnation: 'i' } as never }, null, 5), /holder/);
    assertCommandRefused(leaseCommand(L, { holder: L.holder, start: 3 } as never, 5), /start/);
    assertCommandRefused({ ...update(L, 1, put('k', 1), 20), token: { holder: L.holder } }, /missing field start/);
  });

  it('refuses malformed data commands: ids, writes, duplicate keys, oversized batches and keys, non-JSON values', () => {
    assertCommandRefused({ ...update(L, 1, put('k', 1), 20), txId: 'not-a-tx' }, /txId/);
    assertCommandRefused({ ...update(L, 1, put('k', 1), 20), full: 'yes' }, /full/);
    assertCommandRefused({ ...update(L, 1, put('k', 1), 20), seq: 1.5 }, /seq/);
    assertCommandRefused(update(L, 1, { kind: 'put', key: 'k' } as never, 20), /missing field value/);
    assertCommandRefused(update(L, 1, { kind: 'upsert', key: 'k', value: 1 } as never, 20), /write kind/);
    assertCommandRefused(update(L, 1, put('k', Number.NaN), 20), /non-finite/);
    assertCommandRefused(update(L, 1, put('k', 5n as never), 20), /JSON-compatible/);
    assertCommandRefused(update(L, 1, put('k', { nested: new Uint8Array(1) } as never), 20), /JSON-compatible/);
    // (The decoder drops a `__proto__` key, so again only the encoding side can see it.)
    assert.throws(() => encodeCommand(update(L, 1, put('k', JSON.parse('{"__proto__": 1}')), 20)), isInvalid);
    assertCommandRefused(update(L, 1, put('x'.repeat(LIMITS.keyBytesMax + 1), 1), 20), /keyBytesMax/);
    // (A lone surrogate has no UTF-8 form: msgpack would write U+FFFD, so only the encoding side can see it.)
    assert.throws(() => encodeCommand(update(L, 1, put('\uD800', 1), 20)), isInvalid);
    assertCommandRefused(updateAll(L, 1, [put('a', 1), remove('a')], 20), /twice/);
    const expiring = (expiry: unknown) => update(L, 1, { ...put('k', 1), expiry } as never, 20);
    assertCommandRefused(expiring({ ttlMs: 0 }), /ttlMs out of range/);
    assertCommandRefused(expiring({ ttlMs: LIMITS.ttlMsMax + 1 }), /ttlMs out of range/);
    assertCommandRefused(expiring({ ttlMs: 5, at: 9n }), /unknown field/);
    assertCommandRefused(expiring({ at: -1n }), /at is not a timestamp/);
    assertCommandRefused(
      update(L, 1, { kind: 'remove', key: 'k', expiry: { ttlMs: 5 } } as never, 20),
      /unknown field/,
    );
    for (const expiry of [{ ttlMs: 5 }, { at: 9n }]) {
      const decoded = decodeCommand(encodeCommand(expiring(expiry)));
      assert.ok(decoded.kind === 'Update' && decoded.write.kind === 'put');
      assert.deepEqual(decoded.write.expiry, expiry);
    }
    assertCommandRefused({ ...updateAll(L, 1, [put('a', 1)], 20), writes: [] }, /non-empty/);
    const many = Array.from({ length: LIMITS.updateAllWritesMax + 1 }, (_, i) => put(`k${i}`, i));
    assertCommandRefused(updateAll(L, 1, many, 20), /writes/);
  });

  it('refuses finish and switch outcomes whose commit timestamp does not match commit', () => {
    assertCommandRefused({ ...finish(t, 'abort', 5), commitTs: at(3) }, /abort has no commitTs/);
    assertCommandRefused({ ...finish(t, { commitTs: at(3) }, 5), commitTs: null }, /commit needs its commitTs/);
    assertCommandRefused({ ...switchIntents(t, 'abort', 5), commit: 1 }, /commit is not a boolean/);
    assertCommandRefused({ ...finish(t, 'abort', 5), enlistedPartitions: [''] }, /enlistedPartitions/);
    const all = (switches: unknown) => ({
      kind: 'WriteIntentSwitchAll',
      ts: at(1),
      proposalId: foreignProposal(),
      switches,
    });
    assertCommandRefused(all([]), /non-empty/);
    assertCommandRefused(all([{ txId: t, commit: false, commitTs: at(3) }]), /switch: an abort has no commitTs/);
    assertCommandRefused(all([{ txId: t, commit: false }]), /switch: missing field commitTs/);
    assertCommandRefused(all([{ txId: 'bad', commit: false, commitTs: null }]), /switch: txId/);
    const abort = { txId: t, commit: false, commitTs: null };
    assertCommandRefused(all([abort, abort]), /the same tx is switched twice/);
    assertCommandRefused(
      all(Array.from({ length: LIMITS.intentSwitchBatchMax + 1 }, (_, i) => ({ ...abort, txId: txIdAt(i + 1) }))),
      /more than/,
    );
    assertCommandRefused({ kind: 'VacuumTxStates', ts: at(1), proposalId: foreignProposal(), txIds: [] }, /non-empty/);
    assertCommandRefused({ kind: 'VacuumTxStates', ts: at(1), proposalId: foreignProposal(), txIds: ['bad'] }, /tx id/);
  });
});

/** Bytes decode as Buffers; compare contents only. */
function normalize(value: unknown): unknown {
  return JSON.parse(
    JSON.stringify(value, (_k, v) => {
      if (typeof v === 'bigint') return `${v}n`;
      if (v instanceof Uint8Array) return { bytes: [...v] };
      if (v !== null && typeof v === 'object' && v.type === 'Buffer' && Array.isArray(v.data)) return { bytes: v.data };
      return v;
    }),
  );
}

/** The codec's one documented loss: -0 decodes as 0. */
function normalizeJson(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value));
}
