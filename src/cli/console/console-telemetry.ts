/**
 * Live throughput and latency for the console, one sample a second, sent to the browsers over server-sent events.
 * Commits and aborts are counted where this node's coordinator learns an outcome (the tx state map's `finish-response`,
 * `one-phase` and `unlock-only` updates, whether or not the entry was already final here), and the commit latency is
 * the time from the finish compare-and-set (`finish-started`) to a COMMITTED `finish-response`. Implicit reads and
 * writes come from the node client's counters, resolutions by path from the resolution counters, the Raft commit
 * latency from the node's histogram. Rates and quantiles are of the last second (differences of running totals).
 *
 * Bounded: the last `SAMPLES_KEPT` samples (15 minutes) are kept for a browser that connects later, at most
 * `EVENT_CLIENTS_MAX` browsers listen, and at most `FINISHING_TRACKED_MAX` finishing transactions are timed at once.
 * The node is looked up on every tick, so a restarted in-process node is followed (and the totals start over).
 */
import type { ServerResponse } from 'node:http';
import { NODE_CLIENT_COUNTERS } from '../../client/node-client.js';
import { estimateQuantile, Histogram, type HistogramSnapshot, LATENCY_BUCKETS_MS } from '../../core/histogram.js';
import type { TxId } from '../../core/ids.js';
import type { BasaltNode } from '../../node/basalt-node.js';
import type { TxStateMapEvent } from '../../tx/core/tx-state-map.js';
import { resolutionCounters } from './console-transactions.js';

export const SAMPLE_INTERVAL_MS = 1_000;
/** 15 minutes of one-second samples. */
export const SAMPLES_KEPT = 900;
export const EVENT_CLIENTS_MAX = 32;
const FINISHING_TRACKED_MAX = 10_000;
const OUTCOME_REASONS = new Set(['finish-response', 'one-phase', 'unlock-only']);

export interface ConsoleSample {
  /** Wall-clock ms at the end of the interval. */
  readonly t: number;
  /** Length of the interval the rates are of (about a second): a rate times it is a count. */
  readonly intervalMs: number;
  readonly commits: number;
  readonly aborts: number;
  readonly implicitReads: number;
  readonly implicitWrites: number;
  readonly commitP50Ms: number | null;
  readonly commitP99Ms: number | null;
  readonly raftCommitP50Ms: number | null;
  readonly raftCommitP99Ms: number | null;
  /** Resolutions per second by the path that answered. */
  readonly resolution: Readonly<Record<string, number>>;
  readonly txStateEntries: number;
}

interface Totals {
  readonly node: BasaltNode;
  readonly atMs: number;
  readonly counts: Readonly<Record<string, number>>;
  readonly resolution: Readonly<Record<string, number>>;
  readonly commitLatency: HistogramSnapshot;
  readonly raftLatency: HistogramSnapshot;
}

