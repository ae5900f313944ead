/**
 * The liveness workload: nothing a transaction holds may outlive it. Transfers, read-only RW transactions and
 * rollbacks run on two coordinators while a seeded schedule cuts cleanup requests for minutes, delays finishes past
 * the vacuum horizon, crashes a coordinator, jumps a clock far beyond maxClockSkew, and drops links. After the heal
 * and a quiet period of the tx timeout plus the vacuum delay, no node may hold a lock, an intent or a non-final map
 * entry of a transaction older than that, every outcome a client was told matches its commit partition's durable
 * record, and the total is conserved. Shared by `liveness.test.ts` (fixed seeds) and `scripts/liveness-soak.mjs`.
 */
import assert from 'node:assert/strict';
import type { TxId } from '../../src/core/ids.js';
import { LIMITS } from '../../src/core/limits.js';
import type { Client } from '../../src/index.js';
import { isBasaltError } from '../../src/index.js';
import { SeededRandom } from '../../src/sim/random.js';
import { clusterNowMs, describeLeftovers, durableRecord, leftovers } from './leftovers.js';
import { splitFor, type TestCluster, withSimCluster } from './support.js';

const T = 'accounts';
const ACCOUNTS = Array.from({ length: 8 }, (_, i) => `acct-${i}`);
const INITIAL_BALANCE = 100;
const CLIENT_NODES: readonly string[] = ['n1', 'n2'];
const WORKERS_PER_CLIENT = 2;
/** Quiet time after the heal: a tx timeout, the map's and the records' retention, and slack for the sweeps. */
const QUIET_MS = LIMITS.txTimeoutMsDefault + LIMITS.txStateRetentionMsDefault + 2 * LIMITS.maxClockSkewMsDefault;
const SETTLE_MS = 30_000;

export type LivenessFault = 'cut-cleanup' | 'delay-finish' | 'crash-coordinator' | 'clock-jump' | 'drop';

export const LIVENESS_FAULTS: readonly LivenessFault[] = [
  'cut-cleanup',
  'drop',
  'delay-finish',
  'crash-coordinator',
  'clock-jump',
  'cut-cleanup',
];

type Told = 'committed' | 'aborted' | 'unknown';

interface Attempt {
  readonly txId: TxId;
  /** What the attempt was: a transfer writes, a read-only RW tx and a rollback leave no committed write. */
  readonly kind: 'transfer' | 'read-only' | 'rollback';
  /** What the client was told about this attempt (an attempt that was retried was told it aborted). */
  told: Told;
}

export interface LivenessOutcome {
  readonly committed: number;
  readonly aborted: number;
  readonly unknown: number;
  readonly readOnly: number;
  readonly rollbacks: number;
  readonly checkedRecords: number;
  readonly log: readonly string[];
}

interface Ledger {
  readonly attempts: Attempt[];
  readOnly: number;
  rollbacks: number;
}

/** One transaction of a worker's mix: a transfer (mostly), a read-only RW tx, or a read then a rollback. */
async function oneTransaction(client: Client, random: SeededRandom, ledger: Ledger): Promise<void> {
  const from = random.pick(ACCOUNTS);
  const to = random.pick(ACCOUNTS.filter((a) => a !== from));
  const roll = random.int(10);
  const mine: Attempt[] = [];
  const kind = roll < 7 ? 'transfer' : roll < 9 ? 'read-only' : 'rollback';
  const begin = (id: TxId) => {
    for (const a of mine) a.told = 'aborted';
    const attempt: Attempt = { txId: id, kind, told: 'aborted' };
    mine.push(attempt);
    ledger.attempts.push(attempt);
  };
  const last = () => mine[mine.length - 1];
  try {
    if (roll < 7) {
      await client.transaction(
        async (tx) => {
          begin(tx.id as TxId);
          const [a, b] = (await tx.getAll(T, [from, to], { forUpdate: true })) as number[];
          const amount = Math.min(a ?? 0, 1 + random.int(20));
          await tx.put(T, from, (a ?? 0) - amount);
          await tx.put(T, to, (b ?? 0) + amount);
        },
        { retries: 10, backoffMsMin: 10, backoffMsMax: 500 },
      );
      const l = last();
      if (l !== undefined) l.told = 'committed';
    } else if (roll < 9) {
      ledger.readOnly++;
      await client.transaction(
        async (tx) => {
          begin(tx.id as TxId);
          await tx.get(T, from);
          await tx.get(T, to);
        },
        { retries: 10, backoffMsMin: 10, backoffMsMax: 500 },
      );
      const l = last();
      if (l !== undefined) l.told = 'committed';
    } else {
      ledger.rollbacks++;
      const tx = await client.begin();
      begin(tx.id as TxId);
      try {
        await tx.get(T, from);
        if (random.chance(0.5)) await tx.put(T, from, -1);
      } finally {
        await tx.rollback();
      }
    }
  } catch (error) {
    const l = last();
    if (isBasaltError(error, 'TX_OUTCOME_UNKNOWN')) {
      if (l !== undefined) l.told = 'unknown';
    } else if (!isBasaltError(error)) {
      throw error;
    }
  }
}

async function worker(
  cluster: TestCluster,
  client: Client,
  random: SeededRandom,
  ledger: Ledger,
  faultsOver: () => boolean,
): Promise<void> {
  while (!faultsOver()) {
    await cluster.runFor(50 + random.int(400));
    await oneTransaction(client, random, ledger);
  }
}

/** Lets `ms` pass in steps (one drive may take at most two minutes of virtual time). */
async function pass(cluster: TestCluster, ms: number): Promise<void> {
  for (let left = ms; left > 0; left -= 10_000) await cluster.runFor(Math.min(left, 10_000));
}

