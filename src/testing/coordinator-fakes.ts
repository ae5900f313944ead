/**
 * Fakes for the coordinator tests (not exported from the package): `FakeCluster` plays every partition primary and
 * commit partition a coordinator talks to, behind a request function with the Messenger's contract (timeouts on the
 * injected timers, CANCELLED on abort, timestamps absorbed both ways), and a placement over one table.
 *
 * The fake primaries keep committed values per partition and each tx's writes until its finish; the commit partition
 * keeps outcomes with a first-writer-wins compare-and-set (a conflicting finish gets TX_MISMATCHING_OUTCOME carrying
 * the stored outcome). Any request kind can be scripted instead with `script(kind, handler)`; `hang()` never answers.
 */
import assert from 'node:assert/strict';
import { BasaltError, isBasaltError } from '../core/errors.js';
import {
  type HybridTimestamp,
  type NodeId,
  type NodeName,
  type PartitionId,
  partitionId,
  type TxId,
} from '../core/ids.js';
import { partitionIndexOf } from '../core/partitioning.js';
import type { Clock } from '../env/clock.js';
import type { Timers } from '../env/timers.js';
import { HybridClock } from '../hlc/hybrid-clock.js';
import { addMs } from '../hlc/timestamp.js';
import type { KeyRange, Value } from '../storage/mv-partition-storage.js';
import { sameEnlistmentToken } from '../tx/coordinator/coordinated-tx.js';
import { TxCoordinator } from '../tx/coordinator/coordinator.js';
import type { TxPlacement } from '../tx/coordinator/coordinator-ports.js';
import type { TxCoordinatorOptions } from '../tx/coordinator/settings.js';
import type {
  FoundValue,
  LeaseInfo,
  ReadWriteRequest,
  ReadWriteResponse,
  TxFinishRequest,
  TxOutcome,
  TxRequest,
  TxRequestFn,
  TxRequestOptions,
  TxResponse,
} from '../tx/core/messages.js';
import type { TxStateMap } from '../tx/core/tx-state-map.js';
import { compareKeys } from '../tx/core/user-input.js';

export const TABLE = 'accounts';

export type FakeHandler = (to: NodeName, body: TxRequest) => TxResponse | Promise<TxResponse>;

export interface SentRequest {
  readonly to: NodeName;
  readonly body: TxRequest;
}

export interface FakeClusterOptions {
  /** The primaries' physical clock (shared by all fake nodes). */
  readonly physical: Clock;
  readonly timers: Timers;
  readonly partitions?: number;
  readonly nodes?: readonly string[];
  readonly leaseMs?: number;
  /** One-way delay of every message, in ms of the injected timers. */
  readonly latencyMs?: number;
}

export class FakeCluster {
  /** The primaries' hybrid clock (every fake node shares it). */
  readonly clock: HybridClock;
  readonly timers: Timers;
  readonly partitionCount: number;
  readonly nodes: readonly NodeName[];
  readonly leaseMs: number;
  latencyMs: number;
  readonly sent: SentRequest[] = [];
  readonly primaries = new Map<PartitionId, NodeName>();
  readonly leases = new Map<PartitionId, LeaseInfo>();
  readonly committed = new Map<PartitionId, Map<string, Value>>();
  /** Writes of open txs: tx → partition → key → value (null: removed). */
  readonly txWrites = new Map<TxId, Map<PartitionId, Map<string, Value | null>>>();
  readonly outcomes = new Map<TxId, TxOutcome>();
  readonly notedPrimaries: { partitionId: PartitionId; name: NodeName }[] = [];
  readonly writeLog: { txId: TxId; writeTs: HybridTimestamp }[] = [];
  /** Stale placement guesses: locate answers these before the real primaries. */
  readonly hints = new Map<PartitionId, NodeName>();
  /** Partitions whose primary the placement cannot name (locate throws NODE_UNAVAILABLE). */
  readonly unknownPrimaries = new Set<PartitionId>();
  private readonly scripts = new Map<TxRequest['kind'], FakeHandler>();
  private incarnation = 0;

  constructor(options: FakeClusterOptions) {
    this.clock = new HybridClock(options.physical);
    this.timers = options.timers;
    this.partitionCount = options.partitions ?? 4;
    this.nodes = (options.nodes ?? ['n1', 'n2', 'n3']) as NodeName[];
    this.leaseMs = options.leaseMs ?? 5_000;
    this.latencyMs = options.latencyMs ?? 1;
    for (let i = 0; i < this.partitionCount; i++) {
      const p = this.partition(i);
      this.committed.set(p, new Map());
      this.grantLease(p, this.nodes[i % this.nodes.length]!);
    }
  }

