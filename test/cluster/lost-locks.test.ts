/**
 * A read-write request that meets a foreign write intent without its lock (issue 6 item 3; ignite3-protocol.md §8),
 * simulated over fixed seeds. T1 (coordinated on n1) writes a key, then the key's primary changes (its Raft traffic
 * is cut until another replica holds the lease, or its node crashes): the new primary never saw T1's locks. T2 then
 * reads and writes the key: the new primary asks T1's coordinator with the read-write flavour, which aborts T1 (still
 * pending), switches T1's intent through Raft and serves T2, which commits; T1's commit then fails TX_ABORTED. An
 * intent whose tx committed but whose cleanup has not reached the partition yet is read as committed.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { NodeName } from '../../src/index.js';
import { isBasaltError } from '../../src/index.js';
import { keyIn, type TestCluster, withSimCluster } from '../client/support.js';

const T = 'accounts';

/** A key whose primary is neither n1 (the coordinator) nor `avoid`, and that primary. */
function remoteKey(cluster: TestCluster): { key: string; primary: NodeName } {
  const key = keyIn(cluster, T, (p) => {
    const primary = cluster.placement(
      T,
      keyIn(cluster, T, (q) => q === p),
    ).primary;
    return primary !== undefined && primary !== 'n1';
  });
  const primary = cluster.placement(T, key).primary;
  assert.ok(primary !== undefined);
  return { key, primary };
}

async function leaseMovedFrom(cluster: TestCluster, key: string, node: NodeName): Promise<void> {
  await cluster.waitFor(
    () => {
      const p = cluster.placement(T, key).primary;
      return p !== undefined && p !== node;
    },
    { what: 'another replica holds the lease', timeoutMs: 60_000 },
  );
}

/** Cuts `node` off from the Raft traffic of `key`'s partition until another replica holds its lease. */
async function moveLeaseAway(cluster: TestCluster, key: string, node: NodeName): Promise<void> {
  const group = cluster.placement(T, key).partition;
  const cuts = [
    cluster.network.drop({ kind: 'Raft', group, from: node }),
    cluster.network.drop({ kind: 'Raft', group, to: node }),
  ];
  await leaseMovedFrom(cluster, key, node);
  for (const c of cuts) c.undo();
}

async function failureOf(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => undefined,
    (e: unknown) => e,
  );
}

describe('read-write requests meeting an intent whose locks were lost (simulated)', () => {
  for (const move of ['raft-cut', 'crash'] as const) {
    it(`T2 resolves T1's intent through T1's coordinator, which aborts T1 (primary change by ${move})`, () =>
      withSimCluster(`lost-locks-${move}`, {}, async (cluster, client) => {
        const { key, primary } = remoteKey(cluster);
        await client.put(T, key, 'initial');
        const t1 = await client.begin();
        await t1.put(T, key, 'from-t1');
        if (move === 'raft-cut') await moveLeaseAway(cluster, key, primary);
        else {
          await cluster.stopNode(primary);
          await leaseMovedFrom(cluster, key, primary);
        }
        const before = cluster.node('n1').metrics().counters['resolution.lostLocks.coordinator'] ?? 0;
        const t2 = await client.begin();
        assert.equal(await t2.get(T, key), 'initial', 'T1 aborted: the committed value is read');
        await t2.put(T, key, 'from-t2');
        await t2.commit();
        const resolvedOn = cluster.placement(T, key).primary!;
        const after = cluster.node(resolvedOn).metrics().counters['resolution.lostLocks.coordinator'] ?? 0;
        assert.ok(resolvedOn === 'n1' ? after > before : after > 0, 'resolved through the coordinator path');

        const commitError = await failureOf(t1.commit());
        assert.ok(isBasaltError(commitError, 'TX_ABORTED'), `T1's commit: ${String(commitError)}`);
        assert.equal(commitError.retryable, true);
        await cluster.waitFor(() => cluster.node('n1').txState(t1.id)?.state === 'ABORTED', {
          what: "T1's coordinator records the abort",
        });
        assert.equal(await client.get(T, key), 'from-t2');
        if (move === 'crash') await cluster.startNode(primary);
      }));
  }

  it('an intent of a committed tx whose cleanup has not reached the new primary is read as committed', () =>
    withSimCluster('lost-locks-committed', {}, async (cluster, client) => {
      const { key, primary } = remoteKey(cluster);
      // T1's commit partition is another partition with another primary, so its cleanup must cross the network.
      const first = keyIn(cluster, T, (p) => {
        const other = cluster.placement(
          T,
          keyIn(cluster, T, (q) => q === p),
        ).primary;
        return p !== cluster.placement(T, key).partition && other !== undefined && other !== primary;
      });
      const cleanups = cluster.network.drop({ kind: 'TxCleanupRequest' });
      const t1 = await client.begin();
      await t1.put(T, first, 'committed');
      await t1.put(T, key, 'committed');
      // The commit waits for its cleanups; it is stored (and applied on every replica of the commit partition) first.
      const commit = t1.commit();
      await cluster.waitFor(() => cluster.node(primary).txState(t1.id)?.state === 'COMMITTED', {
        what: 'T1 committed, its cleanup held',
      });
      await moveLeaseAway(cluster, key, primary);
      const t2 = await client.begin();
      assert.equal(await t2.get(T, key), 'committed');
      await t2.put(T, key, 'next');
      await t2.commit();
      const resolver = cluster.node(cluster.placement(T, key).primary!).metrics().counters;
      const lostLocks = Object.entries(resolver).filter(([name]) => name.startsWith('resolution.lostLocks.'));
      assert.ok(lostLocks.length > 0, 'the new primary resolved the intent itself');
      cleanups.undo();
      await cluster.drive(commit);
      assert.equal(await client.get(T, key), 'next');
    }));
});
