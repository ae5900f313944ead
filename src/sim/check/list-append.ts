/**
 * An Elle-style checker for list-append histories (Kingsbury and Alvaro, "Elle: inferring isolation anomalies from
 * experimental observations"). Transactions append unique values to lists and read whole lists; because every value
 * is appended once, a read names exactly which writes it saw, in order, so the version order of each key is the
 * longest read of it (every other read must be a prefix of it). From that order it derives Adya's dependency edges
 * between committed transactions:
 *   - ww: T1 appended the element right before T2's in the version order of a key;
 *   - wr: T2 read a list of a key whose last element T1 appended;
 *   - rw: T1 read a list of a key and T2 appended the element right after its last one (or any element never
 *     observed, when T1 read the longest list: those were appended after it).
 * A cycle of these edges is an anomaly no serializable execution has; the search runs Tarjan's SCC algorithm and
 * then looks for the shortest cycle of each class inside each component: G0 (ww only), G1c (ww and wr), G-single
 * (exactly one rw), G2 (several rw). Without edges it finds G1a (a committed read of a failed transaction's append),
 * G1b (a read ending on a value its writer later overwrote with another append of the same key), and structural
 * errors: reads that are not prefixes of one order, duplicated elements, values nobody appended, and reads inside a
 * transaction that disagree with its own earlier appends (internal). Real-time order is not checked except for the
 * optional `lost-append` test: a read started more than `realtimeSlackNs` after an append was acknowledged must
 * contain it (Basalt promises real-time order only within the clock-skew bound).
 * Indeterminate (`info`) transactions count as committed when some committed read saw one of their appends, and are
 * otherwise left out; their reads are never trusted.
 */
import { type CycleStep, DepGraph, type EdgeType, shortestPath, stronglyConnected } from './graph.js';
import { type Completed, type MicroOp, type Operation, pairOperations } from './history.js';

export type ListAppendAnomalyKind =
  | 'G0'
  | 'G1a'
  | 'G1b'
  | 'G1c'
  | 'G-single'
  | 'G2'
  | 'incompatible-order'
  | 'duplicate-elements'
  | 'garbage-read'
  | 'internal'
  | 'lost-append';

export interface ListAppendAnomaly {
  readonly kind: ListAppendAnomalyKind;
  readonly message: string;
  /** For cycles: each step names the history indices of the two transactions' invocations and why the edge exists. */
  readonly cycle?: readonly CycleStep[];
  /** History indices (invocations) of the transactions involved. */
  readonly ops: readonly number[];
}

export interface ListAppendResult {
  readonly valid: boolean;
  readonly anomalies: readonly ListAppendAnomaly[];
  readonly counts: {
    readonly ok: number;
    readonly fail: number;
    readonly info: number;
    readonly keys: number;
    readonly edges: number;
  };
}

export interface ListAppendOptions {
  /** Check lost appends: reads started this long after an acknowledged append must see it (undefined: no check). */
  readonly realtimeSlackNs?: number;
  /** Cycles reported per class at most (the search stops looking for more). */
  readonly cyclesPerClassMax?: number;
}

type Txn = Completed<Extract<Operation, { f: 'txn' }>>;

interface TxnView {
  /** Node id in the graph: the index of the invocation in the history. */
  readonly id: number;
  readonly pair: Txn;
  readonly committed: boolean;
  /** Micro-ops as completed (reads filled) for ok transactions; as invoked otherwise. */
  readonly ops: readonly MicroOp[];
}

const CYCLE_CLASSES: ReadonlyArray<{ kind: ListAppendAnomalyKind; allowed: readonly EdgeType[] }> = [
  { kind: 'G0', allowed: ['ww'] },
  { kind: 'G1c', allowed: ['ww', 'wr'] },
];

