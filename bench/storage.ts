/**
 * Storage benchmark: point reads/s, intent add+commit pairs/s and scan rows/s for the memory and the LMDB
 * implementation. LMDB runs in a temporary directory; add+commit is measured with fsync on (every step durable by
 * the final flush, as the Raft apply path uses it) and with fsync off. Each add and each commit is its own atomic
 * step with an applied-position update, as one Raft command would be.
 * Run standalone: `npx tsc -p . && node dist/bench/storage.js`; or call `runStorageBench()` from a runner.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { RootDatabase } from 'lmdb';
import type { HybridTimestamp, LogIndex, PartitionId, RowId, Term, TxId } from '../src/core/ids.js';
import { openLmdbEnvironment } from '../src/storage/lmdb-environment.js';
import type { MvPartitionStorage } from '../src/storage/mv-partition-storage.js';
import { LmdbStorageEngine, MemoryStorageEngine, type StorageEngine } from '../src/storage/storage-engine.js';

export interface BenchResult {
  readonly name: string;
  readonly opsPerSec: number;
}

const ROWS = 20_000;
const VALUE = { payload: 'x'.repeat(100), n: 0 };
const MEASURE_MS = 700;
const SCAN_LIMIT = 100;
const PARTITION = 'bench' as PartitionId;
const COMMIT_PARTITION = 'bench-commit' as PartitionId;

const ts = (n: number) => BigInt(n) as HybridTimestamp;

/** A fixed-seed LCG, so every run reads the same keys. */
function lcg(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

/** Runs `op` in rounds until MEASURE_MS passed; returns units/s (op returns how many units it did). */
async function measure(op: () => number, finish: () => Promise<void> = async () => {}): Promise<number> {
  for (let i = 0; i < 20; i++) op(); // warm-up
  let units = 0;
  const start = performance.now();
  while (performance.now() - start < MEASURE_MS) {
    for (let i = 0; i < 10; i++) units += op();
  }
  await finish();
  return units / ((performance.now() - start) / 1000);
}

function populate(s: MvPartitionStorage): RowId[] {
  const rows: RowId[] = [];
  const batch = 1_000;
  for (let start = 0; start < ROWS; start += batch) {
    s.runConsistently(() => {
      for (let i = start; i < start + batch; i++) {
        const row = s.ensureRowId(`key${String(i).padStart(8, '0')}`);
        s.addWriteCommitted(row, { ...VALUE, n: i }, ts(10));
        rows.push(row);
      }
    });
  }
  return rows;
}

async function benchReads(label: string, s: MvPartitionStorage, rows: readonly RowId[]): Promise<BenchResult[]> {
  const random = lcg(1);
  const reads = await measure(() => {
    s.read(rows[Math.floor(random() * rows.length)]!, ts(100));
    return 1;
  });
  const scanRows = await measure(() => {
    const start = `key${String(Math.floor(random() * ROWS)).padStart(8, '0')}`;
    return s.scan({ kind: 'range', start }, ts(100), SCAN_LIMIT).rows.length;
  });
  return [
    { name: `storage ${label}: point reads`, opsPerSec: reads },
    { name: `storage ${label}: scan rows (${SCAN_LIMIT}-row scans)`, opsPerSec: scanRows },
  ];
}

/**
 * Add+commit pairs: the add and the commit are separate atomic steps with applied-position updates (two Raft
 * commands). `pairsPerStep` > 1 groups that many pairs' steps into one outer step (a batch of applied entries).
 */
async function benchAddCommit(label: string, engine: StorageEngine, pairsPerStep = 1): Promise<BenchResult> {
  const s = engine.mvPartition(`${PARTITION}-writes-${pairsPerStep}` as PartitionId);
  let n = 0;
  const pair = () => {
    n++;
    const txId = `tx${n}` as TxId;
    const row = s.ensureRowId(`w${n % 5_000}`);
    s.runConsistently(() => {
      s.addWrite(row, { ...VALUE, n }, txId, COMMIT_PARTITION);
      s.setLastApplied((2 * n) as LogIndex, 1 as Term, ts(2 * n));
    });
    s.runConsistently(() => {
      s.commitWrite(row, ts(2 * n + 1), txId);
      s.setLastApplied((2 * n + 1) as LogIndex, 1 as Term, ts(2 * n + 1));
    });
  };
  const pairs = await measure(
    () => {
      engine.runConsistently(() => {
        for (let i = 0; i < pairsPerStep; i++) pair();
      });
      return pairsPerStep;
    },
    () => engine.flush(),
  );
  const batching = pairsPerStep === 1 ? 'one step per command' : `${pairsPerStep} pairs per step`;
  return { name: `storage ${label}: intent add+commit pairs (${batching})`, opsPerSec: pairs };
}

async function benchEngine(label: string, engine: StorageEngine): Promise<BenchResult[]> {
  const s = engine.mvPartition(PARTITION);
  const rows = populate(s);
  return [
    ...(await benchReads(label, s, rows)),
    await benchAddCommit(label, engine),
    await benchAddCommit(label, engine, 100),
  ];
}

async function withLmdb<T>(sync: boolean, body: (engine: StorageEngine) => Promise<T>): Promise<T> {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-bench-storage-'));
  const root: RootDatabase = openLmdbEnvironment(dir, { sync });
  try {
    return await body(new LmdbStorageEngine(root));
  } finally {
    await root.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function runStorageBench(): Promise<BenchResult[]> {
  const results: BenchResult[] = [];
  results.push(...(await benchEngine('memory', new MemoryStorageEngine())));
  results.push(...(await withLmdb(true, (engine) => benchEngine('lmdb (fsync on)', engine))));
  results.push(await withLmdb(false, (engine) => benchAddCommit('lmdb (fsync off)', engine)));
  return results;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  for (const { name, opsPerSec } of await runStorageBench()) {
    console.log(`${name.padEnd(76)} ${Math.round(opsPerSec).toLocaleString('en-US').padStart(12)} /s`);
  }
}
