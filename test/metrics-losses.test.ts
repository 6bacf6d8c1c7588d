// OpenTelemetry metrics and spans with the real SDK on real etcd, for losses (an operator's delete, a
// key moved to another lease, a revoked lease, a closed session, a session's deadline), an election
// with a transition and a loss, and a failover across a 3-member cluster.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { SpanStatusCode } from '@opentelemetry/api';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { Client, Election, Mutex, Session } from '../src/index.js';
import { startEtcd, startProxy, type EtcdCluster } from '../src/testing/index.js';
import { ATTR, METRIC } from '../src/metrics/names.js';
import { CollectingReader, Sdk } from './metrics-sdk.js';
import { aborted, assertNoKeys, assertNoLeases, closeAll, etcdForFile, settledOrHang, track, waitFor } from './helpers.js';

const ROOT = 'test/metrics-losses/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

const LOCK = { [ATTR.kind]: 'lock' };

describe('losses', () => {
  it("an operator deletes the holder's key: losses{key_deleted}, held back to 0, a lost event on lock.hold", async () => {
    const p = fresh('deleted');
    await using sdk = new Sdk(etcd.endpoints);
    const s = await Session.create(sdk.client);
    try {
      const h = await new Mutex(s, `${p}lock`).lock();
      const lost = aborted(h.signal); // watching the key from here on
      assert.equal(await client.delete(h.key), 1n);
      await lost;
      assert.equal(await sdk.value(METRIC.losses, { ...LOCK, [ATTR.lossReason]: 'key_deleted' }), 1);
      assert.equal(await sdk.value(METRIC.held, LOCK), 0);
      assert.equal(await sdk.value(METRIC.holdDuration, LOCK), 1);
      const [hold] = sdk.finished('lock.hold');
      assert.ok(hold);
      assert.deepEqual(
        hold.events.map((e) => [e.name, e.attributes?.[ATTR.lossReason]]),
        [['etcd_concurrency.lost', 'key_deleted']],
      );
      await h.unlock(); // already lost: nothing is deleted, nothing more recorded
      assert.equal(await sdk.value(METRIC.losses), 1);
    } finally {
      await closeAll([s]);
    }
    await assertNoKeys(client, p);
  });

  it("an operator deletes the holder's key while nobody looks at the signal: the recorded holding watches its key after a second, so held goes back to 0", async () => {
    const p = fresh('deleted-unwatched');
    await using sdk = new Sdk(etcd.endpoints);
    const s = await Session.create(sdk.client);
    try {
      const h = await new Mutex(s, `${p}lock`).lock();
      assert.equal(sdk.client.watches.size, 0, 'a short holding pays for no watch');
      await waitFor(() => sdk.client.watches.size === 1, 'the holding watches its key by itself');
      assert.equal(await client.delete(h.key), 1n);
      await sdk.until(METRIC.held, LOCK, 0);
      assert.equal(await sdk.value(METRIC.losses, { ...LOCK, [ATTR.lossReason]: 'key_deleted' }), 1);
      assert.equal(sdk.finished('lock.hold')[0]?.events[0]?.attributes?.[ATTR.lossReason], 'key_deleted');
      assert.equal(h.signal.aborted, true, 'the signal, looked at only now, says so too');
      await h.unlock();
      assert.equal(await sdk.value(METRIC.losses), 1);
    } finally {
      await closeAll([s]);
    }
    await assertNoKeys(client, p);
  });

  it('an unlock that failed is retried until the key goes: counted as retries, the holding ends released, not lost', async () => {
    const p = fresh('release-failed');
    const proxy = await startProxy(etcd.endpoints[0]!);
    await using sdk = new Sdk(etcd.endpoints, { endpoints: [proxy.endpoint], callTimeoutMs: 1000 });
    const s = await Session.create(sdk.client, { ttl: 30 });
    try {
      const h = await new Mutex(s, `${p}lock`).lock();
      proxy.blackhole(true);
      const r = await h.unlock();
      assert.equal(r.state, 'pending', 'the delete gets no answer');
      assert.equal(await sdk.value(METRIC.releasePending, LOCK), 1, 'a release being retried');
      assert.ok((await sdk.value(METRIC.releaseRetries, LOCK)) >= 1);
      assert.equal(await sdk.value(METRIC.held, LOCK), 1, 'held until the key is gone');
      proxy.cut();
      proxy.blackhole(false);
      await r.settled;
      await sdk.until(METRIC.held, LOCK, 0);
      assert.equal(await sdk.value(METRIC.releasePending, LOCK), 0);
      assert.equal(await sdk.value(METRIC.losses), 0, 'the key went after we let it go: no loss');
      await h.unlock();
      assert.equal(await sdk.value(METRIC.losses), 0);
    } finally {
      proxy.blackhole(false);
      await closeAll([s]);
      await proxy.close();
    }
    await assertNoKeys(client, p);
  });

  it("another client moves the holder's key onto its own lease: losses{moved_off_lease}", async () => {
    const p = fresh('moved');
    await using sdk = new Sdk(etcd.endpoints);
    const s = await Session.create(sdk.client);
    const other = await client.leaseGrant(60);
    try {
      const h = await new Mutex(s, `${p}lock`).lock();
      const lost = aborted(h.signal);
      await client.put(h.key, 'mine now', { lease: other.id });
      const reason = await lost;
      assert.match(String(reason), /moved off its lease/);
      assert.equal(await sdk.value(METRIC.losses, { ...LOCK, [ATTR.lossReason]: 'moved_off_lease' }), 1);
      assert.equal(await sdk.value(METRIC.held, LOCK), 0);
      assert.equal(sdk.finished('lock.hold')[0]?.attributes[ATTR.lossReason], 'moved_off_lease');
    } finally {
      await closeAll([s]);
      await client.leaseRevoke(other.id); // and the key on it
    }
    await assertNoKeys(client, p);
  });

  it('the lease is revoked: the session is lost (lease_gone) and so is the lock, with nobody watching the signal', async () => {
    const p = fresh('revoked');
    await using sdk = new Sdk(etcd.endpoints);
    // A short TTL: the session learns of the revoke from its next renewal, every TTL/3.
    const s = await Session.create(sdk.client, { ttl: 3 });
    try {
      await new Mutex(s, `${p}lock`).lock();
      await client.leaseRevoke(s.leaseId);
      await aborted(s.signal);
      assert.equal(await sdk.value(METRIC.sessionLosses, { [ATTR.sessionEndReason]: 'lease_gone' }), 1);
      assert.ok((await sdk.value(METRIC.keepaliveDuration)) >= 1, 'the renewal that told it was timed');
      // The revoke deletes the key: the holding's own watch almost always sees that (key_deleted)
      // before the next renewal tells the session (lease_expired). Either way, one loss.
      const deleted = await sdk.value(METRIC.losses, { ...LOCK, [ATTR.lossReason]: 'key_deleted' });
      const expired = await sdk.value(METRIC.losses, { ...LOCK, [ATTR.lossReason]: 'lease_expired' });
      assert.equal(deleted + expired, 1, `key_deleted ${deleted}, lease_expired ${expired}`);
      assert.equal(await sdk.value(METRIC.held, LOCK), 0);
    } finally {
      await closeAll([s]);
    }
    await assertNoKeys(client, p);
  });

  it('a session lost to its deadline (renewals stopped): sessions lost{deadline}, the lock lost{lease_expired}', async () => {
    const p = fresh('deadline');
    await using sdk = new Sdk(etcd.endpoints);
    const s = await Session.create(sdk.client, { ttl: 2 });
    try {
      await new Mutex(s, `${p}lock`).lock();
      s.orphan();
      await aborted(s.signal);
      assert.equal(await sdk.value(METRIC.sessionLosses, { [ATTR.sessionEndReason]: 'deadline' }), 1);
      assert.equal(await sdk.value(METRIC.losses, { [ATTR.lossReason]: 'lease_expired' }), 1);
    } finally {
      await client.leaseRevoke(s.leaseId);
    }
    await assertNoKeys(client, p);
  });

  it('a session closed while holding: losses{session_closed}', async () => {
    const p = fresh('closed');
    await using sdk = new Sdk(etcd.endpoints);
    const s = await Session.create(sdk.client);
    try {
      await new Mutex(s, `${p}lock`).lock();
      await s.close();
      assert.equal(await sdk.value(METRIC.losses, { ...LOCK, [ATTR.lossReason]: 'session_closed' }), 1);
      assert.equal(await sdk.value(METRIC.sessionLosses), 0);
    } finally {
      await closeAll([s]);
    }
    await assertNoKeys(client, p);
  });
});

