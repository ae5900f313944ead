/**
 * `basalt sim`: runs the deterministic simulator over seeds and workloads and reports each failure with its seed, the
 * command that replays it and the last events of its run; `basalt check`: runs a workload's checker on a history
 * file (JSON Lines, as `--history` writes it). Real time appears here only to report seconds per seed.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { InvalidArgumentError } from 'commander';
import { formatHistory, type Operation, parseHistory } from '../sim/check/history.js';
import { parseFaults, type SimFault } from '../sim/workload/faults.js';
import { formatMarks, MarkTally } from '../sim/workload/marks.js';
import { EXIT_CODES, type FailureClass, type SimRunResult, simRun, workloadNamed } from '../sim/workload/run.js';
import { WORKLOADS, type WorkloadName } from '../sim/workload/workload.js';

export interface SimCommandOptions {
  readonly seeds: readonly (string | number)[];
  readonly workloads: readonly WorkloadName[];
  readonly faults: readonly SimFault[];
  readonly faultsSpec: string;
  readonly nodes: number;
  readonly durationS: number;
  readonly livenessS: number;
  readonly workers: number;
  readonly partitions: number;
  /** Idle partitions rest (sim-workload `rest`). */
  readonly rest?: boolean;
  /** Coordinators commit in parallel (sim-workload `parallelCommit`). */
  readonly parallelCommit?: boolean;
  /** Data writes share Raft entries (sim-workload `batchWrites`). */
  readonly batchWrites?: boolean;
  /** Committed entries of many groups apply in one storage transaction (node `batchApply`). */
  readonly batchApply?: boolean;
  readonly history?: string;
  readonly traceLines: number;
}

/** `N`, `A..B` (inclusive) or a comma-separated list; non-numeric seeds are taken as strings. */
export function seedList(value: string): (string | number)[] {
  const range = /^(\d+)\.\.(\d+)$/.exec(value);
  if (range !== null) {
    const from = Number(range[1]);
    const to = Number(range[2]);
    if (to < from) throw new InvalidArgumentError('expected A..B with A <= B');
    return Array.from({ length: to - from + 1 }, (_, i) => from + i);
  }
  return value.split(',').map((s) => (/^\d+$/.test(s) ? Number(s) : s));
}

/** `all` or a comma-separated list of workloads. */
export function workloadList(value: string): WorkloadName[] {
  if (value === 'all') return [...WORKLOADS];
  const names = value.split(',');
  for (const n of names) {
    if (!(WORKLOADS as readonly string[]).includes(n)) {
      throw new InvalidArgumentError(`unknown workload ${n} (expected ${WORKLOADS.join(', ')} or all)`);
    }
  }
  return names as WorkloadName[];
}

export function faultList(value: string): string {
  try {
    parseFaults(value);
  } catch (error) {
    throw new InvalidArgumentError(error instanceof Error ? error.message : String(error));
  }
  return value;
}

function replayCommand(options: SimCommandOptions, seed: string | number, workload: WorkloadName): string {
  return (
    `basalt sim --seed ${seed} --workload ${workload} --faults ${options.faultsSpec} --nodes ${options.nodes} ` +
    `--duration ${options.durationS} --liveness ${options.livenessS} --workers ${options.workers} ` +
    `--partitions ${options.partitions}${options.rest === true ? ' --rest' : ''}` +
    `${options.parallelCommit === true ? ' --parallel-commit' : ''}` +
    `${options.batchWrites === true ? ' --batch-writes' : ''}` +
    `${options.batchApply === true ? ' --batch-apply' : ''}`
  );
}

function historyPath(base: string, many: boolean, seed: string | number, workload: WorkloadName): string {
  if (!many) return base;
  const stem = base.endsWith('.jsonl') ? base.slice(0, -'.jsonl'.length) : base;
  return `${stem}.${workload}.${seed}.jsonl`;
}

/** The report of a failing run: seed, replay command, anomalies, fault log, last scheduler events and operations. */
export function failureReport(options: SimCommandOptions, result: SimRunResult): string {
  const lines: string[] = [];
  const out = (line: string) => lines.push(line);
  const failure = result.failure!;
  out(`FAIL ${failure.class}: workload ${result.workload}, seed ${result.seed}`);
  out(`  ${failure.message.split('\n').join('\n  ')}`);
  out(`  replay: ${replayCommand(options, result.seed, result.workload)}`);
  if (result.check !== undefined) {
    out(`  checker: ${result.check.summary}`);
    for (const anomaly of result.check.anomalies.slice(0, 10)) out(`    ${anomaly}`);
    if (result.check.anomalies.length > 10) out(`    ... ${result.check.anomalies.length - 10} more`);
  }
  out(`  faults:${result.faultLog.length === 0 ? ' none' : ''}`);
  for (const line of result.faultLog.slice(-20)) out(`    ${line}`);
  out('  last events (virtual seconds since the start; scheduler events, faults and operations):');
  for (const line of timeline(result, options.traceLines)) out(`    ${line}`);
  return lines.join('\n');
}

/**
 * The last `count` scheduler events, with the faults and operations of the same stretch of virtual time woven in,
 * in time order: what the cluster did around the failure, readable in one column.
 */
