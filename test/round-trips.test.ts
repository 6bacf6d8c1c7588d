// Round trips, counted: every unary RPC a Client sends goes through Connection.unary, so wrapping
// that one method on one client counts exactly what a lock costs. etcd itself is real.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Client, Mutex, Session, type LockHandle } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { Probe } from './probe.js';
import {
  assertNoKeys,
  closeAll,
  openSessions,
  serverState,
  settleAll,
  settledOrHang,
  track,
  etcdForFile,
  waitFor,
  waitersBlocked,
  type Tracked,
} from './helpers.js';

let etcd: EtcdCluster;
let admin: Client;

const fresh = etcdForFile('test/round-trips/', (e, c) => ((etcd = e), (admin = c)));

/** A client of its own, spied on (see Probe): its unary calls, as they leave it, and its watches. */
function probed(): Probe {
  return new Probe(new Client({ endpoints: etcd.endpoints }));
}

/**
 * A holder and a waiter, each on a probed client of its own with a session. `close` ends both, also
 * after a failed assertion: an open session or a pending lock() would keep this file's process alive
 * until the CI run's hang guard.
 */
async function holderAndWaiter() {
  const holder = probed();
  const waiter = probed();
  const hs = await Session.create(holder.client, { ttl: 30 });
  const ws = await Session.create(waiter.client, { ttl: 30 });
  const close = async (): Promise<void> => {
    await Promise.allSettled([hs.close(), ws.close()]);
    await Promise.allSettled([holder.client.close(), waiter.client.close()]);
  };
  return { holder, waiter, hs, ws, close };
}

test('an uncontended lock + unlock costs two round trips: one Txn to take it, one Txn to release it', async (t) => {
  const prefix = fresh('rt-uncontended');
  const probe = probed();
  const { client } = probe;
  const session = await Session.create(client, { ttl: 30 });
  const mutex = new Mutex(session, `${prefix}lock`);
  probe.reset();
  for (let i = 0; i < 10; i++) {
    const h = await mutex.lock();
    await h.unlock();
  }
  t.diagnostic(`RPCs for 10 cycles: ${probe.calls.join(' ')}`);
  assert.deepEqual(probe.calls, Array(20).fill('Txn'));
  await session.close();
  await client.close();
  await assertNoKeys(admin, prefix);
});

test('a contended handoff costs the holder one write and the waiter one Txn after the wake-up: the look-up that also confirms its own key', async (t) => {
  const prefix = fresh('rt-contended');
  const name = `${prefix}lock`;
  const { holder, waiter, hs, ws, close } = await holderAndWaiter();
  try {
    const held = await new Mutex(hs, name).lock();
    waiter.reset();
    const watchers = (await serverState(etcd.clientUrls[0]!)).watchers;
    const pending = track(new Mutex(ws, name).lock());
    // Queued: the enqueue Txn (O(1) in etcd's apply loop), the look-up of the key before ours (one
    // read-only Txn that also confirms our key), and a confirming read of both once the watch is up,
    // unless that look-up read everything the check needs and the watch started no later.
    await waitersBlocked(etcd.clientUrls[0]!, watchers, 1, 'the waiter to be queued and watching');
    const queuedWith = [...waiter.calls];
    holder.reset();
    waiter.reset();
    await held.unlock();
    const h2 = await pending.promise;
    t.diagnostic(`queueing: ${queuedWith.join(' ')}; handoff: holder ${holder.calls.join(' ')}, waiter ${waiter.calls.join(' ')}`);
    assert.ok(
      queuedWith.length >= 2 && queuedWith.length <= 3 && queuedWith.every((c) => c === 'Txn'),
      `enqueue, its look-up, and at most one re-read once the watch is up: ${queuedWith.join(' ')}`,
    );
    assert.deepEqual(holder.calls, ['Txn'], 'the release is one guarded delete');
    assert.deepEqual(
      waiter.calls,
      ['Txn'],
      'after the delete event, one Txn: the look-up finds nobody older, and confirms our own key stands now',
    );
    await h2.unlock();
  } finally {
    await close();
  }
  await assertNoKeys(admin, prefix);
});

