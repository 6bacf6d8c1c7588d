// A holder's key watch, created from "now" on a follower that lags the leader, may deliver events the
// holder's own writes made before its key was created: our unlock's delete D0 of the previous key
// (unlock, then lock again: the new key's CreateRevision C1 > D0). Such an event says nothing about
// this holding and must not end it. A 3-member cluster whose follower B hears Raft through a proxy
// that the test holds; the client writes through the leader, then fails over to B.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, Mutex, Session } from '../src/index.js';
import { startProxy, type TcpProxy } from '../src/testing/index.js';
import { startPeerProxiedCluster, type PeerProxiedCluster } from './helpers/peer-proxied.js';
import { Probe } from './probe.js';
import { settle, waitFor } from './helpers.js';

let cluster: PeerProxiedCluster;

describe('a holder watching its key on a lagging follower', { timeout: 120_000 }, () => {
  before(async () => {
    cluster = await startPeerProxiedCluster();
  });
  after(async () => {
    await cluster?.stop();
  });

  it('our own earlier delete, delivered late, does not end the holding of the key created after it', async () => {
    const l = await cluster.leaderIndex();
    const b = (l + 1) % 3;
    // The client reaches the leader through a proxy (to make it fail over), and follower B directly.
    const toLeader: TcpProxy = await startProxy(cluster.endpoints[l]!);
    const client = new Client({ endpoints: [toLeader.endpoint, cluster.endpoints[b]!], dialTimeoutMs: 1000 });
    const probe = new Probe(client);
    const admin = new Client({ endpoints: [cluster.endpoints[b]!] });
    let session: Session | undefined;
    try {
      session = await Session.create(client, { ttl: 30 });
      const m = new Mutex(session, `test/holder-stale-event/${process.pid}`);
      const h0 = await m.lock();
      await waitFor(async () => (await admin.status()).header.revision >= h0.fencingToken, 'B to apply our first key');
      // B stops hearing the leader: it neither sees our unlock (D0) nor our next lock (C1).
      cluster.lag(b, true);
      await h0.unlock();
      const h1 = await m.lock();
      assert.ok(h1.fencingToken > h0.fencingToken);
      // The client moves to B; the holding starts watching its key there, from B's "now" (before D0).
      toLeader.refuse(true);
      toLeader.cut();
      const ranges = probe.ranges;
      const signal = h1.signal;
      // Its watch is confirmed (it then reads the key, a linearizable read that waits for B to catch up).
      await waitFor(() => probe.ranges > ranges, 'the holding to confirm its watch and read its key');
      // A watch of our own from the same "now", to know when B's late events have been delivered.
      const seen = admin.watch(h1.key);
      await seen.created;
      cluster.lag(b, false);
      const kinds: string[] = [];
      for await (const batch of seen) {
        for (const e of batch.events)
          kinds.push(
            `${e.type}@${e.kv.modRevision <= h0.fencingToken ? 'old' : e.kv.createRevision === h1.fencingToken ? 'new' : e.type === 'delete' ? 'D0' : '?'}`,
          );
        if (batch.events.some((e) => e.type === 'put' && e.kv.createRevision === h1.fencingToken)) break;
      }
      assert.deepEqual(kinds, ['delete@D0', 'put@new'], 'B delivered our delete, then our new key, late');
      // The holding's read of its key has answered, and what its watch queued meanwhile was taken.
      await probe.quiet('the holding to have read its key', () => true);
      await settle();
      assert.equal(signal.aborted, false, `the holding ended: ${String(signal.reason)}`);
      h1.assertHeld();
      await h1.unlock();
      seen.cancel();
    } finally {
      cluster.lag(b, false);
      await session?.close().catch(() => {});
      await Promise.all([client.close(), admin.close()]);
      await toLeader.close();
    }
  });
});
