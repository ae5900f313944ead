/**
 * A node's operations endpoint over `node:http`: `GET /metrics` in the Prometheus text format (version 0.0.4) and
 * `GET /health`. The node is looked up on every request (`nodeOf()`), so one server outlives restarts of an in-process
 * node; while there is none, `/metrics` reports `basalt_up 0` and `/health` is 503.
 *
 * Health: 200 when the node runs and knows a metastorage leader (it can serve metadata and route requests), else 503
 * with the reason. Every metric carries the `node` label; node counters (resolution outcomes, recoveries, latency
 * totals, background failures, ...) are exported generically as `basalt_counter_total{name="..."}` so a new counter
 * needs no change here. Lease changes and the primary partition count have their own series; the Raft commit latency
 * is a Prometheus histogram (cumulative `_bucket{le=...}` series ending in `+Inf`, which equals `_count`, and `_sum`).
 * The process's resident set and V8 heap in use are exported under the names Prometheus' client libraries use, and
 * beside them the heap in use as the last major collection left it (read when the collection is reported, once a
 * metrics server runs): the heap in use at a scrape swings with young garbage, the heap after a major GC is what a
 * leak makes grow.
 *
 * The web console is served here too, under `/console` (console/console-http.ts): every path below it goes to
 * `serveConsole`, which, given the client port's `authenticator`, logs every console request in (HTTP Basic) and
 * shows only what the user may read. `/metrics` and `/health` need no login (scrapers and probes).
 *
 * With `tls` (a node with `--certs-dir`) the endpoint is HTTPS (TLS 1.3, the node's certificate; no client
 * certificate asked: what it serves without a login is operational, not data), `/health` included: probes that
 * cannot verify a
 * certificate (a kubelet's `scheme: HTTPS`) still reach it, so no plain listener is kept beside it. Renewed material
 * (`updateTls`) is used by new connections.
 */
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { constants, PerformanceObserver } from 'node:perf_hooks';
import type { Authenticator } from '../client/auth.js';
import { cumulativeCounts, type HistogramSnapshot } from '../core/histogram.js';
import type { BasaltNode } from '../node/basalt-node.js';
import { ConsoleLogins } from './console/console-auth.js';
import { type ConsoleContext, isConsolePath, serveConsole } from './console/console-http.js';
import { ConsoleTelemetry } from './console/console-telemetry.js';

export interface MetricsServerOptions {
  readonly host: string;
  /** The host named in `url` when it differs from the one listened on (a wildcard, a container). */
  readonly advertisedHost?: string;
  /** 0: an ephemeral port. */
  readonly port: number;
  readonly nodeName: string;
  readonly nodeOf: () => BasaltNode | undefined;
  /** Counts kept by the command itself (e.g. leader changes seen), exported as `basalt_<name>`. */
  readonly extra?: () => Readonly<Record<string, number>>;
  /** Serve HTTPS with this certificate and key (the node's); plain HTTP without. */
  readonly tls?: { readonly cert: string; readonly key: string };
  /** Check console logins with this (the client port's, so failures are throttled and counted together). */
  readonly authenticator?: Authenticator;
  /** Told of each refused console login (the message names the user, never the password). */
  readonly onConsoleRefused?: (source: string, message: string) => void;
}

/** Heap in use right after the latest major GC this process reported (undefined before the first). */
let heapAfterMajorGc: number | undefined;
let gcObserver: PerformanceObserver | undefined;

function watchMajorGcs(): void {
  if (gcObserver !== undefined) return;
  gcObserver = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const kind = (entry as { readonly detail?: { readonly kind?: number } }).detail?.kind;
      if (kind === constants.NODE_PERFORMANCE_GC_MAJOR) heapAfterMajorGc = process.memoryUsage().heapUsed;
    }
  });
  gcObserver.observe({ entryTypes: ['gc'] });
  // The observer must not keep a process alive that has nothing else to do.
  (gcObserver as unknown as { unref?: () => void }).unref?.();
}

export class MetricsServer {
  private constructor(
    private readonly server: Server,
    readonly url: string,
    private readonly telemetry: ConsoleTelemetry,
  ) {}

