import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';
import { checkSource, stripCommentsAndStrings } from './tidy.js';

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
