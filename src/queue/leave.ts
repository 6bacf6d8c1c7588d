// Leaving a key: a holder's release, a waiter giving up, a failed enqueue's clean-up. The key goes
// only when no other call of this process uses it, and a create that may land late is swept after.
import type { Session } from '../session.js';
import { deleteUntilGone, type GuaranteedDelete, type ReleaseWhat } from './release.js';
import { sessionQueue } from './state.js';
import type { Ticket } from './ticket.js';

/**
 * Deletes `key` if it is still incarnation `rev` (or, unknown, if it is on our lease), and keeps
 * trying in the background until it is gone or the session ends (deleteUntilGone); an enqueue of
 * this session waits for it meanwhile. Once the key is given up, a create of it that may still land
 * late is swept for the rest of the session (see late-sweeper.ts).
 */
export function deleteKey(session: Session, key: string, rev: bigint | undefined, what: ReleaseWhat): GuaranteedDelete {
  const d = deleteUntilGone(session, key, rev, what);
  const q = sessionQueue(session);
  q.late.givenUp(
    session,
    key,
    () => q.users.of(key) !== undefined,
    (ghost) => deleteKey(session, key, ghost, what).first,
  );
  return d;
}

/**
 * A holder leaves its key (Ownership.release): it is deleted, guarded on `rev`, only when no other
 * call of this process uses it. Returns the delete (its first attempt, and the background retries
 * until the key is gone), or undefined when the key is left to another call of this process.
 */
export function releaseKey(session: Session, key: string, rev: bigint, what: ReleaseWhat): GuaranteedDelete | undefined {
  return sessionQueue(session).users.leave(key, rev) ? deleteKey(session, key, rev, what) : undefined;
}

/**
 * A create of `key` on the session's lease had an unknown outcome (`CallProgress.ambiguous`): once the
 * key is given up (its last user released or dropped it), a re-creation landing late is swept for the
 * rest of the session. For any primitive's keys, not only enqueue's.
 */
export function mayLandLate(session: Session, key: string): void {
  sessionQueue(session).late.mayLandLate(key);
}

/**
 * One more call of this process uses incarnation `rev` of `key`, which another call holds now (an
 * RWMutex downgrade): the key then goes with the last of them. False if `rev` is not the one in use.
 */
export function joinHeld(session: Session, key: string, rev: bigint): boolean {
  return sessionQueue(session).users.joinHeld(key, rev);
}

/**
 * A call that waited with `ticket` gives it up (aborted, failed, or tryAcquire found it busy): the
 * key goes, unless another call of this process still uses it.
 */
export async function leaveTicket(session: Session, ticket: Ticket, what: ReleaseWhat): Promise<void> {
  if (sessionQueue(session).users.leave(ticket.key, ticket.rev)) await dropTicket(session, ticket, what);
}

/**
 * Deletes our key if it is still the incarnation we created (or, when `rev` is unknown because the
 * enqueue's answer was lost, if it is on our lease). A key left behind would block everyone behind
 * it for as long as the session lives, so this keeps trying in the background until it succeeds,
 * the session ends (its lease takes the key along) or the client closes (deleteUntilGone). It waits
 * for the first attempt only briefly: an abort must not hang on an outage.
 */
export async function dropTicket(session: Session, ticket: { key: string; rev?: bigint }, what: ReleaseWhat): Promise<void> {
  const { first } = deleteKey(session, ticket.key, ticket.rev, what);
  // Wait for the first attempt (so a plain abort returns with its key gone), but not for long.
  let timer: NodeJS.Timeout | undefined;
  const settled = first.then(
    () => {},
    () => {},
  );
  await Promise.race([settled, new Promise((resolve) => (timer = setTimeout(resolve, session.client.dialTimeoutMs)))]);
  clearTimeout(timer);
}
