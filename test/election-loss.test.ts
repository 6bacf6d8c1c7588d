// Losing a campaign or a term against a real single-member etcd: aborts, closed sessions, revoked
// leases, keys deleted by hand, LeaderHandle.signal and ownerCompare(). No mocks, no sleeps: every
// wait is on a watch event, a promise or an abort signal.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  ClientClosedError,
  Election,
  LeadershipLostError,
  SessionExpiredError,
  currentLeader,
  compare,
  op,
  type LeaderHandle,
} from '../src/index.js';
import { startProxy } from '../src/testing/index.js';
import { aborted, ms, storeRevision, track, waitFor, candidate, electionFixture, recorded } from './election-helpers.js';
import { within } from './helpers.js';

const fixture = electionFixture();
const { scoped } = fixture;

const T = { timeout: 60_000 };

describe('losing the campaign or the term', () => {
  it('abort while campaigning rejects with the reason and deletes our key', T, () =>
    scoped('abort', async (s, name) => {
      const { admin, rec } = await recorded(s, name);
      const a = await candidate(s, name);
      const b = await candidate(s, name);
      const ha = await a.election.campaign('a');
      const ac = new AbortController();
      const tb = track(b.election.campaign('b', { signal: ac.signal }));
      await rec.keyCreated(b.election.key);
      // Abort while waiting for our turn (the in-flight enqueue case has its own test below). B's
      // client has no other watch, so its first watch is the wait on its predecessor. Internal
      // state, polled because no event announces it.
      await waitFor(() => b.client.watches.size > 0, 'B to wait on its predecessor');
      const reason = new Error('stop campaigning');
      ac.abort(reason);
      await assert.rejects(tb.promise, (err) => err === reason);
      assert.equal(await admin.get(b.election.key), undefined, 'our key is gone when campaign rejects');
      assert.equal(b.session.signal.aborted, false, 'the session lives on');
      await assert.rejects(b.election.campaign('b', { signal: AbortSignal.abort(reason) }), (err) => err === reason);
      assert.equal(await admin.get(b.election.key), undefined);
      assert.equal((await currentLeader(admin, name))?.key, ha.key);
      await ha.resign();
    }),
  );

  it('abort while the enqueue Txn is in flight (applied, answer not yet back) deletes our key', T, async () => {
    const proxy = await startProxy(fixture.etcd.endpoints[0]!);
    try {
      await scoped('abort-inflight', async (s, name) => {
        const { admin, rec } = await recorded(s, name);
        const a = await candidate(s, name);
        const bClient = s.client({ endpoints: [proxy.endpoint] });
        const b = new Election(await s.session(bClient, { ttl: 10 }), name);
        const ha = await a.election.campaign('a');
        // Every byte through the proxy is held 300 ms: once etcd has applied B's Txn (the recorder
        // sees the put), its answer is still on the way when we abort.
        proxy.delay(300);
        const ac = new AbortController();
        const tb = track(b.campaign('b', { signal: ac.signal }));
        await rec.keyCreated(b.key);
        const reason = new Error('stop campaigning');
        ac.abort(reason);
        await assert.rejects(tb.promise, (err) => err === reason);
        proxy.delay(0);
        const left = await admin.get(b.key);
        await ha.resign();
        assert.equal(left, undefined, 'campaign rejected but left its key in the queue: it would lead with nobody acting on it');
      });
    } finally {
      await proxy.close();
    }
  });

  it('session closed while campaigning rejects with SessionExpiredError', T, () =>
    scoped('session-closed', async (s, name) => {
      const { admin, rec } = await recorded(s, name);
      const a = await candidate(s, name);
      const b = await candidate(s, name);
      const ha = await a.election.campaign('a');
      const tb = track(b.election.campaign('b'));
      await rec.keyCreated(b.election.key);
      await b.session.close();
      await assert.rejects(tb.promise, (err: unknown) => err instanceof SessionExpiredError && err.reason === 'closed');
      assert.equal(await admin.get(b.election.key), undefined);
      // On a lost session campaign fails at once.
      await assert.rejects(b.election.campaign('b'), SessionExpiredError);
      await ha.resign();
    }),
  );

  it('lease revoked while campaigning rejects, and the session ends (lease_gone) at the next renewal', T, () =>
    scoped('session-revoked', async (s, name) => {
      const { admin, rec } = await recorded(s, name);
      const a = await candidate(s, name);
      const b = await candidate(s, name, 3);
      const ha = await a.election.campaign('a');
      const tb = track(b.election.campaign('b'));
      await rec.keyCreated(b.election.key);
      await waitFor(() => b.client.watches.size > 0, 'B to wait on its predecessor');
      const t0 = performance.now();
      await admin.leaseRevoke(b.session.leaseId);
      // Whichever the candidate notices first: its key gone (LeadershipLostError, when it was between
      // the watch and its read), or the session gone at the next renewal (SessionExpiredError).
      await assert.rejects(
        tb.promise,
        (err: unknown) => (err instanceof SessionExpiredError && err.reason === 'lease_gone') || err instanceof LeadershipLostError,
      );
      const gone = await b.session.done;
      assert.equal(gone.reason, 'lease_gone');
      console.log(
        `revoked lease: campaign rejected after ${ms(tb.at! - t0)} with ${(tb.error as Error).name}; session ended after ${ms(performance.now() - t0)} (TTL 3 s)`,
      );
      await assert.rejects(b.election.campaign('b'), SessionExpiredError);
      assert.equal((await currentLeader(admin, name))?.key, ha.key);
      await ha.resign();
    }),
  );

  it('LeaderHandle.signal aborts with LeadershipLostError when the key is deleted by hand', T, () =>
    scoped('signal-deleted', async (s, name) => {
      const admin = s.client();
      const { election } = await candidate(s, name);
      const h = await election.campaign('v');
      assert.equal(h.signal.aborted, false);
      await admin.delete(h.key);
      const reason = await aborted(h.signal);
      assert.ok(reason instanceof LeadershipLostError, `got ${String(reason)}`);
      assert.equal(reason.key, h.key);
      assert.throws(
        () => h.assertLeader(),
        (err) => err === reason,
      );
      const t = await admin.txn({ compare: [h.ownerCompare()], success: [op.put(`${name}/data`, 'x')], failure: [] });
      assert.equal(t.succeeded, false);
      await h.resign();
    }),
  );

  it('LeaderHandle.signal learns of a loss that happened before it was first read, even across compaction', T, () =>
    scoped('signal-late', async (s, name) => {
      const admin = s.client();
      const { election } = await candidate(s, name);
      const h = await election.campaign('v');
      await admin.delete(h.key);
      const reason = await aborted(h.signal);
      assert.ok(reason instanceof LeadershipLostError);
      await h.resign();

      // History compacted before the signal is first read, the key still ours: no false alarm,
      // and a later delete is still seen.
      const h2 = await election.campaign('v2');
      await h2.proclaim('v3');
      await admin.compact(await storeRevision(admin), { physical: true });
      const sig2 = h2.signal;
      assert.equal((await currentLeader(admin, name))?.key, h2.key);
      assert.equal(sig2.aborted, false);
      h2.assertLeader();
      await admin.delete(h2.key);
      assert.ok((await aborted(sig2)) instanceof LeadershipLostError);
      await h2.resign();
    }),
  );

  it('LeaderHandle.signal read for the first time after the delete was compacted at exactly that revision', T, () =>
    scoped('signal-compacted', async (s, name) => {
      const admin = s.client();
      const { election } = await candidate(s, name);
      const h = await election.campaign('v');
      await admin.delete(h.key); // revision confirmedAt + 1
      await admin.compact(await storeRevision(admin), { physical: true });
      const sig = h.signal;
      // Todo test only: there is no event to wait on when the library misses the delete, so this
      // bounded poll is what turns the hang into a failure.
      await waitFor(() => sig.aborted, 'the signal to abort', { limitMs: 2000 }).catch(() => {});
      const aborted_ = sig.aborted;
      await h.resign();
      assert.equal(aborted_, true, 'a handle whose key is gone must not look like a leader');
    }),
  );

  it('LeaderHandle.signal aborts when the session is lost (closed, or its lease revoked)', T, () =>
    scoped('signal-session', async (s, name) => {
      const admin = s.client();
      const a = await candidate(s, name);
      const ha = await a.election.campaign('v');
      const sig = ha.signal;
      await a.session.close();
      const reason = await aborted(sig);
      assert.ok(reason instanceof LeadershipLostError);
      assert.ok(reason.cause instanceof SessionExpiredError);
      assert.throws(() => ha.assertLeader(), LeadershipLostError);
      assert.equal(await admin.get(ha.key), undefined);

      const b = await candidate(s, name, 3);
      const hb = await b.election.campaign('w');
      const sigB = hb.signal;
      await admin.leaseRevoke(b.session.leaseId);
      assert.ok((await aborted(sigB)) instanceof LeadershipLostError);
      assert.throws(() => hb.assertLeader(), LeadershipLostError);
      await b.session.done;
    }),
  );

  it('LeaderHandle.signal first read after its client closed, its session orphaned: aborts (watch_failed), no unhandled rejection', T, () =>
    scoped('signal-client-closed', async (s, name) => {
      const admin = s.client();
      const a = await candidate(s, name);
      const ha = await a.election.campaign('v');
      // Handed over (orphan: no longer renewed here), then the client closed: the session is not
      // told (its deadline timer alone ends it), so the holding tries to watch on a closed client.
      a.session.orphan();
      await a.client.close();
      const unhandled: unknown[] = [];
      const onUnhandled = (err: unknown): void => void unhandled.push(err);
      process.on('unhandledRejection', onUnhandled);
      try {
        const reason = await within(aborted(ha.signal), 'the signal to abort', 5_000);
        assert.ok(reason instanceof LeadershipLostError && reason.reason === 'watch_failed', String(reason));
        assert.ok(reason.cause instanceof ClientClosedError, String(reason.cause));
        assert.throws(() => ha.assertLeader(), LeadershipLostError);
        await new Promise((r) => setImmediate(r)); // an unhandled rejection is reported after the microtasks
        assert.deepEqual(unhandled.map(String), []);
      } finally {
        process.off('unhandledRejection', onUnhandled);
        await admin.leaseRevoke(a.session.leaseId); // the orphaned lease (and our key) would live out its TTL
      }
    }),
  );

  it('ownerCompare() guards a Txn: it succeeds only during the term', T, () =>
    scoped('owner-compare', async (s, name) => {
      const admin = s.client();
      const a = await candidate(s, name);
      const b = await candidate(s, name);
      const ha = await a.election.campaign('a');
      const data = `${name}-data`;
      s.defer(() => admin.delete(data));
      const write = (h: LeaderHandle, v: string) => a.client.txn({ compare: [h.ownerCompare()], success: [op.put(data, v)], failure: [] });
      assert.equal((await write(ha, 'from a')).succeeded, true);
      const tb = track(b.election.campaign('b'));
      await ha.resign();
      const hb = await tb.promise;
      assert.equal((await write(ha, 'stale a')).succeeded, false, "a former leader's write is fenced off");
      assert.equal((await write(hb, 'from b')).succeeded, true);
      assert.equal((await admin.get(data))?.value.toString(), 'from b');
      // The compare is on CreateRevision: a fencing token any reader can check.
      const t = await admin.txn({ compare: [compare.createRevision(hb.key, '=', hb.fencingToken)], success: [], failure: [] });
      assert.equal(t.succeeded, true);
      await hb.resign();
    }),
  );
});
