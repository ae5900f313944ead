/**
 * What the storage contract suites need from an implementation: a fresh engine, and a way to close it (removing any
 * files). Implementations that persist also offer `reopen`, which closes and reopens the same data.
 */
import type { HybridTimestamp, LogIndex, PartitionId, Term, TxId } from '../../core/ids.js';
import type { StorageEngine } from '../../storage/storage-engine.js';

export interface EngineHarness {
  readonly engine: StorageEngine;
  close(): Promise<void>;
}

export type OpenEngine = () => EngineHarness;

export const ts = (n: number | bigint): HybridTimestamp => BigInt(n) as HybridTimestamp;
export const tx = (s: string): TxId => s as TxId;
export const pid = (s: string): PartitionId => s as PartitionId;
export const idx = (n: number): LogIndex => n as LogIndex;
export const term = (n: number): Term => n as Term;

/** Runs `body` against a fresh engine and always closes it. */
export async function withEngine(
  open: OpenEngine,
  body: (engine: StorageEngine) => void | Promise<void>,
): Promise<void> {
  const harness = open();
  try {
    await body(harness.engine);
  } finally {
    await harness.close();
  }
}
