/**
 * Watches (client/watch.ts): a bank watched while transfers run and the watch's own node crashes and restarts, the
 * events replayed in commit order against RO snapshots at every resolved timestamp; resuming below retention; a
 * consumer that fell behind; bad input. On embedded simulated clusters (seeded), and once over TCP.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { physicalMs } from '../hlc/timestamp.js';
import { type BasaltError, type HybridTimestamp, isBasaltError, startCluster } from '../index.js';
import { startClientServer } from './cluster-server.js';
import { connect } from './remote.js';
import type { WatchDelete, WatchEvent, WatchPut } from './watch.js';

const ACCOUNTS = 6;
const account = (i: number): string => `acct/${i}`;

/** The replay of a watch: each key's value after the events taken so far, and every (key, commitTs) seen. */
class Replay {
  readonly values = new Map<string, unknown>();
  readonly lastTs = new Map<string, HybridTimestamp>();
  readonly seen = new Set<string>();
  readonly marks: { resolvedTs: HybridTimestamp; balances: (number | undefined)[] }[] = [];

  take(event: WatchEvent): void {
    if (event.kind === 'resolved') {
      const previous = this.marks.at(-1)?.resolvedTs;
      assert.ok(previous === undefined || event.resolvedTs > previous, 'resolved timestamps only grow');
      const balances = Array.from({ length: ACCOUNTS }, (_, i) => this.values.get(account(i)) as number | undefined);
      this.marks.push({ resolvedTs: event.resolvedTs, balances });
      return;
    }
    const id = `${event.key}@${event.commitTs}`;
    assert.ok(!this.seen.has(id), `no duplicate: ${id}`);
    this.seen.add(id);
    const last = this.lastTs.get(event.key);
    assert.ok(last === undefined || event.commitTs > last, `${event.key}: commit order`);
    const resolved = this.marks.at(-1)?.resolvedTs;
    assert.ok(resolved === undefined || event.commitTs > resolved, 'no event at or below a resolved timestamp');
    this.lastTs.set(event.key, event.commitTs);
    if (event.kind === 'delete') this.values.delete(event.key);
    else this.values.set(event.key, event.value);
  }
}

function code(expected: string) {
  return (e: unknown): boolean => {
    assert.ok(isBasaltError(e), `a coded error: ${String(e)}`);
    assert.equal((e as BasaltError).code, expected, (e as Error).message);
    return true;
  };
}

