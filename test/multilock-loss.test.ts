// lockAll / withLocks against a real single-member etcd: clean-up on every failure, bad input, and
// losing one of the locks. No sleeps: every wait is on a watch event, a promise or a signal. Each
// test uses its own lock names and leaves no key and no lease.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import { Client, type LockHandle, LockLostError, Mutex, type Session, SessionExpiredError, op } from '../src/index.js';
import { lockAll } from '../src/primitives/multilock.js';
import { startProxy, type EtcdCluster } from '../src/testing/index.js';
import {
  EventLog,
  aborted,
  assertNoKeys,
  etcdForFile,
  grpcHandled,
  track,
  waitFor,
  openSessions,
  closeAll,
  withSessions,
} from './helpers.js';

const ROOT = 'test/multilock-loss/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));
/** A hang guard (a deadlock must fail, not hang the run), not a timing assertion. */
const T = { timeout: 60_000 };

/** Sessions on `on` that the test closes at its end (closing revokes: no lease is left). */
const sessions = (n: number, on: Client = client): Promise<Session[]> => openSessions(on, n);
const keyOf = (s: Session, name: string): string => `${name}/${s.leaseId.toString(16)}`;
/** How many abort listeners a signal has: ours must all be gone once a holding ends. */
const listeners = (s: AbortSignal): number => getEventListeners(s, 'abort').length;
/** Every key under `prefix` on `s`'s lease. */
async function keysOn(s: Session, prefix: string): Promise<string[]> {
  return (await client.getPrefix(prefix)).kvs.filter((kv) => kv.lease === s.leaseId).map((kv) => kv.key.toString());
}

/** What {@link withSecondBlocked} hands a test. */
interface SecondBlocked {
  /** The test's own prefix, and two lock names under it. */
  p: string;
  n1: string;
  n2: string;
  /** Session `a` calls lockAll; session `c` holds n2 as `blocker`. */
  sessions: Session[];
  blocker: LockHandle;
  /** Every event under `p`, from before the blocker took n2. */
  log: EventLog;
}

/**
 * Runs `body` with n2 held by another session (so lockAll on n1 and n2 waits for it) and a log of the
 * prefix; then closes the log and both sessions, and checks that nothing is left under the prefix.
 */
async function withSecondBlocked(scope: string, body: (t: SecondBlocked) => Promise<void>): Promise<void> {
  const p = fresh(scope);
  const [n1, n2] = [`${p}n1`, `${p}n2`];
  const [a, c] = await sessions(2);
  const log = new EventLog(client, p);
  try {
    await log.ready;
    const blocker = await new Mutex(c!, n2).lock();
    await body({ p, n1, n2, sessions: [a!, c!], blocker, log });
  } finally {
    await log.close();
    await closeAll([a!, c!]);
  }
  await assertNoKeys(client, p);
}

describe('lockAll: giving up and failing', T, () => {
  it('aborting while waiting for the 2nd lock releases the 1st, rejects with the reason and leaves no key', () =>
    withSecondBlocked('abort-second', async ({ p, n1, n2, log, blocker, sessions: [a, c] }) => {
      const ac = new AbortController();
      const waiting = lockAll(a!, [n2, n1], { signal: ac.signal });
      await log.put(keyOf(a!, n2)); // n1 taken, queued on n2
      assert.ok(await client.get(keyOf(a!, n1)), 'the 1st lock is held meanwhile');
      const reason = new Error('caller gave up');
      ac.abort(reason);
      await assert.rejects(waiting, (e) => e === reason);
      assert.deepEqual(await keysOn(a!, p), [], 'neither the held key nor the queued one is left');
      assert.equal(listeners(ac.signal), 0);
      const other = await new Mutex(c!, n1).tryLock();
      assert.ok(other, 'the 1st lock is free again');
      await other.unlock();
      await blocker.unlock();
    }));

  it('the session closing while waiting for the 2nd lock fails with SessionExpiredError and leaves no key', () =>
    withSecondBlocked('session-closed', async ({ p, n1, n2, log, blocker, sessions: [a] }) => {
      const waiting = lockAll(a!, [n1, n2]);
      await log.put(keyOf(a!, n2));
      // Expect the rejection before closing: it may come while close() is still running.
      const rejected = assert.rejects(waiting, (e: unknown) => e instanceof SessionExpiredError && e.reason === 'closed');
      await a!.close();
      await rejected;
      assert.deepEqual(await keysOn(a!, p), []);
      blocker.assertHeld();
      await blocker.unlock();
    }));

  it('a failed 2nd lock (its queued key deleted by an operator) releases the 1st while the session lives', () =>
    withSecondBlocked('second-fails', async ({ p, n1, n2, log, blocker, sessions: [a] }) => {
      const waiting = track(lockAll(a!, [n1, n2]));
      await log.put(keyOf(a!, n2));
      await client.delete(keyOf(a!, n2));
      await blocker.unlock(); // wakes a, which finds its queued key gone
      await assert.rejects(waiting.promise, (e: unknown) => e instanceof LockLostError && e.key === keyOf(a!, n2));
      // Released by lockAll before it rejected, not by the lease: the session lives on.
      assert.deepEqual(await keysOn(a!, p), []);
      a!.assertAlive();
      assert.ok((await client.leaseLeases()).includes(a!.leaseId), 'the lease lives on');
    }));

  it('a 1st lock lost while waiting for the 2nd fails lockAll with its LockLostError instead of a half-held success', () =>
    withSecondBlocked('first-lost', async ({ p, n1, n2, log, blocker, sessions: [a] }) => {
      const waiting = lockAll(a!, [n1, n2]);
      await log.put(keyOf(a!, n2));
      await client.delete(keyOf(a!, n1)); // an operator frees n1 behind our back
      await blocker.unlock(); // a gets n2, then must find n1 gone
      await assert.rejects(
        waiting,
        (e: unknown) => e instanceof LockLostError && e.key === keyOf(a!, n1) && /call lockAll again/.test(e.message),
      );
      assert.deepEqual(await keysOn(a!, p), [], 'n2, taken last, is released too');
    }));

  it('when the clean-up cannot reach etcd either, the original error is thrown and the key goes once etcd answers again', async () => {
    const p = fresh('cleanup-fails');
    const [n1, n2] = [`${p}n1`, `${p}n2`];
    const proxy = await startProxy(etcd.endpoints[0]!);
    const cut = new Client({ endpoints: proxy.endpoint, callTimeoutMs: 500, dialTimeoutMs: 200 });
    const [a] = await sessions(1, cut); // TTL 30 s: the session outlives the partition below
    const [c] = await sessions(1);
    try {
      const blocker = await new Mutex(c!, n2).lock();
      const ac = new AbortController();
      const base = await grpcHandled(etcd.clientUrls[0]!, 'Txn');
      const waiting = lockAll(a!, [n1, n2], { signal: ac.signal });
      // n1's enqueue, n2's enqueue and its predecessor look-up answered: a waits on a watch, and no
      // write of its own is in flight (one cut off there would fail first, with its own error).
      await waitFor(async () => (await grpcHandled(etcd.clientUrls[0]!, 'Txn')) >= base + 3, 'a waiting for n2');
      proxy.blackhole(true); // the release of n1 cannot reach etcd
      const reason = new Error('gave up');
      ac.abort(reason);
      await assert.rejects(waiting, (e: unknown) => e === reason);
      assert.ok(await client.get(keyOf(a!, n1)), 'n1 is still there while etcd is unreachable');
      proxy.cut(); // the held delete never lands: only the background retry can delete n1
      proxy.blackhole(false);
      await waitFor(async () => (await client.get(keyOf(a!, n1))) === undefined, 'n1 deleted in the background');
      a!.assertAlive();
      await blocker.unlock();
    } finally {
      proxy.blackhole(false);
      await closeAll([a!, c!]);
      await cut.close();
      await proxy.close();
    }
    await assertNoKeys(client, p);
  });
});

