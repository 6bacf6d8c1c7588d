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
import { LateKeys, queueOf, sessionQueue } from './state.js';
import type { LostErrorFactory } from './wait.js';

/** Our place in a queue, as the enqueue answered it. */
export interface Ticket {
  key: string;
  /** Our key's CreateRevision: our place in the queue and, once we hold, the fencing token. */
  fencingToken: bigint;
  /**
   * Another call of this process (same session and key) already used this incarnation: we share it.
   * Either way this call is counted as one of its users (key-users.ts). A key found on our lease that
   * no call of this process uses is this call's alone (so is one left on a lease this session adopted).
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
   * A call that finds our key in place while other calls of this process use it joins them only if
   * `mayJoin`, given what `read` (in the same Txn) found and the key's CreateRevision; else it takes a
   * key of its own once they left. An RWMutex read must not join a read key a writer queued behind.
   */
  joinCheck?: { read: RangeRequest; mayJoin(kvs: readonly KeyValue[], fencingToken: bigint): boolean };
}

/**
 * An enqueue's answer when it must not join the key it found (TicketSpec.joinCheck): the caller takes
 * its turn again once every call using the key has left (Gates.enterAfterHolders), then enqueues again.
 */
export const AFTER_HOLDERS: unique symbol = Symbol('after holders');

/**
 * An enqueue's answer about an incarnation older than the one this process counts now (KeyUsers.join):
 * it says nothing true of now (its count may make it "first" on a key already gone): enqueue again.
 */
const STALE: unique symbol = Symbol('stale');

/** The `peeked` of a spec without `peek`: one empty array for every ticket a queue holds. */
const NO_KVS: readonly KeyValue[] = Object.freeze([]);

/**
 * Takes a ticket in one Txn: create our key if absent, and count a range. An uncontended caller whose
 * count proves it goes first holds after this single round trip. etcd runs a write Txn's reads in its
 * single apply loop, which every write waits for, and reads every key of a sorted Range (a count comes
 * from its in-memory index): so the read of the key before ours goes in only for a short queue
 * (TicketSpec.lookup); otherwise finding what we wait for is a read-only request, off the apply loop.
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
  // A delete of this session's in flight or retried, of our key or of one we would queue behind (an
  // RWMutex writer behind its own read key): let it land first. Else we would wait behind our own
  // leftover as long as the session lives, or join that incarnation and lose it to the delete.
  const state = queueOf(session.client);
  const q = state.of(session);
  const inside = (k: string): boolean => inRange(k, spec.count);
  for (let ahead = q.deletes?.ahead(key, inside) ?? []; ahead.length > 0; ahead = q.deletes!.ahead(key, inside)) {
    await settledOrStopped(Promise.all(ahead), signal, session.signal);
  }
  session.assertAlive();
  signal?.throwIfAborted();
  const reads = spec.peek ? [count, op.range(spec.peek)] : [count];
  const lookup = spec.lookup && state.lengths.short(spec.count.key) ? [op.range(spec.lookup)] : [];
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
    const preceding = lookup.length > 0 && !first ? txnRange(t, reads.length + 1).kvs : undefined;
    ticket = { key, fencingToken: t.header.revision, joined: false, value, first, peeked, preceding };
  } else {
    const mine = txnRange(t, 0).kvs[0]!;
    // Other calls of this process use, are taking, or used the key we found (its last holder left it
    // to us meanwhile): joining it would overtake a writer queued behind it since. Wait until they left
    // it instead (and if it was left to us, delete it, guarded: nobody else will).
    const others = use.users > 0 || use.pending > 1 || use.fencingToken === mine.createRevision;
    if (others && spec.joinCheck && !spec.joinCheck.mayJoin(txnRange(t, reads.length + 1).kvs, mine.createRevision)) {
      q.users.abandon(key, use);
      if (use.users === 0 && use.pending === 0) void dropTicket(session, { key, fencingToken: mine.createRevision }, what);
      return AFTER_HOLDERS;
    }
    // A copy: the decoded value is a slice of the whole response, which it would keep alive.
    ticket = { key, fencingToken: mine.createRevision, joined: false, value: ownBuffer(mine.value), first, peeked };
  }
  // A key found that no other call of this process uses was created by our own first attempt (its
  // answer lost) or on a lease this session adopted: it keeps its place and is ours to drop (a key
  // nobody waits for blocks the queue while the lease lives; Go likewise resigns a cancelled Campaign).
  const joined = q.users.join(key, use, ticket.fencingToken);
  if (joined === undefined) return STALE;
  ticket.joined = joined;
  return ticket;
}

/**
 * The enqueue's Txn: creates our key if absent, else reads it. A key at our name not on our lease was
 * written by someone else (an operator's plain `put` keeps the CreateRevision and drops the lease): not
 * ours to hold or join (waiters skip a lease-less key, so another session may hold meanwhile), and it
 * would block our place on the name for good. Nor is a retired incarnation (KeyUsers.retire): its token
 * belongs to the holding that ended. Either is deleted, guarded on what was read, and the enqueue made
 * again: a new key on our lease, with a new fencing token, at the back.
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
    let t: TxnResult;
    try {
      t = await session.client.txn(
        {
          compare: [compare.createRevision(key, '=', 0n)],
          success: [op.put(key, value, session.leaseId), ...reads, ...lookup],
          failure: [op.get(key), ...reads, ...joinRead],
        },
        // Guarded on our key's absence: repeating it after an ambiguous failure cannot create a second
        // key. No signal: cancelled after etcd applied it, it would leave a key nobody knows to delete.
        { idempotent: true, coalesce: { scope: spec.count.key } },
        progress,
      );
    } catch (err) {
      if (!(err instanceof LeaseNotFoundError)) throw err;
      markLeaseGone(session);
      throw rethrown(session.signal.reason);
    } finally {
      // An attempt may still land after we release the key: sweep it then (sweepWhenGivenUp).
      if (progress.ambiguous) (sessionQueue(session).late ??= new LateKeys()).add(key);
    }
    const found = t.succeeded ? undefined : txnRange(t, 0).kvs[0];
    // Ours to take: on our lease, and not retired (its holding lost, or given up by runAsLeader while
    // its task winds down), which a later call must never join.
    if (!found || (found.lease === session.leaseId && use.retired !== found.createRevision)) return t;
    if (replaced >= MAX_REPLACED) {
      const why = `${key} keeps being written without this session's lease (lease ${found.lease.toString(16)}); stop whoever writes it`;
      throw lost(key, why, { reason: 'moved_off_lease' });
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
 * Takes a ticket (see enqueue) as one more user of the key. If the enqueue fails and no other call of
 * this process uses the key, it is dropped: one a release left to this call, and one a lost answer may
 * have created, or an attempt whose answer was lost may still create whatever the call's last error
 * (nobody else knows to delete it; dropping it arms the sweep, and a sweep armed by an earlier call
 * left it alone while this call used it). `ahead`, when given, is told how many counted keys were
 * ahead of ours when the enqueue created it (not when it found our key in place).
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
        else if (isTransient(err) || sessionQueue(session).late?.has(key)) void dropTicket(session, { key }, what);
      }
      throw err;
    }
    if (t !== STALE) return t;
  }
}
