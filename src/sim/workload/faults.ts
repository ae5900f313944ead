/**
 * The fault schedule of a `basalt sim` run: during the safety phase, at seeded intervals, one fault of the enabled
 * kinds starts and is undone after a seeded time, so faults of different kinds overlap (a crash during a partition,
 * a lossy link during a skew). Kinds:
 *   - drop: a directed link loses a share of its messages;
 *   - delay: a directed link holds every message, then delivers the backlog at once;
 *   - dup: a directed link duplicates and reorders a share of its messages;
 *   - partition: a minority of nodes is cut off from the rest, both ways;
 *   - crash: a node loses power (volatile state and unsynced writes lost) and comes back later;
 *   - restart: a node stops gracefully (hands its leases over) and comes back later;
 *   - skew: a node's clock moves by up to SKEW_MS_MAX either way, so any two clocks stay within maxClockSkew (the
 *     bound under which real-time order is promised); offsets stay until the heal.
 * Invariants: at most a minority of nodes is down at once, so the majority can always make progress; `heal()` undoes
 * every fault in place (network, links, clocks) and starts every down node, then the liveness phase begins.
 */

import type { Client } from '../../client/client.js';
import { invalidArgument } from '../../core/errors.js';
import { LIMITS } from '../../core/limits.js';
import type { Cluster } from '../../harness/cluster.js';
import type { DropHandle, HoldHandle, LinkConfig, SimNetwork } from '../network.js';
import type { SeededRandom } from '../random.js';
import type { SimWorld } from '../world.js';

export type SimFault = 'drop' | 'delay' | 'dup' | 'partition' | 'crash' | 'restart' | 'skew';

export const SIM_FAULTS: readonly SimFault[] = ['drop', 'delay', 'dup', 'partition', 'crash', 'restart', 'skew'];

/** Half of maxClockSkew: two clocks moved opposite ways still differ by less than the bound. */
export const SKEW_MS_MAX = Math.floor(LIMITS.maxClockSkewMsDefault / 2) - 50;

const GAP_MS_MAX = 600;
const FAULT_MS_MIN = 200;
const FAULT_MS_MAX = 2_000;
const DROP_RATE_MAX = 0.5;
const DUPLICATE_RATE_MAX = 0.3;

/** `all`, `none`, or a comma-separated list of kinds. */
export function parseFaults(spec: string): SimFault[] {
  const parts = spec
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  if (parts.length === 1 && parts[0] === 'none') return [];
  const kinds = new Set<SimFault>();
  for (const part of parts) {
    if (part === 'all') for (const k of SIM_FAULTS) kinds.add(k);
    else if ((SIM_FAULTS as readonly string[]).includes(part)) kinds.add(part as SimFault);
    else throw invalidArgument(`unknown fault ${part} (expected ${SIM_FAULTS.join(', ')}, all or none)`);
  }
  return SIM_FAULTS.filter((k) => kinds.has(k));
}

export class FaultSchedule {
  /** One line per fault started or undone, with the virtual time since the run started. */
  readonly log: string[] = [];
  private readonly net: SimNetwork;
  private readonly down = new Set<string>();
  private readonly undo = new Set<() => Promise<void> | void>();
  private readonly running: Promise<void>[] = [];
  /** Link faults in place per directed link, oldest first: a link's setting is all of them merged. */
  private readonly linkFaults = new Map<string, Array<Partial<LinkConfig>>>();

  constructor(
    private readonly cluster: Cluster<Client>,
    private readonly world: SimWorld,
    private readonly random: SeededRandom,
    private readonly kinds: readonly SimFault[],
    /** Called with a node just before it is crashed or stopped (the run reads its incarnation's counters). */
    private readonly beforeTakeDown: (victim: string) => void = () => {},
  ) {
    this.net = world.network;
  }

  /** Injects faults until `untilMs` (virtual, absolute); resolves once every fault it started has been undone. */
  async run(untilMs: number): Promise<void> {
    if (this.kinds.length === 0) return;
    for (;;) {
      await this.cluster.runFor(1 + this.random.int(GAP_MS_MAX));
      if (this.world.nowMs() >= untilMs) break;
      const kind = this.random.pick(this.kinds);
      const forMs = FAULT_MS_MIN + this.random.int(FAULT_MS_MAX - FAULT_MS_MIN);
      const started = this.start(kind, forMs);
      if (started !== undefined) this.running.push(started);
    }
    await Promise.all(this.running);
  }

