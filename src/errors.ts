import { EtcdError } from './client/errors.js';

/**
 * Why a holder lost what it held. `lease_expired`: its session was lost to its deadline or etcd
 * said the lease is gone; `session_closed`: its session (or client) was closed while holding;
 * `key_deleted`: someone deleted its key; `moved_off_lease`: someone rewrote its key onto another
 * lease (or none); `watch_failed`: the watch on its key failed, so ownership can no longer be vouched for.
 */
export type LossReason = 'lease_expired' | 'key_deleted' | 'moved_off_lease' | 'session_closed' | 'watch_failed';

/** Why a session ended. */
export type SessionEndReason =
  /** No renewal succeeded in time: the lease may expire on the server soon, so we stop first. */
  | 'deadline'
  /** etcd says the lease no longer exists (expired or revoked). */
  | 'lease_gone'
  /** `close()` was called. */
  | 'closed'
  /** The session's client was closed. */
  | 'client_closed';

/**
 * The session's lease is gone or can no longer be trusted to live: everything held through it
 * (locks, leadership) must be treated as lost. A session never recovers; create a new one.
 */
export class SessionExpiredError extends EtcdError {
  static override readonly code: string = 'ERR_SESSION_EXPIRED';
  constructor(
    readonly reason: SessionEndReason,
    readonly leaseId: bigint,
    options?: { cause?: unknown },
  ) {
    super(sessionMessage(reason, leaseId), options);
  }
}

function sessionMessage(reason: SessionEndReason, leaseId: bigint): string {
  const id = leaseId.toString(16);
  switch (reason) {
    case 'deadline':
      return `session lost: lease ${id} was not renewed in time and may expire on the server; stop work that needs it and create a new session`;
    case 'lease_gone':
      return `session lost: etcd says lease ${id} no longer exists (expired or revoked); create a new session`;
    case 'closed':
      return `session closed: lease ${id} was revoked by close()`;
    case 'client_closed':
      return `session ended: the client of lease ${id} was closed`;
  }
}

/**
 * Why ownership ended: a {@link LossReason} when it was lost, or `released` when its holder gave
 * it up (the reason a handle's `signal` aborts with after `unlock()`, `release()` or `resign()`).
 */
export type OwnershipEndReason = LossReason | 'released';

/** Ownership of a lock or of leadership ended while the holder may still be working. */
export class OwnershipLostError extends EtcdError {
  static override readonly code: string = 'ERR_OWNERSHIP_LOST';
  /** Why it ended: branch on this, never on the message. */
  readonly reason: OwnershipEndReason;
  constructor(
    message: string,
    readonly key: string,
    options: { cause?: unknown; reason: OwnershipEndReason },
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.reason = options.reason;
  }
}

/** The lock is no longer held: its session was lost, or its key was deleted or replaced. */
export class LockLostError extends OwnershipLostError {
  static override readonly code: string = 'ERR_LOCK_LOST';
}

/** Leadership ended: the session was lost, or the leader key was deleted or replaced. */
export class LeadershipLostError extends OwnershipLostError {
  static override readonly code: string = 'ERR_LEADERSHIP_LOST';
}

/** An operation that needs leadership (proclaim) found that this candidate does not lead. */
export class NotLeaderError extends LeadershipLostError {
  static override readonly code: string = 'ERR_NOT_LEADER';
}

/** A semaphore's participants disagree on its permit count: every one of them must use the same. */
export class PermitCountConflictError extends EtcdError {
  static override readonly code: string = 'ERR_PERMIT_COUNT_CONFLICT';
  constructor(
    readonly semaphore: string,
    readonly permits: number,
    /** The key of a participant with another count, and the value it holds. */
    readonly otherKey: string,
    readonly otherValue: string,
  ) {
    super(
      `semaphore "${semaphore}" asked for with ${permits} permits, but ${otherKey} uses it with ` +
        `${/^[1-9][0-9]*$/.test(otherValue) ? `${otherValue} permits` : `value "${otherValue.slice(0, 40)}" (not a semaphore of this library)`}; ` +
        'every participant must pass the same permit count (or use another name)',
    );
  }
}

/** The permit is no longer held: its session was lost, or its key was deleted or replaced. */
export class PermitLostError extends OwnershipLostError {
  static override readonly code: string = 'ERR_PERMIT_LOST';
}

/**
 * `lock()` (or `tryLock()`) of an RWMutex on a session that holds its read lock: an upgrade, which
 * would wait for that read lock forever. Nothing was sent to etcd.
 */
export class LockUpgradeError extends EtcdError {
  static override readonly code: string = 'ERR_LOCK_UPGRADE';
  constructor(
    /** The RWMutex's name. */
    readonly lock: string,
    /** The key of the read lock this session holds. */
    readonly readKey: string,
  ) {
    super(
      `cannot take the write lock of "${lock}": this session holds its read lock (${readKey}), and a write lock waits ` +
        'for every read lock, its own included. Unlock the read lock first, then call lock() (and check again what you ' +
        'read, which may have changed meanwhile), or take the write lock from the start',
    );
  }
}

/** A read or write lock of an RWMutex is no longer held: its session was lost, or its key was deleted or replaced. */
export class RWLockLostError extends LockLostError {
  static override readonly code: string = 'ERR_RWLOCK_LOST';
}

/**
 * The double barrier already has `count` members entering: Go's `ErrTooManyClients`. Nothing of
 * the refused call is left in etcd.
 */
export class TooManyClientsError extends EtcdError {
  static override readonly code: string = 'ERR_TOO_MANY_CLIENTS';
  constructor(
    /** The double barrier's name. */
    readonly barrier: string,
    /** Its member count. */
    readonly count: number,
  ) {
    super(
      `double barrier ${barrier} already has its ${count} members: wait until they leave() and enter() again, ` +
        'or give every member of the group the same larger count',
    );
  }
}

/** Our waiter key was deleted by someone else while enter() waited: the others no longer count us. */
export class BarrierKeyLostError extends EtcdError {
  static override readonly code: string = 'ERR_BARRIER_KEY_LOST';
  constructor(readonly key: string) {
    super(`${key} was deleted while waiting in enter(), so the other members no longer count this one; call enter() again`);
  }
}
