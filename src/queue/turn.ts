import { retryWhile } from '../client/backoff.js';
import { CompactedError, isTransient } from '../client/errors.js';
import type { Client } from '../client/client.js';
import { op, txnRange } from '../client/kv.js';
import type { Watch, WatchBatch, WatchEvent, WatchOptions, WatchSink } from '../client/watch.js';
import type { OwnershipEndReason, OwnershipLostError } from '../errors.js';
import type { Session } from '../session.js';
import { drop, ignored, Kept, keptId, type WatchTarget } from './kept-watches.js';
import { MAX_CHECK_KEYS, type BatchCheck, type Due } from './recheck.js';
import { queueOf, type QueueState } from './state.js';
import type { Ticket } from './ticket.js';

export type { WatchTarget } from './kept-watches.js';
export type { BatchCheck } from './recheck.js';

/** Raised when our own key vanished (or changed lease) while we queued. */
export type LostErrorFactory = (message: string, options: { reason: OwnershipEndReason; cause?: unknown }) => OwnershipLostError;

/**
 * What stands between a waiter and its turn right now, as a primitive tells it: what to watch, which
 * events may end the wait, and how to tell it still blocks. Everything else (confirming it once the
 * watch is up, the batched safety net, keeping a watch for the next wait) is the engine's.
 */
export interface Blocker {
  /** The key (or prefix) to watch, and which events. */
  readonly watch: WatchTarget;
  /** An event that may have ended the wait: the rule is asked again. */
  changed(e: WatchEvent): boolean;
  /**
   * Are we still blocked by the same thing? The keys to read (in full) and what they must say; false
   * sends the waiter back to the rule (which also tells a lost key). Read once the watch is up, and
   * now and then while waiting, in one read-only Txn (batched with other waiters' when it reads at
   * most MAX_CHECK_KEYS keys).
   */
  readonly check: BatchCheck;
  /** What the read that found this blocker proved, when one did (see {@link Found}). */
  readonly found?: Found;
}

/** What the read that found a blocker proved: it lets the engine skip work. */
export interface Found {
  /** The revision of that read: only later events can end the wait. */
  readonly asOf: bigint;
  /** That read proved everything `check` checks: a watch that delivers every event after `asOf` needs no confirmation. */
  readonly confirmed: boolean;
  /** Keep the watch open afterwards for the session's next wait on the same key (a FIFO queue's order repeats). */
  readonly keep?: boolean;
}

/** Reads a blocker's check alone (not batched): one read-only Txn of gets. */
export async function stillBlocked(client: Client, b: Blocker, signal: AbortSignal): Promise<boolean> {
  const keys = b.check.keys;
  const t = await client.txn({ compare: [], success: keys.map((k) => op.get(k)), failure: [] }, { idempotent: true, signal });
  return b.check.blocked(keys.map((_, i) => txnRange(t, i).kvs[0]));
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

const PLAIN: WatchOptions = Object.freeze({});

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
  /** The blocker's watch may serve the session's next wait on the same key (see kept-watches.ts). */
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
  /** The client's queue state: its kept watches and its re-checker. */
  private readonly state: QueueState;

  constructor(
    private readonly client: Client,
    /** Set before start() (an acquisition knows its rule only once its ticket is taken). */
    protected rule: TurnRule | undefined,
    protected readonly session: Session | undefined,
    protected readonly signal: AbortSignal | undefined,
  ) {
    this.state = queueOf(client);
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
    const found = b.found;
    const asOf = found?.asOf;
    const keepable = session !== undefined && found?.keep === true;
    // A watch kept from this session's last wait on the same key, if it already delivers every
    // event after our read: then it needs neither a create, nor a confirmation, nor a cancel.
    // Also not when an earlier wait (a sibling of this session on the same key) took an event
    // newer than our read from it: that event would be missing from our stream.
    const kept = this.state.kept;
    let k = keepable ? kept.take(session, keptId(b.watch)) : undefined;
    if (k && !(asOf !== undefined && k.from <= asOf && k.through <= asOf)) {
      drop(k);
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
      const t = b.watch;
      const opts =
        t.prefix || t.noPut || t.noDelete ? { prefix: t.prefix ?? false, noPut: t.noPut ?? false, noDelete: t.noDelete ?? false } : PLAIN;
      w = this.client.watchInto(t.key, opts, this);
    }
    this.w = w;
    try {
      this.from = k ? k.from : await w.created;
      if (this.done) return true;
      // Re-checked now (unless the read that found the blocker is covered by the watch), and then
      // now and then while waiting: a safety net should an event ever be missed (an O(1) read-only
      // Txn; a queue must never wait forever on a ghost).
      const covered = found?.confirmed === true && asOf !== undefined && this.from <= asOf;
      if (!covered && !(await retryWhile(() => stillBlocked(this.client, b, s), isTransient, s))) {
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
    if (b.check.keys.length <= MAX_CHECK_KEYS) {
      this.state.rechecker.add(this);
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

  /** Due: the blocker's batched check (registered only while waiting on a blocker whose check can be batched). */
  get check(): BatchCheck {
    return this.b!.check;
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
      const b = this.b!;
      const still = await retryWhile(() => stillBlocked(this.client, b, ac.signal), isTransient, ac.signal);
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
    const asOf = b.found?.asOf;
    // The revision whose event ended the wait: the blocker still sees that revision's other events
    // (one revision may take the last key ahead of us and our own key too).
    let movedAt: bigint | undefined;
    try {
      for (const e of batch.events) {
        const rev = e.kv.modRevision;
        if (rev > this.through) this.through = rev;
        // A kept watch may still hold events from before our read: those were seen by it.
        if (asOf !== undefined && rev <= asOf) continue;
        if (movedAt !== undefined && rev !== movedAt) continue;
        if (b.changed(e)) movedAt ??= rev;
      }
    } catch (err) {
      return this.fail(err); // a rule's bug ends this wait, not the client's watch stream
    }
    if (movedAt !== undefined) this.moved();
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
    if (this.rechecking) this.state.rechecker.remove(this);
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
    // found.keep asked again: a blocker may no longer want its watch kept (an OlderBlocker behind a queue grown long).
    if (mayKeep && this.keepable && b?.found?.keep === true && !w.ended && !this.done && !this.stopped()) {
      const k = new Kept(w, this.from, this.through);
      if (early) k.batches.push(...early);
      w.sink = k;
      this.state.kept.keep(this.session!, keptId(b.watch), k);
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
export async function blockedNow(client: Client, ticket: Ticket, rule: TurnRule, signal?: AbortSignal): Promise<boolean> {
  if (ticket.first) return false;
  const s = signal ?? new AbortController().signal;
  for (;;) {
    const b = await rule.blocker(s);
    if (b === null) return false;
    if (await stillBlocked(client, b, s)) return true;
  }
}
