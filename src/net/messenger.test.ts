import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { BasaltError, isBasaltError } from '../core/errors.js';
import { type HybridTimestamp, type NodeIdentity, type NodeName, nodeId, nodeName } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import type { Clock } from '../env/clock.js';
import type { TimerHandle, Timers } from '../env/timers.js';
import type { Transport, TransportHandler } from '../env/transport.js';
import { HybridClock } from '../hlc/hybrid-clock.js';
import { hybridTimestamp } from '../hlc/timestamp.js';
import { type BodyCheck, fieldsCheck, index, string } from './body-checks.js';
import { decode, encode } from './codec.js';
import type { NetDiagnostic } from './diagnostics.js';
import type { Envelope } from './envelope.js';
import { type MalformedRefusal, Messenger, type PeerEvent } from './messenger.js';

class ManualClock implements Clock {
  constructor(public ms: number) {}
  nowMs(): number {
    return this.ms;
  }
  monotonicMs(): number {
    return this.ms;
  }
}

/** Timers that fire only when the test advances time. */
class ManualTimers implements Timers {
  private nowMs = 0;
  private nextId = 1;
  private readonly due = new Map<number, { atMs: number; fn: () => void }>();
  setTimer(fn: () => void, delayMs: number): TimerHandle {
    const timerId = this.nextId++;
    this.due.set(timerId, { atMs: this.nowMs + delayMs, fn });
    return { timerId };
  }
  clearTimer(handle: TimerHandle): void {
    this.due.delete(handle.timerId);
  }
  get size(): number {
    return this.due.size;
  }
  advance(ms: number): void {
    this.nowMs += ms;
    const ready = [...this.due].filter(([, t]) => t.atMs <= this.nowMs).sort((a, b) => a[1].atMs - b[1].atMs);
    for (const [id, t] of ready) {
      this.due.delete(id);
      t.fn();
    }
  }
}

/** Endpoints wired directly: payloads go through the codec and arrive on a microtask, in order. */
class LoopbackNetwork {
  private readonly endpoints = new Map<NodeName, LoopbackTransport>();
  private readonly links = new Set<string>();

  /** A node's endpoint; a new `id` under a known name is a restarted incarnation taking the name over. */
  endpoint(name: string, id = `${name}-id`): LoopbackTransport {
    const transport = new LoopbackTransport(this, { name: nodeName(name), id: nodeId(id) });
    this.endpoints.set(transport.self.name, transport);
    return transport;
  }
  private key(a: NodeName, b: NodeName): string {
    return [a, b].sort().join('|');
  }
  connect(a: LoopbackTransport, b: LoopbackTransport): void {
    this.links.add(this.key(a.self.name, b.self.name));
    a.deliver({ kind: 'up', peer: b.self });
    b.deliver({ kind: 'up', peer: a.self });
  }
  disconnect(a: LoopbackTransport, b: LoopbackTransport): void {
    this.links.delete(this.key(a.self.name, b.self.name));
    a.deliver({ kind: 'down', peer: b.self });
    b.deliver({ kind: 'down', peer: a.self });
  }
  route(from: NodeIdentity, to: NodeName, payload: unknown): void {
    const target = this.endpoints.get(to);
    if (target === undefined || !this.links.has(this.key(from.name, to))) return;
    const bytes = encode(payload);
    queueMicrotask(() => target.deliver({ kind: 'message', from, payload: decode(bytes) }));
  }
}

class LoopbackTransport implements Transport {
  private handler: TransportHandler = () => {};
  sent = 0;
  constructor(
    private readonly network: LoopbackNetwork,
    readonly self: NodeIdentity,
  ) {}
  send(to: NodeName, payload: unknown): void {
    this.sent++;
    this.network.route(this.self, to, payload);
  }
  setHandler(handler: TransportHandler): void {
    this.handler = handler;
  }
  deliver(event: Parameters<TransportHandler>[0]): void {
    this.handler(event);
  }
  async close(): Promise<void> {}
}

