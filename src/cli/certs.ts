/**
 * `basalt cert`: development and small-deployment certificates, generated in this process with @peculiar/x509 over
 * Node's WebCrypto (no shelled-out openssl). The directory is laid out as CockroachDB's `cockroach cert` lays it out:
 *   - `ca.crt` / `ca.key`: the cluster CA (self-signed, may sign certificates and nothing else below it);
 *   - `node.crt` / `node.key`: this node, its member name as the CN and as a DNS name in the SAN, plus any `--host`
 *     names and addresses; usable as both TLS server and client, since peers dial each other;
 *   - `client.<user>.crt` / `client.<user>.key`: a client, CN = user.
 * Keys are ECDSA P-256 in PKCS#8 PEM, written with mode 0600 (and a directory this creates gets 0700): a key file
 * readable by others gives the cluster away. Nothing is overwritten without `overwrite` (a replaced CA would orphan
 * every certificate it signed). Certificates start an hour before now, so that a peer whose clock is a little behind
 * does not refuse a certificate that was just made, and a certificate never outlives the CA that signed it.
 *
 * `loadPeerTls` reads a node's directory for `basalt start --certs-dir` (mutual TLS on the peer port, net/peer-tls.ts)
 * and checks it against the wall clock here, at the process edge, since the net layer reads no clock.
 */
import 'reflect-metadata';
import { createPrivateKey, createPublicKey, webcrypto, X509Certificate } from 'node:crypto';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { isIP } from 'node:net';
import { join } from 'node:path';
import * as x509 from '@peculiar/x509';
import { BasaltError } from '../core/errors.js';
import { dnsNames, type PeerTlsMaterial } from '../net/peer-tls.js';

x509.cryptoProvider.set(webcrypto);

export const DEFAULT_CERTS_DIR = './certs';
export const CA_DAYS_DEFAULT = 3650;
export const CERT_DAYS_DEFAULT = 365;

const DAY_MS = 86_400_000;
/** How far before "now" a new certificate starts to be valid, for peers whose clocks lag a little. */
const BACKDATE_MS = 3_600_000;
const KEY_ALGORITHM = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const ORGANIZATION = 'Basalt';
/** A node's member name goes into a DNS SAN, so it must be a DNS-like name. */
const NODE_NAME_PATTERN = /^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$/;
/** A user name is part of a file name, so it may not hold a path separator. */
const USER_NAME_PATTERN = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}$/;

export const CERT_FILES = {
  caCert: 'ca.crt',
  caKey: 'ca.key',
  nodeCert: 'node.crt',
  nodeKey: 'node.key',
  clientCert: (user: string): string => `client.${user}.crt`,
  clientKey: (user: string): string => `client.${user}.key`,
} as const;

export interface CertOptions {
  readonly certsDir: string;
  /** Days of validity from now; the default depends on the kind (CA_DAYS_DEFAULT, CERT_DAYS_DEFAULT). */
  readonly days?: number;
  /** Replace existing files instead of refusing. */
  readonly overwrite?: boolean;
  /** The time the certificate is made at (tests move it); default the wall clock. */
  readonly now?: Date;
}

export interface NodeCertOptions extends CertOptions {
  /** More names and addresses the node is reached at: IP addresses become IP SANs, the rest DNS SANs. */
  readonly hosts?: readonly string[];
}

/** The files a `create-*` wrote. */
export interface CreatedCert {
  readonly certFile: string;
  readonly keyFile: string;
  readonly notAfter: Date;
}

