// Mutex against a real single-member etcd: acquisition, fairness, fencing, loss, cleanup, names,
// and interoperation with `etcdctl lock`. Each test uses its own lock names and leaves nothing.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  Client,
  InvalidArgumentError,
  LockLostError,
  Mutex,
  Session,
  SessionExpiredError,
  op,
  withLock,
} from '../src/index.js';
import { startProxy, type EtcdCluster } from '../src/testing/index.js';
import { queueOf } from '../src/queue/state.js';
import { EventLog, aborted, assertNoKeys, grpcHandled, grpcStarted, killEtcdctls, metric, spawnEtcdctl, track, waitFor, etcdForFile, openSessions, closeAll, serverState, waitersBlocked, withSessions } from './helpers.js';

const ROOT = 'test/mutex/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)), { beforeChecks: killEtcdctls });

/** Sessions on `on` (default: this file's client) that the test closes at its end. */
const sessions = (n: number, ttl = 30, on: Client = client): Promise<Session[]> => openSessions(on, n, ttl);


/**
 * Resolves once etcd has answered `n` more Txns than `base`: with nothing else running, a waiter's
 * enqueue and its predecessor lookup are 2 Txns, after which it is blocked on its watch.
 */
async function txnsAnswered(base: number, n: number): Promise<void> {
  await waitFor(async () => (await grpcHandled(etcd.clientUrls[0]!, 'Txn')) >= base + n, `${n} Txns answered`);
}
const txnsNow = (): Promise<number> => grpcHandled(etcd.clientUrls[0]!, 'Txn');
/** Watchers open on etcd now: the base for {@link blocked}. */
const watchersNow = async (): Promise<number> => (await serverState(etcd.clientUrls[0]!)).watchers;
/** `n` more waiters than `base` (watchersNow) blocked on their watch, with nothing in flight. */
const blocked = (base: number, n = 1, what?: string): Promise<void> => waitersBlocked(etcd.clientUrls[0]!, base, n, what);

