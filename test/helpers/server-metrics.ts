// etcd's own Prometheus metrics: calls started, answered and in flight, watchers, waiters blocked.
import { waitFor } from './waiting.js';

/**
 * The value of one of etcd's Prometheus counters (`<clientUrl>/metrics`), summed over the lines whose
 * labels contain every `labels` pair; 0 when etcd has not exported it yet.
 */
export async function metric(clientUrl: string, name: string, labels: Record<string, string> = {}): Promise<number> {
  const text = await (await fetch(`${clientUrl}/metrics`)).text();
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!(line.startsWith(`${name}{`) || line.startsWith(`${name} `))) continue;
    if (!want.every((w) => line.includes(w))) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

/** How many calls (or streams) of a gRPC method etcd has started: `grpc_server_started_total`. */
export function grpcStarted(clientUrl: string, method: string): Promise<number> {
  return metric(clientUrl, 'grpc_server_started_total', {
    grpc_method: method,
    grpc_type: method === 'Watch' || method === 'LeaseKeepAlive' ? 'bidi_stream' : 'unary',
  });
}

/** How many messages etcd has received on a gRPC method's streams (e.g. keepalive renewals). */
export function grpcReceived(clientUrl: string, method: string): Promise<number> {
  return metric(clientUrl, 'grpc_server_msg_received_total', { grpc_method: method });
}

/**
 * One scrape of etcd's metrics: watchers open (`etcd_debugging_mvcc_watcher_total`), unary calls
 * started and not yet answered, and Txns answered.
 */
export async function serverState(clientUrl: string): Promise<{ watchers: number; inFlight: number; txns: number }> {
  const text = await (await fetch(`${clientUrl}/metrics`)).text();
  let watchers = 0;
  let inFlight = 0;
  let txns = 0;
  for (const line of text.split('\n')) {
    const v = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (line.startsWith('etcd_debugging_mvcc_watcher_total')) watchers += v;
    else if (!line.includes('grpc_type="unary"')) continue;
    else if (line.startsWith('grpc_server_started_total{')) inFlight += v;
    else if (line.startsWith('grpc_server_handled_total{')) {
      inFlight -= v;
      if (line.includes('grpc_method="Txn"')) txns += v;
    }
  }
  return { watchers, inFlight, txns };
}

/**
 * Resolves once etcd has at least `n` more watchers open than `base` and no unary call in flight:
 * `n` waiters blocked on their watch, with whatever they sent before (enqueue, look-up, check)
 * answered. How many calls a waiter makes first is the library's business (a short queue's look-up
 * rides on the enqueue, a watch kept from the last wait needs no check), so tests wait on this.
 * `signal` stops the looking (the wait rejects with its reason), e.g. once the waiter settled instead.
 */
export async function waitersBlocked(
  clientUrl: string,
  base: number,
  n: number,
  what = `${n} waiter(s) blocked on a watch`,
  signal?: AbortSignal,
): Promise<void> {
  // Twice in a row: one scrape could fall between a watch being confirmed and the check it leads to.
  let quiet = 0;
  await waitFor(
    async () => {
      const s = await serverState(clientUrl);
      quiet = s.watchers >= base + n && s.inFlight === 0 ? quiet + 1 : 0;
      return quiet >= 2;
    },
    what,
    { signal },
  );
}

/** How many calls of a unary gRPC method etcd has answered: `grpc_server_handled_total`. */
export function grpcHandled(clientUrl: string, method: string): Promise<number> {
  return metric(clientUrl, 'grpc_server_handled_total', { grpc_method: method, grpc_type: 'unary' });
}
