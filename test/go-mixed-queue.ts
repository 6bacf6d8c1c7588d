// The mixed Go/TypeScript lock queue of test/go-interop.test.ts: both languages' acquisitions in
// arrival order, the fenced increment each holder makes, and a check that no two ever overlap.
import assert from 'node:assert/strict';
import { type Client, Mutex, Session, op, type LockHandle } from '../src/index.js';
import { EventLog, settle } from './helpers.js';
import type { GoFleet } from './go-fleet.js';

/** The TypeScript half of the fenced write Go does with IsOwner: read, then write +1 only while we own the lock. */
export async function tsIncrement(c: Client, h: LockHandle, counter: string): Promise<{ value: number; ok: boolean }> {
  const kv = await c.get(counter);
  const value = (kv ? Number(kv.value.toString()) : 0) + 1;
  const r = await c.txn({ compare: [h.ownerCompare()], success: [op.put(counter, String(value))], failure: [] });
  return { value, ok: r.succeeded };
}

/** Acquisitions as they arrive, from either language, in arrival order. */
class Arrivals<A> {
  private readonly items: A[] = [];
  private readonly waiting: { resolve: (a: A) => void; reject: (e: Error) => void }[] = [];
  private error?: Error;
  push(a: A): void {
    const w = this.waiting.shift();
    if (w) w.resolve(a);
    else this.items.push(a);
  }
  fail(e: Error): void {
    this.error ??= e;
    for (const w of this.waiting.splice(0)) w.reject(e);
  }
  get queued(): number {
    return this.items.length;
  }
  next(): Promise<A> {
    if (this.error) return Promise.reject(this.error);
    const a = this.items.shift();
    if (a !== undefined) return Promise.resolve(a);
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }
}

export interface Holding {
  who: string;
  key: string;
  token: bigint;
  /** Go only: the revision at which Go confirmed it holds (its Mutex.Header()). */
  header?: bigint;
  incr(): Promise<{ value: number; ok: boolean }>;
  release(): Promise<void>;
}

/**
 * Queues contenders of both languages on `name` behind a holder, one at a time (each after its key
 * is in etcd, so the queue order is known), then hands the lock down the queue. Returns what was
 * seen; the caller asserts.
 */
export async function mixedQueue(
  c: Client,
  go: GoFleet,
  name: string,
  counter: string,
  who: string[],
  sessions: Session[],
): Promise<{ order: string[]; created: Map<string, bigint>; holdings: Holding[]; values: number[]; violations: string[]; log: EventLog }> {
  const log = new EventLog(c, `${name}/`);
  await log.ready;
  const arrivals = new Arrivals<Holding>();
  let holder: string | null = null;
  const violations: string[] = [];
  const arrive = (h: Holding): void => {
    if (holder !== null) violations.push(`${h.who} acquired while ${holder} held the lock`);
    holder = h.who;
    arrivals.push(h);
  };
  const goIds = new Set(who.filter((w) => w.startsWith('go')));
  const stop = go.onEvent((e) => {
    if (!e.id || !goIds.has(e.id)) return;
    if (e.event === 'acquired') {
      const id = e.id;
      arrive({
        who: id,
        key: e.key!,
        token: BigInt(e.rev!),
        header: BigInt(e.header!),
        incr: async () => {
          const r = await go.call(id, 'incr', { counter }, 'incremented');
          return { value: Number(r.value), ok: r.ok === true };
        },
        release: async () => void (await go.call(id, 'unlock', {}, 'unlocked')),
      });
    } else if (e.event === 'error' || e.event === 'cancelled') {
      arrivals.fail(new Error(`Go ${e.id}: ${JSON.stringify(e)}`));
    }
  });
  try {
    // The first holder is ours.
    const s0 = await Session.create(c, { ttl: 30 });
    sessions.push(s0);
    const h0 = await new Mutex(s0, name).lock();
    arrive({
      who: 'ts-holder',
      key: h0.key,
      token: h0.fencingToken,
      incr: () => tsIncrement(c, h0, counter),
      release: async () => void (await h0.unlock()),
    });
    const created = new Map<string, bigint>();
    for (const w of who) {
      const from = log.events.length;
      let key: string;
      if (goIds.has(w)) {
        key = `${name}/${await go.session(w)}`;
        go.send(w, 'lock', { name });
      } else {
        const s = await Session.create(c, { ttl: 30 });
        sessions.push(s);
        const m = new Mutex(s, name);
        key = m.key;
        m.lock().then(
          (h) =>
            arrive({
              who: w,
              key: h.key,
              token: h.fencingToken,
              incr: () => tsIncrement(c, h, counter),
              release: async () => void (await h.unlock()),
            }),
          (err: unknown) => arrivals.fail(err as Error),
        );
      }
      created.set(w, (await log.put(key, from)).createRevision);
    }
    await settle();

    const order: string[] = [];
    const holdings: Holding[] = [];
    const values: number[] = [];
    // Everyone is queued; nobody but the first holder may have acquired.
    assert.equal(arrivals.queued, 1, `only the first holder holds while the others queue: ${violations.join('; ')}`);
    for (let i = 0; i <= who.length; i++) {
      const h = await arrivals.next();
      order.push(h.who);
      holdings.push(h);
      const r = await h.incr();
      assert.ok(r.ok, `${h.who}'s owner compare held while it held the lock`);
      values.push(r.value);
      holder = null; // from here on we have told it to release
      await h.release();
    }
    return { order: order.slice(1), created, holdings, values, violations, log };
  } catch (err) {
    await log.close(); // on success the caller closes it, after reading it
    throw err;
  } finally {
    stop();
  }
}
