// A process that restarts and adopts its lease (`Session.create(client, { leaseId })`) finds its old
// key under the name. As with Go (etcd's TestElectionOnSessionRestart): the key keeps its place,
// campaign() gives it the new value so etcd and the handle agree, and the key now belongs to this
// call (an abort deletes it; a key nobody waits for would block the queue while the lease lives).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, Election, Mutex, Session, type LeaderEvent } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { etcdForFile, serverState, waitersBlocked, within } from './helpers.js';

const ROOT = 'test/resume/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

/** Watchers open on etcd now: the base for {@link blocked}. */
const watchersNow = async (): Promise<number> => (await serverState(etcd.clientUrls[0]!)).watchers;
/** One more waiter than at `base` (watchersNow) blocked on its watch, with nothing in flight. */
const blocked = (base: number): Promise<void> => waitersBlocked(etcd.clientUrls[0]!, base, 1);

/** Whether `p` settled, and how. */
function watch<T>(p: Promise<T>): { settled: () => boolean } {
  let done = false;
  p.then(
    () => (done = true),
    () => (done = true),
  );
  return { settled: () => done };
}

/** The first process: it leads (or queues) with `value`, then "crashes": it stops renewing and its client goes. */
async function firstProcess(name: string, value: string): Promise<{ leaseId: bigint; token: bigint; gone: () => Promise<void> }> {
  const c0 = new Client({ endpoints: etcd.endpoints });
  const s0 = await Session.create(c0, { ttl: 60 });
  const h0 = await new Election(s0, name).campaign(value);
  s0.orphan();
  return { leaseId: s0.leaseId, token: h0.fencingToken, gone: () => c0.close() };
}

