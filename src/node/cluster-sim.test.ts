/**
 * Simulated clusters: virtual time, one seed per run. A failure names its seed; rerun with it to replay.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { nodeName } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { tablePartitionId } from '../core/partitioning.js';
import { sleep } from '../env/timers.js';
import { Cluster, defaultNodeNames } from '../harness/cluster.js';
import { SimClusterEnvironment, startSimulatedCluster } from '../sim/cluster.js';
import type { NodeServiceFactory } from './basalt-node.js';
import { type PartitionHostFactory, PlaceholderPartitionHost } from './partition-host.js';

/** A dropped table's partitions are served for tx timeout + 2·max clock skew after the drop; this is past that. */
const PAST_DROP_GRACE_MS = LIMITS.txTimeoutMsDefault + 2 * LIMITS.maxClockSkewMsDefault + 1_000;

test('simulated: a table is created and every partition Raft group elects a leader', async () => {
  const cluster = await startSimulatedCluster({ seed: 'sim-create', nodes: 3 });
  const table = await cluster.createTable('accounts', { partitions: 6, replicas: 3 });
  for (let i = 0; i < table.partitions; i++) {
    assert.ok(cluster.leaderOf(tablePartitionId(table.id, i)) !== undefined, `partition ${i} has a leader`);
  }
  const hosted = cluster.nodes.map((n) => cluster.basaltNode(n)!.hostedPartitions().size);
  assert.deepEqual(hosted, [6, 6, 6]);
  await cluster.stop();
});

/** One scripted run: create, crash and restart a replica, create more; returns what a replay must reproduce. */
async function scriptedRun(seed: string): Promise<{ hash: string; ids: string[]; leaders: string[] }> {
  const cluster = await startSimulatedCluster({ seed, nodes: 4 });
  const ids = [cluster.node('n2').ephemeralId as string];
  await cluster.createTable('a', { partitions: 4, replicas: 3 });
  await cluster.stopNode('n2');
  await cluster.runFor(500);
  await cluster.startNode('n2');
  ids.push(cluster.node('n2').ephemeralId);
  await cluster.createTable('b', { partitions: 2, replicas: 2 });
  const leaders = ['meta', 't1p0', 't1p1', 't1p2', 't1p3', 't2p0', 't2p1'].map(
    (g) => cluster.leaderOf(g as never) ?? '-',
  );
  const hash = cluster.simulation!.traceHash();
  await cluster.stop();
  return { hash, ids, leaders };
}

test('simulated: the same seed replays the same trace hash, ids and leaders; another seed differs', async () => {
  const first = await scriptedRun('replay-1');
  const again = await scriptedRun('replay-1');
  assert.deepEqual(again, first, 'seed replay-1 must replay bit for bit');
  const other = await scriptedRun('replay-2');
  assert.notEqual(other.hash, first.hash);
});

test('simulated: a crashed node restarts with a new ephemeral id, keeps its durable data and rejoins', async () => {
  const env = new SimClusterEnvironment({ seed: 'crash-restart', names: defaultNodeNames(3) });
  const cluster = await Cluster.start(env, defaultNodeNames(3));
  const table = await cluster.createTable('t', { partitions: 3, replicas: 3 });
  const n1 = cluster.basaltNode('n1')!;
  const oldId = cluster.node('n3').ephemeralId;
  const disk = cluster.basaltNode('n3')!.logStorage;
  await cluster.stopNode('n3');
  assert.equal(cluster.basaltNode('n3'), undefined);
  assert.equal(n1.isGone(oldId), false, 'down but not yet for the liveness timeout: not gone');
  await cluster.waitFor(() => n1.isGone(oldId), { what: 'old id gone after the liveness timeout' });
  await cluster.startNode('n3');
  const n3 = cluster.basaltNode('n3')!;
  assert.notEqual(n3.ephemeralId, oldId);
  assert.equal(n3.logStorage, disk, 'the new incarnation runs on the same durable log');
  for (let i = 0; i < 3; i++) assert.ok(disk.load(tablePartitionId(table.id, i)).entries.length > 0);
  assert.ok(env.world.node('n3').incarnation === 2);
  // Its metastorage replica comes back from its own durable Raft log, and it hosts its partitions again.
  await cluster.waitFor(() => n3.metastorage.table('t')?.id === table.id && n3.hostedPartitions().size === 3, {
    what: 'n3 recovers the table and its partitions',
  });
  for (let i = 0; i < 3; i++) {
    const p = tablePartitionId(table.id, i);
    await cluster.waitFor(() => (n3.raft.status(p)?.commit ?? 0) > 0 && n3.raft.status(p)?.leader !== null, {
      what: `n3 follows a leader of ${p}`,
    });
  }
  await cluster.waitFor(() => n1.liveIdOf(n3.name) === n3.ephemeralId, { what: 'n1 sees n3 live with its new id' });
  assert.equal(n1.isGone(oldId), true);
  await cluster.stop();
});

