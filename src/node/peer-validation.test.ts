/**
 * Peer messages are validated at the receive edge (issue 31 item 6): a body of a known kind with a missing field, a
 * field of the wrong type, a negative index, or a body of an unknown kind is refused whole with a coded error
 * (MALFORMED_MESSAGE, or UNKNOWN_MESSAGE for a kind no node speaks) and counted, before any handler or apply sees it.
 * Simulated clusters, so each case replays from its seed.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { BasaltError } from '../core/errors.js';
import { nodeName } from '../core/ids.js';
import { startCluster } from '../index.js';
import type { MessageBody } from '../net/envelope.js';
import { NODE_COUNTERS } from './basalt-node.js';

const T = 't';

test('simulated: a TxCleanupRequest with a COMMITTED outcome and no commitTs is refused, counted, and the group still applies', async () => {
  const cluster = await startCluster({ simulation: { seed: 'peer-cleanup-no-commit-ts' }, nodes: 3 });
  try {
    await cluster.createTable(T, { partitions: 2, replicas: 3 });
    const client = cluster.client('n1');
    const tx = await client.begin();
    await tx.put(T, 'k', 1);
    const { partition } = cluster.placement(T, 'k');
    const primary = cluster.placement(T, 'k').primary!;
    const sender = cluster.nodes.find((n) => n !== primary)!;
    const bad = {
      kind: 'TxCleanupRequest',
      txId: tx.id,
      partitions: [partition],
      unlockOnly: false,
      outcome: { state: 'COMMITTED' },
    } as unknown as MessageBody;
    const node = cluster.basaltNode(primary)!;
    const appliedBefore = node.raft.status(partition)!.applied;
    await assert.rejects(
      cluster.drive(cluster.basaltNode(sender)!.messenger.request(nodeName(primary), bad)),
      (e: BasaltError) => e.code === 'MALFORMED_MESSAGE' && /commitTs/.test(e.message),
    );
    assert.equal(node.metrics().counters[NODE_COUNTERS.malformedPeerMessages], 1);
    // The tx is untouched by the refused cleanup: it commits, and every replica of the group applies its switch.
    await tx.commit();
    assert.equal(await client.get(T, 'k'), 1);
    await client.put(T, 'k', 2);
    assert.equal(await cluster.client(sender).get(T, 'k'), 2);
    await cluster.waitFor(() =>
      cluster.nodes.every((n) => cluster.basaltNode(n)!.raft.status(partition)!.applied > appliedBefore + 1),
    );
  } finally {
    await cluster.stop();
  }
});

test('simulated: a negative index (Raft or request), an unknown kind and a field of the wrong type are refused and counted', async () => {
  const cluster = await startCluster({ simulation: { seed: 'peer-malformed' }, nodes: 3 });
  try {
    await cluster.createTable(T, { partitions: 2, replicas: 3 });
    const client = cluster.client('n1');
    await client.put(T, 'k', 1);
    const { partition } = cluster.placement(T, 'k');
    const n1 = cluster.basaltNode('n1')!;
    const n2 = cluster.basaltNode('n2')!.messenger;
    const to = nodeName('n1');
    const counted = () => n1.metrics().counters[NODE_COUNTERS.malformedPeerMessages] ?? 0;
    const term = n1.raft.status(partition)!.term;
    // One-way: dropped without an answer, but counted, and never stepped into the Raft core.
    n2.send(to, {
      kind: 'Raft',
      group: partition,
      message: { kind: 'Heartbeat', from: 'n2', to: 'n1', term, commit: -1 },
    } as unknown as MessageBody);
    await cluster.runFor(100);
    assert.equal(counted(), 1);
    // The same as a request is answered with the code.
    const tx = await client.begin();
    const negative = {
      kind: 'ReadWriteRequest',
      partitionId: partition,
      txId: tx.id,
      coordinatorId: n1.ephemeralId,
      commitPartitionId: partition,
      opSeq: -1,
      full: false,
      operation: { op: 'get', key: 'k' },
    } as unknown as MessageBody;
    await assert.rejects(
      cluster.drive(n2.request(to, negative)),
      (e: BasaltError) => e.code === 'MALFORMED_MESSAGE' && /opSeq must be an integer >= 0/.test(e.message),
    );
    assert.equal(counted(), 2);
    await tx.rollback();
    await assert.rejects(
      cluster.drive(n2.request(to, { kind: 'NoSuchKind' })),
      (e: BasaltError) => e.code === 'UNKNOWN_MESSAGE' && e.executed === 'no',
    );
    assert.equal(counted(), 3);
    const wrongType = {
      kind: 'TxStateCoordinatorRequest',
      txId: 'not a tx id',
      readTs: 5,
    } as unknown as MessageBody;
    await assert.rejects(
      cluster.drive(n2.request(to, wrongType)),
      (e: BasaltError) => e.code === 'MALFORMED_MESSAGE' && /txId must be a tx id/.test(e.message),
    );
    assert.equal(counted(), 4);
    // The group still applies on every replica.
    const applied = cluster.nodes.map((n) => cluster.basaltNode(n)!.raft.status(partition)!.applied);
    await client.put(T, 'k', 2);
    assert.equal(await cluster.client('n3').get(T, 'k'), 2);
    await cluster.waitFor(() =>
      cluster.nodes.every((n, i) => cluster.basaltNode(n)!.raft.status(partition)!.applied > applied[i]!),
    );
  } finally {
    await cluster.stop();
  }
});

test('simulated: a cleanup whose commitTs lies a year ahead is refused and leaves the primary clock where it was', async () => {
  const cluster = await startCluster({ simulation: { seed: 'peer-cleanup-far-commit-ts' }, nodes: 3 });
  try {
    await cluster.createTable(T, { partitions: 2, replicas: 3 });
    const client = cluster.client('n1');
    const tx = await client.begin();
    await tx.put(T, 'k', 1);
    const { partition } = cluster.placement(T, 'k');
    const primary = cluster.placement(T, 'k').primary!;
    const sender = cluster.nodes.find((n) => n !== primary)!;
    const node = cluster.basaltNode(primary)!;
    const yearAheadMs = 365 * 24 * 3_600_000;
    const far = (node.hlc.current() >> 16n) + BigInt(yearAheadMs);
    const bad = {
      kind: 'TxCleanupRequest',
      txId: tx.id,
      partitions: [partition],
      unlockOnly: false,
      outcome: { state: 'COMMITTED', commitTs: far << 16n },
    } as unknown as MessageBody;
    // Absorbed, it dragged the primary's clock a year ahead: its answer came back refused as CLOCK_SKEW, and so did
    // everything it sent afterwards.
    await assert.rejects(
      cluster.drive(cluster.basaltNode(sender)!.messenger.request(nodeName(primary), bad)),
      (e: BasaltError) => e.code === 'MALFORMED_MESSAGE' && /commitTs is beyond the sender clock/.test(e.message),
    );
    assert.ok(node.hlc.current() >> 16n < far - BigInt(yearAheadMs / 2), 'the primary clock was not dragged');
    await tx.commit();
    assert.equal(await cluster.client(sender).get(T, 'k'), 1);
  } finally {
    await cluster.stop();
  }
});
