/**
 * deploy/: the container entrypoint turns a StatefulSet pod's stable name into a `basalt start` command line that
 * `basalt start` accepts (its peers parse, its advertised name parses), and refuses a name that is not
 * <set>-<ordinal>. Run with `echo` in place of node, so nothing starts.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { peerEntry } from './discovery.js';
import { advertised } from './start-config.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const ENTRYPOINT = `${ROOT}deploy/entrypoint.sh`;

function entrypoint(env: Record<string, string>, ...args: string[]) {
  const result = spawnSync('sh', [ENTRYPOINT, ...args], {
    env: { PATH: process.env['PATH'] ?? '', BASALT_NODE: 'echo', BASALT_MAIN: 'main.js', ...env },
    encoding: 'utf8',
  });
  return { status: result.status, argv: result.stdout.trim().split(' '), stderr: result.stderr };
}

function flag(argv: readonly string[], name: string): string | undefined {
  const i = argv.indexOf(name);
  return i < 0 ? undefined : argv[i + 1];
}

describe('deploy/entrypoint.sh', () => {
  it("names the node after its pod, its peers after the set's other pods, and advertises its DNS name", () => {
    const domain = 'basalt.prod.svc.cluster.local';
    const run = entrypoint(
      { BASALT_NAME: 'basalt-1', BASALT_REPLICAS: '3', BASALT_DOMAIN: domain },
      '--table',
      'demo:8:3',
    );
    assert.equal(run.status, 0, run.stderr);
    assert.deepEqual(run.argv.slice(0, 2), ['main.js', 'start']);
    assert.equal(flag(run.argv, '--name'), 'basalt-1');
    assert.equal(flag(run.argv, '--host'), '0.0.0.0');
    assert.deepEqual(advertised(flag(run.argv, '--advertise')!), { host: `basalt-1.${domain}` });
    const peers = flag(run.argv, '--peers')!.split(',').map(peerEntry);
    assert.deepEqual(peers, [
      { name: 'basalt-0', address: `basalt-0.${domain}:7000` },
      { name: 'basalt-2', address: `basalt-2.${domain}:7000` },
    ]);
    assert.equal(flag(run.argv, '--data'), '/data');
    assert.equal(flag(run.argv, '--table'), 'demo:8:3', 'extra arguments are passed on');
  });

  it('refuses a name that is not <set>-<ordinal>, and a missing replica count', () => {
    const bad = entrypoint({ BASALT_NAME: 'basalt', BASALT_REPLICAS: '3', BASALT_DOMAIN: 'd' });
    assert.equal(bad.status, 2);
    assert.match(bad.stderr, /not <set>-<ordinal>/);
    const missing = entrypoint({ BASALT_NAME: 'basalt-0', BASALT_DOMAIN: 'd' });
    assert.notEqual(missing.status, 0);
    assert.match(missing.stderr, /BASALT_REPLICAS/);
  });

  it('the image copies what exists, and the StatefulSet runs the image with a volume per node', () => {
    const dockerfile = readFileSync(`${ROOT}deploy/Dockerfile`, 'utf8');
    for (const [, path] of dockerfile.matchAll(/^COPY (?!--from)(\S+)/gm)) {
      assert.ok(existsSync(`${ROOT}${path}`), `${path} exists`);
    }
    const manifest = readFileSync(`${ROOT}deploy/kubernetes/basalt.yaml`, 'utf8');
    assert.match(manifest, /kind: StatefulSet/);
    assert.match(manifest, /clusterIP: None/);
    assert.match(manifest, /volumeClaimTemplates/);
    const replicas = /^ {2}replicas: (\d+)/m.exec(manifest)?.[1];
    const declared = /name: BASALT_REPLICAS\n\s+value: "(\d+)"/.exec(manifest)?.[1];
    assert.equal(declared, replicas, 'BASALT_REPLICAS matches the set size');
  });

  it('the backup CronJob runs basalt backup and backup verify with flags the CLI takes, onto a claimed volume', () => {
    const manifest = readFileSync(`${ROOT}deploy/kubernetes/backup-cronjob.yaml`, 'utf8');
    assert.match(manifest, /kind: CronJob/);
    assert.match(manifest, /concurrencyPolicy: Forbid/);
    const claim = /claimName: ([\w-]+)/.exec(manifest)?.[1];
    assert.ok(
      claim !== undefined && new RegExp(`kind: PersistentVolumeClaim\\nmetadata:\\n  name: ${claim}\\n`).test(manifest),
    );
    const mount = /\{ name: backups, mountPath: (\S+) \}/.exec(manifest)?.[1];
    const commands = [...manifest.matchAll(/main\.js (backup(?: verify)?) (.*)$/gm)];
    assert.deepEqual(
      commands.map((c) => c[1]),
      ['backup', 'backup verify'],
    );
    assert.ok(commands.every((c) => c[2]!.includes(`"${mount}/`) || c[2]!.includes('"$dir"')));
    assert.match(manifest, new RegExp(`dir="${mount}/`), 'backups go to the mounted volume');
    const help = spawnSync(process.execPath, [`${ROOT}dist/src/cli/main.js`, 'backup', '--help'], { encoding: 'utf8' });
    for (const [, name] of commands[0]![2]!.matchAll(/(--[\w-]+)/g)) assert.ok(help.stdout.includes(name!), name);
  });
});
