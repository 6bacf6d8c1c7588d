// This library's own Txns that one Client sends in the same tick share one request: an outer Txn
// with no compares whose success operations are those Txns (nested Txns, etcd 3.3+), each with its
// own compares and its own answer. Node pays per HTTP/2 request (a stream, its objects, its
// callbacks); etcd pays per request too (one Raft entry, one apply, one fsync shared anyway).
//
// What may share a request (each rule has a test in test/coalesce.test.ts):
// - only Txns marked coalescible (the queue engine's, whose keys and scope are known), idempotent,
//   not pinned to an endpoint, without nested Txns of their own: an application's client.txn() goes alone;
// - never two of one scope (a queue's prefix): keys created in one request share a CreateRevision,
//   which would tie FIFO order and fencing tokens;
// - never one that writes a key another one writes, reads or compares: etcd evaluates every nested
//   Txn's compares against the state before the request, so two such Txns could both succeed where,
//   sent apart, one would fail (and it refuses two writes of one key outright);
// - at most --max-txn-ops: etcd counts the outer list (one per Txn) and allows each nested list the
//   rest (its checkTxnRequest), so Txns + the longest nested list <= the limit; a lower limit is
//   learned from etcd's refusal.
// The tick's first call goes out at once (no added latency when alone); those that follow until the
// event loop's check phase wait for it and go together. While a shared request is in flight (until
// the check phase after its answer) the first waits for the check phase too: sent alone, its answer
// would come back alone and start another tick with a lone request, and so on. A request
// refused as a whole (etcd applied none of it: a lease gone, a permission) is sent again Txn by
// Txn, which is safe since every one is idempotent; so is one whose answer is refused here for its
// size (etcd applied it; the answers together are larger than each alone). Any other failure is
// every Txn's, as it would have been alone. Deadlines and signals stay per call: a call that gives
// up is answered at once, the others are not disturbed.
import type * as pb from '../proto/etcd.js';
import * as rpc from './methods.js';
import type { CallOptions, CallProgress, Connection } from './connection.js';
import { DeadlineExceededError, EtcdError, etcdSays, isEndpointFailure, isTransportError } from './errors.js';
import { toBuffer, type Bytes } from './kv.js';
import type { ClientTelemetry } from './telemetry.js';
import { callTimeout } from './options.js';
import { Status } from './transport/transport.js';

/** etcd's default `--max-txn-ops`. */
export const MAX_TXN_OPS = 128;

/** Marks a Txn of this library's own as one that may share a request with others of the same Client. */
export interface Coalescible {
  /** Its queue's prefix: no two Txns of one scope share a request. None for a read that creates nothing. */
  scope?: Bytes;
}

/**
 * What an operation touches, as the range [from, to) of latin1 strings (one char per byte, so that
 * they compare as etcd orders keys): a key k is [k, k + "\0"), which holds k alone; a range
 * without end (etcd's end "\0") ends at NO_END. A range that ends at or before its start (it holds
 * no key) counts as its first key.
 */
interface Span {
  from: string;
  to: string;
}

/** Above every key: a char above every byte. */
const NO_END = '\u0100';

/** What a Txn touches: the keys it compares or reads, and those it writes (both branches). */
interface Touched {
  reads: Span[];
  writes: Span[];
  /** Its longest list (compare, success, failure), which a nested Txn may hold at most limit - outer ops. */
  widest: number;
}

/** One caller's Txn, until it is answered. */
class Call {
  /** Sent in a request: an abort now only answers the caller. */
  sent = false;
  settled = false;
  timer: NodeJS.Timeout | undefined = undefined;
  onAbort: (() => void) | undefined = undefined;
  readonly reads: Span[];
  readonly writes: Span[];
  readonly widest: number;
  /** Its scope as a latin1 string, or undefined. */
  readonly scope: string | undefined;

  constructor(
    readonly request: pb.TxnRequest,
    readonly options: CallOptions,
    scope: Bytes | undefined,
    touched: Touched,
    readonly progress: CallProgress | undefined,
    readonly startedAt: number,
    readonly deadline: number,
    readonly resolve: (r: pb.TxnResponse) => void,
    readonly reject: (err: unknown) => void,
  ) {
    this.reads = touched.reads;
    this.writes = touched.writes;
    this.widest = touched.widest;
    this.scope = scope === undefined ? undefined : toBuffer(scope).toString('latin1');
  }
}

