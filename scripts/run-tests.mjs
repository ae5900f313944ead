#!/usr/bin/env node
// Runs every compiled test file under node:test. Node 20's `node --test` takes no globs, so the files are listed here.
// Usage: node scripts/run-tests.mjs [substring-filter ...]
import { spawnSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

function collect(dir, out) {
  let entries;
  try {
    entries = readdirSync(dir);
  } catch {
    return out;
  }
  for (const name of entries.sort()) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) collect(path, out);
    else if (name.endsWith('.test.js')) out.push(path);
  }
  return out;
}

const filters = process.argv.slice(2);
const files = [...collect('dist/src', []), ...collect('dist/test', [])].filter(
  (f) => filters.length === 0 || filters.some((x) => f.includes(x)),
);
if (files.length === 0) {
  console.error('no test files found (did tsc run?)');
  process.exit(1);
}
// A test that hangs fails after this long instead of holding the whole run (and CI) hostage.
const TEST_TIMEOUT_MS = 300_000;
const result = spawnSync(
  process.execPath,
  ['--test', '--test-concurrency=2', `--test-timeout=${TEST_TIMEOUT_MS}`, ...files],
  { stdio: 'inherit' },
);
process.exit(result.status ?? 1);
