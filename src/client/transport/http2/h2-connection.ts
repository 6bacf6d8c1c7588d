import * as http2 from 'node:http2';

const { NGHTTP2_ENHANCE_YOUR_CALM } = http2.constants;

/** A unary call or a stream, as its session sees it. */
export interface Call {
  /** The session was dropped by us (keepalive): end now, not when nghttp2 gets round to it. */
  dropped(session: H2Connection): void;
  /** The server is going away: a stream ends now, so that its owner reopens it elsewhere. */
  goingAway(session: H2Connection): void;
}

/** What a session needs of its transport. */
export interface SessionHost {
  readonly keepaliveTimeMs: number;
  readonly keepaliveTimeoutMs: number;
  /** etcd said we ping too often: ping half as often. */
  slowKeepalive(): void;
  /** The session takes no new calls (GOAWAY, closed, dropped). */
  detach(session: H2Connection): void;
}

/** One HTTP/2 connection that reached "ready" (both sides' SETTINGS acknowledged). */
export class H2Connection {
  private active = 0;
  private readonly calls = new Set<Call>();
  /** The last stream id of a GOAWAY received, or -1: streams above it were never processed. */
  goawayLastId = -1;
  /** Why we dropped the connection (keepalive), for the calls it fails. */
  dropReason?: string;
  lastError?: Error;
  /** No new call goes here (GOAWAY, stream ids nearly used up, closing). */
  retired = false;
  /** When anything last arrived on the connection (performance.now()): a live peer needs no ping. */
  private heardAt = performance.now();
  private pingedAt = -Infinity;
  /** A ping is awaiting its answer: its timeout runs whether or not calls remain. */
  private pinging = false;
  private keepaliveTimer: NodeJS.Timeout | undefined;

  constructor(
    readonly transport: SessionHost,
    readonly h2: http2.ClientHttp2Session,
  ) {}

  get usable(): boolean {
    return !this.retired && !this.h2.closed && !this.h2.destroyed && this.goawayLastId < 0 && this.dropReason === undefined;
  }

  /** Something arrived from the server. */
  heard(): void {
    this.heardAt = performance.now();
  }

  /** Takes no new call; the calls in flight finish, then the connection closes. */
  retire(): void {
    this.retired = true;
    this.transport.detach(this);
    if (!this.h2.closed && !this.h2.destroyed) this.h2.close();
  }

  onGoaway(code: number, lastStreamId: number, opaque: Buffer | undefined): void {
    // etcd's answer to pings more often than its --grpc-keepalive-min-time: ping half as often.
    if (code === NGHTTP2_ENHANCE_YOUR_CALM && opaque?.toString() === 'too_many_pings') this.transport.slowKeepalive();
    this.goawayLastId = this.goawayLastId < 0 ? lastStreamId : Math.min(this.goawayLastId, lastStreamId);
    this.transport.detach(this);
    for (const call of [...this.calls]) call.goingAway(this);
  }

  onClose(): void {
    this.clearKeepalive();
    this.transport.detach(this);
  }

  callStarted(call: Call): void {
    this.calls.add(call);
    if (++this.active === 1) {
      this.h2.ref();
      // Quiet for a whole interval: the peer may have gone while we had nothing to ask; ask now.
      const now = performance.now();
      const time = this.transport.keepaliveTimeMs;
      if (time > 0 && !this.pinging && now - this.heardAt >= time && now - this.pingedAt >= time) this.ping();
      else this.scheduleKeepalive();
    }
  }

  callEnded(call: Call): void {
    if (!this.calls.delete(call)) return;
    // The keepalive timer stays (unref'd): it does nothing while idle, and the next call reuses it.
    if (--this.active === 0 && !this.h2.destroyed) this.h2.unref();
  }

  /** While calls are in flight, a ping once nothing has arrived for keepaliveTimeMs. */
  private scheduleKeepalive(): void {
    const time = this.transport.keepaliveTimeMs;
    if (time <= 0 || this.active === 0 || this.keepaliveTimer || this.h2.closed || this.h2.destroyed) return;
    const due = Math.max(this.heardAt, this.pingedAt) + time - performance.now();
    this.keepaliveTimer = setTimeout(
      () => {
        this.keepaliveTimer = undefined;
        if (this.active === 0) return;
        if (performance.now() - Math.max(this.heardAt, this.pingedAt) >= time) this.ping();
        else this.scheduleKeepalive();
      },
      Math.max(0, due),
    );
    this.keepaliveTimer.unref();
  }

  private ping(): void {
    // A connection that is closing sends no ping (Node refuses); its streams end by themselves.
    if (this.h2.closed || this.h2.destroyed) return;
    const timeout = this.transport.keepaliveTimeoutMs;
    this.clearKeepalive();
    this.pinging = true;
    this.pingedAt = performance.now();
    this.keepaliveTimer = setTimeout(
      () => this.drop(`the connection was dropped: a keepalive ping went unanswered for ${timeout} ms`),
      timeout,
    );
    this.keepaliveTimer.unref();
    let sent = false;
    try {
      sent = this.h2.ping((err) => {
        this.pinging = false;
        this.clearKeepalive();
        if (err) {
          if (this.usable) this.drop(`the connection was dropped: a keepalive ping failed (${err.message})`);
          return;
        }
        this.heard();
        this.scheduleKeepalive();
      });
    } catch (err) {
      this.lastError = err as Error;
    }
    if (!sent) {
      this.pinging = false;
      this.clearKeepalive();
      if (!this.h2.closed && !this.h2.destroyed) this.drop('the connection was dropped: a keepalive ping could not be sent');
    }
  }

  private clearKeepalive(): void {
    if (this.keepaliveTimer) clearTimeout(this.keepaliveTimer);
    this.keepaliveTimer = undefined;
  }

  /** Declares the connection dead: its calls fail UNAVAILABLE with `reason`, and it is destroyed. */
  drop(reason: string): void {
    if (this.dropReason !== undefined) return;
    this.dropReason = reason;
    this.pinging = false;
    this.clearKeepalive();
    this.transport.detach(this);
    for (const call of [...this.calls]) call.dropped(this);
    if (!this.h2.destroyed) this.h2.destroy();
  }
}
