// One Telemetry per Client, attached to it on first use (the client itself knows nothing of locks):
// the instruments and the tracer, from the providers in ClientOptions or the global ones of @opentelemetry/api. Until an application installs an SDK those are no-ops, and
// then nothing here allocates or records: every hot-path entry checks a boolean first.
import {
  context,
  createNoopMeter,
  metrics,
  ProxyTracerProvider,
  SpanStatusCode,
  trace,
  ValueType,
  type Attributes,
  type Context,
  type Counter,
  type Histogram,
  type ObservableResult,
  type Span,
  type Tracer,
  type UpDownCounter,
} from '@opentelemetry/api';
import type { AttachmentKey } from '../client/attachments.js';
import type { Client } from '../client/client.js';
import { RPC_BUCKETS, type TelemetryOptions } from '../client/telemetry.js';
import type { DiagnosticsOptions, Logger } from '../diagnostics.js';
import { SessionExpiredError } from '../errors.js';
import type { LossReason } from '../errors.js';
import { ATTR, LOST_EVENT, METRIC, SCOPE, SPAN, type AcquireResult, type Kind } from './names.js';

export type { TelemetryOptions };

/** Told when a holding ends: released or revoked (no reason), or lost (why). */
export interface HoldObserver {
  ended(loss: LossReason | undefined): void;
  /**
   * This holding ends (released or revoked) while `next`, a holding of this process sharing its key,
   * still holds: a leadership counted here is the same leadership there, and goes on being counted.
   * Called before ended().
   */
  handOver(next: HoldObserver): void;
}

/** What a session shows the time-left gauge. */
export interface TrackedSession {
  remainingMs(): number;
}

// Bucket boundaries in seconds. The SDK's defaults are made for milliseconds.
const WAIT_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600];

const NOOP_HISTOGRAM = createNoopMeter().createHistogram('noop');
/** The delegate of a ProxyTracerProvider that nobody has set: the no-op provider. */
const NOOP_TRACER_PROVIDER = new ProxyTracerProvider().getDelegate();

const EMPTY: Attributes = Object.freeze({});

/** Makes a client's Telemetry on first use, from the options the client was given. */
export const TELEMETRY: AttachmentKey<Telemetry, Client> = {
  name: 'telemetry',
  create: (client) => new Telemetry(client.telemetry.options),
};

/** The metrics and spans of the locks and elections on `client` (no-ops without an OpenTelemetry SDK). */
export function telemetryOf(client: Client): Telemetry {
  return client.attached(TELEMETRY);
}

/** The live clients per meter, observed by that meter's one time-left gauge. */
const timeLeftByMeter = new WeakMap<object, Set<Telemetry>>();

export class Telemetry {
  /** True when the meter records (an SDK is behind it): every metric call checks this first. */
  readonly metricsOn: boolean;
  /** @internal */ readonly tracer: Tracer;
  private readonly proxy: ProxyTracerProvider | undefined;
  private readonly nameOf: ((name: string) => string | undefined) | undefined;

  readonly acquireDuration: Histogram;
  readonly holdDuration: Histogram;
  readonly held: UpDownCounter;
  readonly waiting: UpDownCounter;
  readonly losses: Counter;
  readonly leader: UpDownCounter;
  readonly transitions: Counter;
  readonly keepaliveDuration: Histogram;
  readonly sessionLosses: Counter;
  readonly fencingRefused: Counter;
  readonly leaderRetries: Counter;
  readonly releaseRetries: Counter;
  readonly releasePending: UpDownCounter;

  private readonly sessions = new Set<TrackedSession>();
  /** The live clients of this client's meter, for the time-left gauge (see the constructor). */
  private live?: Set<Telemetry>;
  /** Attribute sets without a name, made once: {kind}, and {kind, result} per result. */
  private readonly kindAttrs = new Map<Kind, Attributes>();
  private readonly resultAttrs = new Map<string, Attributes>();

  /** The client's logger (ClientOptions.logger), for the diagnostics events (src/diagnostics.ts). */
  readonly logger?: Logger;

