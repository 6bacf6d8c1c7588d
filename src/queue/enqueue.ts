// The enqueue: one Txn that creates our key if absent and counts the queue, as one more user of the key.
import type { CallProgress } from '../client/connection.js';
import { isTransient, LeaseNotFoundError } from '../client/errors.js';
import { compare, inRange, type KeyValue, op, type RangeRequest, type RequestOp, txnRange, type TxnResult } from '../client/kv.js';
import { ownBuffer } from '../keys.js';
import { rethrown } from '../rethrow.js';
import { markLeaseGone, type Session } from '../session.js';
import { settledOrStopped } from '../stop.js';
import type { KeyUse } from './key-users.js';
import { dropTicket, type ReleaseWhat } from './release.js';
import { queueOf, sessionQueue } from './state.js';
import type { LostErrorFactory } from './wait.js';

/** Our place in a queue: our key and its CreateRevision (the ticket, and once we hold, the fencing token). */
export interface Ticket {
  key: string;
  /** Our key's CreateRevision: our place in the queue and, once we hold, the fencing token. */
  fencingToken: bigint;
  /**
   * True when another call of this process (same session, same key) already used this incarnation:
   * we share it. Either way this call is counted as one of its users (see key-users.ts): the key is
   * deleted only when the last of them releases, aborts or fails. A key found on our lease that no
   * call of this process uses is this call's alone, including one an earlier process left on a
   * lease this session adopted.
   */
  joined: boolean;
  /** The key's value as etcd holds it (for election's "update the value if it differs"). */
  value: Buffer;
  /** Our turn already: the enqueue's count proved nobody we could wait for was there. */
  first: boolean;
  /** What the spec's `peek` read in the same Txn (a semaphore checks its peers' permit count). */
  peeked: readonly KeyValue[];
  /** What the spec's `lookup` read in the same Txn, after our put (at revision `fencingToken`), when it was made. */
  preceding?: readonly KeyValue[];
}

/** What to enqueue: our key and value, and the range whose count, read in the same Txn, may prove we go first. */
export interface TicketSpec {
  key: string;
  value: Buffer;
  /** The keys counted in the enqueue Txn (ours among them when `key` falls inside). */
  count: { key: Buffer; rangeEnd: Buffer };
  /** True when that count proves it is our turn at once (a mutex: only our key under the prefix). */
  first(count: bigint): boolean;
  /** An O(1) read to make in the same Txn (a limit, unsorted), for checks on the participants. */
  peek?: RangeRequest;
  /**
   * The keys just before ours, newest first, read in the same Txn after our put when this client last
   * counted the queue short (see QueueLengths): a waiter's first predecessor without a look-up of its own.
   */
  lookup?: RangeRequest;
  /**
   * When set, a call that finds our key in place while other calls of this process use it joins them
   * only if `mayJoin` says so, given what `read` (made in the same Txn) found and the key's
   * CreateRevision; else it waits until they have left the key, then takes a key of its own. An RWMutex
   * read lock: it must not join a read key that a writer queued behind since.
   */
  joinCheck?: { read: RangeRequest; mayJoin(kvs: readonly KeyValue[], fencingToken: bigint): boolean };
}

/**
 * What an enqueue answers instead of a ticket when it must not join the key it found (see
 * TicketSpec.joinCheck): the caller takes its in-process turn again after every call that uses the key
 * has left (Gates.enterAfterHolders), then enqueues again, creating a key of its own.
 */
export const AFTER_HOLDERS: unique symbol = Symbol('after holders');

/**
 * What an enqueue answers when its answer is about an incarnation of our key older than the one this
 * process counts now (see KeyUsers.join): it says nothing true of now (its count may make it "first"
 * on a key already gone), so the enqueue is made again.
 */
const STALE: unique symbol = Symbol('stale');

/** The `peeked` of a spec without `peek`: one empty array for every ticket a queue holds. */
const NO_KVS: readonly KeyValue[] = Object.freeze([]);

