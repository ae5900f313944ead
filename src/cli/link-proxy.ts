/**
 * Link cuts between real node processes (`basalt jepsen`): one TCP proxy per directed link. Each node dials each peer
 * and sends it everything over that outbound connection (tcp-transport.ts), so node `a` is started with `--peers`
 * naming every peer `b` at the proxy of `a → b`, which forwards bytes to `b`'s peer port. Cutting a link makes its
 * proxy destroy the connections it carries and refuse (accept, then destroy at once) every new one; healing makes it
 * forward again. A node then sees exactly what a broken network shows it: resets, failed redials, backoff. Nothing in
 * the node knows about the proxies.
 *
 * Partition shapes are sets of directed links cut together: `isolate` cuts every link to and from one node, `split`
 * cuts every link between a minority and the majority, both ways.
 */
import { createServer, connect as netConnect, type Server, type Socket } from 'node:net';

export interface LinkProxyStats {
  /** Connections forwarded. */
  readonly accepted: number;
  /** Connections refused while cut. */
  readonly refused: number;
  /** Forwarded connections destroyed by a cut. */
  readonly severed: number;
}

/** One directed link: listens on an ephemeral loopback port and forwards each connection to `targetPort`. */
export class LinkProxy {
  private server: Server | undefined;
  private readonly pairs = new Set<readonly [Socket, Socket]>();
  private cutNow = false;
  private counts = { accepted: 0, refused: 0, severed: 0 };

  constructor(
    readonly from: string,
    readonly to: string,
    private readonly targetPort: number,
  ) {}

  /** Starts listening; resolves with the port the `from` node must dial to reach `to`. */
  async listen(): Promise<number> {
    const server = createServer((socket) => this.onConnection(socket));
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    return (server.address() as { port: number }).port;
  }

  get cut(): boolean {
    return this.cutNow;
  }

  get stats(): LinkProxyStats {
    return { ...this.counts };
  }

  /** Destroys every connection on the link and refuses new ones until `heal`. */
  sever(): void {
    this.cutNow = true;
    for (const [a, b] of this.pairs) {
      this.counts.severed++;
      a.destroy();
      b.destroy();
    }
    this.pairs.clear();
  }

  heal(): void {
    this.cutNow = false;
  }

  async close(): Promise<void> {
    this.sever();
    const server = this.server;
    if (server === undefined) return;
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  private onConnection(client: Socket): void {
    if (this.cutNow) {
      this.counts.refused++;
      client.destroy();
      return;
    }
    this.counts.accepted++;
    const upstream = netConnect({ host: '127.0.0.1', port: this.targetPort });
    const pair = [client, upstream] as const;
    this.pairs.add(pair);
    const end = (): void => {
      this.pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    for (const socket of pair) {
      socket.setNoDelay(true);
      socket.on('error', end);
      socket.on('close', end);
    }
    client.pipe(upstream);
    upstream.pipe(client);
  }
}

/** The proxies of every directed link between `names`, and the partitions the nemesis makes of them. */
export class LinkProxies {
  private readonly links = new Map<string, LinkProxy>();
  private readonly ports = new Map<string, number>();

  private constructor(readonly names: readonly string[]) {}

  /** One listening proxy per ordered pair of distinct names; `peerPorts[i]` is the peer port of `names[i]`. */
  static async start(names: readonly string[], peerPorts: readonly number[]): Promise<LinkProxies> {
    const proxies = new LinkProxies(names);
    for (const [i, from] of names.entries()) {
      for (const [j, to] of names.entries()) {
        if (i === j) continue;
        const proxy = new LinkProxy(from, to, peerPorts[j]!);
        proxies.links.set(key(from, to), proxy);
        proxies.ports.set(key(from, to), await proxy.listen());
      }
    }
    return proxies;
  }

  /** The port `from` dials to reach `to`. */
  port(from: string, to: string): number {
    const port = this.ports.get(key(from, to));
    if (port === undefined) throw new Error(`no link ${from} > ${to}`);
    return port;
  }

  /** Cuts every link between `side` and the other nodes, both ways. */
  partition(side: readonly string[]): void {
    for (const proxy of this.links.values()) {
      if (side.includes(proxy.from) !== side.includes(proxy.to)) proxy.sever();
    }
  }

  /** Every link forwards again. */
  heal(): void {
    for (const proxy of this.links.values()) proxy.heal();
  }

  /** Sums over every link. */
  get stats(): LinkProxyStats {
    const total = { accepted: 0, refused: 0, severed: 0 };
    for (const proxy of this.links.values()) {
      const s = proxy.stats;
      total.accepted += s.accepted;
      total.refused += s.refused;
      total.severed += s.severed;
    }
    return total;
  }

  async close(): Promise<void> {
    await Promise.all([...this.links.values()].map((p) => p.close()));
  }
}

function key(from: string, to: string): string {
  return `${from}>${to}`;
}
