// Released and lost told apart on `handle.signal`: the signal aborts on a normal
// unlock() too, with the primitive's lost error, and its `reason` says which: 'released' after our
// own unlock/resign/release, a LossReason after a loss. The field comes with the error codes;
// this test checks the README's "Released or lost?" paragraph against it.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Election, LeadershipLostError, LockLostError, Mutex, Semaphore, PermitLostError, Session, type Client } from '../src/index.js';
import { aborted, etcdForFile } from './helpers.js';

let client: Client;
const fresh = etcdForFile('test/release-vs-loss/', (_e, c) => (client = c));

/** The `reason` field of a lost error (typed loosely: the field is what is under test). */
const reasonOf = (err: unknown): unknown => (err as { reason?: unknown }).reason;

describe('handle.signal: released or lost', () => {
  test("a lock: unlock() aborts with reason 'released'; a deleted key with 'key_deleted'", async () => {
    const s = await Session.create(client);
    try {
      const m = new Mutex(s, `${fresh('lock')}lock`);
      const a = await m.lock();
      const released = aborted(a.signal);
      await a.unlock();
      const r1 = await released;
      assert.ok(r1 instanceof LockLostError, String(r1));
      assert.equal(reasonOf(r1), 'released');

      const b = await m.lock();
      const lost = aborted(b.signal);
      await client.delete(b.key);
      const r2 = await lost;
      assert.ok(r2 instanceof LockLostError, String(r2));
      assert.equal(reasonOf(r2), 'key_deleted');
      await b.unlock();
    } finally {
      await s.close();
    }
  });

  test("a leader: resign() is 'released'; a permit: release() is 'released', a lost session is not", async () => {
    const s = await Session.create(client);
    const s2 = await Session.create(client);
    try {
      const leader = await new Election(s, `${fresh('election')}e`).campaign('v');
      const resigned = aborted(leader.signal);
      await leader.resign();
      const r1 = await resigned;
      assert.ok(r1 instanceof LeadershipLostError);
      assert.equal(reasonOf(r1), 'released');

      const sem = `${fresh('sem')}s`;
      const p1 = await new Semaphore(s, sem, { permits: 2 }).acquire();
      const gone = aborted(p1.signal);
      await p1.release();
      assert.equal(reasonOf(await gone), 'released');

      const p2 = await new Semaphore(s2, sem, { permits: 2 }).acquire();
      const lost = aborted(p2.signal);
      await s2.close();
      const r3 = await lost;
      assert.ok(r3 instanceof PermitLostError);
      assert.notEqual(reasonOf(r3), 'released');
      assert.equal(reasonOf(r3), 'session_closed');
    } finally {
      await s.close();
      await s2.close();
    }
  });
});