/** Creates the CA. Throws ALREADY_EXISTS if ca.crt or ca.key exists (unless `overwrite`). */
export async function createCa(options: CertOptions): Promise<CreatedCert> {
  const certFile = join(options.certsDir, CERT_FILES.caCert);
  const keyFile = join(options.certsDir, CERT_FILES.caKey);
  refuseExisting([certFile, keyFile], options.overwrite === true);
  const { notBefore, notAfter } = validity(options, CA_DAYS_DEFAULT, undefined);
  const keys = await generateKeys();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    name: [{ CN: [`${ORGANIZATION} CA`] }, { O: [ORGANIZATION] }],
    keys,
    signingAlgorithm: KEY_ALGORITHM,
    notBefore,
    notAfter,
    extensions: [
      // pathLength 0: the CA signs node and client certificates, never another CA.
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  await writePair(options.certsDir, certFile, keyFile, cert, keys.privateKey);
  return { certFile, keyFile, notAfter };
}

/** Creates node.crt / node.key for member `name`. Throws NOT_FOUND without a CA, ALREADY_EXISTS for existing files. */
export async function createNodeCert(name: string, options: NodeCertOptions): Promise<CreatedCert> {
  if (!NODE_NAME_PATTERN.test(name)) {
    throw new BasaltError(
      'INVALID_ARGUMENT',
      `node name ${JSON.stringify(name)} is not a DNS name (letters, digits, - and .)`,
    );
  }
  const hosts = [...new Set([name, ...(options.hosts ?? [])])];
  const names: x509.JsonGeneralName[] = hosts.map((host) => ({ type: isIP(host) === 0 ? 'dns' : 'ip', value: host }));
  const usages = [x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth];
  return issue(options, CERT_FILES.nodeCert, CERT_FILES.nodeKey, name, usages, names);
}

/**
 * A local cluster's certificates under `dir` (`basalt cluster --tls`): a CA in `dir/ca` made on first use and kept,
 * and for each member a directory `dir/<name>` with `ca.crt`, `node.crt` and `node.key` (no CA key: a node needs
 * none), made when missing. Returns each member's certificate directory, for its `--certs-dir`.
 */
export async function localClusterCerts(dir: string, names: readonly string[]): Promise<Map<string, string>> {
  const caDir = join(dir, 'ca');
  if (!existsSync(join(caDir, CERT_FILES.caCert))) await createCa({ certsDir: caDir });
  const dirs = new Map<string, string>();
  for (const name of names) {
    const nodeDir = join(dir, name);
    dirs.set(name, nodeDir);
    if (existsSync(join(nodeDir, CERT_FILES.nodeCert))) continue;
    // The node certificate is issued from a copy of the CA, whose key is removed once it is signed.
    mkdirSync(nodeDir, { recursive: true, mode: 0o700 });
    copyFileSync(join(caDir, CERT_FILES.caCert), join(nodeDir, CERT_FILES.caCert));
    copyFileSync(join(caDir, CERT_FILES.caKey), join(nodeDir, CERT_FILES.caKey));
    try {
      await createNodeCert(name, { certsDir: nodeDir, hosts: LOCAL_HOSTS });
    } finally {
      rmSync(join(nodeDir, CERT_FILES.caKey), { force: true });
    }
  }
  return dirs;
}

/** The names a local cluster's node certificates carry besides the member name. */
const LOCAL_HOSTS = ['localhost', '127.0.0.1'];

/** A renewed certificate: how to tell it from the one it replaced. */
export interface RenewedCert {
  readonly serialNumber: string;
  /** SHA-256 fingerprint as node:crypto spells it (`AB:CD:...`), comparable with a peer certificate's. */
  readonly fingerprint256: string;
}

/**
 * Renews member `name`'s certificate in a local cluster's directory `dir/<name>` (made by `localClusterCerts`): a new
 * key and node.crt from the CA in `dir/ca` (a new serial, valid from now), issued aside and moved into place key
 * first, so that a node watching its directory (`basalt start --certs-dir`) picks up the pair without a restart.
 */
export async function renewLocalNodeCert(dir: string, name: string): Promise<RenewedCert> {
  const nodeDir = join(dir, name);
  const scratch = mkdtempSync(join(dir, `${name}.renew-`));
  try {
    copyFileSync(join(dir, 'ca', CERT_FILES.caCert), join(scratch, CERT_FILES.caCert));
    copyFileSync(join(dir, 'ca', CERT_FILES.caKey), join(scratch, CERT_FILES.caKey));
    await createNodeCert(name, { certsDir: scratch, hosts: LOCAL_HOSTS });
    renameSync(join(scratch, CERT_FILES.nodeKey), join(nodeDir, CERT_FILES.nodeKey));
    renameSync(join(scratch, CERT_FILES.nodeCert), join(nodeDir, CERT_FILES.nodeCert));
    const cert = new X509Certificate(readFileSync(join(nodeDir, CERT_FILES.nodeCert)));
    return { serialNumber: cert.serialNumber, fingerprint256: cert.fingerprint256 };
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

/**
 * A local cluster's client directory `dir/client` (`basalt cluster --tls`): `ca.crt` and `client.<user>.crt` / `.key`
 * signed by the CA of `dir/ca`, made when missing (no CA key is left there). Returns the directory.
 */
export async function localClientCerts(dir: string, user: string): Promise<string> {
  const clientDir = join(dir, 'client');
  if (existsSync(join(clientDir, CERT_FILES.clientCert(user)))) return clientDir;
  mkdirSync(clientDir, { recursive: true, mode: 0o700 });
  const caDir = join(dir, 'ca');
  copyFileSync(join(caDir, CERT_FILES.caCert), join(clientDir, CERT_FILES.caCert));
  copyFileSync(join(caDir, CERT_FILES.caKey), join(clientDir, CERT_FILES.caKey));
  try {
    await createClientCert(user, { certsDir: clientDir });
  } finally {
    rmSync(join(clientDir, CERT_FILES.caKey), { force: true });
  }
  return clientDir;
}

/** What a client presents from a certificates directory: the CA to check servers with, and its own certificate. */
export interface ClientTlsMaterial {
  readonly ca: string;
  readonly cert?: string;
  readonly key?: string;
}

/**
 * A client's material from a certificates directory (the `--certs-dir` of the commands that connect): `ca.crt`, and
 * `client.<user>.crt` / `.key` when `user` is given and they exist. Throws TLS_CONFIG_INVALID naming the file: missing
 * ca.crt, a certificate expired or not yet valid at `now` (with its dates), a key that is not its certificate's.
 */
export function loadClientTls(certsDir: string, user: string | undefined, now: Date): ClientTlsMaterial {
  const caFile = join(certsDir, CERT_FILES.caCert);
  const ca = readMaterial(caFile);
  parseCert(caFile, ca, now);
  if (user === undefined || !existsSync(join(certsDir, CERT_FILES.clientCert(user)))) return { ca };
  const certFile = join(certsDir, CERT_FILES.clientCert(user));
  const keyFile = join(certsDir, CERT_FILES.clientKey(user));
  const cert = readMaterial(certFile);
  const key = readMaterial(keyFile);
  const clientCert = parseCert(certFile, cert, now);
  let matches: boolean;
  try {
    matches = clientCert.checkPrivateKey(createPrivateKey(key));
  } catch (error) {
    throw new BasaltError('TLS_CONFIG_INVALID', `${keyFile} is not a private key: ${(error as Error).message}`);
  }
  if (!matches) throw new BasaltError('TLS_CONFIG_INVALID', `${keyFile} is not the key of ${certFile}`);
  return { ca, cert, key };
}

/** Creates client.<user>.crt / .key with CN = user. Throws NOT_FOUND without a CA, ALREADY_EXISTS for existing files. */
export async function createClientCert(user: string, options: CertOptions): Promise<CreatedCert> {
  if (!USER_NAME_PATTERN.test(user)) {
    throw new BasaltError('INVALID_ARGUMENT', `user name ${JSON.stringify(user)} may hold letters, digits, _ . and -`);
  }
  const usages = [x509.ExtendedKeyUsage.clientAuth];
  return issue(options, CERT_FILES.clientCert(user), CERT_FILES.clientKey(user), user, usages, []);
}

/** A certificate signed by the directory's CA. */
async function issue(
  options: CertOptions,
  certName: string,
  keyName: string,
  commonName: string,
  usages: readonly x509.ExtendedKeyUsage[],
  sans: readonly x509.JsonGeneralName[],
): Promise<CreatedCert> {
  const certFile = join(options.certsDir, certName);
  const keyFile = join(options.certsDir, keyName);
  const ca = await readCa(options.certsDir);
  refuseExisting([certFile, keyFile], options.overwrite === true);
  const { notBefore, notAfter } = validity(options, CERT_DAYS_DEFAULT, ca.cert.notAfter);
  const keys = await generateKeys();
  const cert = await x509.X509CertificateGenerator.create({
    subject: [{ CN: [commonName] }, { O: [ORGANIZATION] }],
    issuer: ca.cert.subject,
    publicKey: keys.publicKey,
    signingKey: ca.key,
    signingAlgorithm: KEY_ALGORITHM,
    notBefore,
    notAfter,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([...usages]),
      ...(sans.length > 0 ? [new x509.SubjectAlternativeNameExtension([...sans])] : []),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      await x509.AuthorityKeyIdentifierExtension.create(ca.cert.publicKey),
    ],
  });
  await writePair(options.certsDir, certFile, keyFile, cert, keys.privateKey);
  return { certFile, keyFile, notAfter };
}

/** The CA certificate and its signing key. Throws NOT_FOUND naming a missing file, TLS_CONFIG_INVALID for a bad one. */
async function readCa(
  certsDir: string,
): Promise<{ readonly cert: x509.X509Certificate; readonly key: webcrypto.CryptoKey }> {
  const certFile = join(certsDir, CERT_FILES.caCert);
  const keyFile = join(certsDir, CERT_FILES.caKey);
  for (const file of [certFile, keyFile]) {
    if (!existsSync(file)) {
      throw new BasaltError('NOT_FOUND', `no CA: ${file} does not exist (create it with basalt cert create-ca)`);
    }
  }
  const certPem = readFileSync(certFile, 'utf8');
  const keyPem = readFileSync(keyFile, 'utf8');
  let cert: x509.X509Certificate;
  let der: Buffer;
  try {
    cert = new x509.X509Certificate(certPem);
    const key = createPrivateKey(keyPem);
    // A key that is not the certificate's signs certificates nobody can verify against the CA.
    const keySpki = createPublicKey(key).export({ type: 'spki', format: 'der' });
    const certSpki = new X509Certificate(certPem).publicKey.export({ type: 'spki', format: 'der' });
    if (!keySpki.equals(certSpki)) throw new Error(`${keyFile} is not the key of ${certFile}`);
    der = key.export({ type: 'pkcs8', format: 'der' });
  } catch (error) {
    throw new BasaltError('TLS_CONFIG_INVALID', `bad CA in ${certsDir}: ${(error as Error).message}`);
  }
  const key = await webcrypto.subtle.importKey('pkcs8', der, KEY_ALGORITHM, false, ['sign']);
  return { cert, key };
}

function validity(options: CertOptions, daysDefault: number, caNotAfter: Date | undefined): ValidityWindow {
  const days = options.days ?? daysDefault;
  if (!Number.isSafeInteger(days) || days < 1)
    throw new BasaltError('INVALID_ARGUMENT', `--days ${days}: expected a positive integer`);
  const nowMs = (options.now ?? new Date()).getTime();
  const notAfterMs = nowMs + days * DAY_MS;
  return {
    notBefore: new Date(nowMs - BACKDATE_MS),
    notAfter: new Date(caNotAfter === undefined ? notAfterMs : Math.min(notAfterMs, caNotAfter.getTime())),
  };
}

interface ValidityWindow {
  readonly notBefore: Date;
  readonly notAfter: Date;
}

function refuseExisting(files: readonly string[], overwrite: boolean): void {
  if (overwrite) return;
  const existing = files.filter((file) => existsSync(file));
  if (existing.length > 0) {
    const verb = existing.length === 1 ? 'exists' : 'exist';
    throw new BasaltError('ALREADY_EXISTS', `${existing.join(' and ')} already ${verb}; pass --overwrite to replace`);
  }
}

function generateKeys(): Promise<webcrypto.CryptoKeyPair> {
  return webcrypto.subtle.generateKey(KEY_ALGORITHM, true, ['sign', 'verify']) as Promise<webcrypto.CryptoKeyPair>;
}

async function writePair(
  dir: string,
  certFile: string,
  keyFile: string,
  cert: x509.X509Certificate,
  key: webcrypto.CryptoKey,
): Promise<void> {
  const keyDer = await webcrypto.subtle.exportKey('pkcs8', key);
  if (!existsSync(dir)) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    chmodSync(dir, 0o700);
  }
  // The key first and created fresh with 0600: an old key file with a wider mode is removed, not rewritten, so the new
  // key is never readable by others, not even for a moment.
  if (existsSync(keyFile)) unlinkSync(keyFile);
  writeFileSync(keyFile, x509.PemConverter.encode(keyDer, 'PRIVATE KEY'), { mode: 0o600, flag: 'wx' });
  chmodSync(keyFile, 0o600);
  writeFileSync(certFile, cert.toString('pem'), { mode: 0o644 });
}

/** One certificate as `basalt cert list` shows it. */
export interface CertInfo {
  readonly file: string;
  readonly subject: string;
  readonly issuer: string;
  /** As node:crypto spells them: `DNS:n1, IP Address:127.0.0.1`; empty without a SAN. */
  readonly sans: string;
  readonly notBefore: Date;
  readonly notAfter: Date;
  readonly status: CertStatus;
}

export type CertStatus = 'valid' | 'expired' | 'not yet valid';

/** Every `*.crt` of the directory, by file name; a file that does not parse is reported with its error. */
export function listCerts(certsDir: string, now: Date = new Date()): (CertInfo | { file: string; error: string })[] {
  if (!existsSync(certsDir)) throw new BasaltError('NOT_FOUND', `no certificates directory ${certsDir}`);
  const files = readdirSync(certsDir)
    .filter((name) => name.endsWith('.crt'))
    .sort();
  return files.map((name) => {
    const file = join(certsDir, name);
    try {
      return certInfo(file, new X509Certificate(readFileSync(file)), now);
    } catch (error) {
      return { file, error: (error as Error).message };
    }
  });
}

export function certInfo(file: string, cert: X509Certificate, now: Date): CertInfo {
  const notBefore = new Date(cert.validFrom);
  const notAfter = new Date(cert.validTo);
  return {
    file,
    subject: distinguishedName(cert.subject),
    issuer: distinguishedName(cert.issuer),
    sans: cert.subjectAltName ?? '',
    notBefore,
    notAfter,
    status: certStatus(notBefore, notAfter, now),
  };
}

export function certStatus(notBefore: Date, notAfter: Date, now: Date): CertStatus {
  if (now.getTime() < notBefore.getTime()) return 'not yet valid';
  return now.getTime() > notAfter.getTime() ? 'expired' : 'valid';
}

/** node:crypto gives a name one attribute per line. */
function distinguishedName(name: string): string {
  return name.split('\n').join(', ');
}

/** The lines `basalt cert list` prints. */
export function formatCertList(entries: ReturnType<typeof listCerts>): string[] {
  if (entries.length === 0) return ['no certificates'];
  return entries.flatMap((entry) => {
    if ('error' in entry) return [`${entry.file}: not a certificate (${entry.error})`];
    return [
      `${entry.file}:`,
      `  subject:    ${entry.subject}`,
      `  issuer:     ${entry.issuer}`,
      `  SANs:       ${entry.sans === '' ? '(none)' : entry.sans}`,
      `  not before: ${entry.notBefore.toISOString()}`,
      `  not after:  ${entry.notAfter.toISOString()}`,
      `  status:     ${entry.status}`,
    ];
  });
}

/**
 * The peer-port material of `basalt start --certs-dir`: ca.crt, node.crt and node.key, checked before the node starts
 * so that a bad directory is one clear error rather than peers refusing each other in a loop. Throws
 * TLS_CONFIG_INVALID naming the file: missing or unreadable, a certificate expired or not yet valid at `now` (with its
 * dates), node.crt not signed by ca.crt or not naming the member `name`, node.key not node.crt's key.
 */
export function loadPeerTls(certsDir: string, name: string, now: Date): PeerTlsMaterial {
  const caFile = join(certsDir, CERT_FILES.caCert);
  const certFile = join(certsDir, CERT_FILES.nodeCert);
  const keyFile = join(certsDir, CERT_FILES.nodeKey);
  const ca = readMaterial(caFile);
  const cert = readMaterial(certFile);
  const key = readMaterial(keyFile);
  const caCert = parseCert(caFile, ca, now);
  const nodeCert = parseCert(certFile, cert, now);
  const invalid = (problem: string) => new BasaltError('TLS_CONFIG_INVALID', problem, { certsDir });
  if (!nodeCert.verify(caCert.publicKey)) throw invalid(`${certFile} is not signed by the CA in ${caFile}`);
  const names = [...dnsNames(nodeCert.subjectAltName), ...commonNames(nodeCert.subject)];
  if (!names.includes(name)) {
    throw invalid(`${certFile} names ${names.join(', ') || 'nobody'}, not this node ${name}: peers would refuse it`);
  }
  let matches: boolean;
  try {
    matches = nodeCert.checkPrivateKey(createPrivateKey(key));
  } catch (error) {
    throw invalid(`${keyFile} is not a private key: ${(error as Error).message}`);
  }
  if (!matches) throw invalid(`${keyFile} is not the key of ${certFile}`);
  return { ca, cert, key };
}

function readMaterial(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (error) {
    throw new BasaltError('TLS_CONFIG_INVALID', `cannot read ${file}: ${(error as Error).message}`);
  }
}

/** A certificate valid at `now`. Throws TLS_CONFIG_INVALID naming the file (and its dates, when out of date). */
function parseCert(file: string, pem: string, now: Date): X509Certificate {
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(pem);
  } catch (error) {
    throw new BasaltError('TLS_CONFIG_INVALID', `${file} is not a certificate: ${(error as Error).message}`);
  }
  const info = certInfo(file, cert, now);
  if (info.status !== 'valid') {
    const dates = `valid from ${info.notBefore.toISOString()} to ${info.notAfter.toISOString()}`;
    throw new BasaltError('TLS_CONFIG_INVALID', `${file} is ${info.status} (${dates}, now ${now.toISOString()})`, {
      file,
      notBefore: info.notBefore.toISOString(),
      notAfter: info.notAfter.toISOString(),
    });
  }
  return cert;
}

function commonNames(subject: string): string[] {
  return subject
    .split('\n')
    .filter((line) => line.startsWith('CN='))
    .map((line) => line.slice(3));
}
