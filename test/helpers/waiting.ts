// Waiting on promises and signals, and polling etcd state that no event announces (waitFor).
import { setTimeout as delay } from 'node:timers/promises';

/**
 * Polls `predicate` until it returns a truthy value, which is returned. For etcd state that no event
 * announces. The `limitMs` is a hang guard that fails the test with `what`, not a timing assertion.
 * A predicate that throws fails the wait at once; so does `signal` aborting (with its reason), for a
 * caller that stops looking once something else happened. The one `waitFor` of the test suite
 * (election-helpers.ts re-exports it).
 */
export async function waitFor<T>(
  predicate: () => T | Promise<T>,
  what: string,
  { intervalMs = 20, limitMs = 30_000, signal }: { intervalMs?: number; limitMs?: number; signal?: AbortSignal } = {},
): Promise<NonNullable<T>> {
  const start = performance.now();
  for (;;) {
    signal?.throwIfAborted();
    const v = await predicate();
    if (v) return v as NonNullable<T>;
    if (performance.now() - start > limitMs) throw new Error(`waitFor: gave up waiting for ${what}`);
    await delay(intervalMs, undefined, { signal }).catch(() => signal?.throwIfAborted());
  }
}

/**
 * Resolves with the signal's reason once it aborts. Keeps the process alive meanwhile: the library
 * deliberately unrefs its deadline timers (an orphaned session must not hold a process open), so
 * a test awaiting only such a timer would otherwise end with "Promise resolution is still pending".
 */
export function aborted(signal: AbortSignal): Promise<unknown> {
  if (signal.aborted) return Promise.resolve(signal.reason);
  const keepAlive = setInterval(() => {}, 1 << 30);
  return new Promise((resolve) =>
    signal.addEventListener(
      'abort',
      () => {
        clearInterval(keepAlive);
        resolve(signal.reason);
      },
      { once: true },
    ),
  );
}

/** A promise's state, readable synchronously (see track). */
export interface Tracked<T> {
  promise: Promise<T>;
  settled: boolean;
  value?: T;
  error?: unknown;
  /** performance.now() when it settled. */
  at?: number;
}

/**
 * Tracks whether a promise has settled, without changing it: `settled`, `value`, `error` and `at`
 * are plain properties, updated when it settles. The one `track` of the test suite
 * (election-helpers.ts re-exports it).
 */
export function track<T>(p: Promise<T>): Tracked<T> {
  const t: Tracked<T> = { promise: p, settled: false };
  p.then(
    (v) => Object.assign(t, { settled: true, value: v, at: performance.now() }),
    (e: unknown) => Object.assign(t, { settled: true, error: e, at: performance.now() }),
  );
  return t;
}

/** Lets every already-queued microtask and I/O callback run (used before asserting "still pending"). */
export async function settle(): Promise<void> {
  await new Promise((r) => setImmediate(r));
}

/** Settles every tracked call (those still waiting are expected to fail once their session closes). */
export function settleAll(ts: readonly Tracked<unknown>[]): Promise<unknown> {
  return Promise.allSettled(ts.map((t) => t.promise));
}

/**
 * `p`, or a failure naming `what` after `limitMs`: a hang guard that fails the test, not a timing
 * assertion. Waits on the promise itself (no polling) and clears its timer either way.
 */
export async function within<T>(p: Promise<T>, what: string, limitMs: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`gave up waiting for ${what}`)), limitMs);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Waits for a tracked call to settle. The limit is a hang guard (a failure, then the test's own
 * clean-up runs) set below a waiter's periodic re-check (every max(10 s, TTL); tests that rely on
 * it give the waiter a long TTL): only the event under test can end the wait in time.
 */
export function settledOrHang<T>(t: Tracked<T>, what: string, limitMs = 10_000): Promise<T> {
  return within(t.promise, what, limitMs);
}
