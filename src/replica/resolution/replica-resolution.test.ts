/**
 * The assembly the node wires: the host context fits, membership maps to rule 17's PeerDirectory, and `attach`
 * registers exactly the resolution request kinds.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { NodeId, NodeName } from '../../core/ids.js';
import { HybridClock } from '../../hlc/hybrid-clock.js';
import type { PartitionHostContext } from '../../node/partition-host.js';
import { SimClock } from '../../sim/clock.js';
import { Scheduler } from '../../sim/scheduler.js';
import { TxStateMap } from '../../tx/tx-state-map.js';
import { membershipPeers, type ResolutionHostContext, replicaResolutionFor } from './replica-resolution.js';
import { RESOLUTION_REQUEST_KINDS } from './router.js';

// Compile-time: the node's partition host context is a resolution host context.
const fits = (context: PartitionHostContext): ResolutionHostContext => context;
void fits;

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

  it('attach registers exactly the resolution request kinds, and the undo unregisters them', () => {
    const scheduler = new Scheduler({ seed: 1 });
    const physical = new SimClock(scheduler);
    const resolution = replicaResolutionFor(
      {
        identity: self,
        clock: physical,
        hlc: new HybridClock(physical, { maxClockSkewMs: 20 }),
        timers: scheduler.timers('n1'),
        txStates: new TxStateMap({ clock: physical }),
        membership: { isGone: () => false, connectedPeers: () => [] },
        messenger: { request: () => Promise.reject(new Error('unused')) },
        onError: () => {},
      },
      { locate: () => Promise.reject(new Error('unused')) },
    );
    const registered = new Set<string>();
    const undo = resolution.attach(
      { get: () => undefined, cleanups: { ensureCleanup: () => Promise.resolve(true) } },
      {
        handle: (kind) => {
          registered.add(kind);
          return () => registered.delete(kind);
        },
      },
    );
    assert.deepEqual([...registered].sort(), [...RESOLUTION_REQUEST_KINDS].sort());
    assert.ok(resolution.router !== undefined);
    undo();
    assert.equal(registered.size, 0);
  });
});
