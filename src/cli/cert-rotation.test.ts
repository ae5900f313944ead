/**
 * Rotation without a restart (`watchCertificates`, as `basalt start --certs-dir` runs it): renewed files that are out
 * of date are refused with the file and its dates, and the ports keep the material they have; valid renewed files
 * reach every port (the peer transport, the client and metrics ports) for their next connections.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import type { PeerTlsMaterial } from '../net/peer-tls.js';
import { CERT_FILES, createCa, createNodeCert } from './certs.js';
import { watchCertificates } from './start-command.js';

async function until(condition: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`${what} within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test('renewed certificates: an expired node.crt is refused with its dates and the old material kept, a valid one is used', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-rotation-'));
  const aborted = new AbortController();
  const lines: string[] = [];
  const write = process.stdout.write.bind(process.stdout);
  process.stdout.write = ((chunk: string | Uint8Array, ...rest: never[]) => {
    lines.push(String(chunk));
    return write(chunk, ...rest);
  }) as typeof process.stdout.write;
  try {
    await createCa({ certsDir: dir });
    await createNodeCert('n1', { certsDir: dir });
    const updates: PeerTlsMaterial[] = [];
    const target = { updateTls: (material: PeerTlsMaterial) => updates.push(material) };
    watchCertificates(dir, 'n1', [target, target], aborted.signal);

    const longAgo = new Date(Date.now() - 30 * 86_400_000);
    await createNodeCert('n1', { certsDir: dir, overwrite: true, now: longAgo, days: 1 });
    const file = join(dir, CERT_FILES.nodeCert);
    await until(() => lines.some((l) => l.includes('refused, keeping the current ones')), 'no refusal');
    const refusal = lines.find((l) => l.includes('refused, keeping the current ones'))!;
    assert.ok(refusal.includes(`${file} is expired (valid from ${longAgo.getUTCFullYear()}`), refusal);
    assert.equal(updates.length, 0, 'the ports keep what they have');

    await createNodeCert('n1', { certsDir: dir, overwrite: true });
    await until(() => updates.length === 2, 'no update');
    assert.equal(updates[0]!.cert, readFileSync(file, 'utf8'));
    assert.equal(updates[1], updates[0], 'every port gets the same renewed material');
    assert.ok(lines.some((l) => l.includes('are used for new peer, client and metrics connections')));
  } finally {
    process.stdout.write = write;
    aborted.abort();
    rmSync(dir, { recursive: true, force: true });
  }
});