  static async start(options: MetricsServerOptions): Promise<MetricsServer> {
    watchMajorGcs();
    const telemetry = new ConsoleTelemetry(options.nodeOf);
    const consoleContext: ConsoleContext = {
      nodeOf: options.nodeOf,
      telemetry,
      version: packageVersion(),
      ...(options.authenticator !== undefined && {
        logins: new ConsoleLogins(options.authenticator, (name) => options.nodeOf()?.metastorage.user(name)),
      }),
      ...(options.onConsoleRefused !== undefined && { onRefused: options.onConsoleRefused }),
    };
    const handler = (request: IncomingMessage, response: ServerResponse) =>
      handle(options, consoleContext, request, response);
    const server =
      options.tls === undefined ? createServer(handler) : createHttpsServer(httpsOptions(options.tls), handler);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port, options.host, () => resolve());
    });
    const { port } = server.address() as AddressInfo;
    const host = options.advertisedHost ?? options.host;
    telemetry.start();
    const scheme = options.tls === undefined ? 'http' : 'https';
    return new MetricsServer(server, `${scheme}://${host.includes(':') ? `[${host}]` : host}:${port}`, telemetry);
  }

  /** Renewed certificate and key for new connections (HTTPS only). */
  updateTls(material: { readonly cert: string; readonly key: string }): void {
    if (!this.url.startsWith('https:')) return;
    (this.server as HttpsServer).setSecureContext(httpsOptions(material));
  }

  close(): Promise<void> {
    this.telemetry.stop();
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

/** This package's version, as its package.json says (two levels above the built `dist/src/cli`). */
function packageVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as {
      version?: unknown;
    };
    return typeof pkg.version === 'string' ? pkg.version : 'unknown';
  } catch {
    return 'unknown';
  }
}

function httpsOptions(material: { readonly cert: string; readonly key: string }) {
  return { cert: material.cert, key: material.key, minVersion: 'TLSv1.3', maxVersion: 'TLSv1.3' } as const;
}

function handle(
  options: MetricsServerOptions,
  consoleContext: ConsoleContext,
  request: IncomingMessage,
  response: ServerResponse,
): void {
  const path = (request.url ?? '/').split('?')[0] ?? '/';
  if (request.method !== 'GET') {
    reply(response, 405, 'text/plain', 'method not allowed\n');
  } else if (isConsolePath(path)) {
    const consoleRequest = {
      url: new URL(request.url ?? '/', 'http://console.invalid'),
      source: request.socket.remoteAddress ?? '?',
      authorization: request.headers.authorization,
    };
    void serveConsole(consoleContext, consoleRequest, response).catch(() => response.destroy());
  } else if (path === '/metrics') {
    reply(response, 200, 'text/plain; version=0.0.4; charset=utf-8', renderMetrics(options));
  } else if (path === '/health') {
    const health = healthOf(options.nodeOf());
    reply(response, health.ok ? 200 : 503, 'application/json', `${JSON.stringify(health)}\n`);
  } else {
    reply(response, 404, 'text/plain', 'not found: try /metrics, /health or /console\n');
  }
}

function reply(response: ServerResponse, status: number, type: string, body: string): void {
  response.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
  response.end(body);
}

export interface Health {
  readonly ok: boolean;
  readonly reason?: string;
  readonly metastorageLeader?: string;
}

export function healthOf(node: BasaltNode | undefined): Health {
  if (node === undefined || !node.running) return { ok: false, reason: 'the node is not running' };
  const leader = node.metastorage.leader();
  if (leader === undefined) return { ok: false, reason: 'no metastorage leader known' };
  return { ok: true, metastorageLeader: leader };
}

