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

  constructor(private readonly conn: Connection) {}

  register(id: bigint, listener: KeepAliveListener): void {
    this.listeners.set(id, listener);
  }

  unregister(id: bigint): void {
    this.listeners.delete(id);
    this.sent.delete(id);
    this.queued.delete(id);
    if (this.listeners.size === 0) this.endStream();
  }

  /** Number of leases being kept alive (all on one stream). */
  get size(): number {
    return this.listeners.size;
  }

  /** Sends one renewal for `id` (once a stream is open, if none is). */
  renew(id: bigint): void {
    if (this.closed || !this.listeners.has(id)) return;
    if (!this.stream) {
      this.queued.add(id);
      void this.open();
      return;
    }
    this.write(id);
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

  private write(id: bigint): void {
    let times = this.sent.get(id);
    if (!times) this.sent.set(id, (times = []));
    times.push(performance.now());
    this.stream!.write({ ID: id });
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
    const ids = [...this.queued];
    this.queued.clear();
    for (const id of ids) if (this.listeners.has(id)) this.write(id);
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

  /** The stream failed or stalled: forget in-flight renewals, fail over, renew everything again. */
  private broken(s: unknown, failover = true, error?: unknown): void {
    if (s !== this.stream || !this.stream) return;
    this.dropStream();
    publishLeaseReconnect(this.conn.telemetry?.logger, this.conn.endpoints[this.peer]?.target ?? '?', this.listeners.size, error);
    if (failover) this.conn.failover(this.peer);
    for (const id of this.listeners.keys()) this.queued.add(id);
    this.scheduleReopen();
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
