// Bad input and hostile surroundings, against real etcd: odd names and TTLs, endpoints that do not
// answer, a member without a leader, compaction under a waiter and an observer, an operator deleting
// keys or revoking leases by hand, and thousands of waiters giving up at once. Every test cleans up;
// `after` proves nothing is left (no key, no lease).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as delay } from 'node:timers/promises';
import {
  Client,
  Election,
  InvalidArgumentError,
  LockHandle,
  LockLostError,
  MAX_TTL,
  Mutex,
  Session,
  SessionExpiredError,
  UnavailableError,
  currentLeader,
  observeLeader,
  op,
  type LeaderEvent,
} from '../src/index.js';
import { startEtcd, startProxy, type EtcdCluster } from '../src/testing/index.js';
import { EventLog, aborted, assertNoKeys, grpcHandled, track, waitFor, etcdForFile, closedPort, openSessions, closeAll, serverState, waitersBlocked, withSessions } from './helpers.js';

const ROOT = 'test/bad-input/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));


const sessions = (n: number, ttl = 30, on: Client = client): Promise<Session[]> => openSessions(on, n, ttl);


/** The rejection of a promise that must reject. */
async function rejection(p: Promise<unknown>): Promise<{ err: unknown }> {
  try {
    await p;
  } catch (err) {
    return { err };
  }
  throw new Error('expected a rejection');
}

describe('names', () => {
  it('an empty name is refused before anything is sent, saying what to give', async () => {
    const [s] = await sessions(1);
    try {
      for (const [make, example] of [[() => new Mutex(s!, ''), /locks\/orders/], [() => new Election(s!, ''), /elections\/scheduler/]] as const) {
        assert.throws(make, (e: unknown) => e instanceof InvalidArgumentError && /empty/.test(e.message) && example.test(e.message));
      }
      await assert.rejects(currentLeader(client, ''), InvalidArgumentError);
      assert.throws(() => observeLeader(client, ''), InvalidArgumentError);
    } finally {
      await closeAll([s]);
    }
  });

  it('a trailing slash, a NUL byte or a non-string is refused with the fix in the message', async () => {
    const [s] = await sessions(1);
    try {
      assert.throws(() => new Mutex(s!, 'locks/a/'), (e: unknown) => e instanceof InvalidArgumentError && /trailing slash/.test(e.message));
      assert.throws(() => new Mutex(s!, 'locks/a\0b'), (e: unknown) => e instanceof InvalidArgumentError && /NUL/.test(e.message));
      assert.throws(() => new Mutex(s!, 42 as unknown as string), (e: unknown) => e instanceof InvalidArgumentError && /string/.test(e.message));
      assert.throws(() => new Election(s!, undefined as unknown as string), InvalidArgumentError);
    } finally {
      await closeAll([s]);
    }
  });

  it('nested names are separate locks: "n", "n/a" and "n/a/b" are held at once, and each queue is its own', async () => {
    const p = fresh('nested');
    const ss = await sessions(4);
    try {
      const names = [`${p}n`, `${p}n/a`, `${p}n/a/b`];
      const held = await Promise.all(names.map((n, i) => new Mutex(ss[i]!, n).lock()));
      assert.deepEqual(
        held.map((h) => h.key),
        names.map((n, i) => `${n}/${ss[i]!.leaseId.toString(16)}`),
      );
      // A waiter on the middle name waits for that name's holder only.
      const log = new EventLog(client, `${p}n`);
      await log.ready;
      const watchers = (await serverState(etcd.clientUrls[0]!)).watchers;
      const waiter = track(new Mutex(ss[3]!, names[1]!).lock());
      // Its enqueue (and any look-up and check) answered: it is blocked on its watch.
      await waitersBlocked(etcd.clientUrls[0]!, watchers, 1, 'the waiter to block on its predecessor');
      await held[0]!.unlock();
      await held[2]!.unlock();
      // Both deletes delivered to a watcher of the names, and one more round trip: a waiter woken by
      // either (watching a range that covers "n" or "n/a/b") would have acted on it by now.
      await log.deleted(held[0]!.key);
      await log.deleted(held[2]!.key);
      await client.get(held[1]!.key);
      await log.close();
      assert.equal(waiter.settled, false);
      await held[1]!.unlock();
      const h = await waiter.promise;
      assert.equal(h.key, `${names[1]}/${ss[3]!.leaseId.toString(16)}`);
      await h.unlock();
    } finally {
      await closeAll(ss);
    }
    await assertNoKeys(client, p);
  });

  it('a name of exactly 4096 bytes locks and campaigns; 4097 bytes is refused naming the limit', async () => {
    const p = fresh('long');
    await withSessions(client, p, 2, async ([a, b]) => {
      const name = p + 'x'.repeat(4096 - Buffer.byteLength(p));
      assert.equal(Buffer.byteLength(name), 4096);
      const h = await new Mutex(a!, name).lock();
      assert.equal((await client.get(h.key))?.createRevision, h.fencingToken);
      const waiter = track(new Mutex(b!, name).lock());
      await h.unlock();
      await (await waiter.promise).unlock();
      const leader = await new Election(a!, `${name.slice(0, -1)}e`).campaign('v');
      assert.equal((await currentLeader(client, `${name.slice(0, -1)}e`))?.key, leader.key);
      await leader.resign();
      assert.throws(() => new Mutex(a!, `${name}y`), (e: unknown) => e instanceof InvalidArgumentError && /4097 bytes/.test(e.message) && /4096/.test(e.message));
    });
  });

  it('the length limit counts bytes, not characters (multi-byte UTF-8)', async () => {
    const [s] = await sessions(1);
    try {
      const name = '€'.repeat(1366); // 1366 characters, 4098 bytes
      assert.throws(() => new Mutex(s!, name), (e: unknown) => e instanceof InvalidArgumentError && /4098 bytes/.test(e.message));
    } finally {
      await closeAll([s]);
    }
  });

  it('a non-ASCII name round-trips: the key is the UTF-8 name plus the lease id', async () => {
    const p = fresh('utf8');
    await withSessions(client, p, 1, async ([s]) => {
      const name = `${p}verrou/ünïcødé/🔒`;
      const h = await new Mutex(s!, name).lock();
      const kv = await client.get(h.key);
      assert.equal(kv?.key.toString('utf8'), `${name}/${s!.leaseId.toString(16)}`);
      await h.unlock();
    });
  });
});

