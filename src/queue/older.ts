import { compare, op, prefixEnd, SortOrder, SortTarget, txnRange, type Compare, type KeyValue } from '../client/kv.js';
import type { WatchEvent } from '../client/watch.js';
import type { Session } from '../session.js';
import type { BatchCheck } from './recheck.js';
import { longQueue, SHORT_QUEUE, type Ticket } from './ticket.js';
import type { Blocker } from './turn.js';

/** What {@link OlderBlocker} needs of the rule that made it (predecessor.ts's OldestRule). */
export interface OlderRule {
  readonly session: Session;
  readonly ticket: Ticket;
  readonly keepWatch: boolean;
  /** Set when every older participant is gone and our key stands: the rule's next answer is "our turn", with no request. */
  clear: boolean;
  addStray(kv: { key: Buffer; createRevision: bigint }): void;
  isStray(kv: { key: Buffer; createRevision: bigint }): boolean;
}

/** The participants older than us, by key (latin1) with their CreateRevision. */
export type OlderSet = Map<string, bigint>;

/** The most older participants re-read in one page: as many as the enqueue's look-up reads (participantTicket). */
const PAGE = 8n;

/**
 * Every participant older than us, from a page read newest first with leases (not keys-only: etcd
 * 3.7 reports a keys-only read's leases as 0). Undefined when the page may not hold them all. Stray
 * keys (no lease: etcd issue 6631) are remembered as such and skipped, and so are keys that are not
 * candidates (nested names under the prefix), as every look-up does.
 */
export function olderSet(kvs: readonly KeyValue[], more: boolean, rev: bigint, isCandidate: (key: Buffer) => boolean, rule: OlderRule): OlderSet | undefined {
  if (more) return undefined;
  const set: OlderSet = new Map();
  for (const kv of kvs) {
    if (kv.createRevision >= rev || !isCandidate(kv.key) || rule.isStray(kv)) continue;
    if (kv.lease === 0n) rule.addStray(kv);
    else set.set(kv.key.toString('latin1'), kv.createRevision);
  }
  return set;
}

/**
 * Waiting in a short queue whose older participants are all known: one watch on the whole prefix,
 * whose events come in revision order, takes each of them off as it goes, and sees any change to
 * our own key. Once the last is gone and our key was not touched, we are the oldest at that event's
 * revision with our key standing: what the confirming read after a wake-up would prove, known
 * without it. The hand-over then costs the release and its notification only.
 *
 * Why that is enough: no key can be created older than an existing one (CreateRevisions only grow),
 * so after the read at `asOf` the older participants can only leave; the watch delivers every event
 * under the prefix after `asOf` (the watch is confirmed to start there or is re-read, see
 * stillBlocked), so at each event's revision the older ones are exactly those not yet seen to go,
 * and our key is as read unless an event on it came first. Any change to our key (deleted, moved to
 * another lease or incarnation: an operator, a revoked lease) sends the waiter back to the rule,
 * whose look-up reports the loss (etcd 11456: a waiter whose key is gone must not take the lock).
 */
export class OlderBlocker implements Blocker, BatchCheck {
  readonly key: Buffer;
  readonly prefix = true;
  /** The set was read with leases: a watch that delivers every event after `asOf` needs no re-read. */
  readonly confirmed = true;
  /** Our key as etcd reports it (latin1), to tell its events from the others'. */
  private readonly mine: string;
  /** Newcomers seen queueing behind us. */
  private joined = 0;
  /** The older participant the batched safety net last asked about (see keys). */
  private asked: [string, bigint] | undefined;

  constructor(
    private readonly rule: OlderRule,
    private readonly scopePrefix: Buffer,
    private readonly isCandidate: (key: Buffer) => boolean,
    private older: OlderSet,
    /** The revision the set was read at; moved on by stillBlocked's re-read. */
    public asOf: bigint,
  ) {
    this.key = scopePrefix;
    this.mine = Buffer.from(rule.ticket.key).toString('latin1');
  }

