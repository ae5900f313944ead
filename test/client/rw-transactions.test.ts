/**
 * Read-write transactions end to end through the public client on simulated clusters (fixed seeds; a failure names
 * its seed): commit across partitions, rollback, read-your-writes, finished-tx errors, idempotent commit, and the tx
 * state map of every actor at each of its update points (issue 5 item 5), observed with held messages.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { NodeName, PartitionId, TxId } from '../../src/index.js';
import { keyIn, keysInDistinctPartitions, rejectsWith, type TestCluster, withSimCluster } from './support.js';

const T = 'accounts';

describe('RW transactions (simulated)', () => {
  it('put/get/commit across several partitions, read-your-writes, visible to later transactions', () =>
    withSimCluster('rw-basic', { partitions: 6 }, async (cluster, client) => {
      const keys = keysInDistinctPartitions(cluster, T, 4);
      const tx = await client.begin();
      for (const [i, key] of keys.entries()) await tx.put(T, key, i === 1 ? new Uint8Array([1, 2]) : { n: i });
      assert.deepEqual(await tx.get(T, keys[2]!), { n: 2 }, 'read-your-writes');
      assert.equal(await tx.get(T, 'missing'), undefined);
      await tx.remove(T, keys[3]!);
      assert.equal(await tx.get(T, keys[3]!), undefined, 'a removed key reads undefined in its tx');
      await tx.commit();
      const later = cluster.client('n2');
      const values = await later.transaction((t) => t.getAll(T, keys));
      // Byte values come back as Buffers (a Uint8Array subclass), whichever path served the read.
      assert.deepEqual(values, [{ n: 0 }, Buffer.from([1, 2]), { n: 2 }, undefined]);
    }));

  it('rollback discards every write and releases the locks', () =>
    withSimCluster('rw-rollback', {}, async (_cluster, client) => {
      await client.put(T, 'a', 1);
      const tx = await client.begin();
      await tx.put(T, 'a', 2);
      await tx.put(T, 'b', 3);
      await tx.rollback();
      assert.equal(await client.get(T, 'a'), 1);
      assert.equal(await client.get(T, 'b'), undefined);
      // The locks are gone: another tx writes the same keys at once.
      await client.transaction(async (t) => {
        await t.put(T, 'a', 4);
        await t.put(T, 'b', 5);
      });
      assert.equal(await client.get(T, 'a'), 4);
      await tx.rollback();
    }));

  it('operations after commit fail TX_ALREADY_FINISHED; commit repeated is idempotent; commit after rollback fails', () =>
    withSimCluster('rw-finished', {}, async (_cluster, client) => {
      const tx = await client.begin();
      await tx.put(T, 'x', 'v');
      await tx.commit();
      await tx.commit();
      await rejectsWith(tx.get(T, 'x'), 'TX_ALREADY_FINISHED');
      await rejectsWith(tx.put(T, 'x', 'w'), 'TX_ALREADY_FINISHED');
      await tx.rollback(); // a no-op once finished
      assert.equal(await client.get(T, 'x'), 'v');
      const rolled = await client.begin();
      await rolled.put(T, 'y', 1);
      await rolled.rollback();
      await rejectsWith(rolled.commit(), 'TX_ALREADY_FINISHED');
      await rejectsWith(client.begin({ stalenessMs: 100 }), 'INVALID_ARGUMENT');
      await rejectsWith(client.put('nope', 'k', 1), 'UNKNOWN_TABLE');
    }));

  it('scan returns the committed rows of a range in key order, with the tx own writes', () =>
    withSimCluster('rw-scan', { partitions: 4 }, async (_cluster, client) => {
      for (const k of ['p:1', 'p:2', 'p:3', 'q:1']) await client.put(T, k, k);
      const rows = await client.transaction(async (tx) => {
        await tx.put(T, 'p:4', 'p:4');
        return tx.scan(T, { prefix: 'p:' });
      });
      assert.deepEqual(
        rows.map((r) => r.key),
        ['p:1', 'p:2', 'p:3', 'p:4'],
      );
    }));
});

// ------------------------------------------------------------------------------------------ tx state map

/**
 * Partitions A (commit) and B with different primaries, and a coordinator and a bystander that host neither, on 6
 * nodes.
 */
interface Roles {
  readonly keyA: string;
  readonly keyB: string;
  readonly a: PartitionId;
  readonly b: PartitionId;
  readonly coordinator: NodeName;
  readonly bystander: NodeName;
}