  /** Undoes whatever is still in place: network cuts, link settings, holds, clock offsets; starts down nodes. */
  async heal(): Promise<void> {
    for (const undo of [...this.undo]) await undo();
    this.undo.clear();
    this.net.heal();
    for (const from of this.cluster.nodes) for (const to of this.cluster.nodes) this.net.setLink(from, to, undefined);
    this.linkFaults.clear();
    for (const name of this.cluster.nodes) this.cluster.setClockOffset(name, 0);
    for (const name of this.cluster.nodes) if (!this.cluster.node(name).up) await this.cluster.startNode(name);
    this.down.clear();
    this.note('healed');
  }

  private start(kind: SimFault, forMs: number): Promise<void> | undefined {
    const nodes = this.cluster.nodes;
    const [a, b] = this.random.shuffle([...nodes]);
    if (a === undefined) return undefined;
    switch (kind) {
      case 'drop': {
        if (b === undefined) return undefined;
        const dropRate = this.random.next() * DROP_RATE_MAX;
        return this.withLink(a, b, { dropRate }, `drop ${a}>${b} rate=${dropRate.toFixed(2)}`, forMs);
      }
      case 'dup': {
        if (b === undefined) return undefined;
        const duplicateRate = this.random.next() * DUPLICATE_RATE_MAX;
        const label = `dup ${a}>${b} rate=${duplicateRate.toFixed(2)} reorder`;
        return this.withLink(a, b, { duplicateRate, reorder: true }, label, forMs);
      }
      case 'delay': {
        if (b === undefined) return undefined;
        const held: HoldHandle = this.net.hold({ from: a, to: b });
        return this.during(`delay ${a}>${b}`, forMs, () => {
          held.release();
        });
      }
      case 'partition': {
        const minority = this.random
          .shuffle([...nodes])
          .slice(0, 1 + this.random.int(Math.floor((nodes.length - 1) / 2)));
        const cuts: DropHandle[] = [];
        for (const m of minority) {
          for (const n of nodes) {
            if (minority.includes(n)) continue;
            cuts.push(this.net.drop({ from: m, to: n }), this.net.drop({ from: n, to: m }));
          }
        }
        return this.during(`partition [${minority.join(',')}]`, forMs, () => {
          for (const c of cuts) c.undo();
        });
      }
      case 'crash':
      case 'restart':
        return this.takeDown(a, kind, forMs);
      case 'skew': {
        const offsetMs = this.random.int(2 * SKEW_MS_MAX + 1) - SKEW_MS_MAX;
        this.cluster.setClockOffset(a, offsetMs);
        this.note(`skew ${a} ${offsetMs} ms`);
        return undefined;
      }
    }
  }

  /** Overlapping faults on one link each undo only their own part (restoring a snapshot would resurrect another's). */
  private withLink(from: string, to: string, config: Partial<LinkConfig>, label: string, forMs: number) {
    const key = `${from}>${to}`;
    const active = this.linkFaults.get(key) ?? [];
    this.linkFaults.set(key, active);
    active.push(config);
    this.applyLink(from, to, active);
    return this.during(label, forMs, () => {
      active.splice(active.indexOf(config), 1);
      this.applyLink(from, to, active);
    });
  }

  private applyLink(from: string, to: string, active: ReadonlyArray<Partial<LinkConfig>>): void {
    this.net.setLink(from, to, undefined);
    if (active.length > 0) this.net.setLink(from, to, Object.assign({}, ...active));
  }

  private takeDown(victim: string, kind: 'crash' | 'restart', forMs: number): Promise<void> | undefined {
    const maxDown = Math.floor((this.cluster.nodes.length - 1) / 2);
    if (this.down.has(victim) || this.down.size >= maxDown) return undefined;
    this.down.add(victim);
    const up = async (): Promise<void> => {
      if (!this.cluster.node(victim).up) await this.cluster.startNode(victim);
      this.down.delete(victim);
    };
    this.undo.add(up);
    return (async () => {
      this.note(`${kind === 'crash' ? 'crash' : 'graceful stop'} ${victim} for ${forMs} ms`);
      this.beforeTakeDown(victim);
      if (kind === 'crash') await this.cluster.stopNode(victim);
      else await this.cluster.shutdownNode(victim);
      await this.cluster.runFor(forMs);
      if (!this.undo.delete(up)) return;
      await up();
      this.note(`start ${victim}`);
    })();
  }

  /** Keeps a fault for `forMs`, then undoes it (unless the heal did first). */
  private async during(label: string, forMs: number, end: () => void): Promise<void> {
    this.note(label);
    this.undo.add(end);
    await this.cluster.runFor(forMs);
    if (!this.undo.delete(end)) return;
    end();
    this.note(`end ${label}`);
  }

  private note(line: string): void {
    const elapsedMs = this.world.nowMs() - this.world.scheduler.startMs;
    this.log.push(`t=${(elapsedMs / 1000).toFixed(3)}s ${line}`);
    this.world.note(`fault:${line}`);
  }
}
