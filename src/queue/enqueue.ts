// The enqueue: one Txn that creates our key if absent and counts the queue, as one more user of the key.
import { isTransient, LeaseNotFoundError } from '../client/errors.js';
import { compare, op, txnRange, type KeyValue } from '../client/kv.js';
import type { CallProgress } from '../client/connection.js';
import { ownBuffer } from '../keys.js';
import { markLeaseGone, type Session } from '../session.js';
import { rethrown } from '../rethrow.js';
import type { KeyUse } from './key-users.js';
import { dropTicket, mayLandLate } from './leave.js';
import type { ReleaseWhat } from './release.js';
import { SHORT_QUEUE } from './hints.js';
import { queueOf } from './state.js';
import type { Ticket, TicketSpec } from './ticket.js';

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
  ahead?: (keys: bigint) => void,
  signal?: AbortSignal,
): Promise<Ticket> {
  const { key, value } = spec;
  const count = op.range({ ...spec.count, countOnly: true });
  const progress: CallProgress = { sent: false };
  // A delete of this session's in flight or still retried (a release whose delete failed, a dropped
  // ticket, a swept ghost), of our key or of one we would queue behind (an RWMutex writer behind its
  // own read key): let it land first. Else we would wait behind our own leftover for as long as the
  // session lives, or find that incarnation, join it (its old fencing token), and lose it to the delete.
  const state = queueOf(session.client);
  const q = state.of(session);
  const inside = (k: string): boolean => inRange(k, spec.count);
  for (let ahead = q.deletes.ahead(key, inside); ahead.length > 0; ahead = q.deletes.ahead(key, inside)) {
    await untilSettled(Promise.all(ahead), signal, session.signal);
  }
  session.assertAlive();
  signal?.throwIfAborted();
  // Behind a long queue this client watches (a view, see queue-view.ts), a join counts nothing: the
  // count reads the whole range's index in etcd's apply loop, and the view tells what it would.
  const view = spec.lookup ? state.views.live(spec.count.key) : undefined;
  const viewed = view !== undefined && BigInt(view.size) > SHORT_QUEUE;
  const reads = viewed ? [] : spec.peek ? [count, op.range(spec.peek)] : [count];
  // The look-up runs after our put, so it sees our key first and then the ones before it.
  const lookup = !viewed && spec.lookup && state.hints.short(spec.count.key) ? [op.range(spec.lookup)] : [];
  const t = await session.client
    .txn(
      {
        compare: [compare.createRevision(key, '=', 0n)],
        success: [op.put(key, value, session.leaseId), ...reads, ...lookup],
        failure: [op.get(key), ...reads],
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
      // An attempt may still land after we release the key: sweep it then (see late-sweeper.ts).
      if (progress.ambiguous) mayLandLate(session, key);
    });
  let first = false;
  if (viewed) {
    // Not first behind a queue this long: the rule finds our place in the view.
    state.hints.note(spec.count.key, BigInt(view.size), view.seenThrough);
  } else {
    const counted = txnRange(t, 1).count;
    state.hints.note(spec.count.key, counted, t.header.revision);
    first = spec.first(counted);
    // Our key is the newest of those counted when this Txn created it: the rest are ahead of us.
    if (ahead && t.succeeded) ahead(counted - (inRange(key, spec.count) ? 1n : 0n));
    // A long queue of a lock or election: watch it from now on, so that later joins need not read it.
    if (spec.lookup && counted > SHORT_QUEUE) state.views.of(spec.count.key, spec.count.rangeEnd);
  }
  const peeked = spec.peek && !viewed ? txnRange(t, 2).kvs : NO_KVS;
  let ticket: Ticket;
  if (t.succeeded) {
    ticket = { key, rev: t.header.revision, joined: false, value, first, peeked };
    if (lookup.length > 0 && !first) {
      const r = txnRange(t, reads.length + 1);
      ticket.preceding = { kvs: r.kvs, more: r.more };
    }
  } else {
    const mine = txnRange(t, 0).kvs[0]!;
    // A copy: the decoded value is a slice of the whole response, which it would keep alive.
    ticket = { key, rev: mine.createRevision, joined: false, value: ownBuffer(mine.value), first, peeked };
  }
  // An existing key that no other call of this process uses was created either by our own first
  // attempt (its answer lost, the Txn retried) or by an earlier process on a lease this session
  // adopted. Either way it keeps its place and is ours to drop: a key nobody waits for would block
  // the queue as long as the lease is renewed (Go likewise resigns a cancelled Campaign).
  ticket.joined = q.users.join(key, use, ticket.rev);
  return ticket;
}

/** Whether `key` falls inside `range` (etcd's rules: an empty rangeEnd is the key alone, "\0" no end). */
function inRange(key: string, range: { key: Buffer; rangeEnd: Buffer }): boolean {
  const k = Buffer.from(key);
  if (k.compare(range.key) < 0) return false;
  if (range.rangeEnd.length === 0) return k.equals(range.key);
  return (range.rangeEnd.length === 1 && range.rangeEnd[0] === 0) || k.compare(range.rangeEnd) < 0;
}

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
  ahead?: (keys: bigint) => void,
  signal?: AbortSignal,
): Promise<Ticket> {
  const { key } = spec;
  const users = queueOf(session.client).of(session).users;
  const use = users.begin(key);
  try {
    return await enqueue(session, spec, use, ahead, signal);
  } catch (err) {
    users.abandon(key, use);
    if (use.users === 0 && use.pending === 0 && !session.signal.aborted) {
      if (use.rev !== undefined) void dropTicket(session, { key, rev: use.rev }, what);
      else if (isTransient(err)) void dropTicket(session, { key }, what);
    }
    throw err;
  }
}

/** Resolves when `p` settles; rejects with the reason of the first of `signals` to abort (nothing is sent yet). */
function untilSettled(p: Promise<unknown>, ...signals: (AbortSignal | undefined)[]): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const live = signals.filter((s): s is AbortSignal => s !== undefined);
    const done = (): void => {
      for (const s of live) s.removeEventListener('abort', onAbort);
    };
    const onAbort = (e: Event): void => {
      done();
      reject((e.target as AbortSignal).reason);
    };
    for (const s of live) {
      if (s.aborted) return reject(s.reason);
      s.addEventListener('abort', onAbort, { once: true });
    }
    p.then(
      () => (done(), resolve()),
      () => (done(), resolve()),
    );
  });
}
