/**
 * The file format of the golden interaction scripts (etcd raft's datadriven `testdata/*.txt`): an optional header of
 * `#` lines, then blocks of one command line, a `----` line and the output it must produce; `#` lines inside blocks
 * are comments. `render` writes the same format back, so a regenerated file differs only where output changed.
 */
import assert from 'node:assert/strict';

export interface ScriptCase {
  readonly command: string;
  readonly expected: string;
}

export interface ScriptResult {
  readonly command: string;
  readonly output: string;
}

/** The header (leading `#` lines, newline-terminated) and the cases of a script. */
export function parseScript(text: string): { readonly header: string; readonly cases: ScriptCase[] } {
  const header = text
    .split('\n')
    .filter((l, i, all) => l.startsWith('#') && all.slice(0, i).every((p) => p.startsWith('#')))
    .map((l) => `${l}\n`)
    .join('');
  const cases: ScriptCase[] = [];
  for (const block of text.split(/\n(?=\S[^\n]*\n----\n)/)) {
    const lines = block.split('\n').filter((l) => !l.startsWith('#'));
    while (lines.length > 0 && lines[0]!.trim() === '') lines.shift();
    if (lines.length === 0) continue;
    assert.equal(lines[1], '----', `malformed block: ${block}`);
    cases.push({ command: lines[0]!, expected: lines.slice(2).join('\n').trim() });
  }
  return { header, cases };
}

export function renderScript(header: string, results: readonly ScriptResult[]): string {
  return `${header}${results.map((r) => `${r.command}\n----\n${r.output}\n`).join('\n')}`;
}

/** Asserts every output equals its case's golden output, naming the file and command of the first that differs. */
export function assertGolden(file: string, cases: readonly ScriptCase[], results: readonly ScriptResult[]): void {
  results.forEach((r, i) => {
    assert.equal(r.output, cases[i]!.expected, `${file}: output of \`${r.command}\` changed`);
  });
}
