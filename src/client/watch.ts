import * as pb from '../proto/etcd.js';
import * as rpc from './methods.js';
import { closeStream, type BidiStream, type Connection } from './connection.js';
import { Backoff } from './backoff.js';
import {
  ClientClosedError,
  CompactedError,
  EtcdError,
  InvalidArgumentError,
  PermissionDeniedError,
  etcdSays,
  isTransportError,
  isStaleToken,
} from './errors.js';
import { prefixRange, toBuffer, type Bytes, type KeyValue } from './kv.js';
import { QueuedIterator } from './queued-iterator.js';
import { publishWatchReconnect } from '../diagnostics.js';
import type { Namespace } from './namespace.js';

export interface WatchOptions {
  /** Watch every key that starts with `key`. */
  prefix?: boolean;
  /**
   * First revision to deliver. Omit to watch from "now": etcd serves such a watch at once, while a
   * start at or below its current revision waits for a catch-up loop that runs every 100 ms.
   */
  startRevision?: bigint;
  /** Do not deliver PUT events. */
  noPut?: boolean;
  /** Do not deliver DELETE events. */
  noDelete?: boolean;
  /** Attach each key's previous value to its events. */
  prevKv?: boolean;
  /** Cancels the watch; iteration then ends without error. */
  signal?: AbortSignal;
}

export interface WatchEvent {
  type: 'put' | 'delete';
  kv: KeyValue;
  prevKv?: KeyValue;
}

/** The events of one watch response: all events of a revision arrive in the same batch. */
export interface WatchBatch {
  /** The store revision when etcd sent this batch. */
  revision: bigint;
  events: WatchEvent[];
}

/**
 * Where a watch hands its batches: the QueuedIterator of `for await`, or (inside the library) a
 * consumer that reacts to them directly, which costs a waiter no pending promise per batch.
 */
export interface WatchSink {
  push(batch: WatchBatch): void;
  /** The watch ended: with the error that ended it, or undefined once cancelled. */
  end(err?: unknown): void;
}

const noop = (): void => {};

/**
 * A watch whose consumer has this many batches unread is taken off the stream, so that a watch
 * nobody reads holds a bounded amount and holds up no other; it is created again, from the next
 * revision it owes, once the consumer is down to RESUME_BELOW.
 */
const PAUSE_AT = 1024;
const RESUME_BELOW = 256;
/** The same by the bytes of keys and values unread: a few huge batches count as many. */
const PAUSE_AT_BYTES = 8 * 1024 * 1024;
const RESUME_BELOW_BYTES = 2 * 1024 * 1024;

/** The bytes of keys and values a batch holds. */
function batchBytes(events: readonly WatchEvent[]): number {
  let n = 0;
  for (const e of events)
    n += e.kv.key.length + (e.kv.value?.length ?? 0) + (e.prevKv ? e.prevKv.key.length + (e.prevKv.value?.length ?? 0) : 0);
  return n;
}

/**
 * A watch on the client's shared Watch stream. Iterate it for event batches. It survives stream
 * drops and endpoint failover by resuming from the revision after the last delivered event, so no
 * event is lost or repeated; it ends with a CompactedError if that revision was compacted away.
 */
export class Watch implements AsyncIterable<WatchBatch> {
  /** @internal The store revision at which etcd first confirmed the watch (see `created`), once it has. */
  createdAt: bigint | undefined;
  /** `created` and how to settle it while pending (made when first asked), or once rejected; not kept once resolved: a waiter holds its watch for long. */
  private creating: Creating | undefined;
  /** @internal */ id?: bigint;
  /** @internal next revision to ask for when (re)creating; 0n means "from now", or once created the one after createdAt (see owed). */
  nextRevision: bigint;
  /** @internal set once the watch must be re-created after its stream broke. */
  resuming = false;
  /** @internal where batches go; a library-internal consumer may hand the watch on (a kept watch). */
  sink: WatchSink;
  private readonly onAbort?: () => void;
  private stopped = false;

