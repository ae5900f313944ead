/**
 * The metastorage state machine: cluster metadata replicated by the `meta` Raft group. Pure and deterministic: every
 * replica applying the same commands in the same order reaches the same state, results included.
 *
 * State: tables `{ name, id, partitions, replicas }` and, for each partition `t<id>p<index>`, the names of the nodes
 * holding its replicas (the first is the preferred leader). `revision` is the log index of the last applied entry, so
 * revisions only grow and two states of equal revision are equal (watchers compare revisions only).
 *
 * Assignment (at apply, from the command's node list and the current state): each partition in index order takes the
 * `replicas` nodes with the fewest replicas so far, ties broken by a rotation starting at (tableId + index), so one
 * table's replicas are spread evenly (node loads differ by at most one) and the choice is a function of the state.
 *
 * Every command carries a request id drawn by its proposer; the results of the last `metaResultsMax` commands are kept
 * by request id (in the state, so in snapshots too), and a command whose id is among them is not applied again but
 * answered with its first result: a proposer that retries after a timeout learns what its first attempt did.
 *
 * Dropping a table retires it: the table leaves `tables` at once (new operations on it fail UNKNOWN_TABLE), but its
 * assignments stay, listed in `retiring` with `retireAfter` = the drop's hybrid timestamp (taken by the proposer and
 * carried in the command, so every replica applies the same value) + the proposer's grace (tx timeout + 2·max clock
 * skew). A tx that enlisted the table began before the drop, so its deadline lies before `retireAfter`: until then the
 * partitions keep serving its finish, cleanups and intent resolutions; nodes destroy them once their clock passes
 * `retireAfter`. The state forgets a retired table (entry and assignments) at the first command whose timestamp is a
 * further grace past `retireAfter`, when every node's clock is past it by far more than any skew.
 *
 * Members: the nodes of the cluster, each `active` (it may hold replicas) or `leaving` (decommissioned or declared
 * dead: its replicas move to the active members, then it is forgotten). A member set starts with `InitMembers` (the
 * nodes a cluster was started with; applied once, later ones are answered with the set as it is), grows with
 * `JoinNode` and shrinks with `RemoveNode`. A removed name is kept as a tombstone and may not join again: a node that
 * comes back with an old name and old data must not pose as a fresh replica. After every member change the targets are
 * recomputed (placement.ts: as few moves as possible, loads within one): `targets` lists the partitions whose replicas
 * are to move, with where to; a partition's Raft leader moves it one configuration change at a time and reports each
 * configuration it reached with `ReportReplicas`, which becomes the assignment; a target reached (as a set) is
 * dropped, and a leaving member that no assignment or target names any more is forgotten. Before members exist (a
 * cluster started before they were recorded), tables are placed on the node list their CreateTable carries.
 *
 * Users: the client protocol's accounts (client/authorization.ts checks them), each with a cluster-wide role
 * (`admin`, `readwrite`, `readonly`, or none) and per-table roles, and a scrypt hash of its password (absent: it logs in
 * by client certificate only). The proposer hashes; the state only stores. The last admin cannot be removed or lose
 * its role, so that a cluster is never left without anyone who may manage it.
 *
 * Protected timestamps: records `{ id, ts, expiresAt, owner }`; while one is unexpired, every node's low watermark
 * stays at or below its `ts` (tx/core/low-watermark.ts `floor`), so reads at `ts` find their history anywhere in the
 * cluster. A holder renews its record before `expiresAt` (a later expiry, same id and owner) and releases it when
 * done; a holder that dies lets it lapse. Lifetimes are bounded (LIMITS.protectedTimestampLifetimeMaxMs past the
 * command's timestamp) and so is the number of records (LIMITS.protectedTimestampsMax). The state forgets a record at
 * the first command whose timestamp is past its `expiresAt`; nodes ignore it from the moment their clock is past it.
 *
 * Invariants: table ids are never reused (nextTableId only grows); every table has exactly `partitions` assignments of
 * `replicas` distinct nodes; a dropped table's assignments stay exactly while it is listed as retiring; a retiring
 * table holds no name in `tables`, so its name can be created again (under a new id).
 */
