/**
 * Backups and restores on an in-process cluster (real time): a backup taken while transfers run holds exactly the
 * RO snapshot at its timestamp; an incremental chain restores to the state at its last backup, deletions included;
 * a changed byte in any file is caught by verify and refused by restore before anything is written; a restore
 * stopped half way and run again ends with the same rows, none written twice.
 */
import assert from 'node:assert/strict';
import {
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { HybridTimestamp } from '../core/ids.js';
import { type Client, type Cluster, connect, isBasaltError, startClientServer, startCluster } from '../index.js';
import { COORDINATOR_SERVICE, type CoordinatorService } from '../node/coordinator-service.js';
import type { Value } from '../storage/mv-partition-storage.js';
import { RESTORE_MARKER_PREFIX, verifyBackup } from './restore.js';

let cluster: Cluster<Client>;
let client: Client;
const dir = mkdtempSync(join(tmpdir(), 'basalt-backup-'));

before(async () => {
  cluster = await startCluster({ nodes: 3 });
  client = cluster.client('n1');
});
after(async () => {
  await cluster.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Every row of `table` at `at` (default: now), as a map. */
async function contents(table: string, at?: HybridTimestamp): Promise<Map<string, Value>> {
  const tx = await client.begin({ readOnly: true, ...(at !== undefined && { readTimestamp: at }) });
  try {
    const rows = new Map<string, Value>();
    let start: string | undefined;
    for (;;) {
      const page = await tx.scan(table, start === undefined ? {} : { start }, { limit: 1_000 });
      for (const row of page) if (row.key !== start) rows.set(row.key, row.value);
      if (page.length < 1_000) return rows;
      start = page.at(-1)!.key;
    }
  } finally {
    await tx.rollback();
  }
}

/** Every file under `root`, relative to it. */
function filesUnder(root: string): string[] {
  return readdirSync(root).flatMap((name) => {
    const path = join(root, name);
    return statSync(path).isDirectory() ? filesUnder(path).map((f) => join(name, f)) : [name];
  });
}

describe('backup and restore', () => {
  it('a backup taken during transfers restores to the exact total and to the RO snapshot at its timestamp', async () => {
    const accounts = 40;
    await client.createTable('bank', { partitions: 4, replicas: 3 });
    await client.transaction((tx) =>
      tx.putAll(
        'bank',
        Array.from({ length: accounts }, (_, i) => ({ key: `acct${i}`, value: 100 })),
      ),
    );
    let running = true;
    let transfers = 0;
    const worker = async (w: number): Promise<void> => {
      let n = w;
      while (running) {
        n += 7;
        const from = `acct${n % accounts}`;
        const to = `acct${(n * 13 + 1) % accounts}`;
        if (from === to) continue;
        await client
          .transaction(async (tx) => {
            const [a, b] = (await tx.getAll('bank', [from, to])) as number[];
            await tx.put('bank', from, a! - 3);
            await tx.put('bank', to, b! + 3);
          })
          .then(() => transfers++)
          .catch(() => {});
      }
    };
    const workers = [0, 1, 2].map(worker);
    await new Promise((r) => setTimeout(r, 200));
    const summary = await client.backup({ to: join(dir, 'bank-full'), tables: ['bank'], gzip: true, concurrency: 2 });
    const during = transfers;
    await new Promise((r) => setTimeout(r, 200));
    running = false;
    await Promise.all(workers);
    assert.ok(during > 0 && transfers > during, 'transfers ran before, during and after the backup');
    assert.equal(summary.rows, accounts);
    assert.equal(summary.files, 4);

    const snapshot = await contents('bank', summary.timestamp);
    const byPartition = await client.transaction(
      async (tx) => {
        const parts = await Promise.all([0, 1, 2, 3].map((partition) => tx.scan('bank', {}, { partition })));
        await assert.rejects(tx.scan('bank', {}, { partition: 4 }), { code: 'INVALID_ARGUMENT' });
        return parts;
      },
      { readOnly: true, readTimestamp: summary.timestamp },
    );
    assert.deepEqual(
      new Map(byPartition.flat().map((r) => [r.key, r.value])),
      snapshot,
      'the partitions of a table, scanned one by one, are the table',
    );
    assert.ok(byPartition.every((rows) => rows.length > 0 && rows.length < accounts));
    const locked = await client.transaction((tx) => tx.scan('bank', {}, { partition: 2 }));
    assert.deepEqual(
      locked.map((r) => r.key),
      byPartition[2]!.map((r) => r.key),
      'a read-write scan of one partition',
    );
    const restored = await client.restore({ from: join(dir, 'bank-full'), as: 'bank-restored' });
    assert.equal(restored.rows, accounts);
    const rows = await contents('bank-restored');
    assert.deepEqual(rows, snapshot, 'the restored table is the snapshot at the backup timestamp');
    const total = [...rows.values()].reduce((s: number, v) => s + (v as number), 0);
    assert.equal(total, accounts * 100, 'the total is exact');
    assert.deepEqual((await verifyBackup(join(dir, 'bank-full'))).rows, accounts);
  });

  it('an incremental chain of three restores to the state at the last backup, deletions included', async () => {
    await client.createTable('kv', { partitions: 3, replicas: 3 });
    const put = (keys: number[], tag: string) =>
      client.transaction((tx) =>
        tx.putAll(
          'kv',
          keys.map((i) => ({ key: `k${i}`, value: { i, tag } })),
        ),
      );
    const remove = (keys: number[]) =>
      client.transaction(async (tx) => {
        for (const i of keys) await tx.remove('kv', `k${i}`);
      });
    await put([...Array(60).keys()], 'v0');
    await client.put('kv', 'bytes', new Uint8Array([0, 1, 2, 255]));
    // Keys whose code point order differs from their UTF-16 order: files are in storage (code point) order.
    for (const key of ['\uFFFF', '\u{10000}', '\u{1F600}x', 'é', '']) await client.put('kv', key, key.length);
    const full = await client.backup({ to: join(dir, 'kv-0'), tables: ['kv'] });
    await put([5, 6, 100, 101], 'v1');
    await remove([1, 2, 3]);
    const one = await client.backup({ to: join(dir, 'kv-1'), incrementalFrom: join(dir, 'kv-0'), gzip: true });
    assert.equal(one.kind, 'incremental');
    assert.equal(one.deletes, 3);
    assert.equal(one.rows, 7, '4 puts and 3 deletions');
    await remove([100, 5]);
    await put([2], 'v2');
    const two = await client.backup({ to: join(dir, 'kv-2'), incrementalFrom: join(dir, 'kv-1') });
    assert.equal(two.deletes, 2);
    await put([7, 200], 'v3');
    await remove([2, 59]);
    await client.remove('kv', '\u{10000}');
    await client.put('kv', 'bytes', new Uint8Array([9]));
    const three = await client.backup({ to: join(dir, 'kv-3'), incrementalFrom: join(dir, 'kv-2') });
    assert.ok(BigInt(full.timestamp) < BigInt(one.timestamp) && BigInt(two.timestamp) < BigInt(three.timestamp));

    const expected = await contents('kv', three.timestamp);
    assert.equal(expected.has('k2') || expected.has('k5') || expected.has('k59'), false);
    const verified = await verifyBackup(join(dir, 'kv-3'));
    assert.equal(verified.backups, 4);
    assert.equal(verified.rows, expected.size, 'the rows the chain leaves');
    assert.equal(verified.records, full.rows + one.rows + two.rows + three.rows);
    const restored = await client.restore({ from: join(dir, 'kv-3'), as: 'kv-restored' });
    assert.equal(restored.backups, 4);
    assert.deepEqual(await contents('kv-restored'), expected);
    const middle = await client.restore({ from: join(dir, 'kv-1'), as: 'kv-at-1' });
    assert.equal(middle.backups, 2);
    assert.deepEqual(await contents('kv-at-1'), await contents('kv', one.timestamp));
  });

  it('a changed byte in any file of a chain is caught by verify and refused by restore with nothing written', async () => {
    await client.createTable('small', { partitions: 2, replicas: 3 });
    await client.transaction((tx) =>
      tx.putAll(
        'small',
        Array.from({ length: 30 }, (_, i) => ({ key: `s${i}`, value: `value ${i}` })),
      ),
    );
    await client.backup({ to: join(dir, 'small-0'), tables: ['small'], gzip: true });
    await client.put('small', 's100', 'new');
    await client.remove('small', 's3');
    await client.backup({ to: join(dir, 'small-1'), incrementalFrom: join(dir, 'small-0') });
    const files = [
      ...filesUnder(join(dir, 'small-0')).map((f) => join(dir, 'small-0', f)),
      ...filesUnder(join(dir, 'small-1')).map((f) => join(dir, 'small-1', f)),
    ];
    assert.equal(files.length, 6, 'two manifests and four data files');
    const refusals = new Set(['BACKUP_CORRUPT', 'BACKUP_CHAIN_BROKEN', 'BACKUP_FORMAT']);
    const refused = (file: string) => (error: unknown) =>
      isBasaltError(error) && refusals.has(error.code) && error.message.includes(file);
    for (const [n, file] of files.entries()) {
      const original = readFileSync(file);
      if (original.length === 0) {
        // A partition without changes: its incremental file is empty, and a byte added to it is caught.
        writeFileSync(file, 'x');
        await assert.rejects(verifyBackup(join(dir, 'small-1')), refused(file), `${file} grown`);
        writeFileSync(file, original);
        continue;
      }
      for (const at of [0, Math.floor(original.length / 2), original.length - 2]) {
        const flipped = Buffer.from(original);
        flipped[at] = flipped[at]! ^ 0x04;
        writeFileSync(file, flipped);
        await assert.rejects(verifyBackup(join(dir, 'small-1')), refused(file), `${file} byte ${at}`);
        await assert.rejects(client.restore({ from: join(dir, 'small-1'), as: `never${n}` }), refused(file));
      }
      truncateSync(file, Math.floor(original.length / 2));
      await assert.rejects(verifyBackup(join(dir, 'small-1')), refused(file), `${file} truncated`);
      writeFileSync(file, original);
    }
    const manifest = join(dir, 'small-1', 'manifest.json');
    const text = readFileSync(manifest, 'utf8');
    writeFileSync(manifest, text.replace('"version": 1', '"version": 2'));
    await assert.rejects(verifyBackup(join(dir, 'small-1')), { code: 'BACKUP_FORMAT' });
    writeFileSync(manifest, text);
    const names = (await client.tables()).map((t) => t.name);
    assert.equal(
      names.some((name) => name.startsWith('never')),
      false,
      'no refused restore created a table',
    );
    await client.restore({ from: join(dir, 'small-1'), as: 'small-restored' });
    assert.deepEqual(await contents('small-restored'), await contents('small'));
  });

  it('a restore stopped half way and run again ends with the same rows, continuing where it stopped', async () => {
    await client.createTable('big', { partitions: 4, replicas: 3 });
    const rows = Array.from({ length: 3_000 }, (_, i) => ({ key: `b${String(i).padStart(5, '0')}`, value: i }));
    for (let i = 0; i < rows.length; i += 500)
      await client.transaction((tx) => tx.putAll('big', rows.slice(i, i + 500)));
    await client.backup({ to: join(dir, 'big'), tables: ['big'] });
    const stop = new Error('stopped at half');
    await assert.rejects(
      client.restore({
        from: join(dir, 'big'),
        as: 'big-restored',
        onProgress: (p) => {
          if (p.phase === 'write' && p.rows >= 1_500) throw stop;
        },
      }),
      (error) => error === stop,
    );
    const half = await contents('big-restored');
    const written = [...half.keys()].filter((k) => !k.startsWith(RESTORE_MARKER_PREFIX)).length;
    assert.ok(written >= 1_500 && written < 3_000, `half restored (${written})`);
    await assert.rejects(client.restore({ from: join(dir, 'small-1'), as: 'big-restored', tables: ['small'] }), {
      code: 'RESTORE_TARGET_NOT_EMPTY',
    });

    const rerun = await client.restore({ from: join(dir, 'big'), as: 'big-restored' });
    assert.equal(rerun.resumed, true);
    assert.equal(rerun.rows, 3_000 - written, 'the rerun wrote only the rows the first run had not committed');
    assert.deepEqual(await contents('big-restored'), await contents('big'), 'the same rows, no marker left');
    await assert.rejects(client.restore({ from: join(dir, 'big'), as: 'big-restored' }), {
      code: 'RESTORE_TARGET_NOT_EMPTY',
    });
  });

  it("a backup's protected timestamp holds the watermark while it runs, released when it ends, lapsing when its client dies", async () => {
    const service = cluster.basaltNode('n2')!.service<CoordinatorService>(COORDINATOR_SERVICE)!;
    const watermark = service.readOnly.watermark;
    const server = await startClientServer(cluster, 'n1');
    const anyFloor = () =>
      cluster.nodes
        .map((n) => cluster.basaltNode(n)?.service<CoordinatorService>(COORDINATOR_SERVICE)?.readOnly.watermark)
        .map((w) => w?.protectedFloor())
        .find((f) => f !== undefined);
    const released = async (what: string) => {
      for (let i = 0; watermark.protectedFloor() !== undefined; i++) {
        assert.ok(i < 200, what);
        await new Promise((r) => setTimeout(r, 25));
      }
    };
    try {
      const remote = await connect(server.address);
      const held: (HybridTimestamp | undefined)[] = [];
      const summary = await remote.backup({
        to: join(dir, 'held'),
        tables: ['big'],
        concurrency: 1,
        onProgress: () => held.push(watermark.protectedFloor()),
      });
      // n2 learns of the protection through its metastorage view, a moment after the backup's node has it.
      const atT = (ts: HybridTimestamp | undefined) => ts === summary.timestamp || ts === undefined;
      assert.ok(held.length > 0 && held.every(atT), `held at T throughout: ${summary.timestamp} ${held.join(',')}`);
      assert.equal(held.at(-1), summary.timestamp, 'held at T on n2 at the end');
      assert.ok(watermark.current() <= summary.timestamp);
      await released('released when the backup ended');

      const dying = await connect(server.address);
      let during: HybridTimestamp | undefined;
      await assert.rejects(
        dying.backup({
          to: join(dir, 'dying'),
          tables: ['big'],
          concurrency: 1,
          protectionLifetimeMs: 1_500,
          // The metastorage leader applied the protection before the backup's first read; the others follow.
          onProgress: () => {
            during ??= anyFloor();
            if (during !== undefined) void dying.close();
          },
        }),
        (error) => isBasaltError(error),
      );
      assert.ok(during !== undefined, 'held while the backup ran');
      await released('lapsed once its client stopped renewing it');
      assert.equal(existsSync(join(dir, 'dying')), false);
      await remote.close();
    } finally {
      await server.close();
    }
  });

  it('an empty table backs up to empty files and restores to an empty table', async () => {
    await client.createTable('empty', { partitions: 3, replicas: 3 });
    const summary = await client.backup({ to: join(dir, 'empty'), tables: ['empty'], gzip: true });
    assert.deepEqual([summary.rows, summary.files], [0, 3]);
    assert.equal((await verifyBackup(join(dir, 'empty'))).rows, 0);
    const restored = await client.restore({ from: join(dir, 'empty'), as: 'empty-restored' });
    assert.equal(restored.rows, 0);
    assert.equal((await contents('empty-restored')).size, 0);
    assert.ok((await client.tables()).some((t) => t.name === 'empty-restored' && t.partitions === 3));
  });

  it('refuses a target that exists and a backup directory that is not empty', async () => {
    await assert.rejects(client.backup({ to: join(dir, 'big'), tables: ['big'] }), { code: 'ALREADY_EXISTS' });
    await assert.rejects(client.backup({ to: join(dir, 'nothing'), tables: ['nope'] }), { code: 'UNKNOWN_TABLE' });
    assert.throws(() => statSync(join(dir, 'nothing')), 'a failed backup leaves no directory');
    assert.throws(() => statSync(join(dir, 'nothing.partial')), 'nor a partial one');
  });
});
