// Giving up our key: a holder's release, a waiter giving up, a failed enqueue's clean-up. The key goes
// only when no other call of this process uses it, and a create that may land late is swept after.
import type { Session } from '../session.js';
import { deleteUntilGone, type GuaranteedDelete, type ReleaseWhat, sweepWhenGivenUp } from './guaranteed-delete.js';
import { sessionQueue } from './state.js';

export type { ReleaseWhat } from './guaranteed-delete.js';

/**
 * What a release, resign or unlock resolves with. A release never rejects for want of etcd: real code
 * calls it once, in a `finally`, and an error there would hide the block's own outcome while telling
 * the caller to do something it cannot do better than the library. Instead a delete that fails is
 * retried in the background (see deleteUntilGone) and the result says so.
 */
export interface ReleaseResult {
  /**
   * `released`: the key is gone (or, shared with another call of this process, left to it).
   * `pending`: the first delete failed (see `error`); it is retried in the background, with
   * backoff, until the key is gone or the session ends. Nothing is left for the caller to do: the
   * handle's `signal` aborts once the key is gone, and `settled` resolves then.
   * `lost`: it was no longer held when released (see `error`, the loss: the handle's
   * `signal.reason`); what was left of our key is deleted all the same, guarded.
   */
  readonly state: 'released' | 'pending' | 'lost';
  /** Why the first delete failed (`pending`), or the loss (`lost`: a LockLostError or its kin, with its `reason`). */
  readonly error?: unknown;
  /** Resolves once the key is gone or the session ended (its lease takes the key along). Never rejects. */
  readonly settled: Promise<void>;
}

/** The result of a release that landed: one frozen object for every one of them. */
export const RELEASED: ReleaseResult = Object.freeze({ state: 'released', settled: Promise.resolve() });

/** Several releases as one (lockAll's unlock): pending while any is (with its failures), else lost if any was. */
export function combineReleases(results: readonly ReleaseResult[]): ReleaseResult {
  const pending = results.filter((r) => r.state === 'pending');
  if (pending.length === 0) return results.find((r) => r.state === 'lost') ?? RELEASED;
  return {
    state: 'pending',
    error:
      pending.length === 1
        ? pending[0]!.error
        : new AggregateError(
            pending.map((r) => r.error),
            `${pending.length} releases are being retried`,
          ),
    settled: Promise.all(pending.map((r) => r.settled)).then(() => {}),
  };
}

/**
 * Deletes `key` if it is still incarnation `fencingToken` (or, unknown, if it is on our lease), and
 * keeps trying in the background until it is gone or the session ends (deleteUntilGone); an enqueue of
 * this session waits for it meanwhile. Once the key is given up, a create of it that may still land
 * late is swept for the rest of the session (sweepWhenGivenUp).
 */
export function deleteKey(session: Session, key: string, fencingToken: bigint | undefined, what: ReleaseWhat): GuaranteedDelete {
  const d = deleteUntilGone(session, key, fencingToken, what);
  const users = sessionQueue(session).users;
  sweepWhenGivenUp(
    session,
    key,
    () => users.of(key) !== undefined,
    (ghost) => deleteKey(session, key, ghost, what).first,
  );
  return d;
}

/**
 * A holder leaves its key (Ownership.release): it is deleted, guarded on `token`, only when no other
 * call of this process uses it. Returns the delete (its first attempt, and the background retries
 * until the key is gone), or undefined when the key is left to another call of this process.
 */
export function releaseKey(session: Session, key: string, token: bigint, what: ReleaseWhat): GuaranteedDelete | undefined {
  return sessionQueue(session).users.leave(key, token) ? deleteKey(session, key, token, what) : undefined;
}

/**
 * A call that waited with `ticket` gives it up (aborted, failed, or tryAcquire found it busy): the
 * key goes, unless another call of this process still uses it.
 */
export async function leaveTicket(session: Session, ticket: { key: string; fencingToken: bigint }, what: ReleaseWhat): Promise<void> {
  if (sessionQueue(session).users.leave(ticket.key, ticket.fencingToken)) await dropTicket(session, ticket, what);
}

/**
 * Deletes our key if it is still the incarnation we created (or, when `token` is unknown because the
 * enqueue's answer was lost, if it is on our lease). A key left behind would block everyone behind
 * it for as long as the session lives, so this keeps trying in the background until it succeeds,
 * the session ends (its lease takes the key along) or the client closes (deleteUntilGone). It waits
 * for the first attempt only briefly: an abort must not hang on an outage.
 */
export async function dropTicket(session: Session, ticket: { key: string; fencingToken?: bigint }, what: ReleaseWhat): Promise<void> {
  const { first } = deleteKey(session, ticket.key, ticket.fencingToken, what);
  // Wait for the first attempt (so a plain abort returns with its key gone), but not for long.
  let timer: NodeJS.Timeout | undefined;
  const settled = first.then(
    () => {},
    () => {},
  );
  await Promise.race([settled, new Promise((resolve) => (timer = setTimeout(resolve, session.client.dialTimeoutMs)))]);
  clearTimeout(timer);
}
