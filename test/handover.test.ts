// The hand-over down a queue, against a real etcd: one release, one wake-up, and the new holder's one
// Txn (its look-up finds nobody older and confirms its own key in the same request). Safety at the
// edges: a waiter ahead giving up hands nothing over, a waiter whose own key is deleted meanwhile is
// told it lost it (etcd 11456) instead of holding, also when the events reach it late or in one
// revision, and keys without a lease and keys of nested names are never waited for.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setImmediate as turn } from 'node:timers/promises';
import { Client, LockLostError, Mutex, Session, type LockHandle } from '../src/index.js';
import { Probe } from './probe.js';
import { op } from '../src/client/kv.js';
import { startProxy, type EtcdCluster } from '../src/testing/index.js';
import { assertNoKeys, serverState, settledOrHang, settleAll, track, etcdForFile, waitersBlocked, type Tracked } from './helpers.js';

let etcd: EtcdCluster;
let admin: Client;
/** The take-over's requests: one Txn, the look-up that finds nobody older and confirms our key still stands. */
const confirm = ['Txn'];

const fresh = etcdForFile('test/handover/', (e, c) => ((etcd = e), (admin = c)));

/** A contender: its own client, spied on (see Probe), and a session. */
async function contender(): Promise<{ client: Client; session: Session; probe: Probe; close(): Promise<void> }> {
  const probe = new Probe(new Client({ endpoints: etcd.endpoints }));
  const client = probe.client;
  const session = await Session.create(client, { ttl: 30 });
  return { client, session, probe, close: async () => (await session.close(), await client.close()) };
}

/**
 * Lets `c`'s client deliver every event up to now: a put of a key nobody queues on, watched on that
 * client's own watch stream, arrives after every earlier event of the stream; then a few turns for
 * what a delivered event starts (a wait moving on resolves within microtasks and a turn or two).
 */
async function drained(c: { client: Client }, prefix: string): Promise<void> {
  const key = `${prefix}sentinel`;
  const w = c.client.watch(key, { noDelete: true });
  try {
    await w.created;
    await admin.put(key, 'x');
    for await (const batch of w) if (batch.events.length > 0) break;
  } finally {
    w.cancel();
    await admin.delete(key);
  }
  for (let i = 0; i < 5; i++) await turn();
}

/**
 * `holder` takes the lock on `name`, then `waiter` queues behind it and watches; its client counted
 * the queue short first (a tryLock), so its enqueue lists every key older than its own.
 */
async function queuedBehind(holder: Session, waiter: Session, name: string): Promise<{ held: LockHandle; waiting: Tracked<LockHandle> }> {
  const held = await new Mutex(holder, name).lock();
  const watchers = (await serverState(etcd.clientUrls[0]!)).watchers;
  const m = new Mutex(waiter, name);
  assert.equal(await m.tryLock(), null);
  const waiting = track(m.lock());
  await waitersBlocked(etcd.clientUrls[0]!, watchers, 1, 'the waiter queued and watching the prefix');
  return { held, waiting };
}

test('a hand-over down a queue costs each waiter one Txn after the delete that makes it first', async (t) => {
  const prefix = fresh('no-read-chain');
  const name = `${prefix}lock`;
  const cs = await Promise.all([0, 1, 2, 3].map(() => contender()));
  const pending: Tracked<LockHandle>[] = [];
  try {
    let holder = await new Mutex(cs[0]!.session, name).lock();
    // Queued one by one, each behind all the others, each knowing every key before its own.
    const watchers = (await serverState(etcd.clientUrls[0]!)).watchers;
    for (let i = 1; i < cs.length; i++) {
      const m = new Mutex(cs[i]!.session, name);
      pending.push(track(m.lock()));
      await waitersBlocked(etcd.clientUrls[0]!, watchers, i, `waiter ${i} queued and watching`);
    }
    for (let i = 1; i < cs.length; i++) {
      for (const c of cs) c.probe.reset();
      await holder.unlock();
      holder = await settledOrHang(pending[i - 1]!, `waiter ${i} to take over`);
      t.diagnostic(`hand-over ${i}: releaser ${cs[i - 1]!.probe.calls.join(' ')}, new holder ${cs[i]!.probe.calls.join(' ') || '(none)'}`);
      assert.deepEqual(cs[i - 1]!.probe.calls, ['Txn'], 'the release: one guarded delete');
      assert.deepEqual(cs[i]!.probe.calls, confirm, 'the next waiter takes over on the delete event with one Txn');
      for (let j = i + 1; j < cs.length; j++) assert.equal(pending[j - 1]!.settled, false, `waiter ${j} still waits (FIFO)`);
    }
    await holder.unlock();
  } finally {
    for (const c of cs) await c.close(); // a failed assertion leaves locks pending: their sessions end them
    await settleAll(pending);
  }
  await assertNoKeys(admin, prefix);
});

