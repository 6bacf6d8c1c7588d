// The wait loop under every primitive: ask the rule what blocks us, watch only that, ask again after
// a change, until the rule says go.
import { retryWhile } from '../client/backoff.js';
import type { Client } from '../client/client.js';
import { CompactedError, isTransient } from '../client/errors.js';
import { op, txnRange } from '../client/kv.js';
import type { Watch, WatchBatch, WatchEvent, WatchSink } from '../client/watch.js';
import type { OwnershipEndReason, OwnershipLostError } from '../errors.js';
import type { Session } from '../session.js';
import { type BatchCheck, type Due, MAX_CHECK_KEYS } from './recheck.js';
import { isStopped, listenStop, offStop, stopReason } from '../stop.js';
import { Kept, KeptWatches, queueOf, sessionQueue } from './state.js';

/** Raised when our own `key` vanished (or changed lease) while we queued: one per primitive, no closure per call. */
export type LostErrorFactory = (key: string, why: string, options: { reason: OwnershipEndReason; cause?: unknown }) => OwnershipLostError;

/** What a blocker's watch watches: a key or a prefix, and which events (the watch's options as they are). */
export interface WatchTarget {
  /** The key to watch, or the prefix when `prefix` is set (a string: its UTF-8 bytes). */
  readonly key: string | Buffer;
  readonly prefix?: boolean;
  /** Deletes only. */
  readonly noPut?: boolean;
  /** Puts only: a wait for a key to appear (a barrier opening). */
  readonly noDelete?: boolean;
}

/** What stands between a waiter and its turn now: what to watch, which events may end the wait, how to tell it still blocks. */
export interface Blocker {
  readonly watch: WatchTarget;
  /** An event that may have ended the wait: the rule is asked again. */
  changed(e: WatchEvent): boolean;
  /**
   * Are we still blocked by the same thing? The keys to read (in full) and what they must say; false sends the waiter
   * back to the rule (which also tells a lost key). Read once the watch is up, and now and then while waiting, in one
   * read-only Txn (batched when it reads at most MAX_CHECK_KEYS keys).
   */
  readonly check: BatchCheck;
  /** The revision of the read that found this blocker, when one did: only later events can end the wait. */
  readonly asOf?: bigint;
  /** That read proved everything `check` checks: a watch that delivers every event after `asOf` needs no confirming read. */
  readonly confirmed?: boolean;
  /** Its watch (of one key, a string) may serve this session's next wait on the same key: kept after this one. */
  readonly keep?: boolean;
}

/**
 * A primitive's rule for "my turn" (the oldest; among the N oldest; no older writer), asked afresh after every change.
 * `blocker` resolves null only after confirming our key still stands on our lease ("my turn now", not "was my turn
 * once"); it throws the primitive's lost error when our key is gone.
 */
export interface TurnRule {
  blocker(signal: AbortSignal): Promise<Blocker | null>;
}

/** Who a wait reports to, once: the acquisition that holds it, or waitUntil's promise. */
export type WaitOwner = { turn(): void; fail(err: unknown): void };

/** Reads a blocker's check alone (not batched): one read-only Txn of gets. */
export async function stillBlocked(client: Client, b: Blocker, signal: AbortSignal): Promise<boolean> {
  const keys = b.check.keys;
  const t = await client.txn({ compare: [], success: keys.map((k) => op.get(k)), failure: [] }, { idempotent: true, signal });
  return b.check.blocked(keys.map((_, i) => txnRange(t, i).kvs[0]));
}

/** For a caller that will not wait: is it blocked right now (by a blocker confirmed to be there)? */
export async function blockedNow(client: Client, rule: TurnRule, signal: AbortSignal = new AbortController().signal): Promise<boolean> {
  for (;;) {
    const b = await rule.blocker(signal);
    if (b === null) return false;
    if (await stillBlocked(client, b, signal)) return true;
  }
}

/** Options of {@link waitUntil}: the caller's `signal`, and the waiter's `session` (a barrier's wait, with no key, has none). */
export interface WaitUntilOptions {
  signal?: AbortSignal | undefined;
  session?: Session | undefined;
}

/** Waits until `rule` says go (see {@link Wait}); rejects when the session is lost or `signal` aborts. */
export function waitUntil(client: Client, rule: TurnRule, options: WaitUntilOptions = {}): Promise<void> {
  return new Promise<void>((resolve, reject) =>
    new Wait(client, rule, options.session, options.signal, { turn: resolve, fail: reject }).start(),
  );
}

