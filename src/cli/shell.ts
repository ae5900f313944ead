/**
 * `basalt shell`: an interactive session against a running cluster (node:readline), with the data commands (get,
 * put [--ttl ms | --lease id], rm, scan [--prefix p] [--limit n], tables, lease grant|keep|revoke), one open
 * transaction at a time (`begin [--read-only]`, `commit`, `rollback`) shown in the prompt, line history and completion
 * of commands and table names. Results print as the data commands print them (one JSON line each); a failure prints
 * `error: CODE: message` and the session goes on.
 *
 * Standard input need not be a terminal: a piped script runs line by line, in order, each line waiting for the one
 * before it. The session ends at `exit`/`quit` or at the end of input (an open transaction is then rolled back); its
 * exit code is 0 if every command succeeded, else the data commands' code of the first failure.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { createInterface, type Interface } from 'node:readline';
import type { RemoteClient, RemoteTransaction } from '../client/remote.js';
import { BasaltError, invalidArgument, isBasaltError } from '../core/errors.js';
import { DATA_EXIT_CODES, parseValue } from './data.js';
import { leaseJson, parseMs, putOptionsOf } from './lease-command.js';

/** Commands of the shell, in the order `help` lists them. */
export const SHELL_COMMANDS = [
  'get',
  'put',
  'rm',
  'scan',
  'tables',
  'begin',
  'commit',
  'rollback',
  'lease',
  'help',
  'exit',
  'quit',
] as const;

const TABLE_COMMANDS: ReadonlySet<string> = new Set(['get', 'put', 'rm', 'scan']);
const LEASE_SUBCOMMANDS = ['grant', 'keep', 'revoke'];
const HISTORY_SIZE = 1_000;

const HELP = `commands:
  get <table> <key>
  put <table> <key> [--ttl <ms> | --lease <id>] <json>
  rm <table> <key>
  scan <table> [--prefix <p>] [--limit <n>]
  tables
  begin [--read-only] | commit | rollback
  lease grant <ttlMs> | lease keep <id> | lease revoke <id>
  help | exit`;

/** What the prompt shows: no transaction, or the open one (its kind and the start of its id). */
export function promptOf(tx: { readonly id: string; readonly readOnly: boolean } | undefined): string {
  if (tx === undefined) return 'basalt> ';
  return `basalt(${tx.readOnly ? 'ro' : 'rw'} ${tx.id.slice(0, 8)})> `;
}

/** Completions for `line` (the text before the cursor): commands first, then table names or lease subcommands. */
export function completeLine(line: string, tables: readonly string[]): [string[], string] {
  const words = line.split(/\s+/);
  const current = words[words.length - 1] ?? '';
  const candidates =
    words.length === 1
      ? [...SHELL_COMMANDS]
      : words.length === 2 && TABLE_COMMANDS.has(words[0]!)
        ? [...tables]
        : words.length === 2 && words[0] === 'lease'
          ? LEASE_SUBCOMMANDS
          : [];
  return [candidates.filter((c) => c.startsWith(current)), current];
}

/** One parsed line: its command, positional words, flags, and for put the JSON text that ends the line. */
export interface ShellLine {
  readonly command: string;
  readonly args: readonly string[];
  readonly flags: Readonly<Record<string, string | true>>;
  readonly json?: string;
}

const FLAGS_WITH_VALUE: ReadonlySet<string> = new Set(['--ttl', '--lease', '--prefix', '--limit']);

/** Splits a line: `put` takes three words and then flags, the rest of the line is its JSON value. */
export function parseLine(line: string): ShellLine | undefined {
  let rest = line.trim();
  if (rest === '' || rest.startsWith('#')) return undefined;
  const words: string[] = [];
  const flags: Record<string, string | true> = {};
  const take = (): string => {
    const match = /^(\S+)\s*/.exec(rest)!;
    rest = rest.slice(match[0].length);
    return match[1]!;
  };
  const command = take();
  const positional = command === 'put' ? 2 : Number.POSITIVE_INFINITY;
  while (rest !== '') {
    if (rest.startsWith('--')) {
      const flag = take();
      if (FLAGS_WITH_VALUE.has(flag)) {
        if (rest === '') throw invalidArgument(`${flag} needs a value`);
        flags[flag] = take();
      } else flags[flag] = true;
    } else if (words.length < positional) words.push(take());
    else break;
  }
  return command === 'put' ? { command, args: words, flags, json: rest } : { command, args: words, flags };
}

