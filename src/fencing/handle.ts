import { InvalidArgumentError } from '../client/errors.js';
import { telemetryOf } from '../metrics/telemetry.js';
import { HeldPermit } from '../primitives/semaphore.js';
import { Session } from '../session.js';

/**
 * What a fence needs from a holder: its fencing token, a check that it still holds, and the session
 * the lock was taken on. A `LockHandle` (Mutex), an RWMutex write lock, or any object of your own
 * with these three.
 */
export interface HeldFencingHandle {
  /** Strictly larger for every later holder of the same lock (the key's CreateRevision). */
  readonly fencingToken: bigint;
  /** Throws unless the lock is still held. */
  assertHeld(): void;
  /**
   * The session the lock was taken on: the etcd that holds its lease is the one the token came
   * from, which the fence stores beside the token (see `ETCD_ID_KEY`). A handle of your own passes
   * the Session its token was taken on.
   */
  readonly session: Session;
}

/** What a fence needs from a leader: a `LeaderHandle`, or any object with these three. */
export interface LeaderFencingHandle {
  /** Strictly larger for every later term of the same election. */
  readonly fencingToken: bigint;
  /** Throws unless still leading. */
  assertLeader(): void;
  /** The session the term was won on (see {@link HeldFencingHandle.session}). */
  readonly session: Session;
}

/**
 * A handle whose token fences: a lock's, a write lock's, or a leader's. Not a semaphore permit's,
 * nor a read lock's: holders of those hold at the same time, and their tokens are not ordered
 * against each other (a permit taken later has a larger token, yet the earlier holder still rightly
 * holds), so a resource that kept the highest would refuse a rightful holder's writes.
 */
export type FencingHandle = HeldFencingHandle | LeaderFencingHandle;

/** A checked handle: its token, its ownership check, and the session its token came from. */
export interface Fenced {
  readonly token: bigint;
  readonly assert: () => void;
  readonly session: Session;
  /** The telemetry of the handle's client, when it is one of ours (for the refusals counter). */
  readonly refused: (store: 'postgres' | 'redis') => void;
}

/** Checks that `handle` can fence (see {@link FencingHandle}), with an error that says what to pass. */
export function fencedBy(handle: unknown, what: string): Fenced {
  if (handle instanceof HeldPermit) {
    throw new InvalidArgumentError(
      `${what}: a semaphore permit's fencing token does not fence (permit holders hold at the same time, so their tokens are not ` +
        'ordered against each other); protect the resource with a Mutex, an RWMutex write lock or an Election instead',
    );
  }
  const h = handle as Partial<HeldFencingHandle & LeaderFencingHandle & { mode: unknown; session: unknown }> | null;
  if (typeof h === 'object' && h !== null && h.mode === 'read') {
    throw new InvalidArgumentError(
      `${what}: a read lock's fencing token does not fence (readers hold at the same time); take the write lock (RWMutex.lock()) to write`,
    );
  }
  const token = h?.fencingToken;
  const check = typeof h?.assertHeld === 'function' ? h.assertHeld : typeof h?.assertLeader === 'function' ? h.assertLeader : undefined;
  if (typeof h !== 'object' || h === null || typeof token !== 'bigint' || token <= 0n || check === undefined) {
    throw new InvalidArgumentError(
      `${what}: the handle must be a lock's, a write lock's or a leader's handle (an object with a positive bigint fencingToken ` +
        `and assertHeld() or assertLeader()), got ${describe(handle)}`,
    );
  }
  const session = h.session;
  if (!(session instanceof Session)) {
    throw new InvalidArgumentError(
      `${what}: the handle has no session: a fence stores which etcd a token came from beside it (a new etcd counts tokens from 1 ` +
        'again), and learns it from the Session the lock or term was taken on. Give a handle of your own that Session as `session`',
    );
  }
  const telemetry = telemetryOf(session.client);
  return {
    token,
    assert: () => check.call(h),
    session,
    refused: (store) => telemetry.staleWriteRefused(store),
  };
}

/** What was passed, briefly and without its contents (which may be secret). */
function describe(v: unknown): string {
  if (v === null) return 'null';
  if (typeof v !== 'object') return typeof v;
  const t = (v as { fencingToken?: unknown }).fencingToken;
  const name = v.constructor?.name ?? 'an object';
  return `${name} with fencingToken ${typeof t === 'bigint' ? String(t) : `of type ${typeof t}`}`;
}
