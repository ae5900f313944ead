/**
 * For the CLI tests: one `basalt start` node (n1, in-memory storage, table `kv:2:1`, an ephemeral client port) as a
 * child process, and `basalt` commands run against it.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../cli/free-ports.js';

/** The built `basalt` command. */
export const BASALT_MAIN = fileURLToPath(new URL('../cli/main.js', import.meta.url));

const READY_POLL_MS = 20;

export interface SingleNode {
  /** Its client port, as it printed it. */
  readonly address: string;
  readonly child: ChildProcess;
  /** Everything it printed so far. */
  output(): string;
}

/** Starts the node with its config in `dir`; resolves once it says it is ready, fails with its output otherwise. */
export async function startSingleNode(dir: string, readyTimeoutMs = 90_000): Promise<SingleNode> {
  const config = join(dir, 'n1.json');
  writeFileSync(config, JSON.stringify({ name: 'n1', port: await freePort(), memory: true, tables: ['kv:2:1'] }));
  const child = spawn(process.execPath, [BASALT_MAIN, 'start', '--config', config, '--client-port', '0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  for (let waitedMs = 0; ; waitedMs += READY_POLL_MS) {
    const address = [...output.matchAll(/connect\('([^']+)'\)/g)].at(-1)?.[1];
    if (address !== undefined && /^basalt: (node \S+ )?ready/m.test(output)) {
      return { address, child, output: () => output };
    }
    if (waitedMs > readyTimeoutMs || child.exitCode !== null) throw new Error(`no ready node:\n${output}`);
    await new Promise((r) => setTimeout(r, READY_POLL_MS));
  }
}

/** Runs `basalt <args>` to its end, `input` on its stdin. */
export function runBasalt(
  args: readonly string[],
  input?: string,
  timeoutMs = 60_000,
): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [BASALT_MAIN, ...args], {
    encoding: 'utf8',
    input: input ?? '',
    timeout: timeoutMs,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}