export function checkListAppend(history: readonly Operation[], options: ListAppendOptions = {}): ListAppendResult {
  const pairs = pairOperations(history.filter((op): op is Txn['invoke'] => op.f === 'txn'));
  const anomalies: ListAppendAnomaly[] = [];
  const views = pairs.map(viewOf);
  const writer = new Map<string, TxnView>(); // `${key}\u0000${value}` → appender
  const failedWriter = new Map<string, TxnView>();
  for (const view of views) {
    for (const op of view.ops) {
      if (op[0] !== 'append') continue;
      const slot = elementId(op[1], op[2]);
      const status = view.pair.complete?.type;
      if (status === 'fail') failedWriter.set(slot, view);
      else writer.set(slot, view);
    }
  }
  const committedReads = views.filter((v) => v.pair.complete?.type === 'ok');
  const orders = versionOrders(committedReads, anomalies);
  // Indeterminate transactions whose appends someone saw did commit.
  const observed = new Set<string>();
  for (const [key, order] of orders) for (const value of order) observed.add(elementId(key, value));
  const inGraph = new Set<TxnView>(committedReads);
  for (const view of views) {
    if (view.committed || view.pair.complete?.type === 'fail') continue;
    if (view.ops.some((op) => op[0] === 'append' && observed.has(elementId(op[1], op[2])))) inGraph.add(view);
  }
  checkReads(committedReads, writer, failedWriter, anomalies);
  checkInternal(committedReads, anomalies);
  const graph = dependencies(inGraph, orders, writer);
  if (options.realtimeSlackNs !== undefined) checkLost(committedReads, options.realtimeSlackNs, anomalies);
  findCycles(graph, options.cyclesPerClassMax ?? 3, anomalies);
  const count = (type: string) => pairs.filter((p) => (p.complete?.type ?? 'info') === type).length;
  let edges = 0;
  for (const type of ['ww', 'wr', 'rw'] as const) edges += graph.edgesOf(type).length;
  return {
    valid: anomalies.length === 0,
    anomalies,
    counts: { ok: count('ok'), fail: count('fail'), info: count('info'), keys: orders.size, edges },
  };
}

function viewOf(pair: Txn): TxnView {
  const committed = pair.complete?.type === 'ok';
  return { id: pair.invoke.index, pair, committed, ops: committed ? pair.complete!.value : pair.invoke.value };
}

function elementId(key: string, value: number): string {
  return `${key}\u0000${value}`;
}

/** Reads of a key by committed transactions: each with the list it returned. */
function* reads(views: Iterable<TxnView>): Generator<{ view: TxnView; key: string; list: readonly number[] }> {
  for (const view of views) {
    for (const op of view.ops) if (op[0] === 'r' && op[2] !== null) yield { view, key: op[1], list: op[2] };
  }
}

/** The longest read of each key; reads that are not prefixes of it are anomalies. */
function versionOrders(committed: readonly TxnView[], anomalies: ListAppendAnomaly[]): Map<string, readonly number[]> {
  const longest = new Map<string, { list: readonly number[]; view: TxnView }>();
  for (const r of reads(committed)) {
    const best = longest.get(r.key);
    if (best === undefined || r.list.length > best.list.length) longest.set(r.key, r);
  }
  const reported = new Set<string>();
  for (const r of reads(committed)) {
    const best = longest.get(r.key)!;
    if (isPrefix(r.list, best.list) || reported.has(r.key)) continue;
    reported.add(r.key);
    anomalies.push({
      kind: 'incompatible-order',
      message: `key ${r.key}: read ${JSON.stringify(r.list)} is not a prefix of ${JSON.stringify(best.list)}`,
      ops: [r.view.id, best.view.id],
    });
  }
  return new Map([...longest].map(([key, r]) => [key, r.list]));
}

function isPrefix(a: readonly number[], b: readonly number[]): boolean {
  return a.length <= b.length && a.every((v, i) => b[i] === v);
}

