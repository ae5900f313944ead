/**
 * Ports for tests that start node processes on fixed ports: a range below the kernel's ephemeral range (Linux:
 * 32768–60999), where no other test's `listen(0)` or outgoing connection can take a port before the nodes bind it.
 */
import { createServer } from 'node:net';

async function isFree(port: number): Promise<boolean> {
  const server = createServer();
  const ok = await new Promise<boolean>((resolve) => {
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => resolve(true));
  });
  if (ok) await new Promise((resolve) => server.close(resolve));
  return ok;
}

/** Ranges handed out by this process so far: every call starts from a range the calls before it did not. */
let handedOut = 0;

/** A base port whose `count` consecutive ports are free right now, between 20,000 and 32,000. */
export async function freeRange(count: number): Promise<number> {
  for (let attempt = 0; attempt < 100; attempt++) {
    // Spread by process id and by call, so that test files running at once, and the calls of one file, start from
    // different ranges.
    const step = handedOut++;
    const base = 20_000 + ((process.pid * 7_919 + step * 1_009) % 11_900);
    const free = await Promise.all(Array.from({ length: count }, (_, i) => isFree(base + i)));
    if (free.every(Boolean)) return base;
  }
  throw new Error('no free port range');
}
