/**
 * The console's login on a real `basalt start --certs-dir` process (its metrics port is HTTPS and it checks users):
 * every console request but the vendor files needs HTTP Basic credentials, checked by the client port's
 * authenticator (a wrong password is a 401 counted in `basalt_auth_failures_total` and logged without the password,
 * and failures made on the console
 * throttle the client port's logins of the same user), an admin sees everything, and a user with `readonly` on one
 * table reads that table's keys and gets 403 on another's, whose locked keys the transaction view hides from it.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Authenticator } from '../client/auth.js';
import { hashPassword, SALT_BYTES } from '../client/passwords.js';
import { connect, type RemoteClient } from '../client/remote.js';
import type { UserRecord } from '../cluster/metastorage-state.js';
import { LIMITS } from '../core/limits.js';
import { RealClock } from '../env/real-clock.js';
import { secureRandomBytes } from '../env/real-random.js';
import { freeRange } from '../testing/port-range.js';
import { CERT_FILES, createCa, createNodeCert } from './certs.js';
import { basicCredentials, ConsoleLogins, LOGIN_REMEMBER_MS } from './console/console-auth.js';

const MAIN = fileURLToPath(new URL('./main.js', import.meta.url));
const ADMIN_PASSWORD = 'first-admin-password';
const TINA_PASSWORD = 'tina-password';
const OPEN = 'open';
const SECRET = 'secret';

interface Answer {
  readonly status: number;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  readonly body: string;
}

interface ErrorBody {
  readonly error: { readonly code: string; readonly message: string };
}

function basic(user: string, password: string): string {
  return `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;
}

describe('console login on a node with certificates', () => {
  let dir: string;
  let child: ChildProcess;
  let output = '';
  let ca: Buffer;
  let metrics: number;
  let clientAddress: string;
  let admin: RemoteClient;

  /** One HTTPS GET of the metrics port; an event stream's answer is cut after its headers. */
  const get = (path: string, authorization?: string): Promise<Answer> =>
    new Promise((resolve, reject) => {
      const headers = authorization === undefined ? {} : { authorization };
      const req = request({ host: '127.0.0.1', port: metrics, path, ca, headers }, (res) => {
        let body = '';
        const done = () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body });
        if (String(res.headers['content-type']).startsWith('text/event-stream')) {
          res.destroy();
          done();
          return;
        }
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', done);
      });
      req.on('error', reject);
      req.end();
    });

  const refused = async (path: string, status: number, code: string, authorization?: string): Promise<string> => {
    const answer = await get(path, authorization);
    assert.equal(answer.status, status, `${path}: ${answer.body}`);
    assert.match(String(answer.headers['content-type']), /^application\/json/);
    const body = JSON.parse(answer.body) as ErrorBody;
    assert.equal(body.error.code, code);
    if (status === 401) assert.equal(answer.headers['www-authenticate'], 'Basic realm="basalt console"');
    return body.error.message;
  };

  const counter = async (name: string): Promise<number> => {
    const answer = await get('/metrics');
    assert.equal(answer.status, 200, 'metrics need no login');
    const match = new RegExp(`^basalt_${name}\\{[^}]*\\} (\\d+)$`, 'm').exec(answer.body);
    assert.ok(match !== null, `no basalt_${name} in /metrics`);
    return Number(match[1]);
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'basalt-console-auth-'));
    await createCa({ certsDir: dir });
    await createNodeCert('n1', { certsDir: dir, hosts: ['127.0.0.1'] });
    ca = readFileSync(join(dir, CERT_FILES.caCert));
    const base = await freeRange(3);
    metrics = base + 2;
    clientAddress = `127.0.0.1:${base + 1}`;
    const args = ['start', '--name', 'n1', '--port', String(base), '--memory', '--certs-dir', dir];
    args.push('--table', `${OPEN}:2:1`, '--table', `${SECRET}:2:1`, '--init-admin', 'admin');
    args.push('--client-port', String(base + 1), '--metrics-port', String(metrics));
    const env = { ...process.env, BASALT_ADMIN_PASSWORD: ADMIN_PASSWORD };
    child = spawn(process.execPath, [MAIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env });
    const append = (chunk: Buffer) => {
      output += chunk.toString();
    };
    child.stdout!.on('data', append);
    child.stderr!.on('data', append);
    const deadline = Date.now() + 60_000;
    while (!/basalt: node n1 ready/.test(output) || !/admin user admin created/.test(output)) {
      if (Date.now() > deadline || child.exitCode !== null) assert.fail(`node n1 did not get ready:\n${output}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    admin = await connect(clientAddress, { ca, user: 'admin', password: ADMIN_PASSWORD });
    await admin.put(OPEN, 'o1', { n: 1 });
    await admin.put(SECRET, 's1', { n: 2 });
    await admin.createUser('tina', { password: TINA_PASSWORD });
    await admin.grant('tina', 'readonly', { table: OPEN });
  });

  after(async () => {
    await admin?.close();
    if (child !== undefined && child.exitCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  });

  it('without credentials every console resource but the vendor files is a 401 naming the Basic realm', async () => {
    for (const path of [
      '/console',
      '/console/app.js',
      '/console/api/cluster',
      '/console/api/transactions',
      `/console/api/data/scan?table=${OPEN}`,
      `/console/api/data/history?table=${OPEN}&key=o1`,
      '/console/api/events',
      '/console/api/nothing-here',
    ]) {
      await refused(path, 401, 'UNAUTHENTICATED');
    }
    await refused('/console/api/cluster', 401, 'UNAUTHENTICATED', 'Bearer abc');
    await refused('/console/api/cluster', 401, 'UNAUTHENTICATED', 'Basic !!!');
    const vendor = await get('/console/vendor/preact.js');
    assert.equal(vendor.status, 200, 'the vendor files are copies of published packages');
    assert.equal((await get('/health')).status, 200);
  });

  it('a wrong password is a 401 and is counted with the client port refusals', async () => {
    const before = await counter('auth_failures_total');
    const message = await refused('/console/api/cluster', 401, 'UNAUTHENTICATED', basic('admin', 'not-the-password'));
    assert.match(message, /wrong user name or password/);
    assert.doesNotMatch(message, /not-the-password/);
    assert.equal(await counter('auth_failures_total'), before + 1);
    await refused('/console/api/cluster', 401, 'UNAUTHENTICATED', basic('nobody', 'nobody-password'));
    assert.equal(await counter('auth_failures_total'), before + 2);
    // Logged as a warning with the user and address, never the password.
    const deadline = Date.now() + 5_000;
    while (!/"kind":"console-auth-refused"/.test(output) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.match(output, /"client":"127\.0\.0\.1","kind":"console-auth-refused".*user admin/);
    assert.doesNotMatch(output, /not-the-password|nobody-password/);
  });

  it('an admin sees the page, the cluster, the transactions, the event stream and every table', async () => {
    const auth = basic('admin', ADMIN_PASSWORD);
    const logins = await counter('auth_logins_total');
    const page = await get('/console', auth);
    assert.equal(page.status, 200);
    assert.match(page.body, /importmap/);
    const cluster = await get('/console/api/cluster', auth);
    assert.equal(cluster.status, 200, cluster.body);
    assert.equal((JSON.parse(cluster.body) as { node: string }).node, 'n1');
    assert.equal((await get('/console/api/transactions', auth)).status, 200);
    const events = await get('/console/api/events', auth);
    assert.equal(events.status, 200);
    assert.match(String(events.headers['content-type']), /^text\/event-stream/);
    for (const [table, key] of [
      [OPEN, 'o1'],
      [SECRET, 's1'],
    ] as const) {
      const scan = await get(`/console/api/data/scan?table=${table}`, auth);
      assert.equal(scan.status, 200, scan.body);
      assert.deepEqual(
        (JSON.parse(scan.body) as { rows: { key: string }[] }).rows.map((r) => r.key),
        [key],
      );
      const history = await get(`/console/api/data/history?table=${table}&key=${key}`, auth);
      assert.equal(history.status, 200, history.body);
    }
    // The first request checked the password; the others were taken as remembered (LOGIN_REMEMBER_MS).
    assert.equal(await counter('auth_logins_total'), logins + 1);
  });

  it('a user with readonly on one table reads its keys and is refused the other table with 403', async () => {
    const auth = basic('tina', TINA_PASSWORD);
    assert.equal((await get('/console/api/cluster', auth)).status, 200, 'the cluster view needs a login only');
    const scan = await get(`/console/api/data/scan?table=${OPEN}`, auth);
    assert.equal(scan.status, 200, scan.body);
    assert.deepEqual((JSON.parse(scan.body) as { rows: { key: string; value: unknown }[] }).rows, [
      { key: 'o1', value: { n: 1 } },
    ]);
    assert.equal((await get(`/console/api/data/history?table=${OPEN}&key=o1`, auth)).status, 200);
    const denied = await refused(`/console/api/data/scan?table=${SECRET}`, 403, 'PERMISSION_DENIED', auth);
    assert.match(denied, new RegExp(`tina may not read table ${SECRET}`));
    await refused(`/console/api/data/history?table=${SECRET}&key=s1`, 403, 'PERMISSION_DENIED', auth);
    await refused(`/console/api/data/scan?table=${SECRET}&prefix=s`, 403, 'PERMISSION_DENIED', auth);
  });

  it('a changed password or a revoked role takes effect on the next console request', async () => {
    const old = basic('tina', TINA_PASSWORD);
    assert.equal((await get(`/console/api/data/scan?table=${OPEN}`, old)).status, 200);
    await admin.setPassword('tina', 'tina-password-2');
    await refused('/console/api/cluster', 401, 'UNAUTHENTICATED', old);
    const renewed = basic('tina', 'tina-password-2');
    assert.equal((await get(`/console/api/data/scan?table=${OPEN}`, renewed)).status, 200);
    await admin.grant('tina', 'none', { table: OPEN });
    await refused(`/console/api/data/scan?table=${OPEN}`, 403, 'PERMISSION_DENIED', renewed);
    await admin.grant('tina', 'readonly', { table: OPEN });
    await admin.setPassword('tina', TINA_PASSWORD);
  });

  it('the transaction view hides the keys a transaction locks in a table the user may not read', async () => {
    const tx = await admin.begin();
    try {
      await tx.get(SECRET, 's1', { forUpdate: true });
      await tx.get(OPEN, 'o1', { forUpdate: true });
      type Live = { locks: { key: string | null }[] }[];
      const keysSeenBy = async (user: string, password: string) => {
        const answer = await get('/console/api/transactions', basic(user, password));
        assert.equal(answer.status, 200, answer.body);
        const live = (JSON.parse(answer.body) as { oldestLive: Live }).oldestLive;
        return live.flatMap((t) => t.locks.map((l) => l.key)).sort();
      };
      // Row locks are named `r:<partition>:<key>`, beside the partition's intention lock `p:<partition>`.
      const all = await keysSeenBy('admin', ADMIN_PASSWORD);
      assert.ok(all.some((k) => k?.endsWith(':s1')) && all.some((k) => k?.endsWith(':o1')), String(all));
      assert.ok(all.every((k) => k !== null));
      const tinas = await keysSeenBy('tina', TINA_PASSWORD);
      assert.equal(tinas.length, all.length, 'the locks are all counted');
      assert.ok(
        tinas.some((k) => k?.endsWith(':o1')),
        String(tinas),
      );
      assert.ok(!tinas.some((k) => k?.includes('s1')), String(tinas));
      const secretPartition = all.find((k) => k!.endsWith(':s1'))!.split(':')[1]!;
      const hidden = all.filter((k) => k!.includes(secretPartition)).length;
      assert.ok(hidden >= 1);
      assert.equal(tinas.filter((k) => k === null).length, hidden, String(tinas));
      assert.ok(!tinas.some((k) => k?.includes(secretPartition)), String(tinas));
    } finally {
      await tx.rollback();
    }
  });

  it('basalt console --certs-dir --user logs in over HTTPS; without a password it is refused', () => {
    const run = (extra: readonly string[], env: NodeJS.ProcessEnv) => {
      const args = [MAIN, 'console', '--connect', `127.0.0.1:${metrics}`, '--certs-dir', dir, ...extra];
      const result = spawnSync(process.execPath, args, { env, encoding: 'utf8' });
      return { status: result.status, output: result.stdout + result.stderr };
    };
    const ok = run(['--user', 'admin'], { ...process.env, BASALT_PASSWORD: ADMIN_PASSWORD });
    assert.equal(ok.status, 0, ok.output);
    assert.match(ok.output, new RegExp(`console of node n1 .*open https://127\\.0\\.0\\.1:${metrics}/console`));
    const anonymous = run([], process.env);
    assert.equal(anonymous.status, 1, anonymous.output);
    assert.match(anonymous.output, /HTTP 401: .*UNAUTHENTICATED/);
  });

  it('failed console logins throttle the client port logins of the same user and address', async () => {
    // Fail until a wait of at least 2 s is open (each failure past the free ones doubles it from 250 ms).
    const throttled = await counter('auth_throttled_total');
    let waitMs = 0;
    let failures = 0;
    for (let attempt = 0; waitMs < 2_000; attempt++) {
      assert.ok(attempt < 40, 'the wait never reached 2 s');
      const message = await refused('/console/api/cluster', 401, 'UNAUTHENTICATED', basic('tina', 'wrong-password'));
      const retry = /try again in (\d+) ms/.exec(message);
      if (retry !== null) await new Promise((r) => setTimeout(r, Number(retry[1]) + 10));
      else {
        failures++;
        waitMs =
          failures <= LIMITS.authFailuresFree
            ? 0
            : LIMITS.authDelayMsBase * 2 ** (failures - 1 - LIMITS.authFailuresFree);
      }
    }
    await assert.rejects(
      connect(clientAddress, { ca, user: 'tina', password: TINA_PASSWORD }),
      /too many failed logins/,
    );
    const message = await refused('/console/api/cluster', 401, 'UNAUTHENTICATED', basic('tina', 'wrong-again'));
    assert.match(message, /too many failed logins of user tina/);
    assert.ok((await counter('auth_throttled_total')) > throttled);
  });
});

