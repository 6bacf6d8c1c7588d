import type { Client } from '../client/client.js';
import type { KeyValue } from '../client/kv.js';
import type { Watch, WatchBatch, WatchSink } from '../client/watch.js';

/** One key as the view holds it: its bytes as a latin1 string (lossless, and the Map's key too). */
interface Entry {
  id: string;
  createRevision: bigint;
  lease: bigint;
  version: bigint;
  alive: boolean;
}

/** A key under the prefix as the view saw it. */
export interface ViewedKey {
  key: Buffer;
  createRevision: bigint;
  lease: bigint;
  version: bigint;
}

/** What the view says about the key just before a given CreateRevision, exact at revision `asOf`. */
export interface ViewedPredecessor {
  kv: ViewedKey;
  asOf: bigint;
}

/**
 * The keys under one long queue's prefix, in CreateRevision order, as this client sees them: one
 * read of the whole prefix when the view is made, then the events of one prefix watch. A join
 * then finds the key just before its own here, once the view has seen its own put, instead of a
 * sorted read of the whole queue in etcd (which reads every key of the range, each join: the
 * queue's length in work per join). The view is exact at the revision it has seen through: keys are
 * never created older than an existing one, and the watch delivers every event in order. A
 * compacted or broken watch ends it (`dead`), and joins go back to reading.
 */
export class QueueView implements WatchSink {
  /** Oldest first; deleted entries stay (not alive) until compacted. */
  private entries: Entry[] = [];
  private readonly byKey = new Map<string, Entry>();
  private dead = 0;
  /** Every event up to this revision is applied. */
  private through = 0n;
  private snapshot = 0n;
  private early: WatchBatch[] | undefined = [];
  private readonly waiters: { rev: bigint; resolve: (ok: boolean) => void }[] = [];
  private w: Watch | undefined;
  ended = false;
  /** performance.now() of the last use: an unused view is closed (see QueueViews). */
  usedAt = performance.now();

  constructor(
    private readonly client: Client,
    readonly prefix: Buffer,
    rangeEnd: Buffer,
  ) {
    void this.start(rangeEnd);
  }

  private async start(rangeEnd: Buffer): Promise<void> {
    try {
      const w = (this.w = this.client.watchInto(this.prefix, { prefix: true }, this));
      await w.created;
      if (this.ended) return;
      // Everything before the read is in it; the watch's events after it are applied on top.
      const r = await this.client.range({ key: this.prefix, rangeEnd });
      if (this.ended) return;
      this.snapshot = r.header.revision;
      this.entries = r.kvs
        .map((kv) => entryOf(kv))
        .sort((a, b) => (a.createRevision < b.createRevision ? -1 : a.createRevision > b.createRevision ? 1 : 0));
      for (const e of this.entries) this.byKey.set(e.id, e);
      this.through = this.snapshot;
      const early = this.early ?? [];
      this.early = undefined;
      for (const b of early) this.apply(b);
      this.wake();
    } catch {
      this.close();
    }
  }

  /** WatchSink: the prefix's events, in revision order. */
  push(batch: WatchBatch): void {
    if (this.ended) return;
    if (this.early) {
      this.early.push(batch);
      return;
    }
    this.apply(batch);
    this.wake();
  }

  /** WatchSink: the watch ended (compacted, broken, cancelled): the view can no longer vouch for anything. */
  end(): void {
    this.close();
  }

  private apply(batch: WatchBatch): void {
    for (const e of batch.events) {
      const kv = e.kv;
      if (kv.modRevision <= this.snapshot) continue; // in the read already
      if (kv.modRevision > this.through) this.through = kv.modRevision;
      const id = kv.key.toString('latin1');
      const had = this.byKey.get(id);
      if (e.type === 'delete') {
        if (had) this.remove(id, had);
        continue;
      }
      if (had && had.createRevision === kv.createRevision) {
        had.lease = kv.lease;
        had.version = kv.version;
        continue;
      }
      if (had) this.remove(id, had); // a new incarnation: the old one was deleted
      const n = entryOf(kv, id);
      this.byKey.set(id, n);
      this.entries.push(n); // the newest creation: last in CreateRevision order
    }
  }

  private remove(id: string, e: Entry): void {
    this.byKey.delete(id);
    e.alive = false;
    // Deleted entries are dropped when they are half of the array (a FIFO queue deletes its head).
    if (++this.dead > 64 && this.dead * 2 > this.entries.length) {
      this.entries = this.entries.filter((x) => x.alive);
      this.dead = 0;
    }
  }

  private wake(): void {
    if (this.waiters.length === 0) return;
    const left: typeof this.waiters = [];
    for (const w of this.waiters) this.through >= w.rev ? w.resolve(true) : left.push(w);
    this.waiters.splice(0, this.waiters.length, ...left);
  }

