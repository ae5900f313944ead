/**
 * Memory per entry of the volatile tx state map: `n` txs touched (PENDING with coordinator and commit partition) and
 * then made final (COMMITTED with a commitTs), as an enlisted primary holds them until retention ends. The heap is
 * measured after full collections before and after; the tx ids are created flat, as they arrive from the wire, and
 * counted (the map keeps them alive as its keys).
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { freshNodeId, type PartitionId, type TxId } from '../src/core/ids.js';
import { hybridTimestamp } from '../src/hlc/timestamp.js';
import { makeTxId } from '../src/tx/core/tx-id.js';
import { TxStateMap } from '../src/tx/core/tx-state-map.js';

export interface MapMemory {
  readonly entries: number;
  readonly bytesPerEntry: number;
  /** The same without the tx id strings (what the map adds to ids that requests carry anyway). */
  readonly bytesPerEntryWithoutIds: number;
}

export function measureTxStateMapBytes(n = 100_000): MapMemory {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const nodeId = freshNodeId('3cbcd116-d5c9-401f-8529-a0a1e8bbeab3');
  const partition = 't1p3' as PartitionId;
  // A copy through JSON makes each id one flat string, as decoded from a request (a template literal is a rope).
  const idOf = (i: number) =>
    JSON.parse(
      JSON.stringify(makeTxId({ beginTimestamp: hybridTimestamp(1_800_000_000_000 + i), nodeId, counter: i })),
    ) as TxId;
  const fill = (ids: readonly TxId[] | undefined): { size: number; bytes: number } => {
    let now = 0;
    // Fractional, as performance.now() is.
    const map = new TxStateMap({ clock: { monotonicMs: () => (now += 0.37) }, entriesMax: 2 * n });
    gc();
    gc();
    const before = process.memoryUsage().heapUsed;
    for (let i = 0; i < n; i++) {
      const id = ids?.[i] ?? idOf(i);
      map.update(id, {
        state: 'PENDING',
        reason: 'replica-touch',
        coordinatorId: nodeId,
        commitPartitionId: partition,
      });
      const commitTimestamp = hybridTimestamp(1_800_000_000_100 + i);
      map.update(id, { state: 'COMMITTED', reason: 'cleanup-request', commitTimestamp });
    }
    gc();
    gc();
    return { size: map.size, bytes: process.memoryUsage().heapUsed - before };
  };
  const withIds = fill(undefined);
  const ids = Array.from({ length: n }, (_, i) => idOf(i));
  const withoutIds = fill(ids);
  return {
    entries: withIds.size,
    bytesPerEntry: withIds.bytes / n,
    bytesPerEntryWithoutIds: withoutIds.bytes / n,
  };
}
