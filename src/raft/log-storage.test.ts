/**
 * One contract suite for every LogStorage: memory, LMDB and the segmented log (the durable ones also across close
 * and reopen, in a temp directory removed afterwards; the segmented log with small segments, so that it rolls over).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { open, type RootDatabase } from 'lmdb';
import { logIndex, nodeName, partitionId, term } from '../core/ids.js';
import { confState, decodeConfChange, encodeConfChange } from './conf-change.js';
import { LmdbLogStorage } from './lmdb-log-storage.js';
import type { LogStorage } from './log-storage.js';
import { MemoryLogStorage } from './memory-log-storage.js';
import { makeEntry } from './raft-log.js';
import { SegmentedLogStorage } from './segmented-log-storage.js';
import type { Entry, Snapshot } from './types.js';

interface Harness {
  storage: LogStorage;
  /** Simulates a restart: a new LogStorage over the same durable state. */
  reopen(): Promise<LogStorage>;
  close(): Promise<void>;
}

const g1 = partitionId('t1p0');
const g2 = partitionId('t1p1');
const bytes = (s: string): Uint8Array => new TextEncoder().encode(s);
const text = (b: Uint8Array): string => new TextDecoder().decode(b);

function entries(from: number, to: number, t: number): Entry[] {
  const out: Entry[] = [];
  for (let i = from; i <= to; i++) out.push(makeEntry(i, t, 'data', bytes(`e${i}t${t}`)));
  return out;
}

const summary = (es: readonly Entry[]): string[] => es.map((e) => `${e.index}/${e.term}/${e.kind}/${text(e.data)}`);

function contract(name: string, make: () => Harness | Promise<Harness>): void {
  describe(`LogStorage contract: ${name}`, () => {
    test('a new group loads as empty', async () => {
      const h = await make();
      assert.deepEqual(h.storage.load(g1), { hardState: null, snapshot: null, entries: [] });
      assert.deepEqual(h.storage.groups(), []);
      await h.close();
    });

    test('hard state and entries saved together load back, also after a restart', async () => {
      const h = await make();
      const hs = { term: term(3), vote: nodeName('n2'), commit: logIndex(2) };
      await h.storage.save(g1, { hardState: hs, snapshot: null, entries: entries(1, 3, 3) });
      const reopened = await h.reopen();
      const loaded = reopened.load(g1);
      assert.deepEqual(loaded.hardState, hs);
      assert.deepEqual(summary(loaded.entries), summary(entries(1, 3, 3)));
      assert.ok(loaded.entries.every((e) => e.data instanceof Uint8Array));
      assert.deepEqual(reopened.groups(), [g1]);
      await h.close();
    });

    test('entries replace every stored entry from the first one on (conflicting suffix)', async () => {
      const h = await make();
      await h.storage.save(g1, { hardState: null, snapshot: null, entries: entries(1, 6, 1) });
      await h.storage.save(g1, { hardState: null, snapshot: null, entries: entries(3, 4, 2) });
      assert.deepEqual(summary(h.storage.load(g1).entries), summary([...entries(1, 2, 1), ...entries(3, 4, 2)]));
      await h.close();
    });

    test('groups are independent', async () => {
      const h = await make();
      await h.storage.save(g1, { hardState: null, snapshot: null, entries: entries(1, 3, 1) });
      await h.storage.save(g2, { hardState: null, snapshot: null, entries: entries(1, 1, 5) });
      await h.storage.save(g1, { hardState: null, snapshot: null, entries: entries(2, 2, 2) });
      assert.deepEqual(summary((await h.reopen()).load(g2).entries), summary(entries(1, 1, 5)));
      assert.equal(h.storage.load(g1).entries.length, 2);
      await h.storage.removeGroup(g1);
      assert.deepEqual(h.storage.load(g1).entries, []);
      assert.deepEqual(h.storage.groups(), [g2]);
      await h.close();
    });

    test('compaction keeps the snapshot and the entries above it, across a restart', async () => {
      const h = await make();
      await h.storage.save(g1, { hardState: null, snapshot: null, entries: entries(1, 10, 1) });
      const snap: Snapshot = { index: logIndex(6), term: term(1), data: bytes('state@6') };
      await h.storage.compact(g1, snap);
      // An older snapshot is ignored.
      await h.storage.compact(g1, { index: logIndex(3), term: term(1), data: bytes('state@3') });
      const loaded = (await h.reopen()).load(g1);
      assert.equal(loaded.snapshot?.index, 6);
      assert.equal(text(loaded.snapshot!.data), 'state@6');
      assert.deepEqual(summary(loaded.entries), summary(entries(7, 10, 1)));
      await h.close();
    });

    test('a received snapshot replaces the whole log, and later entries follow it', async () => {
      const h = await make();
      await h.storage.save(g1, { hardState: null, snapshot: null, entries: entries(1, 5, 1) });
      const snap: Snapshot = { index: logIndex(20), term: term(4), data: bytes('state@20') };
      const hs = { term: term(4), vote: null, commit: logIndex(20) };
      await h.storage.save(g1, { hardState: hs, snapshot: snap, entries: entries(21, 22, 4) });
      const loaded = (await h.reopen()).load(g1);
      assert.deepEqual(loaded.hardState, hs);
      assert.equal(loaded.snapshot?.index, 20);
      assert.deepEqual(summary(loaded.entries), summary(entries(21, 22, 4)));
      await h.close();
    });

    test('configuration change entries and a snapshot with its configuration load back, across a restart', async () => {
      const h = await make();
      const change = makeEntry(2, 1, 'conf', encodeConfChange({ type: 'add-learner', node: nodeName('n4') }));
      await h.storage.save(g1, { hardState: null, snapshot: null, entries: [...entries(1, 1, 1), change] });
      let loaded = (await h.reopen()).load(g1);
      assert.equal(loaded.entries[1]?.kind, 'conf');
      assert.deepEqual(decodeConfChange(loaded.entries[1]!.data), { type: 'add-learner', node: 'n4' });
      const conf = confState([nodeName('n1'), nodeName('n2')], [nodeName('n4')]);
      await h.storage.compact(g1, { index: logIndex(2), term: term(1), data: bytes('state@2'), conf });
      loaded = (await h.reopen()).load(g1);
      assert.deepEqual(loaded.snapshot?.conf, conf);
      const received = { index: logIndex(9), term: term(2), data: bytes('state@9'), conf: confState([nodeName('n4')]) };
      await h.storage.save(g1, { hardState: null, snapshot: received, entries: [] });
      loaded = (await h.reopen()).load(g1);
      assert.deepEqual(loaded.snapshot?.conf, { voters: ['n4'], learners: [] });
      await h.close();
    });

    test('a write that would leave a hole in the log is refused as a bug', async () => {
      const h = await make();
      await h.storage.save(g1, { hardState: null, snapshot: null, entries: entries(1, 2, 1) });
      await assert.rejects(h.storage.save(g1, { hardState: null, snapshot: null, entries: entries(5, 5, 1) }));
      assert.equal(h.storage.load(g1).entries.length, 2, 'the refused write changed nothing');
      await h.close();
    });
  });
}