describe('a session resumed on an existing lease', () => {
  it('campaign() keeps the place, updates the value in etcd, and the waiter still waits', async () => {
    const p = fresh('restart');
    const name = `${p}election`;
    const old = await firstProcess(name, 'abc');
    const w = await Session.create(client);
    const ac = new AbortController();
    const seen: LeaderEvent[] = [];
    let sawDef!: () => void;
    const defSeen = new Promise<void>((resolve) => (sawDef = resolve));
    const observer = (async () => {
      for await (const ev of new Election(w, name).observe({ signal: ac.signal })) {
        seen.push(ev);
        if (ev.type === 'leader' && ev.leader.value === 'def') sawDef();
      }
    })();
    let s1: Session | undefined;
    try {
      const base = await watchersNow();
      const waiter = new Election(w, name).campaign('waiter');
      const waiting = watch(waiter);
      await blocked(base);
      await old.gone(); // the first process is gone; its lease lives on (60 s TTL)

      s1 = await Session.create(client, { leaseId: old.leaseId });
      const resumed = await new Election(s1, name).campaign('def');
      assert.equal(resumed.fencingToken, old.token, 'the key kept its place (its CreateRevision)');
      assert.equal(resumed.value, 'def');
      const kv = await client.get(resumed.key);
      assert.equal(kv?.value.toString(), 'def', 'etcd holds the new value, as the handle says');
      assert.equal(kv?.createRevision, old.token);
      assert.equal((await new Election(w, name).leader())?.value, 'def', 'leader() reports the new value');
      await within(defSeen, "the observer's event for the new value", 10_000);
      assert.deepEqual(
        seen.map((e) => (e.type === 'leader' ? e.leader.value : 'none')),
        ['abc', 'def'],
        'the observer saw the old value, then the new one, and no other leader',
      );
      assert.equal(waiting.settled(), false, 'the waiter still waits behind the resumed leader');
      const n = (await client.getPrefix(`${name}/`)).kvs.length;
      assert.equal(n, 2, 'one key for the resumed leader, one for the waiter: nothing queued twice');

      await resumed.resign();
      const next = await waiter;
      assert.ok(next.fencingToken > old.token);
      await next.resign();
    } finally {
      ac.abort();
      await observer;
      await s1?.close();
      await w.close();
    }
  });

  it('an abort of a resumed campaign deletes the adopted key; the leader ahead is untouched', async () => {
    const p = fresh('abort');
    const name = `${p}election`;
    const l = await Session.create(client);
    let s1: Session | undefined;
    try {
      const leader = await new Election(l, name).campaign('leader');
      // What a first process that queued behind the leader leaves when it crashes: its key on its lease.
      const s0 = await Session.create(client, { ttl: 60 });
      const oldKey = new Election(s0, name).key;
      await client.put(oldKey, 'abc', { lease: s0.leaseId });
      const oldKv = (await client.get(oldKey))!;
      s0.orphan();

      s1 = await Session.create(client, { leaseId: s0.leaseId });
      const e1 = new Election(s1, name);
      const ac = new AbortController();
      const base = await watchersNow();
      const resumed = e1.campaign('def', { signal: ac.signal });
      await blocked(base); // enqueue, the value update, any look-up and check: now waiting
      const kv = await client.get(e1.key);
      assert.equal(kv?.createRevision, oldKv.createRevision, 'the adopted key kept its place');
      assert.equal(kv?.value.toString(), 'def');
      const reason = new Error('shutting down');
      ac.abort(reason);
      await assert.rejects(resumed, (e) => e === reason);
      assert.equal(await client.get(e1.key), undefined, 'the aborted call deleted the key it took over');
      assert.equal((await e1.leader())?.value, 'leader');
      leader.assertLeader();
      await leader.resign();
    } finally {
      await s1?.close();
      await l.close();
    }
  });

  it('a resumed lock() keeps its place in the queue and is not queued twice', async () => {
    const p = fresh('lock');
    const name = `${p}lock`;
    const [a, b] = await Promise.all([Session.create(client), Session.create(client)]);
    const s0 = await Session.create(client, { ttl: 60 });
    let s1: Session | undefined;
    try {
      const held = await new Mutex(a, name).lock();
      // What a crashed process leaves: its key (Go's layout: empty value) on its lease, queued second.
      const oldKey = new Mutex(s0, name).key;
      await client.put(oldKey, '', { lease: s0.leaseId });
      const oldRev = (await client.get(oldKey))!.createRevision;
      s0.orphan();
      let base = await watchersNow();
      const third = new Mutex(b, name).lock();
      await blocked(base);

      s1 = await Session.create(client, { leaseId: s0.leaseId });
      base = await watchersNow();
      const resumed = new Mutex(s1, name).lock();
      const resumedState = watch(resumed);
      await blocked(base);
      assert.equal((await client.getPrefix(`${name}/`)).kvs.length, 3, 'holder, resumed key, third: nothing queued twice');
      assert.equal(resumedState.settled(), false, 'the resumed lock waits behind the holder');

      await held.unlock();
      const mine = await resumed;
      assert.equal(mine.fencingToken, oldRev, 'served at the place the first process had');
      assert.equal(watch(third).settled(), false);
      await mine.unlock();
      const last = await third;
      assert.ok(last.fencingToken > oldRev);
      await last.unlock();
    } finally {
      await s1?.close();
      await s0.close().catch(() => {});
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('a sibling on the same session that shares the key (share: true, as Go) aborts: the key stays with the first', async () => {
    const p = fresh('sibling');
    const name = `${p}election`;
    const [l, s] = await Promise.all([Session.create(client), Session.create(client)]);
    try {
      const leader = await new Election(l, name).campaign('leader');
      let base = await watchersNow();
      const first = new Election(s, name).campaign('one', { share: true });
      await blocked(base);
      const ac = new AbortController();
      base = await watchersNow();
      const second = new Election(s, name).campaign('two', { signal: ac.signal, share: true });
      await blocked(base);
      ac.abort();
      await assert.rejects(second);
      const kv = await client.get(new Election(s, name).key);
      assert.ok(kv, 'the key stays: the first campaign still waits on it');
      assert.equal(kv.value.toString(), 'two', 'the sibling updated the value, as Go does');
      await leader.resign();
      const h = await first;
      await h.resign();
    } finally {
      await Promise.all([l.close(), s.close()]);
    }
  });
});
