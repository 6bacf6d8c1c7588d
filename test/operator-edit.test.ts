// An operator's plain `etcdctl put` (no --lease) on a participant key: the key keeps its
// CreateRevision and loses its lease. Its holder loses (moved_off_lease), waiters skip it, and no
// later call of its own session ever adopts it: the next lock() or campaign() replaces it with a key
// of its own on its lease (a new fencing token, queued at the back), whether it was called after the
// edit or already waited in the process when it happened. Never a second holder or leader, never a
// token reused or going back. Real etcd, no mocks; every wait is on a promise, a signal or a watch.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  Client,
  Election,
  LeadershipLostError,
  LockLostError,
  Mutex,
  RWLockLostError,
  RWMutex,
  Semaphore,
  currentLeader,
  observeLeader,
  op,
  type LeaderEvent,
} from '../src/index.js';
import { txnRange } from '../src/client/kv.js';
import { startProxy } from '../src/testing/index.js';
import { aborted, assertNoKeys, closeAll, etcdFile, track, type Tracked } from './helpers.js';

const ROOT = 'test/operator-edit/';
let client: Client;
let endpoints: () => string[];
const file = etcdFile(ROOT, (e, c) => {
  client = c;
  endpoints = () => e.endpoints;
});
const { fresh, sessions } = file;

/** The key as etcd has it now. */
async function read(key: string) {
  return (await client.range({ key: Buffer.from(key) })).kvs[0];
}

/**
 * The operator's edit: a plain put, no lease, read back in the same Txn. A call of the holder's
 * session waiting in the process replaces the edited key (a guarded delete, then a create) as soon
 * as the holder hears of the edit: a read after the put may find it gone or replaced.
 */
async function plainPut(key: string, value = 'by hand'): Promise<void> {
  const t = await client.txn({ compare: [], success: [op.put(key, value), op.get(key)], failure: [] });
  const kv = txnRange(t, 1).kvs[0];
  assert.equal(kv?.lease, 0n, 'the edit left the key without a lease');
  assert.ok(kv.createRevision < t.header.revision, 'the edit kept the key’s CreateRevision: an edit, not a new key');
}

