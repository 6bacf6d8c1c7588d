// "The oldest holds": the turn rule of a lock, an election and an RWMutex, as Go's Mutex.Lock reads:
// who is just before me? none means my turn; else wait for its delete, then ask again.
import { compare, type Compare, type KeyValue, op, prefixEnd, type RangeRequest, SortOrder, SortTarget, txnRange } from '../client/kv.js';
import type { WatchEvent } from '../client/watch.js';
import { isParticipantKey, ownBuffer, participantKey, prefixOf, queuePrefix } from '../keys.js';
import { pagesByCreate } from '../client/pages.js';
import { markLeaseGone, type Session } from '../session.js';
import { queueOf, SHORT_QUEUE } from './state.js';
import type { Ticket, TicketSpec } from './enqueue.js';
import type { BatchCheck } from './recheck.js';
import type { Blocker, LostErrorFactory, TurnRule, WatchTarget } from './wait.js';

/** Where a waiter looks for what is older than it: a key range, and which keys in it count. */
export interface Scope {
  prefix: Buffer;
  /** True for a participant's key (not a nested name's, not unrelated data under the prefix). */
  isCandidate(key: Buffer): boolean;
}

/**
 * The queue of a lock or election, Go's layout: one key `<name>/<lease hex>` per session, served in
 * CreateRevision order. Our ticket, counted against everything under `<name>/`: alone means first.
 */
export function participantTicket(session: Session, name: string, value: Buffer): TicketSpec {
  const prefix = ownBuffer(prefixOf(name));
  return {
    key: participantKey(name, session.leaseId),
    value,
    count: { key: prefix, rangeEnd: ownBuffer(prefixEnd(prefix)) },
    first: (n) => n === 1n,
    // Ours and the one before it, with leases (not keys-only: etcd 3.7 reports those as 0).
    lookup: { key: prefix, rangeEnd: prefixEnd(prefix), sortOrder: SortOrder.DESCEND, sortTarget: SortTarget.CREATE, limit: 2n },
  };
}

/** Held by each waiter as long as it waits: its name only (shared), the prefix made when a look-up reads it. */
class ParticipantScope implements Scope {
  constructor(private readonly name: string) {}
  get prefix(): Buffer {
    return Buffer.from(prefixOf(this.name));
  }
  isCandidate(key: Buffer): boolean {
    return isParticipantKey(this.prefix, key);
  }
}

/** The participants of a lock or election: `<name>/<hex>` keys. */
export const participantScope = (name: string): Scope => new ParticipantScope(name);

/**
 * "The oldest in `scope`": our turn when no participant in it is older. Each waiter watches only the
 * key just before its own, so one release wakes one waiter. Stray keys (no lease: etcd issue 6631)
 * and keys that are not candidates (nested names under the prefix) are skipped.
 *
 * With `marks` (a lock's, never an election's: a Go candidate rewrites its key while it waits): behind
 * a long queue a waiter whose turn came writes its key once more, unchanged, so its version passes 1:
 * "I was the oldest". No key is created older than an existing one, so once such a predecessor is
 * deleted the waiter behind it takes its turn with one O(1) Txn instead of reading the whole queue.
 * This trusts that only a key's holder rewrites it on its own lease: a lock's name must not be shared
 * with an election or a semaphore (their keys are rewritten while waiting, or by non-first holders).
 */
export function oldestRule(
  session: Session,
  scope: Scope,
  ticket: Ticket,
  lost: LostErrorFactory,
  options: { marks?: boolean } = {},
): TurnRule {
  return new OldestRule(session, scope, ticket, lost, options.marks ?? false);
}

class OldestRule implements TurnRule {
  /** Incarnations found to have no lease: skipped by every later look-up of this wait. */
  private strays: Set<string> | undefined;
  /** The blocker given last, until the rule is asked again: what its wait learned. */
  private last: PredecessorBlocker | undefined;

  constructor(
    readonly session: Session,
    private readonly scope: Scope,
    readonly ticket: Ticket,
    private readonly lost: LostErrorFactory,
    readonly marks: boolean,
  ) {}

  async blocker(signal: AbortSignal): Promise<Blocker | null> {
    const { session, ticket, lost } = this;
    const last = this.last;
    this.last = undefined;
    if (last?.stray) (this.strays ??= new Set()).add(last.stray);
    // Our marked predecessor was deleted: nothing older than us is left. Confirm our key stands, and
    // mark it in the same write: the queue behind a marked key was long.
    if (last?.headGone) return ourTurnAfterHead(session, ticket, lost, signal);
    const read = ticket.preceding && predecessorRead(ticket, this.scope);
    if (ticket.preceding) ticket.preceding = undefined; // read once: it pins the enqueue's whole response
    // In a short queue its watch is kept for this session's next wait: the key before ours repeats.
    const keep = queueOf(session.client).lengths.short(this.scope.prefix);
    if (read) return (this.last = new PredecessorBlocker(this, read, keep));
    const { p, long } = await findPredecessor(session, this.scope, ticket, lost, signal, this.strays, this.marks);
    if (p === null) {
      // First by a full look-up behind a long queue: mark, so the waiter behind us skips that read.
      if (long) markHead(session, ticket);
      return null;
    }
    return (this.last = new PredecessorBlocker(this, p, keep));
  }
}

