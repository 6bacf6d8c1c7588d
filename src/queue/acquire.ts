import type { Session } from '../session.js';
import type { Kind } from '../metrics/names.js';
import type { AcquireProbe } from '../metrics/telemetry.js';
import { Ownership } from './ownership.js';
import { enqueueOrClean, leaveTicket, type Ticket, type TicketSpec } from './ticket.js';
import { blockedNow, waitForTurn, type LostErrorFactory, type TurnRule } from './turn.js';

/** Options of every acquire call: lock(), campaign(), acquire(), rLock(), lockAll(). */
export interface AcquireOptions {
  /** Stop waiting (for a timeout: `AbortSignal.timeout(ms)`). Our queued key is then removed. */
  signal?: AbortSignal;
}

/** What a primitive tells the engine: its key, its rule for "my turn", and the handle it gives out. */
export interface QueueSpec<H> {
  session: Session;
  /** What is acquired and its name, for metrics and spans. */
  kind: Kind;
  name: string;
  ticket: TicketSpec;
  /** The primitive's rule for this ticket; `lost` makes the error for our key vanishing meanwhile. */
  rule(ticket: Ticket, lost: LostErrorFactory): TurnRule;
  lostError(key: string): LostErrorFactory;
  /** After the ticket is taken and before waiting (election: give an existing key the new value). */
  prepare?(ticket: Ticket, signal: AbortSignal | undefined): Promise<void>;
  hold(own: Ownership, ticket: Ticket): H;
}

/**
 * The one acquire path: check the session, take a ticket, wait for our turn under the primitive's
 * rule, and hand out ownership; on abort or any error our key is deleted, so nothing is left in the
 * queue. Calls of this process on the same session and key share the key, counted: it is deleted
 * only when the last of them releases, aborts or fails. Fails at once if the session is lost.
 * Metrics and spans are recorded here (through a probe that exists only when an SDK records).
 */
export function acquire<H>(q: QueueSpec<H>, options: AcquireOptions = {}): Promise<H> {
  const { session } = q;
  const probe = session.client.telemetry.startAcquire(q.kind, q.name);
  try {
    session.assertAlive();
    options.signal?.throwIfAborted();
  } catch (err) {
    probe?.failed(err, options.signal, session.signal);
    return Promise.reject(err);
  }
  // Not cancelled midway: an abort landing after etcd applied the Txn would leave our key behind.
  const ticket = enqueueOrClean(session, q.ticket, probe?.ahead);
  // The spec's ticket part (key, value, count range) is not needed while waiting: not kept.
  return waitAndHold(session, ticket, { rule: q.rule, lostError: q.lostError, prepare: q.prepare, hold: q.hold }, options.signal, probe);
}

async function waitAndHold<H>(
  session: Session,
  enqueued: Promise<Ticket>,
  q: Pick<QueueSpec<H>, 'rule' | 'lostError' | 'prepare' | 'hold'>,
  signal: AbortSignal | undefined,
  probe: AcquireProbe | undefined,
): Promise<H> {
  let ticket: Ticket;
  try {
    ticket = await enqueued;
  } catch (err) {
    probe?.failed(err, signal, session.signal);
    throw err;
  }
  const lost = q.lostError(ticket.key);
  try {
    signal?.throwIfAborted();
    probe?.enqueued(ticket.first);
    await q.prepare?.(ticket, signal);
    await waitForTurn(session, ticket, q.rule(ticket, lost), signal);
    // Our turn was proven by an answer that may have waited out a freeze of this process: a session
    // whose deadline passed meanwhile (its timer not run yet) gets no handle.
    session.assertAlive();
    return q.hold(new Ownership(session, ticket.key, ticket.rev, lost, probe), ticket);
  } catch (err) {
    probe?.failed(err, signal, session.signal);
    // Our key leaves with us, unless another call of this process still uses it.
    await leaveTicket(session, ticket);
    throw err;
  }
}

/** Acquires only if it is our turn right now; otherwise returns null and leaves no key behind. */
export async function tryAcquire<H>(q: QueueSpec<H>): Promise<H | null> {
  const { session } = q;
  const probe = session.client.telemetry.startAcquire(q.kind, q.name);
  let ticket: Ticket;
  try {
    session.assertAlive();
    ticket = await enqueueOrClean(session, q.ticket, probe?.ahead);
  } catch (err) {
    probe?.failed(err, undefined, session.signal);
    throw err;
  }
  const lost = q.lostError(ticket.key);
  try {
    await q.prepare?.(ticket, undefined);
    if (!(await blockedNow(ticket, q.rule(ticket, lost)))) {
      session.assertAlive(); // as in waitAndHold: not a handle on a session past its deadline
      return q.hold(new Ownership(session, ticket.key, ticket.rev, lost, probe), ticket);
    }
  } catch (err) {
    probe?.failed(err, undefined, session.signal);
    await leaveTicket(session, ticket);
    throw err;
  }
  probe?.busy();
  await leaveTicket(session, ticket);
  return null;
}