describe('lockAll: losing a lock', T, () => {
  it('an operator deleting one key aborts the signal with that lock’s LockLostError, and assertHeld throws it', async () => {
    const p = fresh('key-deleted');
    await withSessions(client, p, 1, async ([s]) => {
      const locks = await lockAll(s!, [`${p}a`, `${p}b`, `${p}c`]);
      const signal = locks.signal;
      assert.equal(signal.aborted, false);
      const inner = [...locks.handles.values()].map((h) => h.signal);
      const victim = keyOf(s!, `${p}b`);
      await client.delete(victim);
      const reason = await aborted(signal);
      assert.ok(reason instanceof LockLostError, String(reason));
      assert.equal(reason.key, victim);
      assert.throws(
        () => locks.assertHeld(),
        (e) => e === reason,
      );
      assert.deepEqual(inner.map(listeners), [0, 0, 0], 'no listener left once the holding ended');
      assert.ok(await client.get(keyOf(s!, `${p}a`)), 'the other locks stay held until unlock()');
      await locks.unlock(); // the lost one has nothing to delete; must not throw
      assert.throws(
        () => locks.assertHeld(),
        (e) => e === reason,
        'the loss stays the reason',
      );
    });
  });

  it('revoking the lease aborts the signal with LockLostError', async () => {
    const p = fresh('lease-revoked');
    await withSessions(client, p, 1, async ([s]) => {
      const locks = await lockAll(s!, [`${p}a`, `${p}b`]);
      const signal = locks.signal;
      await client.leaseRevoke(s!.leaseId);
      const reason = await aborted(signal);
      assert.ok(reason instanceof LockLostError, String(reason));
      assert.throws(() => locks.assertHeld(), LockLostError);
      await locks.unlock();
    });
  });

  it('a Txn guarded by ownerCompares fails once any one of the locks is lost', async () => {
    const p = fresh('owner-compares');
    const names = [`${p}a`, `${p}b`, `${p}c`];
    await withSessions(client, p, 1, async ([s]) => {
      for (const lost of names) {
        const locks = await lockAll(s!, names);
        const write = () => client.txn({ compare: locks.ownerCompares(), success: [op.put(`${p}data`, lost)], failure: [] });
        assert.equal(locks.ownerCompares().length, 6, 'two per lock: its CreateRevision and its lease');
        assert.equal((await write()).succeeded, true, 'applies while all are held');
        await client.delete(keyOf(s!, lost));
        assert.equal((await write()).succeeded, false, `refused once ${lost} is lost`);
        await locks.unlock();
      }
      await client.delete(`${p}data`);
    });
  });

  it('unlock never rejects: with its client closed, the result is pending with an AggregateError, and the keys wait for the lease', async () => {
    const p = fresh('unlock-fails');
    const other = new Client({ endpoints: etcd.endpoints });
    const [s] = await sessions(1, other);
    try {
      const locks = await lockAll(s!, [`${p}a`, `${p}b`]);
      await other.close(); // every release must now fail; the lease outlives its client
      const r = await locks.unlock();
      assert.equal(r.state, 'pending');
      assert.ok(r.error instanceof AggregateError, String(r.error));
      assert.equal(r.error.errors.length, 2);
      assert.equal(await locks.unlock(), r, 'idempotent: the same answer');
      await r.settled; // a closed client stops trying: its lease takes the keys along
      assert.equal((await client.getPrefix(p)).kvs.length, 2, 'the keys are still there');
    } finally {
      await client.leaseRevoke(s!.leaseId);
      await other.close();
    }
    await assertNoKeys(client, p);
  });
});
