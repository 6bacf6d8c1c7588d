import { retryWhile } from '../client/backoff.js';
import { CompactedError, isTransient } from '../client/errors.js';
import type { Client } from '../client/client.js';
import type { Watch, WatchBatch, WatchEvent } from '../client/watch.js';
import type { OwnershipLostError } from '../errors.js';
import type { Session } from '../session.js';
import { recheckEvery, type BatchCheck } from './recheck.js';
import type { Ticket } from './ticket.js';

/** Raised when our own key vanished (or changed lease) while we queued. */
export type LostErrorFactory = (message: string, cause?: unknown) => OwnershipLostError;

/** What stands between a waiter and its turn right now: one key (or prefix) to watch, and how to tell it moved. */
export interface Blocker {
  /** The key to watch, or the prefix when `prefix` is set. */
  key: Buffer;
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

/**
 * Waits until `rule` says it is our turn, watching only what blocks us, so that one release wakes
 * one waiter. Fails at once when the session is lost or `signal` aborts (with its reason).
 *
 * etcd serves a watch whose start revision is at or below its current revision only from a loop
 * that runs every 100 ms. So the blocker's watch starts from "now", and once etcd confirms it we
 * check again that it still blocks us: a change that slipped in before is seen then. A waiter keeps
 * its place through an outage: reads are retried while the session lives.
 */
/** A watch kept open after a wait, with its undelivered pull and the revision it delivers from. */
interface Kept {
  w: Watch;
  events: AsyncIterator<WatchBatch>;
  pull?: Promise<IteratorResult<WatchBatch>>;
  /** Every event after this revision reaches the watch. */
  from: bigint;
  /** The newest event revision a wait has taken from it: a later wait may reuse it only if its read is not older. */
  through: bigint;
  timer?: NodeJS.Timeout;
}

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
  if (session.signal.aborted || k.w.ended) return k.w.cancel();
  k.pull?.catch(() => {}); // nobody awaits it while kept: a failure must not go unhandled
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
    k.w.cancel();
  }, KEEP_MS);
  k.timer.unref();
  map.set(id, k);
}

function dropKept(k: Kept): void {
  clearTimeout(k.timer);
  k.w.cancel();
}

export function waitForTurn(session: Session, ticket: Ticket, rule: TurnRule, signal?: AbortSignal): Promise<void> {
  if (ticket.first) return Promise.resolve();
  return waitUntil(session.client, rule, { session, signal });
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
 * after a change, until the rule says go (null). {@link waitForTurn} is this for a queued ticket;
 * barriers use it directly with rules of their own ("the key is gone", "ready was put").
 */
export async function waitUntil(client: Client, rule: TurnRule, options: WaitUntilOptions = {}): Promise<void> {
  const { session, signal } = options;
  // One signal for "stop waiting": the caller's, or the session's loss (fail at once, not after the queue).
  const stop = new AbortController();
  const onAbort = (): void => stop.abort(signal?.aborted ? signal.reason : session?.signal.reason);
  if (signal?.aborted || session?.signal.aborted) onAbort();
  signal?.addEventListener('abort', onAbort, { once: true });
  session?.signal.addEventListener('abort', onAbort, { once: true });
  const retrying = <T>(fn: () => Promise<T>): Promise<T> => retryWhile(fn, isTransient, stop.signal);
  try {
    for (;;) {
      const b = await retrying(() => rule.blocker(stop.signal));
      if (b === null) return;
      const asOf = b.asOf;
      const id = session && b.keep && asOf !== undefined ? `${b.prefix ? 'p' : 'k'}${b.noPut ? 'n' : ''}${b.noDelete ? 'd' : ''}/${b.key.toString('latin1')}` : undefined;
      // A watch kept from this session's last wait on the same key, if it already delivers every
      // event after our read: then it needs neither a create, nor a confirmation, nor a cancel.
      let k = session && id !== undefined ? takeKept(session, id) : undefined;
      // Also not when an earlier wait (a sibling of this session on the same key) took an event
      // newer than our read from it: that event would be missing from our stream.
      if (k && !(asOf !== undefined && k.from <= asOf && k.through <= asOf)) {
        dropKept(k);
        k = undefined;
      }
      const w = k?.w ?? client.watch(b.key, { prefix: b.prefix ?? false, noPut: b.noPut ?? false, noDelete: b.noDelete ?? false, signal: stop.signal });
      const onStop = (): void => w.cancel(); // a kept watch was created under another wait's signal
      if (k) {
        stop.signal.addEventListener('abort', onStop, { once: true });
        if (stop.signal.aborted) w.cancel();
      }
      let through = k?.through ?? 0n;
      const events = k?.events ?? w[Symbol.asyncIterator]();
      // One pending pull at a time: a pull abandoned to a re-check would swallow an event.
      let pull = k?.pull;
      let keepIt = false;
      try {
        const from = k?.from ?? (await w.created);
        // Re-checked now (unless the read that found the blocker is covered by the watch), and
        // then now and then while waiting: a safety net should an event ever be missed (an O(1)
        // read-only Txn; a queue must never wait forever on a ghost).
        const covered = b.confirmed === true && asOf !== undefined && from <= asOf;
        const recheckMs = Math.max(10_000, (session?.ttl ?? 0) * 1000);
        let timer: NodeJS.Timeout | undefined;
        let unregister: (() => void) | undefined;
        try {
          if (covered || (await retrying(() => b.stillBlocked(stop.signal)))) {
            pull ??= events.next();
            // A blocker whose check can be batched shares the client's re-checker (no timer of ours).
            // A promise per pass, as the timer's: one living through the wait would keep a reaction
            // for every event that did not end it.
            let stale = false;
            let wake: ((v: 'stale') => void) | undefined;
            if (b.check) unregister = recheckEvery(client, b.check, recheckMs, () => ((stale = true), wake?.('stale')));
            for (;;) {
              const tick = b.check
                ? stale
                  ? Promise.resolve('stale' as const)
                  : new Promise<'stale'>((resolve) => (wake = resolve))
                : new Promise<'recheck'>((resolve) => (timer = setTimeout(() => resolve('recheck'), recheckMs)));
              const next = await Promise.race([pull, tick]);
              clearTimeout(timer);
              if (next === 'stale') break;
              if (next === 'recheck') {
                if (!(await retrying(() => b.stillBlocked(stop.signal)))) break;
                continue;
              }
              pull = undefined;
              if (next.done) break;
              for (const e of next.value.events) if (e.kv.modRevision > through) through = e.kv.modRevision;
              // A kept watch may still hold events from before our read: those were seen by it.
              if (next.value.events.some((e) => (asOf === undefined || e.kv.modRevision > asOf) && b.changed(e))) break;
              pull = events.next();
            }
          }
        } finally {
          clearTimeout(timer);
          unregister?.();
        }
        keepIt = id !== undefined && !w.ended && !stop.signal.aborted;
        if (keepIt) keepWatch(session!, id!, { w, events, pull, from, through });
      } catch (err) {
        if (!(err instanceof CompactedError)) throw err;
      } finally {
        stop.signal.removeEventListener('abort', onStop);
        if (!keepIt) w.cancel();
      }
      stop.signal.throwIfAborted();
      // Gone or changed: ask the rule again (it may have been a waiter that gave up).
    }
  } catch (err) {
    throw stop.signal.aborted ? stop.signal.reason : err;
  } finally {
    signal?.removeEventListener('abort', onAbort);
    session?.signal.removeEventListener('abort', onAbort);
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
