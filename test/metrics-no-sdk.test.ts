// OpenTelemetry without an SDK, on real etcd: the hot path calls no instrument and starts no span,
// and the global providers are used once an SDK registers them (also one registered before the
// Client).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { metrics, trace, type Attributes } from '@opentelemetry/api';
import { MeterProvider, MetricReader, DataPointType, type DataPoint, type Histogram, type MetricData } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { Client, Election, Mutex, Session, type ClientOptions } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { ATTR, METRIC } from '../src/metrics/names.js';
import { telemetryOf } from '../src/metrics/telemetry.js';
import { aborted, assertNoKeys, closeAll, etcdForFile, settledOrHang, track, waitFor } from './helpers.js';

const ROOT = 'test/metrics-no-sdk/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

/** A MetricReader we collect from on demand. */
class CollectingReader extends MetricReader {
  protected override async onShutdown(): Promise<void> {}
  protected override async onForceFlush(): Promise<void> {}
}

/** The real SDK for one test: a MeterProvider and a TracerProvider, and a Client recording into them. */
class Sdk implements AsyncDisposable {
  readonly reader = new CollectingReader();
  readonly meterProvider = new MeterProvider({ readers: [this.reader] });
  readonly spans = new InMemorySpanExporter();
  readonly tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(this.spans)] });
  readonly client: Client;

  constructor(options: ClientOptions = {}) {
    this.client = new Client({
      endpoints: etcd.endpoints,
      meterProvider: this.meterProvider,
      tracerProvider: this.tracerProvider,
      ...options,
    });
  }

  async metrics(): Promise<Map<string, MetricData>> {
    const { resourceMetrics, errors } = await this.reader.collect();
    assert.deepEqual(errors, []);
    return new Map(resourceMetrics.scopeMetrics.flatMap((s) => s.metrics).map((m) => [m.descriptor.name, m]));
  }

  /** The data points of `name` whose attributes include every pair of `attrs`. */
  async points(name: string, attrs: Attributes = {}): Promise<DataPoint<unknown>[]> {
    const m = (await this.metrics()).get(name);
    if (!m) return [];
    return (m.dataPoints as DataPoint<unknown>[]).filter((p) => Object.entries(attrs).every(([k, v]) => p.attributes[k] === v));
  }

  /** A sum or gauge's value over the matching points (0 if none); a histogram's count. */
  async value(name: string, attrs: Attributes = {}): Promise<number> {
    const m = (await this.metrics()).get(name);
    if (!m) return 0;
    let total = 0;
    for (const p of await this.points(name, attrs)) {
      total += m.dataPointType === DataPointType.HISTOGRAM ? (p.value as Histogram).count : (p.value as number);
    }
    return total;
  }

  /** Resolves once `name` matching `attrs` reads `want` (polling collect(): metrics announce nothing). */
  async until(name: string, attrs: Attributes, want: number): Promise<void> {
    await waitFor(async () => (await this.value(name, attrs)) === want, `${name} ${JSON.stringify(attrs)} = ${want}`);
  }

  finished(name: string): ReadableSpan[] {
    return this.spans.getFinishedSpans().filter((s) => s.name === name);
  }

  /** Every attribute set recorded anywhere: data points, spans and span events. */
  async allAttributes(): Promise<Attributes[]> {
    const out: Attributes[] = [];
    for (const m of (await this.metrics()).values()) for (const p of m.dataPoints) out.push(p.attributes);
    for (const s of this.spans.getFinishedSpans()) {
      out.push(s.attributes);
      for (const e of s.events) out.push(e.attributes ?? {});
    }
    return out;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.client.close();
    await this.meterProvider.shutdown();
    await this.tracerProvider.shutdown();
  }
}

const LOCK = { [ATTR.kind]: 'lock' };

/**
 * Counts every call the library makes on a client's instruments (record, add) and its tracer
 * (startSpan), through counting stand-ins put on that client's telemetry object (the library reads
 * its instruments from it at each call); `restore()` puts the originals back.
 */
