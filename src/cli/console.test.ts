/**
 * The web console (console/console-http.ts) on a real 3-node `basalt cluster`: its JSON endpoints read over HTTP, and
 * the page in headless Chromium (driven by puppeteer-core): it loads without console errors, shows the three nodes
 * and every partition's leader, finds an open transaction of the test and a key the test wrote, and turns a killed
 * node red. Screenshots go to .basalt/artifacts/console/. Without Chromium the browser part fails, saying how to get it.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import puppeteer, { type Page } from 'puppeteer-core';
import { connect, type RemoteClient } from '../client/remote.js';
import { freeRange } from '../testing/port-range.js';
import { MetricsServer } from './metrics-http.js';

const MAIN = fileURLToPath(new URL('./main.js', import.meta.url));
const ARTIFACTS = fileURLToPath(new URL('../../../.basalt/artifacts/console/', import.meta.url));
const CHROMIUM = process.env['BASALT_CHROMIUM'] ?? '/usr/bin/chromium';
const TABLE = 'kv';
const run = promisify(execFile);
const PARTITIONS = 4;

interface Answer {
  readonly status: number;
  readonly type: string;
  readonly body: string;
}

/** One HTTP request with the path sent exactly as given (no normalization of dot segments). */
function get(base: string, path: string, method = 'GET'): Promise<Answer> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request({ host: hostname, port, path, method }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, type: String(res.headers['content-type']), body }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function getJson<T>(base: string, path: string): Promise<T> {
  const answer = await get(base, path);
  assert.equal(answer.status, 200, `${path}: ${answer.body}`);
  assert.match(answer.type, /^application\/json/);
  return JSON.parse(answer.body) as T;
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

test('console files: the page, its module and the listed vendor files with their types; nothing else', async () => {
  const server = await MetricsServer.start({ host: '127.0.0.1', port: 0, nodeName: 'n1', nodeOf: () => undefined });
  try {
    const page = await get(server.url, '/console');
    assert.equal(page.status, 200);
    assert.match(page.type, /^text\/html/);
    assert.match(page.body, /importmap/);
    for (const [path, type] of [
      ['/console/app.js', /^text\/javascript/],
      ['/console/vendor/preact.js', /^text\/javascript/],
      ['/console/vendor/hooks.js', /^text\/javascript/],
      ['/console/vendor/htm.js', /^text\/javascript/],
      ['/console/vendor/uplot.js', /^text\/javascript/],
      ['/console/vendor/uplot.css', /^text\/css/],
    ] as const) {
      const answer = await get(server.url, path);
      assert.equal(answer.status, 200, path);
      assert.match(answer.type, type, path);
      assert.ok(answer.body.length > 100, path);
    }
    for (const path of [
      '/console/vendor/../../package.json',
      '/console/vendor/..%2f..%2fpackage.json',
      '/console/vendor/%2e%2e/%2e%2e/package.json',
      '/console/vendor/preact.module.js',
      '/console/vendor/constructor',
      '/console/vendor/__proto__',
      '/console/api/nothing',
      '/console/../../etc/passwd',
    ]) {
      assert.equal((await get(server.url, path)).status, 404, path);
    }
    assert.equal((await get(server.url, '/console', 'POST')).status, 405);
    const noNode = await get(server.url, '/console/api/cluster');
    assert.equal(noNode.status, 503);
    assert.equal(JSON.parse(noNode.body).error.code, 'NODE_UNAVAILABLE');
  } finally {
    await server.close();
  }
});

interface Cluster {
  readonly child: ChildProcess;
  readonly output: () => string;
  readonly metrics: string;
  readonly clientAddress: string;
  readonly pids: ReadonlyMap<string, number>;
  readonly exited: Promise<unknown>;
}

async function startCluster(dir: string): Promise<Cluster> {
  const base = await freeRange(9);
  const args = ['cluster', '--nodes', '3', '--data', join(dir, 'data'), '--table', `${TABLE}:${PARTITIONS}:3`];
  args.push('--base-port', String(base), '--client-port', String(base + 3), '--metrics-port', String(base + 6));
  const child = spawn(process.execPath, [MAIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  const exited = new Promise((resolve) => child.on('exit', resolve));
  const deadline = Date.now() + 90_000;
  while (!/^basalt: ready/m.test(output)) {
    if (Date.now() > deadline || child.exitCode !== null) assert.fail(`no ready cluster:\n${output}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  const pids = new Map([...output.matchAll(/basalt: node (n\d) is pid (\d+)/g)].map((m) => [m[1]!, Number(m[2])]));
  return {
    child,
    output: () => output,
    metrics: `http://127.0.0.1:${base + 6}`,
    clientAddress: `127.0.0.1:${base + 3}`,
    pids,
    exited,
  };
}

interface ClusterJson {
  readonly members: readonly { readonly name: string; readonly liveness: string }[];
  readonly tables: readonly { readonly name: string }[];
  readonly partitions: readonly {
    readonly id: string;
    readonly leader: string | null;
    readonly leaseholder: string | null;
  }[];
  readonly truncated: boolean;
  readonly livenessTimeoutMs: number;
}

test('console on a real 3-node cluster: JSON endpoints, then the page in headless Chromium', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-console-'));
  const cluster = await startCluster(dir);
  let client: RemoteClient | undefined;
  try {
    client = await connect(cluster.clientAddress);
    const c = client;
    for (let i = 1; i <= 5; i++) await c.put(TABLE, `console:k${i}`, { i, text: `value ${i}` });
    // A wall-clock time strictly between the first writes' commit timestamps and the update's.
    await new Promise((r) => setTimeout(r, 30));
    const beforeUpdateMs = Date.now();
    await new Promise((r) => setTimeout(r, 30));
    await c.put(TABLE, 'console:k1', { i: 1, text: 'updated' });
    const open = await c.begin();
    await open.put(TABLE, 'console:open', 'written by an open transaction');
    const shared = { txId: open.id as string };

    await t.test('cluster: three members live, every partition with a leader and a leaseholder, bounded', () =>
      clusterJson(cluster.metrics),
    );
    await t.test('transactions: the open tx is PENDING in its coordinator’s map, among the oldest live', () =>
      transactionsJson(cluster.metrics, shared.txId),
    );
    await t.test('data: prefix pages, a read at an earlier timestamp, a key’s versions', () =>
      dataJson(cluster.metrics, beforeUpdateMs),
    );
    await t.test('events: the backlog, then a sample a second counting commits, aborts and implicit operations', () =>
      eventsJson(cluster.metrics, c),
    );
    await t.test('basalt console --connect prints the page address and what the node sees', async () => {
      const address = cluster.metrics.slice('http://'.length);
      const { stdout } = await run(process.execPath, [MAIN, 'console', '--connect', address]);
      assert.match(stdout, new RegExp(`open ${cluster.metrics}/console\\n`));
      assert.match(stdout, /n1 self, n2 live, n3 live; 4 partitions/);
      await assert.rejects(run(process.execPath, [MAIN, 'console', '--connect', '127.0.0.1:1']), { code: 1 });
    });
    await t.test('the page in headless Chromium', () => browser(cluster, shared.txId));
    await open.rollback().catch(() => {});
  } finally {
    await client?.close().catch(() => {});
    cluster.child.kill('SIGINT');
    await cluster.exited;
    rmSync(dir, { recursive: true, force: true });
  }
});

async function clusterJson(metrics: string): Promise<void> {
  const view = await until('every partition with a leader', async () => {
    const v = await getJson<ClusterJson>(metrics, '/console/api/cluster');
    const ready = v.partitions.length === PARTITIONS && v.partitions.every((p) => p.leader !== null && p.leaseholder);
    return ready ? v : undefined;
  });
  assert.deepEqual(
    view.members.map((m) => [m.name, m.liveness]),
    [
      ['n1', 'self'],
      ['n2', 'live'],
      ['n3', 'live'],
    ],
  );
  assert.deepEqual(
    view.tables.map((x) => x.name),
    [TABLE],
  );
  const one = await getJson<ClusterJson>(metrics, '/console/api/cluster?limit=1');
  assert.equal(one.partitions.length, 1);
  assert.equal(one.truncated, true);
  for (const limit of ['0', '1001', 'x', '-1']) {
    const answer = await get(metrics, `/console/api/cluster?limit=${limit}`);
    assert.equal(answer.status, 400, limit);
    assert.equal(JSON.parse(answer.body).error.code, 'INVALID_ARGUMENT');
  }
}

interface TxJson {
  readonly size: number;
  readonly resolution: Readonly<Record<string, number>>;
  readonly entries: readonly { readonly txId: string; readonly state: string; readonly coordinator: string | null }[];
  readonly oldestLive: readonly { readonly txId: string; readonly state: string; readonly locksHeld: number }[];
}

async function transactionsJson(metrics: string, txId: string): Promise<void> {
  const exact = await getJson<TxJson>(metrics, `/console/api/transactions?q=${encodeURIComponent(txId)}`);
  assert.deepEqual(
    exact.entries.map((e) => [e.txId, e.state, e.coordinator]),
    [[txId, 'PENDING', 'n1']],
  );
  assert.ok(exact.size >= 1);
  assert.ok('commitPartition' in exact.resolution && 'coordinator' in exact.resolution);
  const part = await getJson<TxJson>(metrics, `/console/api/transactions?q=${encodeURIComponent(txId.slice(-12))}`);
  assert.ok(part.entries.some((e) => e.txId === txId));
  const live = exact.oldestLive.find((e) => e.txId === txId);
  assert.equal(live?.state, 'PENDING');
  const limited = await getJson<TxJson>(metrics, '/console/api/transactions?limit=2');
  assert.ok(limited.entries.length <= 2 && limited.oldestLive.length <= 2);
}

interface PageJson {
  readonly rows: readonly { readonly key: string; readonly value: { readonly text: string } }[];
  readonly next: string | null;
}

interface HistoryJson {
  readonly hostedHere: boolean;
  readonly versions: readonly {
    readonly kind: string;
    readonly commitTs: string;
    readonly value: { readonly text: string };
  }[];
}

async function dataJson(metrics: string, beforeUpdateMs: number): Promise<void> {
  const scan = (query: string) => getJson<PageJson>(metrics, `/console/api/data/scan?table=${TABLE}&${query}`);
  const first = await scan('prefix=console%3Ak&limit=2');
  assert.deepEqual(
    first.rows.map((r) => r.key),
    ['console:k1', 'console:k2'],
  );
  assert.equal(first.rows[0]!.value.text, 'updated');
  assert.equal(first.next, 'console:k2');
  const rest = await scan('prefix=console%3Ak&limit=10&after=console%3Ak2');
  assert.deepEqual(
    rest.rows.map((r) => r.key),
    ['console:k3', 'console:k4', 'console:k5'],
  );
  assert.equal(rest.next, null);
  const earlier = await scan(`prefix=console%3Ak1&at=${beforeUpdateMs}`);
  assert.equal(earlier.rows[0]?.value.text, 'value 1', 'a read at a timestamp before the update sees the old value');
  // The history is this node's own replica's, which may apply the update a moment after the primary answered it.
  const history = await until('the update in the local replica', async () => {
    const h = await getJson<HistoryJson>(metrics, `/console/api/data/history?table=${TABLE}&key=console%3Ak1`);
    return h.versions.length >= 2 ? h : undefined;
  });
  assert.equal(history.hostedHere, true);
  assert.deepEqual(
    history.versions.map((v) => [v.kind, v.value.text]),
    [
      ['committed', 'updated'],
      ['committed', 'value 1'],
    ],
  );
  assert.ok(BigInt(history.versions[0]!.commitTs) > BigInt(history.versions[1]!.commitTs));
  assert.equal((await get(metrics, '/console/api/data/scan?table=nope')).status, 400);
  assert.equal((await get(metrics, `/console/api/data/scan?table=${TABLE}&at=yesterday`)).status, 400);
  assert.equal((await get(metrics, `/console/api/data/history?table=${TABLE}`)).status, 400, 'no key');
  assert.equal((await get(metrics, `/console/api/transactions?q=${'x'.repeat(5_000)}`)).status, 400, 'too long');
  assert.equal((await get(metrics, `/console/api/data/scan?table=${TABLE}&prefix=%ZZ`)).status, 200, 'lenient');
  assert.equal((await get(metrics, '/health')).status, 200, 'the node still serves');
}

interface Sample {
  readonly intervalMs: number;
  readonly commits: number;
  readonly aborts: number;
  readonly implicitReads: number;
  readonly implicitWrites: number;
  readonly commitP50Ms: number | null;
  readonly raftCommitP99Ms: number | null;
  readonly resolution: Readonly<Record<string, number>>;
}

/** Reads the event stream: the backlog frame first, then the samples, one a second. */
function eventStream(metrics: string) {
  const { hostname, port } = new URL(metrics);
  const frames: string[] = [];
  let text = '';
  const req = request({ host: hostname, port, path: '/console/api/events' }, (res) => {
    assert.match(String(res.headers['content-type']), /^text\/event-stream/);
    res.setEncoding('utf8');
    res.on('data', (c: string) => {
      text += c;
      const parts = text.split('\n\n');
      text = parts.pop() ?? '';
      frames.push(...parts.filter((f) => f.includes('data: ')));
    });
  });
  req.on('error', () => {});
  req.end();
  return { frames, close: () => req.destroy() };
}

const dataOf = (frame: string): unknown => JSON.parse(frame.slice(frame.indexOf('data: ') + 6));

async function eventsJson(metrics: string, client: RemoteClient): Promise<void> {
  const stream = eventStream(metrics);
  try {
    await until('the backlog frame', async () => stream.frames[0]);
    assert.match(stream.frames[0]!, /^retry: \d+\nevent: backlog\n/);
    assert.ok(Array.isArray(dataOf(stream.frames[0]!)));
    // The first live sample covers the second before it, which may hold the writes of the tests before this one:
    // count from the sample after it.
    await until('a first live sample', async () => (stream.frames.length >= 2 ? true : undefined));
    const from = stream.frames.length;
    for (let i = 0; i < 3; i++) await client.transaction((tx) => tx.put(TABLE, `events:${i}`, i));
    const rolledBack = await client.begin();
    await rolledBack.put(TABLE, 'events:never', 'rolled back');
    await rolledBack.rollback();
    await client.put(TABLE, 'events:implicit', 1);
    await client.put(TABLE, 'events:implicit', 2);
    assert.equal(await client.get(TABLE, 'events:implicit'), 2);
    await client.get(TABLE, 'events:0');
    // Each sample's rates times its interval, summed over the samples since, count what was done: 3 explicit commits
    // and 2 one-phase ones, 1 abort, 2 implicit writes and 2 implicit reads.
    const total = (samples: readonly Sample[], f: (s: Sample) => number) =>
      Math.round(samples.reduce((a, s) => a + (f(s) * s.intervalMs) / 1_000, 0));
    const samples = await until('samples counting the work', async () => {
      const all = stream.frames.slice(from).map((f) => dataOf(f) as Sample);
      return total(all, (s) => s.commits) >= 5 && total(all, (s) => s.implicitReads) >= 2 ? all : undefined;
    });
    await new Promise((r) => setTimeout(r, 1_500));
    const all = stream.frames.slice(from).map((f) => dataOf(f) as Sample);
    assert.ok(all.length >= samples.length);
    assert.equal(
      total(all, (s) => s.commits),
      5,
    );
    assert.equal(
      total(all, (s) => s.aborts),
      1,
    );
    assert.equal(
      total(all, (s) => s.implicitWrites),
      2,
    );
    assert.equal(
      total(all, (s) => s.implicitReads),
      2,
    );
    assert.ok(
      all.some((s) => s.commitP50Ms !== null && s.commitP50Ms > 0),
      'a commit latency was measured',
    );
    assert.ok(
      all.some((s) => s.raftCommitP99Ms !== null),
      'a Raft commit latency was measured',
    );
    assert.ok(all.every((s) => 'commitPartition' in s.resolution && 'recovery' in s.resolution));
  } finally {
    stream.close();
  }
}

async function browser(cluster: Cluster, txId: string): Promise<void> {
  assert.ok(
    existsSync(CHROMIUM),
    `chromium not found at ${CHROMIUM}: the console's browser check needs it (apt-get install -y chromium, or set BASALT_CHROMIUM)`,
  );
  mkdirSync(ARTIFACTS, { recursive: true });
  const chrome = await puppeteer.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
  try {
    const page = await chrome.newPage();
    const errors: string[] = [];
    page.on('console', (m) => (m.type() === 'error' ? errors.push(m.text()) : undefined));
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.setViewport({ width: 1400, height: 1000 });
    await page.goto(`${cluster.metrics}/console`, { waitUntil: 'load' });
    const members = await until('three members shown', async () => {
      const names = await page.$$eval('[data-member]', (els) => els.map((e) => e.getAttribute('data-member')));
      return names.length === 3 ? names : undefined;
    });
    assert.deepEqual(members, ['n1', 'n2', 'n3']);
    const leaders = await until('a leader shown for every partition', async () => {
      const shown = await page.$$eval('tr[data-partition] .leader', (els) => els.map((e) => e.textContent ?? ''));
      return shown.length === PARTITIONS && shown.every((l) => /^n\d$/.test(l)) ? shown : undefined;
    });
    assert.equal(leaders.length, PARTITIONS);
    await findTransaction(page, txId);
    await findKey(page);
    await new Promise((r) => setTimeout(r, 2_500));
    await page.screenshot({ path: join(ARTIFACTS, 'console.png'), fullPage: true });
    assert.deepEqual(errors, [], 'no console errors');
    await killTurnsRed(page, cluster);
  } finally {
    await chrome.close();
  }
}

async function findTransaction(page: Page, txId: string): Promise<void> {
  await page.type('#tx-search', txId);
  const state = await until('the open transaction listed', async () => {
    const states = await page.$$eval(`#transactions tr[data-tx="${txId}"] .state`, (els) =>
      els.map((e) => e.textContent ?? ''),
    );
    return states[0];
  });
  assert.equal(state, 'PENDING');
}

async function findKey(page: Page): Promise<void> {
  await page.type('#data-prefix', 'console:k');
  await page.click('#data-search');
  await page.waitForSelector('tr[data-key="console:k3"]', { timeout: 20_000 });
  const keys = await page.$$eval('tr[data-key]', (rows) => rows.map((r) => r.getAttribute('data-key')));
  assert.deepEqual(keys, ['console:k1', 'console:k2', 'console:k3', 'console:k4', 'console:k5']);
  await page.click('tr[data-key="console:k1"] a');
  const versions = await until('the versions of console:k1', async () => {
    const rows = await page.$$eval('table.history tbody tr', (els) => els.length);
    return rows >= 2 ? rows : undefined;
  });
  assert.equal(versions, 2);
}

async function killTurnsRed(page: Page, cluster: Cluster): Promise<void> {
  const view = await getJson<ClusterJson>(cluster.metrics, '/console/api/cluster');
  const pid = cluster.pids.get('n3');
  assert.ok(pid !== undefined, cluster.output());
  const killedMs = Date.now();
  process.kill(pid, 'SIGKILL');
  await page.waitForSelector('[data-member="n3"].down', { timeout: 30_000 });
  const elapsedMs = Date.now() - killedMs;
  await page.screenshot({ path: join(ARTIFACTS, 'console-node-down.png'), fullPage: true });
  // Gone after the liveness timeout, seen at the next poll (every second); slack for a loaded machine.
  assert.ok(elapsedMs <= view.livenessTimeoutMs + 6_000, `n3 turned red after ${elapsedMs} ms`);
  assert.equal(await page.$eval('[data-member="n1"]', (e) => e.className), 'member ok');
}