test('a waiter ahead that gives up hands nothing over: the one behind it waits for the holder', async () => {
  const prefix = fresh('no-read-abort');
  const name = `${prefix}lock`;
  const [a, b, c] = await Promise.all([contender(), contender(), contender()]);
  const pending: Tracked<LockHandle>[] = [];
  try {
    const held = await new Mutex(a!.session, name).lock();
    const watchers = (await serverState(etcd.clientUrls[0]!)).watchers;
    const stopB = new AbortController();
    const mb = new Mutex(b!.session, name);
    assert.equal(await mb.tryLock(), null);
    const pb = track(mb.lock({ signal: stopB.signal }));
    await waitersBlocked(etcd.clientUrls[0]!, watchers, 1, 'B queued and watching');
    const mc = new Mutex(c!.session, name);
    assert.equal(await mc.tryLock(), null);
    const pc = track(mc.lock());
    pending.push(pb, pc);
    await waitersBlocked(etcd.clientUrls[0]!, watchers, 2, 'C queued behind B and watching');
    stopB.abort(new Error('B gives up'));
    await assert.rejects(pb.promise, /B gives up/);
    assert.equal(await admin.get(`${name}/${b!.session.leaseId.toString(16)}`), undefined, "B's key is gone");
    await drained(c!, prefix);
    assert.equal(pc.settled, false, 'C does not take the lock while A holds it: B was not the last older key');
    c!.probe.reset();
    await held.unlock();
    const hc = await settledOrHang(pc, 'C to take over from A');
    assert.deepEqual(c!.probe.calls, confirm, 'and then takes it on the delete event, with one Txn');
    await hc.unlock();
  } finally {
    for (const x of [a, b, c]) await x!.close();
    await settleAll(pending);
  }
  await assertNoKeys(admin, prefix);
});

test('a waiter whose own key is deleted while it waits is told it lost it, and the one behind it takes over', async () => {
  const prefix = fresh('no-read-lost');
  const name = `${prefix}lock`;
  const [a, b, c] = await Promise.all([contender(), contender(), contender()]);
  const pending: Tracked<LockHandle>[] = [];
  try {
    const held = await new Mutex(a!.session, name).lock();
    const watchers = (await serverState(etcd.clientUrls[0]!)).watchers;
    const mb = new Mutex(b!.session, name);
    assert.equal(await mb.tryLock(), null);
    const pb = track(mb.lock());
    await waitersBlocked(etcd.clientUrls[0]!, watchers, 1, 'B queued and watching');
    const mc = new Mutex(c!.session, name);
    assert.equal(await mc.tryLock(), null);
    const pc = track(mc.lock());
    pending.push(pb, pc);
    await waitersBlocked(etcd.clientUrls[0]!, watchers, 2, 'C queued behind B and watching');
    // An operator deletes B's key (its lease lives on), then the holder releases: B was next, but its
    // key no longer exists, so B must not hold (etcd 11456), and C is now first.
    await admin.delete(`${name}/${b!.session.leaseId.toString(16)}`);
    await held.unlock();
    await assert.rejects(pb.promise, (err: unknown) => err instanceof LockLostError, 'B is told its key was lost');
    const hc = await settledOrHang(pc, 'C to take over');
    await hc.unlock();
  } finally {
    for (const x of [a, b, c]) await x!.close();
    await settleAll(pending);
  }
  await assertNoKeys(admin, prefix);
});