describe('Mutex: acquire and release', () => {
  it('an uncontended lock has key <name>/<lease hex> and fencing token = its CreateRevision', async () => {
    const p = fresh('uncontended');
    await withSessions(client, p, 1, async ([s]) => {
      const h = await new Mutex(s!, `${p}lock`).lock();
      assert.equal(h.key, `${p}lock/${s!.leaseId.toString(16)}`);
      const kv = await client.get(h.key);
      assert.ok(kv, 'the key exists while held');
      assert.equal(h.fencingToken, kv.createRevision);
      assert.equal(kv.lease, s!.leaseId, 'the key lives on the session lease');
      assert.equal(kv.value.length, 0, 'a lock key has an empty value, as Go and etcdctl write it');
      h.assertHeld();
      assert.equal(h.signal.aborted, false);
      assert.equal(h.session, s);
      await h.unlock();
      assert.equal(await client.get(h.key), undefined, 'unlock removes the key');
    });
  });

  it('unlock is idempotent, and a released handle is no longer held', async () => {
    const p = fresh('unlock-twice');
    const [s] = await sessions(1);
    try {
      const h = await new Mutex(s!, `${p}lock`).lock();
      await h.unlock();
      await h.unlock();
      await Promise.all([h.unlock(), h.unlock()]);
      assert.throws(() => h.assertHeld(), LockLostError);
    } finally {
      await closeAll([s!]);
    }
  });

  it('an old handle unlocked again after re-locking on the same session leaves the new holding alone', async () => {
    const p = fresh('unlock-after-relock');
    await withSessions(client, p, 1, async ([s]) => {
      const m = new Mutex(s!, `${p}lock`);
      const first = await m.lock();
      await first.unlock();
      const second = await m.lock();
      assert.equal(second.key, first.key, 'same session, same name: same key');
      assert.ok(second.fencingToken > first.fencingToken);
      await first.unlock();
      assert.equal((await client.get(second.key))?.createRevision, second.fencingToken);
      second.assertHeld();
      await second.unlock();
    });
  });

  it('a retried unlock whose first attempt already committed cannot delete a later lock (etcd 22082)', async () => {
    const p = fresh('22082');
    await withSessions(client, p, 1, async ([s]) => {
      const m = new Mutex(s!, `${p}lock`);
      const first = await m.lock();
      // The first unlock committed but its answer was lost: the key is gone, the handle does not know.
      await client.delete(first.key);
      const second = await m.lock();
      assert.ok(second.fencingToken > first.fencingToken);
      await first.unlock(); // the "retry"
      assert.equal((await client.get(second.key))?.createRevision, second.fencingToken, 'the second holding survives');
      second.assertHeld();
      await second.unlock();
    });
  });

  it('withLock returns fn’s value and unlocks', async () => {
    const p = fresh('withlock');
    const [s] = await sessions(1);
    try {
      const out = await withLock(s!, `${p}lock`, async (h) => {
        assert.ok(await client.get(h.key));
        return 42;
      });
      assert.equal(out, 42);
      await assertNoKeys(client, p);
    } finally {
      await closeAll([s!]);
    }
  });

  it('withLock unlocks when fn throws, and rethrows', async () => {
    const p = fresh('withlock-throws');
    const [s] = await sessions(1);
    try {
      const boom = new Error('boom');
      await assert.rejects(
        withLock(s!, `${p}lock`, () => {
          throw boom;
        }),
        (e) => e === boom,
      );
      await assertNoKeys(client, p);
    } finally {
      await closeAll([s!]);
    }
  });

  it('await using unlocks at the end of the block', async () => {
    const p = fresh('await-using');
    const [s] = await sessions(1);
    try {
      let key: string;
      {
        await using h = await new Mutex(s!, `${p}lock`).lock();
        key = h.key;
        assert.ok(await client.get(key));
      }
      assert.equal(await client.get(key), undefined);
    } finally {
      await closeAll([s!]);
    }
  });

  it('closing the holder’s session releases the lock to the next waiter', async () => {
    const p = fresh('close-releases');
    await withSessions(client, p, 2, async ([a, b]) => {
      const held = await new Mutex(a!, `${p}lock`).lock();
      const waiting = new Mutex(b!, `${p}lock`).lock();
      await a!.close();
      const h = await waiting;
      assert.ok(h.fencingToken > held.fencingToken);
      await h.unlock();
    });
  });

  it('lock() on an ended session fails at once with its SessionExpiredError', async () => {
    const p = fresh('dead-session');
    const [s] = await sessions(1);
    await s!.close();
    await assert.rejects(new Mutex(s!, `${p}lock`).lock(), (e: unknown) => e instanceof SessionExpiredError && e.reason === 'closed');
    await assertNoKeys(client, p);
  });
});

describe('Mutex: names and keys', () => {
  for (const [what, name] of [
    ['an empty name', ''],
    ['a trailing slash', 'locks/a/'],
    ['a non-string', 42],
    ['more than 4096 bytes', 'x'.repeat(4097)],
  ] as const) {
    it(`rejects ${what} with InvalidArgumentError`, async () => {
      const [s] = await sessions(1);
      try {
        assert.throws(() => new Mutex(s!, name as string), (e: unknown) => {
          assert.ok(e instanceof InvalidArgumentError, String(e));
          assert.match(e.message, /lock name/);
          return true;
        });
      } finally {
        await closeAll([s!]);
      }
    });
  }

  it('lock "a" is not blocked by a holder of lock "a/b" (etcd 6278)', async () => {
    const p = fresh('6278');
    await withSessions(client, p, 2, async ([s1, s2]) => {
      const nested = await new Mutex(s1!, `${p}a/b`).lock();
      const outer = await new Mutex(s2!, `${p}a`).lock({ share: true }); // would hang if "a/b/..." counted as a holder
      const tried = await new Mutex(s2!, `${p}a`).tryLock({ share: true }); // reentrant on the same key
      assert.ok(tried);
      await outer.unlock();
      await nested.unlock();
    });
  });

  it('a stray key without a lease under "a/" does not block lock "a" (etcd 6631)', async () => {
    const p = fresh('6631');
    const [s] = await sessions(1);
    try {
      // Hex-looking and older than any participant: Go would wait for it forever.
      await client.put(`${p}a/1234abcd`, '');
      await client.put(`${p}a/data`, '', { lease: s!.leaseId }); // leased, but not a participant key
      const h = await new Mutex(s!, `${p}a`).lock();
      await h.unlock();
      const t = await new Mutex(s!, `${p}a`).tryLock();
      assert.ok(t, 'tryLock looks past stray keys too');
      await t.unlock();
    } finally {
      await closeAll([s!]);
      await client.delete(p, { prefix: true });
    }
  });

  it('reentrancy as in Go, with share: true: two Mutex objects on one session and one name share one key, counted', async () => {
    const p = fresh('reentrant');
    await withSessions(client, p, 1, async ([s]) => {
      const h1 = await new Mutex(s!, `${p}lock`).lock({ share: true });
      const h2 = await new Mutex(s!, `${p}lock`).lock({ share: true });
      assert.equal(h2.key, h1.key);
      assert.equal(h2.fencingToken, h1.fencingToken);
      assert.equal((await client.getPrefix(`${p}lock/`)).count, 1n);
      await h2.unlock(); // ends h2 only: h1 still uses the key
      await aborted(h2.signal);
      h1.assertHeld();
      assert.equal((await client.get(h1.key))?.createRevision, h1.fencingToken);
      await h1.unlock(); // the last user: the key goes
      assert.equal(await client.get(h1.key), undefined);
      assert.throws(() => h1.assertHeld(), LockLostError);
    });
  });
});