describe('elections', () => {
  it('a campaign, a second candidate, a resign: leader gauge and transitions per name, election.campaign and election.lead spans', async () => {
    const p = fresh('election');
    const name = `${p}scheduler`;
    await using sdk = new Sdk(etcd.endpoints, { nameAttribute: true });
    const [a, b] = await Promise.all([Session.create(sdk.client), Session.create(sdk.client)]);
    try {
      const named = { [ATTR.name]: name };
      const first = await new Election(a!, name).campaign('a');
      assert.equal(await sdk.value(METRIC.electionLeader, named), 1);
      assert.equal(await sdk.value(METRIC.electionTransitions, { ...named, [ATTR.leading]: true }), 1);
      const second = track(new Election(b!, name).campaign('b'));
      await sdk.until(METRIC.waiting, { [ATTR.kind]: 'campaign' }, 1);
      await first.resign();
      const leader = await settledOrHang(second, 'the second candidate leads');
      assert.equal(await sdk.value(METRIC.electionLeader, named), 1, 'still one leader in this process: the other session');
      assert.equal(await sdk.value(METRIC.electionTransitions, { ...named, [ATTR.leading]: true }), 2);
      assert.equal(await sdk.value(METRIC.electionTransitions, { ...named, [ATTR.leading]: false }), 1);
      assert.equal(await sdk.value(METRIC.acquireDuration, { [ATTR.kind]: 'campaign', [ATTR.result]: 'acquired' }), 2);
      await leader.resign();
      assert.equal(await sdk.value(METRIC.electionLeader, named), 0, 'leads nothing now: 0, as client-go reports it');
      const campaigns = sdk.finished('election.campaign');
      assert.equal(campaigns.length, 2);
      assert.ok(campaigns.every((c) => c.attributes[ATTR.name] === name));
      assert.deepEqual(
        campaigns.map((c) => c.attributes[ATTR.fencingToken]).sort(),
        [Number(first.fencingToken), Number(leader.fencingToken)].sort(),
      );
      // The second candidate queued behind the first.
      assert.deepEqual(
        campaigns.map((c) => [c.attributes[ATTR.fencingToken], c.attributes[ATTR.queueAhead]]).sort((x, y) => Number(x[0]) - Number(y[0])),
        [
          [Number(first.fencingToken), 0],
          [Number(leader.fencingToken), 1],
        ],
      );
      assert.equal(sdk.finished('election.lead').length, 2);
    } finally {
      await closeAll([a, b]);
    }
    await assertNoKeys(client, p);
  });

  it("an operator deletes the leader's key: leader 0, a transition to not leading, a lost event on election.lead", async () => {
    const p = fresh('deposed');
    const name = `${p}scheduler`;
    await using sdk = new Sdk(etcd.endpoints, { nameAttribute: true });
    const s = await Session.create(sdk.client);
    try {
      const named = { [ATTR.name]: name };
      const leader = await new Election(s, name).campaign('a');
      const lost = aborted(leader.signal);
      assert.equal(await client.delete(leader.key), 1n);
      await lost;
      assert.equal(await sdk.value(METRIC.electionLeader, named), 0);
      assert.equal(await sdk.value(METRIC.electionTransitions, { ...named, [ATTR.leading]: false }), 1);
      assert.equal(await sdk.value(METRIC.losses, { [ATTR.kind]: 'campaign', [ATTR.lossReason]: 'key_deleted' }), 1);
      const [lead] = sdk.finished('election.lead');
      assert.ok(lead, 'election.lead ended at the loss');
      assert.deepEqual(
        lead.events.map((e) => [e.name, e.attributes?.[ATTR.lossReason]]),
        [['etcd_concurrency.lost', 'key_deleted']],
      );
      assert.equal(lead.status.code, SpanStatusCode.ERROR);
      await leader.resign(); // already lost: nothing more is recorded
      assert.equal(await sdk.value(METRIC.electionTransitions, { ...named, [ATTR.leading]: false }), 1);
    } finally {
      await closeAll([s]);
    }
    await assertNoKeys(client, p);
  });

  it('without names the leader gauge is one series: how many elections this process leads', async () => {
    const p = fresh('aggregate');
    await using sdk = new Sdk(etcd.endpoints);
    const s = await Session.create(sdk.client);
    try {
      const x = await new Election(s, `${p}x`).campaign('v');
      const y = await new Election(s, `${p}y`).campaign('v');
      const points = await sdk.points(METRIC.electionLeader);
      assert.equal(points.length, 1);
      assert.deepEqual(points[0]!.attributes, {});
      assert.equal(points[0]!.value, 2);
      await Promise.all([x.resign(), y.resign()]);
    } finally {
      await closeAll([s]);
    }
  });
});

