import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  appliedPartitionEntries,
  parsePrimaries,
  parseResolutionCounts,
  peerTrafficOf,
  resolutionDeltas,
} from '../../bench/intents.js';

const METRICS = [
  '# HELP basalt_resolution_total write intents resolved, by the path that answered',
  '# TYPE basalt_resolution_total counter',
  'basalt_resolution_total{node="n2",path="local"} 7',
  'basalt_resolution_total{node="n2",path="coordinator"} 120',
  'basalt_resolution_total{node="n2",path="commit_partition"} 3',
  'basalt_recoveries_total{node="n2"} 3',
  'basalt_partition_primary{node="n2",group="t1p0",primary="n1"} 1',
  'basalt_partition_primary{node="n2",group="t1p5",primary="n3"} 1',
  'basalt_partition_primary{node="n2",group="meta",primary="n2"} 1',
  'basalt_counter_total{node="n2",name="resolution.local"} 999',
  'basalt_counter_total{node="n2",name="resolution.outcome.PENDING"} 100',
  'basalt_counter_total{node="n2",name="resolution.outcome.COMMITTED"} 20',
  'basalt_counter_total{node="n2",name="resolution.outcome.ABORTED"} 10',
  'basalt_counter_total{node="n2",name="resolution.outcome.UNKNOWN"} 1',
].join('\n');

describe('Raft entries per operation from /metrics', () => {
  it('sums the applied index of the partition groups, the metastorage group left out', () => {
    const text = [
      '# TYPE basalt_raft_applied_index gauge',
      'basalt_raft_applied_index{node="n1",group="meta"} 500',
      'basalt_raft_applied_index{node="n1",group="t1p0"} 40',
      'basalt_raft_applied_index{node="n1",group="t1p7"} 2',
      'basalt_raft_commit_index{node="n1",group="t1p0"} 41',
    ].join('\n');
    assert.equal(appliedPartitionEntries(text), 42);
    assert.equal(appliedPartitionEntries(''), 0);
  });
});

describe('peer traffic per operation from /metrics', () => {
  it('reads the messages sent to peers, the socket writes and the apply steps of one node; 0 where a node does not export them', () => {
    const text = [
      '# TYPE basalt_peer_messages_sent_total counter',
      'basalt_peer_messages_sent_total{node="n1"} 1234',
      'basalt_peer_writes_total{node="n1"} 321',
      'basalt_counter_total{node="n1",name="apply.sharedSteps"} 7',
      'basalt_counter_total{node="n1",name="apply.steps"} 55',
    ].join('\n');
    assert.deepEqual(peerTrafficOf(text), { messages: 1234, writes: 321, applySteps: 55 });
    assert.deepEqual(peerTrafficOf(''), { messages: 0, writes: 0, applySteps: 0 });
  });
});

describe('intent cells: resolution counters from /metrics', () => {
  it('reads the three paths of basalt_resolution_total and nothing else', () => {
    assert.deepEqual(parseResolutionCounts(METRICS), {
      local: 7,
      coordinator: 120,
      commitPartition: 3,
      recoveries: 3,
      pending: 100,
      final: 30,
    });
    assert.deepEqual(parseResolutionCounts('basalt_up{node="n1"} 0\n'), {
      local: 0,
      coordinator: 0,
      commitPartition: 0,
      recoveries: 0,
      pending: 0,
      final: 0,
    });
  });

  it('maps partition indexes of the table to their primaries, leaving the metastorage out', () => {
    assert.deepEqual([...parsePrimaries(METRICS)].sort(), [
      [0, 'n1'],
      [5, 'n3'],
    ]);
  });

  it('subtracts per node, sums over the nodes and gives the share of the forced path', () => {
    const before = [
      { local: 1, coordinator: 10, commitPartition: 0, recoveries: 0, pending: 0, final: 0 },
      { local: 0, coordinator: 5, commitPartition: 2, recoveries: 1, pending: 0, final: 1 },
    ];
    const after = [
      { local: 3, coordinator: 40, commitPartition: 0, recoveries: 0, pending: 0, final: 0 },
      { local: 0, coordinator: 35, commitPartition: 2, recoveries: 4, pending: 0, final: 3 },
    ];
    const d = resolutionDeltas(['n1', 'n2'], before, after, 'coordinator');
    assert.deepEqual(d.nodes, [
      { node: 'n1', local: 2, coordinator: 30, commitPartition: 0, recoveries: 0, pending: 0, final: 0 },
      { node: 'n2', local: 0, coordinator: 30, commitPartition: 0, recoveries: 3, pending: 0, final: 2 },
    ]);
    assert.deepEqual(d.total, { local: 2, coordinator: 60, commitPartition: 0, recoveries: 3, pending: 0, final: 2 });
    assert.equal(d.forcedShare, 60 / 62);
    assert.equal(resolutionDeltas(['n1'], [before[0]!], [before[0]!], 'local').forcedShare, undefined);
  });
});
