/**
 * The Raft commands of a partition: readonly plain data tagged by `kind`, encoded with the wire codec into the bytes
 * a Raft entry carries. Every command carries its proposal timestamp `ts` (the state machine turns it into the
 * effective timestamp, rule 9) and the id of its proposal (so the proposer gets the apply result, rule 4).
 *
 * Commands name keys, never row ids: row ids are replica-local. Data commands (Update, UpdateAll, one-phase `full`)
 * carry the lease token they were proposed under and a per-lease sequence number (rule 4); an UpdateBatch carries
 * several txs' data items, each with its own token and sequence number, in one entry.
 *
 * Validation is strict and happens on both sides: `encodeCommand` refuses a malformed command (INVALID_ARGUMENT: the
 * proposer's bug, caught before it reaches the log), and `decodeCommand` refuses anything malformed found in the log
 * (INTERNAL: we wrote it, so it is a bug or corruption; the apply throws and the Raft driver fails the group loudly).
 */
import { BasaltError, invalidArgument } from '../../core/errors.js';
import type { HybridTimestamp, NodeId, PartitionId, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import { MAX_TIMESTAMP } from '../../hlc/timestamp.js';
import { decode, encode } from '../../net/codec.js';
import type { Expiry, Value } from '../../storage/mv-partition-storage.js';
import type { InflightWrites } from '../../storage/tx-state-storage.js';
import { isTxId } from '../../tx/core/tx-id.js';
import { isWellFormedLease, type Lease, type LeaseToken } from './lease.js';

/** Identifies one proposal: the proposing replica incarnation and its counter (unique within that incarnation). */
export interface ProposalId {
  readonly nodeId: NodeId;
  readonly incarnation: string;
  readonly counter: number;
}

export interface CommandBase {
  /** The proposal timestamp, taken from the proposer's clock (and registered in flight in the same step). */
  readonly ts: HybridTimestamp;
  readonly proposalId: ProposalId;
}

export type RowWrite =
  | { readonly kind: 'put'; readonly key: string; readonly value: Value; readonly expiry?: Expiry }
  | { readonly kind: 'remove'; readonly key: string };

/** Grants, extends or replaces the partition's lease (rule 3). `replaces`: the lease it names (null: none yet). */
export interface LeaseCommand extends CommandBase {
  readonly kind: 'Lease';
  readonly lease: Lease;
  readonly replaces: LeaseToken | null;
}

/** What a data write carries besides its writes, its timestamp and its proposal id. */
interface DataFields {
  /** The lease the primary proposed under; the command applies only if it is current at its log position. */
  readonly token: LeaseToken;
  /** Per-lease sequence number, strictly increasing in proposal order; a stale one applies as a no-op. */
  readonly seq: number;
  readonly txId: TxId;
  readonly coordinatorId: NodeId;
  readonly commitPartitionId: PartitionId;
  /** One-phase commit: write committed versions at the effective timestamp, no intents, no map entries. */
  readonly full: boolean;
}

interface DataCommandBase extends CommandBase, DataFields {}

export interface UpdateCommand extends DataCommandBase {
  readonly kind: 'Update';
  readonly write: RowWrite;
}

export interface UpdateAllCommand extends DataCommandBase {
  readonly kind: 'UpdateAll';
  /** Distinct keys, at most LIMITS.updateAllWritesMax of them. */
  readonly writes: readonly RowWrite[];
}

/** One tx's data write inside an UpdateBatch: what its own Update or UpdateAll would carry besides ts and proposalId. */
export interface DataItem extends DataFields {
  /** Distinct keys; every item's writes together at most LIMITS.updateAllWritesMax, no key in two items. */
  readonly writes: readonly RowWrite[];
}

/** A data write before its sequence number is drawn (PartitionReplica.proposeData, write-batcher.ts). */
export type DataProposal = Omit<DataItem, 'seq'>;

/**
 * Data writes of several txs in one entry (replica setting `batchWrites`): applies exactly as the items' own Update
 * or UpdateAll commands would, one after the other in item order, at this one entry's effective timestamp; each item
 * is checked by itself (rule 4: token, sequence number; a tx write's timestamp against this entry's `ts`), so one
 * item applying as a no-op leaves the others alone. Every item names the same lease token; their txs are distinct
 * and their sequence numbers strictly increase in item order.
 */
export interface UpdateBatchCommand extends CommandBase {
  readonly kind: 'UpdateBatch';
  /** At least two, at most LIMITS.updateBatchItemsMax. */
  readonly items: readonly DataItem[];
}

/** The durable finish on the commit partition: compare-and-set of the outcome (first one wins). */
export interface FinishTxCommand extends CommandBase {
  readonly kind: 'FinishTx';
  readonly txId: TxId;
  readonly commit: boolean;
  /** Set exactly when `commit`. */
  readonly commitTs: HybridTimestamp | null;
  readonly enlistedPartitions: readonly PartitionId[];
  /**
   * Also switch the tx's intents on this partition to the stored outcome, in this entry, as a WriteIntentSwitch right
   * after it would: the commit partition's own cleanup then finds nothing to switch and costs no entry of its own.
   * Absent in entries written before it existed (they apply as they did).
   */
  readonly switchIntents?: boolean;
  /** A commit that carries its writes to this partition (see CarriedWrites). Absent: nothing carried. */
  readonly carried?: CarriedWrites;
  /**
   * A parallel commit (DESIGN §4b "Fewer rounds per commit"): stores a committing record naming the writes whose apply
   * is not yet confirmed, instead of the outcome; carried writes are written as intents. Only on a commit.
   */
  readonly committing?: { readonly inflight: readonly InflightWrites[] };
  /**
   * The outcome of a committing tx, decided by whoever checked its in-flight writes: it replaces the committing
   * record (a COMMITTED one keeps the record's commitTs). Without it a FinishTx on a committing tx changes nothing
   * and answers COMMITTING: nobody aborts a committing tx without checking its writes.
   */
  readonly settled?: boolean;
}

/**
 * The writes a commit carries to its commit partition, which hold their X locks there under `token` (DESIGN §4b
 * "Fewer rounds per commit"). They are written as committed versions at this entry's effective timestamp e, which
 * is then the commitTs stored (the command's `commitTs` is only its lower bound), provided `token` names the lease
 * current here with e inside it, e < `bound` (the tx's deadline and every other enlisted lease's expiration), and no
 * key holds an intent. Otherwise the entry stores ABORTED and writes nothing: every replica decides alike.
 */
export interface CarriedWrites {
  readonly token: LeaseToken;
  readonly bound: HybridTimestamp;
  /** Distinct keys, at most LIMITS.updateAllWritesMax of them. */
  readonly writes: readonly RowWrite[];
}

/** Cleanup on an enlisted partition: commit or abort every intent of the tx. */
export interface WriteIntentSwitchCommand extends CommandBase {
  readonly kind: 'WriteIntentSwitch';
  readonly txId: TxId;
  readonly commit: boolean;
  readonly commitTs: HybridTimestamp | null;
}

/** One tx's switch inside a WriteIntentSwitchAll. */
export interface IntentSwitch {
  readonly txId: TxId;
  readonly commit: boolean;
  readonly commitTs: HybridTimestamp | null;
}

/**
 * Cleanup of several txs on an enlisted partition in one entry: applies exactly as the WriteIntentSwitch commands of
 * `switches` would, one after the other in this order, at this one entry's effective timestamp.
 */
export interface WriteIntentSwitchAllCommand extends CommandBase {
  readonly kind: 'WriteIntentSwitchAll';
  /** Distinct txs, at least one and at most LIMITS.intentSwitchBatchMax. */
  readonly switches: readonly IntentSwitch[];
}

/** Advances safe time on every replica when nothing else did (only its timestamp has effects). */
export interface SafeTimeSyncCommand extends CommandBase {
  readonly kind: 'SafeTimeSync';
}

/** Commit partition: cleanup completed on every enlisted partition of these txs (enables vacuum, stops recovery). */
export interface TxCleanupCompletedCommand extends CommandBase {
  readonly kind: 'TxCleanupCompleted';
  readonly txIds: readonly TxId[];
}

/** Commit partition: remove durable records whose retention has passed, raising the vacuum horizon (rule 15). */
export interface VacuumTxStatesCommand extends CommandBase {
  readonly kind: 'VacuumTxStates';
  readonly txIds: readonly TxId[];
}

export type DataCommand = UpdateCommand | UpdateAllCommand;

export type PartitionCommand =
  | LeaseCommand
  | UpdateCommand
  | UpdateAllCommand
  | UpdateBatchCommand
  | FinishTxCommand
  | WriteIntentSwitchCommand
  | WriteIntentSwitchAllCommand
  | SafeTimeSyncCommand
  | TxCleanupCompletedCommand
  | VacuumTxStatesCommand;

export type PartitionCommandKind = PartitionCommand['kind'];

export function isDataCommand(command: PartitionCommand): command is DataCommand {
  return command.kind === 'Update' || command.kind === 'UpdateAll';
}

/** The lease token a data-carrying command (Update, UpdateAll, UpdateBatch) was proposed under; else undefined. */
export function dataTokenOf(command: PartitionCommand): LeaseToken | undefined {
  if (isDataCommand(command)) return command.token;
  return command.kind === 'UpdateBatch' ? command.items[0]?.token : undefined;
}

/** The writes of a data command, in order. */
export function writesOf(command: DataCommand): readonly RowWrite[] {
  return command.kind === 'Update' ? [command.write] : command.writes;
}

/** An UpdateBatch item as the Update (one write) or UpdateAll command it stands for, at the batch's ts. */
export function itemCommand(batch: UpdateBatchCommand, item: DataItem): DataCommand {
  return dataCommand({ ts: batch.ts, proposalId: batch.proposalId }, item);
}

/** The Update (one write) or UpdateAll command carrying `item` under `base`. */
export function dataCommand(base: CommandBase, item: DataItem): DataCommand {
  const { writes, ...rest } = item;
  const [only] = writes;
  return writes.length === 1 && only !== undefined
    ? { ...base, ...rest, kind: 'Update', write: only }
    : { ...base, ...rest, kind: 'UpdateAll', writes };
}

// ------------------------------------------------------------------------------------------ encoding

/** Encodes a command for Raft after validating it; a malformed command is refused with INVALID_ARGUMENT. */
export function encodeCommand(command: PartitionCommand): Uint8Array {
  const problem = commandProblem(command);
  if (problem !== undefined) throw invalidArgument(`malformed ${describeKind(command)} command: ${problem}`);
  return encode(command);
}

/** Decodes and validates a command from a Raft entry; anything malformed is a bug or corruption (INTERNAL). */
export function decodeCommand(bytes: Uint8Array): PartitionCommand {
  let value: unknown;
  try {
    value = decode(bytes);
  } catch (error) {
    throw new BasaltError('INTERNAL', 'undecodable partition command in the Raft log', undefined, { cause: error });
  }
  const problem = commandProblem(value);
  if (problem !== undefined) {
    throw new BasaltError('INTERNAL', `malformed ${describeKind(value)} command in the Raft log: ${problem}`);
  }
  return value as PartitionCommand;
}

function describeKind(value: unknown): string {
  const kind = isRecord(value) ? value['kind'] : undefined;
  return typeof kind === 'string' ? kind.slice(0, 40) : 'partition';
}

// ------------------------------------------------------------------------------------------ validation

type Problem = string | undefined;
type Rec = Readonly<Record<string, unknown>>;

const ID_CHARS_MAX = LIMITS.identityCharsMax;
const PARTITION_ID_CHARS_MAX = 256;

function isRecord(value: unknown): value is Rec {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Uint8Array);
}

