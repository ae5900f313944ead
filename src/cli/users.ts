/**
 * `basalt user add | remove | passwd | grant | list`: the users of a node that checks them (one started with
 * `--certs-dir`), over the client protocol as the data commands are, and the credentials every command that connects
 * takes: `--certs-dir` (ca.crt to check the node, and `client.<user>.crt` / `.key` when present for `--user`) and
 * `--user`, whose password comes from BASALT_PASSWORD or, at a terminal, a prompt that does not echo. A new password
 * (`add`, `passwd`) comes from a prompt or, with `--password-stdin`, from the first line of standard input; never
 * from a flag, which would show in the process list and the shell history.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { ConnectOptions, RemoteClient, UserInfo } from '../client/remote.js';
import type { UserRole } from '../cluster/metastorage-state.js';
import { BasaltError, invalidArgument } from '../core/errors.js';
import { loadClientTls } from './certs.js';
import { log } from './common.js';

/** The flags of a command that connects. */
export interface CredentialFlags {
  readonly certsDir?: string;
  readonly user?: string;
}

/** How to connect with `flags`: TLS with the directory's CA (and client certificate), logged in as `--user`. */
export async function credentialOptions(flags: CredentialFlags): Promise<ConnectOptions> {
  const { certsDir, user } = flags;
  if (certsDir === undefined) {
    if (user !== undefined)
      throw invalidArgument('--user needs --certs-dir: users exist only on nodes with certificates');
    return {};
  }
  const tls = loadClientTls(resolve(certsDir), user, new Date());
  if (user === undefined || tls.cert !== undefined) return { ...tls, ...(user !== undefined && { user }) };
  const password = process.env['BASALT_PASSWORD'] ?? (await promptHidden(`password of ${user}: `));
  return { ...tls, user, password };
}

/** A new password: the first line of standard input with `--password-stdin`, else asked twice at the terminal. */
export async function newPassword(fromStdin: boolean, user: string): Promise<string> {
  if (fromStdin) {
    const line = readFileSync(0, 'utf8').split(/\r?\n/)[0] ?? '';
    if (line === '') throw invalidArgument('--password-stdin: standard input has no password on its first line');
    return line;
  }
  const first = await promptHidden(`new password of ${user}: `);
  const again = await promptHidden('again: ');
  if (first !== again) throw invalidArgument('the two passwords differ');
  return first;
}

/** Asks at the terminal without echoing what is typed. Throws INVALID_ARGUMENT when there is no terminal. */
export function promptHidden(question: string): Promise<string> {
  const stdin = process.stdin;
  if (!stdin.isTTY) {
    return Promise.reject(
      invalidArgument(`no terminal to ask for it (${question.trim()}): use BASALT_PASSWORD or --password-stdin`),
    );
  }
  process.stderr.write(question);
  return new Promise((done, fail) => {
    let text = '';
    const finish = (error?: BasaltError): void => {
      stdin.off('data', onData);
      stdin.setRawMode(false);
      stdin.pause();
      process.stderr.write('\n');
      if (error === undefined) done(text);
      else fail(error);
    };
    const onData = (chunk: string): void => {
      for (const c of chunk) {
        if (c === '\r' || c === '\n') {
          finish();
          return;
        }
        if (c === '\u0003') {
          finish(new BasaltError('CANCELLED', 'cancelled at the prompt'));
          return;
        }
        text = c === '\u007f' || c === '\b' ? text.slice(0, -1) : text + c;
      }
    };
    stdin.setEncoding('utf8');
    stdin.setRawMode(true);
    stdin.resume();
    stdin.on('data', onData);
  });
}

const ROLES: readonly string[] = ['admin', 'readwrite', 'readonly'];

export function userRole(value: string): UserRole {
  if (!ROLES.includes(value)) throw invalidArgument(`role ${value}: expected admin, readwrite or readonly`);
  return value as UserRole;
}

export function grantRole(value: string): UserRole | 'none' {
  return value === 'none' ? 'none' : userRole(value);
}

export interface UserAddOptions {
  readonly role?: UserRole;
  /** No password: the user logs in by client certificate only. */
  readonly password: boolean;
  readonly passwordStdin: boolean;
}

export async function userAdd(client: RemoteClient, name: string, options: UserAddOptions): Promise<void> {
  const password = options.password ? await newPassword(options.passwordStdin, name) : undefined;
  const user = await client.createUser(name, {
    ...(password !== undefined && { password }),
    ...(options.role !== undefined && { role: options.role }),
  });
  log(`user ${user.name} created (${describe(user)})`);
}

export async function userPasswd(
  client: RemoteClient,
  name: string,
  options: Omit<UserAddOptions, 'role'>,
): Promise<void> {
  const password = options.password ? await newPassword(options.passwordStdin, name) : undefined;
  const user = await client.setPassword(name, password);
  log(
    `user ${user.name}: ${password === undefined ? 'password removed (client certificate only)' : 'password changed'}`,
  );
}

export async function userList(client: RemoteClient): Promise<void> {
  const users = await client.users();
  if (users.length === 0) log('no users');
  for (const user of users) log(`${user.name}\t${describe(user)}`);
}

function describe(user: UserInfo): string {
  const tables = (user.tables ?? []).map(([table, role]) => `${role} on ${table}`);
  const roles = [user.role ?? 'no cluster role', ...tables].join(', ');
  return `${roles}; ${user.password ? 'password' : 'client certificate only'}`;
}
