/**
 * The driver on real timers with durable log storage, LMDB and the segmented log: two 3-node groups in one process
 * (an in-memory transport between the drivers), stopped and restarted from what the storage holds. Each node's
 * storage lives in a temp directory removed afterwards.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { open } from 'lmdb';
import { isBasaltError } from '../core/errors.js';
import { type NodeName, nodeName, type PartitionId, partitionId } from '../core/ids.js';
import { RealTimers } from '../env/real-timers.js';
import { SeededRandom } from '../sim/random.js';
import { RaftDriver, type RaftStateMachine, type RaftTransport } from './driver.js';
import { LmdbLogStorage } from './lmdb-log-storage.js';
import type { LogStorage } from './log-storage.js';
import { SegmentedLogStorage } from './segmented-log-storage.js';
import type { Entry, Snapshot } from './types.js';

const names = ['n1', 'n2', 'n3'].map(nodeName);
const groups = [partitionId('t1p0'), partitionId('t1p1')];
const dec = (b: Uint8Array): string => new TextDecoder().decode(b);
const enc = (s: string): Uint8Array => new TextEncoder().encode(s);
const dir = mkdtempSync(join(tmpdir(), 'basalt-raft-driver-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** Volatile state machine: after a restart it re-applies the stored log. */
class ListStateMachine implements RaftStateMachine {
  readonly lists = new Map<PartitionId, string[]>();
  appliedIndex(): number {
    return 0;
  }
  apply(group: PartitionId, entries: readonly Entry[]): void {
    const list = this.lists.get(group) ?? [];
    for (const e of entries) list.push(e.kind === 'noop' ? '' : dec(e.data));
    this.lists.set(group, list);
  }
  snapshot(group: PartitionId): Uint8Array {
    return enc(JSON.stringify(this.lists.get(group) ?? []));
  }
  restore(group: PartitionId, s: Snapshot): void {
    this.lists.set(group, JSON.parse(dec(s.data)) as string[]);
  }
  data(group: PartitionId): string[] {
    return (this.lists.get(group) ?? []).filter(Boolean);
  }
}

/** Delivers on the next macrotask, as a socket would. */
function network(): (self: NodeName) => RaftTransport {
  const handlers = new Map<NodeName, (from: NodeName, envelope: unknown) => void>();
  const timers = new RealTimers();
  return (self) => ({
    send: (to, envelope) => {
      timers.setTimer(() => handlers.get(to)?.(self, envelope), 0);
    },
    setHandler: (h) => {
      handlers.set(self, h);
    },
  });
}

interface Node {
  driver: RaftDriver;
  sm: ListStateMachine;
  close: () => Promise<void>;
}

type Kind = 'lmdb' | 'segmented';

async function openStorage(kind: Kind, path: string): Promise<{ storage: LogStorage; close: () => Promise<void> }> {
  if (kind === 'segmented') {
    const log = await SegmentedLogStorage.open(path, { segmentBytes: 64 * 1024 });
    return { storage: log, close: () => log.close() };
  }
  const root = open({ path, maxDbs: 16, overlappingSync: false });
  return { storage: new LmdbLogStorage(root), close: () => root.close() };
}

async function startCluster(
  kind: Kind,
  transportFor: (self: NodeName) => RaftTransport,
  run: number,
  base = join(dir, kind),
) {
  const nodes: Node[] = [];
  for (const name of names) {
    const { storage, close } = await openStorage(kind, join(base, name));
    const sm = new ListStateMachine();
    const driver = new RaftDriver({
      self: name,
      transport: transportFor(name),
      timers: new RealTimers(true),
      random: new SeededRandom(`${name}/${run}`),
      storage,
      stateMachine: sm,
      tickIntervalMs: 10,
      compactEntriesMin: 8,
    });
    for (const g of groups) await driver.addGroup(g, names);
    nodes.push({ driver, sm, close });
  }
  return nodes;
}

