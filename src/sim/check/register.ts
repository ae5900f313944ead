/**
 * Linearizability of single-key registers (read, write, compare-and-set), checked as Porcupine does (Wing and Gong's
 * search with Lowe's memoization, after Horn and Kroening's P-compositionality): linearizability is local, so the
 * history splits by key and each key is searched alone. The search walks the key's call and return events in time
 * order and tries to linearize an operation at its call; a return event reached before its operation was linearized
 * forces a backtrack. A (set of linearized operations, register state) pair already explored is never explored again.
 * Model:
 *   - `fail` operations took no effect and are dropped; `info` reads told nothing and are dropped;
 *   - an `info` write or cas may have taken effect at any time after its call, or never: its return is at infinity,
 *     so the search may linearize it anywhere later, and "never" is the same as "after everything" since nothing
 *     observes the register after the end; an indeterminate cas whose expected value does not match is a no-op;
 *   - a register never written holds null.
 */
import { type Completed, type Operation, pairOperations, type RegisterValue } from './history.js';

export interface RegisterKeyResult {
  readonly key: string;
  readonly valid: boolean | 'unknown';
  readonly ops: number;
  /** When not linearizable: the most operations any branch of the search linearized, and the ops it was stuck on. */
  readonly deepest?: { readonly linearized: number; readonly stuckOn: readonly number[] };
}

export interface RegisterResult {
  /** 'unknown' when some key's search ran out of its step budget without deciding. */
  readonly valid: boolean | 'unknown';
  readonly keys: readonly RegisterKeyResult[];
  readonly message: string;
}

export interface RegisterOptions {
  /** Search steps per key before giving up with 'unknown'. */
  readonly stepsMax?: number;
}

const STEPS_MAX_DEFAULT = 2_000_000;

type RegisterOperation = Extract<Operation, { f: 'read' | 'write' | 'cas' }>;

interface SearchOp {
  /** History index of the invocation. */
  readonly id: number;
  /** Bit of this op in the linearized set. */
  readonly bit: bigint;
  readonly f: 'read' | 'write' | 'cas';
  readonly value: RegisterValue | readonly [RegisterValue, RegisterValue];
  readonly determinate: boolean;
}

interface Entry {
  readonly op: SearchOp;
  readonly isCall: boolean;
  readonly atNs: number;
  match: Entry | undefined;
  prev: Entry | undefined;
  next: Entry | undefined;
}

export function checkRegister(history: readonly Operation[], options: RegisterOptions = {}): RegisterResult {
  const registerOps = history.filter((op): op is RegisterOperation => ['read', 'write', 'cas'].includes(op.f));
  const byKey = new Map<string, Completed<RegisterOperation>[]>();
  for (const pair of pairOperations(registerOps)) {
    const key = pair.invoke.key ?? '';
    const list = byKey.get(key) ?? [];
    list.push(pair);
    byKey.set(key, list);
  }
  const keys = [...byKey].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const results = keys.map(([key, pairs]) => checkKey(key, pairs, options.stepsMax ?? STEPS_MAX_DEFAULT));
  const bad = results.filter((r) => r.valid === false);
  const unknown = results.filter((r) => r.valid === 'unknown');
  const valid = bad.length > 0 ? false : unknown.length > 0 ? 'unknown' : true;
  const message =
    bad.length > 0
      ? bad
          .map(
            (r) =>
              `key ${r.key}: not linearizable (${r.ops} ops; at most ${r.deepest?.linearized} linearized, stuck on ` +
              `ops at history indices ${r.deepest?.stuckOn.join(', ')})`,
          )
          .join('; ')
      : unknown.length > 0
        ? `undecided within the step budget: keys ${unknown.map((r) => r.key).join(', ')}`
        : `linearizable (${results.length} keys)`;
  return { valid, keys: results, message };
}

