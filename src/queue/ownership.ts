import { rethrown } from '../rethrow.js';
import { retryWhile } from '../client/backoff.js';
import { CompactedError, isTransient } from '../client/errors.js';
import { compare, type Compare, type KeyValue } from '../client/kv.js';
import type { Watch } from '../client/watch.js';
import type { Session } from '../session.js';
import { type LossReason, type OwnershipLostError, SessionExpiredError } from '../errors.js';
import type { AcquireProbe, HoldObserver } from '../metrics/telemetry.js';
import { RELEASED, releaseKey, type ReleaseResult, type ReleaseWhat } from './release.js';
import type { Due } from './recheck.js';
import { Holdings, queueOf, sessionQueue } from './state.js';
import type { Exit } from './gate.js';
import type { LostErrorFactory } from './wait.js';
import { publishOwnershipLost } from '../diagnostics.js';

/** How a loss reads in the lost error: `<key> (token <n>) is no longer owned: <why>`. */
const WHY: Record<LossReason, string> = {
  key_deleted: 'its key was deleted',
  moved_off_lease: 'its key was moved off its lease',
  watch_failed: 'its watch failed',
  session_closed: 'its session was lost',
  lease_expired: 'its session was lost',
};

/**
 * A holding an OpenTelemetry SDK records watches its key once held this long, even if nobody looks at `signal`: a
 * short one is released before it pays for a watch and a read (a fifth of a lock cycle); a long one's loss is recorded.
 */
const RECORDED_WATCH_AFTER_MS = 1000;

const NONE: readonly Ownership[] = Object.freeze([]);

/** What an {@link Ownership} is made of (see its fields). */
export interface OwnershipOptions {
  session: Session;
  key: string;
  fencingToken: bigint;
  /** Makes the primitive's lost error. */
  lost: LostErrorFactory;
  /** What is held (kind and name), for the release's metrics and diagnostics. */
  what: ReleaseWhat;
  /** The acquire's probe, when an OpenTelemetry SDK records: it records this holding from now on. */
  probe?: AcquireProbe | undefined;
  /** Ends this call's in-process turn on the key (gate.ts): on release, or when the holding is lost. */
  exit?: Exit | undefined;
}

/**
 * What a lock holder and an election leader have in common: a key on the session's lease, created at
 * revision `fencingToken`. Ownership lasts while that incarnation of the key exists and the session
 * lives; every check and release is guarded on the CreateRevision, so nothing here can touch a later
 * owner's key. Ownerships of this process may share one incarnation (calls on one session and name):
 * each release() ends only its own, the key goes with the last of them, and a loss ends them all.
 */
export class Ownership {
  private controller?: AbortController;
  private watch?: Watch;
  /** The batched re-check of our key while it is watched (armNet). */
  private net?: Due;
  /** Why ownership ended (lost, released or revoked), once it has; made on demand (see release). */
  private ended?: { reason?: unknown; make?: () => unknown };
  /** Why ownership was lost, when it ended by a loss rather than a release. */
  private loss?: LossReason;
  /** The release, once asked for: every later call gets the same answer. */
  private releasing?: Promise<ReleaseResult>;
  /** This holding no longer counts among the users of its key (a release, maybe still retried, was made). */
  private left = false;
  /** Metrics and spans of this holding, when an OpenTelemetry SDK records them. */
  private readonly observer?: HoldObserver;
  /** Starts watching a recorded holding (see RECORDED_WATCH_AFTER_MS). */
  private watchTimer?: NodeJS.Timeout;
  private readonly onSessionLost = (): void => this.lose(this.session.signal.reason, sessionLoss(this.session.signal.reason));

  readonly session: Session;
  /** The participant key, `<name>/<lease id hex>`. */
  readonly key: string;
  /** The key's CreateRevision: strictly increasing across owners, so protected resources can fence. */
  readonly fencingToken: bigint;
  private readonly lost: LostErrorFactory;
  private readonly what: ReleaseWhat;
  private exit: Exit | undefined;