describe('watch', () => {
  it('replays a bank exactly at every resolved timestamp, once per change, across a crash of its node', async () => {
    const cluster = await startCluster({ simulation: { seed: 'watch-bank' }, nodes: 3 });
    try {
      const client = cluster.client('n1');
      await client.createTable('bank', { partitions: 4, replicas: 3 });
      const opening = await client.begin({ readOnly: true });
      const fromTimestamp = opening.readTimestamp!;
      await opening.rollback();
      await client.transaction((tx) =>
        tx.putAll(
          'bank',
          Array.from({ length: ACCOUNTS }, (_, i) => ({ key: account(i), value: 100 })),
        ),
      );
      const replay = new Replay();
      const stream = cluster.client('n2').watch('bank', { fromTimestamp, prefix: 'acct/', pageSize: 2 });
      let endTs: HybridTimestamp | undefined;
      const watching = (async () => {
        for await (const event of stream) {
          replay.take(event);
          if (event.kind === 'resolved' && endTs !== undefined && event.resolvedTs >= endTs) break;
        }
      })();
      const acknowledged: number[] = [];
      const transfer = async (id: number): Promise<void> => {
        const from = id % ACCOUNTS;
        const to = (id + 1 + (id % 5)) % ACCOUNTS;
        await client.transaction(async (tx) => {
          const [a, b] = (await tx.getAll('bank', [account(from), account(to)])) as number[];
          await tx.putAll('bank', [
            { key: account(from), value: a! - 1 },
            { key: account(to), value: b! + 1 },
          ]);
          await tx.put('bank', `xfer/${id}`, id);
        });
        acknowledged.push(id);
      };
      const workers = Array.from({ length: 3 }, async (_, w) => {
        for (let id = w; id < 60; id += 3) {
          await transfer(id);
          if (id === 30) {
            await cluster.stopNode('n2');
            await cluster.runFor(500);
            await cluster.startNode('n2');
          }
        }
      });
      await Promise.all(workers);
      const closing = await client.begin({ readOnly: true });
      endTs = closing.readTimestamp!;
      const final = (await closing.getAll(
        'bank',
        Array.from({ length: ACCOUNTS }, (_, i) => account(i)),
      )) as number[];
      await closing.rollback();
      await watching;

      assert.equal(acknowledged.length, 60, 'every transfer was acknowledged');
      assert.equal(
        final.reduce((a, b) => a + b, 0),
        ACCOUNTS * 100,
        'the total is conserved',
      );
      const last = replay.marks.at(-1)!;
      assert.ok(last.resolvedTs >= endTs, 'the watch resolved past the last transfer');
      assert.deepEqual(last.balances, final, 'the replay ends at the balances of the last snapshot');
      // Every account write is a change: 6 initial puts and 2 per transfer, each delivered once.
      assert.equal(replay.seen.size, ACCOUNTS + 2 * 60, 'every change once (xfer/ keys are outside the prefix)');
      for (const mark of replay.marks) {
        const snapshot = await client.transaction(
          (tx) =>
            tx.getAll(
              'bank',
              Array.from({ length: ACCOUNTS }, (_, i) => account(i)),
            ),
          { readOnly: true, readTimestamp: mark.resolvedTs },
        );
        assert.deepEqual(mark.balances, snapshot, `the replay at ${mark.resolvedTs} is the snapshot there`);
      }
      assert.ok(replay.marks.length > 3, 'several resolved marks');
      // The watch's node was down for 500 ms: one round waited it out and went on (no mark spans less than that).
      const gapsMs = replay.marks
        .slice(1)
        .map((m, i) => physicalMs(m.resolvedTs) - physicalMs(replay.marks[i]!.resolvedTs));
      assert.ok(Math.max(...gapsMs) >= 500, `a round waited out the restart (largest gap ${Math.max(...gapsMs)} ms)`);
    } finally {
      await cluster.stop();
    }
  });

  it('fails WATCH_TOO_OLD below retention, and WATCH_FELL_BEHIND for a consumer that stayed away too long', async () => {
    const cluster = await startCluster({
      simulation: { seed: 'watch-retention' },
      nodes: 3,
      replicas: { lowWatermarkRetentionMs: 2_000 },
    });
    try {
      const client = cluster.client('n1');
      await client.createTable('t', { partitions: 2, replicas: 3 });
      const old = await client.begin({ readOnly: true });
      const oldTs = old.readTimestamp!;
      await old.rollback();
      await client.put('t', 'a', 1);
      await cluster.runFor(5_000);
      const tooOld = client.watch('t', { fromTimestamp: oldTs });
      await assert.rejects(tooOld.next(), (e) => {
        code('WATCH_TOO_OLD')(e);
        const oldest = BigInt((e as BasaltError).details?.['oldestTimestamp'] as string);
        assert.ok(oldest > oldTs, 'it names an oldest timestamp above the one asked for');
        return true;
      });

      const behind = client.watch('t');
      const first = await behind.next();
      assert.equal(first.done, false);
      assert.equal((first.value as WatchEvent).kind, 'resolved');
      await cluster.runFor(5_000);
      await assert.rejects(behind.next(), code('WATCH_FELL_BEHIND'));
    } finally {
      await cluster.stop();
    }
  });

  it('a watch started again from a resolved timestamp gets exactly the changes above it', async () => {
    const cluster = await startCluster({ simulation: { seed: 'watch-resume' }, nodes: 3 });
    try {
      const client = cluster.client('n1');
      await client.createTable('t', { partitions: 3, replicas: 3 });
      const first = client.watch('t', { pollMs: 20 });
      assert.equal(((await first.next()).value as WatchEvent).kind, 'resolved');
      await client.put('t', 'a', 1);
      await client.transaction((tx) =>
        tx.putAll('t', [
          { key: 'b', value: 1 },
          { key: 'c', value: 1 },
        ]),
      );
      const taken: WatchEvent[] = [];
      let checkpoint: HybridTimestamp | undefined;
      while (checkpoint === undefined) {
        const event = (await first.next()).value as WatchEvent;
        if (event.kind === 'resolved') {
          if (taken.length === 3) checkpoint = event.resolvedTs;
        } else {
          taken.push(event);
        }
      }
      await first.return();
      await client.remove('t', 'a');
      await client.put('t', 'b', 2);
      const again = client.watch('t', { fromTimestamp: checkpoint, pollMs: 20 });
      const after: string[] = [];
      while (after.length < 2) {
        const event = (await again.next()).value as WatchEvent;
        if (event.kind === 'put') after.push(`${event.key}=${JSON.stringify(event.value)}`);
        if (event.kind === 'delete') after.push(`${event.key} deleted`);
        if (event.kind !== 'resolved') assert.ok(event.commitTs > checkpoint, 'only changes above the checkpoint');
      }
      await again.return();
      assert.deepEqual(taken.map((e) => e.kind === 'put' && `${e.key}=${JSON.stringify(e.value)}`).sort(), [
        'a=1',
        'b=1',
        'c=1',
      ]);
      assert.deepEqual(after.sort(), ['a deleted', 'b=2']);
    } finally {
      await cluster.stop();
    }
  });

  it('refuses bad input with coded errors', async () => {
    const cluster = await startCluster({ simulation: { seed: 'watch-input' }, nodes: 1 });
    try {
      const client = cluster.client('n1');
      await client.createTable('t', { partitions: 2, replicas: 1 });
      await assert.rejects(client.watch('nope').next(), code('UNKNOWN_TABLE'));
      assert.throws(() => client.watch('t', { range: { start: 'b', end: 'a' } }), code('INVALID_ARGUMENT'));
      assert.throws(() => client.watch('t', { prefix: 'a', range: {} }), code('INVALID_ARGUMENT'));
      assert.throws(() => client.watch('t', { range: { start: 1 } as never }), code('INVALID_ARGUMENT'));
      assert.throws(() => client.watch('t', { fromTimestamp: 5 as never }), code('INVALID_ARGUMENT'));
      assert.throws(() => client.watch('t', { pageSize: 0 }), code('INVALID_ARGUMENT'));
      const page = { table: 't', range: {}, fromTs: 1n as HybridTimestamp };
      await assert.rejects(client.readChanges({ ...page, partition: 2 }), code('INVALID_ARGUMENT'));
      await assert.rejects(client.readChanges({ ...page, partition: 0, limit: 0 }), code('INVALID_ARGUMENT'));
    } finally {
      await cluster.stop();
    }
  });

  it('over TCP, a watch whose client port goes away reconnects to the next address and misses nothing', async () => {
    const cluster = await startCluster({ nodes: 3 });
    const first = await startClientServer(cluster, 'n1');
    const second = await startClientServer(cluster, 'n2');
    const client = await connect(first.address);
    const writer = cluster.client('n3');
    try {
      await writer.createTable('t', { partitions: 3, replicas: 3 });
      const stream = client.watch('t', { pollMs: 10, connect: [first.address, second.address] });
      assert.equal(((await stream.next()).value as WatchEvent).kind, 'resolved');
      const keys: string[] = [];
      const take = async (n: number) => {
        while (keys.length < n) {
          const event = (await stream.next()).value as WatchEvent;
          if (event.kind === 'put') keys.push(event.key);
        }
      };
      for (let i = 0; i < 5; i++) await writer.put('t', `before/${i}`, i);
      await take(5);
      await first.close();
      for (let i = 0; i < 5; i++) await writer.put('t', `after/${i}`, i);
      await take(10);
      await stream.return();
      assert.deepEqual(
        [...keys].sort(),
        [...Array.from({ length: 5 }, (_, i) => `after/${i}`), ...Array.from({ length: 5 }, (_, i) => `before/${i}`)],
        'every put once, across the move to the second address',
      );
      assert.equal(client.closed, true, "the first address's connection is gone");
    } finally {
      await client.close();
      await second.close();
      await cluster.stop();
    }
  });

  it('streams over TCP, and the client port refuses a malformed changes request', async () => {
    const cluster = await startCluster({ nodes: 1 });
    const server = await startClientServer(cluster, 'n1');
    const client = await connect(server.address);
    try {
      await client.createTable('t', { partitions: 2, replicas: 1 });
      const stream = client.watch('t', { prefix: 'k/', pollMs: 10 });
      const opened = await stream.next();
      assert.equal((opened.value as WatchEvent).kind, 'resolved');
      await client.transaction(async (tx) => {
        await tx.put('t', 'k/1', { n: 1 });
        await tx.put('t', 'k/2', null);
        await tx.put('t', 'other', 3);
      });
      await client.remove('t', 'k/1');
      const changes: (WatchPut | WatchDelete)[] = [];
      while (changes.length < 3) {
        const { value } = await stream.next();
        if (value !== undefined && value.kind !== 'resolved') changes.push(value);
      }
      await stream.return();
      // Commit order per key; one transaction's writes share one commitTs (in either key order).
      const ordered = [...changes].sort((a, b) =>
        a.commitTs < b.commitTs ? -1 : a.commitTs > b.commitTs ? 1 : a.key.localeCompare(b.key),
      );
      assert.equal(ordered[0]!.commitTs, ordered[1]!.commitTs, "a transaction's writes share one commitTs");
      assert.ok(ordered[2]!.commitTs > ordered[0]!.commitTs);
      assert.deepEqual(
        ordered.map((c) => (c.kind === 'put' ? [c.kind, c.key, c.value] : [c.kind, c.key])),
        [
          ['put', 'k/1', { n: 1 }],
          ['put', 'k/2', null],
          ['delete', 'k/1'],
        ],
      );
      const k1 = changes.filter((c) => c.key === 'k/1').map((c) => c.kind);
      assert.deepEqual(k1, ['put', 'delete'], 'k/1 in commit order');
      await assert.rejects(
        client.readChanges({
          table: 't',
          partition: 0,
          range: { start: 'b', end: 'a' },
          fromTs: 1n as HybridTimestamp,
        }),
        code('INVALID_ARGUMENT'),
      );
      await assert.rejects(
        client.readChanges({ table: 't', partition: 0, range: { prefix: 7 } as never }),
        code('INVALID_ARGUMENT'),
      );
      await assert.rejects(
        client.readChanges({ table: 'nope', partition: 0, range: {}, fromTs: 1n as HybridTimestamp }),
        code('UNKNOWN_TABLE'),
      );
    } finally {
      await client.close();
      await server.close();
      await cluster.stop();
    }
  });
});
