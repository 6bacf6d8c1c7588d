// Mutex fairness against a real single-member etcd: strict enqueue order with increasing tokens, a
// waiter keeping its place when its predecessor gives up, and mutual exclusion under concurrent
// read-modify-write. Each test uses its own lock names and leaves nothing.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, Mutex, Session, withLock } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { EventLog, assertNoKeys, grpcHandled, grpcStarted, killEtcdctls, metric, track, waitFor, etcdFile, closeAll } from './helpers.js';

const ROOT = 'test/mutex-fairness/';
let etcd: EtcdCluster;
let client: Client;
const { fresh, sessions, watchersNow, blocked } = etcdFile(ROOT, (e, c) => ((etcd = e), (client = c)), { beforeChecks: killEtcdctls });

/**
 * Resolves once etcd has answered `n` more Txns than `base`: with nothing else running, a waiter's
 * enqueue and its predecessor lookup are 2 Txns, after which it is blocked on its watch.
 */
async function txnsAnswered(base: number, n: number): Promise<void> {
  await waitFor(async () => (await grpcHandled(etcd.clientUrls[0]!, 'Txn')) >= base + n, `${n} Txns answered`);
}
const txnsNow = (): Promise<number> => grpcHandled(etcd.clientUrls[0]!, 'Txn');

