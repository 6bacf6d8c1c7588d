// Bad input against real etcd: odd names and TTLs, and an operator deleting keys or revoking leases
// by hand (etcd out of reach: bad-input-unreachable.test.ts; compaction and thousands of waiters:
// bad-input-history.test.ts). Every test cleans up; `after` proves nothing is left (no key, no lease).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  type Client,
  Election,
  InvalidArgumentError,
  LockLostError,
  MAX_TTL,
  Mutex,
  Session,
  SessionExpiredError,
  currentLeader,
  observeLeader,
  op,
} from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import {
  EventLog,
  aborted,
  assertNoKeys,
  track,
  etcdForFile,
  openSessions,
  closeAll,
  serverState,
  waitersBlocked,
  withSessions,
} from './helpers.js';

const ROOT = 'test/bad-input/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

const sessions = (n: number, ttl = 30, on: Client = client): Promise<Session[]> => openSessions(on, n, ttl);

describe('names', () => {
  it('an empty name is refused before anything is sent, saying what to give', async () => {
    const [s] = await sessions(1);
    try {
      for (const [make, example] of [
        [() => new Mutex(s!, ''), /locks\/orders/],
        [() => new Election(s!, ''), /elections\/scheduler/],
      ] as const) {
        assert.throws(make, (e: unknown) => e instanceof InvalidArgumentError && /empty/.test(e.message) && example.test(e.message));
      }
      await assert.rejects(currentLeader(client, ''), InvalidArgumentError);
      assert.throws(() => observeLeader(client, ''), InvalidArgumentError);
    } finally {
      await closeAll([s]);
    }
  });

  it('a trailing slash, a NUL byte or a non-string is refused with the fix in the message', async () => {
    const [s] = await sessions(1);
    try {
      assert.throws(
        () => new Mutex(s!, 'locks/a/'),
        (e: unknown) => e instanceof InvalidArgumentError && /trailing slash/.test(e.message),
      );
      assert.throws(
        () => new Mutex(s!, 'locks/a\0b'),
        (e: unknown) => e instanceof InvalidArgumentError && /NUL/.test(e.message),
      );
      assert.throws(
        () => new Mutex(s!, 42 as unknown as string),
        (e: unknown) => e instanceof InvalidArgumentError && /string/.test(e.message),
      );
      assert.throws(() => new Election(s!, undefined as unknown as string), InvalidArgumentError);
    } finally {
      await closeAll([s]);
    }
  });

  it('nested names are separate locks: "n", "n/a" and "n/a/b" are held at once, and each queue is its own', async () => {
    const p = fresh('nested');
    const ss = await sessions(4);
    try {
      const names = [`${p}n`, `${p}n/a`, `${p}n/a/b`];
      const held = await Promise.all(names.map((n, i) => new Mutex(ss[i]!, n).lock()));
      assert.deepEqual(
        held.map((h) => h.key),
        names.map((n, i) => `${n}/${ss[i]!.leaseId.toString(16)}`),
      );
      // A waiter on the middle name waits for that name's holder only.
      const log = new EventLog(client, `${p}n`);
      await log.ready;
      const watchers = (await serverState(etcd.clientUrls[0]!)).watchers;
      const waiter = track(new Mutex(ss[3]!, names[1]!).lock());
      // Its enqueue (and any look-up and check) answered: it is blocked on its watch.
      await waitersBlocked(etcd.clientUrls[0]!, watchers, 1, 'the waiter to block on its predecessor');
      await held[0]!.unlock();
      await held[2]!.unlock();
      // Both deletes delivered to a watcher of the names, and one more round trip: a waiter woken by
      // either (watching a range that covers "n" or "n/a/b") would have acted on it by now.
      await log.deleted(held[0]!.key);
      await log.deleted(held[2]!.key);
      await client.get(held[1]!.key);
      await log.close();
      assert.equal(waiter.settled, false);
      await held[1]!.unlock();
      const h = await waiter.promise;
      assert.equal(h.key, `${names[1]}/${ss[3]!.leaseId.toString(16)}`);
      await h.unlock();
    } finally {
      await closeAll(ss);
    }
    await assertNoKeys(client, p);
  });

  it('a name of exactly 4096 bytes locks and campaigns; 4097 bytes is refused naming the limit', async () => {
    const p = fresh('long');
    await withSessions(client, p, 2, async ([a, b]) => {
      const name = p + 'x'.repeat(4096 - Buffer.byteLength(p));
      assert.equal(Buffer.byteLength(name), 4096);
      const h = await new Mutex(a!, name).lock();
      assert.equal((await client.get(h.key))?.createRevision, h.fencingToken);
      const waiter = track(new Mutex(b!, name).lock());
      await h.unlock();
      await (await waiter.promise).unlock();
      const leader = await new Election(a!, `${name.slice(0, -1)}e`).campaign('v');
      assert.equal((await currentLeader(client, `${name.slice(0, -1)}e`))?.key, leader.key);
      await leader.resign();
      assert.throws(
        () => new Mutex(a!, `${name}y`),
        (e: unknown) => e instanceof InvalidArgumentError && /4097 bytes/.test(e.message) && /4096/.test(e.message),
      );
    });
  });

  it('the length limit counts bytes, not characters (multi-byte UTF-8)', async () => {
    const [s] = await sessions(1);
    try {
      const name = '€'.repeat(1366); // 1366 characters, 4098 bytes
      assert.throws(
        () => new Mutex(s!, name),
        (e: unknown) => e instanceof InvalidArgumentError && /4098 bytes/.test(e.message),
      );
    } finally {
      await closeAll([s]);
    }
  });

  it('a non-ASCII name round-trips: the key is the UTF-8 name plus the lease id', async () => {
    const p = fresh('utf8');
    await withSessions(client, p, 1, async ([s]) => {
      const name = `${p}verrou/ünïcødé/🔒`;
      const h = await new Mutex(s!, name).lock();
      const kv = await client.get(h.key);
      assert.equal(kv?.key.toString('utf8'), `${name}/${s!.leaseId.toString(16)}`);
      await h.unlock();
    });
  });
});

