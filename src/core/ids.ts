/**
 * Branded ids: a tx id, a node id and a partition id are all strings or numbers at run time, but the type system keeps
 * them apart so that one can never be passed where another is expected.
 */

declare const brand: unique symbol;
export type Brand<T, B extends string> = T & { readonly [brand]: B };

/** Transaction id; its text order is the order of begin timestamps (older tx = smaller id). See src/tx. */
export type TxId = Brand<string, 'TxId'>;
/** Ephemeral node id: a fresh UUID at every node start. A restarted node is a different NodeId. */
export type NodeId = Brand<string, 'NodeId'>;
/** Stable node name from configuration (`n1`, `n2`, ...). */
export type NodeName = Brand<string, 'NodeName'>;
/** Partition (replication group) id, e.g. `t3p5` for partition 5 of table 3, `meta` for the metastorage group. */
export type PartitionId = Brand<string, 'PartitionId'>;
/** Row id inside one partition's MVCC storage. */
export type RowId = Brand<string, 'RowId'>;
/** Raft term. */
export type Term = Brand<number, 'Term'>;
/** Raft log index; 0 means "before the first entry". */
export type LogIndex = Brand<number, 'LogIndex'>;
/**
 * Hybrid logical timestamp: 48 bits of physical milliseconds, then 16 logical bits, compared as one unsigned integer.
 * 0n means "no timestamp". Arithmetic and construction live in src/hlc.
 */
export type HybridTimestamp = Brand<bigint, 'HybridTimestamp'>;

export const txId = (s: string): TxId => s as TxId;
export const nodeId = (s: string): NodeId => s as NodeId;
export const nodeName = (s: string): NodeName => s as NodeName;
export const partitionId = (s: string): PartitionId => s as PartitionId;
export const rowId = (s: string): RowId => s as RowId;
export const term = (n: number): Term => n as Term;
export const logIndex = (n: number): LogIndex => n as LogIndex;