function isTimestamp(value: unknown): value is HybridTimestamp {
  return typeof value === 'bigint' && value > 0n && value < MAX_TIMESTAMP;
}

function isId(value: unknown, charsMax: number): value is string {
  return typeof value === 'string' && value.length > 0 && value.length <= charsMax && !value.includes('\0');
}

function isCounter(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value > 0;
}

/** Checks the exact field set: a missing or an unknown field is malformed. */
function fieldsProblem(value: Rec, fields: readonly string[]): Problem {
  for (const f of fields) if (!(f in value)) return `missing field ${f}`;
  for (const f of Object.keys(value)) if (!fields.includes(f)) return `unknown field ${f.slice(0, 40)}`;
  return undefined;
}

function holderProblem(value: unknown): Problem {
  if (!isRecord(value)) return 'holder is not a record';
  const p = fieldsProblem(value, ['nodeId', 'incarnation']);
  if (p !== undefined) return `holder: ${p}`;
  if (!isId(value['nodeId'], ID_CHARS_MAX)) return 'holder nodeId';
  if (!isId(value['incarnation'], ID_CHARS_MAX)) return 'holder incarnation';
  return undefined;
}

function tokenProblem(value: unknown): Problem {
  if (!isRecord(value)) return 'token is not a record';
  return (
    fieldsProblem(value, ['holder', 'start']) ?? holderProblem(value['holder']) ?? timestampProblem(value, 'start')
  );
}