describe('Mutex: fairness', () => {
  it('50 waiters acquire strictly in enqueue (CreateRevision) order with increasing tokens, one at a time', { timeout: 120_000 }, async () => {
    const p = fresh('fifo');
    const name = `${p}lock`;
    const n = 50;
    const clients = [client, new Client({ endpoints: etcd.endpoints }), new Client({ endpoints: etcd.endpoints })];
    const ss = await Promise.all(Array.from({ length: n + 1 }, (_, i) => Session.create(clients[i % clients.length]!, { ttl: 30 })));
    const log = new EventLog(client, `${name}/`);
    try {
      await log.ready;
      const holder = await new Mutex(ss[0]!, name).lock();
      // Enqueue one at a time, each only after its key is in etcd, so the enqueue order is known.
      const order: number[] = [];
      const tokens: bigint[] = [];
      const created: bigint[] = [];
      let inside = 1; // the first holder
      let maxInside = 1;
      const pending: ReturnType<typeof track<void>>[] = [];
      const watchBase = await watchersNow();
      for (let i = 1; i <= n; i++) {
        const m = new Mutex(ss[i]!, name);
        const from = log.events.length;
        pending.push(
          track(
            m.lock().then(async (h) => {
              inside++;
              maxInside = Math.max(maxInside, inside);
              order.push(i);
              tokens.push(h.fencingToken);
              // Hold across a round trip, so that a second holder granted meanwhile is counted.
              await client.get(h.key);
              inside--;
              await h.unlock();
            }),
          ),
        );
        created.push((await log.put(m.key, from)).createRevision);
      }
      // Every waiter's enqueue (and any look-up) answered: each is blocked on its watch.
      await blocked(watchBase, n, `${n} waiters blocked`);
      assert.ok(
        pending.every((t) => !t.settled),
        'no waiter acquires while the first holder holds',
      );
      const handoffStart = log.events.length;
      const eventsBefore = await metric(etcd.clientUrls[0]!, 'etcd_debugging_mvcc_events_total');
      const txnsBefore = await grpcStarted(etcd.clientUrls[0]!, 'Txn');
      const rangesBefore = await grpcStarted(etcd.clientUrls[0]!, 'Range');
      inside--;
      await holder.unlock();
      await Promise.all(pending.map((t) => t.promise));
      assert.equal(maxInside, 1, 'one holder at a time, the first holder included');
      const txns = (await grpcStarted(etcd.clientUrls[0]!, 'Txn')) - txnsBefore;
      const ranges = (await grpcStarted(etcd.clientUrls[0]!, 'Range')) - rangesBefore;

      assert.deepEqual(order, Array.from({ length: n }, (_, i) => i + 1), 'acquired in enqueue order');
      assert.deepEqual(tokens, created, 'fencing token = the CreateRevision of each waiter’s key');
      for (let i = 1; i < n; i++) assert.ok(tokens[i]! > tokens[i - 1]!, 'tokens strictly increase');
      // Between two holders nothing else happened under the prefix: the holders' deletes, in order,
      // and (the queue is longer than 32) each holder's one mark on its own key while it held.
      await log.deleted(`${name}/${ss[n]!.leaseId.toString(16)}`, handoffStart);
      const eventsSent = (await metric(etcd.clientUrls[0]!, 'etcd_debugging_mvcc_events_total')) - eventsBefore;
      const handoffs = log.events.slice(handoffStart);
      assert.deepEqual(
        handoffs.filter((e) => e.type === 'delete').map((e) => e.key),
        ss.map((s) => `${name}/${s.leaseId.toString(16)}`),
      );
      let holding = `${name}/${ss[0]!.leaseId.toString(16)}`;
      const marked = new Set<string>();
      for (const e of handoffs) {
        if (e.type === 'delete') {
          holding = `${name}/${ss[ss.findIndex((s) => `${name}/${s.leaseId.toString(16)}` === e.key) + 1]?.leaseId.toString(16)}`;
          continue;
        }
        assert.equal(e.key, holding, `a put during the handoffs is the current holder's mark: ${e.key}`);
        assert.ok(!marked.has(e.key), `one mark per holder: ${e.key}`);
        marked.add(e.key);
      }
      const marks = marked.size;
      assert.ok(marks >= n - 2, `behind a queue of ${n}, the holders mark (${marks} of ${n})`);
      // etcd counts every event it sends to a watcher: our log got its events, so the rest went to
      // waiters. One release, one wake-up: n deletes for the n handoffs, plus each mark (but the
      // last holder's) to the one waiter behind its key, which it does not wake. The waiters whose
      // enqueue read every key before theirs (at most 8: the look-up's page) watch the whole prefix
      // instead, to take over with no read: each of them gets at most every event of the handoffs.
      const lastMarked = marked.has(`${name}/${ss[n]!.leaseId.toString(16)}`) ? 1 : 0;
      // A client that joined this queue while it was long watches all of it (queue-view.ts), so
      // that its next join reads nothing: each such view gets every event of the handoffs too. A
      // waiter that read every key older than its own (at most 8, near the head) watches the whole
      // prefix too (older.ts).
      const views = clients.filter((c) => queueOf(c).views.live(Buffer.from(`${name}/`))).length;
      const toWaiters = eventsSent - handoffs.length * (1 + views);
      assert.ok(
        toWaiters >= n - 8 + marks - lastMarked && toWaiters <= n + marks - lastMarked + 8 * handoffs.length,
        `watch events delivered to waiters during the handoffs: ${toWaiters}`,
      );
      // And so one read per handoff, not a read by every waiter (a herd would cost about n*n/2).
      assert.ok(txns + ranges <= 3 * (n + 1), `handoffs cost ${txns} Txns and ${ranges} Ranges for ${n + 1} holders`);
    } finally {
      await log.close();
      await closeAll(ss);
      await Promise.all(clients.slice(1).map((c) => c.close()));
    }
    await assertNoKeys(client, p);
  });

  it('a waiter whose predecessor gives up keeps its place behind the holder', async () => {
    const p = fresh('skip');
    const name = `${p}lock`;
    const [a, b, c] = await sessions(3);
    const log = new EventLog(client, `${name}/`);
    try {
      await log.ready;
      const held = await new Mutex(a!, name).lock();
      const ac = new AbortController();
      const mb = new Mutex(b!, name);
      let base = await watchersNow();
      const bWait = mb.lock({ signal: ac.signal });
      bWait.catch(() => {});
      await blocked(base);
      const mc = new Mutex(c!, name);
      base = await watchersNow();
      const cWait = track(mc.lock());
      await blocked(base);
      const txnBase = await txnsNow();
      ac.abort(new Error('b gives up'));
      await assert.rejects(bWait, /b gives up/);
      // c was watching b's key; it must look again, find the holder, and keep waiting.
      await log.deleted(mb.key);
      assert.ok(await client.get(held.key));
      // b's guarded delete answered, and nothing in flight after it: c, whose enqueue read both keys
      // before its own and which watches the prefix, only took b off them and waits for the holder.
      await txnsAnswered(txnBase, 1);
      await blocked(0, 0, 'c waiting again');
      assert.equal(cWait.settled, false);
      await held.unlock();
      const h = await cWait.promise;
      assert.ok(h);
      await h.unlock();
    } finally {
      await log.close();
      await closeAll([a!, b!, c!]);
    }
    await assertNoKeys(client, p);
  });

  it('mutual exclusion: concurrent read-modify-write of a counter under the lock loses no update', { timeout: 60_000 }, async () => {
    const p = fresh('counter');
    const workers = 10;
    const rounds = 5;
    const ss = await sessions(workers);
    let inside = 0;
    let maxInside = 0;
    try {
      await client.put(`${p}counter`, '0');
      await Promise.all(
        ss.map(async (s) => {
          for (let r = 0; r < rounds; r++) {
            await withLock(s, `${p}lock`, async () => {
              inside++;
              maxInside = Math.max(maxInside, inside);
              const v = Number((await client.get(`${p}counter`))!.value.toString());
              await client.put(`${p}counter`, String(v + 1));
              inside--;
            });
          }
        }),
      );
      assert.equal(maxInside, 1);
      assert.equal((await client.get(`${p}counter`))?.value.toString(), String(workers * rounds));
    } finally {
      await closeAll(ss);
      await client.delete(p, { prefix: true });
    }
  });
});

