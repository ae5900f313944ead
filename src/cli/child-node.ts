/**
 * A `basalt` child process seen from its parent: the supervisor of `basalt cluster` and the multi-process tests. The
 * child's stdout and stderr are kept (the last `OUTPUT_CHARS_MAX` characters) and optionally forwarded line by line;
 * `exited` settles once with its exit code or signal. A child is only ever stopped through its own handle (`signal`),
 * never by a name pattern, so a parent stops exactly the processes it started.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** The compiled `basalt` entry point next to this file. */
export const BASALT_MAIN = fileURLToPath(new URL('./main.js', import.meta.url));

/** Kept output per child: enough for every line a test waits for, bounded for a long-running supervisor. */
const OUTPUT_CHARS_MAX = 4_000_000;
const POLL_MS = 20;

export interface ChildExit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

export interface ChildNodeOptions {
  /** Each complete output line as it arrives (stdout and stderr alike). */
  readonly onLine?: (line: string) => void;
  readonly env?: NodeJS.ProcessEnv;
  /** Flags for node itself, before the entry point (e.g. `--cpu-prof`, which NODE_OPTIONS refuses). */
  readonly nodeArgs?: readonly string[];
  /**
   * A command that runs node for us and then becomes it (e.g. `ip netns exec ns1`, which enters a network namespace
   * and execs): the handle still signals the node process itself.
   */
  readonly launcher?: readonly string[];
}

export class ChildNode {
  /** Characters dropped from the front of `output` once it exceeded its bound. */
  private dropped = 0;
  private kept = '';
  private partialLine = '';
  private exit: ChildExit | undefined;
  readonly exited: Promise<ChildExit>;
  private readonly child: ChildProcess;

  constructor(
    readonly args: readonly string[],
    options: ChildNodeOptions = {},
  ) {
    const command = [...(options.launcher ?? []), process.execPath, ...(options.nodeArgs ?? []), BASALT_MAIN, ...args];
    this.child = spawn(command[0]!, command.slice(1), {
      stdio: ['ignore', 'pipe', 'pipe'],
      ...(options.env !== undefined && { env: options.env }),
    });
    const append = (chunk: Buffer): void => this.append(chunk.toString(), options.onLine);
    this.child.stdout!.on('data', append);
    this.child.stderr!.on('data', append);
    this.exited = new Promise((resolve) => {
      this.child.on('exit', (code, signal) => {
        this.exit = { code, signal };
        resolve(this.exit);
      });
    });
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  /** Everything kept so far (the tail, if the child wrote more than the bound). */
  get output(): string {
    return this.kept;
  }

  /** A position in the output stream, for `waitFor(pattern, timeoutMs, mark)` to look only at what comes after. */
  mark(): number {
    return this.dropped + this.kept.length;
  }

  get running(): boolean {
    return this.exit === undefined;
  }

  /** Resolves with the first match of `pattern` in the output after `from`; fails after `timeoutMs` or on exit. */
  async waitFor(pattern: RegExp, timeoutMs = 30_000, from = 0): Promise<RegExpExecArray> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const match = pattern.exec(this.kept.slice(Math.max(0, from - this.dropped)));
      if (match !== null) return match;
      if (this.exit !== undefined) {
        throw new Error(`child exited (${this.describeExit()}) before ${pattern}; output:\n${this.kept}`);
      }
      if (Date.now() > deadline) throw new Error(`no ${pattern} within ${timeoutMs} ms; output:\n${this.kept}`);
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }

  /** Sends a signal if the child still runs (a no-op after its exit). */
  signal(signal: NodeJS.Signals): void {
    if (this.exit === undefined) this.child.kill(signal);
  }

  describeExit(): string {
    if (this.exit === undefined) return 'running';
    return this.exit.signal !== null ? `signal ${this.exit.signal}` : `exit code ${this.exit.code}`;
  }

  private append(text: string, onLine: ((line: string) => void) | undefined): void {
    this.kept += text;
    if (this.kept.length > OUTPUT_CHARS_MAX) {
      const cut = this.kept.length - OUTPUT_CHARS_MAX;
      this.kept = this.kept.slice(cut);
      this.dropped += cut;
    }
    if (onLine === undefined) return;
    const lines = (this.partialLine + text).split('\n');
    this.partialLine = lines.pop() ?? '';
    for (const line of lines) onLine(line);
  }
}
