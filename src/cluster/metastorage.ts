/**
 * The metastorage service of one node. Members run the `meta` Raft group with `MetaState` as its state machine; every
 * node, member or not, keeps the latest state it knows and reports each newer revision to `onView` (the node then
 * starts and stops its partition replicas).
 *
 * Members: the first three founders by name to begin with. The group moves like a partition (partition-mover.ts, the
 * view's `metaTarget`): a node the target names that does not run the group yet starts it when it learns so (it is
 * then a learner the leader catches up, then a voter), and a node that runs the group from its stored log (a member
 * that restarted) starts it at once. While a new member's group catches up, it keeps showing the state it watched, so
 * that nothing it reported goes backwards.
 *
 * How non-members learn the state: a watch long-poll. A non-member asks a member (the known leader first, else the
 * next live member in turn) for anything newer than its revision; the member answers at once if it has something,
 * else when its next entry applies, or after `metaWatchWaitMs` with nothing. Revisions are log indexes, so an answer
 * from a lagging member is simply older and ignored. Members learn from their own applies.
 *
 * Commands: any node may call `createTable`/`dropTable`; the command goes to the meta leader (locally if this node is
 * it, else as a MetaCommandRequest), retried on NOT_LEADER (following the hint), lost connections and timeouts until
 * `metaCommandTimeoutMs`. Each command has a request id, so a retry after an unknown outcome gets the first result.
 * Each command also carries the proposer's HLC reading, fixed before the first attempt, so every replica applies the
 * same timestamps (a drop's retirement deadline derives from it).
 */
