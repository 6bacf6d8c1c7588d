import type { Compare } from './client/kv.js';
import { compare, op } from './client/kv.js';
import { CompactedError } from './client/errors.js';
import type { Watch } from './client/watch.js';
import type { Session } from './session.js';
import type { OwnershipLostError } from './errors.js';

/**
 * What a lock holder and an election leader have in common: a key on the session's lease, created at
 * revision `fencingToken`. Ownership lasts while that incarnation of the key exists and the session
 * lives; every check and release is guarded on the CreateRevision, so nothing here can touch a later
 * owner's key.
 */
export class Ownership {
  private controller?: AbortController;
  private watch?: Watch;
  /** Why ownership ended, once it has. */
  private lost?: { reason: unknown };
  private released = false;
  private readonly onSessionLost = (): void => this.lose(this.session.signal.reason, 'its session was lost');

  constructor(
    readonly session: Session,
    /** The participant key, `<name>/<lease id hex>`. */
    readonly key: string,
    /** The key's CreateRevision: strictly increasing across owners, so protected resources can fence. */
    readonly fencingToken: bigint,
    /** Revision at which ownership was confirmed; watching starts after it so nothing is missed. */
    private readonly confirmedAt: bigint,
    private readonly makeLostError: (message: string, cause?: unknown) => OwnershipLostError,
  ) {}

  /**
   * Aborts with the lost-ownership error as soon as ownership ends: session lost, or the key deleted
   * or replaced by anyone. Created on first use, so code that never looks pays nothing.
   */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.lost) this.controller.abort(this.lost.reason);
      else if (!this.released) this.startWatching();
    }
    return this.controller.signal;
  }

  /** Throws unless ownership still holds, checking the session's deadline against the clock now. */
  assert(): void {
    if (!this.lost && !this.released) {
      try {
        this.session.assertAlive();
      } catch (err) {
        this.lose(err, 'its session was lost');
      }
    }
    if (this.lost) throw this.lost.reason;
    if (this.released) throw this.makeLostError(`${this.key} was released`);
  }

  /** A Txn compare that holds only while this owner's key is the one it created. */
  ownerCompare(): Compare {
    return compare.createRevision(this.key, '=', this.fencingToken);
  }

  /** Deletes the key if it is still ours. Safe to retry: a retry never deletes a later owner's key. */
  async release(): Promise<void> {
    if (this.released) return;
    await this.session.client.txn(
      { compare: [this.ownerCompare()], success: [op.delete(this.key)], failure: [] },
      { idempotent: true },
    );
    this.released = true;
    this.stopWatching();
  }

  /** Ends ownership locally with `reason` (the key is left to `release()`). */
  revoke(reason: unknown): void {
    if (this.lost || this.released) return;
    this.lost = { reason };
    this.stopWatching();
    this.controller?.abort(reason);
  }

  get isReleased(): boolean {
    return this.released;
  }

  private startWatching(): void {
    if (this.session.signal.aborted) return this.onSessionLost();
    this.session.signal.addEventListener('abort', this.onSessionLost, { once: true });
    void this.watchFrom(this.confirmedAt + 1n);
  }

  private async watchFrom(start: bigint): Promise<void> {
    const client = this.session.client;
    for (;;) {
      if (this.lost || this.released) return;
      const w = client.watch(this.key, { startRevision: start, noPut: true });
      this.watch = w;
      try {
        for await (const batch of w) {
          if (batch.events.length > 0) return this.lose(undefined, 'its key was deleted');
        }
        return; // cancelled by release()
      } catch (err) {
        if (!(err instanceof CompactedError)) return this.lose(err, 'its watch failed');
        // History was compacted under us: look at the key itself and watch on from there.
        try {
          const r = await client.range({ key: Buffer.from(this.key) });
          const kv = r.kvs[0];
          if (!kv || kv.createRevision !== this.fencingToken) return this.lose(undefined, 'its key was deleted');
          start = r.header.revision + 1n;
        } catch (readErr) {
          return this.lose(readErr, 'its key could not be read');
        }
      }
    }
  }

  private lose(cause: unknown, why: string): void {
    if (this.lost || this.released) return;
    this.revoke(this.makeLostError(`${this.key} (token ${this.fencingToken}) is no longer owned: ${why}`, cause));
  }

  private stopWatching(): void {
    this.session.signal.removeEventListener('abort', this.onSessionLost);
    this.watch?.cancel();
    this.watch = undefined;
  }
}