function checkReads(
  committed: readonly TxnView[],
  writer: ReadonlyMap<string, TxnView>,
  failedWriter: ReadonlyMap<string, TxnView>,
  anomalies: ListAppendAnomaly[],
): void {
  for (const { view, key, list } of reads(committed)) {
    const seen = new Set<number>();
    for (const value of list) {
      if (seen.has(value)) {
        anomalies.push({
          kind: 'duplicate-elements',
          message: `key ${key}: read ${JSON.stringify(list)} holds ${value} twice`,
          ops: [view.id],
        });
        break;
      }
      seen.add(value);
    }
    for (const value of list) {
      const slot = elementId(key, value);
      const failed = failedWriter.get(slot);
      if (failed !== undefined) {
        anomalies.push({
          kind: 'G1a',
          message: `key ${key}: read ${JSON.stringify(list)} saw ${value}, appended by a transaction that failed`,
          ops: [view.id, failed.id],
        });
      } else if (!writer.has(slot)) {
        anomalies.push({
          kind: 'garbage-read',
          message: `key ${key}: read ${JSON.stringify(list)} saw ${value}, which nobody appended`,
          ops: [view.id],
        });
      }
    }
    const last = list[list.length - 1];
    if (last === undefined) continue;
    const appender = writer.get(elementId(key, last));
    if (appender === undefined || appender === view) continue;
    const own = appender.ops.filter((op) => op[0] === 'append' && op[1] === key).map((op) => op[2] as number);
    if (own[own.length - 1] !== last) {
      anomalies.push({
        kind: 'G1b',
        message:
          `key ${key}: read ${JSON.stringify(list)} ends on ${last}, an intermediate append of a transaction ` +
          `whose last append to ${key} was ${own[own.length - 1]}`,
        ops: [view.id, appender.id],
      });
    }
  }
}

/** Within a committed transaction, a read shows the previous read of the key plus the transaction's appends since. */
function checkInternal(committed: readonly TxnView[], anomalies: ListAppendAnomaly[]): void {
  for (const view of committed) {
    const expected = new Map<string, { known: number[] | undefined; appended: number[] }>();
    for (const op of view.ops) {
      const key = op[1];
      const state = expected.get(key) ?? { known: undefined, appended: [] };
      expected.set(key, state);
      if (op[0] === 'append') {
        state.appended.push(op[2]);
        continue;
      }
      const list = op[2] ?? [];
      const ok =
        state.known !== undefined
          ? list.length === state.known.length + state.appended.length &&
            isPrefix(state.known, list) &&
            state.appended.every((v, i) => list[state.known!.length + i] === v)
          : list.length >= state.appended.length &&
            state.appended.every((v, i) => list[list.length - state.appended.length + i] === v);
      if (!ok) {
        anomalies.push({
          kind: 'internal',
          message: `key ${key}: read ${JSON.stringify(list)} disagrees with the transaction's own earlier operations`,
          ops: [view.id],
        });
      }
      state.known = [...list];
      state.appended = [];
    }
  }
}

function dependencies(
  inGraph: ReadonlySet<TxnView>,
  orders: ReadonlyMap<string, readonly number[]>,
  writer: ReadonlyMap<string, TxnView>,
): DepGraph {
  const graph = new DepGraph();
  const member = (key: string, value: number): TxnView | undefined => {
    const w = writer.get(elementId(key, value));
    return w !== undefined && inGraph.has(w) ? w : undefined;
  };
  // Committed appends nobody observed come after every observed element of their key.
  const unobserved = new Map<string, Array<{ value: number; by: TxnView }>>();
  for (const view of inGraph) {
    if (!view.committed) continue;
    for (const op of view.ops) {
      if (op[0] !== 'append' || (orders.get(op[1]) ?? []).includes(op[2])) continue;
      const list = unobserved.get(op[1]) ?? [];
      list.push({ value: op[2], by: view });
      unobserved.set(op[1], list);
    }
  }
  for (const [key, order] of orders) {
    for (let i = 0; i + 1 < order.length; i++) {
      const a = member(key, order[i]!);
      const b = member(key, order[i + 1]!);
      if (a !== undefined && b !== undefined) graph.add(a.id, b.id, { type: 'ww', key, value: order[i + 1] });
    }
    const last = order[order.length - 1];
    const tail = last === undefined ? undefined : member(key, last);
    for (const later of unobserved.get(key) ?? []) {
      if (tail !== undefined) graph.add(tail.id, later.by.id, { type: 'ww', key, value: later.value });
    }
  }
  for (const { view, key, list } of reads([...inGraph].filter((v) => v.committed))) {
    const order = orders.get(key) ?? [];
    const last = list[list.length - 1];
    if (last !== undefined) {
      const w = member(key, last);
      if (w !== undefined) graph.add(w.id, view.id, { type: 'wr', key, value: last });
    }
    if (list.length < order.length) {
      const next = order[list.length]!;
      const w = member(key, next);
      if (w !== undefined) graph.add(view.id, w.id, { type: 'rw', key, value: next });
    } else {
      for (const later of unobserved.get(key) ?? []) {
        graph.add(view.id, later.by.id, { type: 'rw', key, value: later.value });
      }
    }
  }
  return graph;
}

