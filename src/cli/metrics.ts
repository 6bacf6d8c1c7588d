// `--metrics <host:port>`: the library's instruments in Prometheus text format, for `lock`, `elect`
// and `inspect --watch`. The OpenTelemetry SDK and its Prometheus exporter are imported only here,
// and only when the flag is given: the library itself records through @opentelemetry/api alone.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { MeterProvider } from '@opentelemetry/api';
import { CliError, EXIT, UsageError, warn } from './output.js';

export const METRICS_HELP = `  --metrics <host:port>   serve this process's metrics (locks held and waited for, wait and hold
                          times, losses, leadership, keepalive round trips, gRPC calls) in
                          Prometheus text format at http://<host:port>/metrics; a port alone
                          listens on 127.0.0.1 (loopback); port 0 picks a free one. The URL is
                          printed on stderr`;

/** A served metrics endpoint: where, the MeterProvider to give the Client, and how to stop it. */
export interface MetricsServer {
  /** `http://host:port/metrics`, with the port actually bound. */
  url: string;
  /** Pass to `new Client({ meterProvider })` (connect()/connectTo() take it as an extra option). */
  meterProvider: MeterProvider;
  /** Stops the HTTP server and the MeterProvider. Idempotent. */
  close(): Promise<void>;
}

/** serveMetrics, then the URL on stderr as `etcd-concurrency: metrics at <url>` (port 0 picks one: this line tells which). */
export async function startMetrics(hostPort: string): Promise<MetricsServer> {
  const served = await serveMetrics(hostPort);
  warn(`metrics at ${served.url}`);
  return served;
}

/**
 * `--metrics` as given: `host:port`, `[v6]:port`, `:port` or a port alone (both loopback). Checked
 * before anything is started, so a typo is a usage error (exit 2).
 */
export function metricsAddress(raw: string): { host: string; port: number } {
  const m = /^(?:(?:\[([0-9a-fA-F:.]+)\]|([^:[\]\s]*)):)?([0-9]{1,5})$/.exec(raw.trim());
  const port = m ? Number(m[3]) : NaN;
  if (!m || !(port >= 0 && port <= 65535)) {
    throw new UsageError(`--metrics must be host:port or a port (e.g. 127.0.0.1:9464 or 9464), got "${raw}"`);
  }
  const host = m[1] ?? (m[2] === undefined || m[2] === '' ? '127.0.0.1' : m[2]);
  return { host, port };
}

/** The packages --metrics needs: optional peer dependencies, installed by whoever uses --metrics. */
export const METRICS_PACKAGES = ['@opentelemetry/sdk-metrics', '@opentelemetry/exporter-prometheus'] as const;

/** The OpenTelemetry SDK and Prometheus exporter, loaded only when --metrics is used; a CliError naming them when missing. */
async function loadSdk(): Promise<[typeof import('@opentelemetry/sdk-metrics'), typeof import('@opentelemetry/exporter-prometheus')]> {
  try {
    return await Promise.all([import('@opentelemetry/sdk-metrics'), import('@opentelemetry/exporter-prometheus')]);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ERR_MODULE_NOT_FOUND') throw err;
    throw new CliError(
      `--metrics needs the OpenTelemetry SDK, which is not installed: run npm install ${METRICS_PACKAGES.join(' ')} (next to etcd-concurrency, or globally beside a global install)`,
      EXIT.usage,
      { cause: err },
    );
  }
}

/**
 * Starts a MeterProvider with a Prometheus exporter and an HTTP server for it on `hostPort`
 * (see {@link metricsAddress}); `/metrics` answers a scrape, anything else 404.
 */
export async function serveMetrics(hostPort: string): Promise<MetricsServer> {
  const { host, port } = metricsAddress(hostPort);
  const [{ MeterProvider }, { PrometheusExporter }] = await loadSdk();
  const exporter = new PrometheusExporter({ preventServerStart: true });
  const provider = new MeterProvider({ readers: [exporter] });
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?', 1)[0];
    if (path === '/metrics' && (req.method === 'GET' || req.method === 'HEAD')) return exporter.getMetricsRequestHandler(req, res);
    res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' });
    res.end('not found: metrics are at /metrics\n');
  });
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (err) {
    await provider.shutdown().catch(() => {});
    const e = err as NodeJS.ErrnoException;
    throw new CliError(`--metrics ${hostPort}: cannot listen on ${host}:${port} (${e.code ?? e.message})`, EXIT.error, { cause: err });
  }
  // A scrape endpoint must not keep a finished command alive.
  server.unref();
  const bound = server.address() as AddressInfo;
  const shownHost = bound.family === 'IPv6' ? `[${bound.address}]` : bound.address;
  let closing: Promise<void> | undefined;
  return {
    url: `http://${shownHost}:${bound.port}/metrics`,
    meterProvider: provider,
    close() {
      closing ??= (async () => {
        server.closeAllConnections();
        await new Promise<void>((resolve) => server.close(() => resolve()));
        await provider.shutdown().catch(() => {});
      })();
      return closing;
    },
  };
}