describe('Mutex: tryLock', () => {
  it('returns null while another session holds it, and leaves no key', async () => {
    const p = fresh('trylock-held');
    await withSessions(client, p, 2, async ([a, b]) => {
      const held = await new Mutex(a!, `${p}lock`).lock();
      assert.equal(await new Mutex(b!, `${p}lock`).tryLock(), null);
      assert.deepEqual(
        (await client.getPrefix(`${p}lock/`)).kvs.map((kv) => kv.key.toString()),
        [held.key],
      );
      await held.unlock();
    });
  });

  it('takes a free lock', async () => {
    const p = fresh('trylock-free');
    await withSessions(client, p, 1, async ([s]) => {
      const h = await new Mutex(s!, `${p}lock`).tryLock();
      assert.ok(h, "tryLock returns a handle when the lock is free");
      assert.equal((await client.get(h.key))?.createRevision, h.fencingToken);
      await h.unlock();
    });
  });
  it(
    'tryLock whose enqueue answer was lost and retried leaves no key behind',
    { timeout: 30_000 },
    async () => {
      const p = fresh('trylock-retried');
      const name = `${p}lock`;
      const proxy = await startProxy(etcd.endpoints[0]!);
      const slow = new Client({ endpoints: proxy.endpoint });
      const [a] = await sessions(1);
      const [b] = await sessions(1, 30, slow);
      const log = new EventLog(client, `${name}/`);
      try {
        await log.ready;
        const held = await new Mutex(a!, name).lock();
        const m = new Mutex(b!, name);
        proxy.delay(1000);
        const tried = m.tryLock();
        await log.put(m.key); // the enqueue Txn committed; its answer is held in the proxy
        proxy.delay(0);
        proxy.cut(); // ... and lost: the client retries the (guarded, idempotent) Txn, which finds our key
        assert.equal(await tried, null, 'the lock is held by a');
        const left = await client.get(m.key);
        await held.unlock();
        assert.equal(left, undefined, 'our key stayed in the queue: it would hold the lock for nobody while b lives');
      } finally {
        proxy.delay(0);
        await log.close();
        await closeAll([a!, b!]);
        await slow.close();
        await proxy.close();
      }
      await assertNoKeys(client, p);
    },
  );
});

