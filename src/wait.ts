import type { Client } from './client/client.js';
import { Backoff, retryWhile, sleep } from './client/backoff.js';
import { CompactedError, isTransient, LeaseNotFoundError } from './client/errors.js';
import { compare, op, prefixEnd, SortOrder, SortTarget, txnRange, type KeyValue } from './client/kv.js';
import type { WatchEvent } from './client/watch.js';
import type { OwnershipLostError } from './errors.js';
import { isParticipant, isParticipantKey, participantKey, prefixOf } from './keys.js';
import { markLeaseGone, type Session } from './session.js';

/**
 * The participant just before us in the queue: all a waiter keeps of it while it waits. No lease:
 * it comes from a keys-only read, whose KeyValues carry `lease = 0` from etcd 3.7 on.
 */
export interface Predecessor {
  /** A copy: the decoded key would pin the whole response buffer for the length of the wait. */
  key: Buffer;
  createRevision: bigint;
}

/** Our place in a lock's or election's queue: our key and its CreateRevision (the ticket). */
export interface Ticket {
  key: string;
  /** CreateRevision of our key: the queue ticket and, once we lead, the fencing token. */
  rev: bigint;
  /**
   * True when a sibling in this process (same session, same name) already uses the key: we share it,
   * and leave it to the sibling on failure. Any other key on our lease is this call's to delete on
   * failure, including one an earlier process left on a lease this session adopted.
   */
  joined: boolean;
  /** The key's value as etcd holds it (for election's "update the value if it differs"). */
  value: Buffer;
  /** Our predecessor: null when we are first, undefined when it must be looked up. */
  pred: Predecessor | null | undefined;
}

/** Raised when our own key vanished (or changed lease) while we queued. */
export type LostErrorFactory = (message: string, cause?: unknown) => OwnershipLostError;

/** Participant keys this process holds or queues, per session: a second lock() or campaign() joins. */
const inUse = new WeakMap<Session, Set<string>>();

function keysInUse(session: Session): Set<string> {
  let keys = inUse.get(session);
  if (!keys) inUse.set(session, (keys = new Set()));
  return keys;
}

/** Forgets `key` once its owner released it: the next lock() or campaign() on it creates, not joins. */
export function forgetKey(session: Session, key: string): void {
  inUse.get(session)?.delete(key);
}

/**
 * Takes a ticket in one Txn: create our key if absent, and count the keys under the prefix. A count
 * of one means we are alone: an uncontended caller holds the lock after this single round trip.
 *
 * Only O(1) work goes into this write: etcd runs a write Txn's reads in its single apply loop, which
 * every write of the cluster waits for, and it answers a sorted Range by reading every key of the
 * range, while a count comes from its in-memory index. Finding the predecessor (a sorted read) is a
 * separate read-only request, served off the apply loop, paid only under contention.
 */
export async function enqueue(session: Session, name: string, value: Buffer): Promise<Ticket> {
  const key = participantKey(name, session.leaseId);
  const prefix = Buffer.from(prefixOf(name));
  const count = op.range({ key: prefix, rangeEnd: prefixEnd(prefix), countOnly: true });
  const t = await session.client
    .txn(
      {
        compare: [compare.createRevision(key, '=', 0n)],
        success: [op.put(key, value, session.leaseId), count],
        failure: [op.get(key), count],
      },
      // Guarded on our key's absence: repeating it after an ambiguous failure cannot create a second
      // key. No signal: cancelled after etcd applied it, it would leave a key nobody knows to delete.
      { idempotent: true },
    )
    .catch((err: unknown) => {
      if (err instanceof LeaseNotFoundError) {
        markLeaseGone(session);
        throw session.signal.reason;
      }
      throw err;
    });
  // An existing key that no sibling in this process uses was created either by our own first attempt
  // (its answer lost, the Txn retried) or by an earlier process on a lease this session adopted. Either
  // way it keeps its place and is ours to drop: a key nobody waits for would block the queue as long
  // as the lease is renewed (Go likewise resigns a cancelled Campaign).
  const keys = keysInUse(session);
  const joined = !t.succeeded && keys.has(key);
  keys.add(key);
  const pred = txnRange(t, 1).count === 1n ? null : undefined;
  if (t.succeeded) return { key, rev: t.header.revision, joined: false, value, pred };
  const mine = txnRange(t, 0).kvs[0]!;
  return { key, rev: mine.createRevision, joined, value: mine.value, pred };
}

/**
 * enqueue, and if it fails in a way that leaves its outcome unknown (its answer lost, the retry
 * refused), take the key back: it may have been created, and nobody else knows to delete it.
 */
export async function enqueueOrClean(session: Session, name: string, value: Buffer): Promise<Ticket> {
  const key = participantKey(name, session.leaseId);
  const sibling = keysInUse(session).has(key);
  try {
    return await enqueue(session, name, value);
  } catch (err) {
    if (!sibling && !session.signal.aborted && isTransient(err)) void dropTicket(session, { key });
    throw err;
  }
}

