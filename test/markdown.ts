/**
 * The docs' Markdown as the docs tests read it: which files make up the docs, and their fenced code blocks with the
 * words after a block's language (```ts runnable, ```ts no-check), which GitHub ignores and the tests act on.
 */
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root (the tests run from dist/test/). */
export const root = fileURLToPath(new URL('../../', import.meta.url));

export interface CodeBlock {
  readonly lang: string;
  /** The words after the language on the opening fence. */
  readonly tags: readonly string[];
  readonly body: string;
  /** Line of the opening fence (1-based). */
  readonly line: number;
}

/** The Markdown files the docs consist of, relative to the repository root. */
export function markdownFiles(): string[] {
  const out = ['README.md'];
  const walk = (dir: string): void => {
    for (const name of readdirSync(join(root, dir)).sort()) {
      const path = `${dir}/${name}`;
      if (statSync(join(root, path)).isDirectory()) walk(path);
      else if (name.endsWith('.md')) out.push(path);
    }
  };
  walk('docs');
  return out;
}

/** The text with fenced code blocks blanked (line numbers kept), and the blocks themselves. */
export function splitFences(text: string): { prose: string[]; blocks: CodeBlock[] } {
  const prose: string[] = [];
  const blocks: CodeBlock[] = [];
  let open: { lang: string; tags: string[]; fence: string; line: number; body: string[] } | undefined;
  text.split('\n').forEach((line, index) => {
    const fence = /^\s*(```+|~~~+)\s*([\w-]*)(.*)$/.exec(line);
    if (open === undefined && fence !== null) {
      const tags = (fence[3] ?? '').trim().split(/\s+/).filter(Boolean);
      open = { lang: fence[2] ?? '', tags, fence: fence[1] ?? '```', line: index + 1, body: [] };
    } else if (open !== undefined && line.trim().startsWith(open.fence)) {
      blocks.push({ lang: open.lang, tags: open.tags, body: open.body.join('\n'), line: open.line });
      open = undefined;
    } else if (open !== undefined) {
      open.body.push(line);
    }
    prose.push(open !== undefined || fence !== null ? '' : line);
  });
  return { prose, blocks };
}