  /** @internal */
  constructor(
    private readonly hub: WatchHub,
    /** The key as given: a string is encoded when a request needs it, not held twice by every waiter. */
    private readonly k: string | Buffer,
    readonly rangeEnd: Buffer | undefined,
    private readonly options: WatchOptions,
    sink?: WatchSink,
  ) {
    this.nextRevision = options.startRevision ?? 0n;
    this.sink = sink ?? this.queue();
    const signal = options.signal;
    if (signal) {
      this.onAbort = () => this.cancel();
      signal.addEventListener('abort', this.onAbort, { once: true });
    }
  }

  /** The iterator of `for await`, which takes the watch off the stream while its consumer lags. */
  private queue(): QueuedIterator<WatchBatch> {
    const q: QueuedIterator<WatchBatch> = new QueuedIterator(
      () => this.cancel(),
      (left) => {
        if (left <= RESUME_BELOW && q.weight <= RESUME_BELOW_BYTES) this.hub.caughtUp(this);
      },
      (batch) => batchBytes(batch.events),
    );
    return q;
  }

  /**
   * Resolves with the store revision at which etcd confirmed the watch; events after it are
   * delivered. Rejects if the watch cannot be created.
   */
  get created(): Promise<bigint> {
    if (this.createdAt !== undefined) return Promise.resolve(this.createdAt);
    return (this.creating ??= new Creating()).promise;
  }

  /** The watched key (the first key of the range for a prefix watch). */
  get key(): Buffer {
    return typeof this.k === 'string' ? Buffer.from(this.k) : this.k;
  }

  /** True once cancelled or failed. */
  get ended(): boolean {
    return this.stopped;
  }

  /** @internal */
  createRequest(): pb.WatchRequest {
    // For a start in the past, ask for one revision earlier than needed and drop what comes before
    // it: if etcd compacted exactly at the start, it would silently skip a delete recorded there
    // (etcd 18089, present in 3.4); one revision earlier turns that into a CompactedError. Not for
    // a start just above the newest revision we have seen (a read's revision + 1): etcd serves that
    // at once, while any start at or below its current revision waits for its 100 ms catch-up loop.
    const next = this.owed;
    const past = this.resuming || next <= this.hub.seenRevision;
    const start = past && next > 1n ? next - 1n : next;
    const filters: pb.WatchCreateRequest_FilterType[] = [];
    if (this.options.noPut) filters.push(pb.WatchCreateRequest_FilterType.NOPUT);
    if (this.options.noDelete) filters.push(pb.WatchCreateRequest_FilterType.NODELETE);
    const ns = this.hub.namespace;
    return {
      createRequest: {
        ...(ns ? ns.interval(this.key, this.rangeEnd) : { key: this.key, rangeEnd: this.rangeEnd }),
        startRevision: start,
        filters,
        prevKv: this.options.prevKv ?? false,
      },
    };
  }

  /** The next revision the sink is owed: a watch that delivered nothing yet (a waiter's) holds no bigint for it. */
  private get owed(): bigint {
    return this.nextRevision === 0n && this.createdAt !== undefined ? this.createdAt + 1n : this.nextRevision;
  }

  /** @internal */
  onCreated(revision: bigint): void {
    if (this.createdAt !== undefined || this.stopped) return; // created again (resumed), or failed before
    this.createdAt = revision;
    this.creating?.resolve(revision);
    this.creating = undefined;
  }

  /** `created` rejects with `err` (for a later ask too), unless it resolved before. */
  private refuseCreated(err: unknown): void {
    if (this.createdAt === undefined) (this.creating ??= new Creating()).reject(err);
  }