/**
 * Waits until `ticket` is the oldest participant, watching only the key just before it, so one
 * release wakes one waiter. Success means our key was confirmed to exist on our lease with nobody
 * before it, after the wait: "first now", not "was first once".
 *
 * etcd serves a watch whose start revision is at or below its current revision only from a loop
 * that runs every 100 ms. So the predecessor's watch starts from "now", and once etcd confirms it we
 * check again that the predecessor is still there: a delete that slipped in before is seen then.
 * A waiter keeps its place through an outage: reads are retried while the session lives.
 */
export async function waitForTurn(
  session: Session,
  name: string,
  ticket: Ticket,
  lostError: LostErrorFactory,
  signal?: AbortSignal,
): Promise<void> {
  const client = session.client;
  // One signal for "stop waiting": the caller's, or the session's loss (fail at once, not after the queue).
  const stop = new AbortController();
  const onAbort = (): void => stop.abort(signal?.aborted ? signal.reason : session.signal.reason);
  if (signal?.aborted || session.signal.aborted) onAbort();
  signal?.addEventListener('abort', onAbort, { once: true });
  session.signal.addEventListener('abort', onAbort, { once: true });
  const retrying = <T>(fn: () => Promise<T>): Promise<T> => retryWhile(fn, isTransient, stop.signal);
  const strays = new Set<string>();
  try {
    let pred = ticket.pred;
    for (;;) {
      if (pred === undefined) pred = await retrying(() => findPredecessor(session, name, ticket, lostError, stop.signal, strays));
      if (pred === null) return;
      const p = pred;
      // Puts wake us too: one that moves the predecessor's key off its lease makes it stray (skipped).
      const w = client.watch(p.key, { signal: stop.signal });
      try {
        await w.created;
        // Re-checked now, and then now and then while waiting: a safety net should an event ever be
        // missed (an O(1) read-only Txn; a queue must never wait forever on a ghost).
        const recheckMs = Math.max(10_000, session.ttl * 1000);
        // Changed: deleted, moved off any lease (stray now), or a new incarnation of the same key (a
        // delete we did not see). A put that keeps a lease and the CreateRevision (a proclaim) is none.
        const changed = (e: WatchEvent) => e.type === 'delete' || e.kv.lease === 0n || e.kv.createRevision !== p.createRevision;
        const events = w[Symbol.asyncIterator]();
        let timer: NodeJS.Timeout | undefined;
        try {
          if (await retrying(() => stillQueued(session, ticket, p, strays, stop.signal))) {
            // One pending pull at a time: a pull abandoned to a re-check would swallow an event.
            let pull = events.next();
            for (;;) {
              const tick = new Promise<'recheck'>((resolve) => (timer = setTimeout(() => resolve('recheck'), recheckMs)));
              const next = await Promise.race([pull, tick]);
              clearTimeout(timer);
              if (next === 'recheck') {
                if (!(await retrying(() => stillQueued(session, ticket, p, strays, stop.signal)))) break;
                continue;
              }
              if (next.done || next.value.events.some(changed)) break;
              pull = events.next();
            }
          }
        } finally {
          clearTimeout(timer);
        }
      } catch (err) {
        if (!(err instanceof CompactedError)) throw err;
      } finally {
        w.cancel();
      }
      stop.signal.throwIfAborted();
      pred = undefined; // gone, or changed: look again (it may have been a waiter that gave up)
    }
  } catch (err) {
    throw stop.signal.aborted ? stop.signal.reason : err;
  } finally {
    signal?.removeEventListener('abort', onAbort);
    session.signal.removeEventListener('abort', onAbort);
  }
}

/**
 * One read-only Txn of O(1) compares: our key is still ours, and our predecessor is still the same
 * incarnation on some lease. This is also where a predecessor found by a keys-only read gets its
 * lease checked: from etcd 3.7 such a read reports every lease as 0. False sends the caller back to a
 * full look-up (which also tells a lost key from a gone predecessor); a predecessor found to have no
 * lease is stray data (etcd issue 6631) and goes into `strays`, which that look-up skips.
 */
async function stillQueued(
  session: Session,
  ticket: Ticket,
  pred: Predecessor,
  strays: Set<string>,
  signal?: AbortSignal,
): Promise<boolean> {
  const t = await session.client.txn(
    {
      compare: [
        compare.createRevision(ticket.key, '=', ticket.rev),
        compare.lease(ticket.key, '=', session.leaseId),
        compare.createRevision(pred.key, '=', pred.createRevision),
        compare.lease(pred.key, '!=', 0n),
      ],
      success: [],
      // Only when a compare failed: the predecessor in full (not keys-only), to see its real lease.
      failure: [op.get(pred.key)],
    },
    { idempotent: true, signal },
  );
  if (t.succeeded) return true;
  const kv = txnRange(t, 0).kvs[0];
  if (kv && kv.createRevision === pred.createRevision && kv.lease === 0n) strays.add(strayId(kv));
  return false;
}

