/**
 * Transaction ids. A TxId is text built so that plain string order is transaction age order:
 *
 *     <begin timestamp: 16 lowercase hex digits> '+' <node id> '+' <counter: 12 lowercase hex digits>
 *         [ '+' <timeout: 8 lowercase hex digits, ms> ]
 *
 * The begin timestamp comes first at fixed width, so an older tx (smaller begin timestamp) has a smaller id. Ties are
 * broken by the node's ephemeral id, then by a per-node counter. The separator '+' sorts below every character a node
 * id may contain ([A-Za-z0-9_-]), so a node id that is a prefix of another still compares as the shorter string does:
 * string order of ids equals the order of (beginTs, nodeId, counter) tuples. Wait-die relies on this (compareTxAge),
 * and rule 15 recovers the begin timestamp from the id.
 *
 * The optional last field is the tx's own timeout, for a tx begun with `timeoutMs`: every node then derives the same
 * hard deadline D = beginTs + timeout from the id alone. Without it, D = beginTs + the cluster-wide txTimeout (the
 * same on every node by configuration), so ids of txs begun without a timeout are exactly as before. The field never
 * decides the order: (beginTs, nodeId, counter) is unique, and ids that share a prefix up to the counter are one tx.
 *
 * Ids from the wire are validated with `asTxId`/`parseTxId` (malformed → INVALID_ARGUMENT); ids made here are valid
 * by construction.
 */
import { assert } from '../../core/assert.js';
import { invalidArgument } from '../../core/errors.js';
import type { HybridTimestamp, NodeId, TxId } from '../../core/ids.js';
import { addMs, asTimestamp, MIN_TIMESTAMP, physicalMs } from '../../hlc/timestamp.js';

const TIMESTAMP_HEX_DIGITS = 16;
const COUNTER_HEX_DIGITS = 12;
const TIMEOUT_HEX_DIGITS = 8;
/** Largest timeout a tx id can carry (about 49 days); a coordinator accepts far less (its txTimeoutMsMax). */
export const TX_ID_TIMEOUT_MS_MAX = 2 ** (4 * TIMEOUT_HEX_DIGITS) - 1;
/** Largest counter value that fits the fixed-width field; a node would need 2^48 txs to reach it. */
export const TX_ID_COUNTER_MAX = 2 ** (4 * COUNTER_HEX_DIGITS) - 1;
/** Longest node id accepted inside a tx id. */
export const TX_ID_NODE_ID_CHARS_MAX = 64;
const SEPARATOR = '+';
const NODE_ID_PATTERN = /^[A-Za-z0-9_-]+$/;
const TX_ID_PATTERN = new RegExp(
  `^([0-9a-f]{${TIMESTAMP_HEX_DIGITS}})\\${SEPARATOR}([A-Za-z0-9_-]{1,${TX_ID_NODE_ID_CHARS_MAX}})\\${SEPARATOR}([0-9a-f]{${COUNTER_HEX_DIGITS}})(?:\\${SEPARATOR}([0-9a-f]{${TIMEOUT_HEX_DIGITS}}))?$`,
);

export interface TxIdParts {
  readonly beginTimestamp: HybridTimestamp;
  readonly nodeId: NodeId;
  readonly counter: number;
  /** The tx's own timeout; absent for a tx that runs under the cluster-wide txTimeout. */
  readonly timeoutMs?: number;
}

/** True if `id` may be used inside a tx id (charset [A-Za-z0-9_-], 1..64 characters; UUIDs qualify). */
export function isValidTxIdNodeId(id: string): boolean {
  return id.length > 0 && id.length <= TX_ID_NODE_ID_CHARS_MAX && NODE_ID_PATTERN.test(id);
}

