/**
 * The transaction protocol as golden interaction scripts, in the manner of etcd-raft's datadriven `testdata/*.txt`
 * (and of src/raft/raft-interaction.test.ts, whose file format this shares): each file in `testdata/` holds commands,
 * each followed by `----` and what it must produce on a simulated cluster. A file opens with `#` lines saying what it
 * shows. A change in behaviour shows up as a reviewable diff; after reviewing it, regenerate with TX_REWRITE=1.
 *
 * What a command prints, in the order it happened (virtual time from one seed, so the same every run: each script
 * runs twice and must print the same both times):
 *   - the command's own result (`ok`, a value, an error code, or `pending` for an operation still running after
 *     OP_WAIT_MS; its result then appears as `<command>: <result>` in the output of the command running when it
 *     settles);
 *   - every tx state map update on every node: `n2: t1 ABSENT -> PENDING (replica-touch)`, with the update point's
 *     reason label (src/tx/core/tx-state-map.ts); an update the transition table refuses is printed `ignored`, one
 *     that does not change the state is printed all the same (each update point is the thing shown); removals and
 *     vacuum are printed too;
 *   - every finish, cleanup, state (resolution) and recovery message between nodes, with its answer, as the
 *     receiver gets it (`n3 -> n1 TxStateCoordinatorRequest t1`), and those the network holds or drops. A node's
 *     messages to itself do not cross the network and are not listed (the map updates they cause are);
 *   - per node, the change of its resolution and recovery counters (`n3 counters: resolution.coordinator+1`),
 *     which name the path each resolution took, local ones included.
 * Tx ids are named as the script names them (`t1`), others by first appearance (`tx1`); partitions by index (`p0`);
 * a node's map updates, counters and coordinator ids by incarnation (`n1`, then `n1@2` once restarted), its
 * messages by name. Timestamps are not printed: a COMMITTED state answer says how its commitTs compares with the
 * reader's readTs, which decides what the reader sees.
 *
 * Commands (keys are symbolic: `key` picks a real key by placement and prints it once):
 *   cluster nodes=3 partitions=2 [replicas=3] [seed=S]  a simulated cluster with one table
 *   key k1 [primary=n2] [with=k2] [apart=k2,k3] [without=n4]
 *                                                        k1 := a key whose partition's primary is n2, in the same
 *                                                        partition as k2, in another than k2 and k3, with no
 *                                                        replica on n4
 *   begin t1 on n1 [readonly]                            an RW (or RO) transaction coordinated on n1
 *   put t1 k1 v | get t1 k1 | commit t1 | rollback t1    operations of t1 (get also in an RO tx)
 *   put on n1 k1 v | ro-get on n3 k1                     implicit one-phase write / implicit RO read, from n1 / n3
 *   hold|drop Kind [from nX] [to nY]                     network rule on message kind Kind (a body kind)
 *   release|undrop Kind [from nX] [to nY]                ends the rule written the same way (release sends the held)
 *   crash n1 | restart n1 | tick 100ms|2s                power loss (volatile state lost) / new incarnation / time
 *   state t1                                             each node's map entry for t1
 */

import assert from 'node:assert/strict';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { isBasaltError } from '../../src/core/errors.js';
import type { HybridTimestamp, NodeId, NodeName, PartitionId, TxId } from '../../src/core/ids.js';
import { sleep } from '../../src/env/timers.js';
import { Cluster, defaultNodeNames } from '../../src/harness/cluster.js';
import type { HeldMessages } from '../../src/harness/network-filters.js';
import type { Envelope } from '../../src/net/envelope.js';
import type { BasaltNode, NodeServiceFactory } from '../../src/node/basalt-node.js';
import { COORDINATOR_SERVICE, type CoordinatorService } from '../../src/node/coordinator-service.js';
import { SimClusterEnvironment } from '../../src/sim/cluster.js';
import type { NetObservation } from '../../src/sim/network.js';
import {
  assertGolden,
  parseScript,
  renderScript,
  type ScriptCase,
  type ScriptResult,
} from '../../src/testing/datadriven.js';
import { beginReadOnly, type ReadOnlyTransaction } from '../../src/tx/coordinator/read-only.js';
import { beginTransaction, type Transaction } from '../../src/tx/coordinator/transaction.js';
import type { TxStateAnswer } from '../../src/tx/core/messages.js';
import type { TxStateMapEvent } from '../../src/tx/core/tx-state-map.js';

