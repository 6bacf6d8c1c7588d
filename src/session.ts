import { randomBytes } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { rethrown } from './rethrow.js';
import { settledWithin } from './client/backoff.js';
import type { Client } from './client/client.js';
import { ClientClosedError, InvalidArgumentError, LeaseNotFoundError } from './client/errors.js';
import { SessionExpiredError, type SessionEndReason } from './errors.js';
import { publishLateRenewal, publishSessionLost } from './diagnostics.js';
import { telemetryOf } from './metrics/telemetry.js';

/** etcd's upper bound on a lease TTL, in seconds. */
export const MAX_TTL = 9_000_000_000;

export interface SessionOptions {
  /** Lease TTL in seconds (whole number, 1 to 9e9). Default 30: long enough to ride out a leader election. */
  ttl?: number;
  /** Adopt this existing lease instead of granting a new one (not one a session of the same client keeps alive: share that session). */
  leaseId?: bigint;
  /** Cancels creation (not the session once created). */
  signal?: AbortSignal;
  /**
   * How long before the proven lease deadline the session declares itself lost, so that work can
   * stop before the server could expire the lease. Default: a sixth of the TTL, at most 5 s.
   */
  safetyMarginMs?: number;
}

/**
 * Registers `work` (a delete of a key on this session that keeps trying) for `session.close()` and
 * its client's `close()` to wait for, within their deadline, before they revoke or end the streams.
 */
export function finishBeforeClose(session: Session, work: Promise<unknown>): void {
  session.finishBeforeClose(work);
}

/** Ends `session` as 'lease_gone': a write or compare on its lease found the lease gone. */
export function markLeaseGone(session: Session): void {
  session.leaseGone();
}

/**
 * A lease kept alive on the client's shared keepalive stream, and the holder's view of whether it
 * still lives. Keys attached to it vanish when the process stops renewing: locks free themselves.
 *
 * The deadline is conservative: a renewal sent at monotonic time t and answered with TTL proves the
 * lease lives until at least t + TTL on the server, whatever the answer's delay. `signal` aborts a
 * safety margin before that, so a paused or partitioned holder learns of the loss before anyone else
 * can take over.
 */
export class Session implements AsyncDisposable {
  /** The lease id (int64; above 2^53, so a bigint). */
  readonly leaseId: bigint;
  /** Aborts with a SessionExpiredError when the session is lost or closed. */
  readonly signal: AbortSignal;
  /** Settles (resolves with the reason) when the session is lost or closed. Never rejects. */
  readonly done: Promise<SessionExpiredError>;
  private grantedTtl: number;
  private readonly margin?: number;
  private readonly controller = new AbortController();
  private resolveDone!: (e: SessionExpiredError) => void;
  /** Monotonic time until which the lease is proven alive on the server. */
  private provenUntil: number;
  /** Repeats the late-renewal check while a renewal stays unanswered (none otherwise). */
  private lateTimer?: NodeJS.Timeout;
  /**
   * Fires at the loss deadline. Armed at creation, and once a renewal is late (see late): every
   * answered renewal disarms it, unless the deadline could come before the next renewal is found
   * late (a large safety margin). A thousand healthy sessions then wake the process for their
   * renewals alone, not once more each for a deadline that keeps moving.
   */
  private expiryTimer?: NodeJS.Timeout;
  private awaiting = false;
  private renewSentAt = 0;
  private renewing = true;
  private closing?: Promise<void>;
  /** Work close() lets finish first: deletes still retried in the background. */
  private readonly finishing = new Set<Promise<unknown>>();
  /**
   * Told once when the session ends (see addEndListener): the first inline, a Set from the second.
   * The first listener on `signal` would cost a session 112 B, and a waiter often has one of its own.
   */
  private endListeners: (() => void) | Set<() => void> | undefined;