test("the last older key's delete reaches the waiter late, after its own key was deleted (its stream stalled): it is told it lost its key, it does not hold", async () => {
  const prefix = fresh('no-read-late');
  const name = `${prefix}lock`;
  const a = await contender();
  const proxy = await startProxy(etcd.endpoints[0]!);
  const late = new Client({ endpoints: [proxy.endpoint] });
  const session = await Session.create(late, { ttl: 30 });
  const pending: Tracked<LockHandle>[] = [];
  try {
    const { held, waiting: pb } = await queuedBehind(a.session, session, name);
    pending.push(pb);
    proxy.blackhole(true); // B's events wait in the proxy, in order
    await held.unlock(); // the last older key goes: B first, as of this revision
    await admin.delete(`${name}/${session.leaseId.toString(16)}`); // then B's own key, by an operator
    proxy.blackhole(false);
    await assert.rejects(pb.promise, (err: unknown) => err instanceof LockLostError, 'B is told its key was lost, not granted the lock');
  } finally {
    proxy.blackhole(false);
    await session.close();
    await late.close();
    await proxy.close();
    await a.close();
    await settleAll(pending);
  }
  await assertNoKeys(admin, prefix);
});

test("the holder's key and the waiter's own key deleted in one revision: the waiter is told it lost its key, it does not hold", async () => {
  const prefix = fresh('no-read-both');
  const name = `${prefix}lock`;
  const [a, b] = await Promise.all([contender(), contender()]);
  const pending: Tracked<LockHandle>[] = [];
  try {
    const { held, waiting: pb } = await queuedBehind(a!.session, b!.session, name);
    pending.push(pb);
    // One Txn (an operator's cleanup): the holder's key first, then B's; B's event comes after the
    // one that empties its set of older keys, in the same revision.
    await admin.txn({
      compare: [],
      success: [op.delete(`${name}/${a!.session.leaseId.toString(16)}`), op.delete(`${name}/${b!.session.leaseId.toString(16)}`)],
      failure: [],
    });
    await assert.rejects(pb.promise, (err: unknown) => err instanceof LockLostError, 'B is told its key was lost, not granted the lock');
    await held.unlock().catch(() => undefined);
  } finally {
    for (const x of [a, b]) await x!.close();
    await settleAll(pending);
  }
  await assertNoKeys(admin, prefix);
});

test('keys without a lease and keys of nested names are skipped, as before: they are never waited for', async () => {
  const prefix = fresh('no-read-strays');
  const name = `${prefix}lock`;
  const [a, b] = await Promise.all([contender(), contender()]);
  const pending: Tracked<LockHandle>[] = [];
  const nestedLease = (await admin.leaseGrant(30)).id;
  try {
    // Older than every lock key: a stray key of participant form without a lease (etcd 6631), and a
    // nested name's key on a live lease.
    await admin.put(`${name}/1`, '');
    await admin.put(`${name}/sub/${nestedLease.toString(16)}`, '', { lease: nestedLease });
    const ma = new Mutex(a!.session, name);
    const held = await ma.lock(); // behind only those two: it holds
    const watchers = (await serverState(etcd.clientUrls[0]!)).watchers;
    const mb = new Mutex(b!.session, name);
    assert.equal(await mb.tryLock(), null);
    const pb = track(mb.lock());
    pending.push(pb);
    await waitersBlocked(etcd.clientUrls[0]!, watchers, 1, 'B queued and watching');
    b!.probe.reset();
    await held.unlock();
    const hb = await settledOrHang(pb, 'B to take over from A, past the stray and the nested key');
    // The look-up cannot tell the stray key from a participant when etcd answers keys-only reads with
    // lease 0 (3.7): its check reads it in full, and the look-up after skips it. Never waited for.
    assert.ok(
      b!.probe.calls.length >= 1 && b!.probe.calls.length <= 3 && b!.probe.calls.every((c) => c === 'Txn'),
      `on the delete event: ${b!.probe.calls.join(' ')}`,
    );
    await hb.unlock();
  } finally {
    for (const x of [a, b]) await x!.close();
    await settleAll(pending);
    await admin.delete(`${name}/1`);
    await admin.leaseRevoke(nestedLease);
  }
  await assertNoKeys(admin, prefix);
});