/**
 * The participant just before us as the enqueue read it (see TicketSpec.lookup), at our key's
 * creation: undefined when that read cannot tell (a nested name's or a stray key in its place).
 */
function predecessorRead(ticket: Ticket, scope: Scope): Predecessor | undefined {
  const [mine, kv] = ticket.preceding!;
  if (mine?.createRevision !== ticket.fencingToken || mine.key.toString() !== ticket.key) return undefined;
  if (!kv || kv.lease === 0n || !scope.isCandidate(kv.key)) return undefined;
  return { key: kv.key.toString(), createRevision: kv.createRevision, asOf: ticket.fencingToken, leased: true, marked: marked(kv) };
}

/** The participant just before us, as the look-up found it. */
export interface Predecessor {
  /** A string of its own (a participant's key is UTF-8: a name and hex); a Buffer costs a waiter about 250 bytes. */
  key: string;
  createRevision: bigint;
  /** The revision of the read that found it. */
  asOf: bigint;
  /** Its lease was read and is not 0 (a keys-only read on etcd 3.7 cannot tell). */
  leased: boolean;
  /** Its owner wrote it again after creating it: a lock holder's mark. */
  marked: boolean;
}

/** Waiting for the participant just before us: its own watch target and check (a long queue holds one per waiter). @internal */
export class PredecessorBlocker implements Blocker, WatchTarget, BatchCheck {
  readonly key: string;
  readonly asOf: bigint;
  readonly confirmed: boolean;
  private readonly createRevision: bigint;
  private marked: boolean;
  /** Our marked predecessor was deleted: for the rule's next look-up. */
  headGone = false;
  /** The predecessor was found to have no lease (stray data, etcd 6631): the rule's next look-up skips it. */
  stray: string | undefined;

  constructor(
    /** Whose blocker this is: its session, ticket and whether it marks. */
    private readonly rule: Pick<OldestRule, 'session' | 'ticket' | 'marks'>,
    p: Predecessor,
    readonly keep = false,
  ) {
    this.key = p.key;
    this.asOf = p.asOf;
    this.confirmed = p.leased;
    this.createRevision = p.createRevision;
    this.marked = p.marked;
  }

  get watch(): WatchTarget {
    return this;
  }

  get check(): BatchCheck {
    return this;
  }

  /** Changed: deleted, moved off any lease (stray now), or a new incarnation (a delete we did not see); not a proclaim's put. */
  changed(e: WatchEvent): boolean {
    if (e.type === 'delete') {
      this.headGone = this.rule.marks && this.marked;
      return true;
    }
    if (e.kv.lease === 0n || e.kv.createRevision !== this.createRevision) return true;
    // Its owner's mark: it holds now. Not a move onto another lease (someone else's write).
    if (this.rule.marks && onOwnLease(e.kv)) this.marked = true;
    return false;
  }

  get keys(): readonly (string | Buffer)[] {
    return [this.rule.ticket.key, this.key];
  }

  /** Ours still ours, our predecessor the same incarnation on a lease, read in full (keys-only reads say lease 0; none: stray). */
  blocked([mine, p]: readonly (KeyValue | undefined)[]): boolean {
    const { ticket, session } = this.rule;
    if (p && p.createRevision === this.createRevision && p.lease === 0n) this.stray = strayId(p);
    return (
      mine?.createRevision === ticket.fencingToken &&
      mine.lease === session.leaseId &&
      p?.createRevision === this.createRevision &&
      p.lease !== 0n
    );
  }
}

/**
 * One read-only Txn: our key still exists on our lease, and which key is just before it (null: we are
 * first). Keys-only: etcd 3.7 then serves it from the in-memory index, cheap however long the queue,
 * but its KeyValues carry `lease = 0`. So a candidate is any key of participant form not known to be
 * stray, and the blocker's check reads its lease before trusting it.
 */