test('in a short queue the enqueue reads the key before ours and the watch on it is kept: one Txn to queue, none to watch, one to take over', async (t) => {
  const prefix = fresh('rt-lookup');
  const name = `${prefix}lock`;
  const { waiter, hs, ws, close } = await holderAndWaiter();
  try {
    const mine = new Mutex(ws, name);
    const theirs = new Mutex(hs, name);
    /** The holder holds, the waiter queues behind it: what the waiter sends until it waits, and to take over. */
    const cycle = async () => {
      const held = await theirs.lock();
      const watches = waiter.watches.length;
      waiter.reset();
      const pending = track(mine.lock());
      await waiter.quiet('the waiter to wait', () => waiter.calls.length > 0);
      const queued = [...waiter.calls];
      const created = waiter.watches.length - watches;
      assert.equal(pending.settled, false, 'waiting while the holder holds');
      waiter.reset();
      await held.unlock();
      const h = await pending.promise;
      const takeover = [...waiter.calls];
      await h.unlock();
      return { queued, created, takeover };
    };
    // The first: this client has not seen the queue with anyone in it; it looks its predecessor up.
    const cycles = [await cycle(), await cycle(), await cycle()];
    t.diagnostic(
      cycles.map((c) => `queued ${c.queued.join(' ')}, ${c.created} watch(es) made, took over with ${c.takeover.join(' ')}`).join('; '),
    );
    for (const c of cycles.slice(1)) {
      // Nothing was written between the enqueue and the wait: what the enqueue read needs no re-read.
      assert.deepEqual(c.queued, ['Txn'], 'the enqueue alone: it read our predecessor with its lease, after our put');
      assert.equal(c.created, 0, "no new watch: the one on the holder's key was kept from the last wait");
      assert.deepEqual(c.takeover, ['Txn'], 'after the delete event, one Txn: nobody older, our key confirmed');
    }
  } finally {
    await close();
  }
  await assertNoKeys(admin, prefix);
});

test('behind a long queue a holder marks its key, and the waiter behind it takes over with one O(1) Txn and no read', async (t) => {
  const prefix = fresh('rt-marks');
  const name = `${prefix}lock`;
  const waiting = 40; // more than SHORT_QUEUE (32): the queue counts as long
  const client = new Client({ endpoints: etcd.endpoints });
  const requests = new Probe(client).sent;
  const sessions = await openSessions(client, waiting + 1);
  const pending: Tracked<LockHandle>[] = [];
  try {
    const first = await new Mutex(sessions[0]!, name).lock();
    const watchers = (await serverState(etcd.clientUrls[0]!)).watchers;
    for (let i = 1; i <= waiting; i++) pending.push(track(new Mutex(sessions[i]!, name).lock()));
    await waitersBlocked(etcd.clientUrls[0]!, watchers, waiting, `${waiting} waiters queued and watching`);
    const version = async (s: Session): Promise<bigint> => (await admin.get(`${name}/${s.leaseId.toString(16)}`))?.version ?? 0n;
    assert.equal(await version(sessions[0]!), 1n, 'an uncontended holder does not mark');
    // The waiters enqueued concurrently: their order is that of their keys' CreateRevisions.
    const byLease = new Map(sessions.map((s, i) => [s.leaseId, i]));
    const queue = (await admin.range({ key: Buffer.from(`${name}/`), rangeEnd: Buffer.from(`${name}0`) })).kvs
      .sort((a, b) => (a.createRevision < b.createRevision ? -1 : 1))
      .map((kv) => byLease.get(kv.lease)!);
    assert.equal(queue.length, waiting + 1);
    assert.equal(queue[0], 0);
    let holder = first;
    for (let i = 1; i <= 4; i++) {
      requests.length = 0;
      await holder.unlock();
      const next = queue[i]!;
      holder = await settledOrHang(pending[next - 1]!, `waiter ${next}, ${i}th in line, to take over`);
      // Its key is marked: at once by the take-over Txn, or in the background by a holder that
      // found itself first with a full look-up (the first hand-over: its predecessor never marked).
      await waitFor(async () => (await version(sessions[next]!)) === 2n, `holder ${next}'s mark`);
      const handover = requests.slice(1); // [0] is the release
      t.diagnostic(`hand-over ${i}: ${JSON.stringify(requests)}`);
      if (i === 1) {
        // The first waiter's predecessor, an uncontended holder, never marked: one look-up (its page
        // and the queue's count, which says long), then its mark in the background.
        assert.deepEqual(
          handover,
          [
            { method: 'Txn', ranges: 2, puts: 0 },
            { method: 'Txn', ranges: 0, puts: 1 },
          ],
          'the first waiter behind an unmarked holder: one look-up, then its mark',
        );
      } else {
        assert.deepEqual(
          handover,
          [{ method: 'Txn', ranges: 0, puts: 1 }],
          'behind a marked holder: one guarded Txn that confirms our key and marks it, no read',
        );
      }
    }
    await holder.unlock();
    for (const next of queue.slice(5)) await (await settledOrHang(pending[next - 1]!, `waiter ${next} to take over`)).unlock();
  } finally {
    await closeAll(sessions); // a failed assertion leaves locks pending: their sessions end them
    await settleAll(pending);
    await client.close();
  }
  await assertNoKeys(admin, prefix);
});