  constructor(options: TelemetryOptions & DiagnosticsOptions = {}) {
    if (options.logger) this.logger = options.logger;
    const meter = (options.meterProvider ?? metrics.getMeterProvider()).getMeter(SCOPE);
    const tracerProvider = options.tracerProvider ?? trace.getTracerProvider();
    this.proxy = tracerProvider instanceof ProxyTracerProvider ? tracerProvider : undefined;
    this.tracer = tracerProvider.getTracer(SCOPE);
    const n = options.nameAttribute;
    this.nameOf = n === true ? (name) => name : typeof n === 'function' ? n : undefined;

    const seconds = (description: string, buckets: number[]) => ({ description, unit: 's', advice: { explicitBucketBoundaries: buckets } });
    this.acquireDuration = meter.createHistogram(
      METRIC.acquireDuration,
      seconds('Time from an acquire call (lock, permit, read or write lock, campaign) to holding or giving up', WAIT_BUCKETS),
    );
    this.holdDuration = meter.createHistogram(METRIC.holdDuration, seconds('Time from holding to releasing or losing', WAIT_BUCKETS));
    this.held = meter.createUpDownCounter(METRIC.held, {
      description: 'Locks, permits and leaderships held now',
      unit: '{holder}',
      valueType: ValueType.INT,
    });
    this.waiting = meter.createUpDownCounter(METRIC.waiting, {
      description: 'Acquire calls queued behind others now',
      unit: '{waiter}',
      valueType: ValueType.INT,
    });
    this.losses = meter.createCounter(METRIC.losses, {
      description: 'Holdings lost (not released), by reason',
      unit: '{loss}',
      valueType: ValueType.INT,
    });
    this.leader = meter.createUpDownCounter(METRIC.electionLeader, {
      description: '1 while this process leads the election (per name when names are allowed; else the number of elections it leads)',
      unit: '{leader}',
      valueType: ValueType.INT,
    });
    this.transitions = meter.createCounter(METRIC.electionTransitions, {
      description: "Changes of this process's leadership: became leader (leading=true) or stopped leading (leading=false)",
      unit: '{transition}',
      valueType: ValueType.INT,
    });
    this.keepaliveDuration = meter.createHistogram(
      METRIC.keepaliveDuration,
      seconds('Round trip of a lease renewal on the shared keepalive stream, from send to answer', RPC_BUCKETS),
    );
    this.sessionLosses = meter.createCounter(METRIC.sessionLosses, {
      description: 'Sessions lost: not renewed before their deadline, or their lease gone on the server',
      unit: '{session}',
      valueType: ValueType.INT,
    });
    this.fencingRefused = meter.createCounter(METRIC.fencingRefused, {
      description: 'Writes a fence (etcd-concurrency/fencing) refused because the resource had stored a higher fencing token',
      unit: '{write}',
      valueType: ValueType.INT,
    });
    this.leaderRetries = meter.createCounter(METRIC.electionRetries, {
      description: 'Attempts of runAsLeader to campaign again after a failure (etcd unreachable, session lost), each followed by a wait',
      unit: '{retry}',
      valueType: ValueType.INT,
    });
    this.releaseRetries = meter.createCounter(METRIC.releaseRetries, {
      description:
        "Failed delete attempts of a release (or of an aborted acquire's clean-up), retried in the background until the key is gone or the session ends",
      unit: '{attempt}',
      valueType: ValueType.INT,
    });
    this.releasePending = meter.createUpDownCounter(METRIC.releasePending, {
      description: 'Releases whose first delete failed and that are still being retried now: their keys still block others',
      unit: '{release}',
      valueType: ValueType.INT,
    });
    this.metricsOn = this.acquireDuration !== NOOP_HISTOGRAM;
    if (this.metricsOn) {
      // One gauge per meter, over every live client on it: several callbacks observing the same
      // (empty) attribute set would overwrite each other, and a closed client must not stay reachable.
      let live = timeLeftByMeter.get(meter);
      if (!live) {
        const clients = (live = new Set<Telemetry>());
        timeLeftByMeter.set(meter, clients);
        meter
          .createObservableGauge(METRIC.sessionTimeLeft, {
            description:
              "Least time left, over this process's live sessions, until a session declares itself lost (its proven lease deadline less the safety margin)",
            unit: 's',
          })
          .addCallback((result: ObservableResult) => {
            // One series, not one per lease: a cumulative exporter keeps every series it ever saw, and
            // a process that makes sessions as it goes would grow without bound. The session closest
            // to its deadline is the one to alert on. Nothing is observed while no session lives.
            let least = Infinity;
            for (const t of clients) for (const s of t.sessions) least = Math.min(least, s.remainingMs());
            if (least !== Infinity) result.observe(least / 1000);
          });
      }
      live.add(this);
      this.live = live;
    }
  }