async function findPredecessor(
  session: Session,
  scope: Scope,
  ticket: Ticket,
  lost: LostErrorFactory,
  signal: AbortSignal,
  strays: Set<string> | undefined,
  count: boolean,
): Promise<{ p: Predecessor | null; long: boolean }> {
  const client = session.client;
  const end = prefixEnd(scope.prefix);
  const before = (limit: bigint): RangeRequest => ({
    key: scope.prefix,
    rangeEnd: end,
    sortOrder: SortOrder.DESCEND,
    sortTarget: SortTarget.CREATE,
    maxCreateRevision: ticket.fencingToken - 1n,
    limit,
    keysOnly: true,
  });
  // With marks, the queue's length too (a count, off etcd's apply loop in this read-only Txn).
  const counted = count ? [op.range({ key: scope.prefix, rangeEnd: end, countOnly: true })] : [];
  const t = await client.txn(
    { compare: ourKeyStands(session, ticket), success: [op.range(before(8n)), ...counted], failure: [] },
    { idempotent: true, signal, coalesce: { scope: scope.prefix } },
  );
  if (!t.succeeded) return ticketLost(session, ticket, lost, signal);
  const long = count && txnRange(t, 1).count > SHORT_QUEUE;
  // Only keys of nested names or stray data in a page: look further back.
  const first = { page: txnRange(t, 0), revision: t.header.revision };
  let pages = 0;
  for await (const page of pagesByCreate(client, before(64n), first, signal)) {
    pages++;
    const kv = page.kvs.find((kv) => scope.isCandidate(kv.key) && !strays?.has(strayId(kv)));
    if (kv) {
      // A lease other than 0 was really read (etcd up to 3.6 reports it on a keys-only read).
      const leased = kv.lease !== 0n;
      return { p: { key: kv.key.toString(), createRevision: kv.createRevision, asOf: page.revision, leased, marked: marked(kv) }, long };
    }
  }
  // The pages after the first are plain reads: one revision may have taken the keys before us and our
  // own key (an operator's delete of the prefix). "Nobody older" counts only with our key standing now
  // (and then for good: no key older than ours can be created).
  if (pages > 1) await confirmOurKey(session, ticket, lost, signal);
  return { p: null, long };
}

/** One Txn of O(1) compares: our key still stands on our lease (else the ticket is lost). */
async function confirmOurKey(session: Session, ticket: Ticket, lost: LostErrorFactory, signal: AbortSignal): Promise<void> {
  const t = await session.client.txn(
    { compare: ourKeyStands(session, ticket), success: [], failure: [] },
    { idempotent: true, signal, coalesce: { scope: queuePrefix(ticket.key) } },
  );
  if (!t.succeeded) await ticketLost(session, ticket, lost, signal);
}

/** Our marked predecessor is gone, so we are the oldest: one Txn of O(1) compares confirms our key stands, and marks it. */
async function ourTurnAfterHead(session: Session, ticket: Ticket, lost: LostErrorFactory, signal: AbortSignal): Promise<null> {
  const t = await session.client.txn(
    { compare: ourKeyStands(session, ticket), success: [op.touch(ticket.key)], failure: [] },
    { idempotent: true, signal, coalesce: { scope: queuePrefix(ticket.key) } },
  );
  if (!t.succeeded) return ticketLost(session, ticket, lost, signal);
  return null;
}

/**
 * Marks our key ("I was the oldest") in the background, guarded on our incarnation and lease: one
 * landing after our release writes nothing; one late only sends the waiter behind us to the look-up.
 */
function markHead(session: Session, ticket: Ticket): void {
  session.client
    .txn(
      { compare: ourKeyStands(session, ticket), success: [op.touch(ticket.key)], failure: [] },
      { idempotent: true, coalesce: { scope: queuePrefix(ticket.key) } },
    )
    .catch(() => {});
}

/** The compares of "our key is still the one we queued with, on our lease". */
export function ourKeyStands(session: Session, ticket: Ticket): Compare[] {
  return [compare.createRevision(ticket.key, '=', ticket.fencingToken), compare.lease(ticket.key, '=', session.leaseId)];
}

/** Our key is gone. If its lease went with it, say so: the session is over, not just this wait. */
export async function ticketLost(session: Session, ticket: Ticket, lost: LostErrorFactory, signal: AbortSignal): Promise<never> {
  const lease = await session.client.leaseTimeToLive(session.leaseId, { signal }).catch(() => undefined);
  if (lease && lease.ttl <= 0) markLeaseGone(session);
  session.assertAlive();
  const kv = (await session.client.range({ key: Buffer.from(ticket.key) }, { signal }).catch(() => undefined))?.kvs[0];
  const reason = kv !== undefined && kv.createRevision === ticket.fencingToken ? 'moved_off_lease' : 'key_deleted';
  throw lost(ticket.key, `${ticket.key} was deleted or moved to another lease while waiting`, { reason });
}

/** Written again since its creation, and still on the lease its name carries: a lock holder's mark. */
function marked(kv: { key: Buffer; lease: bigint; version: bigint }): boolean {
  return kv.version > 1n && onOwnLease(kv);
}

/** The key is on the lease its name carries (`<name>/<lease hex>`): not moved by anyone. */
function onOwnLease(kv: { key: Buffer; lease: bigint }): boolean {
  if (kv.lease === 0n) return false;
  const hex = kv.lease.toString(16);
  const k = kv.key;
  return k.length > hex.length && k[k.length - hex.length - 1] === 0x2f && k.toString('latin1', k.length - hex.length) === hex;
}

/** One incarnation of a key: its CreateRevision and the key itself. */
function strayId(kv: { key: Buffer; createRevision: bigint }): string {
  return `${kv.createRevision}/${kv.key.toString('latin1')}`;
}
