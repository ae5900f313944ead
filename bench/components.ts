/**
 * `npm run bench -- components`: the component benchmarks (Messenger over TCP, MVCC storage, Raft log storage, Raft),
 * each quoted against the physical floors measured in the same run (fsync of a small append; loopback TCP round trip).
 */
import { measureFsync } from './floors.js';
import { formatLogStorageBench, runLogStorageBench } from './log-storage.js';
import { measureTxStateMapBytes } from './memory.js';
import { measureLoopbackRoundTrip, measureMessengerRoundTrip } from './net.js';
import { formatRaftBench, runRaftBench } from './raft.js';
import { runStorageBench } from './storage.js';

function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

export async function runComponentSections(): Promise<void> {
  console.log('basalt bench components: measuring floors...');
  const fsync = measureFsync(1000);
  console.log(`floor  fsync (128 B append + fsync)          p50 ${fmt(fsync.p50Us)} µs   p99 ${fmt(fsync.p99Us)} µs`);
  const rtt = await measureLoopbackRoundTrip();
  console.log(`floor  loopback TCP round trip (100 B, 2 procs)  p50 ${fmt(rtt.p50Us)} µs   p99 ${fmt(rtt.p99Us)} µs`);

  console.log('\nnet (Messenger request/response over TcpTransport, 2 processes, sequential):');
  const messenger = await measureMessengerRoundTrip();
  console.log(
    `  round trip  p50 ${fmt(messenger.p50Us)} µs (${fmt(messenger.p50Us / rtt.p50Us, 2)}× loopback)   ` +
      `p99 ${fmt(messenger.p99Us)} µs (${fmt(messenger.p99Us / rtt.p99Us, 2)}× loopback)`,
  );

  console.log('\nstorage (MVCC partition storage, one atomic step per command):');
  for (const result of await runStorageBench()) {
    // Durable writes are bounded by fsync: quote the time per write as a multiple of one fsync.
    const durableWrite = /fsync on/i.test(result.name) && /add\+commit/.test(result.name);
    const perOpUs = 1e6 / result.opsPerSec;
    const ratio = durableWrite ? `   ${fmt(perOpUs)} µs/op = ${fmt(perOpUs / fsync.p50Us, 2)}× fsync p50` : '';
    console.log(`  ${result.name.padEnd(72)} ${fmt(result.opsPerSec).padStart(10)} ops/s${ratio}`);
  }

  console.log('');
  console.log(formatLogStorageBench(await runLogStorageBench({ sync: true })));

  console.log('');
  console.log(formatRaftBench(await runRaftBench({ sync: true })));

  const map = measureTxStateMapBytes();
  console.log(
    `\nmemory: tx state map, ${fmt(map.entries)} final entries: ${fmt(map.bytesPerEntry)} bytes per entry ` +
      `(${fmt(map.bytesPerEntryWithoutIds)} without the tx id strings)`,
  );
}
