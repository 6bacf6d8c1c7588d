// README claims that had no test behind them, each judged on the server (a real single-member etcd)
// rather than against the session's own bookkeeping:
// - the send-time deadline: an answer that arrives late does not extend the deadline;
// - safetyMarginMs: the default (TTL/6, at most 5 s), a custom margin, and the cap;
// - "loss is final": a session lost to its deadline stays lost after the network heals.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, Session, SessionExpiredError } from '../src/index.js';
import { startProxy, type EtcdCluster } from '../src/testing/index.js';
import { aborted, etcdForFile, waitFor } from './helpers.js';

const ROOT = 'test/claims/';
let etcd: EtcdCluster;
let client: Client;
etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

/** The session's loss margin: how long before its proven deadline it declares itself lost. */
const marginOf = (s: Session): number => (s as unknown as { marginMs(): number }).marginMs();

describe('the deadline counts from when a request was sent, not from when its answer came', () => {
  it('with every answer delayed, the signal fires while the lease still exists on the server', { timeout: 60_000 }, async () => {
    // Each chunk is held 1.2 s each way: the grant reaches etcd 1.2 s after it was sent (the lease
    // expires TTL after that), and its answer arrives 2.4 s after it was sent. A deadline counted
    // from the answer would fire 1.1 s after the server's expiry (etcd revokes expired leases within
    // 0.5 s); counted from the send, it fires 1.3 s before it.
    const delayMs = 1200;
    const marginMs = 100;
    const ttl = 5;
    const proxy = await startProxy(etcd.endpoints[0]!);
    const far = new Client({ endpoints: [proxy.endpoint], dialTimeoutMs: 10_000, callTimeoutMs: 20_000 });
    try {
      await far.get('warm-up'); // the connection is up before the delay starts
      proxy.delay(delayMs);
      const s = await Session.create(far, { ttl, safetyMarginMs: marginMs });
      // No renewal gets through from now on: the grant's late answer is the last word.
      proxy.blackhole(true);
      const reason = await aborted(s.signal);
      const onServer = await client.leaseTimeToLive(s.leaseId);
      assert.ok(reason instanceof SessionExpiredError && reason.reason === 'deadline', String(reason));
      assert.ok(onServer.ttl >= 0, `the lease still existed on the server when the signal fired (ttl ${onServer.ttl})`);
      // And it does expire on the server afterwards (the session did not renew it behind our back).
      await client.leaseRevoke(s.leaseId);
    } finally {
      proxy.blackhole(false);
      proxy.delay(0);
      await far.close();
      await proxy.close();
    }
  });
});

describe('safetyMarginMs', () => {
  it('defaults to TTL/6, at most 5 s; a custom margin is kept', async () => {
    const made: Session[] = [];
    try {
      for (const [ttl, margin] of [
        [6, 1000],
        [30, 5000],
        [60, 5000], // TTL/6 would be 10 s: capped at 5 s
      ] as const) {
        const s = await Session.create(client, { ttl });
        made.push(s);
        assert.equal(marginOf(s), margin, `TTL ${ttl}`);
        // The margin is what remainingMs() leaves out of the proven TTL.
        assert.ok(s.remainingMs() <= ttl * 1000 - margin, `TTL ${ttl}: ${s.remainingMs()} ms left`);
        assert.ok(s.remainingMs() > ttl * 1000 - margin - 2000, `TTL ${ttl}: ${s.remainingMs()} ms left`);
      }
      const custom = await Session.create(client, { ttl: 30, safetyMarginMs: 12_000 });
      made.push(custom);
      assert.equal(marginOf(custom), 12_000);
      assert.ok(custom.remainingMs() <= 18_000 && custom.remainingMs() > 16_000, `${custom.remainingMs()} ms left`);
    } finally {
      await Promise.all(made.map((s) => s.close()));
    }
  });

  it('a custom margin moves the moment the signal fires: it aborts the margin before the server could expire the lease', {
    timeout: 30_000,
  }, async () => {
    const proxy = await startProxy(etcd.endpoints[0]!);
    const far = new Client({ endpoints: [proxy.endpoint] });
    try {
      const s = await Session.create(far, { ttl: 5, safetyMarginMs: 3000 });
      proxy.blackhole(true);
      const t0 = performance.now();
      await aborted(s.signal);
      const waited = performance.now() - t0;
      // Lost about TTL - margin (2 s) after the grant was sent: the lease has about 3 s left.
      const onServer = await client.leaseTimeToLive(s.leaseId);
      assert.ok(
        onServer.ttl >= 2,
        `the margin left the lease ~3 s on the server, got ${onServer.ttl} s (lost after ${Math.round(waited)} ms)`,
      );
      await client.leaseRevoke(s.leaseId);
    } finally {
      proxy.blackhole(false);
      await far.close();
      await proxy.close();
    }
  });
});

describe('loss is final', () => {
  it('a session lost to its deadline stays lost after the partition heals, and its lease is not renewed', { timeout: 30_000 }, async () => {
    const proxy = await startProxy(etcd.endpoints[0]!);
    const far = new Client({ endpoints: [proxy.endpoint] });
    try {
      // TTL 6 s: the margin is 1 s, so the heal comes a second before the server could expire the lease.
      const s = await Session.create(far, { ttl: 6 });
      proxy.blackhole(true);
      const reason = await aborted(s.signal);
      proxy.blackhole(false); // the network heals while the lease still lives on the server
      assert.ok((await client.leaseTimeToLive(s.leaseId)).ttl >= 0, 'healed before the server expired the lease');
      // A round trip on the healed client: any renewal it still had queued has gone out by now.
      await far.get('after-heal');
      assert.equal(s.signal.aborted, true);
      assert.equal(s.signal.reason, reason, 'the same loss, not a new state');
      assert.throws(
        () => s.assertAlive(),
        (e) => e === reason,
      );
      assert.equal(s.remainingMs(), 0);
      // The lease runs out on the server: nobody renews it. (Renewals the black hole held back may
      // land at the heal and extend it once; a client still renewing would keep it forever.)
      const left = (await client.leaseTimeToLive(s.leaseId)).ttl;
      await waitFor(
        async () => (await client.leaseTimeToLive(s.leaseId)).ttl === -1,
        `the lease to expire unrenewed within its ${left} s`,
        {
          limitMs: (left + 2) * 1000,
        },
      );
      await s.close(); // tries a revoke (ignores failure): nothing is left
    } finally {
      proxy.blackhole(false);
      await far.close();
      await proxy.close();
    }
  });
});
