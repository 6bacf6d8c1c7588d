import { ByKey } from '../by-key.js';
import type { LossReason } from '../errors.js';

/**
 * The calls of this process on one key of a session (`<name>/<lease hex>`, as Go's: shared by calls on
 * one session and name), counted: the key goes only when the last of them releases, aborts or fails.
 */
export interface KeyUse {
  key: string;
  /** The incarnation the users share (its CreateRevision, their fencing token), once an enqueue reported it. */
  fencingToken?: bigint;
  /** Calls on that incarnation, waiting or holding, that have not left it. */
  users: number;
  /** Enqueues in flight: each becomes a user of the incarnation it finds, or of the one it creates. */
  pending: number;
  /** An incarnation whose holdings ended (lost, or revoked) while it may still be in etcd: never joined again. */
  retired?: bigint;
  /** Why its holdings ended. */
  retiredFor?: LossReason;
}

/** The keys one session uses, by key. */
export class KeyUsers extends ByKey<KeyUse> {
  /** Forgets `use` once nobody uses or enqueues it: the next acquire on its key creates, not joins. */
  settle(key: string, use: KeyUse): void {
    if (use.users === 0 && use.pending === 0 && this.of(key) === use) this.remove(use);
  }

  /** An enqueue of `key` starts: until it answers, the key is in use (no sweeper takes it for a ghost). */
  begin(key: string): KeyUse {
    const use = this.of(key) ?? this.add({ key, fencingToken: undefined, users: 0, pending: 0 });
    use.pending++;
    return use;
  }

  /**
   * The enqueue found or created incarnation `token` and becomes one of its users: true if it joins
   * others, false if it is the first. Undefined when `token` is older than the one counted now (an
   * answer that arrived after a newer one): that call is not counted and enqueues again.
   */
  join(key: string, use: KeyUse, token: bigint): boolean | undefined {
    use.pending--;
    if (use.fencingToken === token) return ++use.users > 1;
    if (use.fencingToken === undefined || token > use.fencingToken) {
      // A newer incarnation: the one the other users shared was deleted (their waits and watches see it).
      use.fencingToken = token;
      use.users = 1;
      return false;
    }
    this.settle(key, use);
    return undefined;
  }

  /** The enqueue failed: it no longer counts. */
  abandon(key: string, use: KeyUse): void {
    use.pending--;
    this.settle(key, use);
  }

  /**
   * The holdings of incarnation `token` of `key` ended (lost, or revoked) while the key may still be in
   * etcd: its token belongs to them, so no later call joins it; the next enqueue replaces it.
   */
  retire(key: string, token: bigint, loss: LossReason): void {
    const use = this.of(key);
    if (use?.fencingToken !== token) return;
    use.retired = token;
    use.retiredFor = loss;
  }

  /**
   * Why incarnation `token` of `key` was retired, if it was: a call that joined it before its holdings
   * were lost must not hold on it (this process's next enqueue may delete it; its token is theirs).
   */
  retiredFor(key: string, token: bigint): LossReason | undefined {
    const use = this.of(key);
    return use?.retired === token ? (use.retiredFor ?? 'key_deleted') : undefined;
  }

  /**
   * One more call of this process uses incarnation `token` of `key`, which another call holds now (an
   * RWMutex downgrade): the key then goes with the last of them. False if `token` is not the one in use.
   */
  joinHeld(key: string, token: bigint): boolean {
    const use = this.of(key);
    if (!use || use.fencingToken !== token) return false;
    use.users++;
    return true;
  }

  /**
   * A call leaves incarnation `token` of `key` (released, aborted or failed): true when no other call of
   * this process uses it, so the caller deletes it (guarded on `token`); false when it is left to them.
   */
  leave(key: string, token: bigint): boolean {
    const use = this.of(key);
    if (!use) return true;
    if (use.fencingToken === undefined) {
      // Only enqueues in flight use the key: they take this incarnation over, or drop it if they fail.
      use.fencingToken = token;
      return false;
    }
    if (use.fencingToken !== token) return true; // not (or no longer) counted: an incarnation that was replaced
    use.users--;
    if (use.users > 0 || use.pending > 0) return false;
    this.settle(key, use);
    return true;
  }
}
