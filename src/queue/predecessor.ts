import { compare, op, prefixEnd, SortOrder, SortTarget, txnRange, type Compare, type KeyValue, type RangeRequest } from '../client/kv.js';
import type { WatchEvent } from '../client/watch.js';
import { ownBuffer, participantKey, prefixOf } from '../keys.js';
import { markLeaseGone, type Session } from '../session.js';
import type { Scope } from './scope.js';
import { queueOf } from './state.js';
import type { Ticket, TicketSpec } from './ticket.js';
import type { BatchCheck } from './recheck.js';
import type { Blocker, Found, LostErrorFactory, TurnRule } from './turn.js';
import type { WatchTarget } from './kept-watches.js';
import { OlderBlocker, olderSet } from './older.js';

export type { Scope } from './scope.js';

/**
 * The queue of a lock or election, Go's layout: one key `<name>/<lease hex>` per session, served in
 * CreateRevision order. Our ticket, counted against everything under `<name>/`: alone means first.
 */
export function participantTicket(session: Session, name: string, value: Buffer): TicketSpec {
  const prefix = ownBuffer(prefixOf(name));
  const rangeEnd = ownBuffer(prefixEnd(prefix));
  return {
    key: participantKey(name, session.leaseId),
    value,
    count: { key: prefix, rangeEnd },
    first: (n) => n === 1n,
    // Ours (the newest) and the ones just before it, with their leases (not keys-only: etcd 3.7
    // reports a keys-only read's leases as 0), so a short queue needs no separate look-up.
    lookup: { key: prefix, rangeEnd, sortOrder: SortOrder.DESCEND, sortTarget: SortTarget.CREATE, limit: 9n },
  };
}

/** The participants of a lock or election on `session`'s client: `<name>/<hex>` keys (one Scope per name and client). */
export function participantScope(session: Session, name: string): Scope {
  return queueOf(session.client).scopes.participants(name);
}

/** The participant just before us: all a waiter keeps of it while it waits. */
interface Predecessor {
  /** A copy (see keyCopy): the decoded key would pin the whole response buffer for the length of the wait. */
  key: string | Buffer;
  createRevision: bigint;
  /** The revision of the read that found it: it was there, as described, at this revision. */
  asOf: bigint;
  /** Its lease was read and is not 0 (a keys-only read on etcd 3.7 cannot tell). */
  leased: boolean;
  /** Its owner wrote it again after creating it: a lock holder's mark (see `marks`). */
  marked: boolean;
  /** Nothing older than it is left: every other older participant was seen to go (older.ts). */
  last?: boolean;
}

/** Options of {@link oldestRule}. */
export interface OldestRuleOptions {
  /** Keep the predecessor's watch open after the wait, for the session's next wait on the same key. */
  keepWatch?: boolean;
  /**
   * Marks, for a lock (never an election: a Go candidate rewrites its key while it waits). Behind a
   * long queue a waiter that gets its turn writes its key once more, value and lease unchanged, so
   * its version passes 1: "I was the oldest". Keys are never created older than an existing one,
   * so once such a predecessor is deleted nothing older than us is left, and the waiter behind it
   * knows it is first with an O(1) Txn instead of a sorted read of the whole queue. This trusts
   * that only a key's holder rewrites it on its own lease: a lock's name must not be shared with an
   * election or a semaphore (their keys are rewritten while waiting, or by non-first holders).
   */
  marks?: boolean;
}

/**
 * "The oldest in `scope`": our turn when no participant in it is older. Each waiter watches only the
 * key just before its own, so one release wakes one waiter. Stray keys (no lease: etcd issue 6631)
 * and keys that are not candidates (nested names under the prefix) are skipped.
 */
export function oldestRule(
  session: Session,
  scope: Scope,
  ticket: Ticket,
  lostError: LostErrorFactory,
  options: OldestRuleOptions = {},
): TurnRule {
  return new OldestRule(session, scope, ticket, lostError, options.keepWatch ?? false, options.marks ?? false);
}

/**
 * The rule's state for one wait: a class (not closures), as a long queue holds one per waiter. What a
 * wait learns (a stray key, the marked head deleted) is kept by its blocker, and read from it here
 * when the rule is asked again: neither writes the other's state.
 */
class OldestRule implements TurnRule {
  /** Incarnations found to have no lease: skipped by every later look-up of this wait (made when first needed). */
  private strayIds: Set<string> | undefined;
  /** The blocker given last, until the rule is asked again. */
  private last: PredecessorBlocker | OlderBlocker | undefined;
  /** The first look-up (the join) may use the client's view of a long queue (see queue-view.ts). */
  private joining = true;

