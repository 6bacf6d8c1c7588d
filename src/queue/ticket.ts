import { Backoff, sleep } from '../client/backoff.js';
import { isTransient, LeaseNotFoundError } from '../client/errors.js';
import { compare, op, txnRange, type KeyValue, type RangeRequest } from '../client/kv.js';
import type { CallProgress } from '../client/connection.js';
import { ownBuffer } from '../keys.js';
import { markLeaseGone, type Session } from '../session.js';

/** Our place in a queue: our key and its CreateRevision (the ticket, and once we hold, the fencing token). */
export interface Ticket {
  key: string;
  /** CreateRevision of our key: the queue ticket and, once we hold, the fencing token. */
  rev: bigint;
  /**
   * True when a sibling in this process (same session, same key) already uses the key: we share it,
   * and leave it to the sibling on failure. Any other key on our lease is this call's to delete on
   * failure, including one an earlier process left on a lease this session adopted.
   */
  joined: boolean;
  /** The key's value as etcd holds it (for election's "update the value if it differs"). */
  value: Buffer;
  /** Our turn already: the enqueue's count proved nobody we could wait for was there. */
  first: boolean;
  /** What the spec's `peek` read in the same Txn (a semaphore checks its peers' permit count). */
  peeked: KeyValue[];
  /**
   * What the spec's `lookup` read in the same Txn, after our put (so at revision `rev`): the keys
   * just before ours, newest first. Present only when the queue was short; the rule consumes it.
   */
  preceding?: { kvs: KeyValue[]; more: boolean };
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
   * A sorted read of the keys before ours (newest first), made in the same Txn only while this
   * client last saw the counted range short: etcd reads every key of a sorted range in its apply
   * loop, which is nothing for a few keys and would stall every write behind a long queue.
   */
  lookup?: RangeRequest;
}

/** A sorted read in the write Txn is made while the queue last counted at most this many keys. */
export const SHORT_QUEUE = 32n;

/** The count each client last saw per queue prefix (bounded): whether to make the sorted read. */
const lastCount = new WeakMap<object, Map<string, bigint>>();
const HINTS_PER_CLIENT = 1024;

function shortQueue(client: object, prefix: Buffer): boolean {
  const n = lastCount.get(client)?.get(prefix.toString('latin1'));
  return n !== undefined && n <= SHORT_QUEUE;
}

function noteCount(client: object, prefix: Buffer, n: bigint): void {
  let m = lastCount.get(client);
  if (!m) lastCount.set(client, (m = new Map()));
  const k = prefix.toString('latin1');
  m.delete(k); // re-inserted last: the map's order is its age
  if (m.size >= HINTS_PER_CLIENT) m.delete(m.keys().next().value!);
  m.set(k, n);
}

/** Keys this process holds or queues, per session: a second lock() or campaign() on the same key joins. */
const inUse = new WeakMap<Session, Set<string>>();

function keysInUse(session: Session): Set<string> {
  return setOf(inUse, session);
}

/**
 * Keys being enqueued right now (our keys carry the lease id, so they are unique across sessions):
 * a late-enqueue sweeper must not take them for ghosts.
 */
const enqueuing = new Set<string>();
/** A sweeper's delete in flight, by key: an enqueue of that key waits for it, so the two never cross. */
const sweeping = new Map<string, Promise<unknown>>();
/** Keys with an enqueue attempt that may still land, per session, and whether a sweeper watches them. */
const lateProne = new WeakMap<Session, Map<string, boolean>>();

function setOf<K extends object, V>(map: WeakMap<K, Set<V>>, k: K): Set<V> {
  let s = map.get(k);
  if (!s) map.set(k, (s = new Set()));
  return s;
}

/** Forgets `key` once its owner released it: the next acquire on it creates, not joins. */
export function forgetKey(session: Session, key: string): void {
  inUse.get(session)?.delete(key);
  const late = lateProne.get(session);
  if (late?.get(key) === false) {
    late.set(key, true);
    void sweepLateEnqueues(session, key);
  }
}