import { BasaltError } from '../core/errors.js';
import { type HybridTimestamp, type NodeName, nodeName, type PartitionId, partitionId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { META_GROUP, tableIdOf, tablePartitionId } from '../core/partitioning.js';
import { addMs, asTimestamp, NULL_TIMESTAMP } from '../hlc/timestamp.js';
import { decode, encode } from '../net/codec.js';
import { planPlacement } from './placement.js';

/** A table as the cluster knows it. */
export interface TableDescriptor {
  /** The table's name. */
  readonly name: string;
  /** Its id, part of its partitions' ids (`t<id>p<index>`). */
  readonly id: number;
  /** Its number of partitions. */
  readonly partitions: number;
  /** Replicas of each partition. */
  readonly replicas: number;
}

/** Options of `createTable`. */
export interface TableOptions {
  /** Partitions of the table; keys map to them by hash. */
  readonly partitions: number;
  /** Replicas of each partition (at most the number of nodes). */
  readonly replicas: number;
}

export type MetaCommand =
  | {
      readonly kind: 'CreateTable';
      readonly requestId: string;
      readonly name: string;
      readonly partitions: number;
      readonly replicas: number;
      /** The cluster's node names as the proposer knows them; assignments draw from these. */
      readonly nodes: readonly string[];
      /** The proposer's HLC reading (0 in entries written before commands carried one): retired tables older go. */
      readonly ts: HybridTimestamp;
    }
  | {
      readonly kind: 'DropTable';
      readonly requestId: string;
      readonly name: string;
      /** The drop's timestamp, from the proposer's HLC (0 in older entries: the table retires at once). */
      readonly ts: HybridTimestamp;
      /** How long after `ts` the table's partitions keep serving: tx timeout + 2·max clock skew, by the proposer. */
      readonly graceMs: number;
    }
  | {
      readonly kind: 'InitMembers';
      readonly requestId: string;
      readonly ts: HybridTimestamp;
      readonly members: readonly MemberSpec[];
    }
  | {
      readonly kind: 'JoinNode';
      readonly requestId: string;
      readonly ts: HybridTimestamp;
      readonly name: string;
      readonly address: string;
    }
  | {
      readonly kind: 'RemoveNode';
      readonly requestId: string;
      readonly ts: HybridTimestamp;
      readonly name: string;
      readonly dead: boolean;
    }
  | {
      readonly kind: 'CreateUser';
      readonly requestId: string;
      readonly ts: HybridTimestamp;
      readonly user: UserRecord;
    }
  | { readonly kind: 'RemoveUser'; readonly requestId: string; readonly ts: HybridTimestamp; readonly name: string }
  | {
      readonly kind: 'SetPassword';
      readonly requestId: string;
      readonly ts: HybridTimestamp;
      readonly name: string;
      /** Absent: the user logs in by client certificate only from now on. */
      readonly password?: PasswordHash;
    }
  | {
      /** Sets the user's cluster-wide role, or with `table` its role on that table; `none` takes it away. */
      readonly kind: 'GrantRole';
      readonly requestId: string;
      readonly ts: HybridTimestamp;
      readonly name: string;
      readonly role: UserRole | 'none';
      readonly table?: string;
    }
  | {
      /**
       * Creates a protected timestamp, or with `renew` moves the expiry of the existing one with this id and owner
       * later (its `ts` stays; the command's record's `ts` is ignored).
       */
      readonly kind: 'ProtectTimestamp';
      readonly requestId: string;
      readonly ts: HybridTimestamp;
      readonly record: ProtectedTimestamp;
      readonly renew: boolean;
    }
  | { readonly kind: 'ReleaseTimestamp'; readonly requestId: string; readonly ts: HybridTimestamp; readonly id: string }
  | {
      /** A partition's leader reached this configuration (its voters) on the way to the partition's target. */
      readonly kind: 'ReportReplicas';
      readonly requestId: string;
      readonly ts: HybridTimestamp;
      readonly partition: string;
      readonly replicas: readonly string[];
    };

export type MemberState = 'active' | 'leaving';

/** A cluster-wide role: admin manages tables, members and users and may do anything; the others concern data. */
export type UserRole = 'admin' | 'readwrite' | 'readonly';
/** A role on one table. */
export type TableRole = 'readwrite' | 'readonly';

/** A password as stored: scrypt (node:crypto) with its own random salt and the cost it was hashed with. */
export interface PasswordHash {
  readonly algorithm: 'scrypt';
  /** base64 */
  readonly salt: string;
  /** base64 */
  readonly hash: string;
  /** scrypt's N, r and p. */
  readonly cost: number;
  readonly blockSize: number;
  readonly parallelization: number;
}

export interface UserRecord {
  readonly name: string;
  readonly role?: UserRole;
  /** Table name → role on it, sorted by table name. */
  readonly tables?: readonly (readonly [string, TableRole])[];
  /** Absent: the user logs in with a client certificate only. */
  readonly password?: PasswordHash;
}

/**
 * Voters the metastorage group keeps: the first founders by name to begin with (basalt-node.ts META_MEMBERS_MAX); a
 * voter that leaves the cluster is replaced by an active member that votes in nothing yet, and a member that joins
 * while the group has fewer voters becomes one.
 */
export const META_VOTERS = 3;

export interface MemberRecord {
  readonly name: string;
  /** Where its peers dial it (its advertised address), when it told. */
  readonly address?: string;
  readonly state: MemberState;
  /** Declared dead (`RemoveNode` with `dead`): its replicas are removed before they are replaced. */
  readonly dead?: boolean;
  /** A voter of the metastorage group, as last reported by its leader (the first founders, by name, at first). */
  readonly meta?: boolean;
}

/** A member as a command names it. */
export interface MemberSpec {
  readonly name: string;
  readonly address?: string;
}

/** History at and above `ts` is kept on every node until `expiresAt` passes (a hybrid timestamp, as the clocks read). */
export interface ProtectedTimestamp {
  /** Its id, drawn by the node that created it. */
  readonly id: string;
  /** The timestamp whose history is kept. */
  readonly ts: HybridTimestamp;
  /** When it lapses unless renewed (the creating or renewing node's clock plus the lifetime asked for). */
  readonly expiresAt: HybridTimestamp;
  /** Who holds it (a user name, or the node for internal holders): shown to operators. */
  readonly owner: string;
}

/** The cluster's protected timestamps as a node serves them to clients (metastorage.ts proposes the commands). */
export interface ProtectedTimestamps {
  protect(ts: HybridTimestamp, owner: string, lifetimeMs: number): Promise<ProtectedTimestamp>;
  renew(id: string, owner: string, lifetimeMs: number): Promise<ProtectedTimestamp>;
  release(id: string): Promise<void>;
}

/** A dropped table whose partitions still serve finishes, cleanups and resolutions until `retireAfter`. */
export interface RetiringTable {
  readonly table: TableDescriptor;
  readonly dropTs: HybridTimestamp;
  readonly retireAfter: HybridTimestamp;
}

export type MetaResult =
  | { readonly status: 'OK'; readonly table: TableDescriptor }
  | { readonly status: 'ALREADY_EXISTS'; readonly table: TableDescriptor }
  | { readonly status: 'UNKNOWN_TABLE'; readonly name: string }
  | { readonly status: 'INVALID'; readonly message: string }
  | { readonly status: 'MEMBERS'; readonly members: readonly MemberRecord[] }
  | { readonly status: 'UNKNOWN_NODE'; readonly name: string }
  | { readonly status: 'ASSIGNED'; readonly partition: string; readonly replicas: readonly string[] }
  | { readonly status: 'USER'; readonly user: UserRecord }
  | { readonly status: 'USER_EXISTS'; readonly name: string }
  | { readonly status: 'UNKNOWN_USER'; readonly name: string }
  | { readonly status: 'PROTECTED'; readonly record: ProtectedTimestamp }
  | { readonly status: 'UNKNOWN_PROTECTED_TS'; readonly id: string };

/** The whole state as plain data: the snapshot, and what watchers receive. */
export interface MetaView {
  readonly revision: number;
  readonly nextTableId: number;
  readonly tables: readonly TableDescriptor[];
  /** Partition id → replica node names, of live and retiring tables; sorted by partition id. */
  readonly assignments: readonly (readonly [string, readonly string[]])[];
  /** Dropped tables still retiring, by table id. */
  readonly retiring: readonly RetiringTable[];
  /** Results of the most recent commands by request id, oldest first. */
  readonly recent: readonly (readonly [string, MetaResult])[];
  /** The cluster's members by name; empty until recorded (absent in older snapshots). */
  readonly members?: readonly MemberRecord[];
  /** Names removed from the cluster, which may not join again (absent in older snapshots). */
  readonly removed?: readonly string[];
  /** Partitions whose replicas are moving: partition id → the replicas they move to; sorted by partition id. */
  readonly targets?: readonly (readonly [string, readonly string[]])[];
  /**
   * Partition id → the voters its Raft group started with, never changed by moves (absent in older snapshots: the
   * assignments, which no move had changed). A replica added later starts its group with them and replays the
   * configuration changes from the log, as every other replica did.
   */
  readonly origins?: readonly (readonly [string, readonly string[]])[];
  /**
   * The voters the metastorage group moves to, while it moves (a voter left the cluster, or a member joined a group
   * with fewer than META_VOTERS voters); absent when the voters are where they should be.
   */
  readonly metaTarget?: readonly string[];
  /** The client protocol's users, sorted by name (absent in older snapshots). */
  readonly users?: readonly UserRecord[];
  /** Protected timestamps, sorted by id (absent in older snapshots). */
  readonly protectedTimestamps?: readonly ProtectedTimestamp[];
}

export const EMPTY_META_VIEW: MetaView = {
  revision: 0,
  nextTableId: 1,
  tables: [],
  assignments: [],
  retiring: [],
  recent: [],
  members: [],
  removed: [],
  targets: [],
  origins: [],
  users: [],
  protectedTimestamps: [],
};

export class MetaState {
  private revisionValue = 0;
  private nextTableId = 1;
  private readonly tablesByName = new Map<string, TableDescriptor>();
  private readonly assignmentsById = new Map<PartitionId, readonly NodeName[]>();
  private readonly retiringById = new Map<number, RetiringTable>();
  private readonly recent = new Map<string, MetaResult>();
  private readonly membersByName = new Map<NodeName, MemberRecord>();
  private readonly removedNames = new Set<NodeName>();
  private readonly targetsById = new Map<PartitionId, readonly NodeName[]>();
  private readonly originsById = new Map<PartitionId, readonly NodeName[]>();
  private metaTargetNodes: readonly NodeName[] | undefined;
  private readonly usersByName = new Map<string, UserRecord>();
  private readonly protectedById = new Map<string, ProtectedTimestamp>();

  get revision(): number {
    return this.revisionValue;
  }

  /** Applies the entry at `index` (a command, or undefined for an empty entry). */
  apply(index: number, command: MetaCommand | undefined): MetaResult | undefined {
    if (index <= this.revisionValue) {
      throw new BasaltError('INTERNAL', `metastorage entry ${index} applied after ${this.revisionValue}`);
    }
    this.revisionValue = index;
    if (command === undefined) return undefined;
    const earlier = this.recent.get(command.requestId);
    if (earlier !== undefined) return earlier;
    const result = this.execute(command);
    this.recent.set(command.requestId, result);
    if (this.recent.size > LIMITS.metaResultsMax) this.recent.delete(this.recent.keys().next().value!);
    return result;
  }

  /** The result of the command with `requestId`, while it is among the recent ones. */
  resultOf(requestId: string): MetaResult | undefined {
    return this.recent.get(requestId);
  }

  private execute(command: MetaCommand): MetaResult {
    this.forgetRetired(command.ts);
    this.forgetExpired(command.ts);
    switch (command.kind) {
      case 'CreateTable':
        return this.createTable(command);
      case 'DropTable':
        return this.dropTable(command);
      case 'InitMembers':
        return this.initMembers(command);
      case 'JoinNode':
        return this.joinNode(command);
      case 'RemoveNode':
        return this.removeNode(command);
      case 'ReportReplicas':
        return this.reportReplicas(command);
      case 'CreateUser':
        return this.createUser(command);
      case 'RemoveUser':
        return this.removeUser(command);
      case 'SetPassword':
        return this.setPassword(command);
      case 'GrantRole':
        return this.grantRole(command);
      case 'ProtectTimestamp':
        return this.protectTimestamp(command);
      case 'ReleaseTimestamp':
        return this.releaseTimestamp(command.id);
    }
  }

  /** Protected timestamps, sorted by id (expired ones included until a later command forgets them). */
  protectedTimestamps(): ProtectedTimestamp[] {
    return [...this.protectedById.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  private protectTimestamp(c: Extract<MetaCommand, { kind: 'ProtectTimestamp' }>): MetaResult {
    const { record } = c;
    if (record.expiresAt <= c.ts || record.expiresAt > addMs(c.ts, LIMITS.protectedTimestampLifetimeMaxMs)) {
      const max = LIMITS.protectedTimestampLifetimeMaxMs;
      return { status: 'INVALID', message: `a protected timestamp expires within ${max} ms of its command` };
    }
    const existing = this.protectedById.get(record.id);
    if (c.renew) {
      if (existing === undefined) return { status: 'UNKNOWN_PROTECTED_TS', id: record.id };
      if (existing.owner !== record.owner) {
        return { status: 'INVALID', message: `protected timestamp ${record.id} is held by another owner` };
      }
      const renewed = record.expiresAt > existing.expiresAt ? { ...existing, expiresAt: record.expiresAt } : existing;
      this.protectedById.set(record.id, renewed);
      return { status: 'PROTECTED', record: renewed };
    }
    if (existing !== undefined) return { status: 'INVALID', message: `protected timestamp ${record.id} exists` };
    if (this.protectedById.size >= LIMITS.protectedTimestampsMax) {
      return { status: 'INVALID', message: `${LIMITS.protectedTimestampsMax} protected timestamps exist` };
    }
    this.protectedById.set(record.id, record);
    return { status: 'PROTECTED', record };
  }

  private releaseTimestamp(id: string): MetaResult {
    const existing = this.protectedById.get(id);
    if (existing === undefined) return { status: 'UNKNOWN_PROTECTED_TS', id };
    this.protectedById.delete(id);
    return { status: 'PROTECTED', record: existing };
  }

  /** Forgets the protected timestamps expired before `ts` (0: a command from before commands carried one). */
  private forgetExpired(ts: HybridTimestamp): void {
    if (ts === NULL_TIMESTAMP) return;
    for (const [id, record] of this.protectedById) if (record.expiresAt < ts) this.protectedById.delete(id);
  }

  user(name: string): UserRecord | undefined {
    return this.usersByName.get(name);
  }

  users(): UserRecord[] {
    return [...this.usersByName.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  members(): MemberRecord[] {
    return [...this.membersByName.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** The members that may hold replicas. */
  activeMembers(): NodeName[] {
    return this.members()
      .filter((m) => m.state === 'active')
      .map((m) => nodeName(m.name));
  }

  target(partition: PartitionId): readonly NodeName[] | undefined {
    return this.targetsById.get(partition);
  }

  /** The metastorage group's voters as last reported (the members flagged `meta`), sorted by name. */
  metaVoters(): NodeName[] {
    return this.members()
      .filter((m) => m.meta === true)
      .map((m) => nodeName(m.name));
  }

  /** The voters the metastorage group moves to, while it moves. */
  metaTarget(): readonly NodeName[] | undefined {
    return this.metaTargetNodes;
  }

  /** The voters the partition's Raft group started with. */
  origin(partition: PartitionId): readonly NodeName[] | undefined {
    return this.originsById.get(partition) ?? this.assignmentsById.get(partition);
  }

  table(name: string): TableDescriptor | undefined {
    return this.tablesByName.get(name);
  }

  tables(): TableDescriptor[] {
    return [...this.tablesByName.values()].sort((a, b) => a.id - b.id);
  }

  assignment(partition: PartitionId): readonly NodeName[] | undefined {
    return this.assignmentsById.get(partition);
  }

  retiring(): RetiringTable[] {
    return [...this.retiringById.values()].sort((a, b) => a.table.id - b.table.id);
  }

  view(): MetaView {
    return {
      revision: this.revisionValue,
      nextTableId: this.nextTableId,
      tables: this.tables(),
      assignments: [...this.assignmentsById].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
      retiring: this.retiring(),
      recent: [...this.recent],
      members: this.members(),
      removed: [...this.removedNames].sort(),
      targets: [...this.targetsById].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
      origins: [...this.originsById].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
      ...(this.metaTargetNodes === undefined ? {} : { metaTarget: [...this.metaTargetNodes] }),
      users: this.users(),
      protectedTimestamps: this.protectedTimestamps(),
    };
  }

  static fromView(view: MetaView): MetaState {
    const state = new MetaState();
    state.revisionValue = view.revision;
    state.nextTableId = view.nextTableId;
    for (const t of view.tables) state.tablesByName.set(t.name, t);
    for (const [p, nodes] of view.assignments) state.assignmentsById.set(partitionId(p), nodes.map(nodeName));
    for (const r of view.retiring) state.retiringById.set(r.table.id, r);
    for (const [requestId, result] of view.recent) state.recent.set(requestId, result);
    for (const m of view.members ?? []) state.membersByName.set(nodeName(m.name), m);
    for (const name of view.removed ?? []) state.removedNames.add(nodeName(name));
    for (const [p, nodes] of view.targets ?? []) state.targetsById.set(partitionId(p), nodes.map(nodeName));
    // A snapshot from before origins were kept: no move had happened, so the assignments are the origins.
    for (const [p, nodes] of view.origins ?? view.assignments) {
      state.originsById.set(partitionId(p), nodes.map(nodeName));
    }
    if (view.metaTarget !== undefined) state.metaTargetNodes = view.metaTarget.map(nodeName);
    for (const u of view.users ?? []) state.usersByName.set(u.name, u);
    for (const p of view.protectedTimestamps ?? []) state.protectedById.set(p.id, p);
    return state;
  }

  private createTable(c: Extract<MetaCommand, { kind: 'CreateTable' }>): MetaResult {
    const existing = this.tablesByName.get(c.name);
    if (existing !== undefined) return { status: 'ALREADY_EXISTS', table: existing };
    const nodes = this.placementNodes(c);
    const problem = tableProblem(c.name, c, nodes.length) ?? this.capacityProblem();
    if (problem !== undefined) return { status: 'INVALID', message: problem };
    const table: TableDescriptor = {
      name: c.name,
      id: this.nextTableId++,
      partitions: c.partitions,
      replicas: c.replicas,
    };
    this.tablesByName.set(table.name, table);
    const load = this.loads(nodes);
    for (let index = 0; index < table.partitions; index++) {
      const chosen = pickReplicas(nodes, load, table.replicas, (table.id + index) % nodes.length);
      this.assignmentsById.set(tablePartitionId(table.id, index), chosen);
      this.originsById.set(tablePartitionId(table.id, index), chosen);
    }
    return { status: 'OK', table };
  }

  private dropTable(c: Extract<MetaCommand, { kind: 'DropTable' }>): MetaResult {
    const table = this.tablesByName.get(c.name);
    if (table === undefined) return { status: 'UNKNOWN_TABLE', name: c.name };
    this.tablesByName.delete(c.name);
    this.retiringById.set(table.id, { table, dropTs: c.ts, retireAfter: addMs(c.ts, Math.max(0, c.graceMs)) });
    return { status: 'OK', table };
  }

  /**
   * The nodes a new table is placed on: those the command names (the proposer's live ones), restricted to the active
   * members once members are recorded; all active members when fewer of those remain than the table has replicas.
   */
  private placementNodes(c: Extract<MetaCommand, { kind: 'CreateTable' }>): NodeName[] {
    const named = [...new Set(c.nodes)].sort().map(nodeName);
    if (this.membersByName.size === 0) return named;
    const active = this.activeMembers();
    const live = named.filter((n) => active.includes(n));
    return live.length >= c.replicas ? live : active;
  }

  private initMembers(c: Extract<MetaCommand, { kind: 'InitMembers' }>): MetaResult {
    if (this.membersByName.size === 0) {
      const specs = [...new Map(c.members.map((m) => [m.name, m])).values()];
      if (specs.length === 0 || specs.length > LIMITS.clusterMembersMax) {
        return { status: 'INVALID', message: `a cluster has 1 to ${LIMITS.clusterMembersMax} members` };
      }
      const meta = new Set(
        specs
          .map((m) => m.name)
          .sort()
          .slice(0, META_VOTERS),
      );
      for (const m of specs) {
        const record = memberRecord(m, 'active');
        this.membersByName.set(nodeName(m.name), meta.has(m.name) ? { ...record, meta: true } : record);
      }
    }
    return { status: 'MEMBERS', members: this.members() };
  }

  private joinNode(c: Extract<MetaCommand, { kind: 'JoinNode' }>): MetaResult {
    const name = nodeName(c.name);
    if (this.membersByName.size === 0) return { status: 'INVALID', message: 'the cluster has no recorded members yet' };
    if (this.removedNames.has(name)) {
      return { status: 'INVALID', message: `${name} was removed from this cluster; a node joins under a new name` };
    }
    const existing = this.membersByName.get(name);
    if (existing?.state === 'leaving') return { status: 'INVALID', message: `${name} is being removed` };
    if (existing === undefined && this.membersByName.size >= LIMITS.clusterMembersMax) {
      return { status: 'INVALID', message: `the cluster has ${LIMITS.clusterMembersMax} members` };
    }
    // A member that joins again (a restart, maybe on a new address) keeps its replicas (and its metastorage vote).
    const record = memberRecord({ name, address: c.address }, 'active');
    this.membersByName.set(name, existing?.meta === true ? { ...record, meta: true } : record);
    if (existing === undefined) {
      this.replan();
      this.replanMeta();
    }
    return { status: 'MEMBERS', members: this.members() };
  }

  private removeNode(c: Extract<MetaCommand, { kind: 'RemoveNode' }>): MetaResult {
    const name = nodeName(c.name);
    const existing = this.membersByName.get(name);
    if (existing === undefined) return { status: 'UNKNOWN_NODE', name };
    const remaining = this.activeMembers().filter((n) => n !== name).length;
    const needed = Math.max(0, ...[...this.tablesByName.values()].map((t) => t.replicas));
    if (existing.state === 'active' && remaining < needed) {
      return {
        status: 'INVALID',
        message: `removing ${name} would leave ${remaining} nodes for tables of ${needed} replicas`,
      };
    }
    // The metastorage group moves its vote to another member; without one, it may shrink by a minority only.
    const metaAfter = this.metaPlan(name);
    if (existing.state === 'active' && this.metaVoting(name) && metaAfter.length * 2 <= META_VOTERS) {
      return {
        status: 'INVALID',
        message: `${name} votes in the metastorage group and removing it would leave ${metaAfter.length} of its ${META_VOTERS} voters (no other member can take its vote)`,
      };
    }
    const dead = c.dead || existing.dead === true;
    this.membersByName.set(name, { ...existing, state: 'leaving', ...(dead && { dead: true }) });
    this.replan();
    this.replanMeta();
    this.forgetLeft();
    return { status: 'MEMBERS', members: this.members() };
  }

  private createUser(c: Extract<MetaCommand, { kind: 'CreateUser' }>): MetaResult {
    if (this.usersByName.has(c.user.name)) return { status: 'USER_EXISTS', name: c.user.name };
    if (this.usersByName.size >= LIMITS.usersMax) {
      return { status: 'INVALID', message: `the cluster has ${LIMITS.usersMax} users` };
    }
    this.usersByName.set(c.user.name, c.user);
    return { status: 'USER', user: c.user };
  }

  private removeUser(c: Extract<MetaCommand, { kind: 'RemoveUser' }>): MetaResult {
    const user = this.usersByName.get(c.name);
    if (user === undefined) return { status: 'UNKNOWN_USER', name: c.name };
    if (this.isLastAdmin(user)) return { status: 'INVALID', message: `${c.name} is the last admin` };
    this.usersByName.delete(c.name);
    return { status: 'USER', user };
  }

  private setPassword(c: Extract<MetaCommand, { kind: 'SetPassword' }>): MetaResult {
    const user = this.usersByName.get(c.name);
    if (user === undefined) return { status: 'UNKNOWN_USER', name: c.name };
    const { password: _old, ...rest } = user;
    const updated: UserRecord = c.password === undefined ? rest : { ...rest, password: c.password };
    this.usersByName.set(c.name, updated);
    return { status: 'USER', user: updated };
  }

  private grantRole(c: Extract<MetaCommand, { kind: 'GrantRole' }>): MetaResult {
    const user = this.usersByName.get(c.name);
    if (user === undefined) return { status: 'UNKNOWN_USER', name: c.name };
    let updated: UserRecord;
    if (c.table === undefined) {
      if (c.role !== 'admin' && this.isLastAdmin(user)) {
        return { status: 'INVALID', message: `${c.name} is the last admin` };
      }
      const { role: _old, ...rest } = user;
      updated = c.role === 'none' ? rest : { ...rest, role: c.role };
    } else {
      if (c.role === 'admin') return { status: 'INVALID', message: 'admin is a cluster-wide role, not a table role' };
      const tables = new Map(user.tables ?? []);
      if (c.role === 'none') tables.delete(c.table);
      else tables.set(c.table, c.role);
      if (tables.size > LIMITS.userTableRolesMax) {
        return { status: 'INVALID', message: `a user has at most ${LIMITS.userTableRolesMax} table roles` };
      }
      const { tables: _old, ...rest } = user;
      const sorted = [...tables].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
      updated = sorted.length === 0 ? rest : { ...rest, tables: sorted };
    }
    this.usersByName.set(c.name, updated);
    return { status: 'USER', user: updated };
  }

  private isLastAdmin(user: UserRecord): boolean {
    if (user.role !== 'admin') return false;
    for (const other of this.usersByName.values()) if (other !== user && other.role === 'admin') return false;
    return true;
  }

  private reportReplicas(c: Extract<MetaCommand, { kind: 'ReportReplicas' }>): MetaResult {
    const partition = partitionId(c.partition);
    const current = this.assignmentsById.get(partition);
    const replicas = [...new Set(c.replicas)].map(nodeName);
    if (partition === META_GROUP) return this.reportMetaVoters(replicas);
    if (current === undefined) return { status: 'INVALID', message: `no partition ${partition} is assigned` };
    if (replicas.length === 0) return { status: 'INVALID', message: `a partition keeps at least one replica` };
    this.assignmentsById.set(partition, replicas);
    const target = this.targetsById.get(partition);
    if (target !== undefined && sameSet(target, replicas)) {
      // The target's order names the preferred leader; the set is what was reached.
      this.assignmentsById.set(partition, [...target]);
      this.targetsById.delete(partition);
    }
    this.forgetLeft();
    return { status: 'ASSIGNED', partition, replicas: this.assignmentsById.get(partition)! };
  }

  /** Recomputes every partition's target from the active members (placement.ts). */
  private replan(): void {
    const replicasOf = new Map<number, number>();
    for (const t of this.tablesByName.values()) replicasOf.set(t.id, t.replicas);
    for (const r of this.retiringById.values()) replicasOf.set(r.table.id, r.table.replicas);
    const partitions = [...this.assignmentsById].map(([id, current]) => ({
      id,
      replicas: replicasOf.get(tableIdOf(id) ?? -1) ?? current.length,
      // A partition already moving plans from where it is going.
      current: this.targetsById.get(id) ?? current,
    }));
    const plan = planPlacement({ members: this.activeMembers(), partitions });
    this.targetsById.clear();
    for (const [id, target] of plan) {
      if (target.length > 0 && !sameList(target, this.assignmentsById.get(id)!)) this.targetsById.set(id, target);
    }
  }

  /** The metastorage group's leader reached the voters `voters`: they are flagged, and a reached target dropped. */
  private reportMetaVoters(voters: readonly NodeName[]): MetaResult {
    if (voters.length === 0) return { status: 'INVALID', message: 'the metastorage group keeps at least one voter' };
    for (const m of this.membersByName.values()) {
      const name = nodeName(m.name);
      const meta = voters.includes(name);
      if ((m.meta === true) === meta) continue;
      const { meta: _, ...rest } = m;
      this.membersByName.set(name, meta ? { ...rest, meta: true } : rest);
    }
    if (this.metaTargetNodes !== undefined && sameSet(this.metaTargetNodes, voters)) this.metaTargetNodes = undefined;
    this.forgetLeft();
    return { status: 'ASSIGNED', partition: META_GROUP, replicas: [...voters] };
  }

  /** `name` votes in the metastorage group, or is to. */
  private metaVoting(name: NodeName): boolean {
    return (this.metaTargetNodes ?? this.metaVoters()).includes(name);
  }

  /**
   * The metastorage voters once `leaving` (if given) is gone: those voting now (or the target, while moving) that stay
   * active, then active members that vote in nothing, by name, up to META_VOTERS.
   */
  private metaPlan(leaving?: NodeName): NodeName[] {
    const active = this.activeMembers().filter((n) => n !== leaving);
    const kept = (this.metaTargetNodes ?? this.metaVoters()).filter((n) => active.includes(n));
    const added = active.filter((n) => !kept.includes(n)).slice(0, Math.max(0, META_VOTERS - kept.length));
    return [...kept, ...added];
  }

  /** Recomputes the metastorage group's target from the active members (none when its voters are already there). */
  private replanMeta(): void {
    if (this.membersByName.size === 0) return;
    const plan = this.metaPlan();
    this.metaTargetNodes = plan.length === 0 || sameSet(plan, this.metaVoters()) ? undefined : plan;
  }

  /** Leaving members that nothing names any more are forgotten, and their names kept as removed. */
  private forgetLeft(): void {
    for (const m of this.membersByName.values()) {
      if (m.state !== 'leaving') continue;
      const name = nodeName(m.name);
      const named = (lists: Iterable<readonly NodeName[]>) => [...lists].some((l) => l.includes(name));
      if (named(this.assignmentsById.values()) || named(this.targetsById.values())) continue;
      if (m.meta === true || this.metaTargetNodes?.includes(name) === true) continue;
      this.membersByName.delete(name);
      this.removedNames.add(name);
    }
  }

  /** Forgets retiring tables whose `retireAfter` lies a further grace before `ts` (see the module comment). */
  private forgetRetired(ts: HybridTimestamp): void {
    for (const [id, r] of this.retiringById) {
      if (ts < r.retireAfter + (r.retireAfter - r.dropTs)) continue;
      this.retiringById.delete(id);
      for (let index = 0; index < r.table.partitions; index++) {
        const partition = tablePartitionId(r.table.id, index);
        this.assignmentsById.delete(partition);
        this.targetsById.delete(partition);
        this.originsById.delete(partition);
      }
    }
  }

  /** Retiring tables count: their partitions still run, and a create/drop loop must not pile them up. */
  private capacityProblem(): string | undefined {
    return this.tablesByName.size + this.retiringById.size >= LIMITS.tablesMax
      ? `the cluster has ${LIMITS.tablesMax} tables, counting dropped ones still retiring`
      : undefined;
  }

  /** Replicas each node of `nodes` holds now. */
  private loads(nodes: readonly NodeName[]): Map<NodeName, number> {
    const load = new Map<NodeName, number>(nodes.map((n) => [n, 0]));
    for (const replicas of this.assignmentsById.values()) {
      for (const n of replicas) {
        const l = load.get(n);
        if (l !== undefined) load.set(n, l + 1);
      }
    }
    return load;
  }
}

function memberRecord(spec: MemberSpec, state: MemberState): MemberRecord {
  return spec.address === undefined ? { name: spec.name, state } : { name: spec.name, address: spec.address, state };
}

function sameSet(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((n) => b.includes(n));
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((n, i) => b[i] === n);
}

/** The `count` least-loaded nodes, ties broken by rotation distance from `start`; bumps their loads. */
function pickReplicas(
  nodes: readonly NodeName[],
  load: Map<NodeName, number>,
  count: number,
  start: number,
): NodeName[] {
  const n = nodes.length;
  const order = nodes
    .map((name, i) => ({ name, load: load.get(name)!, rank: (i - start + n) % n }))
    .sort((a, b) => a.load - b.load || a.rank - b.rank)
    .slice(0, count)
    .map((c) => c.name);
  for (const name of order) load.set(name, load.get(name)! + 1);
  return order;
}

/** Why a table definition is invalid on a cluster of `nodeCount` nodes, or undefined. */
export function tableProblem(name: unknown, options: Partial<TableOptions>, nodeCount: number): string | undefined {
  if (typeof name !== 'string' || name.length === 0 || name.length > LIMITS.tableNameCharsMax) {
    return `a table name is a string of 1 to ${LIMITS.tableNameCharsMax} characters`;
  }
  const { partitions, replicas } = options;
  if (!Number.isSafeInteger(partitions) || partitions! < 1 || partitions! > LIMITS.tablePartitionsMax) {
    return `partitions must be an integer from 1 to ${LIMITS.tablePartitionsMax}`;
  }
  if (!Number.isSafeInteger(replicas) || replicas! < 1 || replicas! > nodeCount) {
    return `replicas must be an integer from 1 to the number of nodes (${nodeCount})`;
  }
  return undefined;
}

export function encodeMetaCommand(command: MetaCommand): Uint8Array {
  return encode(command);
}

/** Decodes a command; anything malformed (a bug or foreign data) decodes as undefined and applies as a no-op. */
export function decodeMetaCommand(data: Uint8Array): MetaCommand | undefined {
  if (data.length === 0) return undefined;
  let value: unknown;
  try {
    value = decode(data);
  } catch {
    return undefined;
  }
  return parseMetaCommand(value);
}

/** The command `value` holds, or undefined if it is not one (also the receive-edge check of MetaCommandRequest). */
export function parseMetaCommand(value: unknown): MetaCommand | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const c = value as Record<string, unknown>;
  const requestId = c['requestId'];
  if (typeof requestId !== 'string') return undefined;
  const ts = commandTs(c['ts']);
  if (ts === undefined) return undefined;
  if (c['kind'] === 'InitMembers' && Array.isArray(c['members']) && c['members'].every(isMemberSpec)) {
    return { kind: 'InitMembers', requestId, ts, members: c['members'] };
  }
  if (c['kind'] === 'JoinNode' && isName(c['name']) && typeof c['address'] === 'string') {
    return { kind: 'JoinNode', requestId, ts, name: c['name'], address: c['address'] };
  }
  if (c['kind'] === 'RemoveNode' && isName(c['name']) && typeof c['dead'] === 'boolean') {
    return { kind: 'RemoveNode', requestId, ts, name: c['name'], dead: c['dead'] };
  }
  if (
    c['kind'] === 'ReportReplicas' &&
    typeof c['partition'] === 'string' &&
    Array.isArray(c['replicas']) &&
    c['replicas'].every(isName)
  ) {
    return { kind: 'ReportReplicas', requestId, ts, partition: c['partition'], replicas: c['replicas'] };
  }
  const userCommand = parseUserCommand(c, requestId, ts);
  if (userCommand !== undefined) return userCommand;
  if (c['kind'] === 'DropTable' && typeof c['name'] === 'string') {
    const graceMs = c['graceMs'] ?? 0;
    if (typeof graceMs !== 'number' || !Number.isSafeInteger(graceMs) || graceMs < 0) return undefined;
    return { kind: 'DropTable', requestId, name: c['name'], ts, graceMs };
  }
  if (
    c['kind'] === 'CreateTable' &&
    typeof c['name'] === 'string' &&
    typeof c['partitions'] === 'number' &&
    typeof c['replicas'] === 'number' &&
    Array.isArray(c['nodes']) &&
    c['nodes'].every((n) => typeof n === 'string')
  ) {
    return {
      kind: 'CreateTable',
      requestId,
      name: c['name'],
      partitions: c['partitions'],
      replicas: c['replicas'],
      nodes: c['nodes'] as string[],
      ts,
    };
  }
  return undefined;
}

function parseUserCommand(c: Record<string, unknown>, requestId: string, ts: HybridTimestamp): MetaCommand | undefined {
  switch (c['kind']) {
    case 'ProtectTimestamp':
      return isProtectedTimestamp(c['record']) && typeof c['renew'] === 'boolean'
        ? { kind: 'ProtectTimestamp', requestId, ts, record: c['record'], renew: c['renew'] }
        : undefined;
    case 'ReleaseTimestamp':
      return isName(c['id']) ? { kind: 'ReleaseTimestamp', requestId, ts, id: c['id'] } : undefined;
    case 'CreateUser':
      return isUserRecord(c['user']) ? { kind: 'CreateUser', requestId, ts, user: c['user'] } : undefined;
    case 'RemoveUser':
      return isName(c['name']) ? { kind: 'RemoveUser', requestId, ts, name: c['name'] } : undefined;
    case 'SetPassword': {
      const password = c['password'];
      if (!isName(c['name']) || !(password === undefined || isPasswordHash(password))) return undefined;
      return { kind: 'SetPassword', requestId, ts, name: c['name'], ...(password !== undefined && { password }) };
    }
    case 'GrantRole': {
      const { name, role, table } = c;
      if (!isName(name) || !(role === 'none' || isUserRole(role))) return undefined;
      if (table !== undefined && typeof table !== 'string') return undefined;
      return { kind: 'GrantRole', requestId, ts, name, role, ...(table !== undefined && { table }) };
    }
    default:
      return undefined;
  }
}

export function isUserRole(value: unknown): value is UserRole {
  return value === 'admin' || value === 'readwrite' || value === 'readonly';
}

function isPasswordHash(value: unknown): value is PasswordHash {
  if (!isRecord(value)) return false;
  const { algorithm, salt, hash, cost, blockSize, parallelization } = value;
  return (
    algorithm === 'scrypt' &&
    typeof salt === 'string' &&
    typeof hash === 'string' &&
    [cost, blockSize, parallelization].every((n) => Number.isSafeInteger(n) && (n as number) > 0)
  );
}

export function isUserRecord(value: unknown): value is UserRecord {
  if (!isRecord(value) || !isName(value['name'])) return false;
  const { role, tables, password } = value;
  if (role !== undefined && !isUserRole(role)) return false;
  if (password !== undefined && !isPasswordHash(password)) return false;
  if (tables === undefined) return true;
  return (
    Array.isArray(tables) &&
    tables.every(
      (t) =>
        Array.isArray(t) && t.length === 2 && typeof t[0] === 'string' && (t[1] === 'readwrite' || t[1] === 'readonly'),
    )
  );
}

function isName(value: unknown): value is string {
  return typeof value === 'string' && value.length > 0 && value.length <= LIMITS.identityCharsMax;
}

function isMemberSpec(value: unknown): value is MemberSpec {
  return (
    isRecord(value) && isName(value['name']) && (value['address'] === undefined || typeof value['address'] === 'string')
  );
}

export function isMemberRecord(value: unknown): value is MemberRecord {
  if (!isMemberSpec(value)) return false;
  const { state, dead, meta } = value as unknown as Record<string, unknown>;
  return (
    (state === 'active' || state === 'leaving') &&
    (dead === undefined || typeof dead === 'boolean') &&
    (meta === undefined || meta === true)
  );
}

function isAssignmentList(value: unknown): value is readonly (readonly [string, readonly string[]])[] {
  return (
    Array.isArray(value) &&
    value.every(
      (a) =>
        Array.isArray(a) &&
        a.length === 2 &&
        typeof a[0] === 'string' &&
        Array.isArray(a[1]) &&
        (a[1] as unknown[]).every((n) => typeof n === 'string'),
    )
  );
}

/** A command's timestamp: absent in entries written before commands carried one (reads as 0). */
function commandTs(value: unknown): HybridTimestamp | undefined {
  if (value === undefined) return NULL_TIMESTAMP;
  return isTimestamp(value) ? asTimestamp(value) : undefined;
}

function isTimestamp(value: unknown): value is bigint {
  return typeof value === 'bigint' && value >= 0n && value < 1n << 64n;
}

export function encodeMetaView(view: MetaView): Uint8Array {
  return encode(view);
}

export function decodeMetaView(data: Uint8Array): MetaView {
  const view = parseMetaView(decode(data));
  if (view === undefined) throw new BasaltError('STORAGE_CORRUPTED', 'malformed metastorage snapshot');
  return view;
}

/** The view `value` holds (a snapshot or a watch answer), or undefined if malformed; no `retiring` reads as none. */
export function parseMetaView(value: unknown): MetaView | undefined {
  if (!hasViewFields(value)) return undefined;
  const retiring = value['retiring'] ?? [];
  if (!Array.isArray(retiring) || !retiring.every(isRetiringTable)) return undefined;
  const members = value['members'] ?? [];
  if (!Array.isArray(members) || !members.every(isMemberRecord)) return undefined;
  const removed = value['removed'] ?? [];
  if (!Array.isArray(removed) || !removed.every(isName)) return undefined;
  const targets = value['targets'] ?? [];
  if (!isAssignmentList(targets)) return undefined;
  const origins = value['origins'] ?? value['assignments'];
  if (!isAssignmentList(origins)) return undefined;
  const metaTarget = value['metaTarget'];
  if (metaTarget !== undefined && !(Array.isArray(metaTarget) && metaTarget.length > 0 && metaTarget.every(isName))) {
    return undefined;
  }
  const users = value['users'] ?? [];
  if (!Array.isArray(users) || !users.every(isUserRecord)) return undefined;
  const protectedTimestamps = value['protectedTimestamps'] ?? [];
  if (!Array.isArray(protectedTimestamps) || !protectedTimestamps.every(isProtectedTimestamp)) return undefined;
  const view = { ...(value as unknown as MetaView), retiring, members, removed, targets, origins, users };
  return { ...view, protectedTimestamps };
}

/** A well-formed protected timestamp record (also the receive-edge check of results that carry one). */
export function isProtectedTimestamp(value: unknown): value is ProtectedTimestamp {
  return (
    isRecord(value) &&
    isName(value['id']) &&
    isName(value['owner']) &&
    isTimestamp(value['ts']) &&
    isTimestamp(value['expiresAt'])
  );
}

/**
 * The smallest `ts` of the protected timestamps not expired at `now` (a node's clock), or undefined: the floor of the
 * node's low watermark.
 */
export function protectedFloor(
  records: readonly ProtectedTimestamp[] | undefined,
  now: HybridTimestamp,
): HybridTimestamp | undefined {
  let floor: HybridTimestamp | undefined;
  for (const r of records ?? []) if (r.expiresAt >= now && (floor === undefined || r.ts < floor)) floor = r.ts;
  return floor;
}

function isRetiringTable(value: unknown): value is RetiringTable {
  if (!isRecord(value)) return false;
  return (
    isTableDescriptor(value['table']) &&
    isTimestamp(value['dropTs']) &&
    isTimestamp(value['retireAfter']) &&
    value['retireAfter'] >= value['dropTs']
  );
}

function hasViewFields(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as Record<string, unknown>;
  return (
    typeof v['revision'] === 'number' &&
    typeof v['nextTableId'] === 'number' &&
    Array.isArray(v['tables']) &&
    v['tables'].every(isTableDescriptor) &&
    isAssignmentList(v['assignments']) &&
    Array.isArray(v['recent']) &&
    v['recent'].every((r) => Array.isArray(r) && r.length === 2 && typeof r[0] === 'string' && isRecord(r[1]))
  );
}

export function isTableDescriptor(value: unknown): value is TableDescriptor {
  if (typeof value !== 'object' || value === null) return false;
  const t = value as Record<string, unknown>;
  return (
    typeof t['name'] === 'string' &&
    typeof t['id'] === 'number' &&
    typeof t['partitions'] === 'number' &&
    typeof t['replicas'] === 'number'
  );
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