describe('an operator puts a participant key without its lease', { timeout: 60_000 }, () => {
  it('lock() called after the edit: a key of its own (a new token, behind the others), never the edited one', async () => {
    const p = fresh('lock-after');
    const name = `${p}lock`;
    const [a, c] = await sessions(2);
    try {
      const h1 = await new Mutex(a!, name).lock();
      const lost = aborted(h1.signal);
      await plainPut(h1.key);
      const reason = await lost;
      assert.ok(reason instanceof LockLostError && reason.reason === 'moved_off_lease', String(reason));
      // Another session takes the lock: the edited key is stray data, which waiters skip.
      const hc = await new Mutex(c!, name).lock();
      assert.ok(hc.fencingToken > h1.fencingToken);
      // The holder's own next call waits for C, with a key of its own: not the edited one, which
      // would hold at once (it is the oldest) with the old token.
      const again = track(new Mutex(a!, name).lock());
      const gone = await replacedBefore(h1.key, h1.fencingToken, again);
      assert.equal(gone.lease, a!.leaseId, 'the replacement is on our lease');
      assert.ok(gone.createRevision > hc.fencingToken, 'queued behind the holder');
      assert.equal(again.settled, false, 'no second holder while C holds');
      await hc.unlock();
      const h2 = await again.promise;
      assert.ok(h2.fencingToken > hc.fencingToken, `token ${h2.fencingToken} after ${hc.fencingToken}: never reused or going back`);
      assert.equal((await read(h2.key))?.lease, a!.leaseId);
      await h2.unlock();
      // The lost handle says so; its guarded delete touches nothing of the new key.
      const r = await h1.unlock();
      assert.equal(r.state, 'lost');
      assert.ok(r.error instanceof LockLostError && r.error.reason === 'moved_off_lease');
    } finally {
      await closeAll([a!, c!]);
    }
    await assertNoKeys(client, p);
  });

  it('lock() after the edit with nobody else queued holds on a new key, and another session then waits', async () => {
    const p = fresh('lock-alone');
    const name = `${p}lock`;
    const [a, c] = await sessions(2);
    try {
      const h1 = await new Mutex(a!, name).lock();
      await plainPut(h1.key);
      // The edited key is the only one under the name: taken as ours, it would count 1 and hold at
      // once with the old token, while every other session skips it as stray data.
      const h2 = await new Mutex(a!, name).lock();
      assert.ok(h2.fencingToken > h1.fencingToken, `a new token, not ${h2.fencingToken}`);
      assert.equal((await read(h2.key))?.lease, a!.leaseId);
      const other = track(new Mutex(c!, name).lock());
      await waitForKeys(`${name}/`, 2);
      assert.equal(other.settled, false, 'no second holder');
      await h2.unlock();
      await (await other.promise).unlock();
      await h1.unlock();
    } finally {
      await closeAll([a!, c!]);
    }
    await assertNoKeys(client, p);
  });

  it('lock() already waiting in the process when the edit happens: it too takes a key of its own', async () => {
    const p = fresh('lock-waiting');
    const name = `${p}lock`;
    const [a, c] = await sessions(2);
    try {
      const h1 = await new Mutex(a!, name).lock();
      // A second call of the same session waits in the process, behind h1; C waits in etcd.
      const second = track(new Mutex(a!, name).lock());
      const third = track(new Mutex(c!, name).lock());
      await waitForKeys(`${name}/`, 2);
      await plainPut(h1.key);
      // C skips the stray key and holds; the second call must queue behind C with a new key.
      const hc = await third.promise;
      assert.ok(hc.fencingToken > h1.fencingToken);
      const replaced = await replacedBefore(h1.key, h1.fencingToken, second);
      assert.ok(replaced.createRevision > hc.fencingToken);
      assert.equal(second.settled, false, 'no second holder while C holds');
      await hc.unlock();
      const h2 = await second.promise;
      assert.ok(h2.fencingToken > hc.fencingToken);
      await h2.unlock();
      await h1.unlock();
    } finally {
      await closeAll([a!, c!]);
    }
    await assertNoKeys(client, p);
  });

  it('tryLock() after the edit does not take the edited key for a free lock', async () => {
    const p = fresh('trylock');
    const name = `${p}lock`;
    const [a, c] = await sessions(2);
    try {
      const h1 = await new Mutex(a!, name).lock();
      const lost = aborted(h1.signal);
      await plainPut(h1.key);
      await lost;
      const hc = await new Mutex(c!, name).lock();
      assert.equal(await new Mutex(a!, name).tryLock(), null, 'busy: C holds');
      await hc.unlock();
      const h2 = await new Mutex(a!, name).tryLock();
      assert.ok(h2 && h2.fencingToken > hc.fencingToken, 'a fresh key, a fresh token');
      await h2.unlock();
    } finally {
      await closeAll([a!, c!]);
    }
    await assertNoKeys(client, p);
  });

  it('campaign() after the edit: a new term behind the new leader; never two leaders, never an old term', async () => {
    const p = fresh('campaign-after');
    const name = `${p}election`;
    const [a, b] = await sessions(2);
    const stop = new AbortController();
    try {
      const ea = new Election(a!, name);
      const ha = await ea.campaign('a');
      const tb = track(new Election(b!, name).campaign('b'));
      await waitForKeys(`${name}/`, 2);
      const lost = aborted(ha.signal);
      await plainPut(ha.key, 'edited');
      assert.ok((await lost) instanceof LeadershipLostError);
      const hb = await tb.promise;
      assert.ok(hb.fencingToken > ha.fencingToken);
      const events = observeLeader(client, name, { signal: stop.signal });
      const first = (await events.next()).value as LeaderEvent;
      assert.equal(first.type === 'leader' && first.leader.key, hb.key, 'observe() names b');
      // a campaigns again on the same session: a new key on its lease, a new term after b's.
      const again = track(ea.campaign('a again'));
      const replaced = await replacedBefore(ha.key, ha.fencingToken, again);
      assert.ok(replaced.createRevision > hb.fencingToken, 'queued behind the leader');
      assert.equal(replaced.value.toString(), 'a again');
      assert.equal(again.settled, false, 'no second leader while b leads');
      assert.equal((await currentLeader(client, name))?.key, hb.key, 'leader() still says b');
      await hb.resign();
      const ha2 = await again.promise;
      assert.ok(ha2.fencingToken > hb.fencingToken, 'a new term, after b’s');
      assert.equal((await currentLeader(client, name))?.fencingToken, ha2.fencingToken);
      await ha2.resign();
      await ha.resign();
    } finally {
      stop.abort();
      await closeAll([a!, b!]);
    }
    await assertNoKeys(client, p);
  });

  it('a standby campaign() waiting in the process when the term is lost campaigns with a key of its own', async () => {
    const p = fresh('campaign-standby');
    const name = `${p}election`;
    const [a, b] = await sessions(2);
    try {
      const ea = new Election(a!, name);
      const ha = await ea.campaign('a');
      const standby = track(ea.campaign('a standby'));
      const tb = track(new Election(b!, name).campaign('b'));
      await waitForKeys(`${name}/`, 2);
      await plainPut(ha.key, 'edited');
      const hb = await tb.promise;
      const replaced = await replacedBefore(ha.key, ha.fencingToken, standby);
      assert.ok(replaced.createRevision > hb.fencingToken);
      assert.equal(standby.settled, false, 'no second leader while b leads');
      await hb.resign();
      const h2 = await standby.promise;
      assert.ok(h2.fencingToken > hb.fencingToken);
      await h2.resign();
      await ha.resign();
    } finally {
      await closeAll([a!, b!]);
    }
    await assertNoKeys(client, p);
  });

  it('proclaim() by a leader whose key was moved off its lease fails and does not put it back on the lease', async () => {
    const p = fresh('proclaim');
    const name = `${p}election`;
    const [a, b] = await sessions(2);
    try {
      const ha = await new Election(a!, name).campaign('a');
      await plainPut(ha.key, 'edited');
      // Whether or not the loss was noticed yet, the write must not bring the key back onto a's lease.
      await assert.rejects(ha.proclaim('a again'), LeadershipLostError);
      assert.equal((await read(ha.key))?.lease, 0n, 'still stray data');
      const hb = await new Election(b!, name).campaign('b');
      assert.equal((await currentLeader(client, name))?.key, hb.key);
      await hb.resign();
      await ha.resign();
    } finally {
      await closeAll([a!, b!]);
    }
    await assertNoKeys(client, p);
  });

  it('ownerCompares() fails once the key was moved off its lease; ownerCompare() is Go’s IsOwner', async () => {
    const p = fresh('owner-compares');
    const name = `${p}lock`;
    const [a] = await sessions(1);
    try {
      const h = await new Mutex(a!, name).lock();
      const write = (compares: ReturnType<typeof h.ownerCompares>) =>
        client.txn({ compare: compares, success: [], failure: [] }).then((t) => t.succeeded);
      assert.equal(await write(h.ownerCompares()), true);
      await plainPut(h.key);
      assert.equal(await write(h.ownerCompares()), false, 'another session may hold now: the guarded write is refused');
      assert.equal(await write([h.ownerCompare()]), true, 'the CreateRevision alone cannot see the edit');
      await h.unlock();
    } finally {
      await closeAll([a!]);
    }
    await assertNoKeys(client, p);
  });

  it('Semaphore and RWMutex: a later call of the session replaces the edited key too', async () => {
    const p = fresh('recipes');
    const [a, c] = await sessions(2);
    try {
      const sem = new Semaphore(a!, `${p}sem`, { permits: 1 });
      const s1 = await sem.acquire();
      await plainPut(s1.key, '1');
      const sc = await new Semaphore(c!, `${p}sem`, { permits: 1 }).acquire();
      const again = track(sem.acquire());
      await replacedBefore(s1.key, s1.fencingToken, again);
      assert.equal(again.settled, false, 'at most one permit');
      await sc.release();
      const s2 = await again.promise;
      assert.ok(s2.fencingToken > sc.fencingToken);
      await s2.release();
      await s1.release();

      const rw = new RWMutex(a!, `${p}rw`);
      const w1 = await rw.lock();
      await plainPut(w1.key);
      const wc = await new RWMutex(c!, `${p}rw`).lock();
      const w2 = track(rw.lock());
      await replacedBefore(w1.key, w1.fencingToken, w2);
      assert.equal(w2.settled, false, 'one writer');
      await wc.unlock();
      const w2h = await w2.promise;
      assert.ok(w2h.fencingToken > wc.fencingToken);
      await w2h.unlock();
      await w1.unlock();
    } finally {
      await closeAll([a!, c!]);
    }
    await assertNoKeys(client, p);
  });
});

