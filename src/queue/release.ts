// Giving up our key: a holder's release, a waiter giving up, a failed enqueue's clean-up. The key goes
// only when no other call of this process uses it, and a create that may land late is swept after.
import type { Session } from '../session.js';
import { deleteUntilGone, type GuaranteedDelete, type ReleaseWhat, sweepWhenGivenUp } from './guaranteed-delete.js';
import { sessionQueue } from './state.js';

export type { ReleaseWhat } from './guaranteed-delete.js';

/**
 * What a release, resign or unlock resolves with. A release never rejects for want of etcd: it is
 * called once, in a `finally`, where an error would hide the block's own outcome, and the caller could
 * do no better than the library. A delete that fails is retried in the background; the result says so.
 */
export interface ReleaseResult {
  /**
   * `released`: the key is gone (or, shared with another call of this process, left to it).
   * `pending`: the first delete failed (see `error`); it is retried in the background, with backoff,
   * until the key is gone or the session ends. Nothing is left for the caller to do: the handle's
   * `signal` aborts once the key is gone, and `settled` resolves then.
   * `lost`: it was no longer held when released (`error` is the loss, the handle's `signal.reason`);
   * what was left of our key is deleted all the same, guarded.
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
  const errors = pending.map((r) => r.error);
  const error = errors.length === 1 ? errors[0] : new AggregateError(errors, `${errors.length} releases are being retried`);
  return { state: 'pending', error, settled: Promise.all(pending.map((r) => r.settled)).then(() => {}) };
}

/** Deletes `key` (deleteUntilGone); once it is given up, a late create of it is swept (sweepWhenGivenUp). */
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
 * call of this process uses it. Returns the delete, or undefined when the key is left to another call.
 */
export function releaseKey(session: Session, key: string, token: bigint, what: ReleaseWhat): GuaranteedDelete | undefined {
  return sessionQueue(session).users.leave(key, token) ? deleteKey(session, key, token, what) : undefined;
}

/** A call gives up its ticket (aborted, failed, busy): the key goes unless another call still uses it. */
export async function leaveTicket(session: Session, ticket: { key: string; fencingToken: bigint }, what: ReleaseWhat): Promise<void> {
  if (sessionQueue(session).users.leave(ticket.key, ticket.fencingToken)) await dropTicket(session, ticket, what);
}

/**
 * Deletes our key if it is still the incarnation we created (or, its token unknown because the
 * enqueue's answer was lost, if it is on our lease), retried in the background (deleteKey). Waits for
 * the first attempt only briefly: an abort must not hang on an outage.
 */
export async function dropTicket(session: Session, ticket: { key: string; fencingToken?: bigint }, what: ReleaseWhat): Promise<void> {
  const { first } = deleteKey(session, ticket.key, ticket.fencingToken, what);
  // Wait for the first attempt (so a plain abort returns with its key gone), but not for long.
  let timer: NodeJS.Timeout | undefined;
  const settled = first.catch(() => {});
  await Promise.race([settled, new Promise((resolve) => (timer = setTimeout(resolve, session.client.dialTimeoutMs)))]);
  clearTimeout(timer);
}
