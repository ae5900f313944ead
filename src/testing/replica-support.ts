/**
 * Builders shared by the replica tests: a manual physical clock, a replica wired to memory storage, and a log builder
 * that turns commands into committed Raft entries with consecutive indexes. Not exported from the package.
 */
import assert from 'node:assert/strict';
import { isBasaltError } from '../core/errors.js';
import {
  type HybridTimestamp,
  type LogIndex,
  type NodeId,
  type NodeName,
  nodeName,
  type PartitionId,
  type Term,
  type TxId,
} from '../core/ids.js';
import type { Clock } from '../env/clock.js';
import { HybridClock } from '../hlc/hybrid-clock.js';
import { hybridTimestamp } from '../hlc/timestamp.js';
import { encode } from '../net/codec.js';
import type { Entry } from '../raft/types.js';
import type { ApplyResult } from '../replica/partition/apply-result.js';
import {
  commandProblem,
  type DataCommand,
  type DataItem,
  decodeCommand,
  encodeCommand,
  type FinishTxCommand,
  type LeaseCommand,
  type PartitionCommand,
  type ProposalId,
  type RowWrite,
  type UpdateAllCommand,
  type UpdateBatchCommand,
  type UpdateCommand,
  type WriteIntentSwitchCommand,
  writesOf,
} from '../replica/partition/commands.js';
import { type Lease, type LeaseToken, type ReplicaIncarnation, tokenOf } from '../replica/partition/lease.js';
import { PartitionReplica, type PartitionReplicaOptions } from '../replica/partition/partition-replica.js';
import { ProposalTracker, type SubmitProposal } from '../replica/partition/proposals.js';
import { PartitionStateMachine, type PartitionStateMachineOptions } from '../replica/partition/state-machine.js';
import { SeededRandom } from '../sim/random.js';
import type { Value } from '../storage/mv-partition-storage.js';
import { MemoryStorageEngine, type StorageEngine } from '../storage/storage-engine.js';
import { makeTxId } from '../tx/core/tx-id.js';
import { TxStateMap } from '../tx/core/tx-state-map.js';

export const PARTITION = 't1p0' as PartitionId;
export const OTHER_PARTITION = 't1p1' as PartitionId;

export class ManualClock implements Clock {
  constructor(public ms: number) {}
  nowMs(): number {
    return this.ms;
  }
  monotonicMs(): number {
    return this.ms;
  }
}

/** HLC timestamp at `ms` physical milliseconds (logical 0). */
export const at = (ms: number, logical = 0): HybridTimestamp => hybridTimestamp(ms, logical);

export function incarnation(node: string, inc = 'i1'): ReplicaIncarnation {
  return { nodeId: node as NodeId, incarnation: inc };
}

export function lease(holder: ReplicaIncarnation, startMs: number, expirationMs: number): Lease {
  return { holder, holderName: `name-${holder.nodeId}` as NodeName, start: at(startMs), expiration: at(expirationMs) };
}

export function txIdAt(beginMs: number, counter = 1, node = 'coord'): TxId {
  return makeTxId({ beginTimestamp: at(beginMs), nodeId: node as NodeId, counter });
}

export const COORDINATOR = 'coord' as NodeId;

let foreignCounter = 0;
/** A proposal id of some other replica (results are not routed anywhere here). */
export function foreignProposal(): ProposalId {
  foreignCounter++;
  return { nodeId: 'elsewhere' as NodeId, incarnation: 'x', counter: foreignCounter };
}

// ---------------------------------------------------------------------------------------- command builders

export function leaseCommand(l: Lease, replaces: Lease | LeaseToken | null, tsMs: number): LeaseCommand {
  const token = replaces === null ? null : 'expiration' in replaces ? tokenOf(replaces) : replaces;
  return { kind: 'Lease', ts: at(tsMs), proposalId: foreignProposal(), lease: l, replaces: token };
}

export interface DataOptions {
  readonly txId?: TxId;
  readonly full?: boolean;
  readonly commitPartitionId?: PartitionId;
}

export function put(key: string, value: Value): RowWrite {
  return { kind: 'put', key, value };
}

export function remove(key: string): RowWrite {
  return { kind: 'remove', key };
}

export function update(
  under: Lease | LeaseToken,
  seq: number,
  write: RowWrite,
  tsMs: number,
  options: DataOptions = {},
): UpdateCommand {
  return {
    kind: 'Update',
    ts: at(tsMs),
    proposalId: foreignProposal(),
    token: 'expiration' in under ? tokenOf(under) : under,
    seq,
    txId: options.txId ?? txIdAt(1),
    coordinatorId: COORDINATOR,
    commitPartitionId: options.commitPartitionId ?? PARTITION,
    full: options.full ?? false,
    write,
  };
}

export function updateAll(
  under: Lease | LeaseToken,
  seq: number,
  writes: readonly RowWrite[],
  tsMs: number,
  options: DataOptions = {},
): UpdateAllCommand {
  const { write: _unused, ...base } = update(under, seq, writes[0]!, tsMs, options);
  return { ...base, kind: 'UpdateAll', writes };
}

