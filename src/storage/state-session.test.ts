import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { beginStateSession, currentBootId } from './state-session.js';

function withDir(body: (dir: string) => void): void {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-state-session-'));
  try {
    body(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Plays an environment that holds data: the session only looks at whether its files exist. */
function writeEnvironment(dir: string): void {
  writeFileSync(join(dir, 'data.mdb'), 'pages');
  writeFileSync(join(dir, 'lock.mdb'), 'lock');
}

test('a directory without an environment is fresh, and the session is recorded unclean before anything is written', () => {
  withDir((dir) => {
    const session = beginStateSession(dir, 'boot-a');
    assert.equal(session.opening, 'fresh');
    assert.deepEqual(JSON.parse(readFileSync(join(dir, 'session.json'), 'utf8')), { bootId: 'boot-a', clean: false });
    session.markClean();
    assert.deepEqual(JSON.parse(readFileSync(join(dir, 'session.json'), 'utf8')), { bootId: 'boot-a', clean: true });
  });
});

test('a cleanly closed state is kept, even across a reboot', () => {
  withDir((dir) => {
    const first = beginStateSession(dir, 'boot-a');
    writeEnvironment(dir);
    first.markClean();
    const next = beginStateSession(dir, 'boot-b');
    assert.equal(next.opening, 'kept-clean');
    assert.ok(existsSync(join(dir, 'data.mdb')));
  });
});

test('after a process crash within the same boot the state is kept: its pages are in the page cache', () => {
  withDir((dir) => {
    beginStateSession(dir, 'boot-a');
    writeEnvironment(dir);
    const next = beginStateSession(dir, 'boot-a');
    assert.equal(next.opening, 'kept-same-boot');
    assert.equal(readFileSync(join(dir, 'data.mdb'), 'utf8'), 'pages');
  });
});

test('an unclean state from an earlier boot is removed, to be rebuilt from the Raft logs', () => {
  withDir((dir) => {
    beginStateSession(dir, 'boot-a');
    writeEnvironment(dir);
    const next = beginStateSession(dir, 'boot-b');
    assert.equal(next.opening, 'rebuilt');
    assert.equal(existsSync(join(dir, 'data.mdb')), false);
    assert.equal(existsSync(join(dir, 'lock.mdb')), false);
  });
});

test('without a boot id, or with a missing or unreadable session record, an unclean state is rebuilt', () => {
  withDir((dir) => {
    beginStateSession(dir, null);
    writeEnvironment(dir);
    assert.equal(beginStateSession(dir, null).opening, 'rebuilt', 'no boot id: the same boot cannot be proven');
  });
  withDir((dir) => {
    writeEnvironment(dir);
    assert.equal(beginStateSession(dir, 'boot-a').opening, 'rebuilt', 'data without any session record');
  });
  withDir((dir) => {
    writeEnvironment(dir);
    writeFileSync(join(dir, 'session.json'), '{"bootId": 7');
    assert.equal(beginStateSession(dir, 'boot-a').opening, 'rebuilt', 'a torn record');
  });
});

test('the boot id is read from the OS where it has one', () => {
  const id = currentBootId();
  if (existsSync('/proc/sys/kernel/random/boot_id')) assert.match(id ?? '', /^[0-9a-f-]{36}$/);
  else assert.equal(id, null);
});
