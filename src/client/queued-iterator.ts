/**
 * The one bridge from push-style sources (a watch, an election observer) to an AsyncIterable that
 * users consume with `for await`. Values queue until pulled (a value pushed while the consumer
 * waits goes straight to it and is never queued); `end()` finishes the iteration, with an error if
 * given; when the consumer stops early (`break`, `return`), `onClose` releases the source. Modelled
 * on nats.js's QueuedIterator.
 */
export class QueuedIterator<T> implements AsyncIterableIterator<T> {
  private readonly queue: T[] = [];
  /** Pulls waiting for a value, oldest first (a consumer may pull again before the last pull settled). */
  private waiters: { resolve: (r: IteratorResult<T>) => void; reject: (e: unknown) => void }[] = [];
  private done = false;
  private error: unknown;
  private closed = false;
  private queuedWeight = 0;

  constructor(
    private readonly onClose?: () => void,
    /** Called after the consumer pulled a queued value, with how many remain. */
    private readonly onPull?: (pending: number) => void,
    /** What a value weighs (its bytes, say): {@link weight} sums it over the queued values. */
    private readonly weigh?: (value: T) => number,
  ) {}

  /** Queued values not yet pulled: a growing number means a slow consumer. */
  get pending(): number {
    return this.queue.length;
  }

  /** The weight of the queued values not yet pulled (0 without `weigh`). */
  get weight(): number {
    return this.queuedWeight;
  }

  get ended(): boolean {
    return this.done;
  }

  push(value: T): void {
    if (this.done) return;
    const w = this.waiters.shift();
    if (w) w.resolve({ value, done: false });
    else {
      this.queue.push(value);
      if (this.weigh) this.queuedWeight += this.weigh(value);
    }
  }

  /** Ends the iteration once the queue drains; with `err`, the consumer's next pull rejects. */
  end(err?: unknown): void {
    if (this.done) return;
    this.done = true;
    this.error = err;
    // The queue is empty while pulls wait: the first gets the error, if any, and the rest the end.
    const ws = this.waiters;
    this.waiters = [];
    for (const w of ws) {
      if (this.error !== undefined) {
        this.error = undefined;
        w.reject(err);
      } else w.resolve({ value: undefined, done: true });
    }
    this.close();
  }

  next(): Promise<IteratorResult<T>> {
    if (this.queue.length > 0) {
      const value = this.queue.shift()!;
      if (this.weigh) this.queuedWeight -= this.weigh(value);
      this.onPull?.(this.queue.length);
      return Promise.resolve({ value, done: false });
    }
    if (this.done) {
      if (this.error !== undefined) {
        const e = this.error;
        this.error = undefined;
        return Promise.reject(e);
      }
      return Promise.resolve({ value: undefined, done: true });
    }
    return new Promise((resolve, reject) => {
      this.waiters.push({ resolve, reject });
    });
  }

  return(): Promise<IteratorResult<T>> {
    this.queue.length = 0;
    this.queuedWeight = 0;
    this.end();
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  private close(): void {
    if (this.closed) return;
    this.closed = true;
    this.onClose?.();
  }
}
