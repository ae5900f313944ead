/**
 * `basalt jepsen` against real processes: a short list-append run whose nemesis only cuts links. Every node reaches
 * its peers through the harness's per-link proxies, so a cut is a real TCP cut: the proxies sever the connections
 * they carried and refuse the nodes' redials while it lasts. The run must pass its checker and its liveness phase,
 * and the proxies' counts show that the cuts happened. With `tls`: a bank run whose nodes talk mutual TLS and whose
 * clients log in by client certificate, while the nemesis kills nodes and renews node certificates in their
 * directories; every renewed certificate is presented by a fresh handshake with the node's peer and client ports, and
 * the bank checker finds the total exact and every acknowledged transfer in the final balances. Also: the proxy on
 * its own forwards, severs, refuses and forwards again after the heal; the nemesis flag parses.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, connect as netConnect, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import { UNCERTAIN_ENUMERATION_MAX } from '../sim/check/bank.js';
import { jepsen, NEMESIS_FAULTS, parseNemesis } from './jepsen.js';
import { LinkProxy } from './link-proxy.js';

/** Resolves with the first chunk `socket` receives, or with 'closed' if it closes first. */
function firstChunk(socket: Socket): Promise<string> {
  return new Promise((resolve) => {
    socket.once('data', (chunk) => resolve(chunk.toString()));
    socket.once('close', () => resolve('closed'));
    socket.once('error', () => {});
  });
}

describe('basalt jepsen', () => {
  it('a link proxy forwards, a cut severs its connections and refuses new ones, a heal forwards again', async () => {
    const echo = createServer((s) => s.pipe(s));
    echo.listen(0, '127.0.0.1');
    await once(echo, 'listening');
    const proxy = new LinkProxy('n1', 'n2', (echo.address() as { port: number }).port);
    const port = await proxy.listen();
    try {
      const first = netConnect({ host: '127.0.0.1', port });
      first.write('ping');
      assert.equal(await firstChunk(first), 'ping');
      const closed = once(first, 'close');
      proxy.sever();
      await closed;
      const refused = netConnect({ host: '127.0.0.1', port });
      refused.write('ping');
      assert.equal(await firstChunk(refused), 'closed');
      proxy.heal();
      const again = netConnect({ host: '127.0.0.1', port });
      again.write('pong');
      assert.equal(await firstChunk(again), 'pong');
      again.destroy();
      assert.deepEqual(proxy.stats, { accepted: 2, severed: 1, refused: 1 });
    } finally {
      await proxy.close();
      echo.close();
    }
  });

  it('a list-append run under link cuts passes its checker and makes progress after the heal', async () => {
    const lines: string[] = [];
    const result = await jepsen(
      {
        workload: 'list-append',
        timeS: 8,
        nodes: 3,
        workers: 3,
        seed: 1,
        nemesisIntervalS: 1,
        nemesis: ['partition'],
      },
      (line) => lines.push(line),
    );
    const report = lines.join('\n');
    assert.equal(result.exitCode, 0, report);
    assert.ok(result.valid, report);
    assert.ok(result.partitions >= 1, report);
    assert.equal(result.kills + result.pauses, 0, report);
    assert.ok(result.counts.okAfterHeal >= 10, report);
    // The cut took down connections the nodes were using, and the nodes' redials met a cut link.
    assert.ok(result.links.severed > 0, report);
    assert.ok(result.links.refused > 0, report);
    assert.match(report, /cut links: (isolate n\d|split \[n\d\] \| \[n\d,n\d\]) for \d+ ms/);
    assert.match(report, /links: \d+ connections forwarded, \d+ severed by cuts, \d+ refused while cut/);
  });

  it('a bank run over TLS keeps its total while node certificates are renewed under load and nodes killed', async () => {
    const lines: string[] = [];
    const result = await jepsen(
      {
        workload: 'bank',
        timeS: 10,
        nodes: 3,
        workers: 3,
        seed: 1,
        nemesisIntervalS: 1,
        nemesis: ['rotate', 'kill'],
        tls: true,
      },
      (line) => lines.push(line),
    );
    const report = lines.join('\n');
    assert.equal(result.exitCode, 0, report);
    assert.ok(result.valid, report);
    assert.match(report, /TLS with the certificates in /);
    assert.ok(result.rotations.renewed >= 1, report);
    assert.equal(result.rotations.served, result.rotations.renewed, report);
    assert.match(report, /renew n\d's certificate \(serial [0-9A-F]+\)/);
    assert.match(report, /n\d serves the renewed certificate on its peer and client ports after \d+ ms/);
    assert.ok(result.counts.okAfterHeal >= 10, report);
    assert.match(report, /checker: valid: bank: \d+ reads, transfers [1-9]\d* ok/);
    // Few enough indeterminate operations that the checker matched the final balances against every acknowledged
    // transfer (plus a subset of the indeterminate ones), not only their total.
    assert.ok(result.counts.info <= UNCERTAIN_ENUMERATION_MAX, report);
  });

  it('the nemesis flag takes all, none or a list of faults', () => {
    assert.deepEqual(parseNemesis('all'), [...NEMESIS_FAULTS]);
    assert.deepEqual(parseNemesis('none'), []);
    assert.deepEqual(parseNemesis('partition,kill'), ['kill', 'partition']);
    assert.deepEqual(parseNemesis('rotate,pause'), ['pause', 'rotate']);
    assert.throws(() => parseNemesis('flood'), /unknown nemesis fault flood/);
  });
});