export class ConsoleTelemetry {
  private readonly samples: ConsoleSample[] = [];
  private readonly clients = new Set<ServerResponse>();
  private readonly finishing = new Map<TxId, number>();
  private attached: { readonly node: BasaltNode; readonly detach: () => void } | undefined;
  private commitLatency = new Histogram(LATENCY_BUCKETS_MS);
  private outcomes = { commits: 0, aborts: 0 };
  private previous: Totals | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly nodeOf: () => BasaltNode | undefined) {}

  start(): void {
    this.timer ??= setInterval(() => this.tick(), SAMPLE_INTERVAL_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
    this.attached?.detach();
    this.attached = undefined;
    for (const client of this.clients) client.end();
    this.clients.clear();
  }

  /** The samples kept, oldest first. */
  history(): readonly ConsoleSample[] {
    return this.samples;
  }

  /** Streams the kept samples, then one a second; false when too many browsers listen already. */
  subscribe(response: ServerResponse): boolean {
    if (this.clients.size >= EVENT_CLIENTS_MAX) return false;
    response.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      connection: 'keep-alive',
    });
    response.write(`retry: 2000\nevent: backlog\ndata: ${JSON.stringify(this.samples)}\n\n`);
    this.clients.add(response);
    response.on('close', () => this.clients.delete(response));
    return true;
  }

  /** Takes one sample now (the timer calls it every second). */
  tick(nowMs: number = Date.now()): void {
    const node = this.nodeOf();
    if (node === undefined || !node.running) return;
    this.attach(node);
    const totals = this.totals(node, nowMs);
    const previous = this.previous;
    this.previous = totals;
    if (previous === undefined || previous.node !== node || totals.atMs <= previous.atMs) return;
    const sample = sampleOf(previous, totals, node.txStates.size);
    this.samples.push(sample);
    if (this.samples.length > SAMPLES_KEPT) this.samples.shift();
    const frame = `data: ${JSON.stringify(sample)}\n\n`;
    for (const client of this.clients) client.write(frame);
  }

  private totals(node: BasaltNode, atMs: number): Totals {
    return {
      node,
      atMs,
      counts: {
        commits: this.outcomes.commits,
        aborts: this.outcomes.aborts,
        implicitReads: node.counters.get(NODE_CLIENT_COUNTERS.implicitReads),
        implicitWrites: node.counters.get(NODE_CLIENT_COUNTERS.implicitWrites),
      },
      resolution: resolutionCounters(node),
      commitLatency: this.commitLatency.snapshot(),
      raftLatency: node.raft.commitLatencyMs(),
    };
  }

  private attach(node: BasaltNode): void {
    if (this.attached?.node === node) return;
    this.attached?.detach();
    this.finishing.clear();
    this.commitLatency = new Histogram(LATENCY_BUCKETS_MS);
    this.outcomes = { commits: 0, aborts: 0 };
    this.attached = { node, detach: node.txStates.observe((event) => this.observe(event)) };
  }

  private observe(event: TxStateMapEvent): void {
    if (event.kind !== 'update' || event.outcome === 'refused') return;
    if (event.reason === 'finish-started' && event.outcome === 'applied') {
      if (this.finishing.size >= FINISHING_TRACKED_MAX) this.finishing.delete(this.finishing.keys().next().value!);
      this.finishing.set(event.txId, performance.now());
      return;
    }
    if (!OUTCOME_REASONS.has(event.reason)) return;
    if (event.to === 'COMMITTED') this.outcomes.commits++;
    else if (event.to === 'ABORTED') this.outcomes.aborts++;
    const startedMs = this.finishing.get(event.txId);
    if (startedMs === undefined) return;
    this.finishing.delete(event.txId);
    if (event.to === 'COMMITTED') this.commitLatency.observe(performance.now() - startedMs);
  }
}

function sampleOf(before: Totals, after: Totals, txStateEntries: number): ConsoleSample {
  const seconds = (after.atMs - before.atMs) / 1_000;
  const rate = (a: Readonly<Record<string, number>>, b: Readonly<Record<string, number>>) =>
    Object.fromEntries(Object.entries(b).map(([k, v]) => [k, round((v - (a[k] ?? 0)) / seconds)]));
  const counts = rate(before.counts, after.counts);
  const commit = difference(before.commitLatency, after.commitLatency);
  const raft = difference(before.raftLatency, after.raftLatency);
  return {
    t: after.atMs,
    intervalMs: after.atMs - before.atMs,
    commits: counts['commits'] ?? 0,
    aborts: counts['aborts'] ?? 0,
    implicitReads: counts['implicitReads'] ?? 0,
    implicitWrites: counts['implicitWrites'] ?? 0,
    commitP50Ms: quantile(commit, 0.5),
    commitP99Ms: quantile(commit, 0.99),
    raftCommitP50Ms: quantile(raft, 0.5),
    raftCommitP99Ms: quantile(raft, 0.99),
    resolution: rate(before.resolution, after.resolution),
    txStateEntries,
  };
}

/** The observations between two snapshots of one running histogram. */
export function difference(before: HistogramSnapshot, after: HistogramSnapshot): HistogramSnapshot {
  return {
    bounds: after.bounds,
    counts: after.counts.map((c, i) => c - (before.counts[i] ?? 0)),
    sum: after.sum - before.sum,
    count: after.count - before.count,
  };
}

function quantile(snapshot: HistogramSnapshot, q: number): number | null {
  const value = snapshot.count > 0 ? estimateQuantile(snapshot, q) : undefined;
  return value === undefined ? null : round(value);
}

function round(value: number): number {
  return Math.round(value * 100) / 100;
}