describe('TTL', () => {
  for (const ttl of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, MAX_TTL + 1, 1e20]) {
    it(`ttl ${ttl} is refused with InvalidArgumentError naming the range, and grants nothing`, async () => {
      await assert.rejects(
        Session.create(client, { ttl }),
        (e: unknown) => e instanceof InvalidArgumentError && /ttl/.test(e.message) && /1 to 9000000000/.test(e.message),
      );
      assert.deepEqual(await client.leaseLeases(), []);
    });
  }

  it('a negative or non-finite safety margin is refused', async () => {
    for (const safetyMarginMs of [-1, Number.NaN, Number.POSITIVE_INFINITY]) {
      await assert.rejects(Session.create(client, { ttl: 10, safetyMarginMs }), InvalidArgumentError);
    }
    assert.deepEqual(await client.leaseLeases(), []);
  });

  it('the largest TTL (MAX_TTL) is granted; the session lives, locks, and closes', async () => {
    const p = fresh('huge-ttl');
    const s = await Session.create(client, { ttl: MAX_TTL });
    try {
      assert.equal(s.ttl, MAX_TTL);
      const remaining = s.remainingMs();
      assert.ok(Number.isFinite(remaining) && remaining > 1000 * (MAX_TTL - 60), `remainingMs ${remaining}`);
      assert.equal(s.signal.aborted, false);
      const t = await client.leaseTimeToLive(s.leaseId);
      assert.equal(t.grantedTtl, MAX_TTL);
      const h = await new Mutex(s, `${p}lock`).lock();
      h.assertHeld();
      await h.unlock();
    } finally {
      await s.close();
    }
    assert.equal((await client.leaseTimeToLive(s.leaseId)).ttl, -1);
    await assertNoKeys(client, p);
  });

  it('ttl 1: the session keeps the TTL etcd actually granted (etcd raises tiny TTLs to its minimum)', async () => {
    const s = await Session.create(client, { ttl: 1 });
    try {
      const t = await client.leaseTimeToLive(s.leaseId);
      assert.equal(s.ttl, t.grantedTtl);
      assert.ok(s.ttl >= 1);
      assert.ok(s.remainingMs() <= s.ttl * 1000);
    } finally {
      await s.close();
    }
  });
});

