/**
 * A simulated cluster for the replica handler tests (not exported from the package): three nodes, each hosting replicas
 * of P0 (the commit partition) and P1 over the real Raft driver on the simulator's virtual time. Every member runs the
 * same stack; a subclass wires each node's request table (and whatever else that node needs) in `wire`, and may
 * reroute delivered requests in `dispatch`. Requests go through `deliver`, which behaves as the messenger: the receiver
 * absorbs the sender's timestamp on arrival and the sender the receiver's on the way back, and bodies and errors cross
 * the wire codec both ways.
 *
 * The simulator is injected (`SimulatedEnv`): replica code may not import src/sim, the test files may.
 */

import assert from 'node:assert/strict';
import { BasaltError, type ErrorData, toErrorData } from '../core/errors.js';
import { type LogIndex, type NodeId, type NodeName, nodeName, type PartitionId, type TxId } from '../core/ids.js';
import type { Clock } from '../env/clock.js';
import type { Random } from '../env/random.js';
import type { Timers } from '../env/timers.js';
import { HybridClock } from '../hlc/hybrid-clock.js';
import { addMs } from '../hlc/timestamp.js';
import { decode, encode } from '../net/codec.js';
import { RaftDriver, type RaftTransport } from '../raft/driver.js';
import { MemoryLogStorage } from '../raft/memory-log-storage.js';
import type { Entry, Snapshot } from '../raft/types.js';
import { PartitionDirectory } from '../replica/partition/partition-directory.js';
import { PartitionReplica } from '../replica/partition/partition-replica.js';
import { leaseTiming } from '../replica/partition/primary.js';
import { dispatchTxRequest, type TxRequestTable, type TxRequestTableParts } from '../replica/request-table.js';
import type { PrimaryDirectory } from '../route/primary-directory.js';
import { MemoryStorageEngine } from '../storage/storage-engine.js';
import type { TxRequest, TxStateResponse } from '../tx/core/messages.js';
import { makeTxId } from '../tx/core/tx-id.js';
import { TxStateMap } from '../tx/core/tx-state-map.js';

export const SKEW_MS = 20;
const TIMING = leaseTiming(SKEW_MS, 2_000, 500);
export const NAMES = [nodeName('n1'), nodeName('n2'), nodeName('n3')];
export const P0 = 't1p0' as PartitionId;
export const P1 = 't1p1' as PartitionId;
const PARTITIONS = [P0, P1];
/** The tests' transaction coordinator. */
export const COORDINATOR = 'coord' as NodeId;
/** Who delivered requests come from, as the messenger names the sender (no handler of the table reads it). */
const SENDER = { name: nodeName('coord'), id: COORDINATOR };

/** Parts of a request table for kinds a test cluster does not answer: they are refused as unknown. */
function unanswered(kind: string): Promise<TxStateResponse> {
  return Promise.reject(new BasaltError('UNKNOWN_MESSAGE', `no handler for ${kind} here`));
}
export const NO_COORDINATOR: TxRequestTableParts['coordinator'] = {
  handleStateRequest: (request) => unanswered(request.kind),
};
export const NO_COMMIT_PARTITION_STATES: TxRequestTableParts['commitPartition'] = {
  handleStateRequest: (request) => unanswered(request.kind),
  handleRecovery: (request) => unanswered(request.kind),
};
export const READ_WAIT_MS = 1_000;
const RUN_FOR_MS = 10_000;

/** The part of the simulator's scheduler the cluster drives. */
export interface VirtualTime {
  nowMs(): number;
  schedule(delayMs: number, fn: () => void, label?: string): unknown;
  timers(owner: string): Timers;
  run(options: { readonly forMs?: number; readonly until?: () => boolean }): Promise<unknown>;
}

/** The simulator, injected by the test file. */
export interface SimulatedEnv {
  readonly scheduler: VirtualTime;
  /** A fresh physical clock on virtual time. */
  clock(): Clock;
  random(seed: string): Random;
}

/** The ephemeral id of a member. */
export function idOf(name: NodeName): NodeId {
  return `${name}-id` as NodeId;
}

type RaftHandler = (from: NodeName, envelope: unknown) => void;

/** `self`'s Raft transport on virtual time: 1 ms a message, none to or from a node in `cut`. */
export function simRaftTransport(
  scheduler: VirtualTime,
  cut: ReadonlySet<NodeName>,
  handlers: Map<NodeName, RaftHandler>,
  self: NodeName,
  label = 'raft',
): RaftTransport {
  return {
    send: (to, envelope) => {
      if (cut.has(self) || cut.has(to)) return;
      scheduler.schedule(1, () => handlers.get(to)?.(self, envelope), label);
    },
    setHandler: (handler) => handlers.set(self, handler),
  };
}

