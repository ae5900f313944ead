/**
 * Dropping a table frees what its partitions stored on every replica: rows, intents and tx state in the storage
 * engine and the Raft logs, on the replicas that were running (removed once the drop's grace has passed) and on a
 * replica that was down during the drop (removed when it restarts and learns the table is gone), while another
 * table's data stays. Until the grace has passed the dropped partitions keep serving finishes, cleanups and intent
 * resolutions, so a transaction committing right after the drop leaves no unresolvable intent on a kept table.
 * Transactions still open on a dropped table end with an outcome or a coded error instead of hanging.
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { LIMITS } from '../../src/core/limits.js';
import { tablePartitionId } from '../../src/core/partitioning.js';
import type { PartitionId, TableDescriptor } from '../../src/index.js';
import { isBasaltError } from '../../src/index.js';
import { type TestCluster, withSimCluster } from './support.js';

const KEEP = 'accounts';
const DOOMED = 'doomed';
/** How long a dropped table's partitions keep serving (tx timeout + 2·max clock skew), plus a margin. */
const PAST_GRACE_MS = LIMITS.txTimeoutMsDefault + 2 * LIMITS.maxClockSkewMsDefault + 1_000;

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

    // n3 misses the drop; n1 and n2 keep serving their replicas through the grace, then remove them.
    await cluster.stopNode('n3');
    await client.dropTable(DOOMED);
    assert.deepEqual(
      (await client.tables()).map((t) => t.name),
      [KEEP],
      'the dropped table is gone from the metadata at once',
    );
    await cluster.runFor(1_000);
    for (const name of ['n1', 'n2']) {
      assert.equal(storedOn(cluster, name, doomedPartitions).length, 6, `${name} still serves the retiring table`);
    }
    await cluster.runFor(PAST_GRACE_MS);
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
      // The commit partition retires with the table: the commit settles, committed or with a code.
      assert.ok(
        ['resolved', 'UNKNOWN_TABLE', 'TX_ABORTED', 'TX_OUTCOME_UNKNOWN'].includes(code),
        `commit ended with ${code}`,
      );
    }
    assert.ok(elapsedMs < 30_000, `the commits settled after ${elapsedMs} ms of virtual time`);
    assert.equal(await codeOf(reader.get(DOOMED, 'seed')), 'UNKNOWN_TABLE');
    assert.equal(await codeOf(reader.put(DOOMED, 'd', 1)), 'UNKNOWN_TABLE');
    await reader.rollback();
    assert.equal(await codeOf(client.get(DOOMED, 'seed')), 'UNKNOWN_TABLE');
  }));

it('simulated: a tx committing right after the drop of its commit partition leaves no stuck intent on a kept table', () =>
  withSimCluster('drop-commit-partition', { partitions: 2 }, async (cluster, client) => {
    const doomed = await client.createTable(DOOMED, { partitions: 2, replicas: 3 });
    await client.put(KEEP, 'kept', 0);
    const tx = await client.begin();
    // The first write picks the commit partition: in the table about to be dropped.
    await tx.put(DOOMED, 'd', 1);
    await tx.put(KEEP, 'kept', 1);
    await client.dropTable(DOOMED);

    const sim = cluster.simulation!;
    let startMs = sim.nowMs();
    const outcome = await codeOf(tx.commit());
    assert.ok(['resolved', 'TX_ABORTED', 'UNKNOWN_TABLE'].includes(outcome), `commit ended with ${outcome}`);
    assert.ok(sim.nowMs() - startMs < 10_000, `the commit settled after ${sim.nowMs() - startMs} ms`);

    startMs = sim.nowMs();
    const read = await client.transaction((t) => t.get(KEEP, 'kept'));
    assert.equal(read, outcome === 'resolved' ? 1 : 0, `the read agrees with the outcome ${outcome}`);
    assert.ok(sim.nowMs() - startMs < 5_000, `the read of the kept key took ${sim.nowMs() - startMs} ms`);
    await client.put(KEEP, 'kept', 2);
    assert.equal(await client.get(KEEP, 'kept'), 2);

    // Past the grace the dropped partitions are destroyed; the kept table is unaffected.
    await cluster.runFor(PAST_GRACE_MS);
    await cluster.waitFor(() => cluster.nodes.every((n) => storedOn(cluster, n, partitionsOf(doomed)).length === 0), {
      what: 'the dropped partitions are removed after the grace',
    });
    assert.equal(await client.get(KEEP, 'kept'), 2);
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
