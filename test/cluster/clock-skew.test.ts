/**
 * Rule 19 end to end (simulated, fixed seeds): a node whose clock is set 2·maxClockSkew ahead measures that from its
 * heartbeats, stops acting as primary (its partitions' leases move to other nodes, and transactions go on through
 * them) and as coordinator (its client's RW and RO begin fail CLOCK_SKEW, retryably), and resumes once its clock is
 * reset. An offset within the bound changes nothing. Rule 8: a node whose clock jumps minutes ahead cannot drag the
 * others' clocks with it (its messages are refused and counted), and the healthy nodes go on serving transactions.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LIMITS } from '../../src/core/limits.js';
import { physicalMs } from '../../src/hlc/timestamp.js';
import type { Client, Cluster, NodeName } from '../../src/index.js';
import { isBasaltError, startCluster } from '../../src/index.js';

const T = 'accounts';
const SKEW_MS = LIMITS.maxClockSkewMsDefault;

async function withCluster(seed: string, body: (cluster: Cluster<Client>) => Promise<void>): Promise<void> {
  const cluster = await startCluster({ simulation: { seed }, nodes: 3 });
  try {
    await cluster.client().createTable(T, { partitions: 4, replicas: 3 });
    await body(cluster);
  } catch (error) {
    if (error instanceof Error) error.message = `[seed ${seed}] ${error.message}`;
    throw error;
  } finally {
    await cluster.stop().catch(() => {});
  }
}

/** One key per partition of the table. */
function keysPerPartition(cluster: Cluster<Client>): string[] {
  const seen = new Map<string, string>();
  for (let i = 0; seen.size < 4 && i < 10_000; i++) {
    const key = `k${i}`;
    const p = cluster.placement(T, key).partition;
    if (!seen.has(p)) seen.set(p, key);
  }
  return [...seen.values()];
}

async function writeAll(client: Client, keys: readonly string[], value: number): Promise<void> {
  await client.transaction(
    async (tx) => {
      for (const key of keys) await tx.put(T, key, value);
    },
    { retries: 20, backoffMsMin: 20, backoffMsMax: 200 },
  );
}

function primaries(cluster: Cluster<Client>, keys: readonly string[]): (NodeName | undefined)[] {
  return keys.map((key) => cluster.placement(T, key).primary);
}

describe('rule 19: clock offsets measured from heartbeats (simulated)', () => {
  it('a node 2·maxClockSkew ahead stops acting as primary and coordinator, and resumes once reset', () =>
    withCluster('clock-skew-ahead', async (cluster) => {
      const keys = keysPerPartition(cluster);
      await cluster.waitFor(() => primaries(cluster, keys).every((p) => p !== undefined), { what: 'primaries' });
      const skewed = (primaries(cluster, keys).find((p) => p !== 'n1') ?? 'n2') as NodeName;
      await cluster.runFor(2_000);
      for (const n of cluster.nodes) {
        const clock = cluster.node(n).metrics().clock;
        assert.equal(clock.withinBound, true, `${n} within the bound at start`);
        for (const offset of Object.values(clock.offsetsMs)) assert.ok(Math.abs(offset) < 50, `${n} offset ${offset}`);
      }

      cluster.setClockOffset(skewed, 2 * SKEW_MS);
      await cluster.waitFor(() => !cluster.node(skewed).metrics().clock.withinBound, {
        what: `${skewed} sees its clock beyond the bound`,
        timeoutMs: 5_000,
      });
      // Each node's samples turn over on its own heartbeats: the others see the step within a window of their own.
      const others = cluster.nodes.filter((x) => x !== skewed);
      const sees = (n: NodeName): boolean => {
        const measured = cluster.node(n).metrics().clock.offsetsMs[skewed];
        return measured !== undefined && Math.abs(measured - 2 * SKEW_MS) < 50;
      };
      await cluster.waitFor(() => others.every(sees), {
        what: `the others measure ${skewed}'s offset`,
        timeoutMs: 5_000,
      });
      for (const n of others) {
        const clock = cluster.node(n).metrics().clock;
        assert.equal(clock.withinBound, true, `${n} stays within`);
        const measured = clock.offsetsMs[skewed];
        assert.ok(measured !== undefined && Math.abs(measured - 2 * SKEW_MS) < 50, `${n} measures ${measured}`);
      }
      const refused = await cluster
        .client(skewed)
        .begin()
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      assert.ok(isBasaltError(refused, 'CLOCK_SKEW'), `begin on ${skewed}: ${String(refused)}`);
      assert.equal(refused.retryable, true);
      const readOnly = await cluster
        .client(skewed)
        .begin({ readOnly: true })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      assert.ok(isBasaltError(readOnly, 'CLOCK_SKEW'), `RO begin on ${skewed}: ${String(readOnly)}`);

      await cluster.waitFor(() => primaries(cluster, keys).every((p) => p !== undefined && p !== skewed), {
        what: `every lease moved off ${skewed}`,
        timeoutMs: 30_000,
      });
      const other = cluster.nodes.find((n) => n !== skewed)!;
      await writeAll(cluster.client(other), keys, 1);
      const values = await cluster.client(other).transaction((tx) => tx.getAll(T, keys));
      assert.deepEqual(values, [1, 1, 1, 1]);

      cluster.setClockOffset(skewed, 0);
      await cluster.waitFor(() => cluster.node(skewed).metrics().clock.withinBound, {
        what: `${skewed} back within the bound`,
        timeoutMs: 5_000,
      });
      await writeAll(cluster.client(skewed), keys, 2);
      const after = await cluster.client(skewed).transaction((tx) => tx.getAll(T, keys));
      assert.deepEqual(after, [2, 2, 2, 2]);
    }));

  it('an offset within the bound changes nothing: the node keeps its leases and begins transactions', () =>
    withCluster('clock-skew-within', async (cluster) => {
      const keys = keysPerPartition(cluster);
      await cluster.waitFor(() => primaries(cluster, keys).every((p) => p !== undefined), { what: 'primaries' });
      const before = primaries(cluster, keys);
      const node = before[0]!;
      cluster.setClockOffset(node, Math.floor(0.8 * SKEW_MS));
      await cluster.runFor(3_000);
      assert.equal(cluster.node(node).metrics().clock.withinBound, true);
      const measured = cluster.node(nodeOtherThan(cluster, node)).metrics().clock.offsetsMs[node];
      assert.ok(measured !== undefined && Math.abs(measured - 0.8 * SKEW_MS) < 50, `measured ${measured}`);
      await writeAll(cluster.client(node), keys, 3);
      assert.deepEqual(primaries(cluster, keys), before, 'no lease moved');
    }));
});

