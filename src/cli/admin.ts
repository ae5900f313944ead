/**
 * Administrative commands against a running cluster: `basalt table create|list` over the client protocol
 * (`--connect host:port`), and `basalt status` from the nodes' `/metrics` and `/health` endpoints (`--metrics
 * host:port,...`): which nodes answer, and for every partition its Raft leader, its primary (leaseholder) as the
 * nodes know it, the term, each replica's applied index and the largest lag among them. Status reads only what the nodes export, so a node that
 * is down shows as down and its replicas' figures are missing rather than guessed.
 */
import { connect } from '../client/remote.js';
import { log } from './common.js';

export const DEFAULT_CONNECT = '127.0.0.1:10800';
export const DEFAULT_METRICS = '127.0.0.1:10900,127.0.0.1:10901,127.0.0.1:10902';
const SCRAPE_TIMEOUT_MS = 3_000;

export async function tableCreate(address: string, name: string, partitions: number, replicas: number): Promise<void> {
  const client = await connect(address);
  try {
    const table = await client.createTable(name, { partitions, replicas });
    log(`table ${table.name} created (id ${table.id}, ${table.partitions} partitions, ${table.replicas} replicas)`);
  } finally {
    await client.close();
  }
}

export async function tableList(address: string): Promise<void> {
  const client = await connect(address);
  try {
    const tables = await client.tables();
    if (tables.length === 0) log('no tables');
    for (const t of tables) log(`${t.name}\tid ${t.id}\t${t.partitions} partitions\t${t.replicas} replicas`);
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

async function scrape(address: string): Promise<NodeView> {
  try {
    const signal = AbortSignal.timeout(SCRAPE_TIMEOUT_MS);
    const [metrics, health] = await Promise.all([
      fetch(`http://${address}/metrics`, { signal }),
      fetch(`http://${address}/health`, { signal }),
    ]);
    const samples = parseMetrics(await metrics.text());
    const name = samples.find((s) => s.name === 'basalt_up')?.labels['node'];
    const h = (await health.json()) as { ok: boolean; reason?: string; metastorageLeader?: string };
    const detail = h.ok ? `healthy, metastorage leader ${h.metastorageLeader}` : `unhealthy: ${h.reason}`;
    return { address, ...(name !== undefined && { name }), up: true, detail, samples };
  } catch (error) {
    return { address, up: false, detail: `down (${(error as Error).message})`, samples: [] };
  }
}

/** Prints the status; resolves with the number of nodes that answered. */
export async function status(metricsAddresses: readonly string[]): Promise<number> {
  const views = await Promise.all(metricsAddresses.map(scrape));
  log('nodes:');
  for (const v of views) {
    const id = v.samples.find((s) => s.name === 'basalt_node_info')?.labels['ephemeral_id'];
    const peers = v.samples.find((s) => s.name === 'basalt_live_peers')?.value;
    const extra = v.up ? ` id ${id ?? '?'}, live peers ${peers ?? '?'}` : '';
    log(`  ${v.name ?? '?'}\t${v.address}\t${v.up ? 'up' : 'down'}\t${v.detail}${extra}`);
  }
  log('groups (metastorage and partitions):');
  for (const line of groupLines(views)) log(`  ${line}`);
  return views.filter((v) => v.up).length;
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