/**
 * Resolves with `key` once it is a new incarnation (created after `rev`); fails at once if `call`
 * settles first (it resolved on the edited key: a second holder or leader, with an old token).
 */
async function replacedBefore<T>(key: string, rev: bigint, call: Tracked<T>) {
  const early = call.promise.then(
    (v) => {
      throw new Error(`the call resolved before its key was replaced: token ${String((v as { fencingToken?: bigint })?.fencingToken)}`);
    },
    (err: unknown) => {
      throw new Error(`the call failed before its key was replaced: ${String(err)}`);
    },
  );
  try {
    return await Promise.race([waitForKeyReplaced(key, rev), early]);
  } finally {
    early.catch(() => {}); // the call settles later, as the test expects
  }
}

/** Resolves with `key` once it is a new incarnation (created after `rev`). */
async function waitForKeyReplaced(key: string, rev: bigint) {
  const w = client.watch(key);
  try {
    const created = await w.created;
    const now = await read(key);
    if (now && now.createRevision > rev) return now;
    for await (const batch of w) {
      for (const e of batch.events) if (e.type === 'put' && e.kv.createRevision > rev && e.kv.modRevision > created) return e.kv;
    }
    throw new Error('watch ended');
  } finally {
    w.cancel();
  }
}

/** Resolves once `prefix` holds at least `n` keys. */
async function waitForKeys(prefix: string, n: number): Promise<void> {
  const w = client.watch(prefix, { prefix: true });
  try {
    await w.created;
    if ((await client.range({ key: Buffer.from(prefix), rangeEnd: prefixEndOf(prefix), countOnly: true })).count >= BigInt(n)) return;
    for await (const _ of w) {
      if ((await client.range({ key: Buffer.from(prefix), rangeEnd: prefixEndOf(prefix), countOnly: true })).count >= BigInt(n)) return;
    }
  } finally {
    w.cancel();
  }
}