describe('Mutex: giving up and losing', () => {
  it('aborting a waiter deletes its key and rejects with the signal’s reason', async () => {
    const p = fresh('abort');
    const name = `${p}lock`;
    const [a, b] = await sessions(2);
    const log = new EventLog(client, `${name}/`);
    try {
      await log.ready;
      const held = await new Mutex(a!, name).lock();
      const ac = new AbortController();
      const m = new Mutex(b!, name);
      const base = await watchersNow();
      const waiting = m.lock({ signal: ac.signal });
      await blocked(base); // queued and waiting
      const reason = new Error('caller gave up');
      ac.abort(reason);
      await assert.rejects(waiting, (e) => e === reason);
      assert.equal(await client.get(m.key), undefined, 'our queued key is gone when lock() rejects');
      await held.unlock();
    } finally {
      await log.close();
      await closeAll([a!, b!]);
    }
    await assertNoKeys(client, p);
  });

  it('AbortSignal.timeout while waiting rejects with TimeoutError and deletes our key', async () => {
    const p = fresh('timeout');
    await withSessions(client, p, 2, async ([a, b]) => {
      const held = await new Mutex(a!, `${p}lock`).lock();
      const m = new Mutex(b!, `${p}lock`);
      await assert.rejects(m.lock({ signal: AbortSignal.timeout(300) }), (e: unknown) => e instanceof DOMException && e.name === 'TimeoutError');
      assert.equal(await client.get(m.key), undefined);
      await held.unlock();
    });
  });

  it('an already-aborted signal rejects before anything is written', async () => {
    const p = fresh('pre-aborted');
    const [s] = await sessions(1);
    try {
      const reason = new Error('never mind');
      await assert.rejects(new Mutex(s!, `${p}lock`).lock({ signal: AbortSignal.abort(reason) }), (e) => e === reason);
      await assertNoKeys(client, p);
    } finally {
      await closeAll([s!]);
    }
  });

  it('a waiter whose lease is revoked fails with SessionExpiredError without waiting for the holder', async () => {
    const p = fresh('waiter-session-lost');
    const name = `${p}lock`;
    const [a] = await sessions(1);
    const [b] = await sessions(1, 3);
    try {
      const held = await new Mutex(a!, name).lock();
      const m = new Mutex(b!, name);
      const base = await watchersNow();
      const waiting = m.lock();
      await blocked(base); // queued and waiting
      await client.leaseRevoke(b!.leaseId);
      // The holder never lets go during this: lock() can only end because the session did.
      await assert.rejects(waiting, (e: unknown) => {
        assert.ok(e instanceof SessionExpiredError, String(e));
        assert.equal(e.leaseId, b!.leaseId);
        assert.equal(e.reason, 'lease-gone');
        return true;
      });
      held.assertHeld();
      await held.unlock();
    } finally {
      await closeAll([a!, b!]);
    }
    await assertNoKeys(client, p);
  });

  it(
    'a waiter whose lease is revoked reports SessionExpiredError even when its turn comes before the session notices',
    async () => {
      const p = fresh('waiter-lease-gone-race');
      const name = `${p}lock`;
      const [a, b] = await sessions(2, 30); // next renewal in 10 s: the session cannot notice first
      try {
        const held = await new Mutex(a!, name).lock();
        const base = await watchersNow();
        const waiting = new Mutex(b!, name).lock();
        waiting.catch(() => {});
        await blocked(base);
        await client.leaseRevoke(b!.leaseId); // b's key goes with its lease
        await held.unlock(); // wakes b, which finds its own key gone
        await assert.rejects(waiting, (e: unknown) => {
          assert.ok(e instanceof SessionExpiredError, `expected SessionExpiredError, got ${String(e)}`);
          assert.equal(e.reason, 'lease-gone');
          return true;
        });
      } finally {
        await closeAll([a!, b!]);
      }
      await assertNoKeys(client, p);
    },
  );

  it(
    'aborting lock() after its enqueue committed but before the answer arrived leaves no key behind',
    async () => {
      const p = fresh('abort-in-enqueue');
      const name = `${p}lock`;
      const proxy = await startProxy(etcd.endpoints[0]!);
      const slow = new Client({ endpoints: proxy.endpoint });
      const [a] = await sessions(1);
      const [b] = await sessions(1, 30, slow);
      const log = new EventLog(client, `${name}/`);
      try {
        await log.ready;
        const held = await new Mutex(a!, name).lock();
        proxy.delay(1000); // each direction: the answer to b's enqueue arrives a second after it commits
        const ac = new AbortController();
        const m = new Mutex(b!, name);
        const waiting = m.lock({ signal: ac.signal });
        await log.put(m.key); // committed (seen by our direct watch); the answer is still in the proxy
        const reason = new Error('gave up');
        ac.abort(reason);
        proxy.delay(0); // bytes already queued keep their delay; the clean-up need not wait
        await assert.rejects(waiting, (e) => e === reason);
        const left = await client.get(m.key);
        await held.unlock();
        // Left behind, the key keeps its place while b's session lives: it would "hold" the lock
        // for nobody and block every later waiter.
        assert.equal(left, undefined, 'the queued key was left behind');
      } finally {
        proxy.delay(0);
        await log.close();
        await closeAll([a!, b!]);
        await slow.close();
        await proxy.close();
      }
      await assertNoKeys(client, p);
    },
  );

  it('an operator deleting the holder’s key aborts handle.signal with LockLostError', async () => {
    const p = fresh('key-deleted');
    await withSessions(client, p, 1, async ([s]) => {
      const h = await new Mutex(s!, `${p}lock`).lock();
      const signal = h.signal; // start watching
      assert.equal(signal.aborted, false);
      await client.delete(h.key);
      const reason = await aborted(signal);
      assert.ok(reason instanceof LockLostError, String(reason));
      assert.equal(reason.key, h.key);
      assert.throws(() => h.assertHeld(), LockLostError);
      await h.unlock(); // nothing to delete; must not throw
    });
  });

  it('an operator moving the holder’s key off its lease ends the holding, and the next waiter takes over', async () => {
    const p = fresh('key-moved');
    const name = `${p}lock`;
    const [a, b] = await sessions(2);
    try {
      const held = await new Mutex(a!, name).lock();
      const signal = held.signal;
      const base = await watchersNow();
      const next = new Mutex(b!, name).lock();
      await blocked(base);
      await client.put(held.key, ''); // no lease: now stray data, which waiters skip (etcd 6631)
      const reason = await aborted(signal);
      assert.ok(reason instanceof LockLostError, String(reason));
      const h = await next;
      assert.ok(h.fencingToken > held.fencingToken);
      await h.unlock();
    } finally {
      await closeAll([a!, b!]);
      await client.delete(p, { prefix: true }); // the moved key belongs to no lease
    }
  });

  it('revoking the holder’s lease aborts handle.signal with LockLostError', async () => {
    const p = fresh('holder-session-lost');
    await withSessions(client, p, { n: 1, ttl: 3 }, async ([s]) => {
      const h = await new Mutex(s!, `${p}lock`).lock();
      await client.leaseRevoke(s!.leaseId);
      const reason = await aborted(h.signal);
      assert.ok(reason instanceof LockLostError, String(reason));
      assert.throws(() => h.assertHeld(), LockLostError);
    });
  });

  it('a partitioned holder’s signal fires before a waiter can take over the lock', { timeout: 30_000 }, async () => {
    const p = fresh('partitioned-holder');
    const name = `${p}lock`;
    const proxy = await startProxy(etcd.endpoints[0]!);
    const cut = new Client({ endpoints: proxy.endpoint });
    // TTL 6 s: the holder's deadline comes 1 s (the margin) before the server can expire its lease.
    const [a] = await sessions(1, 6, cut);
    const [b] = await sessions(1);
    try {
      const held = await new Mutex(a!, name).lock();
      let holderKnew = false;
      held.signal.addEventListener('abort', () => (holderKnew = true));
      const base = await watchersNow();
      const next = new Mutex(b!, name).lock().then((h) => ({ h, holderKnew }));
      await blocked(base);
      proxy.blackhole(true); // the holder can no longer renew; the server expires its lease after 6 s
      const { h, holderKnew: knewFirst } = await next;
      assert.ok(knewFirst, 'the waiter got the lock while the old holder still believed it held it');
      const reason = held.signal.reason as LockLostError;
      assert.ok(reason instanceof LockLostError, String(reason));
      assert.ok(reason.cause instanceof SessionExpiredError && reason.cause.reason === 'deadline', String(reason.cause));
      assert.throws(() => held.assertHeld(), LockLostError);
      assert.ok(h.fencingToken > held.fencingToken);
      await h.unlock();
    } finally {
      await cut.close();
      await proxy.close();
      await closeAll([a!, b!]);
    }
    await assertNoKeys(client, p);
  });

  it('ownerCompare() lets a Txn through while held and stops it after the key is lost', async () => {
    const p = fresh('owner-compare');
    const [s] = await sessions(1);
    try {
      const h = await new Mutex(s!, `${p}lock`).lock();
      const fenced = (v: string) => client.txn({ compare: [h.ownerCompare()], success: [op.put(`${p}data`, v)], failure: [] });
      assert.equal((await fenced('1')).succeeded, true);
      await client.delete(h.key);
      // Even a new key for the same session and name is another incarnation: still refused.
      const again = await new Mutex(s!, `${p}lock`).lock();
      assert.equal((await fenced('2')).succeeded, false);
      assert.equal((await client.get(`${p}data`))?.value.toString(), '1');
      await again.unlock();
    } finally {
      await closeAll([s!]);
      await client.delete(p, { prefix: true });
    }
  });
});

