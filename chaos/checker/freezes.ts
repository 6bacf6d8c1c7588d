// Freezes of a worker's own process (SIGSTOP): how long one must last to explain a stale belief.
import type { FaultRecord, HeldInterval } from './history.js';

/** Fault kinds that freeze a worker process (SIGSTOP): the faults of ours that explain an overlap. */
export const FREEZES = new Set(['worker-pause', 'ghost-pause', 'stale-write']);

/**
 * After SIGCONT, a woken holder needs a moment to run its timers and notice the loss: a later holder
 * that started within this long after the end of the freeze still counts as started "during" it.
 */
export const WAKE_GRACE_MS = 250;

/** The session TTL (s) of a hold that does not say (the chaos run's default --ttl). */
export const DEFAULT_TTL_S = 3;

/**
 * The session's safety margin at `ttlSeconds` when none is set: min(5 s, TTL/6) (src/session.ts,
 * marginMs()). The chaos workers use the default.
 */
export function defaultMarginMs(ttlSeconds: number): number {
  return Math.min(5000, (ttlSeconds * 1000) / 6);
}

/**
 * The shortest freeze that can explain a stale belief: a correct holder frozen for less than its
 * TTL minus the margin wakes with its deadline still ahead, so its lease cannot have expired on the
 * server and nobody else can have been granted meanwhile. 2500 ms at TTL 3 s.
 */
export function minExcusingFreezeMs(ttlSeconds: number = DEFAULT_TTL_S): number {
  return ttlSeconds * 1000 - defaultMarginMs(ttlSeconds);
}

/**
 * Whether freeze `f` of `a`'s process explains `a` still believing it held when `b` started: a
 * SIGSTOP (never a zero-length record: a ghost-pause that trapped nobody) of at least
 * minExcusingFreezeMs(a's TTL), covering `b`'s start (up to WAKE_GRACE_MS after the wake), and `a`'s
 * belief ended within WAKE_GRACE_MS of the wake (a holder that goes on believing after it ran again
 * is not excused by having been frozen once).
 */
export function freezeExplains(f: FaultRecord, a: HeldInterval, b: HeldInterval): boolean {
  return (
    FREEZES.has(f.kind) &&
    f.worker === a.worker &&
    f.end > f.start &&
    f.end - f.start >= minExcusingFreezeMs(a.ttl) &&
    f.start <= b.from &&
    b.from <= f.end + WAKE_GRACE_MS &&
    a.to <= f.end + WAKE_GRACE_MS
  );
}
