// Semaphore against a real single-member etcd: N permits at once, FIFO grants, one release waking
// one waiter, permit-count conflicts, and every way a waiter or a holder can go away. Each test uses
// its own names and leaves no key and no lease.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import {
  Client,
  InvalidArgumentError,
  MAX_PERMITS,
  Mutex,
  PermitCountConflictError,
  PermitLostError,
  Semaphore,
  Session,
  SessionExpiredError,
  op,
  withPermit,
  type PermitHandle,
} from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { EventLog, aborted, assertNoKeys, etcdForFile, grpcHandled, track, waitFor, type Tracked, openSessions, closeAll, settleAll, settledOrHang, keysUnder, withSessions } from './helpers.js';
import { Probe } from './probe.js';

const ROOT = 'test/semaphore/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

/** Sessions on `on` (default: this file's client) that the test closes at its end. */
const sessions = (n: number, ttl = 30, on: Client = client): Promise<Session[]> => openSessions(on, n, ttl);

/** A client for a test's participants, spied on: its calls and watches are counted. */
const probed = (): Probe => new Probe(new Client({ endpoints: etcd.endpoints }));


/** A permit granted to a waiter is marked by a put on its key after the one that created it. */
const isMark = (e: { type: string; rev: bigint; createRevision: bigint }): boolean => e.type === 'put' && e.rev !== e.createRevision;

