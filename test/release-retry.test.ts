// A release whose delete fails: the key is deleted in the background, guarded on its
// fencing token, until it is gone, so the next waiter gets the lock without the holder's process
// doing anything; the same process acquiring again does not wait behind its own leftover; close()
// waits for it. The holder's every endpoint is behind a TCP proxy that black-holes the delete and
// then cuts the connection (so the held request never lands: only a retry can delete the key).
// No sleeps: every wait is on a promise, a signal or a diagnostics message.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import {
  Client,
  Election,
  LockLostError,
  Mutex,
  RWLockLostError,
  RWMutex,
  Semaphore,
  Session,
  type ReleaseDoneMessage,
  type ReleaseResult,
  type ReleaseRetryMessage,
} from '../src/index.js';
import * as lib from '../src/index.js';
import { lockAll } from '../src/primitives/multilock.js';
import { startProxy, type EtcdCluster, type TcpProxy } from '../src/testing/index.js';
import { queueOf } from '../src/queue/state.js';
import { aborted, assertNoKeys, closeAll, etcdForFile, serverState, settledOrHang, track, waitersBlocked, waitFor } from './helpers.js';

// The channel names are a contract (subscribers match them): spelled out here, checked against the exports below.
const RELEASE_RETRY_CHANNEL = 'etcd-concurrency:release:retry';
const RELEASE_DONE_CHANNEL = 'etcd-concurrency:release:done';

const ROOT = 'test/release-retry/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));
/** A hang guard (a stuck wait must fail, not hang the run), not a timing assertion. */
const T = { timeout: 60_000 };

/** What the diagnostics channels said, and a wait for the done message of one key. */
class Channels {
  readonly retries: ReleaseRetryMessage[] = [];
  readonly done: ReleaseDoneMessage[] = [];
  private readonly waiters: { key: string; resolve: (m: ReleaseDoneMessage) => void }[] = [];
  private readonly onRetry = (m: unknown): void => void this.retries.push(m as ReleaseRetryMessage);
  private readonly onDone = (m: unknown): void => {
    const d = m as ReleaseDoneMessage;
    this.done.push(d);
    for (const w of this.waiters) if (w.key === d.key) w.resolve(d);
  };
  constructor() {
    subscribe(RELEASE_RETRY_CHANNEL, this.onRetry);
    subscribe(RELEASE_DONE_CHANNEL, this.onDone);
  }
  doneFor(key: string): Promise<ReleaseDoneMessage> {
    const seen = this.done.find((d) => d.key === key);
    return seen ? Promise.resolve(seen) : new Promise((resolve) => this.waiters.push({ key, resolve }));
  }
  close(): void {
    unsubscribe(RELEASE_RETRY_CHANNEL, this.onRetry);
    unsubscribe(RELEASE_DONE_CHANNEL, this.onDone);
  }
}

/** A holder's client and session with its only endpoint behind a proxy; TTL 30 s outlives the partition. */
async function holderSide(): Promise<{ proxy: TcpProxy; c: Client; s: Session; close(): Promise<void> }> {
  const proxy = await startProxy(etcd.endpoints[0]!);
  const c = new Client({ endpoints: [proxy.endpoint], callTimeoutMs: 1000, dialTimeoutMs: 300 });
  const s = await Session.create(c, { ttl: 30 });
  return {
    proxy,
    c,
    s,
    async close() {
      proxy.blackhole(false);
      await s.close().catch(() => {});
      await c.close();
      await proxy.close();
    },
  };
}

/**
 * Releases with the holder's network black-holed: the first delete gets no answer, and the result
 * must say `pending` while the key is still there. Then the held bytes are dropped (cut) and the
 * network comes back: only a retry of the library can delete the key now.
 */
async function failedRelease(proxy: TcpProxy, key: string, release: () => Promise<ReleaseResult>): Promise<ReleaseResult> {
  proxy.blackhole(true);
  const r = await release();
  assert.equal(r.state, 'pending', 'the first delete got no answer');
  assert.ok(r.error instanceof Error, String(r.error));
  assert.ok(await client.get(key), 'the key is still there');
  proxy.cut(); // the held delete never reaches etcd
  proxy.blackhole(false);
  return r;
}

/** As failedRelease, but whatever the release answers: the next call must not wait on what it left. */
async function leftOver(proxy: TcpProxy, release: () => Promise<unknown>): Promise<void> {
  proxy.blackhole(true);
  await release().catch(() => {});
  proxy.cut();
  proxy.blackhole(false);
}

