/**
 * The assembly the node wires: membership maps to rule 17's PeerDirectory, and a ReplicaResolution is complete once
 * constructed (no second wiring step).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isBasaltError } from '../core/errors.js';
import type { NodeId, NodeName, PartitionId } from '../core/ids.js';
import { HybridClock } from '../hlc/hybrid-clock.js';
import { SimClock } from '../sim/clock.js';
import { Scheduler } from '../sim/scheduler.js';
import { makeTxId } from '../tx/core/tx-id.js';
import { TxStateMap } from '../tx/core/tx-state-map.js';
import { PartitionDirectory } from './partition/partition-directory.js';
import { membershipPeers, ReplicaResolution } from './replica-resolution.js';

const self = { name: 'n1' as NodeName, id: 'n1-a' as NodeId };

describe('ReplicaResolution assembly', () => {
  it('membershipPeers: self by its id, connected peers by theirs, an unknown id has no name and is not gone', () => {
    const gone = new Set<NodeId>(['n2-old' as NodeId]);
    const peers = membershipPeers(
      { isGone: (id) => gone.has(id), connectedPeers: () => [{ name: 'n2' as NodeName, id: 'n2-b' as NodeId }] },
      self,
    );
    assert.equal(peers.nameOf(self.id), 'n1');
    assert.equal(peers.nameOf('n2-b' as NodeId), 'n2');
    assert.equal(peers.nameOf('n2-old' as NodeId), undefined);
    assert.equal(peers.isGone('n2-old' as NodeId), true);
    assert.equal(peers.isGone('never-seen' as NodeId), false);
  });

  it('is complete once built: the commit partition answers from the directory it was given (PRIMARY_MISS when not hosted)', async () => {
    const scheduler = new Scheduler({ seed: 1 });
    const physical = new SimClock(scheduler);
    const hlc = new HybridClock(physical, { maxClockSkewMs: 20 });
    const unused = () => Promise.reject(new Error('unused'));
    const resolution = new ReplicaResolution({
      self,
      clock: hlc,
      physicalClock: physical,
      timers: scheduler.timers('n1'),
      txStates: new TxStateMap({ clock: physical }),
      peers: membershipPeers({ isGone: () => false, connectedPeers: () => [] }, self),
      request: unused,
      locator: {
        locate: () => {
          throw new Error('unused');
        },
      },
      partitions: new PartitionDirectory(),
      cleanups: { ensureCleanup: () => Promise.resolve(true) },
    });
    const txId = makeTxId({ beginTimestamp: hlc.now(), nodeId: self.id, counter: 1 });
    await assert.rejects(
      resolution.commitPartition.handleRecovery({
        kind: 'TxRecoveryRequest',
        txId,
        commitPartitionId: 't1p0' as PartitionId,
        reporterPartitionId: 't1p1' as PartitionId,
      }),
      (e) => isBasaltError(e, 'PRIMARY_MISS') && e.details?.['reason'] === 'not-hosted',
    );
  });
});