describe('Semaphore: permits', () => {
  it('a permit key is <name>/<lease hex> on the session lease, holding the permit count; fencing token = its CreateRevision', async () => {
    const p = fresh('key');
    await withSessions(client, p, 1, async ([s]) => {
      const sem = new Semaphore(s!, `${p}sem`, { permits: 3 });
      assert.equal(sem.key, `${p}sem/${s!.leaseId.toString(16)}`);
      assert.equal(sem.permits, 3);
      const h = await sem.acquire();
      assert.equal(h.key, sem.key);
      const kv = await client.get(h.key);
      assert.ok(kv, 'the key exists while held');
      assert.equal(kv.lease, s!.leaseId);
      assert.equal(kv.value.toString(), '3', 'the value is the permit count');
      assert.equal(h.fencingToken, kv.createRevision);
      assert.equal(h.session, s);
      h.assertHeld();
      assert.equal(h.signal.aborted, false);
      await h.release();
      assert.equal(await client.get(h.key), undefined, 'release removes the key');
    });
  });

  it('N sessions hold a permit at once; the N+1th waits until one of them releases', async () => {
    const p = fresh('n-at-once');
    const name = `${p}sem`;
    const probe = probed();
    const ss = await sessions(4, 30, probe.client);
    try {
      const held = await Promise.all(ss.slice(0, 3).map((s) => new Semaphore(s, name, { permits: 3 }).acquire()));
      for (const h of held) h.assertHeld();
      const fourth = track(new Semaphore(ss[3]!, name, { permits: 3 }).acquire());
      await probe.blocked(1, 'the fourth is queued and blocked');
      assert.equal(fourth.settled, false, 'three permits are taken: the fourth waits');
      assert.equal((await keysUnder(client, `${name}/`)).length, 4, 'the waiter’s key is queued behind the holders');
      await held[1]!.release();
      const h = await fourth.promise;
      assert.ok(h.fencingToken > held[2]!.fencingToken);
      held[0]!.assertHeld();
      held[2]!.assertHeld();
      await Promise.all([h, held[0]!, held[2]!].map((x) => x.release()));
    } finally {
      await closeAll(ss);
      await probe.client.close();
    }
    await assertNoKeys(client, p);
  });

  it('each release hands the permit to the oldest waiter, and nobody else moves', { timeout: 60_000 }, async () => {
    const p = fresh('fifo-step');
    const name = `${p}sem`;
    const waiters = 6;
    const probe = probed();
    const hs = await sessions(2);
    const ws = await sessions(waiters, 30, probe.client);
    const pending: Tracked<PermitHandle>[] = [];
    try {
      const holders = await Promise.all(hs.map((s) => new Semaphore(s, name, { permits: 2 }).acquire()));
      for (let i = 0; i < waiters; i++) {
        pending.push(track(new Semaphore(ws[i]!, name, { permits: 2 }).acquire()));
        await probe.blocked(i + 1, `waiter ${i} queued`); // one at a time: the enqueue order is known
      }
      const created = await Promise.all(ws.map(async (s) => (await client.get(`${name}/${s.leaseId.toString(16)}`))!.createRevision));
      for (let i = 1; i < waiters; i++) assert.ok(created[i]! > created[i - 1]!);
      // Release the oldest holder each time: the oldest waiter, and only it, gets the permit.
      const current = [...holders];
      for (let i = 0; i < waiters; i++) {
        await current.shift()!.release();
        const h = await pending[i]!.promise;
        assert.equal(h.fencingToken, created[i], `waiter ${i} got the permit, token = its CreateRevision`);
        await probe.blocked(waiters - i - 1, `the ${waiters - i - 1} waiters left blocked again`);
        assert.deepEqual(
          pending.map((t) => t.settled),
          pending.map((_, j) => j <= i),
          `after release ${i}, only waiters 0..${i} hold`,
        );
        current.push(h);
      }
      await Promise.all(current.map((h) => h.release()));
    } finally {
      await closeAll([...hs, ...ws]);
      await probe.client.close();
      await settleAll(pending);
    }
    await assertNoKeys(client, p);
  });

  it('free-running: 20 waiters on 3 permits are granted in CreateRevision order, never more than 3 at once', { timeout: 120_000 }, async () => {
    const p = fresh('fifo-run');
    const name = `${p}sem`;
    const permits = 3;
    const n = 20;
    const clients = [client, new Client({ endpoints: etcd.endpoints })];
    const hs = await sessions(permits);
    const ws = await Promise.all(Array.from({ length: n }, (_, i) => Session.create(clients[i % 2]!, { ttl: 30 })));
    const log = new EventLog(client, `${name}/`);
    try {
      await log.ready;
      const holders = await Promise.all(hs.map((s) => new Semaphore(s, name, { permits }).acquire()));
      let inside = permits;
      let maxInside = permits;
      const created: bigint[] = [];
      const tokens: bigint[] = [];
      const work: Promise<void>[] = [];
      for (let i = 0; i < n; i++) {
        const sem = new Semaphore(ws[i]!, name, { permits });
        const from = log.events.length;
        work.push(
          sem.acquire().then(async (h) => {
            inside++;
            maxInside = Math.max(maxInside, inside);
            tokens.push(h.fencingToken);
            await client.get(h.key); // hold across a round trip: an extra holder granted meanwhile is counted
            inside--;
            await h.release();
          }),
        );
        created.push((await log.put(sem.key, from)).createRevision);
      }
      for (const h of holders) {
        inside--;
        await h.release();
      }
      await Promise.all(work);
      assert.ok(maxInside <= permits, `${maxInside} holders at once`);
      // Our log sees what etcd recorded: wait until it has every waiter's delete.
      await Promise.all(ws.map((s) => log.deleted(`${name}/${s.leaseId.toString(16)}`)));
      // Grants as etcd recorded them: each waiter's mark, in revision order.
      const marks = log.events.filter(isMark).map((e) => e.createRevision);
      assert.deepEqual(marks, created, 'each waiter marked its permit, in enqueue order');
      assert.deepEqual([...tokens].sort((a, b) => (a < b ? -1 : 1)), created);
      // And at each mark, the waiter was among the `permits` oldest keys then present (a delete
      // event carries no CreateRevision: keys are tracked by name).
      const live = new Map<string, bigint>();
      for (const e of log.events) {
        if (e.type === 'delete') live.delete(e.key);
        else if (!isMark(e)) live.set(e.key, e.createRevision);
        else {
          const older = [...live.values()].filter((c) => c < e.createRevision).length;
          assert.ok(older < permits, `${e.key} took a permit with ${older} older keys present`);
        }
      }
    } finally {
      await log.close();
      await closeAll([...hs, ...ws]);
      await clients[1]!.close();
    }
    await assertNoKeys(client, p);
  });

  it('two holders releasing at once let the two oldest waiters in, in order, and nobody else', { timeout: 60_000 }, async () => {
    const p = fresh('two-at-once');
    const name = `${p}sem`;
    const probe = probed();
    const hs = await sessions(2);
    const ws = await sessions(4, 30, probe.client);
    const log = new EventLog(client, `${name}/`);
    const pending: Tracked<PermitHandle>[] = [];
    try {
      await log.ready;
      const holders = await Promise.all(hs.map((s) => new Semaphore(s, name, { permits: 2 }).acquire()));
      for (let i = 0; i < 4; i++) {
        pending.push(track(new Semaphore(ws[i]!, name, { permits: 2 }).acquire()));
        await probe.blocked(i + 1);
      }
      const from = log.events.length;
      await Promise.all(holders.map((h) => h.release()));
      const [a, b] = await Promise.all([settledOrHang(pending[0]!, 'the head’s permit'), settledOrHang(pending[1]!, 'the second waiter’s permit')]);
      await probe.blocked(2, 'the last two waiters blocked again');
      assert.equal(pending[2]!.settled || pending[3]!.settled, false, 'two permits freed, two waiters in');
      // As etcd recorded the grants: the head marked its key first, then the waiter behind it.
      await log.next((e) => isMark(e) && e.key === b.key, from);
      assert.deepEqual(
        log.events.slice(from).filter(isMark).map((e) => e.key),
        [a.key, b.key],
      );
      await a.release();
      const c = await pending[2]!.promise;
      await b.release();
      const d = await pending[3]!.promise;
      await Promise.all([c.release(), d.release()]);
    } finally {
      await log.close();
      await closeAll([...hs, ...ws]);
      await probe.client.close();
      await settleAll(pending);
    }
    await assertNoKeys(client, p);
  });

  it('MAX_PERMITS holders and a waiter at the head: the head’s one-Txn check of every holder fits etcd’s limit', { timeout: 60_000 }, async () => {
    const p = fresh('max-permits');
    const name = `${p}sem`;
    const probe = probed();
    const hs = await sessions(MAX_PERMITS);
    const [w] = await sessions(1, 30, probe.client);
    try {
      const holders = await Promise.all(hs.map((s) => new Semaphore(s, name, { permits: MAX_PERMITS }).acquire()));
      const waiting = track(new Semaphore(w!, name, { permits: MAX_PERMITS }).acquire());
      await probe.blocked(1, 'the waiter blocked at the head');
      assert.equal(waiting.settled, false);
      assert.ok(Probe.isPrefix(probe.active()[0]!), 'the head watches the prefix');
      await holders[17]!.release();
      const h = await waiting.promise;
      await Promise.all([...holders.filter((_, i) => i !== 17), h].map((x) => x.release()));
    } finally {
      await closeAll([...hs, w!]);
      await probe.client.close();
    }
    await assertNoKeys(client, p);
  });
});

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

