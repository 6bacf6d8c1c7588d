// A mixed fleet: etcd's own Go package (go.etcd.io/etcd/client/v3/concurrency, driven through
// interop/go) and this library on the same locks, on real etcd (one member, and a 3-member cluster).
// Each side must exclude the other and queue fairly with it (one queue, ordered by CreateRevision).
// RWMutex: go-interop-rwmutex.test.ts; elections: go-interop-election.test.ts. The Go program is
// built once into node_modules/.cache (see test/go-fleet.ts); it needs Go >= 1.26.
//
// Exclusion is checked on the test process's clock with conservative intervals: a holder's interval
// runs from the moment its "acquired" reached us to the moment we *told* it to release. A correct
// successor can only acquire after the holder's delete, which follows that command, so correct runs
// never overlap; a holder that acquires while another still holds is caught on arrival.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, Mutex, Session } from '../src/index.js';
import { startEtcd, type EtcdCluster } from '../src/testing/index.js';
import { EventLog, assertNoKeys, assertNoLeases, etcdForFile, settle, track } from './helpers.js';
import { type GoFleet, goStarter, closeGoFleets } from './go-fleet.js';
import { mixedQueue, tsIncrement } from './go-mixed-queue.js';

const ROOT = 'test/go-interop/';
let etcd: EtcdCluster;
let client: Client;
const startGo = goStarter(() => etcd);
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)), { beforeChecks: closeGoFleets });

// Hang guards only: every wait below is on an event, a promise or a line from the Go process.
const T = { timeout: 120_000 };

/** What {@link withGoAndOurs} hands a test. */
interface GoAndOurs {
  name: string;
  go: GoFleet;
  /** The key Go's actor "go" queues under `name` (its session is open). */
  goKey: string;
  /** Our Mutex on `name`, on a session of this file's client. */
  m: Mutex;
  /** Every event under `name`. */
  log: EventLog;
}

/**
 * Runs `body` with the Go program (actor "go" with a session), our Mutex and a log of the lock; then
 * checks that Go exits cleanly and that no key and no lease is left.
 */
async function withGoAndOurs(t: { diagnostic(m: string): void }, scope: string, body: (x: GoAndOurs) => Promise<void>): Promise<void> {
  const p = fresh(scope);
  const name = `${p}lock`;
  const go = await startGo(t);
  const s = await Session.create(client, { ttl: 30 });
  const log = new EventLog(client, `${name}/`);
  try {
    await log.ready;
    const goKey = `${name}/${await go.session('go')}`;
    await body({ name, go, goKey, m: new Mutex(s, name), log });
  } finally {
    await log.close();
    await s.close();
    assert.equal(await go.close(), 0, go.stderr);
  }
  await assertNoKeys(client, p);
  await assertNoLeases(client);
}

describe('Go and TypeScript on one lock', () => {
  it('a long queue (over 32 keys): Go and TypeScript still served in CreateRevision order', T, async (t) => {
    const p = fresh('long');
    const name = `${p}lock`;
    const counter = `${p}counter`;
    const go = await startGo(t);
    const c = new Client({ endpoints: etcd.endpoints });
    const sessions: Session[] = [];
    let log: EventLog | undefined;
    try {
      const who = [...Array.from({ length: 33 }, (_, i) => `ts-l${i}`), 'go-1', 'ts-a', 'go-2', 'ts-b', 'ts-c', 'go-3'];
      const r = await mixedQueue(c, go, name, counter, who, sessions);
      log = r.log;
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

  it(
    'one holder at a time, FIFO across languages (queue order = CreateRevision = acquisition order), fenced counter exact',
    T,
    async (t) => {
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
        assert.deepEqual(
          r.values,
          Array.from({ length: who.length + 1 }, (_, i) => i + 1),
          'each holder incremented the counter once, in turn',
        );
        assert.equal((await client.get(counter))?.value.toString(), String(who.length + 1));
        // Go confirmed each holding at a revision where every older key was already gone.
        for (const h of r.holdings.filter((x) => x.header !== undefined)) {
          for (const older of r.holdings.filter((x) => x.token < h.token)) {
            const del = await r.log.deleted(older.key);
            assert.ok(
              del.rev <= h.header!,
              `${h.who} (confirmed at ${h.header}) held only after ${older.who}'s key was deleted (at ${del.rev})`,
            );
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
      await assertNoLeases(client);
    },
  );

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
        assert.ok(
          sorted[i]!.token > sorted[i - 1]!.token,
          `fencing tokens grow with the counter (${sorted[i - 1]!.who} then ${sorted[i]!.who})`,
        );
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
    await assertNoLeases(client);
  });

  it(
    "Go's TryLock fails with ErrLocked against our holder and succeeds once we unlock; ours fails and our lock() waits against Go's",
    T,
    (t) =>
      withGoAndOurs(t, 'trylock', async ({ name, go, goKey, m, log }) => {
        const ours = await m.lock();

        const locked = await go.call('go', 'trylock', { name }, 'locked');
        assert.equal(locked.error, 'mutex: Locked by another session');
        // TryLock queued its key, saw ours first and deleted its key again.
        await log.put(goKey);
        await log.deleted(goKey);
        assert.deepEqual(
          (await client.getPrefix(`${name}/`)).kvs.map((kv) => kv.key.toString()),
          [ours.key],
        );

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
      }),
  );

  it(
    "a labelled holder (a non-empty value): Go's TryLock fails against it, Go's Lock waits and gets it on our unlock, and ours labelled waits behind Go",
    T,
    (t) =>
      withGoAndOurs(t, 'label', async ({ name, go, goKey, m, log }) => {
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
      }),
  );

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
    await assertNoLeases(client);
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
        await assertNoLeases(admin);
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
        assert.deepEqual(
          r.values,
          Array.from({ length: who.length + 1 }, (_, k) => i * (who.length + 1) + k + 1),
        );
      }
      // And all at once: every Go process and every client hammering one lock.
      const N = 6;
      const all = `${name}-all`;
      await admin!.delete(counter);
      const writes: { value: number; token: bigint }[] = [];
      const stops = gos.map((g) =>
        g.onEvent((e) => e.event === 'counted' && writes.push({ value: Number(e.value), token: BigInt(e.rev!) })),
      );
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
      assert.deepEqual(
        sorted.map((w) => w.value),
        Array.from({ length: total }, (_, k) => k + 1),
      );
      for (let k = 1; k < sorted.length; k++) assert.ok(sorted[k]!.token > sorted[k - 1]!.token, 'tokens grow with the counter');
    } finally {
      await Promise.all(logs.map((l) => l.close()));
      await Promise.all(sessions.map((s) => s.close()));
      for (const g of gos) assert.equal(await g.close(), 0, g.stderr);
      await Promise.all(clients.map((cl) => cl.close()));
      await admin!.delete(counter);
    }
    await assertNoKeys(admin!, p);
    await assertNoLeases(admin!);
  });
});