/**
 * A create of `key` on the session's lease had an unknown outcome (`CallProgress.ambiguous`): once the
 * key is released (forgetKey or dropTicket), a re-creation landing late is swept for the rest of the
 * session (see sweepLateEnqueues). For any primitive's keys, not only enqueue's.
 */
export function mayLandLate(session: Session, key: string): void {
  let late = lateProne.get(session);
  if (!late) lateProne.set(session, (late = new Map()));
  if (!late.has(key)) late.set(key, false);
}

/**
 * An enqueue attempt whose outcome was unknown (retried on another member) may still be applied
 * long after: a request held by a frozen or cut-off member is forwarded when it wakes. Landing
 * after we released the key, its "create if absent" succeeds and brings the key back on our live
 * lease, owned by nobody, blocking everyone queued behind it. So once such a key is released, it
 * is watched for the rest of the session, and a re-creation this process is not using is deleted.
 */
async function sweepLateEnqueues(session: Session, key: string): Promise<void> {
  const client = session.client;
  const sweep = async (kv: KeyValue | undefined): Promise<void> => {
    if (!kv || kv.lease !== session.leaseId || keysInUse(session).has(key) || enqueuing.has(key)) return;
    // Checked and sent in one step; an enqueue starting meanwhile waits for this delete to land.
    const del = client.txn({ compare: [compare.createRevision(key, '=', kv.createRevision)], success: [op.delete(key)], failure: [] }, { idempotent: true });
    const settled = del.then(() => {}, () => {});
    sweeping.set(key, settled);
    try {
      await del;
    } finally {
      if (sweeping.get(key) === settled) sweeping.delete(key);
    }
  };
  while (!session.signal.aborted && !client.closed) {
    const w = client.watch(key, { signal: session.signal });
    try {
      await w.created;
      await sweep(await client.get(key)); // one that landed before the watch started
      for await (const batch of w) for (const e of batch.events) if (e.type === 'put') await sweep(e.kv);
      return; // the session ended
    } catch {
      // A compacted or broken watch: start again from now (the read covers the gap).
    } finally {
      w.cancel();
    }
  }
}

/**
 * Takes a ticket in one Txn: create our key if absent, and count a range. An uncontended caller
 * whose count proves it goes first holds after this single round trip.
 *
 * Only O(1) work goes into this write: etcd runs a write Txn's reads in its single apply loop, which
 * every write of the cluster waits for, and it answers a sorted Range by reading every key of the
 * range, while a count comes from its in-memory index. Finding what we wait for (a sorted read) is a
 * separate read-only request, served off the apply loop, paid only under contention.
 */
