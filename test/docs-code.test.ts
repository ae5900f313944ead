/**
 * The TypeScript in the docs compiles and runs (issue 38): every ```ts block of README.md and docs/ is written into a
 * temporary package that imports 'basalt' as a user would (a node_modules link to this checkout, so the types are
 * the built dist/src/index.d.ts), and the project's compiler type-checks them all in one run. A fragment may use the
 * names its page sets up in prose (`cluster`, `client`, `tx`, `ts`) without declaring them; a block that is not meant
 * to compile says so with ```ts no-check. Blocks marked ```ts runnable are then run against an in-process cluster,
 * with the address `127.0.0.1:10800` of `npm start` replaced by a client port of that cluster.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startClientServer, startCluster } from '../src/index.js';
import { type CodeBlock, markdownFiles, root, splitFences } from './markdown.js';

const TS_LANGS = new Set(['ts', 'typescript']);
const NPM_START_ADDRESS = '127.0.0.1:10800';
const RUN_TIMEOUT_MS = 90_000;

/** The names a fragment may use undeclared, with their types (the prose around the block sets them up). */
const CONTEXT: Readonly<Record<string, string>> = {
  cluster: 'basalt.Cluster<basalt.Client>',
  client: 'basalt.Client',
  tx: 'basalt.Transaction',
  ts: 'basalt.HybridTimestamp',
};

interface TsBlock extends CodeBlock {
  readonly file: string;
  /** The module name in the temporary package. */
  readonly name: string;
}

function tsBlocks(): TsBlock[] {
  return markdownFiles().flatMap((file) =>
    splitFences(readFileSync(join(root, file), 'utf8'))
      .blocks.filter((b) => TS_LANGS.has(b.lang))
      .map((b) => ({ ...b, file, name: `${file.replace(/[^\w]+/g, '-')}-L${b.line}` })),
  );
}

/** The declarations a fragment needs for the context names it uses but does not declare or import itself. */
export function preambleOf(body: string): string[] {
  const lines = [`import type * as basalt from 'basalt';`];
  for (const [name, type] of Object.entries(CONTEXT)) {
    const used = new RegExp(`(?<![\\w$.'"])${name}\\b`).test(body);
    const declared = new RegExp(`\\b(const|let|var|function|class|import)\\s+(\\{[^}]*\\b)?${name}\\b`).test(body);
    if (used && !declared) lines.push(`declare const ${name}: ${type};`);
  }
  return lines;
}

/** Where a compiler diagnostic of `<name>.ts(<line>,<col>)` points in the docs. */
function docsLocation(blocks: readonly TsBlock[], preambles: ReadonlyMap<string, number>, diagnostic: string): string {
  const m = /^([\w-]+)\.ts\((\d+),(\d+)\): (.*)$/.exec(diagnostic);
  const block = blocks.find((b) => b.name === m?.[1]);
  if (m === null || block === undefined) return diagnostic;
  const line = block.line + Number(m[2]) - (preambles.get(block.name) ?? 0);
  return `${block.file}:${line}: ${m[4]}`;
}

/** Runs `node file`, killed after `timeoutMs`; its exit code (null if killed) and its output. */
function runNode(file: string, timeoutMs: number): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [file], { stdio: ['ignore', 'pipe', 'pipe'], timeout: timeoutMs });
    let output = '';
    const collect = (chunk: Buffer): void => {
      output += chunk.toString();
    };
    child.stdout.on('data', collect);
    child.stderr.on('data', collect);
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, output }));
  });
}

