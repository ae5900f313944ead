/**
 * Opens one LMDB environment. A node opens one for its state (see `openNodeStorage`), in which the storage engine
 * opens its `mv:*` and `txstate:*` sub-databases; its Raft logs live in a segmented log beside it. LmdbLogStorage
 * (the other durable Raft log storage) uses the root database of an environment of its own. Within an environment
 * writes queued in one event turn commit together.
 *
 * `sync: true` makes every commit durable when `transactionSync` returns (`root.flushed` then resolves at once);
 * `sync: false` skips fsync entirely: for a node's state environment, which is derived from the Raft logs and
 * rebuilt from them when an OS crash may have cost it pages (state-session.ts), and for benchmarks and tests that do
 * not test durability (say so when quoting numbers).
 *
 * `overlappingSync` is off on purpose. With it on (lmdb's default), a commit returns before its fsync, but the next
 * `transactionSync` blocks until that fsync ends, so back-to-back synchronous commits, which is how a Raft apply
 * loop writes, measured 372 commits/s here against 1,933/s with it off (and 1,372/s on when each commit is followed
 * by `await flushed`). Callers that want fewer fsyncs batch several commands into one `runConsistently` step.
 */
import { open, type RootDatabase } from 'lmdb';

export interface LmdbEnvironmentOptions {
  readonly sync: boolean;
}

/** Named sub-databases one environment may hold: storage uses 8, Raft a few, the rest is headroom. */
const SUB_DATABASES_MAX = 64;

export function openLmdbEnvironment(path: string, options: LmdbEnvironmentOptions): RootDatabase {
  return open({
    path,
    maxDbs: SUB_DATABASES_MAX,
    noSync: !options.sync,
    overlappingSync: false,
  });
}