describe('Mutex: interoperation with etcdctl lock', () => {
  /** etcdctl leaves its lease to expire (10 s): revoke it so the file ends with no lease. */
  const revokeFromKey = (key: string) => client.leaseRevoke(BigInt(`0x${key.slice(key.lastIndexOf('/') + 1)}`));

  it('while etcdctl holds the lock, lock() waits, and gets it once etcdctl exits', { timeout: 30_000 }, async () => {
    const p = fresh('etcdctl-holds');
    const name = `${p}lock`;
    const [s] = await sessions(1);
    const ctl = spawnEtcdctl(etcd.endpoints[0]!, ['lock', name]);
    const log = new EventLog(client, `${name}/`);
    try {
      await log.ready;
      const ctlKey = (await ctl.line(new RegExp(`^${name}/[0-9a-f]+$`))).trim(); // it prints its key once it holds
      const ctlKv = await client.get(ctlKey);
      assert.ok(ctlKv, 'etcdctl’s key exists');
      assert.equal(ctlKey, `${name}/${ctlKv.lease.toString(16)}`, 'etcdctl uses the same key layout');
      const m = new Mutex(s!, name);
      const base = await watchersNow();
      const waiting = track(m.lock());
      await log.put(m.key);
      await blocked(base); // our enqueue (and any look-up) answered: we are waiting
      assert.equal(waiting.settled, false, 'we wait behind etcdctl');
      await ctl.kill();
      const h = await waiting.promise;
      assert.equal(await client.get(ctlKey), undefined, 'we got it only after etcdctl’s key went');
      assert.ok(h.fencingToken > ctlKv.createRevision);
      await h.unlock();
      await revokeFromKey(ctlKey);
    } finally {
      await ctl.kill();
      await log.close();
      await closeAll([s!]);
    }
    await assertNoKeys(client, p);
  });

  it('while we hold the lock, etcdctl lock waits, and runs its command only after we unlock', { timeout: 30_000 }, async () => {
    const p = fresh('we-hold');
    const name = `${p}lock`;
    const [s] = await sessions(1);
    const log = new EventLog(client, `${name}/`);
    let ctl: ReturnType<typeof spawnEtcdctl> | undefined;
    try {
      await log.ready;
      const h = await new Mutex(s!, name).lock();
      ctl = spawnEtcdctl(etcd.endpoints[0]!, ['lock', name, '--', 'sh', '-c', 'echo "acquired $ETCD_LOCK_KEY $ETCD_LOCK_REV"']);
      const from = log.events.length;
      const ctlPut = await log.next((e) => e.type === 'put' && e.key !== h.key, from); // etcdctl queued behind us
      assert.ok(ctlPut.createRevision > h.fencingToken);
      assert.equal(ctl.stdout(), '', 'etcdctl must not run its command while we hold the lock');
      await h.unlock();
      const ourDelete = await log.deleted(h.key);
      const [, key, rev] = (await ctl.line(/^acquired /)).split(' ');
      assert.equal(key, ctlPut.key);
      // ETCD_LOCK_REV is the revision at which etcdctl found itself the owner: after our release.
      assert.ok(BigInt(rev!) >= ourDelete.rev, `etcdctl acquired at ${rev}, we released at ${ourDelete.rev}`);
      assert.equal(await ctl.exited, 0, ctl.stderr());
      await log.deleted(ctlPut.key);
      await revokeFromKey(ctlPut.key);
    } finally {
      await ctl?.kill();
      await log.close();
      await closeAll([s!]);
    }
    await assertNoKeys(client, p);
  });
});