  private constructor(
    readonly client: Client,
    leaseId: bigint,
    ttl: number,
    provenUntil: number,
    safetyMarginMs: number | undefined,
  ) {
    this.leaseId = leaseId;
    this.grantedTtl = ttl;
    this.provenUntil = provenUntil;
    if (safetyMarginMs !== undefined) this.margin = safetyMarginMs;
    this.signal = this.controller.signal;
    // Every waiter and every held lock listens here: many is normal, not a leak.
    setMaxListeners(0, this.signal);
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
    client.keepAlives.register(leaseId, {
      onRenewed: (ttl, sentAt) => this.renewed(ttl, sentAt),
      onClosed: () => this.end('client_closed'),
      onAsked: (at) => this.asked(at),
      lateAfterMs: () => this.retryMs(),
      onLate: (askedAt) => this.late(askedAt),
    });
    telemetryOf(client).trackSession(this);
    this.armExpiry();
    this.scheduleRenewal(performance.now());
  }

  /** Grants (or adopts) a lease and starts renewing it every TTL/3. */
  static async create(client: Client, options: SessionOptions = {}): Promise<Session> {
    const ttl = options.ttl ?? 30;
    if (!Number.isInteger(ttl) || ttl < 1 || ttl > MAX_TTL) {
      throw new InvalidArgumentError(`ttl must be a whole number of seconds from 1 to ${MAX_TTL}, got ${ttl}; 30 is a good default`);
    }
    const margin = options.safetyMarginMs;
    if (margin !== undefined && (!Number.isFinite(margin) || margin < 0 || margin >= ttl * 1000)) {
      throw new InvalidArgumentError(`safetyMarginMs must be from 0 to below the TTL (${ttl * 1000} ms), got ${margin}`);
    }
    const signal = options.signal;
    const sentAt = performance.now();
    if (options.leaseId !== undefined) {
      const t = await client.leaseTimeToLive(options.leaseId, { signal });
      if (t.ttl <= 0) throw new LeaseNotFoundError(`lease ${options.leaseId.toString(16)} does not exist (expired or revoked)`);
      // Closed while the answer was on its way: nothing would renew the lease or end the session.
      if (client.closed) throw new ClientClosedError();
      // One listener per lease on the client's keepalive stream: a second would leave the first deaf to its loss.
      if (client.keepAlives.has(options.leaseId))
        throw new InvalidArgumentError(
          `lease ${options.leaseId.toString(16)} is kept alive by a session of this client already: share that session, or orphan() it first`,
        );
      return new Session(client, options.leaseId, t.grantedTtl, sentAt + t.ttl * 1000, margin);
    }
    // We pick the id ourselves, so a grant whose answer was lost can be retried without leaking a lease.
    const id = leaseIds.next();
    let granted: { id: bigint; ttl: number };
    try {
      granted = await client.leaseGrant(ttl, { id, signal });
      signal?.throwIfAborted();
    } catch (err) {
      // The grant may have been applied before the abort or failure: we know its id, so revoke it.
      if (!client.closed) await client.leaseRevoke(id).catch(() => {});
      throw err;
    }
    // As for an adopted lease; the lease is left to expire, as client.close() leaves every session's.
    if (client.closed) throw new ClientClosedError();
    return new Session(client, granted.id, granted.ttl, sentAt + granted.ttl * 1000, margin);
  }

  /** The TTL the server granted, in seconds. */
  get ttl(): number {
    return this.grantedTtl;
  }

  /** Milliseconds before this session declares itself lost if no renewal succeeds meanwhile. */
  remainingMs(): number {
    if (this.signal.aborted) return 0;
    return Math.max(0, this.lossAt() - performance.now());
  }

  /**
   * Throws the SessionExpiredError if the session is lost, checking the clock itself: a process that
   * just woke from a long pause learns the truth before any timer had a chance to run.
   */
  assertAlive(): void {
    if (!this.signal.aborted && performance.now() >= this.lossAt()) this.end('deadline');
    if (this.signal.aborted) throw rethrown(this.signal.reason);
  }

