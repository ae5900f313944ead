/**
 * The bank workload under faults, shared by `bank.test.ts` (fixed seeds) and `scripts/bank-soak.mjs` (a sweep over
 * many seeds): concurrent transfers between accounts through `client.transaction` on two coordinators while a seeded
 * schedule drops and delays messages on random links, isolates a node, skews a clock (within maxClockSkew), splits
 * the cluster two against three, and takes a node down and back up: a crash, or (when the run mixes them in, chosen
 * by the seed) a graceful stop that hands its leases and leaderships over first (DESIGN §2b rule 5). One schedule
 * also takes down a node whose client runs transactions: a crashed coordinator's open transactions are recovered by
 * their commit partitions. Once every fault is healed the total is conserved and every balance is what the
 * acknowledged transfers made it, give or take the transfers whose outcome the client was told is unknown
 * (TX_OUTCOME_UNKNOWN: each may or may not have applied).
 */
import assert from 'node:assert/strict';
import type { Client, NodeName } from '../../src/index.js';
import { isBasaltError } from '../../src/index.js';
import { SeededRandom } from '../../src/sim/random.js';
import { gracefulStopLogged, splitFor, type TestCluster, withSimCluster } from './support.js';

const T = 'accounts';
const ACCOUNTS = Array.from({ length: 8 }, (_, i) => `acct-${i}`);
const INITIAL_BALANCE = 100;
const CLIENT_NODES = ['n1', 'n2'];
const WORKERS_PER_CLIENT = 3;
const TRANSFERS_PER_WORKER = 6;

interface Transfer {
  readonly from: string;
  readonly to: string;
  readonly amount: number;
}

interface Ledger {
  readonly acknowledged: Transfer[];
  readonly uncertain: Transfer[];
  failed: number;
  attempts: number;
}

/**
 * One worker: transfers between random accounts, with a pause between them, until the faults are over (and at least
 * TRANSFERS_PER_WORKER); records what the client acknowledged or could not tell.
 */
async function worker(
  cluster: TestCluster,
  client: Client,
  random: SeededRandom,
  ledger: Ledger,
  faultsOver: () => boolean,
): Promise<void> {
  for (let i = 0; i < TRANSFERS_PER_WORKER || !faultsOver(); i++) {
    await cluster.runFor(random.int(100));
    const from = random.pick(ACCOUNTS);
    const to = random.pick(ACCOUNTS.filter((a) => a !== from));
    const wanted = 1 + random.int(30);
    let attempted: Transfer = { from, to, amount: 0 };
    ledger.attempts++;
    try {
      const done = await client.transaction(
        async (tx) => {
          const a = (await tx.get(T, from)) as number;
          const b = (await tx.get(T, to)) as number;
          const amount = Math.min(a, wanted);
          attempted = { from, to, amount };
          await tx.put(T, from, a - amount);
          await tx.put(T, to, b + amount);
          return attempted;
        },
        { retries: 20, backoffMsMin: 10, backoffMsMax: 500 },
      );
      ledger.acknowledged.push(done);
    } catch (error) {
      if (isBasaltError(error, 'TX_OUTCOME_UNKNOWN')) ledger.uncertain.push(attempted);
      else if (isBasaltError(error)) ledger.failed++;
      else throw error;
    }
  }
}

export type FaultKind = 'drop' | 'delay' | 'isolate' | 'skew' | 'split' | 'crash' | 'crash-coordinator';

export const FAULTS: readonly FaultKind[] = ['drop', 'delay', 'isolate', 'skew', 'crash', 'split', 'drop', 'delay'];
/** The schedule the first seeds ran with (kept so that their regression seeds replay the same runs). */
export const FAULTS_V1: readonly FaultKind[] = ['drop', 'delay', 'isolate', 'crash', 'drop', 'delay'];
/** Also crashes a node whose client runs transactions (their coordinator): orphans are recovered by their commit partitions. */
export const FAULTS_COORDINATOR: readonly FaultKind[] = [...FAULTS, 'crash-coordinator', 'drop'];

export interface BankOptions {
  /**
   * Whether a node taken down is, by the seed, either crashed or stopped gracefully (hand-over first); false: always
   * crashed (the schedule the older regression seeds were found with, so that they replay the same runs).
   */
  readonly gracefulStops: boolean;
}

export interface BankOutcome {
  readonly acknowledged: number;
  readonly uncertain: number;
  readonly failed: number;
  readonly attempts: number;
  readonly crashes: number;
  readonly gracefulStops: number;
  readonly log: readonly string[];
}

