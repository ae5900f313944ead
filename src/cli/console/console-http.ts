/**
 * The web console on a node's metrics port, under `/console`: one page (console-page.ts), the browser modules it
 * imports (preact, htm, uPlot) served from the installed packages, and read-only JSON under `/console/api/`.
 *
 * Every console request goes through `serveConsole`, and every route is a row of `ROUTES` (GET only, the metrics
 * server refuses other methods). On a node that checks users `serveConsole` logs every request in before any route
 * runs (console-auth.ts), and each route gets the viewer to authorize what it shows; only the vendor files, copies of
 * published packages that say nothing about the cluster, are served without a login. No route writes: the data
 * routes read through a read-only transaction or the local replica's storage. Static files come from a fixed table
 * (`VENDOR_FILES`): a request names a row, never a path, so nothing outside those files can be served. Every list
 * has a limit (`LIST_LIMIT_MAX`).
 */
import { readFileSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { BasaltError, invalidArgument, isBasaltError } from '../../core/errors.js';
import { hybridTimestamp, PHYSICAL_MS_MAX } from '../../hlc/timestamp.js';
import type { BasaltNode } from '../../node/basalt-node.js';
import {
  CONSOLE_REALM,
  type ConsoleLogins,
  type ConsoleViewer,
  consoleLogin,
  partitionReadable,
  requireRead,
} from './console-auth.js';
import { clusterView } from './console-cluster.js';
import { keyHistory, readPage } from './console-data.js';
import { CONSOLE_APP_JS, CONSOLE_PAGE_HTML } from './console-page.js';
import type { ConsoleTelemetry } from './console-telemetry.js';
import { transactionsView } from './console-transactions.js';

export const LIST_LIMIT_DEFAULT = 100;
export const LIST_LIMIT_MAX = 1_000;
/** Longest table name, prefix, key or tx id part a query may carry (characters). */
const QUERY_TEXT_MAX = 4_096;

export interface ConsoleContext {
  readonly nodeOf: () => BasaltNode | undefined;
  readonly telemetry: ConsoleTelemetry;
  readonly version: string;
  /** The logins, on a node that checks users (the client port's authenticator); absent: every request is served. */
  readonly logins?: ConsoleLogins;
  /** Told of each refused login (the message names the user, never the password). */
  readonly onRefused?: (source: string, message: string) => void;
}

/** One console request as `serveConsole` needs it. */
export interface ConsoleRequest {
  readonly url: URL;
  /** The client's address, the throttling key of failed logins with the user. */
  readonly source: string;
  /** The `Authorization` header. */
  readonly authorization: string | undefined;
}

type Route = (
  ctx: ConsoleContext,
  query: URLSearchParams,
  response: ServerResponse,
  viewer: ConsoleViewer,
) => void | Promise<void>;

/** The browser modules, by the name the page asks for: package, file beside the package's resolved entry, type. */
const VENDOR_FILES: Readonly<Record<string, { readonly from: string; readonly file: string; readonly type: string }>> =
  {
    'preact.js': { from: 'preact', file: 'preact.module.js', type: 'text/javascript; charset=utf-8' },
    'hooks.js': { from: 'preact/hooks', file: 'hooks.module.js', type: 'text/javascript; charset=utf-8' },
    'htm.js': { from: 'htm', file: 'htm.module.js', type: 'text/javascript; charset=utf-8' },
    'uplot.js': { from: 'uplot', file: 'uPlot.esm.js', type: 'text/javascript; charset=utf-8' },
    'uplot.css': { from: 'uplot', file: 'uPlot.min.css', type: 'text/css; charset=utf-8' },
  };

const vendorCache = new Map<string, Buffer>();

/** A vendor file's bytes, read once from the installed package. */
export function vendorFile(name: string): { readonly body: Buffer; readonly type: string } | undefined {
  const spec = Object.hasOwn(VENDOR_FILES, name) ? VENDOR_FILES[name] : undefined;
  if (spec === undefined) return undefined;
  let body = vendorCache.get(name);
  if (body === undefined) {
    const entry = createRequire(import.meta.url).resolve(spec.from);
    body = readFileSync(join(dirname(entry), spec.file));
    vendorCache.set(name, body);
  }
  return { body, type: spec.type };
}

const ROUTES: Readonly<Record<string, Route>> = {
  '/console': (_ctx, _q, response) => send(response, 200, 'text/html; charset=utf-8', CONSOLE_PAGE_HTML),
  '/console/': (_ctx, _q, response) => send(response, 200, 'text/html; charset=utf-8', CONSOLE_PAGE_HTML),
  '/console/app.js': (_ctx, _q, response) => send(response, 200, 'text/javascript; charset=utf-8', CONSOLE_APP_JS),
  '/console/api/cluster': (ctx, q, response) =>
    sendJson(response, 200, clusterView(running(ctx), ctx.version, limitOf(q))),
  '/console/api/transactions': (ctx, q, response, viewer) => {
    const node = running(ctx);
    sendJson(response, 200, transactionsView(node, text(q, 'q', ''), limitOf(q), partitionReadable(node, viewer)));
  },
  '/console/api/data/scan': async (ctx, q, response, viewer) => {
    const table = text(q, 'table');
    requireRead(viewer, table);
    const after = q.get('after');
    const at = timestampOf(q.get('at'));
    const page = await readPage(running(ctx), {
      table,
      prefix: text(q, 'prefix', ''),
      after: after === null ? undefined : text(q, 'after'),
      at,
      limit: limitOf(q),
    });
    sendJson(response, 200, page);
  },
  '/console/api/data/history': (ctx, q, response, viewer) => {
    const table = text(q, 'table');
    requireRead(viewer, table);
    sendJson(response, 200, keyHistory(running(ctx), table, text(q, 'key'), limitOf(q)));
  },
  '/console/api/events': (ctx, _q, response) => {
    if (!ctx.telemetry.subscribe(response)) {
      sendJson(response, 503, { error: { code: 'OVERLOADED', message: 'too many event streams on this node' } });
    }
  },
};

/** Whether a path belongs to the console (the metrics server hands those to `serveConsole`). */
export function isConsolePath(path: string): boolean {
  return path === '/console' || path.startsWith('/console/');
}

/**
 * Answers one GET under `/console`: the one place every console request passes. It never rejects: a failure (a
 * client's bad query, a node that is not running, a vendor file missing from the installation) becomes a JSON error.
 */
export async function serveConsole(
  ctx: ConsoleContext,
  request: ConsoleRequest,
  response: ServerResponse,
): Promise<void> {
  try {
    await dispatch(ctx, request, response);
  } catch (error) {
    if (response.headersSent) {
      response.end();
      return;
    }
    const coded = isBasaltError(error) ? error : undefined;
    // A browser shows its login prompt on a 401 that names the scheme and realm.
    if (coded?.code === 'UNAUTHENTICATED') {
      response.setHeader('www-authenticate', `Basic realm="${CONSOLE_REALM}"`);
      ctx.onRefused?.(request.source, coded.message);
    }
    sendJson(response, statusOf(coded), {
      error: { code: coded?.code ?? 'INTERNAL', message: error instanceof Error ? error.message : String(error) },
    });
  }
}

function statusOf(coded: BasaltError | undefined): number {
  if (coded === undefined) return 500;
  switch (coded.code) {
    case 'INVALID_ARGUMENT':
      return 400;
    case 'UNAUTHENTICATED':
      return 401;
    case 'PERMISSION_DENIED':
      return 403;
    default:
      return coded.retryable ? 503 : 500;
  }
}

async function dispatch(ctx: ConsoleContext, request: ConsoleRequest, response: ServerResponse): Promise<void> {
  const { url } = request;
  const vendor = url.pathname.startsWith('/console/vendor/') ? vendorFile(url.pathname.slice(16)) : undefined;
  if (vendor !== undefined) {
    response.writeHead(200, {
      'content-type': vendor.type,
      'content-length': vendor.body.length,
      'cache-control': 'max-age=3600',
    });
    response.end(vendor.body);
    return;
  }
  const viewer = await consoleLogin(ctx.logins, request.source, request.authorization);
  const route = Object.hasOwn(ROUTES, url.pathname) ? ROUTES[url.pathname] : undefined;
  if (route === undefined) {
    sendJson(response, 404, { error: { code: 'NOT_FOUND', message: `no console resource ${url.pathname}` } });
    return;
  }
  await route(ctx, url.searchParams, response, viewer);
}

function running(ctx: ConsoleContext): BasaltNode {
  const node = ctx.nodeOf();
  if (node === undefined || !node.running) throw new BasaltError('NODE_UNAVAILABLE', 'the node is not running');
  return node;
}

function text(q: URLSearchParams, name: string, fallback?: string): string {
  const value = q.get(name) ?? fallback;
  if (value === undefined) throw invalidArgument(`missing query parameter ${name}`, { name });
  if (value.length > QUERY_TEXT_MAX) throw invalidArgument(`${name} is longer than ${QUERY_TEXT_MAX}`, { name });
  return value;
}

/** `limit`: an integer in [1, LIST_LIMIT_MAX], LIST_LIMIT_DEFAULT when absent. */
export function limitOf(q: URLSearchParams): number {
  const raw = q.get('limit');
  if (raw === null) return LIST_LIMIT_DEFAULT;
  const limit = Number(raw);
  if (!/^\d+$/.test(raw) || limit < 1 || limit > LIST_LIMIT_MAX) {
    throw invalidArgument(`limit is an integer in [1, ${LIST_LIMIT_MAX}]`, { limit: raw });
  }
  return limit;
}

/** `at`: milliseconds since the epoch or an ISO date; absent: now. */
export function timestampOf(raw: string | null) {
  if (raw === null || raw === '') return undefined;
  const ms = /^\d+$/.test(raw) ? Number(raw) : Date.parse(raw);
  if (!Number.isSafeInteger(ms) || ms < 1 || ms > PHYSICAL_MS_MAX) {
    throw invalidArgument('at is milliseconds since the epoch or an ISO date', { at: raw });
  }
  return hybridTimestamp(ms);
}

function send(response: ServerResponse, status: number, type: string, body: string): void {
  response.writeHead(status, {
    'content-type': type,
    'content-length': Buffer.byteLength(body),
    'cache-control': 'no-store',
    'x-content-type-options': 'nosniff',
  });
  response.end(body);
}

function sendJson(response: ServerResponse, status: number, body: unknown): void {
  send(response, status, 'application/json; charset=utf-8', `${JSON.stringify(body)}\n`);
}
