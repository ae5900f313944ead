/**
 * Leases, etcd-style, built from ordinary transactions and versions that expire (DESIGN §4b "Expiry is part of a
 * version, not a background delete"; docs/concepts/expiry.md).
 *
 * A lease is a record in the system table `basalt.leases`: `{ ttlMs, end, keys }`, `end` an HLC timestamp (decimal
 * text: values are JSON). Every key attached to the lease is written with expiry = `end`, and so is the record itself,
 * so when the lease ends the record and all its keys stop being visible at one timestamp, in every snapshot and on
 * every replica. Nothing deletes them: the versions expire and ordinary GC collects them below the low watermark.
 *
 * - grant: end = now + ttl, `now` being the node's HLC clock (a read-only transaction's read timestamp).
 * - attach (`put(..., { lease })`): in the caller's transaction, read the record (absent: LEASE_NOT_FOUND), add the key
 *   (at most LIMITS.leaseKeysMax: LEASE_KEYS_MAX), write the key and the record with expiry = end.
 * - keepalive: ONE transaction reads the record, takes newEnd = now + ttl (never below the current end), and rewrites
 *   the record and every attached key still present with expiry newEnd, so the keys keep sharing one end. It commits
 *   only below the old end, as every read-write transaction commits below the expiry of what it read (a retry
 *   then finds the lease ended: LEASE_NOT_FOUND), so no keepalive brings keys back after a snapshot saw them go.
 *   The same rule keeps a write attached to a lease from committing after the lease's end.
 * - revoke: one transaction removes every attached key and the record.
 * A key attached to a lease stays attached until the lease ends or is revoked (a later write of it without the lease
 * does not detach it: the next keepalive rewrites it with the lease's end); a removed key is dropped from the lease
 * by the next keepalive.
 */
import type { TableOptions } from '../cluster/metastorage-state.js';
import { BasaltError, invalidArgument, isBasaltError } from '../core/errors.js';
import type { HybridTimestamp } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { maxTimestamp } from '../hlc/timestamp.js';
import type { Value } from '../storage/mv-partition-storage.js';
import type { PutOptions } from '../tx/core/user-input.js';

/** The system table holding lease records (one partition; created by the first grant). */
export const LEASE_TABLE = 'basalt.leases';

const LOGICAL_BITS = 16n;

/** A granted lease: keys attached to it vanish together at `expiresAt` unless a keepalive extends it first. */
export interface Lease {
  readonly id: string;
  readonly ttlMs: number;
  /** The HLC timestamp at which the lease (and every key attached to it) ends, as of the last grant or keepalive. */
  readonly expiresAt: HybridTimestamp;
}

/** What lease operations need of a transaction (both clients' transactions fit). */
export interface LeaseTransaction {
  get(table: string, key: string): Promise<Value | undefined>;
  put(table: string, key: string, value: Value, options?: PutOptions): Promise<void>;
  remove(table: string, key: string): Promise<void>;
}

/** What lease operations need of a client (the embedded and the TCP client fit). */
export interface LeaseClient {
  begin(options: { readonly readOnly: true }): Promise<{
    readonly readTimestamp?: HybridTimestamp | undefined;
    commit(): Promise<void>;
  }>;
  transaction<T>(fn: (tx: LeaseTransaction) => Promise<T>): Promise<T>;
  tables(): Promise<readonly { readonly name: string; readonly replicas: number }[]>;
  createTable(name: string, options: TableOptions): Promise<unknown>;
}

interface LeaseRecord {
  readonly ttlMs: number;
  readonly end: HybridTimestamp;
  readonly keys: readonly (readonly [string, string])[];
}

function encodeRecord(record: LeaseRecord): Value {
  return { ttlMs: record.ttlMs, end: record.end.toString(), keys: record.keys.map(([t, k]) => [t, k]) };
}