/** A seeded sequence of faults, one at a time, each healed before the next; returns its log. */
async function faults(
  cluster: TestCluster,
  random: SeededRandom,
  kinds: readonly FaultKind[],
  options: BankOptions,
  log: string[],
): Promise<void> {
  // A stream of its own, so that the other faults of a seed are the same whether or not stops are mixed in.
  const stopKinds = random.fork('stop-kind');
  const nodes = cluster.nodes;
  const others = (n: NodeName) => nodes.filter((m) => m !== n);
  const crashable = nodes.filter((n) => !CLIENT_NODES.includes(n));
  for (const kind of kinds) {
    await cluster.runFor(100 + random.int(400));
    const a = random.pick(nodes);
    const b = random.pick(others(a));
    const forMs = 200 + random.int(1_200);
    switch (kind) {
      case 'drop': {
        log.push(`drop ${a}->${b} and back for ${forMs} ms`);
        const d1 = cluster.network.drop({ from: a, to: b });
        const d2 = cluster.network.drop({ from: b, to: a });
        await cluster.runFor(forMs);
        d1.undo();
        d2.undo();
        break;
      }
      case 'delay': {
        log.push(`delay ${a}->${b} by ${forMs} ms`);
        const h = cluster.network.hold({ from: a, to: b });
        await cluster.runFor(forMs);
        h.release();
        break;
      }
      case 'isolate': {
        log.push(`isolate ${a} for ${forMs} ms`);
        const out = cluster.network.drop({ from: a });
        const into = cluster.network.drop({ to: a });
        await cluster.runFor(forMs);
        out.undo();
        into.undo();
        break;
      }
      case 'skew': {
        // Within maxClockSkew (500 ms by default), which the protocol must tolerate; it stays for the rest of the run.
        const offsetMs = random.int(601) - 300;
        log.push(`skew ${a} by ${offsetMs} ms`);
        cluster.setClockOffset(a, offsetMs);
        break;
      }
      case 'split': {
        // Two nodes against three: the minority side loses its leases, the majority side takes over.
        const minority = [a, b];
        log.push(`split ${minority.join(',')} from the rest for ${forMs} ms`);
        await splitFor(cluster, nodes, minority, forMs);
        break;
      }
      case 'crash':
      case 'crash-coordinator': {
        const victim = random.pick(kind === 'crash' ? crashable : CLIENT_NODES.slice(1));
        let downMs = 500 + random.int(2_500);
        if (options.gracefulStops && stopKinds.chance(0.5)) {
          log.push(`graceful stop ${victim} for ${downMs} ms`);
          // Down for downMs from the start of the stop (the node stops serving as it begins); the hand-over takes part.
          const tookMs = await gracefulStopLogged(cluster, victim as NodeName, log);
          downMs = Math.max(0, downMs - tookMs);
        } else {
          log.push(`crash ${victim} for ${downMs} ms`);
          await cluster.stopNode(victim);
        }
        await cluster.runFor(downMs);
        await cluster.startNode(victim);
        break;
      }
    }
  }
  log.push('healed');
}

/** Balances the acknowledged transfers plus some subset of the uncertain ones would give; true if any matches. */
function explained(balances: Map<string, number>, ledger: Ledger): boolean {
  const base = new Map(ACCOUNTS.map((a) => [a, INITIAL_BALANCE]));
  const apply = (m: Map<string, number>, t: Transfer, sign: number) => {
    m.set(t.from, m.get(t.from)! - sign * t.amount);
    m.set(t.to, m.get(t.to)! + sign * t.amount);
  };
  for (const t of ledger.acknowledged) apply(base, t, 1);
  const u = ledger.uncertain.length;
  assert.ok(u <= 12, `too many uncertain transfers to check exactly (${u})`);
  for (let mask = 0; mask < 1 << u; mask++) {
    const m = new Map(base);
    ledger.uncertain.forEach((t, i) => {
      if (mask & (1 << i)) apply(m, t, 1);
    });
    if (ACCOUNTS.every((a) => m.get(a) === balances.get(a))) return true;
  }
  return false;
}

/** One run of the bank workload under the faults `kinds`; throws (naming the seed, with the fault log) if unsafe. */
export async function bankRun(
  seed: string,
  kinds: readonly FaultKind[] = FAULTS,
  options: BankOptions = { gracefulStops: true },
): Promise<BankOutcome> {
  const log: string[] = [];
  let outcome: BankOutcome | undefined;
  await withSimCluster(seed, { nodes: 5, partitions: 4, replicas: 3 }, async (cluster) => {
    const random = new SeededRandom(`${seed}/bank`);
    const setup = cluster.client('n1');
    for (const a of ACCOUNTS) await setup.put(T, a, INITIAL_BALANCE);
    const ledger: Ledger = { acknowledged: [], uncertain: [], failed: 0, attempts: 0 };
    let faultsOver = false;
    const schedule = faults(cluster, random.fork('faults'), kinds, options, log).finally(() => {
      faultsOver = true;
    });
    const workers = CLIENT_NODES.flatMap((n) =>
      Array.from({ length: WORKERS_PER_CLIENT }, (_, w) =>
        worker(cluster, cluster.client(n), random.fork(`${n}/${w}`), ledger, () => faultsOver),
      ),
    );
    try {
      await Promise.all([...workers, schedule]);
      // Healed: every partition gets a primary again, then one transaction reads every balance.
      await cluster.waitFor(() => ACCOUNTS.every((a) => cluster.placement(T, a).primary !== undefined), {
        what: 'every partition has a primary after the faults healed',
        timeoutMs: 60_000,
      });
      const values = await setup.transaction((tx) => tx.getAll(T, ACCOUNTS), { retries: 30 });
      const balances = new Map(ACCOUNTS.map((a, i) => [a, values[i] as number]));
      const total = [...balances.values()].reduce((s, v) => s + v, 0);
      assert.equal(total, ACCOUNTS.length * INITIAL_BALANCE, 'the total is conserved');
      assert.ok(
        explained(balances, ledger),
        `balances ${JSON.stringify([...balances])} are not explained by ${ledger.acknowledged.length} acknowledged ` +
          `and ${ledger.uncertain.length} uncertain transfers`,
      );
      const { acknowledged, uncertain, failed, attempts } = ledger;
      assert.equal(acknowledged.length + uncertain.length + failed, attempts);
      assert.ok(acknowledged.length >= attempts / 2, `most transfers commit (${acknowledged.length}/${attempts})`);
      const count = (prefix: string) => log.filter((entry) => entry.startsWith(prefix)).length;
      outcome = {
        acknowledged: acknowledged.length,
        uncertain: uncertain.length,
        failed,
        attempts,
        crashes: count('crash '),
        gracefulStops: count('graceful stop '),
        log,
      };
    } catch (error) {
      if (error instanceof Error) error.message = `${error.message}\nfaults: ${log.join('; ')}`;
      throw error;
    }
  });
  assert.ok(outcome !== undefined);
  return outcome;
}