/** Why `value` is not a well-formed lease, or undefined when it is one (also used for the durable lease record). */
export function leaseProblem(value: unknown): Problem {
  if (!isRecord(value)) return 'lease is not a record';
  const p =
    fieldsProblem(value, ['holder', 'holderName', 'start', 'expiration']) ??
    holderProblem(value['holder']) ??
    timestampProblem(value, 'start') ??
    timestampProblem(value, 'expiration');
  if (p !== undefined) return `lease: ${p}`;
  if (!isId(value['holderName'], ID_CHARS_MAX)) return 'lease holderName';
  if (!isWellFormedLease(value as unknown as Lease)) return 'lease start must be below its expiration';
  return undefined;
}

function timestampProblem(value: Rec, field: string): Problem {
  return isTimestamp(value[field]) ? undefined : `${field} is not a timestamp`;
}

function proposalIdProblem(value: unknown): Problem {
  if (!isRecord(value)) return 'proposalId is not a record';
  const p = fieldsProblem(value, ['nodeId', 'incarnation', 'counter']);
  if (p !== undefined) return `proposalId: ${p}`;
  if (!isId(value['nodeId'], ID_CHARS_MAX) || !isId(value['incarnation'], ID_CHARS_MAX)) return 'proposalId ids';
  return isCounter(value['counter']) ? undefined : 'proposalId counter';
}

