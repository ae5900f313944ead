/**
 * Backups across real processes: three `basalt start` processes over TCP with LMDB, a client over `connect()` to n1.
 * `kill -9` of n3 while a backup reads: the backup either completes, and then holds exactly the snapshot at its
 * timestamp and verifies, or fails with a coded error and leaves no directory. `kill -9` of n1, the node whose
 * coordinator holds the backup's snapshot: the backup fails with a coded error and leaves nothing behind.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { BackupSummary } from '../client/backup.js';
import { chainRecords, loadChain } from '../client/backup-format.js';
import { connect, type RemoteClient } from '../client/remote.js';
import { verifyBackup } from '../client/restore.js';
import { scanPages } from '../client/scan-pages.js';
import { isBasaltError } from '../core/errors.js';
import type { HybridTimestamp } from '../core/ids.js';
import { ChildNode } from './child-node.js';
import { freePorts } from './free-ports.js';

const NAMES = ['n1', 'n2', 'n3'] as const;
const TABLE = 'big';
const ROWS = 20_000;

async function snapshot(client: RemoteClient, at: HybridTimestamp): Promise<Map<string, unknown>> {
  const rows = new Map<string, unknown>();
  await client.transaction(
    async (tx) => {
      rows.clear();
      for await (const page of scanPages(tx, TABLE, {})) for (const row of page) rows.set(row.key, row.value);
    },
    { readOnly: true, readTimestamp: at, retries: 50 },
  );
  return rows;
}

async function backupFiles(dir: string): Promise<Map<string, unknown>> {
  const chain = await loadChain(dir);
  const rows = new Map<string, unknown>();
  const partitions = chain[0]!.manifest.tables[0]!.partitions;
  for (let p = 0; p < partitions; p++) {
    for await (const record of chainRecords(chain, TABLE, p)) if (!record.deleted) rows.set(record.key, record.value);
  }
  return rows;
}

/** Runs a backup that kills `victim` once it has written its first page; the outcome, settled. */
async function backupKilling(
  client: RemoteClient,
  to: string,
  victim: ChildNode,
): Promise<PromiseSettledResult<BackupSummary>> {
  let killed = false;
  const [outcome] = await Promise.allSettled([
    client.backup({
      to,
      tables: [TABLE],
      concurrency: 2,
      onProgress: (p) => {
        if (!killed && p.rows > 0) {
          killed = true;
          victim.signal('SIGKILL');
        }
      },
    }),
  ]);
  assert.ok(killed, 'the node was killed while the backup ran');
  return outcome!;
}

test('kill -9 of a node during a backup: a complete backup of the snapshot, or a coded failure and no backup', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'basalt-backup-kill-'));
  const [p1, p2, p3, clientPort] = await freePorts(4);
  const peerPorts = [p1, p2, p3];
  const args = (name: string, i: number): string[] => [
    'start',
    '--name',
    name,
    '--port',
    String(peerPorts[i]),
    '--peers',
    NAMES.flatMap((n, j) => (n === name ? [] : [`${n}=127.0.0.1:${peerPorts[j]}`])).join(','),
    '--data',
    join(dataDir, name),
    '--table',
    `${TABLE}:4:3`,
    ...(name === 'n1' ? ['--client-port', String(clientPort)] : []),
  ];
  const procs = NAMES.map((name, i) => new ChildNode(args(name, i)));
  let client: RemoteClient | undefined;
  try {
    await Promise.all(procs.map((child) => child.waitFor(/basalt: node n\d ready/, 90_000)));
    client = await connect(`127.0.0.1:${clientPort}`, { timeoutMs: 20_000 });
    const live = client;
    for (let i = 0; i < ROWS; i += 1_000) {
      const batch = Array.from({ length: 1_000 }, (_, j) => ({
        key: `r${i + j}`,
        value: { i: i + j, pad: 'x'.repeat(50) },
      }));
      await live.transaction((tx) => tx.putAll(TABLE, batch), { retries: 50 });
    }

    const first = join(dataDir, 'backup-n3-killed');
    const outcome = await backupKilling(live, first, procs[2]!);
    if (outcome.status === 'fulfilled') {
      assert.equal(outcome.value.rows, ROWS);
      assert.equal((await verifyBackup(first)).rows, ROWS);
      const expected = await snapshot(live, outcome.value.timestamp);
      assert.deepEqual(await backupFiles(first), expected, 'the backup holds exactly the snapshot at its timestamp');
    } else {
      assert.ok(isBasaltError(outcome.reason), `a coded failure: ${String(outcome.reason)}`);
      assert.equal(existsSync(first), false, 'a failed backup leaves no directory');
    }
    assert.equal(existsSync(`${first}.partial`), false);
    process.stdout.write(
      `# backup with n3 killed: ${outcome.status === 'fulfilled' ? 'completed' : `failed ${String(outcome.reason)}`}\n`,
    );

    const second = join(dataDir, 'backup-n1-killed');
    const lost = await backupKilling(live, second, procs[0]!);
    assert.equal(lost.status, 'rejected', 'the coordinator of the snapshot is gone');
    assert.ok(isBasaltError((lost as PromiseRejectedResult).reason), String((lost as PromiseRejectedResult).reason));
    assert.equal(existsSync(second), false);
    assert.equal(existsSync(`${second}.partial`), false);
  } finally {
    await client?.close().catch(() => undefined);
    for (const child of procs) child.signal('SIGKILL');
    await Promise.all(procs.map((c) => c.exited));
    rmSync(dataDir, { recursive: true, force: true });
  }
});