/**
 * One wait, as a small state machine rather than a suspended async loop: while it waits (one of perhaps 10,000) a
 * waiter is this object, its blocker and its watch, with no promise, timer or AbortController of its own. Two modes:
 * - active: asking the rule, watching the blocker and confirming it (its calls abort through `ac`);
 * - waiting: an event, the batched re-check or our own timer may end it (`moved`): active again.
 *
 * etcd serves a watch from a revision at or below its current one only from a loop that runs every 100 ms. So the
 * blocker's watch starts from "now", and once etcd confirms it we check again that it still blocks us: a change that
 * slipped in before is seen then. Through an outage a waiter keeps its place: reads are retried while the session lives.
 */
export class Wait implements WatchSink, Due {
  private done = false;
  /** Aborts the calls of the active mode or of an own re-check; only while one runs. */
  private ac: AbortController | undefined;
  /** Bumped whenever waiting ends: a late answer of an older re-check is ignored. */
  private gen = 0;
  private b: Blocker | undefined;
  private w: Watch | undefined;
  /** The newest event revision taken from the watch (which delivers every event after its createdAt). */
  private through = 0n;
  /** Waiting: events can end the wait. Before that they queue in `early`. */
  private waiting = false;
  private early: WatchBatch[] | undefined;
  private endedEarly: { err: unknown } | undefined;
  /** When the client's re-checker checks us next (registered as a {@link Due} while waiting: no object of its own). */
  due = 0;
  private timer: NodeJS.Timeout | undefined;
  /** The caller's signal aborted or the session was lost: stop at once, with its reason (see start). Bound: no closure per waiter. */
  private readonly onStop = this.stop.bind(this);

  constructor(
    private readonly client: Client,
    private readonly rule: TurnRule,
    private readonly session: Session | undefined,
    private readonly signal: AbortSignal | undefined,
    private readonly owner: WaitOwner,
  ) {}

  start(): void {
    if (this.stopped()) return this.fail(this.stopReason());
    listenStop(this.signal, this.session, this.onStop);
    void this.next();
  }

  private stop(): void {
    this.fail(this.stopReason());
  }

  private stopped(): boolean {
    return isStopped(this.signal, this.session?.signal);
  }

  private stopReason(): unknown {
    return stopReason(this.signal, this.session?.signal);
  }

