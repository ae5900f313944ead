import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { type HybridTimestamp, nodeId, nodeName } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { MAX_TIMESTAMP } from '../hlc/timestamp.js';
import { decode, encode } from './codec.js';
import { type Envelope, parseEnvelope } from './envelope.js';

const from = { name: nodeName('n1'), id: nodeId('a1b2') };
const ts = 123456n as HybridTimestamp;

const valid: Record<string, Envelope> = {
  oneway: { type: 'oneway', from, ts, body: { kind: 'Ping', n: 1 } as { kind: string } },
  request: { type: 'request', from, ts, requestId: 7, body: { kind: 'Get' } },
  response: { type: 'response', from, ts, requestId: 7, body: { kind: 'GetResult' } },
  errorResponse: { type: 'response', from, ts, requestId: 7, error: { code: 'TIMEOUT', message: 'slow' } },
};

function rejects(value: unknown, reasonPattern: RegExp): void {
  const parsed = parseEnvelope(value);
  assert.equal(parsed.ok, false, `expected rejection of ${JSON.stringify(value, (_k, v) => String(v))}`);
  if (!parsed.ok) assert.match(parsed.reason, reasonPattern);
}

describe('envelope validation', () => {
  it('accepts each valid shape after a codec round trip', () => {
    for (const envelope of Object.values(valid)) {
      const parsed = parseEnvelope(decode(encode(envelope)));
      assert.ok(parsed.ok, parsed.ok ? '' : parsed.reason);
      assert.deepEqual(parsed.envelope, envelope);
    }
  });

  it('accepts error details and error codes this node does not know', () => {
    const error = { code: 'SOME_FUTURE_CODE', message: 'm', details: { x: 1n } };
    assert.ok(parseEnvelope({ ...valid['errorResponse'], error }).ok);
  });

  it('rejects values that are not envelope objects', () => {
    for (const v of [null, 1, 'x', [], Buffer.from('x'), undefined]) rejects(v, /not an object/);
    rejects({ ...valid['oneway'], type: 'push' }, /unknown envelope type/);
    rejects({ ...valid['oneway'], type: undefined }, /unknown envelope type/);
  });

  it('rejects unknown fields', () => {
    rejects({ ...valid['oneway'], extra: 1 }, /unexpected field extra/);
    rejects({ ...valid['oneway'], requestId: 3 }, /unexpected field requestId/);
    rejects(
      { ...valid['errorResponse'], error: { code: 'X', message: '', stack: 's' } },
      /unexpected field error.stack/,
    );
  });

  it('rejects a bad sender', () => {
    rejects({ ...valid['request'], from: undefined }, /from is not an object/);
    rejects({ ...valid['request'], from: { name: 'n1' } }, /exactly name and id/);
    rejects({ ...valid['request'], from: { name: 'n1', id: 'x', role: 'y' } }, /exactly name and id/);
    rejects({ ...valid['request'], from: { name: '', id: 'x' } }, /from.name/);
    rejects({ ...valid['request'], from: { name: 'n1', id: 5 } }, /from.id/);
    rejects({ ...valid['request'], from: { name: 'n'.repeat(LIMITS.identityCharsMax + 1), id: 'x' } }, /longer/);
  });

  it('rejects a timestamp that is not an in-range bigint', () => {
    rejects({ ...valid['oneway'], ts: 5 }, /ts is not a bigint/);
    rejects({ ...valid['oneway'], ts: -1n }, /ts is out of range/);
    rejects({ ...valid['oneway'], ts: MAX_TIMESTAMP }, /ts is out of range/);
    rejects({ ...valid['oneway'], ts: 1n << 70n }, /ts is out of range/);
    assert.ok(parseEnvelope({ ...valid['oneway'], ts: MAX_TIMESTAMP - 1n }).ok);
  });

  it('rejects a missing or bad requestId on requests and responses', () => {
    for (const requestId of [undefined, 0, -1, 1.5, '1', 1n, 2 ** 60]) {
      rejects({ ...valid['request'], requestId }, /requestId/);
      rejects({ ...valid['response'], requestId }, /requestId/);
    }
  });

  it('rejects a body without a kind', () => {
    rejects({ ...valid['request'], body: undefined }, /body is not an object/);
    rejects({ ...valid['request'], body: [1] }, /body is not an object/);
    rejects({ ...valid['oneway'], body: {} }, /body.kind/);
    rejects({ ...valid['oneway'], body: { kind: '' } }, /body.kind/);
    rejects({ ...valid['oneway'], body: { kind: 3 } }, /body.kind/);
  });

  it('a response carries exactly one of body and error, each well formed', () => {
    rejects({ ...valid['response'], error: { code: 'TIMEOUT', message: 'x' } }, /exactly one/);
    rejects({ type: 'response', from, ts, requestId: 1 }, /exactly one/);
    rejects({ ...valid['errorResponse'], error: { message: 'x' } }, /error.code/);
    rejects({ ...valid['errorResponse'], error: { code: 'X' } }, /error.message/);
    rejects({ ...valid['errorResponse'], error: { code: 'X', message: 'm', details: 3 } }, /error.details/);
  });

  it('never throws on arbitrary decoded values (property)', () => {
    fc.assert(
      fc.property(fc.anything(), (value) => {
        const parsed = parseEnvelope(value);
        assert.equal(typeof parsed.ok, 'boolean');
      }),
    );
  });
});