describe('unreachable endpoints', () => {
  // The dial timeout is far above the test's own: only the refusal can end these calls in time.
  it('nothing listening: UnavailableError on the refusal, naming the endpoint and the cause', { timeout: 20_000 }, async () => {
    const port = await closedPort();
    const c = new Client({ endpoints: `127.0.0.1:${port}`, dialTimeoutMs: 60_000 });
    try {
      const { err } = await rejection(c.get('k'));
      assert.ok(err instanceof UnavailableError, String(err));
      assert.match(err.message, new RegExp(`127\\.0\\.0\\.1:${port}`));
      assert.match(err.message, /refused/);
      // Sessions and locks fail the same way, without hanging.
      await assert.rejects(Session.create(c, { ttl: 5 }), UnavailableError);
    } finally {
      await c.close();
    }
  });

  it('a black hole (TCP accepted, nothing ever answers): UnavailableError once the dial timeout passes, no hang', { timeout: 20_000 }, async () => {
    const proxy = await startProxy(etcd.endpoints[0]!);
    proxy.blackhole(true);
    const c = new Client({ endpoints: proxy.endpoint, dialTimeoutMs: 500 });
    try {
      const { err } = await rejection(c.get('k'));
      assert.ok(err instanceof UnavailableError, String(err));
      assert.match(err.message, new RegExp(proxy.endpoint.replaceAll('.', '\\.')));
      // The cause is the dial timeout, and the message says so (not a refusal, not the call's deadline).
      assert.match(err.message, /nothing answered within 500 ms/);
      assert.doesNotMatch(err.message, /refused/);
    } finally {
      await c.close();
      await proxy.close();
    }
  });

  it(
    'a black hole: the message says nothing answered (as for a hung or paused etcd), not to check TLS',
    {
      timeout: 20_000,
    },
    async () => {
      const proxy = await startProxy(etcd.endpoints[0]!);
      proxy.blackhole(true);
      const c = new Client({ endpoints: proxy.endpoint, dialTimeoutMs: 500 });
      try {
        const { err } = await rejection(c.get('k'));
        assert.match((err as Error).message, /no answer|not answer|timed? ?out|hung/i);
        assert.doesNotMatch((err as Error).message, /TLS|https/);
      } finally {
        await c.close();
        await proxy.close();
      }
    },
  );

  it('several endpoints, none reachable: one error that names them all', { timeout: 20_000 }, async () => {
    const ports = [await closedPort(), await closedPort(), await closedPort()];
    // Far above the test's timeout: each endpoint's refusal, not a dial timeout, ends the round.
    const c = new Client({ endpoints: ports.map((p) => `127.0.0.1:${p}`), dialTimeoutMs: 60_000 });
    try {
      const { err } = await rejection(c.get('k'));
      assert.ok(err instanceof UnavailableError, String(err));
      for (const p of ports) assert.match(err.message, new RegExp(`:${p}\\b`));
      assert.match(err.message, /refused/);
    } finally {
      await c.close();
    }
  });

  it('malformed endpoints are refused before dialling', () => {
    for (const e of ['', 'http://', 'ftp://h:1', '127.0.0.1:0', '127.0.0.1:99999', 'h:12ab', '::1:2379', 'h:1/path']) {
      assert.throws(() => new Client({ endpoints: e }), InvalidArgumentError, e);
    }
    assert.throws(() => new Client({ endpoints: ['http://a:1', 'https://b:1'] }), /mix http and https/);
    assert.throws(() => new Client({ dialTimeoutMs: 0 }), InvalidArgumentError);
    assert.throws(() => new Client({ callTimeoutMs: -5 }), InvalidArgumentError);
  });
});