describe('failover across a 3-member cluster', () => {
  it('killing the member in use: the next call fails over (counted), the watch stream resumes (counted), the lock stays held', {
    timeout: 120_000,
  }, async () => {
    const cluster = await startEtcd({ members: 3 });
    const reader = new CollectingReader();
    const meterProvider = new MeterProvider({ readers: [reader] });
    const c = new Client({ endpoints: cluster.endpoints, meterProvider, dialTimeoutMs: 1000 });
    const value = async (name: string): Promise<number> => {
      const { resourceMetrics } = await reader.collect();
      const m = resourceMetrics.scopeMetrics.flatMap((x) => x.metrics).find((x) => x.descriptor.name === name);
      return (m?.dataPoints ?? []).reduce((sum, dp) => sum + (dp.value as number), 0);
    };
    let s: Session | undefined;
    try {
      s = await Session.create(c);
      const h = await new Mutex(s, 'test/metrics/failover/lock').lock();
      const signal = h.signal; // the holder watches its key: a watch on the shared stream
      // The shared stream really open on the member in use before it is killed (its 'created'
      // answer came back): without this the kill could land before the stream exists, and nothing resumes.
      const ours = c.watch(h.key);
      await ours.created;
      await waitFor(() => c.watches.size > 1, 'the holder watches its key too');
      const used = cluster.endpoints.indexOf(c.activeEndpoint);
      assert.ok(used >= 0);
      assert.equal(await value(METRIC.failovers), 0);
      await cluster.kill(used);
      await waitFor(
        async () => (await c.get('test/metrics/failover/probe'), c.activeEndpoint !== cluster.endpoints[used]),
        'a call served by another member',
      );
      assert.ok((await value(METRIC.failovers)) >= 1, 'the failover was counted');
      await waitFor(async () => (await value(METRIC.watchResumes)) >= 1, 'the watch stream resumed elsewhere');
      assert.equal(signal.aborted, false, 'the lock is still held');
      h.assertHeld();
      ours.cancel();
      await h.unlock();
      await assertNoKeys(c, 'test/metrics/failover/');
      await s.close();
      s = undefined;
      await assertNoLeases(c); // in the try: a failure here fails the test, not a swallowed catch
    } finally {
      await s?.close();
      await c.close();
      await meterProvider.shutdown();
      await cluster.stop();
    }
  });
});
