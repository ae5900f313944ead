/**
 * Across hosts for real, on one machine: three `basalt start` processes, each in its own network namespace with its
 * own address on a bridge, made by this test and removed after. Each node listens on 0.0.0.0, advertises its
 * namespace's address and knows its peers only by those addresses; loopback inside a namespace reaches only that
 * namespace, so every peer connection crosses the bridge as it would cross a network. The test's own process (the
 * root namespace, on the bridge too) is the client: it connects to every node's client port, runs transfers through
 * all three, kill -9s one node and starts it again in its namespace, and checks that every acknowledged transfer is
 * there and the total is conserved.
 *
 * Needs root and iproute2 (`ip netns`): where the machine does not allow namespaces the test is skipped with a
 * message saying why.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect, type RemoteClient } from '../client/remote.js';
import { checkBank, SMALL_BANK } from '../testing/small-bank.js';
import { ChildNode } from './child-node.js';

const NAMES = ['n1', 'n2', 'n3'] as const;
const { table: TABLE, accounts: ACCOUNTS, initialBalance: INITIAL_BALANCE, account, ends } = SMALL_BANK;
const PEER_PORT = 7000;
const CLIENT_PORT = 10800;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A bridge and one namespace per node, named after this process so that parallel runs do not collide. */
class Hosts {
  readonly tag = `bsl${process.pid % 100_000}`;
  /** 10.231.<subnet>.0/24: the third octet from the pid as well. */
  readonly subnet = 10 + (process.pid % 240);
  private readonly made: string[] = [];

  get bridge(): string {
    return `${this.tag}br`;
  }

  namespace(i: number): string {
    return `${this.tag}n${i + 1}`;
  }

  address(i: number): string {
    return `10.231.${this.subnet}.${i + 1}`;
  }

  /** Why namespaces cannot be made here, or undefined. */
  static unavailable(): string | undefined {
    if (process.getuid?.() !== 0) return 'network namespaces need root';
    try {
      execFileSync('ip', ['netns', 'list'], { stdio: 'ignore' });
    } catch {
      return 'iproute2 (`ip netns`) is not available';
    }
    return undefined;
  }

  create(count: number): void {
    ip('link', 'add', this.bridge, 'type', 'bridge');
    this.made.push(`link:${this.bridge}`);
    ip('addr', 'add', `10.231.${this.subnet}.254/24`, 'dev', this.bridge);
    ip('link', 'set', this.bridge, 'up');
    for (let i = 0; i < count; i++) {
      const ns = this.namespace(i);
      const veth = `${this.tag}v${i + 1}`;
      ip('netns', 'add', ns);
      this.made.push(`netns:${ns}`);
      ip('link', 'add', veth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns);
      this.made.push(`link:${veth}`);
      ip('link', 'set', veth, 'master', this.bridge, 'up');
      ip('-n', ns, 'addr', 'add', `${this.address(i)}/24`, 'dev', 'eth0');
      ip('-n', ns, 'link', 'set', 'eth0', 'up');
      ip('-n', ns, 'link', 'set', 'lo', 'up');
    }
  }

  /** Removes everything made, newest first; what is already gone is fine. */
  remove(): void {
    for (const thing of this.made.reverse()) {
      const [kind, name] = thing.split(':') as [string, string];
      try {
        if (kind === 'netns') ip('netns', 'del', name);
        else ip('link', 'del', name);
      } catch {
        // a veth goes with its namespace
      }
    }
    this.made.length = 0;
  }
}