  /** @internal */
  deliver(revision: bigint, events: pb.Event[]): void {
    const from = this.owed;
    const fresh = events[0]!.kv!.modRevision! >= from ? events : events.filter((e) => e.kv!.modRevision! >= from);
    if (fresh.length === 0) return;
    const ns = this.hub.namespace;
    const out: WatchEvent[] = fresh.map((e) => {
      if (ns) {
        ns.stripKv(e.kv);
        ns.stripKv(e.prevKv);
      }
      const ev: WatchEvent = { type: e.type === pb.Event_EventType.DELETE ? 'delete' : 'put', kv: e.kv as KeyValue };
      if (e.prevKv) ev.prevKv = e.prevKv as KeyValue;
      return ev;
    });
    if (out.length > 0) this.nextRevision = out[out.length - 1]!.kv.modRevision + 1n;
    this.sink.push({ revision, events: out });
    if (this.sink instanceof QueuedIterator && (this.sink.pending >= PAUSE_AT || this.sink.weight >= PAUSE_AT_BYTES))
      this.hub.lagging(this);
  }

  /** @internal ends the watch with an error (compaction, permission). */
  fail(err: unknown): void {
    if (this.stopped) return;
    this.refuseCreated(err);
    this.finish(err);
  }

  /** Stops the watch; pending iteration ends without error. Idempotent. */
  cancel(): void {
    if (this.stopped) return;
    this.refuseCreated(new EtcdError('watch cancelled before it was created'));
    this.finish(undefined);
    this.hub.cancel(this);
  }

  private finish(err: unknown): void {
    this.stopped = true;
    this.hub.caughtUp(this);
    if (this.onAbort) this.options.signal?.removeEventListener('abort', this.onAbort);
    this.sink.end(err);
  }

  [Symbol.asyncIterator](): AsyncIterator<WatchBatch> {
    if (!(this.sink instanceof QueuedIterator)) throw new TypeError('this watch delivers to a consumer of its own; it cannot be iterated');
    return this.sink;
  }
}

/** A watch's `created` while it is pending, with what settles it. */
class Creating {
  readonly promise: Promise<bigint>;
  resolve!: (revision: bigint) => void;
  reject!: (err: unknown) => void;
  constructor() {
    this.promise = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    // A watch nobody awaits must not crash the process with an unhandled rejection.
    this.promise.catch(noop);
  }
}

/**
 * Multiplexes every watch of a client onto one gRPC Watch stream. Create requests are pipelined:
 * etcd answers them in order, so the n-th "created" response belongs to the n-th pending watch.
 */
export class WatchHub {
  private stream?: BidiStream<pb.WatchRequest, pb.WatchResponse>;
  private peer = 0;
  private readonly active = new Map<bigint, Watch>();
  private pending: Watch[] = [];
  /** Watches waiting for a stream (before it opens, or after it dropped). */
  private waiting: Watch[] = [];
  private opening = false;
  private readonly backoff = new Backoff(50, 1000);
  private retryTimer?: NodeJS.Timeout;
  private idleTimer?: NodeJS.Timeout;
  private closed = false;
  /** Watches taken off the stream while their consumers lag. */
  private readonly behind = new Set<Watch>();

  constructor(
    private readonly conn: Connection,
    /** @internal ClientOptions.namespace: watched keys get it, delivered keys lose it. */
    readonly namespace?: Namespace,
  ) {}

  /** @internal `w`'s consumer fell behind: etcd sends it nothing more until it catches up. */
  lagging(w: Watch): void {
    if (this.behind.has(w) || w.ended) return;
    if (w.id !== undefined && this.active.get(w.id) === w) {
      this.active.delete(w.id);
      this.stream?.write({ cancelRequest: { watchId: w.id } });
    } else {
      const i = this.waiting.indexOf(w);
      // Its create request is in flight: it is suspended when the next batch shows it still lags.
      if (i < 0) return;
      this.waiting.splice(i, 1);
    }
    w.id = undefined;
    w.resuming = true;
    this.behind.add(w);
  }

  /** @internal `w`'s consumer caught up (or `w` ended): back on the stream from where it stopped. */
  caughtUp(w: Watch): void {
    if (!this.behind.delete(w) || w.ended || this.closed) return;
    this.waiting.push(w);
    this.flush();
  }