  /**
   * Kept for the session's next wait on the name only while the queue is short (asked again when the
   * wait ends): behind a long queue that wait watches one key, and a kept prefix watch would take
   * every event under the prefix meanwhile.
   */
  get keep(): boolean {
    return this.rule.keepWatch && !longQueue(this.rule.session.client, this.scopePrefix);
  }

  changed(e: WatchEvent): boolean {
    const k = e.kv.key;
    if (!this.isCandidate(k)) return false;
    const id = k.toString('latin1');
    const { ticket, session } = this.rule;
    // Our own key: only a put of ours (same incarnation, our lease; an election's value) leaves it as it
    // was. Else the rule's look-up (not this blocker again) tells the loss.
    if (id === this.mine) {
      return !(e.type === 'put' && e.kv.lease === session.leaseId && e.kv.createRevision === ticket.rev);
    }
    const create = this.older.get(id);
    if (create === undefined) {
      // Queued behind us, or stray. Behind a queue grown long, wait on one key like its other waiters
      // (the rule's look-up): this watch would take every newcomer's event.
      return e.type === 'put' && e.kv.version === 1n && ++this.joined > SHORT_QUEUE;
    }
    if (e.type === 'put' && e.kv.createRevision === create && e.kv.lease !== 0n) return false; // a proclaim or a mark
    if (e.type === 'put' && e.kv.lease === 0n) this.rule.addStray(e.kv); // moved off any lease: stray data now
    this.older.delete(id);
    if (this.older.size > 0) return false;
    this.rule.clear = true;
    return true;
  }

  /**
   * Once the watch is up (when it may have missed events after our read): read the older set again,
   * with our key's compares, at a revision the watch covers. False sends the waiter back to the rule:
   * our key is gone (its look-up says why), or nobody older is left (`clear`: no further request).
   */
  async stillBlocked(signal: AbortSignal): Promise<boolean> {
    const { session, ticket } = this.rule;
    const prefix = this.scopePrefix;
    const t = await session.client.txn(
      {
        compare: ourKeyStands(session, ticket),
        success: [op.range({ key: prefix, rangeEnd: prefixEnd(prefix), sortOrder: SortOrder.DESCEND, sortTarget: SortTarget.CREATE, maxCreateRevision: ticket.rev - 1n, limit: PAGE })],
        failure: [],
      },
      { idempotent: true, signal },
    );
    if (!t.succeeded) return false; // our key is gone: the rule's look-up says why
    const page = txnRange(t, 0);
    const set = olderSet(page.kvs, page.more, ticket.rev, this.isCandidate, this.rule);
    if (set === undefined) return false; // cannot be (the older ones only leave); the rule looks up anew
    this.older = set;
    this.asOf = t.header.revision;
    if (set.size > 0) return true;
    this.rule.clear = true;
    return false;
  }

  get check(): BatchCheck {
    return this;
  }

  /** Our key and the newest older participant (kept until blocked() answers). */
  get keys(): readonly (string | Buffer)[] {
    let newest: [string, bigint] | undefined;
    for (const e of this.older) if (!newest || e[1] > newest[1]) newest = e;
    this.asked = newest;
    return newest ? [this.rule.ticket.key, Buffer.from(newest[0], 'latin1')] : [this.rule.ticket.key];
  }

  blocked([mine, p]: readonly (KeyValue | undefined)[]): boolean {
    const { ticket, session } = this.rule;
    const asked = this.asked;
    if (!asked) return false;
    if (p && p.createRevision === asked[1] && p.lease === 0n) this.rule.addStray(p);
    return mine?.createRevision === ticket.rev && mine.lease === session.leaseId && p?.createRevision === asked[1] && p.lease !== 0n;
  }
}

/** The compares of "our key is still the one we queued with, on our lease" (as predecessor.ts's). */
function ourKeyStands(session: Session, ticket: Ticket): Compare[] {
  return [compare.createRevision(ticket.key, '=', ticket.rev), compare.lease(ticket.key, '=', session.leaseId)];
}
