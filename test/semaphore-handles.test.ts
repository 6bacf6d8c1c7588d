// Semaphore against a real single-member etcd, its calls one by one: tryAcquire, permit-count
// conflicts, and the handle (release, await using, withPermit, ownerCompare()). Each test uses its
// own names and leaves no key and no lease.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  type Client,
  InvalidArgumentError,
  MAX_PERMITS,
  Mutex,
  PermitCountConflictError,
  PermitLostError,
  Semaphore,
  withPermit,
} from '../src/index.js';
import { assertNoKeys, etcdFile, track, closeAll, keysUnder, withSessions, assertOwnerCompareFences } from './helpers.js';

const ROOT = 'test/semaphore-handles/';
let client: Client;
const { fresh, sessions, probed } = etcdFile(ROOT, (_, c) => (client = c));

describe('Semaphore: tryAcquire', () => {
  it('takes a free permit', async () => {
    const p = fresh('try-free');
    await withSessions(client, p, 2, async ([a, b]) => {
      const first = await new Semaphore(a!, `${p}sem`, { permits: 2 }).tryAcquire();
      assert.ok(first, 'a free permit is taken');
      const second = await new Semaphore(b!, `${p}sem`, { permits: 2 }).tryAcquire();
      assert.ok(second, 'the second permit is free too');
      assert.equal((await client.get(second.key))?.createRevision, second.fencingToken);
      await Promise.all([first.release(), second.release()]);
    });
  });

  it('returns null when every permit is taken, leaving no key and the holders untouched', async () => {
    const p = fresh('try-full');
    const name = `${p}sem`;
    await withSessions(client, p, 3, async ([a, b, c]) => {
      const held = await Promise.all([a!, b!].map((s) => new Semaphore(s, name, { permits: 2 }).acquire()));
      const before = (await client.getPrefix(`${name}/`)).kvs.map((kv) => [kv.key.toString(), kv.createRevision, kv.modRevision]);
      assert.equal(await new Semaphore(c!, name, { permits: 2 }).tryAcquire(), null);
      const after = (await client.getPrefix(`${name}/`)).kvs.map((kv) => [kv.key.toString(), kv.createRevision, kv.modRevision]);
      assert.deepEqual(after, before, 'only the holders’ keys, unchanged');
      for (const h of held) h.assertHeld();
      // Once one is released, tryAcquire gets it.
      await held[0]!.release();
      const t = await new Semaphore(c!, name, { permits: 2 }).tryAcquire();
      assert.ok(t);
      await Promise.all([t.release(), held[1]!.release()]);
    });
  });

  it('returns null behind queued waiters, and leaves the queue as it was', async () => {
    const p = fresh('try-queue');
    const name = `${p}sem`;
    const probe = probed();
    const [a, b, c] = await sessions(3);
    const [w] = await sessions(1, 30, probe.client);
    try {
      const [h1, h2] = await Promise.all([a!, b!].map((s) => new Semaphore(s, name, { permits: 2 }).acquire()));
      const waiting = track(new Semaphore(w!, name, { permits: 2 }).acquire());
      await probe.blocked(1);
      const before = await keysUnder(client, `${name}/`);
      assert.equal(await new Semaphore(c!, name, { permits: 2 }).tryAcquire(), null);
      assert.deepEqual(await keysUnder(client, `${name}/`), before, 'no key left, the waiter still queued');
      await probe.blocked(1, 'the waiter still blocked');
      assert.equal(waiting.settled, false);
      await h1!.release();
      const got = await waiting.promise;
      await Promise.all([h2!.release(), got.release()]);
    } finally {
      await closeAll([a!, b!, c!, w!]);
      await probe.client.close();
    }
    await assertNoKeys(client, p);
  });
});