  /**
   * Revokes the lease (deleting its keys) and ends the session. Idempotent. A session already lost
   * to its deadline still tries to revoke (the server may not have expired the lease yet, and its
   * keys would block others until it does), but then ignores failures. A release still being
   * retried in the background (its first delete failed) is first given up to the client's
   * callTimeoutMs to land, so that its handle ends released rather than revoked.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      const work = this.finishing;
      if (work.size > 0 && !this.signal.aborted && !this.client.closed) {
        await settledWithin([...work], this.client.callTimeoutMs);
      }
      const before = this.signal.aborted ? (this.signal.reason as SessionExpiredError).reason : undefined;
      this.end('closed');
      if (this.client.closed || before === 'lease_gone' || before === 'client_closed' || before === 'closed') return;
      const revoke = this.client.leaseRevoke(this.leaseId);
      await (before === undefined ? revoke : revoke.catch(() => {}));
    })();
    return this.closing;
  }

  /**
   * Stops renewing without revoking: the lease, and every key on it, lives on until its TTL runs out
   * (a process handing its lease to another). The signal still fires at the local deadline, but its
   * timer does not keep the process alive on its own.
   */
  orphan(): void {
    this.stopRenewing();
    // No renewal will move the deadline or find itself late: watch it from now on.
    if (!this.signal.aborted && !this.expiryTimer) this.armExpiry();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /**
   * @internal Registers `work` (a delete of a key on this session that keeps trying) for close() and
   * the client's close() to wait for, within their deadline, before they revoke or end the streams.
   */
  finishBeforeClose(work: Promise<unknown>): void {
    const s = this.finishing;
    s.add(work);
    void work.finally(() => s.delete(work)).catch(() => {});
    this.client.finishBeforeClose(work);
  }

  /**
   * @internal Calls `listener` once when this session ends (lost or closed), right after `signal`
   * aborted, unless removed first: as a listener on `signal` would be, for less memory. Nothing once
   * it has ended (the caller checks `signal` first).
   */
  addEndListener(listener: () => void): void {
    if (this.signal.aborted) return;
    const l = this.endListeners;
    if (l === undefined) this.endListeners = listener;
    else if (l instanceof Set) l.add(listener);
    else if (l !== listener) this.endListeners = new Set([l, listener]);
  }

  /** @internal Removes an {@link addEndListener} listener. */
  removeEndListener(listener: () => void): void {
    const l = this.endListeners;
    if (l === listener) this.endListeners = undefined;
    else if (l instanceof Set && l.delete(listener) && l.size === 0) this.endListeners = undefined;
  }

  /** @internal A write or compare on this session's lease found the lease gone: the session ends. */
  leaseGone(): void {
    this.end('lease_gone');
  }

  /** A renewal sent at monotonic `sentAt` was answered with `ttl`: the lease lives until sentAt + ttl. */
  private renewed(ttl: bigint, sentAt: number): void {
    if (!this.renewing) return; // false once ended, too (end() stops renewing first)
    const tel = telemetryOf(this.client);
    if (tel.metricsOn) tel.keepaliveDuration.record((performance.now() - sentAt) / 1000);
    if (ttl <= 0n) return this.end('lease_gone');
    this.awaiting = false;
    if (this.lateTimer) {
      clearTimeout(this.lateTimer);
      this.lateTimer = undefined;
    }
    this.grantedTtl = Number(ttl);
    const until = sentAt + this.grantedTtl * 1000;
    if (until > this.provenUntil) this.provenUntil = until;
    // Nothing outstanding: the next renewal, asked within an interval, arms the deadline once it is
    // late (a retry wait after it was asked), which is before the deadline unless the margin is large.
    clearTimeout(this.expiryTimer);
    this.expiryTimer = undefined;
    if (this.lossAt() <= sentAt + this.renewIntervalMs() + this.retryMs()) this.armExpiry();
    this.scheduleRenewal(sentAt);
  }

  private marginMs(): number {
    return this.margin ?? Math.min(5000, (this.grantedTtl * 1000) / 6);
  }

  private lossAt(): number {
    return this.provenUntil - this.marginMs();
  }

  private renewIntervalMs(): number {
    return (this.grantedTtl * 1000) / 3;
  }

  /** How long to wait for a renewal's answer before trying another endpoint. */
  private retryMs(): number {
    return Math.max(250, Math.min(2000, (this.grantedTtl * 1000) / 10));
  }

  /** The next renewal leaves TTL/3 after `from` (the last one's send time), or earlier, with others due then (the hub's slots). */
  private scheduleRenewal(from: number): void {
    const interval = this.renewIntervalMs();
    this.client.keepAlives.renewBy(this.leaseId, from + interval, interval);
  }

  /** The hub asked for our renewal at `at` (sent, or queued until a stream opens). */
  private asked(at: number): void {
    if (this.awaiting) return; // an earlier one is still unanswered: lateness counts from it
    this.renewSentAt = at;
    this.awaiting = true;
  }

  /**
   * retryMs after our renewal asked at `askedAt` (an older one answered since does not count):
   * unanswered, ask the hub every retryMs whether its stream is stuck.
   */
  private late(askedAt = this.renewSentAt): void {
    if (!this.awaiting || askedAt < this.renewSentAt || this.lateTimer || !this.renewing) return;
    if (!this.expiryTimer) this.armExpiry();
    if (this.signal.aborted) return;
    // A stuck stream is replaced on the next endpoint, where every lease is renewed again.
    this.client.keepAlives.stalled(this.retryMs());
    publishLateRenewal(this.client.telemetry.logger, this.leaseId, performance.now() - this.renewSentAt, this.remainingMs());
    this.lateTimer = setTimeout(() => {
      this.lateTimer = undefined;
      this.late();
    }, this.retryMs());
  }

  private armExpiry(): void {
    clearTimeout(this.expiryTimer);
    this.expiryTimer = undefined;
    const ms = this.lossAt() - performance.now();
    if (ms <= 0) return this.end('deadline');
    this.expiryTimer = setTimeout(() => this.assertAliveQuietly(), Math.min(ms, 2 ** 31 - 1));
    // The keepalive stream keeps a live session's process running; this timer alone should not.
    this.expiryTimer.unref();
  }

  private assertAliveQuietly(): void {
    this.expiryTimer = undefined;
    if (this.signal.aborted) return;
    // A timer may fire a fraction of a millisecond early (the event loop's clock is whole
    // milliseconds): before the deadline, watch the rest of it.
    if (performance.now() >= this.lossAt()) this.end('deadline');
    else this.armExpiry();
  }

  private stopRenewing(): void {
    if (!this.renewing) return;
    this.renewing = false;
    this.awaiting = false;
    clearTimeout(this.lateTimer);
    this.lateTimer = undefined;
    this.client.keepAlives.unregister(this.leaseId);
  }

  private end(reason: SessionEndReason, cause?: unknown): void {
    if (this.signal.aborted) return;
    this.stopRenewing();
    clearTimeout(this.expiryTimer);
    this.expiryTimer = undefined;
    const err = new SessionExpiredError(reason, this.leaseId, cause === undefined ? undefined : { cause });
    telemetryOf(this.client).sessionEnded(this, reason);
    this.controller.abort(err);
    this.tellEnded();
    if (reason === 'deadline' || reason === 'lease_gone') publishSessionLost(this.client.telemetry.logger, this.leaseId, reason, err);
    this.resolveDone(err);
  }

  /** Calls the end listeners, each once; one that throws is reported as an uncaught exception, as one on `signal` would be, and the others still run. */
  private tellEnded(): void {
    const l = this.endListeners;
    this.endListeners = undefined;
    if (l === undefined) return;
    for (const f of typeof l === 'function' ? [l] : l) {
      try {
        f();
      } catch (err) {
        process.nextTick(() => {
          throw err;
        });
      }
    }
  }
}

/** @internal where client-chosen lease ids come from: the simulator draws them from its seed instead. */
export const leaseIds = { next: randomLeaseId };

/** A random positive int64: etcd accepts client-chosen lease ids, which makes Grant retry-safe. */
function randomLeaseId(): bigint {
  const id = randomBytes(8).readBigUInt64BE() & 0x7fff_ffff_ffff_ffffn;
  return id === 0n ? 1n : id;
}
