/**
 * What the transaction coordinator needs from the node besides a typed request function (tx/core/messages.ts
 * TxRequestFn, which the node's Messenger fits): a placement view (table metadata and best-guess primaries). With these two faked, a test
 * plays every primary and commit partition the coordinator talks to.
 */

import type { PartitionId } from '../../core/ids.js';
import type { PrimaryDirectory } from '../../route/primary-directory.js';

/** Where keys live and who probably serves them. Synchronous: answered from the node's metastorage view. */
export interface TxPlacement {
  /** The partition holding `key` of `table`; throws UNKNOWN_TABLE for a table that does not exist. */
  partitionOf(table: string, key: string): PartitionId;
  /** Every partition of `table`, in partition index order; throws UNKNOWN_TABLE. */
  partitionsOf(table: string): readonly PartitionId[];
  /** Where the partitions' primaries probably are (route/primary-directory.ts). */
  readonly primaries: PrimaryDirectory;
}