test('simulated: nodes outside the metastorage group learn tables by watching and host their partitions', async () => {
  const cluster = await startSimulatedCluster({ seed: 'five-nodes', nodes: 5 });
  const table = await cluster.createTable('wide', { partitions: 5, replicas: 3 });
  for (const name of ['n4', 'n5']) {
    const node = cluster.basaltNode(name)!;
    assert.equal(node.metastorage.isMember, false);
    assert.equal(node.metastorage.table('wide')?.id, table.id);
  }
  const hosted = cluster.nodes.map((n) => cluster.basaltNode(n)!.hostedPartitions().size);
  assert.deepEqual(hosted, [3, 3, 3, 3, 3], 'fifteen replicas spread evenly over five nodes');
  await cluster.dropTable('wide');
  assert.deepEqual(cluster.tables(), []);
  const retiring = cluster.nodes.map((n) => cluster.basaltNode(n)!.hostedPartitions().size);
  assert.deepEqual(retiring, [3, 3, 3, 3, 3], 'a dropped table is served through its grace');
  await cluster.runFor(PAST_DROP_GRACE_MS);
  for (const name of cluster.nodes) assert.equal(cluster.basaltNode(name)!.hostedPartitions().size, 0);
  assert.equal(cluster.basaltNode('n5')!.raft.groupIds().length, 0, 'the dropped groups stopped on non-members');
  await cluster.stop();
});

test('simulated: hold, drop and count filter by kind, group, from and to', async () => {
  const cluster = await startSimulatedCluster({ seed: 'filters', nodes: 3 });
  const table = await cluster.createTable('t', { partitions: 1, replicas: 3 });
  const group = tablePartitionId(table.id, 0);
  const leader = cluster.leaderOf(group)!;
  const follower = cluster.nodes.find((n) => n !== leader)!;
  const before = cluster.network.count({ kind: 'Raft', group, from: leader, to: follower });
  await cluster.runFor(200);
  const after = cluster.network.count({ kind: 'Raft', group, from: leader, to: follower });
  assert.ok(after > before, 'heartbeats of the partition group are counted');
  assert.equal(cluster.network.count({ kind: 'NoSuchKind' }), 0);

  // Dropping every Raft message of the group to a follower: its commit index stops moving for that group only.
  const followerNode = cluster.basaltNode(follower)!;
  const dropped = cluster.network.drop({ kind: 'Raft', group, to: follower });
  const commitBefore = followerNode.raft.status(group)!.commit;
  const metaBefore = followerNode.raft.status('meta' as never)?.commit ?? 0;
  await cluster.createTable('u', { partitions: 1, replicas: 3 });
  assert.ok(dropped.droppedCount > 0);
  assert.equal(followerNode.raft.status(group)!.commit, commitBefore, 'nothing of the group reached it');
  assert.ok((followerNode.raft.status('meta' as never)?.commit ?? 0) > metaBefore, 'the meta group still flowed');
  dropped.undo();

  // Holding the watch/heartbeat traffic of one node: held messages wait for release.
  const held = cluster.network.hold({ kind: 'NodeHeartbeat', from: 'n1' });
  await cluster.runFor(1_000);
  assert.ok(held.heldCount > 0);
  const n = held.release();
  assert.equal(n > 0, true);
  assert.equal(held.heldCount, 0);
  await cluster.stop();
});