function chooseRoles(cluster: TestCluster): Roles {
  const partitions = [...new Set(Array.from({ length: 200 }, (_, i) => cluster.placement(T, `r${i}`).partition))];
  for (const a of partitions) {
    for (const b of partitions) {
      if (a === b) continue;
      const keyA = keyIn(cluster, T, (p) => p === a, 'r');
      const keyB = keyIn(cluster, T, (p) => p === b, 'r');
      const [pa, pb] = [cluster.placement(T, keyA), cluster.placement(T, keyB)];
      // B's primary plays no role in A (one test holds what A's primary sends to it).
      if (pb.primary === undefined || pa.replicas.includes(pb.primary)) continue;
      const involved = new Set([...pa.replicas, ...pb.replicas]);
      const outside = cluster.nodes.filter((n) => !involved.has(n));
      if (outside.length >= 2) return { keyA, keyB, a, b, coordinator: outside[0]!, bystander: outside[1]! };
    }
  }
  throw new Error('no two partitions leave two nodes outside');
}

function stateOf(cluster: TestCluster, node: NodeName, txId: TxId): string | undefined {
  return cluster.node(node).txState(txId)?.state;
}

function replicaRoles(cluster: TestCluster, key: string): { primary: NodeName; backups: NodeName[] } {
  const { primary, replicas } = cluster.placement(T, key);
  assert.ok(primary !== undefined, `the partition of ${key} has a primary`);
  return { primary, backups: replicas.filter((r) => r !== primary) };
}