function checkLost(committed: readonly TxnView[], slackNs: number, anomalies: ListAppendAnomaly[]): void {
  const acknowledged: Array<{ key: string; value: number; atNs: number; by: TxnView }> = [];
  for (const view of committed) {
    for (const op of view.ops) {
      if (op[0] === 'append') acknowledged.push({ key: op[1], value: op[2], atNs: view.pair.complete!.time, by: view });
    }
  }
  const reported = new Set<string>();
  for (const { view, key, list } of reads(committed)) {
    const startNs = view.pair.invoke.time;
    for (const a of acknowledged) {
      if (a.key !== key || a.atNs + slackNs > startNs || list.includes(a.value)) continue;
      const slot = elementId(key, a.value);
      if (reported.has(slot)) continue;
      reported.add(slot);
      anomalies.push({
        kind: 'lost-append',
        message:
          `key ${key}: append of ${a.value} was acknowledged ${((startNs - a.atNs) / 1e6).toFixed(1)} ms before a ` +
          `read started, which returned ${JSON.stringify(list)}`,
        ops: [a.by.id, view.id],
      });
    }
  }
}

function findCycles(graph: DepGraph, perClassMax: number, anomalies: ListAppendAnomaly[]): void {
  const all: readonly EdgeType[] = ['ww', 'wr', 'rw'];
  const describe = (cycle: readonly CycleStep[]): string =>
    cycle
      .map((s) => `T${s.from} -${s.why.type} ${s.why.key}${s.why.value === undefined ? '' : `=${s.why.value}`}-> `)
      .join('') + `T${cycle[0]!.from}`;
  const report = (kind: ListAppendAnomalyKind, cycle: CycleStep[]): void => {
    anomalies.push({ kind, message: `${kind} cycle: ${describe(cycle)}`, cycle, ops: cycle.map((s) => s.from) });
  };
  for (const component of stronglyConnected(graph, all)) {
    const within = new Set(component);
    const found = new Map<ListAppendAnomalyKind, number>();
    const room = (kind: ListAppendAnomalyKind) => (found.get(kind) ?? 0) < perClassMax;
    const note = (kind: ListAppendAnomalyKind, cycle: CycleStep[]) => {
      found.set(kind, (found.get(kind) ?? 0) + 1);
      report(kind, cycle);
    };
    // G0 and G1c: cycles through a ww (G0) or a wr (G1c) edge using only the class's edge types.
    for (const { kind, allowed } of CYCLE_CLASSES) {
      const through: EdgeType = kind === 'G0' ? 'ww' : 'wr';
      for (const [from, to, why] of graph.edgesOf(through)) {
        if (!room(kind)) break;
        if (!within.has(from) || !within.has(to)) continue;
        const back = shortestPath(graph, to, from, allowed, within);
        if (back !== undefined) note(kind, [{ from, to, why }, ...back]);
      }
    }
    // G-single: one rw edge closed by ww/wr edges; G2: an rw edge closed only through further rw edges.
    for (const [from, to, why] of graph.edgesOf('rw')) {
      if (!within.has(from) || !within.has(to)) continue;
      const single = shortestPath(graph, to, from, ['ww', 'wr'], within);
      if (single !== undefined) {
        if (room('G-single')) note('G-single', [{ from, to, why }, ...single]);
        continue;
      }
      const multi = shortestPath(graph, to, from, all, within);
      if (multi !== undefined && room('G2')) note('G2', [{ from, to, why }, ...multi]);
    }
  }
}
