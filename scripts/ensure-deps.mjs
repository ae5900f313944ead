#!/usr/bin/env node
// Runs before `npm start` and `npm test`: on a fresh clone (no node_modules yet) it installs the locked dependencies
// with `npm ci`, so the README's two commands work as they are. With the dependencies present it does nothing.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
// The compiler is what the next step needs first; its absence means the dependencies were never installed.
if (!existsSync(join(root, 'node_modules', 'typescript', 'package.json'))) {
  console.error('basalt: installing dependencies (npm ci) on first use');
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const result = spawnSync(npm, ['ci'], { cwd: root, stdio: 'inherit' });
  if (result.status !== 0) process.exit(result.status ?? 1);
}
