import type { KeyValue } from '../client/kv.js';
import type { WatchEvent } from '../client/watch.js';
import { ownBuffer } from '../keys.js';
import type { Session } from '../session.js';
import { SHORT_QUEUE } from './hints.js';
import type { WatchTarget } from './kept-watches.js';
import type { BatchCheck } from './recheck.js';
import { queueOf } from './state.js';
import type { Ticket } from './ticket.js';
import type { Blocker, Found } from './turn.js';

/** The participants older than us, by key (latin1) with their CreateRevision. */
export type OlderSet = Map<string, bigint>;

/** What the rule knows of stray keys (no lease: etcd issue 6631), which no look-up waits for. */
export interface Strays {
  addStray(kv: { key: Buffer; createRevision: bigint }): void;
  isStray(kv: { key: Buffer; createRevision: bigint }): boolean;
}

/**
 * Every participant older than us, from a page read newest first with leases (not keys-only: etcd
 * 3.7 reports a keys-only read's leases as 0). Undefined when the page may not hold them all. Stray
 * keys are remembered as such and skipped, and so are keys that are not candidates (nested names
 * under the prefix), as every look-up does.
 */
export function olderSet(
  kvs: readonly KeyValue[],
  more: boolean,
  rev: bigint,
  isCandidate: (key: Buffer) => boolean,
  strays: Strays,
): OlderSet | undefined {
  if (more) return undefined;
  const set: OlderSet = new Map();
  for (const kv of kvs) {
    if (kv.createRevision >= rev || !isCandidate(kv.key) || strays.isStray(kv)) continue;
    if (kv.lease === 0n) strays.addStray(kv);
    else set.set(kv.key.toString('latin1'), kv.createRevision);
  }
  return set;
}

/**
 * Waiting in a short queue whose older participants are all known: one watch on the whole prefix,
 * whose events come in revision order, takes each of them off as it goes, and sees any change to
 * our own key. Once the last is gone and our key was not touched, we are the oldest at that event's
 * revision with our key standing: what the confirming read after a wake-up would prove, known
 * without it. The event may reach us late, though (a stream that stalled and resumed), so the rule
 * still confirms our key with one O(1) Txn before it says "our turn": no read of the queue.
 *
 * Why that is enough: no key can be created older than an existing one (CreateRevisions only grow),
 * so after the read at `asOf` the older participants can only leave; the watch delivers every event
 * under the prefix after `asOf` (or the engine's check re-reads them all, see `keys`), so at each
 * event's revision the older ones are exactly those not yet seen to go, and our key is as read
 * unless an event on it came first. Any change to our key (deleted, moved to another lease or
 * incarnation: an operator, a revoked lease) sends the waiter back to the rule, whose look-up reports
 * the loss (etcd 11456: a waiter whose key is gone must not take the lock).
 *
 * It keeps what its wait learned (`clear`, `strays`) for the rule's next answer: it writes nothing of
 * the rule's.
 */
export class OlderBlocker implements Blocker, WatchTarget, Found, BatchCheck {
  readonly key: Buffer;
  readonly prefix = true;
  /** The set was read with leases: a watch that delivers every event after `asOf` needs no re-read. */
  readonly confirmed = true;
  /** Every older participant went with our key standing: the rule's next answer is "our turn", with no request. */
  clear = false;
  /** Incarnations this wait found moved off any lease (stray data now): for the rule's next look-up. */
  strays: { key: Buffer; createRevision: bigint }[] | undefined;
  /** Our key as etcd reports it (latin1), to tell its events from the others'. */
  private readonly mine: string;
  /** The older participants a check asked about, in the order of `keys` after ours. */
  private asked: [string, bigint][] = [];
  /** Newcomers seen queueing behind us. */
  private joined = 0;
  /** An event changed our own key: only the rule's look-up may answer now (it tells the loss). */
  private mineChanged = false;
  /** The revision of the newest event taken: the set is exact through it. */
  private through: bigint;
  /** The wait ended because a long queue grew behind us (not a check, not our key). */
  private grewLong = false;

