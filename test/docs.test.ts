/**
 * Docs that cannot rot (issue 38): README.md and docs/**\/*.md are checked against the repository and the CLI.
 *
 * - every relative link points to an existing file, and a `#anchor` to a heading of the target (GitHub's slug rules:
 *   lower case, punctuation dropped, each space a hyphen, `-1`, `-2` for repeated headings);
 * - every `basalt <command>` in a shell code block (also as `npx basalt`, `node dist/src/cli/main.js`, or an
 *   `npm run <script>` whose script runs one) is a command that `basalt --help` lists, its subcommand one that the
 *   command's help lists, and each of its `--flags` one that the help names;
 * - the troubleshooting section of docs/operating.md names only codes of ERROR_CODES, and every one of them;
 * - the README stays short (README_LINES_MAX).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, it } from 'node:test';
import { ERROR_CODES } from '../src/core/errors.js';
import { type CodeBlock, markdownFiles, root, splitFences } from './markdown.js';

const README_LINES_MAX = 130;
const SHELL_LANGS = new Set(['sh', 'bash', 'shell', 'console']);

/** GitHub's anchor for a heading's text. */
function githubSlug(heading: string): string {
  return heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/[`*]/g, '')
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
}

/** The anchors a Markdown file's headings get, repeated ones numbered as GitHub numbers them. */
function anchorsOf(text: string): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  for (const line of splitFences(text).prose) {
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (heading === null) continue;
    const slug = githubSlug(heading[1] ?? '');
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    anchors.add(count === 0 ? slug : `${slug}-${count}`);
  }
  return anchors;
}

/** Link targets in prose (inline code dropped first), with their line numbers. */
function linksOf(text: string): { target: string; line: number }[] {
  const out: { target: string; line: number }[] = [];
  splitFences(text).prose.forEach((line, index) => {
    const plain = line.replace(/`[^`]*`/g, '');
    for (const m of plain.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
      out.push({ target: m[1] ?? '', line: index + 1 });
    }
  });
  return out;
}

/** What is wrong with one relative link of `file` (undefined: nothing). */
function linkProblem(file: string, target: string): string | undefined {
  if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return undefined;
  const hash = target.indexOf('#');
  const pathPart = hash < 0 ? target : target.slice(0, hash);
  const anchor = hash < 0 ? undefined : decodeURIComponent(target.slice(hash + 1));
  const resolved = pathPart === '' ? join(root, file) : resolve(root, dirname(file), decodeURI(pathPart));
  if (!resolved.startsWith(root)) return `${target} leaves the repository`;
  if (!existsSync(resolved)) return `${target}: no file ${relative(root, resolved)}`;
  if (anchor === undefined) return undefined;
  if (!resolved.endsWith('.md')) return `${target}: an anchor into a file that is not Markdown`;
  const anchors = anchorsOf(readFileSync(resolved, 'utf8'));
  return anchors.has(anchor) ? undefined : `${target}: no heading #${anchor} in ${relative(root, resolved)}`;
}

interface CliUse {
  readonly args: readonly string[];
  readonly line: number;
}

/** `npm run <script>` → the CLI arguments the script starts with, for scripts that run the CLI. */
function npmScriptCommands(): Map<string, string[]> {
  const scripts = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> })
    .scripts;
  const out = new Map<string, string[]>();
  for (const [name, script] of Object.entries(scripts)) {
    const m = /cli\/main\.js\s+([^&|;]*)$/.exec(script);
    if (m !== null) out.set(name, (m[1] ?? '').trim().split(/\s+/));
  }
  return out;
}