describe('console logins remembered', () => {
  const setup = async () => {
    const users = new Map<string, UserRecord>();
    const authenticator = new Authenticator({ clock: new RealClock(), salts: secureRandomBytes }, (n) => users.get(n));
    const setPassword = async (password: string) =>
      users.set('ann', {
        name: 'ann',
        role: 'readonly',
        password: await hashPassword(password, secureRandomBytes(SALT_BYTES)),
      });
    await setPassword('ann-password');
    let nowMs = 1_000;
    const logins = new ConsoleLogins(
      authenticator,
      (n) => users.get(n),
      () => nowMs,
    );
    const checks = () => authenticator.counters().auth_logins_total;
    return { users, logins, setPassword, checks, advance: (ms: number) => (nowMs += ms) };
  };

  it('a checked password is taken again without a check, for the same address and user, until it expires', async () => {
    const { logins, checks, advance } = await setup();
    const ann = basic('ann', 'ann-password');
    const viewer = await logins.login('10.0.0.1', ann);
    assert.equal(viewer.kind === 'user' && viewer.user.name, 'ann');
    await logins.login('10.0.0.1', ann);
    assert.equal(checks(), 1);
    await logins.login('10.0.0.2', ann);
    assert.equal(checks(), 2, 'another address is checked');
    advance(LOGIN_REMEMBER_MS);
    await logins.login('10.0.0.1', ann);
    assert.equal(checks(), 3, 'checked again once expired');
  });

  it('a changed password or a removed user is checked again, and a wrong password is never remembered', async () => {
    const { users, logins, setPassword, checks } = await setup();
    const ann = basic('ann', 'ann-password');
    await logins.login('10.0.0.1', ann);
    await setPassword('ann-password-2');
    await assert.rejects(logins.login('10.0.0.1', ann), /UNAUTHENTICATED|wrong user name or password/);
    await logins.login('10.0.0.1', basic('ann', 'ann-password-2'));
    users.delete('ann');
    await assert.rejects(logins.login('10.0.0.1', basic('ann', 'ann-password-2')), /wrong user name or password/);
    await assert.rejects(logins.login('10.0.0.1', basic('bob', 'x')), /wrong user name or password/);
    await assert.rejects(logins.login('10.0.0.1', basic('bob', 'x')), /wrong user name or password/);
    assert.equal(checks(), 2);
  });

  it('reads Basic credentials and nothing else', () => {
    assert.deepEqual(basicCredentials(basic('ann', 'a:b c')), { user: 'ann', password: 'a:b c' });
    assert.deepEqual(basicCredentials(`basic   ${Buffer.from('ann:').toString('base64')}`), {
      user: 'ann',
      password: '',
    });
    for (const header of [
      undefined,
      '',
      'Bearer abc',
      'Basic',
      'Basic !!!',
      basic('', 'x'),
      `Basic ${'A'.repeat(5_000)}`,
    ]) {
      assert.equal(basicCredentials(header), undefined, String(header));
    }
    assert.equal(basicCredentials(`Basic ${Buffer.from('no-colon').toString('base64')}`), undefined);
  });
});