describe('a member that answers but has no leader', () => {
  let cluster: EtcdCluster;
  let survivor: number;
  let onlySurvivor: Client;
  let noLeaderCheck: Client;

  before(async () => {
    cluster = await startEtcd({ members: 3 });
    const all = new Client({ endpoints: cluster.endpoints });
    try {
      await all.put('nl/k', 'v1');
      const leader = await cluster.leaderIndex();
      survivor = (leader + 1) % 3;
      // The survivor is frozen while the others move on: it holds v1, the cluster v2.
      cluster.pause(survivor);
      const others = new Client({ endpoints: cluster.endpoints.filter((_, i) => i !== survivor) });
      await others.put('nl/k', 'v2');
      await others.close();
      for (let i = 0; i < 3; i++) if (i !== survivor) await cluster.kill(i);
      cluster.resume(survivor);
    } finally {
      await all.close();
    }
    onlySurvivor = new Client({ endpoints: cluster.endpoints[survivor]!, callTimeoutMs: 3000 });
    // Status without hasleader, to see when the survivor has noticed that it has no leader.
    noLeaderCheck = new Client({ endpoints: cluster.endpoints[survivor]!, requireLeader: false });
    await waitFor(async () => (await noLeaderCheck.status()).leader === 0n, 'the survivor to lose its leader');
  });

  after(async () => {
    await onlySurvivor?.close();
    await noLeaderCheck?.close();
    await cluster?.stop();
  });

  it('refuses reads instead of serving its stale copy (hasleader)', { timeout: 30_000 }, async () => {
    const { err } = await rejection(onlySurvivor.get('nl/k'));
    assert.ok(err instanceof UnavailableError, String(err));
    assert.doesNotMatch(String(err), /v1/);
    // Ended by the member's refusal (no leader), not by the call's deadline.
    assert.match(err.message, /no (Raft )?leader/);
  });

  it('refuses to grant a session (so no lock can be taken there), saying there is no leader', { timeout: 30_000 }, async () => {
    const { err } = await rejection(Session.create(onlySurvivor, { ttl: 5 }));
    assert.ok(err instanceof UnavailableError, `expected UnavailableError, got ${String(err)}`);
    assert.match((err as Error).message, /no (Raft )?leader/);
    // Nothing was granted: the survivor still knows of no lease (read without hasleader).
    assert.deepEqual(await noLeaderCheck.leaseLeases(), []);
  });

  it('the error says there is no leader and what to check (not just "deadline")', { timeout: 30_000 }, async () => {
    const { err } = await rejection(onlySurvivor.get('nl/k'));
    assert.ok(err instanceof UnavailableError, `expected UnavailableError, got ${String(err)}`);
    assert.match((err as Error).message, /no (Raft )?leader/);
    assert.match((err as Error).message, /quorum|majority/);
  });
});