export interface BaseMember {
  readonly name: NodeName;
  readonly clock: HybridClock;
  readonly map: TxStateMap;
  readonly driver: RaftDriver;
  readonly replicas: Map<PartitionId, PartitionReplica>;
  /** The partitions the member's request table finds. */
  readonly partitions: PartitionDirectory;
  readonly table: TxRequestTable;
}

export type ClusterMember<X extends object> = BaseMember & X;

/** What a node offers `wire`, before its replicas exist. */
export interface NodeParts {
  readonly name: NodeName;
  readonly physical: Clock;
  readonly clock: HybridClock;
  readonly map: TxStateMap;
  readonly timers: Timers;
  /** Finds a partition's primary among the members (NODE_UNAVAILABLE while there is none). */
  readonly locator: PrimaryDirectory;
  /** The member's hosted partitions, filled once `wire` returned. */
  readonly partitions: PartitionDirectory;
}

export interface NodeWiring<X extends object> {
  readonly table: TxRequestTable;
  /** The member's fields beyond `BaseMember`. */
  readonly extra: X;
  /** Called for each hosted partition after it was added to the directory. */
  readonly onHosted?: (partition: PartitionReplica) => void;
}

export abstract class ReplicaTestCluster<X extends object> {
  readonly scheduler: VirtualTime;
  readonly coord: HybridClock;
  readonly members = new Map<NodeName, ClusterMember<X>>();
  /** Nodes cut off from every Raft message. */
  readonly cut = new Set<NodeName>();
  private readonly raftHandlers = new Map<NodeName, RaftHandler>();
  private txCounter = 0;

  constructor(
    readonly seed: number,
    private readonly sim: SimulatedEnv,
  ) {
    this.scheduler = sim.scheduler;
    this.coord = new HybridClock(sim.clock(), { maxClockSkewMs: SKEW_MS });
  }

  /** The node's request table and extras. */
  protected abstract wire(node: NodeParts): NodeWiring<X>;

  /**
   * Starts every member, then runs until each partition has a primary and every replica applied its log as far as
   * the primary did (backups learn the commit index a tick later: they then know the lease, for instance).
   */
  async boot(): Promise<this> {
    for (const name of NAMES) await this.startMember(name);
    await this.runUntil(() => PARTITIONS.every((p) => this.primaryOf(p) !== undefined));
    await this.converge();
    return this;
  }

  private async startMember(name: NodeName): Promise<void> {
    const random = this.sim.random(`${this.seed}/${name}`);
    const physical = this.sim.clock();
    const clock = new HybridClock(physical, { maxClockSkewMs: SKEW_MS });
    const engine = new MemoryStorageEngine();
    const map = new TxStateMap({ clock: physical });
    const timers = this.scheduler.timers(name);
    const replicas = new Map<PartitionId, PartitionReplica>();
    let driver: RaftDriver | undefined;
    const locator: PrimaryDirectory = {
      locate: (partitionId) => {
        const m = this.primaryOf(partitionId);
        if (m === undefined) throw new BasaltError('NODE_UNAVAILABLE', `no primary of ${partitionId}`);
        return m.name;
      },
    };
    const partitions = new PartitionDirectory();
    const { table, extra, onHosted } = this.wire({ name, physical, clock, map, timers, locator, partitions });
    for (const partitionId of PARTITIONS) {
      const replica = new PartitionReplica({
        partitionId,
        nodeId: idOf(name),
        nodeName: name,
        random: random.fork(partitionId),
        physicalClock: physical,
        clock,
        engine,
        txStateMap: map,
        submit: (bytes) => driver!.propose(partitionId, bytes),
        timing: TIMING,
        safeTimeSyncIdleMs: 50,
        timers,
        readWaitMs: READ_WAIT_MS,
        lockWaitTimeoutMs: 3_000,
      });
      replicas.set(partitionId, replica);
      partitions.add(replica, NAMES);
      onHosted?.(replica);
    }
    const sm = (g: PartitionId) => replicas.get(g)!.stateMachine;
    driver = new RaftDriver({
      self: name,
      transport: simRaftTransport(this.scheduler, this.cut, this.raftHandlers, name),
      timers,
      random: random.fork('raft'),
      storage: new MemoryLogStorage(),
      stateMachine: {
        appliedIndex: (g: PartitionId) => sm(g).appliedIndex(),
        apply: (g: PartitionId, entries: readonly Entry[]) => sm(g).apply(entries),
        snapshot: (g: PartitionId) => sm(g).snapshot(),
        restore: (g: PartitionId, snapshot: Snapshot) => sm(g).restore(snapshot),
      },
      tickIntervalMs: 10,
    });
    for (const partitionId of PARTITIONS) await driver.addGroup(partitionId, NAMES);
    this.members.set(name, { name, clock, map, driver, replicas, partitions, table, ...extra });
    const upkeep = (): void => {
      for (const partitionId of PARTITIONS) {
        const s = driver.status(partitionId);
        if (s !== undefined) replicas.get(partitionId)!.maintain({ isLeader: s.role === 'leader', term: s.term });
      }
      timers.setTimer(upkeep, 20);
    };
    timers.setTimer(upkeep, 20);
  }