  constructor(o: OwnershipOptions) {
    this.session = o.session;
    this.key = o.key;
    this.fencingToken = o.fencingToken;
    this.lost = o.lost;
    this.what = o.what;
    this.exit = o.exit;
    const { session, key, fencingToken, probe } = o;
    const q = sessionQueue<Ownership>(session);
    const holdings = (q.holdings ??= new Holdings());
    // A sibling already holding this incarnation: the same leadership, not another one.
    const observer = probe?.held(fencingToken, this.siblings(holdings.of(key)).length > 0);
    this.observer = observer;
    holdings.add(key, this);
    // Recorded holdings end with their session and after a while watch their key, even if nobody
    // looks at `signal`, so the held gauge, the losses counter and the hold span stay true.
    if (observer) {
      if (session.signal.aborted) this.onSessionLost();
      else session.signal.addEventListener('abort', this.onSessionLost, { once: true });
      if (!this.ended) this.watchTimer = setTimeout(() => this.watchNow(), RECORDED_WATCH_AFTER_MS).unref();
    }
    // A call of this process already waits for its turn on the key: watch, so that a loss frees it (holdersWatch).
    if (q.gates.waiting(key)) this.watchNow();
  }

  /**
   * Aborts as soon as ownership ends: session lost, the key deleted or replaced by anyone, or
   * released by us. Created on first use (or when another call of the process waits for the key).
   */
  get signal(): AbortSignal {
    return this.watchNow();
  }

