#!/usr/bin/env node
// Runs every compiled test file under node:test. Node 20's `node --test` takes no globs, so the files are listed here.
// Usage: node scripts/run-tests.mjs [substring-filter ...]
import { spawn } from 'node:child_process';
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
// The TAP stream goes through as it comes; every failing test's report is kept and printed again at the end, so
// that the tail of a long run (all a CI log may show) names what failed and why.
const child = spawn(
  process.execPath,
  ['--test', '--test-concurrency=2', `--test-timeout=${TEST_TIMEOUT_MS}`, ...files],
  { stdio: ['inherit', 'pipe', 'inherit'] },
);
const FAILURE_LINES_MAX = 60;
const failures = [];
let current;
let pending = '';
const scan = (line) => {
  if (/^\s*not ok \d+/.test(line)) {
    current = [line];
    failures.push(current);
  } else if (current !== undefined) {
    if (/^\s*(ok|not ok) \d+|^\s*# Subtest:/.test(line) || current.length >= FAILURE_LINES_MAX) current = undefined;
    else current.push(line);
  }
};
child.stdout.setEncoding('utf8');
child.stdout.on('data', (chunk) => {
  process.stdout.write(chunk);
  const lines = (pending + chunk).split('\n');
  pending = lines.pop() ?? '';
  for (const line of lines) scan(line);
});
child.on('close', (code) => {
  if (pending !== '') scan(pending);
  if (failures.length > 0) {
    console.log(`\n# ${failures.length} failing test report(s), repeated here:`);
    for (const report of failures) console.log(report.join('\n'));
  }
  process.exit(code ?? 1);
});
