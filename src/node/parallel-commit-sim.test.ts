/**
 * Parallel commit end to end (coordinator setting `parallelCommit`; DESIGN §4b "Fewer rounds per commit"), on
 * simulated clusters: a transaction writing two partitions commits with a committing record sent while its writes
 * are confirmed, and the record ends COMMITTED everywhere; a coordinator that dies between its committing record and
 * its confirmation leaves a tx whose outcome the commit partition decides by checking the writes. Each case replays
 * from its seed.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { PartitionId, TxId } from '../core/ids.js';
import type { Cluster } from '../harness/cluster.js';
import { type Client, startCluster } from '../index.js';

const T = 't';

/** Two keys on two partitions whose primaries are not `coordinator` (so their requests cross the network). */
function keysElsewhere(cluster: Cluster<Client>, coordinator: string): [string, string] {
  const found = new Map<PartitionId, string>();
  for (let i = 0; found.size < 2 && i < 1_000; i++) {
    const key = `k${i}`;
    const { partition, primary } = cluster.placement(T, key);
    if (primary !== undefined && primary !== coordinator && !found.has(partition)) found.set(partition, key);
  }
  const keys = [...found.values()];
  assert.equal(keys.length, 2, 'two partitions with primaries elsewhere');
  return [keys[0]!, keys[1]!];
}

/** What each case starts from. */
interface Accounts {
  readonly cluster: Cluster<Client>;
  /** A client coordinated by n1. */
  readonly client: Client;
  /** Keys of two partitions whose primaries are not n1, holding 10 and 0. */
  readonly a: string;
  readonly b: string;
}

/** A simulated 3-node cluster whose coordinators commit in parallel, two accounts written, then `body`; stopped after. */
async function withAccounts(seed: string, body: (s: Accounts) => Promise<void>): Promise<void> {
  const cluster = await startCluster({ simulation: { seed }, nodes: 3, coordinator: { parallelCommit: true } });
  try {
    await cluster.createTable(T, { partitions: 4, replicas: 3 });
    const client = cluster.client('n1');
    const [a, b] = keysElsewhere(cluster, 'n1');
    await client.put(T, a, 10);
    await client.put(T, b, 0);
    await body({ cluster, client, a, b });
  } finally {
    await cluster.stop();
  }
}

/** A counter summed over the running nodes. */
function counter(cluster: Cluster<Client>, name: string): number {
  let sum = 0;
  for (const n of cluster.nodes) sum += cluster.basaltNode(n)?.metrics().counters[name] ?? 0;
  return sum;
}

test('simulated parallel commit: a two-partition write commits with a committing record, which ends COMMITTED on every replica of its commit partition', () =>
  withAccounts('parallel-commit-basic', async ({ cluster, client, a, b }) => {
    let txId: TxId | undefined;
    await client.transaction(async (tx) => {
      txId = tx.id;
      const x = (await tx.get(T, a, { forUpdate: true })) as number;
      const y = (await tx.get(T, b, { forUpdate: true })) as number;
      await tx.put(T, a, x - 3);
      await tx.put(T, b, y + 3);
    });
    assert.equal(counter(cluster, 'coordinator.parallelCommits'), 1, 'the commit went in parallel');
    assert.equal(counter(cluster, 'finish.committingRecords'), 1, 'one committing record was stored');
    assert.equal(counter(cluster, 'coordinator.parallelCommitChecks'), 0, 'every write was confirmed');
    // The caller was told at once; the coordinator's map goes final only once COMMITTED replaced the record.
    assert.equal(cluster.basaltNode('n1')!.txState(txId!)?.state, 'FINISHING');
    assert.deepEqual([await client.get(T, a), await client.get(T, b)], [7, 3]);
    // The confirmation replaced the record with COMMITTED: every node's map learns it from the applied finish.
    await cluster.waitFor(
      () => cluster.nodes.every((n) => cluster.basaltNode(n)!.txState(txId!)?.state === 'COMMITTED'),
      {
        what: 'COMMITTED on every node',
      },
    );
  }));

