/**
 * Differential test of the two `KvStore` implementations: random puts, deletes, atomic groups (some of which throw
 * and must leave nothing behind), point reads and ranges over keys with arbitrary bytes (0x00 and 0xff included)
 * must give identical results on the memory store and on LMDB, whose order is memcmp. Views must stay as they were.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { it } from 'node:test';
import fc from 'fast-check';
import type { KvStore, TableName } from './kv-store.js';
import { openLmdbEnvironment } from './lmdb-environment.js';
import { LmdbKvStore } from './lmdb-kv-store.js';
import { MemoryKvStore } from './memory-kv-store.js';

type Op =
  | { op: 'put'; table: TableName; key: Uint8Array; value: Uint8Array }
  | { op: 'delete'; table: TableName; key: Uint8Array }
  | { op: 'atomic'; ops: Op[]; fail: boolean }
  | { op: 'get'; table: TableName; key: Uint8Array }
  | { op: 'range'; table: TableName; start: Uint8Array; end: Uint8Array | undefined; limit: number | undefined };

const table = fc.constantFrom<TableName>('mv:rows', 'mv:keys');
const byte = fc.constantFrom(0x00, 0x01, 0x61, 0x62, 0x7f, 0x80, 0xfe, 0xff);
const key = fc.array(byte, { minLength: 1, maxLength: 4 }).map((b) => Uint8Array.from(b));
const value = fc.uint8Array({ minLength: 0, maxLength: 8 });

const simple: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ op: fc.constant('put' as const), table, key, value }),
  fc.record({ op: fc.constant('delete' as const), table, key }),
  fc.record({ op: fc.constant('get' as const), table, key }),
  fc.record({
    op: fc.constant('range' as const),
    table,
    start: key,
    end: fc.option(key, { nil: undefined }),
    limit: fc.option(fc.integer({ min: 1, max: 5 }), { nil: undefined }),
  }),
);
const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 5, arbitrary: simple },
  {
    weight: 1,
    arbitrary: fc.record({
      op: fc.constant('atomic' as const),
      ops: fc.array(simple, { maxLength: 6 }),
      fail: fc.boolean(),
    }),
  },
);

function apply(store: KvStore, o: Op): unknown {
  switch (o.op) {
    case 'put':
      store.put(o.table, o.key, o.value);
      return undefined;
    case 'delete':
      store.delete(o.table, o.key);
      return undefined;
    case 'get': {
      const v = store.get(o.table, o.key);
      return v === undefined ? undefined : [...v];
    }
    case 'range':
      return [...store.range(o.table, o.start, o.end, o.limit)].map((e) => [[...e.key], [...e.value]]);
    case 'atomic':
      try {
        return store.atomically(() => {
          const results = o.ops.map((inner) => apply(store, inner));
          if (o.fail) throw new Error('abort');
          return results;
        });
      } catch {
        return 'aborted';
      }
  }
}

function dump(store: KvStore): unknown {
  return (['mv:rows', 'mv:keys'] as const).map((t) =>
    [...store.range(t, new Uint8Array(0), undefined)].map((e) => [[...e.key], [...e.value]]),
  );
}

it('memory and LMDB KV stores agree on random operations, byte order, atomic rollback and views', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-kv-'));
  const root = openLmdbEnvironment(dir, { sync: false });
  try {
    const lmdb = new LmdbKvStore(root);
    fc.assert(
      fc.property(fc.array(op, { maxLength: 40 }), (ops) => {
        const memory = new MemoryKvStore();
        // LMDB is shared across runs: clear the two tables first.
        lmdb.atomically(() => {
          for (const t of ['mv:rows', 'mv:keys'] as const) {
            for (const e of [...lmdb.range(t, new Uint8Array(0), undefined)]) lmdb.delete(t, Uint8Array.from(e.key));
          }
        });
        const half = Math.floor(ops.length / 2);
        for (const o of ops.slice(0, half)) assert.deepEqual(apply(lmdb, o), apply(memory, o));
        const memoryView = memory.view();
        const lmdbView = lmdb.view();
        const before = dump(memory);
        for (const o of ops.slice(half)) assert.deepEqual(apply(lmdb, o), apply(memory, o));
        assert.deepEqual(dump(lmdb), dump(memory));
        for (const [view, name] of [
          [memoryView, 'memory'],
          [lmdbView, 'lmdb'],
        ] as const) {
          const seen = (['mv:rows', 'mv:keys'] as const).map((t) =>
            [...view.range(t, new Uint8Array(0), undefined)].map((e) => [[...e.key], [...e.value]]),
          );
          assert.deepEqual(seen, before, `${name} view changed after it was taken`);
          view.release();
        }
      }),
      { numRuns: 150 },
    );
  } finally {
    await root.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