describe('Semaphore: one release wakes one waiter (no herd)', () => {
  /**
   * `waiters` queued behind 2 holders; one holder releases. Counts what etcd answered (Txns, Ranges)
   * and the watches the waiters created, from the release until the oldest waiter holds and the
   * next one is blocked again at the head.
   */
  async function oneRelease(label: string, waiters: number): Promise<{ txns: number; ranges: number; watches: number; granted: number }> {
    const p = fresh(label);
    const name = `${p}sem`;
    const url = etcd.clientUrls[0]!;
    const probe = probed();
    const hs = await sessions(2);
    const ws = await sessions(waiters, 30, probe.client);
    const pending: Tracked<PermitHandle>[] = [];
    let cost: { txns: number; ranges: number; watches: number; granted: number } | undefined;
    try {
      const holders = await Promise.all(hs.map((s) => new Semaphore(s, name, { permits: 2 }).acquire()));
      for (let i = 0; i < waiters; i++) {
        pending.push(track(new Semaphore(ws[i]!, name, { permits: 2 }).acquire()));
        await probe.blocked(i + 1, `waiter ${i} queued`);
      }
      assert.equal(probe.active().filter(Probe.isPrefix).length, 1, 'only the head watches the prefix');
      const txns = await grpcHandled(url, 'Txn');
      const ranges = await grpcHandled(url, 'Range');
      const watches = probe.watches.length;
      await holders[0]!.release();
      const first = await pending[0]!.promise;
      // The next waiter is the head now: its new prefix watch is open, and everything is answered.
      await probe.quiet('the next waiter blocked at the head', (open) => open.length === waiters - 1 && open.some((w) => Probe.isPrefix(w) && probe.watches.indexOf(w) >= watches));
      cost = {
        txns: (await grpcHandled(url, 'Txn')) - txns,
        ranges: (await grpcHandled(url, 'Range')) - ranges,
        watches: probe.watches.length - watches,
        granted: pending.filter((t) => t.settled).length,
      };
      assert.equal(first.fencingToken, (await client.get(`${name}/${ws[0]!.leaseId.toString(16)}`))?.createRevision);
      await closeAll(ws.slice(1)); // the waiters give up (their permits never came)
      await settleAll(pending);
      await Promise.all([first.release(), holders[1]!.release()]);
    } finally {
      await closeAll([...hs, ...ws]);
      await probe.client.close();
      await settleAll(pending);
    }
    await assertNoKeys(client, p);
    return cost;
  }

  it('one release costs the same few requests with 5 or 30 waiters, and lets exactly one waiter in', { timeout: 120_000 }, async (t) => {
    const few = await oneRelease('herd-5', 5);
    const many = await oneRelease('herd-30', 30);
    t.diagnostic(`one release with 5 waiters: ${JSON.stringify(few)}; with 30: ${JSON.stringify(many)}`);
    assert.equal(few.granted, 1, 'one release, one new holder');
    assert.equal(many.granted, 1, 'one release, one new holder');
    // The release (1); the head, woken by the delete of a holder it had confirmed, marks its key at
    // once (1); the next waiter's look and its check once its watch is up (2); one watch: the new
    // head's on the prefix.
    assert.ok(many.txns + many.ranges <= 4, `one release cost ${many.txns} Txns and ${many.ranges} Ranges with 30 waiters`);
    assert.ok(many.watches <= 1, `one release made the waiters open ${many.watches} watches`);
    assert.deepEqual(many, few, 'the cost of a release does not grow with the queue');
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
      assert.deepEqual([after?.createRevision, after?.modRevision, after?.lease], [before?.createRevision, before?.modRevision, before?.lease]);
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

describe('Semaphore: giving up and losing', () => {
  /** Two holders of a 2-permit semaphore on `client`, and a probed client for the waiters. */
  async function full(p: string, waiters: number, ttl = 30) {
    const name = `${p}sem`;
    const probe = probed();
    const hs = await sessions(2);
    const ws = await sessions(waiters, ttl, probe.client);
    const holders = await Promise.all(hs.map((s) => new Semaphore(s, name, { permits: 2 }).acquire()));
    return {
      name,
      probe,
      hs,
      ws,
      holders,
      sem: (i: number) => new Semaphore(ws[i]!, name, { permits: 2 }),
      async close() {
        await closeAll([...hs, ...ws]);
        await probe.client.close();
      },
    };
  }

  it('aborting a waiter deletes its key and rejects with the signal’s reason', async () => {
    const p = fresh('abort');
    const f = await full(p, 1);
    try {
      const ac = new AbortController();
      const waiting = f.sem(0).acquire({ signal: ac.signal });
      waiting.catch(() => {});
      await f.probe.blocked(1);
      const reason = new Error('caller gave up');
      ac.abort(reason);
      await assert.rejects(waiting, (e) => e === reason);
      assert.equal(await client.get(f.sem(0).key), undefined, 'our queued key is gone when acquire() rejects');
      for (const h of f.holders) h.assertHeld();
      await Promise.all(f.holders.map((h) => h.release()));
    } finally {
      await f.close();
    }
    await assertNoKeys(client, p);
  });

  it('an already-aborted signal rejects before anything is written', async () => {
    const p = fresh('pre-aborted');
    const [s] = await sessions(1);
    try {
      const reason = new Error('never mind');
      await assert.rejects(new Semaphore(s!, `${p}sem`, { permits: 1 }).acquire({ signal: AbortSignal.abort(reason) }), (e) => e === reason);
      await assertNoKeys(client, p);
    } finally {
      await closeAll([s!]);
    }
  });

  it('closing a waiting session fails acquire() at once with SessionExpiredError, the others untouched', async () => {
    const p = fresh('waiter-closed');
    const f = await full(p, 2);
    try {
      const head = track(f.sem(0).acquire());
      await f.probe.blocked(1);
      // The second waiter watches only the head, which never moves: only its session can end its wait.
      const waiting = track(f.sem(1).acquire());
      await f.probe.blocked(2);
      await f.ws[1]!.close();
      // At once: not at its periodic re-check, 30 s (its TTL) after it began to wait.
      await assert.rejects(settledOrHang(waiting, 'acquire() to fail once its session closed'), (e: unknown) => e instanceof SessionExpiredError && e.reason === 'closed' && e.leaseId === f.ws[1]!.leaseId);
      await f.probe.blocked(1, 'the head still blocked');
      assert.equal(head.settled, false);
      assert.deepEqual((await keysUnder(client, `${f.name}/`)).sort(), [...f.holders.map((h) => h.key), f.sem(0).key].sort());
      for (const h of f.holders) h.assertHeld();
      await f.holders[0]!.release();
      const h = await head.promise;
      await Promise.all([h.release(), f.holders[1]!.release()]);
    } finally {
      await f.close();
    }
    await assertNoKeys(client, p);
  });

  it('a waiter whose lease is revoked fails with SessionExpiredError without waiting for a permit', async () => {
    const p = fresh('waiter-revoked');
    const f = await full(p, 2, 3);
    try {
      const head = track(f.sem(0).acquire());
      await f.probe.blocked(1);
      // Behind the head, watching only it: nothing but the session's end can wake this waiter.
      const waiting = track(f.sem(1).acquire());
      await f.probe.blocked(2);
      await client.leaseRevoke(f.ws[1]!.leaseId);
      await aborted(f.ws[1]!.signal); // the session learns at its next renewal (every second)
      // Then at once: not at the waiter's periodic re-check, 10 s after it began to wait.
      await assert.rejects(settledOrHang(waiting, 'acquire() to fail once its session was lost', 5_000), (e: unknown) => {
        assert.ok(e instanceof SessionExpiredError, String(e));
        assert.equal(e.reason, 'lease-gone');
        return true;
      });
      assert.equal(head.settled, false);
      for (const h of f.holders) h.assertHeld();
      await f.holders[0]!.release();
      const h = await head.promise;
      await Promise.all([h.release(), f.holders[1]!.release()]);
    } finally {
      await f.close();
    }
    await assertNoKeys(client, p);
  });

  it('a waiter whose lease is revoked reports SessionExpiredError even when a permit frees before its session notices', async () => {
    const p = fresh('waiter-revoked-race');
    const f = await full(p, 1, 30); // next renewal in 10 s: the session cannot notice first
    try {
      const waiting = f.sem(0).acquire();
      waiting.catch(() => {});
      await f.probe.blocked(1);
      await client.leaseRevoke(f.ws[0]!.leaseId); // its key goes with its lease
      await f.holders[0]!.release(); // wakes the head, which finds its own key gone
      await assert.rejects(waiting, (e: unknown) => {
        assert.ok(e instanceof SessionExpiredError, `expected SessionExpiredError, got ${String(e)}`);
        assert.equal(e.reason, 'lease-gone');
        return true;
      });
      await f.holders[1]!.release();
    } finally {
      await f.close();
    }
    await assertNoKeys(client, p);
  });

  it('an operator deleting a holder’s key aborts its signal with PermitLostError, and lets a waiter in', async () => {
    const p = fresh('key-deleted');
    const f = await full(p, 1);
    try {
      const victim = f.holders[0]!;
      const signal = victim.signal;
      const waiting = track(f.sem(0).acquire());
      await f.probe.blocked(1);
      await client.delete(victim.key);
      const reason = await aborted(signal);
      assert.ok(reason instanceof PermitLostError, String(reason));
      assert.equal(reason.key, victim.key);
      assert.throws(() => victim.assertHeld(), PermitLostError);
      const h = await waiting.promise;
      await victim.release(); // nothing to delete; must not throw
      f.holders[1]!.assertHeld();
      await Promise.all([h.release(), f.holders[1]!.release()]);
    } finally {
      await f.close();
    }
    await assertNoKeys(client, p);
  });

  it(
    'an operator moving a holder’s key off its lease ends the holding, and the waiter at the head takes the permit',
    { timeout: 60_000 },
    async () => {
    const p = fresh('key-moved');
    const name = `${p}sem`;
    const probe = probed();
    const [a, b] = await sessions(2);
    // A long TTL: the waiter's periodic re-check (every max(10 s, TTL)) cannot be what lets it in.
    const [w] = await sessions(1, 600, probe.client);
    try {
      const held = await Promise.all([a!, b!].map((s) => new Semaphore(s, name, { permits: 2 }).acquire()));
      const signal = held[0]!.signal;
      const waiting = track(new Semaphore(w!, name, { permits: 2 }).acquire());
      await probe.blocked(1);
      await client.put(held[0]!.key, '2'); // no lease: stray data now, which waiters skip (etcd 6631)
      const reason = await aborted(signal);
      assert.ok(reason instanceof PermitLostError, String(reason));
      const h = await settledOrHang(waiting, 'the head to take the permit the moved key no longer holds');
      await Promise.all([h.release(), held[1]!.release()]);
    } finally {
      await closeAll([a!, b!, w!]);
      await probe.client.close();
      await client.delete(p, { prefix: true }); // the moved key belongs to no lease
    }
  },
  );

  it('a waiter whose predecessor gives up keeps its place and gets its permit in order', { timeout: 30_000 }, async () => {
    const p = fresh('pred-aborts');
    const f = await full(p, 3);
    const pending: Tracked<PermitHandle>[] = [];
    try {
      const acs = [0, 1, 2].map(() => new AbortController());
      for (let i = 0; i < 3; i++) {
        pending.push(track(f.sem(i).acquire({ signal: acs[i]!.signal })));
        await f.probe.blocked(i + 1);
      }
      // Waiter 1 gives up: waiter 2 was watching it, looks again, and keeps waiting (behind waiter 0).
      acs[1]!.abort(new Error('gives up'));
      await assert.rejects(pending[1]!.promise, /gives up/);
      await f.probe.blocked(2, 'waiters 0 and 2 blocked again');
      assert.equal(pending[0]!.settled || pending[2]!.settled, false);
      // Permits still go in order: waiter 0, then waiter 2.
      await f.holders[0]!.release();
      const h0 = await pending[0]!.promise;
      await f.probe.blocked(1, 'waiter 2 at the head');
      assert.equal(pending[2]!.settled, false, 'waiter 2 waits: both permits are taken');
      await f.holders[1]!.release();
      const h2 = await pending[2]!.promise;
      assert.ok(h2.fencingToken > h0.fencingToken);
      await Promise.all([h0.release(), h2.release()]);
    } finally {
      await f.close();
      await settleAll(pending);
    }
    await assertNoKeys(client, p);
  });

  it('when the head gives up, the next waiter becomes head and gets the next permit', { timeout: 30_000 }, async () => {
    const p = fresh('head-aborts');
    const f = await full(p, 2);
    const pending: Tracked<PermitHandle>[] = [];
    try {
      const ac = new AbortController();
      pending.push(track(f.sem(0).acquire({ signal: ac.signal })));
      await f.probe.blocked(1);
      pending.push(track(f.sem(1).acquire()));
      await f.probe.blocked(2);
      ac.abort(new Error('head gives up'));
      await assert.rejects(pending[0]!.promise, /head gives up/);
      await f.probe.quiet('waiter 1 at the head', (open) => open.length === 1 && Probe.isPrefix(open[0]!));
      assert.equal(pending[1]!.settled, false);
      await f.holders[1]!.release();
      const h = await pending[1]!.promise;
      await Promise.all([h.release(), f.holders[0]!.release()]);
    } finally {
      await f.close();
      await settleAll(pending);
    }
    await assertNoKeys(client, p);
  });

  it('revoking a holder’s lease (its process died) aborts its signal and lets the next waiter in', async () => {
    const p = fresh('holder-revoked');
    const f = await full(p, 1);
    try {
      const victim = f.holders[1]!;
      const signal = victim.signal;
      const waiting = track(f.sem(0).acquire());
      await f.probe.blocked(1);
      await client.leaseRevoke(victim.session.leaseId);
      const h = await waiting.promise;
      const reason = await aborted(signal);
      assert.ok(reason instanceof PermitLostError, String(reason));
      assert.throws(() => victim.assertHeld(), PermitLostError);
      await Promise.all([h.release(), f.holders[0]!.release()]);
    } finally {
      await f.close();
    }
    await assertNoKeys(client, p);
  });

  it('a holder process killed with SIGKILL frees its permit once its lease expires', { timeout: 30_000 }, async () => {
    const p = fresh('holder-killed');
    const name = `${p}sem`;
    const probe = probed();
    const [w] = await sessions(1, 30, probe.client);
    const index = fileURLToPath(new URL('../src/index.ts', import.meta.url));
    const code = `
      import { Client, Semaphore, Session } from ${JSON.stringify(index)};
      const [endpoint, name] = process.argv.slice(1);
      const client = new Client({ endpoints: [endpoint] });
      const session = await Session.create(client, { ttl: 2 });
      const h = await new Semaphore(session, name, { permits: 1 }).acquire();
      console.log(h.key);
      setInterval(() => {}, 1 << 30);
    `;
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code, etcd.endpoints[0]!, name], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = once(child, 'exit');
    try {
      let out = '';
      child.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
      const childKey = await waitFor(() => (out.includes('\n') ? out.trim() : undefined), 'the child holds the permit');
      const childKv = await client.get(childKey);
      assert.ok(childKv && childKv.lease !== 0n);
      const waiting = track(new Semaphore(w!, name, { permits: 1 }).acquire());
      await probe.blocked(1);
      child.kill('SIGKILL');
      await exited;
      assert.equal(waiting.settled, false);
      const h = await waiting.promise; // once the child's lease expires (2 s) its key goes
      assert.equal(await client.get(childKey), undefined);
      assert.ok(h.fencingToken > childKv.createRevision);
      await h.release();
      await waitFor(async () => !(await client.leaseLeases()).includes(childKv.lease), 'the child’s lease gone');
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await closeAll([w!]);
      await probe.client.close();
    }
    await assertNoKeys(client, p);
  });

  it('a stray key without a lease does not take a permit (etcd 6631)', async () => {
    const p = fresh('stray');
    const name = `${p}sem`;
    const [a, b] = await sessions(2);
    try {
      await client.put(`${name}/1234abcd`, '1'); // hex-looking and older than anyone: no lease
      const h = await new Semaphore(a!, name, { permits: 1 }).acquire();
      await h.release();
      const t = await new Semaphore(b!, name, { permits: 1 }).tryAcquire();
      assert.ok(t, 'tryAcquire looks past the stray key too');
      await t.release();
    } finally {
      await closeAll([a!, b!]);
      await client.delete(p, { prefix: true });
    }
  });

  it(
    'a stray key ahead of the queue does not keep a waiter from the permit a release frees',
    { timeout: 60_000 },
    async () => {
    const p = fresh('stray-behind');
    const name = `${p}sem`;
    const probe = probed();
    const [a, b] = await sessions(2);
    const [w] = await sessions(1, 600, probe.client); // its periodic re-check is 600 s away
    try {
      await client.put(`${name}/1234abcd`, '2'); // stray: no lease
      const h1 = await new Semaphore(a!, name, { permits: 2 }).acquire();
      const h2 = await new Semaphore(b!, name, { permits: 2 }).acquire(); // the stray takes no permit
      // Real participants ahead of w: h1 and h2, so it waits; once h1 releases, a permit is free for it.
      const waiting = track(new Semaphore(w!, name, { permits: 2 }).acquire());
      await probe.blocked(1);
      assert.equal(waiting.settled, false);
      await h1.release();
      const h = await settledOrHang(waiting, 'the waiter to take the permit h1 freed');
      await Promise.all([h.release(), h2.release()]);
    } finally {
      await closeAll([a!, b!, w!]);
      await probe.client.close();
      await client.delete(p, { prefix: true });
    }
  },
  );
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
      const h = await new Semaphore(s!, `${p}sem`, { permits: 1 }).acquire();
      const fenced = (v: string) => client.txn({ compare: [h.ownerCompare()], success: [op.put(`${p}data`, v)], failure: [] });
      assert.equal((await fenced('1')).succeeded, true);
      await client.delete(h.key);
      const again = await new Semaphore(s!, `${p}sem`, { permits: 1 }).acquire();
      assert.equal((await fenced('2')).succeeded, false);
      assert.equal((await client.get(`${p}data`))?.value.toString(), '1');
      await again.release();
    } finally {
      await closeAll([s!]);
      await client.delete(p, { prefix: true });
    }
  });
});
