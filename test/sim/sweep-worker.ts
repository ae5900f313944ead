/**
 * The seeds of a sweep file run on this worker thread, one at a time, each on request from the test file: the test
 * runner's async hooks (it tracks every promise to attribute errors to tests) make the promise-heavy simulator about
 * 40% slower on the test's own thread, and they do not reach a worker's. A request is a seed; the answer is what the
 * test asserts on, not the whole history.
 */
import { parentPort } from 'node:worker_threads';
import { parseFaults } from '../../src/sim/workload/faults.js';
import { simRun } from '../../src/sim/workload/run.js';
import type { WorkloadName } from '../../src/sim/workload/workload.js';

export interface SeedRequest {
  readonly workload: WorkloadName;
  readonly seed: number;
  readonly faults: string;
  readonly durationMs: number;
  readonly livenessMs: number;
  readonly workers: number;
  readonly partitions: number;
  /** Idle partitions rest (SimRunOptions.rest). */
  readonly rest?: boolean;
  /** Coordinators commit in parallel (SimRunOptions.parallelCommit). */
  readonly parallelCommit?: boolean;
  /** Data writes share Raft entries (SimRunOptions.batchWrites). */
  readonly batchWrites?: boolean;
  /** Committed entries of many groups apply in one storage transaction (SimRunOptions.batchApply). */
  readonly batchApply?: boolean;
}

export interface SeedOutcome {
  readonly seed: number;
  readonly failure: { readonly class: string; readonly message: string } | undefined;
  readonly anomalies: readonly string[];
  readonly faultLog: readonly string[];
  readonly okAfterHeal: number;
  readonly marks: Readonly<Record<string, number>>;
}

const port = parentPort;
if (port === null) throw new Error('sweep-worker.js runs as a worker thread');
port.on('message', (request: SeedRequest) => {
  void simRun({ ...request, faults: parseFaults(request.faults) }).then(
    (result) => {
      const outcome: SeedOutcome = {
        seed: request.seed,
        failure: result.failure,
        anomalies: result.check?.anomalies.slice(0, 5) ?? [],
        faultLog: result.faultLog,
        okAfterHeal: result.counts.okAfterHeal,
        marks: result.marks,
      };
      port.postMessage(outcome);
    },
    (error: unknown) => {
      port.postMessage({
        seed: request.seed,
        failure: { class: 'crash', message: `simRun threw: ${String(error)}` },
        anomalies: [],
        faultLog: [],
        okAfterHeal: 0,
        marks: {},
      } satisfies SeedOutcome);
    },
  );
});