const dir = fileURLToPath(new URL('../../../test/protocol/testdata/', import.meta.url));
const rewrite = process.env['TX_REWRITE'] === '1';
const TABLE = 'kv';
/** One seed for every script unless it names its own, so that equal clusters place their primaries alike. */
const DEFAULT_SEED = 'interaction';
/** How long an operation command runs the cluster waiting for its result before it prints `pending`. */
const OP_WAIT_MS = 1_000;
/** The message kinds printed: the finish, its cleanup, and everything resolution and recovery send. */
const SHOWN_REQUESTS = new Set([
  'TxFinishRequest',
  'TxCleanupRequest',
  'TxStateCoordinatorRequest',
  'TxStateCommitPartitionRequest',
  'TxStatePrimaryReplicaRequest',
  'TxRecoveryRequest',
]);
/**
 * Counters whose changes are printed: the resolution paths and answers, recoveries (by the commit partition, and
 * those the sweep asked for), and the coordinator's waits for a FINISHING tx's outcome.
 */
const SHOWN_COUNTERS = /^(resolution\.|recovery\.|txSweep\.recoveries$|coordinator\.finishingWaits$)/;
const HIDDEN_COUNTERS = new Set(['resolution.latencyMsTotal']);

type Line = () => string;

interface Tx {
  readonly node: NodeName;
  readonly rw?: Transaction;
  readonly ro?: ReadOnlyTransaction;
}

/** A request seen on the wire, to describe its answer (answers name no tx: they are matched by request id). */
interface SentRequest {
  readonly kind: string;
  readonly txId: TxId;
  readonly readTs: HybridTimestamp | undefined;
}

class Interpreter {
  private cluster: Cluster | undefined;
  private env: SimClusterEnvironment | undefined;
  private lines: Line[] = [];
  private readonly txs = new Map<string, Tx>();
  private readonly txNames = new Map<TxId, string>();
  private readonly keys = new Map<string, string>();
  private readonly incarnations = new Map<NodeId, string>();
  private readonly starts = new Map<NodeName, number>();
  private readonly baselines = new Map<
    NodeName,
    { node: BasaltNode; label: string; counters: Readonly<Record<string, number>> }
  >();
  private readonly requests = new Map<string, SentRequest>();
  private readonly holds = new Map<string, HeldMessages>();
  private readonly drops = new Map<string, { undo(): void }>();
  /** Operations still running (a crash of their coordinator's node forgets them). */
  private readonly pending = new Map<object, { readonly label: string; readonly node: NodeName }>();
  private unnamed = 0;

  async run(line: string): Promise<string> {
    const [cmd, ...args] = line.trim().split(/\s+/);
    const kv = Object.fromEntries(args.filter((a) => a.includes('=')).map((a) => a.split('=') as [string, string]));
    if (cmd === 'cluster') return this.start(kv);
    assert.ok(this.cluster !== undefined, 'the first command must be `cluster`');
    this.lines = [];
    const result = await this.execute(line.trim(), cmd!, args, kv);
    this.counterChanges();
    const events = this.lines.map((l) => l());
    return [result, ...events].filter((l) => l !== '').join('\n') || 'ok';
  }

  async stop(): Promise<void> {
    await this.cluster?.stop();
  }

  private async start(kv: Record<string, string>): Promise<string> {
    const names = defaultNodeNames(Number(kv['nodes'] ?? 3));
    // Each incarnation's map is observed from its construction, so nothing a restart replays is missed.
    const observer: NodeServiceFactory = {
      name: 'interaction-observer',
      create: (node) => {
        this.watch(node);
        return {};
      },
    };
    this.env = new SimClusterEnvironment({ names, seed: kv['seed'] ?? DEFAULT_SEED, services: [observer] });
    this.env.world.network.observe((o) => this.onNetwork(o));
    this.cluster = await Cluster.start(this.env, names);
    await this.cluster.createTable(TABLE, {
      partitions: Number(kv['partitions'] ?? 2),
      replicas: Number(kv['replicas'] ?? 3),
    });
    return 'ok';
  }

