// lockAll / withLocks against a real single-member etcd: canonical order, no deadlock, fencing,
// loss, clean-up on every failure, and bad input. No sleeps: every wait is on a watch event, a
// promise or a signal. Each test uses its own lock names and leaves no key and no lease.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import {
  Client,
  InvalidArgumentError,
  LockLostError,
  Mutex,
  Session,
  SessionExpiredError,
  op,
} from '../src/index.js';
import { lockAll, withLocks, type MultiLockHandle } from '../src/primitives/multilock.js';
import { startProxy, type EtcdCluster } from '../src/testing/index.js';
import { EventLog, aborted, assertNoKeys, etcdForFile, grpcHandled, track, waitFor, openSessions, closeAll, withSessions } from './helpers.js';

const ROOT = 'test/multilock/';
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

describe('lockAll: acquire and release', T, () => {
  it('takes the locks in byte order, with tokens equal to each key’s CreateRevision', async () => {
    const p = fresh('basic');
    // UTF-16 puts U+1F600 (a surrogate pair, 0xD83D...) before U+FF61; UTF-8 bytes put it after (F0 > EF).
    const [astral, bmp, plain] = [`${p}\u{1F600}`, `${p}\uFF61`, `${p}a`];
    const [s] = await sessions(1);
    const log = new EventLog(client, p);
    try {
      await log.ready;
      const ac = new AbortController();
      const locks = await lockAll(s!, [astral, bmp, plain], { signal: ac.signal });
      assert.deepEqual(locks.names, [plain, bmp, astral], 'byte order, not the caller’s order nor UTF-16 order');
      assert.deepEqual([...locks.handles.keys()], locks.names);
      assert.deepEqual([...locks.fencingTokens.keys()], locks.names);
      assert.equal(locks.session, s);
      // Taken one after another in that order: the puts in the watch carry increasing revisions.
      await log.put(keyOf(s!, locks.names.at(-1)!)); // every put has reached the log
      const puts = log.events.filter((e) => e.type === 'put');
      assert.deepEqual(
        puts.map((e) => e.key),
        locks.names.map((n) => keyOf(s!, n)),
      );
      for (const name of locks.names) {
        const kv = await client.get(keyOf(s!, name));
        assert.ok(kv, `${name} is held`);
        assert.equal(locks.fencingTokens.get(name), kv.createRevision, 'fencing token = CreateRevision');
        assert.equal(locks.handles.get(name)!.fencingToken, kv.createRevision);
        assert.equal(locks.handles.get(name)!.key, keyOf(s!, name));
        assert.equal(kv.lease, s!.leaseId);
      }
      locks.assertHeld();
      assert.equal(locks.signal.aborted, false);
      assert.equal(listeners(ac.signal), 0, 'no listener left on the caller’s signal');
      await locks.unlock();
      await assertNoKeys(client, p);
    } finally {
      await log.close();
      await closeAll([s!]);
    }
  });

  it('unlock is idempotent, ends the signal with LockLostError and removes every listener', async () => {
    const p = fresh('unlock-twice');
    await withSessions(client, p, 1, async ([s]) => {
      const locks = await lockAll(s!, [`${p}b`, `${p}a`]);
      const signal = locks.signal; // starts watching both keys
      const inner = [...locks.handles.values()].map((h) => h.signal);
      assert.deepEqual(inner.map(listeners), [1, 1]);
      const first = locks.unlock();
      assert.equal(signal.aborted, true, 'aborted as unlock() starts: work stops before the first key goes');
      await Promise.all([first, locks.unlock()]);
      await locks.unlock();
      assert.equal(signal.aborted, true);
      assert.ok(signal.reason instanceof LockLostError, String(signal.reason));
      assert.throws(() => locks.assertHeld(), (e) => e === signal.reason);
      assert.deepEqual(inner.map(listeners), [0, 0], 'listeners removed from every lock’s signal');
      await assertNoKeys(client, p);
      // Released: a new lockAll on the same names gets them at once, with larger tokens.
      const again = await lockAll(s!, [`${p}a`, `${p}b`]);
      for (const n of again.names) assert.ok(again.fencingTokens.get(n)! > locks.fencingTokens.get(n)!);
      await locks.unlock(); // the old handle again: guarded, leaves the new holding alone
      again.assertHeld();
      assert.equal((await client.get(keyOf(s!, `${p}a`)))?.createRevision, again.fencingTokens.get(`${p}a`));
      await again.unlock();
    });
  });

  it('await using unlocks every lock at the end of the block', async () => {
    const p = fresh('await-using');
    const [s] = await sessions(1);
    try {
      {
        await using locks = await lockAll(s!, [`${p}x`, `${p}y`]);
        assert.equal((await client.getPrefix(p)).kvs.length, 2);
        locks.assertHeld();
      }
      await assertNoKeys(client, p);
    } finally {
      await closeAll([s!]);
    }
  });

  it('withLocks returns fn’s value and unlocks', async () => {
    const p = fresh('withlocks');
    const [s] = await sessions(1);
    try {
      const out = await withLocks(s!, [`${p}2`, `${p}1`], async (locks) => {
        assert.deepEqual(locks.names, [`${p}1`, `${p}2`]);
        assert.equal((await client.getPrefix(p)).kvs.length, 2);
        return 'done';
      });
      assert.equal(out, 'done');
      await assertNoKeys(client, p);
    } finally {
      await closeAll([s!]);
    }
  });

  it('withLocks unlocks when fn throws, and rethrows fn’s error', async () => {
    const p = fresh('withlocks-throws');
    const [s] = await sessions(1);
    try {
      const boom = new Error('boom');
      let seen: MultiLockHandle | undefined;
      await assert.rejects(
        withLocks(s!, [`${p}1`, `${p}2`], async (locks) => {
          seen = locks;
          assert.equal((await client.getPrefix(p)).kvs.length, 2, 'held inside fn');
          throw boom;
        }),
        (e) => e === boom,
      );
      assert.equal(seen?.signal.aborted, true);
      await assertNoKeys(client, p);
    } finally {
      await closeAll([s!]);
    }
  });

  it('bad names, repeats and an empty list are rejected before anything is written', async () => {
    const p = fresh('bad-input');
    const [s] = await sessions(1);
    const log = new EventLog(client, p);
    try {
      await log.ready;
      const bad: [unknown, RegExp][] = [
        [[], /at least one lock name/],
        [[`${p}a`, `${p}b`, `${p}a`], /given twice/],
        [[`${p}a`, `${p}b/`], /ends with "\/"/], // the valid name first: it must not be locked meanwhile
        [[`${p}a`, ''], /empty/],
        [[`${p}a`, 7], /must be a string/],
        [`${p}a`, /must be an array/],
        [undefined, /must be an array/],
        [Array.from({ length: 61 }, (_, i) => `${p}n${i}`), /at most 60 names, got 61/],
      ];
      for (const [names, msg] of bad) {
        await assert.rejects(lockAll(s!, names as string[]), (e: unknown) => e instanceof InvalidArgumentError && msg.test(e.message));
      }
      await assert.rejects(
        withLocks(s!, [`${p}a`, `${p}a`], () => assert.fail('fn must not run')),
        InvalidArgumentError,
      );
      // Events arrive in revision order: if the sentinel is the first event, nothing was written before it.
      await client.put(`${p}sentinel`, '');
      const first = await log.next(() => true);
      assert.equal(first.key, `${p}sentinel`);
      await client.delete(`${p}sentinel`);
    } finally {
      await log.close();
      await closeAll([s!]);
    }
    await assertNoKeys(client, p);
  });

  it('an already-aborted signal or an ended session fails before anything is written', async () => {
    const p = fresh('pre-aborted');
    const [s, dead] = await sessions(2);
    try {
      await dead!.close();
      const reason = new Error('never mind');
      await assert.rejects(lockAll(s!, [`${p}a`, `${p}b`], { signal: AbortSignal.abort(reason) }), (e) => e === reason);
      await assert.rejects(lockAll(dead!, [`${p}a`, `${p}b`]), (e: unknown) => e instanceof SessionExpiredError && e.reason === 'closed');
      await assertNoKeys(client, p);
    } finally {
      await closeAll([s!]);
    }
  });
});