contract('memory', () => {
  const storage = new MemoryLogStorage();
  return { storage, reopen: async () => storage, close: async () => {} };
});

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function openRoot(path: string): RootDatabase {
  return open({ path, maxDbs: 16, overlappingSync: false });
}

function lmdbHarness(): Harness & { root(): RootDatabase } {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-raft-log-'));
  dirs.push(dir);
  let root = openRoot(dir);
  const h = {
    storage: new LmdbLogStorage(root) as LogStorage,
    root: () => root,
    reopen: async () => {
      await root.close();
      root = openRoot(dir);
      h.storage = new LmdbLogStorage(root);
      return h.storage;
    },
    close: async () => {
      await root.close();
    },
  };
  return h;
}

test('LMDB: a snapshot record written before configurations were recorded loads without one', async () => {
  const h = lmdbHarness();
  h.root()
    .openDB({ name: 'raft:snapshot' })
    .putSync(g1, { index: 4, term: 2, data: bytes('old') });
  const loaded = h.storage.load(g1);
  assert.equal(loaded.snapshot?.index, 4);
  assert.equal(text(loaded.snapshot!.data), 'old');
  assert.equal(loaded.snapshot?.conf, undefined);
  assert.ok(!('conf' in loaded.snapshot!), 'no configuration is made up');
  await h.close();
});

contract('lmdb', lmdbHarness);
contract('segmented', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-segmented-log-'));
  dirs.push(dir);
  const options = { segmentBytes: 4096 };
  let log = await SegmentedLogStorage.open(dir, options);
  const h: Harness = {
    storage: log,
    reopen: async () => {
      await log.close();
      log = await SegmentedLogStorage.open(dir, options);
      h.storage = log;
      return log;
    },
    close: () => log.close(),
  };
  return h;
});
