/**
 * Mutual TLS on the peer port (issue 34, DESIGN §4b "Secure by default"): with it, the transport listens and dials
 * with `node:tls` instead of `node:net`, TLS 1.3 only, and both ends present a certificate of the cluster CA; a
 * certificate of another CA fails the TLS handshake, before any frame is read.
 *
 * TLS proves that a peer holds *some* certificate of the cluster; the hello says which member the peer claims to be.
 * The two are tied where the hello is accepted: the certificate must name the claimed member, as a SAN DNS name or as
 * the CN (exactly; no wildcards, so that one certificate never speaks for several members). That is why the dialer
 * does not check the certificate against the host it dialed (`checkServerIdentity`): a peer is dialed by address, and
 * its member name is what counts, checked against its hello like an accepted peer's.
 *
 * The material is PEM text read by the CLI (which also checks the certificates' dates against its clock: this layer
 * reads no clock; `node:tls` checks the dates again in every handshake). Renewed material replaces it without a
 * restart (`update`): new connections use it, open ones keep what they were made with.
 */
import { connect as netConnect, createServer as netCreateServer, type Server, type Socket } from 'node:net';
import {
  createSecureContext,
  type SecureContext,
  type SecureContextOptions,
  type SecureVersion,
  TLSSocket,
  type Server as TlsServer,
  connect as tlsConnect,
  createServer as tlsCreateServer,
} from 'node:tls';

/** The cluster CA, this node's certificate and its key, as PEM text. */
export interface PeerTlsMaterial {
  readonly ca: string;
  readonly cert: string;
  readonly key: string;
}

const TLS_VERSION: SecureVersion = 'TLSv1.3';

/** How the transport and the probe make sockets: plain TCP without material, mutual TLS with it. */
export class PeerSockets {
  /** For dials; a server takes the material itself (tls.createServer has no `secureContext` option). */
  private context: SecureContext | undefined;
  private material: PeerTlsMaterial | undefined;
  private readonly servers = new Set<Server>();

  constructor(
    material: PeerTlsMaterial | undefined,
    private readonly handshakeTimeoutMs: number,
  ) {
    this.material = material;
    this.context = material === undefined ? undefined : contextOf(material);
  }

  /**
   * Renewed certificates or CA (rotation without a restart): new dials and new inbound handshakes use `material`;
   * connections already open keep theirs until they close. Only for sockets that are TLS already.
   */
  update(material: PeerTlsMaterial): void {
    if (this.material === undefined) return;
    this.material = material;
    this.context = contextOf(material);
    for (const server of this.servers) (server as TlsServer).setSecureContext(serverOptionsOf(material));
  }

  get secure(): boolean {
    return this.context !== undefined;
  }

  /**
   * A server that calls `onSocket` with every connection ready for the hello: at once over TCP, after a completed
   * handshake over TLS; `onRefused` hears of every TLS handshake that failed (another CA, no certificate, expired).
   */
  listen(onSocket: (socket: Socket) => void, onRefused: (message: string) => void, connectionsMax: number): Server {
    if (this.material === undefined) return netCreateServer(onSocket);
    const server = tlsCreateServer({
      ...serverOptionsOf(this.material),
      requestCert: true,
      rejectUnauthorized: true,
      handshakeTimeout: this.handshakeTimeoutMs,
    });
    this.servers.add(server);
    server.once('close', () => this.servers.delete(server));
    // Connections still in their TLS handshake are not the transport's yet, so its inbound limit cannot see them.
    server.maxConnections = connectionsMax;
    server.on('secureConnection', onSocket);
    server.on('tlsClientError', (error, socket) => {
      onRefused(error.message);
      socket.destroy();
    });
    return server;
  }

  dial(host: string, port: number): Socket {
    if (this.context === undefined) return netConnect({ host, port });
    return tlsConnect({
      host,
      port,
      secureContext: this.context,
      minVersion: TLS_VERSION,
      maxVersion: TLS_VERSION,
      rejectUnauthorized: true,
      // The member name is checked against the hello instead (see the module header).
      checkServerIdentity: () => undefined,
    });
  }
}

/**
 * A client port's TLS server options: node.crt and its key, TLS 1.3 only, every client asked for a certificate, which
 * is verified against ca.crt when given; a client without one is let through the handshake (it may log in with a
 * password), and the client server refuses a client whose certificate failed (`socket.authorized`).
 */
export function clientServerTlsOptions(material: PeerTlsMaterial): SecureContextOptions & {
  readonly requestCert: true;
  readonly rejectUnauthorized: false;
} {
  return { ...serverOptionsOf(material), requestCert: true, rejectUnauthorized: false };
}

function contextOf(material: PeerTlsMaterial): SecureContext {
  return createSecureContext({ ...material, minVersion: TLS_VERSION, maxVersion: TLS_VERSION });
}

function serverOptionsOf(material: PeerTlsMaterial): SecureContextOptions {
  return { ca: material.ca, cert: material.cert, key: material.key, minVersion: TLS_VERSION, maxVersion: TLS_VERSION };
}

/**
 * Why the socket's peer certificate does not name `claimed`, or undefined when it does or the socket is plain TCP.
 * Called once the peer's hello arrived, which over TLS is after the handshake, so the certificate is there.
 */
export function certificateNameProblem(socket: Socket, claimed: string): string | undefined {
  if (!(socket instanceof TLSSocket)) return undefined;
  const names = certificateNames(socket);
  if (names.includes(claimed)) return undefined;
  const shown = names.length === 0 ? 'no name' : names.join(', ');
  return `the peer says it is ${claimed} but its certificate names ${shown}`;
}

/** The SAN DNS names and the CN(s) of the peer's certificate. */
export function certificateNames(socket: TLSSocket): string[] {
  const certificate = socket.getPeerCertificate();
  const cn: unknown = certificate.subject?.CN;
  const commonNames = typeof cn === 'string' ? [cn] : Array.isArray(cn) ? cn : [];
  return [...dnsNames(certificate.subjectaltname), ...commonNames.filter((n): n is string => typeof n === 'string')];
}

/**
 * The DNS names of a subject alternative name as node:tls and node:crypto's X509Certificate both spell it
 * (`DNS:n1, IP Address:127.0.0.1`): the one reading of "a certificate names a member", shared with `basalt start`'s
 * check of its own certificate.
 */
export function dnsNames(subjectAltName: string | undefined): string[] {
  return splitAltNames(subjectAltName ?? '')
    .filter((entry) => entry.startsWith('DNS:'))
    .map((entry) => unquote(entry.slice(4)));
}

/**
 * node:tls joins SAN entries with ", " and JSON-quotes a value that holds a comma, a quote or a control character:
 * split outside quotes, so that a quoted value never splits into entries that look like names.
 */
function splitAltNames(text: string): string[] {
  const entries: string[] = [];
  let current = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (c === '"' && text[i - 1] !== '\\') quoted = !quoted;
    if (!quoted && c === ',' && text[i + 1] === ' ') {
      entries.push(current);
      current = '';
      i++;
    } else current += c;
  }
  if (current.length > 0) entries.push(current);
  return entries;
}

function unquote(value: string): string {
  if (!value.startsWith('"')) return value;
  try {
    const parsed: unknown = JSON.parse(value);
    return typeof parsed === 'string' ? parsed : value;
  } catch {
    return value;
  }
}
