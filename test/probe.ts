// A spy on one Client (no mock: every call still goes to the real etcd): counts its Txns, Ranges
// and watch creates, and tells when everything the participants on it started has been answered.
// Used by the queue primitives' tests (semaphore, rwmutex) to know "every waiter is blocked on its
// watch again" without sleeping, and to count what one release costs.
import type { Client, Watch } from '../src/index.js';
import { waitFor } from './helpers/waiting.js';

export class Probe {
  txns = 0;
  ranges = 0;
  /** Every watch created through the client, in creation order. */
  readonly watches: Watch[] = [];
  private readonly confirmed = new WeakSet<Watch>();
  private inflight = 0;

  constructor(readonly client: Client) {
    const txn = client.txn.bind(client);
    const range = client.range.bind(client);
    const watch = client.watch.bind(client);
    const watchInto = client.watchInto.bind(client);
    client.txn = (...args: Parameters<Client['txn']>) => {
      this.txns++;
      this.inflight++;
      return txn(...args).finally(() => this.inflight--);
    };
    client.range = (...args: Parameters<Client['range']>) => {
      this.ranges++;
      this.inflight++;
      return range(...args).finally(() => this.inflight--);
    };
    const track = (w: Watch): Watch => {
      this.watches.push(w);
      w.created.then(
        () => this.confirmed.add(w),
        () => {},
      );
      return w;
    };
    client.watch = (...args: Parameters<Client['watch']>) => track(watch(...args));
    // The queue's waiters watch through watchInto (batches handed to them, not to an iterator).
    client.watchInto = (...args: Parameters<Client['watchInto']>) => track(watchInto(...args));
  }

  /** Watches not cancelled (each blocked waiter has exactly one). */
  active(from = 0): Watch[] {
    return this.watches.slice(from).filter((w) => !w.ended);
  }

  /** A prefix watch: what only a semaphore's head (or an election observer) opens. */
  static isPrefix(w: Watch): boolean {
    return w.rangeEnd !== undefined;
  }

  /**
   * Resolves once no Txn or Range of this client is in flight, every open watch is confirmed by
   * etcd, and `done(open watches)` holds. Checked from a timer, after every pending continuation of
   * an answered call has run: a participant that got an answer has already made its next call.
   */
  async quiet(what: string, done: (open: Watch[]) => boolean): Promise<void> {
    await waitFor(() => this.inflight === 0 && this.active().every((w) => this.confirmed.has(w)) && done(this.active()), what);
  }

  /** quiet() with exactly `n` open watches: `n` participants blocked, each on its one watch. */
  blocked(n: number, what = `${n} participants blocked on their watch`): Promise<void> {
    return this.quiet(what, (open) => open.length === n);
  }
}