  private async execute(
    line: string,
    cmd: string,
    args: readonly string[],
    kv: Record<string, string>,
  ): Promise<string> {
    const c = this.cluster!;
    const [a, b, d, e] = args;
    switch (cmd) {
      case 'key':
        return this.pickKey(a!, kv);
      case 'begin':
        return this.begin(a!, nodeArg(args), args.includes('readonly'));
      case 'put':
        if (a === 'on')
          return this.op(line, b as NodeName, () => this.service(b!).coordinator.putImplicit(TABLE, this.key(d!), e!));
        return this.op(line, this.tx(a!).node, () => this.rwOf(a!).put(TABLE, this.key(b!), d!));
      case 'get': {
        const t = this.tx(a!);
        const read = () => (t.ro ?? this.rwOf(a!)).get(TABLE, this.key(b!));
        return this.op(line, t.node, read, true);
      }
      case 'ro-get':
        return this.op(line, b as NodeName, () => this.service(b!).readOnly.getImplicit(TABLE, this.key(d!)), true);
      case 'commit': {
        const t = this.tx(a!);
        return this.op(line, t.node, () => (t.ro ?? this.rwOf(a!)).commit());
      }
      case 'rollback': {
        const t = this.tx(a!);
        return this.op(line, t.node, () => (t.ro ?? this.rwOf(a!)).rollback());
      }
      case 'hold':
        this.holds.set(args.join(' '), c.network.hold(filterOf(args)));
        return 'ok';
      case 'release': {
        const rule = this.holds.get(args.join(' '));
        assert.ok(rule !== undefined, `no hold rule ${args.join(' ')}`);
        this.holds.delete(args.join(' '));
        const count = rule.release();
        return `released ${count}`;
      }
      case 'drop':
        this.drops.set(args.join(' '), c.network.drop(filterOf(args)));
        return 'ok';
      case 'undrop': {
        const rule = this.drops.get(args.join(' '));
        assert.ok(rule !== undefined, `no drop rule ${args.join(' ')}`);
        this.drops.delete(args.join(' '));
        rule.undo();
        return 'ok';
      }
      case 'crash':
        await c.stopNode(a!);
        for (const [token, { label, node }] of this.pending) {
          if (node !== a) continue;
          this.pending.delete(token);
          this.lines.push(() => `${label}: never settles (${node} crashed)`);
        }
        return 'ok';
      case 'restart':
        await c.startNode(a!);
        return 'ok';
      case 'tick':
        await c.runFor(durationMs(a!));
        return 'ok';
      case 'state':
        return c.nodes.map((n) => `${this.baselines.get(n)?.label ?? n}: ${this.stateOf(n, a!)}`).join('\n');
      default:
        throw new Error(`unknown command: ${cmd}`);
    }
  }

  // ------------------------------------------------------------------------------------------ transactions

  private begin(name: string, node: NodeName, readOnly: boolean): string {
    assert.ok(!this.txs.has(name), `${name} is already begun`);
    const service = this.service(node);
    if (readOnly) {
      const ro = beginReadOnly(service.readOnly);
      this.txs.set(name, { node, ro });
      this.txNames.set(ro.id, name);
    } else {
      const rw = beginTransaction(service.coordinator);
      this.txs.set(name, { node, rw });
      this.txNames.set(rw.id, name);
    }
    return 'ok';
  }