/** An UpdateBatch at `tsMs` holding the data items of `commands` (their own ts and proposal ids are dropped). */
export function updateBatch(tsMs: number, commands: readonly DataCommand[]): UpdateBatchCommand {
  const items = commands.map(
    (c): DataItem => ({
      token: c.token,
      seq: c.seq,
      txId: c.txId,
      coordinatorId: c.coordinatorId,
      commitPartitionId: c.commitPartitionId,
      full: c.full,
      writes: writesOf(c),
    }),
  );
  return { kind: 'UpdateBatch', ts: at(tsMs), proposalId: foreignProposal(), items };
}

export function finish(
  txId: TxId,
  outcome: { commitTs: HybridTimestamp } | 'abort',
  tsMs: number,
  enlisted: readonly PartitionId[] = [PARTITION],
): FinishTxCommand {
  const commit = outcome !== 'abort';
  return {
    kind: 'FinishTx',
    ts: at(tsMs),
    proposalId: foreignProposal(),
    txId,
    commit,
    commitTs: commit ? outcome.commitTs : null,
    enlistedPartitions: enlisted,
  };
}

export function switchIntents(
  txId: TxId,
  outcome: { commitTs: HybridTimestamp } | 'abort',
  tsMs: number,
): WriteIntentSwitchCommand {
  const commit = outcome !== 'abort';
  return {
    kind: 'WriteIntentSwitch',
    ts: at(tsMs),
    proposalId: foreignProposal(),
    txId,
    commit,
    commitTs: commit ? outcome.commitTs : null,
  };
}

export function safeTimeSync(tsMs: number): PartitionCommand {
  return { kind: 'SafeTimeSync', ts: at(tsMs), proposalId: foreignProposal() };
}

// ---------------------------------------------------------------------------------------- log and replica

/** Builds committed entries with consecutive indexes. */
export class LogBuilder {
  private index = 0;
  term = 1;

  data(command: PartitionCommand): Entry {
    return this.entry('data', encodeCommand(command));
  }

  noop(): Entry {
    return this.entry('noop', new Uint8Array(0));
  }

  private entry(kind: Entry['kind'], data: Uint8Array): Entry {
    this.index++;
    return { term: this.term as Term, index: this.index as LogIndex, kind, data };
  }
}

export interface TestReplica {
  readonly engine: StorageEngine;
  readonly map: TxStateMap;
  readonly physical: ManualClock;
  readonly clock: HybridClock;
  readonly tracker: ProposalTracker;
  readonly sm: PartitionStateMachine;
}

export interface TestReplicaOptions extends Partial<PartitionStateMachineOptions> {
  readonly self?: ReplicaIncarnation;
  readonly physicalMs?: number;
  readonly maxClockSkewMs?: number;
}

export function testReplica(options: TestReplicaOptions = {}): TestReplica {
  const engine = options.engine ?? new MemoryStorageEngine();
  const physical = new ManualClock(options.physicalMs ?? 1);
  const clock = options.clock ?? new HybridClock(physical, { maxClockSkewMs: options.maxClockSkewMs ?? 10 });
  const map = options.txStateMap ?? new TxStateMap({ clock: physical });
  const tracker = options.proposals ?? new ProposalTracker(options.self ?? incarnation('self'), clock);
  const sm = new PartitionStateMachine({
    ...options,
    partitionId: options.partitionId ?? PARTITION,
    engine,
    txStateMap: map,
    clock,
    proposals: tracker,
  });
  return { engine, map, physical, clock, tracker, sm };
}

/** Applies each command as its own committed entry; returns the results. */
export function applyAll(replica: TestReplica, log: LogBuilder, commands: readonly PartitionCommand[]): ApplyResult[] {
  const entries = commands.map((c) => log.data(c));
  const results: unknown[] = [];
  const stop = replica.sm.onApplied((applied) => {
    for (const a of applied) results.push(a.result);
  });
  replica.sm.apply(entries);
  stop();
  return results as ApplyResult[];
}

/** Asserts two byte arrays hold the same bytes (Buffers from the codec may carry extra own properties). */
export function assertSameBytes(actual: Uint8Array, expected: Uint8Array, message?: string): void {
  if (Buffer.compare(actual, expected) === 0) return;
  throw new Error(
    `${message ?? 'bytes differ'}: ${actual.length} vs ${expected.length} bytes, first difference at ${firstDifference(actual, expected)}`,
  );
}

function firstDifference(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return n;
}

/** Checks that a malformed command is refused on encode and, written raw into the log, on decode. */
export function assertCommandRefused(command: unknown, why: RegExp): void {
  assert.match(commandProblem(command) ?? 'accepted', why);
  assert.throws(
    () => encodeCommand(command as PartitionCommand),
    (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT'),
  );
  assert.throws(
    () => decodeCommand(encode(command)),
    (e: unknown) => isBasaltError(e, 'INTERNAL'),
  );
}

/** A partition replica alone on node `solo`, over memory storage, whose Raft is `submit` (the test applies entries). */
export function soloReplica(
  physical: ManualClock,
  clock: HybridClock,
  submit: SubmitProposal,
  options: Pick<PartitionReplicaOptions, 'timing' | 'timers'> & Partial<PartitionReplicaOptions>,
): PartitionReplica {
  return new PartitionReplica({
    partitionId: PARTITION,
    nodeId: 'solo' as NodeId,
    nodeName: nodeName('solo'),
    random: new SeededRandom(1),
    physicalClock: physical,
    clock,
    engine: new MemoryStorageEngine(),
    txStateMap: new TxStateMap({ clock: physical }),
    submit,
    ...options,
  });
}
