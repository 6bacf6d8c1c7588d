import { retryWhile } from '../client/backoff.js';
import { CompactedError, isTransient } from '../client/errors.js';
import { compare, op, type Compare, type KeyValue } from '../client/kv.js';
import type { Watch } from '../client/watch.js';
import type { Session } from '../session.js';
import { SessionExpiredError, type OwnershipLostError } from '../errors.js';
import type { LossReason } from '../metrics/names.js';
import type { HoldObserver } from '../metrics/telemetry.js';
import { forgetKey } from './ticket.js';

/**
 * What a lock holder and an election leader have in common: a key on the session's lease, created at
 * revision `fencingToken`. Ownership lasts while that incarnation of the key exists and the session
 * lives; every check and release is guarded on the CreateRevision, so nothing here can touch a later
 * owner's key.
 */
export class Ownership {
  private controller?: AbortController;
  private watch?: Watch;
  /** Why ownership ended (lost, released or revoked), once it has; made on demand (see release). */
  private ended?: { reason?: unknown; make?: () => unknown };
  private released = false;
  private readonly onSessionLost = (): void => this.lose(this.session.signal.reason, 'its session was lost', sessionLoss(this.session.signal.reason));

  constructor(
    readonly session: Session,
    /** The participant key, `<name>/<lease id hex>`. */
    readonly key: string,
    /** The key's CreateRevision: strictly increasing across owners, so protected resources can fence. */
    readonly fencingToken: bigint,
    private readonly makeLostError: (message: string, cause?: unknown) => OwnershipLostError,
    /** Metrics and spans of this holding, when an OpenTelemetry SDK records them. */
    private readonly observer?: HoldObserver,
  ) {
    // Recorded holdings end with their session even if nobody looks at `signal`, so that the held
    // gauge and the losses counter stay true. (Without telemetry this costs nothing: no listener.)
    if (observer) {
      if (session.signal.aborted) this.onSessionLost();
      else session.signal.addEventListener('abort', this.onSessionLost, { once: true });
    }
  }