  member(name: NodeName): ClusterMember<X> {
    const m = this.members.get(name);
    assert.ok(m !== undefined);
    return m;
  }

  primaryOf(partitionId: PartitionId): ClusterMember<X> | undefined {
    for (const m of this.members.values()) {
      if (m.replicas.get(partitionId)!.checkPrimary(m.clock.current()).kind === 'ok') return m;
    }
    return undefined;
  }

  primary(partitionId: PartitionId): ClusterMember<X> {
    const m = this.primaryOf(partitionId);
    assert.ok(m !== undefined, `no primary of ${partitionId} (seed ${this.seed})`);
    return m;
  }

  backups(partitionId: PartitionId): ClusterMember<X>[] {
    const p = this.primary(partitionId);
    return [...this.members.values()].filter((m) => m !== p);
  }

  hosted(m: BaseMember, partitionId: PartitionId): PartitionReplica {
    return m.replicas.get(partitionId)!;
  }

  /** A tx of the tests' coordinator, begun now (or `beginOffsetMs` from now). */
  newTx(beginOffsetMs = 0): TxId {
    this.txCounter++;
    return makeTxId({
      beginTimestamp: addMs(this.coord.now(), beginOffsetMs),
      nodeId: COORDINATOR,
      counter: this.txCounter,
    });
  }

  /** A request as the messenger delivers it: timestamps absorbed both ways, bodies and errors through the codec. */
  protected deliver<R>(to: NodeName, body: TxRequest, from: HybridClock): Promise<R> {
    const ts = from.now();
    return new Promise<R>((resolve, reject) => {
      this.scheduler.schedule(1, () => {
        const receiverClock = this.clockOf(to);
        receiverClock.update(ts);
        const received = decode(encode(body)) as TxRequest;
        const back = (settle: () => void) => {
          const replyTs = receiverClock.now();
          this.scheduler.schedule(1, () => {
            from.update(replyTs);
            settle();
          });
        };
        this.dispatch(to, received).then(
          (response) => back(() => resolve(decode(encode(response)) as R)),
          (error: unknown) => back(() => reject(BasaltError.fromData(decode(encode(toErrorData(error))) as ErrorData))),
        );
      });
    });
  }

  /** The clock of the node named `to`. */
  protected clockOf(to: NodeName): HybridClock {
    return this.member(to).clock;
  }

  /** Hands a delivered request to its receiver; by default the member's request table. */
  protected dispatch(to: NodeName, body: TxRequest): Promise<unknown> {
    return dispatchTxRequest(this.member(to).table, body, SENDER);
  }

  async runUntil(until: () => boolean, forMs = RUN_FOR_MS): Promise<void> {
    await this.scheduler.run({ forMs, until });
    assert.ok(until(), `condition not reached within ${forMs} ms (seed ${this.seed})`);
  }

  /** Runs virtual time until `p` settles; returns (or throws) its outcome. */
  async settle<T>(p: Promise<T>, forMs = RUN_FOR_MS): Promise<T> {
    let done = false;
    const tracked = p.finally(() => {
      done = true;
    });
    tracked.catch(() => {});
    await this.runUntil(() => done, forMs);
    return tracked;
  }

  /** Every member applied as far as the most advanced one, in every partition. */
  async converge(): Promise<void> {
    const applied = (m: BaseMember, g: PartitionId) => m.replicas.get(g)!.stateMachine.appliedIndex();
    const target = new Map<PartitionId, LogIndex>(
      PARTITIONS.map((g) => [g, Math.max(...[...this.members.values()].map((m) => applied(m, g))) as LogIndex]),
    );
    await this.runUntil(() =>
      [...this.members.values()].every((m) => PARTITIONS.every((g) => applied(m, g) >= target.get(g)!)),
    );
  }
}
