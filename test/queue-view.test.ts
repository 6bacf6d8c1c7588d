// Joining a long queue reads nothing of it (src/queue/queue-view.ts): a client that joined a lock's
// queue while it was long watches the whole prefix, and its next joins find their predecessor there,
// exactly, keys of other processes (Go's package, etcdctl) included. Against a real etcd; every wait
// is on a promise or on the server's own counters, never a sleep.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, Mutex, Session, type LockHandle } from '../src/index.js';
import { queueOf } from '../src/queue/state.js';
import { mayLoseWatchEvents } from '../src/queue/watch-trust.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { assertNoKeys, closeAll, etcdForFile, grpcStarted, serverState, track, type Tracked, waitersBlocked } from './helpers.js';

const ROOT = 'test/queue-view/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));
const T = { timeout: 120_000 };

/** The file's etcd may lose a watch event near a compaction (then the client makes no view). */
const lossy = (): boolean => mayLoseWatchEvents(etcd.version);
const watchersNow = async (): Promise<number> => (await serverState(etcd.clientUrls[0]!)).watchers;

/** A queue longer than 32 on `name`, all on client `c`: the holder and `n - 1` waiters, enqueued one after the other. */
async function longQueue(
  c: Client,
  name: string,
  n: number,
): Promise<{ sessions: Session[]; holder: LockHandle; waiting: ReturnType<typeof track<void>>[] }> {
  const sessions = await Promise.all(Array.from({ length: n }, () => Session.create(c, { ttl: 30 })));
  const holder = await new Mutex(sessions[0]!, name).lock();
  const waiting: ReturnType<typeof track<void>>[] = [];
  const base = await watchersNow();
  for (const s of sessions.slice(1)) {
    waiting.push(track(new Mutex(s, name).lock().then((h) => void h.unlock())));
    await waitersBlocked(etcd.clientUrls[0]!, base, waiting.length, 'the waiter blocked');
  }
  return { sessions, holder, waiting };
}

/** Counts the requests of client `c` that read a range of keys (a count, a look-up), not single keys. */
function rangeReads(c: Client): { readonly n: number; restore(): void } {
  let n = 0;
  const wide = (r: { rangeEnd?: Uint8Array } | undefined): boolean => (r?.rangeEnd?.length ?? 0) > 0;
  const txn = c.txn.bind(c);
  const range = c.range.bind(c);
  const own = (name: 'txn' | 'range', value: unknown): void =>
    void Object.defineProperty(c, name, { configurable: true, writable: true, value });
  own('txn', ((req, ...rest) => {
    for (const o of [...(req.success ?? []), ...(req.failure ?? [])]) if (wide(o.requestRange)) n++;
    return txn(req, ...rest);
  }) as typeof c.txn);
  own('range', ((req, ...rest) => {
    if (wide(req)) n++;
    return range(req, ...rest);
  }) as typeof c.range);
  return {
    get n() {
      return n;
    },
    restore() {
      delete (c as unknown as Record<string, unknown>).txn;
      delete (c as unknown as Record<string, unknown>).range;
    },
  };
}

describe('joining a long queue', T, () => {
  it('once the queue is long, a join reads no range of keys: no count in its enqueue, no look-up of its predecessor', T, async () => {
    const p = fresh('flat');
    const name = `${p}lock`;
    const c = new Client({ endpoints: etcd.endpoints });
    let q: Awaited<ReturnType<typeof longQueue>> | undefined;
    const more = await Session.create(c, { ttl: 30 });
    try {
      q = await longQueue(c, name, 35);
      const view = queueOf(c).views.live(Buffer.from(`${name}/`));
      // A member whose watch may lose an event near a compaction gets no view: a lost create would
      // name a predecessor older than the real one.
      assert.equal(view !== undefined, !lossy(), lossy() ? `no view on etcd ${etcd.version}` : 'the client watches the long queue');
      const base = await watchersNow();
      const txns = await grpcStarted(etcd.clientUrls[0]!, 'Txn');
      const spy = rangeReads(c);
      let joined: Tracked<undefined>;
      try {
        joined = track(new Mutex(more, name).lock().then((h) => void h.unlock()));
        await waitersBlocked(etcd.clientUrls[0]!, base, 1, 'the new waiter blocked');
      } finally {
        spy.restore();
      }
      if (lossy()) {
        assert.ok(spy.n > 0, 'without a view the join reads its place');
      } else {
        assert.equal(spy.n, 0, 'no request of the join read a range of keys');
        // The enqueue (a put), and the check of our key and our predecessor unless the watch covers it.
        assert.ok((await grpcStarted(etcd.clientUrls[0]!, 'Txn')) - txns <= 2);
      }
      await q.holder.unlock();
      await Promise.all([...q.waiting, joined].map((t) => t.promise));
    } finally {
      await closeAll([...(q?.sessions ?? []), more]);
      await c.close();
    }
    await assertNoKeys(client, p);
  });

  it("a key of another process (Go's layout, on its own lease) that joined meanwhile is our predecessor", T, async () => {
    const p = fresh('interop');
    const name = `${p}lock`;
    const c = new Client({ endpoints: etcd.endpoints });
    let q: Awaited<ReturnType<typeof longQueue>> | undefined;
    const late = await Session.create(c, { ttl: 30 });
    // Another process's key, as Go's Mutex or etcdctl lock writes it: `<name>/<lease hex>` on its lease.
    const lease = await client.leaseGrant(30);
    const other = `${name}/${lease.id.toString(16)}`;
    try {
      q = await longQueue(c, name, 35);
      assert.equal(queueOf(c).views.live(Buffer.from(`${name}/`)) !== undefined, !lossy(), 'a view where it can be exact');
      await client.put(other, '', { lease: lease.id });
      const base = await watchersNow();
      let held: LockHandle | undefined;
      const joined = track(new Mutex(late, name).lock().then((h) => void (held = h)));
      await waitersBlocked(etcd.clientUrls[0]!, base, 1, 'the late waiter blocked');
      // Every waiter of this client ahead of the other process's key goes; ours stays behind that key.
      await q.holder.unlock();
      await Promise.all(q.waiting.map((t) => t.promise));
      await waitersBlocked(etcd.clientUrls[0]!, 0, 1, 'only the late waiter blocked');
      assert.equal(joined.settled, false, "the late waiter waits for the other process's key");
      assert.equal(await client.delete(other), 1n);
      await joined.promise;
      assert.ok(held);
      await held.unlock();
    } finally {
      await client.leaseRevoke(lease.id).catch(() => {});
      await closeAll([...(q?.sessions ?? []), late]);
      await c.close();
    }
    await assertNoKeys(client, p);
  });
});
