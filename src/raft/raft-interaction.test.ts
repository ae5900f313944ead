/**
 * Scripted interaction tests with golden output, in the manner of etcd-raft's datadriven `testdata/*.txt`: each file
 * holds commands, each followed by `----` and the output it must produce (the messages delivered, statuses, logs).
 * A change in behaviour shows up as a reviewable diff; after reviewing it, regenerate with RAFT_REWRITE=1.
 *
 * Commands:
 *   cluster size=3 [spares=N] [compact=N] [appendMax=N]   a new cluster of cores (seeded, no random faults);
 *                                               spares start outside the configuration
 *   campaign n1 | tick n1 [count] | stabilize | propose n1 key | transfer n1 n2
 *   conf n1 add-learner|add-voter|promote|remove n4   propose a configuration change on n1
 *   isolate n1 | heal | crash n1 | restart n1 | status | config | log n1
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { nodeName } from '../core/ids.js';
import { SeededRandom } from '../sim/random.js';
import { assertGolden, parseScript, renderScript } from '../testing/datadriven.js';
import { SimCluster } from '../testing/raft-sim-cluster.js';
import { type ConfChangeType, decodeConfChange } from './conf-change.js';
import type { Entry, Message } from './types.js';

const dir = fileURLToPath(new URL('../../../src/raft/testdata/', import.meta.url));
const rewrite = process.env['RAFT_REWRITE'] === '1';
const dec = (b: Uint8Array): string => new TextDecoder().decode(b);

function entry(e: Entry): string {
  if (e.kind === 'conf') {
    const c = decodeConfChange(e.data);
    return `${e.index}/${e.term}:conf(${c?.type} ${c?.node})`;
  }
  return `${e.index}/${e.term}${e.kind === 'noop' ? '' : `:${dec(e.data)}`}`;
}

function describeMessage(m: Message): string {
  const head = `${m.from}->${m.to} ${m.kind} t${m.term}`;
  switch (m.kind) {
    case 'PreVote':
    case 'Vote':
      return `${head} last=${m.lastIndex}/${m.lastTerm}${m.kind === 'Vote' && m.transfer ? ' transfer' : ''}`;
    case 'PreVoteResp':
    case 'VoteResp':
      return `${head}${m.reject ? ' REJECT' : ''}`;
    case 'Append':
      return `${head} prev=${m.prevIndex}/${m.prevTerm} commit=${m.commit} [${m.entries.map(entry).join(' ')}]`;
    case 'AppendResp':
      return `${head} index=${m.index}${m.reject ? ` REJECT hint=${m.hintIndex}/${m.hintTerm}` : ''}`;
    case 'Heartbeat':
      return `${head} commit=${m.commit}`;
    case 'Snapshot':
      return `${head} snapshot=${m.snapshot.index}/${m.snapshot.term}`;
    case 'HeartbeatResp':
    case 'TimeoutNow':
      return head;
  }
}

class Interpreter {
  private c: SimCluster | null = null;

  run(line: string): string {
    const [cmd, ...args] = line.trim().split(/\s+/);
    const kv = Object.fromEntries(args.filter((a) => a.includes('=')).map((a) => a.split('=') as [string, string]));
    if (cmd === 'cluster') {
      const compact = kv['compact'] === undefined ? {} : { compactEvery: Number(kv['compact']) };
      // The scripts pin the tick counts they were written against, whatever the defaults.
      const appendMax = kv['appendMax'] === undefined ? {} : { appendEntriesMax: Number(kv['appendMax']) };
      const raft = { raft: { electionTicks: 10, heartbeatTicks: 1, ...appendMax } };
      this.c = new SimCluster({
        size: Number(kv['size'] ?? 3),
        spares: Number(kv['spares'] ?? 0),
        random: new SeededRandom('interaction'),
        ...compact,
        ...raft,
      });
      return 'ok';
    }
    const c = this.c;
    assert.ok(c !== null, 'the first command must be `cluster`');
    const [a, b] = args;
    return this.traced(c, () => {
      switch (cmd) {
        case 'campaign':
          c.campaign(a!);
          return '';
        case 'tick':
          c.tick(a!, Number(b ?? 1));
          c.stabilize();
          return '';
        case 'stabilize':
          c.stabilize();
          return '';
        case 'propose': {
          const index = c.propose(a!, b);
          return index === null ? 'refused' : `index ${index}`;
        }
        case 'conf': {
          const r = c.proposeConf(a!, { type: b as ConfChangeType, node: nodeName(args[2]!) });
          if (r.status === 'OK') return `index ${r.index}`;
          return r.status === 'REFUSED' ? `refused ${r.error.code}` : r.status;
        }
        case 'config':
          return c.names.map((n) => this.config(c, n)).join('\n');
        case 'transfer':
          return c.raft(a!).transferLeader(nodeName(b!)) ? 'transferring' : 'refused';
        case 'isolate':
          c.isolate(a!);
          return 'ok';
        case 'heal':
          c.heal();
          return 'ok';
        case 'crash':
          c.crash(a!);
          return 'ok';
        case 'restart':
          c.restart(a!);
          return 'ok';
        case 'status':
          return c.names.map((n) => this.status(c, n)).join('\n');
        case 'log': {
          const log = c.raft(a!).log;
          const entries = log.lastIndex() > log.snapshotIndex() ? log.slice(log.firstIndex(), log.lastIndex()) : [];
          return `snapshot=${log.snapshotIndex()} [${entries.map(entry).join(' ')}]`;
        }
        default:
          throw new Error(`unknown command: ${line}`);
      }
    });
  }

  private status(c: SimCluster, n: string): string {
    if (!c.live.has(nodeName(n))) return `${n}: down`;
    const s = c.raft(n).status();
    return `${n}: ${s.role} term=${s.term} leader=${s.leader ?? '-'} commit=${s.commit} applied=${s.applied} last=${s.lastIndex}`;
  }

  private config(c: SimCluster, n: string): string {
    if (!c.live.has(nodeName(n))) return `${n}: down`;
    const s = c.raft(n).status();
    return `${n}: voters=${s.voters.join(',')} learners=${s.learners.join(',') || '-'}`;
  }

  /** Runs `fn`, then prints what it returned followed by every message delivered meanwhile. */
  private traced(c: SimCluster, fn: () => string): string {
    c.trace = [];
    const result = fn();
    const lines = c.trace.map(describeMessage);
    c.trace = null;
    return [result, ...lines].filter(Boolean).join('\n') || 'ok';
  }
}

for (const file of readdirSync(dir).filter((f) => f.endsWith('.txt'))) {
  test(`interaction script ${file}`, () => {
    const text = readFileSync(dir + file, 'utf8');
    const { header, cases } = parseScript(text);
    const it = new Interpreter();
    const results = cases.map((cs) => ({ command: cs.command, output: it.run(cs.command) }));
    if (rewrite) {
      writeFileSync(dir + file, renderScript(header, results));
      return;
    }
    assertGolden(file, cases, results);
  });
}