describe('lockAll: no deadlock', T, () => {
  it('callers passing opposite orders queue in the same order, so neither can hold what the other waits for', async () => {
    const p = fresh('opposite');
    const [n1, n2] = [`${p}n1`, `${p}n2`];
    const [a, b, c] = await sessions(3);
    const log = new EventLog(client, p);
    try {
      await log.ready;
      const blocker = await new Mutex(c!, n1).lock();
      const aAll = track(lockAll(a!, [n1, n2]));
      await log.put(keyOf(a!, n1)); // a queues on n1 behind the blocker
      const bAll = track(lockAll(b!, [n2, n1]));
      // b, asked for n2 first, queues on n1 first: taking the free n2 now would deadlock with a.
      const bFirst = await log.next((e) => e.type === 'put' && e.lease === b!.leaseId);
      assert.equal(bFirst.key, keyOf(b!, n1));
      await blocker.unlock();
      const aLocks = await aAll.promise;
      assert.equal(bAll.settled, false, 'b waits behind a on n1');
      assert.equal(await client.get(keyOf(b!, n2)), undefined, 'b has not touched n2 while waiting for n1');
      await aLocks.unlock();
      const bLocks = await bAll.promise;
      for (const n of [n1, n2]) assert.ok(bLocks.fencingTokens.get(n)! > aLocks.fencingTokens.get(n)!);
      await bLocks.unlock();
    } finally {
      await log.close();
      await closeAll([a!, b!, c!]);
    }
    await assertNoKeys(client, p);
  });

  it('two sessions taking overlapping sets in opposite orders many times never deadlock nor share a lock', async () => {
    const p = fresh('stress');
    const shared = [`${p}s1`, `${p}s2`, `${p}s3`];
    const rounds = 25;
    const [a, b] = await sessions(2);
    const log = new EventLog(client, `${p}locks/`);
    const holder = new Map<string, string>(); // name -> who holds it, set after lockAll, cleared before unlock
    const tokens = new Map<string, bigint[]>(); // name -> tokens in the order they were granted
    const counted = new Map<string, number>(); // name -> critical sections that included it
    const lockName = (n: string): string => n.replace(p, `${p}locks/`);
    const worker = async (who: string, s: Session, own: string): Promise<void> => {
      for (let i = 0; i < rounds; i++) {
        // Overlapping sets, each round in a different order, the two workers in opposite orders.
        const set = [...shared.slice(i % 3), own, ...shared.slice(0, i % 3)].map(lockName);
        const locks = await lockAll(s, who === 'a' ? set : [...set].reverse());
        for (const n of locks.names) {
          assert.equal(holder.get(n), undefined, `${who} got ${n} while ${holder.get(n)} holds it`);
          holder.set(n, who);
          const seen = tokens.get(n) ?? [];
          assert.ok(seen.length === 0 || locks.fencingTokens.get(n)! > seen.at(-1)!, `tokens of ${n} increase`);
          tokens.set(n, [...seen, locks.fencingTokens.get(n)!]);
        }
        // A read-modify-write per lock, written only while every lock is held: a lost update would show.
        for (const n of locks.names) {
          const counter = `${p}count/${n}`;
          const current = Number((await client.get(counter))?.value.toString() ?? '0');
          const r = await client.txn({ compare: locks.ownerCompares(), success: [op.put(counter, String(current + 1))], failure: [] });
          assert.ok(r.succeeded, 'ownerCompares hold while every lock is held');
          counted.set(n, (counted.get(n) ?? 0) + 1);
        }
        locks.assertHeld();
        for (const n of locks.names) holder.delete(n);
        await locks.unlock();
      }
    };
    try {
      await log.ready;
      await Promise.all([worker('a', a!, `${p}only-a`), worker('b', b!, `${p}only-b`)]);
      for (const [n, count] of counted) {
        assert.equal(Number((await client.get(`${p}count/${n}`))!.value.toString()), count, `no lost update on ${n}`);
      }
      // (Each worker records each shared lock once a round by construction: no count to assert here;
      // the tokens' order is asserted as they are granted, the counters above catch a lost update.)
      // The events agree: every key created under the lock names was a granted holding, and each was deleted.
      const granted = new Set([...tokens.values()].flat());
      for (const token of granted) {
        const put = log.events.find((e) => e.type === 'put' && e.createRevision === token);
        assert.ok(put, `a put for token ${token}`);
        await log.next((e) => e.type === 'delete' && e.key === put.key && e.rev > token);
      }
      assert.deepEqual(
        log.events.filter((e) => e.type === 'put').map((e) => e.createRevision).sort(),
        [...granted].sort(),
        'no key was created that was not a granted holding',
      );
      await client.delete(`${p}count/`, { prefix: true });
    } finally {
      await log.close();
      await closeAll([a!, b!]);
    }
    await assertNoKeys(client, p);
  });
});

