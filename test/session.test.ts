// Session against a real single-member etcd: lease grant and renewal, the conservative local
// deadline, and every way a session ends.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  Client,
  ClientClosedError,
  InvalidArgumentError,
  LeaseNotFoundError,
  MAX_TTL,
  Session,
  SessionExpiredError,
  type SessionEndReason,
} from '../src/index.js';
import { startProxy, type EtcdCluster } from '../src/testing/index.js';
import { aborted, assertNoKeys, assertNoLeases, grpcReceived, waitFor, within, etcdForFile } from './helpers.js';

const ROOT = 'test/session/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

/** Asserts that `value` is a SessionExpiredError for `session` with `reason`. */
function assertExpired(value: unknown, session: Session, reason: SessionEndReason): asserts value is SessionExpiredError {
  assert.ok(value instanceof SessionExpiredError, `expected SessionExpiredError, got ${String(value)}`);
  assert.equal(value.reason, reason);
  assert.equal(value.leaseId, session.leaseId);
  assert.match(value.message, new RegExp(session.leaseId.toString(16)));
}

/** Whether etcd still has the lease. */
async function leaseExists(id: bigint): Promise<boolean> {
  return (await client.leaseTimeToLive(id)).ttl >= 0;
}

/** Keepalive messages etcd has received so far (renewals, on every client). */
const renewals = (): Promise<number> => grpcReceived(etcd.clientUrls[0]!, 'LeaseKeepAlive');

describe('Session.create', () => {
  it('grants a lease with the default TTL of 30 s', async () => {
    const s = await Session.create(client);
    try {
      assert.equal(s.ttl, 30);
      const t = await client.leaseTimeToLive(s.leaseId);
      assert.equal(t.grantedTtl, 30);
      assert.ok(t.ttl > 0);
      assert.equal(s.signal.aborted, false);
    } finally {
      await s.close();
    }
  });

  it('the lease id is a positive bigint, and the one etcd knows', async () => {
    const s = await Session.create(client, { ttl: 10 });
    try {
      assert.equal(typeof s.leaseId, 'bigint');
      assert.ok(s.leaseId > 0n && s.leaseId < 2n ** 63n);
      assert.ok((await client.leaseLeases()).includes(s.leaseId));
    } finally {
      await s.close();
    }
  });

  for (const ttl of [0, -1, 1.5, 1e10, MAX_TTL + 1, Number.NaN, Number.POSITIVE_INFINITY]) {
    it(`rejects ttl ${ttl} with InvalidArgumentError naming the fix, granting nothing`, async () => {
      await assert.rejects(Session.create(client, { ttl }), (err: unknown) => {
        assert.ok(err instanceof InvalidArgumentError, String(err));
        assert.match(err.message, /ttl must be a whole number of seconds from 1 to 9000000000/);
        assert.match(err.message, /30 is a good default/);
        return true;
      });
      await assertNoLeases(client);
    });
  }

  it('rejects a safety margin not below the TTL', async () => {
    await assert.rejects(Session.create(client, { ttl: 2, safetyMarginMs: 2000 }), InvalidArgumentError);
    await assert.rejects(Session.create(client, { ttl: 2, safetyMarginMs: -1 }), InvalidArgumentError);
    await assertNoLeases(client);
  });

  it('an aborted signal cancels creation and leaves no lease', async () => {
    const reason = new Error('no session wanted');
    await assert.rejects(Session.create(client, { signal: AbortSignal.abort(reason) }), (e) => e === reason);
    await assertNoLeases(client);
  });

  it('aborting creation after the grant committed but before its answer arrived leaves no lease', async () => {
    const proxy = await startProxy(etcd.endpoints[0]!);
    const slow = new Client({ endpoints: proxy.endpoint });
    const before = new Set(await client.leaseLeases());
    let granted: bigint | undefined;
    try {
      await slow.get('warm-up');
      proxy.delay(1000); // each direction
      const ac = new AbortController();
      const creating = Session.create(slow, { ttl: 600, signal: ac.signal });
      creating.catch(() => {});
      granted = await waitFor(async () => (await client.leaseLeases()).find((id) => !before.has(id)), 'the grant to commit');
      const reason = new Error('stop');
      ac.abort(reason); // the answer is still in the proxy
      await assert.rejects(creating, (e) => e === reason);
      assert.equal(await leaseExists(granted), false, 'a 600 s lease was left behind');
    } finally {
      proxy.delay(0);
      await slow.close();
      await proxy.close();
      if (granted !== undefined) await client.leaseRevoke(granted);
    }
  });

  it('adopts an existing lease by id, with its granted TTL, and keeps it alive', async () => {
    const { id } = await client.leaseGrant(3);
    const s = await Session.create(client, { leaseId: id });
    try {
      assert.equal(s.leaseId, id);
      assert.equal(s.ttl, 3);
      // Four renewals at TTL/3 intervals span more than the TTL: the lease outlived its first term.
      const base = await renewals();
      await waitFor(async () => (await renewals()) >= base + 4, 'four renewals');
      assert.equal(s.signal.aborted, false);
      assert.ok((await client.leaseTimeToLive(id)).ttl > 0);
    } finally {
      await s.close();
    }
    assert.equal(await leaseExists(id), false, 'close() revokes an adopted lease too');
  });

  it('adopting a lease a session of the same client keeps alive is refused (the first would stop hearing its renewals)', async () => {
    const a = await Session.create(client, { ttl: 3 });
    try {
      // A renewal of a first: once answered, its deadline is watched only when a renewal is late.
      const base = await renewals();
      await waitFor(async () => (await renewals()) >= base + 1, 'a renewal of the first session');
      await assert.rejects(Session.create(client, { leaseId: a.leaseId }), InvalidArgumentError);
      const later = await renewals();
      await waitFor(async () => (await renewals()) >= later + 2, 'the first session still renewed');
      assert.equal(a.signal.aborted, false);
      await client.leaseRevoke(a.leaseId);
      assertExpired(await within(aborted(a.signal), 'the first session to end', 20_000), a, 'lease_gone');
      // Once a session has stopped renewing it (orphan), another session of the client may adopt the lease.
      const c = await Session.create(client, { ttl: 3 });
      c.orphan();
      const d = await Session.create(client, { leaseId: c.leaseId });
      await d.close();
      assertExpired(await aborted(c.signal), c, 'deadline');
    } finally {
      await a.close();
    }
  });

  it('adopting a lease that does not exist fails with LeaseNotFoundError', async () => {
    const { id } = await client.leaseGrant(30);
    await client.leaseRevoke(id);
    await assert.rejects(Session.create(client, { leaseId: id }), LeaseNotFoundError);
  });
});