describe('a release whose delete fails is retried in the background', T, () => {
  it('the diagnostics channel names are exported as documented', () => {
    const names = lib as Record<string, unknown>;
    const channels = names.DIAGNOSTICS_CHANNEL as Record<string, string>;
    assert.equal(channels.releaseRetry, RELEASE_RETRY_CHANNEL);
    assert.equal(channels.releaseDone, RELEASE_DONE_CHANNEL);
  });

  it('Mutex: the next waiter gets the lock without the holder doing anything; signal, channels and settled tell', async () => {
    const p = fresh('mutex');
    const name = `${p}lock`;
    const ch = new Channels();
    const h = await holderSide();
    const [w] = await Promise.all([Session.create(client, { ttl: 30 })]);
    try {
      const held = await new Mutex(h.s, name).lock();
      const base = (await serverState(etcd.clientUrls[0]!)).watchers;
      const next = track(new Mutex(w!, name).lock());
      await waitersBlocked(etcd.clientUrls[0]!, base, 1);
      const signal = held.signal; // watched: it must abort only once the key is gone
      const r = await failedRelease(h.proxy, held.key, () => held.unlock());
      assert.equal(signal.aborted, false, 'the key is still there: the signal waits for it to go');
      assert.throws(() => held.assertHeld(), LockLostError, 'released by us: not held any more');
      assert.equal(await held.unlock(), r, 'unlock() again: the same answer');
      const taken = await next.promise; // the holder's process does nothing more
      assert.ok(taken.fencingToken > held.fencingToken);
      await r.settled;
      assert.match(String(await aborted(signal)), /was released/);
      const done = await ch.doneFor(held.key);
      assert.equal(done.outcome, 'deleted');
      assert.ok(done.attempts >= 2, `retried: ${done.attempts} attempts`);
      assert.equal(done.name, name);
      assert.equal(done.kind, 'lock');
      const first = ch.retries.find((m) => m.key === held.key)!;
      assert.equal(first.attempt, 1);
      assert.equal(first.name, name);
      assert.equal(first.fencingToken, held.fencingToken);
      assert.equal(first.message, (first.error as Error).message);
      assert.equal(first.code, (first.error as { code?: number }).code, 'its code, when the failure has one');
      await taken.unlock();
    } finally {
      ch.close();
      await h.close();
      await closeAll([w]);
    }
    await assertNoKeys(client, p);
  });

  it('RWMutex: a released read lock lets the waiting writer in', async () => {
    const p = fresh('rw');
    const name = `${p}rw`;
    const h = await holderSide();
    const w = await Session.create(client, { ttl: 30 });
    try {
      const reader = await new RWMutex(h.s, name).rLock();
      const base = (await serverState(etcd.clientUrls[0]!)).watchers;
      const writer = track(new RWMutex(w, name).lock());
      await waitersBlocked(etcd.clientUrls[0]!, base, 1);
      const r = await failedRelease(h.proxy, reader.key, () => reader.unlock());
      const wl = await writer.promise;
      assert.ok(wl.fencingToken > reader.fencingToken);
      await r.settled;
      assert.ok(reader.signal.reason instanceof RWLockLostError);
      await wl.unlock();
    } finally {
      await h.close();
      await closeAll([w]);
    }
    await assertNoKeys(client, p);
  });

  it('the same process taking a write lock right after a failed read release waits for its leftover, not forever', async () => {
    const p = fresh('self-rw');
    const h = await holderSide();
    try {
      const rw = new RWMutex(h.s, `${p}rw`);
      const reader = await rw.rLock();
      await leftOver(h.proxy, () => reader.unlock());
      // Would queue behind our own read key for the session's life (the hang guard fails it).
      const writer = await settledOrHang(track(rw.lock()), 'the write lock after our own failed read release');
      assert.ok(writer.fencingToken > reader.fencingToken);
      assert.equal((await writer.unlock()).state, 'released');
    } finally {
      await h.close();
    }
    await assertNoKeys(client, p);
  });

  it('the same process locking again right after a failed release gets a new key incarnation (a new fencing token)', async () => {
    const p = fresh('self-lock');
    const h = await holderSide();
    try {
      const m = new Mutex(h.s, `${p}lock`);
      const first = await m.lock();
      await leftOver(h.proxy, () => first.unlock());
      const again = await settledOrHang(track(m.lock()), 'the lock after our own failed release');
      assert.ok(again.fencingToken > first.fencingToken, 'a new hold gets a new fencing token, not the leftover');
      assert.equal(again.key, first.key);
      assert.equal(again.signal.aborted, false, 'the old incarnation going is not the new one lost');
      await again.unlock();
    } finally {
      await h.close();
    }
    await assertNoKeys(client, p);
  });

  it('Semaphore, Election resign and lockAll: each release goes on until its key is gone', async () => {
    const p = fresh('others');
    const h = await holderSide();
    try {
      const permit = await new Semaphore(h.s, `${p}sem`, { permits: 1 }).acquire();
      const rp = await failedRelease(h.proxy, permit.key, () => permit.release());
      const leader = await new Election(h.s, `${p}elect`).campaign('me');
      const rl = await failedRelease(h.proxy, leader.key, () => leader.resign());
      const locks = await lockAll(h.s, [`${p}a`, `${p}b`]);
      const ra = await failedRelease(h.proxy, locks.handles.get(`${p}a`)!.key, () => locks.unlock());
      await Promise.all([rp.settled, rl.settled, ra.settled]);
      assert.deepEqual(
        (await client.getPrefix(p)).kvs.map((kv) => kv.key.toString()),
        [],
        'every key gone while the session lives',
      );
      h.s.assertAlive();
    } finally {
      await h.close();
    }
    await assertNoKeys(client, p);
  });

  it('Session.close() waits for a pending delete, then revokes: the handle ends released', async () => {
    const p = fresh('close');
    const ch = new Channels();
    const h = await holderSide();
    try {
      const held = await new Mutex(h.s, `${p}lock`).lock();
      const signal = held.signal;
      await failedRelease(h.proxy, held.key, () => held.unlock());
      await h.s.close();
      const done = await ch.doneFor(held.key);
      assert.equal(done.outcome, 'deleted', 'the delete landed before the lease was revoked');
      assert.match(String(await aborted(signal)), /was released/);
    } finally {
      ch.close();
      await h.close();
    }
    await assertNoKeys(client, p);
  });

  it('Client.close() waits for a pending delete before it ends the streams', async () => {
    const p = fresh('client-close');
    const ch = new Channels();
    const h = await holderSide();
    try {
      const held = await new Mutex(h.s, `${p}lock`).lock();
      await failedRelease(h.proxy, held.key, () => held.unlock());
      await h.c.close(); // the session is not closed: only the delete can remove the key
      const done = await ch.doneFor(held.key);
      assert.equal(done.outcome, 'deleted', 'the delete landed before the client closed');
      assert.equal(await client.get(held.key), undefined);
      await client.leaseRevoke(h.s.leaseId);
    } finally {
      ch.close();
      await h.close();
    }
    await assertNoKeys(client, p);
  });
});

