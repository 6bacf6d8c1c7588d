// Round trips, counted: every unary RPC a Client sends goes through Connection.unary, so wrapping
// that one method on one client counts exactly what a lock costs. etcd itself is real.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Client, Mutex, Session } from '../src/index.js';
import { startEtcd, type EtcdCluster } from '../src/testing/index.js';
import { assertNoKeys, assertNoLeases, serverState, track, uniquePrefix, waitersBlocked } from './helpers.js';

let etcd: EtcdCluster;
let admin: Client;

before(async () => {
  etcd = await startEtcd({ members: 1 });
  admin = new Client({ endpoints: etcd.endpoints });
});

after(async () => {
  await assertNoLeases(admin);
  await admin.close();
  await etcd.stop();
});

/** A client whose unary calls are counted by method name (Txn, Range, ...), and their answers. */
function countingClient(): { client: Client; calls: string[]; answered: () => number } {
  const client = new Client({ endpoints: etcd.endpoints });
  const calls: string[] = [];
  let answered = 0;
  const unary = client.conn.unary.bind(client.conn);
  client.conn.unary = ((method, ...rest) => {
    calls.push(method.path.slice(method.path.lastIndexOf('/') + 1));
    return unary(method, ...rest).finally(() => answered++);
  }) as typeof client.conn.unary;
  return { client, calls, answered: () => answered };
}

test('an uncontended lock + unlock costs two round trips: one Txn to take it, one Txn to release it', async (t) => {
  const prefix = uniquePrefix('rt-uncontended');
  const { client, calls } = countingClient();
  const session = await Session.create(client, { ttl: 30 });
  const mutex = new Mutex(session, `${prefix}lock`);
  calls.length = 0;
  for (let i = 0; i < 10; i++) {
    const h = await mutex.lock();
    await h.unlock();
  }
  t.diagnostic(`RPCs for 10 cycles: ${calls.join(' ')}`);
  assert.deepEqual(calls, Array(20).fill('Txn'));
  await session.close();
  await client.close();
  await assertNoKeys(admin, prefix);
});

test('a contended handoff costs the waiter one read after the wake-up, and the holder one write', async (t) => {
  const prefix = uniquePrefix('rt-contended');
  const name = `${prefix}lock`;
  const holder = countingClient();
  const waiter = countingClient();
  const hs = await Session.create(holder.client, { ttl: 30 });
  const ws = await Session.create(waiter.client, { ttl: 30 });
  try {
  const held = await new Mutex(hs, name).lock();
  waiter.calls.length = 0;
  const watchers = (await serverState(etcd.clientUrls[0]!)).watchers;
  const pending = track(new Mutex(ws, name).lock());
  // Queued: the enqueue Txn (O(1) in etcd's apply loop), the read-only look-up of the predecessor,
  // and, unless the watch delivers everything after that read and the read proved the predecessor's
  // lease (etcd up to 3.6 reports it on a keys-only read), the O(1) check once the watch is up.
  await waitersBlocked(etcd.clientUrls[0]!, watchers, 1, 'the waiter to be queued and watching');
  const queuedWith = [...waiter.calls];
  holder.calls.length = 0;
  waiter.calls.length = 0;
  await held.unlock();
  const h2 = await pending.promise;
  t.diagnostic(`queueing: ${queuedWith.join(' ')}; handoff: holder ${holder.calls.join(' ')}, waiter ${waiter.calls.join(' ')}`);
  assert.ok(
    queuedWith.length >= 2 && queuedWith.length <= 3 && queuedWith.every((c) => c === 'Txn'),
    `enqueue, find the predecessor, and at most one check once its watch is up: ${queuedWith.join(' ')}`,
  );
  assert.deepEqual(holder.calls, ['Txn'], 'the release is one guarded delete');
  assert.deepEqual(waiter.calls, ['Txn'], 'after the delete event, one read confirms our key and that nobody is before us');
  await h2.unlock();
  } finally {
    // Also when an assertion failed: an open session or a pending lock() would keep this file's
    // process alive until the CI run's hang guard.
    await Promise.allSettled([hs.close(), ws.close()]);
    await Promise.allSettled([holder.client.close(), waiter.client.close()]);
  }
  await assertNoKeys(admin, prefix);
});