describe('compaction', () => {
  it('a waiter whose predecessor was deleted and compacted away while its watch stream was down still gets the lock', { timeout: 30_000 }, async () => {
    const p = fresh('compact-wait');
    const name = `${p}lock`;
    const proxy = await startProxy(etcd.endpoints[0]!);
    const far = new Client({ endpoints: proxy.endpoint });
    const [a] = await sessions(1);
    const [b] = await sessions(1, 30, far);
    try {
      const held = await new Mutex(a!, name).lock();
      const txns = await grpcHandled(etcd.clientUrls[0]!, 'Txn');
      const waiting = track(new Mutex(b!, name).lock());
      // Enqueue, then (with its watch on the holder's key confirmed) one more look: then it blocks.
      await waitFor(async () => (await grpcHandled(etcd.clientUrls[0]!, 'Txn')) >= txns + 2, 'the waiter to block on its predecessor');
      proxy.blackhole(true);
      await held.unlock(); // the DELETE the waiter waits for, while it cannot hear
      for (let i = 0; i < 5; i++) await client.put(`${p}filler`, String(i));
      const { header } = await client.range({ key: Buffer.from(`${p}filler`) });
      await client.compact(header.revision);
      proxy.cut(); // its watch stream breaks; it resumes from a revision that no longer exists
      proxy.blackhole(false);
      const h = await waiting.promise;
      assert.equal(h.key, `${name}/${b!.leaseId.toString(16)}`);
      assert.equal((await client.get(h.key))?.createRevision, h.fencingToken);
      await h.unlock();
    } finally {
      proxy.blackhole(false);
      await closeAll([a, b]);
      await far.close();
      await proxy.close();
      await client.delete(p, { prefix: true });
    }
  });

  it('observe reports a leader change that was compacted away while its stream was down', { timeout: 30_000 }, async () => {
    const p = fresh('compact-observe');
    const name = `${p}election`;
    const proxy = await startProxy(etcd.endpoints[0]!);
    const far = new Client({ endpoints: proxy.endpoint });
    const [a, b] = await sessions(2);
    const ac = new AbortController();
    try {
      const first = await new Election(a!, name).campaign('first');
      const second = track(new Election(b!, name).campaign('second'));
      const events = observeLeader(far, name, { signal: ac.signal });
      const e1 = (await events.next()).value as LeaderEvent;
      assert.equal(e1.type === 'leader' && e1.leader.value, 'first');
      proxy.blackhole(true);
      await first.resign();
      const l2 = await second.promise;
      for (let i = 0; i < 5; i++) await client.put(`${p}filler`, String(i));
      await client.compact((await client.range({ key: Buffer.from(`${p}filler`) })).header.revision);
      proxy.cut();
      proxy.blackhole(false);
      const e2 = (await events.next()).value as LeaderEvent;
      assert.equal(e2.type, 'leader');
      assert.equal(e2.type === 'leader' && e2.leader.key, l2.key);
      assert.equal(e2.type === 'leader' && e2.leader.value, 'second');
      await l2.resign();
      const e3 = (await events.next()).value as LeaderEvent;
      assert.equal(e3.type, 'none');
    } finally {
      ac.abort();
      proxy.blackhole(false);
      await closeAll([a, b]);
      await far.close();
      await proxy.close();
      await client.delete(p, { prefix: true });
    }
  });
});