describe('Semaphore: permit counts', () => {
  it('a participant with another count gets PermitCountConflictError, leaves no key, and the holder is untouched', async () => {
    const p = fresh('conflict');
    const name = `${p}sem`;
    const [a, b] = await sessions(2);
    try {
      const held = await new Semaphore(a!, name, { permits: 2 }).acquire();
      const signal = held.signal; // watching our key: any write to it would end the holding
      const before = await client.get(held.key);
      const check = (e: unknown): boolean => {
        assert.ok(e instanceof PermitCountConflictError, String(e));
        assert.equal(e.semaphore, name);
        assert.equal(e.permits, 3);
        assert.equal(e.otherKey, held.key);
        assert.equal(e.otherValue, '2');
        assert.match(e.message, /2 permits/);
        return true;
      };
      await assert.rejects(new Semaphore(b!, name, { permits: 3 }).acquire(), check);
      assert.deepEqual(await keysUnder(client, `${name}/`), [held.key], 'the refused participant left no key');
      await assert.rejects(new Semaphore(b!, name, { permits: 3 }).tryAcquire(), check);
      assert.deepEqual(await keysUnder(client, `${name}/`), [held.key]);
      const after = await client.get(held.key);
      assert.deepEqual(
        [after?.createRevision, after?.modRevision, after?.lease],
        [before?.createRevision, before?.modRevision, before?.lease],
      );
      held.assertHeld();
      assert.equal(signal.aborted, false);
      // The same count is welcome.
      const ok = await new Semaphore(b!, name, { permits: 2 }).acquire();
      await Promise.all([ok.release(), held.release()]);
    } finally {
      await closeAll([a!, b!]);
    }
    await assertNoKeys(client, p);
  });

  it('a Mutex on the same name is no semaphore participant: PermitCountConflictError names its value', async () => {
    const p = fresh('conflict-mutex');
    const name = `${p}sem`;
    await withSessions(client, p, 2, async ([a, b]) => {
      const lock = await new Mutex(a!, name).lock();
      await assert.rejects(new Semaphore(b!, name, { permits: 2 }).acquire(), (e: unknown) => {
        assert.ok(e instanceof PermitCountConflictError, String(e));
        assert.equal(e.otherKey, lock.key);
        assert.match(e.message, /not a semaphore of this library/);
        return true;
      });
      assert.deepEqual(await keysUnder(client, `${name}/`), [lock.key]);
      await lock.unlock();
    });
  });

  it('a stray key (an operator’s plain put over a holder’s key) is no participant: its value is no permit count to refuse', async () => {
    const p = fresh('conflict-stray');
    const name = `${p}sem`;
    const [a, b, c] = await sessions(3);
    try {
      const edited = await new Semaphore(a!, name, { permits: 2 }).acquire();
      await client.put(edited.key, 'operator'); // no lease: stray data, which every participant skips
      await client.put(`${name}/1234abcd`, ''); // planted by hand, no lease, another value
      const h = await new Semaphore(b!, name, { permits: 2 }).acquire();
      const t = await new Semaphore(c!, name, { permits: 2 }).tryAcquire();
      assert.ok(t, 'neither stray key takes a permit');
      await Promise.all([h.release(), t.release(), edited.release()]); // its release deletes the edited key, guarded on its token
      assert.deepEqual(await keysUnder(client, `${name}/`), [`${name}/1234abcd`]);
    } finally {
      await closeAll([a!, b!, c!]);
      await client.delete(p, { prefix: true }); // the stray keys belong to no lease
    }
  });

  it('the same session asking with another count is refused while another participant is there', async () => {
    const p = fresh('conflict-same-session-peer');
    const name = `${p}sem`;
    await withSessions(client, p, 2, async ([a, b]) => {
      const mine = await new Semaphore(a!, name, { permits: 2 }).acquire({ share: true });
      const peer = await new Semaphore(b!, name, { permits: 2 }).acquire();
      await assert.rejects(new Semaphore(a!, name, { permits: 3 }).acquire({ share: true }), PermitCountConflictError);
      mine.assertHeld(); // a refused join leaves the sibling's key alone
      assert.deepEqual((await keysUnder(client, `${name}/`)).sort(), [mine.key, peer.key].sort());
      await Promise.all([mine.release(), peer.release()]);
    });
  });

  it('the same session asking with another count is refused when alone too', { timeout: 30_000 }, async () => {
    const p = fresh('conflict-same-session');
    const name = `${p}sem`;
    await withSessions(client, p, 1, async ([a]) => {
      const held = await new Semaphore(a!, name, { permits: 2 }).acquire({ share: true });
      // Its key says 2; waiting as if there were 3 permits would break the count for everyone.
      await assert.rejects(new Semaphore(a!, name, { permits: 3 }).acquire({ share: true }), PermitCountConflictError);
      held.assertHeld();
      assert.equal((await client.get(held.key))?.value.toString(), '2');
      await held.release();
    });
  });

  for (const bad of [0, MAX_PERMITS + 1, 1.5, -1, Number.NaN, Infinity, '2', undefined]) {
    it(`permits ${typeof bad === 'string' ? JSON.stringify(bad) : String(bad)} fails fast with InvalidArgumentError`, async () => {
      const p = fresh('bad-permits');
      const [s] = await sessions(1);
      try {
        assert.throws(
          () => new Semaphore(s!, `${p}sem`, { permits: bad as number }),
          (e: unknown) => e instanceof InvalidArgumentError && /permits must be an integer from 1 to 60/.test(e.message),
        );
        await assert.rejects(
          withPermit(s!, `${p}sem`, bad as number, () => assert.fail('fn must not run')),
          InvalidArgumentError,
        );
        await assertNoKeys(client, p);
      } finally {
        await closeAll([s!]);
      }
    });
  }

  it('MAX_PERMITS is 60, and 1 and 60 are accepted', async () => {
    assert.equal(MAX_PERMITS, 60);
    const [s] = await sessions(1);
    try {
      assert.equal(new Semaphore(s!, 'x', { permits: 1 }).permits, 1);
      assert.equal(new Semaphore(s!, 'x', { permits: 60 }).permits, 60);
      assert.throws(() => new Semaphore(s!, 'x/', { permits: 1 }), /semaphore name/);
    } finally {
      await closeAll([s!]);
    }
  });
});