function spyOnTelemetry(c: Client): { calls: Map<string, number>; restore(): void } {
  // The client's own instruments (calls, failovers, watch resumes) on its telemetry, the locks' on theirs.
  const own = new Set(['rpcDuration', 'watchResumes', 'failovers']);
  type Fields = Record<string, Record<string, (...args: unknown[]) => unknown>>;
  const telOf = (field: string): Fields => (own.has(field) ? c.telemetry : telemetryOf(c)) as unknown as Fields;
  const calls = new Map<string, number>();
  const undo: (() => void)[] = [];
  // Each of this client's instruments is replaced by a counting stand-in of its own: the no-op
  // instruments are singletons of @opentelemetry/api, shared with every other client of this process.
  const wrap = (field: string, method: string, label: string): void => {
    const tel = telOf(field);
    const original = tel[field]!;
    const standIn = Object.create(original) as Record<string, (...args: unknown[]) => unknown>;
    standIn[method] = (...args: unknown[]) => {
      calls.set(label, (calls.get(label) ?? 0) + 1);
      return original[method]!.apply(original, args);
    };
    Object.defineProperty(tel, field, { configurable: true, writable: true, value: standIn });
    undo.push(() => Object.defineProperty(tel, field, { configurable: true, writable: true, value: original }));
  };
  const instruments = {
    acquireDuration: 'record',
    holdDuration: 'record',
    keepaliveDuration: 'record',
    rpcDuration: 'record',
    held: 'add',
    waiting: 'add',
    losses: 'add',
    leader: 'add',
    transitions: 'add',
    sessionLosses: 'add',
    watchResumes: 'add',
    failovers: 'add',
  } as const;
  for (const [name, method] of Object.entries(instruments)) wrap(name, method, `${name}.${method}`);
  wrap('tracer', 'startSpan', 'tracer.startSpan');
  return { calls, restore: () => undo.reverse().forEach((u) => u()) };
}

/** A lock cycle, a wait behind a holder, a release, a loss to a delete and a closed session: every hot path. */
async function exercise(c: Client, p: string): Promise<void> {
  const [a, b] = await Promise.all([Session.create(c), Session.create(c)]);
  try {
    const holder = await new Mutex(a!, `${p}lock`).lock();
    const waiter = track(new Mutex(b!, `${p}lock`).lock());
    await waitFor(async () => (await client.getPrefix(`${p}lock/`)).kvs.length === 2, 'the waiter queued');
    await holder.unlock();
    const h = await settledOrHang(waiter, 'the waiter gets the lock');
    const lost = aborted(h.signal);
    await client.delete(h.key);
    await lost;
    await h.unlock();
    await (await new Election(a!, `${p}election`).campaign('v')).resign();
  } finally {
    await closeAll([a, b]);
  }
}

describe('without an SDK', () => {
  it('the hot path makes no OpenTelemetry call: no probe, no instrument records, no span starts', async () => {
    const p = fresh('noop');
    const c = new Client({ endpoints: etcd.endpoints });
    const spy = spyOnTelemetry(c);
    try {
      assert.equal(c.telemetry.metricsOn, false);
      assert.equal(telemetryOf(c).metricsOn, false);
      assert.equal(telemetryOf(c).tracing(), false);
      assert.equal(telemetryOf(c).startAcquire('lock', `${p}lock`), undefined);
      await exercise(c, p);
      assert.deepEqual(Object.fromEntries(spy.calls), {}, 'no instrument or tracer was called');
    } finally {
      spy.restore();
      await c.close();
    }
    // The spy sees calls where there are some: the same paths with an SDK call every instrument used.
    await using sdk = new Sdk();
    const counted = spyOnTelemetry(sdk.client);
    try {
      await exercise(sdk.client, `${p}sdk/`);
      for (const label of [
        'acquireDuration.record',
        'holdDuration.record',
        'rpcDuration.record',
        'held.add',
        'waiting.add',
        'losses.add',
        'leader.add',
        'tracer.startSpan',
      ]) {
        assert.ok((counted.calls.get(label) ?? 0) > 0, `${label} called with an SDK: ${JSON.stringify(Object.fromEntries(counted.calls))}`);
      }
    } finally {
      counted.restore();
    }
    await assertNoKeys(client, p);
  });

  it('the global providers are used once an SDK registers them (and a provider registered earlier than the Client)', async () => {
    const p = fresh('global');
    const sdk = new Sdk(); // its own client is unused here
    assert.ok(metrics.setGlobalMeterProvider(sdk.meterProvider));
    assert.ok(trace.setGlobalTracerProvider(sdk.tracerProvider));
    try {
      const c = new Client({ endpoints: etcd.endpoints });
      const s = await Session.create(c);
      try {
        assert.equal(c.telemetry.metricsOn, true);
        assert.equal(telemetryOf(c).metricsOn, true);
        await (await new Mutex(s, `${p}lock`).lock()).unlock();
        assert.equal(await sdk.value(METRIC.acquireDuration, { ...LOCK, [ATTR.result]: 'acquired' }), 1);
        assert.equal(sdk.finished('lock.acquire').length, 1);
      } finally {
        await closeAll([s]);
        await c.close();
      }
    } finally {
      metrics.disable();
      trace.disable();
      await sdk[Symbol.asyncDispose]();
    }
  });
});
