import { type KeyValue, op, prefixEnd, SortOrder, SortTarget, txnRange } from '../client/kv.js';
import { LockUpgradeError, RWLockLostError } from '../errors.js';
import { isParticipantKey, ownBuffer, prefixOf, validateName } from '../keys.js';
import type { Session } from '../session.js';
import { acquire, tryAcquire, type QueueSpec } from '../queue/acquire.js';
import type { LockOptions } from './mutex.js';
import { sessionQueue } from '../queue/state.js';
import { liveHoldings, Ownership } from '../queue/ownership.js';
import { HeldHandle, type OwnerHandle } from './handle.js';
import { oldestRule, type Scope } from '../queue/oldest.js';
import type { LostErrorFactory } from '../queue/wait.js';
import type { ReleaseResult } from '../queue/release.js';

const rwLost: LostErrorFactory = (key, message, options) => new RWLockLostError(message, key, options);

/**
 * A fair readers-writer lock in the key layout of Go's `recipe.RWMutex`: readers queue as
 * `<name>/read/<id>`, writers as `<name>/write/<id>`, in CreateRevision order. A reader waits only
 * for older writers; a writer waits for everything older. So readers share, a writer excludes
 * everyone, and a stream of readers cannot starve a writer queued before them. Our id is the lease
 * in hex (one key per session and mode, as our Mutex); Go's is a timestamp: both interoperate.
 *
 * Unlike Go's recipe (etcd issue 16221), a waiter confirms its own key still exists on its lease
 * before it proceeds, so a waiter whose lease expired while it waited never believes it holds.
 *
 * In one process, on one session: read locks share (several rLock() calls hold at once, on one
 * read key, counted), except that a read asked for after a writer (of any process) queued is never
 * granted before that writer: it waits until this process's other reads have left their key, then
 * queues behind the writer with a key of its own. So, as with Go's `sync.RWMutex`, a task that takes
 * a second read lock while it holds one can deadlock behind a waiting writer: do not nest read locks.
 * Write locks exclude each other in the process (a second lock() waits without
 * a request to etcd, then takes a new key and fencing token). A downgrade works: rLock() while this
 * session holds the write lock holds without waiting (one request confirms the write lock's key
 * still stands), on the write lock's key and fencing token, so that no
 * writer can slip in between; unlock the write lock and the read lock goes on alone (other readers
 * wait until it is unlocked too). An upgrade, lock() while this session holds the read lock, would
 * wait for itself forever: it fails at once with LockUpgradeError.
 */
export class RWMutex {
  readonly name: string;

  constructor(
    readonly session: Session,
    name: string,
  ) {
    this.name = validateName(name, 'lock name');
  }

  /** This session's read key, `<name>/read/<lease hex>`. */
  get readKey(): string {
    return `${this.name}/read/${this.session.leaseId.toString(16)}`;
  }

  /** This session's write key, `<name>/write/<lease hex>`. */
  get writeKey(): string {
    return `${this.name}/write/${this.session.leaseId.toString(16)}`;
  }

  /**
   * Waits for a shared (read) lock: until no writer older than us holds or waits. While this
   * session holds the write lock, holds without waiting (a downgrade; see the class). Never granted before
   * a writer that queued before it was asked for, even while other read locks of this process hold:
   * do not take a second read lock while holding one (it can wait for a writer that waits for you).
   */
  rLock(options: LockOptions = {}): Promise<RWLockHandle> {
    try {
      const down = this.downgrade();
      if (down) return this.confirmed(down, options.signal);
    } catch (err) {
      return Promise.reject(err);
    }
    return acquire(this.queue('read', options.label, options.share ?? true), options);
  }

  /**
   * Waits for the exclusive (write) lock: until no reader or writer older than us remains. Fails at
   * once with LockUpgradeError while this session holds the read lock (an upgrade).
   */
  lock(options: LockOptions = {}): Promise<RWLockHandle> {
    try {
      this.refuseUpgrade();
    } catch (err) {
      return Promise.reject(err);
    }
    return acquire(this.queue('write', options.label, options.share === true), options);
  }

  /**
   * Takes a read lock if no writer is there now (or a downgrade); otherwise returns null and leaves
   * no key behind. A downgrade whose write lock turns out lost rejects with RWLockLostError.
   */
  async tryRLock(options: Pick<LockOptions, 'label' | 'share'> = {}): Promise<RWLockHandle | null> {
    const down = this.downgrade();
    if (down) return this.confirmed(down);
    return tryAcquire(this.queue('read', options.label, options.share ?? true));
  }

  /** Takes the write lock if nobody else is there now; otherwise returns null and leaves no key behind. LockUpgradeError as lock(). */
  async tryLock(options: Pick<LockOptions, 'label' | 'share'> = {}): Promise<RWLockHandle | null> {
    this.refuseUpgrade();
    return tryAcquire(this.queue('write', options.label, options.share === true));
  }

  /** An upgrade would wait for our own read lock forever: refused before anything is sent. */
  private refuseUpgrade(): void {
    const reader = liveHoldings(this.session, this.readKey)[0] ?? liveHoldings(this.session, this.writeKey).find((o) => o.kind === 'read');
    if (reader) throw new LockUpgradeError(this.name, reader.key);
  }

