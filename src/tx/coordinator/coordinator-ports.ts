/**
 * What the transaction coordinator needs from the node, as narrow injected interfaces: a typed request function (the
 * node's Messenger fits) and a placement view (table metadata and best-guess primaries). With these two faked, a test
 * plays every primary and commit partition the coordinator talks to.
 */
import type { NodeName, PartitionId } from '../../core/ids.js';
import type { TxRequest, TxRequestKind, TxResponseOf } from '../core/messages.js';

export type TxRequestOf<K extends TxRequestKind> = Extract<TxRequest, { readonly kind: K }>;

export interface TxRequestOptions {
  readonly timeoutMs: number;
  readonly signal?: AbortSignal;
}

/**
 * Sends `body` to node `to` and resolves with its response body, or rejects with a coded BasaltError: the remote
 * error as sent (PRIMARY_MISS, TX_LOCK_CONFLICT, ...), TIMEOUT, CONNECTION_CLOSED (outcome unknown), CANCELLED, ...
 */
export type TxRequestFn = <K extends TxRequestKind>(
  to: NodeName,
  body: TxRequestOf<K>,
  options: TxRequestOptions,
) => Promise<TxResponseOf[K]>;

/** Where keys live and who probably serves them. Synchronous: answered from the node's metastorage view. */
export interface TxPlacement {
  /** The partition holding `key` of `table`; throws UNKNOWN_TABLE for a table that does not exist. */
  partitionOf(table: string, key: string): PartitionId;
  /** Every partition of `table`, in partition index order; throws UNKNOWN_TABLE. */
  partitionsOf(table: string): readonly PartitionId[];
  /** Best guess of the partition's primary: the leaseholder if known, else one of its replicas. */
  primaryHint(partitionId: PartitionId): NodeName;
  /** Learned from a PRIMARY_MISS hint or a successful response: `name` is (or was just now) the primary. */
  notePrimary(partitionId: PartitionId, name: NodeName): void;
  /** `name` missed without naming a holder: it is not to be guessed first again (optional: a fixed placement). */
  forgetPrimary?(partitionId: PartitionId, name: NodeName): void;
}

/**
 * `placement.primaryHint`, or `fallback` when it throws: no replica of the partition is known here, or its table is
 * gone. For callers to whom a guess is only a preference.
 */
export function primaryHintOr<T>(placement: TxPlacement, partitionId: PartitionId, fallback: T): NodeName | T {
  try {
    return placement.primaryHint(partitionId);
  } catch {
    return fallback;
  }
}
