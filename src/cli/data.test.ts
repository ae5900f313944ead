/**
 * The data commands end to end against a running one-node cluster (`basalt start`, in memory): put, get, rm, scan
 * and txn print JSON lines, exit with the documented codes, and refuse malformed input before writing anything.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { runBasalt, startSingleNode } from '../testing/cli-node.js';
import { DATA_EXIT_CODES, parseScript } from './data.js';

const _MAIN = fileURLToPath(new URL('./main.js', import.meta.url));

test('txn scripts are checked whole before anything runs', () => {
  assert.deepEqual(
    parseScript('[{"op":"put","table":"t","key":"a","value":{"x":1}},{"op":"get","table":"t","key":"a"}]'),
    [
      { op: 'put', table: 't', key: 'a', value: { x: 1 } },
      { op: 'get', table: 't', key: 'a' },
    ],
  );
  assert.throws(() => parseScript('{'), /not JSON/);
  assert.throws(() => parseScript('{}'), /JSON array/);
  assert.throws(() => parseScript('[{"op":"drop","table":"t"}]'), /unknown op/);
  assert.throws(() => parseScript('[{"op":"put","table":"t","key":"a"}]'), /needs a value/);
  assert.throws(() => parseScript('[{"op":"scan","table":"t","limit":0}]'), /bad limit/);
});

test('basalt put/get/rm/scan/txn against a running node: JSON out, exit codes, malformed input writes nothing', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-data-'));
  const node = await startSingleNode(dir);
  try {
    const c = ['--connect', `127.0.0.1:1,${node.address}`];
    assert.equal(
      runBasalt(['put', 'kv', 'a', '{"n":1}', ...c]).code,
      DATA_EXIT_CODES.ok,
      'the first address is skipped',
    );
    assert.equal(runBasalt(['put', 'kv', 'b', '-', ...c], '[2, 3]').code, DATA_EXIT_CODES.ok);
    const got = runBasalt(['get', 'kv', 'a', ...c]);
    assert.equal(got.code, DATA_EXIT_CODES.ok);
    assert.deepEqual(JSON.parse(got.stdout), { n: 1 });
    assert.equal(runBasalt(['get', 'kv', 'missing', ...c]).code, DATA_EXIT_CODES.notFound);

    const bad = runBasalt(['put', 'kv', 'c', '{not json', ...c]);
    assert.equal(bad.code, DATA_EXIT_CODES.invalid);
    assert.match(bad.stderr, /INVALID_ARGUMENT: the value is not JSON/);
    const badScript = runBasalt(['txn', '-', ...c], '[{"op":"put","table":"kv","key":"d","value":4},{"op":"nope"}]');
    assert.equal(badScript.code, DATA_EXIT_CODES.invalid);
    assert.equal(runBasalt(['get', 'kv', 'd', ...c]).code, DATA_EXIT_CODES.notFound, 'a refused script wrote nothing');
    assert.equal(runBasalt(['get', 'nosuchtable', 'a', ...c]).code, DATA_EXIT_CODES.refused);

    const script = JSON.stringify([
      { op: 'get', table: 'kv', key: 'a' },
      { op: 'put', table: 'kv', key: 'a', value: { n: 2 } },
      { op: 'rm', table: 'kv', key: 'b' },
      { op: 'scan', table: 'kv', prefix: '' },
    ]);
    const txn = runBasalt(['txn', '-', ...c], script);
    assert.equal(txn.code, DATA_EXIT_CODES.ok, txn.stderr);
    const lines = txn.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    assert.deepEqual(lines[0], { op: 'get', value: { n: 1 } });
    assert.deepEqual(lines[3], { op: 'scan', rows: [{ key: 'a', value: { n: 2 } }] }, 'the tx reads its own writes');

    assert.equal(runBasalt(['put', 'kv', 'p/1', '1', ...c]).code, DATA_EXIT_CODES.ok);
    assert.equal(runBasalt(['put', 'kv', 'p/2', '2', ...c]).code, DATA_EXIT_CODES.ok);
    const scan = runBasalt(['scan', 'kv', '--prefix', 'p/', '--output', 'table', ...c]);
    assert.equal(scan.code, DATA_EXIT_CODES.ok);
    assert.equal(scan.stdout, 'p/1\t1\np/2\t2\n');
    assert.equal(runBasalt(['rm', 'kv', 'a', ...c]).code, DATA_EXIT_CODES.ok);
    assert.equal(runBasalt(['get', 'kv', 'a', ...c]).code, DATA_EXIT_CODES.notFound);
    assert.equal(runBasalt(['get', 'kv', 'a', '--connect', '127.0.0.1:1']).code, DATA_EXIT_CODES.unavailable);
  } finally {
    node.child.kill('SIGINT');
    await new Promise((r) => node.child.once('exit', r));
    rmSync(dir, { recursive: true, force: true });
  }
});