  constructor(
    readonly session: Session,
    private readonly scope: Scope,
    readonly ticket: Ticket,
    private readonly lostError: LostErrorFactory,
    readonly keepWatch: boolean,
    readonly marks: boolean,
  ) {}

  isStray(kv: { key: Buffer; createRevision: bigint }): boolean {
    return this.strayIds?.has(strayId(kv)) ?? false;
  }

  addStray(kv: { key: Buffer; createRevision: bigint }): void {
    (this.strayIds ??= new Set()).add(strayId(kv));
  }

  /**
   * Our predecessor as this client's view of a long queue has it, once the view has seen our put:
   * exact at that revision, with real leases, and our own key standing on our lease. Undefined when
   * there is no view, it ended, our key is not as we queued it, or nobody is older (the read
   * decides then, as it also tells a lost key).
   */
  private async fromView(signal: AbortSignal): Promise<Predecessor | undefined> {
    const { session, scope, ticket } = this;
    const view = queueOf(session.client).views.live(scope.prefix);
    if (!view) return undefined;
    const mine = ownBuffer(Buffer.from(ticket.key));
    let ours = false;
    const found = await view.upTo(
      ticket.rev,
      (e) => {
        if (e.createRevision === ticket.rev && e.key.equals(mine)) {
          ours = e.lease === session.leaseId;
          return false;
        }
        return ours && scope.isCandidate(e.key) && e.lease !== 0n && !this.isStray(e);
      },
      signal,
    );
    if (!found || !ours) return undefined;
    const kv = found.kv;
    return { key: keyCopy(kv.key), createRevision: kv.createRevision, asOf: found.asOf, leased: true, marked: marked(kv) };
  }

  async blocker(signal: AbortSignal): Promise<Blocker | null> {
    const { session, scope, ticket, lostError } = this;
    const last = this.last;
    this.last = undefined;
    if (last?.strays) for (const kv of last.strays) this.addStray(kv);
    // Every older participant went with our key standing (an OlderBlocker saw it): our turn, confirmed.
    if (last instanceof OlderBlocker && last.clear) {
      // Nobody older was left at that event's revision, but the event may come late (a stream that
      // stalled, then resumed) and our key may be gone since: one O(1) Txn confirms it stands now
      // (and marks it behind a long queue).
      return ourTurnAfterHead(session, scope, ticket, lostError, this.marks, signal);
    }
    // Our marked or last older predecessor was deleted: nothing older than us is left.
    if (last instanceof PredecessorBlocker && last.headGone) return ourTurnAfterHead(session, scope, ticket, lostError, this.marks, signal);
    // A long queue grew behind us while one older participant was left: wait on it alone, no read.
    const only = last instanceof OlderBlocker ? last.lastOlder() : undefined;
    if (only) {
      this.joining = false;
      const p = { key: keyCopy(only.key), createRevision: only.createRevision, asOf: only.asOf, leased: true, marked: false, last: true };
      return (this.last = new PredecessorBlocker(session, ticket, p, this.keepWatch, this.marks));
    }
    let p: Predecessor | null | undefined;
    const pre = ticket.preceding;
    if (pre) {
      // Read by the enqueue, at our key's own revision: used once, then the normal look-up.
      ticket.preceding = undefined;
      // Every older participant in it (a short queue): wait for all of them on one watch, no read after.
      const older = olderSet(pre.kvs, pre.more, ticket.rev, scope.isCandidate, this);
      if (older && older.size > 0) {
        return (this.last = new OlderBlocker(session, ticket, scope.prefix, scope.isCandidate, older, ticket.rev, this.keepWatch));
      }
      p = fromPage(pre.kvs, pre.more, ticket.rev, scope, this);
    }
    if (p === undefined && this.joining) p = await this.fromView(signal);
    this.joining = false;
    if (p === undefined) p = await findPredecessor(session, scope, ticket, lostError, signal, this);
    if (p === null) {
      // First by a full look-up behind a long queue: mark, so the waiter behind us skips that read.
      if (this.marks && queueOf(session.client).hints.long(scope.prefix)) markHead(session, ticket);
      return null;
    }
    return (this.last = new PredecessorBlocker(session, ticket, p, this.keepWatch, this.marks));
  }
}

/**
 * Waiting for the participant just before us: its watch, its check, and how to tell it moved. It is
 * its own watch target, its own `found` and its own check (a long queue holds one per waiter).
 */