describe('two Clients in one process have separate queue state', T, () => {
  it("a delete in flight on one client does not hold up the other's enqueue; each client has its own state", async () => {
    const p = fresh('two-clients');
    const name = `${p}lock`;
    const h = await holderSide();
    const w = await Session.create(client, { ttl: 30 });
    try {
      assert.notEqual(queueOf(h.c), queueOf(client), 'one queue state per client');
      const held = await new Mutex(h.s, name).lock();
      // The holder's delete gets no answer: it stays in flight (then retried) on the holder's client.
      h.proxy.blackhole(true);
      const r = await held.unlock();
      assert.equal(r.state, 'pending');
      const deleting = track(r.settled);
      // The other client's enqueue is not held back by it: its key is written at once, behind the
      // holder's (which only the first client's retry can delete now).
      const other = new Mutex(w, name);
      const next = track(other.lock());
      await waitFor(() => client.get(other.key), "the other client's key, written while the first client's delete is in flight");
      assert.equal(deleting.settled, false, "the holder's delete was still in flight when the other client's key was written");
      assert.equal(h.s.signal.aborted, false, "the holder's session still lives");
      assert.ok(await client.get(held.key), "the holder's key is still there");
      h.proxy.cut();
      h.proxy.blackhole(false);
      const taken = await next.promise;
      assert.ok(taken.fencingToken > held.fencingToken);
      await r.settled;
      await taken.unlock();
    } finally {
      await closeAll([w]);
      await h.close();
    }
    await assertNoKeys(client, p);
  });
});