  partition(index: number): PartitionId {
    return partitionId(`t1p${index}`);
  }

  partitionOfKey(key: string): PartitionId {
    return this.partition(partitionIndexOf(key, this.partitionCount));
  }

  /** A key of partition `index` (the n-th such key in the order k0, k1, ...). */
  keyIn(index: number, n = 0): string {
    let seen = 0;
    for (let i = 0; i < 100_000; i++) {
      const key = `k${i}`;
      if (partitionIndexOf(key, this.partitionCount) !== index) continue;
      if (seen === n) return key;
      seen += 1;
    }
    throw new Error('no key found');
  }

  /** A new lease on `partitionId` held by `holder`, from now (a primary change: the old token is no longer valid). */
  grantLease(partitionId: PartitionId, holder: NodeName): LeaseInfo {
    this.incarnation += 1;
    const start = this.clock.now();
    const lease: LeaseInfo = {
      token: { holder: { nodeId: `${holder}-id` as NodeId, incarnation: `i${this.incarnation}` }, start },
      holderName: holder,
      expiration: addMs(start, this.leaseMs),
    };
    this.leases.set(partitionId, lease);
    this.primaries.set(partitionId, holder);
    return lease;
  }

  /** Replaces the fake behaviour of one request kind (until `unscript`). */
  script(kind: TxRequest['kind'], handler: FakeHandler): void {
    this.scripts.set(kind, handler);
  }

  unscript(kind: TxRequest['kind']): void {
    this.scripts.delete(kind);
  }

  sentOf<K extends TxRequest['kind']>(kind: K): Extract<TxRequest, { kind: K }>[] {
    return this.sent.filter((s) => s.body.kind === kind).map((s) => s.body as Extract<TxRequest, { kind: K }>);
  }

  /** The default behaviour of a request kind (for scripts that wrap it). */
  handle(to: NodeName, body: TxRequest): TxResponse {
    switch (body.kind) {
      case 'ReadWriteRequest':
        return this.readWrite(to, body);
      case 'TxFinishRequest':
        return this.finish(body);
      case 'LeaseConfirmRequest': {
        const lease = this.leases.get(body.partitionId);
        this.clock.update(body.commitTs);
        const confirmed =
          lease !== undefined &&
          this.primaries.get(body.partitionId) === to &&
          sameEnlistmentToken(lease.token, body.token) &&
          body.commitTs < lease.expiration;
        return { kind: 'LeaseConfirmResponse', confirmed };
      }
      case 'TxCleanupRequest':
        return { kind: 'TxCleanupResponse', txId: body.txId, cleaned: body.partitions };
      default:
        throw new BasaltError('UNKNOWN_MESSAGE', `the fake cluster does not serve ${body.kind}`);
    }
  }

  readonly request: TxRequestFn = (to, body, options) => this.deliver(to, body, options) as never;

  readonly placement: TxPlacement = {
    partitionOf: (table, key) => {
      if (table !== TABLE) throw new BasaltError('UNKNOWN_TABLE', `no table ${table}`);
      return this.partitionOfKey(key);
    },
    partitionsOf: (table) => {
      if (table !== TABLE) throw new BasaltError('UNKNOWN_TABLE', `no table ${table}`);
      return Array.from({ length: this.partitionCount }, (_, i) => this.partition(i));
    },
    primaries: {
      locate: (p) => {
        if (this.unknownPrimaries.has(p)) throw new BasaltError('NODE_UNAVAILABLE', `no replica of ${p} known`);
        return this.hints.get(p) ?? this.primaries.get(p) ?? this.nodes[0]!;
      },
      note: (p, name) => {
        // Like the node's hints: a learned holder replaces a stale guess.
        this.notedPrimaries.push({ partitionId: p, name });
        this.hints.set(p, name);
      },
    },
  };

