import { retryWhile } from '../client/backoff.js';
import { CompactedError, isTransient } from '../client/errors.js';
import type { WatchEvent } from '../client/watch.js';
import type { OwnershipLostError } from '../errors.js';
import type { Session } from '../session.js';
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
  /** An event that may have ended the wait: the rule is asked again. */
  changed(e: WatchEvent): boolean;
  /**
   * Asked once the watch is up, and now and then while waiting: are we still blocked by the same
   * thing? An O(1) read; false sends the waiter back to the rule (which also tells a lost key).
   */
  stillBlocked(signal: AbortSignal): Promise<boolean>;
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
export async function waitForTurn(session: Session, ticket: Ticket, rule: TurnRule, signal?: AbortSignal): Promise<void> {
  if (ticket.first) return;
  const client = session.client;
  // One signal for "stop waiting": the caller's, or the session's loss (fail at once, not after the queue).
  const stop = new AbortController();
  const onAbort = (): void => stop.abort(signal?.aborted ? signal.reason : session.signal.reason);
  if (signal?.aborted || session.signal.aborted) onAbort();
  signal?.addEventListener('abort', onAbort, { once: true });
  session.signal.addEventListener('abort', onAbort, { once: true });
  const retrying = <T>(fn: () => Promise<T>): Promise<T> => retryWhile(fn, isTransient, stop.signal);
  try {
    for (;;) {
      const b = await retrying(() => rule.blocker(stop.signal));
      if (b === null) return;
      const w = client.watch(b.key, { prefix: b.prefix ?? false, noPut: b.noPut ?? false, signal: stop.signal });
      try {
        await w.created;
        // Re-checked now, and then now and then while waiting: a safety net should an event ever be
        // missed (an O(1) read-only Txn; a queue must never wait forever on a ghost).
        const recheckMs = Math.max(10_000, session.ttl * 1000);
        const events = w[Symbol.asyncIterator]();
        let timer: NodeJS.Timeout | undefined;
        try {
          if (await retrying(() => b.stillBlocked(stop.signal))) {
            // One pending pull at a time: a pull abandoned to a re-check would swallow an event.
            let pull = events.next();
            for (;;) {
              const tick = new Promise<'recheck'>((resolve) => (timer = setTimeout(() => resolve('recheck'), recheckMs)));
              const next = await Promise.race([pull, tick]);
              clearTimeout(timer);
              if (next === 'recheck') {
                if (!(await retrying(() => b.stillBlocked(stop.signal)))) break;
                continue;
              }
              if (next.done || next.value.events.some((e) => b.changed(e))) break;
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
      // Gone or changed: ask the rule again (it may have been a waiter that gave up).
    }
  } catch (err) {
    throw stop.signal.aborted ? stop.signal.reason : err;
  } finally {
    signal?.removeEventListener('abort', onAbort);
    session.signal.removeEventListener('abort', onAbort);
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
