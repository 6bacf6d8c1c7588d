import type { Client } from '../client/client.js';
import { op, txnRange, type KeyValue } from '../client/kv.js';

/**
 * A waiter's safety-net check in a form one request can carry for many waiters: the keys to read
 * (in full: a keys-only read on etcd 3.7 reports every lease as 0), and whether what they say still
 * blocks the waiter.
 */
export interface BatchCheck {
  keys: readonly (string | Buffer)[];
  /** `kvs[i]` is `keys[i]` as read (undefined: absent). True: still blocked, keep waiting. */
  blocked(kvs: readonly (KeyValue | undefined)[]): boolean;
}

interface Entry {
  check: BatchCheck;
  intervalMs: number;
  due: number;
  stale(): void;
}

/** Gets per read-only Txn: etcd's default --max-txn-ops. */
const OPS_PER_TXN = 128;
/** The most keys one check may read (a bigger one re-checks alone, with its own Txn of compares). */
export const MAX_CHECK_KEYS = 32;
/** How often the client's re-checker looks for waiters due. */
const TICK_MS = 1000;

/**
 * One re-checker per client for every waiter's safety net. A waiter re-checks every max(10 s, TTL)
 * should a watch event ever be missed; 10,000 waiters doing that with a Txn each made 333 requests
 * a second, which slowed every hand-over. Here the due checks share read-only Txns of up to 128
 * gets, and one timer serves them all (a waiter holds no timer of its own).
 */
class Rechecker {
  private readonly entries = new Set<Entry>();
  private timer: NodeJS.Timeout | undefined;
  private busy = false;

  constructor(private readonly client: Client) {}

  add(check: BatchCheck, intervalMs: number, stale: () => void): () => void {
    const e: Entry = { check, intervalMs, due: performance.now() + intervalMs, stale };
    this.entries.add(e);
    if (!this.timer) {
      // A failure here must not become an unhandled rejection: the checks stay due for the next tick.
      this.timer = setInterval(() => void this.tick().catch(() => {}), TICK_MS);
      this.timer.unref(); // the waiters' watches keep the process alive, not this
    }
    return () => this.remove(e);
  }

  private remove(e: Entry): void {
    this.entries.delete(e);
    if (this.entries.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  private async tick(): Promise<void> {
    if (this.busy || this.client.closed) return;
    const now = performance.now();
    const due: Entry[] = [];
    for (const e of this.entries) if (e.due <= now) due.push(e);
    if (due.length === 0) return;
    this.busy = true;
    try {
      let batch: Entry[] = [];
      let ops = 0;
      for (const e of due) {
        if (ops + e.check.keys.length > OPS_PER_TXN && batch.length > 0) {
          await this.run(batch);
          batch = [];
          ops = 0;
        }
        batch.push(e);
        ops += e.check.keys.length;
      }
      if (batch.length > 0) await this.run(batch);
    } finally {
      this.busy = false;
    }
  }

  private async run(batch: Entry[]): Promise<void> {
    const live = batch.filter((e) => this.entries.has(e));
    if (live.length === 0) return;
    let t;
    try {
      t = await this.client.txn({ compare: [], success: live.flatMap((e) => e.check.keys.map((k) => op.get(k))), failure: [] }, { idempotent: true });
    } catch {
      return; // an outage: these stay due and are tried on the next tick
    }
    let i = 0;
    const after = performance.now();
    for (const e of live) {
      const kvs = e.check.keys.map(() => txnRange(t, i++).kvs[0]);
      // Removed meanwhile (its wait ended): nothing to tell it.
      if (!this.entries.has(e)) continue;
      if (e.check.blocked(kvs)) e.due = after + e.intervalMs;
      else {
        this.remove(e);
        e.stale();
      }
    }
  }
}

const rechecker = new WeakMap<Client, Rechecker>();

/**
 * Registers a waiter's check, made every `intervalMs` (batched with the client's other waiters);
 * `stale` is called once when a check finds the waiter no longer blocked. Returns the unregister.
 */
export function recheckEvery(client: Client, check: BatchCheck, intervalMs: number, stale: () => void): () => void {
  if (check.keys.length > MAX_CHECK_KEYS) throw new RangeError(`a batched check reads at most ${MAX_CHECK_KEYS} keys, got ${check.keys.length}`);
  let r = rechecker.get(client);
  if (!r) rechecker.set(client, (r = new Rechecker(client)));
  return r.add(check, intervalMs, stale);
}
