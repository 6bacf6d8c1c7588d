// Shared helpers for the benchmark phases: latency summaries, bounded loops, RPC counting, tables.
import { runInNewContext } from 'node:vm';
import { setFlagsFromString } from 'node:v8';
import type { Client } from '../dist/index.js';

/** Latency summary in milliseconds. */
export interface Summary {
  n: number;
  mean: number;
  p50: number;
  p99: number;
  min: number;
  max: number;
}

export function summarize(samples: readonly number[]): Summary {
  if (samples.length === 0) return { n: 0, mean: NaN, p50: NaN, p99: NaN, min: NaN, max: NaN };
  const s = [...samples].sort((a, b) => a - b);
  const pick = (q: number): number => s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
  return {
    n: s.length,
    mean: s.reduce((a, b) => a + b, 0) / s.length,
    p50: pick(0.5),
    p99: pick(0.99),
    min: s[0]!,
    max: s[s.length - 1]!,
  };
}

/** A bound on a measuring loop: stop at whichever comes first. */
export interface Budget {
  ms: number;
  maxIterations: number;
}

/** Runs `step` sequentially until the budget is spent; returns each step's latency in ms. */
export async function timedLoop(budget: Budget, step: (i: number) => Promise<unknown>): Promise<{ samples: number[]; elapsedMs: number }> {
  const samples: number[] = [];
  const start = performance.now();
  while (samples.length < budget.maxIterations && performance.now() - start < budget.ms) {
    const t = performance.now();
    await step(samples.length);
    samples.push(performance.now() - t);
  }
  return { samples, elapsedMs: performance.now() - start };
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Rejects with a clear message if `p` does not settle in time (a hang guard, not a measurement). */
export async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const guard = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`bench: ${what} did not finish within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, guard]);
  } finally {
    clearTimeout(timer);
  }
}

/** Runs `fn` over `items` with at most `limit` in flight. */
export async function pool<T, R>(items: readonly T[], limit: number, fn: (item: T, i: number) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

/**
 * Counts what a Client sends and receives, by wrapping this one instance (never the library):
 * unary RPCs by method, RPCs in flight, watch responses and the events they carry, and the bidi
 * streams opened (Watch, LeaseKeepAlive) with the messages they deliver.
 */
export class RpcCounter {
  /** Unary requests sent (a request of Txns sent together, see coalescer.ts, is one). */
  unary = 0;
  /** Txn requests, and the Txns they carried. */
  txnRequests = 0;
  txns = 0;
  inFlight = 0;
  readonly byMethod = new Map<string, number>();
  watchResponses = 0;
  watchEventResponses = 0;
  watchEvents = 0;
  watchCreated = 0;
  /** Create and cancel requests written on the Watch stream (each a request to etcd, like an RPC). */
  watchCreateRequests = 0;
  watchCancelRequests = 0;
  readonly streamsOpened = new Map<string, number>();
  keepAliveResponses = 0;
  /** False when this client version offers no entry point to count streams on. */
  streamCounting = true;
  /** When set, every unary call and every watch event batch is logged with its times. */
  tracing = false;
  readonly unaryLog: { method: string; start: number; end: number }[] = [];
  readonly watchEventLog: number[] = [];

  constructor(client: Client) {
    // Bench-only instrumentation: the Client's connection and hubs are internal; we patch this
    // instance's methods (own properties shadow the prototype's), which the library never sees.
    // biome-ignore lint/suspicious/noExplicitAny: the bench counts RPCs by wrapping an internal method
    const conn = client.conn as any;
    // Every request passes through `call` once (`unary` is `call` with its duration recorded).
    const call = conn.call.bind(conn);
    conn.call = async (method: { path: string }, request: { success?: { requestTxn?: unknown }[] }, ...rest: unknown[]) => {
      this.unary++;
      this.inFlight++;
      const name = method.path.slice(method.path.lastIndexOf('/') + 1);
      this.byMethod.set(name, (this.byMethod.get(name) ?? 0) + 1);
      if (name === 'Txn') {
        this.txnRequests++;
        const nested = request.success?.length && request.success.every((o) => o.requestTxn) ? request.success.length : 0;
        this.txns += nested || 1;
      }
      const start = performance.now();
      try {
        return await call(method, request, ...rest);
      } finally {
        this.inFlight--;
        if (this.tracing) this.unaryLog.push({ method: name, start, end: performance.now() });
      }
    };
    // biome-ignore lint/suspicious/noExplicitAny: the bench counts watch events by wrapping an internal method
    const hub = client.watches as any;
    const onResponse = hub.onResponse.bind(hub);
    hub.onResponse = (s: unknown, r: { created?: boolean; events?: unknown[] }) => {
      this.watchResponses++;
      if (r.created) this.watchCreated++;
      const n = r.events?.length ?? 0;
      if (n > 0) {
        this.watchEventResponses++;
        this.watchEvents += n;
        if (this.tracing) this.watchEventLog.push(performance.now());
      }
      return onResponse(s, r);
    };
    // Streams: count what the connection opens, whichever internal entry point this version of the
    // client uses (`openStream(method)`, or a gRPC client from `streamClient()` / `active()`).
    const count = (path: string, s: { on(e: string, f: () => void): unknown; write?: (m: unknown) => boolean }): void => {
      const name = path.slice(path.lastIndexOf('/') + 1);
      this.streamsOpened.set(name, (this.streamsOpened.get(name) ?? 0) + 1);
      if (name === 'LeaseKeepAlive') s.on('data', () => this.keepAliveResponses++);
      if (name === 'Watch' && typeof s.write === 'function') {
        const write = s.write.bind(s);
        s.write = (m: unknown) => {
          const r = m as { createRequest?: unknown; cancelRequest?: unknown };
          if (r.createRequest) this.watchCreateRequests++;
          if (r.cancelRequest) this.watchCancelRequests++;
          return write(m);
        };
      }
    };
    const patched = new WeakSet<object>();
    const instrument = (g: { makeBidiStreamRequest: (...a: unknown[]) => { on(e: string, f: () => void): unknown } }): void => {
      if (patched.has(g)) return;
      patched.add(g);
      const open = g.makeBidiStreamRequest.bind(g);
      g.makeBidiStreamRequest = (path: unknown, ...rest: unknown[]) => {
        const s = open(path, ...rest);
        count(String(path), s);
        return s;
      };
    };
    if (typeof conn.openStream === 'function') {
      const openStream = conn.openStream.bind(conn);
      conn.openStream = async (method: { path: string }, ...a: unknown[]) => {
        const r = await openStream(method, ...a);
        count(method.path, r.stream);
        return r;
      };
    } else if (typeof conn.streamClient === 'function') {
      const streamClient = conn.streamClient.bind(conn);
      conn.streamClient = async (...a: unknown[]) => {
        const r = await streamClient(...a);
        instrument(r.client);
        return r;
      };
    } else if (typeof conn.active === 'function') {
      const active = conn.active.bind(conn);
      conn.active = (...a: unknown[]) => {
        const r = active(...a);
        instrument(r.client);
        return r;
      };
    } else {
      this.streamCounting = false;
    }
  }

  clearTrace(): void {
    this.unaryLog.length = 0;
    this.watchEventLog.length = 0;
  }

  snapshot(): { unary: number; watchEventResponses: number; watchEvents: number; byMethod: Record<string, number> } {
    return {
      unary: this.unary,
      watchEventResponses: this.watchEventResponses,
      watchEvents: this.watchEvents,
      byMethod: Object.fromEntries(this.byMethod),
    };
  }
}

/** The V8 garbage collector, without needing `node --expose-gc` on the command line. */
export const gc: () => void = (() => {
  const g = (globalThis as { gc?: () => void }).gc;
  if (g) return g;
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as () => void;
})();

/** Heap in use after a full collection (thrice: weak callbacks and finalizers run in between). */
export async function settledHeap(): Promise<number> {
  return (await settledMemory()).heapUsed;
}

/** heapUsed and arrayBuffers (Buffer memory outside the V8 heap) after full collections. */
export async function settledMemory(): Promise<{ heapUsed: number; arrayBuffers: number }> {
  for (let i = 0; i < 3; i++) {
    gc();
    await new Promise((r) => setImmediate(r));
  }
  const m = process.memoryUsage();
  return { heapUsed: m.heapUsed, arrayBuffers: m.arrayBuffers };
}

// ---- formatting ----

export const ms = (v: number): string => (Number.isFinite(v) ? (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2)) : '-');
/** `v` with `digits` decimals, or '-' when it is missing or not finite. */
export const fixed = (v: number | undefined, digits = 2): string => (v !== undefined && Number.isFinite(v) ? v.toFixed(digits) : '-');
export const num = (v: number, digits = 0): string =>
  Number.isFinite(v) ? v.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }) : '-';

/** A plain-text table with aligned columns. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]): string => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

/** Markdown version of the same table. */
export function markdownTable(header: string[], rows: string[][]): string {
  const esc = (c: string): string => c.replace(/\|/g, '\\|');
  return [
    `| ${header.map(esc).join(' | ')} |`,
    `|${header.map((_, i) => (i === 0 ? ' --- ' : ' ---: ')).join('|')}|`,
    ...rows.map((r) => `| ${r.map(esc).join(' | ')} |`),
  ].join('\n');
}
