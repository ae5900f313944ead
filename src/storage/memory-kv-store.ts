/**
 * In-memory `KvStore` for the simulator and unit tests. Each table is a map from the key's latin1 text (one char per
 * byte, so JS string order is byte order) plus a sorted array of those texts for ranges. Values are immutable byte
 * arrays, never mutated after `put`, so a view is a cheap shallow copy of the tables.
 *
 * `atomically` keeps an undo log: if the function throws, every write it made is undone, matching LMDB's abort.
 * Durability: `flush` resolves at once; the store lives as long as its owner (a process, or a simulated disk). For
 * the simulator, `trackUnflushed` keeps an undo log of every write since the last `flush` call, and `crash()` undoes
 * them: what a process crash with a lazy disk may lose. That log grows until the next flush, so it is opt-in.
 */
import { assert } from '../core/assert.js';
import { type KvEntry, type KvStore, type KvView, TABLES, type TableName } from './kv-store.js';

function keyText(key: Uint8Array): string {
  return Buffer.from(key.buffer, key.byteOffset, key.byteLength).toString('latin1');
}

function keyBytes(text: string): Uint8Array {
  return new Uint8Array(Buffer.from(text, 'latin1'));
}

/** Index of the first element of `sorted` that is >= `text`. */
function lowerBound(sorted: readonly string[], text: string): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (sorted[mid]! < text) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

class MemoryTable {
  readonly values: Map<string, Uint8Array>;
  readonly sorted: string[];

  constructor(values = new Map<string, Uint8Array>(), sorted: string[] = []) {
    this.values = values;
    this.sorted = sorted;
  }

  copy(): MemoryTable {
    return new MemoryTable(new Map(this.values), [...this.sorted]);
  }

  set(text: string, value: Uint8Array): void {
    if (!this.values.has(text)) this.sorted.splice(lowerBound(this.sorted, text), 0, text);
    this.values.set(text, value);
  }

  remove(text: string): void {
    if (!this.values.delete(text)) return;
    const at = lowerBound(this.sorted, text);
    assert(this.sorted[at] === text, 'memory table index out of sync');
    this.sorted.splice(at, 1);
  }

  *range(start: Uint8Array, end: Uint8Array | undefined, limit: number): Generator<KvEntry> {
    const endText = end === undefined ? undefined : keyText(end);
    let yielded = 0;
    for (let i = lowerBound(this.sorted, keyText(start)); i < this.sorted.length && yielded < limit; i++) {
      const text = this.sorted[i]!;
      if (endText !== undefined && text >= endText) return;
      yielded++;
      yield { key: keyBytes(text), value: this.values.get(text)! };
    }
  }
}

type UndoEntry = readonly [TableName, string, Uint8Array | undefined];

export class MemoryKvStore implements KvStore {
  private readonly tables = new Map<TableName, MemoryTable>(TABLES.map((name) => [name, new MemoryTable()]));
  /** Undo log of the running `atomically` call; undefined outside one. */
  private undo: UndoEntry[] | undefined;
  /** Undo log of every write since the last flush, when tracking is on. */
  private readonly unflushed: UndoEntry[] | undefined;

  private rollbackCount = 0;

  constructor(options: { readonly trackUnflushed?: boolean } = {}) {
    this.unflushed = options.trackUnflushed === true ? [] : undefined;
  }

  private table(name: TableName): MemoryTable {
    return this.tables.get(name)!;
  }

  get(table: TableName, key: Uint8Array): Uint8Array | undefined {
    return this.table(table).values.get(keyText(key));
  }

  range(table: TableName, start: Uint8Array, end: Uint8Array | undefined, limit = Number.POSITIVE_INFINITY) {
    return this.table(table).range(start, end, limit);
  }

  put(table: TableName, key: Uint8Array, value: Uint8Array): void {
    const text = keyText(key);
    this.recordUndo(table, text);
    this.table(table).set(text, Uint8Array.from(value));
  }

  delete(table: TableName, key: Uint8Array): void {
    const text = keyText(key);
    this.recordUndo(table, text);
    this.table(table).remove(text);
  }

  private recordUndo(table: TableName, text: string): void {
    if (this.undo === undefined && this.unflushed === undefined) return;
    const entry: UndoEntry = [table, text, this.table(table).values.get(text)];
    this.undo?.push(entry);
    this.unflushed?.push(entry);
  }

  atomically<T>(fn: () => T): T {
    if (this.undo !== undefined) return fn();
    const undo: UndoEntry[] = [];
    const unflushedBefore = this.unflushed?.length ?? 0;
    this.undo = undo;
    try {
      return fn();
    } catch (error) {
      this.rollback(undo);
      this.unflushed?.splice(unflushedBefore);
      throw error;
    } finally {
      this.undo = undefined;
    }
  }

  /** Undoes every write made since the last `flush` call (requires `trackUnflushed`); returns how many. */
  crash(): number {
    assert(this.unflushed !== undefined, 'crash() needs a store created with trackUnflushed');
    assert(this.undo === undefined, 'crash() inside an atomic step');
    const lost = this.unflushed.length;
    this.rollback(this.unflushed);
    this.unflushed.length = 0;
    return lost;
  }

  get rollbacks(): number {
    return this.rollbackCount;
  }

  private rollback(undo: readonly UndoEntry[]): void {
    this.rollbackCount++;
    for (let i = undo.length - 1; i >= 0; i--) {
      const [table, text, previous] = undo[i]!;
      if (previous === undefined) this.table(table).remove(text);
      else this.table(table).set(text, previous);
    }
  }

  view(): KvView {
    const copies = new Map<TableName, MemoryTable>();
    for (const [name, table] of this.tables) copies.set(name, table.copy());
    return {
      get: (table, key) => copies.get(table)!.values.get(keyText(key)),
      range: (table, start, end, limit = Number.POSITIVE_INFINITY) => copies.get(table)!.range(start, end, limit),
      release: () => copies.clear(),
    };
  }

  flush(): Promise<void> {
    if (this.unflushed !== undefined) this.unflushed.length = 0;
    return Promise.resolve();
  }
}
