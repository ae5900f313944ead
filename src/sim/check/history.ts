/**
 * Jepsen-style histories: every client operation is an `invoke` followed by its completion, `ok` (it took effect and
 * its value is what it returned), `fail` (it certainly took no effect) or `info` (indeterminate: it may or may not
 * have taken effect). Invariants the recorder keeps, so that a checker can rely on them:
 *   - one writer appends in real-time order, and `time` (nanoseconds) strictly increases along the history;
 *   - a process has at most one operation in flight; its completion names the same process and `f`;
 *   - after an `info` the process never runs again: its client continues under a fresh process id (its operation
 *     might still take effect at any later time, so nothing may be ordered after it on that process).
 * The file form is one JSON object a line (JSON Lines), the format Elle and Porcupine adapters read.
 */

export type OpType = 'invoke' | 'ok' | 'fail' | 'info';

/** `["append", key, value]` or `["r", key, list]` (the list is null in an invocation: not yet read). */
export type MicroOp = readonly ['append', string, number] | readonly ['r', string, readonly number[] | null];

export interface Transfer {
  readonly from: string;
  readonly to: string;
  readonly amount: number;
}

/** A JSON value as a register holds it (null: the key was never written). */
export type RegisterValue = number | null;

export type Operation =
  | OpCommon<'txn', readonly MicroOp[]>
  | OpCommon<'transfer', Transfer>
  /** Bank: value is every account's balance (null in the invocation); register: key and value read. */
  | OpCommon<'read', Readonly<Record<string, number>> | RegisterValue>
  | OpCommon<'write', RegisterValue>
  /** `[expected, new]`. */
  | OpCommon<'cas', readonly [RegisterValue, RegisterValue]>;

interface OpCommon<F extends string, V> {
  readonly process: number;
  readonly type: OpType;
  readonly f: F;
  readonly value: V;
  /** Register workload: the key of the operation. */
  readonly key?: string;
  /** Nanoseconds, strictly increasing along the history. */
  readonly time: number;
  /** Position in the history (0-based), filled in by the recorder and the reader. */
  readonly index: number;
  /** Why an operation failed or is indeterminate (an error code). */
  readonly error?: string;
}

export type OpF = Operation['f'];

/** An invocation paired with its completion (undefined completion: the history ended with it in flight). */
export interface Completed<O extends Operation = Operation> {
  readonly invoke: O;
  readonly complete: O | undefined;
}

/** Records a history from one writer. `nowNs` supplies the time (virtual time in the simulator). */
export class HistoryRecorder {
  readonly ops: Operation[] = [];
  private lastNs = -1;
  private nextProcess = 0;
  private readonly inFlight = new Map<number, Operation>();

  constructor(private readonly nowNs: () => number) {}

  /** A fresh process id (one per client, and a new one after each `info`). */
  process(): number {
    return this.nextProcess++;
  }

  invoke<O extends Operation>(op: Omit<O, 'type' | 'time' | 'index'>): O {
    if (this.inFlight.has(op.process)) throw new Error(`process ${op.process} already has an operation in flight`);
    const recorded = this.append({ ...op, type: 'invoke' } as Omit<Operation, 'time' | 'index'>) as O;
    this.inFlight.set(op.process, recorded);
    return recorded;
  }

  /** Completes the process's operation in flight. */
  complete<O extends Operation>(
    invocation: O,
    type: Exclude<OpType, 'invoke'>,
    value: O['value'] = invocation.value,
    error?: string,
  ): O {
    const open = this.inFlight.get(invocation.process);
    if (open !== invocation) throw new Error(`process ${invocation.process} completes an operation not in flight`);
    this.inFlight.delete(invocation.process);
    const { time: _t, index: _i, error: _e, ...rest } = invocation;
    return this.append({ ...rest, type, value, ...(error !== undefined && { error }) } as Omit<
      Operation,
      'time' | 'index'
    >) as O;
  }

  private append(op: Omit<Operation, 'time' | 'index'>): Operation {
    // Several events share one virtual millisecond; the writer's order is their real-time order.
    const time = Math.max(Math.floor(this.nowNs()), this.lastNs + 1);
    this.lastNs = time;
    const recorded = canonical({ ...op, time, index: this.ops.length } as Operation);
    this.ops.push(recorded);
    return recorded;
  }
}

/** Fields in Jepsen's order, so that files read well and two runs' files compare byte for byte. */
function canonical(op: Operation): Operation {
  const { index, process, type, f, key, value, time, error } = op;
  return {
    index,
    process,
    type,
    f,
    ...(key !== undefined && { key }),
    value,
    time,
    ...(error !== undefined && { error }),
  } as Operation;
}

/** One JSON object a line, in history order. */
export function formatHistory(ops: readonly Operation[]): string {
  return ops.map((op) => JSON.stringify(op)).join('\n') + (ops.length > 0 ? '\n' : '');
}

/** Parses a JSON Lines history back (blank lines skipped); checks the invariants a recorder keeps. */
export function parseHistory(text: string): Operation[] {
  const ops: Operation[] = [];
  let lastNs = -1;
  const lines = text.split('\n');
  for (let n = 0; n < lines.length; n++) {
    const line = lines[n]!.trim();
    if (line === '') continue;
    let parsed: unknown;
    try {
      parsed = JSON.parse(line);
    } catch (error) {
      throw new Error(`history line ${n + 1}: not JSON (${String(error)})`);
    }
    const op = parsed as Partial<Operation>;
    if (typeof op.process !== 'number' || typeof op.time !== 'number' || typeof op.f !== 'string') {
      throw new Error(`history line ${n + 1}: needs numeric process and time and a string f`);
    }
    if (!['invoke', 'ok', 'fail', 'info'].includes(op.type as string)) {
      throw new Error(`history line ${n + 1}: type must be invoke, ok, fail or info`);
    }
    if (op.time <= lastNs) throw new Error(`history line ${n + 1}: time does not increase`);
    lastNs = op.time;
    ops.push(canonical({ ...op, index: ops.length } as Operation));
  }
  return ops;
}

/** Pairs each invocation with its completion by process; fails on a history no single writer could have made. */
export function pairOperations<O extends Operation>(ops: readonly O[]): Completed<O>[] {
  const open = new Map<number, O>();
  const done = new Set<number>();
  const pairs: Completed<O>[] = [];
  const byInvoke = new Map<O, number>();
  for (const op of ops) {
    if (op.type === 'invoke') {
      if (open.has(op.process)) throw new Error(`process ${op.process} invokes twice without a completion`);
      if (done.has(op.process)) throw new Error(`process ${op.process} runs again after an info`);
      open.set(op.process, op);
      byInvoke.set(op, pairs.length);
      pairs.push({ invoke: op, complete: undefined });
      continue;
    }
    const invocation = open.get(op.process);
    if (invocation === undefined) throw new Error(`process ${op.process} completes nothing (index ${op.index})`);
    if (invocation.f !== op.f) throw new Error(`process ${op.process} completes ${op.f} for ${invocation.f}`);
    open.delete(op.process);
    if (op.type === 'info') done.add(op.process);
    pairs[byInvoke.get(invocation)!] = { invoke: invocation, complete: op };
  }
  return pairs;
}

/** A completion that leaves the operation indeterminate (info, or still in flight when the history ended). */
export function indeterminate(pair: Completed): boolean {
  return pair.complete === undefined || pair.complete.type === 'info';
}