test('public startCluster: simulation and default real-time clusters; client() names its coordinator node', async () => {
  const { startCluster, isBasaltError } = await import('../index.js');
  const sim = await startCluster({ simulation: { seed: 'public' }, nodes: 3 });
  assert.deepEqual(sim.nodes, ['n1', 'n2', 'n3']);
  assert.equal(sim.simulation?.seed, 'public');
  await sim.createTable('accounts', { partitions: 2, replicas: 3 });
  assert.deepEqual(
    sim.tables().map((t) => t.name),
    ['accounts'],
  );
  assert.equal(sim.client().node, 'n1');
  assert.equal(sim.client('n2').node, 'n2');
  assert.throws(
    () => sim.client('n9'),
    (e) => isBasaltError(e, 'INVALID_ARGUMENT'),
  );
  assert.throws(
    () => sim.placement('nope', 'k'),
    (e) => isBasaltError(e, 'UNKNOWN_TABLE'),
  );
  await sim.stop();
  await assert.rejects(startCluster({ simulation: { seed: 1 }, transport: 'tcp' }), (e) =>
    isBasaltError(e, 'INVALID_ARGUMENT'),
  );
  const real = await startCluster({ nodes: 2 });
  assert.equal(real.simulation, undefined);
  assert.equal(real.node('n2').up, true);
  await real.stop();
});

test('simulated rule 17: unanswered heartbeats over a live connection make a peer gone; answers make it live again', async () => {
  const cluster = await startSimulatedCluster({ seed: 'heartbeats', nodes: 3 });
  const n1 = cluster.basaltNode('n1')!;
  const n3Id = cluster.node('n3').ephemeralId;
  const events: string[] = [];
  n1.onMembershipChange((e) => events.push(`${e.kind} ${e.peer.name}`));
  assert.equal(n1.liveIdOf(nodeName('n3')), n3Id);
  const silence = cluster.network.drop({ kind: 'NodeHeartbeatAck', from: 'n3' });
  await cluster.runFor(n1.membership.timeoutMs / 2);
  assert.equal(n1.membership.liveness(n3Id), 'live', 'within the timeout it is still live');
  await cluster.waitFor(() => n1.isGone(n3Id), { what: 'n3 gone after unanswered heartbeats' });
  assert.equal(n1.liveIdOf(nodeName('n3')), undefined);
  silence.undo();
  await cluster.waitFor(() => n1.liveIdOf(nodeName('n3')) === n3Id, { what: 'n3 live again once it answers' });
  assert.deepEqual(events, ['gone n3', 'live n3']);
  assert.equal(n1.metrics().livePeers.length, 2);
  await cluster.stop();
});

test('simulated: setClockOffset shifts one node physical clock only', async () => {
  const cluster = await startSimulatedCluster({ seed: 'skew', nodes: 2 });
  const n1 = cluster.basaltNode('n1')!;
  const n2 = cluster.basaltNode('n2')!;
  const before = n2.clock.nowMs() - n1.clock.nowMs();
  cluster.setClockOffset('n2', 250);
  assert.equal(n2.clock.nowMs() - n1.clock.nowMs(), before + 250);
  await cluster.stop();
});

test('simulated: metastorage commands survive the crash of the meta leader (new leader, retried, applied once)', async () => {
  const cluster = await startSimulatedCluster({ seed: 'meta-failover', nodes: 5 });
  await cluster.createTable('before', { partitions: 2, replicas: 3 });
  const leader = cluster.leaderOf('meta' as never)!;
  await cluster.stopNode(leader);
  const n5 = cluster.basaltNode('n5')!;
  const table = await cluster.drive(n5.metastorage.createTable('after', { partitions: 3, replicas: 3 }));
  assert.equal(table.id, 2);
  const newLeader = cluster.leaderOf('meta' as never);
  assert.ok(newLeader !== undefined && newLeader !== leader);
  await cluster.waitFor(() => cluster.tables().length === 2, { what: 'both tables visible' });
  await cluster.startNode(leader);
  const back = cluster.basaltNode(leader)!;
  await cluster.waitFor(() => back.metastorage.table('after')?.id === 2, { what: 'the old leader catches up' });
  assert.deepEqual(
    back.metastorage.tables().map((t) => t.name),
    ['before', 'after'],
  );
  await cluster.stop();
});

