import { isTransient, LeaseNotFoundError } from '../client/errors.js';
import { compare, op, txnRange, type KeyValue, type RangeRequest } from '../client/kv.js';
import type { CallProgress } from '../client/connection.js';
import { ownBuffer } from '../keys.js';
import { markLeaseGone, type Session } from '../session.js';
import { rethrown } from '../rethrow.js';
import { deletesAhead, deleteUntilGone, type GuaranteedDelete, type ReleaseWhat } from './release.js';

/** Our place in a queue: our key and its CreateRevision (the ticket, and once we hold, the fencing token). */
export interface Ticket {
  key: string;
  /** CreateRevision of our key: the queue ticket and, once we hold, the fencing token. */
  rev: bigint;
  /**
   * True when another call of this process (same session, same key) already used this incarnation:
   * we share it. Either way this call is counted as one of its users (see leaveKey): the key is
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

/** The `peeked` of a spec without `peek`: one empty array for every ticket a queue holds. */
const NO_KVS: readonly KeyValue[] = Object.freeze([]);

/** A sorted read in the write Txn is made while the queue last counted at most this many keys. */
export const SHORT_QUEUE = 32n;

/** The count each client last saw per queue prefix (bounded): whether to make the sorted read. */
const lastCount = new WeakMap<object, Map<string, bigint>>();
const HINTS_PER_CLIENT = 1024;

function shortQueue(client: object, prefix: Buffer): boolean {
  const n = lastCount.get(client)?.get(prefix.toString('latin1'));
  return n !== undefined && n <= SHORT_QUEUE;
}

/** True when this client last counted the queue under `prefix` at more than SHORT_QUEUE keys. */
export function longQueue(client: object, prefix: Buffer): boolean {
  const n = lastCount.get(client)?.get(prefix.toString('latin1'));
  return n !== undefined && n > SHORT_QUEUE;
}

function noteCount(client: object, prefix: Buffer, n: bigint): void {
  let m = lastCount.get(client);
  if (!m) lastCount.set(client, (m = new Map()));
  const k = prefix.toString('latin1');
  m.delete(k); // re-inserted last: the map's order is its age
  if (m.size >= HINTS_PER_CLIENT) m.delete(m.keys().next().value!);
  m.set(k, n);
}

/**
 * The calls of this process on one key of a session. Our key is `<name>/<lease hex>`, as Go's, so two
 * lock() or campaign() calls on one session and one name share it: the second joins the first's
 * place. They are counted here, and the key is deleted in etcd only when the last of them releases,
 * aborts or fails; one leaving ends only itself.
 */
interface KeyUse {
  key: string;
  /** The incarnation (CreateRevision) the users share, once an enqueue reported it. */
  rev?: bigint;
  /** Calls on that incarnation, waiting or holding, that have not left it. */
  users: number;
  /** Enqueues in flight: each becomes a user of the incarnation it finds, or of the one it creates. */
  pending: number;
}

/**
 * The keys each session uses: the one use itself while a session has one key (the common case, and
 * a queue of 10,000 sessions would otherwise hold 10,000 Maps), a Map by key from the second on.
 */
const uses = new WeakMap<Session, KeyUse | Map<string, KeyUse>>();

function useOf(session: Session, key: string): KeyUse | undefined {
  const u = uses.get(session);
  return u instanceof Map ? u.get(key) : u?.key === key ? u : undefined;
}

/** Forgets `use` once nobody uses or enqueues it: the next acquire on its key creates, not joins. */
function settleUse(session: Session, key: string, use: KeyUse): void {
  if (use.users !== 0 || use.pending !== 0) return;
  const u = uses.get(session);
  if (u === use) uses.delete(session);
  else if (u instanceof Map && u.get(key) === use) u.delete(key);
}

/** An enqueue of `key` starts: until it answers, the key is in use (no sweeper takes it for a ghost). */
function beginEnqueue(session: Session, key: string): KeyUse {
  const u = uses.get(session);
  let use = u instanceof Map ? u.get(key) : u?.key === key ? u : undefined;
  if (!use) {
    use = { key, rev: undefined, users: 0, pending: 0 };
    if (!u) uses.set(session, use);
    else if (u instanceof Map) u.set(key, use);
    else uses.set(session, new Map([[u.key, u], [key, use]]));
  }
  use.pending++;
  return use;
}

/** The enqueue found or created incarnation `rev` and becomes one of its users: true if it joins others. */
function joinUse(session: Session, key: string, use: KeyUse, rev: bigint): boolean {
  use.pending--;
  if (use.rev === rev) return ++use.users > 1;
  if (use.rev === undefined || rev > use.rev) {
    // A newer incarnation: the one the other users shared was deleted (their waits and watches see it).
    use.rev = rev;
    use.users = 1;
  } else {
    // An answer about an incarnation already replaced: this call is not counted, its wait finds it gone.
    settleUse(session, key, use);
  }
  return false;
}

/**
 * One more call of this process uses incarnation `rev` of `key`, which another call holds now (an
 * RWMutex downgrade): the key then goes with the last of them. False if `rev` is not the one in use.
 */
export function joinHeld(session: Session, key: string, rev: bigint): boolean {
  const use = useOf(session, key);
  if (!use || use.rev !== rev) return false;
  use.users++;
  return true;
}

/**
 * A call leaves incarnation `rev` of `key`: released, aborted or failed. Returns true when no other
 * call of this process uses it, so the caller deletes it (guarded on `rev`), and false when it is
 * left to them.
 */
export function leaveKey(session: Session, key: string, rev: bigint): boolean {
  const use = useOf(session, key);
  if (!use) return true;
  if (use.rev === undefined) {
    // Only enqueues in flight use the key: they take this incarnation over, or drop it if they fail.
    use.rev = rev;
    return false;
  }
  if (use.rev !== rev) return true; // not (or no longer) counted: an incarnation that was replaced
  use.users--;
  if (use.users > 0 || use.pending > 0) return false;
  settleUse(session, key, use);
  return true;
}

/** Keys with an enqueue attempt that may still land, per session, and whether a sweeper watches them. */
const lateProne = new WeakMap<Session, Map<string, boolean>>();

/**
 * Deletes `key` if it is still incarnation `rev` (or, unknown, if it is on our lease), and keeps
 * trying in the background until it is gone or the session ends (deleteUntilGone); an enqueue of
 * this session waits for it meanwhile. Once the key is given up, a create of it that may still land
 * late is swept for the rest of the session (see mayLandLate).
 */
function deleteKey(session: Session, key: string, rev: bigint | undefined, what: ReleaseWhat): GuaranteedDelete {
  const d = deleteUntilGone(session, key, rev, what);
  const late = lateProne.get(session);
  if (late?.get(key) === false) {
    late.set(key, true);
    void sweepLateEnqueues(session, key, what);
  }
  return d;
}

/**
 * A holder leaves its key (Ownership.release): it is deleted, guarded on `rev`, only when no other
 * call of this process uses it. Returns the delete (its first attempt, and the background retries
 * until the key is gone), or undefined when the key is left to another call of this process.
 */
export function releaseKey(session: Session, key: string, rev: bigint, what: ReleaseWhat): GuaranteedDelete | undefined {
  return leaveKey(session, key, rev) ? deleteKey(session, key, rev, what) : undefined;
}

/**
 * A create of `key` on the session's lease had an unknown outcome (`CallProgress.ambiguous`): once the
 * key is given up (its last user released or dropped it), a re-creation landing late is swept for the rest of the
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
async function sweepLateEnqueues(session: Session, key: string, what: ReleaseWhat): Promise<void> {
  const client = session.client;
  const sweep = async (kv: KeyValue | undefined): Promise<void> => {
    if (!kv || kv.lease !== session.leaseId || useOf(session, key)) return;
    // Checked and sent in one step; an enqueue starting meanwhile waits for this delete to land.
    await deleteKey(session, key, kv.createRevision, what).first;
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
async function enqueue(session: Session, spec: TicketSpec, use: KeyUse, ahead?: (keys: bigint) => void, signal?: AbortSignal): Promise<Ticket> {
  const { key, value } = spec;
  const count = op.range({ ...spec.count, countOnly: true });
  const progress: CallProgress = { sent: false };
  // A delete of this session's in flight or still retried (a release whose delete failed, a dropped
  // ticket, a swept ghost), of our key or of one we would queue behind (an RWMutex writer behind its
  // own read key): let it land first. Else we would wait behind our own leftover for as long as the
  // session lives, or find that incarnation, join it (its old fencing token), and lose it to the delete.
  for (let ahead = deletesAhead(session, key, (k) => inRange(k, spec.count)); ahead.length > 0; ahead = deletesAhead(session, key, (k) => inRange(k, spec.count))) {
    await untilSettled(Promise.all(ahead), signal, session.signal);
  }
  session.assertAlive();
  signal?.throwIfAborted();
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
      if (err instanceof LeaseNotFoundError) {
        markLeaseGone(session);
        throw rethrown(session.signal.reason);
      }
      throw err;
    })
    .finally(() => {
      // An attempt may still land after we release the key: sweep it then (see sweepLateEnqueues).
      if (progress.ambiguous) mayLandLate(session, key);
    });
  const counted = txnRange(t, 1).count;
  noteCount(session.client, spec.count.key, counted);
  const first = spec.first(counted);
  // Our key is the newest of those counted when this Txn created it: the rest are ahead of us.
  if (ahead && t.succeeded) ahead(counted - (inRange(key, spec.count) ? 1n : 0n));
  const peeked = spec.peek ? txnRange(t, 2).kvs : NO_KVS;
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
  ticket.joined = joinUse(session, key, use, ticket.rev);
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
  const use = beginEnqueue(session, key);
  try {
    return await enqueue(session, spec, use, ahead, signal);
  } catch (err) {
    use.pending--;
    settleUse(session, key, use);
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

/**
 * A call that waited with `ticket` gives it up (aborted, failed, or tryAcquire found it busy): the
 * key goes, unless another call of this process still uses it.
 */
export async function leaveTicket(session: Session, ticket: Ticket, what: ReleaseWhat): Promise<void> {
  if (leaveKey(session, ticket.key, ticket.rev)) await dropTicket(session, ticket, what);
}

/**
 * Deletes our key if it is still the incarnation we created (or, when `rev` is unknown because the
 * enqueue's answer was lost, if it is on our lease). A key left behind would block everyone behind
 * it for as long as the session lives, so this keeps trying in the background until it succeeds,
 * the session ends (its lease takes the key along) or the client closes (deleteUntilGone). It waits
 * for the first attempt only briefly: an abort must not hang on an outage.
 */
export async function dropTicket(session: Session, ticket: { key: string; rev?: bigint }, what: ReleaseWhat): Promise<void> {
  const { first } = deleteKey(session, ticket.key, ticket.rev, what);
  // Wait for the first attempt (so a plain abort returns with its key gone), but not for long.
  let timer: NodeJS.Timeout | undefined;
  const settled = first.then(() => {}, () => {});
  await Promise.race([settled, new Promise((resolve) => (timer = setTimeout(resolve, session.client.dialTimeoutMs)))]);
  clearTimeout(timer);
}
