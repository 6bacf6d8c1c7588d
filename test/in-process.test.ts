// Calls of one process on one session and one name. Two lock() calls
// exclude each other (the second waits in the process, sending nothing, then holds with a new key
// incarnation, behind the other processes' waiters already queued); the same deliberate choice for
// Semaphore, Election and the RWMutex's write lock, while its read locks share; an RWMutex
// downgrade (rLock while holding lock) works, an upgrade fails at once with LockUpgradeError.
// Against a real single-member etcd; no sleeps: waits are on promises, signals and etcd's metrics.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { type Client, Election, Mutex, RWMutex, Semaphore } from '../src/index.js';
import * as lib from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import {
  etcdForFile,
  grpcHandled,
  serverState,
  settle,
  settledOrHang,
  track,
  waitFor,
  waitersBlocked,
  keysUnder,
  withSessions,
} from './helpers.js';

const ROOT = 'test/in-process/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));
/** A hang guard (a self-deadlock must fail, not hang the run), not a timing assertion. */
const T = { timeout: 60_000 };

/**
 * Txns etcd has answered: a call waiting in the process adds none (no enqueue, no write). The holder
 * it waits for starts watching its key, so that a loss frees the turn: a watch and one read.
 */
const calls = (): Promise<number> => grpcHandled(etcd.clientUrls[0]!, 'Txn');
/** Lets the process run, then waits until etcd has nothing in flight, twice in a row (as waitersBlocked does). */
async function quiet(): Promise<void> {
  await settle();
  let n = 0;
  await waitFor(async () => (n = (await serverState(etcd.clientUrls[0]!)).inFlight === 0 ? n + 1 : 0) >= 2, 'nothing in flight');
}

describe('two calls of one process on one session and name', T, () => {
  it('Mutex: the second lock() waits in the process, sending nothing, then holds with a new fencing token, behind another process already queued', async () => {
    const p = fresh('mutex');
    const name = `${p}lock`;
    await withSessions(client, p, 2, async ([a, b]) => {
      const first = await new Mutex(a!, name).lock();
      const base = (await serverState(etcd.clientUrls[0]!)).watchers;
      const theirs = track(new Mutex(b!, name).lock());
      await waitersBlocked(etcd.clientUrls[0]!, base, 1, "another session's lock() waits");
      const before = await calls();
      const second = track(new Mutex(a!, name).lock());
      await quiet();
      assert.equal(second.settled, false, 'the second call waits for the first');
      assert.equal(await calls(), before, 'no request to etcd while it waits in the process');
      assert.equal(await new Mutex(a!, name).tryLock(), null, 'tryLock() is busy at once too');
      assert.equal(await calls(), before, 'nor for tryLock()');
      assert.deepEqual(
        (await keysUnder(client, `${name}/`)).sort(),
        [first.key, `${name}/${b!.leaseId.toString(16)}`].sort(),
        'no key of its own yet',
      );
      await first.unlock();
      // Fair to the other process: it queued before our second call had a key.
      const t = await theirs.promise;
      assert.ok(t.fencingToken > first.fencingToken);
      assert.equal(second.settled, false, 'still behind the other process');
      await t.unlock();
      const mine = await second.promise;
      assert.equal(mine.key, first.key, 'same session and name: the same key');
      assert.ok(mine.fencingToken > t.fencingToken, 'a new incarnation: a new fencing token');
      await mine.unlock();
    });
  });

  it('an abort of the waiting call sends nothing and leaves the first holding; the next call still gets its turn', async () => {
    const p = fresh('abort');
    const name = `${p}lock`;
    await withSessions(client, p, 1, async ([a]) => {
      const first = await new Mutex(a!, name).lock();
      const stop = new AbortController();
      const waiting = track(new Mutex(a!, name).lock({ signal: stop.signal }));
      const next = track(new Mutex(a!, name).lock());
      const reason = new Error('gave up');
      stop.abort(reason);
      await assert.rejects(waiting.promise, (e) => e === reason);
      first.assertHeld();
      await first.unlock();
      const h = await settledOrHang(next, 'the call behind the aborted one');
      assert.ok(h.fencingToken > first.fencingToken);
      await h.unlock();
    });
  });

  it('a holding lost unnoticed (its key deleted by hand, its signal never looked at) gives up its turn to the next call', async () => {
    const p = fresh('lost');
    await withSessions(client, p, 1, async ([a]) => {
      const m = new Mutex(a!, `${p}lock`);
      const first = await m.lock();
      await client.delete(first.key);
      const next = await settledOrHang(track(m.lock()), 'the call behind a dead holding');
      assert.ok(next.fencingToken > first.fencingToken);
      assert.equal(first.signal.aborted, true, 'the waiting call made it watch, and it saw the loss');
      await first.unlock(); // a dead handle: nothing to delete, and not the new key
      next.assertHeld();
      await next.unlock();
    });
  });

  it('a call waiting since before the first call held: the first holding, lost unnoticed, still gives up its turn', async () => {
    const p = fresh('lost-later');
    const name = `${p}lock`;
    await withSessions(client, p, 2, async ([a, b]) => {
      const theirs = await new Mutex(b!, name).lock();
      const base = (await serverState(etcd.clientUrls[0]!)).watchers;
      const waiting = track(new Mutex(a!, name).lock());
      await waitersBlocked(etcd.clientUrls[0]!, base, 1, 'the first call waits behind the other session');
      // Waits in the process while the first call only waits: no holding of it to watch yet.
      const next = track(new Mutex(a!, name).lock());
      await theirs.unlock();
      const first = await waiting.promise;
      await client.delete(first.key); // by hand; nobody looks at first.signal
      const h = await settledOrHang(next, 'the call behind a holding lost after it began to wait');
      assert.ok(h.fencingToken > first.fencingToken);
      assert.equal(first.signal.aborted, true, 'the holding watched its key, and saw the loss');
      await first.unlock(); // a dead handle: not the new key
      h.assertHeld();
      await h.unlock();
    });
  });

  it('Semaphore: one permit per session at a time; a second acquire() waits, then holds a new key', async () => {
    const p = fresh('sem');
    await withSessions(client, p, 1, async ([a]) => {
      const sem = new Semaphore(a!, `${p}sem`, { permits: 2 });
      const first = await sem.acquire();
      const second = track(sem.acquire());
      await quiet();
      assert.equal(second.settled, false, 'a free permit is not taken twice by one session');
      assert.equal(await sem.tryAcquire(), null);
      await first.release();
      const h = await second.promise;
      assert.ok(h.fencingToken > first.fencingToken);
      await h.release();
    });
  });

  it('Election: a second campaign waits for the first term to end, then leads a new term', async () => {
    const p = fresh('elect');
    await withSessions(client, p, 1, async ([a]) => {
      const e = new Election(a!, `${p}elect`);
      const first = await e.campaign('one');
      const second = track(e.campaign('two'));
      await quiet();
      assert.equal(second.settled, false);
      assert.equal((await e.leader())?.value, 'one', 'the first term goes on with its value');
      await first.resign();
      const h = await second.promise;
      assert.ok(h.fencingToken > first.fencingToken, 'a new term');
      assert.equal((await e.leader())?.value, 'two');
      await h.resign();
    });
  });

  it('RWMutex: read locks of one session share; its write locks exclude each other', async () => {
    const p = fresh('rw');
    await withSessions(client, p, 1, async ([a]) => {
      const rw = new RWMutex(a!, `${p}rw`);
      const [r1, r2] = await Promise.all([rw.rLock(), rw.rLock()]);
      await Promise.all([r1.unlock(), r2.unlock()]);
      const w1 = await rw.lock();
      const w2 = track(rw.lock());
      await quiet();
      assert.equal(w2.settled, false);
      await w1.unlock();
      const h = await w2.promise;
      assert.ok(h.fencingToken > w1.fencingToken);
      await h.unlock();
    });
  });

  it('RWMutex: a read waiting for its siblings to leave (a writer queued behind them) is freed by their loss unnoticed', async () => {
    const p = fresh('rw-lost');
    const name = `${p}rw`;
    await withSessions(client, p, 2, async ([a, b]) => {
      const rw = new RWMutex(a!, name);
      const first = await rw.rLock();
      const base = (await serverState(etcd.clientUrls[0]!)).watchers;
      const writer = track(new RWMutex(b!, name).lock());
      await waitersBlocked(etcd.clientUrls[0]!, base, 1, "another session's writer waits behind the read");
      // Asked for after the writer queued: it must not join the first read's key, so it waits until that one left.
      const second = track(rw.rLock());
      await quiet();
      assert.equal(second.settled, false);
      await client.delete(first.key); // by hand; nobody looks at first.signal
      const w = await settledOrHang(writer, 'the writer behind the deleted read key');
      await quiet();
      assert.equal(second.settled, false, 'queued behind the writer now');
      await w.unlock();
      const h = await settledOrHang(second, 'the read behind a read holding lost while it waited');
      assert.ok(h.fencingToken > w.fencingToken);
      assert.equal(first.signal.aborted, true, 'the read holding watched its key, and saw the loss');
      await first.unlock(); // a dead handle: not the new key
      await h.unlock();
    });
  });
});

