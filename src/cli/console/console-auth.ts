/**
 * The console's login and what a logged-in user may see, on a node that checks users (one with `--certs-dir`, whose
 * metrics port is HTTPS). A request logs in by HTTP Basic authentication, checked by the client port's
 * `Authenticator` itself (the same scrypt check, the same throttling per (source address, user), the same counters):
 * a console login is a client login by another door. HTTP has no session, so every request carries the credentials
 * (the browser resends them to the same origin once the user has typed them) and every request is checked against
 * the user's current roles: a removed user or a revoked role takes effect on the next request, as on the client port.
 * An open page polls about twice a second, and a scrypt check per poll would cost a share of a core per page; so a
 * password that passed the check is remembered for LOGIN_REMEMBER_MS, for the same source address and user and only
 * while the user's stored password hash is the one it was checked against (a changed password, a removed user: the
 * next request is checked again). Only successes are remembered, keyed by an HMAC under a key drawn at start (no
 * password is kept, and a tag means nothing outside this process), at most LOGINS_REMEMBERED_MAX of them. A remembered
 * login is taken even while the failures of its (address, user) pair are being slowed: it is the right password.
 *
 * No client certificate is asked on the HTTPS port: a browser asked for an optional one shows a certificate picker to
 * every visitor, and a probe of `/health` has none to give.
 *
 * Authorization follows the client port's table (client/authorization.ts): the cluster and transaction views and the
 * event stream need a login only (operational, as `/metrics`), the data views need read access to their table. The
 * transaction view names the keys transactions lock; those of tables the user may not read are hidden.
 */

import { createHmac, randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { Authenticator } from '../../client/auth.js';
import { denial, tableAccess } from '../../client/authorization.js';
import type { UserRecord } from '../../cluster/metastorage-state.js';
import { BasaltError } from '../../core/errors.js';
import type { PartitionId } from '../../core/ids.js';
import { tableIdOf } from '../../core/partitioning.js';
import type { BasaltNode } from '../../node/basalt-node.js';

/** The realm a browser shows in its login prompt. */
export const CONSOLE_REALM = 'basalt console';
/** Longest `Authorization` header looked at (a user name and a password of at most 1,024 characters, in base64). */
const AUTHORIZATION_CHARS_MAX = 4_096;

/**
 * Who is looking: `open` on a node that checks no users (everything is served, as before), else the user of this
 * request's login.
 */
export type ConsoleViewer = { readonly kind: 'open' } | { readonly kind: 'user'; readonly user: UserRecord };

export const OPEN_VIEWER: ConsoleViewer = { kind: 'open' };

/** How long a checked console password is taken without a new check. */
export const LOGIN_REMEMBER_MS = 60_000;
/** Console logins remembered at most (the oldest is forgotten first). */
export const LOGINS_REMEMBERED_MAX = 1_024;

/** The console's logins on a node that checks users: the client port's authenticator, and the remembered successes. */
export class ConsoleLogins {
  private readonly remembered = new Map<string, { readonly passwordHash: string; readonly untilMs: number }>();
  private readonly secret = randomBytes(32);

  constructor(
    private readonly authenticator: Authenticator,
    /** The user as the metastorage has it now. */
    private readonly users: (name: string) => UserRecord | undefined,
    private readonly nowMs: () => number = () => performance.now(),
  ) {}

  /**
   * The user this request's Basic credentials log in. Throws UNAUTHENTICATED (no or malformed credentials, a wrong
   * password, a user that does not exist, a throttled pair).
   */
  async login(source: string, authorization: string | undefined): Promise<ConsoleViewer> {
    const credentials = basicCredentials(authorization);
    if (credentials === undefined) {
      throw new BasaltError('UNAUTHENTICATED', 'the console needs a login (HTTP Basic: user and password)');
    }
    const tag = createHmac('sha256', this.secret)
      .update(JSON.stringify([source, credentials.user, credentials.password]))
      .digest('base64');
    const known = this.remembered.get(tag);
    if (known !== undefined) {
      const user = this.users(credentials.user);
      if (this.nowMs() < known.untilMs && user?.password?.hash === known.passwordHash) return { kind: 'user', user };
      this.remembered.delete(tag);
    }
    const user = await this.authenticator.loginWithPassword(source, credentials.user, credentials.password);
    if (user.password !== undefined) {
      this.remembered.delete(tag);
      this.remembered.set(tag, { passwordHash: user.password.hash, untilMs: this.nowMs() + LOGIN_REMEMBER_MS });
      if (this.remembered.size > LOGINS_REMEMBERED_MAX) this.remembered.delete(this.remembered.keys().next().value!);
    }
    return { kind: 'user', user };
  }
}

/** The viewer of one request: `open` on a node that checks no users, else the user its credentials log in. */
export function consoleLogin(
  logins: ConsoleLogins | undefined,
  source: string,
  authorization: string | undefined,
): Promise<ConsoleViewer> {
  return logins === undefined ? Promise.resolve(OPEN_VIEWER) : logins.login(source, authorization);
}

/** The user and password of an `Authorization: Basic` header, or undefined. */
export function basicCredentials(header: string | undefined): { user: string; password: string } | undefined {
  if (header === undefined || header.length > AUTHORIZATION_CHARS_MAX) return undefined;
  const match = /^Basic\s+([A-Za-z0-9+/]+=*)\s*$/i.exec(header);
  if (match === null) return undefined;
  const decoded = Buffer.from(match[1]!, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon <= 0) return undefined;
  return { user: decoded.slice(0, colon), password: decoded.slice(colon + 1) };
}

/** Throws PERMISSION_DENIED unless the viewer may read `table`. */
export function requireRead(viewer: ConsoleViewer, table: string): void {
  if (viewer.kind === 'open') return;
  const why = denial(viewer.user, { need: 'read', table });
  if (why !== undefined) throw new BasaltError('PERMISSION_DENIED', why, { user: viewer.user.name, table });
}

/** Whether the viewer may read the table of `partition` (a partition of no table, the metastorage's: admins only). */
export function partitionReadable(node: BasaltNode, viewer: ConsoleViewer): (partition: PartitionId) => boolean {
  if (viewer.kind === 'open' || viewer.user.role === 'admin') return () => true;
  const names = new Map(node.metastorage.tables().map((t) => [t.id, t.name] as const));
  return (partition) => {
    const id = tableIdOf(partition);
    const name = id === undefined ? undefined : names.get(id);
    return name !== undefined && tableAccess(viewer.user, name) !== 'none';
  };
}
