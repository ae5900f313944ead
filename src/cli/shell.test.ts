/**
 * `basalt shell`, `basalt lease` and `basalt put --ttl | --lease`: the shell's line parsing, prompt and completion,
 * then everything end to end against a running node (`basalt start`, in memory), the shell driven by a script on
 * standard input (not a terminal).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { connect } from '../client/remote.js';
import { runBasalt, startSingleNode } from '../testing/cli-node.js';
import { ChildNode } from './child-node.js';
import { DATA_EXIT_CODES } from './data.js';
import { completeLine, parseLine, promptOf, runShell } from './shell.js';

const _MAIN = fileURLToPath(new URL('./main.js', import.meta.url));

const lines = (text: string): unknown[] =>
  text
    .trim()
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => (l.startsWith('error:') ? l : JSON.parse(l)));

describe('shell lines', () => {
  it('put keeps the rest of the line as its JSON value, after its flags', () => {
    assert.deepEqual(parseLine('put kv a --ttl 500 {"x": [1, 2]}'), {
      command: 'put',
      args: ['kv', 'a'],
      flags: { '--ttl': '500' },
      json: '{"x": [1, 2]}',
    });
    assert.deepEqual(parseLine('  scan kv --prefix p/ --limit 3 '), {
      command: 'scan',
      args: ['kv'],
      flags: { '--prefix': 'p/', '--limit': '3' },
    });
    assert.deepEqual(parseLine('begin --read-only'), { command: 'begin', args: [], flags: { '--read-only': true } });
    assert.equal(parseLine('   '), undefined);
    assert.equal(parseLine('# a comment'), undefined);
    assert.throws(() => parseLine('scan kv --limit'), /needs a value/);
  });

  it('completes commands, then table names after a data command, then lease subcommands', () => {
    assert.deepEqual(completeLine('sc', ['kv']), [['scan'], 'sc']);
    assert.deepEqual(completeLine('get k', ['kv', 'accounts', 'keys']), [['kv', 'keys'], 'k']);
    assert.deepEqual(completeLine('lease re', []), [['revoke'], 're']);
    assert.deepEqual(completeLine('get kv a', ['kv']), [[], 'a']);
  });

  it('the prompt shows the open transaction', () => {
    assert.equal(promptOf(undefined), 'basalt> ');
    assert.equal(promptOf({ id: '0123456789abcdef', readOnly: false }), 'basalt(rw 01234567)> ');
    assert.equal(promptOf({ id: '0123456789abcdef', readOnly: true }), 'basalt(ro 01234567)> ');
  });
});

describe('basalt shell, lease and put --ttl against a running node', () => {
  it('scripts, leases and ttls end to end; bad ttls exit 2 with nothing written', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'basalt-shell-'));
    const node = await startSingleNode(dir);
    try {
      const c = ['--connect', node.address];
      // put --ttl: visible, then gone.
      assert.equal(runBasalt(['put', 'kv', 'long', '"l"', '--ttl', '600000', ...c]).code, DATA_EXIT_CODES.ok);
      assert.equal(runBasalt(['get', 'kv', 'long', ...c]).stdout.trim(), '"l"');
      assert.equal(runBasalt(['put', 'kv', 'short', '"s"', '--ttl', '1500', ...c]).code, DATA_EXIT_CODES.ok);
      for (const ttl of ['0', '-3', '1.5', 'soon', String(366 * 24 * 3_600_000)]) {
        const bad = runBasalt(['put', 'kv', 'bad', '1', '--ttl', ttl, ...c]);
        assert.equal(bad.code, DATA_EXIT_CODES.invalid, `--ttl ${ttl}: ${bad.stderr}`);
        assert.match(bad.stderr, /INVALID_ARGUMENT/);
      }
      assert.equal(runBasalt(['get', 'kv', 'bad', ...c]).code, DATA_EXIT_CODES.notFound, 'a refused put wrote nothing');

      const ttlScript = '[{"op":"put","table":"kv","key":"txn-ttl","value":5,"ttlMs":600000}]';
      assert.equal(runBasalt(['txn', '-', ...c], ttlScript).code, DATA_EXIT_CODES.ok);
      assert.equal(runBasalt(['get', 'kv', 'txn-ttl', ...c]).stdout.trim(), '5');
      const badScript = '[{"op":"put","table":"kv","key":"txn-bad","value":5,"ttlMs":0}]';
      assert.equal(runBasalt(['txn', '-', ...c], badScript).code, DATA_EXIT_CODES.invalid);
      assert.equal(runBasalt(['get', 'kv', 'txn-bad', ...c]).code, DATA_EXIT_CODES.notFound);

      // lease grant | put --lease | keep --once | revoke.
      const granted = runBasalt(['lease', 'grant', '60000', ...c]);
      assert.equal(granted.code, DATA_EXIT_CODES.ok, granted.stderr);
      const lease = JSON.parse(granted.stdout) as { id: string; ttlMs: number; expiresAt: string };
      assert.equal(lease.ttlMs, 60_000);
      assert.equal(runBasalt(['put', 'kv', 'leased', '7', '--lease', lease.id, ...c]).code, DATA_EXIT_CODES.ok);
      const kept = runBasalt(['lease', 'keep', lease.id, '--once', ...c]);
      assert.equal(kept.code, DATA_EXIT_CODES.ok, kept.stderr);
      assert.ok(BigInt((JSON.parse(kept.stdout) as { expiresAt: string }).expiresAt) >= BigInt(lease.expiresAt));
      assert.equal(runBasalt(['get', 'kv', 'leased', ...c]).stdout.trim(), '7');
      // keep without --once: one line now, one per renewal (every ttl / 3), until interrupted (exit 0).
      const keeping = JSON.parse(runBasalt(['lease', 'grant', '3000', ...c]).stdout) as { id: string };
      const keeper = new ChildNode(['lease', 'keep', keeping.id, ...c]);
      try {
        await keeper.waitFor(/"expiresAt":"\d+"\}\n[\s\S]*"expiresAt":"\d+"\}/, 30_000);
        keeper.signal('SIGINT');
        assert.equal((await keeper.exited).code, DATA_EXIT_CODES.ok, keeper.output);
        const ends = [...keeper.output.matchAll(/"expiresAt":"(\d+)"/g)].map((m) => BigInt(m[1]!));
        assert.ok(ends.length >= 2 && ends.at(-1)! > ends[0]!, 'each renewal moves the end');
      } finally {
        keeper.signal('SIGKILL');
      }
      assert.deepEqual(JSON.parse(runBasalt(['lease', 'revoke', lease.id, ...c]).stdout), { revoked: lease.id });
      assert.equal(runBasalt(['get', 'kv', 'leased', ...c]).code, DATA_EXIT_CODES.notFound, 'revoked with its lease');
      const gone = runBasalt(['lease', 'keep', lease.id, '--once', ...c]);
      assert.equal(gone.code, DATA_EXIT_CODES.refused);
      assert.match(gone.stderr, /LEASE_NOT_FOUND/);
      assert.equal(runBasalt(['put', 'kv', 'x', '1', '--ttl', '5', '--lease', lease.id, ...c]).code, 2);

      // The shell, scripted on standard input.
      const script = [
        'put kv s/1 {"n": 1}',
        'begin',
        'put kv s/2 [2, "two"]',
        'get kv s/2',
        'rollback',
        'get kv s/2',
        'begin',
        'put kv s/3 --ttl 60000 3',
        'commit',
        'scan kv --prefix s/',
        'nosuch',
        'get kv s/1',
        'exit',
        'get kv never-run',
      ].join('\n');
      const shell = runBasalt(['shell', ...c], script);
      const out = lines(shell.stdout);
      assert.deepEqual(out[0], {});
      assert.equal((out[1] as { readOnly: boolean }).readOnly, false);
      assert.deepEqual(out.slice(2, 4), [{}, [2, 'two']], 'the open transaction reads its own write');
      assert.ok('rolledBack' in (out[4] as object));
      assert.equal(out[5], null, 'the rolled back write is gone');
      assert.ok('committed' in (out[8] as object));
      assert.deepEqual(out.slice(9, 11), [
        { key: 's/1', value: { n: 1 } },
        { key: 's/3', value: 3 },
      ]);
      assert.match(String(out[11]), /^error: INVALID_ARGUMENT: unknown command "nosuch"/);
      assert.deepEqual(out[12], { n: 1 }, 'the session goes on after an error');
      assert.equal(out.length, 13, 'nothing runs after exit');
      assert.equal(shell.code, DATA_EXIT_CODES.invalid, 'the exit code is the first failure');
      const clean = runBasalt(['shell', ...c], 'tables\nget kv s/1\n');
      assert.equal(clean.code, DATA_EXIT_CODES.ok);
      const cleanOut = lines(clean.stdout);
      assert.ok(cleanOut.includes('kv'), 'tables lists kv');
      assert.deepEqual(cleanOut.at(-1), { n: 1 });
      assert.equal(runBasalt(['get', 'kv', 'short', ...c]).code, DATA_EXIT_CODES.notFound, 'the 1.5 s ttl ran out');

      // On a terminal: the prompt shows the open transaction, and the history is saved across sessions.
      const historyFile = join(dir, 'history');
      writeFileSync(historyFile, 'get kv earlier\n');
      const client = await connect(node.address);
      try {
        const input = Object.assign(new PassThrough(), { isTTY: true });
        const output = new PassThrough();
        let shown = '';
        output.on('data', (chunk: Buffer) => (shown += chunk.toString()));
        const done = runShell(client, input, output, historyFile);
        for (const line of ['begin', 'put kv tty 1', 'commit', 'exit']) {
          input.write(`${line}\r`);
          await new Promise((r) => setTimeout(r, 300));
        }
        assert.equal(await done, DATA_EXIT_CODES.ok);
        assert.match(shown, /basalt\(rw [0-9a-z]{1,8}\)> /, 'the prompt names the open transaction');
        assert.deepEqual(readFileSync(historyFile, 'utf8').trim().split('\n'), [
          'get kv earlier',
          'begin',
          'put kv tty 1',
          'commit',
          'exit',
        ]);
        assert.equal(await client.get('kv', 'tty'), 1);
      } finally {
        await client.close();
      }
    } finally {
      node.child.kill('SIGINT');
      await new Promise((r) => node.child.once('exit', r));
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