/**
 * Takes a ticket in one Txn: create our key if absent, and count a range. An uncontended caller
 * whose count proves it goes first holds after this single round trip.
 *
 * Only O(1) work goes into this write: etcd runs a write Txn's reads in its single apply loop, which
 * every write of the cluster waits for, and it answers a sorted Range by reading every key of the
 * range, while a count comes from its in-memory index. Finding what we wait for (a sorted read) is a
 * separate read-only request, served off the apply loop, paid only under contention.
 */
async function enqueue(
  session: Session,
  spec: TicketSpec,
  use: KeyUse,
  what: ReleaseWhat,
  lost: LostErrorFactory,
  ahead?: (keys: bigint) => void,
  signal?: AbortSignal,
): Promise<Ticket | typeof AFTER_HOLDERS | typeof STALE> {
  const { key, value } = spec;
  const count = op.range({ ...spec.count, countOnly: true });
  // A delete of this session's in flight or still retried (a release whose delete failed, a dropped
  // ticket, a swept ghost), of our key or of one we would queue behind (an RWMutex writer behind its
  // own read key): let it land first. Else we would wait behind our own leftover for as long as the
  // session lives, or find that incarnation, join it (its old fencing token), and lose it to the delete.
  const state = queueOf(session.client);
  const q = state.of(session);
  const inside = (k: string): boolean => inRange(k, spec.count);
  for (let ahead = q.deletes.ahead(key, inside); ahead.length > 0; ahead = q.deletes.ahead(key, inside)) {
    await settledOrStopped(Promise.all(ahead), signal, session.signal);
  }
  session.assertAlive();
  signal?.throwIfAborted();
  const reads = spec.peek ? [count, op.range(spec.peek)] : [count];
  const lookup = spec.lookup && state.lengths.short(spec.count.key) ? [op.range(spec.lookup)] : [];
  // A read lock's join checks for a writer queued behind the key it would join (see TicketSpec.joinCheck).
  const joinRead = spec.joinCheck ? [op.range(spec.joinCheck.read)] : [];
  const t = await enqueueTxn(session, spec, reads, lookup, joinRead, lost, use);
  const counted = txnRange(t, 1).count;
  state.lengths.note(spec.count.key, counted, t.header.revision);
  const first = spec.first(counted);
  // Our key is the newest of those counted when this Txn created it: the rest are ahead of us.
  if (ahead && t.succeeded) ahead(counted - (inRange(key, spec.count) ? 1n : 0n));
  const peeked = spec.peek ? txnRange(t, 2).kvs : NO_KVS;
  let ticket: Ticket;
  if (t.succeeded) {
    ticket = { key, fencingToken: t.header.revision, joined: false, value, first, peeked };
    if (lookup.length > 0 && !first) ticket.preceding = txnRange(t, reads.length + 1).kvs;
  } else {
    const mine = txnRange(t, 0).kvs[0]!;
    // The key we found is one that other calls of this process use, are taking, or used (its last
    // holder left it to us while our enqueue was in flight): joining it would overtake a writer that
    // queued behind it since. Wait until those calls have left it instead (and if it was left to us,
    // delete it, guarded: nobody else will).
    const others = use.users > 0 || use.pending > 1 || use.fencingToken === mine.createRevision;
    if (others && spec.joinCheck && !spec.joinCheck.mayJoin(txnRange(t, reads.length + 1).kvs, mine.createRevision)) {
      q.users.abandon(key, use);
      if (use.users === 0 && use.pending === 0) void dropTicket(session, { key, fencingToken: mine.createRevision }, what);
      return AFTER_HOLDERS;
    }
    // A copy: the decoded value is a slice of the whole response, which it would keep alive.
    ticket = { key, fencingToken: mine.createRevision, joined: false, value: ownBuffer(mine.value), first, peeked };
  }
  // An existing key that no other call of this process uses was created either by our own first
  // attempt (its answer lost, the Txn retried) or by an earlier process on a lease this session
  // adopted. Either way it keeps its place and is ours to drop: a key nobody waits for would block
  // the queue as long as the lease is renewed (Go likewise resigns a cancelled Campaign).
  const joined = q.users.join(key, use, ticket.fencingToken);
  if (joined === undefined) return STALE;
  ticket.joined = joined;
  return ticket;
}