  /** Resolves true once every event up to `rev` is applied, false if the view ended first. */
  private seen(rev: bigint, signal: AbortSignal): Promise<boolean> {
    if (this.ended) return Promise.resolve(false);
    if (!this.early && this.through >= rev) return Promise.resolve(true);
    return new Promise<boolean>((resolve, reject) => {
      const onAbort = (): void => {
        const i = this.waiters.findIndex((x) => x.resolve === done);
        if (i >= 0) this.waiters.splice(i, 1);
        reject(signal.reason);
      };
      const done = (ok: boolean): void => {
        signal.removeEventListener('abort', onAbort);
        resolve(ok);
      };
      if (signal.aborted) return reject(signal.reason);
      signal.addEventListener('abort', onAbort, { once: true });
      this.waiters.push({ rev, resolve: done });
    });
  }

  /**
   * The newest live key created at or before revision `rev` for which `counts` holds (null: none),
   * exact at the revision returned; undefined when the view ended (read instead). Waits until the
   * view has seen revision `rev` (the put of the caller's own key under the prefix). `counts` is
   * asked newest first.
   */
  async upTo(rev: bigint, counts: (e: ViewedKey) => boolean, signal: AbortSignal): Promise<ViewedPredecessor | null | undefined> {
    this.usedAt = performance.now();
    if (!(await this.seen(rev, signal)) || this.ended) return undefined;
    const asOf = this.through;
    const es = this.entries;
    // The first entry created after `rev`, by binary search (the array is in CreateRevision order).
    let lo = 0;
    let hi = es.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (es[mid]!.createRevision <= rev) lo = mid + 1;
      else hi = mid;
    }
    for (let i = lo - 1; i >= 0; i--) {
      const e = es[i]!;
      if (!e.alive) continue;
      const kv: ViewedKey = { key: Buffer.from(e.id, 'latin1'), createRevision: e.createRevision, lease: e.lease, version: e.version };
      if (counts(kv)) return { kv, asOf };
    }
    return null;
  }

  /** Live keys in the view. */
  get size(): number {
    return this.byKey.size;
  }

  /** The revision `size` is exact at. */
  get seenThrough(): bigint {
    return this.through;
  }

  close(): void {
    if (this.ended) return;
    this.ended = true;
    this.w?.cancel();
    for (const w of this.waiters.splice(0)) w.resolve(false);
    this.entries = [];
    this.byKey.clear();
  }
}

function entryOf(kv: KeyValue, id = kv.key.toString('latin1')): Entry {
  // The key as a string of its own: the decoded key is a slice of the whole response, which it would keep alive.
  return { id, createRevision: kv.createRevision, lease: kv.lease, version: kv.version, alive: true };
}

/** An unused view is closed after this long: its watch and its copy of the queue go. */
const IDLE_MS = 30_000;

/**
 * A client's views of its long queues, by prefix. A view is exact only if its watch delivers every
 * event: on a member whose watch may lose one near a compaction (etcd 3.4 before 3.4.36, 3.5 before
 * 3.5.18; see watch-trust.ts) a lost create would make the view name a predecessor older than the
 * real one, and once that one (a marked head) went, the waiter would take its turn ahead of the key
 * it missed. So views are made and used only while `lossless()` says the member loses none.
 */
export class QueueViews {
  private readonly byPrefix = new Map<string, QueueView>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly client: Client,
    private readonly lossless: () => boolean,
  ) {}

  /** The view of the queue under `prefix`, made now if there is none; undefined where a view cannot be exact. */
  of(prefix: Buffer, rangeEnd: Buffer): QueueView | undefined {
    if (!this.lossless()) return undefined;
    const id = prefix.toString('latin1');
    let v = this.byPrefix.get(id);
    if (!v || v.ended) {
      this.byPrefix.set(id, (v = new QueueView(this.client, prefix, rangeEnd)));
      this.timer ??= setInterval(() => this.sweep(), IDLE_MS).unref();
    }
    return v;
  }

  /** The view under `prefix` if there is a live one, on a member whose watch loses no event. */
  live(prefix: Buffer): QueueView | undefined {
    const v = this.byPrefix.get(prefix.toString('latin1'));
    return v && !v.ended && this.lossless() ? v : undefined;
  }

  private sweep(): void {
    const now = performance.now();
    for (const [id, v] of this.byPrefix) {
      if (v.ended || now - v.usedAt > IDLE_MS) {
        v.close();
        this.byPrefix.delete(id);
      }
    }
    if (this.byPrefix.size === 0) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  close(): void {
    for (const v of this.byPrefix.values()) v.close();
    this.byPrefix.clear();
    clearInterval(this.timer);
    this.timer = undefined;
  }
}
