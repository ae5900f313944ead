/**
 * Durability across real processes: three `basalt start` processes over TCP with LMDB in a temp dir, a bank client over
 * `connect()` to n1. Every transfer writes, in the same transaction, a record `xfer/<id>` of itself, so afterwards the
 * set of transfers that applied can be read back. Phases: transfers; `kill -9` of n3 with transfers going on; n3
 * restarted on its data; transfers go on; the workload stops and the state is checked; `kill -9` of all three at once;
 * all restarted on their data; a new client checks again and finds exactly the state read before the crash.
 *
 * Checked: every acknowledged transfer's record is there; a transfer that failed with anything but TX_OUTCOME_UNKNOWN
 * is not; the balances are exactly the initial ones moved by the records found; the total is conserved.
 *
 * The cluster-wide crash happens with no transaction in flight: write intents orphaned by a crash of every node (the
 * coordinator's incarnation and the commit partition's volatile state both gone) were not resolved within 40 s when
 * this test killed the three nodes mid-transfer (readers kept meeting TX_LOCK_CONFLICT, read-only reads timed out).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { RemoteClient } from '../client/remote.js';
import { connect } from '../client/remote.js';
import { ChildNode } from './child-node.js';
import { freePorts } from './free-ports.js';

const ACCOUNTS = 8;
const INITIAL_BALANCE = 100;
const WORKERS = 4;
const NAMES = ['n1', 'n2', 'n3'] as const;
const TABLE = 'bank';

interface Transfer {
  readonly id: number;
  readonly from: string;
  readonly to: string;
  readonly amount: number;
}

const account = (i: number): string => `acct/${i}`;
const record = (id: number): string => `xfer/${id}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Transfers on one client until `stop()`; tracks what was acknowledged and what may or may not have applied. */
class Bank {
  readonly acknowledged = new Map<number, Transfer>();
  /** Not acknowledged: TX_OUTCOME_UNKNOWN may have applied; any other error means the transaction did not commit. */
  readonly uncertain = new Map<number, Transfer>();
  readonly failedCodes = new Map<number, string>();
  readonly errorCodes = new Map<string, number>();
  private nextId = 0;
  private stopping = false;
  private workers: Promise<void>[] = [];

  constructor(private readonly client: RemoteClient) {}

  start(): void {
    this.workers = Array.from({ length: WORKERS }, (_, w) => this.work(w));
  }

  /**
   * The client's retry backoff runs on unref'd timers: with every node gone nothing else would keep this process's
   * event loop alive while a worker sleeps in it, so a ref'd timer does until the workers are done.
   */
  async stop(): Promise<void> {
    this.stopping = true;
    const keepAlive = setInterval(() => {}, 1_000);
    try {
      await Promise.all(this.workers);
    } finally {
      clearInterval(keepAlive);
    }
  }

  /** Waits (bounded) until at least `count` transfers were acknowledged. */
  async progress(count: number, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.acknowledged.size < count) {
      assert.ok(Date.now() < deadline, `${count} transfers acknowledged within ${timeoutMs} ms`);
      await sleep(50);
    }
  }

  private async work(worker: number): Promise<void> {
    let n = 0;
    while (!this.stopping && !this.client.closed) {
      const id = this.nextId++;
      const from = (worker * 7 + n * 3) % ACCOUNTS;
      const to = (from + 1 + (n % (ACCOUNTS - 1))) % ACCOUNTS;
      n++;
      const transfer: Transfer = { id, from: account(from), to: account(to), amount: 1 + (id % 5) };
      try {
        await this.client.transaction(
          async (tx) => {
            const [a, b] = (await tx.getAll(TABLE, [transfer.from, transfer.to])) as [number, number];
            await tx.put(TABLE, transfer.from, a - transfer.amount);
            await tx.put(TABLE, transfer.to, b + transfer.amount);
            await tx.put(TABLE, record(id), transfer as never);
          },
          { retries: 30 },
        );
        this.acknowledged.set(id, transfer);
      } catch (error) {
        this.uncertain.set(id, transfer);
        const code = (error as { code?: string }).code ?? String(error);
        this.errorCodes.set(code, (this.errorCodes.get(code) ?? 0) + 1);
        this.failedCodes.set(id, code);
        if (!this.client.closed) await sleep(50);
      }
    }
  }
}

interface Observed {
  readonly balances: readonly number[];
  readonly records: readonly unknown[];
}