function timeline(result: SimRunResult, count: number): string[] {
  const events = result.trace.slice(-count);
  const fromMs = events[0]?.timeMs ?? 0;
  const rows: Array<{ atMs: number; order: number; text: string }> = events.map((e, i) => ({
    atMs: e.timeMs,
    order: i,
    text: e.label,
  }));
  for (const line of result.faultLog) {
    const match = /^t=([\d.]+)s (.*)$/.exec(line);
    const atMs = match === null ? Number.NaN : Number(match[1]) * 1000;
    if (atMs >= fromMs) rows.push({ atMs, order: -1, text: `fault  ${match![2]}` });
  }
  for (const op of result.history) {
    const atMs = op.time / 1e6;
    if (atMs < fromMs) continue;
    const { index: _i, time: _t, ...rest } = op;
    rows.push({ atMs, order: -1, text: `op     ${JSON.stringify(rest)}` });
  }
  rows.sort((a, b) => a.atMs - b.atMs || a.order - b.order);
  return rows.map((r) => `${(r.atMs / 1000).toFixed(4).padStart(9)}  ${r.text}`);
}

/** Runs every (workload, seed); prints a progress line and a summary; returns the exit code. */
export async function runSim(options: SimCommandOptions): Promise<number> {
  const total = options.seeds.length * options.workloads.length;
  const failures: Array<{ class: FailureClass; seed: string | number; workload: WorkloadName }> = [];
  const tty = process.stderr.isTTY === true;
  const startedMs = Date.now();
  let done = 0;
  const marks = new MarkTally();
  for (const workload of options.workloads) {
    for (const seed of options.seeds) {
      const seedStartMs = Date.now();
      const result = await simRun({
        seed,
        workload,
        faults: options.faults,
        nodes: options.nodes,
        durationMs: options.durationS * 1000,
        livenessMs: options.livenessS * 1000,
        workers: options.workers,
        partitions: options.partitions,
        rest: options.rest === true,
        parallelCommit: options.parallelCommit === true,
        batchWrites: options.batchWrites === true,
        batchApply: options.batchApply === true,
      });
      done++;
      marks.add(result.marks);
      if (options.history !== undefined) {
        writeFileSync(historyPath(options.history, total > 1, seed, workload), formatHistory(result.history));
      }
      if (tty) process.stderr.write('\r\u001b[K');
      if (result.failure !== undefined) {
        failures.push({ class: result.failure.class, seed, workload });
        process.stdout.write(`\n${failureReport(options, result)}\n`);
      } else if (total === 1) {
        process.stdout.write(
          `ok: workload ${workload}, seed ${seed}: ${result.check?.summary ?? ''}; ${result.counts.okAfterHeal} ` +
            `acknowledged after the heal; ${(result.virtualMs / 1000).toFixed(1)} s virtual in ` +
            `${((Date.now() - seedStartMs) / 1000).toFixed(1)} s; history ${result.historyHash}, ` +
            `trace ${result.traceHash}\n`,
        );
      }
      if (total === 1) process.stdout.write(`${formatMarks(result.marks)}\n`);
      const elapsedS = (Date.now() - startedMs) / 1000;
      const line =
        `[${done}/${total}] ${workload} seed ${seed} ${result.failure === undefined ? 'ok' : 'FAIL'} ` +
        `(${result.history.length} events, ${(result.virtualMs / 1000).toFixed(1)} s virtual in ` +
        `${((Date.now() - seedStartMs) / 1000).toFixed(1)} s); ${(elapsedS / done).toFixed(1)} s/seed; ` +
        `${failures.length} failed${byClass(failures)}; ${marksHit(result.marks)}`;
      if (tty) process.stderr.write(line);
      else if (total > 1) process.stderr.write(`${line}\n`);
    }
  }
  if (tty) process.stderr.write('\n');
  if (total > 1 || failures.length > 0) process.stdout.write(`${summary(total, failures)}\n`);
  if (total > 1) process.stdout.write(`${marks.report()}\n`);
  let code = 0;
  for (const f of failures) code = Math.max(code, EXIT_CODES[f.class]);
  return code;
}

function marksHit(hits: Readonly<Record<string, number>>): string {
  const names = Object.keys(hits);
  return `${names.filter((n) => (hits[n] ?? 0) > 0).length}/${names.length} marks`;
}

function byClass(failures: ReadonlyArray<{ class: FailureClass }>): string {
  if (failures.length === 0) return '';
  const parts = (['checker', 'liveness', 'crash'] as const)
    .map((cls) => [cls, failures.filter((f) => f.class === cls).length] as const)
    .filter(([, n]) => n > 0)
    .map(([cls, n]) => `${cls} ${n}`);
  return ` (${parts.join(', ')})`;
}

function summary(
  total: number,
  failures: ReadonlyArray<{ class: FailureClass; seed: string | number; workload: WorkloadName }>,
): string {
  if (failures.length === 0) return `all ${total} runs passed`;
  const lines = [`${failures.length} of ${total} runs failed:`];
  for (const cls of ['checker', 'liveness', 'crash'] as const) {
    const of = failures.filter((f) => f.class === cls);
    if (of.length === 0) continue;
    lines.push(
      `  ${cls} (exit ${EXIT_CODES[cls]}): ${of.length}: ${of.map((f) => `${f.workload}/${f.seed}`).join(' ')}`,
    );
  }
  return lines.join('\n');
}

/** `basalt check`: the workload's checker on a history file; returns the exit code (0 valid, checker code else). */
export function runCheck(file: string, workload: WorkloadName): number {
  const history: Operation[] = parseHistory(readFileSync(file, 'utf8'));
  const outcome = workloadNamed(workload).check(history);
  process.stdout.write(`${outcome.valid ? 'valid' : 'INVALID'}: ${outcome.summary}\n`);
  for (const anomaly of outcome.anomalies) process.stdout.write(`  ${anomaly}\n`);
  return outcome.valid ? 0 : EXIT_CODES.checker;
}
