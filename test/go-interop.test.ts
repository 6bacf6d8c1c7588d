// A mixed fleet: etcd's own Go package (go.etcd.io/etcd/client/v3/concurrency, driven through
// interop/go) and this library on the same locks and elections, on real etcd. Each side must exclude
// the other, queue fairly with it (one queue, ordered by CreateRevision), see its leaders and take
// over promptly when it resigns. The Go program is built once into node_modules/.cache (see
// test/go-fleet.ts); it needs Go >= 1.26.
//
// Exclusion is checked on the test process's clock with conservative intervals: a holder's interval
// runs from the moment its "acquired" reached us to the moment we *told* it to release. A correct
// successor can only acquire after the holder's delete, which follows that command, so correct runs
// never overlap; a holder that acquires while another still holds is caught on arrival.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  Client,
  Election,
  Mutex,
  RWMutex,
  Session,
  currentLeader,
  observeLeader,
  op,
  type LeaderEvent,
  type LockHandle,
} from '../src/index.js';
import { startEtcd, type EtcdCluster } from '../src/testing/index.js';
import { queueOf } from '../src/queue/state.js';
import { EventLog, assertNoKeys, etcdForFile, settle, track } from './helpers.js';
import { GoFleet, goInteropBinary, closeGoFleets, type GoEvent } from './go-fleet.js';

const ROOT = 'test/go-interop/';
let etcd: EtcdCluster;
let client: Client;
const goBin = goInteropBinary();
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)), { beforeChecks: closeGoFleets });

// Hang guards only: every wait below is on an event, a promise or a line from the Go process.
const T = { timeout: 120_000 };

/** Starts the Go program on `endpoints` and reports which client module it was built with. */
async function startGo(t: { diagnostic(m: string): void }, endpoints = etcd.endpoints, ttl = 30, server = etcd): Promise<GoFleet> {
  const go = new GoFleet(goBin(), endpoints, { ttl });
  const ready = await go.ready;
  t.diagnostic(`etcd ${server.version} (${server.members.length} member${server.members.length > 1 ? 's' : ''}), go.etcd.io/etcd/client/v3 ${String(ready.client)}, Go session TTL ${ttl} s`);
  return go;
}

/** Every lease must be gone: each test revokes what it granted (Go's sessions on close, ours on close). */
async function assertNoLeasesOn(c: Client): Promise<void> {
  assert.deepEqual((await c.leaseLeases()).map((l) => l.toString(16)), [], 'leases left behind');
}

/** The TypeScript half of the fenced write Go does with IsOwner: read, then write +1 only while we own the lock. */
async function tsIncrement(c: Client, h: LockHandle, counter: string): Promise<{ value: number; ok: boolean }> {
  const kv = await c.get(counter);
  const value = (kv ? Number(kv.value.toString()) : 0) + 1;
  const r = await c.txn({ compare: [h.ownerCompare()], success: [op.put(counter, String(value))], failure: [] });
  return { value, ok: r.succeeded };
}

const next = async <T>(it: AsyncIterator<T>): Promise<T> => {
  const r = await it.next();
  assert.equal(r.done, false, 'iterator ended');
  return r.value as T;
};
const leaderOf = (e: LeaderEvent): string => (e.type === 'leader' ? `${e.leader.key}=${e.leader.value}@${e.leader.fencingToken}` : 'none');
const goLeaderOf = (e: GoEvent): string => `${e.key}=${String(e.value)}@${e.rev}`;

/** Acquisitions as they arrive, from either language, in arrival order. */
class Arrivals<A> {
  private readonly items: A[] = [];
  private readonly waiting: { resolve: (a: A) => void; reject: (e: Error) => void }[] = [];
  private error?: Error;
  push(a: A): void {
    const w = this.waiting.shift();
    if (w) w.resolve(a);
    else this.items.push(a);
  }
  fail(e: Error): void {
    this.error ??= e;
    for (const w of this.waiting.splice(0)) w.reject(e);
  }
  get queued(): number {
    return this.items.length;
  }
  next(): Promise<A> {
    if (this.error) return Promise.reject(this.error);
    const a = this.items.shift();
    if (a !== undefined) return Promise.resolve(a);
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }
}

interface Holding {
  who: string;
  key: string;
  token: bigint;
  /** Go only: the revision at which Go confirmed it holds (its Mutex.Header()). */
  header?: bigint;
  incr(): Promise<{ value: number; ok: boolean }>;
  release(): Promise<void>;
}

