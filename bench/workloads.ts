/**
 * The workloads of the end-to-end benchmark, each as Basalt runs it and as etcd runs it, with the critical path its
 * floor is computed from. The keys are loaded once per system before the first cell: 1,000 accounts, 20 hot accounts
 * and 1,000 YCSB records, so every read finds a value.
 *
 * Critical paths (RTT = loopback round trip, F = fsync), counted for Basalt's protocol:
 *   put       client→coordinator (1), coordinator→primary (1), one Raft write: replication (1) + fsync (1)
 *   get       client→coordinator (1), coordinator→primary read (1)
 *   ro-tx     begin (1), two gets of 2 each (4), commit (1)
 *   transfer  begin (1); getAll forUpdate (2); putAll of both, the two partitions in parallel: client (1) +
 *             primary (1) + Raft (1) + F;
 *             commit: client (1) + commit partition (1) + Raft write of the tx state (1) + F
 *   transfer-seq  as transfer, one key at a time: get a, get b (forUpdate), put a, put b, commit; the read of b
 *             is one more round (2), direct to b's primary with direct mapping (1)
 *   ycsb-a    half get, half put
 *   ro-intent-local              as get: the primary finds the intent's tx state in its own map
 *   ro-intent-coordinator        get + the primary's state request to the coordinator (1)
 *   ro-intent-commit-partition   get + the primary's state request to the commit partition (1); the wait until the
 *                                stopped coordinator is seen gone is not part of the floor
 * Intent keys (256) are loaded only for the intent cells.
 */
import type { CriticalPath } from './floors.js';

export const WORKLOAD_NAMES = [
  'put',
  'transfer',
  'transfer-hot',
  'transfer-seq',
  'get',
  'ro-tx',
  'ycsb-a',
  'ro-intent-local',
  'ro-intent-coordinator',
  'ro-intent-commit-partition',
] as const;
export type WorkloadName = (typeof WORKLOAD_NAMES)[number];

/**
 * RO reads that meet write intents, one cell per resolution path, forced from outside (bench/intents.ts). They run
 * last (one stops a node), only on Basalt, and `--workload ro-intent` names all three.
 */
export const INTENT_WORKLOADS = ['ro-intent-local', 'ro-intent-coordinator', 'ro-intent-commit-partition'] as const;
export type IntentWorkload = (typeof INTENT_WORKLOADS)[number];
export const INTENT_ALIAS = 'ro-intent';
export const isIntentWorkload = (name: WorkloadName): name is IntentWorkload =>
  (INTENT_WORKLOADS as readonly string[]).includes(name);
/** Keys the intent cells write and read; each cell picks those of the partitions its path needs. */
export const INTENT_KEYS = 256;
export const intentKey = (i: number): string => `intent/${i}`;

export const VALUE_BYTES = 100;
export const ACCOUNTS = 1_000;
export const HOT_ACCOUNTS = 20;
export const YCSB_RECORDS = 1_000;
export const INITIAL_BALANCE = 1_000;
/** Retries of a transfer after its first attempt (Basalt: retryable aborts; etcd: failed compares). */
export const TRANSFER_RETRIES = 20;
/** Each 1PC-put caller cycles over its own keys (etcd: one key per caller, compared by mod revision). */
export const PUT_KEYS_PER_CALLER = 100;

export const accountKey = (i: number): string => `acct/${i}`;
export const hotKey = (i: number): string => `hot/${i}`;
export const userKey = (i: number): string => `user/${i}`;

const PUT: CriticalPath = { roundTrips: 3, fsyncs: 1, why: 'client, primary, Raft replication; 1 fsync' };
const GET: CriticalPath = { roundTrips: 2, fsyncs: 0, why: 'client, primary read' };

export interface WorkloadSpec {
  readonly name: WorkloadName;
  readonly title: string;
  readonly basalt: string;
  readonly etcd: string;
  /** Operations by share of the mix; one part for a pure workload. */
  readonly parts: readonly { readonly share: number; readonly path: CriticalPath }[];
  /** Transactions that may abort and be retried: abort and retry rates are reported. */
  readonly transactional: boolean;
  /** The resolution path the cell forces (intent cells only); etcd has no equivalent and runs none. */
  readonly resolutionPath?: 'local' | 'coordinator' | 'commitPartition';
}

