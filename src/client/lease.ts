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
  private readonly listeners = new Map<bigint, KeepAliveListener>();
  private readonly sent = new Map<bigint, number[]>();
  /** Leases to renew as soon as a stream is open. */
  private readonly queued = new Set<bigint>();
  private readonly backoff = new Backoff(50, 1000);
  private retryTimer?: NodeJS.Timeout;
  private closed = false;
  /** Renewals waiting for their slot (monotonic ms): slot -> leases, and each lease's slot. */
  private readonly slots = new Map<number, Set<bigint>>();
  private readonly slotOf = new Map<bigint, number>();
  private slotTimer?: NodeJS.Timeout;
  private slotTimerAt = Number.POSITIVE_INFINITY;
  /** Renewals to send together on the next turn of the event loop. */
  private due: bigint[] = [];
  private flushing?: NodeJS.Immediate;
  /** One timer per batch of renewals (and lateness): when `onLate` is due for its leases. */
  private readonly lateTimers = new Set<NodeJS.Timeout>();

  constructor(private readonly conn: Connection) {}

  register(id: bigint, listener: KeepAliveListener): void {
    this.listeners.set(id, listener);
  }

  unregister(id: bigint): void {
    this.listeners.delete(id);
    this.sent.delete(id);
    this.queued.delete(id);
    this.unslot(id);
    if (this.listeners.size === 0) this.endStream();
  }

  /** Number of leases being kept alive (all on one stream). */
  get size(): number {
    return this.listeners.size;
  }

  /** Sends one renewal for `id` on the next turn of the event loop, with any others due then. */
  renew(id: bigint): void {
    if (this.closed || !this.listeners.has(id)) return;
    this.unslot(id);
    this.due.push(id);
    this.flushing ??= setImmediate(() => this.flush());
  }

  /**
   * Renews `id` at the last slot at or before monotonic time `at` (see slotWidthMs), replacing any
   * renewal of it already waiting. `intervalMs`: how often the lease is renewed.
   */
  renewBy(id: bigint, at: number, intervalMs: number): void {
    if (this.closed || !this.listeners.has(id)) return;
    const width = slotWidthMs(intervalMs);
    const slot = Math.floor(at / width) * width;
    if (slot <= performance.now()) return this.renew(id);
    if (this.slotOf.get(id) === slot) return;
    this.unslot(id);
    let ids = this.slots.get(slot);
    if (!ids) this.slots.set(slot, (ids = new Set()));
    ids.add(id);
    this.slotOf.set(id, slot);
    if (slot < this.slotTimerAt) this.armSlots(slot);
  }

  private unslot(id: bigint): void {
    const slot = this.slotOf.get(id);
    if (slot === undefined) return;
    this.slotOf.delete(id);
    const ids = this.slots.get(slot)!;
    ids.delete(id);
    if (ids.size === 0) this.slots.delete(slot);
  }

  /** One timer, for the earliest slot. */
  private armSlots(at: number): void {
    clearTimeout(this.slotTimer);
    this.slotTimerAt = at;
    this.slotTimer = setTimeout(() => this.slotsDue(), Math.max(0, at - performance.now()));
  }

  private slotsDue(): void {
    this.slotTimer = undefined;
    this.slotTimerAt = Number.POSITIVE_INFINITY;
    const now = performance.now();
    let next = Number.POSITIVE_INFINITY;
    for (const [slot, ids] of this.slots) {
      if (slot > now) {
        next = Math.min(next, slot);
        continue;
      }
      this.slots.delete(slot);
      for (const id of ids) {
        this.slotOf.delete(id);
        this.due.push(id);
      }
    }
    if (next !== Number.POSITIVE_INFINITY) this.armSlots(next);
    this.flush();
  }

  /** Sends every renewal due, in one write (or queues them until a stream is open), and watches for late answers. */
  private flush(): void {
    if (this.flushing) clearImmediate(this.flushing);
    this.flushing = undefined;
    const ids = this.due.filter((id) => this.listeners.has(id));
    this.due = [];
    if (ids.length === 0 || this.closed) return;
    const at = performance.now();
    if (this.stream) this.write(ids, at);
    else {
      for (const id of ids) this.queued.add(id);
      void this.open();
    }
    this.watch(ids, at);
  }

  /** Tells each owner its renewal was asked for, and calls `onLate` after its `lateAfterMs`: one timer per distinct wait. */
  private watch(ids: readonly bigint[], at: number): void {
    const byWait = new Map<number, bigint[]>();
    for (const id of ids) {
      const l = this.listeners.get(id)!;
      l.onAsked?.(at);
      const ms = l.lateAfterMs?.();
      if (ms === undefined) continue;
      const group = byWait.get(ms);
      if (group) group.push(id);
      else byWait.set(ms, [id]);
    }
    for (const [ms, group] of byWait) {
      const t = setTimeout(
        () => {
          this.lateTimers.delete(t);
          for (const id of group) this.listeners.get(id)?.onLate?.(at);
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
    if (!this.stream || this.sent.size === 0) return;
    if (performance.now() - this.lastAnswerAt < quietMs) return;
    this.broken(this.stream);
  }

  /** One renewal of each of `ids`, sent at `at`, in one write. */
  private write(ids: readonly bigint[], at: number): void {
    const requests: pb.LeaseKeepAliveRequest[] = [];
    for (const id of ids) {
      const times = this.sent.get(id);
      if (times) times.push(at);
      else this.sent.set(id, [at]);
      requests.push({ ID: id });
    }
    this.stream!.writeMany(requests);
  }

  private async open(): Promise<void> {
    if (this.opening || this.stream || this.retryTimer || this.closed) return;
    this.opening = true;
    try {
      const { peer, stream: s, token } = await this.conn.openStream(rpc.Lease.leaseKeepAlive);
      if (this.closed || this.listeners.size === 0) {
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
    const ids = [...this.queued].filter((id) => this.listeners.has(id));
    this.queued.clear();
    if (ids.length > 0) this.write(ids, performance.now());
  }

  private onResponse(s: unknown, r: pb.LeaseKeepAliveResponse): void {
    if (s !== this.stream) return;
    this.backoff.reset();
    this.lastAnswerAt = performance.now();
    const id = r.ID ?? 0n;
    const times = this.sent.get(id);
    const sentAt = times?.shift();
    if (times?.length === 0) this.sent.delete(id); // `sent` holds only leases with renewals in flight
    const listener = this.listeners.get(id);
    if (sentAt === undefined || !listener) return;
    listener.onRenewed(r.TTL ?? 0n, sentAt);
  }

  /**
   * The stream failed or stalled: forget in-flight renewals, fail over, renew everything again.
   * Those renewals are watched like any other: if no stream answers them within an owner's
   * lateAfterMs, every owner hears it then, not only at its next renewal (a TTL/3 later).
   */
  private broken(s: unknown, failover = true, error?: unknown): void {
    if (s !== this.stream || !this.stream) return;
    this.dropStream();
    publishLeaseReconnect(this.conn.telemetry?.logger, this.conn.endpoints[this.peer]?.target ?? '?', this.listeners.size, error);
    if (failover) this.conn.failover(this.peer);
    const ids = [...this.listeners.keys()];
    for (const id of ids) this.queued.add(id);
    this.scheduleReopen();
    this.watch(ids, performance.now());
  }

  private scheduleReopen(): void {
    if (this.closed || this.retryTimer || this.listeners.size === 0) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      void this.open();
    }, this.backoff.next());
  }

  private dropStream(): void {
    const s = this.stream;
    this.stream = undefined;
    this.sent.clear();
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
    this.slots.clear();
    this.slotOf.clear();
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
    const ls = [...this.listeners.values()];
    this.listeners.clear();
    for (const l of ls) l.onClosed();
  }
}
