/**
 * Opens the one LMDB environment of a node. The node layer calls this once and hands the root database to both the
 * storage engine (which opens its `mv:*` and `txstate:*` sub-databases in it) and the Raft log storage, so that one
 * environment, one file and one group commit serve everything the node persists.
 *
 * `sync: true` makes every commit durable once `root.flushed` resolves (one fdatasync per commit, overlapped with the
 * next commit); `sync: false` skips fsync entirely (benchmarks and tests that do not test durability; state it).
 */
import { open, type RootDatabase } from 'lmdb';

export interface LmdbEnvironmentOptions {
  readonly sync: boolean;
}

/** Named sub-databases one environment may hold: storage uses 8, Raft a few, the rest is headroom. */
const SUB_DATABASES_MAX = 64;

export function openLmdbEnvironment(path: string, options: LmdbEnvironmentOptions): RootDatabase {
  return open({ path, maxDbs: SUB_DATABASES_MAX, noSync: !options.sync });
}
