import { retryWhile } from '../client/backoff.js';
import { CompactedError, isTransient } from '../client/errors.js';
import type { Client } from '../client/client.js';
import type { Watch, WatchBatch, WatchEvent, WatchOptions, WatchSink } from '../client/watch.js';
import type { OwnershipEndReason, OwnershipLostError } from '../errors.js';
import type { Session } from '../session.js';
import { addRecheck, removeRecheck, type BatchCheck, type Due } from './recheck.js';
import type { Ticket } from './ticket.js';

/** Raised when our own key vanished (or changed lease) while we queued. */
export type LostErrorFactory = (message: string, options: { reason: OwnershipEndReason; cause?: unknown }) => OwnershipLostError;

/** What stands between a waiter and its turn right now: one key (or prefix) to watch, and how to tell it moved. */
export interface Blocker {
  /** The key to watch, or the prefix when `prefix` is set (a string: its UTF-8 bytes). */
  key: string | Buffer;
  prefix?: boolean;
  /** Deletes only: puts under a watched prefix (newcomers queueing behind) cannot end a wait. */
  noPut?: boolean;
  /** Puts only: a wait for a key to appear (a barrier opening) ignores deletes. */
  noDelete?: boolean;
  /** An event that may have ended the wait: the rule is asked again. */
  changed(e: WatchEvent): boolean;
  /**
   * Asked once the watch is up, and now and then while waiting: are we still blocked by the same
   * thing? An O(1) read; false sends the waiter back to the rule (which also tells a lost key).
   */
  stillBlocked(signal: AbortSignal): Promise<boolean>;
  /** The revision of the read that found this blocker: only later events can end the wait. */
  asOf?: bigint;
  /**
   * That read proved everything `stillBlocked` checks (the key's lease included), so a watch that
   * delivers every event after `asOf` needs no confirmation.
   */
  confirmed?: boolean;
  /** Keep the watch open afterwards for the session's next wait on the same key (a FIFO queue's order repeats). */
  keep?: boolean;
  /**
   * `stillBlocked` as plain reads, so that the periodic safety net of many waiters shares one
   * request (see recheck.ts). Without it the waiter re-checks alone, on a timer of its own.
   */
  check?: BatchCheck;
}

/**
 * A primitive's rule for "my turn" (the oldest of all; among the N oldest; no older writer), asked
 * afresh after every change. `blocker` resolves null only after confirming our key still exists on
 * our lease, so success means "my turn now", not "was my turn once"; it throws the primitive's lost
 * error when our key is gone.
 */
export interface TurnRule {
  blocker(signal: AbortSignal): Promise<Blocker | null>;
}

/** A watch kept open after a wait: its batches wait here for the session's next wait on the same key. */
class Kept implements WatchSink {
  readonly batches: WatchBatch[] = [];
  timer?: NodeJS.Timeout;
  constructor(
    readonly w: Watch,
    /** Every event after this revision reaches the watch. */
    readonly from: bigint,
    /** The newest event revision a wait has taken from it: a later wait may reuse it only if its read is not older. */
    readonly through: bigint,
  ) {}

  push(batch: WatchBatch): void {
    this.batches.push(batch);
  }

  end(): void {} // an ended watch is never taken again (takeKept checks w.ended)
}

/** A kept watch's id: what it watches and how (built when needed, not kept by every waiter). */
function keptId(b: Blocker): string {
  // A Buffer key by its bytes (latin1 is lossless), a string key as itself: a key is always one or the other.
  return `${b.prefix ? 'p' : 'k'}${b.noPut ? 'n' : ''}${b.noDelete ? 'd' : ''}${typeof b.key === 'string' ? `s/${b.key}` : `b/${b.key.toString('latin1')}`}`;
}

const PLAIN: WatchOptions = Object.freeze({});

/** Where a watch we cancel ourselves hands its last word: nobody listens any more. */
const ignored: WatchSink = { push() {}, end() {} };

/** Kept watches per session, by watched key; at most a few, each for a few seconds. */
const kept = new WeakMap<Session, Map<string, Kept>>();
const KEEP_PER_SESSION = 4;
const KEEP_MS = 5000;

function takeKept(session: Session, id: string): Kept | undefined {
  const m = kept.get(session);
  const k = m?.get(id);
  if (!k) return undefined;
  m!.delete(id);
  clearTimeout(k.timer);
  return k.w.ended ? undefined : k;
}