import { BasaltError, isBasaltError } from '../core/errors.js';
import { type HybridTimestamp, type NodeName, nodeName, type PartitionId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { META_GROUP } from '../core/partitioning.js';
import type { Clock } from '../env/clock.js';
import type { Random } from '../env/random.js';
import { sleep, type TimerHandle, type Timers } from '../env/timers.js';
import type { HybridClock } from '../hlc/hybrid-clock.js';
import { addMs, NULL_TIMESTAMP } from '../hlc/timestamp.js';
import type { Messenger } from '../net/messenger.js';
import type { RaftDriver } from '../raft/driver.js';
import type { Entry, Snapshot } from '../raft/types.js';
import type { GroupStateMachine, GroupStateMachines } from './group-state-machines.js';
import type { NodeMessage } from './messages.js';
import {
  decodeMetaCommand,
  decodeMetaView,
  encodeMetaCommand,
  encodeMetaView,
  type MemberRecord,
  type MemberSpec,
  type MetaCommand,
  type MetaResult,
  MetaState,
  type MetaView,
  type PasswordHash,
  type ProtectedTimestamp,
  parseMetaView,
  type TableDescriptor,
  type TableOptions,
  tableProblem,
  type UserRecord,
  type UserRole,
} from './metastorage-state.js';

export interface MetastorageOptions {
  readonly self: NodeName;
  /** Voters of the meta group. */
  readonly members: readonly NodeName[];
  /** Other nodes a non-member may ask for the state (and route commands through) until it reaches a member. */
  readonly seeds?: readonly NodeName[];
  /** Every node of the cluster (assignments draw from these). */
  readonly nodes: readonly NodeName[];
  readonly messenger: Messenger<NodeMessage>;
  readonly raft: RaftDriver;
  readonly stateMachines: GroupStateMachines;
  readonly timers: Timers;
  readonly clock: Clock;
  /** Timestamps of commands (a drop's timestamp, and its grace: tx timeout + 2·this clock's max skew). */
  readonly hlc: HybridClock;
  readonly random: Random;
  /** Whether a peer is live now (watch and command targets prefer live members). */
  readonly isLive: (name: NodeName) => boolean;
  /** Whether a peer may take the leadership over before a stop (live and not stopping itself; default `isLive`). */
  readonly canSucceed?: (name: NodeName) => boolean;
  /** Whether a watched view that names this node a metastorage voter may start the group here (default yes). */
  readonly mayRunGroup?: (view: MetaView) => boolean;
  /** Called with every newer state this node learns, in revision order. */
  readonly onView: (view: MetaView) => void;
  readonly watchWaitMs?: number;
  readonly commandTimeoutMs?: number;
}

interface Watcher {
  readonly sinceRevision: number;
  readonly answer: (body: NodeMessage) => void;
  readonly timer: TimerHandle;
}

/** Pause between two attempts of a command or a watch that failed. */
const RETRY_PAUSE_MS = 50;
/** Poll period while handing the leadership over before a stop. */
/** How long a confirmation that this node's metadata was current counts (see `isCurrent`). */
export const META_CONFIRM_FRESH_MS = 1_000;
const HAND_OVER_POLL_MS = 10;
/** One attempt of a command at one member; a healthy leader applies it in milliseconds. */
const COMMAND_ATTEMPT_TIMEOUT_MS = 3_000;

export class Metastorage implements GroupStateMachine {
  private member: boolean;
  private readonly options: MetastorageOptions;
  private readonly watchWaitMs: number;
  private readonly commandTimeoutMs: number;
  /** The newest state this node knows: what it reports, answers and serves. */
  private state = new MetaState();
  /** A member's Raft state machine: `state` itself once it caught up with what this node had watched. */
  private machine: MetaState | undefined;
  /** `state.view()` as of the last change (built once per change: readers ask for it on every request). */
  private cachedView: MetaView | undefined;
  /** The leader's revision as last asked (see `isCurrent`), and when (monotonic ms). */
  private confirmed: { readonly revision: number; readonly atMs: number } | undefined;
  private confirming = false;
  private leaderHint: NodeName | undefined;
  private nextTarget = 0;
  private readonly watchers = new Set<Watcher>();
  private readonly stopSignal = new AbortController();
  private readonly unsubscribe: Array<() => void> = [];

  constructor(options: MetastorageOptions) {
    this.options = options;
    this.member = options.members.includes(options.self) || options.raft.hasStoredGroup(META_GROUP);
    this.watchWaitMs = options.watchWaitMs ?? LIMITS.metaWatchWaitMs;
    this.commandTimeoutMs = options.commandTimeoutMs ?? LIMITS.metaCommandTimeoutMs;
  }

  /** Registers handlers; a member starts its Raft group, a non-member its watch loop. */
  async start(): Promise<void> {
    const m = this.options.messenger;
    this.unsubscribe.push(
      m.handle('MetaCommandRequest', (body) => this.onCommandRequest(body.command)),
      m.handle('MetaWatchRequest', (body) => this.onWatchRequest(body.sinceRevision)),
    );
    if (this.member) {
      await this.runGroup();
    } else {
      void this.watchLoop();
    }
  }

  /** This node runs the metastorage group (it votes in it, or is to). */
  get isMember(): boolean {
    return this.member;
  }

  /** Starts the group here: from its stored log, or empty (a learner the leader catches up). */
  private async runGroup(): Promise<void> {
    this.member = true;
    this.machine = this.state.revision === 0 ? this.state : new MetaState();
    this.unsubscribe.push(this.options.stateMachines.register(META_GROUP, this));
    await this.options.raft.addGroup(META_GROUP, this.options.members);
  }

  /** A watched view names this node among the metastorage group's voters or its target: it starts the group. */
  private joinGroupIfNamed(view: MetaView): void {
    if (this.member || this.stopSignal.signal.aborted) return;
    const self = this.options.self;
    const named =
      view.metaTarget?.includes(self) === true || (view.members ?? []).some((m) => m.name === self && m.meta);
    if (!named || this.options.mayRunGroup?.(view) === false) return;
    this.runGroup().catch((error: unknown) => {
      // The group could not start (the node is stopping): watch again.
      this.member = false;
      this.machine = undefined;
      if (!this.stopSignal.signal.aborted) void this.watchLoop();
      void error;
    });
  }

  /** Voters of the metastorage group as this node knows them: its Raft status if it runs the group, else the state. */
  private metaVoters(): readonly NodeName[] {
    const status = this.member ? this.options.raft.status(META_GROUP) : undefined;
    if (status !== undefined) return status.voters;
    const recorded = this.state.metaVoters();
    return recorded.length > 0 ? recorded : this.options.members;
  }

  /**
   * Before a graceful stop: a leader hands the metastorage group to a live member, so that metadata stays writable
   * without waiting for an election timeout. Resolves once this node is no longer the leader, no member is live, or
   * `waitMs` has passed.
   */
  async handOver(waitMs: number): Promise<void> {
    const { raft, clock, timers, self, isLive } = this.options;
    const canSucceed = this.options.canSucceed ?? isLive;
    const deadlineMs = clock.monotonicMs() + waitMs;
    while (raft.status(META_GROUP)?.role === 'leader' && clock.monotonicMs() < deadlineMs) {
      const to = this.metaVoters().find((name) => name !== self && canSucceed(name));
      if (to === undefined) return;
      raft.transferLeader(META_GROUP, to);
      await sleep(timers, HAND_OVER_POLL_MS);
    }
  }

  stop(): void {
    this.stopSignal.abort(new BasaltError('NODE_UNAVAILABLE', 'metastorage stopped'));
    for (const w of this.watchers) this.options.timers.clearTimer(w.timer);
    this.watchers.clear();
    for (const u of this.unsubscribe.splice(0)) u();
  }

  get revision(): number {
    return this.state.revision;
  }

  view(): MetaView {
    this.cachedView ??= this.state.view();
    return this.cachedView;
  }

  tables(): TableDescriptor[] {
    return this.state.tables();
  }

  /**
   * Whether this node's state was, within the last `META_CONFIRM_FRESH_MS`, at least the revision the metastorage
   * leader had: only then may a table missing here be reported missing (a node that lags behind the log, e.g. just
   * after a restart, would otherwise answer UNKNOWN_TABLE for a table that exists). When not, it asks the leader for
   * its revision in the background, so that a retry shortly after can tell.
   */
  isCurrent(): boolean {
    const { clock, self } = this.options;
    const now = clock.monotonicMs();
    if (this.isMember && this.leader() === self) return this.appliedAll();
    const c = this.confirmed;
    if (c !== undefined && now - c.atMs <= META_CONFIRM_FRESH_MS && this.state.revision >= c.revision) return true;
    if (!this.confirming) void this.confirm();
    return false;
  }

  /** A member that applied every entry its log holds (a leader's log holds every committed entry). */
  private appliedAll(): boolean {
    const status = this.options.raft.status(META_GROUP);
    return status !== undefined && status.applied >= status.lastIndex;
  }

  private async confirm(): Promise<void> {
    const leader = this.leader();
    this.confirming = true;
    try {
      const target = leader !== undefined && leader !== this.options.self ? leader : this.nextMember();
      const atMs = this.options.clock.monotonicMs();
      const response = await this.options.messenger.request<Extract<NodeMessage, { kind: 'MetaWatchResponse' }>>(
        target,
        { kind: 'MetaWatchRequest', sinceRevision: -1 },
        { timeoutMs: COMMAND_ATTEMPT_TIMEOUT_MS, signal: this.stopSignal.signal },
      );
      const view = response.view === null ? undefined : parseMetaView(response.view);
      if (view !== undefined) this.confirmed = { revision: view.revision, atMs };
    } catch {
      // Asked again on the next miss.
    } finally {
      this.confirming = false;
    }
  }

  table(name: string): TableDescriptor | undefined {
    return this.state.table(name);
  }

  /** The meta leader as this node knows it. */
  leader(): NodeName | undefined {
    if (this.isMember) return this.options.raft.status(META_GROUP)?.leader ?? undefined;
    return this.leaderHint;
  }

  async createTable(name: string, options: TableOptions): Promise<TableDescriptor> {
    const problem = tableProblem(name, options, this.nodeCount());
    if (problem !== undefined) throw new BasaltError('INVALID_ARGUMENT', problem, { table: name });
    const result = await this.execute({
      kind: 'CreateTable',
      requestId: this.options.random.uuid(),
      name,
      partitions: options.partitions,
      replicas: options.replicas,
      nodes: this.placementNodes(options.replicas),
      ts: this.options.hlc.now(),
    });
    return tableOf(result);
  }

  /** The nodes replicas may go to: the active members once recorded, else the nodes this one started with. */
  private nodeCount(): number {
    const active = this.state.activeMembers().length;
    return active > 0 ? active : new Set(this.options.nodes).size;
  }

  /**
   * The nodes a new table's replicas are drawn from: the live ones (this node included) when there are enough of
   * them, so that a table created while a node is down gets replicas that can elect; else every node.
   */
  private placementNodes(replicas: number): string[] {
    const active = this.state.activeMembers();
    const nodes = active.length > 0 ? active : this.options.nodes;
    const live = nodes.filter((n) => n === this.options.self || this.options.isLive(n));
    return live.length >= replicas ? live : [...nodes];
  }

  async dropTable(name: string): Promise<TableDescriptor> {
    const { hlc, random } = this.options;
    return tableOf(
      await this.execute({
        kind: 'DropTable',
        requestId: random.uuid(),
        name,
        ts: hlc.now(),
        graceMs: LIMITS.txTimeoutMsDefault + 2 * hlc.maxClockSkewMs,
      }),
    );
  }

  /** Records the members a cluster started with; once recorded, answers the members as they are. */
  async initMembers(members: readonly MemberSpec[]): Promise<readonly MemberRecord[]> {
    const { hlc, random } = this.options;
    return membersOf(await this.execute({ kind: 'InitMembers', requestId: random.uuid(), ts: hlc.now(), members }));
  }

  /** Adds `name` (dialed at `address`) as an active member; its share of replicas is moved onto it. */
  async joinNode(name: string, address: string): Promise<readonly MemberRecord[]> {
    const { hlc, random } = this.options;
    return membersOf(await this.execute({ kind: 'JoinNode', requestId: random.uuid(), ts: hlc.now(), name, address }));
  }

  /** Starts removing `name`: its replicas move to the other members (a dead one's are rebuilt from the others). */
  async removeNode(name: string, options: { readonly dead?: boolean } = {}): Promise<readonly MemberRecord[]> {
    const { hlc, random } = this.options;
    return membersOf(
      await this.execute({
        kind: 'RemoveNode',
        requestId: random.uuid(),
        ts: hlc.now(),
        name,
        dead: options.dead === true,
      }),
    );
  }

  /** The client protocol's user `name`, as this node's state has it. */
  user(name: string): UserRecord | undefined {
    return this.state.user(name);
  }

  users(): UserRecord[] {
    return this.state.users();
  }

  /** Adds a user; ALREADY_EXISTS if the name is taken. The password, if any, comes hashed. */
  async createUser(user: UserRecord): Promise<UserRecord> {
    const { hlc, random } = this.options;
    return userOf(await this.execute({ kind: 'CreateUser', requestId: random.uuid(), ts: hlc.now(), user }));
  }

  async removeUser(name: string): Promise<UserRecord> {
    const { hlc, random } = this.options;
    return userOf(await this.execute({ kind: 'RemoveUser', requestId: random.uuid(), ts: hlc.now(), name }));
  }

  /** Replaces the user's password hash (undefined: client certificate only). */
  async setPassword(name: string, password: PasswordHash | undefined): Promise<UserRecord> {
    const { hlc, random } = this.options;
    const command = { kind: 'SetPassword', requestId: random.uuid(), ts: hlc.now(), name } as const;
    return userOf(await this.execute(password === undefined ? command : { ...command, password }));
  }

  /** Sets the user's cluster-wide role, or its role on `table`; `none` takes it away. */
  async grantRole(name: string, role: UserRole | 'none', table?: string): Promise<UserRecord> {
    const { hlc, random } = this.options;
    const command = { kind: 'GrantRole', requestId: random.uuid(), ts: hlc.now(), name, role } as const;
    return userOf(await this.execute(table === undefined ? command : { ...command, table }));
  }

  /**
   * Protects `ts` from the low watermark of every node for `lifetimeMs` (at most LIMITS.protectedTimestampLifetimeMaxMs)
   * under a new id; INVALID_ARGUMENT when LIMITS.protectedTimestampsMax exist.
   */
  async protectTimestamp(ts: HybridTimestamp, owner: string, lifetimeMs: number): Promise<ProtectedTimestamp> {
    const { hlc, random } = this.options;
    const now = hlc.now();
    const record = { id: random.uuid(), ts, expiresAt: addMs(now, lifetimeMs), owner };
    return protectedOf(
      await this.execute({ kind: 'ProtectTimestamp', requestId: random.uuid(), ts: now, record, renew: false }),
    );
  }

  /** Moves the expiry of `id` (held by `owner`) to `lifetimeMs` from now; NOT_FOUND once it lapsed or was released. */
  async renewTimestamp(id: string, owner: string, lifetimeMs: number): Promise<ProtectedTimestamp> {
    const { hlc, random } = this.options;
    const now = hlc.now();
    const renewed = { id, ts: NULL_TIMESTAMP, expiresAt: addMs(now, lifetimeMs), owner };
    return protectedOf(
      await this.execute({ kind: 'ProtectTimestamp', requestId: random.uuid(), ts: now, record: renewed, renew: true }),
    );
  }

  /** Releases the protected timestamp `id` (a lapsed or released one: nothing to do). */
  async releaseTimestamp(id: string): Promise<void> {
    const { hlc, random } = this.options;
    const result = await this.execute({ kind: 'ReleaseTimestamp', requestId: random.uuid(), ts: hlc.now(), id });
    if (result.status !== 'PROTECTED' && result.status !== 'UNKNOWN_PROTECTED_TS') throw unexpected(result);
  }

  /** A partition's leader reached the configuration `replicas` on the way to its target. */
  async reportReplicas(partition: PartitionId, replicas: readonly NodeName[]): Promise<readonly NodeName[]> {
    const { hlc, random } = this.options;
    const result = await this.execute({
      kind: 'ReportReplicas',
      requestId: random.uuid(),
      ts: hlc.now(),
      partition,
      replicas,
    });
    if (result.status === 'ASSIGNED') return result.replicas.map(nodeName);
    throw unexpected(result);
  }

  // ------------------------------------------------------------------ state machine (members)

  appliedIndex(): number {
    return this.requireMachine().revision;
  }

  apply(entries: readonly Entry[]): void {
    const machine = this.requireMachine();
    for (const e of entries) machine.apply(e.index, e.kind === 'data' ? decodeMetaCommand(e.data) : undefined);
    this.caughtUp(machine);
  }

  snapshot(): Uint8Array {
    return encodeMetaView(this.requireMachine().view());
  }

  restore(snapshot: Snapshot): void {
    this.machine = MetaState.fromView(decodeMetaView(snapshot.data));
    this.caughtUp(this.machine);
  }

  private requireMachine(): MetaState {
    if (this.machine === undefined) throw new BasaltError('INTERNAL', 'the metastorage group does not run here');
    return this.machine;
  }

  /** The state machine advanced: once it holds what this node had, it is the state, and newer states are told. */
  private caughtUp(machine: MetaState): void {
    if (machine !== this.state && machine.revision < this.state.revision) return;
    this.state = machine;
    this.cachedView = undefined;
    this.published();
  }

  // ------------------------------------------------------------------ commands

  private async execute(command: MetaCommand): Promise<MetaResult> {
    const { clock } = this.options;
    const deadlineMs = clock.monotonicMs() + this.commandTimeoutMs;
    let lastError: unknown;
    while (clock.monotonicMs() < deadlineMs && !this.stopSignal.signal.aborted) {
      const target = this.commandTarget();
      try {
        if (target === this.options.self) return await this.withTimeout(this.proposeLocally(command));
        const remainingMs = Math.max(1, deadlineMs - clock.monotonicMs());
        const response = await this.options.messenger.request<Extract<NodeMessage, { kind: 'MetaCommandResponse' }>>(
          target,
          { kind: 'MetaCommandRequest', command },
          { timeoutMs: Math.min(remainingMs, COMMAND_ATTEMPT_TIMEOUT_MS), signal: this.stopSignal.signal },
        );
        this.leaderHint = undefined;
        return response.result;
      } catch (error) {
        if (!isBasaltError(error) || !error.retryable) {
          if (!isBasaltError(error, 'NOT_FOUND')) throw error;
        }
        lastError = error;
        this.learnLeader(target, error);
        await this.pause();
      }
    }
    throw new BasaltError('TIMEOUT', `metastorage command ${command.kind} did not complete`, {
      command: command.kind,
      lastError: String(lastError),
    });
  }

  private async proposeLocally(command: MetaCommand): Promise<MetaResult> {
    await this.options.raft.propose(META_GROUP, encodeMetaCommand(command));
    const result = this.requireMachine().resultOf(command.requestId);
    if (result === undefined) throw new BasaltError('INTERNAL', 'an applied metastorage command left no result');
    return result;
  }

  /** Fails with TIMEOUT after one attempt's time; the proposal may still apply (the request id dedupes a retry). */
  private withTimeout<T>(promise: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = this.options.timers.setTimer(
        () => reject(new BasaltError('TIMEOUT', 'metastorage proposal did not apply in time')),
        COMMAND_ATTEMPT_TIMEOUT_MS,
      );
      promise.then(
        (value) => {
          this.options.timers.clearTimer(timer);
          resolve(value);
        },
        (error: unknown) => {
          this.options.timers.clearTimer(timer);
          reject(error);
        },
      );
    });
  }

  private onCommandRequest(command: MetaCommand): Promise<NodeMessage> {
    if (!this.isMember) throw this.notLeader();
    const status = this.options.raft.status(META_GROUP);
    if (status?.role !== 'leader') throw this.notLeader();
    return this.proposeLocally(command).then((result) => ({ kind: 'MetaCommandResponse', result }));
  }

  private notLeader(): BasaltError {
    return new BasaltError('NOT_LEADER', `${this.options.self} is not the metastorage leader`, {
      group: META_GROUP,
      leader: this.leader() ?? null,
    });
  }

  /** The leader named by the last refusal, else the known leader, else the next live member in turn. */
  private commandTarget(): NodeName {
    const hint = this.leaderHint ?? this.leader();
    if (hint !== undefined && (hint === this.options.self || this.options.isLive(hint))) return hint;
    return this.nextMember();
  }

  private nextMember(): NodeName {
    const { self } = this.options;
    const members = [...new Set([...this.metaVoters(), ...this.options.members, ...(this.options.seeds ?? [])])];
    for (let i = 0; i < members.length; i++) {
      const candidate = members[(this.nextTarget + i) % members.length]!;
      if (candidate === self || this.options.isLive(candidate)) {
        this.nextTarget = (this.nextTarget + i + 1) % members.length;
        return candidate;
      }
    }
    const fallback = members[this.nextTarget % members.length]!;
    this.nextTarget = (this.nextTarget + 1) % members.length;
    return fallback;
  }

  private learnLeader(target: NodeName, error: unknown): void {
    const hinted = isBasaltError(error, 'NOT_LEADER') ? error.details?.['leader'] : undefined;
    const known = (name: string) =>
      this.metaVoters().includes(name as NodeName) || this.options.members.includes(name as NodeName);
    if (typeof hinted === 'string' && hinted !== target && known(hinted)) {
      this.leaderHint = hinted as NodeName;
    } else {
      this.leaderHint = undefined;
    }
  }

  private pause(): Promise<void> {
    return sleep(this.options.timers, RETRY_PAUSE_MS, this.stopSignal.signal).catch(() => {});
  }

  // ------------------------------------------------------------------ watch

  private onWatchRequest(sinceRevision: number): NodeMessage | Promise<NodeMessage> {
    // A confirmation (see `isCurrent`) is answered only by a member whose state holds every entry of its log.
    if (sinceRevision < 0 && this.isMember && !this.appliedAll()) return this.watchAnswer(null);
    if (this.state.revision > sinceRevision) return this.watchAnswer();
    if (this.watchers.size >= LIMITS.metaWatchersMax) return this.watchAnswer(null);
    return new Promise<NodeMessage>((answer) => {
      const watcher: Watcher = {
        sinceRevision,
        answer,
        timer: this.options.timers.setTimer(() => {
          this.watchers.delete(watcher);
          answer(this.watchAnswer(null));
        }, this.watchWaitMs),
      };
      this.watchers.add(watcher);
    });
  }

  private watchAnswer(view: MetaView | null = this.state.view()): NodeMessage {
    return { kind: 'MetaWatchResponse', view, leader: this.leader() ?? null };
  }

  /** A member's state advanced: answer waiting watchers, tell the node. */
  private published(): void {
    if (this.watchers.size > 0) {
      const answer = this.watchAnswer();
      for (const w of [...this.watchers]) {
        if (w.sinceRevision >= this.state.revision) continue;
        this.watchers.delete(w);
        this.options.timers.clearTimer(w.timer);
        w.answer(answer);
      }
    }
    this.options.onView(this.view());
  }

  private async watchLoop(): Promise<void> {
    const signal = this.stopSignal.signal;
    while (!signal.aborted && !this.member) {
      const target =
        this.leaderHint !== undefined && this.options.isLive(this.leaderHint) ? this.leaderHint : this.nextMember();
      try {
        const response = await this.options.messenger.request<Extract<NodeMessage, { kind: 'MetaWatchResponse' }>>(
          target,
          { kind: 'MetaWatchRequest', sinceRevision: this.state.revision },
          { timeoutMs: this.watchWaitMs + LIMITS.metaWatchWaitMs, signal },
        );
        this.leaderHint = (response.leader ?? undefined) as NodeName | undefined;
        const view = response.view === null ? undefined : parseMetaView(response.view);
        if (view !== undefined && view.revision > this.state.revision && !this.member) {
          this.state = MetaState.fromView(view);
          this.cachedView = undefined;
          this.options.onView(view);
          this.joinGroupIfNamed(view);
        }
      } catch {
        this.leaderHint = undefined;
        await this.pause();
      }
    }
  }
}