  /** The messenger contract: delivery after latency, answer after latency, TIMEOUT / CANCELLED as the options say. */
  private deliver(to: NodeName, body: TxRequest, options: TxRequestOptions): Promise<TxResponse> {
    this.sent.push({ to, body });
    return new Promise<TxResponse>((resolve, reject) => {
      let settled = false;
      const finish = (fn: () => void): void => {
        if (settled) return;
        settled = true;
        this.timers.clearTimer(timeout);
        options.signal?.removeEventListener('abort', onAbort);
        fn();
      };
      const timeout = this.timers.setTimer(
        () => finish(() => reject(new BasaltError('TIMEOUT', `${body.kind} to ${to} timed out`))),
        options.timeoutMs,
      );
      const onAbort = (): void => finish(() => reject(new BasaltError('CANCELLED', `${body.kind} cancelled`)));
      options.signal?.addEventListener('abort', onAbort, { once: true });
      this.timers.setTimer(() => {
        const handler = this.scripts.get(body.kind) ?? ((t: NodeName, b: TxRequest) => this.handle(t, b));
        Promise.resolve()
          .then(() => handler(to, body))
          .then(
            (response) => this.timers.setTimer(() => finish(() => resolve(response)), this.latencyMs),
            (error: unknown) => this.timers.setTimer(() => finish(() => reject(error)), this.latencyMs),
          );
      }, this.latencyMs);
    });
  }

  private readWrite(to: NodeName, body: ReadWriteRequest): ReadWriteResponse {
    const p = body.partitionId;
    const lease = this.leases.get(p);
    const holder = this.primaries.get(p);
    if (
      lease === undefined ||
      holder !== to ||
      (body.token !== undefined && !sameEnlistmentToken(body.token, lease.token))
    ) {
      throw primaryMissNaming(p, holder, `${to} is not the primary of ${p}`);
    }
    const op = body.operation;
    switch (op.op) {
      case 'get':
        return { kind: 'ReadWriteResponse', lease, result: { op: 'get', value: this.read(body.txId, p, op.key) } };
      case 'getAll': {
        const values = op.keys.map((k) => this.read(body.txId, p, k));
        return { kind: 'ReadWriteResponse', lease, result: { op: 'getAll', values } };
      }
      case 'scan':
        return { kind: 'ReadWriteResponse', lease, result: this.scan(body.txId, p, op.range, op.limit) };
      case 'put':
        return this.write(body, lease, [[op.key, op.value]]);
      case 'remove':
        return this.write(body, lease, [[op.key, null]]);
      case 'putAll':
        return this.write(
          body,
          lease,
          op.entries.map((e) => [e.key, e.value]),
        );
    }
  }

  private write(
    body: ReadWriteRequest,
    lease: LeaseInfo,
    writes: readonly (readonly [string, Value | null])[],
  ): ReadWriteResponse {
    const writeTs = this.clock.now();
    this.writeLog.push({ txId: body.txId, writeTs });
    const target = body.full ? undefined : this.writesOf(body.txId, body.partitionId);
    for (const [key, value] of writes) {
      if (target !== undefined) target.set(key, value);
      else applyWrite(this.committed.get(body.partitionId)!, key, value);
    }
    return { kind: 'ReadWriteResponse', lease, result: { op: 'written' }, writeTs };
  }

  private writesOf(txId: TxId, p: PartitionId): Map<string, Value | null> {
    let byPartition = this.txWrites.get(txId);
    if (byPartition === undefined) {
      byPartition = new Map();
      this.txWrites.set(txId, byPartition);
    }
    let writes = byPartition.get(p);
    if (writes === undefined) {
      writes = new Map();
      byPartition.set(p, writes);
    }
    return writes;
  }

  private read(txId: TxId, p: PartitionId, key: string): FoundValue {
    const own = this.txWrites.get(txId)?.get(p);
    if (own?.has(key)) {
      const v = own.get(key);
      return v === null || v === undefined ? { found: false } : { found: true, value: v };
    }
    const v = this.committed.get(p)?.get(key);
    return v === undefined ? { found: false } : { found: true, value: v };
  }

  private scan(txId: TxId, p: PartitionId, range: KeyRange, limit: number) {
    const keys = new Set([
      ...(this.committed.get(p)?.keys() ?? []),
      ...(this.txWrites.get(txId)?.get(p)?.keys() ?? []),
    ]);
    const inRange = [...keys].filter((k) => inKeyRange(k, range)).sort(compareKeys);
    const rows: { key: string; value: Value }[] = [];
    let nextKey: string | undefined;
    for (const key of inRange) {
      const v = this.read(txId, p, key);
      if (!v.found) continue;
      if (rows.length === limit) {
        nextKey = key;
        break;
      }
      rows.push({ key, value: v.value });
    }
    return nextKey === undefined ? { op: 'scan' as const, rows } : { op: 'scan' as const, rows, nextKey };
  }