async function faults(
  cluster: TestCluster,
  random: SeededRandom,
  kinds: readonly LivenessFault[],
  log: string[],
): Promise<void> {
  const nodes = cluster.nodes;
  for (const kind of kinds) {
    await cluster.runFor(500 + random.int(2_000));
    const a = random.pick(nodes);
    switch (kind) {
      case 'cut-cleanup': {
        const forMs = 60_000 + random.int(120_000);
        log.push(`cut TxCleanupRequest from ${a} for ${forMs} ms`);
        const cut = cluster.network.drop({ kind: 'TxCleanupRequest', from: a });
        await pass(cluster, forMs);
        cut.undo();
        break;
      }
      case 'delay-finish': {
        const coordinator = random.pick(CLIENT_NODES);
        const forMs = 65_000 + random.int(30_000);
        log.push(`hold TxFinishRequest from ${coordinator} for ${forMs} ms`);
        const held = cluster.network.hold({ kind: 'TxFinishRequest', from: coordinator });
        await pass(cluster, forMs);
        log.push(`released ${held.release()} finish requests`);
        break;
      }
      case 'crash-coordinator': {
        const victim = random.pick(CLIENT_NODES.slice(1));
        const downMs = 500 + random.int(2_500);
        log.push(`crash ${victim} for ${downMs} ms`);
        await cluster.stopNode(victim);
        await cluster.runFor(downMs);
        await cluster.startNode(victim);
        break;
      }
      case 'clock-jump': {
        const victim = random.pick(nodes.filter((n) => !CLIENT_NODES.includes(n)));
        const jumpMs = 120_000 + random.int(480_000);
        const forMs = 2_000 + random.int(10_000);
        log.push(`jump ${victim}'s clock ${jumpMs} ms ahead for ${forMs} ms, then restart it`);
        cluster.setClockOffset(victim, jumpMs);
        await pass(cluster, forMs);
        await cluster.stopNode(victim);
        cluster.setClockOffset(victim, 0);
        await cluster.startNode(victim);
        break;
      }
      case 'drop': {
        const b = random.pick(nodes.filter((n) => n !== a));
        const forMs = 200 + random.int(2_000);
        log.push(`drop ${a}<->${b} for ${forMs} ms`);
        await splitFor(cluster, [a, b], [a], forMs);
        break;
      }
    }
  }
  log.push('healed');
}

/** Outcomes the clients were told, held against the durable records still stored; returns how many were checked. */
function checkOutcomes(cluster: TestCluster, ledger: Ledger): number {
  let checked = 0;
  for (const { txId, told, kind } of ledger.attempts) {
    const record = durableRecord(cluster, txId);
    if (record === undefined) {
      continue;
    }
    checked++;
    // A read-only RW tx sends no finish: its commit is acknowledged once its read locks are released. A primary that
    // missed that release has its locks recovered later, which stores ABORTED: the same effect as its commit, since
    // it wrote nothing. Every tx that wrote must find its acknowledged outcome in the record.
    if (told === 'committed' && kind !== 'read-only') {
      assert.equal(record.state, 'COMMITTED', `${txId} (${kind}) was acknowledged committed`);
    }
    if (told === 'aborted') assert.notEqual(record.state, 'COMMITTED', `${txId} (${kind}) was reported not committed`);
  }
  return checked;
}

/** One run; throws (naming the seed, with the fault log) if anything is left behind or misreported. */
export async function livenessRun(
  seed: string,
  kinds: readonly LivenessFault[] = LIVENESS_FAULTS,
): Promise<LivenessOutcome> {
  const log: string[] = [];
  let outcome: LivenessOutcome | undefined;
  await withSimCluster(seed, { nodes: 5, partitions: 4, replicas: 3 }, async (cluster) => {
    const random = new SeededRandom(`${seed}/liveness`);
    const setup = cluster.client('n1');
    for (const a of ACCOUNTS) await setup.put(T, a, INITIAL_BALANCE);
    const ledger: Ledger = { attempts: [], readOnly: 0, rollbacks: 0 };
    let faultsOver = false;
    const schedule = faults(cluster, random.fork('faults'), kinds, log).finally(() => {
      faultsOver = true;
    });
    const workers = CLIENT_NODES.flatMap((n) =>
      Array.from({ length: WORKERS_PER_CLIENT }, (_, w) =>
        worker(cluster, cluster.client(n), random.fork(`${n}/${w}`), ledger, () => faultsOver),
      ),
    );
    try {
      await Promise.all([...workers, schedule]);
      await cluster.waitFor(() => ACCOUNTS.every((a) => cluster.placement(T, a).primary !== undefined), {
        what: 'every partition has a primary after the heal',
        timeoutMs: 60_000,
      });
      await pass(cluster, SETTLE_MS);
      const checkedRecords = checkOutcomes(cluster, ledger);
      await pass(cluster, QUIET_MS);
      const horizonMs = clusterNowMs(cluster) - LIMITS.txTimeoutMsDefault - LIMITS.txStateRetentionMsDefault;
      const left = leftovers(cluster, horizonMs);
      assert.equal(left.length, 0, `left behind after the quiet period:\n${describeLeftovers(left)}`);
      const values = await setup.transaction((tx) => tx.getAll(T, ACCOUNTS), { retries: 30 });
      const total = values.reduce((s: number, v) => s + (v as number), 0);
      assert.equal(total, ACCOUNTS.length * INITIAL_BALANCE, 'the total is conserved');
      const count = (t: Told) => ledger.attempts.filter((a) => a.told === t).length;
      outcome = {
        committed: count('committed'),
        aborted: count('aborted'),
        unknown: count('unknown'),
        readOnly: ledger.readOnly,
        rollbacks: ledger.rollbacks,
        checkedRecords,
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