describe('docs code blocks', () => {
  const blocks = tsBlocks();
  const dir = mkdtempSync(join(tmpdir(), 'basalt-docs-code-'));
  const preambles = new Map<string, number>();
  let compiled: ReturnType<typeof spawnSync> | undefined;

  before(() => {
    mkdirSync(join(dir, 'node_modules'));
    symlinkSync(root, join(dir, 'node_modules', 'basalt'), 'dir');
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'docs-code', private: true, type: 'module' }));
    const compilerOptions = {
      target: 'ES2022',
      lib: ['ES2023'],
      module: 'NodeNext',
      moduleResolution: 'NodeNext',
      strict: true,
      skipLibCheck: true,
      types: ['node'],
      typeRoots: [join(root, 'node_modules', '@types')],
      rootDir: '.',
      outDir: 'out',
    };
    writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({ compilerOptions, include: ['*.ts'] }));
    for (const block of blocks.filter((b) => !b.tags.includes('no-check'))) {
      const preamble = preambleOf(block.body);
      preambles.set(block.name, preamble.length);
      writeFileSync(join(dir, `${block.name}.ts`), `${preamble.join('\n')}\n${block.body}\nexport {};\n`);
    }
    compiled = spawnSync(join(root, 'node_modules', '.bin', 'tsc'), ['-p', join(dir, 'tsconfig.json')], {
      cwd: dir,
      encoding: 'utf8',
      timeout: 60_000,
    });
  });

  after(() => rmSync(dir, { recursive: true, force: true }));

  it('finds the TypeScript blocks, the runnable ones among them, and keeps no-check rare', () => {
    assert.ok(blocks.length >= 6, `found ${blocks.length} TypeScript blocks`);
    assert.ok(blocks.filter((b) => b.tags.includes('runnable')).length >= 2, 'the quick start and the harness run');
    const unchecked = blocks.filter((b) => b.tags.includes('no-check'));
    assert.ok(unchecked.length <= 2, `no-check blocks: ${unchecked.map((b) => `${b.file}:${b.line}`).join(', ')}`);
  });

  it('every TypeScript block type-checks against the package types', () => {
    const output = `${compiled?.stdout ?? ''}${compiled?.stderr ?? ''}`.trim();
    const problems = output === '' ? [] : output.split('\n').map((d) => docsLocation(blocks, preambles, d.trim()));
    assert.deepEqual(problems, []);
    assert.equal(compiled?.status, 0);
  });

  for (const block of tsBlocks().filter((b) => b.tags.includes('runnable'))) {
    it(`${block.file}:${block.line} runs against an in-process cluster`, async () => {
      const js = readFileSync(join(dir, 'out', `${block.name}.js`), 'utf8');
      // A block that connects to `npm start`'s cluster gets one of this process, with a client port and its table.
      const cluster = js.includes(NPM_START_ADDRESS) ? await startCluster({ nodes: 3 }) : undefined;
      const server = cluster === undefined ? undefined : await startClientServer(cluster, 'n1');
      try {
        if (cluster !== undefined) await cluster.createTable('demo', { partitions: 2, replicas: 3 });
        const file = join(dir, 'out', `${block.name}.run.js`);
        writeFileSync(file, server === undefined ? js : js.replaceAll(NPM_START_ADDRESS, server.address));
        // In a child, so that a block that fails half-way cannot leave its own cluster running in this process.
        const run = await runNode(file, RUN_TIMEOUT_MS);
        assert.equal(run.code, 0, `${block.file}:${block.line} exited with ${run.code}:\n${run.output}`);
      } finally {
        await server?.close();
        await cluster?.stop();
      }
    });
  }

  it('declares only the context names a fragment uses and does not declare itself', () => {
    assert.deepEqual(preambleOf('await client.put("t", "k", 1);').slice(1), ['declare const client: basalt.Client;']);
    assert.deepEqual(preambleOf('const client = cluster.client();').slice(1), [
      'declare const cluster: basalt.Cluster<basalt.Client>;',
    ]);
    assert.deepEqual(preambleOf("import { connect } from 'basalt';\nconst remote = await connect('x');").slice(1), []);
    assert.deepEqual(preambleOf('await client.begin({ readOnly: true, readTimestamp: ts });').slice(1), [
      'declare const client: basalt.Client;',
      'declare const ts: basalt.HybridTimestamp;',
    ]);
  });
});