  /**
   * Runs `fn` and the cluster until it settles or OP_WAIT_MS passed; prints its result, or `pending` and the result
   * later, in the output of whichever command is running when it settles.
   */
  private async op(label: string, node: NodeName, fn: () => Promise<unknown>, read = false): Promise<string> {
    let result: string | undefined;
    const done = fn().then((value) => (read ? `value ${JSON.stringify(value) ?? '<none>'}` : 'ok'), describeError);
    const token = {};
    this.pending.set(token, { label, node });
    const settled = done.then((r) => {
      if (!this.pending.delete(token)) return;
      if (result === undefined) result = r;
      else this.lines.push(() => `${label}: ${r}`);
    });
    const stopWaiting = new AbortController();
    const waited = sleep(this.env!.timers, OP_WAIT_MS, stopWaiting.signal).catch(() => {});
    await this.cluster!.drive(Promise.race([settled, waited]));
    stopWaiting.abort();
    if (result !== undefined) return result;
    result = 'pending';
    return result;
  }

  private service(node: string): CoordinatorService {
    const running = this.cluster!.basaltNode(node);
    assert.ok(running !== undefined, `${node} is down`);
    const service = running.service<CoordinatorService>(COORDINATOR_SERVICE);
    assert.ok(service !== undefined);
    return service;
  }

  private tx(name: string): Tx {
    const t = this.txs.get(name);
    assert.ok(t !== undefined, `no transaction ${name}`);
    return t;
  }

  private rwOf(name: string): Transaction {
    const rw = this.tx(name).rw;
    assert.ok(rw !== undefined, `${name} is read-only`);
    return rw;
  }

  // ------------------------------------------------------------------------------------------ keys

  private pickKey(name: string, kv: Record<string, string>): string {
    const c = this.cluster!;
    const apart = (kv['apart']?.split(',') ?? []).map((k) => c.placement(TABLE, this.key(k)).partition);
    const without = kv['without']?.split(',') ?? [];
    const same = kv['with'] === undefined ? undefined : c.placement(TABLE, this.key(kv['with'])).partition;
    for (let i = 0; i < 10_000; i++) {
      const key = `${name}-${i}`;
      const p = c.placement(TABLE, key);
      if (kv['primary'] !== undefined && p.primary !== kv['primary']) continue;
      if (same !== undefined && p.partition !== same) continue;
      if (apart.includes(p.partition)) continue;
      if (without.some((n) => p.replicas.includes(n as NodeName))) continue;
      this.keys.set(name, key);
      return `${name}: ${partitionName(p.partition)} primary=${p.primary} replicas=${[...p.replicas].sort().join(',')}`;
    }
    throw new Error(`no key satisfies ${JSON.stringify(kv)}`);
  }

  private key(name: string): string {
    const key = this.keys.get(name);
    assert.ok(key !== undefined, `key ${name} was not picked (use \`key ${name} ...\` first)`);
    return key;
  }

  // ------------------------------------------------------------------------------------------ observation

  /** Names a new incarnation of a node and subscribes to its map. */
  private watch(node: BasaltNode): void {
    const n = node.self.name;
    const start = (this.starts.get(n) ?? 0) + 1;
    this.starts.set(n, start);
    const label = start === 1 ? n : `${n}@${start}`;
    this.incarnations.set(node.self.id, label);
    this.baselines.set(n, { node, label, counters: node.counters.snapshot() });
    node.txStates.observe((event) => this.lines.push(() => this.describeMapEvent(label, event)));
  }

  private describeMapEvent(n: string, e: TxStateMapEvent): string {
    const tx = this.txName(e.txId);
    switch (e.kind) {
      case 'update': {
        const ignored = e.outcome === 'applied' ? '' : ` ${e.outcome}`;
        return `${n}: ${tx} ${e.from ?? 'ABSENT'} -> ${e.to}${ignored} (${e.reason})`;
      }
      case 'remove':
        return `${n}: ${tx} ${e.state} removed (${e.reason})`;
      case 'vacuum':
        return `${n}: ${tx} ${e.state} vacuumed`;
    }
  }

  private onNetwork(o: NetObservation): void {
    const envelope = o.message.payload as Envelope;
    const from = o.message.from.name;
    const to = o.message.to;
    const shown = this.shownMessage(from, to, envelope);
    if (shown === undefined) return;
    switch (o.kind) {
      case 'deliver':
        this.lines.push(() => `${from} -> ${to} ${shown()}`);
        return;
      case 'hold':
        this.lines.push(() => `held: ${from} -> ${to} ${shown()}`);
        return;
      case 'drop':
        this.lines.push(() => `dropped (${o.reason}): ${from} -> ${to} ${shown()}`);
        return;
      default:
        return;
    }
  }