function keepWatch(session: Session, id: string, k: Kept): void {
  if (session.signal.aborted || k.w.ended) return dropKept(k);
  let m = kept.get(session);
  if (!m) {
    const map = (m = new Map<string, Kept>());
    kept.set(session, map);
    session.signal.addEventListener('abort', () => {
      for (const x of map.values()) dropKept(x);
      map.clear();
    }, { once: true });
  }
  const old = m.get(id);
  if (old) {
    m.delete(id);
    dropKept(old);
  }
  if (m.size >= KEEP_PER_SESSION) {
    const [oldestId, oldest] = m.entries().next().value!;
    m.delete(oldestId);
    dropKept(oldest);
  }
  const map = m;
  k.timer = setTimeout(() => {
    if (map.get(id) === k) map.delete(id);
    dropKept(k);
  }, KEEP_MS);
  k.timer.unref();
  map.set(id, k);
}

function dropKept(k: Kept): void {
  clearTimeout(k.timer);
  k.w.sink = ignored;
  k.w.cancel();
}

/** Options of {@link waitUntil}. */
export interface WaitUntilOptions {
  /** Stop waiting with its reason. */
  signal?: AbortSignal | undefined;
  /**
   * The waiter's session: its loss ends the wait at once, and watches may be kept for its next wait
   * on the same key. Without one (a barrier's wait creates no key), only `signal` stops it.
   */
  session?: Session | undefined;
}

/**
 * The wait loop under every primitive: ask `rule` what blocks us, watch only that, and ask again
 * after a change, until the rule says go (null), so that one release wakes one waiter. Fails at
 * once when the session is lost or `signal` aborts (with its reason). A queued ticket waits through
 * the same {@link Wait} (acquire.ts); barriers use this with rules of their own ("the key is gone",
 * "ready was put").
 *
 * etcd serves a watch whose start revision is at or below its current revision only from a loop
 * that runs every 100 ms. So the blocker's watch starts from "now", and once etcd confirms it we
 * check again that it still blocks us: a change that slipped in before is seen then. A waiter keeps
 * its place through an outage: reads are retried while the session lives.
 */
export function waitUntil(client: Client, rule: TurnRule, options: WaitUntilOptions = {}): Promise<void> {
  return new Wait(client, rule, options.session, options.signal).start();
}

/**
 * One wait, as a small state machine rather than a suspended async loop: a queue of 10,000 waiters
 * holds 10,000 of these, so while it waits a waiter is this object, its blocker and its watch, with
 * no pending promise, timer or AbortController of its own. Two modes:
 * - active: asking the rule, watching the blocker and confirming it (async; its calls abort through
 *   `ac`, which exists only meanwhile);
 * - waiting: an event, the batched re-check or our own re-check timer may end it (`moved`), and the
 *   active mode starts over.
 */