describe('an operator at the keyboard', () => {
  it('deleting the holder’s key: the holder is told, the next waiter gets the lock, the old handle cannot touch it', async () => {
    const p = fresh('op-del-holder');
    const name = `${p}lock`;
    await withSessions(client, p, 2, async ([a, b]) => {
      const h = await new Mutex(a!, name).lock();
      const lost = aborted(h.signal);
      const next = track(new Mutex(b!, name).lock());
      await client.delete(h.key);
      assert.ok((await lost) instanceof LockLostError);
      const h2 = await next.promise;
      assert.ok(h2.fencingToken > h.fencingToken);
      await h.unlock(); // guarded: must not delete b's key
      assert.equal((await client.get(h2.key))?.createRevision, h2.fencingToken);
      const t = await client.txn({ compare: [h.ownerCompare()], success: [op.put(`${p}data`, 'stale')], failure: [] });
      assert.equal(t.succeeded, false);
      assert.equal(await client.get(`${p}data`), undefined);
      await h2.unlock();
    });
  });

  it('deleting a waiter’s key: that waiter fails with LockLostError, the one behind it moves up', async () => {
    const p = fresh('op-del-waiter');
    const name = `${p}lock`;
    const [a, b, c] = await sessions(3);
    const log = new EventLog(client, `${name}/`);
    try {
      await log.ready;
      const h = await new Mutex(a!, name).lock();
      const mb = new Mutex(b!, name);
      const wb = track(mb.lock());
      await log.put(mb.key);
      const mc = new Mutex(c!, name);
      const wc = track(mc.lock());
      await log.put(mc.key);
      await client.delete(mb.key);
      await h.unlock();
      await assert.rejects(wb.promise, LockLostError);
      const hc = await wc.promise;
      assert.equal(hc.key, mc.key);
      await hc.unlock();
    } finally {
      await log.close();
      await closeAll([a, b, c]);
    }
    await assertNoKeys(client, p);
  });

  it('deleting every key of the lock at once: holder and all waiters end, none hangs', { timeout: 30_000 }, async () => {
    const p = fresh('op-del-all');
    const name = `${p}lock`;
    const ss = await sessions(5);
    const log = new EventLog(client, `${name}/`);
    try {
      await log.ready;
      const h = await new Mutex(ss[0]!, name).lock();
      const lost = aborted(h.signal);
      const waiters = ss.slice(1).map((s) => track(new Mutex(s, name).lock()));
      for (const s of ss.slice(1)) await log.put(`${name}/${s.leaseId.toString(16)}`);
      await client.delete(`${name}/`, { prefix: true });
      assert.ok((await lost) instanceof LockLostError);
      const results = await Promise.allSettled(waiters.map((w) => w.promise));
      for (const r of results) {
        // Each waiter either finds its key gone (LockLostError) or, if it re-queued first, holds it.
        if (r.status === 'fulfilled') await r.value.unlock();
        else assert.ok(r.reason instanceof LockLostError, String(r.reason));
      }
    } finally {
      await log.close();
      await closeAll(ss);
    }
    await assertNoKeys(client, p);
  });

  it('revoking the holder’s lease by hand: the holder is told, its session ends (lease-gone), the waiter gets the lock', async () => {
    const p = fresh('op-revoke');
    const name = `${p}lock`;
    await withSessions(client, p, { n: 2, ttl: 3 }, async ([a, b]) => {
      const h = await new Mutex(a!, name).lock();
      const lost = aborted(h.signal);
      const next = track(new Mutex(b!, name).lock());
      await client.leaseRevoke(a!.leaseId);
      assert.ok((await lost) instanceof LockLostError);
      const h2 = await next.promise;
      assert.ok(h2.fencingToken > h.fencingToken);
      const end = await a!.done;
      assert.ok(end instanceof SessionExpiredError);
      assert.equal(end.reason, 'lease-gone');
      await assert.rejects(new Mutex(a!, name).lock(), SessionExpiredError);
      await h2.unlock();
    });
  });
});

/** `p`, or a failure naming `what` after `limitMs` (a hang guard, not a timing assertion). */
async function within<T>(p: Promise<T>, limitMs: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`gave up waiting for ${what}`)), limitMs)))]);
  } finally {
    clearTimeout(timer);
  }
}