export class Coalescer {
  /** The most operations one list of a Txn may hold: etcd's --max-txn-ops, unless it taught us less. */
  maxOps = MAX_TXN_OPS;
  /** The calls after the tick's first, until the check phase sends them. */
  private waiting: Call[] = [];
  /** A tick's window is open: its first call went out (or waits, see shared), the check phase will send the rest. */
  private open = false;
  /** Shared requests in flight, each until the check phase after its answer. */
  private shared = 0;

  constructor(
    private readonly conn: Connection,
    private readonly telemetry?: ClientTelemetry,
  ) {}

  /** Sends `request` (already namespaced), alone or with the tick's other coalescible Txns. */
  txn(request: pb.TxnRequest, options: CallOptions, scope: Bytes | undefined, progress?: CallProgress): Promise<pb.TxnResponse> {
    if (options.endpoint !== undefined || options.anonymous) return this.conn.unary(rpc.KV.txn, request, 'idempotent', options, progress);
    if (!this.open) {
      this.open = true;
      setImmediate(this.flush);
      if (this.shared === 0) return this.conn.unary(rpc.KV.txn, request, 'idempotent', options, progress);
    }
    // Only a Txn that waits is analysed: the first that goes out at once goes as it is.
    const touched = touchedBy(request);
    if (touched === undefined) return this.conn.unary(rpc.KV.txn, request, 'idempotent', options, progress);
    options.signal?.throwIfAborted();
    const startedAt = performance.now();
    const deadline = startedAt + (options.timeoutMs === undefined ? this.conn.callTimeoutMs : callTimeout(options.timeoutMs));
    return new Promise<pb.TxnResponse>((resolve, reject) => {
      const call = new Call(request, options, scope, touched, progress, startedAt, deadline, resolve, reject);
      const signal = options.signal;
      if (signal) {
        call.onAbort = () => {
          const i = call.sent ? -1 : this.waiting.indexOf(call);
          if (i >= 0) this.waiting.splice(i, 1);
          this.settle(call, signal.reason);
        };
        signal.addEventListener('abort', call.onAbort, { once: true });
      }
      this.waiting.push(call);
    });
  }

  /** The check phase: every call that waited goes out, in as few requests as the rules allow. */
  private readonly flush = (): void => {
    this.open = false;
    const calls = this.waiting;
    if (calls.length === 0) return;
    this.waiting = [];
    const batches: Batch[] = [];
    for (const c of calls) {
      let b = batches.find((b) => b.admits(c, this.maxOps));
      if (!b) batches.push((b = new Batch()));
      b.add(c);
    }
    for (const b of batches) void this.send(b);
  };

  private async send(batch: Batch): Promise<void> {
    const calls = batch.calls;
    if (calls.length === 1) return this.alone(calls[0]!);
    const now = performance.now();
    let deadline = 0;
    for (const c of calls) {
      c.sent = true;
      if (c.deadline > deadline) deadline = c.deadline;
    }
    // A call due before the others gets its own timer; most share the default deadline and need none.
    for (const c of calls) if (c.deadline < deadline - 1) c.timer = setTimeout(() => this.expire(c), Math.max(0, c.deadline - now));
    if (this.telemetry?.metricsOn) this.telemetry.txnBatchSize.record(calls.length);
    this.shared++;
    try {
      await this.sendShared(batch, deadline, now);
    } finally {
      // The calls its answer wakes make their Txns in this tick or the next: they go together.
      setImmediate(this.answered);
    }
  }

  private readonly answered = (): void => {
    this.shared--;
  };

