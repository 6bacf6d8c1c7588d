// lockAll / withLocks against a real single-member etcd: acquire and release in canonical order, and
// no deadlock (giving up, failing and losing: multilock-loss.test.ts). No sleeps: every wait is on a
// watch event, a promise or a signal. Each test uses its own lock names and leaves no key and no lease.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import { type Client, InvalidArgumentError, LockLostError, Mutex, type Session, SessionExpiredError, op } from '../src/index.js';
import { lockAll, withLocks, type MultiLockHandle } from '../src/primitives/multilock.js';
import { EventLog, assertNoKeys, etcdForFile, track, openSessions, closeAll, withSessions } from './helpers.js';

const ROOT = 'test/multilock/';
let client: Client;
const fresh = etcdForFile(ROOT, (_etcd, c) => (client = c));
/** A hang guard (a deadlock must fail, not hang the run), not a timing assertion. */
const T = { timeout: 60_000 };

/** Sessions on `on` that the test closes at its end (closing revokes: no lease is left). */
const sessions = (n: number, on: Client = client): Promise<Session[]> => openSessions(on, n);
const keyOf = (s: Session, name: string): string => `${name}/${s.leaseId.toString(16)}`;
/** How many abort listeners a signal has: ours must all be gone once a holding ends. */
const listeners = (s: AbortSignal): number => getEventListeners(s, 'abort').length;

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
      assert.throws(
        () => locks.assertHeld(),
        (e) => e === signal.reason,
      );
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
      // The events agree: every key created under the lock names was a granted holding, and each was
      // deleted. A fencing token is per name: keys of two names may share one (the client may send
      // two sessions' enqueues on different names in one request), so a holding is its name and token.
      const nameOf = (key: string): string => key.slice(0, key.lastIndexOf('/'));
      const granted = [...tokens].flatMap(([n, ts]) => ts.map((t) => ({ n, t })));
      for (const { n, t } of granted) {
        const put = log.events.find((e) => e.type === 'put' && e.createRevision === t && nameOf(e.key) === n);
        assert.ok(put, `a put for ${n} at token ${t}`);
        await log.next((e) => e.type === 'delete' && e.key === put.key && e.rev > t);
      }
      assert.deepEqual(
        log.events
          .filter((e) => e.type === 'put')
          .map((e) => `${nameOf(e.key)} ${e.createRevision}`)
          .sort(),
        granted.map(({ n, t }) => `${n} ${t}`).sort(),
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
