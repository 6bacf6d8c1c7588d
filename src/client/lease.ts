import type * as pb from '../proto/etcd.js';
import * as rpc from './methods.js';
import { closeStream, type BidiStream, type Connection } from './connection.js';
import { Backoff } from './backoff.js';
import { isTransportError, isStaleToken } from './errors.js';
import { publishLeaseReconnect } from '../diagnostics.js';

/** What a lease's owner hears from the shared keepalive stream. */
export interface KeepAliveListener {
  /**
   * A renewal answered. `sentAt` is the monotonic time (performance.now()) the request was sent:
   * the lease is proven alive until at least sentAt + ttl seconds. `ttl <= 0n` means it is gone.
   */
  onRenewed(ttl: bigint, sentAt: number): void;
  /** The client is closing; no more renewals will be sent. */
  onClosed(): void;
  /** A renewal was asked for at monotonic `at` (sent then, or queued until a stream opens). */
  onAsked?(at: number): void;
  /** How long after a renewal was asked `onLate` is called, when the owner wants to know. */
  lateAfterMs?(): number;
  /** `lateAfterMs` has passed since the renewal asked at `askedAt`; the owner knows whether it was answered. */
  onLate?(askedAt: number): void;
}

/**
 * Renewals are sent on a grid of slots, so that those due at about the same time leave together
 * (one write, one packet; Go's lessor does the same from a loop every 500 ms). A lease renewed
 * every `intervalMs` is sent at the last slot at or before its due time, never after it: the
 * slot's width is the largest 500 x 2^k ms (k may be negative) that is at most an eighth of the
 * interval, so that the grids of different intervals coincide and a renewal leaves at most an
 * eighth of an interval early. Wide slots at long TTLs: each slot costs a wake-up for its answers
 * whatever it carries, which at TTL 60 weighed more than the renewals themselves.
 */
export function slotWidthMs(intervalMs: number): number {
  let q = 500;
  while (q * 2 <= intervalMs / 8) q *= 2;
  while (q > intervalMs / 8 && q > 1) q /= 2;
  return q;
}

/** A lease the hub keeps alive: its owner, and its renewals waiting or in flight. */
interface Kept {
  readonly listener: KeepAliveListener;
  /** Its renewal request, the same object each time. */
  readonly request: pb.LeaseKeepAliveRequest;
  /** Send times (monotonic ms) of its renewals in flight on the current stream, oldest first. */
  readonly sent: number[];
  /** The slot its next renewal waits for (see slotWidthMs), if any. */
  slot: number | undefined;
  /** Unregistered (or replaced): nothing more is sent for it or said to its listener. */
  gone: boolean;
}

/**
 * One LeaseKeepAlive stream shared by every lease of a client. Each request's send time is kept so
 * that owners can compute a deadline from when the renewal left, not when its answer came back.
 */
export class KeepAliveHub {
  private stream?: BidiStream<pb.LeaseKeepAliveRequest, pb.LeaseKeepAliveResponse>;
  /** When the current stream last answered (or opened): its progress, for `stalled`. */
  private lastAnswerAt = 0;
  private peer = 0;
  private opening = false;
  private readonly leases = new Map<bigint, Kept>();
  /** Renewals in flight on the current stream, all leases together. */
  private inFlight = 0;
  /** Leases to renew as soon as a stream is open. */
  private readonly queued = new Set<Kept>();
  private readonly backoff = new Backoff(50, 1000);
  private retryTimer?: NodeJS.Timeout;
  private closed = false;
  /** Renewals waiting for their slot (monotonic ms): slot -> leases (each lease knows its slot). */
  private readonly slots = new Map<number, Set<Kept>>();
  private slotTimer?: NodeJS.Timeout;
  private slotTimerAt = Number.POSITIVE_INFINITY;
  /** Renewals to send together on the next turn of the event loop. */
  private due: Kept[] = [];
  private flushing?: NodeJS.Immediate;
  /** One timer per batch of renewals (and lateness): when `onLate` is due for its leases. */
  private readonly lateTimers = new Set<NodeJS.Timeout>();

  constructor(private readonly conn: Connection) {}

  register(id: bigint, listener: KeepAliveListener): void {
    this.forget(this.leases.get(id));
    this.leases.set(id, { listener, request: { ID: id }, sent: [], slot: undefined, gone: false });
  }

  unregister(id: bigint): void {
    this.forget(this.leases.get(id));
    this.leases.delete(id);
    if (this.leases.size === 0) this.endStream();
  }

