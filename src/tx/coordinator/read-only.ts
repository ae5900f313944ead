/**
 * Read-only transactions on the coordinator (ignite3-protocol.md §8; DESIGN §2 "RO readTs default", "RO routing";
 * rules 8, 10, 19): a snapshot read at one readTs, without locks, writes or any map entry; finish is local.
 *
 * readTs, fixed once at begin:
 * - default: the coordinator's `now()` (a fresh read: it sees every commit this node has seen);
 * - an explicit `readTimestamp`: a client-supplied timestamp, so the skew guard applies (rule 8: beyond physical
 *   time + maxClockSkew → INVALID_ARGUMENT); a future one is served by waiting until this clock passes it (the
 *   clock never absorbs it); one older than now − stalenessMsMax is TX_READ_ONLY_TOO_OLD (so that retention keeps
 *   every node's watermark below it while the tx is open), unless it is at or above a protected timestamp, which
 *   holds every node's watermark instead (cluster/metastorage-state.ts);
 * - a bounded staleness: `now − stalenessMs` (rule 10), served by any replica.
 * A readTs below the node's low watermark is refused (TX_READ_ONLY_TOO_OLD); an open tx holds the watermark at or
 * below its readTs until it closes (commit, rollback or its timeout), and every read re-checks it.
 *
 * Routing, per read and partition: the replica on this node when its safe time already covers readTs (or the tx
 * accepts bounded staleness and this node hosts a replica), else the partition's primary, which serves a fresh readTs
 * at once (a fresh read never waits for idle safe-time propagation on a backup). Reads are idempotent: a failed
 * attempt (PRIMARY_MISS, a timeout, a lost connection) is retried at the primary as every primary-only request is
 * routed (route/send-to-primary.ts), bounded by attemptsMax.
 *
 * Implicit reads (`client.get` outside a tx, rule 19) send a ReadOnlyRequest without readTs to the primary, which
 * reads at its own `now`.
 *
 * Tx ids: RO txs get ids like RW ones (the begin timestamp from this node's clock, which never returns the same
 * value twice, so ids from this generator and the RW coordinator's never collide).
 */