/** The Prometheus text exposition of one node. */
export function renderMetrics(options: Pick<MetricsServerOptions, 'nodeName' | 'nodeOf' | 'extra'>): string {
  const out = new MetricsText(options.nodeName);
  const node = options.nodeOf();
  const running = node?.running === true;
  out.metric('basalt_up', 'gauge', '1 while the node runs', [[{}, running ? 1 : 0]]);
  out.metric('basalt_healthy', 'gauge', '1 while the node runs and knows a metastorage leader', [
    [{}, healthOf(node).ok ? 1 : 0],
  ]);
  if (node !== undefined && running) renderNode(out, node);
  // The process, as Prometheus' client libraries name it: what a soak watches to see memory stay flat.
  const memory = process.memoryUsage();
  out.metric('process_resident_memory_bytes', 'gauge', 'resident set size of the node process', [[{}, memory.rss]]);
  out.metric('nodejs_heap_size_used_bytes', 'gauge', 'V8 heap in use', [[{}, memory.heapUsed]]);
  // Outside the V8 heap: memory of C++ objects bound to JS ones, Buffers and ArrayBuffers included.
  out.metric('nodejs_external_memory_bytes', 'gauge', 'memory outside the V8 heap held by JS objects', [
    [{}, memory.external],
  ]);
  out.metric('nodejs_array_buffers_bytes', 'gauge', 'memory of Buffers and ArrayBuffers', [[{}, memory.arrayBuffers]]);
  if (heapAfterMajorGc !== undefined) {
    out.metric('nodejs_heap_used_after_major_gc_bytes', 'gauge', 'V8 heap in use after the last major GC', [
      [{}, heapAfterMajorGc],
    ]);
  }
  for (const [name, value] of Object.entries(options.extra?.() ?? {})) {
    out.metric(`basalt_${name}`, name.endsWith('_total') ? 'counter' : 'gauge', name.replaceAll('_', ' '), [
      [{}, value],
    ]);
  }
  return out.text();
}

function renderNode(out: MetricsText, node: BasaltNode): void {
  const m = node.metrics();
  out.metric('basalt_node_info', 'gauge', "this incarnation's ephemeral id", [[{ ephemeral_id: node.self.id }, 1]]);
  out.metric('basalt_resolution_total', 'counter', 'write intents resolved, by the path that answered', [
    [{ path: 'local' }, m.resolution.local],
    [{ path: 'coordinator' }, m.resolution.coordinator],
    [{ path: 'commit_partition' }, m.resolution.commitPartition],
  ]);
  out.metric('basalt_recoveries_total', 'counter', 'transactions decided by recovery on this node', [
    [{}, m.recoveries],
  ]);
  out.metric('basalt_raft_groups', 'gauge', 'Raft groups this node is a member of', [[{}, m.raftGroups]]);
  out.metric('basalt_raft_leaderships', 'gauge', 'Raft groups this node leads', [[{}, m.raftLeaderships]]);
  out.metric('basalt_raft_quiet_groups', 'gauge', 'Raft groups quiet on this node (idle)', [[{}, m.raftQuietGroups]]);
  out.metric('basalt_live_peers', 'gauge', 'peers this node sees live', [[{}, m.livePeers.length]]);
  out.metric('basalt_meta_revision', 'gauge', 'metastorage revision applied here', [[{}, m.metaRevision]]);
  const view = node.metastorage.view();
  out.metric('basalt_members', 'gauge', 'cluster members as this node knows them, by state', [
    [{ state: 'active' }, (view.members ?? []).filter((x) => x.state === 'active').length],
    [{ state: 'leaving' }, (view.members ?? []).filter((x) => x.state === 'leaving').length],
  ]);
  out.metric(
    'basalt_moves_in_progress',
    'gauge',
    'partitions moving to a new set of replicas (metastorage targets), and to where',
    (view.targets ?? []).length === 0
      ? [[{}, 0]]
      : (view.targets ?? []).map(([partition, replicas]) => [{ partition, to: replicas.join(',') }, 1]),
  );
  out.metric('basalt_hosted_partitions', 'gauge', 'partition replicas hosted here', [[{}, m.hostedPartitions]]);
  out.metric('basalt_tx_state_entries', 'gauge', 'entries of the volatile tx state map', [[{}, m.txStateEntries]]);
  out.metric('basalt_pending_requests', 'gauge', 'requests to peers awaiting a response', [[{}, m.pendingRequests]]);
  if (m.peerTraffic !== undefined) {
    const { messagesSent, writes } = m.peerTraffic;
    out.metric('basalt_peer_messages_sent_total', 'counter', 'messages sent to peers', [[{}, messagesSent]]);
    out.metric('basalt_peer_writes_total', 'counter', 'socket writes to peers (one per peer per turn)', [[{}, writes]]);
  }
  out.metric('basalt_lease_changes_total', 'counter', 'applied leases whose holder differs from the previous one', [
    [{}, m.leases.changes],
  ]);
  out.metric('basalt_leases_acquired_total', 'counter', "leases this node's replicas acquired as primary", [
    [{}, m.leases.acquired],
  ]);
  out.metric('basalt_leases_lost_total', 'counter', "leases this node's replicas lost to another holder", [
    [{}, m.leases.lost],
  ]);
  out.metric('basalt_primary_partitions', 'gauge', 'hosted partitions whose current lease names this node', [
    [{}, m.leases.primaryPartitions],
  ]);
  out.histogram(
    'basalt_raft_commit_latency_ms',
    'milliseconds from propose to committed and applied, on the Raft leader',
    m.raftCommitLatencyMs,
  );
  renderGroups(out, node);
  out.metric(
    'basalt_counter_total',
    'counter',
    'every counter of the node incarnation, by name',
    Object.entries(m.counters).map(([name, value]) => [{ name }, value]),
  );
}

