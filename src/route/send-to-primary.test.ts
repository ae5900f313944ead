import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BasaltError, isBasaltError } from '../core/errors.js';
import type { NodeName, PartitionId } from '../core/ids.js';
import { SimClock } from '../sim/clock.js';
import { Scheduler } from '../sim/scheduler.js';
import { primaryMissNaming, settleWithin } from '../testing/coordinator-fakes.js';
import type { PrimaryDirectory } from './primary-directory.js';
import { followMiss, type PrimaryRouteOptions, type PrimaryRouteResult, sendToPrimary } from './send-to-primary.js';

const P = 't1p0' as PartitionId;
const OTHER = 't1p1' as PartitionId;
const BACKOFF_MS = 20;

/** A directory that answers `guesses` in turn (the last one again once they run out) and records what it learns. */
class ScriptedDirectory implements PrimaryDirectory {
  readonly noted: NodeName[] = [];
  private next = 0;

  constructor(private readonly guesses: readonly string[]) {}

  locate(): NodeName {
    const name = this.guesses[Math.min(this.next, this.guesses.length - 1)]!;
    this.next += 1;
    return name as NodeName;
  }

  note(_partitionId: PartitionId, name: NodeName): void {
    this.noted.push(name);
  }

  readonly forgotten: NodeName[] = [];

  forget(_partitionId: PartitionId, name: NodeName): void {
    this.forgotten.push(name);
  }
}

function setup() {
  const scheduler = new Scheduler({ seed: 'primary-route-test' });
  const clock = new SimClock(scheduler);
  const timers = scheduler.timers('route');
  const t0 = scheduler.nowMs();
  /** Attempts as sent, `atMs` from the start of the test. */
  const sent: { to: string; atMs: number }[] = [];
  /** Runs one route whose attempts `answer` scripts, attempt by attempt (1-based), on virtual time. */
  const route = <R>(
    answer: (to: NodeName, attempt: number) => R | Promise<R>,
    options: Partial<PrimaryRouteOptions<R>> & { readonly directory: PrimaryDirectory },
  ): Promise<PrimaryRouteResult<R>> =>
    settleWithin(
      scheduler,
      sendToPrimary<R>({
        partitionId: P,
        attemptsMax: 8,
        backoffMs: () => BACKOFF_MS,
        timers,
        send: async (to) => {
          sent.push({ to, atMs: scheduler.nowMs() - t0 });
          return answer(to, sent.length);
        },
        ...options,
      }),
    );
  return { scheduler, clock, t0, sent, route };
}

const timeout = () => new BasaltError('TIMEOUT', 'no answer');

