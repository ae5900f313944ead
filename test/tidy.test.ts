import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';
import {
  ASSERT_FLOORS,
  assertCount,
  checkSource,
  FUNCTION_LINES_MAX,
  functionSpans,
  importCircles,
  importTargets,
  LONG_FUNCTIONS,
  looksLikeTestSupport,
  stripCommentsAndStrings,
  sublayerViolations,
} from './tidy.js';

const root = join(import.meta.dirname, '..', '..');

function sourceFiles(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir).sort()) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) sourceFiles(path, out);
    else if (name.endsWith('.ts')) out.push(path);
  }
  return out;
}

describe('tidy', () => {
  it('src/ has no direct nondeterminism and no import against the layer order', () => {
    const files = sourceFiles(join(root, 'src'));
    assert.ok(files.length > 10, 'found the sources');
    const violations = files.flatMap((path) =>
      checkSource(relative(root, path).split('\\').join('/'), readFileSync(path, 'utf8')),
    );
    assert.deepEqual(
      violations.map((v) => `${v.file}:${v.line} [${v.rule}] ${v.message}`),
      [],
    );
  });

  it('flags wall clock, timers and randomness in protocol code', () => {
    const offending = [
      'const t = Date.now();',
      'setTimeout(() => {}, 10);',
      'const h = setInterval(f, 1);',
      'setImmediate(f);',
      'const r = Math.random();',
      'const id = crypto.randomUUID();',
      "import { randomBytes } from 'node:crypto';",
      'const p = performance.now();',
    ];
    for (const line of offending) {
      const v = checkSource('src/tx/coordinator.ts', line);
      assert.equal(v.length >= 1, true, `expected a violation for: ${line}`);
      assert.equal(v[0]!.rule, 'determinism');
    }
  });

  it('allows injected timers, comments and strings, and the real-* environment', () => {
    const clean = [
      'this.timers.setTimer(() => {}, 10);',
      '// setTimeout is forbidden here',
      "const s = 'Math.random()';",
      '/* Date.now() */ const x = 1;',
    ].join('\n');
    assert.deepEqual(checkSource('src/tx/coordinator.ts', clean), []);
    assert.deepEqual(checkSource('src/env/real-clock.ts', 'Date.now()'), []);
    assert.equal(checkSource('src/env/clock.ts', 'Date.now()').length, 1);
  });

  it('flags imports against the layer order', () => {
    const up = checkSource('src/hlc/hybrid-clock.ts', "import { x } from '../tx/coordinator.js';");
    assert.equal(up.length, 1);
    assert.equal(up[0]!.rule, 'layering');
    const sideways = checkSource('src/raft/node.ts', "import type { Codec } from '../net/codec.js';");
    assert.equal(sideways.length, 1);
    const sim = checkSource('src/node/node.ts', "export { SimNetwork } from '../sim/network.js';");
    assert.equal(sim.length, 1);
    const down = checkSource('src/tx/coordinator/coordinator.ts', "import { HybridClock } from '../../hlc/index.js';");
    assert.deepEqual(down, []);
    const cores = checkSource('src/tx/core/tx-state-map.ts', "import { x } from '../coordinator/coordinator.js';");
    assert.deepEqual(
      cores.map((v) => v.message),
      ['tx/core must not import tx/coordinator'],
    );
    const flows = checkSource('src/tx/coordinator/read-only.ts', "import { x } from '../core/tx-state-map.js';");
    assert.deepEqual(flows, []);
  });

  it('keeps line numbers when stripping comments', () => {
    const stripped = stripCommentsAndStrings('a\n/* x\ny */\nb');
    assert.equal(stripped.split('\n').length, 4);
  });
});

describe('tidy layering on multi-line imports', () => {
  it('sees an import whose specifier is on a later line', () => {
    const v = checkSource('src/storage/mvcc.ts', "import {\n  Coordinator,\n  Lock,\n} from '../tx/index.js';\n");
    assert.equal(v.length, 1);
    assert.equal(v[0]!.line, 1);
  });
});

/** Production sources (no tests, no test support), repository-relative, with their text. */
function productionSources(): { readonly file: string; readonly source: string }[] {
  return sourceFiles(join(root, 'src'))
    .map((path) => relative(root, path).split('\\').join('/'))
    .filter((file) => !file.endsWith('.test.ts') && !file.startsWith('src/testing/'))
    .map((file) => ({ file, source: readFileSync(join(root, file), 'utf8') }));
}

