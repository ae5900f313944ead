/**
 * Tidy rules for production code under src/:
 *   1. determinism: no direct wall clock, timers, randomness or high-resolution time outside src/env/real-*
 *      (src/cli and src/sim are allowed: the CLI is the process edge, the simulator drains microtasks on the real loop);
 *   2. layering: imports follow DESIGN.md §1, `core → env → hlc → {storage, raft, net} → {route, cluster} → tx →
 *      replica → node → harness → client → sim → cli`: route is how a request finds a partition's primary, cluster the
 *      cluster's management (metastorage, membership, placement, partition moves), node the composition root of one
 *      node, harness the in-process clusters of the public harness API; modules on one level never import each other, and nothing imports a higher level; inside
 *      tx/, the synchronous cores (tx/core) never import the coordinator's flows (tx/coordinator); src/testing (the
 *      fakes, simulated clusters and contract suites the tests share) sits above everything, so no product code
 *      imports it, and the package leaves it out.
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
  route: 3.5,
  cluster: 3.5,
  tx: 4,
  replica: 5,
  node: 6,
  harness: 6.5,
  client: 7,
  sim: 8,
  cli: 9,
  testing: 10,
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

// ------------------------------------------------------------------------------------------ structure measures

/** A function body longer than this many lines (signature to closing brace) needs a place on the allowlist. */
export const FUNCTION_LINES_MAX = 70;

const NOT_FUNCTIONS = new Set(['if', 'for', 'while', 'switch', 'catch', 'with', 'return', 'await', 'typeof']);

export interface FunctionSpan {
  readonly name: string;
  readonly line: number;
  readonly lines: number;
}

/**
 * The functions of a source file with their length in lines, found by reading the text (no parser): every `{` that
 * opens the body of a function declaration, a method, a constructor, an accessor or an arrow function with a block
 * body. A nested function is counted on its own and inside the one that holds it.
 */
export function functionSpans(source: string): FunctionSpan[] {
  const code = stripCommentsAndStrings(source);
  const lineAt = lineIndex(code);
  const spans: FunctionSpan[] = [];
  const opens: number[] = [];
  const starts: (FunctionSpan & { readonly at: number })[] = [];
  for (let i = 0; i < code.length; i++) {
    const c = code[i];
    if (c === '{') {
      opens.push(i);
      const head = functionHead(code, i);
      if (head !== undefined) starts.push({ name: head.name, line: lineAt(head.at), lines: 0, at: i });
    } else if (c === '}') {
      const open = opens.pop();
      const start = starts.at(-1);
      if (open !== undefined && start !== undefined && start.at === open) {
        starts.pop();
        spans.push({ name: start.name, line: start.line, lines: lineAt(i) - start.line + 1 });
      }
    }
  }
  return spans.sort((a, b) => a.line - b.line);
}

function lineIndex(code: string): (offset: number) => number {
  const breaks: number[] = [];
  for (let i = 0; i < code.length; i++) if (code[i] === '\n') breaks.push(i);
  return (offset) => {
    let lo = 0;
    let hi = breaks.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (breaks[mid]! < offset) lo = mid + 1;
      else hi = mid;
    }
    return lo + 1;
  };
}

