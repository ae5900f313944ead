/**
 * `basalt start`'s comparison switches from the environment: each one turns exactly its setting, and the replica
 * settings combine (idle rest stays on by default when writes are batched).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { environmentSwitches } from './start-command.js';

describe('environment switches of basalt start', () => {
  it('BASALT_BATCH_WRITES=1 batches writes and keeps idle rest on unless BASALT_IDLE_REST=0', () => {
    assert.deepEqual(environmentSwitches({}), { replicas: { rest: true } });
    assert.deepEqual(environmentSwitches({ BASALT_BATCH_WRITES: '1' }), {
      replicas: { rest: true, batchWrites: true },
    });
    assert.deepEqual(environmentSwitches({ BASALT_BATCH_WRITES: '1', BASALT_IDLE_REST: '0' }), {
      replicas: { batchWrites: true },
    });
    assert.deepEqual(environmentSwitches({ BASALT_BATCH_WRITES: '0', BASALT_IDLE_REST: '0' }), {});
  });

  it('the coordinator and tuning switches are left as they were', () => {
    assert.deepEqual(environmentSwitches({ BASALT_IDLE_REST: '0', BASALT_PARALLEL_COMMIT: '1' }), {
      coordinator: { parallelCommit: true },
    });
    assert.deepEqual(environmentSwitches({ BASALT_IDLE_REST: '0', BASALT_RAFT_BATCHING: '0' }), {
      tuning: { raftBatching: false },
    });
    assert.deepEqual(environmentSwitches({ BASALT_IDLE_REST: '0', BASALT_BATCH_APPLY: '1' }), {
      tuning: { batchApply: true },
    });
    assert.deepEqual(
      environmentSwitches({ BASALT_IDLE_REST: '0', BASALT_BATCH_APPLY: '1', BASALT_RAFT_BATCHING: '0' }),
      {
        tuning: { raftBatching: false, batchApply: true },
      },
    );
  });
});
