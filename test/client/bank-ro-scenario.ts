/**
 * The bank workload with read-only auditors (issue 6) under faults, shared by `bank-read-only.test.ts` (fixed seeds)
 * and `scripts/bank-soak.mjs --scenario ro` (a sweep): RW transfers through `client.transaction` on two
 * coordinators, while auditors on every node sum all accounts in RO transactions. A seeded schedule drops and delays
 * messages, isolates a node, skews a clock within maxClockSkew, splits the cluster and twice takes a coordinator down
 * mid-workload: by the seed, a crash (its open transactions are recovered by their commit partitions) or a graceful
 * stop (leases and leaderships handed over first, DESIGN §2b rule 5). Every RO sum must equal the initial total (a
 * consistent snapshot never sees half a transfer), and once healed the total is conserved.
 */
import assert from 'node:assert/strict';
import type { Client, NodeName } from '../../src/index.js';
import { isBasaltError } from '../../src/index.js';
import { SeededRandom } from '../../src/sim/random.js';
import { gracefulStopLogged, splitFor, type TestCluster, withSimCluster } from './support.js';

const T = 'accounts';
const ACCOUNTS = Array.from({ length: 6 }, (_, i) => `acct-${i}`);
const INITIAL_BALANCE = 100;
const TOTAL = ACCOUNTS.length * INITIAL_BALANCE;
const COORDINATORS = ['n1', 'n2'];

export type Paths = { local: number; coordinator: number; commitPartition: number };

/** Resolution counters of every node incarnation seen, kept after the incarnation crashes. */
class PathSampler {
  private readonly last = new Map<string, Paths>();

  sample(cluster: TestCluster): void {
    for (const n of cluster.nodes) {
      const node = cluster.node(n);
      if (node.up) this.last.set(`${n}/${node.ephemeralId}`, { ...node.metrics().resolution });
    }
  }

  total(): Paths {
    const t: Paths = { local: 0, coordinator: 0, commitPartition: 0 };
    for (const p of this.last.values()) {
      t.local += p.local;
      t.coordinator += p.coordinator;
      t.commitPartition += p.commitPartition;
    }
    return t;
  }
}

async function transfers(cluster: TestCluster, client: Client, random: SeededRandom, done: () => boolean) {
  let acknowledged = 0;
  while (!done()) {
    await cluster.runFor(random.int(80));
    const from = random.pick(ACCOUNTS);
    const to = random.pick(ACCOUNTS.filter((a) => a !== from));
    try {
      await client.transaction(
        async (tx) => {
          const a = (await tx.get(T, from)) as number;
          const b = (await tx.get(T, to)) as number;
          const amount = Math.min(a, 1 + random.int(20));
          await tx.put(T, from, a - amount);
          await tx.put(T, to, b + amount);
        },
        { retries: 10, backoffMsMin: 10, backoffMsMax: 300 },
      );
      acknowledged++;
    } catch (error) {
      if (!isBasaltError(error)) throw error;
    }
  }
  return acknowledged;
}

async function audits(cluster: TestCluster, node: NodeName, random: SeededRandom, done: () => boolean) {
  let checked = 0;
  while (!done()) {
    await cluster.runFor(50 + random.int(150));
    try {
      const values = await cluster.client(node).transaction((tx) => tx.getAll(T, ACCOUNTS), {
        readOnly: true,
        retries: 5,
        backoffMsMin: 10,
        backoffMsMax: 200,
      });
      const sum = values.reduce<number>((s, v) => s + (v as number), 0);
      assert.equal(sum, TOTAL, `RO snapshot on ${node} sums ${JSON.stringify(values)}`);
      checked++;
    } catch (error) {
      if (!isBasaltError(error)) throw error; // an unavailable read under faults is allowed; a wrong sum is not
    }
  }
  return checked;
}