async function leaderOf(nodes: readonly Node[], group: PartitionId): Promise<Node> {
  for (let i = 0; i < 1000; i++) {
    const l = nodes.find((n) => n.driver.status(group)?.role === 'leader');
    if (l !== undefined) return l;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`no leader for ${group}`);
}

/** Proposes on the current leader, again on NOT_LEADER (then the entry was not appended, or was overwritten). */
async function propose(nodes: readonly Node[], group: PartitionId, data: string): Promise<Node> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const leader = await leaderOf(nodes, group);
    try {
      await leader.driver.propose(group, enc(data));
      return leader;
    } catch (error) {
      if (!isBasaltError(error, 'NOT_LEADER')) throw error;
    }
  }
  throw new Error(`could not propose ${data}`);
}

async function stopCluster(nodes: readonly Node[]): Promise<void> {
  // stop() resolves once no Ready loop is writing any more: only then may the environments close.
  for (const n of nodes) await n.driver.stop();
  for (const n of nodes) await n.close();
}

for (const kind of ['lmdb', 'segmented'] as const) {
  test(`two groups on ${kind} replicate independently, compact, and recover everything after a full restart`, async () => {
    const first = await startCluster(kind, network(), 1);
    for (const g of groups) {
      for (let i = 0; i < 12; i++) await propose(first, g, `${g}:${i}`);
    }
    const expected = (g: PartitionId): string[] => Array.from({ length: 12 }, (_, i) => `${g}:${i}`);
    const leader0 = await propose(first, groups[0]!, 'last');
    assert.deepEqual(leader0.sm.data(groups[0]!), [...expected(groups[0]!), 'last']);
    assert.ok(leader0.driver.status(groups[0]!)!.snapshotIndex > 0, 'the log was compacted');
    // The group commits only what is durable on a quorum: at least two of the three environments hold it all.
    await stopCluster(first);

    const second = await startCluster(kind, network(), 2);
    for (const g of groups) {
      // The leader restored the snapshot and re-applied the stored suffix, then the new entry.
      const leader = await propose(second, g, `${g}:after`);
      const before = g === groups[0] ? [...expected(g), 'last'] : expected(g);
      assert.deepEqual(leader.sm.data(g), [...before, `${g}:after`]);
    }
    await stopCluster(second);
  });
}

test('a configuration change survives a full restart on LMDB, through the snapshot that covers it', async () => {
  const base = join(dir, 'membership');
  const g = groups[0]!;
  const first = await startCluster('lmdb', network(), 1, base);
  await propose(first, g, 'before');
  let changed: Node | null = null;
  for (let attempt = 0; attempt < 20 && changed === null; attempt++) {
    const leader = await leaderOf(first, g);
    try {
      await leader.driver.proposeConfChange(g, { type: 'remove', node: names[2]! });
      changed = leader;
    } catch (error) {
      if (!isBasaltError(error, 'NOT_LEADER')) throw error;
    }
  }
  assert.ok(changed !== null, 'the change was never accepted');
  const changeIndex = changed.driver.status(g)!.applied;
  for (let i = 0; i < 10; i++) await propose(first, g, `after:${i}`);
  const survivors = first.filter((_, i) => i < 2);
  // Wait until both remaining voters compacted past the change, so that only their snapshots record it.
  for (let i = 0; i < 500 && survivors.some((n) => n.driver.status(g)!.snapshotIndex < changeIndex); i++) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  for (const n of survivors) assert.ok(n.driver.status(g)!.snapshotIndex >= changeIndex);
  await stopCluster(first);

  const second = await startCluster('lmdb', network(), 2, base);
  for (const n of second.slice(0, 2)) assert.deepEqual(n.driver.status(g)?.voters, [names[0], names[1]]);
  const leader = await propose(second, g, 'restarted');
  assert.notEqual(leader, second[2]);
  await stopCluster(second);
});
