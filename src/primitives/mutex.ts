import { LockLostError } from '../errors.js';
import { ownBuffer, validateName, participantKey } from '../keys.js';
import type { Session } from '../session.js';
import { acquire, tryAcquire, type AcquireOptions, type QueueRules, type QueueSpec } from '../queue/acquire.js';
import type { Ownership } from '../queue/ownership.js';
import type { Ticket } from '../queue/enqueue.js';
import type { LostErrorFactory, TurnRule } from '../queue/wait.js';
import { HeldHandle, type OwnerHandle } from './handle.js';
import type { ReleaseResult } from '../queue/release.js';
import { oldestRule, participantScope, participantTicket } from '../queue/oldest.js';

/** Options of `lock()`: the options of every acquire call, and a label for the key. */
export interface LockOptions extends AcquireOptions {
  /**
   * Written as the lock key's value, so that `inspect` can say who holds or waits (for example
   * `host:pid`). Default empty, as Go's Mutex and `etcdctl lock`, which never read the value.
   */
  label?: string;
}

const lockLost: LostErrorFactory = (key, message, options) => new LockLostError(message, key, options);

/**
 * A fair distributed lock: waiters are served in the order of their keys' CreateRevision, each
 * watching only the key just before its own. Interoperates with Go's `concurrency.Mutex` and
 * `etcdctl lock` on the same name.
 *
 * The key is per session and name, as Go's. Unlike Go, two lock() calls of one process on one
 * session and one name exclude each other, as a lock should: the second waits in the process, with
 * no request to etcd, until the first's key is gone, then takes a key of its own (a new fencing
 * token), queued behind the other processes' waiters already there. With `share: true` on both, they
 * share one key as in Go (both hold at once, one fencing token); the key is counted: unlocking,
 * aborting or failing one of them ends only that one, and the key is deleted when the last of them
 * goes. A loss (the key deleted by someone else, the session lost) ends them all.
 *
 * Behind a long queue (more than 32 keys) the holder writes its key once more, value and lease
 * unchanged, so that the waiter behind it can take over without reading the whole queue. Only a
 * key's holder may write it: do not use a lock's name for an election or a semaphore as well.
 */
export class Mutex {
  readonly name: string;
  /** This session's key for the lock: `<name>/<lease id in hex>`. */
  readonly key: string;

  constructor(
    readonly session: Session,
    name: string,
  ) {
    this.name = validateName(name, 'lock name');
    this.key = participantKey(this.name, session.leaseId);
  }

  /**
   * Waits for the lock. Resolves only once our key is confirmed to be the oldest and still on our
   * lease. Fails at once with SessionExpiredError if the session is lost while waiting; on abort or
   * any error our key is deleted, so nothing is left in the queue.
   *
   * On a session that adopted an earlier process's lease (`Session.create({ leaseId })`), a key that
   * process left keeps its place in the queue, and this call owns it: an abort or error deletes it.
   */
  lock(options: LockOptions = {}): Promise<LockHandle> {
    return acquire(this.queue(options.label, options.share), options);
  }

  /**
   * Takes the lock if it is free right now; otherwise returns null and leaves no key behind. Another
   * call of this process holding or waiting on this session and name makes it busy at once.
   */
  tryLock(options: Pick<LockOptions, 'label' | 'share'> = {}): Promise<LockHandle | null> {
    return tryAcquire(this.queue(options.label, options.share));
  }

  /** The oldest of all holds: Go's Mutex, on `<name>/<lease hex>`. Read-only: one serves each call with the same label and share. */
  private queue(label = '', share?: boolean): QueueSpec<LockHandle> {
    const s = share === true;
    const last = this.last;
    if (last && last.label === label && last.spec.share === s) return last.spec;
    const { session, name } = this;
    const spec: QueueSpec<LockHandle> = {
      session,
      kind: 'lock',
      name,
      share: s,
      ticket: participantTicket(session, name, ownBuffer(label)),
      rules: (this.rules ??= new MutexRules(session, name)),
    };
    this.last = { label, spec };
    return spec;
  }

  private rules: MutexRules | undefined;
  /** The last call's spec, for the next call with the same label and share. */
  private last: { label: string; spec: QueueSpec<LockHandle> } | undefined;
}

/** The Mutex's part of the queue engine, as methods: a waiter holds this one small object. */
class MutexRules implements QueueRules<LockHandle> {
  readonly lostError: LostErrorFactory = lockLost;

  constructor(
    private readonly session: Session,
    private readonly name: string,
  ) {}

  rule(ticket: Ticket, lost: LostErrorFactory): TurnRule {
    return oldestRule(this.session, participantScope(this.name), ticket, lost, { marks: true });
  }

  hold(own: Ownership): LockHandle {
    return new HeldLock(own);
  }
}

/**
 * Proof of holding a lock, with what a careful holder needs: the fencing token to hand to protected
 * resources, a signal that fires when the lock is lost, and a guarded unlock. `await using` unlocks.
 */
export interface LockHandle extends OwnerHandle {
  /** Throws LockLostError unless the lock is still held, checking the session's deadline against the clock now. */
  assertHeld(): void;
  /**
   * Releases the lock. Idempotent, and guarded on our CreateRevision so it never deletes a later
   * holder's key. Never rejects for want of etcd: a delete that fails is retried in the
   * background until the key is gone or the session ends, and the result is then `pending` (see
   * {@link ReleaseResult}); `signal` aborts once the key is gone. Nothing is left to do in a `finally`.
   */
  unlock(): Promise<ReleaseResult>;
}

class HeldLock extends HeldHandle implements LockHandle {
  unlock(): Promise<ReleaseResult> {
    return this.release();
  }
}

/**
 * Runs `fn` while holding the lock `name`, and always unlocks afterwards.
 *
 * It does not retry through an outage, unlike runAsLeader: it is one critical section on the
 * caller's session, and once etcd is unreachable for longer than the TTL that session is lost for
 * good. It rejects instead (SessionExpiredError, LockLostError, or UnavailableError while waiting),
 * and the caller decides: a worker loop makes a new session and calls it again (see docs/locks.md, "Through an outage").
 */
export async function withLock<T>(
  session: Session,
  name: string,
  fn: (lock: LockHandle) => Promise<T> | T,
  options: LockOptions = {},
): Promise<T> {
  const handle = await new Mutex(session, name).lock(options);
  try {
    return await fn(handle);
  } finally {
    await handle.unlock();
  }
}
