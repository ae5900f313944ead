/**
 * A directed multigraph of transactions with typed dependency edges (Adya's ww, wr, rw), strongly connected
 * components (Tarjan, iterative so that long chains cannot overflow the stack) and shortest cycles through an edge
 * (breadth-first search restricted to the edge types a class of anomaly allows).
 */

export type EdgeType = 'ww' | 'wr' | 'rw';

/** Why an edge exists: the key and the value that ordered the two transactions. */
export interface EdgeWhy {
  readonly type: EdgeType;
  readonly key: string;
  /** The value of the ww/wr write, or for rw the later write the reader did not see. */
  readonly value: number | undefined;
}

export class DepGraph {
  /** from → to → reasons, at most one per type (the first found). */
  private readonly out = new Map<number, Map<number, Map<EdgeType, EdgeWhy>>>();

  add(from: number, to: number, why: EdgeWhy): void {
    if (from === to) return;
    let targets = this.out.get(from);
    if (targets === undefined) {
      targets = new Map();
      this.out.set(from, targets);
    }
    let reasons = targets.get(to);
    if (reasons === undefined) {
      reasons = new Map();
      targets.set(to, reasons);
    }
    if (!reasons.has(why.type)) reasons.set(why.type, why);
  }

  nodes(): number[] {
    const all = new Set<number>();
    for (const [from, targets] of this.out) {
      all.add(from);
      for (const to of targets.keys()) all.add(to);
    }
    return [...all].sort((a, b) => a - b);
  }

  /** Edges from `from` usable with `allowed` types, each with the first allowed reason in `allowed` order. */
  successors(from: number, allowed: readonly EdgeType[]): Array<readonly [number, EdgeWhy]> {
    const result: Array<readonly [number, EdgeWhy]> = [];
    for (const [to, reasons] of this.out.get(from) ?? []) {
      for (const type of allowed) {
        const why = reasons.get(type);
        if (why !== undefined) {
          result.push([to, why]);
          break;
        }
      }
    }
    return result;
  }

  /** Edges of exactly this type, as (from, to, why). */
  edgesOf(type: EdgeType): Array<readonly [number, number, EdgeWhy]> {
    const result: Array<readonly [number, number, EdgeWhy]> = [];
    for (const [from, targets] of this.out) {
      for (const [to, reasons] of targets) {
        const why = reasons.get(type);
        if (why !== undefined) result.push([from, to, why]);
      }
    }
    return result;
  }
}

/** Strongly connected components with more than one node (a self-edge is never added). */
export function stronglyConnected(graph: DepGraph, allowed: readonly EdgeType[]): number[][] {
  const index = new Map<number, number>();
  const low = new Map<number, number>();
  const onStack = new Set<number>();
  const stack: number[] = [];
  const components: number[][] = [];
  let counter = 0;
  for (const root of graph.nodes()) {
    if (index.has(root)) continue;
    // Each frame: a node and the iterator over its successors.
    const frames: Array<{ node: number; next: Iterator<readonly [number, EdgeWhy]> }> = [];
    const open = (node: number): void => {
      index.set(node, counter);
      low.set(node, counter);
      counter++;
      stack.push(node);
      onStack.add(node);
      frames.push({ node, next: graph.successors(node, allowed)[Symbol.iterator]() });
    };
    open(root);
    while (frames.length > 0) {
      const frame = frames[frames.length - 1]!;
      const step = frame.next.next();
      if (!step.done) {
        const [to] = step.value;
        if (!index.has(to)) open(to);
        else if (onStack.has(to)) low.set(frame.node, Math.min(low.get(frame.node)!, index.get(to)!));
        continue;
      }
      frames.pop();
      const parent = frames[frames.length - 1];
      if (parent !== undefined) low.set(parent.node, Math.min(low.get(parent.node)!, low.get(frame.node)!));
      if (low.get(frame.node) === index.get(frame.node)) {
        const component: number[] = [];
        for (;;) {
          const member = stack.pop()!;
          onStack.delete(member);
          component.push(member);
          if (member === frame.node) break;
        }
        if (component.length > 1) components.push(component.sort((a, b) => a - b));
      }
    }
  }
  return components;
}

export interface CycleStep {
  readonly from: number;
  readonly to: number;
  readonly why: EdgeWhy;
}

/**
 * The shortest path from `start` to `goal` inside `within` using `allowed` edge types, as steps; undefined if none.
 * With the edge goal→start prepended by the caller this is the shortest cycle through that edge.
 */
export function shortestPath(
  graph: DepGraph,
  start: number,
  goal: number,
  allowed: readonly EdgeType[],
  within: ReadonlySet<number>,
): CycleStep[] | undefined {
  const previous = new Map<number, CycleStep | null>([[start, null]]);
  let frontier = [start];
  while (frontier.length > 0) {
    const next: number[] = [];
    for (const node of frontier) {
      for (const [to, why] of graph.successors(node, allowed)) {
        if (!within.has(to) || previous.has(to)) continue;
        previous.set(to, { from: node, to, why });
        if (to === goal) {
          const path: CycleStep[] = [];
          for (let at = goal; at !== start; ) {
            const step = previous.get(at)!;
            path.unshift(step);
            at = step.from;
          }
          return path;
        }
        next.push(to);
      }
    }
    frontier = next;
  }
  return undefined;
}