  /** The client closed: off the time-left gauge. */
  close(): void {
    this.live?.delete(this);
    this.live = undefined;
    this.sessions.clear();
  }

  /** True when spans may record: an explicit provider, or the global one once an SDK set its delegate. */
  tracing(): boolean {
    return this.proxy === undefined || this.proxy.getDelegate() !== NOOP_TRACER_PROVIDER;
  }

  /** The recorder of one acquire call, or undefined when neither metrics nor spans record. */
  startAcquire(kind: Kind, name: string): AcquireProbe | undefined {
    const tracing = this.tracing();
    if (!this.metricsOn && !tracing) return undefined;
    return new AcquireProbe(this, kind, this.attrs(kind, name), tracing);
  }

  /** {kind} and, when allowed, {name}. */
  attrs(kind: Kind, name: string): Attributes {
    let label: string | undefined;
    try {
      label = this.nameOf?.(name);
    } catch {
      label = undefined; // the user's mapping failed: record without the name rather than fail the lock
    }
    if (label !== undefined) return { [ATTR.kind]: kind, [ATTR.name]: label };
    let a = this.kindAttrs.get(kind);
    if (!a) this.kindAttrs.set(kind, (a = Object.freeze({ [ATTR.kind]: kind })));
    return a;
  }

  /** `base` plus one more attribute; cached when `base` is a name-less {kind} set. */
  with(base: Attributes, key: string, value: string | boolean): Attributes {
    if (base[ATTR.name] !== undefined) return { ...base, [key]: value };
    const id = `${String(base[ATTR.kind])}|${key}|${String(value)}`;
    let a = this.resultAttrs.get(id);
    if (!a) this.resultAttrs.set(id, (a = Object.freeze({ ...base, [key]: value })));
    return a;
  }

  /** {kind} (or any other kind of key, a double barrier's `barrier`), without the name: the release metrics. */
  kindOnly(kind: string): Attributes {
    return this.with(EMPTY, ATTR.kind, kind);
  }

  /** A session to show on the time-left gauge while it lives. */
  trackSession(s: TrackedSession): void {
    if (this.metricsOn) this.sessions.add(s);
  }

  /** The session ended: off the gauge, and counted when it was lost (not closed). */
  sessionEnded(s: TrackedSession, reason: string): void {
    if (!this.metricsOn) return;
    this.sessions.delete(s);
    if (reason === 'deadline' || reason === 'lease_gone') {
      this.sessionLosses.add(1, { [ATTR.sessionEndReason]: reason === 'deadline' ? 'deadline' : 'lease_gone' });
    }
  }

  /** A fence refused a stale write to `store` (postgres or redis). */
  staleWriteRefused(store: string): void {
    if (this.metricsOn) this.fencingRefused.add(1, { [ATTR.fencingStore]: store });
  }
}

/** How an acquire that threw ended. */
function resultOf(err: unknown, signal: AbortSignal | undefined, sessionSignal: AbortSignal): AcquireResult {
  if (signal?.aborted && err === signal.reason) {
    return err instanceof DOMException && err.code === DOMException.TIMEOUT_ERR ? 'timed_out' : 'aborted';
  }
  if (err instanceof SessionExpiredError || sessionSignal.aborted) return 'session_lost';
  return 'error';
}

/**
 * Records one acquire call: its duration and result, the waiting gauge while queued, and the
 * `<kind>.acquire` span; once held, hands over to a HoldRecord. Made only when something records.
 */
export class AcquireProbe {
  private readonly t0 = performance.now();
  private readonly span: Span | undefined;
  /** The caller's context: the hold span is its sibling. */
  private readonly ctx: Context | undefined;
  private queued = false;
  /**
   * Given to the enqueue while a span records: how many counted keys were ahead of ours when it
   * created our key. Goes straight onto the span; nothing is kept per waiter.
   */
  readonly ahead: ((keys: bigint) => void) | undefined;

  constructor(
    private readonly tel: Telemetry,
    private readonly kind: Kind,
    private readonly attrs: Attributes,
    tracing: boolean,
  ) {
    if (tracing) {
      const span = tel.tracer.startSpan(SPAN[kind].acquire, { attributes: attrs });
      if (span.isRecording()) {
        this.span = span;
        this.ctx = context.active();
        this.ahead = (keys) => span.setAttribute(ATTR.queueAhead, Number(keys));
      }
    }
  }

