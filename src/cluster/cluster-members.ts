/**
 * This node's part in the cluster's membership (metastorage members, metastorage-state.ts):
 *  - bootstrap: while the metastorage has no members recorded, it proposes the nodes the cluster was founded with
 *    (`InitMembers`; the first to apply wins, the others are answered with it);
 *  - its own record: a node that is not a member asks to join (`JoinNode`, with the address it advertises), and a
 *    founding member whose record lacks its advertised address adds it the same way; a node the cluster removed is
 *    told so once and stops asking (it must not come back under the same name);
 *  - peers: every member with an address is dialed there (a node that joined after this one started, or one that
 *    moved), and liveness counts the recorded members;
 *  - moves: the partition mover runs beside it (partition-mover.ts).
 * One check at a time, every `MEMBERS_CHECK_INTERVAL_MS` on the injected timers; a failed command is retried by the
 * next check. A check that finds nothing to do (the usual case once the node is a member) waits
 * `MEMBERS_IDLE_CHECK_INTERVAL_MS` for the next; a new view brings it forward (`viewChanged`).
 */
import { BasaltError, isBasaltError } from '../core/errors.js';
import type { NodeName } from '../core/ids.js';
import { PeriodicTask, type Timers } from '../env/timers.js';
import type { MemberRecord, MetaView } from './metastorage-state.js';

export const MEMBERS_CHECK_INTERVAL_MS = 200;
export const MEMBERS_IDLE_CHECK_INTERVAL_MS = 2_000;

/**
 * A node that joins with no stored data must not take the place of a member that still votes in partitions under its
 * name: it would come back as an empty voter of their groups (a Raft voter whose log is gone can make a majority forget
 * committed entries). Decided on the first view that lists this node as a member: if it is already a replica of a
 * partition there, the name was in use before this incarnation joined, and the node hosts nothing (the views stop
 * reaching its partition reconciler). A name that is new is not in any assignment when its record first appears.
 */
export class RejoinGuard {
  private decision: 'allow' | 'refuse' | undefined;

  constructor(
    private readonly self: NodeName,
    /** This node joins (`--join`) and has no stored partition or Raft log. */
    private readonly emptyJoin: boolean,
  ) {}

  /**
   * Whether `view` may reach the partition reconciler (and start the metastorage group here); the error to report once
   * when the node is refused.
   */
  admit(view: MetaView): { readonly admit: boolean; readonly refusal?: BasaltError } {
    if (!this.emptyJoin || this.decision === 'allow') return { admit: true };
    if (this.decision === 'refuse') return { admit: false };
    if (!(view.members ?? []).some((m) => m.name === this.self)) return { admit: true };
    const voter =
      view.assignments.some(([, replicas]) => replicas.includes(this.self)) ||
      (view.members ?? []).some((m) => m.name === this.self && m.meta === true);
    this.decision = voter ? 'refuse' : 'allow';
    if (!voter) return { admit: true };
    const refusal = new BasaltError(
      'INVALID_ARGUMENT',
      `${this.self} is a member that still holds replicas, and this node has no data: it would rejoin as an empty ` +
        `replica. Remove the old one first (basalt node remove --dead ${this.self}) or join under a new name`,
      { node: this.self },
    );
    return { admit: false, refusal };
  }
}

export interface ClusterMembersPorts {
  readonly self: NodeName;
  /** The nodes the cluster was founded with (every node is configured with the same ones). */
  readonly founders: readonly NodeName[];
  /** Where the others dial this node; undefined where addresses mean nothing (the simulator). */
  readonly advertise: string | undefined;
  readonly view: () => MetaView;
  readonly initMembers: (founders: readonly NodeName[]) => Promise<unknown>;
  readonly join: (name: NodeName, address: string) => Promise<unknown>;
  /** Dials `name` at `address` from now on (absent where the transport needs no addresses). */
  readonly addPeer: ((name: NodeName, address: string) => void) | undefined;
  readonly setMemberCount: (count: number) => void;
  readonly timers: Timers;
  /** Told once, when the cluster refuses this node (e.g. its name was removed). */
  readonly onRefused: (error: unknown) => void;
}

export class ClusterMembers {
  private readonly task: PeriodicTask;
  private readonly dialed = new Map<NodeName, string>();
  private refused = false;
  private memberCount = 0;

  constructor(private readonly ports: ClusterMembersPorts) {
    this.task = new PeriodicTask(
      ports.timers,
      MEMBERS_CHECK_INTERVAL_MS,
      () => this.check(),
      () => {},
    );
  }

  start(): void {
    this.task.start();
  }

  stop(): void {
    this.task.stop();
  }

  /** The metastorage view changed: the next check runs now. */
  viewChanged(): void {
    this.task.runSoon();
  }

  /**
   * One check (see the module comment); resolves when its command, if any, settled. Returns the delay before the
   * next check when it had nothing to do.
   */
  check(): Promise<unknown> | number | undefined {
    const { ports } = this;
    const view = ports.view();
    if (view.revision === 0) return undefined;
    const members = view.members ?? [];
    if (members.length === 0) return ports.initMembers(ports.founders).catch(() => undefined);
    this.dial(members);
    const mine = members.find((m) => m.name === ports.self);
    if (this.refused) return MEMBERS_IDLE_CHECK_INTERVAL_MS;
    if ((view.removed ?? []).includes(ports.self)) {
      this.refuse(new Error(`${ports.self} was removed from the cluster`));
      return undefined;
    }
    const address = ports.advertise ?? '';
    if (mine === undefined || (ports.advertise !== undefined && mine.state === 'active' && mine.address !== address)) {
      return ports.join(ports.self, address).catch((error: unknown) => {
        if (isBasaltError(error, 'INVALID_ARGUMENT')) this.refuse(error);
      });
    }
    return MEMBERS_IDLE_CHECK_INTERVAL_MS;
  }

  private dial(members: readonly MemberRecord[]): void {
    const count = members.length;
    if (count !== this.memberCount) {
      this.memberCount = count;
      this.ports.setMemberCount(count);
    }
    if (this.ports.addPeer === undefined) return;
    for (const m of members) {
      const name = m.name as NodeName;
      if (name === this.ports.self || m.address === undefined || m.address === '') continue;
      if (this.dialed.get(name) === m.address) continue;
      this.dialed.set(name, m.address);
      this.ports.addPeer(name, m.address);
    }
  }

  private refuse(error: unknown): void {
    this.refused = true;
    this.ports.onRefused(error);
  }
}
