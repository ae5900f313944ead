#!/usr/bin/env node
// Memory soak: three `basalt start` processes (TCP, LMDB, fsync on) under a steady load of implicit puts and two-key
// transfers from many concurrent clients, for a while. Every `--sample` seconds it reads each node's /metrics and
// prints the V8 heap in use (at the scrape, and after the node's last major GC), the resident set, the memory outside
// the V8 heap that JS objects hold (Buffers included) and the tx state map size, and at the end the first and last
// samples side by side: a heap after GC that keeps growing under a steady load is a leak.
// Build first (`npx tsc -p .`). Usage: node scripts/heap-soak.mjs [--minutes 10] [--clients 64] [--sample 30]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChildNode } from '../dist/src/cli/child-node.js';
import { freePorts } from '../dist/src/cli/test-support.js';
import { connect } from '../dist/src/client/remote.js';

function option(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? Number(process.argv[i + 1]) : fallback;
}

const minutes = option('minutes', 10);
const clients = option('clients', 64);
const sampleS = option('sample', 30);
const NAMES = ['n1', 'n2', 'n3'];
const ACCOUNTS = 1_000;

const dataDir = mkdtempSync(join(tmpdir(), 'basalt-heap-soak-'));
const ports = await freePorts(9);
const procs = NAMES.map((name, i) => {
  const peers = NAMES.flatMap((n, j) => (n === name ? [] : [`${n}=127.0.0.1:${ports[j]}`])).join(',');
  return new ChildNode([
    'start',
    '--name',
    name,
    '--port',
    String(ports[i]),
    '--peers',
    peers,
    '--data',
    join(dataDir, name),
    '--table',
    'soak:8:3',
    '--client-port',
    String(ports[3 + i]),
    '--metrics-port',
    String(ports[6 + i]),
  ]);
});

function sample(body, name) {
  const line = body.split('\n').find((l) => l.startsWith(name));
  return line === undefined ? Number.NaN : Number(line.split(' ').at(-1));
}

async function snapshot() {
  return Promise.all(
    NAMES.map(async (_name, i) => {
      const body = await (await fetch(`http://127.0.0.1:${ports[6 + i]}/metrics`)).text();
      return {
        heapMiB: sample(body, 'nodejs_heap_size_used_bytes') / 2 ** 20,
        // NaN until the node's first major GC.
        gcHeapMiB: sample(body, 'nodejs_heap_used_after_major_gc_bytes') / 2 ** 20,
        rssMiB: sample(body, 'process_resident_memory_bytes') / 2 ** 20,
        externalMiB: sample(body, 'nodejs_external_memory_bytes') / 2 ** 20,
        txStates: sample(body, 'basalt_tx_state_entries'),
      };
    }),
  );
}

const format = (s) =>
  s.map(
    (n, i) =>
      `${NAMES[i]} heap ${n.heapMiB.toFixed(1)} MiB (after major GC ${n.gcHeapMiB.toFixed(1)}) rss ${n.rssMiB.toFixed(0)} MiB external ${n.externalMiB.toFixed(0)} MiB map ${n.txStates}`,
  );

let stopping = false;
const counts = { puts: 0, transfers: 0, failed: 0 };
try {
  await Promise.all(procs.map((p) => p.waitFor(/basalt: node n\d ready/, 60_000)));
  const conns = await Promise.all(NAMES.map((_, i) => connect(`127.0.0.1:${ports[3 + i]}`, { timeoutMs: 10_000 })));
  await conns[0].transaction((tx) =>
    tx.putAll(
      'soak',
      Array.from({ length: ACCOUNTS }, (_, i) => ({ key: `acct/${i}`, value: 100 })),
    ),
  );
  const worker = async (w) => {
    const client = conns[w % conns.length];
    for (let n = 0; !stopping; n++) {
      try {
        if (n % 2 === 0) {
          await client.put('soak', `key/${w}/${n % 100}`, { n });
          counts.puts++;
        } else {
          const a = `acct/${(w * 7919 + n) % ACCOUNTS}`;
          const b = `acct/${(w * 104729 + n * 31) % ACCOUNTS}`;
          if (a === b) continue;
          await client.transaction(async (tx) => {
            const [x, y] = await tx.getAll('soak', [a, b], { forUpdate: true });
            await tx.put('soak', a, x - 1);
            await tx.put('soak', b, y + 1);
          });
          counts.transfers++;
        }
      } catch {
        counts.failed++;
      }
    }
  };
  const workers = Array.from({ length: clients }, (_, w) => worker(w));
  const startedMs = Date.now();
  await new Promise((r) => setTimeout(r, 20_000));
  const first = await snapshot();
  console.log(`after warm-up: ${format(first).join('; ')}`);
  let last = first;
  while (Date.now() - startedMs < minutes * 60_000) {
    await new Promise((r) => setTimeout(r, sampleS * 1_000));
    last = await snapshot();
    const s = ((Date.now() - startedMs) / 1000).toFixed(0);
    console.log(
      `${s} s: ${counts.puts} puts, ${counts.transfers} transfers, ${counts.failed} failed; ${format(last).join('; ')}`,
    );
  }
  stopping = true;
  await Promise.all(workers);
  await Promise.all(conns.map((c) => c.close()));
  console.log(`heap-soak: ${minutes} min, ${clients} clients, ${counts.puts} puts, ${counts.transfers} transfers`);
  for (const [i, name] of NAMES.entries()) {
    console.log(
      `  ${name}: heap ${first[i].heapMiB.toFixed(1)} -> ${last[i].heapMiB.toFixed(1)} MiB ` +
        `(after major GC ${first[i].gcHeapMiB.toFixed(1)} -> ${last[i].gcHeapMiB.toFixed(1)}), ` +
        `rss ${first[i].rssMiB.toFixed(0)} -> ${last[i].rssMiB.toFixed(0)} MiB, ` +
        `external ${first[i].externalMiB.toFixed(0)} -> ${last[i].externalMiB.toFixed(0)} MiB, map ${first[i].txStates} -> ${last[i].txStates}`,
    );
  }
} finally {
  for (const p of procs) p.signal('SIGKILL');
  await Promise.all(procs.map((p) => p.exited));
  rmSync(dataDir, { recursive: true, force: true });
}