export const WORKLOADS: Readonly<Record<WorkloadName, WorkloadSpec>> = {
  put: {
    name: 'put',
    title: 'single-key write',
    basalt: `implicit put (1PC), ${VALUE_BYTES} B values`,
    etcd: 'Txn: If(ModRevision == last) Then Put, own key per caller',
    parts: [{ share: 1, path: PUT }],
    transactional: false,
  },
  transfer: {
    name: 'transfer',
    title: `2-key transfer, ${ACCOUNTS.toLocaleString('en-US')} accounts`,
    basalt: 'RW tx: getAll both forUpdate, putAll both',
    etcd: 'get both; Txn comparing both ModRevisions, put both; retried on a failed compare',
    parts: [{ share: 1, path: transferPath() }],
    transactional: true,
  },
  'transfer-hot': {
    name: 'transfer-hot',
    title: `2-key transfer, ${HOT_ACCOUNTS} hot accounts`,
    basalt: 'as transfer, on 20 accounts',
    etcd: 'as transfer, on 20 accounts',
    parts: [{ share: 1, path: transferPath() }],
    transactional: true,
  },
  'transfer-seq': {
    name: 'transfer-seq',
    title: `2-key transfer one key at a time, ${ACCOUNTS.toLocaleString('en-US')} accounts`,
    basalt: 'RW tx: get a forUpdate, get b forUpdate, put a, put b',
    etcd: 'get a, then get b; Txn comparing both ModRevisions, put both; retried on a failed compare',
    parts: [
      {
        share: 1,
        path: {
          roundTrips: 1 + 2 + 2 + 3 + 3,
          fsyncs: 2,
          why: 'begin; get a; get b (client, primary); put both (client, primary, Raft); commit (client, commit partition, Raft)',
        },
      },
    ],
    transactional: true,
  },
  get: {
    name: 'get',
    title: 'point read',
    basalt: 'implicit get',
    etcd: 'linearizable get',
    parts: [{ share: 1, path: GET }],
    transactional: false,
  },
  'ro-tx': {
    name: 'ro-tx',
    title: 'RO tx of 2 gets',
    basalt: 'readOnly transaction, 2 sequential gets',
    etcd: '2 sequential serializable gets',
    parts: [{ share: 1, path: { roundTrips: 6, fsyncs: 0, why: 'begin, 2 gets of 2, commit' } }],
    transactional: false,
  },
  'ycsb-a': {
    name: 'ycsb-a',
    title: `YCSB-A: 50/50 read/update, Zipfian over ${YCSB_RECORDS.toLocaleString('en-US')}`,
    basalt: 'implicit get / implicit put',
    etcd: 'linearizable get / put',
    parts: [
      { share: 0.5, path: GET },
      { share: 0.5, path: PUT },
    ],
    transactional: false,
  },
  'ro-intent-local': {
    name: 'ro-intent-local',
    title: 'RO get meeting intents, local path',
    basalt:
      'implicit get of keys whose primary is n1, while writers on n1 commit 2-key RW txs on them continuously ' +
      '(an intent whose tx is final in the primary’s map, or PENDING, which n1 answers itself as the coordinator: ' +
      'the answers column tells them apart)',
    etcd: '–',
    parts: [{ share: 1, path: GET }],
    transactional: false,
    resolutionPath: 'local',
  },
  'ro-intent-coordinator': {
    name: 'ro-intent-coordinator',
    title: 'RO get meeting intents, coordinator path',
    basalt:
      'implicit get of keys whose primary is not n3, each holding the intent of an open RW tx coordinated by n3 ' +
      '(PENDING: the primary asks n3); rolled back after the cell',
    etcd: '–',
    parts: [
      {
        share: 1,
        path: { roundTrips: 3, fsyncs: 0, why: 'client, primary read, primary→coordinator state request' },
      },
    ],
    transactional: false,
    resolutionPath: 'coordinator',
  },
  'ro-intent-commit-partition': {
    name: 'ro-intent-commit-partition',
    title: 'RO get meeting intents, commit partition path',
    basalt:
      'implicit get of keys holding intents of open RW txs coordinated by n3, with n3 stopped (SIGSTOP) for the ' +
      'cell: once n3 is seen gone the reads in flight ask the commit partition, which recovers (aborts) the txs; ' +
      'later reads meet no intent. Resumed with SIGCONT after',
    etcd: '–',
    parts: [
      {
        share: 1,
        path: { roundTrips: 3, fsyncs: 0, why: 'client, primary read, primary→commit partition state request' },
      },
    ],
    transactional: false,
    resolutionPath: 'commitPartition',
  },
};

function transferPath(): CriticalPath {
  return {
    roundTrips: 1 + 2 + 3 + 3,
    fsyncs: 2,
    why: 'begin; getAll forUpdate; putAll (client, primary, Raft); commit (client, commit partition, Raft)',
  };
}

export function isWorkloadName(name: string): name is WorkloadName {
  return (WORKLOAD_NAMES as readonly string[]).includes(name);
}
