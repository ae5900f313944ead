/**
 * CPU time of a process as Linux accounts it: utime + stime from /proc/<pid>/stat, in clock ticks of
 * `getconf CLK_TCK` (100 on every common Linux). The bench reads it for each node before and after a cell, so CPU
 * per operation covers exactly the measured window. Elsewhere (no /proc) it reports undefined and the figure is
 * left out.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

const CLK_TCK_FALLBACK = 100;
let clockTicks: number | undefined;

function ticksPerSecond(): number {
  if (clockTicks !== undefined) return clockTicks;
  try {
    clockTicks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || CLK_TCK_FALLBACK;
  } catch {
    clockTicks = CLK_TCK_FALLBACK;
  }
  return clockTicks;
}

/** utime + stime of a `/proc/<pid>/stat` line, in ticks. The command name (field 2) may hold spaces and parens. */
export function parseStatTicks(stat: string): number {
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // fields[0] is field 3 (state); utime and stime are fields 14 and 15.
  const utime = Number(fields[11]);
  const stime = Number(fields[12]);
  if (!Number.isFinite(utime) || !Number.isFinite(stime)) throw new Error(`unexpected /proc stat line: ${stat}`);
  return utime + stime;
}

/** CPU seconds the process has used so far, or undefined when it cannot be read. */
export function cpuSecondsOf(pid: number): number | undefined {
  try {
    return parseStatTicks(readFileSync(`/proc/${pid}/stat`, 'utf8')) / ticksPerSecond();
  } catch {
    return undefined;
  }
}
