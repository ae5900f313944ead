/**
 * A client's node crashes (simulated, fixed seeds): calls in flight settle at once with a coded error instead of
 * hanging (a commit whose finish may have left: TX_OUTCOME_UNKNOWN; an operation: retryable TX_ABORTED), calls while
 * the node is down fail NODE_UNAVAILABLE (retryable), and `client.transaction` goes on on the restarted node.
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { isBasaltError } from '../../src/index.js';
import { keyIn, rejectsWith, withSimCluster } from './support.js';

const T = 'accounts';

it('a commit in flight when its coordinator crashes reports TX_OUTCOME_UNKNOWN; an operation TX_ABORTED', () =>
  withSimCluster('coordinator-crash', {}, async (cluster) => {
    const client = cluster.client('n2');
    // The commit partition's primary is another node, so that the finish request crosses the (held) network.
    const remote = (prefix: string) =>
      keyIn(
        cluster,
        T,
        (p) =>
          cluster.placement(
            T,
            keyIn(cluster, T, (q) => q === p),
          ).primary !== 'n2',
        prefix,
      );
    const committing = await client.begin();
    await committing.put(T, remote('x'), 1);
    const other = await client.begin();
    await other.put(T, remote('y'), 1);
    const held = cluster.network.hold({ kind: 'TxFinishRequest', from: 'n2' });
    const heldOps = cluster.network.hold({ kind: 'ReadWriteRequest', from: 'n2' });
    const commit = committing.commit();
    await cluster.waitFor(() => held.heldCount > 0, { what: 'the finish request is held' });
    assert.equal(cluster.node('n2').txState(committing.id)?.state, 'FINISHING');
    // The crash fails both at once (a local finish request may already be on its way: the outcome is unknown).
    const heldOp = other.put(T, remote('y'), 2);
    await cluster.waitFor(() => heldOps.heldCount > 0, { what: 'the operation is held' });
    await cluster.stopNode('n2');
    held.release();
    heldOps.release();
    await rejectsWith(commit, 'TX_OUTCOME_UNKNOWN');
    const opError = await rejectsWith(heldOp, 'TX_ABORTED');
    assert.equal(opError.retryable, true);
    await other.rollback(); // resolves: nothing of a dead coordinator's tx is left to roll back here

    await rejectsWith(client.put(T, 'z', 1), 'NODE_UNAVAILABLE');
    // client.transaction retries NODE_UNAVAILABLE and runs on the restarted incarnation.
    const restart = cluster.runFor(300).then(() => cluster.startNode('n2'));
    await client.transaction((tx) => tx.put(T, 'z', 'after-restart'), { retries: 30, backoffMsMin: 50 });
    await restart;
    assert.equal(await cluster.client('n1').get(T, 'z'), 'after-restart');
    assert.ok(isBasaltError(opError));
  }));