function need(line: ShellLine, count: number, usage: string): readonly string[] {
  if (line.args.length !== count) throw invalidArgument(`usage: ${usage}`);
  return line.args;
}

function flagText(line: ShellLine, name: string): string | undefined {
  const v = line.flags[name];
  if (v === true) throw invalidArgument(`${name} needs a value`);
  return v;
}

/** One session: the client, the open transaction, and where results go. */
export class ShellSession {
  private tx: RemoteTransaction | undefined;
  private firstFailure: number | undefined;
  tables: string[] = [];

  constructor(
    private readonly client: RemoteClient,
    private readonly print: (line: string) => void,
  ) {}

  get prompt(): string {
    return promptOf(this.tx);
  }

  get exitCode(): number {
    return this.firstFailure ?? DATA_EXIT_CODES.ok;
  }

  async refreshTables(): Promise<void> {
    this.tables = (await this.client.tables()).map((t) => t.name);
  }

  /** Runs one line; false when the session is to end. Failures are printed, never thrown. */
  async run(text: string): Promise<boolean> {
    try {
      const line = parseLine(text);
      if (line === undefined) return true;
      if (line.command === 'exit' || line.command === 'quit') return false;
      await this.execute(line);
    } catch (error) {
      // A BasaltError's message starts with its code.
      const message = error instanceof Error ? error.message : String(error);
      this.print(`error: ${isBasaltError(error) ? message : `ERROR: ${message}`}`);
      this.firstFailure ??= failureCode(error);
    }
    return true;
  }

  /** Rolls back a transaction left open (end of input). */
  async close(): Promise<void> {
    const tx = this.tx;
    this.tx = undefined;
    await tx?.rollback().catch(() => {});
  }

  private async execute(line: ShellLine): Promise<void> {
    switch (line.command) {
      case 'get':
      case 'put':
      case 'rm':
      case 'scan':
        return this.data(line);
      case 'tables':
        await this.refreshTables();
        for (const name of this.tables) this.print(JSON.stringify(name));
        return;
      case 'begin':
      case 'commit':
      case 'rollback':
        return this.transactionCommand(line);
      case 'lease':
        return this.lease(line);
      case 'help':
        this.print(HELP);
        return;
      default:
        throw invalidArgument(`unknown command ${JSON.stringify(line.command)} (help lists them)`);
    }
  }

  private async data(line: ShellLine): Promise<void> {
    const tx = this.tx;
    switch (line.command) {
      case 'get': {
        const [table, key] = need(line, 2, 'get <table> <key>');
        const value = tx === undefined ? await this.client.get(table!, key!) : await tx.get(table!, key!);
        this.print(JSON.stringify(value ?? null));
        return;
      }
      case 'put': {
        const [table, key] = need(line, 2, 'put <table> <key> [--ttl <ms> | --lease <id>] <json>');
        const value = parseValue(line.json ?? '');
        const ttl = flagText(line, '--ttl');
        const lease = flagText(line, '--lease');
        const options = putOptionsOf({ ...(ttl !== undefined && { ttl }), ...(lease !== undefined && { lease }) });
        if (tx === undefined) await this.client.put(table!, key!, value, options);
        else await tx.put(table!, key!, value, options);
        this.print('{}');
        return;
      }
      case 'rm': {
        const [table, key] = need(line, 2, 'rm <table> <key>');
        if (tx === undefined) await this.client.remove(table!, key!);
        else await tx.remove(table!, key!);
        this.print('{}');
        return;
      }
      default:
        return this.scan(line);
    }
  }

  private async scan(line: ShellLine): Promise<void> {
    const [table] = need(line, 1, 'scan <table> [--prefix <p>] [--limit <n>]');
    const prefix = flagText(line, '--prefix');
    const limitText = flagText(line, '--limit');
    const limit = limitText === undefined ? undefined : Number(limitText);
    if (limit !== undefined && (!Number.isSafeInteger(limit) || limit < 1)) {
      throw invalidArgument('--limit must be a positive integer');
    }
    const range = { prefix: prefix ?? '' };
    const options = limit === undefined ? {} : { limit };
    const rows =
      this.tx === undefined
        ? await this.client.transaction((t) => t.scan(table!, range, options), { readOnly: true })
        : await this.tx.scan(table!, range, options);
    for (const row of rows) this.print(JSON.stringify({ key: row.key, value: row.value }));
  }