/** Per Raft group (metastorage and partitions) as this node sees it: what `basalt status` reads. */
function renderGroups(out: MetricsText, node: BasaltNode): void {
  const groups = [...node.raft.groupIds()].sort();
  const statuses = groups.flatMap((group) => {
    const status = node.raft.status(group);
    return status === undefined ? [] : [{ group, status }];
  });
  out.metric(
    'basalt_raft_term',
    'gauge',
    'current Raft term, by group',
    statuses.map(({ group, status }) => [{ group }, Number(status.term)]),
  );
  out.metric(
    'basalt_raft_applied_index',
    'gauge',
    'last applied log index, by group',
    statuses.map(({ group, status }) => [{ group }, Number(status.applied)]),
  );
  out.metric(
    'basalt_raft_commit_index',
    'gauge',
    'commit index known here, by group',
    statuses.map(({ group, status }) => [{ group }, Number(status.commit)]),
  );
  out.metric(
    'basalt_raft_leader',
    'gauge',
    'the leader this node follows, by group (1 per known leader)',
    statuses.flatMap(({ group, status }) => (status.leader === null ? [] : [[{ group, leader: status.leader }, 1]])),
  );
  out.metric(
    'basalt_partition_primary',
    'gauge',
    'the primary (leaseholder) of each hosted partition as this node knows it',
    statuses.flatMap(({ group }) => {
      const primary = node.partitions.primaryOf?.(group);
      return primary === undefined ? [] : [[{ group, primary }, 1] as const];
    }),
  );
}

type Sample = readonly [labels: Readonly<Record<string, string>>, value: number];

/** Accumulates metric families; every sample gets the `node` label. */
class MetricsText {
  private readonly lines: string[] = [];
  constructor(private readonly nodeName: string) {}

  metric(name: string, type: 'counter' | 'gauge', help: string, samples: readonly Sample[]): void {
    this.lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    for (const [labels, value] of samples) this.sample(name, labels, value);
  }

  /** A histogram family: cumulative `_bucket` series by upper bound (`+Inf` last, equal to the count), `_sum`, `_count`. */
  histogram(name: string, help: string, snapshot: HistogramSnapshot): void {
    this.lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} histogram`);
    const cumulative = cumulativeCounts(snapshot);
    cumulative.forEach((count, i) => {
      const bound = snapshot.bounds[i];
      this.sample(`${name}_bucket`, { le: bound === undefined ? '+Inf' : String(bound) }, count);
    });
    this.sample(`${name}_sum`, {}, snapshot.sum);
    this.sample(`${name}_count`, {}, snapshot.count);
  }

  private sample(name: string, labels: Readonly<Record<string, string>>, value: number): void {
    const text = Object.entries({ node: this.nodeName, ...labels })
      .map(([k, v]) => `${k}="${escapeLabel(v)}"`)
      .join(',');
    this.lines.push(`${name}{${text}} ${Number.isFinite(value) ? value : 'NaN'}`);
  }

  text(): string {
    return `${this.lines.join('\n')}\n`;
  }
}

function escapeLabel(value: string): string {
  return value.replaceAll('\\', '\\\\').replaceAll('"', '\\"').replaceAll('\n', '\\n');
}