class PredecessorBlocker implements Blocker, WatchTarget, Found, BatchCheck {
  readonly key: string | Buffer;
  readonly asOf: bigint;
  readonly confirmed: boolean;
  private readonly createRevision: bigint;
  private marked: boolean;
  /** Nothing older than it is left (see Predecessor.last). */
  private readonly last: boolean;
  /** Our marked or last older predecessor was deleted: for the rule's next look-up. */
  headGone = false;
  /** Incarnations this wait's checks found to have no lease (stray data): for the rule's next look-up. */
  strays: { key: Buffer; createRevision: bigint }[] | undefined;

  constructor(
    private readonly session: Session,
    private readonly ticket: Ticket,
    pred: Predecessor,
    readonly keep: boolean,
    private readonly marks: boolean,
  ) {
    this.key = pred.key;
    this.asOf = pred.asOf;
    this.confirmed = pred.leased;
    this.createRevision = pred.createRevision;
    this.marked = pred.marked;
    this.last = pred.last ?? false;
  }

  get watch(): WatchTarget {
    return this;
  }

  get found(): Found {
    return this;
  }

  // Changed: deleted, moved off any lease (stray now), or a new incarnation of the same key (a
  // delete we did not see). A put that keeps a lease and the CreateRevision (a proclaim) is none.
  changed(e: WatchEvent): boolean {
    if (e.type === 'delete') {
      this.headGone = this.last || (this.marks && this.marked);
      return true;
    }
    if (e.kv.lease === 0n || e.kv.createRevision !== this.createRevision) return true;
    // Its owner's mark: it holds now. Not a move onto another lease (someone else's write).
    if (this.marks && onOwnLease(e.kv)) this.marked = true;
    return false;
  }

  /**
   * Our key is still ours, and our predecessor still the same incarnation on some lease, read in
   * full: this is also where a predecessor found by a keys-only read gets its lease checked (from
   * etcd 3.7 such a read reports every lease as 0). One found to have no lease is stray data (etcd
   * issue 6631), which the rule's next look-up skips.
   */
  get check(): BatchCheck {
    return this;
  }

  get keys(): readonly (string | Buffer)[] {
    return [this.ticket.key, this.key];
  }

  blocked([mine, p]: readonly (KeyValue | undefined)[]): boolean {
    const { ticket, session } = this;
    if (p && p.createRevision === this.createRevision && p.lease === 0n)
      (this.strays ??= []).push({ key: ownBuffer(p.key), createRevision: p.createRevision });
    return (
      mine?.createRevision === ticket.rev && mine.lease === session.leaseId && p?.createRevision === this.createRevision && p.lease !== 0n
    );
  }
}

/**
 * The predecessor in a page read by the enqueue Txn right after our put (ours first, then older
 * keys, each with its lease): null when no participant is older and the page was complete,
 * undefined when the page cannot tell (only nested names or stray keys in it, and more beyond).
 */
function fromPage(kvs: KeyValue[], more: boolean, rev: bigint, scope: Scope, strays: OldestRule): Predecessor | null | undefined {
  for (const kv of kvs) {
    if (kv.createRevision >= rev || !scope.isCandidate(kv.key)) continue;
    if (kv.lease === 0n) {
      strays.addStray(kv); // stray data (etcd issue 6631): never our predecessor
      continue;
    }
    return { key: keyCopy(kv.key), createRevision: kv.createRevision, asOf: rev, leased: true, marked: marked(kv) };
  }
  return more ? undefined : null;
}

/**
 * Written again since its creation, and still on the lease its name carries: a lock holder's mark
 * (see OldestRuleOptions.marks). A keys-only read on etcd 3.7 reports lease 0: then not known.
 */
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

/**
 * A participant's key to keep while waiting: as a string when its bytes are UTF-8 (always, for a
 * name given as a string, plus its hex), which costs about a third of a Buffer of its own; else a
 * Buffer of its own.
 */
function keyCopy(key: Buffer): string | Buffer {
  const s = key.toString();
  return Buffer.from(s).equals(key) ? s : ownBuffer(key);
}

/** Identifies one incarnation of a key: its CreateRevision and the key itself. */
function strayId(kv: { key: Buffer; createRevision: bigint }): string {
  return `${kv.createRevision}/${kv.key.toString('latin1')}`;
}