  private finish(body: TxFinishRequest): TxResponse {
    if (body.commitTs !== undefined) this.clock.update(body.commitTs);
    const wanted: TxOutcome =
      body.commit && body.commitTs !== undefined
        ? { state: 'COMMITTED', commitTs: body.commitTs }
        : { state: 'ABORTED' };
    const prior = this.outcomes.get(body.txId);
    if (prior !== undefined && prior.state !== wanted.state) {
      throw new BasaltError(
        'TX_MISMATCHING_OUTCOME',
        `tx ${body.txId} is ${prior.state}`,
        { outcome: prior },
        { hint: { kind: 'mismatched-outcome', outcome: prior } },
      );
    }
    if (prior === undefined) this.decide(body.txId, wanted);
    return { kind: 'TxFinishResponse', outcome: prior ?? wanted };
  }

  /** Stores an outcome as the commit partition would (used by recovery-like scripts too). */
  decide(txId: TxId, outcome: TxOutcome): void {
    this.outcomes.set(txId, outcome);
    const writes = this.txWrites.get(txId);
    this.txWrites.delete(txId);
    if (outcome.state !== 'COMMITTED' || writes === undefined) return;
    for (const [p, kv] of writes) for (const [k, v] of kv) applyWrite(this.committed.get(p)!, k, v);
  }

  /** Every write timestamp the fake primaries answered `txId`'s writes with. */
  writeTimestampsOf(txId: TxId): HybridTimestamp[] {
    return this.writeLog.filter((w) => w.txId === txId).map((w) => w.writeTs);
  }
}

function applyWrite(map: Map<string, Value>, key: string, value: Value | null): void {
  if (value === null) map.delete(key);
  else map.set(key, value);
}

function inKeyRange(key: string, range: KeyRange): boolean {
  if (range.kind === 'prefix') return key.startsWith(range.prefix);
  if (range.start !== undefined && compareKeys(key, range.start) < 0) return false;
  if (range.end !== undefined && compareKeys(key, range.end) >= 0) return false;
  return true;
}

// ---------------------------------------------------------------------------------------- test-run helpers

/** The node the coordinator under test runs on. */
export const SELF = { name: 'n1' as NodeName, id: 'n1-id' as NodeId };

/** How long `settleWithin` runs virtual time at most, by default. */
const SETTLE_MS = 600_000;

/** The part of the simulator's scheduler `settleWithin` drives (injected: tx code may not import src/sim). */
export interface VirtualRunner {
  run(options: { readonly until?: () => boolean; readonly forMs?: number }): Promise<unknown>;
}

/** Runs virtual time until `p` settles (at most `forMs`), then returns (or throws) its outcome. */
export async function settleWithin<T>(scheduler: VirtualRunner, p: Promise<T>, forMs = SETTLE_MS): Promise<T> {
  let done = false;
  const mark = (): void => {
    done = true;
  };
  p.then(mark, mark);
  await scheduler.run({ until: () => done, forMs });
  assert.ok(done, 'the promise settled within the time bound');
  return p;
}

/** Asserts that `p` rejects with a BasaltError of `code`; returns the error. */
export async function rejectsWith(p: Promise<unknown>, code: string): Promise<BasaltError> {
  try {
    await p;
  } catch (error) {
    assert.ok(isBasaltError(error), `a BasaltError, got ${String(error)}`);
    assert.equal(error.code, code, error.message);
    return error;
  }
  assert.fail(`expected ${code}, but it resolved`);
}

export interface CoordinatorEnv {
  readonly clock: HybridClock;
  readonly timers: Timers;
  readonly txStates: TxStateMap;
  readonly options?: TxCoordinatorOptions;
  readonly onError?: (error: unknown) => void;
}

/** A TxCoordinator on SELF that reaches `cluster`'s fake primaries through its request function and placement. */
export function coordinatorOver(cluster: FakeCluster, env: CoordinatorEnv): TxCoordinator {
  return new TxCoordinator({ self: SELF, request: cluster.request, placement: cluster.placement, ...env });
}

/** A PRIMARY_MISS as a replica answers it: for `partitionId`, naming `holder` as its leaseholder when given. */
export function primaryMissNaming(
  partitionId: PartitionId,
  holder: string | undefined,
  message = 'not here',
): BasaltError {
  const details = holder === undefined ? { partitionId } : { partitionId, holderName: holder };
  const named =
    holder === undefined
      ? undefined
      : {
          name: holder as NodeName,
          token: { holder: { nodeId: `${holder}-id` as NodeId, incarnation: '1' }, start: 1n as HybridTimestamp },
        };
  const hint = {
    kind: 'primary-miss',
    partitionId,
    reason: 'token-mismatch',
    ...(named !== undefined && { holder: named }),
  } as const;
  return new BasaltError('PRIMARY_MISS', message, details, { hint });
}