  /** `sink`: deliver to it instead of the watch's own QueuedIterator (then the watch is not iterable). */
  watch(key: Bytes, options: WatchOptions = {}, sink?: WatchSink): Watch {
    if (this.closed) throw new ClientClosedError();
    // etcd 3.4.23 accepts one and never delivers an event; 3.7.3 calls it compacted.
    if (options.startRevision !== undefined && options.startRevision < 0n)
      throw new InvalidArgumentError(`startRevision must be a revision (or 0n, or omitted, for "from now"), got ${options.startRevision}`);
    const r = options.prefix ? prefixRange(key) : { key: typeof key === 'string' ? key : toBuffer(key), rangeEnd: undefined };
    const w = new Watch(this, r.key, r.rangeEnd, options, sink);
    if (options.signal?.aborted) {
      w.cancel();
      return w;
    }
    this.waiting.push(w);
    this.flush();
    return w;
  }

  /** @internal the newest store revision the client has seen. */
  get seenRevision(): bigint {
    return this.conn.seenRevision;
  }

  /** Number of watches on the stream or queued for it. */
  get size(): number {
    return this.active.size + this.pending.length + this.waiting.length + this.behind.size;
  }

  /** @internal */
  cancel(w: Watch): void {
    this.behind.delete(w);
    if (w.id !== undefined && this.active.get(w.id) === w) {
      this.active.delete(w.id);
      this.stream?.write({ cancelRequest: { watchId: w.id } });
    } else {
      const i = this.waiting.indexOf(w);
      if (i >= 0) this.waiting.splice(i, 1);
      // A pending one is cancelled when its "created" answer arrives (it is marked ended).
    }
    this.maybeIdle();
  }

  /** Writes queued create requests, opening the stream first if needed. */
  private flush(): void {
    if (this.closed) return;
    if (this.idleTimer) {
      clearTimeout(this.idleTimer);
      this.idleTimer = undefined;
    }
    if (!this.stream) {
      void this.open();
      return;
    }
    const batch = this.waiting;
    this.waiting = [];
    for (const w of batch) {
      if (w.ended) continue;
      // The stream may break between two writes: the rest wait for the next one.
      if (!this.stream) {
        this.waiting.push(w);
        continue;
      }
      this.pending.push(w);
      this.stream.write(w.createRequest());
    }
  }

  private async open(): Promise<void> {
    if (this.opening || this.stream || this.retryTimer || this.closed) return;
    this.opening = true;
    try {
      const { peer, stream: s } = await this.conn.openStream(rpc.Watch.watch);
      if (this.closed) {
        closeStream(s);
        return;
      }
      this.peer = peer;
      this.stream = s;
      s.on('data', (r: pb.WatchResponse) => this.onResponse(s, r));
      // A stream etcd ended over its token must reopen with a new one, not the same one elsewhere.
      s.on('error', (err: Error) => this.onBroken(s, err, isTransportError(err) && isStaleToken(err.details) && !!this.conn.tokens));
      s.on('end', () => this.onBroken(s, new Error('watch stream ended')));
    } catch (err) {
      this.scheduleReopen(err);
      return;
    } finally {
      this.opening = false;
    }
    this.flush();
    // Every watch may have been cancelled while the stream opened.
    this.maybeIdle();
  }

