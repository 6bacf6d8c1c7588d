import type { Client } from './client/client.js';
import { Backoff, sleep } from './client/backoff.js';
import { CompactedError, DeadlineExceededError, LeaseNotFoundError, UnavailableError } from './client/errors.js';
import { compare, op, prefixEnd, SortOrder, SortTarget, txnRange, type KeyValue } from './client/kv.js';
import type { OwnershipLostError } from './errors.js';
import { isParticipant, participantKey, prefixOf } from './keys.js';
import type { Session } from './session.js';

/** Our place in a lock's or election's queue: our key and its CreateRevision (the ticket). */
export interface Ticket {
  key: string;
  /** CreateRevision of our key: the queue ticket and, once we lead, the fencing token. */
  rev: bigint;
  /** False when the key already existed (same session, same name): we joined it, keeping its place. */
  created: boolean;
  /** The key's value before this call (for election's "update the value if it differs"). */
  value: Buffer;
  /** The store revision at which this ticket was read. */
  readAt: bigint;
  /** Our predecessor: null when we are first, undefined when it must be looked up. */
  pred: KeyValue | null | undefined;
}

/** Raised when our own key vanished (or changed lease) while we queued. */
export type LostErrorFactory = (message: string, cause?: unknown) => OwnershipLostError;

/**
 * Takes a ticket in one Txn: create our key if absent, and in the same round trip read the owner
 * and the key just before ours. An uncontended caller learns it is first without a second request.
 */
export async function enqueue(session: Session, name: string, value: Buffer): Promise<Ticket> {
  const key = participantKey(name, session.leaseId);
  const prefix = Buffer.from(prefixOf(name));
  const end = prefixEnd(prefix);
  // etcd reads every key of the range from disk for a sorted or revision-filtered Range, but a
  // count comes from its in-memory index: "am I alone?" is cheap, "who is before me?" is not.
  const sorted = (order: SortOrder, limit: bigint) =>
    op.range({ key: prefix, rangeEnd: end, sortOrder: order, sortTarget: SortTarget.CREATE, limit, keysOnly: true });
  const t = await session.client.txn(
    {
      compare: [compare.createRevision(key, '=', 0n)],
      success: [op.put(key, value, session.leaseId), op.range({ key: prefix, rangeEnd: end, countOnly: true }), sorted(SortOrder.DESCEND, 2n)],
      failure: [op.get(key), sorted(SortOrder.ASCEND, 1n)],
    },
    // Guarded on our key's absence: repeating it after an ambiguous failure cannot create a second key.
    // No signal: cancelled after etcd applied it, it would leave a key nobody knows to delete.
    { idempotent: true },
  ).catch((err: unknown) => {
    if (err instanceof LeaseNotFoundError) {
      session.leaseGone();
      throw session.signal.reason;
    }
    throw err;
  });
  // A key that exists without this process having queued it was created by our own first attempt,
  // whose answer was lost and retried: it is ours to drop, not a sibling's to share.
  const joined = !t.succeeded && session.keys.has(key);
  session.keys.add(key);
  if (t.succeeded) {
    const rev = t.header.revision;
    const empty = Buffer.alloc(0);
    if (txnRange(t, 1).count === 1n) return { key, rev, created: true, value: empty, readAt: rev, pred: null };
    // Our key is the newest; the one before it is our predecessor, unless it is not a participant.
    const before = txnRange(t, 2).kvs[1];
    const pred = before && isParticipant(prefix, before) ? before : undefined;
    return { key, rev, created: true, value: empty, readAt: rev, pred };
  }
  const mine = txnRange(t, 0).kvs[0]!;
  const first = txnRange(t, 1).kvs[0];
  const pred = first && first.key.toString() === key ? null : undefined;
  return { key, rev: mine.createRevision, created: !joined, value: mine.value, readAt: t.header.revision, pred };
}

/**
 * Waits until `ticket` is the oldest participant, watching only the key just before
 * it, so one release wakes one waiter. Returns the revision at which our key was last confirmed to
 * exist on our lease with no predecessor: success means "first now", not "was first once".
 *
 * etcd serves a watch whose start revision is at or below its current revision only from a loop
 * that runs every 100 ms. So the predecessor's watch starts from "now", and once etcd confirms it
 * we read again: a delete that slipped in before the watch is seen by that read.
 */