test('simulated: a gracefully shut down node restarts on its data; a table created meanwhile avoids it', async () => {
  const cluster = await startSimulatedCluster({ seed: 'graceful', nodes: 4 });
  await cluster.createTable('a', { partitions: 2, replicas: 3 });
  await cluster.shutdownNode('n4');
  assert.equal(cluster.node('n4').up, false);
  await cluster.runFor(100); // peers notice the closed connections
  assert.throws(
    () => cluster.node('n4').metrics(),
    (e: unknown) => (e as { code?: string }).code === 'NODE_UNAVAILABLE',
  );
  const b = await cluster.createTable('b', { partitions: 4, replicas: 2 });
  for (let i = 0; i < b.partitions; i++) {
    assert.ok(!cluster.placement('b', `k${i}`).replicas.includes(nodeName('n4')), 'replicas drawn from live nodes');
  }
  await cluster.startNode('n4');
  const n4 = cluster.basaltNode('n4')!;
  await cluster.waitFor(() => n4.metastorage.tables().length === 2, { what: 'n4 learns both tables' });
  await cluster.stop();
});

test('simulated: a custom partition host gets start for each assigned partition, stop on drop and on shutdown', async () => {
  const calls: string[] = [];
  const partitionHost: PartitionHostFactory = (context) => {
    const inner = new PlaceholderPartitionHost(context);
    context.onLeaderChange((change) => {
      if (change.role === 'leader') calls.push(`${context.self} leads ${change.group}`);
    });
    return {
      start: async (partition, replicas) => {
        calls.push(`${context.self} start ${partition} ${replicas.join(',')}`);
        await inner.start(partition, replicas);
      },
      stop: async (partition, reason) => {
        calls.push(`${context.self} stop ${partition} ${reason}`);
        await inner.stop(partition, reason);
      },
      primaryOf: (partition) => inner.primaryOf(partition),
    };
  };
  const env = new SimClusterEnvironment({ seed: 'custom-host', names: defaultNodeNames(3), partitionHost });
  const cluster = await Cluster.start(env, defaultNodeNames(3));
  const table = await cluster.createTable('t', { partitions: 2, replicas: 2 });
  assert.ok(
    calls.some((c) => / leads meta$/.test(c)),
    'hosts hear leader changes',
  );
  const starts = calls.filter((c) => c.includes(' start '));
  assert.equal(starts.length, 4, 'two partitions times two replicas');
  for (const c of starts) {
    const [node, , partition, replicas] = c.split(' ');
    assert.ok(replicas!.split(',').includes(node!), `${node} starts only partitions it replicates`);
    assert.match(partition!, new RegExp(`^t${table.id}p[01]$`));
  }
  calls.length = 0;
  await cluster.dropTable('t');
  assert.equal(calls.filter((c) => c.endsWith(' removed')).length, 0, 'removed only after the grace');
  await cluster.runFor(PAST_DROP_GRACE_MS);
  assert.equal(calls.filter((c) => c.endsWith(' removed')).length, 4);
  await cluster.createTable('u', { partitions: 1, replicas: 3 });
  await cluster.runFor(100);
  calls.length = 0;
  await cluster.shutdownNode('n2');
  assert.deepEqual(
    calls.filter((c) => c.includes(' stop ')),
    [`n2 stop t${table.id + 1}p0 node-stopping`],
  );
  await cluster.stop();
});