  constructor(
    private readonly session: Session,
    private readonly ticket: Ticket,
    scopePrefix: Buffer,
    private readonly isCandidate: (key: Buffer) => boolean,
    private readonly older: OlderSet,
    /** The revision the set was read at. */
    readonly asOf: bigint,
    private readonly keepWatch: boolean,
  ) {
    this.key = scopePrefix;
    this.mine = Buffer.from(ticket.key).toString('latin1');
    this.through = asOf;
  }

  /**
   * The one older participant left when a queue grown long ended this wait, our key untouched: the
   * rule waits on it alone, as the last one older (its delete needs no read). Undefined otherwise.
   */
  lastOlder(): { key: Buffer; createRevision: bigint; asOf: bigint } | undefined {
    if (!this.grewLong || this.mineChanged || this.clear || this.older.size !== 1) return undefined;
    const [[id, createRevision]] = this.older;
    return { key: Buffer.from(id, 'latin1'), createRevision, asOf: this.through };
  }

  /**
   * Kept for the session's next wait on the name only while the queue is short (asked again when the
   * wait ends, and not once this wait saw it grow long): behind a long queue that wait watches one
   * key, and a kept prefix watch would take every event under the prefix meanwhile.
   */
  get keep(): boolean {
    return this.keepWatch && !this.grewLong && !queueOf(this.session.client).hints.long(this.key);
  }

  get watch(): WatchTarget {
    return this;
  }

  get found(): Found {
    return this;
  }

  get check(): BatchCheck {
    return this;
  }

  changed(e: WatchEvent): boolean {
    const k = e.kv.key;
    if (e.kv.modRevision > this.through) this.through = e.kv.modRevision;
    if (!this.isCandidate(k)) return false;
    const id = k.toString('latin1');
    const { ticket, session } = this;
    // Our own key: only a put of ours (same incarnation, our lease; an election's value) leaves it as it
    // was. Else the rule's look-up (not this blocker again) tells the loss.
    if (id === this.mine) {
      if (e.type === 'put' && e.kv.lease === session.leaseId && e.kv.createRevision === ticket.rev) return false;
      // Never our turn from this wait now, even if the last older key goes in the same revision.
      this.mineChanged = true;
      this.clear = false;
      return true;
    }
    const create = this.older.get(id);
    if (create === undefined) {
      // Queued behind us, or stray. Behind a queue grown long, wait on one key like its other waiters
      // (the rule's look-up): this watch would take every newcomer's event.
      if (e.type === 'put' && e.kv.version === 1n && BigInt(++this.joined) > SHORT_QUEUE) this.grewLong = true;
      return this.grewLong;
    }
    if (e.type === 'put' && e.kv.createRevision === create && e.kv.lease !== 0n) return false; // a proclaim or a mark
    if (e.type === 'put' && e.kv.lease === 0n) (this.strays ??= []).push({ key: ownBuffer(k), createRevision: e.kv.createRevision });
    return this.gone(id);
  }

  /** Our key, then every older participant still in the set, read in full. */
  get keys(): readonly (string | Buffer)[] {
    this.asked = [...this.older];
    return [this.ticket.key, ...this.asked.map(([id]) => Buffer.from(id, 'latin1'))];
  }

  /**
   * Blocked while our key stands and some older participant is still the same incarnation on a
   * lease. Those found gone leave the set (none can come back older than us); when none is left, the
   * answer is "not blocked" with `clear` set: the read proved us the oldest with our key standing.
   */
  blocked([mine, ...older]: readonly (KeyValue | undefined)[]): boolean {
    const { ticket, session } = this;
    if (mine?.createRevision !== ticket.rev || mine.lease !== session.leaseId) return false;
    // Answers to an older question (the set has shrunk since `keys` was asked): no telling which is which.
    if (older.length !== this.asked.length) return true;
    this.asked.forEach(([id, create], i) => {
      const p = older[i];
      if (p?.createRevision === create && p.lease !== 0n) return;
      if (p?.createRevision === create) (this.strays ??= []).push({ key: ownBuffer(p.key), createRevision: create });
      this.gone(id);
    });
    return !this.clear;
  }

  /** Takes `id` off the set; true when that emptied it (our turn). */
  private gone(id: string): boolean {
    this.older.delete(id);
    if (this.older.size > 0) return false;
    this.clear = !this.mineChanged;
    return true;
  }
}