describe('giving up while etcd cannot be reached', () => {
  /** A holder on the direct client, a waiter `b` behind a proxy, a third session `c`, and a log of the lock's keys. */
  async function outageSetup(scope: string) {
    const p = fresh(scope);
    const name = `${p}lock`;
    const proxy = await startProxy(etcd.endpoints[0]!);
    const far = new Client({ endpoints: proxy.endpoint });
    const [a, c] = await sessions(2);
    const [b] = await sessions(1, 60, far); // outlives the outage by far
    const log = new EventLog(client, `${name}/`);
    await log.ready;
    const held = await new Mutex(a!, name).lock();
    const outage = (): void => {
      proxy.refuse(true); // connections reset, new ones refused: etcd is unreachable for b
      proxy.cut();
    };
    const cleanup = async (): Promise<void> => {
      proxy.refuse(false);
      proxy.delay(0);
      await log.close();
      await closeAll([a, b, c]);
      await far.close();
      await proxy.close();
      await assertNoKeys(client, p);
    };
    /** The lock moves on: `c` gets it within 5 s (a queued key left behind would block it). */
    const cGetsTheLock = async (): Promise<void> => {
      const hc = await new Mutex(c!, name).lock({ signal: AbortSignal.timeout(5000) }).catch((e: unknown) => e);
      const queued = (await client.getPrefix(`${name}/`)).kvs.map((kv) => kv.key.toString());
      assert.ok(!(hc instanceof Error), `c never got the lock: ${String(hc)}; queued: ${queued.join(', ')}`);
      await (hc as LockHandle).unlock();
    };
    return { name, proxy, b: b!, log, held, outage, cleanup, cGetsTheLock };
  }

  it('a waiter aborted during an outage takes its key back once etcd answers again, and the lock moves on', { timeout: 60_000 }, async () => {
    const t = await outageSetup('abort-outage');
    try {
      const mb = new Mutex(t.b, t.name);
      const txns = await grpcHandled(etcd.clientUrls[0]!, 'Txn');
      const ac = new AbortController();
      const wb = mb.lock({ signal: ac.signal });
      wb.catch(() => {});
      await waitFor(async () => (await grpcHandled(etcd.clientUrls[0]!, 'Txn')) >= txns + 2, 'the waiter to block on its predecessor');
      t.outage();
      const reason = new Error('give up');
      ac.abort(reason);
      t.proxy.refuse(false);
      await assert.rejects(wb, (e) => e === reason);
      await t.held.unlock();
      await t.cGetsTheLock();
    } finally {
      await t.cleanup();
    }
  });

  it(
    'an abort during an outage settles at once; the key is taken back in the background',
    {
      timeout: 60_000,
    },
    async () => {
      const t = await outageSetup('abort-outage-prompt');
      try {
        const mb = new Mutex(t.b, t.name);
        const txns = await grpcHandled(etcd.clientUrls[0]!, 'Txn');
        const ac = new AbortController();
        const wb = track(mb.lock({ signal: ac.signal }));
        wb.promise.catch(() => {});
        await waitFor(async () => (await grpcHandled(etcd.clientUrls[0]!, 'Txn')) >= txns + 2, 'the waiter to block on its predecessor');
        t.outage();
        ac.abort(new Error('give up'));
        const settledInTime = await Promise.race([wb.promise.then(() => true, () => true), delay(2000).then(() => false)]);
        t.proxy.refuse(false);
        await wb.promise.catch(() => {});
        // Taken back in the background once etcd answers again: its key is deleted while the holder
        // still holds (so not by the queue moving on).
        await within(t.log.deleted(mb.key), 20_000, "b's key to be taken back");
        assert.equal(await client.get(mb.key), undefined);
        assert.ok(await client.get(t.held.key), 'the holder still holds');
        await t.held.unlock();
        await t.cGetsTheLock();
        assert.ok(settledInTime, 'lock() was still pending 2 s after its signal aborted');
      } finally {
        await t.cleanup();
      }
    },
  );

  it(
    'an enqueue that committed but whose answer was lost in an outage leaves no key queued',
    {
      timeout: 60_000,
    },
    async () => {
      const t = await outageSetup('enqueue-outage');
      try {
        const mb = new Mutex(t.b, t.name);
        t.proxy.delay(500); // the answer trails the commit by half a second
        const wb = mb.lock();
        wb.catch(() => {});
        await t.log.put(mb.key); // committed; the answer is still in the proxy
        t.outage(); // ... and now it is lost, and the retry cannot connect
        const err = await wb.then(
          (h) => h,
          (e: unknown) => e,
        );
        t.proxy.refuse(false);
        t.proxy.delay(0);
        if (!(err instanceof Error)) await (err as LockHandle).unlock();
        // No key queued: b's committed key is deleted (by its unlock, or taken back after the error)
        // while the holder still holds.
        await within(t.log.deleted(mb.key), 20_000, "b's committed key to be deleted");
        assert.equal(await client.get(mb.key), undefined);
        assert.ok(await client.get(t.held.key), 'the holder still holds');
        await t.held.unlock();
        await t.cGetsTheLock();
      } finally {
        await t.cleanup();
      }
    },
  );
});