describe('lockAll: giving up and failing', T, () => {
  it('aborting while waiting for the 2nd lock releases the 1st, rejects with the reason and leaves no key', async () => {
    const p = fresh('abort-second');
    const [n1, n2] = [`${p}n1`, `${p}n2`];
    const [a, c] = await sessions(2);
    const log = new EventLog(client, p);
    try {
      await log.ready;
      const blocker = await new Mutex(c!, n2).lock();
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
    } finally {
      await log.close();
      await closeAll([a!, c!]);
    }
    await assertNoKeys(client, p);
  });

  it('the session closing while waiting for the 2nd lock fails with SessionExpiredError and leaves no key', async () => {
    const p = fresh('session-closed');
    const [n1, n2] = [`${p}n1`, `${p}n2`];
    const [a, c] = await sessions(2);
    const log = new EventLog(client, p);
    try {
      await log.ready;
      const blocker = await new Mutex(c!, n2).lock();
      const waiting = lockAll(a!, [n1, n2]);
      await log.put(keyOf(a!, n2));
      // Expect the rejection before closing: it may come while close() is still running.
      const rejected = assert.rejects(waiting, (e: unknown) => e instanceof SessionExpiredError && e.reason === 'closed');
      await a!.close();
      await rejected;
      assert.deepEqual(await keysOn(a!, p), []);
      blocker.assertHeld();
      await blocker.unlock();
    } finally {
      await log.close();
      await closeAll([a!, c!]);
    }
    await assertNoKeys(client, p);
  });

  it('a failed 2nd lock (its queued key deleted by an operator) releases the 1st while the session lives', async () => {
    const p = fresh('second-fails');
    const [n1, n2] = [`${p}n1`, `${p}n2`];
    const [a, c] = await sessions(2);
    const log = new EventLog(client, p);
    try {
      await log.ready;
      const blocker = await new Mutex(c!, n2).lock();
      const waiting = track(lockAll(a!, [n1, n2]));
      await log.put(keyOf(a!, n2));
      await client.delete(keyOf(a!, n2));
      await blocker.unlock(); // wakes a, which finds its queued key gone
      await assert.rejects(waiting.promise, (e: unknown) => e instanceof LockLostError && e.key === keyOf(a!, n2));
      // Released by lockAll before it rejected, not by the lease: the session lives on.
      assert.deepEqual(await keysOn(a!, p), []);
      a!.assertAlive();
      assert.ok((await client.leaseLeases()).includes(a!.leaseId), 'the lease lives on');
    } finally {
      await log.close();
      await closeAll([a!, c!]);
    }
    await assertNoKeys(client, p);
  });

  it('a 1st lock lost while waiting for the 2nd fails lockAll with its LockLostError instead of a half-held success', async () => {
    const p = fresh('first-lost');
    const [n1, n2] = [`${p}n1`, `${p}n2`];
    const [a, c] = await sessions(2);
    const log = new EventLog(client, p);
    try {
      await log.ready;
      const blocker = await new Mutex(c!, n2).lock();
      const waiting = lockAll(a!, [n1, n2]);
      await log.put(keyOf(a!, n2));
      await client.delete(keyOf(a!, n1)); // an operator frees n1 behind our back
      await blocker.unlock(); // a gets n2, then must find n1 gone
      await assert.rejects(waiting, (e: unknown) => e instanceof LockLostError && e.key === keyOf(a!, n1) && /call lockAll again/.test(e.message));
      assert.deepEqual(await keysOn(a!, p), [], 'n2, taken last, is released too');
    } finally {
      await log.close();
      await closeAll([a!, c!]);
    }
    await assertNoKeys(client, p);
  });

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
      assert.throws(() => locks.assertHeld(), (e) => e === reason);
      assert.deepEqual(inner.map(listeners), [0, 0, 0], 'no listener left once the holding ended');
      assert.ok(await client.get(keyOf(s!, `${p}a`)), 'the other locks stay held until unlock()');
      await locks.unlock(); // the lost one has nothing to delete; must not throw
      assert.throws(() => locks.assertHeld(), (e) => e === reason, 'the loss stays the reason');
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
        assert.equal(locks.ownerCompares().length, 3);
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