  /**
   * A read lock while this process holds the write lock on this session: one more user of the
   * write key (the key goes with the last of them) and of its in-process turn, held once confirmed.
   */
  private downgrade(): { read: Ownership; writer: Ownership } | undefined {
    const { session } = this;
    const key = this.writeKey;
    const writer = liveHoldings(session, key).find((o) => o.kind === 'write');
    if (!writer) return undefined;
    writer.assert(); // a write lock lost meanwhile is no ground for a read lock: its error says why
    if (!sessionQueue(session).users.joinHeld(key, writer.fencingToken)) return undefined;
    const read = new Ownership({
      session,
      key,
      fencingToken: writer.fencingToken,
      lost: rwLost,
      what: { kind: 'read', name: this.name },
      exit: sessionQueue(session).gates.enterAlongside(key),
    });
    return { read, writer };
  }

  /**
   * A downgrade holds only once one Txn of O(1) compares confirms that the write lock's key still
   * stands on our lease: the writer may not have heard yet of its key's delete (a partition, a late
   * watch), and no lock resolves on a key that is gone. If it is gone, the writer loses too.
   */
  private async confirmed({ read, writer }: { read: Ownership; writer: Ownership }, signal?: AbortSignal): Promise<RWLockHandle> {
    const handle = new HeldRWLock(read, 'read');
    let kv: KeyValue | undefined;
    try {
      const t = await this.session.client.txn(
        { compare: read.ownerCompares(), success: [], failure: [op.range({ key: Buffer.from(read.key) })] },
        { idempotent: true, signal },
      );
      if (t.succeeded) {
        // The writer's loss (heard meanwhile), or the session's deadline passed during the Txn.
        read.assert();
        return handle;
      }
      kv = txnRange(t, 0).kvs[0];
    } catch (err) {
      await handle.release();
      throw err;
    }
    const reason = kv?.createRevision === read.fencingToken ? 'moved_off_lease' : 'key_deleted';
    const err = rwLost(read.key, `${read.key} was deleted or moved off our lease: the write lock a read would share is lost`, { reason });
    writer.ownerCompareFailed(err, reason);
    await handle.release();
    throw err;
  }

  private queue(mode: 'read' | 'write', label = '', share = false): QueueSpec<RWLockHandle> {
    const { session } = this;
    const all = ownBuffer(prefixOf(this.name));
    const readers = ownBuffer(`${this.name}/read/`);
    const writers = ownBuffer(`${this.name}/write/`);
    // A reader is blocked by older writers only; a writer by older readers and writers.
    const scope: Scope =
      mode === 'read'
        ? { prefix: writers, isCandidate: (key) => isParticipantKey(writers, key) }
        : { prefix: all, isCandidate: (key) => isParticipantKey(readers, key) || isParticipantKey(writers, key) };
    // Counted in the enqueue: nobody in our scope but (for a writer) ourselves means ours at once.
    const mine = mode === 'read' ? 0n : 1n;
    return {
      session,
      kind: mode,
      name: this.name,
      share,
      ticket: {
        key: mode === 'read' ? this.readKey : this.writeKey,
        value: ownBuffer(label),
        count: { key: scope.prefix, rangeEnd: ownBuffer(prefixEnd(scope.prefix)) },
        first: (n) => n === mine,
        // A read asked for after a writer queued is never granted before that writer: it joins the read
        // key this process's other reads share only while no writer key is newer than it (the newest
        // key under write/, nested or stray ones included: not joining is always safe).
        ...(mode === 'read' && {
          joinCheck: {
            read: { key: writers, rangeEnd: prefixEnd(writers), sortOrder: SortOrder.DESCEND, sortTarget: SortTarget.CREATE, limit: 1n },
            mayJoin: (kvs, rev) => !kvs.some((kv) => kv.createRevision > rev),
          },
        }),
      },
      rules: {
        rule: (ticket, lost) => oldestRule(session, scope, ticket, lost),
        lostError: rwLost,
        hold: (own) => new HeldRWLock(own, mode),
      },
    };
  }
}

/** Proof of holding a read or write lock. The fencing token protects a writer's writes. `await using` unlocks. */
export interface RWLockHandle extends OwnerHandle {
  readonly mode: 'read' | 'write';
  /** Throws RWLockLostError unless the lock is still held, checking the session's deadline against the clock now. */
  assertHeld(): void;
  /**
   * Releases the lock. Idempotent, and guarded on our CreateRevision. Never rejects for want of etcd: a delete that fails is retried in the
   * background until the key is gone or the session ends, and the result is then `pending` (see
   * {@link ReleaseResult}); `signal` aborts once the key is gone. Nothing is left to do in a `finally`.
   */
  unlock(): Promise<ReleaseResult>;
}

class HeldRWLock extends HeldHandle implements RWLockHandle {
  constructor(
    own: Ownership,
    readonly mode: 'read' | 'write',
  ) {
    super(own);
  }

  unlock(): Promise<ReleaseResult> {
    return this.release();
  }
}
