/**
 * The simulated workloads with the committed entries of many Raft groups applied in one storage transaction (node
 * setting `batchApply`): every seed's history passes the checker, the cluster makes progress after the heal, and some
 * transaction applied the entries of several groups.
 */
import { batchApplySweep } from './support.js';

batchApplySweep(['bank', 'list-append', 'register']);
