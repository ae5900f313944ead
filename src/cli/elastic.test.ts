/**
 * An elastic cluster of real processes: three `basalt start` processes (LMDB, TCP), a bank workload over `connect()`;
 * two more nodes join with `--join` and partitions move onto them while transfers run; one of the original three is
 * killed with kill -9, removed as dead (`removeNode(name, { dead })`, what `basalt node remove --dead` sends) and
 * replaced by a sixth node that joins; a node that lost its disk and joins again under its name is refused. Checked: the members as the cluster lists them after each step, the new nodes
 * hosting partitions, every acknowledged transfer's record at the end, and balances moved by exactly the transfers
 * that applied. Once more with TLS: every node (the joiners too) with a certificate of one CA, mutual TLS between
 * them, the client logged in as the admin by client certificate, /metrics over HTTPS.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { get as httpsGet } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect, type RemoteClient } from '../client/remote.js';
import { checkBank, SMALL_BANK } from '../testing/small-bank.js';
import { CERT_FILES, localClientCerts, localClusterCerts } from './certs.js';
import { ChildNode } from './child-node.js';
import { LOCAL_ADMIN } from './cluster-command.js';
import { freePorts } from './free-ports.js';

const { table: TABLE, accounts: ACCOUNTS, initialBalance: INITIAL_BALANCE, account, ends } = SMALL_BANK;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(what: string, condition: () => boolean | Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    assert.ok(Date.now() < deadline, `${what} within ${timeoutMs} ms`);
    await sleep(200);
  }
}

/** The partitions a node says it hosts in its latest status line. */
function hosted(child: ChildNode): number {
  const lines = [...child.output.matchAll(/hosted partitions: (\d+)/g)];
  return lines.length === 0 ? 0 : Number(lines[lines.length - 1]![1]);
}

/** On a failure: every node's output goes to a kept directory, and the last lines of each to the test's output. */
function keepOutputs(
  procs: ReadonlyMap<string, ChildNode>,
  summary: string,
  files: Readonly<Record<string, string>>,
): void {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-elastic-failed-'));
  process.stdout.write(`# elastic failed (${summary}); node outputs kept in ${dir}\n`);
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  for (const line of (files['failures.txt'] ?? '').split('\n').slice(-8)) process.stdout.write(`# ${line}\n`);
  for (const [name, child] of procs) {
    writeFileSync(join(dir, `${name}.log`), child.output);
    const tail = child.output.trimEnd().split('\n').slice(-12);
    for (const line of tail) process.stdout.write(`# ${name}: ${line}\n`);
  }
}

/** A TLS run's material: each node's certificate directory, the admin's client material. */
interface ElasticTls {
  readonly nodeDirs: ReadonlyMap<string, string>;
  readonly client: { readonly ca: string; readonly cert: string; readonly key: string };
}

async function elasticTls(dir: string): Promise<ElasticTls> {
  const nodeDirs = await localClusterCerts(dir, ['n1', 'n2', 'n3', 'n4', 'n5', 'n6']);
  const clientDir = await localClientCerts(dir, LOCAL_ADMIN);
  const read = (file: string) => readFileSync(join(clientDir, file), 'utf8');
  const client = {
    ca: read(CERT_FILES.caCert),
    cert: read(CERT_FILES.clientCert(LOCAL_ADMIN)),
    key: read(CERT_FILES.clientKey(LOCAL_ADMIN)),
  };
  return { nodeDirs, client };
}

/** n1's /metrics: over HTTP, or over HTTPS trusting the cluster CA. */
function metricsText(port: number, tls: ElasticTls | undefined): Promise<string> {
  if (tls === undefined) return fetch(`http://127.0.0.1:${port}/metrics`).then((r) => r.text());
  return new Promise((resolve, reject) => {
    const request = httpsGet(`https://127.0.0.1:${port}/metrics`, { ca: tls.client.ca }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (body += chunk));
      response.on('end', () => resolve(body));
      response.on('error', reject);
    });
    request.on('error', reject);
  });
}

