/**
 * Dropping a table frees what its partitions stored on every replica: rows, intents and tx state in the storage
 * engine and the Raft logs, on the replicas that were running (removed as the drop applies) and on a replica that was
 * down during the drop (removed when it restarts and learns the table is gone), while another table's data stays.
 * Transactions still open on a dropped table end with a coded error instead of hanging.
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { tablePartitionId } from '../../src/core/partitioning.js';
import type { PartitionId, TableDescriptor } from '../../src/index.js';
import { isBasaltError } from '../../src/index.js';
import { type TestCluster, withSimCluster } from './support.js';

const KEEP = 'accounts';
const DOOMED = 'doomed';

function partitionsOf(table: TableDescriptor): PartitionId[] {
  return Array.from({ length: table.partitions }, (_, i) => tablePartitionId(table.id, i));
}

/** What node `name` still stores of `partitions`: in its storage engine (any table) and its Raft log. */
function storedOn(cluster: TestCluster, name: string, partitions: readonly PartitionId[]): string[] {
  const node = cluster.basaltNode(name)!;
  const engine = node.storage.partitions().filter((p) => partitions.includes(p));
  const log = node.logStorage.groups().filter((p) => partitions.includes(p));
  return [...engine.map((p) => `engine ${p}`), ...log.map((p) => `log ${p}`)];
}

it('simulated: a dropped table leaves no rows, tx state or log on any replica, also one down during the drop', () =>
  withSimCluster('drop-frees-storage', { partitions: 2 }, async (cluster, client) => {
    const doomed = await client.createTable(DOOMED, { partitions: 3, replicas: 3 });
    const doomedPartitions = partitionsOf(doomed);
    // Transactions whose first write is in the doomed table keep their tx state records there.
    for (let i = 0; i < 6; i++) {
      await client.transaction(async (tx) => {
        await tx.put(DOOMED, `d${i}`, i);
        await tx.put(KEEP, `k${i}`, i);
      });
    }
    for (const name of cluster.nodes) {
      assert.deepEqual(
        cluster
          .basaltNode(name)!
          .storage.partitions()
          .filter((p) => doomedPartitions.includes(p)),
        doomedPartitions,
        `${name} stores every doomed partition before the drop`,
      );
      for (const p of doomedPartitions) {
        assert.ok(cluster.basaltNode(name)!.storage.mvPartition(p).lastApplied().index > 0);
      }
    }
    const committedThere = doomedPartitions.flatMap((p) =>
      cluster.basaltNode('n1')!.storage.txStatePartition(p).records(undefined),
    );
    assert.ok(committedThere.length > 0, 'tx state records live in the doomed partitions');

    // n3 misses the drop; n1 and n2 remove their replicas as it applies.
    await cluster.stopNode('n3');
    await client.dropTable(DOOMED);
    for (const name of ['n1', 'n2']) {
      await cluster.waitFor(() => storedOn(cluster, name, doomedPartitions).length === 0, {
        what: `${name} removed the stored state of the dropped partitions`,
      });
    }
    await cluster.startNode('n3');
    await cluster.waitFor(() => cluster.basaltNode('n3')!.metastorage.table(DOOMED) === undefined, {
      what: 'n3 learns of the drop',
    });
    await cluster.waitFor(() => storedOn(cluster, 'n3', doomedPartitions).length === 0, {
      what: 'n3 removes what it stored of the dropped table on restart',
    });

    // A restart of a node that removed its replicas during the drop does not bring them back.
    await cluster.stopNode('n1');
    await cluster.startNode('n1');
    await cluster.waitFor(() => cluster.basaltNode('n1')!.hostedPartitions().size === 2, {
      what: 'n1 hosts the kept table again',
    });
    for (const name of cluster.nodes) assert.deepEqual(storedOn(cluster, name, doomedPartitions), []);
    for (const p of doomedPartitions) {
      const engine = cluster.basaltNode('n1')!.storage;
      assert.deepEqual(engine.mvPartition(p).lastApplied(), { index: 0, term: 0 });
      assert.deepEqual(engine.txStatePartition(p).records(undefined), []);
    }

    // The other table's replicas kept everything.
    const kept = await client.transaction((tx) => tx.getAll(KEEP, ['k0', 'k1', 'k2', 'k3', 'k4', 'k5']), {
      retries: 30,
    });
    assert.deepEqual(kept, [0, 1, 2, 3, 4, 5]);
    const keptPartitions = cluster.nodes.map((n) => storedOn(cluster, n, partitionsOf(cluster.tables()[0]!)));
    for (const stored of keptPartitions) assert.equal(stored.length, 4, 'two partitions in engine and log each');
  }));

it('simulated: transactions open on a table when it is dropped end with a coded error, not a hang', () =>
  withSimCluster('drop-open-tx', { partitions: 2 }, async (cluster, client) => {
    await client.createTable(DOOMED, { partitions: 2, replicas: 3 });
    await client.put(DOOMED, 'seed', 1);
    const writers = [];
    for (const key of ['a', 'b', 'c']) {
      const tx = await client.begin();
      await tx.put(DOOMED, key, 1);
      writers.push(tx);
    }
    const reader = await client.begin();
    assert.equal(await reader.get(DOOMED, 'seed'), 1);

    await client.dropTable(DOOMED);
    const startMs = cluster.simulation!.nowMs();
    const commits = await Promise.all(writers.map((tx) => codeOf(tx.commit())));
    const elapsedMs = cluster.simulation!.nowMs() - startMs;
    for (const code of commits) {
      // The commit partition is gone with the table: whatever the coordinator learned, it reports it as a code.
      assert.ok(['UNKNOWN_TABLE', 'TX_ABORTED', 'TX_OUTCOME_UNKNOWN'].includes(code), `commit ended with ${code}`);
    }
    assert.ok(elapsedMs < 30_000, `the commits settled after ${elapsedMs} ms of virtual time`);
    assert.equal(await codeOf(reader.get(DOOMED, 'seed')), 'UNKNOWN_TABLE');
    assert.equal(await codeOf(reader.put(DOOMED, 'd', 1)), 'UNKNOWN_TABLE');
    await reader.rollback();
    assert.equal(await codeOf(client.get(DOOMED, 'seed')), 'UNKNOWN_TABLE');
  }));

/** The code of the BasaltError `promise` rejects with ('resolved' if it does not reject; 'uncoded' for others). */
async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
    return 'resolved';
  } catch (error) {
    return isBasaltError(error) ? error.code : `uncoded ${String(error)}`;
  }
}
