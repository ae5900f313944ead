/**
 * Administrative commands against a running cluster: `basalt table create|list` and `basalt node list|remove` over
 * the client protocol (`--connect host:port`), and `basalt status` from the nodes' `/metrics` and `/health` endpoints (`--metrics
 * host:port,...`): which nodes answer (with the partitions each is primary of and its Raft commit latency p50/p99,
 * estimated from the exported histogram's buckets), and for every partition its Raft leader, its primary (leaseholder) as the
 * nodes know it, the term, each replica's applied index and the largest lag among them, then the partitions moving to
 * new replicas (from the node with the freshest metastorage view). Status reads only what the nodes export, so a node that
 * is down shows as down and its replicas' figures are missing rather than guessed.
 */
import { get as httpGet, type IncomingMessage } from 'node:http';
import { get as httpsGet } from 'node:https';
import { type ConnectOptions, connect } from '../client/remote.js';
import { estimateQuantile, type HistogramSnapshot } from '../core/histogram.js';
import { log } from './common.js';

export const DEFAULT_CONNECT = '127.0.0.1:10800';
export const DEFAULT_METRICS = '127.0.0.1:10900,127.0.0.1:10901,127.0.0.1:10902';
const SCRAPE_TIMEOUT_MS = 3_000;

export async function tableCreate(
  address: string,
  name: string,
  partitions: number,
  replicas: number,
  options: ConnectOptions = {},
): Promise<void> {
  const client = await connect(address, options);
  try {
    const table = await client.createTable(name, { partitions, replicas });
    log(`table ${table.name} created (id ${table.id}, ${table.partitions} partitions, ${table.replicas} replicas)`);
  } finally {
    await client.close();
  }
}

export async function tableList(address: string, options: ConnectOptions = {}): Promise<void> {
  const client = await connect(address, options);
  try {
    const tables = await client.tables();
    if (tables.length === 0) log('no tables');
    for (const t of tables) log(`${t.name}\tid ${t.id}\t${t.partitions} partitions\t${t.replicas} replicas`);
  } finally {
    await client.close();
  }
}

export async function nodeList(address: string, options: ConnectOptions = {}): Promise<void> {
  const client = await connect(address, options);
  try {
    for (const m of await client.members()) {
      const flags = [m.state, ...(m.dead === true ? ['dead'] : []), ...(m.meta === true ? ['metastorage'] : [])];
      log(`${m.name}\t${m.address || '-'}\t${flags.join(' ')}`);
    }
  } finally {
    await client.close();
  }
}

/** Starts removing a node; its replicas move (or, dead, are rebuilt) in the background: `basalt node list` shows it. */
export async function nodeRemove(
  address: string,
  name: string,
  dead: boolean,
  options: ConnectOptions = {},
): Promise<void> {
  const client = await connect(address, options);
  try {
    await client.removeNode(name, { dead });
    log(
      dead
        ? `node ${name} declared dead: its replicas are being rebuilt on the other nodes`
        : `node ${name} is leaving: its replicas move to the other nodes, then it may be stopped`,
    );
  } finally {
    await client.close();
  }
}

/** One sample of a Prometheus text body. */
export interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

export function parseMetrics(body: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of body.split('\n')) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (m === null) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    samples.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return samples;
}

interface NodeView {
  readonly address: string;
  readonly name?: string;
  readonly up: boolean;
  readonly detail: string;
  readonly samples: readonly Sample[];
}

/** GET over HTTP, or HTTPS trusting `ca` (the nodes' metrics ports with `--certs-dir`): the body of any status. */
function getText(address: string, path: string, ca: string | undefined): Promise<string> {
  const url = `${ca === undefined ? 'http' : 'https'}://${address}${path}`;
  return new Promise((resolve, reject) => {
    const onResponse = (response: IncomingMessage): void => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (body += chunk));
      response.on('end', () => resolve(body));
      response.on('error', reject);
    };
    const options = { timeout: SCRAPE_TIMEOUT_MS, ...(ca !== undefined && { ca, minVersion: 'TLSv1.3' as const }) };
    const request = ca === undefined ? httpGet(url, options, onResponse) : httpsGet(url, options, onResponse);
    request.on('timeout', () => request.destroy(new Error(`no answer within ${SCRAPE_TIMEOUT_MS} ms`)));
    request.on('error', reject);
  });
}

async function scrape(address: string, ca: string | undefined): Promise<NodeView> {
  try {
    const [metrics, health] = await Promise.all([getText(address, '/metrics', ca), getText(address, '/health', ca)]);
    const samples = parseMetrics(metrics);
    const name = samples.find((s) => s.name === 'basalt_up')?.labels['node'];
    const h = JSON.parse(health) as { ok: boolean; reason?: string; metastorageLeader?: string };
    const detail = h.ok ? `healthy, metastorage leader ${h.metastorageLeader}` : `unhealthy: ${h.reason}`;
    return { address, ...(name !== undefined && { name }), up: true, detail, samples };
  } catch (error) {
    return { address, up: false, detail: `down (${(error as Error).message})`, samples: [] };
  }
}

