// The runtime smoke suite: what an application does with the package, run unchanged on Node, Bun
// and Deno by scripts/compat/runtimes.mjs, which copies this file into a fresh project where the
// packed package is installed and sets ETCDCTL_ENDPOINTS to an etcd it started. Plain ESM without
// `await using` (Node 20 has no such syntax; runtime-using.mjs checks it where it exists).
// Each check prints `ok N - what` or `not ok N - what` and the error; the exit status is non-zero
// when one failed. It never calls process.exit on success: a handle left open (a stream, a timer)
// would keep the process alive, and the runner's time limit reports that as a failure.
import assert from 'node:assert/strict';
import diagnosticsChannel from 'node:diagnostics_channel';
import {
  Client,
  DIAGNOSTICS_CHANNEL,
  Election,
  LeadershipLostError,
  LockLostError,
  Mutex,
  op,
  Session,
  SessionExpiredError,
} from 'etcd-concurrency';
import { startProxy } from 'etcd-concurrency/testing';

const endpoints = (process.env.ETCDCTL_ENDPOINTS ?? '').split(',').filter(Boolean);
if (endpoints.length === 0) throw new Error('runtime-smoke: set ETCDCTL_ENDPOINTS to the etcd to use');
const runtime = typeof globalThis.Bun !== 'undefined' ? 'bun' : typeof globalThis.Deno !== 'undefined' ? 'deno' : 'node';
// A name of this run's own, so runs on one etcd never meet.
const base = `smoke/${runtime}/${process.pid}-${Date.now()}`;

/**
 * A hang guard per check, far above its normal second or two: a check that never ends fails here,
 * by name, and the next one still runs (the runner's own limit would only say the process hung).
 */
const CHECK_LIMIT_MS = 30_000;
let n = 0;
let failed = 0;
async function check(what, fn) {
  n++;
  let timer;
  try {
    await Promise.race([
      fn(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`did not finish within ${CHECK_LIMIT_MS / 1000} s`)), CHECK_LIMIT_MS);
      }),
    ]);
    console.log(`ok ${n} - ${what}`);
  } catch (err) {
    failed++;
    console.log(`not ok ${n} - ${what}`);
    console.log(String(err?.stack ?? err).replace(/^/gm, '  # '));
  } finally {
    clearTimeout(timer);
  }
}

/** Resolves with the first watch event under `prefix` that `match` accepts. */
async function nextEvent(watch, match) {
  for await (const batch of watch) {
    const ev = batch.events.find(match);
    if (ev) return ev;
  }
  throw new Error('the watch ended before the expected event');
}

/** Resolves with the reason `signal` aborts with. */
function aborted(signal) {
  return signal.aborted
    ? Promise.resolve(signal.reason)
    : new Promise((resolve) => signal.addEventListener('abort', () => resolve(signal.reason), { once: true }));
}

const client = new Client({ endpoints });
const other = new Client({ endpoints });
const sessions = [];
async function session(c = client) {
  const s = await Session.create(c, { ttl: 10 });
  sessions.push(s);
  return s;
}

