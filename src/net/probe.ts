/**
 * A one-shot probe of a peer address: dial, exchange hellos (the same handshake as the transport, see handshake.ts),
 * report who answered, hang up. It is how a node started with bare `host:port` peers learns their names before it
 * joins them. The probe says hello as `self`; a node should probe with its transport's own identity, so that the
 * probed peer sees the same name and ephemeral id as on the node's regular connections (a different id would read as
 * a restart of this node and close the peer's connection to it). Probe before the node dials its peers: at the peer a
 * probe's connection supersedes the node's own inbound one, which it would close.
 *
 * The probe's hello carries no member list (it runs before this node knows its members), so any node accepts it;
 * the answer carries the peer's member list if the peer already runs with one, for the caller to compare.
 *
 * With `tls` the probe dials with mutual TLS as the transport does (peer-tls.ts), and a peer whose certificate does not
 * name the member its hello claims is a failure like a bad hello.
 *
 * Expected failures (refused, reset, no hello within the timeout, a bad hello) are a value, never thrown.
 */
import type { NodeIdentity, NodeName } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import type { Timers } from '../env/timers.js';
import { hello } from './handshake.js';
import { certificateNameProblem, PeerSockets, type PeerTlsMaterial } from './peer-tls.js';
import { TcpConnection } from './tcp-connection.js';
import { parseHostPort } from './tcp-transport.js';

export interface ProbeOptions {
  readonly self: NodeIdentity;
  /** 'host:port' of the peer's transport. */
  readonly address: string;
  readonly timers: Timers;
  /** Connect and hello together; defaults to the transport's handshake timeout. */
  readonly timeoutMs?: number;
  /** Mutual TLS, as the peer's transport listens with it. */
  readonly tls?: PeerTlsMaterial;
}

export type ProbeResult =
  | {
      readonly ok: true;
      readonly peer: NodeIdentity;
      /** The member names the peer's hello listed (present only if it has them). */
      readonly members?: readonly NodeName[];
    }
  | { readonly ok: false; readonly reason: string };

export function probePeer(options: ProbeOptions): Promise<ProbeResult> {
  const { host, port } = parseHostPort(options.address);
  const handshakeTimeoutMs = options.timeoutMs ?? LIMITS.handshakeTimeoutMs;
  return new Promise((resolve) => {
    let reason = 'connection closed before the hello';
    let result: ProbeResult | undefined;
    const socket = new PeerSockets(options.tls, handshakeTimeoutMs).dial(host, port);
    new TcpConnection(
      socket,
      hello(options.self),
      options.timers,
      { handshakeTimeoutMs, frameBytesMax: LIMITS.frameBytesMax, writeBufferBytesMax: LIMITS.peerWriteBufferBytesMax },
      {
        accept: (h) => {
          const problem = certificateNameProblem(socket, h.peer.name);
          return problem === undefined ? undefined : { kind: 'peer-cert-mismatch', message: problem };
        },
        onOpen: (connection) => {
          const { peer, peerMembers } = connection;
          if (peer !== undefined)
            result = peerMembers === undefined ? { ok: true, peer } : { ok: true, peer, members: peerMembers };
          connection.close();
        },
        onPayload: () => {},
        onClose: () => resolve(result ?? { ok: false, reason }),
      },
      (diagnostic) => {
        reason = diagnostic.message;
      },
      options.address,
    );
  });
}
