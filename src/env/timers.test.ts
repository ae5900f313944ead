import assert from 'node:assert/strict';
import { test } from 'node:test';
import { PeriodicTask, type TimerHandle, type Timers } from './timers.js';

/** Timers fired by hand: `fire()` runs the one armed timer and returns its delay. */
function manualTimers(): Timers & { fire(): number | undefined; readonly armed: number } {
  const pending = new Map<number, { fn: () => void; delayMs: number }>();
  let next = 0;
  return {
    setTimer: (fn, delayMs) => {
      pending.set(++next, { fn, delayMs });
      return next as unknown as TimerHandle;
    },
    clearTimer: (handle) => {
      pending.delete(handle as unknown as number);
    },
    fire: () => {
      const [id, timer] = [...pending][0] ?? [];
      if (id === undefined || timer === undefined) return undefined;
      pending.delete(id);
      timer.fn();
      return timer.delayMs;
    },
    get armed() {
      return pending.size;
    },
  };
}

test('a periodic task runs after each interval, the next armed only once a run ended, and a failure does not stop it', async () => {
  const timers = manualTimers();
  const errors: unknown[] = [];
  let runs = 0;
  let finish: () => void = () => {};
  const task = new PeriodicTask(
    timers,
    100,
    () => {
      runs++;
      if (runs === 2) throw new Error('boom');
      if (runs === 3) return new Promise<void>((resolve) => (finish = resolve));
      return runs === 4 ? 0 : undefined;
    },
    (error) => errors.push(error),
  );
  task.start();
  task.start();
  assert.equal(timers.armed, 1, 'start is idempotent');
  assert.equal(timers.fire(), 100);
  assert.equal(timers.fire(), 100);
  assert.equal(errors.length, 1, 'the thrown failure went to onError');
  assert.equal(timers.fire(), 100);
  assert.equal(timers.armed, 0, 'a run in progress arms nothing');
  finish();
  await Promise.resolve();
  await Promise.resolve();
  assert.equal(timers.fire(), 100);
  assert.equal(timers.fire(), 0, 'the fourth run asked for the next one at once');
  task.stop();
  assert.equal(timers.armed, 0);
  assert.equal(runs, 5);
});