describe('TTL', () => {
  for (const ttl of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, MAX_TTL + 1, 1e20]) {
    it(`ttl ${ttl} is refused with InvalidArgumentError naming the range, and grants nothing`, async () => {
      await assert.rejects(
        Session.create(client, { ttl }),
        (e: unknown) => e instanceof InvalidArgumentError && /ttl/.test(e.message) && /1 to 9000000000/.test(e.message),
      );
      assert.deepEqual(await client.leaseLeases(), []);
    });
  }

  it('a negative or non-finite safety margin is refused', async () => {
    for (const safetyMarginMs of [-1, Number.NaN, Number.POSITIVE_INFINITY]) {
      await assert.rejects(Session.create(client, { ttl: 10, safetyMarginMs }), InvalidArgumentError);
    }
    assert.deepEqual(await client.leaseLeases(), []);
  });

  it('the largest TTL (MAX_TTL) is granted; the session lives, locks, and closes', async () => {
    const p = fresh('huge-ttl');
    const s = await Session.create(client, { ttl: MAX_TTL });
    try {
      assert.equal(s.ttl, MAX_TTL);
      const remaining = s.remainingMs();
      assert.ok(Number.isFinite(remaining) && remaining > 1000 * (MAX_TTL - 60), `remainingMs ${remaining}`);
      assert.equal(s.signal.aborted, false);
      const t = await client.leaseTimeToLive(s.leaseId);
      assert.equal(t.grantedTtl, MAX_TTL);
      const h = await new Mutex(s, `${p}lock`).lock();
      h.assertHeld();
      await h.unlock();
    } finally {
      await s.close();
    }
    assert.equal((await client.leaseTimeToLive(s.leaseId)).ttl, -1);
    await assertNoKeys(client, p);
  });

  it('ttl 1: the session keeps the TTL etcd actually granted (etcd raises tiny TTLs to its minimum)', async () => {
    const s = await Session.create(client, { ttl: 1 });
    try {
      const t = await client.leaseTimeToLive(s.leaseId);
      assert.equal(s.ttl, t.grantedTtl);
      assert.ok(s.ttl >= 1);
      assert.ok(s.remainingMs() <= s.ttl * 1000);
    } finally {
      await s.close();
    }
  });
});

