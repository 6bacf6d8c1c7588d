// The queue engine's state: one object per client, made on first use and closed with the client.
// Nothing else in src/queue keeps state beyond one call.
import type { Attachment, AttachmentKey } from '../client/attachments.js';
import type { Client } from '../client/client.js';
import type { Watch, WatchBatch, WatchSink } from '../client/watch.js';
import type { Session } from '../session.js';
import { Gates } from './gate.js';
import { KeyUsers } from './key-users.js';
import { Rechecker } from './recheck.js';

/** What the engine keeps of one session (what a waiter leaves empty is made on first use: 10,000 waiters hold none). */
export class SessionQueue<H = unknown> {
  /** The calls of this process on each key, counted (see key-users.ts). */
  readonly users = new KeyUsers();
  /** Deletes still in flight or retried, which an enqueue waits for (see guaranteed-delete.ts). */
  deletes?: InFlightDeletes;
  /** Keys whose create may land late, swept once given up (see guaranteed-delete.ts). */
  late?: LateKeys;
  /** In-process turns per key (see gate.ts). */
  readonly gates = new Gates();
  /** Live holdings per key (see ownership.ts). */
  holdings?: Holdings<H>;
  /** Watches kept after a wait for the next one on the same key (see wait.ts). */
  kept?: KeptWatches;
}

/** The queue engine's state on one client. */
export class QueueState implements Attachment {
  /** Per session: a session belongs to one client, and its state goes with it. */
  private readonly sessions = new WeakMap<Session, SessionQueue>();
  /** The waiters' and holders' batched safety net (see recheck.ts). */
  readonly rechecker: Rechecker;
  /** How long each queue was when this client last counted it (see QueueLengths). */
  readonly lengths = new QueueLengths();

  constructor(client: Client) {
    this.rechecker = new Rechecker(client);
  }

  of<H = unknown>(session: Session): SessionQueue<H> {
    let q = this.sessions.get(session);
    if (!q) this.sessions.set(session, (q = new SessionQueue()));
    return q as SessionQueue<H>;
  }

  close(): void {
    this.rechecker.close();
  }
}

const QUEUE_STATE: AttachmentKey<QueueState, Client> = { name: 'queue', create: (client) => new QueueState(client) };

/** The queue engine's state on `client`. */
export function queueOf(client: Client): QueueState {
  return client.attached(QUEUE_STATE);
}

/** What the engine keeps of `session` (on its client's state). */
export function sessionQueue<H = unknown>(session: Session): SessionQueue<H> {
  return queueOf(session.client).of<H>(session);
}

/** A queue longer than this is long: its enqueue reads no predecessor, and a lock's holders mark their keys. */
export const SHORT_QUEUE = 32n;

/**
 * The newest count (by revision: answers arrive in any order) of at most 1,024 queues this client
 * counted, the least recent out first: whether an enqueue may read the keys before ours in its write
 * Txn (etcd reads every key of a sorted range in its apply loop, stalling every write if it is long;
 * and a caller alone last time, likely alone again, needs no predecessor).
 */
export class QueueLengths {
  private readonly byPrefix = new Map<string, { n: bigint; at: bigint }>();

  /** The queue under `prefix` was short, and not ours alone, when last counted (unknown: no). */
  short(prefix: Buffer): boolean {
    const c = this.byPrefix.get(prefix.toString('latin1'));
    return c !== undefined && c.n > 1n && c.n <= SHORT_QUEUE;
  }

  /** The queue under `prefix` held `n` keys at revision `at`. */
  note(prefix: Buffer, n: bigint, at: bigint): void {
    const k = prefix.toString('latin1');
    const had = this.byPrefix.get(k);
    if (had && had.at > at) return;
    this.byPrefix.delete(k); // set again last: the map's order is the counts' age
    if (this.byPrefix.size >= 1024) this.byPrefix.delete(this.byPrefix.keys().next().value!);
    this.byPrefix.set(k, { n, at });
  }
}

/** One session's live holdings by key (those of one incarnation end together on a loss: Ownership.end). */
export class Holdings<T> {
  private readonly byKey = new Map<string, Set<T>>();

