/**
 * Tidy rules for production code under src/:
 *   1. determinism: no direct wall clock, timers, randomness or high-resolution time outside src/env/real-*
 *      (src/cli and src/sim are allowed: the CLI is the process edge, the simulator drains microtasks on the real loop);
 *   2. layering: imports follow DESIGN.md §1, `core → env → hlc → {storage, raft, net} → tx → replica → node →
 *      client → sim → cli`; modules on one level never import each other, and nothing imports a higher level; inside
 *      tx/, the synchronous cores (tx/core) never import the coordinator's flows (tx/coordinator).
 * Test files (*.test.ts) and src/index.ts are exempt from the layer rule; test files also from the determinism rule.
 */

export interface Violation {
  readonly file: string;
  readonly line: number;
  readonly rule: 'determinism' | 'layering';
  readonly message: string;
}

const FORBIDDEN: ReadonlyArray<readonly [RegExp, string]> = [
  [/(?<![.\w$])Date\b/, 'Date'],
  [/(?<![.\w$])setTimeout\b/, 'setTimeout'],
  [/(?<![.\w$])setInterval\b/, 'setInterval'],
  [/(?<![.\w$])setImmediate\b/, 'setImmediate'],
  [/(?<![.\w$])clearTimeout\b/, 'clearTimeout'],
  [/\bMath\s*\.\s*random\b/, 'Math.random'],
  [/\bcrypto\s*\.\s*random\w*/, 'crypto.random*'],
  [/(?<![.\w$])(randomUUID|randomBytes|randomInt|randomFillSync|getRandomValues)\b/, 'crypto random'],
  [/\bperformance\s*\.\s*now\b/, 'performance.now'],
  [/\bprocess\s*\.\s*hrtime\b/, 'process.hrtime'],
];

/** Levels of DESIGN.md §1. Directories on the same level may not import one another. */
export const LAYERS: Readonly<Record<string, number>> = {
  core: 0,
  env: 1,
  hlc: 2,
  storage: 3,
  raft: 3,
  net: 3,
  tx: 4,
  replica: 5,
  node: 6,
  client: 7,
  sim: 8,
  cli: 9,
};

/** Blanks comments and the contents of string and template literals, keeping line breaks. */
export function stripCommentsAndStrings(source: string): string {
  let out = '';
  let i = 0;
  const n = source.length;
  while (i < n) {
    const c = source[i]!;
    const next = source[i + 1];
    if (c === '/' && next === '/') {
      while (i < n && source[i] !== '\n') i++;
    } else if (c === '/' && next === '*') {
      i += 2;
      while (i < n && !(source[i] === '*' && source[i + 1] === '/')) {
        if (source[i] === '\n') out += '\n';
        i++;
      }
      i += 2;
    } else if (c === '"' || c === "'" || c === '`') {
      out += c;
      i++;
      while (i < n && source[i] !== c) {
        if (source[i] === '\\') i++;
        else if (source[i] === '\n') out += '\n';
        i++;
      }
      out += c;
      i++;
    } else {
      out += c;
      i++;
    }
  }
  return out;
}

function determinismAllowed(file: string): boolean {
  return (
    /^src\/env\/real-[^/]+\.ts$/.test(file) ||
    file.startsWith('src/cli/') ||
    file.startsWith('src/sim/') ||
    file.endsWith('.test.ts')
  );
}

function layerOf(file: string): string | undefined {
  const m = /^src\/([^/]+)\//.exec(file);
  return m?.[1];
}

/** Resolves a relative import specifier against `file` (both repository-relative, posix). */
function resolveImport(file: string, specifier: string): string {
  const parts = file.split('/').slice(0, -1);
  for (const seg of specifier.split('/')) {
    if (seg === '.' || seg === '') continue;
    if (seg === '..') parts.pop();
    else parts.push(seg);
  }
  return parts.join('/');
}

export function checkSource(file: string, source: string): Violation[] {
  const violations: Violation[] = [];
  const code = stripCommentsAndStrings(source).split('\n');
  if (!determinismAllowed(file)) {
    code.forEach((text, index) => {
      for (const [pattern, name] of FORBIDDEN) {
        if (pattern.test(text)) {
          violations.push({
            file,
            line: index + 1,
            rule: 'determinism',
            message: `${name} used outside src/env/real-*: inject it through src/env instead`,
          });
        }
      }
    });
  }
  const from = layerOf(file);
  if (from !== undefined && !file.endsWith('.test.ts')) {
    const fromLevel = LAYERS[from];
    const importPattern = /\b(?:import|export)\b[^;'"]*?\bfrom\s*['"]([^'"]+)['"]|\bimport\s*\(\s*['"]([^'"]+)['"]/g;
    for (const match of source.matchAll(importPattern)) {
      const specifier = match[1] ?? match[2];
      if (specifier === undefined || !specifier.startsWith('.')) continue;
      const line = source.slice(0, match.index).split('\n').length;
      const resolved = resolveImport(file, specifier);
      // Inside tx/: the synchronous cores never depend on the coordinator's flows built on them.
      if (file.startsWith('src/tx/core/') && resolved.startsWith('src/tx/coordinator/')) {
        violations.push({ file, line, rule: 'layering', message: 'tx/core must not import tx/coordinator' });
      }
      const target = layerOf(resolved);
      if (target === undefined || target === from) continue;
      const targetLevel = LAYERS[target];
      if (fromLevel === undefined || targetLevel === undefined) {
        violations.push({ file, line, rule: 'layering', message: `unknown layer ${from} → ${target}` });
      } else if (targetLevel >= fromLevel) {
        violations.push({
          file,
          line,
          rule: 'layering',
          message: `${from} (level ${fromLevel}) must not import ${target} (level ${targetLevel})`,
        });
      }
    }
  }
  return violations;
}
