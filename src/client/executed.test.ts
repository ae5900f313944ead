import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BasaltError, provedUnexecuted } from '../core/errors.js';
import { decode, encode } from '../net/codec.js';
import { parseEnvelope } from '../net/envelope.js';
import { isUnexecuted, mayResendAsNew } from '../route/send-to-primary.js';
import { parseResponse } from './protocol.js';

const unsent = () =>
  new BasaltError('NODE_UNAVAILABLE', 'no connection to n2: not sent', undefined, { executed: 'no' });
const abandoned = () => new BasaltError('NODE_UNAVAILABLE', 'replica of t1p1 stopped with the proposal in flight');

describe('errors: whether a failed request was executed', () => {
  it('is unknown unless the error proves otherwise, whatever its code', () => {
    for (const code of ['NODE_UNAVAILABLE', 'TIMEOUT', 'CONNECTION_CLOSED', 'CLOCK_SKEW', 'INTERNAL'] as const) {
      const error = new BasaltError(code, 'failed');
      assert.equal(error.executed, 'unknown', code);
      assert.equal(provedUnexecuted(error), false, code);
    }
    assert.equal(unsent().executed, 'no');
    assert.equal(provedUnexecuted(unsent()), true);
    assert.equal(provedUnexecuted(new Error('not coded')), false);
  });

  it('crosses the wire as data: a proven "no" survives the codec, the envelope and the client protocol', () => {
    const data = decode(encode(unsent().toData())) as ReturnType<BasaltError['toData']>;
    assert.equal(data.executed, 'no');
    assert.equal(BasaltError.fromData(data).executed, 'no');
    assert.equal(Object.hasOwn(abandoned().toData(), 'executed'), false, 'unknown is not sent');
    assert.equal(BasaltError.fromData(abandoned().toData()).executed, 'unknown');
    const envelope = (error: unknown) => ({
      type: 'response',
      from: { name: 'n1', id: 'n1-id' },
      ts: 1n,
      requestId: 1,
      error,
    });
    assert.equal(parseEnvelope(envelope(data)).ok, true);
    assert.equal(parseEnvelope(envelope({ ...data, executed: 'yes' })).ok, false, 'only "no" is a valid claim');
    const viaClient = parseResponse({ id: 1, error: data });
    assert.ok(viaClient.ok && 'error' in viaClient && viaClient.error.executed === 'no');
    const claimed = parseResponse({ id: 1, error: { ...data, executed: 'maybe' } });
    assert.ok(claimed.ok && 'error' in claimed && claimed.error.executed === 'unknown');
  });

  it('the coordinator resends as new only a proven non-execution or a PRIMARY_MISS', () => {
    assert.equal(mayResendAsNew(unsent()), true);
    assert.equal(mayResendAsNew(new BasaltError('PRIMARY_MISS', 'no-op under a stale lease')), true);
    assert.equal(mayResendAsNew(abandoned()), false, 'an abandoned proposal may still apply');
    assert.equal(mayResendAsNew(BasaltError.fromData(unsent().toData())), true);
    assert.equal(mayResendAsNew(new BasaltError('TIMEOUT', 'no answer')), false);
    assert.equal(mayResendAsNew(new BasaltError('CONNECTION_CLOSED', 'lost after sending')), false);
    assert.equal(isUnexecuted(abandoned()), false, 'NODE_UNAVAILABLE alone proves nothing');
    assert.equal(isUnexecuted(unsent()), true);
    assert.equal(isUnexecuted(new BasaltError('OVERLOADED', 'refused before acting')), true);
  });
});