function isPartitionId(value: unknown): value is PartitionId {
  return isId(value, PARTITION_ID_CHARS_MAX);
}

/** A stored value: JSON-compatible data, or bytes at the top level (storage's `Value`). */
function valueProblem(value: unknown): Problem {
  if (value instanceof Uint8Array) return undefined;
  return jsonProblem(value, 0);
}

function jsonProblem(value: unknown, depth: number): Problem {
  if (depth > LIMITS.codecDepthMax) return 'value nested too deep';
  if (value === null || typeof value === 'boolean' || typeof value === 'string') return undefined;
  if (typeof value === 'number') return Number.isFinite(value) ? undefined : 'value holds a non-finite number';
  if (Array.isArray(value)) {
    for (const item of value) {
      const p = jsonProblem(item, depth + 1);
      if (p !== undefined) return p;
    }
    return undefined;
  }
  if (isRecord(value) && Object.getPrototypeOf(value) === Object.prototype) {
    // msgpack decoders drop a `__proto__` key (prototype pollution guard), so it could not round-trip.
    if (Object.hasOwn(value, '__proto__')) return 'value has a __proto__ key';
    for (const item of Object.values(value)) {
      const p = jsonProblem(item, depth + 1);
      if (p !== undefined) return p;
    }
    return undefined;
  }
  return 'value is not JSON-compatible data or bytes';
}

