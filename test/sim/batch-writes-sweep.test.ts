/**
 * The simulated workloads with a partition's writes batched (replica setting `batchWrites`): every seed's history
 * passes the checker, the cluster makes progress after the heal, and writes of several txs shared a Raft entry. The
 * register workload is left out: its three keys are written under X locks one at a time, so its writes never meet.
 */
import { batchWritesSweep } from './support.js';

batchWritesSweep(['bank', 'list-append']);
