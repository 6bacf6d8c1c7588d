// The one acquire path: our in-process turn, the enqueue, the wait for our turn, the handle.
import type { Kind } from '../metrics/names.js';
import { type AcquireProbe, telemetryOf } from '../metrics/telemetry.js';
import type { Session } from '../session.js';
import { failureOf } from '../stop.js';
import { AFTER_HOLDERS, enqueueOrClean, type Ticket, type TicketSpec } from './enqueue.js';
import { Exit } from './gate.js';
import { liveHoldings, Ownership } from './ownership.js';
import { leaveTicket, type ReleaseWhat } from './release.js';
import { sessionQueue } from './state.js';
import { blockedNow, type LostErrorFactory, type TurnRule, Wait, type WaitOwner } from './wait.js';

/** Options of every acquire call: lock(), campaign(), acquire(), rLock(), lockAll(). */
export interface AcquireOptions {
  /** Stop waiting (for a timeout: `AbortSignal.timeout(ms)`). Our queued key is then removed. */
  signal?: AbortSignal;
  /**
   * Go's behaviour for calls of this process on one session and name: `true` joins the key of another
   * such call that also passed `share: true` (one key and one fencing token; the key goes with the last
   * of them). A joining call holds at once when the key holds, ahead of other processes' waiters
   * queued since: reentrancy, as in Go, not fairness. By default (false; true for `rLock()`) such
   * calls exclude each other: the later one waits, with no request to etcd, until the earlier one's
   * key is gone, then takes a key of its own (a new fencing token) behind the waiters already there.
   */
  share?: boolean;
}

/** What a primitive tells the engine: its key, its rule for "my turn", and the handle it gives out. */
export interface QueueSpec<H> {
  session: Session;
  /** What is acquired and its name, for metrics and spans. */
  kind: Kind;
  name: string;
  ticket: TicketSpec;
  rules: QueueRules<H>;
  /** Take a shared in-process turn (see AcquireOptions.share); default exclusive. */
  share?: boolean;
}

/**
 * The part of a {@link QueueSpec} kept while waiting (the ticket's spec is not). Called as methods,
 * so a primitive may give one object with methods on its prototype rather than closures per call.
 */
export interface QueueRules<H> {
  /** The primitive's rule for this ticket; `lost` makes the error for our key vanishing meanwhile. */
  rule(ticket: Ticket, lost: LostErrorFactory): TurnRule;
  /** Called detached, as a {@link LostErrorFactory}. */
  lostError: LostErrorFactory;
  /** After the ticket is taken and before waiting (election: give an existing key the new value). */
  prepare?(ticket: Ticket, signal: AbortSignal | undefined): Promise<void>;
  hold(own: Ownership, ticket: Ticket): H;
}

/**
 * The one acquire path: check the session, take a ticket, wait for our turn under the primitive's
 * rule, and hand out ownership; on abort or any error our key leaves the queue (deleted once no other
 * call of this process uses it). Fails at once if the session is lost. Metrics and spans are recorded
 * here, through a probe that exists only when an SDK records.
 */
export function acquire<H>(q: QueueSpec<H>, options: AcquireOptions = {}): Promise<H> {
  const { session } = q;
  const probe = telemetryOf(session.client).startAcquire(q.kind, q.name);
  try {
    session.assertAlive();
    options.signal?.throwIfAborted();
  } catch (err) {
    probe?.failed(err, options.signal, session.signal);
    return Promise.reject(err);
  }
  const a = new Acquisition(session, q.rules, q.kind, q.name, options.signal, probe);
  const shared = q.share === true;
  // Our in-process turn first (at once, the common case), then the enqueue. The signal stops only a
  // wait before anything is sent: an abort landing after etcd applied the Txn would leave our key behind.
  const gates = sessionQueue(session).gates;
  const now = gates.tryEnter(q.ticket.key, shared);
  if (!now) holdersWatch(session, q.ticket.key);
  const ticket = takeTicket(q, a, now ?? gates.enter(q.ticket.key, shared, session.signal, options.signal), options.signal);
  void a.run(ticket);
  return a.promise;
}

/** Our in-process turn, then the enqueue; after AFTER_HOLDERS, both again once the holders left. */
async function takeTicket<H>(
  q: QueueSpec<H>,
  a: Acquisition<H>,
  turn: Exit | Promise<Exit>,
  signal: AbortSignal | undefined,
): Promise<Ticket> {
  const { session, ticket: spec } = q;
  a.exit = turn instanceof Exit ? turn : await turn;
  for (;;) {
    const t = await enqueueOrClean(session, spec, a, q.rules.lostError, a.probe?.ahead, signal);
    if (t !== AFTER_HOLDERS) return t;
    a.exit.leave();
    a.exit = undefined;
    const after = sessionQueue(session).gates.enterAfterHolders(spec.key, session.signal, signal);
    holdersWatch(session, spec.key);
    a.exit = await after;
  }
}

/**
 * One acquire call from its enqueue answer to its handle, as one object, the WaitOwner of its Wait:
 * while it waits (perhaps behind 10,000 others) no suspended async frame or promise chain of it lives.
 * It is its own ReleaseWhat (kind and name), for its enqueue, its release and its Ownership.
 */
class Acquisition<H> implements WaitOwner, ReleaseWhat {
  readonly promise: Promise<H>;
  private resolve!: (handle: H) => void;
  private reject!: (err: unknown) => void;
  private ticket: Ticket | undefined;
  /** Ends our in-process turn: when we give up, or (handed to the Ownership) when the holding ends. */
  exit: Exit | undefined;

  constructor(
    private readonly session: Session,
    private readonly rules: QueueRules<H>,
    readonly kind: Kind,
    readonly name: string,
    private readonly signal: AbortSignal | undefined,
    readonly probe: AcquireProbe | undefined,
  ) {
    this.promise = new Promise<H>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
  }

