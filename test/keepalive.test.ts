// The claim of docs/tuning.md (endpoints) about the shared keepalive stream, on real etcd behind
// proxies (two "endpoints" in front of one member, so the leases are the same wherever they are
// renewed):
// - when the stream answers nothing at all for TTL/10 (0.25–2 s) while renewals wait, it moves to
//   the next endpoint and renews every lease there: a paused or partitioned member costs one retry;
// - a busy member that answers slowly is kept.
// Judged on the server: which proxy the stream ended up on, how many renewals etcd received, and
// whether the leases still exist there after more than a TTL.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import diagnosticsChannel from 'node:diagnostics_channel';
import { Client, DIAGNOSTICS_CHANNEL, Session, type ReconnectEvent } from '../src/index.js';
import { startProxy, type EtcdCluster, type TcpProxy } from '../src/testing/index.js';
import { etcdForFile, grpcReceived, waitFor } from './helpers.js';

const ROOT = 'test/keepalive/';
let etcd: EtcdCluster;
let client: Client;
etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

/**
 * How long a session waits for its renewal's answer before asking the stream whether it is stuck.
 * Private: nothing public shows it, short of timing a failover, which a test must not do.
 */
const retryMsOf = (s: Session): number => (s as unknown as { retryMs(): number }).retryMs();

/** Renewals etcd has received on its LeaseKeepAlive streams, from any client. */
const renewalsReceived = (): Promise<number> => grpcReceived(etcd.clientUrls[0]!, 'LeaseKeepAlive');

/** Two proxies in front of the one member: endpoints `a` and `b` of the client under test. */
async function twoEndpoints(): Promise<{ a: TcpProxy; b: TcpProxy } & AsyncDisposable> {
  const [a, b] = await Promise.all([startProxy(etcd.endpoints[0]!), startProxy(etcd.endpoints[0]!)]);
  return { a: a!, b: b!, [Symbol.asyncDispose]: async () => void (await Promise.all([a!.close(), b!.close()])) };
}