  private forget(k: Kept | undefined): void {
    if (!k) return;
    k.gone = true;
    this.inFlight -= k.sent.length;
    k.sent.length = 0;
    this.queued.delete(k);
    this.unslot(k);
  }

  /** Whether lease `id` is being kept alive here. */
  has(id: bigint): boolean {
    return this.leases.has(id);
  }

  /** Number of leases being kept alive (all on one stream). */
  get size(): number {
    return this.leases.size;
  }

  /** Sends one renewal for `id` on the next turn of the event loop, with any others due then. */
  renew(id: bigint): void {
    const k = this.leases.get(id);
    if (k) this.renewSoon(k);
  }

  private renewSoon(k: Kept): void {
    if (this.closed) return;
    this.unslot(k);
    this.due.push(k);
    this.flushing ??= setImmediate(() => this.flush());
  }

  /**
   * Renews `id` at the last slot at or before monotonic time `at` (see slotWidthMs), replacing any
   * renewal of it already waiting. `intervalMs`: how often the lease is renewed.
   */
  renewBy(id: bigint, at: number, intervalMs: number): void {
    const k = this.leases.get(id);
    if (this.closed || !k) return;
    const width = slotWidthMs(intervalMs);
    const slot = Math.floor(at / width) * width;
    if (slot <= performance.now()) return this.renewSoon(k);
    if (k.slot === slot) return;
    this.unslot(k);
    let ks = this.slots.get(slot);
    if (!ks) this.slots.set(slot, (ks = new Set()));
    ks.add(k);
    k.slot = slot;
    if (slot < this.slotTimerAt) this.armSlots(slot);
  }

  private unslot(k: Kept): void {
    const slot = k.slot;
    if (slot === undefined) return;
    k.slot = undefined;
    const ks = this.slots.get(slot)!;
    ks.delete(k);
    if (ks.size === 0) this.slots.delete(slot);
  }

  /** One timer, for the earliest slot; one beyond the longest timer wakes at its end and re-arms (slotsDue). */
  private armSlots(at: number): void {
    clearTimeout(this.slotTimer);
    this.slotTimerAt = at;
    this.slotTimer = setTimeout(() => this.slotsDue(), Math.min(Math.max(0, at - performance.now()), 2 ** 31 - 1));
  }

  private slotsDue(): void {
    this.slotTimer = undefined;
    this.slotTimerAt = Number.POSITIVE_INFINITY;
    const now = performance.now();
    let next = Number.POSITIVE_INFINITY;
    for (const [slot, ks] of this.slots) {
      if (slot > now) {
        next = Math.min(next, slot);
        continue;
      }
      this.slots.delete(slot);
      for (const k of ks) {
        k.slot = undefined;
        this.due.push(k);
      }
    }
    if (next !== Number.POSITIVE_INFINITY) this.armSlots(next);
    this.flush();
  }

  /** Sends every renewal due, in one write (or queues them until a stream is open), and watches for late answers. */
  private flush(): void {
    if (this.flushing) clearImmediate(this.flushing);
    this.flushing = undefined;
    const ks = this.due.filter((k) => !k.gone);
    this.due = [];
    if (ks.length === 0 || this.closed) return;
    const at = performance.now();
    if (this.stream) this.write(ks, at);
    else {
      for (const k of ks) this.queued.add(k);
      void this.open();
    }
    this.watch(ks, at);
  }

  /** Tells each owner its renewal was asked for, and calls `onLate` after its `lateAfterMs`: one timer per distinct wait. */
  private watch(ks: readonly Kept[], at: number): void {
    const byWait = new Map<number, Kept[]>();
    for (const k of ks) {
      const l = k.listener;
      l.onAsked?.(at);
      const ms = l.lateAfterMs?.();
      if (ms === undefined) continue;
      const group = byWait.get(ms);
      if (group) group.push(k);
      else byWait.set(ms, [k]);
    }
    for (const [ms, group] of byWait) {
      const t = setTimeout(
        () => {
          this.lateTimers.delete(t);
          for (const k of group) if (!k.gone) k.listener.onLate?.(at);
        },
        Math.max(0, at + ms - performance.now()),
      );
      this.lateTimers.add(t);
    }
  }

