/**
 * The console's login and what a logged-in user may see, on a node that checks users (one with `--certs-dir`, whose
 * metrics port is HTTPS). A request logs in by HTTP Basic authentication, checked by the client port's
 * `Authenticator` itself (the same scrypt check, the same throttling per (source address, user), the same counters):
 * a console login is a client login by another door. HTTP has no session, so every request carries the credentials
 * (the browser resends them to the same origin once the user has typed them) and every request is checked against
 * the user's current roles: a removed user or a revoked role takes effect on the next request, as on the client port.
 *
 * No client certificate is asked on the HTTPS port: a browser asked for an optional one shows a certificate picker to
 * every visitor, and a probe of `/health` has none to give.
 *
 * Authorization follows the client port's table (client/authorization.ts): the cluster and transaction views and the
 * event stream need a login only (operational, as `/metrics`), the data views need read access to their table. The
 * transaction view names the keys transactions lock; those of tables the user may not read are hidden.
 */

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

/**
 * The viewer of one request: `open` without `authenticator`, else the user its Basic credentials log in. Throws
 * UNAUTHENTICATED (no or malformed credentials, a wrong password, a user that does not exist, a throttled pair).
 */
export async function consoleLogin(
  authenticator: Authenticator | undefined,
  source: string,
  authorization: string | undefined,
): Promise<ConsoleViewer> {
  if (authenticator === undefined) return OPEN_VIEWER;
  const credentials = basicCredentials(authorization);
  if (credentials === undefined) {
    throw new BasaltError('UNAUTHENTICATED', 'the console needs a login (HTTP Basic: user and password)');
  }
  const user = await authenticator.loginWithPassword(source, credentials.user, credentials.password);
  return { kind: 'user', user };
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
