/**
 * The metadata record contract (`getMeta`/`setMeta` of `ReplicatedStorage`), run against each implementation and
 * each storage kind: records round-trip, join the caller's atomic step, are isolated per partition and per storage,
 * travel in snapshots, and vanish with `destroy`.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isBasaltError } from '../../core/errors.js';
import { LIMITS } from '../../core/limits.js';
import type { ReplicatedStorage } from '../../storage/replicated-storage.js';
import type { StorageEngine } from '../../storage/storage-engine.js';
import { idx, type OpenEngine, pid, term, ts, withEngine } from './contract-harness.js';

const P1 = pid('t1p0');
const P2 = pid('t1p1');

type Pick = (engine: StorageEngine, partition: typeof P1) => ReplicatedStorage;

const KINDS: ReadonlyArray<readonly [string, Pick]> = [
  ['mv', (e, p) => e.mvPartition(p)],
  ['txstate', (e, p) => e.txStatePartition(p)],
];

const bytes = (...b: number[]) => new Uint8Array(b);
const isInvalidArgument = (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT');

export function partitionMetaContract(name: string, open: OpenEngine): void {
  for (const [kind, pick] of KINDS) {
    describe(`partition metadata records contract: ${name} ${kind}`, () => {
      it('an unset record reads undefined; a set record reads back its bytes, as a copy; a later set replaces it', () =>
        withEngine(open, (engine) => {
          const s = pick(engine, P1);
          assert.equal(s.getMeta('replica.lease'), undefined);
          const value = bytes(1, 2, 3);
          s.setMeta('replica.lease', value);
          value[0] = 9;
          assert.deepEqual([...(s.getMeta('replica.lease') ?? [])], [1, 2, 3]);
          s.setMeta('replica.lease', bytes(4));
          assert.deepEqual([...(s.getMeta('replica.lease') ?? [])], [4]);
          assert.equal(s.getMeta('other'), undefined);
        }));

      it('bad names and oversized values are refused with INVALID_ARGUMENT', () =>
        withEngine(open, (engine) => {
          const s = pick(engine, P1);
          assert.throws(() => s.setMeta('', bytes(1)), isInvalidArgument);
          assert.throws(() => s.setMeta('a\0b', bytes(1)), isInvalidArgument);
          assert.throws(() => s.setMeta('x'.repeat(LIMITS.storageMetaNameCharsMax + 1), bytes(1)), isInvalidArgument);
          assert.throws(() => s.setMeta('big', new Uint8Array(LIMITS.storageMetaBytesMax + 1)), isInvalidArgument);
          assert.throws(() => s.getMeta('no/slash'), isInvalidArgument);
          assert.equal(s.getMeta('big'), undefined);
        }));

      it('setMeta joins the runConsistently step: undone with the rest of the step when it throws', () =>
        withEngine(open, (engine) => {
          const s = pick(engine, P1);
          s.setMeta('m', bytes(1));
          assert.throws(() =>
            engine.runConsistently(() => {
              s.setMeta('m', bytes(2));
              s.setLastApplied(idx(1), term(1), ts(5));
              throw new Error('crash in apply');
            }),
          );
          assert.deepEqual([...(s.getMeta('m') ?? [])], [1]);
          assert.deepEqual(s.lastApplied(), { index: 0, term: 0 });
        }));

      it('records are isolated per partition and per storage kind; destroy removes only its own', () =>
        withEngine(open, (engine) => {
          const a = pick(engine, P1);
          const b = pick(engine, P2);
          const other = kind === 'mv' ? engine.txStatePartition(P1) : engine.mvPartition(P1);
          a.setMeta('m', bytes(1));
          assert.equal(b.getMeta('m'), undefined);
          assert.equal(other.getMeta('m'), undefined);
          b.setMeta('m', bytes(2));
          a.destroy();
          assert.equal(pick(engine, P1).getMeta('m'), undefined);
          assert.deepEqual([...(b.getMeta('m') ?? [])], [2]);
        }));

      it('snapshot and restore carry the records and replace the target records', () =>
        withEngine(open, (engine) => {
          const source = pick(engine, P1);
          const target = pick(engine, P2);
          source.setMeta('m', bytes(7, 7));
          target.setMeta('stale', bytes(1));
          target.restore(source.snapshot());
          assert.deepEqual([...(target.getMeta('m') ?? [])], [7, 7]);
          assert.equal(target.getMeta('stale'), undefined);
        }));
    });
  }
}