/** In a `u` regex a surrogate pair is one code point, so this matches only unpaired surrogates (no UTF-8 form). */
const LONE_SURROGATE = /\p{Surrogate}/u;

function keyProblem(key: unknown): Problem {
  if (typeof key !== 'string') return 'key is not a string';
  if (LONE_SURROGATE.test(key)) return 'key is not well-formed Unicode';
  if (Buffer.byteLength(key, 'utf8') > LIMITS.keyBytesMax) return 'key above keyBytesMax';
  return undefined;
}

function writeProblem(value: unknown): Problem {
  if (!isRecord(value)) return 'write is not a record';
  switch (value['kind']) {
    case 'put':
      return (
        fieldsProblem(value, 'expiry' in value ? ['kind', 'key', 'value', 'expiry'] : ['kind', 'key', 'value']) ??
        keyProblem(value['key']) ??
        valueProblem(value['value']) ??
        expiryProblem(value['expiry'])
      );
    case 'remove':
      return fieldsProblem(value, ['kind', 'key']) ?? keyProblem(value['key']);
    default:
      return 'write kind';
  }
}

/** An absent expiry, a ttl in 1..ttlMsMax, or an absolute timestamp (entries written before expiry have none). */
function expiryProblem(value: unknown): Problem {
  if (value === undefined) return undefined;
  if (!isRecord(value)) return 'expiry is not a record';
  if ('at' in value) return fieldsProblem(value, ['at']) ?? timestampProblem(value, 'at');
  const ttlMs = value['ttlMs'];
  const inRange = Number.isSafeInteger(ttlMs) && (ttlMs as number) >= 1 && (ttlMs as number) <= LIMITS.ttlMsMax;
  return fieldsProblem(value, ['ttlMs']) ?? (inRange ? undefined : 'expiry ttlMs out of range');
}

function writesProblem(value: unknown): Problem {
  if (!Array.isArray(value) || value.length === 0) return 'writes must be a non-empty array';
  if (value.length > LIMITS.updateAllWritesMax) return `more than ${LIMITS.updateAllWritesMax} writes`;
  const keys = new Set<string>();
  for (const w of value) {
    const p = writeProblem(w);
    if (p !== undefined) return p;
    const key = (w as { key: string }).key;
    if (keys.has(key)) return 'the same key is written twice';
    keys.add(key);
  }
  return undefined;
}

function txIdsProblem(value: unknown): Problem {
  if (!Array.isArray(value) || value.length === 0) return 'txIds must be a non-empty array';
  if (value.length > LIMITS.txStateVacuumBatchMax) return `more than ${LIMITS.txStateVacuumBatchMax} tx ids`;
  return value.every(isTxId) ? undefined : 'malformed tx id';
}

function switchesProblem(value: unknown): Problem {
  if (!Array.isArray(value) || value.length === 0) return 'switches must be a non-empty array';
  if (value.length > LIMITS.intentSwitchBatchMax) return `more than ${LIMITS.intentSwitchBatchMax} switches`;
  const txIds = new Set<string>();
  for (const item of value as unknown[]) {
    if (!isRecord(item)) return 'switch is not a record';
    const p = fieldsProblem(item, ['txId', 'commit', 'commitTs']) ?? outcomeProblem(item);
    if (p !== undefined) return `switch: ${p}`;
    if (!isTxId(item['txId'])) return 'switch: txId';
    if (txIds.has(item['txId'])) return 'the same tx is switched twice';
    txIds.add(item['txId']);
  }
  return undefined;
}