  /** Active mode: ask the rule, watch what blocks us, confirm; returns once waiting (or over). */
  private async next(): Promise<void> {
    const ac = (this.ac = new AbortController());
    const s = ac.signal;
    try {
      for (;;) {
        const b = await retryWhile(() => this.rule.blocker(s), isTransient, s);
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
    this.b = b;
    this.waiting = false;
    this.endedEarly = undefined;
    const t = b.watch;
    // The watch of this session's last wait on the same key, if it delivers every event after our
    // read: no create, no cancel, and what it delivered meanwhile is filtered in push() as any event.
    const k = this.keptFor(b);
    this.early = k && k.batches.length > 0 ? k.batches : undefined;
    this.through = k?.through ?? 0n;
    const w = k ? k.w : this.client.watchInto(t.key, t, this);
    w.sink = this;
    this.w = w;
    try {
      const from = k ? k.w.createdAt! : await w.created;
      if (this.done) return true;
      // Re-checked now (unless the watch covers the read that found the blocker), and now and then
      // while waiting: a safety net should an event be missed (a queue must never wait on a ghost).
      const covered = b.confirmed === true && b.asOf !== undefined && from <= b.asOf;
      if (!covered && !(await retryWhile(() => stillBlocked(this.client, b, s), isTransient, s))) {
        if (this.done) return true;
        this.leaveWatch(true);
        return false;
      }
      if (this.done) return true;
    } catch (err) {
      if (this.w === w) this.leaveWatch();
      if (err instanceof CompactedError) return false;
      throw err;
    }
    this.wait();
    return true;
  }

  /** A watch kept for `b`'s key by this session (see KeptWatches) that delivers every event after `b`'s read. */
  private keptFor(b: Blocker): Kept | undefined {
    const key = b.watch.key;
    if (!this.session || !b.keep || typeof key !== 'string') return undefined;
    const k = sessionQueue(this.session).kept?.take(key);
    if (!k || (b.asOf !== undefined && k.w.createdAt! <= b.asOf && k.through <= b.asOf)) return k;
    k.w.cancel();
    return undefined;
  }

  /** Waiting mode: the batched safety net (or a timer of our own), then what queued meanwhile. */
  private wait(): void {
    const b = this.b!;
    this.waiting = true;
    const gen = ++this.gen;
    if (b.check.keys.length <= MAX_CHECK_KEYS) queueOf(this.client).rechecker.add(this);
    else this.armTimer(gen);
    // Left in `early` while replayed: a batch that moves the wait parks the watch with those not taken.
    const early = this.early;
    while (early && early.length > 0 && this.waiting) this.push(early.shift()!);
    if (this.early === early) this.early = undefined;
    if (this.waiting && this.endedEarly) this.end(this.endedEarly.err);
  }

  /** Due: how often the safety net checks: max(10 s, TTL). */
  get intervalMs(): number {
    return Math.max(10_000, (this.session?.ttl ?? 0) * 1000);
  }

  /** Due: the blocker's batched check (registered only while waiting on a blocker whose check can be batched). */
  get check(): BatchCheck {
    return this.b!.check;
  }

  /**
   * A blocker whose check cannot be batched re-checks alone, on a timer that events which do not
   * move the wait leave running: under steady traffic the safety net still runs.
   */
  private armTimer(gen: number): void {
    this.timer = setTimeout(() => void this.checkAlone(gen), this.intervalMs);
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
    // The revision whose event ended the wait: the blocker still sees that revision's other events
    // (one revision may take the last key ahead of us and our own key too).
    let movedAt: bigint | undefined;
    try {
      for (const e of batch.events) {
        const rev = e.kv.modRevision;
        if (rev > this.through) this.through = rev;
        // Seen by the read that found the blocker (a watch from "now" on a member that lags may still send it).
        if (b.asOf !== undefined && rev <= b.asOf) continue;
        if (movedAt !== undefined && rev !== movedAt) continue;
        if (b.changed(e)) movedAt ??= rev;
      }
    } catch (err) {
      return this.fail(err); // a rule's bug ends this wait, not the client's watch stream
    }
    if (movedAt !== undefined) this.moved();
  }

  /**
   * WatchSink: the watch ended. Compacted or ended quietly: ask again; any other error ends the wait, with the stop reason
   * once stopped (an application closing its client as its session ends ends the watch before the session tells us).
   */
  end(err?: unknown): void {
    if (this.done) return;
    if (!this.waiting) {
      this.endedEarly = { err };
      return;
    }
    if (err === undefined || err instanceof CompactedError) this.moved();
    else this.fail(this.stopped() ? this.stopReason() : err);
  }

  /** Due: the batched safety net found us no longer blocked (and unregistered us). */
  stale(): void {
    if (this.waiting) this.moved();
  }

  /** The blocker moved: stop waiting and ask the rule again. */
  private moved(): void {
    this.stopWaiting();
    this.leaveWatch(true);
    void this.next();
  }

  private stopWaiting(reason?: unknown): void {
    if (this.waiting) queueOf(this.client).rechecker.remove(this); // unless it has a timer instead, or was told stale: harmless
    this.waiting = false;
    this.gen++;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.ac?.abort(reason); // a call in flight: its answer no longer matters
  }

  /** Lets go of the blocker's watch: kept for the session's next wait on the same key (`mayKeep`, see Blocker.keep), or cancelled. */
  private leaveWatch(mayKeep = false): void {
    const { w, b, early } = this;
    this.w = undefined;
    this.b = undefined;
    this.early = undefined;
    if (!w) return;
    if (mayKeep && b?.keep && this.session && typeof b.watch.key === 'string' && !w.ended && !this.done && !this.stopped()) {
      const k = new Kept(w, this.through);
      if (early) k.batches.push(...early);
      w.sink = k;
      return (sessionQueue(this.session).kept ??= new KeptWatches()).keep(this.session, b.watch.key, k);
    }
    w.sink = IGNORED;
    w.cancel();
  }

  private succeed(): void {
    if (this.done) return;
    this.done = true;
    offStop(this.signal, this.session, this.onStop);
    this.owner.turn();
  }

  private fail(err: unknown): void {
    if (this.done) return;
    this.done = true;
    this.stopWaiting(err);
    this.leaveWatch();
    offStop(this.signal, this.session, this.onStop);
    this.owner.fail(err);
  }
}

/** Where a watch we cancel ourselves hands its last word: nobody listens any more. */
const IGNORED: WatchSink = { push() {}, end() {} };