/** The name and start of the function whose body the `{` at `brace` opens, if it opens one. */
function functionHead(code: string, brace: number): { readonly name: string; readonly at: number } | undefined {
  let j = skipBack(code, brace - 1);
  if (code[j] === '>' && code[j - 1] === '=') return arrowHead(code, j - 2);
  // A return type annotation between `)` and `{`: `): Promise<void> {`.
  if (code[j] !== ')') {
    let depth = 0;
    let k = j;
    for (; k >= 0; k--) {
      const c = code[k]!;
      if (c === '>') depth++;
      else if (c === '<') depth--;
      else if (depth === 0 && (c === ';' || c === '{' || c === '}' || c === '=' || c === '(')) return undefined;
      else if (depth === 0 && c === ':' && code[skipBack(code, k - 1)] === ')') break;
    }
    if (k < 0) return undefined;
    j = skipBack(code, k - 1);
  }
  if (code[j] !== ')') return undefined;
  const open = matchBack(code, j, '(', ')');
  if (open === undefined) return undefined;
  let k = skipBack(code, open - 1);
  if (code[k] === '>') {
    const generic = matchBack(code, k, '<', '>');
    if (generic === undefined) return undefined;
    k = skipBack(code, generic - 1);
  }
  const end = k + 1;
  while (k >= 0 && /[\w$#]/.test(code[k]!)) k--;
  const name = code.slice(k + 1, end);
  if (name === '' || NOT_FUNCTIONS.has(name)) return undefined;
  return { name, at: k + 1 };
}

/** An arrow function `name = (...) => {` or `name: (...) => {`; `j` is just before `=>`. */
function arrowHead(code: string, j: number): { readonly name: string; readonly at: number } | undefined {
  let k = skipBack(code, j);
  if (code[k] === ')') {
    const open = matchBack(code, k, '(', ')');
    if (open === undefined) return undefined;
    k = skipBack(code, open - 1);
  } else {
    while (k >= 0 && /[\w$]/.test(code[k]!)) k--;
    k = skipBack(code, k);
  }
  if (code.slice(k - 4, k + 1) === 'async') k = skipBack(code, k - 5);
  if (code[k] === '=' || code[k] === ':') {
    k = skipBack(code, k - 1);
    if (code[k] === '>') {
      const generic = matchBack(code, k, '<', '>');
      if (generic !== undefined) k = skipBack(code, generic - 1);
    }
    const end = k + 1;
    while (k >= 0 && /[\w$]/.test(code[k]!)) k--;
    const name = code.slice(k + 1, end);
    if (name !== '') return { name, at: k + 1 };
  }
  return { name: '(arrow)', at: k + 1 };
}

function skipBack(code: string, i: number): number {
  while (i >= 0 && /\s/.test(code[i]!)) i--;
  return i;
}

function matchBack(code: string, close: number, open: string, closing: string): number | undefined {
  let depth = 0;
  for (let i = close; i >= 0; i--) {
    if (code[i] === closing) depth++;
    else if (code[i] === open && --depth === 0) return i;
  }
  return undefined;
}

/** Relative import targets of a production file, resolved to repository paths ending in `.ts`. */
export function importTargets(file: string, source: string): string[] {
  const importPattern = /\b(?:import|export)\b[^;'"]*?\bfrom\s*['"]([^'"]+)['"]|\bimport\s*\(\s*['"]([^'"]+)['"]/g;
  const out: string[] = [];
  for (const match of source.matchAll(importPattern)) {
    const specifier = match[1] ?? match[2];
    if (specifier === undefined || !specifier.startsWith('.')) continue;
    out.push(resolveImport(file, specifier).replace(/\.js$/, '.ts'));
  }
  return out;
}

/** The import circles of a graph (strongly connected components of more than one file), each sorted. */
export function importCircles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const circles: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, counter);
    low.set(v, counter);
    counter++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1) circles.push(component.sort());
    }
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) visit(v);
  return circles;
}

/** `assert(` calls in a source file (comments and strings left out). */
export function assertCount(source: string): number {
  return [...stripCommentsAndStrings(source).matchAll(/(?<![.\w$])assert\s*\(/g)].length;
}

// ------------------------------------------------------------------------------------------ house rules

/**
 * Functions longer than FUNCTION_LINES_MAX that are allowed for now, with their length when listed. The list may only
 * shrink: a function on it may not grow, one that got short enough must leave it, and no other may join it.
 */
export const LONG_FUNCTIONS: Readonly<Record<string, number>> = {
  'src/cli/jepsen.ts:jepsen': 146,
  'src/cli/start-command.ts:runStart': 177,
  'src/node/compose.ts:composeNode': 238,
  'src/sim/check/register.ts:checkKey': 81,
  'src/sim/workload/run.ts:simRun': 122,
};

/**
 * Sub-folders of a layer that are layers themselves, lowest first: a file in one may import the ones before it and
 * its parent's `ports.ts` (declarations only), never a later one nor the parent's other files.
 */
export const SUBLAYERS: Readonly<Record<string, readonly string[]>> = {
  replica: ['partition', 'resolution', 'cleanup', 'handlers'],
  tx: ['core', 'coordinator'],
};

/**
 * The least number of `assert(` calls per folder of async protocol code, where the subtle bugs live: the invariants
 * their module headers state, checked where they are written and where they are read. A floor may only rise.
 */
export const ASSERT_FLOORS: Readonly<Record<string, number>> = {
  'src/node': 4,
  'src/replica/cleanup': 10,
  'src/replica/resolution': 12,
  'src/route': 5,
};

/** Whether a production path is test support (it belongs in src/testing, which the package leaves out). */
export function looksLikeTestSupport(file: string, source: string): boolean {
  if (file.startsWith('src/testing/') || file.endsWith('.test.ts')) return false;
  if (/(^|[/-])(test-support|test-cluster|fakes?)\.ts$|\.contract\.ts$/.test(file)) return true;
  return /from\s+['"]node:test['"]|from\s+['"]node:assert(\/strict)?['"]/.test(source);
}

/** Imports between sub-layers that run against SUBLAYERS. */
export function sublayerViolations(file: string, targets: readonly string[]): string[] {
  const parts = file.split('/');
  const layer = parts[1];
  const order = layer === undefined ? undefined : SUBLAYERS[layer];
  if (order === undefined || parts.length < 4) return [];
  const from = order.indexOf(parts[2]!);
  if (from < 0) return [];
  const out: string[] = [];
  for (const target of targets) {
    const t = target.split('/');
    if (t[0] !== 'src' || t[1] !== layer) continue;
    if (t.length === 3) {
      if (t[2] !== 'ports.ts') out.push(`${file} imports ${target}: a sub-layer imports only its parent's ports.ts`);
      continue;
    }
    const to = order.indexOf(t[2]!);
    if (to > from) out.push(`${file} imports ${target}: ${parts[2]} sits below ${t[2]}`);
  }
  return out;
}
