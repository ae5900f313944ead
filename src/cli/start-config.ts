/**
 * The settings of `basalt start`, from three sources in increasing precedence: defaults, a `--config` JSON file,
 * command-line flags. The file is one object whose keys are the settings below (flags in camelCase, `peers` and
 * `tables` as arrays of strings); an unknown key or a value of the wrong type is refused with an INVALID_ARGUMENT
 * error naming the file and the key, so a typo never silently falls back to a default. Relative paths in the file
 * (`data`, `logFile`, `certsDir`) are relative to the file's directory, so a config means the same from any working directory.
 */
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { BasaltError } from '../core/errors.js';
import { parseHostPort } from '../net/tcp-transport.js';
import { port, positiveInt, type TableSpec, tableSpec } from './common.js';
import { type PeerEntry, peerEntry } from './discovery.js';
import { type LogLevel, logLevel } from './logging.js';

/** Everything `basalt start` needs, defaults applied. */
export interface StartSettings {
  readonly name: string;
  readonly host: string;
  /** The peer (transport) port; 0 picks an ephemeral one. */
  readonly port: number;
  /**
   * Where the other nodes and clients reach this node when that differs from where it listens (`--host 0.0.0.0` in a
   * container, an address translated by the network): a host, with the peer port as `host:port` if that differs too.
   */
  readonly advertise?: Advertised;
  /** This node's own data directory (LMDB); absent only with `memory`. */
  readonly data?: string;
  readonly memory: boolean;
  /** Sync every Raft log batch (default true); off only for benchmarks that say so. */
  readonly fsync: boolean;
  /** The other nodes. */
  readonly peers: readonly PeerEntry[];
  /** A node of a running cluster this one joins (`host:port` of its peer port), instead of `peers`. */
  readonly join?: string;
  readonly clientPort?: number;
  readonly metricsPort?: number;
  readonly tables: readonly TableSpec[];
  readonly logLevel: LogLevel;
  readonly logFile?: string;
  readonly statusIntervalMs: number;
  /**
   * A certificates directory (ca.crt, node.crt, node.key; `basalt cert`): the peer port then uses mutual TLS 1.3 and
   * peers must hold certificates of the same CA naming their member names. Absent: plain TCP.
   */
  readonly certsDir?: string;
  /** Run off loopback without certificates: no TLS, no users (secure by default refuses that otherwise). */
  readonly insecure?: boolean;
  /**
   * Create this admin user once the cluster is up, unless it exists: password from BASALT_ADMIN_PASSWORD, or without
   * it a user that logs in by client certificate only. Needs `certsDir` (only a node with certificates checks users).
   */
  readonly initAdmin?: string;
}

/** Settings as one source gives them: any may be missing. */
export type PartialStartSettings = { -readonly [K in keyof StartSettings]?: StartSettings[K] };

export const DEFAULT_HOST = '127.0.0.1';

/** `--advertise`: a host, and the peer port when it is not the one listened on. */
export interface Advertised {
  readonly host: string;
  readonly port?: number;
}

/** Parses `host` or `host:port` (IPv6 hosts in brackets when a port follows). Throws INVALID_ARGUMENT. */
export function advertised(value: string): Advertised {
  const bad = (): BasaltError => new BasaltError('INVALID_ARGUMENT', `not a host or host:port to advertise: ${value}`);
  let host: string;
  let portText: string | undefined;
  if (value.startsWith('[')) {
    const close = value.indexOf(']');
    if (close < 0) throw bad();
    host = value.slice(1, close);
    const rest = value.slice(close + 1);
    if (rest.length > 0 && !rest.startsWith(':')) throw bad();
    portText = rest.length > 0 ? rest.slice(1) : undefined;
  } else if (value.indexOf(':') !== value.lastIndexOf(':')) {
    host = value; // a bare IPv6 address, no port
  } else {
    const colon = value.indexOf(':');
    host = colon < 0 ? value : value.slice(0, colon);
    portText = colon < 0 ? undefined : value.slice(colon + 1);
  }
  if (host.length === 0 || /\s/.test(host)) throw bad();
  if (portText === undefined) return { host };
  const port = Number(portText);
  if (!/^\d+$/.test(portText) || port < 1 || port > 65_535) throw bad();
  return { host, port };
}