/** Builds a tx id from its parts. Misuse (null timestamp, bad node id, counter out of range) throws INVALID_ARGUMENT. */
export function makeTxId(parts: TxIdParts): TxId {
  const { beginTimestamp, nodeId, counter, timeoutMs } = parts;
  if (beginTimestamp < MIN_TIMESTAMP) throw invalidArgument('tx begin timestamp must not be null');
  if (!isValidTxIdNodeId(nodeId)) throw invalidArgument('node id not usable in a tx id', { nodeId });
  if (!Number.isInteger(counter) || counter < 0 || counter > TX_ID_COUNTER_MAX) {
    throw invalidArgument('tx id counter out of range', { counter });
  }
  if (timeoutMs !== undefined && !isTimeoutMs(timeoutMs)) {
    throw invalidArgument('tx id timeout out of range', { timeoutMs });
  }
  const ts = beginTimestamp.toString(16).padStart(TIMESTAMP_HEX_DIGITS, '0');
  const n = counter.toString(16).padStart(COUNTER_HEX_DIGITS, '0');
  const id = `${ts}${SEPARATOR}${nodeId}${SEPARATOR}${n}`;
  if (timeoutMs === undefined) return id as TxId;
  return `${id}${SEPARATOR}${timeoutMs.toString(16).padStart(TIMEOUT_HEX_DIGITS, '0')}` as TxId;
}

function isTimeoutMs(value: number): boolean {
  return Number.isInteger(value) && value > 0 && value <= TX_ID_TIMEOUT_MS_MAX;
}

/** Parses a tx id received from outside this process; anything malformed throws INVALID_ARGUMENT. */
export function parseTxId(text: unknown): TxIdParts {
  const match = typeof text === 'string' ? TX_ID_PATTERN.exec(text) : null;
  if (match === null) throw invalidArgument('malformed tx id', { txId: String(text).slice(0, 200) });
  const [, tsHex, node, counterHex, timeoutHex] = match;
  assert(tsHex !== undefined && node !== undefined && counterHex !== undefined, 'tx id pattern has three groups');
  const beginTimestamp = asTimestamp(BigInt(`0x${tsHex}`));
  if (beginTimestamp < MIN_TIMESTAMP) throw invalidArgument('tx id has a null begin timestamp', { txId: text });
  const counter = Number.parseInt(counterHex, 16);
  if (timeoutHex === undefined) return { beginTimestamp, nodeId: node as NodeId, counter };
  const timeoutMs = Number.parseInt(timeoutHex, 16);
  if (timeoutMs === 0) throw invalidArgument('tx id has a zero timeout', { txId: text });
  return { beginTimestamp, nodeId: node as NodeId, counter, timeoutMs };
}

/** True if `text` is a well-formed tx id. */
export function isTxId(text: unknown): text is TxId {
  if (typeof text !== 'string') return false;
  const match = TX_ID_PATTERN.exec(text);
  if (match === null || text.startsWith('0'.repeat(TIMESTAMP_HEX_DIGITS))) return false;
  return match[4] === undefined || Number.parseInt(match[4], 16) > 0;
}

/** Brands a tx id received from the wire after validating it (INVALID_ARGUMENT if malformed). */
export function asTxId(text: unknown): TxId {
  parseTxId(text);
  return text as TxId;
}

/** The begin timestamp embedded in a tx id. */
export function beginTimestampOf(id: TxId): HybridTimestamp {
  const tsHex = id.slice(0, TIMESTAMP_HEX_DIGITS);
  const ts = asTimestamp(BigInt(`0x${tsHex}`));
  assert(ts >= MIN_TIMESTAMP && id.charAt(TIMESTAMP_HEX_DIGITS) === SEPARATOR, 'tx id must be well formed');
  return ts;
}

/** The node (ephemeral id) that created the tx id, i.e. its coordinator at begin. */
export function nodeIdOf(id: TxId): NodeId {
  const start = TIMESTAMP_HEX_DIGITS + 1;
  // A node id holds no separator, so the one after it is the first after the timestamp.
  const end = id.indexOf(SEPARATOR, start);
  assert(end > start && end + 1 + COUNTER_HEX_DIGITS <= id.length, 'tx id must be well formed');
  return id.slice(start, end) as NodeId;
}

/** The tx's own timeout carried by its id, or undefined when it runs under the cluster-wide txTimeout. */
export function timeoutOf(id: TxId): number | undefined {
  const start = TIMESTAMP_HEX_DIGITS + 1;
  const end = id.indexOf(SEPARATOR, start);
  assert(end > start, 'tx id must be well formed');
  const afterCounter = end + 1 + COUNTER_HEX_DIGITS;
  if (id.length === afterCounter) return undefined;
  assert(id.length === afterCounter + 1 + TIMEOUT_HEX_DIGITS && id.charAt(afterCounter) === SEPARATOR, 'tx id timeout');
  const timeoutMs = Number.parseInt(id.slice(afterCounter + 1), 16);
  assert(timeoutMs > 0, 'tx id timeout must be positive');
  return timeoutMs;
}

