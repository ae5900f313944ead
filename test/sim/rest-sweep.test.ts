/**
 * The simulated workloads with idle partitions resting (replica-host.ts "Rest", the default of `basalt start`): every
 * seed's history passes the checker, the cluster makes progress after the heal, and partitions did rest.
 */
import { restSweep } from './support.js';

restSweep(['bank', 'list-append', 'register']);