/**
 * Queues contenders of both languages on `name` behind a holder, one at a time (each after its key
 * is in etcd, so the queue order is known), then hands the lock down the queue. Returns what was
 * seen; the caller asserts.
 */
async function mixedQueue(
  c: Client,
  go: GoFleet,
  name: string,
  counter: string,
  who: string[],
  sessions: Session[],
): Promise<{ order: string[]; created: Map<string, bigint>; holdings: Holding[]; values: number[]; violations: string[]; log: EventLog }> {
  const log = new EventLog(c, `${name}/`);
  await log.ready;
  const arrivals = new Arrivals<Holding>();
  let holder: string | null = null;
  const violations: string[] = [];
  const arrive = (h: Holding): void => {
    if (holder !== null) violations.push(`${h.who} acquired while ${holder} held the lock`);
    holder = h.who;
    arrivals.push(h);
  };
  const goIds = new Set(who.filter((w) => w.startsWith('go')));
  const stop = go.onEvent((e) => {
    if (!e.id || !goIds.has(e.id)) return;
    if (e.event === 'acquired') {
      const id = e.id;
      arrive({
        who: id,
        key: e.key!,
        token: BigInt(e.rev!),
        header: BigInt(e.header!),
        incr: async () => {
          const r = await go.call(id, 'incr', { counter }, 'incremented');
          return { value: Number(r.value), ok: r.ok === true };
        },
        release: async () => void (await go.call(id, 'unlock', {}, 'unlocked')),
      });
    } else if (e.event === 'error' || e.event === 'cancelled') {
      arrivals.fail(new Error(`Go ${e.id}: ${JSON.stringify(e)}`));
    }
  });
  try {
    // The first holder is ours.
    const s0 = await Session.create(c, { ttl: 30 });
    sessions.push(s0);
    const h0 = await new Mutex(s0, name).lock();
    arrive({ who: 'ts-holder', key: h0.key, token: h0.fencingToken, incr: () => tsIncrement(c, h0, counter), release: async () => void (await h0.unlock()) });
    const created = new Map<string, bigint>();
    for (const w of who) {
      const from = log.events.length;
      let key: string;
      if (goIds.has(w)) {
        key = `${name}/${await go.session(w)}`;
        go.send(w, 'lock', { name });
      } else {
        const s = await Session.create(c, { ttl: 30 });
        sessions.push(s);
        const m = new Mutex(s, name);
        key = m.key;
        m.lock().then(
          (h) => arrive({ who: w, key: h.key, token: h.fencingToken, incr: () => tsIncrement(c, h, counter), release: async () => void (await h.unlock()) }),
          (err: unknown) => arrivals.fail(err as Error),
        );
      }
      created.set(w, (await log.put(key, from)).createRevision);
    }
    await settle();

    const order: string[] = [];
    const holdings: Holding[] = [];
    const values: number[] = [];
    // Everyone is queued; nobody but the first holder may have acquired.
    assert.equal(arrivals.queued, 1, `only the first holder holds while the others queue: ${violations.join('; ')}`);
    for (let i = 0; i <= who.length; i++) {
      const h = await arrivals.next();
      order.push(h.who);
      holdings.push(h);
      const r = await h.incr();
      assert.ok(r.ok, `${h.who}'s owner compare held while it held the lock`);
      values.push(r.value);
      holder = null; // from here on we have told it to release
      await h.release();
    }
    return { order: order.slice(1), created, holdings, values, violations, log };
  } catch (err) {
    await log.close(); // on success the caller closes it, after reading it
    throw err;
  } finally {
    stop();
  }
}

