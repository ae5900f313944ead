/**
 * `KvStore` over one node's LMDB environment: each table is a named sub-database with binary keys and values, opened
 * in a root database the caller owns (the node opens it with `openLmdbEnvironment` and shares it with Raft).
 *
 * Writes use `transactionSync`, so they are applied and visible when the call returns; they are durable once
 * `flush()` (the environment's `flushed` promise) resolves. Nested `atomically` calls join the outer transaction
 * rather than opening LMDB child transactions: the outer one is the unit of atomicity.
 */
import type { Database, RootDatabase } from 'lmdb';
import { bufferView } from '../core/bytes.js';
import { BasaltError } from '../core/errors.js';
import { type KvEntry, type KvStore, type KvView, TABLES, type TableName } from './kv-store.js';

type BinaryDb = Database<Buffer, Buffer>;

export class LmdbKvStore implements KvStore {
  private readonly root: RootDatabase;
  private readonly dbs: ReadonlyMap<TableName, BinaryDb>;
  private depth = 0;
  private rollbackCount = 0;

  constructor(root: RootDatabase) {
    this.root = root;
    this.dbs = new Map(
      TABLES.map((name) => [
        name,
        root.openDB<Buffer, Buffer>({ name, keyEncoding: 'binary', encoding: 'binary' }) as unknown as BinaryDb,
      ]),
    );
  }

  private db(table: TableName): BinaryDb {
    return this.dbs.get(table)!;
  }

  get(table: TableName, key: Uint8Array): Uint8Array | undefined {
    try {
      return this.db(table).get(bufferView(key));
    } catch (error) {
      throw this.closedOr(error);
    }
  }

  range(table: TableName, start: Uint8Array, end: Uint8Array | undefined, limit?: number): Iterable<KvEntry> {
    return rangeOf(this.db(table), start, end, limit, undefined);
  }

  put(table: TableName, key: Uint8Array, value: Uint8Array): void {
    this.atomically(() => this.db(table).putSync(bufferView(key), bufferView(value)));
  }

  delete(table: TableName, key: Uint8Array): void {
    this.atomically(() => this.db(table).removeSync(bufferView(key)));
  }

  atomically<T>(fn: () => T): T {
    if (this.depth > 0) return fn();
    this.depth++;
    try {
      return this.root.transactionSync(fn) as T;
    } catch (error) {
      // LMDB aborted the transaction: none of its writes happened.
      this.rollbackCount++;
      throw this.closedOr(error);
    } finally {
      this.depth--;
    }
  }

  get rollbacks(): number {
    return this.rollbackCount;
  }

  /** Turns a failure caused by a closed environment into STORAGE_CLOSED; anything else passes through. */
  private closedOr(error: unknown): unknown {
    const status = (this.root as unknown as { status?: string }).status;
    if (status === 'open') return error;
    return new BasaltError('STORAGE_CLOSED', 'the LMDB environment is closed', undefined, { cause: error });
  }

  view(): KvView {
    let transaction: ReturnType<RootDatabase['useReadTransaction']>;
    try {
      transaction = this.root.useReadTransaction();
    } catch (error) {
      throw this.closedOr(error);
    }
    return {
      get: (table, key) => this.db(table).get(bufferView(key), { transaction }),
      range: (table, start, end, limit) => rangeOf(this.db(table), start, end, limit, transaction),
      release: () => transaction.done(),
    };
  }

  async flush(): Promise<void> {
    await this.root.flushed;
  }
}

function* rangeOf(
  db: BinaryDb,
  start: Uint8Array,
  end: Uint8Array | undefined,
  limit: number | undefined,
  transaction: unknown,
): Generator<KvEntry> {
  const options: Record<string, unknown> = { start: bufferView(start) };
  if (end !== undefined) options.end = bufferView(end);
  if (limit !== undefined) options.limit = limit;
  if (transaction !== undefined) options.transaction = transaction;
  for (const { key, value } of db.getRange(options)) yield { key, value };
}