test('simulated parallel commit: the coordinator crashes after its committing record is stored, before its writes are confirmed; a reader finds the tx COMMITTED, decided by a check of its writes', () =>
  withAccounts('parallel-commit-crash', async ({ cluster, client, a, b }) => {
    const tx = await client.begin();
    await tx.put(T, a, 7);
    await tx.put(T, b, 3);
    // The confirmations never get through: the coordinator cannot learn that its writes applied.
    const held = cluster.network.hold({ kind: 'WriteConfirmRequest', from: 'n1' });
    const commit = tx.commit().then(
      () => 'committed',
      () => 'failed',
    );
    await cluster.waitFor(() => counter(cluster, 'finish.committingRecords') === 1, {
      what: 'the committing record stored',
    });
    assert.ok(held.heldCount >= 1, 'the confirmations are held');
    await cluster.stopNode('n1');
    void commit;
    // A reader elsewhere meets the intents. Their coordinator is gone, so the commit partition settles the record
    // by checking the writes: both applied, so the tx committed (its coordinator might have reported it committed).
    const reader = cluster.client('n2');
    let values: unknown[] | undefined;
    for (let attempt = 0; values === undefined && attempt < 20; attempt++) {
      try {
        values = [await reader.get(T, a), await reader.get(T, b)];
      } catch {
        await cluster.runFor(1_000);
      }
    }
    assert.deepEqual(values, [7, 3]);
    assert.equal(counter(cluster, 'committing.settledCommitted'), 1, 'settled COMMITTED by a check of the writes');
    assert.equal(counter(cluster, 'committing.settledAborted'), 0);
  }));

test("simulated parallel commit: while the confirmation is held, no request switches an intent of the committed tx on its coordinator's word; the coordinator dies, the record is settled COMMITTED and both writes stay", () =>
  withAccounts('parallel-commit-held-confirmation', async ({ cluster, client, a, b }) => {
    const tx = await client.begin();
    await tx.put(T, a, 7);
    await tx.put(T, b, 3);
    // The committing record goes through; nothing n1 sends as a finish after it does: its confirmation never
    // replaces the record.
    const first = cluster.network.hold({ kind: 'TxFinishRequest', from: 'n1' });
    const commit = tx.commit();
    await cluster.waitFor(() => first.heldCount === 1, { what: 'the committing record sent' });
    first.release();
    const held = cluster.network.hold({ kind: 'TxFinishRequest', from: 'n1' });
    await commit;
    assert.equal(counter(cluster, 'finish.committingRecords'), 1);
    // Another node's transaction writes one of the keys: it meets the committed tx's lock and intent while the record
    // is still committing and the coordinator alive, long enough for its lock waits to look the holder up.
    const writer = cluster
      .client('n2')
      .transaction((w) => w.put(T, b, 100))
      .then(
        () => 'written',
        (e: unknown) => `failed: ${String(e)}`,
      );
    await cluster.runFor(10_000);
    assert.ok(held.heldCount >= 1, 'the confirmation is held');
    await cluster.stopNode('n1');
    // The coordinator is gone: the record is settled by a check of the writes (the tx sweep, or whoever meets it).
    for (let waited = 0; waited < 120 && counter(cluster, 'committing.settledCommitted') === 0; waited++) {
      if (counter(cluster, 'committing.settledAborted') > 0) break;
      await cluster.runFor(1_000);
    }
    assert.equal(counter(cluster, 'committing.settledAborted'), 0, 'a committed tx is never settled ABORTED');
    assert.equal(counter(cluster, 'committing.settledCommitted'), 1);
    assert.equal(await writer, 'written');
    assert.equal(await cluster.client('n3').get(T, a), 7, 'the write the caller was told is committed is there');
    assert.equal(await cluster.client('n3').get(T, b), 100);
  }));
