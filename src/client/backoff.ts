/**
 * Exponential backoff with full jitter, so that many clients reconnecting after one failure do not
 * arrive together. Pure: the caller owns the timer.
 */
export class Backoff {
  private attempt = 0;
  constructor(
    private readonly baseMs = 50,
    private readonly maxMs = 1000,
    private readonly random: () => number = Math.random,
  ) {}

  /** The delay before the next attempt. */
  next(): number {
    const cap = Math.min(this.maxMs, this.baseMs * 2 ** Math.min(this.attempt, 20));
    this.attempt++;
    return Math.floor(cap / 2 + (this.random() * cap) / 2);
  }

  reset(): void {
    this.attempt = 0;
  }
}

/** Resolves after `ms`, or rejects with the signal's reason; never leaves a timer behind. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Runs `fn` until it succeeds, retrying with backoff while it fails for want of a reachable
 * cluster (`isTransient`); any other error, or `signal` aborting, ends the retries.
 */
export async function retryWhile<T>(
  fn: () => Promise<T>,
  isTransient: (err: unknown) => boolean,
  signal: AbortSignal,
  backoff = new Backoff(100, 2000),
): Promise<T> {
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (!isTransient(err) || signal.aborted) throw err;
      await sleep(backoff.next(), signal);
    }
  }
}

/** Resolves once every one of `work` settled, or after `ms`, whichever is first; never rejects. */
export async function settledWithin(work: readonly Promise<unknown>[], ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)));
  await Promise.race([Promise.allSettled(work), timeout]);
  clearTimeout(timer);
}
