// What the low-level client records itself: the duration of its calls, failovers and resumed
// watches. The locks' and elections' metrics live above (metrics/telemetry.ts), attached per client.
import {
  createNoopMeter,
  metrics,
  ValueType,
  type Attributes,
  type Counter,
  type Histogram,
  type MeterProvider,
  type TracerProvider,
} from '@opentelemetry/api';
import type { DiagnosticsOptions, Logger } from '../diagnostics.js';
import { ClientClosedError, DeadlineExceededError, EtcdError, UnavailableError } from './errors.js';
import { CLIENT_METRIC, RPC_ATTR, SCOPE } from './names.js';

/**
 * Where the client's metrics and spans go, and whether lock and election names may appear in them.
 * Part of {@link ClientOptions}.
 */
export interface TelemetryOptions {
  /**
   * The OpenTelemetry MeterProvider to record metrics into. Default: the global one
   * (`metrics.getMeterProvider()` of `@opentelemetry/api`) as it is when the Client is created, a
   * no-op until an SDK registers one: register it before creating the Client.
   */
  meterProvider?: MeterProvider;
  /**
   * The OpenTelemetry TracerProvider for spans. Default: the global one (an SDK registered later is
   * picked up too).
   */
  tracerProvider?: TracerProvider;
  /**
   * Whether lock and election names go into metric and span attributes (`etcd_concurrency.name`).
   * Default false: names like `locks/card-8801` are unbounded, and every distinct name would be a
   * new time series. `true` records the name as is; a function maps a name to a bounded label (for
   * example `(n) => n.split('/')[0]`) or to undefined to leave it out.
   */
  nameAttribute?: boolean | ((name: string) => string | undefined);
}

// Bucket boundaries in seconds. The SDK's defaults are made for milliseconds.
export const RPC_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10];

const NOOP_HISTOGRAM = createNoopMeter().createHistogram('noop');

/** gRPC status codes by number, as `rpc.response.status_code` spells them (grpc's doc/statuscodes.md). */
const GRPC_STATUS = [
  'OK',
  'CANCELLED',
  'UNKNOWN',
  'INVALID_ARGUMENT',
  'DEADLINE_EXCEEDED',
  'NOT_FOUND',
  'ALREADY_EXISTS',
  'PERMISSION_DENIED',
  'RESOURCE_EXHAUSTED',
  'FAILED_PRECONDITION',
  'ABORTED',
  'OUT_OF_RANGE',
  'UNIMPLEMENTED',
  'INTERNAL',
  'UNAVAILABLE',
  'DATA_LOSS',
  'UNAUTHENTICATED',
] as const;

/** One per Client: its own instruments, and the options the layers above record with. */
export class ClientTelemetry {
  /** True when the meter records (an SDK is behind it): every metric call checks this first. */
  readonly metricsOn: boolean;
  readonly rpcDuration: Histogram;
  readonly watchResumes: Counter;
  readonly failovers: Counter;
  /** Txns per shared request (coalescer.ts), recorded for requests of two or more. */
  readonly txnBatchSize: Histogram;
  /** The client's logger (ClientOptions.logger), for the diagnostics events (src/diagnostics.ts). */
  readonly logger?: Logger;
  private readonly rpcAttrs = new Map<string, Attributes>();

  constructor(
    /** The providers and name policy, as given: the layers above record with them too. */
    readonly options: TelemetryOptions & DiagnosticsOptions = {},
  ) {
    if (options.logger) this.logger = options.logger;
    const meter = (options.meterProvider ?? metrics.getMeterProvider()).getMeter(SCOPE);
    this.rpcDuration = meter.createHistogram(CLIENT_METRIC.rpcDuration, {
      description: 'Duration of a unary gRPC call to etcd, retries on other endpoints included',
      unit: 's',
      advice: { explicitBucketBoundaries: RPC_BUCKETS },
    });
    this.watchResumes = meter.createCounter(CLIENT_METRIC.watchResumes, {
      description: 'Times the shared watch stream broke while carrying watches, which were resumed on a new stream',
      unit: '{resume}',
      valueType: ValueType.INT,
    });
    this.failovers = meter.createCounter(CLIENT_METRIC.failovers, {
      description: 'Moves of the client to the next endpoint after a failure',
      unit: '{failover}',
      valueType: ValueType.INT,
    });
    this.txnBatchSize = meter.createHistogram(CLIENT_METRIC.txnBatchSize, {
      description: "Txns of the library's own sent together as one request (nested Txns), per request of two or more",
      unit: '{txn}',
      valueType: ValueType.INT,
      advice: { explicitBucketBoundaries: [2, 4, 8, 16, 32, 64, 128] },
    });
    this.metricsOn = this.rpcDuration !== NOOP_HISTOGRAM;
  }

  /** A unary call to `path` (`/etcdserverpb.KV/Range`) that started at monotonic `startedAt` ended, failing with `err` if given. */
  rpc(path: string, startedAt: number, err?: unknown): void {
    const code = err === undefined ? 'OK' : statusOf(err);
    const id = `${path}|${code}`;
    let a = this.rpcAttrs.get(id);
    if (!a) {
      // Semantic conventions v1.40.0: the fully-qualified method, the status as a string, and
      // error.type (the status again) on every status but OK, which gRPC clients count as errors.
      a = Object.freeze({
        [RPC_ATTR.rpcSystemName]: 'grpc',
        [RPC_ATTR.rpcMethod]: path.startsWith('/') ? path.slice(1) : path,
        [RPC_ATTR.rpcResponseStatusCode]: code,
        ...(code === 'OK' ? {} : { [RPC_ATTR.errorType]: code }),
      });
      this.rpcAttrs.set(id, a);
    }
    this.rpcDuration.record((performance.now() - startedAt) / 1000, a);
  }
}

/**
 * The gRPC status of a failed call, as its name: the failure's own status when the server (or the
 * transport) gave one, else what our error class stands for; an abort (the caller's signal) is CANCELLED.
 */
function statusOf(err: unknown): (typeof GRPC_STATUS)[number] {
  const n = err instanceof EtcdError ? err.grpcCode : (err as { code?: unknown } | undefined)?.code;
  if (typeof n === 'number') return GRPC_STATUS[n] ?? 'UNKNOWN';
  if (err instanceof ClientClosedError || err instanceof DOMException) return 'CANCELLED';
  if (err instanceof DeadlineExceededError) return 'DEADLINE_EXCEEDED';
  if (err instanceof UnavailableError) return 'UNAVAILABLE';
  return 'UNKNOWN';
}
