/**
 * The API reference documents every option and error code where it is declared (issue 38). `npm run docs` checks the
 * whole public API with TypeDoc's validation; this test keeps the two parts that matter most from rotting without
 * TypeDoc installed: every entry of ERROR_CODES, and every field of every options interface that src/index.ts
 * exports, has a TSDoc comment right above it.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, it } from 'node:test';
import { ERROR_CODES } from '../src/core/errors.js';
import { root } from './markdown.js';

/** Whether the declaration on line `at` has a TSDoc comment right above it (its `*\/` on the line before). */
function documented(lines: readonly string[], at: number): boolean {
  return at > 0 && (lines[at - 1] ?? '').trim().endsWith('*/');
}

/** The file that declares `interface name`, following re-exports (`export type { name } from './x.js'`) from `file`. */
function declaringFile(file: string, name: string, depth = 0): string {
  const source = readFileSync(join(root, file), 'utf8');
  if (new RegExp(`^export interface ${name}\\b`, 'm').test(source) || depth > 4) return file;
  for (const m of source.matchAll(/export (?:type )?\{([^}]*)\} from '(\.{1,2}\/[^']+)\.js';/g)) {
    const names = (m[1] ?? '').split(',').map((n) => n.replace(/\btype\b/, '').trim());
    if (names.includes(name)) return declaringFile(join(dirname(file), `${m[2]}.ts`), name, depth + 1);
  }
  return file;
}

/** `[file, name]` of every interface src/index.ts exports whose name ends in Options (or is NodeTuning). */
function exportedOptionInterfaces(): [string, string][] {
  const index = readFileSync(join(root, 'src', 'index.ts'), 'utf8');
  const out: [string, string][] = [['src/index.ts', 'ClusterOptions']];
  for (const m of index.matchAll(/export (?:type )?\{([^}]*)\} from '\.\/([^']+)\.js';/g)) {
    for (const raw of (m[1] ?? '').split(',')) {
      const name = raw.replace(/\btype\b/, '').trim();
      if (/Options$|^NodeTuning$/.test(name)) out.push([declaringFile(`src/${m[2]}.ts`, name), name]);
    }
  }
  return out;
}

/** The fields of `interface name` in `file` that have no TSDoc comment. */
function undocumentedFields(file: string, name: string): string[] {
  const lines = readFileSync(join(root, file), 'utf8').split('\n');
  const start = lines.findIndex((l) => new RegExp(`^export interface ${name}\\b`).test(l));
  assert.ok(start >= 0, `${file} declares interface ${name}`);
  const problems: string[] = [];
  if (!documented(lines, start)) problems.push(`${file}: ${name}`);
  for (let i = start + 1; i < lines.length && lines[i] !== '}'; i++) {
    const field = /^ {2}readonly (\w+)\??:/.exec(lines[i] ?? '');
    if (field !== null && !documented(lines, i)) problems.push(`${file}: ${name}.${field[1]}`);
  }
  return problems;
}

describe('API reference sources', () => {
  it('every error code of ERROR_CODES has a TSDoc comment', () => {
    const lines = readFileSync(join(root, 'src', 'core', 'errors.ts'), 'utf8').split('\n');
    const undocumented = Object.keys(ERROR_CODES).filter((code) => {
      const at = lines.findIndex((l) => l.startsWith(`  ${code}: { retryable:`));
      return at < 0 || !documented(lines, at);
    });
    assert.deepEqual(undocumented, []);
  });

  it('every options interface the package exports, and each of its fields, has a TSDoc comment', () => {
    const interfaces = exportedOptionInterfaces();
    assert.ok(interfaces.length >= 10, `found ${interfaces.map(([, n]) => n).join(', ')}`);
    assert.deepEqual(
      interfaces.flatMap(([file, name]) => undocumentedFields(file, name)),
      [],
    );
  });

  it('tells a documented declaration from an undocumented one', () => {
    const lines = ['  /** Why. */', '  readonly a?: number;', '  readonly b?: number;', '', '  readonly c: 1;'];
    assert.equal(declaringFile('src/client/client.ts', 'ReadOptions'), 'src/tx/core/user-input.ts');
    assert.deepEqual(
      [1, 2, 4].map((i) => documented(lines, i)),
      [true, false, false],
    );
  });
});