export async function waitForTurn(
  session: Session,
  name: string,
  ticket: Ticket,
  lostError: LostErrorFactory,
  signal?: AbortSignal,
): Promise<bigint> {
  const client = session.client;
  // A waiter keeps its place through an outage: reads are retried while the session lives (its
  // loss, or the caller's signal, ends the wait).
  const look = async (s: AbortSignal): Promise<Lookup> => {
    const backoff = new Backoff(100, 2000);
    for (;;) {
      try {
        return await findPredecessor(session, name, ticket, lostError, s);
      } catch (err) {
        if (!(err instanceof UnavailableError || err instanceof DeadlineExceededError) || s.aborted) throw err;
        await sleep(backoff.next(), s);
      }
    }
  };
  // One signal for "stop waiting": the caller's, or the session's loss (fail at once, not after the queue).
  const stop = new AbortController();
  const onAbort = (): void => stop.abort(signal?.aborted ? signal.reason : session.signal.reason);
  if (signal?.aborted || session.signal.aborted) onAbort();
  signal?.addEventListener('abort', onAbort, { once: true });
  session.signal.addEventListener('abort', onAbort, { once: true });
  try {
    let pred = ticket.pred;
    let readAt = ticket.readAt;
    for (;;) {
      if (pred === undefined) ({ pred, readAt } = await look(stop.signal));
      if (pred === null) return readAt;
      // Puts wake us too: one that moves the predecessor's key off its lease makes it stray (skipped).
      const w = client.watch(pred.key, { signal: stop.signal });
      try {
        await w.created;
        const now = await look(stop.signal);
        if (!now.pred || !now.pred.key.equals(pred.key) || now.pred.createRevision !== pred.createRevision || now.pred.lease !== pred.lease) {
          ({ pred, readAt } = now);
          continue;
        }
        for await (const batch of w) {
          // A put that keeps the key on its lease (an election's proclaim) changes nothing.
          if (batch.events.some((e) => e.type === 'delete' || e.kv.lease !== pred!.lease)) break;
        }
        pred = undefined;
      } catch (err) {
        if (!(err instanceof CompactedError)) throw err;
        pred = undefined;
      } finally {
        w.cancel();
      }
      stop.signal.throwIfAborted();
    }
  } catch (err) {
    throw stop.signal.aborted ? stop.signal.reason : err;
  } finally {
    signal?.removeEventListener('abort', onAbort);
    session.signal.removeEventListener('abort', onAbort);
  }
}

export interface Lookup {
  pred: KeyValue | null;
  readAt: bigint;
}

/** One Txn: our key still exists on our lease, and which participant is just before it. */
export async function findPredecessor(
  session: Session,
  name: string,
  ticket: Ticket,
  lostError: LostErrorFactory,
  signal?: AbortSignal,
): Promise<Lookup> {
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
    if (lease && lease.ttl <= 0) session.leaseGone();
    session.assertAlive();
    throw lostError(`${ticket.key} was deleted or moved to another lease while waiting`);
  }
  let page = txnRange(t, 0);
  for (;;) {
    const found = page.kvs.find((kv) => isParticipant(prefix, kv));
    if (found) return { pred: found, readAt: t.header.revision };
    const last = page.kvs[page.kvs.length - 1];
    if (!page.more || !last) return { pred: null, readAt: t.header.revision };
    // Only keys of nested names or stray data so far: look further back.
    page = await client.range(before(last.createRevision - 1n, 64n), { signal });
  }
}

/**
 * Deletes our key if it is still the incarnation we created. A queued key left behind would block
 * everyone behind it for as long as the session lives, so this retries until it succeeds, the
 * session ends (its lease takes the key along) or the client closes. Never throws.
 */
export async function dropTicket(session: Session, ticket: Ticket): Promise<void> {
  session.keys.delete(ticket.key);
  const backoff = new Backoff(100, 2000);
  for (;;) {
    try {
      // No signal: even a session lost to its local deadline may still have the key on the server.
      await session.client.txn(
        { compare: [compare.createRevision(ticket.key, '=', ticket.rev)], success: [op.delete(ticket.key)], failure: [] },
        { idempotent: true },
      );
      return;
    } catch {
      if (session.signal.aborted || session.client.closed) return;
      await sleep(backoff.next(), session.signal).catch(() => {});
    }
  }
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