import { setMaxListeners } from 'node:events';
import { asBasaltError, BasaltError } from '../../core/errors.js';
import type { HybridTimestamp, NodeIdentity, NodeName, PartitionId, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import { sleep, type TimerHandle, type Timers } from '../../env/timers.js';
import type { HybridClock } from '../../hlc/hybrid-clock.js';
import { addMs, formatTimestamp, physicalMs } from '../../hlc/timestamp.js';
import { backoffMs } from '../../route/backoff.js';
import { sendToPrimary } from '../../route/send-to-primary.js';
import type { KeyRange, Value } from '../../storage/mv-partition-storage.js';
import { type LowWatermark, readOnlyTooOld, type WatermarkHold } from '../core/low-watermark.js';
import type {
  ChangeEntry,
  FoundValue,
  ReadOnlyRequest,
  ReadOnlyResponse,
  RoOperation,
  TxRequestFn,
} from '../core/messages.js';
import { expectKind } from '../core/messages.js';
import { TxIdGenerator } from '../core/tx-id.js';
import {
  checkKey,
  checkKeys,
  checkReadOptions,
  checkScanLimit,
  checkScanRange,
  checkTable,
  compareKeys,
  type KeyValue,
  type ReadOptions,
  type ScanOptions,
  type ScanRange,
  scanPartitions,
} from '../core/user-input.js';
import { groupByPartition, settleAll } from './context.js';
import type { TxPlacement } from './coordinator-ports.js';
import { commitOrRollBack, retryPolicy, withRetries } from './retry.js';

/** What the RO coordinator needs to know of the replicas on its own node. */
export interface LocalReplicaView {
  /**
   * The timestamp up to which this node's replica of `partitionId` can serve a read now without waiting (applied
   * safe time; for a replica acting as primary, its readable safe time), or undefined if no replica is hosted here.
   */
  localSafeTime(partitionId: PartitionId): HybridTimestamp | undefined;
}

export interface ReadOnlyCoordinatorOptions {
  /** An open RO tx is closed after this long (default LIMITS.txReadOnlyTimeoutMsDefault). */
  readonly timeoutMs?: number;
  readonly requestTimeoutMs?: number;
  readonly attemptsMax?: number;
  readonly stalenessMsMax?: number;
  readonly retryBackoffMsMin?: number;
  readonly retryBackoffMsMax?: number;
}

type Settings = Required<ReadOnlyCoordinatorOptions>;

export interface ReadOnlyCoordinatorDeps {
  readonly self: NodeIdentity;
  readonly clock: HybridClock;
  readonly timers: Timers;
  readonly request: TxRequestFn;
  readonly placement: TxPlacement;
  readonly local: LocalReplicaView;
  /** The node's low watermark (shared with its replicas' read checks and storage GC). */
  readonly watermark: LowWatermark;
  readonly options?: ReadOnlyCoordinatorOptions;
  /**
   * Rule 19: false while this node's clock is beyond the bound from the majority; `begin` then refuses (CLOCK_SKEW)
   * unless the caller fixes the readTimestamp (a readTs from this clock would break the real-time order).
   */
  readonly clockWithinBound?: () => boolean;
}

export interface BeginReadOnlyOptions {
  /** Read at this timestamp (rule 8: at most maxClockSkew ahead of physical time; a future one waits). */
  readonly readTimestamp?: HybridTimestamp;
  /** Bounded staleness: read at `now − stalenessMs`, fixed at begin; any replica may serve. */
  readonly stalenessMs?: number;
}

export interface ReadOnlyScanOptions extends ScanOptions {
  /** Scan only this partition of the table (default: every partition, merged in key order). */
  readonly partitionId?: PartitionId;
}

/** One page of a change read (a watch's step, DESIGN §4b "Change streams"). */
export interface ChangeReadRequest {
  readonly table: string;
  /** The partition's index in the table (0 ≤ partition < the table's partition count). */
  readonly partition: number;
  readonly range: ScanRange;
  /** Changes with commitTs above this one (absent: none; the page only tells `toTs` and the partition count)... */
  readonly fromTs?: HybridTimestamp;
  /** ...and at or below this one (default: this coordinator's `now`, returned in the page). */
  readonly toTs?: HybridTimestamp;
  /** Versions per page, about (rows are whole); default and maximum LIMITS.storageScanRowsMax. */
  readonly limit?: number;
}

export interface ChangeReadPage {
  readonly toTs: HybridTimestamp;
  /** The table's partition count. */
  readonly partitions: number;
  readonly changes: readonly ChangeEntry[];
  /** The first key not read: the next page of this window starts there. */
  readonly nextKey?: string;
}

export type ReadOnlyTxState = 'open' | 'committed' | 'rolled-back' | 'timed-out';

/** The coordinator's record of one RO tx. */
export class ReadOnlyTx {
  state: ReadOnlyTxState = 'open';
  readsInFlight = 0;
  timer: TimerHandle | undefined;

  constructor(
    readonly id: TxId,
    readonly readTs: HybridTimestamp,
    /** Bounded staleness: any hosted replica may serve, waiting for its safe time if needed. */
    readonly anyReplica: boolean,
    readonly hold: WatermarkHold,
  ) {}
}

type RoResult = ReadOnlyResponse['result'];

/** Where a read may go: its readTs, and whether any replica may serve it; the tx it belongs to, if any. */
interface ReadRoute {
  readonly id?: TxId;
  readonly readTs: HybridTimestamp;
  readonly anyReplica: boolean;
}
type ResultOf<K extends RoResult['op']> = Extract<RoResult, { readonly op: K }>;

/** Codes after which a read is retried (reads are idempotent): the attempt may not have reached a serving replica. */
const RETRYABLE_READ_CODES = new Set([
  'PRIMARY_MISS',
  'TIMEOUT',
  'CONNECTION_CLOSED',
  'NODE_UNAVAILABLE',
  'OVERLOADED',
  'NOT_LEADER',
]);

export class ReadOnlyCoordinator {
  readonly self: NodeIdentity;
  readonly clock: HybridClock;
  readonly timers: Timers;
  readonly watermark: LowWatermark;
  readonly settings: Settings;
  private readonly request: TxRequestFn;
  private readonly placement: TxPlacement;
  private readonly local: LocalReplicaView;
  private readonly ids: TxIdGenerator;
  private readonly live = new Map<TxId, ReadOnlyTx>();
  private readonly stopper = new AbortController();
  private readonly clockWithinBound: () => boolean;

  constructor(deps: ReadOnlyCoordinatorDeps) {
    this.self = deps.self;
    this.clock = deps.clock;
    this.timers = deps.timers;
    this.watermark = deps.watermark;
    this.request = deps.request;
    this.placement = deps.placement;
    this.local = deps.local;
    this.ids = new TxIdGenerator(deps.self.id);
    this.settings = resolveReadOnlySettings(deps.options);
    this.clockWithinBound = deps.clockWithinBound ?? (() => true);
    setMaxListeners(LIMITS.pendingRequestsMax, this.stopper.signal);
  }

  /** Open RO txs begun here. */
  get openCount(): number {
    return this.live.size;
  }

  // ------------------------------------------------------------------------------------------ begin / finish

  /** Begins an RO tx: fixes readTs, checks it against the watermark and holds the watermark below it. */
  begin(options: BeginReadOnlyOptions = {}): ReadOnlyTx {
    this.checkRunning();
    const { readTimestamp, stalenessMs } = options;
    if (readTimestamp !== undefined && stalenessMs !== undefined) {
      throw invalid('an RO tx takes a readTimestamp or a staleness bound, not both');
    }
    if (readTimestamp === undefined && !this.clockWithinBound()) {
      throw new BasaltError('CLOCK_SKEW', `${this.self.name}'s clock is beyond the skew bound; no tx begins here now`, {
        node: this.self.name,
      });
    }
    const beginTs = this.clock.now();
    const readTs = this.readTsFor(beginTs, options);
    const hold = this.watermark.register(readTs);
    const tx = new ReadOnlyTx(this.ids.next(beginTs), readTs, stalenessMs !== undefined, hold);
    tx.timer = this.timers.setTimer(() => this.close(tx, 'timed-out'), this.settings.timeoutMs);
    this.live.set(tx.id, tx);
    return tx;
  }

  private readTsFor(beginTs: HybridTimestamp, options: BeginReadOnlyOptions): HybridTimestamp {
    const { readTimestamp, stalenessMs } = options;
    if (readTimestamp !== undefined) {
      if (typeof readTimestamp !== 'bigint' || readTimestamp <= 0n) throw invalid('readTimestamp must be positive');
      this.clock.checkUntrusted(readTimestamp, 'readTimestamp');
      // No older than the largest staleness: with retention ≥ timeout + that + maxClockSkew, no node's watermark
      // passes the readTs while the tx is open, wherever it reads.
      const oldest = addMs(beginTs, -this.settings.stalenessMsMax);
      // Or at or above a protected timestamp: every node's watermark stays at or below that while it is unexpired.
      const floor = this.watermark.protectedFloor();
      if (readTimestamp < oldest && (floor === undefined || readTimestamp < floor)) {
        throw readOnlyTooOld(readTimestamp, oldest);
      }
      return readTimestamp;
    }
    if (stalenessMs === undefined) return beginTs;
    if (!Number.isInteger(stalenessMs) || stalenessMs < 0 || stalenessMs > this.settings.stalenessMsMax) {
      throw invalid(`stalenessMs must be an integer in [0, ${this.settings.stalenessMsMax}]`, { stalenessMs });
    }
    const readTs = addMs(beginTs, -stalenessMs);
    if (readTs <= 0n) throw invalid('stalenessMs reaches before the clock epoch', { stalenessMs });
    return readTs;
  }

  /** Finish is local: the tx closes. A commit after a rollback or the timeout reports it. */
  async commit(tx: ReadOnlyTx): Promise<void> {
    switch (tx.state) {
      case 'open':
      case 'committed':
        this.close(tx, 'committed');
        return;
      case 'rolled-back':
        throw new BasaltError('TX_ALREADY_FINISHED', `RO tx ${tx.id} was rolled back`, { txId: tx.id });
      case 'timed-out':
        throw timeoutError(tx);
    }
  }

  /** Closes the tx; a no-op once it is closed (safe in a `finally`). */
  async rollback(tx: ReadOnlyTx): Promise<void> {
    this.close(tx, 'rolled-back');
  }

  /**
   * Closes an open tx: new reads are refused. The watermark hold is released once no read is in flight, so a read
   * already sent is never outrun by GC on this node.
   */
  private close(tx: ReadOnlyTx, state: Exclude<ReadOnlyTxState, 'open'>): void {
    if (tx.state !== 'open') return;
    tx.state = state;
    if (tx.timer !== undefined) this.timers.clearTimer(tx.timer);
    tx.timer = undefined;
    this.live.delete(tx.id);
    if (tx.readsInFlight === 0) tx.hold.release();
  }

  // ------------------------------------------------------------------------------------------ reads

  async get(tx: ReadOnlyTx, table: string, key: string): Promise<Value | undefined> {
    checkTable(table);
    checkKey(key);
    const partitionId = this.placement.partitionOf(table, key);
    return this.read(tx, async () => {
      const result = expectResult(await this.readAt(tx, partitionId, { op: 'get', key }), 'get');
      return foundToValue(result.value);
    });
  }

  /** Values of `keys` in their order (undefined where absent); one request per partition. */
  async getAll(tx: ReadOnlyTx, table: string, keys: readonly string[]): Promise<(Value | undefined)[]> {
    checkTable(table);
    checkKeys(keys);
    const groups = groupByPartition(keys, (key) => this.placement.partitionOf(table, key));
    return this.read(tx, async () => {
      const out: (Value | undefined)[] = new Array(keys.length).fill(undefined);
      await settleAll(
        [...groups].map(async ([partitionId, indexes]) => {
          const here = indexes.map((i) => keys[i]!);
          const { values } = expectResult(await this.readAt(tx, partitionId, { op: 'getAll', keys: here }), 'getAll');
          if (values.length !== here.length) throw protocolError(`getAll answered ${values.length} values`);
          indexes.forEach((index, j) => {
            out[index] = foundToValue(values[j]!);
          });
        }),
      );
      return out;
    });
  }

  /** Rows of `range` in key order, at most `limit`, merged across the table's partitions. */
  async scan(tx: ReadOnlyTx, table: string, range: ScanRange, options: ReadOnlyScanOptions = {}): Promise<KeyValue[]> {
    checkTable(table);
    const keyRange = checkScanRange(range);
    const limit = checkScanLimit(options);
    const partitions =
      options.partitionId === undefined
        ? scanPartitions(this.placement.partitionsOf(table), options)
        : [options.partitionId];
    return this.read(tx, async () => {
      const pages = await settleAll(partitions.map((p) => this.scanPartition(tx, p, keyRange, limit)));
      // Each partition returned its first `limit` rows in key order, so the first `limit` of the union are among them.
      return pages
        .flat()
        .sort((a, b) => compareKeys(a.key, b.key))
        .slice(0, limit);
    });
  }

  private async scanPartition(tx: ReadOnlyTx, partitionId: PartitionId, range: KeyRange, limit: number) {
    const { rows } = expectResult(await this.readAt(tx, partitionId, { op: 'scan', range, limit }), 'scan');
    if (rows.length > limit) throw protocolError(`a scan with limit ${limit} answered ${rows.length} rows`);
    return rows.map((row) => ({ key: row.key, value: row.value }));
  }

  /** Rule 19: an implicit single read outside a tx, on the primary at the primary's `now`. */
  async getImplicit(table: string, key: string): Promise<Value | undefined> {
    this.checkRunning();
    checkTable(table);
    checkKey(key);
    const partitionId = this.placement.partitionOf(table, key);
    const response = await this.attempts(partitionId, undefined, false, { op: 'get', key });
    // A peer's timestamp: absorbed, so a later RO tx begun here reads at or after it.
    this.clock.update(response.readTs);
    return foundToValue(expectResult(response.result, 'get').value);
  }

  /**
   * One page of changes of one partition in `(fromTs, toTs]`, read as an RO read at toTs (routed and retried as RO
   * reads are). No tx and no watermark hold: the serving replica checks fromTs against its own watermark
   * (WATCH_TOO_OLD), so a watch never holds back GC.
   */
  async readChanges(request: ChangeReadRequest): Promise<ChangeReadPage> {
    this.checkRunning();
    checkTable(request.table);
    const range = checkScanRange(request.range);
    const limit = checkScanLimit(request.limit === undefined ? {} : { limit: request.limit });
    const partitions = this.placement.partitionsOf(request.table);
    const partitionId = partitions[request.partition];
    if (!Number.isInteger(request.partition) || partitionId === undefined) {
      throw invalid(`table ${request.table} has no partition ${request.partition}`, { partition: request.partition });
    }
    const fromTs = request.fromTs;
    if (fromTs !== undefined) {
      if (typeof fromTs !== 'bigint' || fromTs <= 0n) throw invalid('fromTs must be positive');
      // A window starting in the future would promise a resolved timestamp no read has covered yet.
      this.clock.checkUntrusted(fromTs, 'fromTs');
    }
    let toTs = request.toTs;
    if (toTs === undefined) {
      toTs = this.clock.now();
    } else {
      if (typeof toTs !== 'bigint' || toTs <= 0n) throw invalid('toTs must be positive');
      this.clock.checkUntrusted(toTs, 'toTs');
      await this.untilPast(toTs);
    }
    if (fromTs === undefined) return { toTs, partitions: partitions.length, changes: [] };
    if (toTs <= fromTs) return { toTs: fromTs, partitions: partitions.length, changes: [] };
    const route = { readTs: toTs, anyReplica: false };
    const response = await this.attempts(partitionId, route, true, { op: 'changes', range, fromTs, limit });
    const result = expectResult(response.result, 'changes');
    if (response.readTs !== toTs) throw protocolError('a change read was served at another timestamp');
    return {
      toTs,
      partitions: partitions.length,
      changes: result.changes,
      ...(result.nextKey !== undefined && { nextKey: result.nextKey }),
    };
  }

  /** One user read of an open tx, counted in flight (the watermark hold outlives it). */
  private async read<T>(tx: ReadOnlyTx, fn: () => Promise<T>): Promise<T> {
    this.checkOpen(tx);
    tx.readsInFlight += 1;
    try {
      return await fn();
    } finally {
      tx.readsInFlight -= 1;
      if (tx.readsInFlight === 0 && tx.state !== 'open') tx.hold.release();
    }
  }

  private checkOpen(tx: ReadOnlyTx): void {
    switch (tx.state) {
      case 'open':
        return;
      case 'timed-out':
        throw timeoutError(tx);
      case 'committed':
      case 'rolled-back':
        throw new BasaltError('TX_ALREADY_FINISHED', `RO tx ${tx.id} is finished`, { txId: tx.id });
    }
  }

  /** One partition's read at the tx's readTs (rule 10 re-check first; a future readTs waits for this clock). */
  private async readAt(tx: ReadOnlyTx, partitionId: PartitionId, operation: RoOperation): Promise<RoResult> {
    this.watermark.check(tx.readTs);
    await this.untilPast(tx.readTs);
    const response = await this.attempts(partitionId, tx, true, operation);
    if (response.readTs !== tx.readTs) {
      throw protocolError(`a read at ${formatTimestamp(tx.readTs)} was served at ${formatTimestamp(response.readTs)}`);
    }
    return response.result;
  }

  /** Rule 8: a readTs ahead of this clock is served by waiting (at most maxClockSkew), never by moving the clock. */
  private async untilPast(readTs: HybridTimestamp): Promise<void> {
    if (this.clock.current() >= readTs) return;
    const aheadMs = physicalMs(readTs) - physicalMs(this.clock.current());
    if (aheadMs >= 0) await sleep(this.timers, aheadMs + 1, this.stopper.signal);
  }

  /**
   * Sends the read: first to the local replica when it may serve (see `routeLocally`), then to the primary
   * (route/send-to-primary.ts), retrying failures a retry may fix (reads are idempotent), at most attemptsMax attempts in all.
   */
  private async attempts(
    partitionId: PartitionId,
    tx: ReadRoute | undefined,
    mayGoLocal: boolean,
    operation: RoOperation,
  ): Promise<ReadOnlyResponse> {
    const { attemptsMax, retryBackoffMsMin, retryBackoffMsMax } = this.settings;
    const local = mayGoLocal && tx !== undefined && this.routeLocally(tx, partitionId);
    const routed = await sendToPrimary({
      partitionId,
      directory: this.placement.primaries,
      ...(local && { first: this.self.name, firstIsReplica: true }),
      send: (to) => this.send(to, partitionId, tx, operation),
      retries: (e) => RETRYABLE_READ_CODES.has(e.code) && !this.stopper.signal.aborted,
      attemptsMax,
      backoffMs: (attempt) => backoffMs(attempt, retryBackoffMsMin, retryBackoffMsMax),
      timers: this.timers,
      signal: this.stopper.signal,
    });
    if (routed.kind !== 'ok') throw routed.error;
    return routed.response;
  }

  /** DESIGN "RO routing": local when its safe time covers readTs, or when the tx accepts bounded staleness. */
  private routeLocally(tx: ReadRoute, partitionId: PartitionId): boolean {
    const safeTime = this.local.localSafeTime(partitionId);
    if (safeTime === undefined) return false;
    return safeTime >= tx.readTs || tx.anyReplica;
  }

  private async send(
    to: NodeName,
    partitionId: PartitionId,
    tx: ReadRoute | undefined,
    operation: RoOperation,
  ): Promise<ReadOnlyResponse> {
    const base = { kind: 'ReadOnlyRequest', partitionId, coordinatorId: this.self.id, operation } as const;
    const body: ReadOnlyRequest =
      tx === undefined ? base : { ...base, ...(tx.id !== undefined && { txId: tx.id }), readTs: tx.readTs };
    const response = await this.request(to, body, {
      timeoutMs: this.settings.requestTimeoutMs,
      signal: this.stopper.signal,
    });
    return expectKind(response, 'ReadOnlyResponse');
  }

  // ------------------------------------------------------------------------------------------ lifecycle

  /** Stops: pending reads and waits are cancelled; open txs are closed. */
  stop(): void {
    if (this.stopper.signal.aborted) return;
    this.stopper.abort(new BasaltError('CANCELLED', `the RO coordinator of ${this.self.name} stopped`));
    for (const tx of [...this.live.values()]) this.close(tx, 'rolled-back');
  }

  private checkRunning(): void {
    if (this.stopper.signal.aborted) {
      throw new BasaltError('NODE_UNAVAILABLE', `the coordinator of ${this.self.name} is stopped`, undefined, {
        executed: 'no',
      });
    }
  }
}

/** The client-facing RO transaction (DESIGN §4: `tx.readOnly`, `tx.readTimestamp`); writes are refused. */
export class ReadOnlyTransaction {
  readonly readOnly = true as const;

  constructor(
    private readonly coordinator: ReadOnlyCoordinator,
    private readonly record: ReadOnlyTx,
  ) {}

  get id(): TxId {
    return this.record.id;
  }

  get readTimestamp(): HybridTimestamp {
    return this.record.readTs;
  }

  /** Read options are checked as on an RW tx; `forUpdate: true` is refused (TX_READ_ONLY): an RO tx takes no locks. */
  get(table: string, key: string, options?: ReadOptions): Promise<Value | undefined> {
    const refused = forUpdateRefusal(this.record, 'get', options);
    if (refused !== undefined) return Promise.reject(refused);
    return this.coordinator.get(this.record, table, key);
  }

  getAll(table: string, keys: readonly string[], options?: ReadOptions): Promise<(Value | undefined)[]> {
    const refused = forUpdateRefusal(this.record, 'getAll', options);
    if (refused !== undefined) return Promise.reject(refused);
    return this.coordinator.getAll(this.record, table, keys);
  }

  scan(table: string, range: ScanRange, options?: ReadOnlyScanOptions): Promise<KeyValue[]> {
    return this.coordinator.scan(this.record, table, range, options);
  }

  put(_table: string, _key: string, _value: Value, _options?: unknown): Promise<void> {
    return Promise.reject(readOnlyWrite(this.record, 'put'));
  }

  remove(_table: string, _key: string): Promise<void> {
    return Promise.reject(readOnlyWrite(this.record, 'remove'));
  }

  putAll(_table: string, _entries: readonly KeyValue[]): Promise<void> {
    return Promise.reject(readOnlyWrite(this.record, 'putAll'));
  }

  commit(): Promise<void> {
    return this.coordinator.commit(this.record);
  }

  /** Closes the tx; a no-op once it is closed, so it is safe in a `finally`. */
  rollback(): Promise<void> {
    return this.coordinator.rollback(this.record);
  }
}

/** Begins an RO transaction on `coordinator`. */
export function beginReadOnly(coordinator: ReadOnlyCoordinator, options?: BeginReadOnlyOptions): ReadOnlyTransaction {
  return new ReadOnlyTransaction(coordinator, coordinator.begin(options));
}

export interface RunReadOnlyOptions extends BeginReadOnlyOptions {
  /** Retries after the first attempt (default LIMITS.txRunRetriesDefault). */
  readonly retries?: number;
}

/**
 * Runs `fn` in an RO transaction and closes it; on a retryable failure (a read that timed out, a tx closed by its
 * timeout, ...) runs `fn` again in a new RO tx with a new readTs, at most `retries` times. Resolves with `fn`'s result.
 */
export function runReadOnlyTransaction<T>(
  coordinator: ReadOnlyCoordinator,
  fn: (tx: ReadOnlyTransaction) => Promise<T>,
  options: RunReadOnlyOptions = {},
): Promise<T> {
  const { retries, ...begin } = options;
  const { retryBackoffMsMin: backoffMsMin, retryBackoffMsMax: backoffMsMax } = coordinator.settings;
  const policy = retryPolicy({ ...(retries !== undefined && { retries }), backoffMsMin, backoffMsMax });
  return withRetries(
    policy,
    (delayMs) => sleep(coordinator.timers, delayMs),
    () => commitOrRollBack(beginReadOnly(coordinator, begin), fn),
  );
}

export function resolveReadOnlySettings(options: ReadOnlyCoordinatorOptions = {}): Settings {
  const settings: Settings = {
    timeoutMs: options.timeoutMs ?? LIMITS.txReadOnlyTimeoutMsDefault,
    requestTimeoutMs: options.requestTimeoutMs ?? LIMITS.txReadOnlyRequestTimeoutMsDefault,
    attemptsMax: options.attemptsMax ?? LIMITS.txReadOnlyAttemptsMax,
    stalenessMsMax: options.stalenessMsMax ?? LIMITS.txReadOnlyStalenessMsMax,
    retryBackoffMsMin: options.retryBackoffMsMin ?? LIMITS.txRetryBackoffMsMin,
    retryBackoffMsMax: options.retryBackoffMsMax ?? LIMITS.txRetryBackoffMsMax,
  };
  for (const [name, value] of Object.entries(settings)) {
    if (!Number.isInteger(value) || value < 1) throw invalid(`RO option ${name} must be a positive integer`, { value });
  }
  return settings;
}

function readOnlyWrite(tx: ReadOnlyTx, op: string): BasaltError {
  return new BasaltError('TX_READ_ONLY', `${op} in read-only tx ${tx.id}: an RO tx cannot write`, { txId: tx.id, op });
}

/** Malformed read options (INVALID_ARGUMENT), or a locking read asked of an RO tx (TX_READ_ONLY), or undefined. */
function forUpdateRefusal(tx: ReadOnlyTx, op: string, options: ReadOptions | undefined): BasaltError | undefined {
  try {
    if (!checkReadOptions(options)) return undefined;
  } catch (error) {
    return asBasaltError(error);
  }
  return new BasaltError('TX_READ_ONLY', `${op} forUpdate in read-only tx ${tx.id}: an RO tx takes no locks`, {
    txId: tx.id,
    op,
  });
}

function timeoutError(tx: ReadOnlyTx): BasaltError {
  return new BasaltError('TX_TIMEOUT', `RO tx ${tx.id} timed out and was closed`, { txId: tx.id });
}

function invalid(message: string, details?: Readonly<Record<string, unknown>>): BasaltError {
  return new BasaltError('INVALID_ARGUMENT', message, details);
}

function protocolError(message: string): BasaltError {
  return new BasaltError('INTERNAL', message);
}

function expectResult<K extends RoResult['op']>(result: RoResult, op: K): ResultOf<K> {
  if (result?.op !== op) throw protocolError(`expected a ${op} result, got ${String(result?.op)}`);
  return result as ResultOf<K>;
}

function foundToValue(found: FoundValue): Value | undefined {
  return found.found ? found.value : undefined;
}