async function faults(cluster: TestCluster, random: SeededRandom, log: string[]): Promise<void> {
  const nodes = cluster.nodes;
  // A stream of its own: whether a coordinator is crashed or stopped gracefully leaves the other draws unchanged.
  const stopKinds = random.fork('stop-kind');
  const kinds = ['drop', 'crash-coordinator', 'delay', 'skew', 'isolate', 'crash-coordinator', 'split'] as const;
  for (const kind of kinds) {
    await cluster.runFor(200 + random.int(400));
    const a = random.pick(nodes);
    const b = random.pick(nodes.filter((n) => n !== a));
    const forMs = 300 + random.int(1_000);
    if (kind === 'drop' || kind === 'isolate') {
      log.push(kind === 'drop' ? `drop ${a}<->${b} ${forMs} ms` : `isolate ${a} ${forMs} ms`);
      const cuts =
        kind === 'drop'
          ? [cluster.network.drop({ from: a, to: b }), cluster.network.drop({ from: b, to: a })]
          : [cluster.network.drop({ from: a }), cluster.network.drop({ to: a })];
      await cluster.runFor(forMs);
      for (const c of cuts) c.undo();
    } else if (kind === 'delay') {
      log.push(`delay ${a}->${b} ${forMs} ms`);
      const h = cluster.network.hold({ from: a, to: b });
      await cluster.runFor(forMs);
      h.release();
    } else if (kind === 'skew') {
      const offsetMs = random.int(401) - 200;
      log.push(`skew ${a} ${offsetMs} ms`);
      cluster.setClockOffset(a, offsetMs);
    } else if (kind === 'split') {
      const minority = [a, b];
      log.push(`split ${minority.join(',')} ${forMs} ms`);
      await splitFor(cluster, nodes, minority, forMs);
    } else {
      const victim = random.pick(COORDINATORS) as NodeName;
      let downMs = 2_500 + random.int(1_500); // past the liveness timeout: readers see the coordinator gone
      if (stopKinds.chance(0.5)) {
        log.push(`graceful stop coordinator ${victim} ${downMs} ms`);
        // Down for downMs from the start of the stop (the node stops serving as it begins); the hand-over takes part.
        const tookMs = await gracefulStopLogged(cluster, victim, log);
        downMs = Math.max(0, downMs - tookMs);
      } else {
        log.push(`crash coordinator ${victim} ${downMs} ms`);
        await cluster.stopNode(victim);
      }
      await cluster.runFor(downMs);
      await cluster.startNode(victim);
    }
  }
  log.push('healed');
}

export interface BankReadOnlyOutcome {
  readonly acknowledged: number;
  readonly audits: number;
  /** Resolutions taken by each path, summed over every node incarnation of the run. */
  readonly paths: Paths;
  readonly log: readonly string[];
}

/** One run; throws (naming the seed, with the fault log) if an RO sum or the final total is wrong. */
export async function bankReadOnlyRun(seed: string): Promise<BankReadOnlyOutcome> {
  const log: string[] = [];
  let outcome: BankReadOnlyOutcome | undefined;
  await withSimCluster(seed, { nodes: 5, partitions: 4, replicas: 3 }, async (cluster) => {
    const random = new SeededRandom(`${seed}/bank-ro`);
    for (const a of ACCOUNTS) await cluster.client('n3').put(T, a, INITIAL_BALANCE);
    const sampler = new PathSampler();
    let over = false;
    const schedule = faults(cluster, random.fork('faults'), log).finally(() => {
      over = true;
    });
    const sampling = (async () => {
      while (!over) {
        sampler.sample(cluster);
        await cluster.runFor(100);
      }
    })();
    try {
      const writers = COORDINATORS.flatMap((n) =>
        [0, 1].map((w) => transfers(cluster, cluster.client(n), random.fork(`${n}/${w}`), () => over)),
      );
      const readers = cluster.nodes.map((n) => audits(cluster, n, random.fork(`audit/${n}`), () => over));
      const [acked, checked] = await Promise.all([Promise.all(writers), Promise.all(readers), schedule, sampling]);
      sampler.sample(cluster);
      const values = await cluster.client('n3').transaction((tx) => tx.getAll(T, ACCOUNTS), { readOnly: true });
      assert.equal(
        values.reduce<number>((s, v) => s + (v as number), 0),
        TOTAL,
        'the total is conserved after healing',
      );
      const ackedTotal = acked.reduce((s, n) => s + n, 0);
      const checkedTotal = checked.reduce((s, n) => s + n, 0);
      assert.ok(ackedTotal > 0 && checkedTotal > 0, `transfers ${ackedTotal}, audits ${checkedTotal}`);
      outcome = { acknowledged: ackedTotal, audits: checkedTotal, paths: sampler.total(), log };
    } catch (error) {
      if (error instanceof Error) error.message = `${error.message}\nfaults: ${log.join('; ')}`;
      throw error;
    }
  });
  assert.ok(outcome !== undefined);
  return outcome;
}
