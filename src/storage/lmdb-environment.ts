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
 * Without sync the environment is written through a writable memory map (`useWritemap`): a commit changes pages in
 * the map and its meta page, with no `pwrite` per dirty page (at 16 clients the state commits issued about 6,700
 * `pwrite64` calls a second on one node's event-loop thread) and no page buffers to allocate. LMDB still copies on
 * write, so a process killed mid-transaction leaves the last committed tree in the page cache; what an OS crash may
 * cost is the same as without the map, and state-session.ts rebuilds from the logs then. With sync, the map would
 * mean an msync of every commit, so a durable environment writes its pages as usual.
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
    useWritemap: !options.sync,
  });
}
