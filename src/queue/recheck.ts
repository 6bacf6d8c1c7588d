import type { Client } from '../client/client.js';
import { op, txnRange, type KeyValue, type TxnResult } from '../client/kv.js';

/**
 * A waiter's safety-net check in a form one request carries for many: the keys to read (in full: a
 * keys-only read on etcd 3.7 reports every lease as 0), and whether what they say still blocks it.
 */
export interface BatchCheck {
  keys: readonly (string | Buffer)[];
  /** `kvs[i]` is `keys[i]` as read (undefined: absent). True: still blocked, keep waiting. */
  blocked(kvs: readonly (KeyValue | undefined)[]): boolean;
}

/**
 * What the re-checker holds of a registered waiter: its check, how often, when next, and whom to
 * tell. A waiter may be this itself (wait.ts's Wait is), so 10,000 waiters add no object each.
 */
export interface Due {
  readonly check: BatchCheck;
  readonly intervalMs: number;
  /** When the check is next due (performance.now(), in whole ms: no number boxed per waiter); set by the re-checker. */
  due: number;
  /** Told once when a check finds the waiter no longer blocked (it is unregistered then). */
  stale(): void;
}

/** Gets per read-only Txn: etcd's default --max-txn-ops. */
const OPS_PER_TXN = 128;
/** The most keys one check may read (a bigger one re-checks alone, with its own Txn of compares). */
export const MAX_CHECK_KEYS = 32;
/** How often the client's re-checker looks for waiters due. */
const TICK_MS = 1000;

/**
 * One re-checker per client for every waiter's safety net (every max(10 s, TTL), should a watch event
 * be missed): 10,000 waiters with a Txn each would send 333 requests a second, slowing every hand-over.
 * Here the due checks share read-only Txns of up to 128 gets, and one timer serves them all.
 */
export class Rechecker {
  private readonly entries = new Set<Due>();
  private timer: NodeJS.Timeout | undefined;
  private busy = false;

  constructor(private readonly client: Client) {}

  /** Registers `e` (see {@link Due}): checked every `e.intervalMs`, batched, until stale or removed. */
  add(e: Due): void {
    const n = e.check.keys.length;
    if (n > MAX_CHECK_KEYS) throw new RangeError(`a batched check reads at most ${MAX_CHECK_KEYS} keys, got ${n}`);
    e.due = Math.ceil(performance.now() + e.intervalMs);
    this.entries.add(e);
    if (!this.timer) {
      // A failure here must not become an unhandled rejection: the checks stay due for the next tick.
      this.timer = setInterval(() => void this.tick().catch(() => {}), TICK_MS);
      this.timer.unref(); // the waiters' watches keep the process alive, not this
    }
  }

  remove(e: Due): void {
    this.entries.delete(e);
    if (this.entries.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  /** The client closed: no more ticks. */
  close(): void {
    this.entries.clear();
    clearInterval(this.timer);
    this.timer = undefined;
  }

  private async tick(): Promise<void> {
    if (this.busy || this.client.closed) return;
    const now = performance.now();
    const due: Due[] = [];
    for (const e of this.entries) if (e.due <= now) due.push(e);
    if (due.length === 0) return;
    this.busy = true;
    try {
      let batch: Due[] = [];
      let ops = 0;
      for (const e of due) {
        // Its wait ended, or moved on and registered again (not due yet), while an earlier batch ran.
        if (!this.entries.has(e) || e.due > now) continue;
        if (ops + e.check.keys.length > OPS_PER_TXN && batch.length > 0) {
          await this.run(batch);
          batch = [];
          ops = 0;
          if (!this.entries.has(e) || e.due > now) continue;
        }
        batch.push(e);
        ops += e.check.keys.length;
      }
      if (batch.length > 0) await this.run(batch);
    } finally {
      this.busy = false;
    }
  }

  private async run(batch: Due[]): Promise<void> {
    const live = batch.filter((e) => this.entries.has(e));
    if (live.length === 0) return;
    // Taken now: a waiter that moves on meanwhile may register again with another check.
    const checks = live.map((e) => e.check);
    const keys = checks.map((c) => c.keys);
    let t: TxnResult;
    try {
      t = await this.client.txn(
        { compare: [], success: keys.flatMap((ks) => ks.map((k) => op.get(k))), failure: [] },
        { idempotent: true },
      );
    } catch {
      return; // an outage: these stay due and are tried on the next tick
    }
    let i = 0;
    const after = performance.now();
    for (let j = 0; j < live.length; j++) {
      const e = live[j]!;
      const kvs = keys[j]!.map(() => txnRange(t, i++).kvs[0]);
      // Removed meanwhile (its wait ended or moved on to another check): nothing to tell it.
      if (!this.entries.has(e) || e.check !== checks[j]) continue;
      let blocked: boolean;
      try {
        blocked = checks[j]!.blocked(kvs);
      } catch {
        blocked = false; // a check that fails sends its waiter back to its rule, which reports the error
      }
      if (blocked) e.due = Math.ceil(after + e.intervalMs);
      else {
        this.remove(e);
        e.stale();
      }
    }
  }
}