  /**
   * An owner saw no answer to its renewal in `quietMs`. If the stream has answered nothing at all
   * for that long while renewals are outstanding, the member may be paused or partitioned without
   * TCP noticing: move to the next endpoint (every lease is renewed again there). A stream that is
   * merely slow but answering (a busy leader) is left alone: tearing it down would throw away the
   * renewals queued on it and start over at the back of the same queue.
   */
  stalled(quietMs: number): void {
    if (!this.stream || this.inFlight === 0) return;
    if (performance.now() - this.lastAnswerAt < quietMs) return;
    this.broken(this.stream);
  }

  /** One renewal of each of `ks`, sent at `at`, in one write. */
  private write(ks: readonly Kept[], at: number): void {
    const requests: pb.LeaseKeepAliveRequest[] = new Array(ks.length);
    for (let i = 0; i < ks.length; i++) {
      const k = ks[i]!;
      k.sent.push(at);
      requests[i] = k.request;
    }
    this.inFlight += ks.length;
    this.stream!.writeMany(requests);
  }

  private async open(): Promise<void> {
    if (this.opening || this.stream || this.retryTimer || this.closed) return;
    this.opening = true;
    try {
      const { peer, stream: s, token } = await this.conn.openStream(rpc.Lease.leaseKeepAlive);
      if (this.closed || this.leases.size === 0) {
        closeStream(s);
        return;
      }
      this.peer = peer;
      this.stream = s;
      this.lastAnswerAt = performance.now();
      s.on('data', (r: pb.LeaseKeepAliveResponse) => this.onResponse(s, r));
      s.on('error', (err: Error) => {
        // etcd (3.4.42+, 3.5.28+, 3.6.9+, 3.7) checks the token on every renewal: one that expired
        // or that a restarted member forgot must be replaced, or every reopen fails the same way
        // until the leases expire. The member itself is fine: stay on it.
        const stale = token !== undefined && isTransportError(err) && isStaleToken(err.details);
        if (stale) this.conn.tokens?.invalidate(token);
        this.broken(s, !stale, err);
      });
      s.on('end', () => this.broken(s));
    } catch {
      this.scheduleReopen();
      return;
    } finally {
      this.opening = false;
    }
    const ks = [...this.queued];
    this.queued.clear();
    if (ks.length > 0) this.write(ks, performance.now());
  }

  private onResponse(s: unknown, r: pb.LeaseKeepAliveResponse): void {
    if (s !== this.stream) return;
    this.backoff.reset();
    this.lastAnswerAt = performance.now();
    const k = this.leases.get(r.ID ?? 0n);
    const sentAt = k?.sent.shift();
    if (sentAt === undefined) return;
    this.inFlight--;
    k!.listener.onRenewed(r.TTL ?? 0n, sentAt);
  }

  /**
   * The stream failed or stalled: forget in-flight renewals, fail over, renew everything again.
   * Those renewals are watched like any other: if no stream answers them within an owner's
   * lateAfterMs, every owner hears it then, not only at its next renewal (a TTL/3 later).
   */
  private broken(s: unknown, failover = true, error?: unknown): void {
    if (s !== this.stream || !this.stream) return;
    this.dropStream();
    publishLeaseReconnect(this.conn.telemetry?.logger, this.conn.endpoints[this.peer]?.target ?? '?', this.leases.size, error);
    if (failover) this.conn.failover(this.peer);
    const ks = [...this.leases.values()];
    for (const k of ks) this.queued.add(k);
    this.scheduleReopen();
    this.watch(ks, performance.now());
  }

  private scheduleReopen(): void {
    if (this.closed || this.retryTimer || this.leases.size === 0) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      void this.open();
    }, this.backoff.next());
  }

  private dropStream(): void {
    const s = this.stream;
    this.stream = undefined;
    for (const k of this.leases.values()) k.sent.length = 0;
    this.inFlight = 0;
    if (!s) return;
    closeStream(s);
  }

  private endStream(): void {
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    this.queued.clear();
    clearTimeout(this.slotTimer);
    this.slotTimer = undefined;
    this.slotTimerAt = Number.POSITIVE_INFINITY;
    for (const k of this.leases.values()) k.slot = undefined;
    this.slots.clear();
    if (this.flushing) clearImmediate(this.flushing);
    this.flushing = undefined;
    this.due = [];
    for (const t of this.lateTimers) clearTimeout(t);
    this.lateTimers.clear();
    this.dropStream();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.endStream();
    const ks = [...this.leases.values()];
    this.leases.clear();
    for (const k of ks) {
      k.gone = true;
      k.listener.onClosed();
    }
  }
}