describe('an operator at the keyboard', () => {
  it('deleting the holder’s key: the holder is told, the next waiter gets the lock, the old handle cannot touch it', async () => {
    const p = fresh('op-del-holder');
    const name = `${p}lock`;
    await withSessions(client, p, 2, async ([a, b]) => {
      const h = await new Mutex(a!, name).lock();
      const lost = aborted(h.signal);
      const next = track(new Mutex(b!, name).lock());
      await client.delete(h.key);
      assert.ok((await lost) instanceof LockLostError);
      const h2 = await next.promise;
      assert.ok(h2.fencingToken > h.fencingToken);
      await h.unlock(); // guarded: must not delete b's key
      assert.equal((await client.get(h2.key))?.createRevision, h2.fencingToken);
      const t = await client.txn({ compare: [h.ownerCompare()], success: [op.put(`${p}data`, 'stale')], failure: [] });
      assert.equal(t.succeeded, false);
      assert.equal(await client.get(`${p}data`), undefined);
      await h2.unlock();
    });
  });

  it('deleting a waiter’s key: that waiter fails with LockLostError, the one behind it moves up', async () => {
    const p = fresh('op-del-waiter');
    const name = `${p}lock`;
    const [a, b, c] = await sessions(3);
    const log = new EventLog(client, `${name}/`);
    try {
      await log.ready;
      const h = await new Mutex(a!, name).lock();
      const mb = new Mutex(b!, name);
      const wb = track(mb.lock());
      await log.put(mb.key);
      const mc = new Mutex(c!, name);
      const wc = track(mc.lock());
      await log.put(mc.key);
      await client.delete(mb.key);
      await h.unlock();
      await assert.rejects(wb.promise, LockLostError);
      const hc = await wc.promise;
      assert.equal(hc.key, mc.key);
      await hc.unlock();
    } finally {
      await log.close();
      await closeAll([a, b, c]);
    }
    await assertNoKeys(client, p);
  });

  it('deleting every key of the lock at once: holder and all waiters end, none hangs', { timeout: 30_000 }, async () => {
    const p = fresh('op-del-all');
    const name = `${p}lock`;
    const ss = await sessions(5);
    const log = new EventLog(client, `${name}/`);
    try {
      await log.ready;
      const h = await new Mutex(ss[0]!, name).lock();
      const lost = aborted(h.signal);
      const waiters = ss.slice(1).map((s) => track(new Mutex(s, name).lock()));
      for (const s of ss.slice(1)) await log.put(`${name}/${s.leaseId.toString(16)}`);
      await client.delete(`${name}/`, { prefix: true });
      assert.ok((await lost) instanceof LockLostError);
      const results = await Promise.allSettled(waiters.map((w) => w.promise));
      for (const r of results) {
        // Each waiter either finds its key gone (LockLostError) or, if it re-queued first, holds it.
        if (r.status === 'fulfilled') await r.value.unlock();
        else assert.ok(r.reason instanceof LockLostError, String(r.reason));
      }
    } finally {
      await log.close();
      await closeAll(ss);
    }
    await assertNoKeys(client, p);
  });

  it('revoking the holder’s lease by hand: the holder is told, its session ends (lease_gone), the waiter gets the lock', async () => {
    const p = fresh('op-revoke');
    const name = `${p}lock`;
    await withSessions(client, p, { n: 2, ttl: 3 }, async ([a, b]) => {
      const h = await new Mutex(a!, name).lock();
      const lost = aborted(h.signal);
      const next = track(new Mutex(b!, name).lock());
      await client.leaseRevoke(a!.leaseId);
      assert.ok((await lost) instanceof LockLostError);
      const h2 = await next.promise;
      assert.ok(h2.fencingToken > h.fencingToken);
      const end = await a!.done;
      assert.ok(end instanceof SessionExpiredError);
      assert.equal(end.reason, 'lease_gone');
      await assert.rejects(new Mutex(a!, name).lock(), SessionExpiredError);
      await h2.unlock();
    });
  });
});
