// What metrics and spans cost: the uncontended lock + unlock cycle on a Client without an
// OpenTelemetry SDK (the API's no-ops, what every user gets by default) and on one with the real SDK
// behind it (a MeterProvider with a reader, a TracerProvider sampling every span into a batch
// processor). Measured in interleaved blocks, so that the ratio holds while the machine's load
// drifts; besides the rate, the CPU time this process spends per cycle (the part telemetry adds to).
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, BatchSpanProcessor, type ReadableSpan, type SpanExporter } from '@opentelemetry/sdk-trace-base';
import { Client, Mutex, Session } from '../dist/index.js';
import { telemetryOf } from '../dist/metrics/telemetry.js';
import type { BenchContext } from './context.js';
import { summarize, type Summary } from './stats.js';

export interface TelemetryVariant {
  cycles: number;
  cyclesPerSec: number;
  latency: Summary;
  /** CPU time (user + system) of this process per cycle, in microseconds. */
  cpuUsPerCycle: number;
}

export interface TelemetryResult {
  /** No SDK: the @opentelemetry/api no-ops. */
  noSdk: TelemetryVariant;
  /** The metrics SDK only (a MeterProvider, no TracerProvider). */
  metricsOnly: TelemetryVariant;
  /** The real SDK: every instrument and span recorded. */
  sdk: TelemetryVariant;
  /** sdk.cyclesPerSec / noSdk.cyclesPerSec: 1 means no measurable cost. */
  rateRatio: number;
  /** sdk.cpuUsPerCycle / noSdk.cpuUsPerCycle. */
  cpuRatio: number;
  /** Data points and spans the SDK variant produced (proof that it recorded). */
  recorded: { metrics: number; spans: number };
  /**
   * The telemetry calls of one cycle alone, without etcd (nanoseconds of CPU per cycle): what the
   * acquire path and the two RPC wrappers call, with each client's Telemetry. Precise where the
   * cycle rate is dominated by round trips and their noise.
   */
  hotPathNs: { noSdk: number; metricsOnly: number; sdk: number };
}

/** A metric reader nobody scrapes during the run: recording is the hot-path cost, collecting is not. */
class IdleReader extends MetricReader {
  protected override async onShutdown(): Promise<void> {}
  protected override async onForceFlush(): Promise<void> {}
}

/** Counts the spans it is handed and drops them, as a network exporter would after sending. */
class CountingExporter implements SpanExporter {
  spans = 0;
  export(spans: ReadableSpan[], done: (r: { code: 0 }) => void): void {
    this.spans += spans.length;
    done({ code: 0 });
  }
  async shutdown(): Promise<void> {}
}

const BLOCK = 25;

/**
 * CPU nanoseconds per cycle of exactly the telemetry calls an uncontended lock + unlock makes: the
 * acquire probe (made only when something records), its hold record, and the two RPC timings
 * (Txn to enqueue, Txn to release), each behind the same checks as in the library.
 */
function hotPath(client: Client, quick: boolean): number {
  const tel = telemetryOf(client);
  const rpc = client.telemetry; // the client's own instruments: its calls' durations
  const n = quick ? 20_000 : 200_000;
  const run = (count: number): void => {
    for (let i = 0; i < count; i++) {
      const probe = tel.startAcquire('lock', 'bench/lock');
      if (rpc.metricsOn) rpc.rpc('/etcdserverpb.KV/Txn', performance.now());
      probe?.enqueued(true);
      const hold = probe?.held(BigInt(i));
      if (rpc.metricsOn) rpc.rpc('/etcdserverpb.KV/Txn', performance.now());
      hold?.ended(undefined);
    }
  };
  run(n / 10); // warm-up
  const c0 = process.cpuUsage();
  run(n);
  const c = process.cpuUsage(c0);
  return ((c.user + c.system) * 1000) / n;
}