const WILDCARD_HOSTS: ReadonlySet<string> = new Set(['0.0.0.0', '::', '[::]', '']);

/**
 * The host this node names to others: `--advertise`, else `--host` unless that is a wildcard (it listens on every
 * interface, and "0.0.0.0" reaches nothing from elsewhere), else the machine's host name, which is what a container
 * or a Kubernetes pod resolves to.
 */
export function advertisedHost(settings: Pick<StartSettings, 'host' | 'advertise'>, machineName: string): string {
  if (settings.advertise !== undefined) return settings.advertise.host;
  return WILDCARD_HOSTS.has(settings.host) ? machineName : settings.host;
}

/** `host:port` as peers dial it (IPv6 hosts in brackets). */
export function hostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

export const DEFAULT_STATUS_INTERVAL_MS = 5_000;

type KeyParser = (value: unknown) => Partial<PartialStartSettings>;

const FILE_KEYS: Readonly<Record<string, KeyParser>> = {
  name: (v) => ({ name: nonEmptyString(v) }),
  host: (v) => ({ host: nonEmptyString(v) }),
  advertise: (v) => ({ advertise: advertised(nonEmptyString(v)) }),
  port: (v) => ({ port: port(String(number(v))) }),
  data: (v) => ({ data: nonEmptyString(v) }),
  memory: (v) => ({ memory: boolean(v) }),
  fsync: (v) => ({ fsync: boolean(v) }),
  peers: (v) => ({ peers: strings(v).map(peerEntry) }),
  join: (v) => ({ join: joinAddress(nonEmptyString(v)) }),
  clientPort: (v) => ({ clientPort: port(String(number(v))) }),
  metricsPort: (v) => ({ metricsPort: port(String(number(v))) }),
  tables: (v) => ({ tables: strings(v).reduce<TableSpec[]>((all, spec) => tableSpec(spec, all), []) }),
  logLevel: (v) => ({ logLevel: logLevel(nonEmptyString(v)) }),
  logFile: (v) => ({ logFile: nonEmptyString(v) }),
  statusInterval: (v) => ({ statusIntervalMs: positiveInt(String(number(v))) }),
  certsDir: (v) => ({ certsDir: nonEmptyString(v) }),
  insecure: (v) => ({ insecure: boolean(v) }),
  initAdmin: (v) => ({ initAdmin: nonEmptyString(v) }),
};

/** The keys a config file may have. */
export const CONFIG_KEYS: readonly string[] = Object.keys(FILE_KEYS);