try {
  let s1;
  let s2;
  await check(`${runtime}: a session grants a lease and keeps it alive`, async () => {
    s1 = await session();
    s2 = await session(other);
    assert.equal(typeof s1.leaseId, 'bigint');
    const ttl = await client.leaseTimeToLive(s1.leaseId);
    assert.ok(ttl.ttl > 0, `the lease has ${ttl.ttl} s left`);
  });

  let second;
  await check('mutex: the waiter holds after the holder unlocks, with a greater fencing token', async () => {
    const name = `${base}/lock`;
    const first = await new Mutex(s1, name).lock({ signal: AbortSignal.timeout(10_000) });
    assert.equal(typeof first.fencingToken, 'bigint');
    // The waiter's key shows up in etcd, then it waits on its own watch for the holder's delete.
    const watch = client.watch(`${name}/`, { prefix: true, noDelete: true });
    await watch.created;
    const waiting = new Mutex(s2, name).lock({ signal: AbortSignal.timeout(10_000) });
    await nextEvent(watch, (ev) => ev.kv.key.toString() !== first.key);
    watch.cancel();
    first.assertHeld();
    const released = await first.unlock();
    assert.equal(released.state, 'released');
    second = await waiting;
    assert.ok(second.fencingToken > first.fencingToken, `${second.fencingToken} > ${first.fencingToken}`);
    second.assertHeld();
  });

  await check("fencing: a write guarded by the holder's compare applies while it holds", async () => {
    const r = await client.txn({ compare: [second.ownerCompare()], success: [op.put(`${base}/data`, 'written')] });
    assert.equal(r.succeeded, true);
    assert.equal((await client.get(`${base}/data`))?.value?.toString(), 'written');
  });

  await check('loss: a revoked lease aborts the signal with a LockLostError, published on diagnostics_channel', async () => {
    const published = new Promise((resolve) => {
      const onLost = (message) => {
        if (message.key !== second.key) return;
        diagnosticsChannel.unsubscribe(DIAGNOSTICS_CHANNEL.ownershipLost, onLost);
        resolve(message);
      };
      diagnosticsChannel.subscribe(DIAGNOSTICS_CHANNEL.ownershipLost, onLost);
    });
    // Someone else ends the holder's lease, as an operator's `etcdctl lease revoke` would.
    await client.leaseRevoke(s2.leaseId);
    const reason = await aborted(second.signal);
    assert.ok(reason instanceof LockLostError, `aborted with ${reason}`);
    assert.notEqual(reason.reason, 'released');
    const message = await published;
    assert.equal(message.fencingToken, second.fencingToken);
    assert.throws(() => second.assertHeld(), LockLostError);
    const r = await client.txn({ compare: [second.ownerCompare()], success: [op.put(`${base}/data`, 'late')] });
    assert.equal(r.succeeded, false, 'a write guarded by a lost holder must not apply');
  });

  await check('partition: a session cut off from etcd ends itself and its lock by its own deadline', async () => {
    // A proxy of the package's testing entry, run on this runtime, between a client and etcd.
    const proxy = await startProxy(endpoints[0]);
    const cut = new Client({ endpoints: [proxy.endpoint] });
    try {
      const s = await Session.create(cut, { ttl: 2 });
      const lock = await new Mutex(s, `${base}/partitioned`).lock({ signal: AbortSignal.timeout(10_000) });
      proxy.blackhole(true);
      // Neither a revoke nor a delete: only the session's clock can notice.
      const reason = await aborted(lock.signal);
      assert.ok(reason instanceof LockLostError && reason.reason === 'lease_expired', `aborted with ${reason}`);
      const ended = await aborted(s.signal);
      assert.ok(ended instanceof SessionExpiredError && ended.reason === 'deadline', `session ended with ${ended}`);
      proxy.blackhole(false);
      await s.close();
    } finally {
      await cut.close();
      await proxy.close();
    }
  });

  await check('election: a candidate leads after the leader resigns, observed, with a greater term', async () => {
    const s3 = await session(other);
    const election = new Election(s1, `${base}/election`);
    const leader = await election.campaign('first', { signal: AbortSignal.timeout(10_000) });
    assert.equal((await election.leader())?.value, 'first');
    const stop = new AbortController();
    const events = election.observe({ signal: stop.signal });
    /** The next leader an observer reports, past any `none` (nobody leads between two terms). */
    const nextLeader = async () => {
      for (;;) {
        const { value: ev, done } = await events.next();
        assert.ok(!done, 'observe ended early');
        if (ev.type === 'leader') return ev.leader;
      }
    };
    assert.equal((await nextLeader()).value, 'first');
    await leader.proclaim('first (ready)');
    assert.equal((await nextLeader()).value, 'first (ready)');
    const next = new Election(s3, `${base}/election`).campaign('second', { signal: AbortSignal.timeout(10_000) });
    const resigned = aborted(leader.signal);
    await leader.resign();
    const reason = await resigned;
    assert.ok(reason instanceof LeadershipLostError && reason.reason === 'released', `aborted with ${reason}`);
    const successor = await next;
    assert.ok(successor.fencingToken > leader.fencingToken, `${successor.fencingToken} > ${leader.fencingToken}`);
    const observed = await nextLeader();
    assert.equal(observed.value, 'second');
    assert.equal(observed.fencingToken, successor.fencingToken);
    stop.abort();
    await successor.resign();
  });

  await check('close: the sessions revoke their leases and leave no key', async () => {
    for (const s of sessions) await s.close();
    await client.delete(`${base}/data`);
    const left = await client.getPrefix(`${base}/`);
    assert.deepEqual(
      left.kvs.map((kv) => kv.key.toString()),
      [],
    );
  });
} finally {
  for (const s of sessions) await s.close().catch(() => {});
  await client.close();
  await other.close();
}

console.log(`1..${n}`);
if (failed > 0) {
  console.log(`# ${runtime}: ${failed} of ${n} failed`);
  process.exitCode = 1;
}