  private async transactionCommand(line: ShellLine): Promise<void> {
    if (line.command === 'begin') {
      if (this.tx !== undefined) throw invalidArgument('a transaction is open: commit or rollback it first');
      this.tx = await this.client.begin({ readOnly: line.flags['--read-only'] === true });
      this.print(JSON.stringify({ begin: this.tx.id, readOnly: this.tx.readOnly }));
      return;
    }
    const tx = this.tx;
    if (tx === undefined) throw invalidArgument(`no open transaction to ${line.command}`);
    // The transaction is over whatever the outcome: a failed commit is not retried here.
    this.tx = undefined;
    if (line.command === 'commit') await tx.commit();
    else await tx.rollback();
    this.print(JSON.stringify({ [line.command === 'commit' ? 'committed' : 'rolledBack']: tx.id }));
  }

  private async lease(line: ShellLine): Promise<void> {
    const [sub, arg] = need(line, 2, 'lease grant <ttlMs> | lease keep <id> | lease revoke <id>');
    switch (sub) {
      case 'grant':
        this.print(leaseJson(await this.client.grantLease(parseMs(arg!, 'the lease ttl'))));
        return;
      case 'keep':
        this.print(leaseJson(await this.client.keepAliveOnce(arg!)));
        return;
      case 'revoke':
        await this.client.revokeLease(arg!);
        this.print(JSON.stringify({ revoked: arg }));
        return;
      default:
        throw invalidArgument(`lease ${sub}: grant, keep or revoke`);
    }
  }
}

function failureCode(error: unknown): number {
  if (!isBasaltError(error)) return DATA_EXIT_CODES.refused;
  if (error.code === 'INVALID_ARGUMENT') return DATA_EXIT_CODES.invalid;
  if (error.code === 'TX_OUTCOME_UNKNOWN') return DATA_EXIT_CODES.unknown;
  return error.retryable ? DATA_EXIT_CODES.unavailable : DATA_EXIT_CODES.refused;
}

/** The saved history, newest first as readline keeps it (none if the file cannot be read). */
function loadHistory(file: string | undefined): string[] {
  if (file === undefined) return [];
  try {
    return readFileSync(file, 'utf8')
      .split('\n')
      .filter((l) => l !== '')
      .slice(-HISTORY_SIZE)
      .reverse();
  } catch {
    return [];
  }
}

function saveHistory(file: string | undefined, history: readonly string[]): void {
  if (file === undefined) return;
  try {
    writeFileSync(file, `${[...history].reverse().join('\n')}\n`, { mode: 0o600 });
  } catch {
    // History is a convenience: a read-only home directory must not end the session.
  }
}

/**
 * Runs a session on `input` (a terminal or a piped script) until `exit` or the end of input; its exit code. On a
 * terminal, line history is kept in `historyFile` (at most HISTORY_SIZE lines) across sessions.
 */
export async function runShell(
  client: RemoteClient,
  input: NodeJS.ReadableStream & { readonly isTTY?: boolean },
  output: NodeJS.WritableStream,
  historyFile?: string,
): Promise<number> {
  const session = new ShellSession(client, (line) => output.write(`${line}\n`));
  await session.refreshTables().catch(() => {});
  const terminal = input.isTTY === true;
  const file = terminal ? historyFile : undefined;
  const rl: Interface = createInterface({
    input,
    output,
    terminal,
    history: loadHistory(file),
    historySize: HISTORY_SIZE,
    completer: (line: string) => completeLine(line, session.tables),
  });
  rl.on('history', (history: string[]) => saveHistory(file, history));
  const ask = (): void => {
    if (!terminal) return;
    rl.setPrompt(session.prompt);
    rl.prompt();
  };
  try {
    ask();
    for await (const text of rl) {
      if (!(await session.run(text))) break;
      ask();
    }
  } catch (error) {
    throw new BasaltError('INTERNAL', `the shell's input failed: ${String(error)}`);
  } finally {
    rl.close();
    await session.close();
  }
  return session.exitCode;
}