  /** How a shown message is printed, or undefined for a message not shown. Remembers requests for their answers. */
  private shownMessage(from: string, to: string, envelope: Envelope): Line | undefined {
    if (envelope.type === 'oneway') return undefined;
    if (envelope.type === 'request') {
      const body = envelope.body as { kind: string; txId?: TxId; readTs?: HybridTimestamp };
      if (!SHOWN_REQUESTS.has(body.kind) || body.txId === undefined) return undefined;
      const key = `${from}>${to}#${envelope.requestId}`;
      this.requests.set(key, { kind: body.kind, txId: body.txId, readTs: body.readTs });
      return () => this.describeRequest(envelope.body);
    }
    const request = this.requests.get(`${to}>${from}#${envelope.requestId}`);
    if (request === undefined) return undefined;
    if (envelope.error !== undefined) {
      return () => `error ${envelope.error.code} (${request.kind} ${this.txName(request.txId)})`;
    }
    return () => this.describeResponse(envelope.body, request);
  }

  private describeRequest(body: Envelope['body'] & object): string {
    const b = body as Record<string, unknown> & { kind: string; txId: TxId };
    const tx = this.txName(b.txId);
    switch (b.kind) {
      case 'TxFinishRequest': {
        const enlisted = (b['enlisted'] as { partitionId: PartitionId }[]).map((p) => partitionName(p.partitionId));
        const verb = b['commit'] === true ? 'commit' : 'abort';
        const commitPartition = partitionName(b['commitPartitionId'] as PartitionId);
        return `TxFinishRequest ${tx} ${verb} commitPartition=${commitPartition} enlisted=${enlisted.join(',') || '-'}`;
      }
      case 'TxCleanupRequest': {
        const outcome = (b['outcome'] as { state: string }).state;
        const partitions = (b['partitions'] as PartitionId[]).map(partitionName).join(',');
        return `TxCleanupRequest ${tx} ${outcome} ${partitions}${b['unlockOnly'] === true ? ' unlock-only' : ''}`;
      }
      case 'TxStateCommitPartitionRequest': {
        const commitPartition = partitionName(b['commitPartitionId'] as PartitionId);
        const intent = partitionName(b['intentPartitionId'] as PartitionId);
        // `holder`: asked by a primary whose lock or intent the tx holds (in-line cleanup), not by a reader.
        const holder = b['holder'] === true ? ' holder' : '';
        return `${b.kind} ${tx} commitPartition=${commitPartition} intent=${intent}${holder}`;
      }
      case 'TxRecoveryRequest':
        return `${b.kind} ${tx} commitPartition=${partitionName(b['commitPartitionId'] as PartitionId)} reporter=${partitionName(b['reporterPartitionId'] as PartitionId)}`;
      case 'TxStatePrimaryReplicaRequest':
        return `${b.kind} ${tx} ${partitionName(b['partitionId'] as PartitionId)}`;
      default:
        return `${b.kind} ${tx}`;
    }
  }

  private describeResponse(body: unknown, request: SentRequest): string {
    const b = body as Record<string, unknown> & { kind: string };
    const tx = this.txName(request.txId);
    switch (b.kind) {
      case 'TxFinishResponse':
        return `TxFinishResponse ${tx} ${(b['outcome'] as { state: string }).state}`;
      case 'TxCleanupResponse':
        return `TxCleanupResponse ${tx} cleaned=${(b['cleaned'] as PartitionId[]).map(partitionName).join(',') || '-'}`;
      case 'TxStateResponse':
        return `TxStateResponse ${tx} ${describeAnswer(b['answer'] as TxStateAnswer | null, request.readTs)}${b['vacuumed'] === true ? ' vacuumed' : ''}`;
      default:
        return `${b.kind} ${tx}`;
    }
  }

