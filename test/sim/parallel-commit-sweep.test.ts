/**
 * The simulated workloads with coordinators committing in parallel (coordinator setting `parallelCommit`): every
 * seed's history passes the checker, the cluster makes progress after the heal, and commits went in parallel.
 */
import { parallelCommitSweep } from './support.js';

parallelCommitSweep(['bank', 'list-append', 'register']);