function checkKey(key: string, pairs: readonly Completed<RegisterOperation>[], stepsMax: number): RegisterKeyResult {
  const events: Entry[] = [];
  let bit = 0n;
  for (const { invoke, complete } of pairs) {
    const type = complete?.type ?? 'info';
    if (type === 'fail' || (type === 'info' && invoke.f === 'read')) continue;
    const determinate = type === 'ok';
    const value = invoke.f === 'read' ? (complete!.value as RegisterValue) : invoke.value;
    const op: SearchOp = { id: invoke.index, bit: 1n << bit++, f: invoke.f, value, determinate };
    const call: Entry = { op, isCall: true, atNs: invoke.time, match: undefined, prev: undefined, next: undefined };
    const ret: Entry = {
      op,
      isCall: false,
      atNs: determinate ? complete!.time : Number.POSITIVE_INFINITY,
      match: undefined,
      prev: undefined,
      next: undefined,
    };
    call.match = ret;
    events.push(call, ret);
  }
  // Times strictly increase along a history; returns at infinity keep their operations' order.
  events.sort((a, b) => a.atNs - b.atNs || a.op.id - b.op.id);
  const head: Entry = {
    op: { id: -1, bit: 0n, f: 'read', value: null, determinate: true },
    isCall: false,
    atNs: Number.NEGATIVE_INFINITY,
    match: undefined,
    prev: undefined,
    next: undefined,
  };
  let tail = head;
  for (const e of events) {
    e.prev = tail;
    tail.next = e;
    tail = e;
  }
  const total = events.length / 2;
  const cache = new Map<bigint, Set<string>>();
  const calls: Array<{ entry: Entry; state: RegisterValue }> = [];
  let state: RegisterValue = null;
  let linearized = 0n;
  let depth = 0;
  let deepest = { linearized: 0, stuckOn: [] as number[] };
  let entry = head.next;
  for (let steps = 0; head.next !== undefined; steps++) {
    if (steps > stepsMax) return { key, valid: 'unknown', ops: total };
    if (entry === undefined) break;
    if (entry.isCall) {
      const next = step(state, entry.op);
      if (next !== undefined) {
        const bits = linearized | entry.op.bit;
        const seen = cache.get(bits) ?? new Set<string>();
        const stateKey = JSON.stringify(next.state);
        if (!seen.has(stateKey)) {
          seen.add(stateKey);
          cache.set(bits, seen);
          calls.push({ entry, state });
          state = next.state;
          linearized = bits;
          depth++;
          lift(entry);
          entry = head.next;
          continue;
        }
      }
      entry = entry.next;
      continue;
    }
    // A return whose operation is not linearized yet: this branch is dead.
    if (depth >= deepest.linearized) deepest = { linearized: depth, stuckOn: stuck(head, entry) };
    const top = calls.pop();
    if (top === undefined) return { key, valid: false, ops: total, deepest };
    state = top.state;
    linearized &= ~top.entry.op.bit;
    depth--;
    unlift(top.entry);
    entry = top.entry.next;
  }
  return { key, valid: true, ops: total };
}

/** The register after `op`, or undefined if `op` cannot take effect in `state`. */
function step(state: RegisterValue, op: SearchOp): { state: RegisterValue } | undefined {
  switch (op.f) {
    case 'read':
      return op.value === state ? { state } : undefined;
    case 'write':
      return { state: op.value as RegisterValue };
    case 'cas': {
      const [expected, next] = op.value as readonly [RegisterValue, RegisterValue];
      if (expected === state) return { state: next };
      // A cas acknowledged as applied must have matched; an indeterminate one that did not match did nothing.
      return op.determinate ? undefined : { state };
    }
  }
}

/** Operations still pending when the search hit `blocking`: every call before it in the remaining list. */
function stuck(head: Entry, blocking: Entry): number[] {
  const ids: number[] = [];
  for (let e = head.next; e !== undefined && e !== blocking; e = e.next) if (e.isCall) ids.push(e.op.id);
  ids.push(blocking.op.id);
  return ids;
}

function lift(call: Entry): void {
  call.prev!.next = call.next;
  if (call.next !== undefined) call.next.prev = call.prev;
  const ret = call.match!;
  ret.prev!.next = ret.next;
  if (ret.next !== undefined) ret.next.prev = ret.prev;
}

function unlift(call: Entry): void {
  const ret = call.match!;
  ret.prev!.next = ret;
  if (ret.next !== undefined) ret.next.prev = ret;
  call.prev!.next = call;
  if (call.next !== undefined) call.next.prev = call;
}