describe('Mutex: fairness', () => {
  it('50 waiters acquire strictly in enqueue (CreateRevision) order with increasing tokens, one at a time', {
    timeout: 120_000,
  }, async () => {
    const p = fresh('fifo');
    const name = `${p}lock`;
    const n = 50;
    const clients = [client, new Client({ endpoints: etcd.endpoints }), new Client({ endpoints: etcd.endpoints })];
    const ss = await Promise.all(Array.from({ length: n + 1 }, (_, i) => Session.create(clients[i % clients.length]!, { ttl: 30 })));
    const log = new EventLog(client, `${name}/`);
    try {
      await log.ready;
      const holder = await new Mutex(ss[0]!, name).lock();
      // Enqueue one at a time, each only after its key is in etcd, so the enqueue order is known.
      const order: number[] = [];
      const tokens: bigint[] = [];
      const created: bigint[] = [];
      let inside = 1; // the first holder
      let maxInside = 1;
      const pending: ReturnType<typeof track<void>>[] = [];
      const watchBase = await watchersNow();
      for (let i = 1; i <= n; i++) {
        const m = new Mutex(ss[i]!, name);
        const from = log.events.length;
        pending.push(
          track(
            m.lock().then(async (h) => {
              inside++;
              maxInside = Math.max(maxInside, inside);
              order.push(i);
              tokens.push(h.fencingToken);
              // Hold across a round trip, so that a second holder granted meanwhile is counted.
              await client.get(h.key);
              inside--;
              await h.unlock();
            }),
          ),
        );
        created.push((await log.put(m.key, from)).createRevision);
      }
      // Every waiter's enqueue (and any look-up) answered: each is blocked on its watch.
      await blocked(watchBase, n, `${n} waiters blocked`);
      assert.ok(
        pending.every((t) => !t.settled),
        'no waiter acquires while the first holder holds',
      );
      const handoffStart = log.events.length;
      const eventsBefore = await metric(etcd.clientUrls[0]!, 'etcd_debugging_mvcc_events_total');
      const txnsBefore = await grpcStarted(etcd.clientUrls[0]!, 'Txn');
      const rangesBefore = await grpcStarted(etcd.clientUrls[0]!, 'Range');
      inside--;
      await holder.unlock();
      await Promise.all(pending.map((t) => t.promise));
      assert.equal(maxInside, 1, 'one holder at a time, the first holder included');
      const txns = (await grpcStarted(etcd.clientUrls[0]!, 'Txn')) - txnsBefore;
      const ranges = (await grpcStarted(etcd.clientUrls[0]!, 'Range')) - rangesBefore;

      assert.deepEqual(
        order,
        Array.from({ length: n }, (_, i) => i + 1),
        'acquired in enqueue order',
      );
      assert.deepEqual(tokens, created, 'fencing token = the CreateRevision of each waiter’s key');
      for (let i = 1; i < n; i++) assert.ok(tokens[i]! > tokens[i - 1]!, 'tokens strictly increase');
      // Between two holders nothing else happened under the prefix: the holders' deletes, in order,
      // and (the queue is longer than 32) each holder's one mark on its own key while it held.
      await log.deleted(`${name}/${ss[n]!.leaseId.toString(16)}`, handoffStart);
      const eventsSent = (await metric(etcd.clientUrls[0]!, 'etcd_debugging_mvcc_events_total')) - eventsBefore;
      const handoffs = log.events.slice(handoffStart);
      assert.deepEqual(
        handoffs.filter((e) => e.type === 'delete').map((e) => e.key),
        ss.map((s) => `${name}/${s.leaseId.toString(16)}`),
      );
      let holding = `${name}/${ss[0]!.leaseId.toString(16)}`;
      const marked = new Set<string>();
      for (const e of handoffs) {
        if (e.type === 'delete') {
          holding = `${name}/${ss[ss.findIndex((s) => `${name}/${s.leaseId.toString(16)}` === e.key) + 1]?.leaseId.toString(16)}`;
          continue;
        }
        assert.equal(e.key, holding, `a put during the handoffs is the current holder's mark: ${e.key}`);
        assert.ok(!marked.has(e.key), `one mark per holder: ${e.key}`);
        marked.add(e.key);
      }
      const marks = marked.size;
      assert.ok(marks >= n - 2, `behind a queue of ${n}, the holders mark (${marks} of ${n})`);
      // etcd counts every event it sends to a watcher: our log got its events, so the rest went to
      // waiters. One release, one wake-up: n deletes for the n handoffs, plus each mark (but the
      // last holder's) to the one waiter behind its key, which it does not wake.
      const lastMarked = marked.has(`${name}/${ss[n]!.leaseId.toString(16)}`) ? 1 : 0;
      const toWaiters = eventsSent - handoffs.length;
      assert.equal(toWaiters, n + marks - lastMarked, `watch events delivered to waiters during the handoffs: ${toWaiters}`);
      // And so one read per handoff, not a read by every waiter (a herd would cost about n*n/2).
      assert.ok(txns + ranges <= 3 * (n + 1), `handoffs cost ${txns} Txns and ${ranges} Ranges for ${n + 1} holders`);
    } finally {
      await log.close();
      await closeAll(ss);
      await Promise.all(clients.slice(1).map((c) => c.close()));
    }
    await assertNoKeys(client, p);
  });

  it('a waiter whose predecessor gives up keeps its place behind the holder', async () => {
    const p = fresh('skip');
    const name = `${p}lock`;
    const [a, b, c] = await sessions(3);
    const log = new EventLog(client, `${name}/`);
    try {
      await log.ready;
      const held = await new Mutex(a!, name).lock();
      const ac = new AbortController();
      const mb = new Mutex(b!, name);
      let base = await watchersNow();
      const bWait = mb.lock({ signal: ac.signal });
      bWait.catch(() => {});
      await blocked(base);
      const mc = new Mutex(c!, name);
      base = await watchersNow();
      const cWait = track(mc.lock());
      await blocked(base);
      const txnBase = await txnsNow();
      ac.abort(new Error('b gives up'));
      await assert.rejects(bWait, /b gives up/);
      // c was watching b's key; it must look again, find the holder, and keep waiting.
      await log.deleted(mb.key);
      assert.ok(await client.get(held.key));
      // b's guarded delete answered, and nothing in flight after it: c, whose enqueue read both keys
      // before its own and which watches the prefix, only took b off them and waits for the holder.
      await txnsAnswered(txnBase, 1);
      await blocked(0, 0, 'c waiting again');
      assert.equal(cWait.settled, false);
      await held.unlock();
      const h = await cWait.promise;
      assert.ok(h);
      await h.unlock();
    } finally {
      await log.close();
      await closeAll([a!, b!, c!]);
    }
    await assertNoKeys(client, p);
  });

  it('mutual exclusion: concurrent read-modify-write of a counter under the lock loses no update', { timeout: 60_000 }, async () => {
    const p = fresh('counter');
    const workers = 10;
    const rounds = 5;
    const ss = await sessions(workers);
    let inside = 0;
    let maxInside = 0;
    try {
      await client.put(`${p}counter`, '0');
      await Promise.all(
        ss.map(async (s) => {
          for (let r = 0; r < rounds; r++) {
            await withLock(s, `${p}lock`, async () => {
              inside++;
              maxInside = Math.max(maxInside, inside);
              const v = Number((await client.get(`${p}counter`))!.value.toString());
              await client.put(`${p}counter`, String(v + 1));
              inside--;
            });
          }
        }),
      );
      assert.equal(maxInside, 1);
      assert.equal((await client.get(`${p}counter`))?.value.toString(), String(workers * rounds));
    } finally {
      await closeAll(ss);
      await client.delete(p, { prefix: true });
    }
  });
});