/**
 * One read-only Txn: our key still exists on our lease, and which key is just before it (null:
 * nobody, we are first). The read is keys-only: from etcd 3.7 it is then served from the in-memory
 * index, which keeps a hand-over cheap however long the queue, but its KeyValues carry `lease = 0`.
 * So a candidate is any key of participant form not known to be stray, and the caller checks its
 * lease (stillQueued) before trusting it.
 */
async function findPredecessor(
  session: Session,
  scope: Scope,
  ticket: Ticket,
  lostError: LostErrorFactory,
  signal: AbortSignal,
  strays: OldestRule,
): Promise<Predecessor | null> {
  const client = session.client;
  const prefix = scope.prefix;
  const end = prefixEnd(prefix);
  const before = (maxCreate: bigint, limit: bigint): RangeRequest => ({
    key: prefix,
    rangeEnd: end,
    sortOrder: SortOrder.DESCEND,
    sortTarget: SortTarget.CREATE,
    maxCreateRevision: maxCreate,
    limit,
    keysOnly: true,
  });
  const t = await client.txn(
    {
      compare: ourKeyStands(session, ticket),
      success: [op.range(before(ticket.rev - 1n, 8n))],
      failure: [],
    },
    { idempotent: true, signal, coalesce: { scope: prefix } },
  );
  if (!t.succeeded) return ticketLost(session, ticket, lostError, signal);
  let page = txnRange(t, 0);
  let asOf = t.header.revision;
  for (;;) {
    const found = page.kvs.find((kv) => scope.isCandidate(kv.key) && !strays.isStray(kv));
    // A lease other than 0 was really read (etcd up to 3.6 reports it on a keys-only read).
    if (found)
      return { key: keyCopy(found.key), createRevision: found.createRevision, asOf, leased: found.lease !== 0n, marked: marked(found) };
    const last = page.kvs[page.kvs.length - 1];
    if (!page.more || !last) return null;
    // Only keys of nested names or stray data so far: look further back.
    page = await client.range(before(last.createRevision - 1n, 64n), { signal });
    asOf = page.header.revision;
  }
}

/**
 * Our marked or last older predecessor is gone, so we are the oldest: one Txn of O(1) compares
 * confirms our key still stands, and behind a long queue (a lock's) marks it in the same write for
 * the waiter behind us.
 */
async function ourTurnAfterHead(
  session: Session,
  scope: Scope,
  ticket: Ticket,
  lostError: LostErrorFactory,
  marks: boolean,
  signal: AbortSignal,
): Promise<null> {
  const mark = marks && queueOf(session.client).hints.long(scope.prefix);
  const t = await session.client.txn(
    { compare: ourKeyStands(session, ticket), success: mark ? [op.touch(ticket.key)] : [], failure: [] },
    { idempotent: true, signal, coalesce: { scope: scope.prefix } },
  );
  if (!t.succeeded) return ticketLost(session, ticket, lostError, signal);
  return null;
}

/**
 * Marks our key ("I was the oldest") in the background, guarded on our incarnation and lease: a mark
 * landing after our release finds the key gone and writes nothing. If it is late, the waiter behind
 * us only falls back to the full look-up.
 */
function markHead(session: Session, ticket: Ticket): void {
  session.client
    .txn(
      { compare: ourKeyStands(session, ticket), success: [op.touch(ticket.key)], failure: [] },
      { idempotent: true, coalesce: { scope: ticket.key.slice(0, ticket.key.lastIndexOf('/') + 1) } },
    )
    .catch(() => {});
}

/** The compares of "our key is still the one we queued with, on our lease". */
export function ourKeyStands(session: Session, ticket: Ticket): Compare[] {
  return [compare.createRevision(ticket.key, '=', ticket.rev), compare.lease(ticket.key, '=', session.leaseId)];
}

/** Our key is gone. If its lease went with it, say so: the session is over, not just this wait. */
export async function ticketLost(session: Session, ticket: Ticket, lostError: LostErrorFactory, signal: AbortSignal): Promise<never> {
  const lease = await session.client.leaseTimeToLive(session.leaseId, { signal }).catch(() => undefined);
  if (lease && lease.ttl <= 0) markLeaseGone(session);
  session.assertAlive();
  const kv = (await session.client.range({ key: Buffer.from(ticket.key) }, { signal }).catch(() => undefined))?.kvs[0];
  const reason = kv !== undefined && kv.createRevision === ticket.rev ? 'moved_off_lease' : 'key_deleted';
  throw lostError(`${ticket.key} was deleted or moved to another lease while waiting`, { reason });
}
