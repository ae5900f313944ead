/**
 * A seeded swarm of faults for a simulated world (FoundationDB's and TigerBeetle's "swarm testing"): at random
 * intervals it partitions, isolates, cuts one direction, heals, crashes and restarts nodes, makes links lossy,
 * duplicating or reordering, and skews clocks. All choices come from the world's `nemesis` random stream, so a seed
 * replays the same faults. Invariants:
 *   - at most `maxDown` nodes are down at once (default: a minority), so a majority can always make progress after heal;
 *   - `healAll()` ends the safety phase: network healed, links back to their configuration before the nemesis started,
 *     every down node restarted; clock offsets stay (they are within `maxClockOffsetMs`, which protocols must
 *     tolerate) unless asked otherwise.
 */
import { invalidArgument } from '../core/errors.js';
import type { LinkConfig } from './network.js';
import type { SeededRandom } from './random.js';
import type { EventHandle } from './scheduler.js';
import type { SimWorld } from './world.js';

export type FaultKind = 'partition' | 'isolate' | 'cut' | 'heal' | 'crash' | 'restart' | 'lossy' | 'skew';

export const ALL_FAULTS: readonly FaultKind[] = [
  'partition',
  'isolate',
  'cut',
  'heal',
  'crash',
  'restart',
  'lossy',
  'skew',
];

export interface NemesisOptions {
  /** Mean time between faults; intervals are whole milliseconds, uniform in [0, 2 × mean]. */
  readonly meanIntervalMs?: number;
  readonly faults?: readonly FaultKind[];
  /** Nodes down at once; default: the largest minority. */
  readonly maxDown?: number;
  /** Bound of a clock offset the nemesis sets, either way. */
  readonly maxClockOffsetMs?: number;
  /** Worst loss and duplication a lossy link gets. */
  readonly dropRateMax?: number;
  readonly duplicateRateMax?: number;
}

const MEAN_INTERVAL_MS_DEFAULT = 50;
const MAX_CLOCK_OFFSET_MS_DEFAULT = 200;
const DROP_RATE_MAX_DEFAULT = 0.3;
const DUPLICATE_RATE_MAX_DEFAULT = 0.1;

export class Nemesis {
  /** One line per fault injected, in order: the readable history of the run. */
  readonly log: string[] = [];
  private readonly random: SeededRandom;
  private readonly faults: readonly FaultKind[];
  private readonly maxDown: number;
  private readonly meanIntervalMs: number;
  private readonly lossyLinks: Array<{
    readonly from: string;
    readonly to: string;
    readonly before: LinkConfig | undefined;
  }> = [];
  private next: EventHandle | undefined;
  private active = false;

  constructor(
    private readonly world: SimWorld,
    private readonly options: NemesisOptions = {},
  ) {
    this.random = world.random.fork('nemesis');
    this.faults = options.faults ?? ALL_FAULTS;
    if (this.faults.length === 0) throw invalidArgument('a nemesis needs at least one fault kind');
    this.maxDown = options.maxDown ?? Math.floor((world.nodeNames().length - 1) / 2);
    this.meanIntervalMs = options.meanIntervalMs ?? MEAN_INTERVAL_MS_DEFAULT;
  }

  /** Starts injecting faults; stops by itself after `durationMs` if given. */
  start(durationMs?: number): void {
    this.active = true;
    this.scheduleNext();
    if (durationMs !== undefined) this.world.schedule(durationMs, () => this.stop(), 'nemesis:stop');
  }

  /** Stops injecting faults; faults in place stay until `healAll`. */
  stop(): void {
    this.active = false;
    if (this.next !== undefined) this.world.scheduler.cancel(this.next);
    this.next = undefined;
  }

  /** Stops and repairs: heals the network, restores links, restarts down nodes (optionally zeroes clock offsets). */
  healAll(options: { readonly resetClocks?: boolean } = {}): void {
    this.stop();
    this.world.network.heal();
    for (const link of this.lossyLinks.reverse()) this.world.network.setLink(link.from, link.to, link.before);
    this.lossyLinks.length = 0;
    for (const name of this.world.nodeNames()) {
      if (!this.world.isUp(name)) this.world.restart(name);
      if (options.resetClocks) this.world.setClockOffset(name, 0);
    }
    this.record('heal-all');
  }

  private scheduleNext(): void {
    const delayMs = this.random.between(0, 2 * this.meanIntervalMs);
    this.next = this.world.schedule(
      delayMs,
      () => {
        if (!this.active) return;
        this.inject(this.random.pick(this.faults));
        this.scheduleNext();
      },
      'nemesis',
    );
  }

  private inject(kind: FaultKind): void {
    const names = this.world.nodeNames();
    const anyone = (): string => this.random.pick(names);
    switch (kind) {
      case 'partition': {
        const side = this.random.shuffle([...names]).slice(0, 1 + this.random.int(Math.max(1, names.length - 1)));
        this.world.network.partition(side);
        this.record(`partition [${side.join(',')}]`);
        return;
      }
      case 'isolate': {
        const name = anyone();
        this.world.network.isolate(name);
        this.record(`isolate ${name}`);
        return;
      }
      case 'cut': {
        const [from, to] = this.random.shuffle([...names]);
        if (from === undefined || to === undefined) return;
        this.world.network.cut(from, to);
        this.record(`cut ${from}>${to}`);
        return;
      }
      case 'heal':
        this.world.network.heal();
        this.record('heal');
        return;
      case 'crash':
        this.crashOne(names);
        return;
      case 'restart': {
        const down = names.filter((n) => !this.world.isUp(n));
        if (down.length === 0) return;
        const name = this.random.pick(down);
        this.world.restart(name);
        this.record(`restart ${name}`);
        return;
      }
      case 'lossy':
        this.makeLossy(names);
        return;
      case 'skew': {
        const name = anyone();
        const bound = this.options.maxClockOffsetMs ?? MAX_CLOCK_OFFSET_MS_DEFAULT;
        const offsetMs = Math.round((this.random.next() * 2 - 1) * bound);
        this.world.setClockOffset(name, offsetMs);
        this.record(`skew ${name} ${offsetMs}ms`);
        return;
      }
    }
  }

  private crashOne(names: readonly string[]): void {
    const up = names.filter((n) => this.world.isUp(n));
    if (names.length - up.length >= this.maxDown || up.length === 0) return;
    const name = this.random.pick(up);
    const kind = this.random.chance(0.5) ? 'power-loss' : 'process';
    this.world.crash(name, kind);
    this.record(`crash ${name} (${kind})`);
  }

  private makeLossy(names: readonly string[]): void {
    const [from, to] = this.random.shuffle([...names]);
    if (from === undefined || to === undefined) return;
    const before = this.world.network.linkOverride(from, to);
    this.lossyLinks.push({ from, to, before });
    const dropRate = this.random.next() * (this.options.dropRateMax ?? DROP_RATE_MAX_DEFAULT);
    const duplicateRate = this.random.next() * (this.options.duplicateRateMax ?? DUPLICATE_RATE_MAX_DEFAULT);
    const reorder = this.random.chance(0.5);
    this.world.network.setLink(from, to, { dropRate, duplicateRate, reorder });
    this.record(`lossy ${from}>${to} drop=${dropRate.toFixed(3)} dup=${duplicateRate.toFixed(3)} reorder=${reorder}`);
  }

  private record(line: string): void {
    const elapsedMs = this.world.nowMs() - this.world.scheduler.startMs;
    const entry = `t=${elapsedMs.toFixed(1)} ${line}`;
    this.log.push(entry);
    this.world.note(`nemesis:${line}`);
  }
}