type Body =
  | { readonly kind: 'Echo'; readonly text: string }
  | { readonly kind: 'EchoReply'; readonly text: string }
  | { readonly kind: 'Fail'; readonly how: 'basalt' | 'bug' | 'async' | 'nothing' | 'unencodable' }
  | { readonly kind: 'Hang' }
  | { readonly kind: 'Note'; readonly n: number }
  | { readonly kind: 'Nobody' };

const WIDE_SKEW_BOUND_MS = 100_000_000;

const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

function setup(options: { pendingRequestsMax?: number } = {}) {
  const network = new LoopbackNetwork();
  const timers = new ManualTimers();
  const ta = network.endpoint('a');
  const tb = network.endpoint('b');
  // Clocks far apart, with a bound wide enough to absorb either: the skew refusal has its own tests below.
  const clockA = new HybridClock(new ManualClock(1_000_000), { maxClockSkewMs: WIDE_SKEW_BOUND_MS });
  const clockB = new HybridClock(new ManualClock(1_000), { maxClockSkewMs: WIDE_SKEW_BOUND_MS });
  const sentByA: Envelope[] = [];
  const diagA: NetDiagnostic[] = [];
  const diagB: NetDiagnostic[] = [];
  const a = new Messenger<Body>({
    transport: ta,
    clock: clockA,
    timers,
    requestTimeoutMsDefault: 1000,
    onSend: (_to, envelope) => sentByA.push(envelope),
    onDiagnostic: (d) => diagA.push(d),
    ...options,
  });
  const b = new Messenger<Body>({ transport: tb, clock: clockB, timers, onDiagnostic: (d) => diagB.push(d) });
  network.connect(ta, tb);
  b.handle('Echo', (body) => ({ kind: 'EchoReply', text: body.text }));
  b.handle('Hang', () => new Promise<undefined>(() => {}));
  return { network, timers, ta, tb, clockA, clockB, a, b, sentByA, diagA, diagB };
}

async function rejectsWith(promise: Promise<unknown>, code: string): Promise<BasaltError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof BasaltError, `expected a BasaltError, got ${String(error)}`);
    assert.equal(error.code, code, error.message);
    return error;
  }
  assert.fail(`expected ${code}`);
}