export async function runTelemetry(ctx: BenchContext): Promise<TelemetryResult> {
  const budgetMs = ctx.quick ? 2400 : 12_000;
  const maxPerVariant = ctx.quick ? 600 : 6000;
  const reader = new IdleReader();
  const meterProvider = new MeterProvider({ readers: [reader] });
  const exporter = new CountingExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(exporter)] });
  const plain = new Client({ endpoints: ctx.endpoints });
  const traced = new Client({ endpoints: ctx.endpoints, meterProvider, tracerProvider });
  const metered = new Client({ endpoints: ctx.endpoints, meterProvider: new MeterProvider({ readers: [new IdleReader()] }) });
  const sessions: Session[] = [];
  try {
    if (plain.telemetry.metricsOn || telemetryOf(plain).tracing())
      throw new Error('the no-SDK client records: a global SDK is registered in this process');
    const variants = { noSdk: plain, metricsOnly: metered, sdk: traced };
    type Variant = keyof typeof variants;
    const names = Object.keys(variants) as Variant[];
    const mutex = {} as Record<Variant, Mutex>;
    for (const n of names) {
      const s = await Session.create(variants[n]);
      sessions.push(s);
      mutex[n] = new Mutex(s, `${ctx.prefix}telemetry/${n}`);
    }
    const cycle = async (n: Variant): Promise<void> => {
      const h = await mutex[n].lock();
      await h.unlock();
    };
    for (const n of names) for (let i = 0; i < 20; i++) await cycle(n);
    const samples: Record<Variant, number[]> = { noSdk: [], metricsOnly: [], sdk: [] };
    const spent: Record<Variant, number> = { noSdk: 0, metricsOnly: 0, sdk: 0 };
    const cpu: Record<Variant, number> = { noSdk: 0, metricsOnly: 0, sdk: 0 };
    const start = performance.now();
    // Rotated each round: work one variant leaves behind (GC, timers) must not always land on the same next one.
    for (let round = 0; performance.now() - start < budgetMs && names.some((n) => samples[n].length < maxPerVariant); round++) {
      for (const n of [...names.slice(round % names.length), ...names.slice(0, round % names.length)]) {
        if (samples[n].length >= maxPerVariant) continue;
        const c0 = process.cpuUsage();
        const t0 = performance.now();
        for (let i = 0; i < BLOCK; i++) {
          const t = performance.now();
          await cycle(n);
          samples[n].push(performance.now() - t);
        }
        spent[n] += performance.now() - t0;
        const c = process.cpuUsage(c0);
        cpu[n] += c.user + c.system;
      }
    }
    const result = (n: Variant): TelemetryVariant => ({
      cycles: samples[n].length,
      cyclesPerSec: (samples[n].length * 1000) / spent[n],
      latency: summarize(samples[n]),
      cpuUsPerCycle: cpu[n] / samples[n].length,
    });
    const noSdk = result('noSdk');
    const metricsOnly = result('metricsOnly');
    const sdk = result('sdk');
    const hotPathNs = { noSdk: hotPath(plain, ctx.quick), metricsOnly: hotPath(metered, ctx.quick), sdk: hotPath(traced, ctx.quick) };
    await tracerProvider.forceFlush();
    const { resourceMetrics } = await reader.collect();
    const points = resourceMetrics.scopeMetrics.flatMap((s) => s.metrics).reduce((sum, m) => sum + m.dataPoints.length, 0);
    const out: TelemetryResult = {
      noSdk,
      metricsOnly,
      sdk,
      rateRatio: sdk.cyclesPerSec / noSdk.cyclesPerSec,
      cpuRatio: sdk.cpuUsPerCycle / noSdk.cpuUsPerCycle,
      recorded: { metrics: points, spans: exporter.spans },
      hotPathNs,
    };
    const row = (label: string, v: TelemetryVariant): string =>
      `${label}: ${v.cyclesPerSec.toFixed(0)} cycles/s, p50 ${v.latency.p50.toFixed(2)} ms, ${v.cpuUsPerCycle.toFixed(0)} µs CPU per cycle (${v.cycles} cycles)`;
    ctx.log(`telemetry: ${row('no SDK', noSdk)}`);
    ctx.log(`telemetry: ${row('metrics SDK only', metricsOnly)}`);
    ctx.log(`telemetry: ${row('metrics and traces SDK', sdk)}`);
    ctx.log(
      `telemetry: with/without SDK: rate x${out.rateRatio.toFixed(3)}, CPU per cycle x${out.cpuRatio.toFixed(3)} ` +
        `(the SDK recorded ${points} data points and ${exporter.spans} spans)`,
    );
    ctx.log(
      `telemetry: the telemetry calls of one cycle alone: ${hotPathNs.noSdk.toFixed(0)} ns without an SDK, ` +
        `${hotPathNs.metricsOnly.toFixed(0)} ns with metrics, ${hotPathNs.sdk.toFixed(0)} ns with metrics and traces`,
    );
    return out;
  } finally {
    for (const s of sessions) await s.close().catch(() => {});
    await plain.close();
    await traced.close();
    await metered.close();
    await meterProvider.shutdown();
    await tracerProvider.shutdown();
  }
}