  /** Adds `h` under `key`; returns the holdings of `key` (with `h`). */
  add(key: string, h: T): ReadonlySet<T> {
    let set = this.byKey.get(key);
    if (!set) this.byKey.set(key, (set = new Set()));
    set.add(h);
    return set;
  }

  /** Removes `h`; returns the holdings of `key` left. */
  remove(key: string, h: T): ReadonlySet<T> | undefined {
    const set = this.byKey.get(key);
    set?.delete(h);
    if (set?.size === 0) this.byKey.delete(key);
    return set;
  }

  of(key: string): ReadonlySet<T> | undefined {
    return this.byKey.get(key);
  }
}

/** A waiter's watch on a key, kept after its wait: what it delivered since waits here for the next. */
export class Kept implements WatchSink {
  readonly batches: WatchBatch[] = [];
  timer: NodeJS.Timeout | undefined;
  constructor(
    /** Every event after its createdAt reaches it. */
    readonly w: Watch,
    /** The newest event revision a wait took from it: a later wait may take it only with a read no older. */
    readonly through: bigint,
  ) {}

  push(batch: WatchBatch): void {
    if (this.batches.push(batch) > 64) drop(this); // a busy key: a new watch is cheaper than the backlog
  }

  end(): void {} // an ended watch is never taken (see KeptWatches.take)
}

/** One session's watches kept after a wait, by key: at most 4, each for 5 s, for its next wait on it. */
export class KeptWatches {
  private readonly byKey = new Map<string, Kept>();
  private listening = false;

  take(id: string): Kept | undefined {
    const k = this.byKey.get(id);
    if (!k) return undefined;
    this.byKey.delete(id);
    clearTimeout(k.timer);
    return k.w.ended ? undefined : k;
  }

  keep(session: Session, id: string, k: Kept): void {
    if (session.signal.aborted) return drop(k);
    if (!this.listening) {
      this.listening = true;
      session.signal.addEventListener('abort', () => this.dropAll(), { once: true });
    }
    const old = this.byKey.get(id);
    if (old) drop(old);
    this.byKey.delete(id);
    if (this.byKey.size >= 4) this.take(this.byKey.keys().next().value!)?.w.cancel();
    k.timer = setTimeout(() => this.take(id)?.w.cancel(), 5000).unref();
    this.byKey.set(id, k);
  }

  private dropAll(): void {
    for (const k of this.byKey.values()) drop(k);
    this.byKey.clear();
  }
}

function drop(k: Kept): void {
  clearTimeout(k.timer);
  k.w.cancel();
}

/**
 * Deletes of one session in flight or retried, by key: an enqueue of that session waits for those it
 * would queue behind (see ahead), so that a failed delete never makes its own process wait behind it.
 */
export class InFlightDeletes {
  private readonly byKey = new Map<string, Promise<unknown>>();

  /** Records `done` under `key` until it settles (after any earlier delete of the key: both are waited for). */
  add(key: string, done: Promise<unknown>): void {
    const prev = this.byKey.get(key);
    const all = prev ? Promise.all([prev, done]) : done;
    this.byKey.set(key, all);
    void all.then(() => {
      if (this.byKey.get(key) === all) this.byKey.delete(key);
    });
  }

  /** The deletes on `key` or on a key `inside` the range an enqueue counts (those it could queue behind). Empty almost always. */
  ahead(key: string, inside: (key: string) => boolean): Promise<unknown>[] {
    if (this.byKey.size === 0) return [];
    const out: Promise<unknown>[] = [];
    for (const [k, p] of this.byKey) if (k === key || inside(k)) out.push(p);
    return out;
  }
}

/** One session's keys whose create had an unknown outcome, and whether each is swept (sweepWhenGivenUp). */
export class LateKeys {
  private readonly keys = new Map<string, boolean>();

  /** A create of `key` had an unknown outcome in this session: it may be there unseen or land yet (a sweep skips a key in use). */
  add(key: string): void {
    if (!this.keys.has(key)) this.keys.set(key, false);
  }

  /** Whether a create of `key` had an unknown outcome in this session (add). */
  has(key: string): boolean {
    return this.keys.has(key);
  }

  /** `key` is given up: true (once) when it may land late and should be swept from now on. */
  givenUp(key: string): boolean {
    if (this.keys.get(key) !== false) return false;
    this.keys.set(key, true);
    return true;
  }
}