async function elastic(withTls: boolean): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'basalt-elastic-'));
  const ports = await freePorts(13);
  const metricsPort = ports[12]!;
  const peerPort = (i: number) => ports[i - 1]!;
  const clientPort = (i: number) => ports[5 + i]!;
  const procs = new Map<string, ChildNode>();
  const tls = withTls ? await elasticTls(join(dataDir, 'certs')) : undefined;
  const common = (i: number) => [
    '--name',
    `n${i}`,
    '--port',
    String(peerPort(i)),
    '--data',
    join(dataDir, `n${i}`),
    '--client-port',
    String(clientPort(i)),
    '--status-interval',
    '500',
    ...(tls === undefined ? [] : ['--certs-dir', tls.nodeDirs.get(`n${i}`)!]),
  ];
  const founder = (i: number) => {
    const peers = [1, 2, 3].filter((j) => j !== i).map((j) => `n${j}=127.0.0.1:${peerPort(j)}`);
    const metrics = i === 1 ? ['--metrics-port', String(metricsPort)] : [];
    if (i === 1 && tls !== undefined) metrics.push('--init-admin', LOCAL_ADMIN);
    return ['start', ...common(i), '--peers', peers.join(','), '--table', `${TABLE}:4:3`, ...metrics];
  };
  const joiner = (i: number) => ['start', ...common(i), '--join', `127.0.0.1:${peerPort(1)}`];
  const launch = (i: number, args: string[]): ChildNode => {
    const child = new ChildNode(args);
    procs.set(`n${i}`, child);
    return child;
  };
  const ready = (child: ChildNode) => child.waitFor(/basalt: node n\d ready/, 60_000);
  let client: RemoteClient | undefined;
  const acknowledged: number[] = [];
  const unknown: number[] = [];
  /** What the last transfer attempts did, for the report of a failed run. */
  const failures: string[] = [];
  const note = (line: string): void => {
    failures.push(line);
    if (failures.length > 200) failures.shift();
  };
  let stopping = false;
  let workers: Promise<void>[] = [];
  try {
    await Promise.all([1, 2, 3].map((i) => ready(launch(i, founder(i)))));
    client = await connect(`127.0.0.1:${clientPort(1)}`, { timeoutMs: 10_000, ...tls?.client });
    // Over TLS the nodes check users: the client logged in as the admin its certificate names.
    assert.equal(client.user, tls === undefined ? undefined : LOCAL_ADMIN);
    const bank = client;
    await bank.transaction(
      (tx) =>
        tx.putAll(
          TABLE,
          Array.from({ length: ACCOUNTS }, (_, i) => ({ key: account(i), value: INITIAL_BALANCE })),
        ),
      { retries: 50 },
    );
    let next = 0;
    const transfer = async (): Promise<void> => {
      const id = next++;
      const [from, to] = ends(id).map(account) as [string, string];
      try {
        let attempt = 0;
        await bank.transaction(
          async (tx) => {
            attempt += 1;
            note(`${new Date().toISOString()} transfer ${id} attempt ${attempt} begins`);
            try {
              const [a, b] = (await tx.getAll(TABLE, [from, to])) as [number, number];
              await tx.put(TABLE, from, a - 1);
              await tx.put(TABLE, to, b + 1);
              await tx.put(TABLE, `xfer/${id}`, id);
            } catch (error) {
              const code = (error as { code?: string }).code;
              note(
                `${new Date().toISOString()} transfer ${id} attempt ${attempt}: ${code} ${(error as Error).message}`,
              );
              throw error;
            }
          },
          { retries: 30 },
        );
        acknowledged.push(id);
      } catch (error) {
        const code = (error as { code?: string }).code;
        if (code === 'TX_OUTCOME_UNKNOWN') unknown.push(id);
        note(`${new Date().toISOString()} transfer ${id} failed: ${code ?? ''} ${(error as Error).message}`);
        await sleep(50);
      }
    };
    workers = [0, 1].map(async () => {
      while (!stopping) await transfer();
    });
    await until('transfers before the joins', () => acknowledged.length >= 10);

    await Promise.all([4, 5].map((i) => ready(launch(i, joiner(i)))));
    await until('five active members', async () => {
      const members = await bank.members();
      return members.filter((m) => m.state === 'active').length === 5;
    });
    await until('the joined nodes host partitions', () => hosted(procs.get('n4')!) > 0 && hosted(procs.get('n5')!) > 0);
    // /metrics (what `basalt status` reads) shows the members and the moves in progress.
    await until('n1 exports five active members', async () => {
      const text = await metricsText(metricsPort, tls);
      return /^basalt_members\{[^}]*state="active"[^}]*\} 5$/m.test(text) && /^basalt_moves_in_progress/m.test(text);
    });
    const afterJoin = acknowledged.length;
    await until('transfers go on after the joins', () => acknowledged.length >= afterJoin + 10);

    procs.get('n3')!.signal('SIGKILL');
    assert.equal((await procs.get('n3')!.exited).signal, 'SIGKILL');
    await bank.removeNode('n3', { dead: true });
    await until(
      'n3 removed once its replicas were rebuilt elsewhere',
      async () => !(await bank.members()).some((m) => m.name === 'n3'),
      90_000,
    );
    await ready(launch(6, joiner(6)));
    await until('the replacement hosts partitions', () => hosted(procs.get('n6')!) > 0, 90_000);
    const members = (await bank.members()).map((m) => `${m.name}:${m.state}`).sort();
    assert.deepEqual(members, ['n1:active', 'n2:active', 'n4:active', 'n5:active', 'n6:active']);
    const afterReplace = acknowledged.length;
    await until('transfers go on after the replacement', () => acknowledged.length >= afterReplace + 10);
    // n5 loses its disk and comes back empty under its old name: refused, it hosts nothing (it would be an empty
    // voter of the partitions it holds); the cluster goes on with the other replicas.
    procs.get('n5')!.signal('SIGKILL');
    await procs.get('n5')!.exited;
    rmSync(join(dataDir, 'n5'), { recursive: true, force: true });
    const reborn = launch(5, joiner(5));
    await reborn.waitFor(/would rejoin as an empty replica/, 60_000);
    await sleep(1_500);
    assert.equal(hosted(reborn), 0, 'the refused node hosts no partition');
    const afterRefusal = acknowledged.length;
    await until('transfers go on beside the refused node', () => acknowledged.length >= afterRefusal + 10);
    stopping = true;
    await Promise.all(workers);

    await checkBank(bank, { ...SMALL_BANK, acknowledged, unknown });
    process.stdout.write(`# elastic: ${acknowledged.length} transfers acknowledged, ${unknown.length} unknown\n`);
  } catch (error) {
    const metrics = await metricsText(metricsPort, tls).catch((e: unknown) => String(e));
    keepOutputs(procs, `${acknowledged.length} transfers acknowledged, ${unknown.length} unknown`, {
      'failures.txt': failures.join('\n'),
      'n1-metrics.txt': metrics,
    });
    throw error;
  } finally {
    stopping = true;
    await Promise.all(workers).catch(() => undefined);
    await client?.close().catch(() => undefined);
    for (const child of procs.values()) child.signal('SIGKILL');
    await Promise.all([...procs.values()].map((c) => c.exited));
    rmSync(dataDir, { recursive: true, force: true });
  }
}

test('nodes join a running cluster, partitions move onto them under transfers; a killed node is replaced', () =>
  elastic(false));

test('the same over TLS: joiners with certificates of the cluster CA, the client by client certificate', () =>
  elastic(true));
