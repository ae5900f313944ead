import assert from 'node:assert/strict';
import { test } from 'node:test';
import { keyHash, partitionIndexOf, tablePartitionId } from './partitioning.js';

test('keyHash is FNV-1a 32 over UTF-8 bytes (pinned vectors: the hash is part of the data layout)', () => {
  // Published FNV-1a 32-bit test vectors.
  assert.equal(keyHash(''), 0x811c9dc5);
  assert.equal(keyHash('a'), 0xe40c292c);
  assert.equal(keyHash('foobar'), 0xbf9cf968);
  // Non-ASCII keys hash their UTF-8 encoding, not UTF-16 code units.
  assert.equal(keyHash('é'), keyHash('\u00e9'));
  assert.notEqual(keyHash('é'), keyHash('e\u0301'));
});

test('partitionIndexOf spreads keys over every partition and stays in range', () => {
  const counts = new Array<number>(8).fill(0);
  for (let i = 0; i < 8000; i++) {
    const p = partitionIndexOf(`key-${i}`, 8);
    assert.ok(p >= 0 && p < 8);
    counts[p]!++;
  }
  for (const c of counts) assert.ok(c > 800 && c < 1200, `uneven spread: ${counts.join(',')}`);
  assert.throws(() => partitionIndexOf('k', 0));
});

test('tablePartitionId names partitions t<table>p<index>', () => {
  assert.equal(tablePartitionId(3, 5), 't3p5');
});