describe('Go and TypeScript on one lock', () => {
  it('a long queue (over 32 keys), which our later joins find their place in without reading it: Go and TypeScript still served in CreateRevision order', T, async (t) => {
    const p = fresh('long');
    const name = `${p}lock`;
    const counter = `${p}counter`;
    const go = await startGo(t);
    // A client of its own: the view of the queue it keeps (queue-view.ts) closes with it.
    const c = new Client({ endpoints: etcd.endpoints });
    const sessions: Session[] = [];
    let log: EventLog | undefined;
    try {
      const who = [...Array.from({ length: 33 }, (_, i) => `ts-l${i}`), 'go-1', 'ts-a', 'go-2', 'ts-b', 'ts-c', 'go-3'];
      const r = await mixedQueue(c, go, name, counter, who, sessions);
      log = r.log;
      assert.ok(queueOf(c).views.live(Buffer.from(`${name}/`)), 'the later joins went through the view of the long queue');
      assert.deepEqual(r.violations, [], 'one holder at a time');
      assert.deepEqual(r.order, who, 'served in queue order, across languages');
      const byRev = [...r.created.entries()].sort((a, b) => (a[1] < b[1] ? -1 : 1)).map(([w]) => w);
      assert.deepEqual(byRev, who, 'queue order is CreateRevision order');
    } finally {
      await log?.close();
      await Promise.all(sessions.map((s) => s.close()));
      await c.delete(counter);
      await c.close();
      assert.equal(await go.close(), 0, go.stderr);
    }
    await assertNoKeys(client, p);
  });

  it('one holder at a time, FIFO across languages (queue order = CreateRevision = acquisition order), fenced counter exact', T, async (t) => {
    const p = fresh('fifo');
    const name = `${p}lock`;
    const counter = `${p}counter`;
    const go = await startGo(t);
    const sessions: Session[] = [];
    let log: EventLog | undefined;
    try {
      const who = ['go-1', 'ts-1', 'go-2', 'ts-2', 'go-3', 'ts-3', 'ts-4', 'go-4'];
      const r = await mixedQueue(client, go, name, counter, who, sessions);
      log = r.log;
      assert.deepEqual(r.violations, [], 'one holder at a time');
      assert.deepEqual(r.order, who, 'served in queue order, across languages');
      const byRev = [...r.created.entries()].sort((a, b) => (a[1] < b[1] ? -1 : 1)).map(([w]) => w);
      assert.deepEqual(byRev, who, 'queue order is CreateRevision order');
      for (const h of r.holdings.slice(1)) {
        assert.equal(h.token, r.created.get(h.who), `${h.who}: its token is its key's CreateRevision`);
      }
      assert.deepEqual(r.values, Array.from({ length: who.length + 1 }, (_, i) => i + 1), 'each holder incremented the counter once, in turn');
      assert.equal((await client.get(counter))?.value.toString(), String(who.length + 1));
      // Go confirmed each holding at a revision where every older key was already gone.
      for (const h of r.holdings.filter((x) => x.header !== undefined)) {
        for (const older of r.holdings.filter((x) => x.token < h.token)) {
          const del = await r.log.deleted(older.key);
          assert.ok(del.rev <= h.header!, `${h.who} (confirmed at ${h.header}) held only after ${older.who}'s key was deleted (at ${del.rev})`);
        }
      }
      // Both languages write the same keys: <name>/<lease hex>, empty value, on the lease.
      for (const e of r.log.events.filter((x) => x.type === 'put')) {
        assert.equal(e.key, `${name}/${e.lease.toString(16)}`);
      }
      t.diagnostic(`order: ${r.order.join(' ')}`);
    } finally {
      await log?.close();
      await Promise.all(sessions.map((s) => s.close()));
      await client.delete(counter);
      assert.equal(await go.close(), 0, go.stderr);
    }
    await assertNoKeys(client, p);
    await assertNoLeasesOn(client);
  });

  it('a fenced counter incremented concurrently by Go and TypeScript holders ends exactly at the total', T, async (t) => {
    const p = fresh('counter');
    const name = `${p}lock`;
    const counter = `${p}counter`;
    const N = 12;
    const go = await startGo(t);
    const sessions: Session[] = [];
    try {
      // Two TypeScript clients (as two processes would have) and two Go actors, all at once.
      const clients = [new Client({ endpoints: etcd.endpoints }), new Client({ endpoints: etcd.endpoints })];
      const writes: { who: string; value: number; token: bigint }[] = [];
      let inside = 0;
      const tsLoop = async (i: number): Promise<void> => {
        const c = clients[i]!;
        const s = await Session.create(c, { ttl: 30 });
        sessions.push(s);
        const m = new Mutex(s, name);
        for (let k = 0; k < N; k++) {
          const h = await m.lock();
          inside++;
          assert.equal(inside, 1, 'no two TypeScript holders at once');
          const r = await tsIncrement(c, h, counter);
          assert.ok(r.ok, 'owner compare held');
          writes.push({ who: `ts-${i}`, value: r.value, token: h.fencingToken });
          inside--;
          await h.unlock();
        }
      };
      const goIds = ['go-0', 'go-1'];
      const stop = go.onEvent((e) => {
        if (e.event === 'counted') writes.push({ who: e.id!, value: Number(e.value), token: BigInt(e.rev!) });
      });
      try {
        const goDone = goIds.map((id) => go.call(id, 'count', { name, counter, n: N }, 'done'));
        await Promise.all([...goDone, tsLoop(0), tsLoop(1)]);
      } finally {
        stop();
        await Promise.all(sessions.splice(0).map((s) => s.close()));
        await Promise.all(clients.map((c) => c.close()));
      }
      const total = N * 4;
      assert.equal((await client.get(counter))?.value.toString(), String(total), 'no lost update');
      const sorted = [...writes].sort((a, b) => a.value - b.value);
      assert.deepEqual(
        sorted.map((w) => w.value),
        Array.from({ length: total }, (_, i) => i + 1),
        'every value written exactly once',
      );
      for (let i = 1; i < sorted.length; i++) {
        assert.ok(sorted[i]!.token > sorted[i - 1]!.token, `fencing tokens grow with the counter (${sorted[i - 1]!.who} then ${sorted[i]!.who})`);
      }
      const per = Object.fromEntries(['go-0', 'go-1', 'ts-0', 'ts-1'].map((w) => [w, writes.filter((x) => x.who === w).length]));
      assert.deepEqual(per, { 'go-0': N, 'go-1': N, 'ts-0': N, 'ts-1': N });
      let switches = 0;
      for (let i = 1; i < sorted.length; i++) if (sorted[i]!.who.slice(0, 2) !== sorted[i - 1]!.who.slice(0, 2)) switches++;
      t.diagnostic(`${total} increments, ${switches} hand-overs between languages`);
    } finally {
      await client.delete(counter);
      assert.equal(await go.close(), 0, go.stderr);
    }
    await assertNoKeys(client, p);
    await assertNoLeasesOn(client);
  });

  it("Go's TryLock fails with ErrLocked against our holder and succeeds once we unlock; ours fails and our lock() waits against Go's", T, async (t) => {
    const p = fresh('trylock');
    const name = `${p}lock`;
    const go = await startGo(t);
    const s = await Session.create(client, { ttl: 30 });
    const log = new EventLog(client, `${name}/`);
    try {
      await log.ready;
      const goKey = `${name}/${await go.session('go')}`;
      const m = new Mutex(s, name);
      const ours = await m.lock();

      const locked = await go.call('go', 'trylock', { name }, 'locked');
      assert.equal(locked.error, 'mutex: Locked by another session');
      // TryLock queued its key, saw ours first and deleted its key again.
      await log.put(goKey);
      await log.deleted(goKey);
      assert.deepEqual((await client.getPrefix(`${name}/`)).kvs.map((kv) => kv.key.toString()), [ours.key]);

      await ours.unlock();
      const from = log.events.length;
      const held = await go.call('go', 'trylock', { name }, 'acquired');
      assert.equal(held.key, goKey);
      assert.equal(BigInt(held.rev!), (await log.put(goKey, from)).createRevision);

      // Now Go holds: our tryLock returns null and leaves nothing; our lock() waits.
      const beforeTry = log.events.length;
      assert.equal(await m.tryLock(), null);
      await log.deleted(m.key, beforeTry); // tryLock queued, saw Go first, and left
      const afterTry = log.events.length;
      const waiting = track(m.lock());
      const queued = await log.put(m.key, afterTry);
      assert.ok(queued.createRevision > BigInt(held.rev!));
      await settle();
      assert.equal(waiting.settled, false, 'our lock() waits while Go holds');
      const unlockSent = performance.now();
      await go.call('go', 'unlock', {}, 'unlocked');
      const h = await waiting.promise;
      assert.ok(waiting.at! > unlockSent, 'our lock() resolved only after Go was told to unlock');
      t.diagnostic(`Go Unlock -> our lock() resolved: ${(waiting.at! - unlockSent).toFixed(1)} ms`);
      assert.equal(h.fencingToken, queued.createRevision);
      assert.ok((await log.deleted(goKey, from)).rev > 0n);
      await h.unlock();
    } finally {
      await log.close();
      await s.close();
      assert.equal(await go.close(), 0, go.stderr);
    }
    await assertNoKeys(client, p);
    await assertNoLeasesOn(client);
  });

  it("a labelled holder (a non-empty value): Go's TryLock fails against it, Go's Lock waits and gets it on our unlock, and ours labelled waits behind Go", T, async (t) => {
    const p = fresh('label');
    const name = `${p}lock`;
    const go = await startGo(t);
    const s = await Session.create(client, { ttl: 30 });
    const log = new EventLog(client, `${name}/`);
    try {
      await log.ready;
      const goKey = `${name}/${await go.session('go')}`;
      const m = new Mutex(s, name);
      const ours = await m.lock({ label: 'host-a:4242' });
      assert.equal((await client.get(ours.key))!.value.toString(), 'host-a:4242');

      const locked = await go.call('go', 'trylock', { name }, 'locked');
      assert.equal(locked.error, 'mutex: Locked by another session');
      await log.deleted(goKey);

      // Go's Lock queues behind our labelled key and only gets the lock once we unlock.
      const from = log.events.length;
      const goLock = go.call('go', 'lock', { name }, 'acquired');
      const queued = await log.put(goKey, from);
      assert.ok(queued.createRevision > ours.fencingToken);
      assert.equal((await client.get(goKey))!.value.toString(), '', "Go's key has an empty value");
      await ours.unlock();
      const held = await goLock;
      assert.equal(BigInt(held.rev!), queued.createRevision);

      // Now Go holds: our labelled tryLock returns null and leaves nothing; our labelled lock() waits.
      const beforeTry = log.events.length;
      assert.equal(await m.tryLock({ label: 'host-a:4242' }), null);
      await log.deleted(m.key, beforeTry);
      const afterTry = log.events.length;
      const waiting = track(m.lock({ label: 'host-a:4242' }));
      await log.put(m.key, afterTry);
      await settle();
      assert.equal(waiting.settled, false, 'our lock() waits while Go holds');
      await go.call('go', 'unlock', {}, 'unlocked');
      const h = await waiting.promise;
      assert.equal((await client.get(h.key))!.value.toString(), 'host-a:4242');
      await h.unlock();
    } finally {
      await log.close();
      await s.close();
      assert.equal(await go.close(), 0, go.stderr);
    }
    await assertNoKeys(client, p);
    await assertNoLeasesOn(client);
  });

  it('a Go holder killed with SIGKILL frees the lock for our waiter when its lease expires', T, async (t) => {
    const p = fresh('go-killed');
    const name = `${p}lock`;
    const ttl = 2;
    const go = await startGo(t, etcd.endpoints, ttl);
    const s = await Session.create(client, { ttl: 30 });
    const log = new EventLog(client, `${name}/`);
    let lease: string | undefined;
    try {
      await log.ready;
      lease = await go.session('go');
      const held = await go.call('go', 'lock', { name }, 'acquired');
      const m = new Mutex(s, name);
      const waiting = track(m.lock());
      await log.put(m.key);
      await settle();
      assert.equal(waiting.settled, false, 'we wait while Go holds');
      assert.equal(await go.kill('SIGKILL'), 'SIGKILL'); // no Unlock, no revoke: only the lease's expiry frees the lock
      const killedAt = performance.now();
      const h = await waiting.promise;
      assert.ok(waiting.at! > killedAt, 'our lock() resolved only after the Go holder was killed');
      t.diagnostic(`killed Go holder (TTL ${ttl} s) -> our lock() resolved: ${(waiting.at! - killedAt).toFixed(0)} ms`);
      const del = await log.deleted(held.key!);
      assert.ok(del.rev > h.fencingToken, 'the Go key was deleted after we queued');
      assert.equal((await client.leaseTimeToLive(BigInt(`0x${lease}`))).ttl, -1, 'by the expiry of the Go lease');
      await h.unlock();
    } finally {
      await log.close();
      await s.close();
      await go.kill('SIGKILL');
      // Expired already when the test passed; revoked here if it failed before that.
      if (lease) await client.leaseRevoke(BigInt(`0x${lease}`));
    }
    await assertNoKeys(client, p);
    await assertNoLeasesOn(client);
  });
});

