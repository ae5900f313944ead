/**
 * Whether a node's state environment (MVCC rows and tx state) can be trusted when the node opens it.
 *
 * The state is derived: everything in it was applied from Raft logs that are durable on their own (every log write is
 * fsynced before it counts, and a compaction stores its snapshot in the log first). So the state is
 * written without any fsync: an apply costs a memory copy, not a disk flush on the event loop. What survives what:
 * - a process crash (kill -9, an uncaught error) loses nothing: committed LMDB pages sit in the OS page cache, which
 *   outlives the process, so the next incarnation of the same boot finds the state exactly as the last commit left it;
 * - an operating-system crash or a power loss may lose any unflushed page, in any order, and may leave the B-tree
 *   pointing at pages that never reached the disk.
 * A session file next to the environment records the boot id (Linux: /proc/sys/kernel/random/boot_id, new on every
 * boot) under which the environment was last opened, and whether it was closed cleanly (fully synced, then marked).
 * On open, the state is kept when it was closed cleanly or was last opened under this very boot; otherwise (a boot
 * went by since writes that were never synced) its files are removed, and every Raft group rebuilds its partition from
 * its log: the stored snapshot first, then the entries after it. Without a boot id (another OS), every unclean
 * shutdown rebuilds: slower to restart, never wrong.
 *
 * The session file is written and fsynced (with its directory) before the environment is opened, so no state write
 * can precede the record that says it is unsynced.
 */
import { closeSync, existsSync, fsyncSync, openSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';

const SESSION_FILE = 'session.json';
const BOOT_ID_PATH = '/proc/sys/kernel/random/boot_id';
/** The files of an LMDB environment directory. */
const ENVIRONMENT_FILES = ['data.mdb', 'lock.mdb'];

interface SessionRecord {
  readonly bootId: string | null;
  readonly clean: boolean;
}

/** How the state environment was found at open. */
export type StateOpening = 'fresh' | 'kept-clean' | 'kept-same-boot' | 'rebuilt';

export interface StateSession {
  readonly opening: StateOpening;
  /** Records that the environment was synced and closed: call after both, never before. */
  markClean(): void;
}

/** The current boot's id, or null where the OS does not expose one. */
export function currentBootId(): string | null {
  try {
    const id = readFileSync(BOOT_ID_PATH, 'utf8').trim();
    return id.length > 0 ? id : null;
  } catch {
    return null;
  }
}

/**
 * Decides whether the state environment in `dir` (an existing directory) is kept or removed for a rebuild, then
 * records this session as unclean. `bootId` is injectable so that tests can play a reboot.
 */
export function beginStateSession(dir: string, bootId: string | null = currentBootId()): StateSession {
  const opening = decide(dir, bootId);
  if (opening === 'rebuilt') {
    for (const file of ENVIRONMENT_FILES) rmSync(join(dir, file), { force: true });
  }
  writeDurably(dir, { bootId, clean: false });
  return {
    opening,
    markClean: () => writeDurably(dir, { bootId, clean: true }),
  };
}

function decide(dir: string, bootId: string | null): StateOpening {
  if (!existsSync(join(dir, 'data.mdb'))) return 'fresh';
  const last = readSession(dir);
  if (last?.clean === true) return 'kept-clean';
  if (last !== undefined && bootId !== null && last.bootId === bootId) return 'kept-same-boot';
  return 'rebuilt';
}

/** The last session's record; undefined when missing or unreadable (which only ever leads to a rebuild). */
function readSession(dir: string): SessionRecord | undefined {
  try {
    const parsed: unknown = JSON.parse(readFileSync(join(dir, SESSION_FILE), 'utf8'));
    if (typeof parsed !== 'object' || parsed === null) return undefined;
    const { bootId, clean } = parsed as Record<string, unknown>;
    if (typeof clean !== 'boolean' || (bootId !== null && typeof bootId !== 'string')) return undefined;
    return { bootId, clean };
  } catch {
    return undefined;
  }
}

/** Writes the record to a temporary file, fsyncs it, renames it over the session file and fsyncs the directory. */
function writeDurably(dir: string, record: SessionRecord): void {
  const path = join(dir, SESSION_FILE);
  const temporary = `${path}.tmp`;
  const fd = openSync(temporary, 'w');
  try {
    writeSync(fd, JSON.stringify(record));
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  // A rename over the old file is atomic: a crash leaves the old record or the new one, never a torn one.
  renameSync(temporary, path);
  const dirFd = openSync(dir, 'r');
  try {
    fsyncSync(dirFd);
  } finally {
    closeSync(dirFd);
  }
}
