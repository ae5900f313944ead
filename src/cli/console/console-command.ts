/**
 * `basalt console --connect <metrics address>`: the console is served by every node on its metrics port, so the
 * command only asks that node for its cluster view and prints the page's address with what the node sees. A node with
 * certificates serves it over HTTPS behind a login: `--certs-dir` trusts the directory's CA, `--user` logs in (HTTP
 * Basic, the password from BASALT_PASSWORD or a prompt, as the other commands).
 */
import { get as httpGet, type IncomingMessage } from 'node:http';
import { get as httpsGet } from 'node:https';
import { log } from '../common.js';
import type { ConsoleCluster } from './console-cluster.js';

const CONNECT_TIMEOUT_MS = 3_000;

/** How to reach a console that checks users: the CA to trust, and the login. */
export interface ConsoleCredentials {
  readonly ca?: string | Buffer;
  readonly user?: string;
  readonly password?: string;
}

/** The console's URL on a node's metrics address (`host:port`, or a URL); HTTPS when `secure`. */
export function consoleUrl(address: string, secure = false): string {
  const base = /^https?:\/\//.test(address) ? address : `${secure ? 'https' : 'http'}://${address}`;
  return `${base.replace(/\/+$/, '')}/console`;
}

/** Prints the console's URL; 0 when the node answered, 1 when it did not. */
export async function consoleCommand(address: string, credentials: ConsoleCredentials = {}): Promise<number> {
  const url = consoleUrl(address, credentials.ca !== undefined);
  try {
    const { status, body } = await getText(`${url}/api/cluster`, credentials);
    if (status !== 200) throw new Error(`HTTP ${status}: ${body.trim()}`);
    const view = JSON.parse(body) as ConsoleCluster;
    const members = view.members.map((m) => `${m.name} ${m.liveness}`).join(', ');
    log(`basalt: console of node ${view.node} (version ${view.version}): open ${url}`);
    log(`basalt: members as ${view.node} sees them: ${members}; ${view.partitionCount} partitions`);
    return 0;
  } catch (error) {
    log(`basalt: no console at ${url}: ${(error as Error).message}`);
    return 1;
  }
}

function getText(url: string, credentials: ConsoleCredentials): Promise<{ status: number; body: string }> {
  const { ca, user, password } = credentials;
  const headers =
    user === undefined || password === undefined
      ? {}
      : { authorization: `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}` };
  const options = { timeout: CONNECT_TIMEOUT_MS, headers, ...(ca !== undefined && { ca }) };
  return new Promise((resolve, reject) => {
    const onResponse = (response: IncomingMessage): void => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (body += chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
      response.on('error', reject);
    };
    const request = url.startsWith('https:') ? httpsGet(url, options, onResponse) : httpGet(url, options, onResponse);
    request.on('timeout', () => request.destroy(new Error(`no answer within ${CONNECT_TIMEOUT_MS} ms`)));
    request.on('error', reject);
  });
}
