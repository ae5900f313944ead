/**
 * Child process of the storage crash test (src/storage/lmdb-storage.test.ts). It applies "commands" to one
 * partition through the LMDB storage engine, each one atomic step (a row written by one-phase commit or by
 * intent + tx state + commit, plus the applied position), continuing after whatever a previous run left. After each
 * batch it awaits `flush()` and prints `ack <index>`: every command up to that index is durable. The parent kills it
 * with SIGKILL at an arbitrary point and checks every acknowledged command after reopening.
 * Usage: node dist/test/storage/crash-child.js <lmdb dir>
 */

import type { HybridTimestamp } from '../../src/core/ids.js';
import { logIndex, partitionId, term, txId } from '../../src/core/ids.js';
import { openLmdbEnvironment } from '../../src/storage/lmdb-environment.js';
import { LmdbStorageEngine } from '../../src/storage/storage-engine.js';

export const CRASH_PARTITION = partitionId('crash');
export const CRASH_BATCH = 5;

/** The value command `i` writes: large enough that a kill often lands inside a commit. */
export function crashValue(i: number): { i: number; pad: string } {
  return { i, pad: `${i}:`.repeat(400) };
}

export function crashTxId(i: number) {
  return txId(`tx${String(i).padStart(8, '0')}`);
}

async function main(dir: string): Promise<void> {
  const root = openLmdbEnvironment(dir, { sync: true });
  const engine = new LmdbStorageEngine(root);
  const mv = engine.mvPartition(CRASH_PARTITION);
  const txState = engine.txStatePartition(CRASH_PARTITION);
  let i = mv.lastApplied().index;
  for (;;) {
    for (let b = 0; b < CRASH_BATCH; b++) {
      i++;
      const at = BigInt(i) as HybridTimestamp;
      engine.runConsistently(() => {
        const row = mv.ensureRowId(`k${i}`);
        if (i % 2 === 0) {
          mv.addWrite(row, crashValue(i), crashTxId(i), CRASH_PARTITION);
          txState.compareAndSet(crashTxId(i), null, {
            state: 'COMMITTED',
            commitTs: at,
            enlistedPartitions: [CRASH_PARTITION],
          });
          mv.commitWrite(row, at, crashTxId(i));
        } else {
          mv.addWriteCommitted(row, crashValue(i), at);
        }
        mv.setLastApplied(logIndex(i), term(1), at);
      });
    }
    await engine.flush();
    process.stdout.write(`ack ${i}\n`);
  }
}

const dir = process.argv[2];
if (dir !== undefined && process.argv[1]?.endsWith('crash-child.js')) {
  main(dir).catch((error: unknown) => {
    process.stderr.write(`${String(error)}\n`);
    process.exit(1);
  });
}
