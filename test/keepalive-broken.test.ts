// When the shared keepalive stream breaks and cannot be reopened, every session hears it within its
// retry interval (session:late-renewal), not only at its own next renewal a TTL/3 later: the hub
// renews every lease again after a break, and those renewals are watched like any other. When a
// session declares itself lost does not change: only its deadline does that.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import diagnosticsChannel from 'node:diagnostics_channel';
import { Client, DIAGNOSTICS_CHANNEL, Session } from '../src/index.js';
import { startProxy, type EtcdCluster } from '../src/testing/index.js';
import { closeAll, etcdForFile, waitFor } from './helpers.js';

const ROOT = 'test/keepalive-broken/';
let etcd: EtcdCluster;
etcdForFile(ROOT, (e) => (etcd = e));

/** When the session will declare itself lost (monotonic ms): moves later with each renewal answered. */
const lossAt = (s: Session): number => s.remainingMs() + performance.now();

describe('a keepalive stream that breaks and cannot be reopened', () => {
  it('tells every session at once (late-renewal), long before its next renewal was due', { timeout: 90_000 }, async () => {
    await using proxy = await startProxy(etcd.endpoints[0]!);
    await using c = new Client({ endpoints: proxy.endpoint, dialTimeoutMs: 1000 });
    // TTL 600: the next renewal is 200 s away, the retry 2 s. Only the break can make these
    // sessions hear anything within the test's time.
    const sessions = await Promise.all(Array.from({ length: 5 }, () => Session.create(c, { ttl: 600 })));
    // The hub opens its stream for the first renewal due: ask for one now, through the client's
    // hub (internal; no public API renews on demand), and wait for its answer.
    const first = lossAt(sessions[0]!);
    c.keepAlives.renew(sessions[0]!.leaseId);
    await waitFor(() => lossAt(sessions[0]!) > first + 1, 'one renewal answered: the stream is open');
    const late = new Map<bigint, { waitedMs: number; remainingMs: number }>();
    const onLate = (m: unknown): void => {
      const e = m as { leaseId: bigint; waitedMs: number; remainingMs: number };
      if (!late.has(e.leaseId)) late.set(e.leaseId, e);
    };
    diagnosticsChannel.subscribe(DIAGNOSTICS_CHANNEL.lateRenewal, onLate);
    try {
      proxy.refuse(true);
      proxy.cut(); // the stream breaks; every reopen is refused
      await waitFor(() => sessions.every((s) => late.has(s.leaseId)), 'every session to hear that its lease is not being renewed');
      for (const s of sessions) {
        const e = late.get(s.leaseId)!;
        assert.equal(s.signal.aborted, false, 'heard, not lost: the deadline is far');
        assert.ok(e.waitedMs >= 250 && e.remainingMs > 0, `waited ${e.waitedMs} ms, ${e.remainingMs} ms left`);
      }
      // Back: the hub reopens the stream and renews every lease there.
      proxy.refuse(false);
      const before = new Map(sessions.map((s) => [s, lossAt(s)]));
      await waitFor(() => sessions.every((s) => lossAt(s) > before.get(s)! + 1), 'every lease renewed again once etcd is reachable');
      for (const s of sessions) assert.equal(s.signal.aborted, false);
    } finally {
      diagnosticsChannel.unsubscribe(DIAGNOSTICS_CHANNEL.lateRenewal, onLate);
      proxy.refuse(false);
      await closeAll(sessions);
    }
  });
});
