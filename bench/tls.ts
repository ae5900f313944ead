/**
 * `npm run bench -- --tls`: the Basalt nodes run with `--certs-dir` (TLS 1.3 on the peer, client and metrics ports,
 * users checked), made by `basalt cluster --tls`'s helpers under the cluster's directory, and every client of the
 * bench connects over TLS as the local admin by its client certificate. One process-wide setting, read by every
 * place that connects or scrapes; the driver threads get it in their workerData.
 */
import { readFileSync } from 'node:fs';
import { get as httpsGet } from 'node:https';
import { join } from 'node:path';
import { CERT_FILES } from '../src/cli/certs.js';
import type { ConnectOptions } from '../src/client/remote.js';

/** PEM text: plain data, so that it crosses to a worker thread. */
export interface BenchTls {
  readonly ca: string;
  readonly cert: string;
  readonly key: string;
}

let current: BenchTls | undefined;

export function useBenchTls(tls: BenchTls | undefined): void {
  current = tls;
}

export function benchTls(): BenchTls | undefined {
  return current;
}

/** The options every bench `connect` passes: none without `--tls`. */
export function benchConnectOptions(): ConnectOptions {
  return current ?? {};
}

/** The admin's material from a `localClientCerts` directory. */
export function readBenchTls(clientDir: string, user: string): BenchTls {
  const read = (file: string): string => readFileSync(join(clientDir, file), 'utf8');
  return {
    ca: read(CERT_FILES.caCert),
    cert: read(CERT_FILES.clientCert(user)),
    key: read(CERT_FILES.clientKey(user)),
  };
}

/** GET an https:// metrics URL trusting the bench CA. */
export function httpsText(url: string, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const request = httpsGet(url, { ca: current?.ca, timeout: timeoutMs }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (body += chunk));
      response.on('end', () =>
        response.statusCode === 200 ? resolve(body) : reject(new Error(`${url}: HTTP ${response.statusCode}`)),
      );
    });
    request.on('timeout', () => request.destroy(new Error(`${url}: no answer within ${timeoutMs} ms`)));
    request.on('error', reject);
  });
}
