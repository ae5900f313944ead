/**
 * Child process of the messenger round-trip measurement (bench/net.ts): a Basalt node's net stack (TcpTransport +
 * Messenger) answering `Ping` with `Pong`. It reports its address over IPC, learns the parent's address the same
 * way, and exits when the parent disconnects.
 */
import { nodeId, nodeName } from '../src/core/ids.js';
import { RealClock } from '../src/env/real-clock.js';
import { RealRandom } from '../src/env/real-random.js';
import { RealTimers } from '../src/env/real-timers.js';
import { HybridClock } from '../src/hlc/hybrid-clock.js';
import { Messenger } from '../src/net/messenger.js';
import { TcpTransport } from '../src/net/tcp-transport.js';

type Body = { readonly kind: 'Ping'; readonly data: Uint8Array } | { readonly kind: 'Pong'; readonly data: Uint8Array };

const random = new RealRandom();
const transport = await TcpTransport.start({
  self: { name: nodeName('echo'), id: nodeId(random.uuid()) },
  host: '127.0.0.1',
  port: 0,
  timers: new RealTimers(),
  random,
});
const messenger = new Messenger<Body>({ transport, clock: new HybridClock(new RealClock()), timers: new RealTimers() });
messenger.handle('Ping', (body) => ({ kind: 'Pong', data: body.data }));
process.on('message', (m) => transport.addPeer(nodeName('bench'), (m as { address: string }).address));
process.send?.({ address: transport.address });
process.on('disconnect', () => process.exit(0));
