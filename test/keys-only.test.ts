// From etcd 3.7 a keys-only Range (in a Txn too) is served from the in-memory index and its
// KeyValues carry `lease = 0`. Waiters find their predecessor with such a read (cheap however long
// the queue), so a waiter that trusted that field took every predecessor for stray data and
// grabbed a held lock. These tests fail that way on 3.7 without the fix, and pass on every version.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { type Client, Election, Mutex, Session, op } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { etcdForFile, serverState, waitersBlocked } from './helpers.js';

const ROOT = 'test/keys-only/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

/** Watchers open on etcd now: the base for settledOrBlocked. */
const watchersNow = async (): Promise<number> => (await serverState(etcd.clientUrls[0]!)).watchers;

/**
 * Settles with 'settled' once `p` settles, or with 'blocked' once one more waiter than at `base` is
 * blocked on a watch with nothing in flight (waitersBlocked): it decided to wait (how many calls it
 * made first is the library's business: a short queue's look-up rides on the enqueue).
 */
async function settledOrBlocked(p: Promise<unknown>, base: number): Promise<'settled' | 'blocked'> {
  const stop = new AbortController();
  const settled = p.then(
    () => 'settled' as const,
    () => 'settled' as const,
  );
  const blocked = waitersBlocked(etcd.clientUrls[0]!, base, 1, 'the waiter blocked on its watch', stop.signal).then(
    () => 'blocked' as const,
    (err: unknown) => {
      if (stop.signal.aborted) return 'settled' as const; // stopped looking: `p` settled first
      throw err;
    },
  );
  try {
    return await Promise.race([settled, blocked]);
  } finally {
    stop.abort();
  }
}

describe('keys-only reads (etcd 3.7 answers them with lease = 0)', () => {
  it('a keys-only read on this server: the lease field is what the waiters must not trust', async () => {
    const p = fresh('probe');
    const s = await Session.create(client);
    try {
      await client.put(`${p}k`, 'v', { lease: s.leaseId });
      const full = await client.range({ key: Buffer.from(`${p}k`) });
      const keysOnly = await client.range({ key: Buffer.from(`${p}k`), keysOnly: true });
      assert.equal(full.kvs[0]?.lease, s.leaseId, 'a full read carries the lease on every version');
      // 3.4 to 3.6 fill it in, 3.7 leaves it at 0: either is fine, the waiters below must work with both.
      assert.ok(keysOnly.kvs[0]?.lease === s.leaseId || keysOnly.kvs[0]?.lease === 0n);
      console.log(`# keys-only read's lease field on this server: ${keysOnly.kvs[0]?.lease === 0n ? '0 (in-memory path)' : 'filled in'}`);
    } finally {
      await s.close();
    }
  });

  it('a waiter does not take a lock that someone holds', async () => {
    const p = fresh('held');
    const name = `${p}lock`;
    const [a, b] = await Promise.all([Session.create(client), Session.create(client)]);
    try {
      const held = await new Mutex(a, name).lock();
      const base = await watchersNow();
      const waiting = new Mutex(b, name).lock();
      // Enqueue (and any look-up and check): then it waits on its watch.
      assert.equal(await settledOrBlocked(waiting, base), 'blocked', 'lock() returned while another session held the lock');
      await held.unlock();
      const next = await waiting;
      assert.ok(next.fencingToken > held.fencingToken);
      await next.unlock();
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('a queue of five is served in order, one holder at a time', async () => {
    const p = fresh('queue');
    const name = `${p}lock`;
    const ss = await Promise.all(Array.from({ length: 5 }, () => Session.create(client)));
    try {
      const first = await new Mutex(ss[0]!, name).lock();
      const order: number[] = [];
      let inside = 0;
      const waiters: Promise<void>[] = [];
      for (let i = 1; i < ss.length; i++) {
        const base = await watchersNow();
        const w = new Mutex(ss[i]!, name).lock().then(async (h) => {
          inside++;
          order.push(i);
          assert.equal(inside, 1, 'two holders at once');
          await client.get(`${p}work`); // a round trip inside: an overlap would show
          inside--;
          await h.unlock();
        });
        waiters.push(w);
        assert.equal(await settledOrBlocked(w, base), 'blocked', `waiter ${i} took the lock out of turn`);
      }
      await first.unlock();
      await Promise.all(waiters);
      assert.deepEqual(order, [1, 2, 3, 4]);
    } finally {
      await Promise.all(ss.map((s) => s.close()));
    }
  });

  it('a stray key without a lease (etcd 6631) is skipped, before the holder and between waiters', async () => {
    const p = fresh('stray');
    const name = `${p}lock`;
    const [a, b] = await Promise.all([Session.create(client), Session.create(client)]);
    try {
      await client.put(`${name}/abc`, 'stray, older than everyone');
      const held = await new Mutex(a, name).lock(); // the stray key is older, and does not block
      await client.put(`${name}/def`, 'stray, between holder and waiter');
      const base = await watchersNow();
      const waiting = new Mutex(b, name).lock();
      assert.equal(await settledOrBlocked(waiting, base), 'blocked', 'a stray key hid the holder');
      await held.unlock();
      const next = await waiting;
      await next.unlock();
      const t = await new Mutex(b, name).tryLock();
      assert.ok(t, 'tryLock is not blocked by stray keys');
      await t.unlock();
    } finally {
      await client.txn({ compare: [], success: [op.delete(`${name}/abc`), op.delete(`${name}/def`)], failure: [] });
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('tryLock fails while someone holds the lock, and leaves no key', async () => {
    const p = fresh('trylock');
    const name = `${p}lock`;
    const [a, b] = await Promise.all([Session.create(client), Session.create(client)]);
    try {
      const held = await new Mutex(a, name).lock();
      const m = new Mutex(b, name);
      assert.equal(await m.tryLock(), null);
      assert.equal(await client.get(m.key), undefined);
      await held.unlock();
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('an election follower does not lead while the leader is there, and takes over on resign', async () => {
    const p = fresh('election');
    const name = `${p}election`;
    const [a, b] = await Promise.all([Session.create(client), Session.create(client)]);
    try {
      const leader = await new Election(a, name).campaign('a');
      const base = await watchersNow();
      const following = new Election(b, name).campaign('b');
      assert.equal(await settledOrBlocked(following, base), 'blocked', 'campaign() led while another candidate led');
      assert.equal((await new Election(b, name).leader())?.value, 'a');
      await leader.proclaim('a2'); // a put on the predecessor's key keeps its lease: no wake-up
      await leader.resign();
      const next = await following;
      assert.ok(next.fencingToken > leader.fencingToken);
      await next.resign();
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});
