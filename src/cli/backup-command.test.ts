/**
 * `basalt backup`, `backup verify` and `restore` end to end against a running one-node cluster (`basalt start`, in
 * memory): a full and an incremental backup, verified, restored under a new name to the same rows; a changed byte is
 * refused with its code and file, and nothing is restored; a missing --to is invalid input.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { runBasalt, startSingleNode } from '../testing/cli-node.js';
import { DATA_EXIT_CODES } from './data.js';

const _MAIN = fileURLToPath(new URL('./main.js', import.meta.url));

test('basalt backup, backup verify and restore against a running node', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-backup-cli-'));
  const node = await startSingleNode(dir);
  try {
    const c = ['--connect', node.address];
    const puts = Array.from({ length: 40 }, (_, i) => ({ op: 'put', table: 'kv', key: `k${i}`, value: { i } }));
    assert.equal(runBasalt(['txn', '-', ...c], JSON.stringify(puts)).code, DATA_EXIT_CODES.ok);

    const full = runBasalt(['backup', ...c, '--to', join(dir, 'b0'), '--gzip']);
    assert.equal(full.code, DATA_EXIT_CODES.ok, full.stderr);
    assert.equal(JSON.parse(full.stdout).rows, 40);
    assert.match(full.stderr, /full backup \w+ at \d+: 40 records/);
    assert.equal(runBasalt(['backup', 'verify', join(dir, 'b0')]).code, DATA_EXIT_CODES.ok);

    const changes = [
      { op: 'put', table: 'kv', key: 'k1', value: 'changed' },
      { op: 'put', table: 'kv', key: 'new', value: [1, 2] },
      { op: 'rm', table: 'kv', key: 'k2' },
    ];
    assert.equal(runBasalt(['txn', '-', ...c], JSON.stringify(changes)).code, DATA_EXIT_CODES.ok);
    const inc = runBasalt(['backup', ...c, '--to', join(dir, 'b1'), '--incremental-from', join(dir, 'b0')]);
    assert.equal(inc.code, DATA_EXIT_CODES.ok, inc.stderr);
    assert.deepEqual(
      { rows: JSON.parse(inc.stdout).rows, deletes: JSON.parse(inc.stdout).deletes },
      { rows: 3, deletes: 1 },
    );
    const verified = runBasalt(['backup', 'verify', join(dir, 'b1')]);
    assert.equal(verified.code, DATA_EXIT_CODES.ok, verified.stderr);
    assert.equal(JSON.parse(verified.stdout).backups, 2);

    const restored = runBasalt(['restore', ...c, '--from', join(dir, 'b1'), '--tables', 'kv', '--as', 'kv2']);
    assert.equal(restored.code, DATA_EXIT_CODES.ok, restored.stderr);
    const rows = (table: string) => runBasalt(['scan', table, ...c]).stdout;
    assert.equal(rows('kv2'), rows('kv'));
    assert.equal(rows('kv2').trim().split('\n').length, 40);

    const file = join(dir, 'b0', 't0', 'p1.ndjson.gz');
    const original = readFileSync(file);
    const flipped = Buffer.from(original);
    flipped[20] = flipped[20]! ^ 0x10;
    writeFileSync(file, flipped);
    const bad = runBasalt(['backup', 'verify', join(dir, 'b1')]);
    assert.equal(bad.code, DATA_EXIT_CODES.refused);
    assert.match(bad.stderr, /BACKUP_CORRUPT: .*b0\/t0\/p1\.ndjson\.gz/);
    const refused = runBasalt(['restore', ...c, '--from', join(dir, 'b1'), '--as', 'kv3', '--tables', 'kv']);
    assert.equal(refused.code, DATA_EXIT_CODES.refused);
    assert.match(refused.stderr, /BACKUP_CORRUPT/);
    const tables = runBasalt(['table', 'list', '--connect', node.address]).stdout;
    assert.match(tables, /kv2/);
    assert.doesNotMatch(tables, /kv3/, 'nothing was restored');

    assert.equal(runBasalt(['backup', ...c]).code, DATA_EXIT_CODES.invalid, 'no --to');
  } finally {
    node.child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
});