/** Every CLI invocation in a shell block: its arguments after `basalt` (comments and continuations handled). */
function cliUsesOf(block: CodeBlock, npmScripts: ReadonlyMap<string, readonly string[]>): CliUse[] {
  const uses: CliUse[] = [];
  block.body
    .replace(/\\\n/g, ' ')
    .split('\n')
    .forEach((raw, index) => {
      const tokens = raw
        .replace(/(^|\s)#.*$/, '')
        .trim()
        .split(/\s+/);
      tokens.forEach((token, i) => {
        const previous = tokens[i - 1];
        const atCommand = i === 0 || previous === 'npx' || previous === '&&' || previous === ';' || previous === '|';
        let args: string[] | undefined;
        if (token === 'basalt' && atCommand) args = tokens.slice(i + 1);
        else if (token.endsWith('cli/main.js') && previous === 'node') args = tokens.slice(i + 1);
        else if (token === 'npm' && tokens[i + 1] === 'run' && npmScripts.has(tokens[i + 2] ?? '')) {
          const rest = tokens.slice(i + 3);
          args = [...(npmScripts.get(tokens[i + 2] ?? '') ?? []), ...(rest[0] === '--' ? rest.slice(1) : [])];
        }
        if (args === undefined) return;
        const end = args.findIndex((a) => a === '&&' || a === ';' || a === '|');
        uses.push({ args: end < 0 ? args : args.slice(0, end), line: block.line + 1 + index });
      });
    });
  return uses;
}

const helpCache = new Map<string, string>();

/** `basalt <path...> --help`, as the CLI prints it. */
function help(path: readonly string[]): string {
  const key = path.join(' ');
  const cached = helpCache.get(key);
  if (cached !== undefined) return cached;
  const result = spawnSync(process.execPath, [join(root, 'dist/src/cli/main.js'), ...path, '--help'], {
    cwd: root,
    encoding: 'utf8',
    timeout: 30_000,
  });
  assert.equal(result.status, 0, `basalt ${key} --help failed: ${result.stderr}`);
  helpCache.set(key, result.stdout);
  return result.stdout;
}

/** The command names a help text lists under `Commands:`. */
function commandsOf(helpText: string): Set<string> {
  const at = helpText.indexOf('\nCommands:\n');
  if (at < 0) return new Set();
  const names = new Set<string>();
  for (const line of helpText.slice(at + '\nCommands:\n'.length).split('\n')) {
    const m = /^ {2}([a-z][\w-]*)/.exec(line);
    if (m !== null) names.add(m[1] ?? '');
    else if (/^\S/.test(line)) break;
  }
  return names;
}

/** What is wrong with one CLI use (empty: nothing). */
function cliProblems(use: CliUse): string[] {
  const [command, sub] = use.args;
  if (command === undefined || command.startsWith('-')) return flagProblems([], use.args);
  if (!commandsOf(help([])).has(command)) return [`basalt ${command}: not a command of basalt --help`];
  const subcommands = commandsOf(help([command]));
  const path = sub !== undefined && subcommands.has(sub) ? [command, sub] : [command];
  if (subcommands.size > 0 && sub !== undefined && !sub.startsWith('-') && path.length === 1) {
    return [`basalt ${command} ${sub}: not a subcommand of basalt ${command} --help`];
  }
  return flagProblems(path, use.args.slice(path.length));
}

function flagProblems(path: readonly string[], args: readonly string[]): string[] {
  const text = help(path);
  return args
    .filter((a) => a.startsWith('--'))
    .map((a) => a.split('=')[0] ?? a)
    .filter((flag) => flag !== '--' && flag !== '--help' && !new RegExp(`${flag}(?![\\w-])`).test(text))
    .map((flag) => `basalt ${path.join(' ')} ${flag}: not in its --help`);
}

/** The lines of `text` from the heading `title` to the next heading of the same or a higher level. */
function section(text: string, title: string): string {
  const lines = text.split('\n');
  const start = lines.findIndex((l) => /^#{1,6}\s/.test(l) && l.replace(/^#+\s+/, '') === title);
  if (start < 0) return '';
  const level = /^#+/.exec(lines[start] ?? '')?.[0].length ?? 1;
  const end = lines.findIndex((l, i) => i > start && new RegExp(`^#{1,${level}}\\s`).test(l));
  return lines.slice(start + 1, end < 0 ? undefined : end).join('\n');
}

describe('docs', () => {
  const files = markdownFiles();

  it('finds the README and the docs pages', () => {
    assert.ok(files.length >= 10, `found ${files.join(', ')}`);
  });

  it('every relative link points to an existing file, and an anchor to an existing heading', () => {
    const problems = files.flatMap((file) =>
      linksOf(readFileSync(join(root, file), 'utf8')).flatMap(({ target, line }) => {
        const problem = linkProblem(file, target);
        return problem === undefined ? [] : [`${file}:${line}: ${problem}`];
      }),
    );
    assert.deepEqual(problems, []);
  });

  it('every basalt command, subcommand and flag in a shell block is one the CLI help lists', () => {
    const npmScripts = npmScriptCommands();
    const uses = files.flatMap((file) =>
      splitFences(readFileSync(join(root, file), 'utf8'))
        .blocks.filter((b) => SHELL_LANGS.has(b.lang))
        .flatMap((b) => cliUsesOf(b, npmScripts).map((use) => ({ file, use }))),
    );
    assert.ok(uses.length >= 20, `found ${uses.length} uses of the CLI`);
    const problems = uses.flatMap(({ file, use }) => cliProblems(use).map((p) => `${file}:${use.line}: ${p}`));
    assert.deepEqual(problems, []);
  });

  it('the troubleshooting page names every error code of ERROR_CODES, and no other', () => {
    const text = section(readFileSync(join(root, 'docs/operating.md'), 'utf8'), 'Troubleshooting by error code');
    const named = new Set([...text.matchAll(/`([A-Z][A-Z0-9_]{2,})`/g)].map((m) => m[1] ?? ''));
    const known = Object.keys(ERROR_CODES);
    assert.deepEqual(
      [...named].filter((code) => !known.includes(code)),
      [],
      'codes that ERROR_CODES does not have',
    );
    assert.deepEqual(
      known.filter((code) => !named.has(code)),
      [],
      'codes the troubleshooting page does not explain',
    );
  });

  it(`the README stays at most ${README_LINES_MAX} lines`, () => {
    const lines = readFileSync(join(root, 'README.md'), 'utf8').trimEnd().split('\n').length;
    assert.ok(lines <= README_LINES_MAX, `README.md has ${lines} lines`);
  });

  it('computes anchors and finds CLI uses as GitHub and a shell would', () => {
    assert.equal(
      githubSlug('Verifying it yourself: `basalt sim` and histories'),
      'verifying-it-yourself-basalt-sim-and-histories',
    );
    assert.equal(
      githubSlug('The cluster harness (tests and chaos experiments)'),
      'the-cluster-harness-tests-and-chaos-experiments',
    );
    assert.deepEqual(
      [...anchorsOf('# A\n## Limits\n```\n# not a heading\n```\n## Limits\n')],
      ['a', 'limits', 'limits-1'],
    );
    const block = {
      lang: 'sh',
      tags: [],
      line: 1,
      body: 'npx basalt sim --seed 7 # basalt nothing\ndocker build -t basalt .\n',
    };
    assert.deepEqual(
      cliUsesOf(block, new Map()).map((u) => u.args),
      [['sim', '--seed', '7']],
    );
    const continued = { lang: 'sh', tags: [], line: 1, body: 'basalt start --name n4 \\\n  --join 10.0.0.1:7000\n' };
    assert.deepEqual(cliUsesOf(continued, new Map())[0]?.args, ['start', '--name', 'n4', '--join', '10.0.0.1:7000']);
    assert.deepEqual(
      [...commandsOf('Usage: x\n\nCommands:\n  list [options]  l\n  remove <n>  r\n')],
      ['list', 'remove'],
    );
  });
});
