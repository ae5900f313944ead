/**
 * A client port for one node of a real-time cluster harness: a `ClientServer` over the embedded client bound to that
 * node (`cluster.client(node)`), so `connect()` reaches the node that coordinates its transactions. The embedded
 * client looks its node up on every call, so the port keeps serving across a restart of the node (calls made while
 * it is down fail NODE_UNAVAILABLE). A simulated cluster has no real sockets: use the embedded client there.
 */
import { invalidArgument } from '../core/errors.js';
import { RealTimers } from '../env/real-timers.js';
import type { Timers } from '../env/timers.js';
import type { Cluster } from '../harness/cluster.js';
import type { DiagnosticListener } from '../net/diagnostics.js';
import type { PeerTlsMaterial } from '../net/peer-tls.js';
import type { Client } from './client.js';
import { ClientServer } from './server.js';

/** Options of {@link startClientServer}. */
export interface ClusterClientServerOptions {
  /** Default 127.0.0.1. */
  readonly host?: string;
  /** Default 0: an ephemeral port (read it back from `server.port` / `server.address`). */
  readonly port?: number;
  /** Timers of handshake timeouts (default: the event loop's). */
  readonly timers?: Timers;
  /** Told of refused connections and malformed frames. */
  readonly onDiagnostic?: DiagnosticListener;
  /** Serve TLS 1.3 with this CA, server certificate and key (as `basalt start --certs-dir` does); plain TCP without. */
  readonly tls?: PeerTlsMaterial;
}

/** Starts a client port whose transactions node `node` of `cluster` coordinates. Close it before `cluster.stop()`. */
export function startClientServer(
  cluster: Cluster<Client>,
  node: string,
  options: ClusterClientServerOptions = {},
): Promise<ClientServer> {
  if (cluster.simulation !== undefined) {
    throw invalidArgument('a simulated cluster has no real sockets: use cluster.client() instead');
  }
  return ClientServer.start({
    host: options.host ?? '127.0.0.1',
    port: options.port ?? 0,
    client: cluster.client(node),
    timers: options.timers ?? new RealTimers(),
    ...(options.onDiagnostic !== undefined && { onDiagnostic: options.onDiagnostic }),
    ...(options.tls !== undefined && { tls: options.tls }),
  });
}
