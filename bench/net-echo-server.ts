/**
 * Child process of the loopback round-trip floor (bench/net.ts): a raw `node:net` echo server that sends back every
 * 4-byte-length-prefixed frame it receives, with Nagle off. It reports its port to the parent over IPC and exits when
 * the parent disconnects.
 */
import { createServer } from 'node:net';

const server = createServer((socket) => {
  socket.setNoDelay(true);
  let pending: Buffer = Buffer.alloc(0);
  socket.on('data', (chunk: Buffer) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    let end = 0;
    while (pending.length - end >= 4) {
      const frameEnd = end + 4 + pending.readUInt32BE(end);
      if (frameEnd > pending.length) break;
      end = frameEnd;
    }
    if (end > 0) {
      socket.write(pending.subarray(0, end));
      pending = pending.subarray(end);
    }
  });
  socket.on('error', () => socket.destroy());
});

server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  if (typeof address === 'object' && address !== null) process.send?.({ port: address.port });
});
process.on('disconnect', () => process.exit(0));