/**
 * The enqueue's Txn: creates our key if absent, else reads it. A key at our key's name that is not on
 * our lease was written by someone else (an operator's plain `put`, which keeps the CreateRevision and
 * drops the lease): it is not ours to hold or to join (another session may hold the lock meanwhile,
 * since waiters skip a lease-less key), and it would block our session's place on the name for good.
 * Neither is an incarnation whose holding ended while it was still in etcd (KeyUsers.retire): its
 * token belongs to that holding. Either is deleted, guarded on what was read, and the enqueue made
 * again: our key is then a new one on our lease, with a new fencing token, queued at the back.
 */
async function enqueueTxn(
  session: Session,
  spec: TicketSpec,
  reads: RequestOp[],
  lookup: RequestOp[],
  joinRead: RequestOp[],
  lost: LostErrorFactory,
  use: KeyUse,
): Promise<TxnResult> {
  const { key, value } = spec;
  for (let replaced = 0; ; replaced++) {
    const progress: CallProgress = { sent: false };
    const t = await session.client
      .txn(
        {
          compare: [compare.createRevision(key, '=', 0n)],
          success: [op.put(key, value, session.leaseId), ...reads, ...lookup],
          failure: [op.get(key), ...reads, ...joinRead],
        },
        // Guarded on our key's absence: repeating it after an ambiguous failure cannot create a second
        // key. No signal: cancelled after etcd applied it, it would leave a key nobody knows to delete.
        { idempotent: true, coalesce: { scope: spec.count.key } },
        progress,
      )
      .catch((err: unknown) => {
        if (err instanceof LeaseNotFoundError) {
          markLeaseGone(session);
          throw rethrown(session.signal.reason);
        }
        throw err;
      })
      .finally(() => {
        // An attempt may still land after we release the key: sweep it then (sweepWhenGivenUp).
        if (progress.ambiguous) sessionQueue(session).late.mayLandLate(key);
      });
    const found = t.succeeded ? undefined : txnRange(t, 0).kvs[0];
    // Ours to take: on our lease, and not an incarnation whose holding ended (retired: lost, or given
    // up by runAsLeader while its task still winds down), which a later call must never join.
    if (!found || (found.lease === session.leaseId && use.retired !== found.createRevision)) return t;
    if (replaced >= MAX_REPLACED) {
      throw lost(`${key} keeps being written without this session's lease (lease ${found.lease.toString(16)}); stop whoever writes it`, {
        reason: 'moved_off_lease',
      });
    }
    await session.client.txn(
      {
        compare: [compare.createRevision(key, '=', found.createRevision), compare.lease(key, '=', found.lease)],
        success: [op.delete(key)],
        failure: [],
      },
      { idempotent: true },
    );
  }
}

/** How many times in a row the enqueue replaces a key someone else wrote before it gives up. */
const MAX_REPLACED = 3;

/**
 * Takes a ticket (see enqueue) as one more user of the key. If the enqueue fails and no other call
 * of this process uses the key, the key is taken back: one a release left to this call goes, and
 * one an attempt whose answer was lost may have created (outcome unknown, the retry refused) too,
 * since nobody else knows to delete it. `ahead`, when given, is told how many of the counted keys
 * were ahead of ours when the enqueue created it (not called when it found our key in place).
 */
export async function enqueueOrClean(
  session: Session,
  spec: TicketSpec,
  what: ReleaseWhat,
  lost: LostErrorFactory,
  ahead?: (keys: bigint) => void,
  signal?: AbortSignal,
): Promise<Ticket | typeof AFTER_HOLDERS> {
  const { key } = spec;
  const users = queueOf(session.client).of(session).users;
  for (;;) {
    const use = users.begin(key);
    let t: Ticket | typeof AFTER_HOLDERS | typeof STALE;
    try {
      t = await enqueue(session, spec, use, what, lost, ahead, signal);
    } catch (err) {
      users.abandon(key, use);
      if (use.users === 0 && use.pending === 0 && !session.signal.aborted) {
        if (use.fencingToken !== undefined) void dropTicket(session, { key, fencingToken: use.fencingToken }, what);
        else if (isTransient(err)) void dropTicket(session, { key }, what);
      }
      throw err;
    }
    if (t !== STALE) return t;
  }
}