function decodeRecord(id: string, value: Value | undefined): LeaseRecord {
  if (value === undefined) throw leaseNotFound(id);
  const v = value as { ttlMs?: unknown; end?: unknown; keys?: unknown };
  if (typeof v.ttlMs !== 'number' || typeof v.end !== 'string' || !Array.isArray(v.keys)) {
    throw new BasaltError('INTERNAL', `lease record ${id} is malformed`, { id });
  }
  return { ttlMs: v.ttlMs, end: BigInt(v.end) as HybridTimestamp, keys: v.keys as [string, string][] };
}

function leaseNotFound(id: string): BasaltError {
  return new BasaltError('LEASE_NOT_FOUND', `lease ${id} was not granted, was revoked, or has ended`, { id });
}

/** `ts` + `ms` whole milliseconds of HLC time. */
function plusMs(ts: HybridTimestamp, ms: number): HybridTimestamp {
  return (ts + (BigInt(ms) << LOGICAL_BITS)) as HybridTimestamp;
}

export function checkLeaseTtl(ttlMs: unknown): number {
  if (typeof ttlMs !== 'number' || !Number.isSafeInteger(ttlMs) || ttlMs < 1 || ttlMs > LIMITS.ttlMsMax) {
    throw invalidArgument(`a lease ttlMs must be an integer in 1..${LIMITS.ttlMsMax}`, { ttlMs: String(ttlMs) });
  }
  return ttlMs;
}

/** The lease a put names (undefined: none); a lease with another expiry option is INVALID_ARGUMENT. */
export function leaseOption(options: PutOptions | undefined): string | undefined {
  if (options?.lease === undefined) return undefined;
  if (options.ttlMs !== undefined || options.expiresAt !== undefined) {
    throw invalidArgument('put options take at most one of ttlMs, expiresAt and lease');
  }
  return checkLeaseId(options.lease);
}

function checkLeaseId(id: unknown): string {
  if (typeof id !== 'string' || id.length === 0 || id.length > 64) {
    throw invalidArgument('a lease id is a string of 1 to 64 characters');
  }
  return id;
}

/** The node's HLC clock as a read-only transaction's read timestamp. */
async function nodeNow(client: LeaseClient): Promise<HybridTimestamp> {
  const tx = await client.begin({ readOnly: true });
  await tx.commit();
  if (tx.readTimestamp === undefined) throw new BasaltError('INTERNAL', 'a read-only transaction without a timestamp');
  return tx.readTimestamp;
}

async function ensureLeaseTable(client: LeaseClient): Promise<void> {
  const tables = await client.tables();
  if (tables.some((t) => t.name === LEASE_TABLE)) return;
  // As many replicas as the most replicated table (a cluster without tables: one).
  const replicas = Math.max(1, ...tables.map((t) => t.replicas));
  try {
    await client.createTable(LEASE_TABLE, { partitions: 1, replicas });
  } catch (error) {
    // Another client created it first.
    if (!(await client.tables()).some((t) => t.name === LEASE_TABLE)) throw error;
  }
}

/** Grants a lease of `ttlMs`: its end is the node's clock + ttl. */
export async function grantLease(client: LeaseClient, ttlMs: number): Promise<Lease> {
  checkLeaseTtl(ttlMs);
  await ensureLeaseTable(client);
  for (let attempt = 0; ; attempt++) {
    const now = await nodeNow(client);
    // An HLC timestamp is unique on its node; the check below makes two nodes' equal ones safe.
    const id = now.toString(36);
    const expiresAt = plusMs(now, ttlMs);
    const granted = await client.transaction(async (tx) => {
      if ((await tx.get(LEASE_TABLE, id)) !== undefined) return false;
      await tx.put(LEASE_TABLE, id, encodeRecord({ ttlMs, end: expiresAt, keys: [] }), { expiresAt });
      return true;
    });
    if (granted) return { id, ttlMs, expiresAt };
    if (attempt >= 3) throw new BasaltError('INTERNAL', 'no free lease id after several attempts');
  }
}

