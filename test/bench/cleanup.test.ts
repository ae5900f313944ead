import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Cleanup } from '../../bench/cleanup.js';

const CLEANUP_JS = fileURLToPath(new URL('../../bench/cleanup.js', import.meta.url));

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function until(condition: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('bench cleanup', () => {
  it('stops what was started and removes directories, newest first, each once, past a failing step', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'bench-cleanup-test-'));
    const order: string[] = [];
    const cleanup = new Cleanup();
    cleanup.addDirectory(dir);
    cleanup.add('first', () => void order.push('first'));
    cleanup.add('failing', () => {
      order.push('failing');
      throw new Error('planted');
    });
    cleanup.add('last', async () => void order.push('last'));
    await Promise.all([cleanup.run(), cleanup.run()]);
    await cleanup.run();
    assert.deepEqual(order, ['last', 'failing', 'first']);
    assert.equal(existsSync(dir), false);
    assert.deepEqual(cleanup.pending, []);
  });

  it('on SIGINT kills the child process it registered, removes its directory and exits with 130', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'bench-cleanup-signal-'));
    const script = `
      import { spawn } from 'node:child_process';
      import { mkdirSync } from 'node:fs';
      const { Cleanup } = await import(${JSON.stringify(CLEANUP_JS)});
      const cleanup = new Cleanup().install();
      const data = ${JSON.stringify(join(dir, 'data'))};
      mkdirSync(data);
      cleanup.addDirectory(data);
      const child = spawn('sleep', ['60'], { stdio: 'ignore' });
      const exited = new Promise((r) => child.once('exit', r));
      cleanup.add('sleep', async () => { child.kill('SIGTERM'); await exited; }, () => child.kill('SIGKILL'));
      console.log('child ' + child.pid);
      // What a bench does next while the cleanup runs: starting something new must be refused.
      process.on('SIGINT', () => {
        try {
          cleanup.add('late', () => {});
          console.error('started late');
        } catch {}
      });
      setInterval(() => {}, 1000);
    `;
    const parent = spawn(process.execPath, ['--input-type=module', '-e', script], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      let out = '';
      let err = '';
      parent.stdout.on('data', (c: Buffer) => {
        out += c.toString();
      });
      parent.stderr.on('data', (c: Buffer) => {
        err += c.toString();
      });
      const stderrText = (): string => err;
      await until(() => /child \d+/.test(out));
      const childPid = Number(/child (\d+)/.exec(out)![1]);
      assert.ok(alive(childPid) && existsSync(join(dir, 'data')), 'started');
      const exit = new Promise<number | null>((r) => parent.once('exit', (code) => r(code)));
      parent.kill('SIGINT');
      assert.equal(await exit, 130);
      await until(() => !alive(childPid));
      assert.equal(existsSync(join(dir, 'data')), false, 'its directory is removed');
      assert.doesNotMatch(stderrText(), /started late/, 'nothing registered after the signal ran');
    } finally {
      parent.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