function carriedProblem(value: unknown, commit: unknown): Problem {
  if (commit !== true) return 'only a commit carries writes';
  if (!isRecord(value)) return 'carried is not a record';
  return (
    fieldsProblem(value, ['token', 'bound', 'writes']) ??
    tokenProblem(value['token']) ??
    timestampProblem(value, 'bound') ??
    writesProblem(value['writes'])
  );
}

function committingProblem(value: unknown, commit: unknown): Problem {
  if (commit !== true) return 'only a commit is committing';
  if (!isRecord(value)) return 'committing is not a record';
  const inflight = value['inflight'];
  const p = fieldsProblem(value, ['inflight']);
  if (p !== undefined) return p;
  if (!Array.isArray(inflight) || inflight.length === 0) return 'inflight must be a non-empty array';
  if (inflight.length > LIMITS.finishEnlistedPartitionsMax) return 'too many inflight partitions';
  let keys = 0;
  for (const w of inflight as unknown[]) {
    if (!isRecord(w)) return 'inflight entry is not a record';
    const q = fieldsProblem(w, ['partitionId', 'keys']);
    if (q !== undefined) return q;
    if (!isPartitionId(w['partitionId'])) return 'inflight partitionId';
    const ks = w['keys'];
    if (!Array.isArray(ks) || ks.length === 0 || !ks.every((k) => typeof k === 'string')) return 'inflight keys';
    keys += ks.length;
  }
  return keys > LIMITS.updateAllWritesMax ? `more than ${LIMITS.updateAllWritesMax} inflight keys` : undefined;
}

function outcomeProblem(value: Rec): Problem {
  if (typeof value['commit'] !== 'boolean') return 'commit is not a boolean';
  if (value['commit']) return isTimestamp(value['commitTs']) ? undefined : 'a commit needs its commitTs';
  return value['commitTs'] === null ? undefined : 'an abort has no commitTs';
}

const BASE_FIELDS = ['kind', 'ts', 'proposalId'] as const;
const DATA_FIELDS = [...BASE_FIELDS, 'token', 'seq', 'txId', 'coordinatorId', 'commitPartitionId', 'full'] as const;

function dataProblem(value: Rec, extra: string): Problem {
  return fieldsProblem(value, [...DATA_FIELDS, extra]) ?? dataFieldsProblem(value);
}

function dataFieldsProblem(value: Rec): Problem {
  return (
    tokenProblem(value['token']) ??
    (isCounter(value['seq']) ? undefined : 'seq') ??
    (isTxId(value['txId']) ? undefined : 'txId') ??
    (isId(value['coordinatorId'], ID_CHARS_MAX) ? undefined : 'coordinatorId') ??
    (isPartitionId(value['commitPartitionId']) ? undefined : 'commitPartitionId') ??
    (typeof value['full'] === 'boolean' ? undefined : 'full')
  );
}

const ITEM_FIELDS = ['token', 'seq', 'txId', 'coordinatorId', 'commitPartitionId', 'full', 'writes'] as const;

function itemsProblem(value: unknown): Problem {
  if (!Array.isArray(value) || value.length < 2) return 'items must be an array of at least two';
  if (value.length > LIMITS.updateBatchItemsMax) return `more than ${LIMITS.updateBatchItemsMax} items`;
  const txIds = new Set<string>();
  const keys = new Set<string>();
  let previous: Rec | undefined;
  for (const item of value as unknown[]) {
    if (!isRecord(item)) return 'item is not a record';
    const p = fieldsProblem(item, ITEM_FIELDS) ?? dataFieldsProblem(item) ?? writesProblem(item['writes']);
    if (p !== undefined) return `item: ${p}`;
    if (previous !== undefined) {
      if (!sameTokenFields(previous['token'] as Rec, item['token'] as Rec)) return 'items under different tokens';
      if ((item['seq'] as number) <= (previous['seq'] as number)) return 'item seqs must strictly increase';
    }
    if (txIds.has(item['txId'] as string)) return 'the same tx has two items';
    txIds.add(item['txId'] as string);
    for (const w of item['writes'] as readonly { key: string }[]) {
      if (keys.has(w.key)) return 'the same key is written by two items';
      keys.add(w.key);
    }
    if (keys.size > LIMITS.updateAllWritesMax) return `more than ${LIMITS.updateAllWritesMax} writes`;
    previous = item;
  }
  return undefined;
}

