// Mutex against a real single-member etcd: acquire and release, names and keys, tryLock, and
// interoperation with `etcdctl lock` (fairness: mutex-fairness.test.ts; giving up and losing:
// mutex-loss.test.ts). Each test uses its own lock names and leaves nothing.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { type Client, InvalidArgumentError, LockLostError, Mutex, SessionExpiredError, withLock } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { EventLog, aborted, assertNoKeys, killEtcdctls, spawnEtcdctl, track, etcdFile, closeAll, withSessions } from './helpers.js';
import { withProxiedWaiter } from './mutex-helpers.js';

const ROOT = 'test/mutex/';
let etcd: EtcdCluster;
let client: Client;
const file = etcdFile(ROOT, (e, c) => ((etcd = e), (client = c)), { beforeChecks: killEtcdctls });
const { fresh, sessions, watchersNow, blocked } = file;

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
        assert.throws(
          () => new Mutex(s!, name as string),
          (e: unknown) => {
            assert.ok(e instanceof InvalidArgumentError, String(e));
            assert.match(e.message, /lock name/);
            return true;
          },
        );
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
      assert.ok(h, 'tryLock returns a handle when the lock is free');
      assert.equal((await client.get(h.key))?.createRevision, h.fencingToken);
      await h.unlock();
    });
  });
  it('tryLock whose enqueue answer was lost and retried leaves no key behind', { timeout: 30_000 }, () =>
    withProxiedWaiter(file, 'trylock-retried', async ({ name, proxy, held, b, log }) => {
      const m = new Mutex(b, name);
      proxy.delay(1000);
      const tried = m.tryLock();
      await log.put(m.key); // the enqueue Txn committed; its answer is held in the proxy
      proxy.delay(0);
      proxy.cut(); // ... and lost: the client retries the (guarded, idempotent) Txn, which finds our key
      assert.equal(await tried, null, 'the lock is held by a');
      const left = await client.get(m.key);
      await held.unlock();
      assert.equal(left, undefined, 'our key stayed in the queue: it would hold the lock for nobody while b lives');
    }),
  );
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
