/**
 * The loopback network floor: round-trip time of ~100-byte frames between two processes over TCP on 127.0.0.1,
 * measured the way ecosystem.md §1 did (raw `node:net`, 4-byte length prefix, `setNoDelay(true)`, sequential
 * ping-pongs, warm-up dropped). Benchmarks quote request latencies as multiples of this floor.
 * Run alone: `node dist/bench/net.js`.
 */
import { fork } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { nodeId, nodeName } from '../src/core/ids.js';
import { RealClock } from '../src/env/real-clock.js';
import { RealRandom } from '../src/env/real-random.js';
import { RealTimers } from '../src/env/real-timers.js';
import { HybridClock } from '../src/hlc/hybrid-clock.js';
import { Messenger } from '../src/net/messenger.js';
import { TcpTransport } from '../src/net/tcp-transport.js';

export interface RoundTripOptions {
  /** Ping-pongs measured, after the warm-up. */
  readonly count?: number;
  readonly warmupCount?: number;
  readonly payloadBytes?: number;
}

/** p50/p99 of sequential 100-byte ping-pongs to an echo server in a child process, in microseconds. */
export async function measureLoopbackRoundTrip(
  options: RoundTripOptions = {},
): Promise<{ p50Us: number; p99Us: number }> {
  const count = options.count ?? 20_000;
  const warmupCount = options.warmupCount ?? 1_000;
  const payloadBytes = options.payloadBytes ?? 100;
  const child = fork(fileURLToPath(new URL('./net-echo-server.js', import.meta.url)), [], {
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  try {
    const port = await new Promise<number>((resolve, reject) => {
      child.once('message', (m) => resolve((m as { port: number }).port));
      child.once('error', reject);
      child.once('exit', (code) => reject(new Error(`echo server exited with ${code}`)));
    });
    const socket = connect({ host: '127.0.0.1', port });
    socket.setNoDelay(true);
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', () => resolve());
      socket.once('error', reject);
    });
    try {
      const samplesUs = await pingPong(socket, warmupCount + count, payloadBytes);
      return percentiles(samplesUs.slice(warmupCount));
    } finally {
      socket.destroy();
    }
  } finally {
    child.disconnect();
    child.kill();
  }
}

/** Sends one frame, waits for its echo, repeats; returns each round trip in microseconds. */
function pingPong(socket: Socket, rounds: number, payloadBytes: number): Promise<number[]> {
  const frame = Buffer.alloc(4 + payloadBytes, 0x61);
  frame.writeUInt32BE(payloadBytes, 0);
  const samplesUs: number[] = [];
  return new Promise((resolve, reject) => {
    let received = 0;
    let startedMs = 0;
    const sendNext = (): void => {
      startedMs = performance.now();
      socket.write(frame);
    };
    socket.on('error', reject);
    socket.on('data', (chunk: Buffer) => {
      received += chunk.length;
      if (received < frame.length) return;
      samplesUs.push((performance.now() - startedMs) * 1000);
      received -= frame.length;
      if (samplesUs.length === rounds) resolve(samplesUs);
      else sendNext();
    });
    sendNext();
  });
}

/**
 * The same shape through Basalt's own net stack: sequential `Ping`/`Pong` requests of ~100 bytes between a
 * Messenger over TcpTransport here and one in a child process (codec, envelope, HLC, merged writes included).
 * The gap to `measureLoopbackRoundTrip` is the net layer's own cost.
 */
export async function measureMessengerRoundTrip(
  options: RoundTripOptions = {},
): Promise<{ p50Us: number; p99Us: number }> {
  const count = options.count ?? 20_000;
  const warmupCount = options.warmupCount ?? 1_000;
  const payloadBytes = options.payloadBytes ?? 100;
  const child = fork(fileURLToPath(new URL('./net-messenger-echo.js', import.meta.url)), [], {
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  const random = new RealRandom();
  const timers = new RealTimers();
  let messenger: Messenger | undefined;
  try {
    const echoAddress = await new Promise<string>((resolve, reject) => {
      child.once('message', (m) => resolve((m as { address: string }).address));
      child.once('error', reject);
      child.once('exit', (code) => reject(new Error(`messenger echo exited with ${code}`)));
    });
    const transport = await TcpTransport.start({
      self: { name: nodeName('bench'), id: nodeId(random.uuid()) },
      host: '127.0.0.1',
      port: 0,
      peers: { echo: echoAddress },
      timers,
      random,
    });
    messenger = new Messenger({ transport, clock: new HybridClock(new RealClock()), timers });
    child.send({ address: transport.address });
    const ping = { kind: 'Ping', data: Buffer.alloc(payloadBytes, 0x61) };
    const samplesUs: number[] = [];
    for (let i = 0; i < warmupCount + count; i++) {
      const startedMs = performance.now();
      await messenger.request(nodeName('echo'), ping);
      if (i >= warmupCount) samplesUs.push((performance.now() - startedMs) * 1000);
    }
    return percentiles(samplesUs);
  } finally {
    await messenger?.close();
    child.disconnect();
    child.kill();
  }
}

function percentiles(samplesUs: number[]): { p50Us: number; p99Us: number } {
  const sorted = [...samplesUs].sort((a, b) => a - b);
  const at = (q: number): number => Math.round(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0);
  return { p50Us: at(0.5), p99Us: at(0.99) };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const raw = await measureLoopbackRoundTrip();
  console.log(`raw node:net round trip, 100 B, 2 processes: p50 ${raw.p50Us} us, p99 ${raw.p99Us} us`);
  const stack = await measureMessengerRoundTrip();
  console.log(`Messenger over TcpTransport, 100 B, 2 processes: p50 ${stack.p50Us} us, p99 ${stack.p99Us} us`);
}