/** Equal well-formed tokens (checked by tokenProblem first). */
function sameTokenFields(a: Rec, b: Rec): boolean {
  const ha = a['holder'] as Rec;
  const hb = b['holder'] as Rec;
  return a['start'] === b['start'] && ha['nodeId'] === hb['nodeId'] && ha['incarnation'] === hb['incarnation'];
}

function kindProblem(value: Rec): Problem {
  const kind = value['kind'] as PartitionCommandKind;
  switch (kind) {
    case 'Lease':
      return (
        fieldsProblem(value, [...BASE_FIELDS, 'lease', 'replaces']) ??
        leaseProblem(value['lease']) ??
        (value['replaces'] === null ? undefined : tokenProblem(value['replaces']))
      );
    case 'Update':
      return dataProblem(value, 'write') ?? writeProblem(value['write']);
    case 'UpdateAll':
      return dataProblem(value, 'writes') ?? writesProblem(value['writes']);
    case 'UpdateBatch':
      return fieldsProblem(value, [...BASE_FIELDS, 'items']) ?? itemsProblem(value['items']);
    case 'FinishTx': {
      const enlisted = value['enlistedPartitions'];
      return (
        fieldsProblem(value, [
          ...BASE_FIELDS,
          'txId',
          'commit',
          'commitTs',
          'enlistedPartitions',
          ...('switchIntents' in value ? ['switchIntents'] : []),
          ...('carried' in value ? ['carried'] : []),
          ...('committing' in value ? ['committing'] : []),
          ...('settled' in value ? ['settled'] : []),
        ]) ??
        (value['carried'] === undefined ? undefined : carriedProblem(value['carried'], value['commit'])) ??
        (value['committing'] === undefined ? undefined : committingProblem(value['committing'], value['commit'])) ??
        (value['settled'] === undefined || typeof value['settled'] === 'boolean' ? undefined : 'settled') ??
        (value['settled'] === true && value['committing'] !== undefined
          ? 'a settled finish is not committing'
          : undefined) ??
        (isTxId(value['txId']) ? undefined : 'txId') ??
        (value['switchIntents'] === undefined || typeof value['switchIntents'] === 'boolean'
          ? undefined
          : 'switchIntents') ??
        outcomeProblem(value) ??
        (Array.isArray(enlisted) &&
        enlisted.length <= LIMITS.finishEnlistedPartitionsMax &&
        enlisted.every(isPartitionId)
          ? undefined
          : 'enlistedPartitions')
      );
    }
    case 'WriteIntentSwitch':
      return (
        fieldsProblem(value, [...BASE_FIELDS, 'txId', 'commit', 'commitTs']) ??
        (isTxId(value['txId']) ? undefined : 'txId') ??
        outcomeProblem(value)
      );
    case 'WriteIntentSwitchAll':
      return fieldsProblem(value, [...BASE_FIELDS, 'switches']) ?? switchesProblem(value['switches']);
    case 'SafeTimeSync':
      return fieldsProblem(value, BASE_FIELDS);
    case 'TxCleanupCompleted':
    case 'VacuumTxStates':
      return fieldsProblem(value, [...BASE_FIELDS, 'txIds']) ?? txIdsProblem(value['txIds']);
    default:
      return `unknown kind ${String(kind).slice(0, 40)}`;
  }
}

/** Why `value` is not a well-formed partition command, or undefined when it is one. */
export function commandProblem(value: unknown): Problem {
  if (!isRecord(value)) return 'not a record';
  return timestampProblem(value, 'ts') ?? proposalIdProblem(value['proposalId']) ?? kindProblem(value);
}