describe('Messenger', () => {
  it("a response meant for a requester's earlier incarnation never settles the restarted one's request", async () => {
    const network = new LoopbackNetwork();
    const timers = new ManualTimers();
    const clock = () => new HybridClock(new ManualClock(1_000), { maxClockSkewMs: WIDE_SKEW_BOUND_MS });
    const ta = network.endpoint('a');
    const tb = network.endpoint('b');
    const a = new Messenger<Body>({ transport: ta, clock: clock(), timers });
    const b = new Messenger<Body>({ transport: tb, clock: clock(), timers });
    network.connect(ta, tb);
    const answers: ((text: string) => void)[] = [];
    b.handle(
      'Echo',
      () => new Promise<Body>((resolve) => answers.push((text) => resolve({ kind: 'EchoReply', text }))),
    );
    // The first incarnation of a asks (its request 1) and dies before the answer.
    void a.request('b' as NodeName, { kind: 'Echo', text: 'old' }).catch(() => {});
    await settle();
    network.disconnect(ta, tb);
    const ta2 = network.endpoint('a', 'a-id-2');
    const a2 = new Messenger<Body>({ transport: ta2, clock: clock(), timers });
    network.connect(ta2, tb);
    // Its successor numbers from 1 again.
    const fresh = a2.request('b' as NodeName, { kind: 'Echo', text: 'new' });
    await settle();
    assert.equal(answers.length, 2);
    answers[0]!('for the old incarnation');
    await settle();
    answers[1]!('for the new one');
    assert.deepEqual(await fresh, { kind: 'EchoReply', text: 'for the new one' });
  });

  it('answers a request with the handler result, naming the sender', async () => {
    const { a, b } = setup();
    let seen: NodeIdentity | undefined;
    b.handle('Note', (_body, from) => {
      seen = from;
      return { kind: 'EchoReply', text: 'noted' };
    });
    assert.deepEqual(await a.request('b' as NodeName, { kind: 'Echo', text: 'hi' }), { kind: 'EchoReply', text: 'hi' });
    assert.deepEqual(await a.request('b' as NodeName, { kind: 'Note', n: 1 }), { kind: 'EchoReply', text: 'noted' });
    assert.deepEqual(seen, a.self);
    assert.equal(a.pendingCount, 0);
  });

  it('delivers one-way messages in order', async () => {
    const { a, b } = setup();
    const got: number[] = [];
    b.handle('Note', (body) => {
      got.push(body.n);
      return undefined;
    });
    for (let n = 0; n < 100; n++) a.send('b' as NodeName, { kind: 'Note', n });
    await settle();
    assert.deepEqual(
      got,
      Array.from({ length: 100 }, (_, i) => i),
    );
  });

  it('absorbs the sender timestamp into the receiver clock before the handler runs', async () => {
    const { a, b, clockB, sentByA } = setup();
    let clockInHandler: HybridTimestamp | undefined;
    b.handle('Note', () => {
      clockInHandler = clockB.current();
      return undefined;
    });
    a.send('b' as NodeName, { kind: 'Note', n: 1 });
    await settle();
    const sentTs = sentByA[0]!.ts;
    assert.ok(sentTs >= hybridTimestamp(1_000_000), 'sender stamps with its own clock');
    assert.ok(clockInHandler !== undefined && clockInHandler > sentTs, 'receiver clock passed the sender ts');
  });

  it('absorbs the responder timestamp before the request resolves', async () => {
    const { a, b, clockA, clockB } = setup();
    clockB.update(hybridTimestamp(5_000_000, 3));
    let responderTs: HybridTimestamp | undefined;
    b.handle('Note', () => {
      responderTs = clockB.current();
      return { kind: 'EchoReply', text: '' };
    });
    await a.request('b' as NodeName, { kind: 'Note', n: 1 });
    assert.ok(responderTs !== undefined && clockA.current() > responderTs);
  });

  it('stamps every outgoing envelope with a fresh clock.now()', async () => {
    const { a, sentByA } = setup();
    a.send('b' as NodeName, { kind: 'Note', n: 1 });
    await a.request('b' as NodeName, { kind: 'Echo', text: 'x' });
    a.send('b' as NodeName, { kind: 'Note', n: 2 });
    assert.equal(sentByA.length, 3);
    assert.ok(sentByA[0]!.ts < sentByA[1]!.ts && sentByA[1]!.ts < sentByA[2]!.ts);
  });

  it('fails a request with TIMEOUT after timeoutMs and reports the late response', async () => {
    const { a, b, timers, diagA } = setup();
    let release: (() => void) | undefined;
    b.handle(
      'Note',
      () =>
        new Promise((resolve) => {
          release = () => resolve({ kind: 'EchoReply', text: 'late' });
        }),
    );
    const pending = a.request('b' as NodeName, { kind: 'Note', n: 1 }, { timeoutMs: 50 });
    await settle();
    timers.advance(49);
    assert.equal(a.pendingCount, 1);
    timers.advance(1);
    const error = await rejectsWith(pending, 'TIMEOUT');
    assert.equal(error.retryable, true);
    assert.equal(a.pendingCount, 0);
    release?.();
    await settle();
    assert.ok(diagA.some((d) => d.kind === 'unexpected-response'));
  });

  it('uses the default timeout when none is given and clears the timer on success', async () => {
    const { a, timers } = setup();
    await a.request('b' as NodeName, { kind: 'Echo', text: 'x' });
    assert.equal(timers.size, 0, 'a settled request leaves no timer behind');
    const hang = a.request('b' as NodeName, { kind: 'Hang' });
    timers.advance(999);
    assert.equal(a.pendingCount, 1);
    timers.advance(1);
    await rejectsWith(hang, 'TIMEOUT');
  });

  it('fails a request with CANCELLED when its signal aborts', async () => {
    const { a, timers } = setup();
    const controller = new AbortController();
    const pending = a.request('b' as NodeName, { kind: 'Hang' }, { signal: controller.signal });
    await settle();
    controller.abort(new Error('user gave up'));
    const error = await rejectsWith(pending, 'CANCELLED');
    assert.equal((error.cause as Error).message, 'user gave up');
    assert.equal(a.pendingCount, 0);
    assert.equal(timers.size, 0);
  });

  it('does not send a request whose signal is already aborted', async () => {
    const { a, sentByA } = setup();
    await rejectsWith(
      a.request('b' as NodeName, { kind: 'Echo', text: 'x' }, { signal: AbortSignal.abort() }),
      'CANCELLED',
    );
    assert.equal(sentByA.length, 0);
  });

  it('rethrows a remote BasaltError with its code, retryability and details', async () => {
    const { a, b } = setup();
    b.handle('Fail', (body) => {
      if (body.how === 'basalt') throw new BasaltError('PRIMARY_MISS', 'not primary', { hint: 'c' });
      return undefined;
    });
    const error = await rejectsWith(a.request('b' as NodeName, { kind: 'Fail', how: 'basalt' }), 'PRIMARY_MISS');
    assert.equal(error.retryable, true);
    assert.deepEqual(error.details, { hint: 'c' });
    assert.match(error.message, /not primary/);
  });

  it('answers a handler bug as INTERNAL without crashing, and reports it', async () => {
    const { a, b, diagB } = setup();
    b.handle('Fail', async (body) => {
      if (body.how === 'bug') throw new TypeError('oops');
      if (body.how === 'async') await Promise.reject(new BasaltError('TX_ABORTED', 'aborted'));
      if (body.how === 'unencodable') return { kind: 'EchoReply', text: new Date(0) as unknown as string };
      return undefined;
    });
    await rejectsWith(a.request('b' as NodeName, { kind: 'Fail', how: 'bug' }), 'INTERNAL');
    assert.ok(diagB.some((d) => d.kind === 'handler-failed' && /oops/.test(d.message)));
    await rejectsWith(a.request('b' as NodeName, { kind: 'Fail', how: 'async' }), 'TX_ABORTED');
    await rejectsWith(a.request('b' as NodeName, { kind: 'Fail', how: 'nothing' }), 'INTERNAL');
    await rejectsWith(a.request('b' as NodeName, { kind: 'Fail', how: 'unencodable' }), 'MALFORMED_FRAME');
    assert.deepEqual(await a.request('b' as NodeName, { kind: 'Echo', text: 'still up' }), {
      kind: 'EchoReply',
      text: 'still up',
    });
  });

  it('answers an unknown kind with UNKNOWN_MESSAGE; a one-way of unknown kind is only reported', async () => {
    const { a, diagB } = setup();
    await rejectsWith(a.request('b' as NodeName, { kind: 'Nobody' }), 'UNKNOWN_MESSAGE');
    a.send('b' as NodeName, { kind: 'Nobody' });
    await settle();
    assert.ok(diagB.some((d) => d.kind === 'unknown-message'));
  });

  it('answers a request with a malformed body with MALFORMED_FRAME', async () => {
    const { a, ta, diagB } = setup();
    const responses: Envelope[] = [];
    ta.setHandler((event) => {
      if (event.kind === 'message') responses.push(event.payload as Envelope);
    });
    const ts = hybridTimestamp(1_000_000);
    ta.send('b' as NodeName, { type: 'request', from: a.self, ts, requestId: 9, body: { text: 'no kind' } });
    ta.send('b' as NodeName, { type: 'whatever' });
    await settle();
    assert.equal(responses.length, 1);
    const response = responses[0]!;
    assert.ok(response.type === 'response' && response.requestId === 9 && response.error?.code === 'MALFORMED_FRAME');
    assert.equal(diagB.filter((d) => d.kind === 'malformed-frame').length, 2);
  });

  it('drops an envelope whose sender does not match its connection', async () => {
    const { ta, b, diagB } = setup();
    let handled = 0;
    b.handle('Note', () => {
      handled++;
      return undefined;
    });
    const forged = { name: nodeName('c'), id: nodeId('c-id') };
    ta.send('b' as NodeName, { type: 'oneway', from: forged, ts: 5n, body: { kind: 'Note', n: 1 } });
    await settle();
    assert.equal(handled, 0);
    assert.ok(diagB.some((d) => d.kind === 'sender-mismatch'));
  });

  it('fails pending requests fast with CONNECTION_CLOSED when their peer goes down', async () => {
    const { network, ta, tb, a, timers } = setup();
    const c = network.endpoint('c');
    const mc = new Messenger<Body>({
      transport: c,
      clock: new HybridClock(new ManualClock(1), { maxClockSkewMs: WIDE_SKEW_BOUND_MS }),
      timers,
    });
    mc.handle('Hang', () => new Promise<undefined>(() => {}));
    network.connect(ta, c);
    const toB = a.request('b' as NodeName, { kind: 'Hang' });
    const toC = a.request('c' as NodeName, { kind: 'Hang' });
    await settle();
    network.disconnect(ta, tb);
    const error = await rejectsWith(toB, 'CONNECTION_CLOSED');
    assert.match(error.message, /outcome unknown/);
    assert.equal(error.executed, 'unknown', 'a request lost after sending may have been executed');
    assert.equal(a.pendingCount, 1, 'the request to c is still pending');
    network.disconnect(ta, c);
    await rejectsWith(toC, 'CONNECTION_CLOSED');
    assert.equal(timers.size, 0);
  });

  it('refuses a request to a peer whose connection is down, unsent, until it comes back up', async () => {
    const { network, ta, tb, a } = setup();
    network.disconnect(ta, tb);
    await settle();
    const error = await rejectsWith(a.request('b' as NodeName, { kind: 'Echo', text: 'x' }), 'NODE_UNAVAILABLE');
    assert.match(error.message, /was not sent/);
    assert.equal(error.executed, 'no', 'a request never sent is proven unexecuted');
    assert.equal(a.pendingCount, 0);
    network.connect(ta, tb);
    await settle();
    assert.deepEqual(await a.request('b' as NodeName, { kind: 'Echo', text: 'y' }), { kind: 'EchoReply', text: 'y' });
  });

  it('bounds pending requests with OVERLOADED', async () => {
    const { a } = setup({ pendingRequestsMax: 2 });
    const first = a.request('b' as NodeName, { kind: 'Hang' });
    const second = a.request('b' as NodeName, { kind: 'Hang' });
    await rejectsWith(a.request('b' as NodeName, { kind: 'Hang' }), 'OVERLOADED');
    assert.equal(a.pendingCount, 2);
    await a.close();
    await rejectsWith(first, 'CONNECTION_CLOSED');
    await rejectsWith(second, 'CONNECTION_CLOSED');
    await rejectsWith(a.request('b' as NodeName, { kind: 'Hang' }), 'CONNECTION_CLOSED');
  });

  it('keeps one handler per kind', () => {
    const { b } = setup();
    assert.throws(
      () => b.handle('Echo', () => undefined),
      (e: unknown) => isBasaltError(e, 'ALREADY_EXISTS'),
    );
    const off = b.handle('Note', () => undefined);
    off();
    b.handle('Note', () => undefined);
  });

  it('re-publishes peer up/down events and tracks live ids', () => {
    const network = new LoopbackNetwork();
    const ta = network.endpoint('a');
    const tb = network.endpoint('b');
    const a = new Messenger<Body>({
      transport: ta,
      clock: new HybridClock(new ManualClock(1), { maxClockSkewMs: WIDE_SKEW_BOUND_MS }),
      timers: new ManualTimers(),
    });
    const events: PeerEvent[] = [];
    a.onPeer((event) => events.push(event));
    network.connect(ta, tb);
    assert.equal(a.peerId(tb.self.name), tb.self.id);
    network.disconnect(ta, tb);
    assert.equal(a.peerId(tb.self.name), undefined);
    assert.deepEqual(events, [
      { kind: 'up', peer: tb.self },
      { kind: 'down', peer: tb.self },
    ]);
  });

  it('delivers messages to its own name locally', async () => {
    const { b } = setup();
    assert.deepEqual(await b.request('b' as NodeName, { kind: 'Echo', text: 'self' }), {
      kind: 'EchoReply',
      text: 'self',
    });
  });

  it('every request settles with an allowed outcome and leaves no timer behind, under any interleaving (property)', async () => {
    type Op =
      | { readonly op: 'request'; readonly mode: 'reply' | 'fail' | 'hang' | 'slow'; readonly timeoutMs: number }
      | { readonly op: 'advance'; readonly ms: number }
      | { readonly op: 'abort'; readonly index: number }
      | { readonly op: 'bounce' }
      | { readonly op: 'release' }
      | { readonly op: 'settle' };
    const opArb: fc.Arbitrary<Op> = fc.oneof(
      fc.record({
        op: fc.constant('request' as const),
        mode: fc.constantFrom('reply' as const, 'fail' as const, 'hang' as const, 'slow' as const),
        timeoutMs: fc.integer({ min: 1, max: 100 }),
      }),
      fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 60 }) }),
      fc.record({ op: fc.constant('abort' as const), index: fc.nat() }),
      fc.record({ op: fc.constant('bounce' as const) }),
      fc.record({ op: fc.constant('release' as const) }),
      fc.record({ op: fc.constant('settle' as const) }),
    );
    const allowed = new Set(['TIMEOUT', 'CANCELLED', 'CONNECTION_CLOSED', 'TX_ABORTED', 'OVERLOADED']);
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { maxLength: 40 }), async (ops) => {
        const { network, ta, tb, a, b, timers } = setup({ pendingRequestsMax: 8 });
        const slow: Array<() => void> = [];
        b.handle('Fail', (body) => {
          if (body.how === 'basalt') throw new BasaltError('TX_ABORTED', 'no');
          return new Promise((resolve) => slow.push(() => resolve({ kind: 'EchoReply', text: 'slow' })));
        });
        const outcomes: string[][] = [];
        const controllers: AbortController[] = [];
        const promises: Promise<void>[] = [];
        for (const op of ops) {
          switch (op.op) {
            case 'request': {
              const index = outcomes.length;
              outcomes.push([]);
              const controller = new AbortController();
              controllers.push(controller);
              const body: Body =
                op.mode === 'reply'
                  ? { kind: 'Echo', text: 'x' }
                  : op.mode === 'hang'
                    ? { kind: 'Hang' }
                    : { kind: 'Fail', how: op.mode === 'fail' ? 'basalt' : 'async' };
              const promise = a.request('b' as NodeName, body, { timeoutMs: op.timeoutMs, signal: controller.signal });
              promises.push(
                promise.then(
                  () => void outcomes[index]!.push('ok'),
                  (e: unknown) => void outcomes[index]!.push(isBasaltError(e) ? e.code : `bad ${String(e)}`),
                ),
              );
              break;
            }
            case 'advance':
              timers.advance(op.ms);
              break;
            case 'abort':
              if (controllers.length > 0) controllers[op.index % controllers.length]!.abort();
              break;
            case 'bounce':
              network.disconnect(ta, tb);
              network.connect(ta, tb);
              break;
            case 'release':
              slow.shift()?.();
              break;
            case 'settle':
              await settle();
              break;
          }
        }
        await settle();
        await a.close();
        await Promise.all(promises);
        for (const outcome of outcomes) {
          assert.equal(outcome.length, 1, 'the request settled');
          assert.ok(outcome[0] === 'ok' || allowed.has(outcome[0]!), outcome[0]);
        }
        assert.equal(a.pendingCount, 0);
        assert.equal(timers.size, 0, 'no timer left behind');
      }),
      { numRuns: 150 },
    );
  });

  describe('rule 8: an envelope beyond the clock skew bound is refused whole', () => {
    /** a's physical clock runs `aheadMs` ahead of b's; both have the default 500 ms bound. */
    function skewed(aheadMs: number) {
      const network = new LoopbackNetwork();
      const timers = new ManualTimers();
      const ta = network.endpoint('a');
      const tb = network.endpoint('b');
      const physicalA = new ManualClock(1_000_000 + aheadMs);
      const physicalB = new ManualClock(1_000_000);
      const clockA = new HybridClock(physicalA);
      const clockB = new HybridClock(physicalB);
      const refusedByB: string[] = [];
      const refusedByA: string[] = [];
      const diagB: NetDiagnostic[] = [];
      const a = new Messenger<Body>({
        transport: ta,
        clock: clockA,
        timers,
        onClockSkew: (r) => refusedByA.push(`${r.peer}:${r.type}`),
      });
      const b = new Messenger<Body>({
        transport: tb,
        clock: clockB,
        timers,
        onDiagnostic: (d) => diagB.push(d),
        onClockSkew: (r) => refusedByB.push(`${r.peer}:${r.type}`),
      });
      network.connect(ta, tb);
      return { timers, physicalA, physicalB, clockA, clockB, a, b, refusedByA, refusedByB, diagB };
    }

    it('a request is answered CLOCK_SKEW, proven unexecuted, and the receiver clock does not move', async () => {
      const { a, b, clockB, physicalB, refusedByB } = skewed(60_000);
      let handled = 0;
      b.handle('Echo', (body) => {
        handled++;
        return { kind: 'EchoReply', text: body.text };
      });
      const error = await rejectsWith(a.request('b' as NodeName, { kind: 'Echo', text: 'x' }), 'CLOCK_SKEW');
      assert.equal(handled, 0, 'the handler never ran');
      assert.equal(error.executed, 'no');
      assert.equal(error.retryable, true);
      assert.equal(error.details?.['beyondMs'], 60_000 - 500);
      assert.equal(error.details?.['receiverPhysicalMs'], 1_000_000, 'carries the refuser physical time');
      assert.ok(clockB.current() <= hybridTimestamp(physicalB.ms + 1), `b's clock stayed at its physical time`);
      assert.deepEqual(refusedByB, ['a:request']);
    });

    it('a response is refused: its request fails CLOCK_SKEW with an unknown outcome, the clock unmoved', async () => {
      const { a, b, clockA, physicalA, refusedByA } = skewed(-60_000);
      let handled = 0;
      b.handle('Echo', (body) => {
        handled++;
        return { kind: 'EchoReply', text: body.text };
      });
      const error = await rejectsWith(a.request('b' as NodeName, { kind: 'Echo', text: 'x' }), 'CLOCK_SKEW');
      assert.equal(handled, 1, 'b executed the request');
      assert.equal(error.executed, 'unknown');
      assert.equal(error.details?.['senderPhysicalMs'], 1_000_000, 'carries the answer sender physical time');
      assert.ok(clockA.current() <= hybridTimestamp(physicalA.ms + 1), `a's clock stayed at its physical time`);
      assert.deepEqual(refusedByA, ['b:response']);
      assert.equal(a.pendingCount, 0);
    });

    it('a one-way message is dropped, counted every time and reported once per peer per interval', async () => {
      const { a, b, timers, refusedByB, diagB } = skewed(60_000);
      const got: number[] = [];
      b.handle('Note', (body) => {
        got.push(body.n);
        return undefined;
      });
      for (let n = 0; n < 5; n++) a.send('b' as NodeName, { kind: 'Note', n });
      await settle();
      assert.deepEqual(got, []);
      assert.equal(refusedByB.length, 5);
      assert.equal(diagB.filter((d) => d.kind === 'clock-skew').length, 1, 'one report for the burst');
      timers.advance(LIMITS.clockSkewReportIntervalMs);
      const reports = diagB.filter((d) => d.kind === 'clock-skew');
      assert.equal(reports.length, 2, 'the interval ends with a summary of the suppressed refusals');
      assert.match(reports[1]!.message, /4 more messages from a refused/);
      a.send('b' as NodeName, { kind: 'Note', n: 9 });
      await settle();
      assert.equal(diagB.filter((d) => d.kind === 'clock-skew').length, 3, 'a new interval reports again');
    });

    it('an envelope exactly at the bound is absorbed; one millisecond past it is refused', async () => {
      const at = skewed(500);
      at.b.handle('Echo', (body) => ({ kind: 'EchoReply', text: body.text }));
      assert.deepEqual(await at.a.request('b' as NodeName, { kind: 'Echo', text: 'x' }), {
        kind: 'EchoReply',
        text: 'x',
      });
      const past = skewed(501);
      past.b.handle('Echo', (body) => ({ kind: 'EchoReply', text: body.text }));
      await rejectsWith(past.a.request('b' as NodeName, { kind: 'Echo', text: 'x' }), 'CLOCK_SKEW');
    });
  });

  describe('body checks (issue 31 item 6)', () => {
    const CHECKS: Readonly<Record<Body['kind'], BodyCheck>> = {
      Echo: fieldsCheck({ text: string }),
      EchoReply: fieldsCheck({ text: string }),
      Fail: fieldsCheck({ how: string }),
      Hang: fieldsCheck({}),
      Note: fieldsCheck({ n: index }),
      Nobody: fieldsCheck({}),
    };

    const AHEAD_MS = 5_000_000;

    function checked() {
      const network = new LoopbackNetwork();
      const timers = new ManualTimers();
      const ta = network.endpoint('a');
      const tb = network.endpoint('b');
      const clockB = new HybridClock(new ManualClock(1_000), { maxClockSkewMs: WIDE_SKEW_BOUND_MS });
      const refusals: MalformedRefusal[] = [];
      // a's clock far ahead of b's (within the bound), so that absorbing one of its timestamps would show on b's.
      const clock = new HybridClock(new ManualClock(AHEAD_MS), { maxClockSkewMs: WIDE_SKEW_BOUND_MS });
      const a = new Messenger<Body>({ transport: ta, clock, timers, bodyChecks: CHECKS });
      const b = new Messenger<Body>({
        transport: tb,
        clock: clockB,
        timers,
        bodyChecks: CHECKS,
        onMalformed: (r) => refusals.push(r),
      });
      network.connect(ta, tb);
      return { a, b, ta, clockB, refusals };
    }

    it('refuses a request whose body fails its check with MALFORMED_MESSAGE before the handler or the clock sees it', async () => {
      const { a, b, clockB, refusals } = checked();
      let handled = 0;
      b.handle('Note', () => {
        handled++;
        return { kind: 'EchoReply', text: 'noted' };
      });
      const error = await rejectsWith(a.request('b' as NodeName, { kind: 'Note', n: -1 } as Body), 'MALFORMED_MESSAGE');
      assert.match(error.message, /Note: n must be an integer >= 0/);
      assert.equal(error.executed, 'no');
      assert.equal(handled, 0);
      assert.ok(clockB.current() < hybridTimestamp(AHEAD_MS), 'a refused message moves no clock (rule 8)');
      assert.deepEqual(
        refusals.map((r) => [r.peer, r.code]),
        [['a', 'MALFORMED_MESSAGE']],
      );
    });

    it('refuses a kind without a check with UNKNOWN_MESSAGE and counts it; a one-way is dropped and counted', async () => {
      const { a, b, refusals } = checked();
      let handled = 0;
      b.handle('Note', () => {
        handled++;
        return undefined;
      });
      await rejectsWith(a.request('b' as NodeName, { kind: 'Bogus' } as unknown as Body), 'UNKNOWN_MESSAGE');
      a.send('b' as NodeName, { kind: 'Note', n: 'one' } as unknown as Body);
      a.send('b' as NodeName, { kind: 'Note', n: 1 });
      await settle();
      assert.equal(handled, 1, 'only the well-formed one-way message reached its handler');
      assert.deepEqual(
        refusals.map((r) => r.code),
        ['UNKNOWN_MESSAGE', 'MALFORMED_MESSAGE'],
      );
    });

    it('fails a request whose response body fails its check; a kind added with addBodyCheck is accepted', async () => {
      const { a, b } = checked();
      b.handle('Echo', () => ({ kind: 'EchoReply', text: 7 }) as unknown as Body);
      await rejectsWith(a.request('b' as NodeName, { kind: 'Echo', text: 'x' }), 'MALFORMED_MESSAGE');
      assert.equal(a.pendingCount, 0);
      const extra = { kind: 'Extra' } as unknown as Body;
      b.handle('Extra' as Body['kind'], () => ({ kind: 'EchoReply', text: 'extra' }));
      await rejectsWith(a.request('b' as NodeName, extra), 'UNKNOWN_MESSAGE');
      b.addBodyCheck('Extra' as Body['kind'], () => undefined);
      assert.deepEqual(await a.request('b' as NodeName, extra), { kind: 'EchoReply', text: 'extra' });
    });
  });
});
