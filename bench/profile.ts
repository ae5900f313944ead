/**
 * Reading V8 `.cpuprofile` files (written by `node --cpu-prof`): self time per function, summed over every sample
 * whose leaf is that function, across all profile nodes with the same function name, script and line. Idle, program
 * and GC pseudo-frames are kept: they say how much of the time the process was not running JavaScript.
 */
import { readFileSync } from 'node:fs';

export interface CpuProfile {
  readonly nodes: readonly {
    readonly id: number;
    readonly callFrame: {
      readonly functionName: string;
      readonly url: string;
      readonly lineNumber: number;
    };
  }[];
  readonly samples?: readonly number[];
  readonly timeDeltas?: readonly number[];
  readonly startTime: number;
  readonly endTime: number;
}

export interface FunctionTime {
  /** `name (file:line)` with the file relative to the checkout when it is one of ours. */
  readonly function: string;
  readonly selfMs: number;
  /** Share of the profile's total sampled time. */
  readonly selfShare: number;
}

/**
 * Functions by self time, highest first; at most `top`. With `window` (CLOCK_MONOTONIC microseconds, the clock of
 * the profile's `startTime` and of `process.hrtime` in every process on the machine), only samples inside it count.
 */
export function topSelfTime(
  profile: CpuProfile,
  top: number,
  window?: { readonly fromUs: number; readonly toUs: number },
): FunctionTime[] {
  const labelOf = new Map<number, string>();
  for (const node of profile.nodes) labelOf.set(node.id, label(node.callFrame));
  const samples = profile.samples ?? [];
  const deltas = profile.timeDeltas ?? [];
  const selfUs = new Map<string, number>();
  let totalUs = 0;
  let atUs = profile.startTime;
  for (let i = 0; i < samples.length; i++) {
    atUs += deltas[i] ?? 0;
    if (window !== undefined && (atUs < window.fromUs || atUs >= window.toUs)) continue;
    // A sample's time is the delta to the next sample (V8 records the delta before each sample).
    const us = deltas[i + 1] ?? 0;
    const key = labelOf.get(samples[i]!) ?? '(unknown)';
    selfUs.set(key, (selfUs.get(key) ?? 0) + us);
    totalUs += us;
  }
  return [...selfUs.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(([fn, us]) => ({ function: fn, selfMs: us / 1000, selfShare: totalUs === 0 ? 0 : us / totalUs }));
}

export function readCpuProfile(path: string): CpuProfile {
  return JSON.parse(readFileSync(path, 'utf8')) as CpuProfile;
}

function label(frame: CpuProfile['nodes'][number]['callFrame']): string {
  const name = frame.functionName === '' ? '(anonymous)' : frame.functionName;
  if (frame.url === '') return name;
  const marker = frame.url.lastIndexOf('/dist/');
  const file = marker >= 0 ? frame.url.slice(marker + '/dist/'.length) : frame.url.replace(/^file:\/\//, '');
  return `${name} (${file}:${frame.lineNumber + 1})`;
}
