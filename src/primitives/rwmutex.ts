import { prefixEnd } from '../client/kv.js';
import { RWLockLostError } from '../errors.js';
import { isParticipantKey, ownBuffer, prefixOf, validateName } from '../keys.js';
import type { Session } from '../session.js';
import { acquire, tryAcquire, type QueueSpec } from '../queue/acquire.js';
import type { LockOptions } from './mutex.js';
import { HeldHandle, type OwnerHandle, type Ownership } from '../queue/ownership.js';
import { oldestRule, type Scope } from '../queue/predecessor.js';
import type { ReleaseResult } from '../queue/release.js';

const rwLost = (key: string) => (message: string, cause?: unknown) =>
  new RWLockLostError(message, key, cause === undefined ? undefined : { cause });

/**
 * A fair readers-writer lock in the key layout of Go's `recipe.RWMutex`: readers queue as
 * `<name>/read/<id>`, writers as `<name>/write/<id>`, in CreateRevision order. A reader waits only
 * for older writers; a writer waits for everything older. So readers share, a writer excludes
 * everyone, and a stream of readers cannot starve a writer queued before them. Our id is the lease
 * in hex (one key per session and mode, as our Mutex); Go's is a timestamp: both interoperate.
 *
 * Unlike Go's recipe (etcd issue 16221), a waiter confirms its own key still exists on its lease
 * before it proceeds, so a waiter whose lease expired while it waited never believes it holds.
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

  /** Waits for a shared (read) lock: until no writer older than us holds or waits. */
  rLock(options: LockOptions = {}): Promise<RWLockHandle> {
    return acquire(this.queue('read', options.label), options);
  }

  /** Waits for the exclusive (write) lock: until no reader or writer older than us remains. */
  lock(options: LockOptions = {}): Promise<RWLockHandle> {
    return acquire(this.queue('write', options.label), options);
  }

  /** Takes a read lock if no writer is there now; otherwise returns null and leaves no key behind. */
  tryRLock(options: Pick<LockOptions, 'label'> = {}): Promise<RWLockHandle | null> {
    return tryAcquire(this.queue('read', options.label));
  }

  /** Takes the write lock if nobody else is there now; otherwise returns null and leaves no key behind. */
  tryLock(options: Pick<LockOptions, 'label'> = {}): Promise<RWLockHandle | null> {
    return tryAcquire(this.queue('write', options.label));
  }

  private queue(mode: 'read' | 'write', label = ''): QueueSpec<RWLockHandle> {
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
      ticket: {
        key: mode === 'read' ? this.readKey : this.writeKey,
        value: ownBuffer(label),
        count: { key: scope.prefix, rangeEnd: ownBuffer(prefixEnd(scope.prefix)) },
        first: (n) => n === mine,
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
    return this.own.release();
  }
}
