/**
 * Streaming scans: every row of a range once, in key order, in pages of at most pageSize, on an embedded simulated
 * cluster; prefixes end at their successor by code point, astral characters included.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { startCluster } from '../index.js';
import { prefixSuccessor, scanPages } from './scan-pages.js';

describe('scanPages', () => {
  it('the successor of a prefix sorts after every key that starts with it and before every other larger key', () => {
    assert.equal(prefixSuccessor('ab'), 'ac');
    assert.equal(prefixSuccessor('a\u{10FFFF}'), 'b');
    assert.equal(prefixSuccessor('\u{10FFFF}'), undefined);
    assert.equal(prefixSuccessor('a\uD7FF'), 'a\uE000');
    assert.equal(prefixSuccessor('x\u{1F600}'), 'x\u{1F601}');
  });

  it('reads a range of 2,500 keys once each, in order, in pages, in one snapshot or one RW tx', async () => {
    const cluster = await startCluster({ simulation: { seed: 'scan-pages' }, nodes: 3 });
    try {
      const client = cluster.client('n1');
      await client.createTable('t', { partitions: 4, replicas: 3 });
      const keys = Array.from({ length: 2_500 }, (_, i) => `k/${String(i).padStart(5, '0')}`);
      for (let i = 0; i < keys.length; i += 250) {
        await client.transaction((tx) =>
          tx.putAll(
            't',
            keys.slice(i, i + 250).map((key) => ({ key, value: key.length })),
          ),
        );
      }
      await client.put('t', 'other', 1);
      await client.put('t', 'k/\u{1F600}', 2);
      for (const readOnly of [true, false]) {
        const pages = await client.transaction(
          async (tx) => {
            const out: string[][] = [];
            for await (const page of scanPages(tx, 't', { prefix: 'k/' }, { pageSize: 300 })) {
              out.push(page.map((r) => r.key));
            }
            return out;
          },
          { readOnly },
        );
        assert.ok(
          pages.every((p) => p.length > 0 && p.length <= 300),
          `pages of at most 300 (readOnly ${readOnly})`,
        );
        assert.deepEqual(pages.flat(), [...keys, 'k/\u{1F600}'], 'every key of the prefix once, in order');
      }
      const all = await client.transaction(
        async (tx) => {
          let n = 0;
          for await (const page of scanPages(tx, 't', {}, { pageSize: 1 })) n += page.length;
          return n;
        },
        { readOnly: true },
      );
      assert.equal(all, keys.length + 2);
      await assert.rejects(
        client.transaction(async (tx) => {
          for await (const _ of scanPages(tx, 't', {}, { pageSize: 0 })) break;
        }),
        /page size/,
      );
    } finally {
      await cluster.stop();
    }
  });
});