  /** Takes the enqueue's answer, prepares, and waits for our turn; the outcome settles `promise` (run() never rejects). */
  async run(enqueued: Promise<Ticket>): Promise<void> {
    const session = this.session;
    let ticket: Ticket;
    try {
      ticket = await enqueued;
    } catch (err) {
      this.exit?.leave();
      try {
        this.probe?.failed(err, this.signal, session.signal);
      } catch {
        // telemetry must not keep the caller waiting
      }
      return this.reject(failureOf(err, this.signal, session.signal));
    }
    this.ticket = ticket;
    let rule: TurnRule;
    try {
      this.signal?.throwIfAborted();
      this.probe?.enqueued(ticket.first);
      if (this.rules.prepare) await this.rules.prepare(ticket, this.signal);
      if (ticket.first) return this.turn();
      rule = this.rules.rule(ticket, this.rules.lostError);
    } catch (err) {
      return this.fail(err);
    }
    new Wait(session.client, rule, session, this.signal, this).start();
  }

  /** WaitOwner: our turn, confirmed. */
  turn(): void {
    const { session } = this;
    const ticket = this.ticket!;
    try {
      // Our turn was proven by an answer that may have waited out a freeze of this process: a
      // session whose deadline passed meanwhile (its timer not run yet) gets no handle.
      session.assertAlive();
      const { probe, exit } = this;
      const lost = this.rules.lostError;
      assertNotRetired(session, ticket, lost);
      const own = new Ownership({ session, key: ticket.key, fencingToken: ticket.fencingToken, lost, what: this, probe, exit });
      this.resolve(this.rules.hold(own, ticket));
    } catch (err) {
      this.fail(err);
    }
  }

  /** WaitOwner: the wait failed or was stopped: our key leaves with us. */
  fail(err: unknown): void {
    const { session } = this;
    try {
      this.probe?.failed(err, this.signal, session.signal);
    } catch {
      // telemetry must not keep the key in the queue or the caller waiting
    }
    // Our key leaves with us unless another call of this process uses it. Its delete is registered at
    // once, so the next call of our turn waits for it (enqueue) and never joins it.
    leaveTicket(session, this.ticket!, this).then(
      () => this.reject(failureOf(err, this.signal, session.signal)),
      (e: unknown) => this.reject(failureOf(e, this.signal, session.signal)),
    );
    this.exit?.leave();
  }
}

/** Acquires only if it is our turn right now; otherwise returns null and leaves no key behind. */
export async function tryAcquire<H>(q: QueueSpec<H>): Promise<H | null> {
  const { session } = q;
  const probe = telemetryOf(session.client).startAcquire(q.kind, q.name);
  const what: ReleaseWhat = { kind: q.kind, name: q.name };
  let ticket: Ticket;
  let exit: Exit | undefined;
  try {
    session.assertAlive();
    // Another call of this process holds or waits on this key: busy, without asking etcd.
    exit = sessionQueue(session).gates.tryEnter(q.ticket.key, q.share === true);
    if (!exit) {
      holdersWatch(session, q.ticket.key);
      probe?.busy();
      return null;
    }
    const t = await enqueueOrClean(session, q.ticket, what, q.rules.lostError, probe?.ahead);
    if (t === AFTER_HOLDERS) {
      // A read whose siblings' key has a writer queued behind it: not free now.
      exit.leave();
      probe?.busy();
      return null;
    }
    ticket = t;
  } catch (err) {
    exit?.leave();
    probe?.failed(err, undefined, session.signal);
    throw failureOf(err, undefined, session.signal);
  }
  const r = q.rules;
  try {
    const lost = r.lostError;
    await r.prepare?.(ticket, undefined);
    if (ticket.first || !(await blockedNow(session.client, r.rule(ticket, lost)))) {
      session.assertAlive(); // as in Acquisition.turn: not a handle on a session past its deadline
      assertNotRetired(session, ticket, lost);
      return r.hold(new Ownership({ session, key: ticket.key, fencingToken: ticket.fencingToken, lost, what, probe, exit }), ticket);
    }
  } catch (err) {
    probe?.failed(err, undefined, session.signal);
    const left = leaveTicket(session, ticket, what);
    exit.leave();
    await left;
    throw failureOf(err, undefined, session.signal);
  }
  probe?.busy();
  const left = leaveTicket(session, ticket, what);
  exit.leave();
  await left;
  return null;
}

/**
 * A call gets no handle on an incarnation this process no longer counts as the key's: one it retired
 * (its holdings were lost while the call waited on it, or its answer came late), or one replaced since
 * by another call's enqueue (which counted only itself and forgot the retirement once it left). The
 * loss ended that incarnation for this process, whose next enqueue replaces the key.
 */
function assertNotRetired(session: Session, ticket: Ticket, lost: LostErrorFactory): void {
  const users = sessionQueue(session).users;
  const counted = users.of(ticket.key)?.fencingToken === ticket.fencingToken;
  const loss = users.retiredFor(ticket.key, ticket.fencingToken) ?? (counted ? undefined : 'key_deleted');
  if (loss === undefined) return;
  const why = `${ticket.key} (token ${ticket.fencingToken}) was lost by the other calls of this process holding it; call again for a key of its own`;
  throw lost(ticket.key, why, { reason: loss });
}

/**
 * A call waits for our in-process turn: this process's holdings of the key watch it, so that one lost
 * unnoticed (key deleted, lease gone) gives up its turn instead of keeping the call waiting for good.
 */
function holdersWatch(session: Session, key: string): void {
  for (const o of liveHoldings(session, key)) o.watchNow();
}
