import { rethrown } from '../rethrow.js';
import { InvalidArgumentError } from '../client/errors.js';
import { compare, op, txnRange, type Compare } from '../client/kv.js';
import { LockLostError } from '../errors.js';
import { validateName } from '../keys.js';
import type { AcquireOptions } from '../queue/acquire.js';
import type { Session } from '../session.js';
import { Mutex, type LockHandle } from './mutex.js';
import { combineReleases, type ReleaseResult } from '../queue/release.js';

/** The most names lockAll takes: its confirmation Txn compares two things per lock (etcd allows 128). */
export const MAX_LOCKS = 60;

/** Options of `lockAll()`: one signal bounds the whole acquisition, every lock included. */
export type LockAllOptions = AcquireOptions;

/**
 * Proof of holding several locks at once, taken by {@link lockAll}. One signal, one check and one
 * unlock for all of them; `await using` unlocks.
 */
export interface MultiLockHandle extends AsyncDisposable {
  /** The lock names in canonical order (by the bytes of the name): the order they were taken in. */
  readonly names: readonly string[];
  /** The session every key lives on. */
  readonly session: Session;
  /** Each lock's own handle, by name, in canonical order. Unlocking one of them ends this handle's `signal`. */
  readonly handles: ReadonlyMap<string, LockHandle>;
  /** Each lock's fencing token (its key's CreateRevision), by name, in canonical order. */
  readonly fencingTokens: ReadonlyMap<string, bigint>;
  /**
   * Aborts as soon as any of the locks is lost (with that lock's LockLostError), or on `unlock()`.
   * Created on first use, which starts watching every key: until then a lock's loss is seen only
   * where its LockHandle watches (another call of the process waits for it), else only the
   * session's deadline is checked (by `assertHeld()`), as for a single LockHandle.
   */
  readonly signal: AbortSignal;
  /**
   * Throws unless every lock is still held, checking the session's deadline against the clock now:
   * the LockLostError of the first lock seen lost (the earliest while `signal` is watched, else the
   * first in canonical order).
   */
  assertHeld(): void;
  /** Each lock's ownerCompares(): a Txn guarded by all of them applies only while every lock is held. */
  ownerCompares(): Compare[];
  /**
   * Releases every lock, each guarded on its CreateRevision (never a later holder's key). Idempotent.
   * Never rejects for want of etcd: a lock whose delete fails is retried in the background until its
   * key is gone or the session ends; the result is then `pending`, with that failure as `error` (an
   * AggregateError when several are pending) and `settled` resolving once every key is gone.
   */
  unlock(): Promise<ReleaseResult>;
  /** The same as {@link MultiLockHandle.unlock}: every handle's verb for giving its keys up. */
  release(): Promise<ReleaseResult>;
}

/**
 * Takes several locks without deadlock: every caller takes them in one canonical order (the bytes
 * of the name, as etcd orders keys), whatever order it passed, one `Mutex.lock()` after another.
 * Resolves once every key is confirmed to still be ours. Names are checked (InvalidArgumentError for
 * an invalid name, a repeated name or an empty list) before anything is written. If any lock fails
 * or `signal` aborts, the locks already taken are released and the original error is rethrown; a
 * release that fails too (etcd unreachable) goes on in the background until its key is gone or the
 * session ends, as every release does.
 *
 * Like Mutex, a lock held or awaited by another call of this process on this session and name is
 * waited for in the process (taken only once that call's key is gone); with `share: true` (on both
 * calls) it is shared instead: this handle's unlock (or a failed lockAll) ends only this handle's
 * share, and the key stays with the other holder.
 */
export async function lockAll(session: Session, names: readonly string[], options: LockAllOptions = {}): Promise<MultiLockHandle> {
  const ordered = canonicalNames(names);
  const mutexes = ordered.map((name) => new Mutex(session, name));
  const held: LockHandle[] = [];
  try {
    for (const m of mutexes) held.push(await m.lock(options));
    // A lock taken first may have been lost while we waited for the later ones: confirm them all now,
    // in etcd and here (a loss seen here, a failed watch, may leave the key for a call of ours to replace).
    if (held.length > 1) await confirmAll(session, held, options.signal);
    for (const h of held) h.assertHeld();
  } catch (err) {
    throw await releaseAfter(err, held);
  }
  return new MultiLock(session, ordered, held);
}

/** Runs `fn` while holding every lock in `names`, and always unlocks them all afterwards. */
export async function withLocks<T>(
  session: Session,
  names: readonly string[],
  fn: (locks: MultiLockHandle) => Promise<T> | T,
  options: LockAllOptions = {},
): Promise<T> {
  const locks = await lockAll(session, names, options);
  try {
    return await fn(locks);
  } finally {
    await locks.unlock();
  }
}

