import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { splitCallers } from '../../bench/cells.js';
import { floorUs, mixedFloorUs } from '../../bench/floors.js';
import { cpuSecondsOf, parseStatTicks } from '../../bench/proc.js';
import { topSelfTime } from '../../bench/profile.js';
import { workloadFloorUs } from '../../bench/report.js';
import { WORKLOAD_NAMES, WORKLOADS } from '../../bench/workloads.js';

const FLOORS = { rttP50Us: 50, fsyncP50Us: 300 };

describe('bench floors', () => {
  it('price a path at its round trips times the RTT p50 plus its fsyncs times the fsync p50', () => {
    assert.equal(floorUs({ roundTrips: 3, fsyncs: 1, why: '' }, FLOORS), 3 * 50 + 300);
    assert.equal(floorUs({ roundTrips: 3, fsyncs: 1, why: '' }, FLOORS, false), 150, 'no fsync: syncs cost nothing');
  });

  it('of a mix weigh each path by its share', () => {
    const parts = [
      { share: 0.5, path: { roundTrips: 2, fsyncs: 0, why: '' } },
      { share: 0.5, path: { roundTrips: 3, fsyncs: 1, why: '' } },
    ];
    assert.equal(mixedFloorUs(parts, FLOORS), 0.5 * 100 + 0.5 * 450);
    assert.equal(workloadFloorUs('ycsb-a', FLOORS, true), 0.5 * 100 + 0.5 * 450);
  });

  it('are given for every workload, with shares that sum to 1, and a transfer costs more than a put', () => {
    for (const name of WORKLOAD_NAMES) {
      const shares = WORKLOADS[name].parts.reduce((s, p) => s + p.share, 0);
      assert.equal(shares, 1, name);
      assert.ok(workloadFloorUs(name, FLOORS, true) > 0, name);
    }
    assert.ok(workloadFloorUs('transfer', FLOORS, true) > workloadFloorUs('put', FLOORS, true));
    assert.ok(workloadFloorUs('put', FLOORS, true) > workloadFloorUs('get', FLOORS, true));
  });
});

describe('bench client threads', () => {
  it('share the callers evenly, never more threads than callers', () => {
    assert.deepEqual(splitCallers(1, 2), [1]);
    assert.deepEqual(splitCallers(16, 2), [8, 8]);
    assert.deepEqual(splitCallers(65, 2), [33, 32]);
    assert.deepEqual(splitCallers(3, 4), [1, 1, 1]);
  });
});

describe('bench CPU accounting', () => {
  it('reads utime + stime after the command name, even one with spaces and parentheses', () => {
    const stat = '4242 (node (x) y) S 1 2 3 4 5 6 7 8 9 10 250 31 0 0 20 0 11 0 100 2000 300';
    assert.equal(parseStatTicks(stat), 281);
    assert.throws(() => parseStatTicks('1 (short) S 1'), /unexpected/);
  });

  it('sees this process use CPU, and reports nothing for a process that does not exist', () => {
    const before = cpuSecondsOf(process.pid);
    const until = performance.now() + 60;
    let spin = 0;
    while (performance.now() < until) spin++;
    const after = cpuSecondsOf(process.pid);
    assert.ok(before !== undefined && after !== undefined && after > before, `${before} → ${after} (${spin})`);
    assert.equal(cpuSecondsOf(2 ** 30), undefined);
  });
});

describe('bench CPU profiles', () => {
  it('charge each sample to its leaf function and merge nodes of the same function', () => {
    const frame = (functionName: string, line: number) => ({
      functionName,
      url: 'file:///w/dist/src/tx/coordinator.js',
      lineNumber: line,
    });
    const profile = {
      startTime: 0,
      endTime: 100,
      nodes: [
        { id: 1, callFrame: { functionName: '(root)', url: '', lineNumber: -1 } },
        { id: 2, callFrame: frame('commit', 9) },
        { id: 3, callFrame: frame('encode', 40) },
        { id: 4, callFrame: frame('encode', 40) },
      ],
      samples: [2, 3, 4, 3, 2],
      timeDeltas: [0, 10_000, 20_000, 30_000, 40_000],
    };
    const top = topSelfTime(profile, 10);
    assert.deepEqual(
      top.map((t) => [t.function, t.selfMs]),
      [
        ['encode (src/tx/coordinator.js:41)', 90],
        ['commit (src/tx/coordinator.js:10)', 10],
      ],
    );
    assert.equal(top[0]!.selfShare, 0.9);
    assert.equal(topSelfTime(profile, 1).length, 1);
    // Samples at 0, 10, 30, 60 and 100 ms (startTime 0): a window of [25, 65) ms keeps those at 30 and 60.
    const windowed = topSelfTime(profile, 10, { fromUs: 25_000, toUs: 65_000 });
    assert.deepEqual(
      windowed.map((t) => [t.function, t.selfMs]),
      [['encode (src/tx/coordinator.js:41)', 70]],
    );
  });
});
