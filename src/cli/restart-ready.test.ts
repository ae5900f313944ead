/**
 * A node restarted while the table's partitions rest (idle: their leases lapse by design until a request wakes them)
 * reports ready, and serves. Found by `basalt jepsen --workload register` (3 keys on 4 partitions, so one partition
 * stays idle): before, the restarted node waited for a primary of every hosted partition and never printed its ready
 * line.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect } from '../client/remote.js';
import { LIMITS } from '../core/limits.js';
import { ChildNode } from './child-node.js';
import { freePorts } from './free-ports.js';

const NAMES = ['n1', 'n2', 'n3'] as const;
const TABLE = 'idle';
const PARTITIONS = 4;

test('a node restarted while partitions rest reports ready and serves', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'basalt-restart-ready-'));
  const ports = await freePorts(4);
  const clientPort = ports[3]!;
  const args = (name: (typeof NAMES)[number]): string[] => {
    const i = NAMES.indexOf(name);
    return [
      'start',
      ...['--name', name, '--port', String(ports[i]), '--data', join(dataDir, name)],
      '--peers',
      NAMES.flatMap((n, j) => (n === name ? [] : [`${n}=127.0.0.1:${ports[j]}`])).join(','),
      ...['--table', `${TABLE}:${PARTITIONS}:3`, '--status-interval', '300'],
      ...(name === 'n3' ? ['--client-port', String(clientPort)] : []),
    ];
  };
  const procs = new Map<string, ChildNode>();
  const launch = (name: (typeof NAMES)[number]): ChildNode => {
    const child = new ChildNode(args(name));
    procs.set(name, child);
    return child;
  };
  try {
    await Promise.all(NAMES.map((n) => launch(n).waitFor(/basalt: node n\d ready/, 45_000)));
    // Nothing is written: every partition goes idle and rests; its Raft group goes quiet.
    const n3 = procs.get('n3')!;
    await n3.waitFor(new RegExp(`quiet groups: ([${PARTITIONS}-9]|\\d\\d)`), 30_000, n3.mark());
    // A resting partition's lease is not renewed: once it ran out, no partition has a primary until a request.
    await new Promise((r) => setTimeout(r, LIMITS.leaseDurationMsDefault + 1_000));
    n3.signal('SIGKILL');
    assert.equal((await n3.exited).signal, 'SIGKILL');
    const restarted = launch('n3');
    await restarted.waitFor(/basalt: node n3 ready/, 30_000);
    const client = await connect(`127.0.0.1:${clientPort}`, { timeoutMs: 10_000 });
    try {
      await client.put(TABLE, 'k', 1);
      assert.equal(await client.get(TABLE, 'k'), 1);
    } finally {
      await client.close();
    }
  } finally {
    for (const child of procs.values()) child.signal('SIGKILL');
    await Promise.all([...procs.values()].map((c) => c.exited));
    rmSync(dataDir, { recursive: true, force: true });
  }
});
