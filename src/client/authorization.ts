/**
 * What each client request needs (DESIGN §4b: every request is authorized by role). `REQUEST_PERMISSIONS` is one
 * entry per request kind, a `Record` over `RequestKind`, so a new kind does not compile until it declares what it
 * needs; the client server checks it before it acts on any request of a logged-in connection.
 *
 * Roles (cluster/metastorage-state.ts): `admin` may do anything (tables, members, users, data); `readwrite` reads and
 * writes every table; `readonly` reads every table; a per-table role gives `readwrite` or `readonly` on one table. A
 * user's access to a table is the larger of its cluster-wide role's and its role on that table. A read that locks
 * (`forUpdate`) takes exclusive locks that hold writers off, so it needs write access. Listing tables, members and
 * primaries and running a transaction's begin, commit and rollback need a login only: a transaction can only do what
 * its operations were allowed to do. Protecting a timestamp (and renewing or releasing one) holds back the storage GC
 * of every node, so it needs a cluster-wide `admin` or `readwrite` role (`history`), not a per-table one.
 */
import type { UserRecord } from '../cluster/metastorage-state.js';
import type { ClientRequest, RequestKind, RequestOf } from './protocol.js';

export type Permission =
  | { readonly need: 'login' }
  | { readonly need: 'read' | 'write'; readonly table: string }
  | { readonly need: 'admin' }
  /** A cluster-wide admin or readwrite role (protected timestamps). */
  | { readonly need: 'history' }
  /** The user named, or an admin (a user changes its own password). */
  | { readonly need: 'self'; readonly user: string }
  /** Every one of these (a commit carrying writes to several tables). */
  | { readonly need: 'all'; readonly permissions: readonly Permission[] };

export type TableAccess = 'write' | 'read' | 'none';

const LOGIN: Permission = { need: 'login' };
const ADMIN: Permission = { need: 'admin' };
const HISTORY: Permission = { need: 'history' };

const read = (r: { readonly table: string; readonly options?: { readonly forUpdate?: boolean } }): Permission => ({
  need: r.options?.forUpdate === true ? 'write' : 'read',
  table: r.table,
});
const write = (r: { readonly table: string }): Permission => ({ need: 'write', table: r.table });

export const REQUEST_PERMISSIONS: { readonly [K in RequestKind]: (request: RequestOf<K>) => Permission } = {
  begin: () => LOGIN,
  get: read,
  getAll: read,
  scan: (r) => ({ need: 'read', table: r.table }),
  put: write,
  putAll: write,
  remove: write,
  // A commit that carries the client's buffered writes needs write access to each of their tables.
  commit: (r) =>
    r.writes === undefined || r.writes.length === 0
      ? LOGIN
      : { need: 'all', permissions: [...new Set(r.writes.map((w) => w.table))].map((table) => write({ table })) },
  changes: (r) => ({ need: 'read', table: r.table }),
  rollback: () => LOGIN,
  tables: () => LOGIN,
  members: () => LOGIN,
  primaries: () => LOGIN,
  createTable: () => ADMIN,
  dropTable: () => ADMIN,
  removeNode: () => ADMIN,
  createUser: () => ADMIN,
  removeUser: () => ADMIN,
  grant: () => ADMIN,
  users: () => ADMIN,
  protect: () => HISTORY,
  renew: () => HISTORY,
  release: () => HISTORY,
  setPassword: (r) => ({ need: 'self', user: r.name }),
};

export function permissionOf(request: ClientRequest): Permission {
  const check = REQUEST_PERMISSIONS[request.kind] as (r: ClientRequest) => Permission;
  return check(request);
}

/** The user's access to `table`: the larger of its cluster-wide role's and its role on the table. */
export function tableAccess(user: UserRecord, table: string): TableAccess {
  if (user.role === 'admin' || user.role === 'readwrite') return 'write';
  const onTable = user.tables?.find(([name]) => name === table)?.[1];
  if (onTable === 'readwrite') return 'write';
  return user.role === 'readonly' || onTable === 'readonly' ? 'read' : 'none';
}

/** Why `user` may not do what `permission` names, or undefined when it may. */
export function denial(user: UserRecord, permission: Permission): string | undefined {
  switch (permission.need) {
    case 'login':
      return undefined;
    case 'admin':
      return user.role === 'admin' ? undefined : `user ${user.name} is not an admin`;
    case 'history':
      return user.role === 'admin' || user.role === 'readwrite'
        ? undefined
        : `user ${user.name} may not protect timestamps (it needs a cluster-wide admin or readwrite role)`;
    case 'self':
      return user.role === 'admin' || user.name === permission.user
        ? undefined
        : `user ${user.name} may change only its own password`;
    case 'all': {
      for (const p of permission.permissions) {
        const why = denial(user, p);
        if (why !== undefined) return why;
      }
      return undefined;
    }
    case 'read':
    case 'write': {
      const access = tableAccess(user, permission.table);
      if (access === 'write' || (access === 'read' && permission.need === 'read')) return undefined;
      const verb = permission.need === 'read' ? 'read' : 'write to';
      return `user ${user.name} may not ${verb} table ${permission.table}`;
    }
  }
}
