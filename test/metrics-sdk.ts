// The real OpenTelemetry SDK for one metrics test (test/metrics*.test.ts): a MeterProvider and a
// TracerProvider, collected on demand, and a Client recording into them.
import assert from 'node:assert/strict';
import type { Attributes } from '@opentelemetry/api';
import { DataPointType, type DataPoint, type Histogram, MeterProvider, MetricReader, type MetricData } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { Client, type ClientOptions } from '../src/index.js';
import { waitFor } from './helpers.js';

/** A MetricReader we collect from on demand. */
export class CollectingReader extends MetricReader {
  protected override async onShutdown(): Promise<void> {}
  protected override async onForceFlush(): Promise<void> {}
}

/** The real SDK for one test: a MeterProvider and a TracerProvider, and a Client recording into them. */
export class Sdk implements AsyncDisposable {
  readonly reader = new CollectingReader();
  readonly meterProvider = new MeterProvider({ readers: [this.reader] });
  readonly spans = new InMemorySpanExporter();
  readonly tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(this.spans)] });
  readonly client: Client;

  constructor(endpoints: readonly string[], options: ClientOptions = {}) {
    this.client = new Client({
      endpoints: [...endpoints],
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