describe("Go's recipe.RWMutex and our RWMutex on one name", () => {
  it('a Go writer excludes our readers and writer; our reader excludes a Go writer; readers share across languages', T, async (t) => {
    const p = fresh('rw');
    const name = `${p}rw`;
    const go = await startGo(t);
    const [s1, s2] = [await Session.create(client, { ttl: 30 }), await Session.create(client, { ttl: 30 })];
    const log = new EventLog(client, `${name}/`);
    try {
      await log.ready;
      await go.session('gw');
      await go.session('gr');
      // 1. Go writes: our tryRLock is refused, our rLock waits until Go unlocks.
      const gw = await go.call('gw', 'wlock', { name }, 'wlocked');
      assert.match(String(gw.key), new RegExp(`^${name}/write/`));
      const ours = new RWMutex(s1, name);
      const before = log.events.length;
      assert.equal(await ours.tryRLock(), null);
      await log.deleted(ours.readKey, before); // tried, saw Go's writer, left no key
      const reading = track(ours.rLock());
      await log.put(ours.readKey, log.events.length);
      await settle();
      assert.equal(reading.settled, false, "our reader waits while Go's writer holds");
      await go.call('gw', 'rwunlock', {}, 'rwunlocked');
      const r1 = await reading.promise;
      assert.equal(r1.mode, 'read');

      // 2. We read: a Go reader shares with us at once; a Go writer waits for both of us.
      const gr = await go.call('gr', 'rlock', { name }, 'rlocked');
      assert.match(String(gr.key), new RegExp(`^${name}/read/`));
      const fromW = go.events.length;
      go.send('gw', 'wlock', { name });
      await log.next((e) => e.type === 'put' && e.key.startsWith(`${name}/write/`), log.events.length);
      await settle();
      assert.equal(go.events.slice(fromW).some((e) => e.id === 'gw' && e.event === 'wlocked'), false, "Go's writer waits for our reader");
      await r1.unlock();
      await go.call('gr', 'rwunlock', {}, 'rwunlocked');
      const w2 = await go.until((e) => e.id === 'gw' && e.event === 'wlocked', fromW);
      t.diagnostic(`Go writer got the lock after both readers left: ${String(w2.key)}`);

      // 3. Go writes again: our writer waits in line, then gets a larger fencing token.
      const writing = track(new RWMutex(s2, name).lock());
      const queued = await log.put(new RWMutex(s2, name).writeKey, log.events.length);
      await settle();
      assert.equal(writing.settled, false, "our writer waits while Go's writer holds");
      await go.call('gw', 'rwunlock', {}, 'rwunlocked');
      const w3 = await writing.promise;
      assert.equal(w3.fencingToken, queued.createRevision);
      assert.ok(w3.fencingToken > BigInt(w2.rev!));
      await w3.unlock();
    } finally {
      await log.close();
      await Promise.all([s1.close(), s2.close()]);
      assert.equal(await go.close(), 0, go.stderr);
    }
    await assertNoKeys(client, p);
    await assertNoLeasesOn(client);
  });
});