describe('RWMutex on one session: downgrade and upgrade', T, () => {
  it('downgrade: rLock() while holding lock() holds at once; no writer slips in until the read lock goes too', async () => {
    const p = fresh('down');
    const name = `${p}rw`;
    await withSessions(client, p, 2, async ([a, b]) => {
      const rw = new RWMutex(a!, name);
      const w = await rw.lock();
      const base = (await serverState(etcd.clientUrls[0]!)).watchers;
      const other = track(new RWMutex(b!, name).lock());
      await waitersBlocked(etcd.clientUrls[0]!, base, 1, "another session's writer waits");
      const r = await settledOrHang(track(rw.rLock()), 'the downgraded read lock');
      assert.equal(r.mode, 'read');
      r.assertHeld();
      await w.unlock();
      r.assertHeld();
      assert.ok(await client.get(r.key), 'the key the read lock holds is still there');
      await quiet();
      assert.equal(other.settled, false, 'no writer between the write lock and the read lock');
      await r.unlock();
      const theirs = await other.promise;
      assert.ok(theirs.fencingToken > w.fencingToken);
      await theirs.unlock();
    });
  });

  it('upgrade: lock() while holding rLock() fails at once with LockUpgradeError saying what to do, sending nothing', async () => {
    const p = fresh('up');
    await withSessions(client, p, 1, async ([a]) => {
      const rw = new RWMutex(a!, `${p}rw`);
      const r = await rw.rLock();
      const before = await calls();
      const Upgrade = (lib as Record<string, unknown>).LockUpgradeError as (new (...args: never[]) => Error) | undefined;
      assert.equal(typeof Upgrade, 'function', 'LockUpgradeError is exported');
      const check = (e: unknown): boolean => {
        assert.ok(e instanceof Upgrade!, String(e));
        assert.match((e as Error).message, /Unlock the read lock first, then call lock\(\)/);
        return true;
      };
      await assert.rejects(settledOrHang(track(rw.lock()), 'lock() while holding the read lock'), check);
      await assert.rejects(rw.tryLock(), check);
      assert.equal(await calls(), before, 'refused before anything is sent');
      r.assertHeld();
      await r.unlock();
      const w = await rw.lock(); // once the read lock is gone, the write lock is taken as usual
      await w.unlock();
    });
  });
});
