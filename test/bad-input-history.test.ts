// Hostile surroundings against real etcd: compaction under a waiter and an observer, and thousands of
// waiters giving up at once. Every test cleans up; `after` proves nothing is left (no key, no lease).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, Election, Mutex, Session, observeLeader, type LeaderEvent } from '../src/index.js';
import { startProxy, type EtcdCluster } from '../src/testing/index.js';
import { EventLog, assertNoKeys, grpcHandled, track, waitFor, etcdForFile, openSessions, closeAll } from './helpers.js';

const ROOT = 'test/bad-input-history/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

const sessions = (n: number, ttl = 30, on: Client = client): Promise<Session[]> => openSessions(on, n, ttl);

describe('compaction', () => {
  it('a waiter whose predecessor was deleted and compacted away while its watch stream was down still gets the lock', {
    timeout: 30_000,
  }, async () => {
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

describe('thousands of waiters', () => {
  /** `n` sessions spread over `clients`, created in batches. */
  async function manySessions(n: number, clients: Client[]): Promise<Session[]> {
    const out: Session[] = [];
    for (let i = 0; i < n; i += 250) {
      out.push(
        ...(await Promise.all(
          Array.from({ length: Math.min(250, n - i) }, (_, j) => Session.create(clients[(i + j) % clients.length]!, { ttl: 60 })),
        )),
      );
    }
    return out;
  }
  async function closeMany(ss: Session[]): Promise<void> {
    for (let i = 0; i < ss.length; i += 250) await Promise.all(ss.slice(i, i + 250).map((s) => s.close()));
  }
  const count = async (prefix: string): Promise<bigint> =>
    (await client.range({ key: Buffer.from(prefix), rangeEnd: Buffer.from(`${prefix.slice(0, -1)}0`), countOnly: true })).count;

  it('2000 waiters on 4 clients, aborted at once: every lock() rejects with the reason and every key goes', {
    timeout: 180_000,
  }, async () => {
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
      // Only the holder's key is left, and it still holds. A rejection waits for its key's delete at
      // most the client's dial timeout (2 s); 2,000 deletes on one name go as 2,000 requests (never
      // two of one name in a request), which a loaded machine may not answer in that time: the rest
      // land in the background.
      await waitFor(async () => (await count(`${name}/`)) === 1n, 'every waiter key deleted', { intervalMs: 100, limitMs: 60_000 });
      held.assertHeld();
      await held.unlock();
    } finally {
      await closeMany(ss);
      await closeAll([holderSession]);
      await Promise.all(clients.map((c) => c.close()));
    }
    await assertNoKeys(client, p);
    assert.deepEqual(await client.leaseLeases(), []);
  });

  it('500 waiters aborted while their enqueue is still in flight leave no key behind', { timeout: 120_000 }, async () => {
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
  });
});