describe('the shared keepalive stream', () => {
  it('waits TTL/10 for an answer before suspecting the stream, at least 250 ms and at most 2 s', async () => {
    const made: Session[] = [];
    try {
      // etcd raises a TTL of 1 to its minimum (2 s with the default election timeout): still the floor.
      for (const [ttl, retryMs] of [
        [1, 250],
        [10, 1000],
        [60, 2000],
      ] as const) {
        const s = await Session.create(client, { ttl });
        made.push(s);
        assert.equal(retryMsOf(s), retryMs, `TTL ${ttl} (granted ${s.ttl})`);
      }
    } finally {
      await Promise.all(made.map((s) => s.close()));
    }
  });

  it('a member that stops answering: after TTL/10 of silence the stream moves to the next endpoint and renews every lease there', {
    timeout: 60_000,
  }, async () => {
    await using eps = await twoEndpoints();
    const { a, b } = eps;
    await using far = new Client({ endpoints: [a.endpoint, b.endpoint], dialTimeoutMs: 1000 });
    // TTL 6 (margin 1 s): renewals every 2 s, the session lost 5 s after the last renewal was sent,
    // silence suspected after 600 ms: seconds of slack on a loaded machine. What moved the stream is
    // judged by its reconnect event, not by the clock: a stall carries no error, a transport's
    // keepalive ping or a reset would.
    const ttl = 6;
    const reconnects: ReconnectEvent[] = [];
    const onReconnect = (m: unknown): void => void reconnects.push(m as ReconnectEvent);
    diagnosticsChannel.subscribe(DIAGNOSTICS_CHANNEL.leaseReconnect, onReconnect);
    const start = await renewalsReceived();
    const sessions = [await Session.create(far, { ttl }), await Session.create(far, { ttl })];
    try {
      await waitFor(async () => (await renewalsReceived()) >= start + sessions.length, 'both sessions to renew once on the first endpoint');
      assert.equal(b.accepted, 0);
      a.blackhole(true); // a paused or partitioned member: the connection stays open, nothing answers
      const alive = (): true => {
        for (const s of sessions) if (s.signal.aborted) throw s.signal.reason;
        return true;
      };
      await waitFor(() => alive() && b.accepted > 0, 'the keepalive stream to move to the second endpoint');
      const left = reconnects.filter((e) => e.endpoint === a.endpoint);
      assert.equal(left.length, 1, 'the stream left the first endpoint once');
      assert.equal(left[0]!.error, undefined, 'it left because it was silent (a stall), not on a transport error');
      assert.equal(far.activeEndpoint, b.endpoint);
      // Nothing gets through the black hole: every renewal etcd receives from now on came through b.
      const moved = await renewalsReceived();
      // Four renewals each, 2 s apart: more than a TTL since the black hole began.
      await waitFor(
        async () => alive() && (await renewalsReceived()) >= moved + 4 * sessions.length,
        'both sessions to renew on the second endpoint',
      );
      for (const s of sessions) {
        assert.equal(s.signal.aborted, false);
        assert.ok((await client.leaseTimeToLive(s.leaseId)).ttl > 0, `lease ${s.leaseId.toString(16)} was renewed on the second endpoint`);
      }
    } finally {
      diagnosticsChannel.unsubscribe(DIAGNOSTICS_CHANNEL.leaseReconnect, onReconnect);
      await Promise.all(sessions.map((s) => s.close()));
      a.blackhole(false);
    }
  });

  it('a slow member that keeps answering other renewals is kept, though one renewal waits longer than TTL/10', {
    timeout: 90_000,
  }, async () => {
    await using eps = await twoEndpoints();
    const { a, b } = eps;
    await using far = new Client({ endpoints: [a.endpoint, b.endpoint] });
    await far.get('warm-up'); // connected to a
    // And the streams' connection (a second one on the h2 transport) too, before a slows down.
    const warm = far.watch('warm-up');
    await warm.created;
    warm.cancel();
    // Every chunk through a is held 1.2 s each way: a renewal is answered 2.4 s after it was sent,
    // longer than the session's 2 s (TTL 20 / 10), well within its 20 s. The proxy shares this
    // process's event loop with the client: the margins are wide enough that a stall of the loop
    // (hundreds of ms on a loaded machine) can neither make the busy stream look silent for 2 s
    // nor bring that answer in under 2 s.
    a.delay(1200);
    // Other leases of this client keep the stream busy: one renewal every 100 ms, answered in turn.
    // Through the client's keepalive hub (internal): no public API sends renewals at a chosen rate.
    const other = (await client.leaseGrant(60)).id;
    let answers = 0;
    far.keepAlives.register(other, { onRenewed: () => void answers++, onClosed: () => {} });
    const busy = setInterval(() => far.keepAlives.renew(other), 100);
    let s: Session | undefined;
    try {
      await waitFor(() => answers > 0, 'the first answer through the slow member');
      s = await Session.create(far, { ttl: 20 });
      // Three renewals of the session (one every TTL/3), each answered only after the session had
      // asked whether the stream was stuck: seen as the session's remaining time going up. The
      // third is answered more than a TTL after the grant, so the lease lives only if renewed.
      let renewals = 0;
      let left = s.remainingMs();
      await waitFor(
        () => {
          if (s!.signal.aborted) throw s!.signal.reason;
          const now = s!.remainingMs();
          if (now > left) renewals++;
          left = now;
          return renewals >= 3;
        },
        'three renewals of the session through the slow member',
        { intervalMs: 50, limitMs: 60_000 },
      );
      assert.equal(b.accepted, 0, 'the stream never left the slow but busy member');
      assert.equal(far.activeEndpoint, a.endpoint);
      assert.equal(s.signal.aborted, false);
      assert.ok((await client.leaseTimeToLive(s.leaseId)).ttl > 0, 'the session was renewed through the slow member');
    } finally {
      clearInterval(busy);
      far.keepAlives.unregister(other);
      await client.leaseRevoke(other);
      a.delay(0);
      await s?.close();
    }
  });
});
