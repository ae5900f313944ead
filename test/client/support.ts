/**
 * Shared helpers of the black-box client tests: simulated clusters that name their seed when a test fails, key
 * choosers by partition, and a few state assertions.
 */
import type { Client, Cluster, NodeName, PartitionId } from '../../src/index.js';
import { isBasaltError, startCluster } from '../../src/index.js';

export type TestCluster = Cluster<Client>;

export interface SimOptions {
  readonly nodes?: number;
  readonly partitions?: number;
  readonly replicas?: number;
  readonly table?: string;
}

/**
 * Runs `body` on a fresh simulated cluster with one table; the failure message names the seed (rerun with it to
 * replay the same run), and the cluster is stopped in any case.
 */
export async function withSimCluster(
  seed: string | number,
  options: SimOptions,
  body: (cluster: TestCluster, client: Client) => Promise<void>,
): Promise<void> {
  const cluster = await startCluster({ simulation: { seed }, nodes: options.nodes ?? 3 });
  try {
    const client = cluster.client();
    await client.createTable(options.table ?? 'accounts', {
      partitions: options.partitions ?? 4,
      replicas: options.replicas ?? 3,
    });
    await body(cluster, client);
  } catch (error) {
    if (error instanceof Error) error.message = `[seed ${String(seed)}] ${error.message}`;
    throw error;
  } finally {
    await cluster.stop().catch(() => {});
  }
}

/** The first key `prefix<i>` whose partition satisfies `accept` (and is not in `avoid`). */
export function keyIn(
  cluster: TestCluster,
  table: string,
  accept: (partition: PartitionId) => boolean,
  prefix = 'k',
): string {
  for (let i = 0; i < 10_000; i++) {
    const key = `${prefix}${i}`;
    if (accept(cluster.placement(table, key).partition)) return key;
  }
  throw new Error('no key found for the partition predicate');
}

/** One key per distinct partition, `count` of them. */
export function keysInDistinctPartitions(cluster: TestCluster, table: string, count: number): string[] {
  const seen = new Set<PartitionId>();
  const keys: string[] = [];
  for (let i = 0; keys.length < count && i < 10_000; i++) {
    const key = `key-${i}`;
    const p = cluster.placement(table, key).partition;
    if (seen.has(p)) continue;
    seen.add(p);
    keys.push(key);
  }
  if (keys.length < count) throw new Error(`only ${keys.length} partitions found`);
  return keys;
}

/** Asserts that `promise` rejects with a BasaltError of `code`; returns the error. */
export async function rejectsWith(promise: Promise<unknown>, code: string): Promise<Error & { retryable?: boolean }> {
  try {
    await promise;
  } catch (error) {
    if (isBasaltError(error, code as never)) return error as Error & { retryable?: boolean };
    throw new Error(`expected ${code}, got ${String(error)}`, { cause: error });
  }
  throw new Error(`expected ${code}, but it resolved`);
}

export function replicasOf(cluster: TestCluster, table: string, key: string): readonly NodeName[] {
  return cluster.placement(table, key).replicas;
}

/** Cuts `minority` off from the other `nodes` in both directions for `forMs`, then heals the cut. */
export async function splitFor(
  cluster: TestCluster,
  nodes: readonly NodeName[],
  minority: readonly NodeName[],
  forMs: number,
): Promise<void> {
  const cuts = minority.flatMap((m) =>
    nodes
      .filter((n) => !minority.includes(n))
      .flatMap((n) => [cluster.network.drop({ from: m, to: n }), cluster.network.drop({ from: n, to: m })]),
  );
  await cluster.runFor(forMs);
  for (const c of cuts) c.undo();
}

/**
 * Stops `victim` gracefully, logging how long the stop took (virtual ms) and whether its hand-over hit its bound;
 * returns the time taken, which counts toward the node's planned downtime.
 */
export async function gracefulStopLogged(cluster: TestCluster, victim: NodeName, log: string[]): Promise<number> {
  const stopping = cluster.basaltNode(victim);
  const nowMs = () => cluster.simulation?.nowMs() ?? 0;
  const startMs = nowMs();
  await cluster.shutdownNode(victim);
  const tookMs = nowMs() - startMs;
  const timedOut = (stopping?.counters.get('drain.timeouts') ?? 0) > 0;
  log.push(`${victim} stopped after ${tookMs} ms${timedOut ? ' (drain timed out)' : ''}`);
  return tookMs;
}

/** Two partitions of a table and the nodes around them, for tests of a transaction that writes both. */
export interface TwoPartitionRoles {
  readonly keyA: string;
  readonly keyB: string;
  readonly a: PartitionId;
  readonly b: PartitionId;
  readonly primaryA: NodeName;
  readonly primaryB: NodeName;
  readonly coordinator: NodeName;
}

/**
 * Partition A (the commit partition: touched first) and B of `table` with different primaries; the coordinator is
 * neither. `bOutsideA`: B's primary is no replica of A either (so its map does not learn the outcome from A's log).
 */
export function twoPartitionRoles(cluster: TestCluster, table: string, bOutsideA = false): TwoPartitionRoles {
  const partitions = [...new Set(Array.from({ length: 200 }, (_, i) => cluster.placement(table, `r${i}`).partition))];
  for (const a of partitions) {
    for (const b of partitions) {
      if (a === b) continue;
      const keyA = keyIn(cluster, table, (p) => p === a, 'r');
      const keyB = keyIn(cluster, table, (p) => p === b, 'r');
      const [pa, pb] = [cluster.placement(table, keyA).primary, cluster.placement(table, keyB).primary];
      if (pa === undefined || pb === undefined || pa === pb) continue;
      if (bOutsideA && cluster.placement(table, keyA).replicas.includes(pb)) continue;
      const coordinator = cluster.nodes.find((n) => n !== pa && n !== pb);
      if (coordinator !== undefined) return { keyA, keyB, a, b, primaryA: pa, primaryB: pb, coordinator };
    }
  }
  throw new Error('no two partitions with different primaries');
}
