/**
 * The intent cells: RO implicit gets that meet write intents, one cell per resolution path, each path forced from
 * outside the nodes (public client API and process control only). The read happens on the key's primary, so the path
 * depends on where that primary is relative to the intent's coordinator:
 * - local: writers connected to n1 commit 2-key RW txs continuously on keys whose primary is n1; a read there meets an
 *   intent whose tx n1 coordinates, final in its map before the cleanup switches the intent (or PENDING: on the
 *   coordinator's own node the coordinator rule answers locally too).
 * - coordinator: RW txs coordinated by n3 put keys whose primary is n1 or n2 and stay open for the cell: the primary
 *   has no final state and asks n3 (PENDING: read the older version). Rolled back afterwards.
 * - commit partition: RW txs coordinated by n3 put keys and stay open, then n3 is stopped (SIGSTOP) for the cell: the
 *   primaries cannot reach the coordinator and ask the commit partition, which recovers (aborts) the txs once n3 is
 *   gone; a final answer is then cached, so later reads of the same tx resolve locally. Resumed (SIGCONT) after.
 * Which path answered is not assumed: every node's `basalt_resolution_total{path}` is read from /metrics before and
 * after the cell, and the deltas are reported.
 */
import { connect, type RemoteClient, type RemoteTransaction } from '../src/client/remote.js';
import { partitionIndexOf } from '../src/core/partitioning.js';
import { BENCH_TABLE } from './driver.js';
import { benchConnectOptions, httpsText } from './tls.js';
import { INTENT_KEYS, type IntentWorkload, intentKey } from './workloads.js';

export interface ResolutionCounts {
  readonly local: number;
  readonly coordinator: number;
  readonly commitPartition: number;
  /** `basalt_recoveries_total`: txs this node decided by recovery (the commit partition path aborts a stopped node's). */
  readonly recoveries: number;
  /** Resolutions whose answer was PENDING (the tx still open), and COMMITTED or ABORTED: what the intents were. */
  readonly pending: number;
  readonly final: number;
}

type Path = 'local' | 'coordinator' | 'commitPartition';
const COUNTS: readonly (keyof ResolutionCounts)[] = [
  'local',
  'coordinator',
  'commitPartition',
  'recoveries',
  'pending',
  'final',
];
/** The node's generic counters (`basalt_counter_total{name=...}`) that say what the resolutions answered. */
const OUTCOME_COUNTERS: Readonly<Record<string, 'pending' | 'final'>> = {
  'resolution.outcome.PENDING': 'pending',
  'resolution.outcome.COMMITTED': 'final',
  'resolution.outcome.ABORTED': 'final',
};

export interface ResolutionDeltas {
  readonly nodes: readonly ({ readonly node: string } & ResolutionCounts)[];
  readonly total: ResolutionCounts;
  /** The share of all resolutions that went the path the cell forces. */
  readonly forcedShare: number | undefined;
}

const PATH_LABELS: Readonly<Record<string, Path>> = {
  local: 'local',
  coordinator: 'coordinator',
  commit_partition: 'commitPartition',
};

/** The resolution counters of one node's Prometheus text (`basalt_resolution_total{...,path="..."} n`). */
export function parseResolutionCounts(text: string): ResolutionCounts {
  const counts = { local: 0, coordinator: 0, commitPartition: 0, recoveries: 0, pending: 0, final: 0 };
  for (const line of text.split('\n')) {
    const counter = /^basalt_counter_total\{[^}]*\bname="([^"]*)"[^}]*\}\s+(\S+)/.exec(line);
    const outcome = counter === null ? undefined : OUTCOME_COUNTERS[counter[1]!];
    if (outcome !== undefined) counts[outcome] += Number(counter![2]);
    const recoveries = /^basalt_recoveries_total(?:\{[^}]*\})?\s+(\S+)/.exec(line);
    if (recoveries !== null) counts.recoveries += Number(recoveries[1]);
    const m = /^basalt_resolution_total\{([^}]*)\}\s+(\S+)/.exec(line);
    if (m === null) continue;
    const path = /(?:^|,)path="([^"]*)"/.exec(m[1]!)?.[1];
    const key = path === undefined ? undefined : PATH_LABELS[path];
    if (key !== undefined) counts[key] += Number(m[2]);
  }
  return counts;
}

