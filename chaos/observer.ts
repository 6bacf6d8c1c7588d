// The observer: one watch over a phase's whole chaos prefix, from before the first worker starts to
// after the last one stops, resumed from the revision after the last event it saw (so without gaps),
// recording every key's create and delete revision and how it went (revisions.ts KeyLife).
import type { Client } from '../src/index.js';
import type { KeyEnd, KeyLife } from './revisions.js';

export class Observer {
  readonly lives: KeyLife[] = [];
  /** Harness problems: a compacted start the watch could not resume from. */
  readonly problems: string[] = [];
  /** Times the watch was re-created (each from the revision after the last one seen). */
  resumes = 0;
  private readonly open = new Map<string, KeyLife>();
  private readonly stop = new AbortController();
  private readonly asked: Promise<void>[] = [];
  private next = 0n;
  private loop?: Promise<void>;
  private readonly operatorDeletes = new Set<bigint>();
  private readonly operatorRevokes = new Set<string>();

  constructor(
    private readonly client: Client,
    private readonly prefix: string,
  ) {}

  /** Starts watching from the current revision (keys already there are recorded as they are). */
  async start(): Promise<void> {
    const r = await this.client.getPrefix(this.prefix);
    for (const kv of r.kvs) this.born(kv.key.toString(), kv.createRevision, kv.lease);
    this.next = r.header.revision + 1n;
    this.loop = this.run();
  }

  /** The nemesis took a key (at `revision`) or revoked a lease: recorded as the operator's. */
  operator(done: { how: 'operator-delete'; revision: bigint } | { how: 'operator-revoke'; lease: string }): void {
    if (done.how === 'operator-delete') this.operatorDeletes.add(done.revision);
    else this.operatorRevokes.add(done.lease);
  }

  /**
   * Stops once the watch has seen revision `upTo` (the store's revision after the phase's cleanup,
   * say), or after `limitMs`, then settles the record: the operator's deletes and revokes named as
   * such. Returns it with the revision it reached: a record that ends before `upTo` is incomplete
   * (checker/record.ts), and nothing after its end may be judged on it.
   */
  async finish(upTo: bigint, limitMs = 15_000): Promise<{ lives: KeyLife[]; reached: bigint }> {
    const deadline = performance.now() + limitMs;
    while (this.next <= upTo && performance.now() < deadline && this.loop) await new Promise((r) => setTimeout(r, 50));
    const reached = this.next - 1n;
    this.stop.abort();
    await this.loop;
    await Promise.all(this.asked);
    for (const l of this.lives) {
      if (l.deleted === undefined) continue;
      if (this.operatorDeletes.has(l.deleted)) l.how = 'operator-delete';
      else if (this.operatorRevokes.has(l.lease) && l.how !== 'deleted') l.how = 'operator-revoke';
    }
    return { lives: this.lives, reached };
  }

  private born(key: string, create: bigint, lease: bigint): void {
    const life: KeyLife = { key, create, lease: lease.toString(16) };
    this.lives.push(life);
    this.open.set(key, life);
  }

  private async run(): Promise<void> {
    while (!this.stop.signal.aborted) {
      const w = this.client.watch(this.prefix, { prefix: true, startRevision: this.next, signal: this.stop.signal });
      try {
        for await (const batch of w) {
          for (const e of batch.events) {
            const key = e.kv.key.toString();
            if (e.type === 'put') {
              if (this.open.get(key)?.create !== e.kv.createRevision) this.born(key, e.kv.createRevision, e.kv.lease);
            } else {
              const life = this.open.get(key);
              this.open.delete(key);
              if (life) {
                life.deleted = e.kv.modRevision;
                this.asked.push(this.howEnded(life));
              }
            }
            this.next = e.kv.modRevision + 1n;
          }
          // A batch without events (progress) still says nothing is missing up to its revision.
          if (batch.events.length === 0 && batch.revision >= this.next) this.next = batch.revision + 1n;
        }
      } catch (err) {
        if (this.stop.signal.aborted) return;
        // A compacted start cannot be resumed without a gap: say so (the chaos run never compacts).
        if ((err as Error).name === 'CompactedError') {
          this.problems.push(`observer: revision ${this.next} compacted: the record has a gap`);
          return;
        }
        this.resumes++;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }

  /**
   * A delete while the key's lease still lives is a delete; with the lease gone, it went with its
   * lease (a revoke or an expiry: etcd's history does not tell them apart). Asked right after the
   * event, so a holder that deletes its key and revokes its lease at once may count as the latter.
   */
  private async howEnded(life: KeyLife): Promise<void> {
    if (life.lease === '0') {
      life.how = 'deleted';
      return;
    }
    let how: KeyEnd = 'unknown';
    try {
      const t = await this.client.leaseTimeToLive(BigInt(`0x${life.lease}`), { timeoutMs: 5000 });
      how = t.ttl === -1 ? 'lease-ended' : 'deleted';
    } catch {
      // an outage: unknown
    }
    life.how ??= how;
  }
}
