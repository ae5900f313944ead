/**
 * Part 2 of the seed sweep of the bank workload on simulated 3-node clusters (see support.ts): every seed's
 * history passes the checker and the cluster makes progress after the heal.
 */
import { sweep } from './support.js';

sweep('bank', 1);