  /** The ticket is taken; `first` when the enqueue proved it our turn at once (nobody to wait for). */
  enqueued(first: boolean): void {
    this.span?.setAttribute(ATTR.queued, !first);
    if (first) return;
    this.queued = true;
    if (this.tel.metricsOn) this.tel.waiting.add(1, this.attrs);
  }

  /** Held, with fencing token `token`: returns what records the holding until it ends. */
  held(token: bigint, joined = false): HoldObserver {
    const waited = this.finish('acquired');
    const tel = this.tel;
    // A sibling holding the key this process already leads with: the same leadership, not another.
    const leads = this.kind === 'campaign' && !joined;
    if (tel.metricsOn) {
      tel.held.add(1, this.attrs);
      if (leads) {
        const a = leaderAttrs(this.attrs);
        tel.leader.add(1, a);
        tel.transitions.add(1, { ...a, [ATTR.leading]: true });
      }
    }
    let holdSpan: Span | undefined;
    if (this.span) {
      this.span.setAttribute(ATTR.fencingToken, Number(token));
      this.span.setAttribute(ATTR.waitDuration, waited);
      this.span.end();
      holdSpan = tel.tracer.startSpan(
        SPAN[this.kind].hold,
        { attributes: { ...this.attrs, [ATTR.fencingToken]: Number(token) } },
        this.ctx,
      );
    }
    return new HoldRecord(tel, leads, this.attrs, holdSpan);
  }

  /** tryLock()/tryAcquire() found it taken. */
  busy(): void {
    const waited = this.finish('busy');
    if (this.span) {
      this.span.setAttribute(ATTR.waitDuration, waited);
      this.span.end();
    }
  }

  /** The acquire threw `err`. */
  failed(err: unknown, signal: AbortSignal | undefined, sessionSignal: AbortSignal): void {
    const result = resultOf(err, signal, sessionSignal);
    const waited = this.finish(result);
    const span = this.span;
    if (!span) return;
    span.setAttribute(ATTR.waitDuration, waited);
    if (result === 'error' || result === 'session_lost') {
      if (err instanceof Error) span.recordException(err);
      span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
    }
    span.end();
  }

  /** Records the duration with `result` (and leaves the waiting gauge); returns the seconds waited. */
  private finish(result: AcquireResult): number {
    const waited = (performance.now() - this.t0) / 1000;
    const tel = this.tel;
    if (tel.metricsOn) {
      if (this.queued) tel.waiting.add(-1, this.attrs);
      tel.acquireDuration.record(waited, tel.with(this.attrs, ATTR.result, result));
    }
    this.queued = false;
    this.span?.setAttribute(ATTR.result, result);
    return waited;
  }
}

/** The election attributes: the name when allowed, no kind (the instrument says it). */
function leaderAttrs(attrs: Attributes): Attributes {
  const name = attrs[ATTR.name];
  return name === undefined ? EMPTY : { [ATTR.name]: name };
}

/** Records one holding: the held gauge, its duration, a loss, and the hold span with a loss event. */
class HoldRecord implements HoldObserver {
  private readonly t0 = performance.now();
  constructor(
    private readonly tel: Telemetry,
    /** Counted on the leader gauge and transitions (a campaign's first holder of its key, or the one it handed over to). */
    private leads: boolean,
    private readonly attrs: Attributes,
    private readonly span: Span | undefined,
  ) {}

  handOver(next: HoldObserver): void {
    if (!this.leads || !(next instanceof HoldRecord) || next.leads) return;
    next.leads = true;
    this.leads = false;
  }

  ended(loss: LossReason | undefined): void {
    const tel = this.tel;
    if (tel.metricsOn) {
      tel.held.add(-1, this.attrs);
      tel.holdDuration.record((performance.now() - this.t0) / 1000, this.attrs);
      if (loss !== undefined) tel.losses.add(1, tel.with(this.attrs, ATTR.lossReason, loss));
      if (this.leads) {
        const a = leaderAttrs(this.attrs);
        tel.leader.add(-1, a);
        tel.transitions.add(1, { ...a, [ATTR.leading]: false });
      }
    }
    const span = this.span;
    if (!span) return;
    if (loss !== undefined) {
      span.addEvent(LOST_EVENT, { [ATTR.lossReason]: loss });
      span.setAttribute(ATTR.lossReason, loss);
      span.setStatus({ code: SpanStatusCode.ERROR, message: `lost: ${loss}` });
    }
    span.end();
  }
}