  /** One request of the batch's calls, each answered from its part of the answer. */
  private async sendShared(batch: Batch, deadline: number, now: number): Promise<void> {
    const calls = batch.calls;
    const progress: CallProgress = { sent: false };
    const outer: pb.TxnRequest = { compare: [], success: calls.map((c) => ({ requestTxn: c.request })), failure: [] };
    let r: pb.TxnResponse;
    try {
      r = await this.conn.call(rpc.KV.txn, outer, 'idempotent', { timeoutMs: Math.max(1, deadline - now) }, progress);
    } catch (err) {
      const whole = refusedWhole(err);
      if (!whole && !answerRefused(err)) {
        for (const c of calls) this.settle(c, err, progress);
        return;
      }
      // Refused as a whole, this attempt applied none of it, but an earlier one whose answer was lost
      // may still be applied (held by a slow member): each Txn, sent again, may land twice (an enqueue
      // sweeps it). Its answer refused here, it may have been applied: each Txn, sent again, answers
      // from what it finds (an enqueue's key on our lease is ours).
      if (progress.ambiguous) for (const c of calls) if (c.progress) c.progress.ambiguous = true;
      // Too many operations: learn the limit and try again in smaller requests; anything else (a
      // lease gone, a permission): each alone, for its own answer.
      if (whole && etcdSays((err.cause as { details: string }).details, 'tooManyOps') && batch.cost > 2) {
        this.maxOps = Math.min(this.maxOps, batch.cost - 1);
        for (const c of calls) if (!c.settled) this.again(c);
        return;
      }
      for (const c of calls) if (!c.settled) void this.alone(c);
      return;
    }
    const responses = r.responses ?? [];
    for (let i = 0; i < calls.length; i++) {
      const inner = responses[i]?.responseTxn;
      const c = calls[i]!;
      if (inner)
        this.settle(c, undefined, progress, { header: r.header, succeeded: inner.succeeded ?? false, responses: inner.responses ?? [] });
      else this.settle(c, new EtcdError(`running a transaction: etcd's answer to a shared request lacks Txn ${i}`), progress);
    }
  }

  /** Sends one call as a plain Txn, with what is left of its own deadline and its own signal. */
  private async alone(c: Call): Promise<void> {
    if (c.settled) return;
    c.sent = true;
    const progress: CallProgress = { sent: false };
    const options: CallOptions = { ...c.options, timeoutMs: Math.max(1, c.deadline - performance.now()) };
    try {
      const r = await this.conn.call(rpc.KV.txn, c.request, 'idempotent', options, progress);
      this.settle(c, undefined, progress, r);
    } catch (err) {
      this.settle(c, err, progress);
    }
  }

  /** Back to the waiting calls, for the next check phase (after etcd taught us a lower limit). */
  private again(c: Call): void {
    c.sent = false;
    // Its next send arms a timer again if it needs one.
    clearTimeout(c.timer);
    c.timer = undefined;
    this.waiting.push(c);
    if (!this.open) {
      this.open = true;
      setImmediate(this.flush);
    }
  }

  private expire(c: Call): void {
    if (c.progress) c.progress.ambiguous = true;
    this.settle(c, new DeadlineExceededError('running a transaction: no answer before the deadline'));
  }

  /** Answers the call once (the first of its answer, its deadline, its signal), as a call alone would be. */
  private settle(c: Call, err: unknown, progress?: CallProgress, r?: pb.TxnResponse): void {
    if (c.progress && progress) {
      if (progress.sent) c.progress.sent = true;
      if (progress.ambiguous) c.progress.ambiguous = true;
    }
    if (c.settled) return;
    c.settled = true;
    if (c.timer) clearTimeout(c.timer);
    if (c.onAbort) c.options.signal!.removeEventListener('abort', c.onAbort);
    if (this.telemetry?.metricsOn) this.telemetry.rpc(rpc.KV.txn.path, c.startedAt, err);
    if (err === undefined) c.resolve(r!);
    else c.reject(err);
  }
}

/** The calls of one request, and what they touch together. */
class Batch {
  readonly calls: Call[] = [];
  private readonly scopes = new Set<string>();
  private readonly read = new Touches();
  private readonly written = new Touches();
  private widest = 0;

  /** What etcd counts against --max-txn-ops: the outer list plus the longest nested one. */
  get cost(): number {
    return this.calls.length + this.widest;
  }

  admits(c: Call, maxOps: number): boolean {
    if (this.calls.length === 0) return true;
    if (c.scope !== undefined && this.scopes.has(c.scope)) return false;
    if (this.calls.length + 1 + Math.max(this.widest, c.widest) > maxOps) return false;
    for (const w of c.writes) if (this.written.meets(w) || this.read.meets(w)) return false;
    for (const r of c.reads) if (this.written.meets(r)) return false;
    return true;
  }

