/**
 * Branded ids: a tx id, a node id and a partition id are all strings or numbers at run time, but the type system keeps
 * them apart so that one can never be passed where another is expected.
 */

declare const brand: unique symbol;
export type Brand<T, B extends string> = T & { readonly [brand]: B };

/** Transaction id; its text order is the order of begin timestamps (older tx = smaller id). See src/tx. */
export type TxId = Brand<string, 'TxId'>;
/**
 * Ephemeral node id: fresh at every node start (`freshNodeId`: 96 random bits as 16 base64url characters). A restarted
 * node is a different NodeId. Every tx id carries its coordinator's, so its length is paid in every tx state entry.
 */
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

/**
 * One incarnation of a node: its stable name (config) and the ephemeral id it drew at start (DESIGN §2 "Node
 * identity"). A coordinatorId equal to `id` is this incarnation; a restarted node has the same name and a new id.
 */
export interface NodeIdentity {
  readonly name: NodeName;
  readonly id: NodeId;
}

export const txId = (s: string): TxId => s as TxId;
export const nodeId = (s: string): NodeId => s as NodeId;

/**
 * A new ephemeral node id from `uuid` (a UUID drawn from the node's Random): its first 96 random bits as 16 base64url
 * characters ([A-Za-z0-9_-], what a tx id allows), 20 characters shorter than the UUID itself.
 */
export function freshNodeId(uuid: string): NodeId {
  const hex = uuid.replaceAll('-', '').slice(0, 24);
  if (!/^[0-9a-f]{24}$/i.test(hex)) throw new Error(`not a UUID: ${uuid}`);
  return Buffer.from(hex, 'hex').toString('base64url') as NodeId;
}
export const nodeName = (s: string): NodeName => s as NodeName;
export const partitionId = (s: string): PartitionId => s as PartitionId;
export const rowId = (s: string): RowId => s as RowId;
export const term = (n: number): Term => n as Term;
export const logIndex = (n: number): LogIndex => n as LogIndex;
