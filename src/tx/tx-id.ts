/**
 * Transaction ids. A TxId is text built so that plain string order is transaction age order:
 *
 *     <begin timestamp: 16 lowercase hex digits> '+' <node id> '+' <counter: 12 lowercase hex digits>
 *
 * The begin timestamp comes first at fixed width, so an older tx (smaller begin timestamp) has a smaller id. Ties are
 * broken by the node's ephemeral id, then by a per-node counter. The separator '+' sorts below every character a node
 * id may contain ([A-Za-z0-9_-]), so a node id that is a prefix of another still compares as the shorter string does:
 * string order of ids equals the order of (beginTs, nodeId, counter) tuples. Wait-die relies on this (compareTxAge),
 * and rule 15 recovers the begin timestamp from the id (the tx's hard deadline is beginTs + txTimeout).
 *
 * Ids from the wire are validated with `asTxId`/`parseTxId` (malformed → INVALID_ARGUMENT); ids made here are valid
 * by construction.
 */
import { assert } from '../core/assert.js';
import { invalidArgument } from '../core/errors.js';
import type { HybridTimestamp, NodeId, TxId } from '../core/ids.js';
import { addMs, asTimestamp, MIN_TIMESTAMP } from '../hlc/timestamp.js';

const TIMESTAMP_HEX_DIGITS = 16;
const COUNTER_HEX_DIGITS = 12;
/** Largest counter value that fits the fixed-width field; a node would need 2^48 txs to reach it. */
export const TX_ID_COUNTER_MAX = 2 ** (4 * COUNTER_HEX_DIGITS) - 1;
/** Longest node id accepted inside a tx id. */
export const TX_ID_NODE_ID_CHARS_MAX = 64;
const SEPARATOR = '+';
const NODE_ID_PATTERN = /^[A-Za-z0-9_-]+$/;
const TX_ID_PATTERN = new RegExp(
  `^([0-9a-f]{${TIMESTAMP_HEX_DIGITS}})\\${SEPARATOR}([A-Za-z0-9_-]{1,${TX_ID_NODE_ID_CHARS_MAX}})\\${SEPARATOR}([0-9a-f]{${COUNTER_HEX_DIGITS}})$`,
);

export interface TxIdParts {
  readonly beginTimestamp: HybridTimestamp;
  readonly nodeId: NodeId;
  readonly counter: number;
}

/** True if `id` may be used inside a tx id (charset [A-Za-z0-9_-], 1..64 characters; UUIDs qualify). */
export function isValidTxIdNodeId(id: string): boolean {
  return id.length > 0 && id.length <= TX_ID_NODE_ID_CHARS_MAX && NODE_ID_PATTERN.test(id);
}

/** Builds a tx id from its parts. Misuse (null timestamp, bad node id, counter out of range) throws INVALID_ARGUMENT. */
export function makeTxId(parts: TxIdParts): TxId {
  const { beginTimestamp, nodeId, counter } = parts;
  if (beginTimestamp < MIN_TIMESTAMP) throw invalidArgument('tx begin timestamp must not be null');
  if (!isValidTxIdNodeId(nodeId)) throw invalidArgument('node id not usable in a tx id', { nodeId });
  if (!Number.isInteger(counter) || counter < 0 || counter > TX_ID_COUNTER_MAX) {
    throw invalidArgument('tx id counter out of range', { counter });
  }
  const ts = beginTimestamp.toString(16).padStart(TIMESTAMP_HEX_DIGITS, '0');
  const n = counter.toString(16).padStart(COUNTER_HEX_DIGITS, '0');
  return `${ts}${SEPARATOR}${nodeId}${SEPARATOR}${n}` as TxId;
}

/** Parses a tx id received from outside this process; anything malformed throws INVALID_ARGUMENT. */
export function parseTxId(text: unknown): TxIdParts {
  const match = typeof text === 'string' ? TX_ID_PATTERN.exec(text) : null;
  if (match === null) throw invalidArgument('malformed tx id', { txId: String(text).slice(0, 200) });
  const [, tsHex, node, counterHex] = match;
  assert(tsHex !== undefined && node !== undefined && counterHex !== undefined, 'tx id pattern has three groups');
  const beginTimestamp = asTimestamp(BigInt(`0x${tsHex}`));
  if (beginTimestamp < MIN_TIMESTAMP) throw invalidArgument('tx id has a null begin timestamp', { txId: text });
  return { beginTimestamp, nodeId: node as NodeId, counter: Number.parseInt(counterHex, 16) };
}

/** True if `text` is a well-formed tx id. */
export function isTxId(text: unknown): text is TxId {
  if (typeof text !== 'string' || !TX_ID_PATTERN.test(text)) return false;
  return !text.startsWith('0'.repeat(TIMESTAMP_HEX_DIGITS));
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
  const end = id.length - COUNTER_HEX_DIGITS - 1;
  assert(end > TIMESTAMP_HEX_DIGITS + 1 && id.charAt(end) === SEPARATOR, 'tx id must be well formed');
  return id.slice(TIMESTAMP_HEX_DIGITS + 1, end) as NodeId;
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

/** Rule 15: the tx's hard deadline D = beginTs + txTimeout. No commit may carry commitTs ≥ D. */
export function txDeadline(id: TxId, txTimeoutMs: number): HybridTimestamp {
  assert(Number.isInteger(txTimeoutMs) && txTimeoutMs > 0, 'tx timeout must be a positive integer');
  return addMs(beginTimestampOf(id), txTimeoutMs);
}

/**
 * Makes the tx ids of one node (one per node start: the node id is its ephemeral id). The counter makes ids unique
 * even if two txs were given the same begin timestamp.
 */
export class TxIdGenerator {
  private counter = 0;

  constructor(readonly nodeId: NodeId) {
    if (!isValidTxIdNodeId(nodeId)) throw invalidArgument('node id not usable in a tx id', { nodeId });
  }

  /** A fresh id for a tx that began at `beginTimestamp` (taken from the node's hybrid clock). */
  next(beginTimestamp: HybridTimestamp): TxId {
    assert(this.counter < TX_ID_COUNTER_MAX, 'tx id counter exhausted');
    this.counter += 1;
    return makeTxId({ beginTimestamp, nodeId: this.nodeId, counter: this.counter });
  }
}