  add(c: Call): void {
    this.calls.push(c);
    if (c.scope !== undefined) this.scopes.add(c.scope);
    for (const r of c.reads) this.read.add(r);
    for (const w of c.writes) this.written.add(w);
    if (c.widest > this.widest) this.widest = c.widest;
  }
}

/**
 * Keys and ranges, asked whether a span meets any of them. Only their union matters, kept as
 * disjoint spans sorted by start (so by end too): a span meets the union when the first of them
 * ending after its start begins before its end. A binary search, however many Txns a request holds.
 */
class Touches {
  private readonly spans: Span[] = [];

  add(s: Span): void {
    const spans = this.spans;
    const i = this.firstEndingAfter(s.from);
    let j = i;
    while (j < spans.length && spans[j]!.from < s.to) j++;
    if (i === j) {
      // Apart from all (the common case): in its place, the ones after it moved up.
      spans.push(s);
      for (let k = spans.length - 1; k > i; k--) spans[k] = spans[k - 1]!;
      spans[i] = s;
      return;
    }
    // Those in [i, j) overlap s: one span covers them all.
    const from = spans[i]!.from < s.from ? spans[i]!.from : s.from;
    const to = spans[j - 1]!.to > s.to ? spans[j - 1]!.to : s.to;
    spans.splice(i, j - i, { from, to });
  }

  meets(s: Span): boolean {
    const i = this.firstEndingAfter(s.from);
    return i < this.spans.length && this.spans[i]!.from < s.to;
  }

  /** The index of the first span whose end is above `k` (the length when none is). */
  private firstEndingAfter(k: string): number {
    const spans = this.spans;
    let lo = 0;
    let hi = spans.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (spans[mid]!.to > k) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  }
}

/** What `r` touches, or undefined when it cannot share a request (it holds a nested Txn itself). */
function touchedBy(r: pb.TxnRequest): Touched | undefined {
  const reads: Span[] = [];
  const writes: Span[] = [];
  for (const c of r.compare ?? []) reads.push(span(c.key, c.rangeEnd));
  for (const list of [r.success ?? [], r.failure ?? []]) {
    for (const op of list) {
      if (op.requestRange) reads.push(span(op.requestRange.key, op.requestRange.rangeEnd));
      else if (op.requestPut) writes.push(span(op.requestPut.key, undefined));
      else if (op.requestDeleteRange) writes.push(span(op.requestDeleteRange.key, op.requestDeleteRange.rangeEnd));
      else return undefined;
    }
  }
  const widest = Math.max(r.compare?.length ?? 0, r.success?.length ?? 0, r.failure?.length ?? 0);
  return { reads, writes, widest };
}

function span(key: Buffer | undefined, rangeEnd: Buffer | undefined): Span {
  const from = key ? key.toString('latin1') : '';
  if (rangeEnd === undefined || rangeEnd.length === 0) return { from, to: `${from}\0` };
  if (rangeEnd.length === 1 && rangeEnd[0] === 0) return { from, to: NO_END };
  const to = rangeEnd.toString('latin1');
  return { from, to: to > from ? to : `${from}\0` };
}

/**
 * Whether etcd refused the whole request, applying none of it: its own answer, not about the
 * endpoint (a gone lease, a permission, too many operations), or one above our own size limit.
 */
function refusedWhole(err: unknown): err is EtcdError {
  const cause = err instanceof EtcdError ? err.cause : undefined;
  if (!isTransportError(cause)) return false;
  return (cause.fromServer && !isEndpointFailure(cause)) || (cause.notSent && cause.status === Status.RESOURCE_EXHAUSTED);
}

/**
 * Whether the request left and its answer was refused here for its size (above
 * maxReceiveMessageBytes; or the server reset it, ENHANCE_YOUR_CALM): etcd may have applied it, and
 * the answers of its Txns together are larger than each one's alone.
 */
function answerRefused(err: unknown): boolean {
  const cause = err instanceof EtcdError ? err.cause : undefined;
  return isTransportError(cause) && !cause.fromServer && !cause.notSent && cause.status === Status.RESOURCE_EXHAUSTED;
}
