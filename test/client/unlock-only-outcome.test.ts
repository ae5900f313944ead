/**
 * A read-write tx that wrote nothing ends with an unlock-only cleanup and no durable record; the final state it
 * leaves in the maps of its enlisted primaries is its true outcome (seed 002's "COMMITTED or ABORTED", rule 11):
 * a committed one is COMMITTED with its commitTs everywhere, on a primary that is also its coordinator's node too,
 * and a rolled back one ABORTED.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { NodeName, TxId } from '../../src/index.js';
import type { TxStateMapEvent } from '../../src/tx/core/tx-state-map.js';
import { type TestCluster, withSimCluster } from './support.js';

const T = 'accounts';

function watchMap(cluster: TestCluster, name: NodeName): TxStateMapEvent[] {
  const node = cluster.basaltNode(name);
  assert.ok(node !== undefined, `${name} runs`);
  const events: TxStateMapEvent[] = [];
  node.txStates.observe((e) => events.push(e));
  return events;
}

/** The first key `k<i>` whose partition's primary satisfies `accept`. */
function keyWithPrimary(cluster: TestCluster, accept: (primary: string | undefined) => boolean): string {
  for (let i = 0; i < 10_000; i++) if (accept(cluster.placement(T, `k${i}`).primary)) return `k${i}`;
  throw new Error('no key with such a primary');
}

/** The states an entry of `txId` went through (each change once). */
function appliedStates(events: readonly TxStateMapEvent[], txId: TxId): string[] {
  return events.flatMap((e) =>
    e.txId === txId && e.kind === 'update' && e.outcome === 'applied' && e.from !== e.to ? [e.to] : [],
  );
}

describe('unlock-only cleanup carries the true outcome', () => {
  it('a committed read-only RW tx is COMMITTED on every enlisted primary, the coordinator node included', () =>
    withSimCluster('unlock-only-outcome', { nodes: 3, partitions: 6 }, async (cluster) => {
      const coordinator = 'n1' as NodeName;
      const local = keyWithPrimary(cluster, (primary) => primary === coordinator);
      const remote = keyWithPrimary(cluster, (primary) => primary !== undefined && primary !== coordinator);
      const remotePrimary = cluster.placement(T, remote).primary as NodeName;
      const client = cluster.client(coordinator);
      await client.put(T, local, 1);
      await client.put(T, remote, 2);
      const atCoordinator = watchMap(cluster, coordinator);
      const atRemote = watchMap(cluster, remotePrimary);

      const committed = await client.begin();
      assert.equal(await committed.get(T, local), 1);
      assert.equal(await committed.get(T, remote), 2);
      await committed.commit();
      const aborted = await client.begin();
      assert.equal(await aborted.get(T, local), 1);
      assert.equal(await aborted.get(T, remote), 2);
      await aborted.rollback();
      await cluster.runFor(500);

      assert.deepEqual(appliedStates(atCoordinator, committed.id), ['PENDING', 'FINISHING', 'COMMITTED']);
      assert.deepEqual(appliedStates(atRemote, committed.id), ['PENDING', 'COMMITTED']);
      const remoteEntry = cluster.node(remotePrimary).txState(committed.id);
      assert.equal(remoteEntry?.state, 'COMMITTED');
      assert.ok(remoteEntry?.commitTimestamp !== undefined, 'the COMMITTED entry carries its commitTs');
      assert.deepEqual(appliedStates(atCoordinator, aborted.id), ['PENDING', 'FINISHING', 'ABORTED']);
      assert.equal(cluster.node(remotePrimary).txState(aborted.id)?.state, 'ABORTED');
    }));
});