export class Wait<T = void> implements WatchSink, Due {
  readonly promise: Promise<T>;
  protected resolve!: (value: T) => void;
  protected reject!: (err: unknown) => void;
  private done = false;
  /** Aborts the calls of the active mode or of an own re-check; only while one runs. */
  private ac: AbortController | undefined;
  /** Bumped whenever waiting ends: a late answer of an older re-check is ignored. */
  private gen = 0;
  private b: Blocker | undefined;
  private w: Watch | undefined;
  /** The blocker's watch may serve the session's next wait on the same key (see keptId). */
  private keepable = false;
  private from = 0n;
  private through = 0n;
  /** Waiting: events can end the wait. Before that they queue in `early`. */
  private waiting = false;
  private early: WatchBatch[] | undefined;
  private endedEarly = false;
  private endError: unknown;
  /** Registered with the client's re-checker (as a {@link Due}: no object of its own). */
  private rechecking = false;
  /** When the re-checker checks us next. */
  due = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly client: Client,
    /** Set before start() (an acquisition knows its rule only once its ticket is taken). */
    protected rule: TurnRule | undefined,
    protected readonly session: Session | undefined,
    protected readonly signal: AbortSignal | undefined,
  ) {
    this.promise = new Promise<T>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
  }

  start(): Promise<T> {
    if (this.stopped()) {
      this.fail(this.stopReason());
      return this.promise;
    }
    this.signal?.addEventListener('abort', this.onStop);
    this.session?.signal.addEventListener('abort', this.onStop);
    void this.next();
    return this.promise;
  }

  /** The caller's signal aborted or the session was lost: stop at once, with its reason. */
  private readonly onStop = (): void => this.fail(this.stopReason());

  private stopped(): boolean {
    return this.signal?.aborted === true || this.session?.signal.aborted === true;
  }

  private stopReason(): unknown {
    return this.signal?.aborted ? this.signal.reason : this.session?.signal.reason;
  }

  /** Active mode: ask the rule, watch what blocks us, confirm; returns once waiting (or over). */
  private async next(): Promise<void> {
    const ac = (this.ac = new AbortController());
    const s = ac.signal;
    try {
      for (;;) {
        const b = await retryWhile(() => this.rule!.blocker(s), isTransient, s);
        if (this.done) return;
        if (b === null) return this.succeed();
        if (await this.watch(b, s)) return;
        // Gone or changed meanwhile: ask the rule again (it may have been a waiter that gave up).
      }
    } catch (err) {
      this.fail(this.stopped() ? this.stopReason() : err);
    } finally {
      if (this.ac === ac) this.ac = undefined;
    }
  }

  /** Watches `b` and confirms it still blocks us. True: waiting now (or over); false: ask again. */
  private async watch(b: Blocker, s: AbortSignal): Promise<boolean> {
    const session = this.session;
    const asOf = b.asOf;
    const keepable = session !== undefined && b.keep === true && asOf !== undefined;
    // A watch kept from this session's last wait on the same key, if it already delivers every
    // event after our read: then it needs neither a create, nor a confirmation, nor a cancel.
    // Also not when an earlier wait (a sibling of this session on the same key) took an event
    // newer than our read from it: that event would be missing from our stream.
    let k = keepable ? takeKept(session, keptId(b)) : undefined;
    if (k && !(asOf !== undefined && k.from <= asOf && k.through <= asOf)) {
      dropKept(k);
      k = undefined;
    }
    this.b = b;
    this.keepable = keepable;
    this.waiting = false;
    this.endedEarly = false;
    this.endError = undefined;
    // A kept watch may still hold events from before our read: they are filtered in push().
    this.early = k && k.batches.length > 0 ? k.batches : undefined;
    this.through = k?.through ?? 0n;
    let w: Watch;
    if (k) {
      w = k.w;
      w.sink = this;
    } else {
      // The plain case (one key, every event) shares one options object: a waiter holds its watch's.
      const opts = b.prefix || b.noPut || b.noDelete ? { prefix: b.prefix ?? false, noPut: b.noPut ?? false, noDelete: b.noDelete ?? false } : PLAIN;
      w = this.client.watchInto(b.key, opts, this);
    }
    this.w = w;
    try {
      this.from = k ? k.from : await w.created;
      if (this.done) return true;
      // Re-checked now (unless the read that found the blocker is covered by the watch), and then
      // now and then while waiting: a safety net should an event ever be missed (an O(1) read-only
      // Txn; a queue must never wait forever on a ghost).
      const covered = b.confirmed === true && asOf !== undefined && this.from <= asOf;
      if (!covered && !(await retryWhile(() => b.stillBlocked(s), isTransient, s))) {
        if (this.done) return true;
        this.leaveWatch(true);
        return false;
      }
      if (this.done) return true;
    } catch (err) {
      if (this.w === w) this.leaveWatch(false);
      if (err instanceof CompactedError) return false;
      throw err;
    }
    this.wait();
    return true;
  }

  /** Waiting mode: the batched safety net (or a timer of our own), then what queued meanwhile. */
  private wait(): void {
    const b = this.b!;
    this.waiting = true;
    const gen = ++this.gen;
    if (b.check) {
      addRecheck(this.client, this);
      this.rechecking = true;
    } else this.armTimer(gen);
    const early = this.early;
    while (early && this.early === early && early.length > 0 && this.waiting) this.push(early.shift()!);
    if (this.early === early) this.early = undefined;
    if (this.waiting && this.endedEarly) this.end(this.endError);
  }

  private recheckMs(): number {
    return Math.max(10_000, (this.session?.ttl ?? 0) * 1000);
  }

  /** Due: the blocker's batched check (registered only while waiting on a blocker that has one). */
  get check(): BatchCheck {
    return this.b!.check!;
  }

  get intervalMs(): number {
    return this.recheckMs();
  }

  /**
   * A blocker whose check cannot be batched re-checks alone, on a timer that events which do not
   * move the wait leave running: under steady traffic the safety net still runs.
   */
  private armTimer(gen: number): void {
    this.timer = setTimeout(() => void this.checkAlone(gen), this.recheckMs());
  }

  private async checkAlone(gen: number): Promise<void> {
    this.timer = undefined;
    if (gen !== this.gen || !this.waiting) return;
    const ac = (this.ac = new AbortController());
    try {
      const still = await retryWhile(() => this.b!.stillBlocked(ac.signal), isTransient, ac.signal);
      if (gen !== this.gen || !this.waiting) return;
      if (still) this.armTimer(gen);
      else this.moved();
    } catch (err) {
      if (gen !== this.gen || this.done) return;
      this.fail(this.stopped() ? this.stopReason() : err);
    } finally {
      if (this.ac === ac) this.ac = undefined;
    }
  }

  /** WatchSink: a batch of the blocker's watch. */
  push(batch: WatchBatch): void {
    if (this.done) return;
    if (!this.waiting) {
      (this.early ??= []).push(batch);
      return;
    }
    const b = this.b!;
    const asOf = b.asOf;
    let moved = false;
    try {
      for (const e of batch.events) {
        if (e.kv.modRevision > this.through) this.through = e.kv.modRevision;
        // A kept watch may still hold events from before our read: those were seen by it.
        if (!moved && (asOf === undefined || e.kv.modRevision > asOf) && b.changed(e)) moved = true;
      }
    } catch (err) {
      return this.fail(err); // a rule's bug ends this wait, not the client's watch stream
    }
    if (moved) this.moved();
  }

  /** WatchSink: the watch ended. Compacted or ended quietly: ask again; any other error ends the wait. */
  end(err?: unknown): void {
    if (this.done) return;
    if (!this.waiting) {
      this.endedEarly = true;
      this.endError = err;
      return;
    }
    if (err === undefined || err instanceof CompactedError) this.moved();
    else this.fail(err);
  }

  /** Due: the batched safety net found us no longer blocked (and unregistered us). */
  stale(): void {
    this.rechecking = false;
    if (this.waiting) this.moved();
  }

  /** The blocker moved: stop waiting (keeping the watch if it may serve again) and ask the rule again. */
  private moved(): void {
    this.stopWaiting();
    this.leaveWatch(true);
    void this.next();
  }

  private stopWaiting(reason?: unknown): void {
    this.waiting = false;
    this.gen++;
    if (this.rechecking) removeRecheck(this.client, this);
    this.rechecking = false;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.ac?.abort(reason); // a call in flight: its answer no longer matters
  }

  /** Lets go of the blocker's watch: kept for the session's next wait on the same key, or cancelled. */
  private leaveWatch(mayKeep: boolean): void {
    const w = this.w;
    const b = this.b;
    const early = this.early;
    this.w = undefined;
    this.b = undefined;
    this.early = undefined;
    if (!w) return;
    // b.keep asked again: a blocker may no longer want its watch kept (an OlderBlocker behind a queue grown long).
    if (mayKeep && this.keepable && b && b.keep === true && !w.ended && !this.done && !this.stopped()) {
      const k = new Kept(w, this.from, this.through);
      if (early) k.batches.push(...early);
      w.sink = k;
      keepWatch(this.session!, keptId(b), k);
    } else {
      w.sink = ignored;
      w.cancel();
    }
  }

  protected succeed(): void {
    if (this.done) return;
    this.done = true;
    this.unlisten();
    this.onTurn();
  }

  protected fail(err: unknown): void {
    if (this.done) return;
    this.done = true;
    this.stopWaiting(err);
    this.leaveWatch(false);
    this.unlisten();
    this.onFail(err);
  }

  /** Our turn: settles the caller's promise (an acquisition hands out its handle here). */
  protected onTurn(): void {
    this.resolve(undefined as T);
  }

  /** The wait failed or was stopped (an acquisition first removes its key here). */
  protected onFail(err: unknown): void {
    this.reject(err);
  }

  private unlisten(): void {
    this.signal?.removeEventListener('abort', this.onStop);
    this.session?.signal.removeEventListener('abort', this.onStop);
  }
}

/** For a caller that will not wait: is `ticket` blocked right now (by a blocker confirmed to be there)? */
export async function blockedNow(ticket: Ticket, rule: TurnRule, signal?: AbortSignal): Promise<boolean> {
  if (ticket.first) return false;
  const s = signal ?? new AbortController().signal;
  for (;;) {
    const b = await rule.blocker(s);
    if (b === null) return false;
    if (await b.stillBlocked(s)) return true;
  }
}