function prefixEndOf(prefix: string): Buffer {
  const b = Buffer.from(prefix);
  b[b.length - 1]!++;
  return b;
}

describe('an operator deletes a whole queue in one revision', { timeout: 60_000 }, () => {
  it("between the pages of a waiter's look-up: the waiter never holds on its deleted key", async () => {
    const name = `${fresh('prefix-delete')}lock`;
    const other = new Client({ endpoints: endpoints() });
    const [a] = await sessions(1);
    const [w] = await sessions(1, 30, other);
    try {
      const h = await new Mutex(a!, name).lock();
      // Eight keys of a nested name after the holder's: the waiter's first page (eight keys below its
      // own) holds only them, so it reads a second page, where the holder is.
      for (let i = 0; i < 8; i++) await client.put(`${name}/nested/${i}`, '');
      // The operator's delete of the whole prefix lands just before that second page is read.
      const range = other.range.bind(other);
      let deleted = false;
      other.range = async (req, options) => {
        if (!deleted && req.maxCreateRevision !== undefined) {
          deleted = true;
          await client.delete(`${name}/`, { prefix: true });
        }
        return range(req, options);
      };
      await assert.rejects(new Mutex(w!, name).lock(), (e: unknown) => e instanceof LockLostError && e.reason === 'key_deleted');
      assert.ok(deleted, 'the look-up read a second page');
      assert.ok((await aborted(h.signal)) instanceof LockLostError, 'the holder lost too');
    } finally {
      await closeAll([a!, w!]);
      await other.close();
    }
    await assertNoKeys(client, name);
  });
});

describe("an operator deletes a write lock's key before its writer hears of it", { timeout: 60_000 }, () => {
  it('a downgrade (rLock() while holding the write lock) fails with RWLockLostError instead of holding on the deleted key', async () => {
    const name = `${fresh('downgrade')}rw`;
    await using proxy = await startProxy(endpoints()[0]!);
    const far = new Client({ endpoints: [proxy.endpoint] });
    const [s] = await sessions(1, 30, far);
    try {
      const rw = new RWMutex(s!, name);
      const w = await rw.lock();
      // Every byte between the writer's client and etcd now takes 1.5 s: the delete's watch event
      // reaches the writer well after rLock() is called, and the confirming Txn reaches etcd after
      // the delete.
      proxy.delay(1500);
      await client.delete(w.key);
      await assert.rejects(rw.rLock(), (e: unknown) => e instanceof RWLockLostError && e.reason === 'key_deleted');
      assert.ok((await aborted(w.signal)) instanceof RWLockLostError, 'the writer lost too');
      assert.equal((await w.unlock()).state, 'lost');
      proxy.delay(0);
    } finally {
      await s!.close();
      await far.close();
    }
    await assertNoKeys(client, name);
  });
});