test('simulated swarm: over 12 seeds, metastorage and partition hosting converge after leader isolation and crashes', async () => {
  for (let seed = 1; seed <= 12; seed++) {
    const label = `swarm-${seed}`;
    const names = defaultNodeNames(5);
    const env = new SimClusterEnvironment({ seed: label, names });
    const cluster = await Cluster.start(env, names);
    try {
      await cluster.createTable('a', { partitions: 4, replicas: 3 });
      const metaLeader = cluster.leaderOf('meta' as never)!;
      env.world.network.isolate(metaLeader);
      await cluster.drive(cluster.basaltNode('n5')!.metastorage.createTable('b', { partitions: 3, replicas: 3 }));
      env.world.network.heal();
      const victim = names[seed % names.length]!;
      await cluster.stopNode(victim);
      await cluster.runFor(env.world.random.fork(label).int(3_000));
      await cluster.startNode(victim);
      await cluster.dropTable('a');
      await cluster.waitFor(
        () =>
          names.every((n) => {
            const node = cluster.basaltNode(n)!;
            const expected = cluster
              .basaltNode('n1')!
              .metastorage.view()
              .assignments.filter(([, r]) => r.includes(n));
            return node.metastorage.tables().length === 1 && node.hostedPartitions().size === expected.length;
          }),
        { what: `seed ${label}: every node sees one table and hosts exactly its assigned partitions` },
      );
    } finally {
      await cluster.stop();
    }
  }
});

test('simulated: node services are built per incarnation, handle messages, and stop only on a graceful stop', async () => {
  const log: string[] = [];
  const echo: NodeServiceFactory = {
    name: 'echo',
    create(node) {
      log.push(`create ${node.name}`);
      // A service's own kinds come with their checks: the messenger refuses kinds it cannot check.
      node.messenger.addBodyCheck('EchoRequest', () => undefined);
      node.messenger.addBodyCheck('EchoResponse', () => undefined);
      node.messenger.handle('EchoRequest', (body) => ({ kind: 'EchoResponse', from: node.ephemeralId, body }));
      return { stop: () => void log.push(`stop ${node.name}`) };
    },
  };
  const cluster = await startSimulatedCluster({ seed: 'services', nodes: 3, services: [echo] });
  assert.deepEqual(log, ['create n1', 'create n2', 'create n3']);
  const n1 = cluster.basaltNode('n1')!;
  assert.ok(n1.service('echo') !== undefined);
  const reply = await cluster.drive(n1.messenger.request(nodeName('n2'), { kind: 'EchoRequest' }));
  assert.equal((reply as unknown as { from: string }).from, cluster.node('n2').ephemeralId);
  assert.equal(cluster.network.count({ kind: 'EchoRequest', from: 'n1', to: 'n2' }), 1);
  await cluster.stopNode('n2');
  await cluster.startNode('n2');
  await cluster.shutdownNode('n3');
  assert.deepEqual(log.slice(3), ['create n2', 'stop n3'], 'a crash stops nothing; a restart creates anew');
  await cluster.stop();
});

test('simulated: any number of runFor calls work, each drive has its own virtual-time budget (seed 11)', async () => {
  const cluster = await startSimulatedCluster({ seed: '11', nodes: 5 });
  // Twenty 10 s drives: 200 s of virtual time in all, past the 120 s one drive may take.
  for (let i = 0; i < 20; i++) await cluster.runFor(10_000);
  assert.ok(cluster.simulation!.nowMs() >= 200_000, 'virtual time advanced by every drive');
  await cluster.stop();
});

test('simulated: a drive that cannot settle still fails with its seed after its own budget', async () => {
  const env = new SimClusterEnvironment({ seed: 'hang', names: defaultNodeNames(1), driveTimeoutMs: 5_000 });
  await env.drive(sleep(env.timers, 3_000));
  const started = env.simulation.nowMs();
  await assert.rejects(env.drive(sleep(env.timers, 60_000)), (e: Error) =>
    /within 5000 ms.*seed="hang"/.test(e.message),
  );
  assert.ok(env.simulation.nowMs() - started <= 5_000, 'the failure comes at the drive budget');
});