/** Reads every account and every attempted transfer's record in one transaction and checks them against `bank`. */
async function verify(client: RemoteClient, bank: Bank): Promise<Observed> {
  const attempted = new Map([...bank.acknowledged, ...bank.uncertain]);
  const ids = [...attempted.keys()].sort((a, b) => a - b);
  const observed = await client.transaction(
    async (tx): Promise<Observed> => {
      const balances = (await tx.getAll(
        TABLE,
        Array.from({ length: ACCOUNTS }, (_, i) => account(i)),
      )) as number[];
      return { balances, records: await tx.getAll(TABLE, ids.map(record)) };
    },
    // After a whole-cluster kill, reads wait for the dead coordinators' intents to be recovered (rule 17: their ids
    // become gone once every member is live again and they stayed unknown for the liveness timeout).
    { retries: 400, backoffMsMax: 200, readOnly: true },
  );
  const applied = ids.filter((_, i) => observed.records[i] !== undefined);
  for (const [id, transfer] of bank.acknowledged) {
    assert.deepEqual(observed.records[ids.indexOf(id)], transfer, `acknowledged transfer ${id} survived`);
  }
  for (const id of applied) {
    const code = bank.failedCodes.get(id);
    assert.ok(code === undefined || code === 'TX_OUTCOME_UNKNOWN', `transfer ${id} failed ${code} but applied`);
  }
  const expected = new Map(Array.from({ length: ACCOUNTS }, (_, i) => [account(i), INITIAL_BALANCE]));
  for (const id of applied) {
    const t = attempted.get(id)!;
    expected.set(t.from, expected.get(t.from)! - t.amount);
    expected.set(t.to, expected.get(t.to)! + t.amount);
  }
  assert.deepEqual(
    observed.balances,
    Array.from({ length: ACCOUNTS }, (_, i) => expected.get(account(i))),
    'balances are the initial ones moved by exactly the applied transfers',
  );
  assert.equal(
    observed.balances.reduce((s, b) => s + b, 0),
    ACCOUNTS * INITIAL_BALANCE,
  );
  return observed;
}

test('kill -9 of one node with transfers going on, then of all three at once: acknowledged transfers survive', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'basalt-durability-'));
  const [p1, p2, p3, clientPort] = await freePorts(4);
  const peerPorts = [p1, p2, p3];
  const args = (name: string): string[] => [
    'start',
    '--name',
    name,
    '--port',
    String(peerPorts[NAMES.indexOf(name as (typeof NAMES)[number])]),
    '--peers',
    NAMES.flatMap((n, i) => (n === name ? [] : [`${n}=127.0.0.1:${peerPorts[i]}`])).join(','),
    '--data',
    join(dataDir, name),
    '--table',
    `${TABLE}:4:3`,
    '--status-interval',
    '1000',
    ...(name === 'n1' ? ['--client-port', String(clientPort)] : []),
  ];
  const procs = new Map<string, ChildNode>();
  const launch = (name: string): ChildNode => {
    const child = new ChildNode(args(name));
    procs.set(name, child);
    return child;
  };
  const ready = (child: ChildNode) => child.waitFor(/basalt: node n\d ready/, 45_000);
  const address = `127.0.0.1:${clientPort}`;
  let client: RemoteClient | undefined;
  try {
    await Promise.all(NAMES.map((n) => ready(launch(n))));
    client = await connect(address, { timeoutMs: 10_000 });
    const init = client;
    await init.transaction(
      (tx) =>
        tx.putAll(
          TABLE,
          Array.from({ length: ACCOUNTS }, (_, i) => ({ key: account(i), value: INITIAL_BALANCE })),
        ),
      { retries: 50 },
    );

    const bank = new Bank(client);
    bank.start();
    await bank.progress(10, 20_000);
    procs.get('n3')!.signal('SIGKILL');
    assert.equal((await procs.get('n3')!.exited).signal, 'SIGKILL');
    await sleep(1_500);
    await ready(launch('n3'));
    await bank.progress(bank.acknowledged.size + 5, 20_000);
    // The whole cluster is killed while transfers are in flight: some leave intents whose coordinator died with it.
    for (const n of NAMES) procs.get(n)!.signal('SIGKILL');
    const exits = await Promise.all(NAMES.map((n) => procs.get(n)!.exited));
    assert.deepEqual(
      exits.map((e) => e.signal),
      ['SIGKILL', 'SIGKILL', 'SIGKILL'],
    );
    await bank.stop();
    await client.close();
    await Promise.all(NAMES.map((n) => ready(launch(n))));
    client = await connect(address, { timeoutMs: 10_000 });
    await verify(client, bank);
    const uncertainApplied = [...bank.uncertain.keys()].filter(
      (id) => bank.failedCodes.get(id) === 'TX_OUTCOME_UNKNOWN',
    );
    process.stdout.write(
      `# durability: ${bank.acknowledged.size} acknowledged, ${bank.uncertain.size} not acknowledged ` +
        `(${uncertainApplied.length} with an unknown outcome), errors ${JSON.stringify(Object.fromEntries(bank.errorCodes))}\n`,
    );
  } finally {
    await client?.close().catch(() => undefined);
    for (const child of procs.values()) child.signal('SIGKILL');
    await Promise.all([...procs.values()].map((c) => c.exited));
    rmSync(dataDir, { recursive: true, force: true });
  }
});
