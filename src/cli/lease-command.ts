/**
 * `basalt lease grant <ttlMs> | keep <id> [--once] | revoke <id>` and the expiry flags of `basalt put` (`--ttl <ms>`,
 * `--lease <id>`), as etcdctl's `lease` commands: JSON out, one line per result, the data commands' exit codes
 * (a lease that ended is LEASE_NOT_FOUND, exit 6). `keep` without `--once` renews every third of the ttl and prints
 * one line per renewal until the lease is lost or the process is interrupted.
 */
import type { Lease } from '../client/leases.js';
import type { RemoteClient } from '../client/remote.js';
import { invalidArgument } from '../core/errors.js';
import type { PutOptions } from '../tx/core/user-input.js';
import { log } from './common.js';
import { DATA_EXIT_CODES } from './data.js';

/** A lease as printed: the timestamp as decimal text (JSON has no 64-bit integers). */
export function leaseJson(lease: Lease): string {
  return JSON.stringify({ id: lease.id, ttlMs: lease.ttlMs, expiresAt: lease.expiresAt.toString() });
}

/**
 * A number of milliseconds given on the command line. Only its form is checked here (a number at all); its range is
 * the cluster's to refuse, with INVALID_ARGUMENT, before anything is written.
 */
export function parseMs(text: string, what: string): number {
  if (!/^-?\d+(\.\d+)?$/.test(text.trim())) throw invalidArgument(`${what} must be a number of milliseconds`);
  return Number(text);
}

/** The put options the `--ttl` / `--lease` flags ask for (at most one of them). */
export function putOptionsOf(flags: { readonly ttl?: string; readonly lease?: string }): PutOptions | undefined {
  if (flags.ttl !== undefined && flags.lease !== undefined)
    throw invalidArgument('--ttl and --lease exclude each other');
  if (flags.ttl !== undefined) return { ttlMs: parseMs(flags.ttl, '--ttl') };
  if (flags.lease !== undefined) return { lease: flags.lease };
  return undefined;
}

export async function leaseGrant(client: RemoteClient, ttlText: string): Promise<number> {
  log(leaseJson(await client.grantLease(parseMs(ttlText, 'the lease ttl'))));
  return DATA_EXIT_CODES.ok;
}

export async function leaseRevoke(client: RemoteClient, id: string): Promise<number> {
  await client.revokeLease(id);
  log(JSON.stringify({ revoked: id }));
  return DATA_EXIT_CODES.ok;
}

/** One keepalive (`once`), or renewals until the lease is lost (throws LEASE_NOT_FOUND) or SIGINT/SIGTERM. */
export async function leaseKeep(client: RemoteClient, id: string, once: boolean): Promise<number> {
  let lease = await client.keepAliveOnce(id);
  log(leaseJson(lease));
  if (once) return DATA_EXIT_CODES.ok;
  const keeper = client.keepAlive(lease);
  const stop = (): void => keeper.close();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  const printer = setInterval(() => {
    if (keeper.lease.expiresAt === lease.expiresAt) return;
    lease = keeper.lease;
    log(leaseJson(lease));
  }, 50);
  try {
    await keeper.done;
    return DATA_EXIT_CODES.ok;
  } finally {
    clearInterval(printer);
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
  }
}
