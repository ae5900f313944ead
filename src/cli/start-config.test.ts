import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { isBasaltError } from '../core/errors.js';
import {
  advertised,
  advertisedHost,
  hostPort,
  parseStartConfig,
  readStartConfig,
  resolveStartSettings,
} from './start-config.js';

const dir = mkdtempSync(join(tmpdir(), 'basalt-config-'));
after(() => rmSync(dir, { recursive: true, force: true }));

function configFile(value: unknown, name = 'node.json'): string {
  const path = join(dir, name);
  writeFileSync(path, typeof value === 'string' ? value : JSON.stringify(value));
  return path;
}

const refused = (pattern: RegExp) => (error: unknown) =>
  isBasaltError(error, 'INVALID_ARGUMENT') && pattern.test(error.message);

describe('basalt start --config', () => {
  it('reads every key; relative paths are relative to the file; flags override the file', () => {
    const path = configFile({
      name: 'n2',
      host: '10.0.0.2',
      advertise: 'n2.example:17002',
      port: 7002,
      data: 'data/n2',
      peers: ['n1=10.0.0.1:7001', '10.0.0.3:7003'],
      clientPort: 10801,
      metricsPort: 10901,
      tables: ['demo:8:3', 'kv'],
      logLevel: 'debug',
      logFile: 'logs/n2.log',
      memory: false,
      fsync: false,
      statusInterval: 1000,
      certsDir: 'certs/n2',
    });
    const file = readStartConfig(path);
    assert.deepEqual(resolveStartSettings(file, {}), {
      name: 'n2',
      host: '10.0.0.2',
      advertise: { host: 'n2.example', port: 17002 },
      port: 7002,
      data: join(dir, 'data/n2'),
      peers: [{ name: 'n1', address: '10.0.0.1:7001' }, { address: '10.0.0.3:7003' }],
      clientPort: 10801,
      metricsPort: 10901,
      tables: [
        { name: 'demo', partitions: 8, replicas: 3 },
        { name: 'kv', partitions: 8, replicas: 3 },
      ],
      logLevel: 'debug',
      logFile: join(dir, 'logs/n2.log'),
      memory: false,
      fsync: false,
      statusIntervalMs: 1000,
      certsDir: join(dir, 'certs/n2'),
    });
    const overridden = resolveStartSettings(file, { port: 0, clientPort: 0, peers: [], name: undefined });
    assert.equal(overridden.port, 0);
    assert.equal(overridden.clientPort, 0);
    assert.deepEqual(overridden.peers, [], 'an explicit empty --peers overrides the file');
    assert.equal(overridden.name, 'n2', 'a flag not given leaves the file value');
    assert.equal(resolveStartSettings(file, { fsync: true }).fsync, true, '--fsync overrides the file');
    assert.equal(resolveStartSettings({ name: 'n1', port: 1, memory: true }, {}).fsync, true, 'fsync by default');
  });

  it('applies defaults and requires a name, a port and a data directory (unless in memory)', () => {
    const settings = resolveStartSettings({ name: 'n1', port: 7001, memory: true }, {});
    assert.equal(settings.host, '127.0.0.1');
    assert.deepEqual(settings.peers, []);
    assert.equal(settings.logLevel, 'info');
    assert.equal(settings.clientPort, undefined);
    assert.throws(() => resolveStartSettings({ port: 1, memory: true }, {}), refused(/node name is required/));
    assert.throws(() => resolveStartSettings({ name: 'n1', memory: true }, {}), refused(/peer port is required/));
    assert.throws(() => resolveStartSettings({ name: 'n1', port: 1 }, {}), refused(/data directory is required/));
  });

  it('refuses an unknown key or a value of the wrong type, naming the key', () => {
    assert.throws(
      () => parseStartConfig({ name: 'n1', prot: 7001 }, 'c.json'),
      refused(/c\.json has an unknown key "prot"/),
    );
    assert.throws(
      () => parseStartConfig({ port: '7001' }, 'c.json'),
      refused(/key "port": expected a number, got "7001"/),
    );
    assert.throws(() => parseStartConfig({ port: 70000 }, 'c.json'), refused(/key "port": expected a port/));
    assert.throws(
      () => parseStartConfig({ peers: '127.0.0.1:1' }, 'c.json'),
      refused(/key "peers": expected an array/),
    );
    assert.throws(() => parseStartConfig({ peers: ['nope'] }, 'c.json'), refused(/key "peers": not a host:port/));
    assert.throws(() => parseStartConfig({ tables: ['t:0'] }, 'c.json'), refused(/key "tables": expected a positive/));
    assert.throws(() => parseStartConfig({ memory: 'yes' }, 'c.json'), refused(/key "memory": expected true or false/));
    assert.throws(
      () => parseStartConfig({ logLevel: 'loud' }, 'c.json'),
      refused(/key "logLevel": expected a log level/),
    );
    assert.throws(() => parseStartConfig({ name: '' }, 'c.json'), refused(/key "name": expected a non-empty string/));
    assert.throws(() => parseStartConfig([], 'c.json'), refused(/is not a JSON object/));
    assert.throws(() => readStartConfig(configFile('{ "name": ', 'bad.json')), refused(/bad\.json is not JSON/));
    assert.throws(() => readStartConfig(join(dir, 'missing.json')), refused(/missing\.json cannot be read/));
  });
});

describe('basalt start --advertise', () => {
  it('takes a host or host:port, IPv6 in brackets when a port follows', () => {
    assert.deepEqual(advertised('10.0.0.7'), { host: '10.0.0.7' });
    assert.deepEqual(advertised('basalt-0.basalt:7000'), { host: 'basalt-0.basalt', port: 7000 });
    assert.deepEqual(advertised('fd00::7'), { host: 'fd00::7' });
    assert.deepEqual(advertised('[fd00::7]:7001'), { host: 'fd00::7', port: 7001 });
    for (const bad of ['', ':7000', 'h:0', 'h:70000', 'h:x', '[fd00::7', '[fd00::7]7001', 'a b']) {
      assert.throws(() => advertised(bad), refused(/to advertise/), bad);
    }
  });

  it('names --advertise, else --host, else the machine for a wildcard host', () => {
    assert.equal(advertisedHost({ host: '10.0.0.2', advertise: { host: 'n2.example' } }, 'box'), 'n2.example');
    assert.equal(advertisedHost({ host: '10.0.0.2' }, 'box'), '10.0.0.2');
    assert.equal(advertisedHost({ host: '0.0.0.0' }, 'box'), 'box');
    assert.equal(advertisedHost({ host: '::' }, 'box'), 'box');
    assert.equal(hostPort('fd00::7', 7000), '[fd00::7]:7000');
    assert.equal(hostPort('box', 7000), 'box:7000');
  });

  it('refuses a bad advertise key in a config file, naming it', () => {
    assert.throws(() => parseStartConfig({ advertise: 'h:0' }, 'x.json'), refused(/key "advertise"/));
  });
});