describe('thousands of waiters', () => {
  /** `n` sessions spread over `clients`, created in batches. */
  async function manySessions(n: number, clients: Client[]): Promise<Session[]> {
    const out: Session[] = [];
    for (let i = 0; i < n; i += 250) {
      out.push(...(await Promise.all(Array.from({ length: Math.min(250, n - i) }, (_, j) => Session.create(clients[(i + j) % clients.length]!, { ttl: 60 })))));
    }
    return out;
  }
  async function closeMany(ss: Session[]): Promise<void> {
    for (let i = 0; i < ss.length; i += 250) await Promise.all(ss.slice(i, i + 250).map((s) => s.close()));
  }
  const count = async (prefix: string): Promise<bigint> =>
    (await client.range({ key: Buffer.from(prefix), rangeEnd: Buffer.from(`${prefix.slice(0, -1)}0`), countOnly: true })).count;

  it(
    '2000 waiters on 4 clients, aborted at once: every lock() rejects with the reason and every key goes',
    { timeout: 180_000 },
    async () => {
    const p = fresh('many');
    const name = `${p}lock`;
    const clients = Array.from({ length: 4 }, () => new Client({ endpoints: etcd.endpoints }));
    const [holderSession] = await sessions(1);
    let ss: Session[] = [];
    try {
      ss = await manySessions(2000, clients);
      const held = await new Mutex(holderSession!, name).lock();
      const ac = new AbortController();
      const waits = ss.map((s) => new Mutex(s, name).lock({ signal: ac.signal }));
      await waitFor(async () => (await count(`${name}/`)) === 2001n, 'all 2000 waiters queued', { intervalMs: 100, limitMs: 120_000 });
      const reason = new Error('everybody go home');
      ac.abort(reason);
      const results = await Promise.allSettled(waits);
      assert.equal(results.filter((r) => r.status === 'fulfilled').length, 0);
      assert.ok(results.every((r) => r.status === 'rejected' && r.reason === reason));
      // Only the holder's key is left, and it still holds.
      assert.equal(await count(`${name}/`), 1n);
      held.assertHeld();
      await held.unlock();
    } finally {
      await closeMany(ss);
      await closeAll([holderSession]);
      await Promise.all(clients.map((c) => c.close()));
    }
    await assertNoKeys(client, p);
    assert.deepEqual(await client.leaseLeases(), []);
  },
  );

  it(
    '500 waiters aborted while their enqueue is still in flight leave no key behind',
    { timeout: 120_000 },
    async () => {
      const p = fresh('many-inflight');
      const name = `${p}lock`;
      const proxy = await startProxy(etcd.endpoints[0]!);
      const far = new Client({ endpoints: proxy.endpoint });
      const [holderSession] = await sessions(1);
      let ss: Session[] = [];
      const log = new EventLog(client, `${name}/`);
      try {
        await log.ready;
        ss = await manySessions(500, [far]);
        const held = await new Mutex(holderSession!, name).lock();
        proxy.delay(500); // answers come back half a second after etcd applied the requests
        const ac = new AbortController();
        const waits = ss.map((s) => new Mutex(s, name).lock({ signal: ac.signal }));
        await log.put(`${name}/${ss[0]!.leaseId.toString(16)}`); // at least one enqueue committed
        ac.abort(new Error('give up'));
        await Promise.allSettled(waits);
        proxy.delay(0);
        // Whatever committed must be taken back: nothing but the holder may stay queued.
        const left = await count(`${name}/`);
        await held.unlock();
        assert.equal(left, 1n, `${left - 1n} aborted waiters left their key queued`);
      } finally {
        proxy.delay(0);
        await log.close();
        await closeMany(ss);
        await closeAll([holderSession]);
        await far.close();
        await proxy.close();
      }
      await assertNoKeys(client, p);
    },
  );
});
