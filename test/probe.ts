// The one spy on a Client (no mock: every call still goes to the real etcd). It records each unary
// call where it leaves the client (Connection.call: the method, and a Txn's ranges and puts), the
// calls not answered yet, and the watches the client creates, and tells when everything the
// participants on it started has been answered: "every waiter is blocked on its watch again"
// without sleeping, and what one acquisition or release costs.
import type { Client, Watch } from '../src/index.js';
import type { TxnRequest } from '../src/proto/etcd.js';
import { Kept } from '../src/queue/state.js';
import { waitFor } from './helpers/waiting.js';

/** One unary call as it left the client: its method, and a Txn's range and put operations. */
export interface Sent {
  method: string;
  ranges: number;
  puts: number;
}

export class Probe {
  /** Every unary call, in the order sent. */
  readonly sent: Sent[] = [];
  /** Every watch created through the client, in creation order. */
  readonly watches: Watch[] = [];
  private readonly confirmed = new WeakSet<Watch>();
  private inflight = 0;

  constructor(readonly client: Client) {
    // Every request goes through Connection.call: a lone call by way of Connection.unary, the
    // coalescer's shared requests and the Txns it sends alone directly. Each is recorded once, where
    // it enters call; a shared request as one Txn with its Txns' operations.
    const call = client.conn.call.bind(client.conn);
    client.conn.call = ((method, request, ...rest) => {
      const r = request as TxnRequest;
      const txns = method.path.endsWith('/Txn')
        ? r.success?.every((o) => o.requestTxn) && r.success.length > 0
          ? r.success.map((o) => o.requestTxn!)
          : [r]
        : [];
      const ops = txns.flatMap((t) => [...(t.success ?? []), ...(t.failure ?? [])]);
      this.sent.push({
        method: method.path.slice(method.path.lastIndexOf('/') + 1),
        ranges: ops.filter((o) => o.requestRange).length,
        puts: ops.filter((o) => o.requestPut).length,
      });
      this.inflight++;
      return call(method, request, ...rest).finally(() => this.inflight--);
    }) as typeof client.conn.call;
    const track = (w: Watch): Watch => {
      this.watches.push(w);
      w.created.then(
        () => this.confirmed.add(w),
        () => {},
      );
      return w;
    };
    const watch = client.watch.bind(client);
    const watchInto = client.watchInto.bind(client);
    client.watch = (...args: Parameters<Client['watch']>) => track(watch(...args));
    // The queue's waiters watch through watchInto (batches handed to them, not to an iterator).
    client.watchInto = (...args: Parameters<Client['watchInto']>) => track(watchInto(...args));
  }

  /** The methods of the calls sent since the last {@link Probe.reset}. */
  get calls(): string[] {
    return this.sent.map((s) => s.method);
  }

  get txns(): number {
    return this.sent.filter((s) => s.method === 'Txn').length;
  }

  get ranges(): number {
    return this.sent.filter((s) => s.method === 'Range').length;
  }

  /** Calls sent and not answered yet. */
  get inFlight(): number {
    return this.inflight;
  }

  /** Forgets the calls sent so far (watches stay). */
  reset(): void {
    this.sent.length = 0;
  }

  /** Watches not cancelled and not kept for a later wait (each blocked waiter has exactly one). */
  active(from = 0): Watch[] {
    return this.watches.slice(from).filter((w) => !w.ended && !(w.sink instanceof Kept));
  }

  /** A prefix watch: what only a semaphore's head (or an election observer) opens. */
  static isPrefix(w: Watch): boolean {
    return w.rangeEnd !== undefined;
  }

  /**
   * Resolves once no call of this client is in flight, every open watch is confirmed by etcd, and
   * `done(open watches)` holds. Checked from a timer, after every pending continuation of an
   * answered call has run: a participant that got an answer has already made its next call.
   */
  async quiet(what: string, done: (open: Watch[]) => boolean): Promise<void> {
    await waitFor(() => this.inflight === 0 && this.active().every((w) => this.confirmed.has(w)) && done(this.active()), what);
  }

  /** quiet() with exactly `n` open watches: `n` participants blocked, each on its one watch. */
  blocked(n: number, what = `${n} participants blocked on their watch`): Promise<void> {
    return this.quiet(what, (open) => open.length === n);
  }
}