/** Prints the status; resolves with the number of nodes that answered. */
export async function status(metricsAddresses: readonly string[], ca?: string): Promise<number> {
  const views = await Promise.all(metricsAddresses.map((address) => scrape(address, ca)));
  log('nodes:');
  for (const v of views) {
    const id = v.samples.find((s) => s.name === 'basalt_node_info')?.labels['ephemeral_id'];
    const peers = v.samples.find((s) => s.name === 'basalt_live_peers')?.value;
    const extra = v.up ? ` id ${id ?? '?'}, live peers ${peers ?? '?'}, ${leaseAndLatencyText(v.samples)}` : '';
    log(`  ${v.name ?? '?'}\t${v.address}\t${v.up ? 'up' : 'down'}\t${v.detail}${extra}`);
  }
  log('groups (metastorage and partitions):');
  for (const line of groupLines(views)) log(`  ${line}`);
  // The freshest node's view of the moves: the one with the highest metastorage revision.
  const freshest = views
    .filter((v) => v.up)
    .sort(
      (a, b) =>
        (b.samples.find((s) => s.name === 'basalt_meta_revision')?.value ?? 0) -
        (a.samples.find((s) => s.name === 'basalt_meta_revision')?.value ?? 0),
    )[0];
  const moves = (freshest?.samples ?? []).filter((s) => s.name === 'basalt_moves_in_progress' && s.labels['partition']);
  log(moves.length === 0 ? 'moves in progress: none' : `moves in progress: ${moves.length}`);
  for (const m of moves) log(`  ${m.labels['partition']} → ${m.labels['to']}`);
  return views.filter((v) => v.up).length;
}

/** The node's primary partition count and its commit latency p50/p99 (ms, from the histogram buckets). */
function leaseAndLatencyText(samples: readonly Sample[]): string {
  const primaries = samples.find((s) => s.name === 'basalt_primary_partitions')?.value;
  const latency = histogramOf(samples, 'basalt_raft_commit_latency_ms');
  const ms = (q: number) => {
    const v = latency === undefined ? undefined : estimateQuantile(latency, q);
    return v === undefined ? '-' : v.toFixed(1);
  };
  return `primaries ${primaries ?? '?'}, commit latency p50 ${ms(0.5)} ms p99 ${ms(0.99)} ms`;
}

/** A histogram back from its cumulative `_bucket{le=...}` samples (undefined when the family is absent). */
export function histogramOf(samples: readonly Sample[], name: string): HistogramSnapshot | undefined {
  const buckets = samples
    .filter((s) => s.name === `${name}_bucket` && s.labels['le'] !== undefined)
    .map((s) => ({ le: s.labels['le'] === '+Inf' ? Number.POSITIVE_INFINITY : Number(s.labels['le']), total: s.value }))
    .sort((a, b) => a.le - b.le);
  if (buckets.length === 0 || buckets.at(-1)?.le !== Number.POSITIVE_INFINITY) return undefined;
  const counts = buckets.map((b, i) => b.total - (i === 0 ? 0 : (buckets[i - 1]?.total ?? 0)));
  const sum = samples.find((s) => s.name === `${name}_sum`)?.value ?? 0;
  return { bounds: buckets.slice(0, -1).map((b) => b.le), counts, sum, count: buckets.at(-1)?.total ?? 0 };
}

function groupLines(views: readonly NodeView[]): string[] {
  const groups = new Map<
    string,
    { leader?: string; primary?: string; term: number; applied: { node: string; index: number }[] }
  >();
  for (const v of views) {
    for (const s of v.samples) {
      const group = s.labels['group'];
      if (group === undefined) continue;
      const g = groups.get(group) ?? { term: 0, applied: [] };
      groups.set(group, g);
      if (s.name === 'basalt_raft_leader') g.leader = s.labels['leader'];
      if (s.name === 'basalt_partition_primary') g.primary = s.labels['primary'];
      if (s.name === 'basalt_raft_term') g.term = Math.max(g.term, s.value);
      if (s.name === 'basalt_raft_applied_index') g.applied.push({ node: v.name ?? '?', index: s.value });
    }
  }
  return [...groups]
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(
      ([group, g]) =>
        `${group}\tleader ${g.leader ?? 'none'}\tprimary ${g.primary ?? (group === 'meta' ? '-' : 'none')}\t` +
        `term ${g.term}\tapplied ${appliedText(g.applied)}`,
    );
}

/** Each replica's applied index and the largest lag behind the most advanced replica that answered. */
function appliedText(applied: readonly { node: string; index: number }[]): string {
  if (applied.length === 0) return 'none';
  const max = Math.max(...applied.map((a) => a.index));
  const lag = Math.max(...applied.map((a) => max - a.index));
  return `${applied.map((a) => `${a.node}=${a.index}`).join(' ')}\tlag ${lag}`;
}