/** Writes `key` in `tx` attached to lease `id`: it expires at the lease's end, and keepalives extend it. */
export async function putWithLease(
  tx: LeaseTransaction,
  id: string,
  table: string,
  key: string,
  value: Value,
): Promise<void> {
  checkLeaseId(id);
  const record = decodeRecord(id, await tx.get(LEASE_TABLE, id));
  const attached = record.keys.some(([t, k]) => t === table && k === key);
  if (!attached && record.keys.length >= LIMITS.leaseKeysMax) {
    throw new BasaltError('LEASE_KEYS_MAX', `lease ${id} already holds ${LIMITS.leaseKeysMax} keys`, {
      id,
      leaseKeysMax: LIMITS.leaseKeysMax,
    });
  }
  const expiresAt = record.end;
  if (!attached) {
    const next = { ...record, keys: [...record.keys, [table, key] as const] };
    await tx.put(LEASE_TABLE, id, encodeRecord(next), { expiresAt });
  }
  await tx.put(table, key, value, { expiresAt });
}

/**
 * Extends lease `id` to the node's clock + its ttl, with every attached key, in one transaction (see the module
 * header); LEASE_NOT_FOUND when it had already ended (or ended before this keepalive could commit).
 */
export async function keepLeaseAlive(client: LeaseClient, id: string): Promise<Lease> {
  checkLeaseId(id);
  const now = await nodeNow(client);
  return client.transaction(async (tx) => {
    const record = decodeRecord(id, await tx.get(LEASE_TABLE, id));
    const end = maxTimestamp(plusMs(now, record.ttlMs), record.end);
    const kept: [string, string][] = [];
    for (const [table, key] of record.keys) {
      const value = await tx.get(table, key);
      if (value === undefined) continue;
      await tx.put(table, key, value, { expiresAt: end });
      kept.push([table, key]);
    }
    await tx.put(LEASE_TABLE, id, encodeRecord({ ttlMs: record.ttlMs, end, keys: kept }), { expiresAt: end });
    return { id, ttlMs: record.ttlMs, expiresAt: end };
  });
}

/** Ends lease `id` now: its record and every attached key are removed in one transaction. */
export async function revokeLease(client: LeaseClient, id: string): Promise<void> {
  checkLeaseId(id);
  await client.transaction(async (tx) => {
    const record = decodeRecord(id, await tx.get(LEASE_TABLE, id));
    for (const [table, key] of record.keys) await tx.remove(table, key);
    await tx.remove(LEASE_TABLE, id);
  });
}

/** A running keepalive (client.keepAlive). */
export interface LeaseKeepAlive {
  /** The lease as last extended. */
  readonly lease: Lease;
  /** Keepalives that extended the lease so far. */
  readonly renewals: number;
  /** Resolves after `close()`; rejects with LEASE_NOT_FOUND as soon as the lease is found lost. */
  readonly done: Promise<void>;
  /** Stops renewing (the lease then ends at its current end). */
  close(): void;
}

/**
 * Renews `lease` every third of its ttl until `close()` or until the lease is lost. A retryable failure is tried
 * again at the next turn; the lease is lost when a keepalive finds it ended, or fails in any other way.
 */
export function startKeepAlive(
  client: LeaseClient,
  lease: Lease,
  pause: (ms: number, signal: AbortSignal) => Promise<void>,
): LeaseKeepAlive {
  const stop = new AbortController();
  const state = { lease, renewals: 0 };
  const intervalMs = Math.max(1, Math.floor(lease.ttlMs / 3));
  const loop = async (): Promise<void> => {
    while (!stop.signal.aborted) {
      try {
        await pause(intervalMs, stop.signal);
      } catch {
        return;
      }
      try {
        state.lease = await keepLeaseAlive(client, lease.id);
        state.renewals++;
      } catch (error) {
        if (stop.signal.aborted) return;
        if (!isBasaltError(error) || !error.retryable) throw error;
      }
    }
  };
  const done = loop();
  // A caller that never looks at `done` must not get an unhandled rejection: the loss is also in `done` for those who do.
  done.catch(() => {});
  return {
    get lease() {
      return state.lease;
    },
    get renewals() {
      return state.renewals;
    },
    done,
    close: () => stop.abort(),
  };
}