describe('house rules', () => {
  const sources = productionSources();

  it(`no function over ${FUNCTION_LINES_MAX} lines but the allowlisted ones, which may only shrink`, () => {
    const long = new Map<string, number>();
    for (const { file, source } of sources) {
      for (const span of functionSpans(source)) {
        if (span.lines <= FUNCTION_LINES_MAX) continue;
        const key = `${file}:${span.name}`;
        long.set(key, Math.max(long.get(key) ?? 0, span.lines));
      }
    }
    const problems: string[] = [];
    for (const [key, lines] of long) {
      const allowed = LONG_FUNCTIONS[key];
      if (allowed === undefined) problems.push(`${key} has ${lines} lines (at most ${FUNCTION_LINES_MAX})`);
      else if (lines > allowed) problems.push(`${key} grew to ${lines} lines (allowlisted at ${allowed})`);
    }
    for (const key of Object.keys(LONG_FUNCTIONS)) {
      if (!long.has(key)) problems.push(`${key} is no longer long: take it off LONG_FUNCTIONS`);
    }
    assert.deepEqual(problems, []);
  });

  it('no import circle in production code', () => {
    const graph = new Map(sources.map(({ file, source }) => [file, importTargets(file, source)] as const));
    assert.deepEqual(importCircles(graph), []);
  });

  it("sub-layers import only downward, and only their parent's ports", () => {
    const problems = sources.flatMap(({ file, source }) => sublayerViolations(file, importTargets(file, source)));
    assert.deepEqual(problems, []);
  });

  it('no test support under production folders (it lives in src/testing)', () => {
    const misplaced = sources.filter(({ file, source }) => looksLikeTestSupport(file, source)).map((s) => s.file);
    assert.deepEqual(misplaced, []);
  });

  it('async protocol folders keep their assertion floor', () => {
    const counts = new Map<string, number>();
    for (const { file, source } of sources) {
      const folder = file.slice(0, file.lastIndexOf('/'));
      counts.set(folder, (counts.get(folder) ?? 0) + assertCount(source));
    }
    const below = Object.entries(ASSERT_FLOORS)
      .filter(([folder, floor]) => (counts.get(folder) ?? 0) < floor)
      .map(([folder, floor]) => `${folder}: ${counts.get(folder) ?? 0} asserts, floor ${floor}`);
    assert.deepEqual(below, []);
  });

  it('the measures see what they claim to', () => {
    const spans = functionSpans(
      [
        'export function a(x: number): Promise<void> {',
        '  if (x) {',
        '    return;',
        '  }',
        '  const f = async (y: string) => {',
        '    return y;',
        '  };',
        '}',
        'class C {',
        '  private m<T>(t: T): T {',
        '    return t;',
        '  }',
        '}',
      ].join('\n'),
    );
    assert.deepEqual(
      spans.map((s) => `${s.name}:${s.line}:${s.lines}`),
      ['a:1:8', 'f:5:3', 'm:10:3'],
    );
    const graph = new Map([
      ['a', ['b']],
      ['b', ['a', 'c']],
      ['c', []],
    ]);
    assert.deepEqual(importCircles(graph), [['a', 'b']]);
    assert.deepEqual(sublayerViolations('src/replica/partition/x.ts', ['src/replica/handlers/y.ts']).length, 1);
    assert.deepEqual(sublayerViolations('src/replica/handlers/y.ts', ['src/replica/partition/x.ts']), []);
    assert.deepEqual(sublayerViolations('src/replica/handlers/y.ts', ['src/replica/ports.ts']), []);
    assert.equal(sublayerViolations('src/replica/handlers/y.ts', ['src/replica/request-table.ts']).length, 1);
    assert.equal(looksLikeTestSupport('src/replica/test-support.ts', ''), true);
    assert.equal(looksLikeTestSupport('src/replica/x.ts', "import assert from 'node:assert/strict';"), true);
    assert.equal(looksLikeTestSupport('src/testing/x.ts', "import assert from 'node:assert/strict';"), false);
    assert.equal(assertCount("assert(x, 'assert(');\n// assert(y)\nfoo.assert(z);"), 1);
  });
});