  /** Per running node, how its resolution and recovery counters changed since the last command. */
  private counterChanges(): void {
    for (const n of this.cluster!.nodes) {
      const base = this.baselines.get(n);
      const node = this.cluster!.basaltNode(n);
      if (base === undefined || node === undefined || base.node !== node) continue;
      const now = node.counters.snapshot();
      const changes = Object.keys(now)
        .filter((k) => SHOWN_COUNTERS.test(k) && !HIDDEN_COUNTERS.has(k) && now[k] !== (base.counters[k] ?? 0))
        .sort()
        .map((k) => `${k}+${now[k]! - (base.counters[k] ?? 0)}`);
      if (changes.length > 0) this.lines.push(() => `${base.label} counters: ${changes.join(' ')}`);
      this.baselines.set(n, { ...base, counters: now });
    }
  }

  private stateOf(n: string, name: string): string {
    const c = this.cluster!;
    if (!c.node(n).up) return 'down';
    const id = [...this.txNames].find(([, v]) => v === name)?.[0];
    assert.ok(id !== undefined, `no transaction ${name}`);
    const s = c.node(n).txState(id);
    if (s === undefined) return '-';
    const coordinator = s.coordinatorId === undefined ? '?' : (this.incarnations.get(s.coordinatorId) ?? 'unknown');
    return `${s.state} coordinator=${coordinator}${s.commitTimestamp === undefined ? '' : ' with commitTs'}`;
  }

  private txName(id: TxId): string {
    let name = this.txNames.get(id);
    if (name === undefined) {
      this.unnamed += 1;
      name = `tx${this.unnamed}`;
      this.txNames.set(id, name);
    }
    return name;
  }
}

function nodeArg(args: readonly string[]): NodeName {
  const i = args.indexOf('on');
  assert.ok(i >= 0 && args[i + 1] !== undefined, 'expected `on <node>`');
  return args[i + 1] as NodeName;
}

function filterOf(args: readonly string[]): { kind: string; from?: string; to?: string } {
  const [kind, ...rest] = args;
  const field = (name: string) => {
    const i = rest.indexOf(name);
    return i < 0 ? undefined : rest[i + 1];
  };
  const from = field('from');
  const to = field('to');
  return { kind: kind!, ...(from !== undefined && { from }), ...(to !== undefined && { to }) };
}

function durationMs(text: string): number {
  const m = /^(\d+)(ms|s)$/.exec(text);
  assert.ok(m !== null, `a duration is like 100ms or 2s: ${text}`);
  return Number(m[1]) * (m[2] === 's' ? 1_000 : 1);
}

function partitionName(id: PartitionId): string {
  return `p${/p(\d+)$/.exec(id)?.[1] ?? id}`;
}

function describeAnswer(answer: TxStateAnswer | null, readTs: HybridTimestamp | undefined): string {
  if (answer === null) return 'no state';
  if (answer.state !== 'COMMITTED' || readTs === undefined) return answer.state;
  return `COMMITTED (commitTs ${answer.commitTs <= readTs ? '<=' : '>'} readTs)`;
}

function describeError(error: unknown): string {
  if (isBasaltError(error)) return `error ${error.code}`;
  throw error;
}

// ------------------------------------------------------------------------------------------ files

async function runScript(cases: readonly ScriptCase[]): Promise<ScriptResult[]> {
  const it = new Interpreter();
  try {
    const results: ScriptResult[] = [];
    for (const cs of cases) results.push({ command: cs.command, output: await it.run(cs.command) });
    return results;
  } finally {
    await it.stop();
  }
}

for (const file of readdirSync(dir).filter((f) => f.endsWith('.txt'))) {
  test(`tx interaction script ${file}`, async () => {
    const text = readFileSync(dir + file, 'utf8');
    const { header, cases } = parseScript(text);
    const results = await runScript(cases);
    // The same seed must give the same run: a second run of the script prints exactly the same.
    assert.deepEqual(await runScript(cases), results, `${file}: a second run printed something else`);
    if (rewrite) {
      writeFileSync(dir + file, renderScript(header, results));
      return;
    }
    assertGolden(file, cases, results);
  });
}