/** Reads and checks a config file. Throws INVALID_ARGUMENT naming the file and, for a bad value, the key. */
export function readStartConfig(path: string): PartialStartSettings {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw invalid(path, `cannot be read: ${(error as Error).message}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw invalid(path, `is not JSON: ${(error as Error).message}`);
  }
  return parseStartConfig(value, path);
}

/** Checks a parsed config object; `path` names it in errors and anchors its relative paths. */
export function parseStartConfig(value: unknown, path: string): PartialStartSettings {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw invalid(path, 'is not a JSON object');
  const settings: PartialStartSettings = {};
  for (const [key, field] of Object.entries(value)) {
    const parse = Object.hasOwn(FILE_KEYS, key) ? FILE_KEYS[key] : undefined;
    if (parse === undefined) throw invalid(path, `has an unknown key "${key}" (known: ${CONFIG_KEYS.join(', ')})`);
    try {
      Object.assign(settings, parse(field));
    } catch (error) {
      throw invalid(path, `key "${key}": ${(error as Error).message}, got ${JSON.stringify(field)}`);
    }
  }
  const base = dirname(resolve(path));
  if (settings.data !== undefined) settings.data = resolve(base, settings.data);
  if (settings.logFile !== undefined) settings.logFile = resolve(base, settings.logFile);
  if (settings.certsDir !== undefined) settings.certsDir = resolve(base, settings.certsDir);
  return settings;
}

/** Flags over file over defaults; name and port are required, and data unless in memory. */
export function resolveStartSettings(file: PartialStartSettings, flags: PartialStartSettings): StartSettings {
  const merged: PartialStartSettings = { ...file };
  for (const [key, value] of Object.entries(flags)) {
    if (value !== undefined) Object.assign(merged, { [key]: value });
  }
  const { name, port: peerPort, data, memory = false } = merged;
  if (name === undefined) throw new BasaltError('INVALID_ARGUMENT', 'a node name is required (--name or "name")');
  if (peerPort === undefined) throw new BasaltError('INVALID_ARGUMENT', 'a peer port is required (--port or "port")');
  if (merged.join !== undefined && (merged.peers ?? []).length > 0) {
    throw new BasaltError('INVALID_ARGUMENT', '--join and --peers exclude each other: a joining node learns its peers');
  }
  if (data === undefined && !memory) {
    throw new BasaltError('INVALID_ARGUMENT', 'a data directory is required (--data or "data"), or --memory');
  }
  const host = merged.host ?? DEFAULT_HOST;
  checkSecureByDefault(host, merged);
  return {
    ...merged,
    name,
    port: peerPort,
    memory,
    fsync: merged.fsync ?? true,
    host,
    peers: merged.peers ?? [],
    tables: merged.tables ?? [],
    logLevel: merged.logLevel ?? 'info',
    statusIntervalMs: merged.statusIntervalMs ?? DEFAULT_STATUS_INTERVAL_MS,
  };
}

/**
 * Secure by default (DESIGN §4b): a node reachable from other machines runs with certificates, or says `--insecure`
 * out loud. Loopback needs neither (`npm start`). Users exist only where certificates do, so `--init-admin` needs them.
 */
function checkSecureByDefault(host: string, settings: PartialStartSettings): void {
  if (settings.certsDir !== undefined && settings.insecure === true) {
    throw new BasaltError('INVALID_ARGUMENT', '--certs-dir and --insecure exclude each other');
  }
  if (settings.initAdmin !== undefined && settings.certsDir === undefined) {
    throw new BasaltError(
      'INVALID_ARGUMENT',
      '--init-admin needs --certs-dir: a node without certificates checks no users',
    );
  }
  if (settings.certsDir === undefined && settings.insecure !== true && !isLoopback(host)) {
    throw new BasaltError(
      'CERTS_REQUIRED',
      `--host ${host} is reachable from other machines: give --certs-dir <dir> (see basalt cert), or --insecure to run without TLS and users`,
      { host },
    );
  }
}

/** Loopback hosts: 127.0.0.0/8, ::1 and localhost. */
export function isLoopback(host: string): boolean {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  return bare === 'localhost' || bare === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(bare);
}

/** `--join host:port`: a peer port of a running cluster's node. Throws INVALID_ARGUMENT. */
export function joinAddress(value: string): string {
  parseHostPort(value);
  return value;
}

function invalid(path: string, problem: string): BasaltError {
  return new BasaltError('INVALID_ARGUMENT', `config file ${path} ${problem}`);
}

function nonEmptyString(value: unknown): string {
  if (typeof value !== 'string' || value.length === 0) throw new Error('expected a non-empty string');
  return value;
}

function number(value: unknown): number {
  if (typeof value !== 'number') throw new Error('expected a number');
  return value;
}

function boolean(value: unknown): boolean {
  if (typeof value !== 'boolean') throw new Error('expected true or false');
  return value;
}

function strings(value: unknown): string[] {
  if (!Array.isArray(value) || !value.every((v) => typeof v === 'string')) {
    throw new Error('expected an array of strings');
  }
  return value;
}