/** The primary each partition index has, as a node's `basalt_partition_primary{group="t<id>p<i>",primary=...}` says. */
export function parsePrimaries(text: string): Map<number, string> {
  const primaries = new Map<number, string>();
  for (const line of text.split('\n')) {
    const m = /^basalt_partition_primary\{([^}]*)\}\s+1\b/.exec(line);
    if (m === null) continue;
    const group = /(?:^|,)group="t\d+p(\d+)"/.exec(m[1]!)?.[1];
    const primary = /(?:^|,)primary="([^"]*)"/.exec(m[1]!)?.[1];
    if (group !== undefined && primary !== undefined) primaries.set(Number(group), primary);
  }
  return primaries;
}

export function resolutionDeltas(
  nodes: readonly string[],
  before: readonly ResolutionCounts[],
  after: readonly ResolutionCounts[],
  forced: Path,
): ResolutionDeltas {
  const per = nodes.map((node, i) => {
    const d = { node } as { node: string } & Record<keyof ResolutionCounts, number>;
    for (const k of COUNTS) d[k] = after[i]![k] - before[i]![k];
    return d;
  });
  const sum = (k: keyof ResolutionCounts): number => per.reduce((s, n) => s + n[k], 0);
  const total: ResolutionCounts = {
    local: sum('local'),
    coordinator: sum('coordinator'),
    commitPartition: sum('commitPartition'),
    recoveries: sum('recoveries'),
    pending: sum('pending'),
    final: sum('final'),
  };
  const all = total.local + total.coordinator + total.commitPartition;
  return { nodes: per, total, forcedShare: all === 0 ? undefined : total[forced] / all };
}

/**
 * Raft log entries applied on a node, summed over the partition groups of its /metrics text (the metastorage group
 * left out): every node hosts a replica of every bench partition, so one node's sum counts every entry once.
 */
export function appliedPartitionEntries(metrics: string): number {
  let sum = 0;
  for (const match of metrics.matchAll(/^basalt_raft_applied_index\{[^}]*\bgroup="t\d+p\d+"[^}]*\} (\d+)$/gm)) {
    sum += Number(match[1]);
  }
  return sum;
}

/**
 * Messages sent to peers, socket writes and the storage transactions that applied partition entries, from one node's
 * metrics (0 when the node does not export them).
 */