/** Identifies one incarnation of a key: its CreateRevision and the key itself. */
function strayId(kv: { key: Buffer; createRevision: bigint }): string {
  return `${kv.createRevision}/${kv.key.toString('latin1')}`;
}

/**
 * The participant just before `ticket` right now, its lease checked (for a caller that will not wait
 * and so never runs stillQueued): null when there is none.
 */
export async function predecessorNow(
  session: Session,
  name: string,
  ticket: Ticket,
  lostError: LostErrorFactory,
  signal?: AbortSignal,
): Promise<Predecessor | null> {
  if (ticket.pred === null) return null;
  const strays = new Set<string>();
  for (;;) {
    const pred = await findPredecessor(session, name, ticket, lostError, signal, strays);
    if (pred === null || (await stillQueued(session, ticket, pred, strays, signal))) return pred;
  }
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
  name: string,
  ticket: Ticket,
  lostError: LostErrorFactory,
  signal: AbortSignal | undefined,
  strays: Set<string>,
): Promise<Predecessor | null> {
  const client = session.client;
  const prefix = Buffer.from(prefixOf(name));
  const end = prefixEnd(prefix);
  const before = (maxCreate: bigint, limit: bigint) => ({
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
      compare: [compare.createRevision(ticket.key, '=', ticket.rev), compare.lease(ticket.key, '=', session.leaseId)],
      success: [op.range(before(ticket.rev - 1n, 8n))],
      failure: [],
    },
    { idempotent: true, signal },
  );
  if (!t.succeeded) {
    // Our key is gone. If its lease went with it, say so: the session is over, not just this wait.
    const lease = await client.leaseTimeToLive(session.leaseId, { signal }).catch(() => undefined);
    if (lease && lease.ttl <= 0) markLeaseGone(session);
    session.assertAlive();
    throw lostError(`${ticket.key} was deleted or moved to another lease while waiting`);
  }
  let page = txnRange(t, 0);
  for (;;) {
    const found = page.kvs.find((kv) => isParticipantKey(prefix, kv.key) && !strays.has(strayId(kv)));
    if (found) return { key: unpooledCopy(found.key), createRevision: found.createRevision };
    const last = page.kvs[page.kvs.length - 1];
    if (!page.more || !last) return null;
    // Only keys of nested names or stray data so far: look further back.
    page = await client.range(before(last.createRevision - 1n, 64n), { signal });
  }
}

/** A copy outside Node's shared 8 KB Buffer pool, which one long-lived small copy would pin whole. */
function unpooledCopy(b: Buffer): Buffer {
  const copy = Buffer.allocUnsafeSlow(b.length);
  b.copy(copy);
  return copy;
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
  await Promise.race([settled, new Promise((resolve) => (timer = setTimeout(resolve, session.client.conn.dialTimeoutMs)))]);
  clearTimeout(timer);
}

/** Every participant of a lock or election, oldest first: the holder, then the queue in order. */
export async function listParticipants(
  client: Client,
  name: string,
  options: { revision?: bigint; signal?: AbortSignal } = {},
): Promise<{ participants: KeyValue[]; revision: bigint }> {
  const prefix = Buffer.from(prefixOf(name));
  const r = await client.range(
    { key: prefix, rangeEnd: prefixEnd(prefix), sortOrder: SortOrder.ASCEND, sortTarget: SortTarget.CREATE, revision: options.revision ?? 0n },
    { signal: options.signal },
  );
  return { participants: r.kvs.filter((kv) => isParticipant(prefix, kv)), revision: r.header.revision };
}

/** The oldest participant (the lock holder or leader) at `revision` (default: now), if any. */
export async function oldestParticipant(
  client: Client,
  name: string,
  options: { revision?: bigint; signal?: AbortSignal } = {},
): Promise<{ owner: KeyValue | undefined; revision: bigint }> {
  const prefix = Buffer.from(prefixOf(name));
  const end = prefixEnd(prefix);
  let minCreate = 0n;
  for (;;) {
    const r = await client.range(
      {
        key: prefix,
        rangeEnd: end,
        sortOrder: SortOrder.ASCEND,
        sortTarget: SortTarget.CREATE,
        minCreateRevision: minCreate,
        revision: options.revision ?? 0n,
        limit: 8n,
      },
      { signal: options.signal },
    );
    const owner = r.kvs.find((kv) => isParticipant(prefix, kv));
    const last = r.kvs[r.kvs.length - 1];
    if (owner || !r.more || !last) return { owner, revision: options.revision ?? r.header.revision };
    minCreate = last.createRevision + 1n;
  }
}