/**
 * Orders txs by age: negative when `a` is older than `b` (began earlier), positive when younger, 0 for the same tx.
 * Plain string comparison, which the id layout makes equal to (beginTs, nodeId, counter) order.
 */
export function compareTxAge(a: TxId, b: TxId): number {
  if (a === b) return 0;
  return a < b ? -1 : 1;
}

/** True when `a` began before `b` (wait-die: an older requester may wait for a younger holder). */
export function isOlder(a: TxId, b: TxId): boolean {
  return compareTxAge(a, b) < 0;
}

/**
 * Rule 15: the tx's hard deadline D = beginTs + its timeout: the one its id carries, else `txTimeoutMs` (the
 * cluster-wide default, the same on every node). No commit may carry commitTs ≥ D.
 */
export function txDeadline(id: TxId, txTimeoutMs: number): HybridTimestamp {
  assert(Number.isInteger(txTimeoutMs) && txTimeoutMs > 0, 'tx timeout must be a positive integer');
  return addMs(beginTimestampOf(id), timeoutOf(id) ?? txTimeoutMs);
}

/**
 * Makes the tx ids of one node (one per node start: the node id is its ephemeral id). The counter makes ids unique
 * even if two txs were given the same begin timestamp.
 */
export class TxIdGenerator {
  private counter = 0;
  /** The last id made: each next one is younger (begin timestamps come from one node's clock, which never goes back). */
  private last: TxId | undefined;

  constructor(readonly nodeId: NodeId) {
    if (!isValidTxIdNodeId(nodeId)) throw invalidArgument('node id not usable in a tx id', { nodeId });
  }

  /** A fresh id for a tx that began at `beginTimestamp` (taken from the node's hybrid clock), with its own timeout. */
  next(beginTimestamp: HybridTimestamp, timeoutMs?: number): TxId {
    assert(this.counter < TX_ID_COUNTER_MAX, 'tx id counter exhausted');
    this.counter += 1;
    const parts = { beginTimestamp, nodeId: this.nodeId, counter: this.counter };
    const id = makeTxId(timeoutMs === undefined ? parts : { ...parts, timeoutMs });
    // Wait-die orders txs by id: a tx begun later on this node must be the younger one.
    assert(this.last === undefined || isOlder(this.last, id), 'tx ids of one node increase', this.last, id);
    this.last = id;
    return id;
  }

  /**
   * A fresh id for a retry of `earlier` (an id this generator made) begun at `beginTimestamp`, as old as `earlier` for
   * wait-die: it carries `earlier`'s begin timestamp, and a timeout stretched by the time since then, so that its
   * deadline D is still `beginTimestamp + timeoutMs` or later (never earlier: the stretch is rounded up to a whole
   * ms). Undefined when `earlier` is not this node's, began more than `timeoutMs` ago, or the stretched timeout would
   * not fit `timeoutMsMax` (the retry then takes a fresh id and age). The counter keeps it distinct from every other id.
   */
  nextRetry(earlier: TxId, beginTimestamp: HybridTimestamp, timeoutMs: number, timeoutMsMax: number): TxId | undefined {
    const parts = parseTxId(earlier);
    if (parts.nodeId !== this.nodeId || parts.beginTimestamp > beginTimestamp) return undefined;
    // +1: the logical part of `earlier` may exceed that of `beginTimestamp`.
    const stretchMs = physicalMs(beginTimestamp) - physicalMs(parts.beginTimestamp) + 1;
    const stretched = timeoutMs + stretchMs;
    // An age is kept for one timeout at most: a tx that kept failing that long starts again as the youngest.
    if (stretchMs > timeoutMs || stretched > timeoutMsMax) return undefined;
    assert(this.counter < TX_ID_COUNTER_MAX, 'tx id counter exhausted');
    this.counter += 1;
    const id = makeTxId({
      beginTimestamp: parts.beginTimestamp,
      nodeId: this.nodeId,
      counter: this.counter,
      timeoutMs: stretched,
    });
    return id;
  }
}