export async function enqueue(session: Session, spec: TicketSpec): Promise<Ticket> {
  const { key, value } = spec;
  const count = op.range({ ...spec.count, countOnly: true });
  const progress: CallProgress = { sent: false };
  enqueuing.add(key);
  // A ghost of this key being swept: let that delete land first, or it could take our new key.
  const swept = sweeping.get(key);
  if (swept) await swept;
  const reads = spec.peek ? [count, op.range(spec.peek)] : [count];
  // The look-up runs after our put, so it sees our key first and then the ones before it.
  const lookup = spec.lookup && shortQueue(session.client, spec.count.key) ? [op.range(spec.lookup)] : [];
  const t = await session.client
    .txn(
      {
        compare: [compare.createRevision(key, '=', 0n)],
        success: [op.put(key, value, session.leaseId), ...reads, ...lookup],
        failure: [op.get(key), ...reads],
      },
      // Guarded on our key's absence: repeating it after an ambiguous failure cannot create a second
      // key. No signal: cancelled after etcd applied it, it would leave a key nobody knows to delete.
      { idempotent: true },
      progress,
    )
    .catch((err: unknown) => {
      enqueuing.delete(key);
      if (err instanceof LeaseNotFoundError) {
        markLeaseGone(session);
        throw session.signal.reason;
      }
      throw err;
    })
    .finally(() => {
      // An attempt may still land after we release the key: sweep it then (see sweepLateEnqueues).
      if (progress.ambiguous) mayLandLate(session, key);
    });
  // An existing key that no sibling in this process uses was created either by our own first attempt
  // (its answer lost, the Txn retried) or by an earlier process on a lease this session adopted. Either
  // way it keeps its place and is ours to drop: a key nobody waits for would block the queue as long
  // as the lease is renewed (Go likewise resigns a cancelled Campaign).
  const keys = keysInUse(session);
  const joined = !t.succeeded && keys.has(key);
  keys.add(key);
  enqueuing.delete(key); // in use now: the sweeper leaves it alone either way
  const counted = txnRange(t, 1).count;
  noteCount(session.client, spec.count.key, counted);
  const first = spec.first(counted);
  const peeked = spec.peek ? txnRange(t, 2).kvs : [];
  if (t.succeeded) {
    const ticket: Ticket = { key, rev: t.header.revision, joined: false, value, first, peeked };
    if (lookup.length > 0 && !first) {
      const r = txnRange(t, reads.length + 1);
      ticket.preceding = { kvs: r.kvs, more: r.more };
    }
    return ticket;
  }
  const mine = txnRange(t, 0).kvs[0]!;
  // A copy: the decoded value is a slice of the whole response, which it would keep alive.
  return { key, rev: mine.createRevision, joined, value: ownBuffer(mine.value), first, peeked };
}

/**
 * enqueue, and if it fails in a way that leaves its outcome unknown (its answer lost, the retry
 * refused), take the key back: it may have been created, and nobody else knows to delete it.
 */
export async function enqueueOrClean(session: Session, spec: TicketSpec): Promise<Ticket> {
  const sibling = keysInUse(session).has(spec.key);
  try {
    return await enqueue(session, spec);
  } catch (err) {
    if (!sibling && !session.signal.aborted && isTransient(err)) void dropTicket(session, { key: spec.key });
    throw err;
  }
}

/**
 * Deletes our key if it is still the incarnation we created (or, when `rev` is unknown because the
 * enqueue's answer was lost, if it is on our lease and no sibling of this process uses it). A key
 * left behind would block everyone behind it for as long as the session lives, so this keeps trying
 * in the background until it succeeds, the session ends (its lease takes the key along) or the
 * client closes. It waits for the first attempt only briefly: an abort must not hang on an outage.
 */
export async function dropTicket(session: Session, ticket: { key: string; rev?: bigint }): Promise<void> {
  forgetKey(session, ticket.key);
  const guard = ticket.rev !== undefined ? compare.createRevision(ticket.key, '=', ticket.rev) : compare.lease(ticket.key, '=', session.leaseId);
  const attempt = () =>
    // No signal: even a session lost to its local deadline may still have the key on the server.
    session.client.txn({ compare: [guard], success: [op.delete(ticket.key)], failure: [] }, { idempotent: true });
  const first = attempt();
  void (async () => {
    const backoff = new Backoff(100, 2000);
    for (let next = first; ; next = attempt()) {
      try {
        await next;
        return;
      } catch {
        if (session.signal.aborted || session.client.closed) return;
        if (keysInUse(session).has(ticket.key)) return; // this process queued the key again meanwhile
        await sleep(backoff.next(), session.signal).catch(() => {});
      }
    }
  })();
  // Wait for the first attempt (so a plain abort returns with its key gone), but not for long.
  let timer: NodeJS.Timeout | undefined;
  const settled = first.then(() => {}, () => {});
  await Promise.race([settled, new Promise((resolve) => (timer = setTimeout(resolve, session.client.dialTimeoutMs)))]);
  clearTimeout(timer);
}