function ip(...args: string[]): void {
  execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

const unavailable = Hosts.unavailable();

test('nodes in separate network namespaces, bound to 0.0.0.0 and advertising their own addresses, serve transfers ' +
  'and survive kill -9 of one', { skip: unavailable === undefined ? false : `skipped: ${unavailable}` }, async () => {
  const hosts = new Hosts();
  const dataDir = mkdtempSync(join(tmpdir(), 'basalt-hosts-'));
  const procs = new Map<number, ChildNode>();
  const clients: RemoteClient[] = [];
  try {
    hosts.create(NAMES.length);
    const args = (i: number): string[] => [
      'start',
      '--name',
      NAMES[i]!,
      '--host',
      '0.0.0.0',
      // Plain TCP inside the test's own network namespaces: off loopback that must be said.
      '--insecure',
      '--port',
      String(PEER_PORT),
      '--advertise',
      hosts.address(i),
      '--peers',
      NAMES.flatMap((_, j) => (j === i ? [] : [`${hosts.address(j)}:${PEER_PORT}`])).join(','),
      '--data',
      join(dataDir, NAMES[i]!),
      '--client-port',
      String(CLIENT_PORT),
      '--table',
      `${TABLE}:4:3`,
      '--status-interval',
      '1000',
    ];
    const launch = (i: number): ChildNode => {
      const child = new ChildNode(args(i), { launcher: ['ip', 'netns', 'exec', hosts.namespace(i)] });
      procs.set(i, child);
      return child;
    };
    const ready = (child: ChildNode) => child.waitFor(/basalt: node n\d ready/, 60_000);
    await Promise.all(NAMES.map((_, i) => ready(launch(i))));
    for (const [i, child] of procs) {
      const peer = `${hosts.address(i)}:${PEER_PORT}`;
      assert.match(child.output, new RegExp(`listening on 0\\.0\\.0\\.0:${PEER_PORT}, advertised as ${peer}`));
      assert.match(child.output, new RegExp(`connect\\('${hosts.address(i)}:${CLIENT_PORT}'\\)`));
      // Its peers were found at their namespaces' addresses only (bare addresses, names learned by probing).
      assert.match(child.output, new RegExp(`members: ${NAMES[i]}, n\\d, n\\d`));
    }
    for (let i = 0; i < NAMES.length; i++) {
      clients.push(await connect(`${hosts.address(i)}:${CLIENT_PORT}`, { timeoutMs: 10_000 }));
    }
    await clients[0]!.transaction(
      (tx) =>
        tx.putAll(
          TABLE,
          Array.from({ length: ACCOUNTS }, (_, i) => ({ key: account(i), value: INITIAL_BALANCE })),
        ),
      { retries: 50 },
    );
    const acknowledged: number[] = [];
    const unknown: number[] = [];
    let stopping = false;
    let next = 0;
    const transfer = async (client: RemoteClient): Promise<void> => {
      const id = next++;
      const [from, to] = ends(id).map(account) as [string, string];
      try {
        await client.transaction(
          async (tx) => {
            const [a, b] = (await tx.getAll(TABLE, [from, to])) as [number, number];
            await tx.put(TABLE, from, a - 1);
            await tx.put(TABLE, to, b + 1);
            await tx.put(TABLE, `xfer/${id}`, id);
          },
          { retries: 30 },
        );
        acknowledged.push(id);
      } catch (error) {
        if ((error as { code?: string }).code === 'TX_OUTCOME_UNKNOWN') unknown.push(id);
        await sleep(50);
      }
    };
    // One worker per node through n1 and n2 (n3 is the one killed); n3's client runs only before the kill.
    const workers = [0, 1].map(async (w) => {
      while (!stopping && !clients[w]!.closed) await transfer(clients[w]!);
    });
    for (let k = 0; k < 5; k++) await transfer(clients[2]!);
    const until = async (count: number) => {
      const deadline = Date.now() + 30_000;
      while (acknowledged.length < count) {
        assert.ok(Date.now() < deadline, `${count} transfers acknowledged within 30 s`);
        await sleep(50);
      }
    };
    await until(15);
    await clients[2]!.close();
    procs.get(2)!.signal('SIGKILL');
    assert.equal((await procs.get(2)!.exited).signal, 'SIGKILL');
    const afterKill = acknowledged.length;
    await until(afterKill + 10);
    await ready(launch(2));
    clients[2] = await connect(`${hosts.address(2)}:${CLIENT_PORT}`, { timeoutMs: 10_000 });
    for (let k = 0; k < 5; k++) await transfer(clients[2]!);
    await until(afterKill + 20);
    stopping = true;
    await Promise.all(workers);

    await checkBank(clients[2]!, { ...SMALL_BANK, acknowledged, unknown });
    process.stdout.write(
      `# multi-host: ${acknowledged.length} transfers acknowledged over ${hosts.address(0)}-${hosts.address(2)}, ` +
        `${unknown.length} unknown\n`,
    );
  } finally {
    await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
    for (const child of procs.values()) child.signal('SIGKILL');
    await Promise.all([...procs.values()].map((c) => c.exited));
    hosts.remove();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
