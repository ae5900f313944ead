/**
 * The package ships the product and nothing else: `npm pack` holds no test file and none of src/testing, every
 * `exports`, `main`, `types` and `bin` target is in it, and the tarball installed into an empty project (its
 * dependencies from the npm cache where it has them) runs a node with its own `basalt` command and `connect()`s to
 * it from `import 'basalt'`.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../src/cli/free-ports.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const NPM = process.platform === 'win32' ? 'npm.cmd' : 'npm';

interface PackedFile {
  readonly path: string;
}

function targetsOf(pkg: Record<string, unknown>): string[] {
  const out = new Set<string>();
  const walk = (v: unknown): void => {
    if (typeof v === 'string') out.add(v.replace(/^\.\//, ''));
    else if (v !== null && typeof v === 'object') for (const x of Object.values(v)) walk(x);
  };
  walk(pkg['exports']);
  walk(pkg['main']);
  walk(pkg['types']);
  walk(pkg['bin']);
  return [...out].sort();
}

async function addressOf(child: ChildProcess, output: () => string, timeoutMs = 30_000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const address = [...output().matchAll(/connect\('([^']+)'\)/g)].at(-1)?.[1];
    if (address !== undefined && /^basalt: (node \S+ )?ready/m.test(output())) return address;
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`the node did not get ready:\n${output()}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

test('npm pack ships no tests and every entry point; the tarball installs into an empty project and connects', async () => {
  const work = mkdtempSync(join(tmpdir(), 'basalt-pack-'));
  try {
    // The build is already in dist/ (npm test runs tsc first): prepack's build is skipped here.
    const packed = JSON.parse(
      execFileSync(NPM, ['pack', '--json', '--ignore-scripts', '--pack-destination', work], {
        cwd: ROOT,
        encoding: 'utf8',
      }),
    ) as { filename: string; files: PackedFile[] }[];
    const paths = packed[0]!.files.map((f) => f.path);
    assert.deepEqual(
      paths.filter((p) => /\.test\.|(^|\/)testing\/|^test\/|^bench\//.test(p)),
      [],
      'no test, test support or bench file is packed',
    );
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as Record<string, unknown>;
    const targets = targetsOf(pkg);
    assert.ok(targets.length >= 3, 'the package names its entry points');
    assert.deepEqual(
      targets.filter((t) => !paths.includes(t)),
      [],
      'every exports/main/types/bin target is packed',
    );
    assert.ok(paths.length < 600, `a product-sized package (${paths.length} files)`);

    const app = join(work, 'app');
    mkdirSync(app);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
    const tarball = join(work, packed[0]!.filename);
    execFileSync(NPM, ['install', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts', tarball], {
      cwd: app,
      stdio: 'pipe',
    });

    const config = join(work, 'n1.json');
    writeFileSync(config, JSON.stringify({ name: 'n1', port: await freePort(), memory: true, tables: ['kv:1:1'] }));
    const bin = join(app, 'node_modules', 'basalt', 'dist', 'src', 'cli', 'main.js');
    const node = spawn(process.execPath, [bin, 'start', '--config', config, '--client-port', '0'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    node.stdout!.on('data', (c: Buffer) => (output += c.toString()));
    node.stderr!.on('data', (c: Buffer) => (output += c.toString()));
    const exited = new Promise<number | null>((resolve) => node.on('exit', resolve));
    try {
      const address = await addressOf(node, () => output);
      const program = [
        "import { connect } from 'basalt';",
        `const client = await connect(${JSON.stringify(address)});`,
        "await client.put('kv', 'packed', { ok: 1 });",
        "console.log(JSON.stringify(await client.get('kv', 'packed')));",
        'await client.close();',
      ].join('\n');
      writeFileSync(join(app, 'main.mjs'), program);
      const printed = execFileSync(process.execPath, ['main.mjs'], { cwd: app, encoding: 'utf8' });
      assert.deepEqual(JSON.parse(printed.trim()), { ok: 1 });
    } finally {
      node.kill('SIGINT');
      await exited;
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});