/** Validates the names and sorts them by bytes; throws on a repeat or an empty list. */
function canonicalNames(names: readonly string[]): string[] {
  if (!Array.isArray(names)) throw new InvalidArgumentError(`lock names must be an array of strings, got ${typeof names}`);
  if (names.length === 0) throw new InvalidArgumentError('lockAll needs at least one lock name; got an empty list');
  // The final check compares two things per lock in one Txn, and etcd allows 128 per Txn.
  if (names.length > MAX_LOCKS)
    throw new InvalidArgumentError(
      `lockAll takes at most ${MAX_LOCKS} names, got ${names.length}; split the set or use fewer, coarser locks`,
    );
  const seen = new Set<string>();
  const entries = names.map((n: unknown) => {
    const name = validateName(n, 'lock name');
    if (seen.has(name)) throw new InvalidArgumentError(`lock name "${name}" is given twice; pass each name once`);
    seen.add(name);
    return { name, bytes: Buffer.from(name) };
  });
  // Bytes, not UTF-16 code units: the two orders differ past U+FFFF, and bytes are what any other client can agree on.
  return entries.sort((a, b) => Buffer.compare(a.bytes, b.bytes)).map((e) => e.name);
}

/** One read-only Txn proving every key is still the incarnation we created, on our lease. */
async function confirmAll(session: Session, held: readonly LockHandle[], signal: AbortSignal | undefined): Promise<void> {
  const t = await session.client.txn(
    {
      compare: held.flatMap((h) => [h.ownerCompare(), compare.lease(h.key, '=', session.leaseId)]),
      success: [],
      failure: held.map((h) => op.get(h.key)),
    },
    { idempotent: true, signal },
  );
  if (t.succeeded) return;
  const i = held.findIndex((h, j) => {
    const kv = txnRange(t, j).kvs[0];
    return kv === undefined || kv.createRevision !== h.fencingToken || kv.lease !== session.leaseId;
  });
  const lost = held[i]!;
  const kv = txnRange(t, i).kvs[0];
  throw new LockLostError(
    `${lost.key} (token ${lost.fencingToken}) is no longer owned: its key was deleted or moved off its lease while lockAll waited for the locks after it; nothing is held, call lockAll again`,
    lost.key,
    { reason: kv === undefined || kv.createRevision !== lost.fencingToken ? 'key_deleted' : 'moved_off_lease' },
  );
}

/** Releases what a failed lockAll took (a delete that fails goes on in the background); returns `err` to throw. */
async function releaseAfter(err: unknown, held: readonly LockHandle[]): Promise<unknown> {
  await Promise.all(held.map((h) => h.unlock()));
  return err;
}

class MultiLock implements MultiLockHandle {
  readonly handles: ReadonlyMap<string, LockHandle>;
  readonly fencingTokens: ReadonlyMap<string, bigint>;
  private controller?: AbortController;
  /** Why the holding ended (the first loss seen, or unlock), once it has. */
  private ended?: { reason: unknown };
  private unlocking?: Promise<ReleaseResult>;
  /** The lock signals we listen to, so that ending removes every listener. */
  private readonly listening: AbortSignal[] = [];
  private readonly onLost = (e: Event): void => this.end((e.target as AbortSignal).reason);

  constructor(
    readonly session: Session,
    readonly names: readonly string[],
    private readonly held: readonly LockHandle[],
  ) {
    this.handles = new Map(held.map((h, i) => [names[i]!, h]));
    this.fencingTokens = new Map(held.map((h, i) => [names[i]!, h.fencingToken]));
  }

  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.ended) this.controller.abort(this.ended.reason);
      for (const h of this.held) {
        if (this.ended) break;
        const s = h.signal; // starts watching that key
        if (s.aborted) this.end(s.reason);
        else {
          s.addEventListener('abort', this.onLost, { once: true });
          this.listening.push(s);
        }
      }
    }
    return this.controller.signal;
  }

  assertHeld(): void {
    if (!this.ended) {
      try {
        for (const h of this.held) h.assertHeld();
      } catch (err) {
        this.end(err);
      }
    }
    if (this.ended) throw rethrown(this.ended.reason);
  }

  ownerCompares(): Compare[] {
    return this.held.flatMap((h) => h.ownerCompares());
  }

  unlock(): Promise<ReleaseResult> {
    // Work under `signal` must stop before the first key goes.
    if (!this.ended)
      this.end(new LockLostError(`locks ${this.names.join(', ')} were released by unlock()`, this.held[0]!.key, { reason: 'released' }));
    return (this.unlocking ??= this.releaseAll());
  }

  release(): Promise<ReleaseResult> {
    return this.unlock();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.unlock();
  }

  /** Releases every lock at once; those whose delete fails go on in the background (see ReleaseResult). */
  private async releaseAll(): Promise<ReleaseResult> {
    return combineReleases(await Promise.all(this.held.map((h) => h.unlock())));
  }

  /** Ends the holding with `reason` and stops listening to every lock's signal. */
  private end(reason: unknown): void {
    if (this.ended) return;
    this.ended = { reason };
    for (const s of this.listening.splice(0)) s.removeEventListener('abort', this.onLost);
    this.controller?.abort(reason);
  }
}
