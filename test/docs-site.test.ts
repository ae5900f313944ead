/**
 * `npm run docs` (scripts/build-docs.mjs) builds a site whose pages link only to pages and files it contains, draws
 * every Mermaid block from the bundle it copied (with every chunk that bundle imports), and rewrites relative .md
 * links to the built pages. The API reference (TypeDoc, installed on first use) is left out here: it needs the
 * network once; the pages do not.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { markdownFiles, root, splitFences } from './markdown.js';

interface SiteBuilder {
  buildPages(out: string): { source: string; output: string }[];
  rewriteHref(href: string, from: string): string;
}

const builder = (await import(pathToFileURL(join(root, 'scripts', 'build-docs.mjs')).href)) as SiteBuilder;

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? filesUnder(path) : [path];
  });
}

describe('docs site', () => {
  const out = mkdtempSync(join(tmpdir(), 'basalt-site-'));
  let pages: { source: string; output: string }[] = [];

  before(() => {
    pages = builder.buildPages(out);
  });
  after(() => rmSync(out, { recursive: true, force: true }));

  it('builds a page for the README and every docs page', () => {
    assert.deepEqual(pages.map((p) => p.source).sort(), markdownFiles().sort());
    for (const page of pages) assert.ok(existsSync(join(out, page.output)), page.output);
  });

  it('every page has the same navigation: each page once, the getting started page first after the home', () => {
    for (const page of pages) {
      const nav = /<nav>(.*?)<\/nav>/s.exec(readFileSync(join(out, page.output), 'utf8'))?.[1] ?? '';
      const targets = [...nav.matchAll(/href="([^"]+)"/g)].map((m) => resolve(out, dirname(page.output), m[1] ?? ''));
      const expected = [...pages.map((p) => join(out, p.output)), join(out, 'api', 'index.html')];
      assert.deepEqual(targets.slice().sort(), expected.slice().sort(), page.output);
      assert.equal(targets[1], join(out, 'docs', 'getting-started.html'), page.output);
    }
  });

  it('every relative link and image of a page is a file of the site (the API reference aside)', () => {
    const problems: string[] = [];
    for (const page of pages) {
      const html = readFileSync(join(out, page.output), 'utf8');
      for (const m of html.matchAll(/(?:href|src)="([^"#]*)(#[^"]*)?"/g)) {
        const target = m[1] ?? '';
        if (target === '' || /^[a-z][a-z0-9+.-]*:/i.test(target)) continue;
        const file = resolve(out, dirname(page.output), target);
        if (relative(out, file).startsWith('api')) continue;
        if (!existsSync(file)) problems.push(`${page.output}: ${target}`);
      }
    }
    assert.deepEqual(problems, []);
  });

  it('draws every Mermaid block from the copied bundle, whose imports are all in the site', () => {
    for (const page of pages) {
      const blocks = splitFences(readFileSync(join(root, page.source), 'utf8')).blocks.filter(
        (b) => b.lang === 'mermaid',
      );
      const html = readFileSync(join(out, page.output), 'utf8');
      assert.equal((html.match(/<pre class="mermaid">/g) ?? []).length, blocks.length, page.source);
    }
    const bundle = join(out, 'assets', 'mermaid');
    const modules = filesUnder(bundle).filter((f) => f.endsWith('.mjs'));
    assert.ok(modules.includes(join(bundle, 'mermaid.esm.min.mjs')));
    const imports = modules.flatMap((file) =>
      [...readFileSync(file, 'utf8').matchAll(/(?:from|import)\s*\(?\s*"(\.{1,2}\/[^"]+)"/g)].map((m) => ({
        file,
        target: resolve(dirname(file), m[1] ?? ''),
      })),
    );
    assert.ok(imports.length > modules.length / 2, `found ${imports.length} imports in ${modules.length} modules`);
    const missing = imports
      .filter(({ target }) => !existsSync(target))
      .map(({ file, target }) => `${relative(bundle, file)} → ${relative(bundle, target)}`);
    assert.deepEqual(missing, []);
    assert.equal(filesUnder(bundle).filter((f) => f.endsWith('.map')).length, 0, 'source maps are not copied');
  });

  it('rewrites relative links to Markdown pages as links to the built pages', () => {
    assert.equal(builder.rewriteHref('docs/operating.md#security', 'README.md'), 'docs/operating.html#security');
    assert.equal(builder.rewriteHref('../README.md', 'docs/verifying.md'), '../index.html');
    assert.equal(builder.rewriteHref('../guarantees.md', 'docs/concepts/recovery.md'), '../guarantees.html');
    assert.equal(builder.rewriteHref('recovery.md', 'docs/concepts/transactions.md'), 'recovery.html');
    assert.equal(builder.rewriteHref('images/bench/p99.svg', 'docs/benchmarks.md'), 'images/bench/p99.svg');
    assert.equal(builder.rewriteHref('https://example.org/a.md', 'README.md'), 'https://example.org/a.md');
  });
});