describe('Session liveness', () => {
  it('remainingMs is positive, at most the TTL, and decreases between renewals', async () => {
    const s = await Session.create(client, { ttl: 30 });
    try {
      const r1 = s.remainingMs();
      await client.get('anything'); // time passes; no renewal is due for 10 s
      const r2 = s.remainingMs();
      assert.ok(r1 > 0 && r1 <= 30_000, `r1=${r1}`);
      assert.ok(r2 > 0 && r2 < r1, `r2=${r2} r1=${r1}`);
      s.assertAlive();
    } finally {
      await s.close();
    }
  });

  it('renewals keep the lease alive past its TTL', async () => {
    const p = fresh('renewals');
    // TTL 6 s (margin 1 s): a renewal a few hundred ms late on a loaded machine is no loss.
    const s = await Session.create(client, { ttl: 6 });
    try {
      await client.put(`${p}k`, '', { lease: s.leaseId });
      const base = await renewals();
      // Renewals go out every TTL/3: five of them take longer than the 6 s TTL.
      await waitFor(async () => (await renewals()) >= base + 5, 'five renewals');
      assert.equal(s.signal.aborted, false);
      assert.ok(s.remainingMs() > 0);
      s.assertAlive();
      assert.ok((await client.leaseTimeToLive(s.leaseId)).ttl > 0);
      assert.ok(await client.get(`${p}k`), 'the key on the lease survived');
    } finally {
      await s.close();
    }
    await assertNoKeys(client, p);
  });

  it('a lease revoked by hand ends the session with reason lease_gone', async () => {
    const s = await Session.create(client, { ttl: 3 });
    await client.leaseRevoke(s.leaseId);
    const reason = await aborted(s.signal); // the next renewal (within TTL/3) finds the lease gone
    assertExpired(reason, s, 'lease_gone');
    assert.equal(await s.done, reason);
    assert.throws(
      () => s.assertAlive(),
      (e) => e === reason,
    );
    assert.equal(s.remainingMs(), 0);
    await s.close(); // nothing left to revoke; must not throw
  });

  it('client.close() while the grant answer is on its way: Session.create rejects with ClientClosedError, no session left renewing nothing', async () => {
    const c = new Client({ endpoints: etcd.endpoints });
    const grant = c.leaseGrant.bind(c);
    let granted: bigint | undefined;
    c.leaseGrant = (async (...args: Parameters<Client['leaseGrant']>) => {
      const g = await grant(...args);
      granted = g.id;
      void c.close(); // after the answer arrived, before Session.create goes on
      return g;
    }) as Client['leaseGrant'];
    try {
      await assert.rejects(Session.create(c, { ttl: 30 }), ClientClosedError);
    } finally {
      await c.close();
      if (granted !== undefined) await client.leaseRevoke(granted);
    }
  });

  it('client.close() ends its sessions with reason client_closed, without revoking', async () => {
    const c = new Client({ endpoints: etcd.endpoints });
    const s = await Session.create(c, { ttl: 30 });
    await c.close();
    assertExpired(s.signal.reason, s, 'client_closed');
    assertExpired(await s.done, s, 'client_closed');
    assert.equal(await leaseExists(s.leaseId), true, 'the lease is left to expire');
    await s.close(); // the client is closed: close() must not try to use it
    await client.leaseRevoke(s.leaseId);
  });
});

