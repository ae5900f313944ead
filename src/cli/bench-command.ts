/**
 * `basalt bench [flags]`: runs the end-to-end benchmark (bench/main.ts, compiled next to this package's dist/src) in
 * a child process with the flags passed through, and exits with its code. The benchmark ships with the source
 * checkout, not with the package's runtime files; when it is missing this says how to get it. While the child
 * runs, a Ctrl-C reaches it directly (same process group) and it stops what it started; this process waits for it.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { BasaltError } from '../core/errors.js';

export const BENCH_MAIN = fileURLToPath(new URL('../../bench/main.js', import.meta.url));

export async function runBench(args: readonly string[]): Promise<number> {
  if (!existsSync(BENCH_MAIN)) {
    throw new BasaltError(
      'NOT_FOUND',
      `the benchmark is not built here (${BENCH_MAIN}); in a source checkout run npm ci && npm run bench`,
      { path: BENCH_MAIN },
    );
  }
  const child = spawn(process.execPath, [BENCH_MAIN, ...args], { stdio: 'inherit' });
  // The child handles Ctrl-C itself; this process must outlive it to report its exit code.
  const ignore = (): void => {};
  process.on('SIGINT', ignore);
  try {
    return await new Promise<number>((resolve, reject) => {
      child.once('error', reject);
      child.once('exit', (code, signal) => resolve(code ?? (signal === null ? 1 : 128)));
    });
  } finally {
    process.off('SIGINT', ignore);
  }
}