  private onResponse(s: BidiStream<pb.WatchRequest, pb.WatchResponse>, r: pb.WatchResponse): void {
    if (s !== this.stream) return;
    const id = r.watchId ?? 0n;
    const revision = r.header?.revision ?? 0n;
    if (revision > this.conn.seenRevision) this.conn.seenRevision = revision;
    if (r.created) {
      const w = this.pending.shift();
      if (!w) return;
      if (r.canceled || id === -1n) return this.onCreateRefused(w, r);
      this.backoff.reset();
      if (w.ended) {
        s.write({ cancelRequest: { watchId: id } });
        this.maybeIdle();
        return;
      }
      w.id = id;
      this.active.set(id, w);
      w.onCreated(revision);
      return;
    }
    const w = this.active.get(id);
    if (!w) return;
    if (r.canceled) {
      this.active.delete(id);
      const compact = r.compactRevision ?? 0n;
      w.fail(
        compact > 0n ? new CompactedError(compact) : new EtcdError(`etcd cancelled the watch: ${r.cancelReason || 'no reason given'}`),
      );
      this.maybeIdle();
      return;
    }
    if (!r.events || r.events.length === 0) return;
    // A broken answer fails the stream, as an undecodable one does: the watch resumes on another.
    if (r.events.some((e) => !e.kv)) return this.onBroken(s, new Error('etcd sent a watch event without its key-value'));
    w.deliver(revision, r.events);
  }

  private onCreateRefused(w: Watch, r: pb.WatchResponse): void {
    const reason = r.cancelReason ?? '';
    const compact = r.compactRevision ?? 0n;
    if (isStaleToken(reason) && this.conn.tokens) {
      // The stream's token expired or was forgotten (etcd 17623): reopen it with a fresh one and retry.
      this.waiting.unshift(w);
      this.onBroken(this.stream, new Error(reason), true);
      return;
    }
    if (compact > 0n) w.fail(new CompactedError(compact));
    else if (etcdSays(reason, 'permissionDenied'))
      w.fail(new PermissionDeniedError(`watch on ${w.key.toString()}: permission denied; grant the user read access`));
    else w.fail(new EtcdError(`etcd refused the watch on ${w.key.toString()}: ${reason || 'no reason given'}`));
    this.maybeIdle();
  }

  /** The stream failed: requeue every watch (they resume from their next revision) and reopen. */
  private onBroken(s: unknown, err: unknown, tokenExpired = false): void {
    if (s !== this.stream || !this.stream) return;
    const old = this.stream;
    this.stream = undefined;
    closeStream(old);
    if (tokenExpired && this.conn.tokens) this.conn.tokens.invalidate();
    const live = [...this.active.values(), ...this.pending].filter((w) => !w.ended);
    this.active.clear();
    this.pending = [];
    for (const w of live) {
      w.id = undefined;
      w.resuming = true;
    }
    this.waiting = [...live, ...this.waiting];
    if (this.closed) return;
    if (live.length > 0 && this.conn.telemetry?.metricsOn) this.conn.telemetry.watchResumes.add(1);
    if (live.length > 0)
      publishWatchReconnect(this.conn.telemetry?.logger, this.conn.endpoints[this.peer]?.target ?? '?', live.length, err);
    if (!tokenExpired) this.conn.failover(this.peer);
    if (this.waiting.length === 0) return;
    this.scheduleReopen(err);
  }

  private scheduleReopen(_err: unknown): void {
    if (this.closed || this.retryTimer) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      if (this.waiting.length > 0) void this.open();
    }, this.backoff.next());
  }

  /** Ends the stream once no watch needs it, so an idle client lets the process exit. */
  private maybeIdle(): void {
    if (this.size > 0 || !this.stream || this.idleTimer) return;
    this.idleTimer = setTimeout(() => {
      this.idleTimer = undefined;
      if (this.size > 0 || !this.stream) return;
      const s = this.stream;
      this.stream = undefined;
      closeStream(s);
    }, 1000);
    this.idleTimer.unref();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.retryTimer);
    clearTimeout(this.idleTimer);
    const all = [...this.active.values(), ...this.pending, ...this.waiting, ...this.behind];
    this.behind.clear();
    this.active.clear();
    this.pending = [];
    this.waiting = [];
    const s = this.stream;
    this.stream = undefined;
    if (s) {
      closeStream(s);
    }
    for (const w of all) w.fail(new ClientClosedError());
  }
}