describe('Go and TypeScript in one election', () => {
  it('Go leads: we observe its value and proclaims, our campaign waits, and leads promptly after Go resigns', T, async (t) => {
    const p = fresh('go-leads');
    const name = `${p}election`;
    const go = await startGo(t, etcd.endpoints, 60);
    const s = await Session.create(client, { ttl: 30 });
    const stop = new AbortController();
    const log = new EventLog(client, `${name}/`);
    try {
      await log.ready;
      const lease = await go.session('leader');
      const led = await go.call('leader', 'campaign', { name, value: 'go one' }, 'leading');
      assert.equal(led.key, `${name}/${lease}`);
      const goTerm = (await log.put(led.key!)).createRevision;
      assert.equal(BigInt(led.rev!), goTerm);

      const events = observeLeader(client, name, { signal: stop.signal });
      assert.equal(leaderOf(await next(events)), `${led.key}=go one@${goTerm}`, 'we see Go as leader');
      const info = await currentLeader(client, name);
      assert.equal(info?.leaseId, BigInt(`0x${lease}`));

      // A Go observer too, to check both see the same sequence.
      go.send('watcher', 'observe', { name });
      await go.expect('watcher', 'session');
      await go.expect('watcher', 'observing');
      assert.equal(goLeaderOf(await go.expect('watcher', 'observed')), `${led.key}=go one@${goTerm}`);

      await go.call('leader', 'proclaim', { value: 'go two' }, 'proclaimed');
      assert.equal(leaderOf(await next(events)), `${led.key}=go two@${goTerm}`, 'we see what Go proclaims');
      assert.equal(goLeaderOf(await go.expect('watcher', 'observed')), `${led.key}=go two@${goTerm}`);

      const e = new Election(s, name);
      const campaign = track(e.campaign('ours'));
      const queued = await log.put(e.key);
      await settle();
      assert.equal(campaign.settled, false, 'we wait while Go leads');
      assert.equal((await currentLeader(client, name))?.key, led.key);

      const resignSent = performance.now();
      go.send('leader', 'resign');
      const h = await campaign.promise;
      assert.ok(campaign.at! > resignSent, 'we led only after Go was told to resign');
      const handover = campaign.at! - resignSent;
      await go.expect('leader', 'resigned');
      t.diagnostic(`Go Resign -> our campaign() resolved: ${handover.toFixed(1)} ms`);
      assert.equal(h.fencingToken, queued.createRevision);
      // The hand-over came from the resign (the key deleted while Go's 60 s lease still lives), not an expiry.
      await log.deleted(led.key!);
      assert.ok((await client.leaseTimeToLive(BigInt(`0x${lease}`))).ttl > 0, 'Go resigned; its lease lives on');
      assert.equal(leaderOf(await next(events)), `${e.key}=ours@${h.fencingToken}`, 'our observer sees us');
      assert.equal(goLeaderOf(await go.expect('watcher', 'observed')), `${e.key}=ours@${h.fencingToken}`, 'Go sees us');

      await h.proclaim('ours, again');
      assert.equal(leaderOf(await next(events)), `${e.key}=ours, again@${h.fencingToken}`);
      assert.equal(goLeaderOf(await go.expect('watcher', 'observed')), `${e.key}=ours, again@${h.fencingToken}`, 'Go sees what we proclaim');
      const goLeader = await go.call('leader', 'leader', { name }, 'leader');
      assert.equal(goLeaderOf(goLeader), `${e.key}=ours, again@${h.fencingToken}`, "Go's Leader() reports us");
      await h.resign();
      assert.equal((await next(events)).type, 'none');
      assert.equal((await go.call('leader', 'leader', { name }, 'no-leader')).event, 'no-leader');
      go.send('watcher', 'cancel');
      await go.expect('watcher', 'cancelled');
    } finally {
      stop.abort();
      await log.close();
      await s.close();
      assert.equal(await go.close(), 0, go.stderr);
    }
    await assertNoKeys(client, p);
    await assertNoLeasesOn(client);
  });

  it('we lead: Go observes our value and proclaims, its campaign waits, and it leads promptly after we resign', T, async (t) => {
    const p = fresh('ts-leads');
    const name = `${p}election`;
    const go = await startGo(t, etcd.endpoints, 60);
    const s = await Session.create(client, { ttl: 30 });
    const stop = new AbortController();
    const log = new EventLog(client, `${name}/`);
    try {
      await log.ready;
      const e = new Election(s, name);
      const h = await e.campaign('ts one');

      go.send('watcher', 'observe', { name });
      await go.expect('watcher', 'session');
      await go.expect('watcher', 'observing');
      assert.equal(goLeaderOf(await go.expect('watcher', 'observed')), `${e.key}=ts one@${h.fencingToken}`, 'Go sees us as leader');
      await h.proclaim('ts two');
      assert.equal(goLeaderOf(await go.expect('watcher', 'observed')), `${e.key}=ts two@${h.fencingToken}`, 'Go sees what we proclaim');

      const events = observeLeader(client, name, { signal: stop.signal });
      assert.equal(leaderOf(await next(events)), `${e.key}=ts two@${h.fencingToken}`);

      const lease = await go.session('candidate');
      const goKey = `${name}/${lease}`;
      const from = go.events.length;
      go.send('candidate', 'campaign', { name, value: 'go' });
      const queued = await log.put(goKey);
      assert.ok(queued.createRevision > h.fencingToken);
      assert.equal((await currentLeader(client, name))?.key, e.key);
      assert.deepEqual(go.events.slice(from).filter((x) => x.id === 'candidate').map((x) => x.event), [], 'Go waits while we lead');

      const resignAt = performance.now();
      await h.resign();
      const led = await go.expect('candidate', 'leading');
      assert.ok(led.at > resignAt, 'Go led only after we resigned');
      t.diagnostic(`our resign() -> Go Campaign returned (line received): ${(led.at - resignAt).toFixed(1)} ms`);
      assert.equal(led.key, goKey);
      assert.equal(BigInt(led.rev!), queued.createRevision);
      assert.ok((await s.client.leaseTimeToLive(s.leaseId)).ttl > 0, 'we resigned; our lease lives on');
      assert.equal(leaderOf(await next(events)), `${goKey}=go@${queued.createRevision}`, 'we see Go lead');
      assert.equal(goLeaderOf(await go.expect('watcher', 'observed')), `${goKey}=go@${queued.createRevision}`, "Go's observer sees it too");

      // And back: we campaign behind Go and lead once it resigns.
      const campaign = track(e.campaign('ts again'));
      const ours = await log.put(e.key, log.events.length);
      await settle();
      assert.equal(campaign.settled, false);
      const resignSent = performance.now();
      go.send('candidate', 'resign');
      const h2 = await campaign.promise;
      assert.ok(campaign.at! > resignSent, 'we led only after Go was told to resign');
      t.diagnostic(`Go Resign -> our campaign() resolved: ${(campaign.at! - resignSent).toFixed(1)} ms`);
      await go.expect('candidate', 'resigned');
      assert.equal(h2.fencingToken, ours.createRevision);
      assert.equal(goLeaderOf(await go.expect('watcher', 'observed')), `${e.key}=ts again@${h2.fencingToken}`);
      await h2.resign();
      go.send('watcher', 'cancel');
      await go.expect('watcher', 'cancelled');
    } finally {
      stop.abort();
      await log.close();
      await s.close();
      assert.equal(await go.close(), 0, go.stderr);
    }
    await assertNoKeys(client, p);
    await assertNoLeasesOn(client);
  });
});