describe('Semaphore: handles', () => {
  it('release is idempotent, and a released handle is no longer held', async () => {
    const p = fresh('release-twice');
    await withSessions(client, p, 1, async ([s]) => {
      const h = await new Semaphore(s!, `${p}sem`, { permits: 1 }).acquire();
      const signal = h.signal;
      await h.release();
      await h.release();
      await Promise.all([h.release(), h.release()]);
      assert.ok(signal.aborted);
      assert.throws(() => h.assertHeld(), PermitLostError);
    });
  });

  it('a stale handle released again after re-acquiring on the same session leaves the new permit alone', async () => {
    const p = fresh('release-stale');
    await withSessions(client, p, 1, async ([s]) => {
      const sem = new Semaphore(s!, `${p}sem`, { permits: 2 });
      const first = await sem.acquire();
      await client.delete(first.key); // as if its release committed but the answer was lost
      const second = await sem.acquire();
      assert.ok(second.fencingToken > first.fencingToken);
      await first.release();
      assert.equal((await client.get(second.key))?.createRevision, second.fencingToken);
      second.assertHeld();
      await second.release();
    });
  });

  it('await using releases at the end of the block', async () => {
    const p = fresh('await-using');
    const [s] = await sessions(1);
    try {
      let key: string;
      {
        await using h = await new Semaphore(s!, `${p}sem`, { permits: 1 }).acquire();
        key = h.key;
        assert.ok(await client.get(key));
      }
      assert.equal(await client.get(key), undefined);
    } finally {
      await closeAll([s!]);
    }
  });

  it('withPermit returns fn’s value and releases; when fn throws it releases and rethrows', async () => {
    const p = fresh('withpermit');
    const [s] = await sessions(1);
    try {
      const out = await withPermit(s!, `${p}sem`, 2, async (h) => {
        assert.equal((await client.get(h.key))?.value.toString(), '2');
        return 42;
      });
      assert.equal(out, 42);
      await assertNoKeys(client, p);
      const boom = new Error('boom');
      await assert.rejects(
        withPermit(s!, `${p}sem`, 2, () => {
          throw boom;
        }),
        (e) => e === boom,
      );
      await assertNoKeys(client, p);
      const reason = new Error('too late');
      await assert.rejects(
        withPermit(s!, `${p}sem`, 2, () => assert.fail('fn must not run'), { signal: AbortSignal.abort(reason) }),
        (e) => e === reason,
      );
    } finally {
      await closeAll([s!]);
    }
    await assertNoKeys(client, p);
  });

  it('ownerCompare() lets a Txn through while held and stops it once the permit is lost', async () => {
    const p = fresh('owner-compare');
    const [s] = await sessions(1);
    try {
      await assertOwnerCompareFences(
        client,
        p,
        () => new Semaphore(s!, `${p}sem`, { permits: 1 }).acquire(),
        (h) => h.release(),
      );
    } finally {
      await closeAll([s!]);
      await client.delete(p, { prefix: true });
    }
  });
});
