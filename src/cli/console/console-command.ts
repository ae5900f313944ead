/**
 * `basalt console --connect <metrics address>`: the console is served by every node on its metrics port, so the
 * command only asks that node for its cluster view and prints the page's address with what the node sees.
 */
import { log } from '../common.js';
import type { ConsoleCluster } from './console-cluster.js';

const CONNECT_TIMEOUT_MS = 3_000;

/** The console's URL on a node's metrics address (`host:port`, or a URL). */
export function consoleUrl(address: string): string {
  const base = /^https?:\/\//.test(address) ? address : `http://${address}`;
  return `${base.replace(/\/+$/, '')}/console`;
}

/** Prints the console's URL; 0 when the node answered, 1 when it did not. */
export async function consoleCommand(address: string): Promise<number> {
  const url = consoleUrl(address);
  try {
    const response = await fetch(`${url}/api/cluster`, { signal: AbortSignal.timeout(CONNECT_TIMEOUT_MS) });
    if (!response.ok) throw new Error(`HTTP ${response.status}: ${(await response.text()).trim()}`);
    const view = (await response.json()) as ConsoleCluster;
    const members = view.members.map((m) => `${m.name} ${m.liveness}`).join(', ');
    log(`basalt: console of node ${view.node} (version ${view.version}): open ${url}`);
    log(`basalt: members as ${view.node} sees them: ${members}; ${view.partitionCount} partitions`);
    return 0;
  } catch (error) {
    log(`basalt: no console at ${url}: ${(error as Error).message}`);
    return 1;
  }
}