export function peerTrafficOf(metrics: string): { messages: number; writes: number; applySteps: number } {
  const value = (name: string): number =>
    Number(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\d+)$`, 'm').exec(metrics)?.[1] ?? 0);
  const applySteps = Number(/^basalt_counter_total\{[^}]*\bname="apply\.steps"[^}]*\} (\d+)$/m.exec(metrics)?.[1] ?? 0);
  return {
    messages: value('basalt_peer_messages_sent_total'),
    writes: value('basalt_peer_writes_total'),
    applySteps,
  };
}

export async function scrape(url: string): Promise<string> {
  if (url.startsWith('https:')) return httpsText(url, SCRAPE_TIMEOUT_MS);
  const response = await fetch(url, { signal: AbortSignal.timeout(SCRAPE_TIMEOUT_MS) });
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.text();
}

const SCRAPE_TIMEOUT_MS = 5_000;
/** Open writer txs must outlive the cell (the default tx timeout would abort them midway). */
const HELD_TX_TIMEOUT_MS = 300_000;
const KEYS_PER_CELL = 48;
/** The commit partition path resolves each tx once per node and caches the outcome: more txs, more resolutions. */
const STOPPED_CELL_KEYS = 128;
/** Writer txs opened concurrently (each put waits for a Raft write and its fsync). */
const OPENERS = 16;
const COORDINATOR_KEYS_PER_TX = 4;
const LOCAL_WRITERS = 8;

/** What the cell runs with: the keys its readers read, and how to undo what it set up. */
export interface IntentCell {
  readonly keys: readonly string[];
  /** Writer transactions that failed (local path: conflicts are retried, what still fails is counted here). */
  writerFailures(): number;
  finish(): Promise<void>;
}

export interface IntentControl {
  readonly addresses: readonly string[];
  readonly metricsUrls: readonly string[];
  readonly nodeNames: readonly string[];
  pause(i: number): void;
  resume(i: number): void;
  /** Partitions of the bench table. */
  readonly partitions: number;
}

const WRITER_NODE = 2;
const LOCAL_NODE = 0;

/** Sets up the intents (and the stopped node) of one cell; `finish()` commits or rolls back and resumes. */
export async function prepareIntentCell(workload: IntentWorkload, control: IntentControl): Promise<IntentCell> {
  const primaries = parsePrimaries(await scrape(control.metricsUrls[0]!));
  const keysWhere = (ok: (primary: string | undefined) => boolean, count = KEYS_PER_CELL): string[] =>
    Array.from({ length: INTENT_KEYS }, (_, i) => intentKey(i))
      .filter((k) => ok(primaries.get(partitionIndexOf(k, control.partitions))))
      .slice(0, count);
  switch (workload) {
    case 'ro-intent-local':
      return localCell(
        control,
        keysWhere((p) => p === control.nodeNames[LOCAL_NODE]),
      );
    case 'ro-intent-coordinator':
      return heldCell(
        control,
        keysWhere((p) => p !== undefined && p !== control.nodeNames[WRITER_NODE]),
        false,
      );
    case 'ro-intent-commit-partition':
      // Primaries off the node that stops: the readers and the commit partitions stay reachable.
      return heldCell(
        control,
        keysWhere((p) => p !== undefined && p !== control.nodeNames[WRITER_NODE], STOPPED_CELL_KEYS),
        true,
      );
  }
}

async function localCell(control: IntentControl, keys: string[]): Promise<IntentCell> {
  if (keys.length < 2)
    throw new Error(`fewer than 2 intent keys have their primary on ${control.nodeNames[LOCAL_NODE]}`);
  const client = await connect(control.addresses[LOCAL_NODE]!, benchConnectOptions());
  let stopping = false;
  let failures = 0;
  let n = 0;
  const writer = async (w: number): Promise<void> => {
    while (!stopping) {
      const a = keys[(w + n++) % keys.length]!;
      const b = keys[(w * 7 + n++) % keys.length]!;
      try {
        await client.transaction(
          async (tx) => {
            await tx.put(BENCH_TABLE, a, n);
            if (b !== a) await tx.put(BENCH_TABLE, b, n);
          },
          { retries: 5 },
        );
      } catch {
        failures++;
      }
    }
  };
  const writers = Array.from({ length: LOCAL_WRITERS }, (_, w) => writer(w));
  return {
    keys,
    writerFailures: () => failures,
    finish: async () => {
      stopping = true;
      await Promise.all(writers);
      await client.close();
    },
  };
}

async function heldCell(control: IntentControl, keys: string[], stopWriterNode: boolean): Promise<IntentCell> {
  if (keys.length === 0) throw new Error('no intent key has a primary the cell can use');
  // Writes sent at once: kept until the commit (the client's default), they would leave no intent to meet.
  const client: RemoteClient = await connect(control.addresses[WRITER_NODE]!, {
    ...benchConnectOptions(),
    bufferWrites: false,
  });
  const txs: RemoteTransaction[] = [];
  let failures = 0;
  let paused = false;
  const finish = async (): Promise<void> => {
    if (paused) {
      control.resume(WRITER_NODE);
      paused = false;
    }
    // After a stop the commit partition may have aborted a tx already: its rollback then fails, which is expected.
    await Promise.all(txs.map((tx) => tx.rollback().catch(() => undefined)));
    await client.close();
  };
  try {
    // Coordinator path: a few keys per tx; commit partition path: one tx per key, so that more txs have to be
    // resolved before every intent's tx is final on the readers' primaries.
    const perTx = stopWriterNode ? 1 : COORDINATOR_KEYS_PER_TX;
    const starts = Array.from({ length: Math.ceil(keys.length / perTx) }, (_, t) => t * perTx);
    let next = 0;
    const opener = async (): Promise<void> => {
      while (next < starts.length) {
        const i = starts[next++]!;
        const tx = await client.begin({ timeoutMs: HELD_TX_TIMEOUT_MS });
        txs.push(tx);
        try {
          await tx.putAll(
            BENCH_TABLE,
            keys.slice(i, i + perTx).map((key) => ({ key, value: `held-${i}` })),
          );
        } catch {
          failures++;
        }
      }
    };
    await Promise.all(Array.from({ length: OPENERS }, opener));
    if (stopWriterNode) {
      control.pause(WRITER_NODE);
      paused = true;
    }
  } catch (error) {
    await finish();
    throw error;
  }
  return { keys, writerFailures: () => failures, finish };
}