describe('sendToPrimary', () => {
  it('follows the holder a PRIMARY_MISS names at once, and learns it', async () => {
    const { route, sent } = setup();
    const directory = new ScriptedDirectory(['n1']);
    const result = await route(
      (to) => {
        if (to === 'n1') throw primaryMissNaming(P, 'n2');
        return 'served';
      },
      { directory },
    );
    assert.equal(result.kind, 'ok');
    assert.deepEqual(result.kind === 'ok' && [result.response, result.primary], ['served', 'n2']);
    assert.deepEqual(
      sent.map((s) => [s.to, s.atMs]),
      [
        ['n1', 0],
        ['n2', 0],
      ],
      'a new target is tried without a pause',
    );
    assert.deepEqual(directory.noted, ['n2', 'n2'], 'learned from the miss, then from the answer');
  });

  it('backs off on the injected timers before trying the same target again', async () => {
    const { route, sent } = setup();
    const result = await route(
      (_to, attempt) => {
        if (attempt < 3) throw primaryMissNaming(P, undefined);
        return 'served';
      },
      { directory: new ScriptedDirectory(['n1']) },
    );
    assert.equal(result.kind, 'ok');
    assert.deepEqual(
      sent.map((s) => [s.to, s.atMs]),
      [
        ['n1', 0],
        ['n1', BACKOFF_MS],
        ['n1', 2 * BACKOFF_MS],
      ],
    );
  });

  it('a miss without a hint asks the directory again: its rotating guesses are tried at once, a repeat waits', async () => {
    const { route, sent } = setup();
    const directory = new ScriptedDirectory(['n1', 'n2', 'n3', 'n1']);
    const result = await route(
      () => {
        throw primaryMissNaming(P, undefined);
      },
      { directory, attemptsMax: 4 },
    );
    assert.equal(result.kind, 'miss');
    // Each node that missed naming nobody is forgotten: a directory that had learned it guesses instead.
    assert.deepEqual(directory.forgotten, ['n1', 'n2', 'n3', 'n1']);
    assert.deepEqual(
      sent.map((s) => [s.to, s.atMs]),
      [
        ['n1', 0],
        ['n2', 0],
        ['n3', 0],
        ['n1', BACKOFF_MS],
      ],
    );
  });

  it('a hint naming the node that missed, or another partition, is not followed', async () => {
    const { route, sent } = setup();
    await route(
      (_to, attempt) => {
        if (attempt === 1) throw primaryMissNaming(P, 'n1');
        if (attempt === 2) throw primaryMissNaming(OTHER, 'n3');
        return 'served';
      },
      { directory: new ScriptedDirectory(['n1', 'n2']) },
    );
    assert.deepEqual(
      sent.map((s) => s.to),
      ['n1', 'n2', 'n2'],
    );
    assert.equal(followMiss(primaryMissNaming(OTHER, 'n3'), P, 'n1' as NodeName), undefined);
    assert.equal(followMiss(primaryMissNaming(P, 'n3'), P, 'n1' as NodeName), 'n3');
  });

  it('no attempt starts past the deadline, and no pause reaches past it', async () => {
    const { route, sent, clock, t0 } = setup();
    const result = await route(
      () => {
        throw timeout();
      },
      {
        directory: new ScriptedDirectory(['n1']),
        retries: (e) => e.code === 'TIMEOUT',
        backoffMs: () => 30,
        deadline: { clock, atMs: t0 + 50 },
      },
    );
    assert.deepEqual(
      sent.map((s) => s.atMs),
      [0, 30],
      'the third attempt would start at the deadline',
    );
    assert.equal(result.kind, 'failed');
    assert.ok(result.kind === 'failed' && isBasaltError(result.error, 'TIMEOUT'));
  });

  it('attempts are bounded by attemptsMax; misses that ran out are a miss, with the last hint', async () => {
    const { route, sent } = setup();
    const result = await route(
      (to) => {
        throw primaryMissNaming(P, to === 'n1' ? 'n2' : 'n1');
      },
      { directory: new ScriptedDirectory(['n1']), attemptsMax: 3 },
    );
    assert.equal(sent.length, 3);
    assert.equal(result.kind, 'miss');
    assert.equal(result.kind === 'miss' && result.hint?.holder?.name, 'n2');
    assert.deepEqual(
      sent.map((s) => [s.to, s.atMs]),
      [
        ['n1', 0],
        ['n2', 0],
        ['n1', BACKOFF_MS],
      ],
      'a hint naming a target tried already waits too',
    );
  });

  it('executed stays "no" only while every attempt provably did nothing', async () => {
    const refused = new BasaltError('NODE_UNAVAILABLE', 'not sent', undefined, { executed: 'no' });
    const cases: {
      readonly answers: readonly BasaltError[];
      readonly kind: 'miss' | 'failed';
      readonly executed?: string;
    }[] = [
      { answers: [primaryMissNaming(P, undefined), refused], kind: 'failed', executed: 'no' },
      { answers: [new BasaltError('OVERLOADED', 'full')], kind: 'failed', executed: 'no' },
      { answers: [timeout()], kind: 'failed', executed: 'unknown' },
      { answers: [timeout(), refused], kind: 'failed', executed: 'unknown' },
      { answers: [timeout(), primaryMissNaming(P, undefined)], kind: 'failed', executed: 'unknown' },
      { answers: [primaryMissNaming(P, undefined), primaryMissNaming(P, undefined)], kind: 'miss' },
    ];
    for (const c of cases) {
      const { route } = setup();
      const result = await route(
        (_to, attempt) => {
          throw c.answers[attempt - 1]!;
        },
        {
          directory: new ScriptedDirectory(['n1']),
          attemptsMax: c.answers.length,
          // Timeouts are retried here (an idempotent request); a proven refusal is not.
          retries: (e) => e.code === 'TIMEOUT',
        },
      );
      const codes = c.answers.map((a) => a.code).join(',');
      assert.equal(result.kind, c.kind, codes);
      if (result.kind === 'failed') assert.equal(result.executed, c.executed, codes);
    }
  });

  it('a failure the caller does not retry ends the route at once, naming where it went', async () => {
    const { route, sent } = setup();
    const result = await route(
      () => {
        throw timeout();
      },
      { directory: new ScriptedDirectory(['n1']) },
    );
    assert.equal(sent.length, 1);
    assert.deepEqual(result.kind === 'failed' && [result.target, result.executed], ['n1', 'unknown']);
  });

  it('a local replica first: its answer teaches nothing, its failure goes to the primary without a pause', async () => {
    const { route, sent } = setup();
    const directory = new ScriptedDirectory(['self']);
    const first = await route(() => 'local', { directory, first: 'self' as NodeName, firstIsReplica: true });
    assert.deepEqual(first.kind === 'ok' && first.primary, undefined);
    assert.deepEqual(directory.noted, []);
    sent.length = 0;
    const second = await route(
      (_to, attempt) => {
        if (attempt === 1) throw timeout();
        return 'primary';
      },
      { directory, first: 'self' as NodeName, firstIsReplica: true, retries: (e) => e.code === 'TIMEOUT' },
    );
    assert.deepEqual(
      sent.map((s) => [s.to, s.atMs]),
      [
        ['self', 0],
        ['self', 0],
      ],
      'this node is also the primary: asked as such at once',
    );
    assert.deepEqual(second.kind === 'ok' && second.primary, 'self');
  });

  it('a locate failure counts as an attempt the caller may retry; a cancelled pause ends the route', async () => {
    const { route, sent, scheduler } = setup();
    let locates = 0;
    const flaky: PrimaryDirectory = {
      locate: () => {
        locates += 1;
        if (locates === 1) throw new BasaltError('NODE_UNAVAILABLE', 'none known', undefined, { executed: 'no' });
        return 'n1' as NodeName;
      },
    };
    const result = await route(() => 'served', { directory: flaky, retries: (e) => e.code === 'NODE_UNAVAILABLE' });
    assert.equal(result.kind, 'ok');
    assert.deepEqual(
      sent.map((s) => s.atMs),
      [BACKOFF_MS],
    );
    const stop = new AbortController();
    scheduler.schedule(5, () => stop.abort(new BasaltError('CANCELLED', 'stopped')));
    const cancelled = await route(
      () => {
        throw primaryMissNaming(P, undefined);
      },
      { directory: new ScriptedDirectory(['n1']), signal: stop.signal },
    );
    assert.equal(cancelled.kind, 'failed');
    assert.deepEqual(
      cancelled.kind === 'failed' && [cancelled.error.code, cancelled.executed],
      ['CANCELLED', 'no'],
      'only misses were sent',
    );
  });

  it("beforeAttempt's throw rejects the route before anything more is sent", async () => {
    const { route, sent } = setup();
    let attempts = 0;
    await assert.rejects(
      route(
        () => {
          throw primaryMissNaming(P, 'n2');
        },
        {
          directory: new ScriptedDirectory(['n1']),
          beforeAttempt: () => {
            attempts += 1;
            if (attempts === 2) throw new BasaltError('TX_ABORTED', 'abort-only meanwhile');
          },
        },
      ),
      (e: unknown) => isBasaltError(e, 'TX_ABORTED'),
    );
    assert.equal(sent.length, 1);
  });
});