describe('mixed fleet on a 3-member cluster', () => {
  let cluster: EtcdCluster | undefined;
  let admin: Client | undefined;
  before(async () => {
    cluster = await startEtcd({ members: 3 });
    admin = new Client({ endpoints: cluster.endpoints });
  });
  after(async () => {
    try {
      await closeGoFleets();
      if (admin) {
        await assertNoKeys(admin, ROOT);
        await assertNoLeasesOn(admin);
      }
    } finally {
      await admin?.close();
      await cluster?.stop();
    }
  });

  it('Go (one client per member) and TypeScript (one client per member) queue FIFO and keep the counter exact', T, async (t) => {
    const c = cluster!;
    const p = fresh('cluster');
    const name = `${p}lock`;
    const counter = `${p}counter`;
    // One Go process per member, so Go's requests really go to different members.
    const gos = await Promise.all(c.endpoints.map((ep) => startGo(t, [ep], 30, c)));
    const clients = c.endpoints.map((ep) => new Client({ endpoints: [ep] }));
    const sessions: Session[] = [];
    const logs: EventLog[] = [];
    try {
      // mixedQueue drives one Go process; run it per member with the other members' clients as TypeScript.
      for (let i = 0; i < gos.length; i++) {
        const mine = `${name}-${i}`;
        const who = ['go-a', 'ts-a', 'go-b', 'ts-b'];
        const r = await mixedQueue(clients[(i + 1) % clients.length]!, gos[i]!, mine, counter, who, sessions);
        logs.push(r.log);
        assert.deepEqual(r.violations, [], 'one holder at a time');
        assert.deepEqual(r.order, who, 'FIFO across languages and members');
        assert.deepEqual(r.values, Array.from({ length: who.length + 1 }, (_, k) => i * (who.length + 1) + k + 1));
      }
      // And all at once: every Go process and every client hammering one lock.
      const N = 6;
      const all = `${name}-all`;
      await admin!.delete(counter);
      const writes: { value: number; token: bigint }[] = [];
      const stops = gos.map((g) => g.onEvent((e) => e.event === 'counted' && writes.push({ value: Number(e.value), token: BigInt(e.rev!) })));
      try {
        await Promise.all([
          ...gos.map((g) => g.call('counter', 'count', { name: all, counter, n: N }, 'done')),
          ...clients.map(async (cl) => {
            const s = await Session.create(cl, { ttl: 30 });
            sessions.push(s);
            for (let k = 0; k < N; k++) {
              const h = await new Mutex(s, all).lock();
              const r = await tsIncrement(cl, h, counter);
              assert.ok(r.ok);
              writes.push({ value: r.value, token: h.fencingToken });
              await h.unlock();
            }
          }),
        ]);
      } finally {
        stops.forEach((f) => f());
      }
      const total = N * (gos.length + clients.length);
      assert.equal((await admin!.get(counter))?.value.toString(), String(total));
      const sorted = [...writes].sort((a, b) => a.value - b.value);
      assert.deepEqual(sorted.map((w) => w.value), Array.from({ length: total }, (_, k) => k + 1));
      for (let k = 1; k < sorted.length; k++) assert.ok(sorted[k]!.token > sorted[k - 1]!.token, 'tokens grow with the counter');
    } finally {
      await Promise.all(logs.map((l) => l.close()));
      await Promise.all(sessions.map((s) => s.close()));
      for (const g of gos) assert.equal(await g.close(), 0, g.stderr);
      await Promise.all(clients.map((cl) => cl.close()));
      await admin!.delete(counter);
    }
    await assertNoKeys(admin!, p);
    await assertNoLeasesOn(admin!);
  });
});