describe('tx state map update points (simulated, 6 nodes)', () => {
  const options = { nodes: 6, partitions: 6, replicas: 3 };

  it('coordinator: PENDING at begin with its own ephemeral id; nobody else has an entry', () =>
    withSimCluster('map-begin', options, async (cluster) => {
      const roles = chooseRoles(cluster);
      const tx = await cluster.client(roles.coordinator).begin();
      assert.deepEqual(cluster.node(roles.coordinator).txState(tx.id), {
        state: 'PENDING',
        coordinatorId: cluster.node(roles.coordinator).ephemeralId,
      });
      for (const n of cluster.nodes) if (n !== roles.coordinator) assert.equal(stateOf(cluster, n, tx.id), undefined);
      await tx.rollback();
    }));

  it('enlisted primary PENDING on touch; backups PENDING once the replicated update applied', () =>
    withSimCluster('map-touch', options, async (cluster) => {
      const roles = chooseRoles(cluster);
      const tx = await cluster.client(roles.coordinator).begin();
      await tx.put(T, roles.keyA, 1);
      const a = replicaRoles(cluster, roles.keyA);
      const coordinatorId = cluster.node(roles.coordinator).ephemeralId;
      assert.deepEqual(cluster.node(a.primary).txState(tx.id), { state: 'PENDING', coordinatorId });
      await cluster.waitFor(() => a.backups.every((n) => stateOf(cluster, n, tx.id) === 'PENDING'), {
        what: 'backups PENDING',
      });
      for (const n of a.backups) assert.equal(cluster.node(n).txState(tx.id)?.coordinatorId, coordinatorId);
      // A read touches too: B's primary gets PENDING from a get alone (its backups see no replicated command).
      await tx.get(T, roles.keyB);
      const b = replicaRoles(cluster, roles.keyB);
      assert.equal(stateOf(cluster, b.primary, tx.id), 'PENDING');
      assert.equal(stateOf(cluster, roles.bystander, tx.id), undefined);
      await tx.rollback();
    }));

  it('with TxFinishRequest held the coordinator is FINISHING with a commitTs while replicas are PENDING; then every actor is final with the same commitTs', () =>
    withSimCluster('map-finish', options, async (cluster) => {
      const roles = chooseRoles(cluster);
      const tx = await cluster.client(roles.coordinator).begin();
      await tx.put(T, roles.keyA, 'a'); // A is the commit partition (first enlisted)
      await tx.put(T, roles.keyB, 'b');
      const a = replicaRoles(cluster, roles.keyA);
      const b = replicaRoles(cluster, roles.keyB);
      const replicas = [a.primary, ...a.backups, b.primary, ...b.backups];
      await cluster.waitFor(() => replicas.every((n) => stateOf(cluster, n, tx.id) === 'PENDING'));

      const held = cluster.network.hold({ kind: 'TxFinishRequest' });
      const commit = tx.commit();
      await cluster.waitFor(() => held.heldCount > 0, { what: 'finish request held' });
      const finishing = cluster.node(roles.coordinator).txState(tx.id);
      assert.equal(finishing?.state, 'FINISHING');
      const commitTs = finishing?.commitTimestamp;
      assert.ok(commitTs !== undefined && commitTs > 0n, 'commitTs chosen with FINISHING');
      for (const n of replicas) assert.equal(stateOf(cluster, n, tx.id), 'PENDING', `${n} still PENDING`);

      held.release();
      await commit;
      const final = { state: 'COMMITTED', commitTimestamp: commitTs };
      const view = (n: NodeName) => {
        const s = cluster.node(n).txState(tx.id);
        return s === undefined ? undefined : { state: s.state, commitTimestamp: s.commitTimestamp };
      };
      assert.deepEqual(view(roles.coordinator), final, 'coordinator final from the finish response');
      assert.deepEqual(view(a.primary), final, 'commit partition primary final');
      await cluster.waitFor(() => view(b.primary)?.state === 'COMMITTED', {
        what: 'enlisted primary final on cleanup',
      });
      assert.deepEqual(view(b.primary), final, 'enlisted primary final after its cleanup');
      await cluster.waitFor(() => replicas.every((n) => view(n)?.state === 'COMMITTED'), {
        what: 'every backup final',
      });
      for (const n of replicas) assert.deepEqual(view(n), final, `${n} final with the same commitTs`);
      assert.equal(view(roles.bystander), undefined, 'a node with no role has no entry');
    }));

  it('with TxCleanupRequest held: the commit partition (primary and backups) is final once FinishTx applied and the coordinator final from the finish response, the other enlisted partition still PENDING', () =>
    withSimCluster('map-cleanup', options, async (cluster) => {
      const roles = chooseRoles(cluster);
      const tx = await cluster.client(roles.coordinator).begin();
      await tx.put(T, roles.keyA, 'a');
      await tx.put(T, roles.keyB, 'b');
      const a = replicaRoles(cluster, roles.keyA);
      const b = replicaRoles(cluster, roles.keyB);
      await cluster.waitFor(() => [...b.backups, ...a.backups].every((n) => stateOf(cluster, n, tx.id) === 'PENDING'));
      const held = cluster.network.hold({ kind: 'TxCleanupRequest', from: a.primary, to: b.primary });
      const commit = tx.commit();
      await cluster.waitFor(() => held.heldCount > 0, { what: 'cleanup request to B held' });
      await cluster.waitFor(() => a.backups.every((n) => stateOf(cluster, n, tx.id) === 'COMMITTED'), {
        what: 'commit partition backups final from the applied FinishTx',
      });
      const commitTs = cluster.node(roles.coordinator).txState(tx.id)?.commitTimestamp;
      await commit;
      assert.equal(
        stateOf(cluster, roles.coordinator, tx.id),
        'COMMITTED',
        'the finish answer does not wait for cleanup',
      );
      for (const n of [a.primary, ...a.backups]) {
        assert.equal(cluster.node(n).txState(tx.id)?.commitTimestamp, commitTs, `${n} has the coordinator's commitTs`);
      }
      const bOnly = [b.primary, ...b.backups].filter((n) => n !== a.primary && !a.backups.includes(n));
      assert.ok(bOnly.includes(b.primary), "B's primary plays no role in A");
      for (const n of bOnly) assert.equal(stateOf(cluster, n, tx.id), 'PENDING', `${n} (B only) still PENDING`);
      held.release();
      await cluster.waitFor(() => stateOf(cluster, b.primary, tx.id) === 'COMMITTED', {
        what: "B's primary final on cleanup",
      });
      await cluster.waitFor(() => bOnly.every((n) => stateOf(cluster, n, tx.id) === 'COMMITTED'), {
        what: "B's backups final once the intent switch applied",
      });
    }));

  it('rollback: every actor ends ABORTED without a commitTs', () =>
    withSimCluster('map-rollback', options, async (cluster) => {
      const roles = chooseRoles(cluster);
      const tx = await cluster.client(roles.coordinator).begin();
      await tx.put(T, roles.keyA, 'a');
      await tx.put(T, roles.keyB, 'b');
      await tx.rollback();
      const a = replicaRoles(cluster, roles.keyA);
      const b = replicaRoles(cluster, roles.keyB);
      const actors = [roles.coordinator, a.primary, ...a.backups, b.primary, ...b.backups];
      await cluster.waitFor(() => actors.every((n) => stateOf(cluster, n, tx.id) === 'ABORTED'), {
        what: 'every actor ABORTED',
      });
      for (const n of actors) assert.equal(cluster.node(n).txState(tx.id)?.commitTimestamp, undefined);
      assert.equal(stateOf(cluster, roles.bystander, tx.id), undefined);
    }));

  it('one-phase put: the coordinator keeps COMMITTED, no replica gets an entry, the value is written', () =>
    withSimCluster('map-one-phase', options, async (cluster) => {
      const roles = chooseRoles(cluster);
      const client = cluster.client(roles.coordinator);
      const before = cluster.nodes.map((n) => cluster.node(n).metrics().txStateEntries);
      await client.put(T, roles.keyA, 42);
      await cluster.runFor(200);
      const after = cluster.nodes.map((n) => cluster.node(n).metrics().txStateEntries);
      cluster.nodes.forEach((n, i) => {
        const expected = n === roles.coordinator ? before[i]! + 1 : before[i]!;
        assert.equal(after[i], expected, `${n} map entries`);
      });
      assert.equal(await client.get(T, roles.keyA), 42);
    }));
});
