#!/usr/bin/env node
// Idle cost of a cluster: starts three `basalt start` processes (TCP loopback, LMDB in a temp directory, fsync on)
// with one table, waits until every node is ready (each hosted partition has a primary), lets them settle, then
// reads each process's CPU time (utime + stime of /proc/<pid>/stat) over an idle window and prints it as % of one
// core. Nothing is sent to the cluster during the window. Linux only (reads /proc). Needs a build (`npx tsc`).
//
// Usage: node scripts/idle-cpu.mjs [--partitions 64] [--replicas 3] [--seconds 30] [--settle 5] [--no-fsync]
//                                  [--profile DIR]   (also run each node under `node --cpu-prof`, profiles into DIR)
//                                  [--write]         (after the window: one put, then an RO get of it, timed)
//                                  [--no-rest]       (with BASALT_IDLE_REST=0: idle partitions keep renewing)
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const MAIN = fileURLToPath(new URL('../dist/src/cli/main.js', import.meta.url));
const NODES = ['n1', 'n2', 'n3'];
const READY_TIMEOUT_MS = 120_000;

function parseArgs(argv) {
  const opts = {
    partitions: 64,
    replicas: 3,
    seconds: 30,
    settle: 8,
    fsync: true,
    profile: null,
    write: false,
    rest: true,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value`);
      return v;
    };
    if (a === '--partitions') opts.partitions = Number(next());
    else if (a === '--replicas') opts.replicas = Number(next());
    else if (a === '--seconds') opts.seconds = Number(next());
    else if (a === '--settle') opts.settle = Number(next());
    else if (a === '--no-fsync') opts.fsync = false;
    else if (a === '--profile') opts.profile = resolve(next());
    else if (a === '--write') opts.write = true;
    else if (a === '--no-rest') opts.rest = false;
    else throw new Error(`unknown argument ${a}`);
  }
  return opts;
}

async function freePorts(count) {
  const servers = await Promise.all(
    Array.from({ length: count }, async () => {
      const server = createServer();
      await new Promise((r) => server.listen(0, '127.0.0.1', r));
      return server;
    }),
  );
  const ports = servers.map((s) => s.address().port);
  await Promise.all(servers.map((s) => new Promise((r) => s.close(() => r()))));
  return ports;
}

/** utime + stime of a process, in clock ticks (USER_HZ, 100 on Linux). */
function cpuTicks(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The command name (field 2) may hold spaces; fields after it start past the last ')'.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]);
}
const TICKS_PER_S = 100;

class Proc {
  constructor(name, args, nodeArgs, rest) {
    this.name = name;
    this.output = '';
    this.child = spawn(process.execPath, [...nodeArgs, MAIN, 'start', ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, BASALT_IDLE_REST: rest ? '1' : '0' },
    });
    const append = (chunk) => {
      this.output += chunk.toString();
      if (this.output.length > 1_000_000) this.output = this.output.slice(-500_000);
    };
    this.child.stdout.on('data', append);
    this.child.stderr.on('data', append);
    this.exited = new Promise((r) => this.child.on('exit', (code, signal) => r({ code, signal })));
  }
  async waitFor(pattern, timeoutMs) {
    const deadline = Date.now() + timeoutMs;
    while (!pattern.test(this.output)) {
      if (this.child.exitCode !== null) throw new Error(`${this.name} exited:\n${this.output}`);
      if (Date.now() > deadline) throw new Error(`${this.name}: no ${pattern} within ${timeoutMs} ms:\n${this.output}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const dir = mkdtempSync(join(tmpdir(), 'basalt-idle-'));
  const ports = await freePorts(NODES.length * 2);
  if (opts.profile !== null) mkdirSync(opts.profile, { recursive: true });
  const table = `idle:${opts.partitions}:${opts.replicas}`;
  const procs = NODES.map((name, i) => {
    const peers = NODES.flatMap((n, j) => (j === i ? [] : [`${n}=127.0.0.1:${ports[j]}`])).join(',');
    const args = ['--name', name, '--port', String(ports[i]), '--peers', peers, '--data', join(dir, name)];
    args.push('--client-port', String(ports[NODES.length + i]), '--table', table, '--status-interval', '2000');
    if (!opts.fsync) args.push('--no-fsync');
    const nodeArgs = opts.profile === null ? [] : ['--cpu-prof', '--cpu-prof-dir', opts.profile];
    return new Proc(name, args, nodeArgs, opts.rest);
  });
  try {
    const readyStart = Date.now();
    await Promise.all(procs.map((p) => p.waitFor(/basalt: node \S+ ready/, READY_TIMEOUT_MS)));
    console.log(`ready after ${((Date.now() - readyStart) / 1000).toFixed(1)} s; settling ${opts.settle} s`);
    await sleep(opts.settle * 1000);
    const before = procs.map((p) => cpuTicks(p.child.pid));
    const t0 = process.hrtime.bigint();
    await sleep(opts.seconds * 1000);
    const after = procs.map((p) => cpuTicks(p.child.pid));
    const wallS = Number(process.hrtime.bigint() - t0) / 1e9;
    let total = 0;
    for (const [i, p] of procs.entries()) {
      const pct = ((after[i] - before[i]) / TICKS_PER_S / wallS) * 100;
      total += pct;
      console.log(`${p.name} (pid ${p.child.pid}): ${pct.toFixed(1)}% of a core`);
    }
    console.log(
      `total: ${total.toFixed(1)}% of a core for ${opts.partitions} idle partitions ` +
        `(${opts.replicas} replicas, ${NODES.length} nodes, fsync ${opts.fsync ? 'on' : 'off'}, ${wallS.toFixed(1)} s)`,
    );
    for (const p of procs) {
      const lines = p.output.split('\n').filter((l) => l.startsWith('status: '));
      console.log(`${p.name} ${lines[lines.length - 1] ?? '(no status line)'}`);
    }
    if (opts.write) await writeAfterIdle(ports[NODES.length]);
  } finally {
    for (const p of procs) p.child.kill('SIGINT');
    await Promise.race([Promise.all(procs.map((p) => p.exited)), sleep(20_000)]);
    for (const p of procs) if (p.child.exitCode === null) p.child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
}

/** After the idle window: a one-phase put and an RO read of it through n1, each timed (a quiet group must wake). */
async function writeAfterIdle(clientPort) {
  const { connect } = await import('../dist/src/client/remote.js');
  const client = await connect(`127.0.0.1:${clientPort}`);
  try {
    const value = { at: Date.now() };
    let t = performance.now();
    await client.put('idle', 'k', value);
    console.log(`put after idle: ${(performance.now() - t).toFixed(1)} ms`);
    t = performance.now();
    const got = await client.get('idle', 'k');
    console.log(
      `get after idle: ${(performance.now() - t).toFixed(1)} ms, read back ${JSON.stringify(got) === JSON.stringify(value) ? 'the value written' : `WRONG ${JSON.stringify(got)}`}`,
    );
  } finally {
    await client.close();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
