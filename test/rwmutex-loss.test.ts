// RWMutex against a real single-member etcd: every way a waiter or a holder can go away (etcd 16221
// included). Each test uses its own names and leaves nothing.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { type Client, LockLostError, RWLockLostError, RWMutex, SessionExpiredError } from '../src/index.js';
import { EventLog, aborted, etcdFile, track, closeAll, settledOrHang, keysUnder } from './helpers.js';
import { waitersOn } from './rwmutex-helpers.js';

const ROOT = 'test/rwmutex-loss/';
let client: Client;
const file = etcdFile(ROOT, (_, c) => (client = c));
const { fresh, sessions } = file;

const withWaiters = waitersOn(file);

describe('RWMutex: giving up and losing', () => {
  it('aborting a waiting writer deletes its key, and the readers queued behind it go in', { timeout: 30_000 }, () =>
    withWaiters('abort-writer', { waiting: 2 }, async ({ name, probe, own: [r1], waiting: [w, r2], pending }) => {
      const h1 = await new RWMutex(r1!, name).rLock();
      const ac = new AbortController();
      const rw = new RWMutex(w!, name);
      const writer = track(rw.lock({ signal: ac.signal }));
      await probe.blocked(1);
      const reader = track(new RWMutex(r2!, name).rLock());
      pending.push(writer, reader);
      await probe.blocked(2);
      assert.equal(reader.settled, false, 'behind a waiting writer');
      const reason = new Error('writer gave up');
      ac.abort(reason);
      await assert.rejects(writer.promise, (e) => e === reason);
      assert.equal(await client.get(rw.writeKey), undefined, 'its queued key is gone');
      const h2 = await reader.promise; // only a reader holds now: the reader goes in
      h1.assertHeld();
      await Promise.all([h1.unlock(), h2.unlock()]);
    }),
  );

  it('aborting a waiting reader deletes its key and rejects with the reason', () =>
    withWaiters('abort-reader', {}, async ({ name, probe, own: [a], waiting: [r] }) => {
      const hw = await new RWMutex(a!, name).lock();
      const ac = new AbortController();
      const rw = new RWMutex(r!, name);
      const waiting = rw.rLock({ signal: ac.signal });
      waiting.catch(() => {});
      await probe.blocked(1);
      const reason = new Error('reader gave up');
      ac.abort(reason);
      await assert.rejects(waiting, (e) => e === reason);
      assert.equal(await client.get(rw.readKey), undefined);
      hw.assertHeld();
      await hw.unlock();
    }));

  it('closing a waiting session fails lock() at once with SessionExpiredError', () =>
    withWaiters('closed', {}, async ({ name, probe, own: [a], waiting: [w] }) => {
      const hr = await new RWMutex(a!, name).rLock();
      const waiting = track(new RWMutex(w!, name).lock());
      await probe.blocked(1);
      await w!.close();
      // The reader never lets go: lock() can only end because its session did (at once, not at its
      // periodic re-check 30 s later).
      await assert.rejects(
        settledOrHang(waiting, 'lock() to fail once its session closed'),
        (e: unknown) => e instanceof SessionExpiredError && e.reason === 'closed',
      );
      assert.deepEqual(await keysUnder(client, `${name}/`), [hr.key]);
      hr.assertHeld();
      await hr.unlock();
    }));

  it('a waiting reader whose lease is revoked fails with SessionExpiredError', () =>
    withWaiters('revoked-reader', { ttl: 3 }, async ({ name, probe, own: [a], waiting: [r] }) => {
      const hw = await new RWMutex(a!, name).lock();
      const waiting = track(new RWMutex(r!, name).rLock());
      await probe.blocked(1);
      await client.leaseRevoke(r!.leaseId);
      await aborted(r!.signal); // the session learns at its next renewal (every second)
      await assert.rejects(settledOrHang(waiting, 'rLock() to fail once its session was lost', 5_000), (e: unknown) => {
        assert.ok(e instanceof SessionExpiredError, String(e));
        assert.equal(e.reason, 'lease_gone');
        return true;
      });
      hw.assertHeld();
      await hw.unlock();
    }));

  it('an operator deleting a holder’s key aborts its signal with RWLockLostError, and lets a waiting writer in', () =>
    withWaiters('key-deleted', {}, async ({ name, probe, own: [a], waiting: [w] }) => {
      const hr = await new RWMutex(a!, name).rLock();
      const signal = hr.signal;
      const writer = track(new RWMutex(w!, name).lock());
      await probe.blocked(1);
      await client.delete(hr.key);
      const reason = await aborted(signal);
      assert.ok(reason instanceof RWLockLostError, String(reason));
      assert.ok(reason instanceof LockLostError, 'an RWLockLostError is a LockLostError');
      assert.equal(reason.key, hr.key);
      assert.throws(() => hr.assertHeld(), RWLockLostError);
      const hw = await writer.promise;
      await hr.unlock(); // nothing to delete; must not throw
      await hw.unlock();
    }));

  it('revoking the writer’s lease (its process died) aborts its signal and lets the waiting readers in', () =>
    withWaiters('holder-revoked', { waiting: 2 }, async ({ name, probe, own: [a], waiting: rs, pending }) => {
      const hw = await new RWMutex(a!, name).lock();
      const signal = hw.signal;
      pending.push(...rs.map((s) => track(new RWMutex(s, name).rLock())));
      await probe.blocked(2);
      await client.leaseRevoke(a!.leaseId);
      const hs = await Promise.all(pending.map((t) => t.promise));
      const reason = await aborted(signal);
      assert.ok(reason instanceof RWLockLostError, String(reason));
      await Promise.all(hs.map((h) => h.unlock()));
    }));

  it('etcd 16221: a waiting writer whose lease is revoked fails, and never holds while another writer does', { timeout: 30_000 }, () =>
    withWaiters('16221', { own: 2 }, async ({ name, probe, own: [a, c], waiting: [b], pending }) => {
      // b's session (TTL 30 s) renews next in 10 s: it cannot notice the revoke first.
      const log = new EventLog(client, `${name}/`);
      try {
        await log.ready;
        const h1 = await new RWMutex(a!, name).lock();
        const rwB = new RWMutex(b!, name);
        const victim = track(rwB.lock());
        pending.push(victim);
        await probe.blocked(1);
        await client.leaseRevoke(b!.leaseId); // b's key goes with its lease, unseen by b
        await log.deleted(rwB.writeKey);
        // Another writer queues now: behind h1 only.
        const third = track(new RWMutex(c!, name).lock());
        pending.push(third);
        await log.put(`${name}/write/${c!.leaseId.toString(16)}`);
        await h1.unlock(); // wakes b (which finds its key gone) and then c
        const h3 = await third.promise;
        await assert.rejects(settledOrHang(victim, 'the revoked writer to give up'), (e: unknown) => {
          assert.ok(
            e instanceof SessionExpiredError || e instanceof RWLockLostError,
            `expected SessionExpiredError or RWLockLostError, got ${String(e)}`,
          );
          return true;
        });
        assert.equal('value' in victim, false, 'the revoked writer never got a handle');
        h3.assertHeld();
        await h3.unlock();
      } finally {
        await log.close();
      }
    }),
  );

  it('etcd 16221, alone: a revoked waiting writer whose turn comes fails with SessionExpiredError instead of holding', () =>
    withWaiters('16221-alone', {}, async ({ name, probe, own: [a], waiting: [b] }) => {
      const hr = await new RWMutex(a!, name).rLock();
      const victim = track(new RWMutex(b!, name).lock());
      await probe.blocked(1);
      await client.leaseRevoke(b!.leaseId);
      await hr.unlock(); // the writer's turn, were its key still there
      await assert.rejects(settledOrHang(victim, 'the revoked writer to give up'), (e: unknown) => {
        assert.ok(e instanceof SessionExpiredError, `expected SessionExpiredError, got ${String(e)}`);
        assert.equal(e.reason, 'lease_gone');
        return true;
      });
    }));

  it('a waiting reader whose lease is revoked fails with SessionExpiredError when the writer leaves, instead of holding', () =>
    withWaiters('16221-reader', {}, async ({ name, probe, own: [a], waiting: [r] }) => {
      // r's session (TTL 30 s) renews next in 10 s: it cannot notice the revoke first.
      const hw = await new RWMutex(a!, name).lock();
      const victim = track(new RWMutex(r!, name).rLock());
      await probe.blocked(1);
      await client.leaseRevoke(r!.leaseId);
      await hw.unlock(); // the reader's turn, were its key still there
      await assert.rejects(settledOrHang(victim, 'the revoked reader to give up'), (e: unknown) => {
        assert.ok(e instanceof SessionExpiredError, `expected SessionExpiredError, got ${String(e)}`);
        return true;
      });
    }));

  it('a stray write key without a lease blocks neither readers nor writers (etcd 6631)', async () => {
    const p = fresh('stray');
    const name = `${p}rw`;
    const [a, b] = await sessions(2);
    try {
      await client.put(`${name}/write/1234abcd`, ''); // older than anyone, no lease
      const r = await new RWMutex(a!, name).rLock();
      await r.unlock();
      const w = await new RWMutex(b!, name).lock();
      await w.unlock();
      const t = await new RWMutex(a!, name).tryRLock();
      assert.ok(t, 'tryRLock looks past the stray key too');
      await t.unlock();
    } finally {
      await closeAll([a!, b!]);
      await client.delete(p, { prefix: true });
    }
  });
});