  /**
   * Starts watching now (what the first look at `signal` does): a loss is then noticed, and ends
   * the holding, even if nobody ever looks at the signal. Returns the signal.
   */
  watchNow(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.ended) this.controller.abort(this.endReason());
      else this.startWatching();
    }
    return this.controller.signal;
  }

  /** Throws unless ownership still holds, checking the session's deadline against the clock now. */
  assert(): void {
    // Released by us, its delete still retried: not held any more, whatever etcd still has.
    if (this.left && !this.ended) throw this.releasedError();
    if (!this.ended) {
      try {
        this.session.assertAlive();
      } catch (err) {
        this.lose(err, sessionLoss(err));
      }
    }
    if (this.ended) throw rethrown(this.endReason());
  }

  /** A Txn compare that holds only while this owner's key is the one it created (Go's IsOwner). */
  ownerCompare(): Compare {
    return compare.createRevision(this.key, '=', this.fencingToken);
  }

  /** The Txn compares that hold only while we own the key: the incarnation we created, still on our lease. */
  ownerCompares(): Compare[] {
    return [this.ownerCompare(), compare.lease(this.key, '=', this.session.leaseId)];
  }

  /**
   * Deletes the key if it is still ours and no other call of this process uses it (else it is left to them), then ends
   * this ownership (the signal aborts: work still running under it runs unprotected). Idempotent. Never rejects: a failed
   * delete is retried in the background, guarded on the fencing token, until the key or the session is gone; the result
   * is then `pending`, and the signal aborts only once the key is gone.
   */
  release(): Promise<ReleaseResult> {
    return (this.releasing ??= this.releaseOnce());
  }

  private async releaseOnce(): Promise<ReleaseResult> {
    // Lost before this release: it says so (and still deletes what is left of our key, guarded).
    const lost = this.loss !== undefined ? this.endReason() : undefined;
    // Stop watching first (and do not start), or our own delete could be reported as a loss.
    clearTimeout(this.watchTimer);
    this.watch?.cancel();
    this.watch = undefined;
    this.disarmNet();
    this.left = true;
    // Left in etcd while another call of this process uses it or an enqueue in flight takes it over.
    const d = releaseKey(this.session, this.key, this.fencingToken, this.what);
    // The next call of this process on the key may go: its enqueue waits for our delete (if any).
    this.exit?.leave();
    if (lost !== undefined) {
      const settled = d ? d.done.then(() => {}) : Promise.resolve();
      return { state: 'lost', error: lost, settled };
    }
    if (d) {
      try {
        await d.first;
      } catch (error) {
        // Ends (released) once the key is finally gone, or the session ended and its lease takes it.
        const settled = d.done.then(() => this.endReleased());
        return { state: 'pending', error, settled };
      }
    }
    this.endReleased();
    return RELEASED;
  }

  /** Ends as released; the error (and its stack) is built only if someone looks: on the unlock hot path nobody does. */
  private endReleased(): void {
    this.end(undefined, () => this.releasedError());
  }

  private releasedError(): OwnershipLostError {
    return this.lost(this.key, `${this.key} (token ${this.fencingToken}) was released`, { reason: 'released' });
  }

  /**
   * Ends ownership locally with `reason` (or one `make` builds when asked); the key is left for
   * `release()`. `loss` says why, when ownership was lost rather than given up.
   */
  end(reason: unknown, make?: () => unknown, loss?: LossReason): void {
    if (this.ended) return;
    this.ended = make ? { make } : { reason };
    this.loss = loss;
    // The next call of this process on the key may go now only after a loss (nobody may be left to
    // release a dead handle), with a key of its own: the incarnation is retired. Otherwise (released,
    // or revoked by runAsLeader, whose release follows once its task settled) the release ends the turn.
    if (loss !== undefined) {
      sessionQueue<Ownership>(this.session).users.retire(this.key, this.fencingToken, loss);
      this.exit?.leave();
    }
    clearTimeout(this.watchTimer);
    if (this.observer || this.controller) this.session.signal.removeEventListener('abort', this.onSessionLost); // only these two listen
    this.watch?.cancel();
    this.watch = undefined;
    this.disarmNet();
    const siblings = this.siblings(sessionQueue<Ownership>(this.session).holdings?.remove(this.key, this));
    // Released or revoked while a sibling still holds the key: a leadership counted here goes on there.
    if (loss === undefined && siblings[0]?.observer) this.observer?.handOver(siblings[0].observer);
    this.observer?.ended(loss);
    this.controller?.abort(this.endReason());
    // A loss is the key's (or the session's): every holding of it ends.
    if (loss !== undefined) for (const s of siblings) s.lose(this.endReason(), loss);
  }

  /** The other live holdings of this incarnation of our key in this process (none: one empty array, NONE). */
  private siblings(holders: ReadonlySet<Ownership> | undefined): readonly Ownership[] {
    if (!holders || holders.size === 0) return NONE;
    return [...holders].filter((o) => o !== this && o.fencingToken === this.fencingToken && !o.ended);
  }

  private endReason(): unknown {
    const e = this.ended!;
    if (e.make) {
      e.reason = e.make();
      e.make = undefined;
    }
    return e.reason;
  }

  /** True once ownership ended, for whatever reason. */
  get isEnded(): boolean {
    return this.ended !== undefined;
  }

  /** Still held as far as this process knows: neither ended nor released. */
  get holds(): boolean {
    return this.ended === undefined && !this.left;
  }

  /** What is held: lock, permit, read, write or campaign. */
  get kind(): string {
    return this.what.kind;
  }

  private startWatching(): void {
    if (this.session.signal.aborted) return this.onSessionLost();
    this.session.signal.addEventListener('abort', this.onSessionLost, { once: true });
    // A watch that cannot even be made (the client closed under a session it no longer renews) is a failed one.
    this.watchKey().catch((err: unknown) => this.lose(err, 'watch_failed'));
  }

  /** Still the incarnation we own: same CreateRevision, on our lease. */
  private isOurs(kv: KeyValue | undefined): boolean {
    return kv !== undefined && kv.createRevision === this.fencingToken && kv.lease === this.session.leaseId;
  }

  /**
   * Our key is gone. After a release whose answer was lost (this holding left the key), that was that
   * release landing, or a sibling's (joined since): the holding ends released, not lost.
   */
  private keyGone(): void {
    if (!this.left) return this.lose(undefined, 'key_deleted');
    this.endReleased();
  }

  /**
   * Watches our key from "now" (served at once; one from a past revision waits for etcd's 100 ms catch-up loop), then
   * reads it: a change before the watch is seen by that read. Puts are watched too: one by someone else can move our key
   * to another lease (or none: a stray key waiters skip); proclaim's puts keep the lease and the CreateRevision.
   */
  private async watchKey(): Promise<void> {
    const client = this.session.client;
    while (!this.ended) {
      const w = client.watch(this.key);
      this.watch = w;
      try {
        await w.created;
        const r = await retryWhile(() => client.range({ key: Buffer.from(this.key) }), isTransient, this.session.signal);
        if (this.watch !== w) return; // released or ended meanwhile
        const kv = r.kvs[0];
        if (!this.isOurs(kv)) return this.notOurs(kv);
        this.armNet();
        // Only an event after that read can end the holding. A watch from "now" on a member that lags
        // may still deliver older ones (the delete of our previous incarnation of this key): the read
        // reflects them, and no event at or below our CreateRevision is about this incarnation.
        const after = r.header.revision > this.fencingToken ? r.header.revision : this.fencingToken;
        for await (const batch of w) {
          if (this.watch !== w) return; // cancelled by release(): our own delete is no loss
          for (const e of batch.events) {
            if (e.kv.modRevision <= after) continue;
            if (e.type === 'delete') return this.keyGone();
            if (!this.isOurs(e.kv)) return this.lose(undefined, 'moved_off_lease');
          }
        }
        return; // cancelled: ownership ended or being released
      } catch (err) {
        if (this.watch !== w) return;
        // A compacted resume: watch from now again and read. Anything else: we cannot vouch any more.
        if (!(err instanceof CompactedError)) return this.lose(err, 'watch_failed');
      } finally {
        w.cancel();
      }
    }
  }

  /** What a read found instead of our key: gone (or a new incarnation), or moved off our lease. */
  private notOurs(kv: KeyValue | undefined): void {
    const deleted = kv === undefined || kv.createRevision !== this.fencingToken;
    return deleted ? this.keyGone() : this.lose(undefined, 'moved_off_lease');
  }

  /**
   * The batched re-check also reads our key every max(10 s, TTL): a delete whose event never came (etcd
   * 3.4 before 3.4.36 and 3.5 before 3.5.18 can drop one near a compaction: etcd 17529, 18089, 19179)
   * still ends the holding.
   */
  private armNet(): void {
    if (this.net || this.ended) return;
    let read: KeyValue | undefined;
    const net: Due = {
      check: { keys: [this.key], blocked: ([kv]) => ((read = kv), this.isOurs(kv)) },
      intervalMs: Math.max(10_000, this.session.ttl * 1000),
      due: 0,
      stale: () => {
        if (this.net !== net) return;
        this.net = undefined;
        if (!this.ended) this.notOurs(read);
      },
    };
    this.net = net;
    queueOf(this.session.client).rechecker.add(net);
  }

  private disarmNet(): void {
    if (this.net) queueOf(this.session.client).rechecker.remove(this.net);
    this.net = undefined;
  }

  private lose(cause: unknown, loss: LossReason): void {
    if (this.ended) return;
    // Released by us, its delete still retried when the session ended: the lease takes the key, no loss.
    if (this.left) return this.endReleased();
    const err = this.lost(this.key, `${this.key} (token ${this.fencingToken}) is no longer owned: ${WHY[loss]}`, { reason: loss, cause });
    this.endLost(err, loss);
  }

  /**
   * A write guarded by ownerCompares() failed: our key is gone (`key_deleted`) or moved off our lease.
   * Ends this ownership as lost with `err` (the caller's), as a watch that saw the change would have.
   */
  ownerCompareFailed(err: Error, loss: LossReason = 'key_deleted'): void {
    if (this.ended || this.left) return;
    this.endLost(err, loss);
  }

  private endLost(err: Error, loss: LossReason): void {
    this.end(err, undefined, loss);
    publishOwnershipLost(this.session.client.telemetry.logger, this.key, this.fencingToken, loss, err);
  }
}

/** This process's holdings of `key` still held: what an RWMutex checks before a downgrade or upgrade. */
export function liveHoldings(session: Session, key: string): Ownership[] {
  const set = sessionQueue<Ownership>(session).holdings?.of(key);
  return set ? [...set].filter((o) => o.holds) : [];
}

/** The loss reason for a session that ended: closed by its owner, or its lease expired (or may have). */
function sessionLoss(err: unknown): LossReason {
  const reason = err instanceof SessionExpiredError ? err.reason : undefined;
  return reason === 'closed' || reason === 'client_closed' ? 'session_closed' : 'lease_expired';
}