function membersOf(result: MetaResult): readonly MemberRecord[] {
  switch (result.status) {
    case 'MEMBERS':
      return result.members;
    case 'UNKNOWN_NODE':
      throw new BasaltError('NOT_FOUND', `no member named ${result.name}`, { node: result.name });
    default:
      throw unexpected(result);
  }
}

function userOf(result: MetaResult): UserRecord {
  switch (result.status) {
    case 'USER':
      return result.user;
    case 'USER_EXISTS':
      throw new BasaltError('ALREADY_EXISTS', `user ${result.name} already exists`, { user: result.name });
    case 'UNKNOWN_USER':
      throw new BasaltError('NOT_FOUND', `no user named ${result.name}`, { user: result.name });
    default:
      throw unexpected(result);
  }
}

function protectedOf(result: MetaResult): ProtectedTimestamp {
  switch (result.status) {
    case 'PROTECTED':
      return result.record;
    case 'UNKNOWN_PROTECTED_TS':
      throw new BasaltError('NOT_FOUND', `protected timestamp ${result.id} has lapsed or was released`, {
        id: result.id,
      });
    default:
      throw unexpected(result);
  }
}

/** A result a command cannot have (INVALID is the one every command may answer). */
function unexpected(result: MetaResult): BasaltError {
  if (result.status === 'INVALID') return new BasaltError('INVALID_ARGUMENT', result.message);
  return new BasaltError('INTERNAL', `unexpected metastorage result ${result.status}`);
}

function tableOf(result: MetaResult): TableDescriptor {
  switch (result.status) {
    case 'OK':
      return result.table;
    case 'ALREADY_EXISTS':
      throw new BasaltError('ALREADY_EXISTS', `table ${result.table.name} already exists`, {
        table: result.table.name,
      });
    case 'UNKNOWN_TABLE':
      throw new BasaltError('UNKNOWN_TABLE', `no table named ${result.name}`, { table: result.name });
    default:
      throw unexpected(result);
  }
}