test('a put that moves a waiting key onto another lease is no mark: the waiter behind it keeps waiting for the holder', async () => {
  const prefix = fresh('rt-moved');
  const name = `${prefix}lock`;
  const waiting = 40; // a long queue: holders mark, and waiters trust marks
  const client = new Client({ endpoints: etcd.endpoints });
  const sessions = await openSessions(client, waiting + 1);
  const pending: Tracked<LockHandle>[] = [];
  const other = (await admin.leaseGrant(30)).id;
  try {
    const first = await new Mutex(sessions[0]!, name).lock();
    const watchers = (await serverState(etcd.clientUrls[0]!)).watchers;
    for (let i = 1; i <= waiting; i++) pending.push(track(new Mutex(sessions[i]!, name).lock()));
    await waitersBlocked(etcd.clientUrls[0]!, watchers, waiting, `${waiting} waiters queued and watching`);
    const byLease = new Map(sessions.map((s, i) => [s.leaseId, i]));
    const queue = (await admin.range({ key: Buffer.from(`${name}/`), rangeEnd: Buffer.from(`${name}0`) })).kvs
      .sort((a, b) => (a.createRevision < b.createRevision ? -1 : 1))
      .map((kv) => byLease.get(kv.lease)!);
    const [p, w] = [queue[1]!, queue[2]!];
    const pKey = `${name}/${sessions[p]!.leaseId.toString(16)}`;
    // Someone else rewrites P's key onto another lease (version 2, like a mark), then it goes.
    await admin.put(pKey, '', { lease: other });
    await admin.delete(pKey);
    await waitersBlocked(etcd.clientUrls[0]!, watchers, waiting - 1, 'the waiter behind it to look up again and watch the holder');
    assert.equal(pending[w - 1]!.settled, false, 'the waiter behind the moved key does not take the lock while the first holder holds it');
    await first.unlock();
    await settledOrHang(pending[w - 1]!, 'the waiter behind the moved key to take over from the holder');
    await assert.rejects(
      pending[p - 1]!.promise,
      (err: Error) => err.name === 'LockLostError',
      'the moved key’s owner is told its key was lost',
    );
    await (await pending[w - 1]!.promise).unlock();
    for (const next of queue.slice(3)) await (await settledOrHang(pending[next - 1]!, `waiter ${next} to take over`)).unlock();
  } finally {
    await closeAll(sessions);
    await settleAll(pending);
    await admin.leaseRevoke(other).catch(() => {});
    await client.close();
  }
  await assertNoKeys(admin, prefix);
});
