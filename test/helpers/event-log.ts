// Every event under a prefix, recorded by a watch, for tests to await.
import type { Client } from '../../src/index.js';

/** One event as the log records it. */
export interface LoggedEvent {
  type: 'put' | 'delete';
  key: string;
  /** ModRevision of the event (for a put: its CreateRevision when version is 1). */
  rev: bigint;
  createRevision: bigint;
  lease: bigint;
}

/**
 * Records every event under a prefix, from the revision after `created`, and lets a test await the
 * first event matching a predicate: the event-driven way to know "that key now exists".
 */
export class EventLog {
  readonly events: LoggedEvent[] = [];
  private readonly ac = new AbortController();
  private waiters: { pred: (e: LoggedEvent) => boolean; from: number; resolve: (e: LoggedEvent) => void }[] = [];
  readonly ready: Promise<bigint>;
  private readonly loop: Promise<void>;

  constructor(client: Client, prefix: string) {
    const w = client.watch(prefix, { prefix: true, signal: this.ac.signal });
    this.ready = w.created;
    this.loop = (async () => {
      for await (const batch of w) {
        for (const e of batch.events) {
          const ev: LoggedEvent = {
            type: e.type,
            key: e.kv.key.toString(),
            rev: e.kv.modRevision,
            createRevision: e.kv.createRevision,
            lease: e.kv.lease,
          };
          this.events.push(ev);
          for (const wt of [...this.waiters]) {
            if (this.events.length - 1 >= wt.from && wt.pred(ev)) {
              this.waiters.splice(this.waiters.indexOf(wt), 1);
              wt.resolve(ev);
            }
          }
        }
      }
    })();
    this.loop.catch(() => {});
  }

  /** Resolves with the first event at index >= `from` that matches. */
  next(pred: (e: LoggedEvent) => boolean, from = 0): Promise<LoggedEvent> {
    const hit = this.events.slice(from).find(pred);
    if (hit) return Promise.resolve(hit);
    return new Promise((resolve) => this.waiters.push({ pred, from, resolve }));
  }

  put(key: string, from = 0): Promise<LoggedEvent> {
    return this.next((e) => e.type === 'put' && e.key === key, from);
  }

  deleted(key: string, from = 0): Promise<LoggedEvent> {
    return this.next((e) => e.type === 'delete' && e.key === key, from);
  }

  async close(): Promise<void> {
    this.ac.abort();
    await this.loop.catch(() => {});
  }
}