/** How far `node`'s hybrid clock reads ahead of its own physical clock, in ms. */
function hlcLeadMs(cluster: Cluster<Client>, node: NodeName): number {
  const n = cluster.basaltNode(node)!;
  return physicalMs(n.hlc.now()) - n.clock.nowMs();
}

describe('rule 8: a runaway clock is refused, not absorbed (simulated)', () => {
  it('a node jumping 5 minutes ahead leaves the other clocks within the bound while they serve transactions', () =>
    withCluster('clock-skew-runaway', async (cluster) => {
      const keys = keysPerPartition(cluster);
      await cluster.waitFor(() => primaries(cluster, keys).every((p) => p !== undefined), { what: 'primaries' });
      const runaway = (primaries(cluster, keys).find((p) => p !== 'n1') ?? 'n2') as NodeName;
      const healthy = cluster.nodes.filter((n) => n !== runaway);
      await writeAll(cluster.client(healthy[0]!), keys, 0);

      cluster.setClockOffset(runaway, 5 * 60_000);
      let committed = 0;
      for (let round = 1; round <= 20; round++) {
        const via = healthy[round % healthy.length]!;
        await writeAll(cluster.client(via), keys, round);
        committed++;
        await cluster.runFor(500);
        for (const n of healthy) {
          const lead = hlcLeadMs(cluster, n);
          assert.ok(lead <= SKEW_MS, `round ${round}: ${n}'s clock leads its physical clock by ${lead} ms`);
        }
      }
      assert.equal(committed, 20);
      const values = await cluster.client(healthy[0]!).transaction((tx) => tx.getAll(T, keys));
      assert.deepEqual(
        values,
        keys.map(() => 20),
      );
      assert.ok(hlcLeadMs(cluster, runaway) < SKEW_MS, 'the runaway node itself runs on its own (jumped) clock');
      const refused = healthy.map((n) => cluster.node(n).metrics().counters['clock.skewRefusals'] ?? 0);
      for (const [i, count] of refused.entries()) assert.ok(count > 0, `${healthy[i]} counted refusals: ${count}`);
      const own = cluster.node(runaway).metrics().counters['clock.skewRefusals'] ?? 0;
      assert.equal(own, 0, 'the healthy nodes are behind the runaway one, so it refuses nothing');
      assert.ok(
        primaries(cluster, keys).every((p) => p !== runaway),
        'every lease moved to the healthy nodes',
      );
    }));
});

function nodeOtherThan(cluster: Cluster<Client>, node: NodeName): NodeName {
  return cluster.nodes.find((n) => n !== node)!;
}