  /**
   * Aborts as soon as ownership ends: session lost, the key deleted or replaced by anyone, or
   * released by us. Created on first use, so code that never looks pays nothing.
   */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.ended) this.controller.abort(this.endReason());
      else this.startWatching();
    }
    return this.controller.signal;
  }

  /** Throws unless ownership still holds, checking the session's deadline against the clock now. */
  assert(): void {
    if (!this.ended) {
      try {
        this.session.assertAlive();
      } catch (err) {
        this.lose(err, 'its session was lost', sessionLoss(err));
      }
    }
    if (this.ended) throw this.endReason();
  }

  /** A Txn compare that holds only while this owner's key is the one it created. */
  ownerCompare(): Compare {
    return compare.createRevision(this.key, '=', this.fencingToken);
  }

  /**
   * Deletes the key if it is still ours, then ends ownership (the signal aborts: work still running
   * under it now runs unprotected). Safe to retry: a retry never deletes a later owner's key.
   */
  async release(): Promise<void> {
    if (this.released) return;
    // Stop watching first, or our own delete could be reported as a loss.
    const watching = this.watch !== undefined;
    this.watch?.cancel();
    this.watch = undefined;
    try {
      await this.session.client.txn(
        { compare: [this.ownerCompare()], success: [op.delete(this.key)], failure: [] },
        { idempotent: true },
      );
    } catch (err) {
      // Still ours as far as we know: watch again (from now, then a read: nothing meanwhile is missed).
      if (watching && !this.ended) void this.watchKey();
      throw err;
    }
    this.released = true;
    forgetKey(this.session, this.key);
    // The error (and its stack) is built only if someone looks: on the unlock hot path nobody does.
    this.end(undefined, () => this.makeLostError(`${this.key} (token ${this.fencingToken}) was released`));
  }

  /**
   * Ends ownership locally with `reason` (or one `make` builds when asked); the key is left for
   * `release()`. `loss` says why, when ownership was lost rather than given up.
   */
  end(reason: unknown, make?: () => unknown, loss?: LossReason): void {
    if (this.ended) return;
    this.ended = make ? { make } : { reason };
    this.session.signal.removeEventListener('abort', this.onSessionLost);
    this.watch?.cancel();
    this.watch = undefined;
    this.observer?.ended(loss);
    this.controller?.abort(this.endReason());
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

  private startWatching(): void {
    if (this.session.signal.aborted) return this.onSessionLost();
    this.session.signal.addEventListener('abort', this.onSessionLost, { once: true });
    void this.watchKey();
  }

  /** Still the incarnation we own: same CreateRevision, on our lease. */
  private isOurs(kv: KeyValue | undefined): boolean {
    return kv !== undefined && kv.createRevision === this.fencingToken && kv.lease === this.session.leaseId;
  }

  /**
   * Watches our key from "now" (served at once, unlike a watch from a past revision, which waits for
   * etcd's 100 ms catch-up loop) and, once the watch is confirmed, reads the key: a change between
   * the confirmation of ownership and the watch is seen by that read. Puts are watched too: one by
   * someone else can move our key to another lease (or none), which makes it a stray key that
   * waiters skip; proclaim's own puts keep the lease and the CreateRevision.
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
        if (!this.isOurs(kv)) {
          const deleted = kv === undefined || kv.createRevision !== this.fencingToken;
          return this.lose(undefined, deleted ? 'its key was deleted' : 'its key was moved off its lease', deleted ? 'key_deleted' : 'moved_off_lease');
        }
        for await (const batch of w) {
          if (this.watch !== w) return; // cancelled by release(): our own delete is no loss
          for (const e of batch.events) {
            if (e.type === 'delete') return this.lose(undefined, 'its key was deleted', 'key_deleted');
            if (!this.isOurs(e.kv)) return this.lose(undefined, 'its key was moved off its lease', 'moved_off_lease');
          }
        }
        return; // cancelled: ownership ended or being released
      } catch (err) {
        if (this.watch !== w) return;
        // A compacted resume: watch from now again and read. Anything else: we cannot vouch any more.
        if (!(err instanceof CompactedError)) return this.lose(err, 'its watch failed', 'watch_failed');
      } finally {
        w.cancel();
      }
    }
  }

  private lose(cause: unknown, why: string, loss: LossReason): void {
    if (this.ended) return;
    this.end(this.makeLostError(`${this.key} (token ${this.fencingToken}) is no longer owned: ${why}`, cause), undefined, loss);
  }
}

/** The loss reason for a session that ended: closed by its owner, or its lease expired (or may have). */
function sessionLoss(err: unknown): LossReason {
  const reason = err instanceof SessionExpiredError ? err.reason : undefined;
  return reason === 'closed' || reason === 'client-closed' ? 'session_closed' : 'lease_expired';
}

/**
 * What a lock holder and a leader hold in their hands: the key, the fencing token, the loss signal
 * and the owner compare. {@link LockHandle} and {@link LeaderHandle} add their own verbs.
 */
export interface OwnerHandle extends AsyncDisposable {
  /** Our key, `<name>/<lease id in hex>`. */
  readonly key: string;
  /**
   * The key's CreateRevision: every later owner gets a larger one. Pass it to the resource you
   * protect and have it reject writes with a token lower than the highest it has seen. A bigint:
   * `JSON.stringify` refuses bigints, so send `String(token)` (and compare as BigInt on the other end).
   */
  readonly fencingToken: bigint;
  /** The session the key lives on. */
  readonly session: Session;
  /**
   * Aborts when ownership ends: session lost, our key deleted or moved off our lease by anyone, or
   * released by us. It fires before the server can expire the lease; stop protected work then.
   */
  readonly signal: AbortSignal;
  /** A Txn compare that succeeds only while we own the key: make your own etcd writes conditional on it. */
  ownerCompare(): Compare;
}

/** The shared implementation of the handles; not exported from the package. */
export abstract class OwnerHandleBase implements OwnerHandle {
  constructor(protected readonly own: Ownership) {}

  get key(): string {
    return this.own.key;
  }

  get fencingToken(): bigint {
    return this.own.fencingToken;
  }

  get session(): Session {
    return this.own.session;
  }

  get signal(): AbortSignal {
    return this.own.signal;
  }

  ownerCompare(): Compare {
    return this.own.ownerCompare();
  }

  abstract [Symbol.asyncDispose](): Promise<void>;
}

/** A lock's, permit's or RW lock's handle: assertHeld(), and one release verb the subclass names; `await using` releases. */
export abstract class HeldHandle extends OwnerHandleBase {
  assertHeld(): void {
    this.own.assert();
  }

  override [Symbol.asyncDispose](): Promise<void> {
    return this.own.release();
  }
}