describe('Session end', () => {
  it('close() revokes the lease, deleting its keys, and ends the signal with reason closed', async () => {
    const p = fresh('close');
    const s = await Session.create(client, { ttl: 30 });
    await client.put(`${p}a`, '', { lease: s.leaseId });
    await s.close();
    assertExpired(s.signal.reason, s, 'closed');
    await assertNoKeys(client, p);
    assert.equal(await leaseExists(s.leaseId), false);
  });

  it('close() is idempotent', async () => {
    const s = await Session.create(client, { ttl: 30 });
    await Promise.all([s.close(), s.close()]);
    await s.close();
    assertExpired(s.signal.reason, s, 'closed');
  });

  it('end listeners are told once, right after the signal aborted; a removed one is not; one that throws is reported as uncaught and the rest still run', async () => {
    const s = await Session.create(client, { ttl: 30 });
    const told: string[] = [];
    const boom = new Error('an end listener failed');
    const a = (): void => void told.push(`a ${s.signal.aborted}`);
    const b = (): void => {
      told.push('b');
      throw boom;
    };
    const c = (): void => void told.push('c');
    const removed = (): void => void told.push('removed');
    for (const l of [a, a, b, removed, c]) s.addEndListener(l);
    s.removeEndListener(removed);
    // The throw reaches the process as an uncaught exception (as one from a listener on the signal):
    // caught here instead of by the test runner.
    const runners = process.listeners('uncaughtException');
    process.removeAllListeners('uncaughtException');
    try {
      const uncaught = new Promise((resolve) => process.once('uncaughtException', resolve));
      await s.close();
      assert.deepEqual(told, ['a true', 'b', 'c']);
      assert.equal(await uncaught, boom);
    } finally {
      process.removeAllListeners('uncaughtException');
      for (const l of runners) process.on('uncaughtException', l);
    }
    s.addEndListener(c);
    assert.equal((s as unknown as { endListeners: unknown }).endListeners, undefined, 'an ended session keeps no listener');
  });

  it('await using closes the session', async () => {
    let id: bigint;
    {
      await using s = await Session.create(client, { ttl: 30 });
      id = s.leaseId;
      assert.equal(await leaseExists(id), true);
    }
    assert.equal(await leaseExists(id), false);
  });

  it('orphan() stops renewing but leaves the lease; the signal still fires at the deadline', async () => {
    const p = fresh('orphan');
    // TTL 6 s, margin 1 s: the checks below run inside that second, even on a loaded machine.
    const s = await Session.create(client, { ttl: 6 });
    try {
      await client.put(`${p}k`, '', { lease: s.leaseId });
      s.orphan();
      const reason = await aborted(s.signal);
      assertExpired(reason, s, 'deadline');
      // The local deadline comes a safety margin before the server's: the lease is still there.
      assert.equal(await leaseExists(s.leaseId), true);
      assert.ok(await client.get(`${p}k`));
      assert.throws(() => s.assertAlive(), SessionExpiredError);
    } finally {
      await client.leaseRevoke(s.leaseId);
    }
    await assertNoKeys(client, p);
  });

  it('a deadline timer that fires before the deadline (timers count whole milliseconds) watches the rest: an orphaned session still ends', async () => {
    const s = await Session.create(client, { ttl: 3 });
    // After the first renewal no deadline timer is armed (renewals watch the deadline): orphan() arms one.
    const lossAt = performance.now() + s.remainingMs();
    await waitFor(() => performance.now() + s.remainingMs() > lossAt + 500, 'the first renewal');
    const realSetTimeout = globalThis.setTimeout;
    let early = 0;
    // The timer orphan() arms for the deadline fires 50 ms before it, as a rounded clock can (by less).
    globalThis.setTimeout = ((fn: () => void, ms = 0) => realSetTimeout(fn, ms > 100 ? (early++, ms - 50) : ms)) as typeof setTimeout;
    try {
      s.orphan();
    } finally {
      globalThis.setTimeout = realSetTimeout;
    }
    try {
      assert.equal(early, 1, 'orphan() armed one deadline timer');
      // A hang guard well past the deadline, not a timing assertion.
      let guard: NodeJS.Timeout | undefined;
      const reason = await Promise.race([
        new Promise((resolve) => s.signal.addEventListener('abort', () => resolve(s.signal.reason), { once: true })),
        new Promise((resolve) => (guard = realSetTimeout(() => resolve('still alive'), s.remainingMs() + 10_000))),
      ]);
      clearTimeout(guard);
      assertExpired(reason, s, 'deadline');
    } finally {
      await client.leaseRevoke(s.leaseId);
    }
  });

  it('renewals cut off by a partition: the signal fires before the server expires the lease', async () => {
    const p = fresh('partition');
    const proxy = await startProxy(etcd.endpoints[0]!);
    const c = new Client({ endpoints: proxy.endpoint });
    const s = await Session.create(c, { ttl: 6 }); // margin 1 s for the checks below
    try {
      await c.put(`${p}k`, '', { lease: s.leaseId });
      proxy.blackhole(true);
      const reason = await aborted(s.signal);
      assertExpired(reason, s, 'deadline');
      // Checked through a direct client while the partition lasts: the server still holds both.
      assert.equal(await leaseExists(s.leaseId), true, 'the session gave up before the server did');
      assert.ok(await client.get(`${p}k`));
      assert.throws(
        () => s.assertAlive(),
        (e) => e === reason,
      );
    } finally {
      await c.close();
      await proxy.close();
      await client.leaseRevoke(s.leaseId);
    }
    await assertNoKeys(client, p);
  });

  it('close() after a deadline loss still revokes the lease, which may outlive the local deadline', async () => {
    const p = fresh('close-after-deadline');
    const proxy = await startProxy(etcd.endpoints[0]!);
    const c = new Client({ endpoints: proxy.endpoint, callTimeoutMs: 2000 });
    const s = await Session.create(c, { ttl: 6 }); // margin 1 s for the close below
    try {
      await client.put(`${p}k`, '', { lease: s.leaseId });
      proxy.blackhole(true);
      assertExpired(await aborted(s.signal), s, 'deadline');
      // The partition heals. (The renewals it held back now reach etcd and even extend the lease.)
      proxy.blackhole(false);
      await s.close();
      // The lease had at least the safety margin (1 s) left on the server when close() ran.
      assert.equal(await leaseExists(s.leaseId), false, 'close() left the lease and its keys to expire on their own');
    } finally {
      await c.close();
      await proxy.close();
      await client.leaseRevoke(s.leaseId);
    }
    await assertNoKeys(client, p);
  });

  it('a paused etcd: the signal fires before the lease could expire there', async () => {
    const p = fresh('paused');
    const c = new Client({ endpoints: etcd.endpoints });
    const s = await Session.create(c, { ttl: 3 });
    try {
      await client.put(`${p}k`, '', { lease: s.leaseId });
      etcd.pause(0);
      let reason: unknown;
      try {
        reason = await aborted(s.signal);
      } finally {
        etcd.resume(0);
      }
      assertExpired(reason, s, 'deadline');
      assert.ok(await client.get(`${p}k`), 'the key (and so the lease) outlived the local deadline');
    } finally {
      etcd.resume(0);
      await c.close();
      await client.leaseRevoke(s.leaseId);
    }
    await assertNoKeys(client, p);
  });

  it('assertAlive checks the clock itself: it throws once the deadline passed, even before any timer ran', async () => {
    const s = await Session.create(client, { ttl: 1, safetyMarginMs: 0 });
    try {
      s.orphan();
      // Block the event loop past the deadline: no timer can fire meanwhile.
      const until = performance.now() + s.remainingMs() + 5;
      while (performance.now() < until) {
        /* busy wait, on purpose */
      }
      assert.equal(s.signal.aborted, false, 'no timer ran');
      assert.throws(
        () => s.assertAlive(),
        (e: unknown) => e instanceof SessionExpiredError && e.reason === 'deadline',
      );
      assert.equal(s.signal.aborted, true);
    } finally {
      await client.leaseRevoke(s.leaseId);
    }
  });
});
