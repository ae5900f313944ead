/**
 * Free ports for the processes a command starts (jepsen, the multi-process tests): found by listening on port 0 and
 * releasing it, so a port is free when returned, and another process may still take it before it is bound.
 */
import { createServer } from 'node:net';

/** `count` distinct ports free right now (all listened on at once, then released). */
export async function freePorts(count: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from({ length: count }, async () => {
      const server = createServer();
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      return server;
    }),
  );
  const ports = servers.map((s) => (s.address() as { port: number }).port);
  await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
  return ports;
}

/** One port free right now. */
export async function freePort(): Promise<number> {
  const [port] = await freePorts(1);
  return port!;
}
