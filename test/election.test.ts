// Leader election against a real single-member etcd: Campaign, Proclaim, Resign, Leader, Observe and
// runAsLeader. No mocks, no sleeps: every wait is on a watch event, a promise or an abort signal.
// The only polls: "is the candidate already waiting on its predecessor" (client-internal state that
// no event announces), and one bounded poll in a test where no event can announce a missed delete.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  Client,
  Election,
  InvalidArgumentError,
  LeadershipLostError,
  NotLeaderError,
  SessionExpiredError,
  currentLeader,
  observeLeader,
  runAsLeader,
  compare,
  op,
  type LeaderEvent,
  type LeaderHandle,
  type Session,
} from '../src/index.js';
import { startEtcd, startProxy, type EtcdCluster } from '../src/testing/index.js';
import { metric } from './helpers.js';
import { Recorder, Scope, aborted, awaitKey, ms, next, storeRevision, track, waitFor, withScope } from './election-helpers.js';

let etcd: EtcdCluster;
let endpoints: string[];

before(async () => {
  etcd = await startEtcd();
  endpoints = etcd.endpoints;
});
after(async () => {
  await etcd?.stop();
});

const T = { timeout: 60_000 };

const scoped = (tag: string, fn: (s: Scope, name: string) => Promise<void>): Promise<void> => withScope(endpoints, tag, fn);

/** A candidate: its own client, session and Election. */
async function candidate(s: Scope, name: string, ttl = 10): Promise<{ client: Client; session: Session; election: Election }> {
  const client = s.client();
  const session = await s.session(client, { ttl });
  return { client, session, election: new Election(session, name) };
}

const leaderOf = (e: LeaderEvent): string => (e.type === 'leader' ? `${e.leader.key}=${e.leader.value}` : 'none');

describe('campaign', () => {
  it('resolves with a LeaderHandle: key <name>/<lease hex>, value, valueBytes, fencingToken = CreateRevision', T, () =>
    scoped('handle', async (s, name) => {
      const admin = s.client();
      const { session, election } = await candidate(s, name);
      assert.equal(election.key, `${name}/${session.leaseId.toString(16)}`);
      assert.equal(election.name, name);

      const h = await election.campaign('alpha');
      assert.equal(h.key, election.key);
      assert.equal(h.value, 'alpha');
      assert.deepEqual(h.valueBytes, Buffer.from('alpha'));
      assert.equal(h.session, session);
      const kv = await admin.get(h.key);
      assert.ok(kv, 'the leader key exists');
      assert.equal(h.fencingToken, kv.createRevision);
      assert.equal(kv.lease, session.leaseId);
      assert.equal(kv.value.toString(), 'alpha');
      h.assertLeader();

      const info = await election.leader();
      assert.deepEqual(info, { key: h.key, value: 'alpha', valueBytes: Buffer.from('alpha'), fencingToken: h.fencingToken, leaseId: session.leaseId });
      assert.deepEqual(await currentLeader(admin, name), info);

      await h.resign();
      assert.equal(await admin.get(h.key), undefined, 'resign deletes the key');
      assert.equal(await election.leader(), undefined);
      assert.throws(() => h.assertLeader(), LeadershipLostError);
    }));

  it('takes binary values', T, () =>
    scoped('binary', async (s, name) => {
      const { election } = await candidate(s, name);
      const bytes = new Uint8Array([0, 1, 2, 0xff, 0xfe]);
      const h = await election.campaign(bytes);
      assert.deepEqual(h.valueBytes, Buffer.from(bytes));
      const info = await election.leader();
      assert.deepEqual(info?.valueBytes, Buffer.from(bytes));
      await h.proclaim(Buffer.from([9, 8, 7]));
      assert.deepEqual((await election.leader())?.valueBytes, Buffer.from([9, 8, 7]));
      assert.deepEqual(h.valueBytes, Buffer.from([9, 8, 7]));
      await h.resign();
    }));

  it('a second candidate waits; resign hands over with one delete and one watch event', T, () =>
    scoped('handover', async (s, name) => {
      const admin = s.client();
      const rec = new Recorder(admin, `${name}/`);
      s.defer(() => rec.close());
      await rec.created;
      const a = await candidate(s, name);
      const b = await candidate(s, name);
      const ha = await a.election.campaign('a');

      const tb = track(b.election.campaign('b'));
      const bPut = await rec.keyCreated(b.election.key);
      // A round trip after B queued: A still leads and B has not returned.
      assert.equal((await currentLeader(admin, name))?.key, ha.key);
      assert.equal(tb.settled, false, 'the second candidate waits while the first leads');

      // Events etcd sent to watchers: during the handover, one to our recorder and one to B.
      const eventsBefore = await metric(etcd.clientUrls[0]!, 'etcd_debugging_mvcc_events_total');
      const t0 = performance.now();
      await ha.resign();
      const hb = await tb.promise;
      const handover = performance.now() - t0;
      const del = await rec.deleted(ha.key);
      const eventsSent = (await metric(etcd.clientUrls[0]!, 'etcd_debugging_mvcc_events_total')) - eventsBefore;
      assert.equal(eventsSent, 2, 'one watch event woke B (the other went to this test\'s recorder)');

      // Nothing but the resign's single delete was written between B queueing and B leading.
      assert.equal(await storeRevision(admin), del.modRevision, 'no write after the resign');
      assert.deepEqual(
        rec.after(bPut.modRevision).map((e) => `${e.type} ${e.key}`),
        [`delete ${ha.key}`],
      );
      assert.equal(hb.fencingToken, bPut.createRevision);
      assert.ok(hb.fencingToken > ha.fencingToken);
      assert.equal((await currentLeader(admin, name))?.key, hb.key);
      console.log(`graceful handover (resign to follower's campaign resolving): ${ms(handover)}`);
      await hb.resign();
    }));

  it('is FIFO among many candidates, with strictly increasing terms', T, () =>
    scoped('fifo', async (s, name) => {
      const admin = s.client();
      const rec = new Recorder(admin, `${name}/`);
      s.defer(() => rec.close());
      await rec.created;
      const first = await candidate(s, name);
      const h0 = await first.election.campaign('c0');
      const n = 6;
      const cands = await Promise.all(Array.from({ length: n }, () => candidate(s, name)));
      // All queue at once: the queue order is whatever order etcd created their keys in.
      const pending = cands.map((c, i) => ({ c, i, t: track(c.election.campaign(`c${i + 1}`)) }));
      const puts = await Promise.all(cands.map((c) => rec.keyCreated(c.election.key)));
      const order = pending
        .map((p, i) => ({ ...p, rev: puts[i]!.createRevision }))
        .sort((x, y) => (x.rev < y.rev ? -1 : 1));

      let current: LeaderHandle = h0;
      const tokens = [h0.fencingToken];
      while (order.length > 0) {
        assert.ok(order.every((o) => !o.t.settled), 'nobody leads before its predecessor resigns');
        await current.resign();
        const nextUp = order.shift()!;
        const h = await nextUp.t.promise;
        assert.equal(h.key, nextUp.c.election.key, 'candidates lead in CreateRevision order');
        assert.equal(h.fencingToken, nextUp.rev);
        for (const later of order) assert.equal(later.t.settled, false, 'later candidates still wait');
        tokens.push(h.fencingToken);
        current = h;
      }
      for (let i = 1; i < tokens.length; i++) assert.ok(tokens[i]! > tokens[i - 1]!, 'terms strictly increase');
      assert.equal(tokens.length, n + 1);
      await current.resign();
    }));

  it('campaigning again on the same session with share: true keeps its place and updates its value', T, () =>
    scoped('again', async (s, name) => {
      const admin = s.client();
      const rec = new Recorder(admin, `${name}/`);
      s.defer(() => rec.close());
      await rec.created;
      const a = await candidate(s, name);
      const b = await candidate(s, name);
      const c = await candidate(s, name);
      const ha = await a.election.campaign('a');
      const tb1 = track(b.election.campaign('b1', { share: true }));
      const bPut = await rec.keyCreated(b.election.key);
      const tc = track(c.election.campaign('c'));
      await rec.keyCreated(c.election.key);

      // B campaigns again while queued: same key, same place (CreateRevision), new value.
      const tb2 = track(b.election.campaign('b2', { share: true }));
      const upd = await rec.until((e) => e.type === 'put' && e.key === b.election.key && e.value === 'b2');
      assert.equal(upd.createRevision, bPut.createRevision, 'B keeps its place in the queue');
      assert.equal(tb1.settled || tb2.settled || tc.settled, false);

      await ha.resign();
      const hb2 = await tb2.promise;
      const hb1 = await tb1.promise;
      assert.equal(hb2.key, b.election.key);
      assert.equal(hb2.fencingToken, bPut.createRevision);
      assert.equal(hb1.fencingToken, bPut.createRevision);
      assert.equal(hb2.value, 'b2');
      assert.equal((await currentLeader(admin, name))?.value, 'b2', 'B leads with its latest value, before C');
      assert.equal(tc.settled, false);

      // The leader campaigns again: resolves at once, same term, new value.
      const hb3 = await b.election.campaign('b3', { share: true });
      assert.equal(hb3.fencingToken, bPut.createRevision);
      assert.equal((await currentLeader(admin, name))?.value, 'b3');

      await hb3.resign();
      await hb1.resign();
      await hb2.resign();
      const hc = await tc.promise;
      assert.equal((await currentLeader(admin, name))?.key, hc.key);
      await hc.resign();
    }));

  it('leader() returns the oldest candidate, or undefined; stray and nested keys are no candidates', T, () =>
    scoped('leader', async (s, name) => {
      const admin = s.client();
      assert.equal(await currentLeader(admin, name), undefined);
      // A key without a lease (etcd 6631) and a key of a nested name (etcd 6278), both older than
      // every candidate: neither leads nor blocks.
      // More strays than one page of the leader lookup (8).
      for (let i = 0; i < 10; i++) await admin.put(`${name}/000${i}`, 'stray');
      const nestedLease = await admin.leaseGrant(30);
      await admin.put(`${name}/sub/1234`, 'nested', { lease: nestedLease.id });
      s.defer(async () => {
        await admin.delete(`${name}/`, { prefix: true });
        await admin.leaseRevoke(nestedLease.id);
      });
      assert.equal(await currentLeader(admin, name), undefined);

      const a = await candidate(s, name);
      const b = await candidate(s, name);
      const ha = await a.election.campaign('va');
      const tb = track(b.election.campaign('vb'));
      const info = await b.election.leader();
      assert.deepEqual(
        { key: info?.key, value: info?.value, fencingToken: info?.fencingToken, leaseId: info?.leaseId },
        { key: ha.key, value: 'va', fencingToken: ha.fencingToken, leaseId: a.session.leaseId },
      );
      await ha.resign();
      const hb = await tb.promise;
      assert.equal((await a.election.leader())?.key, hb.key);
      await hb.resign();
      assert.equal(await a.election.leader(), undefined);
    }));
});

describe('proclaim', () => {
  it('updates the value: leader() and observe() see it, the term stays', T, () =>
    scoped('proclaim', async (s, name) => {
      const obsClient = s.client();
      const stop = new AbortController();
      s.defer(() => stop.abort());
      const events = observeLeader(obsClient, name, { signal: stop.signal });
      assert.equal((await next(events)).type, 'none');

      const { election } = await candidate(s, name);
      const h = await election.campaign('v1');
      const e1 = await next(events);
      assert.equal(leaderOf(e1), `${h.key}=v1`);

      await h.proclaim('v2');
      assert.equal(h.value, 'v2');
      const info = await election.leader();
      assert.equal(info?.value, 'v2');
      assert.equal(info?.fencingToken, h.fencingToken, 'proclaim keeps the term');
      const e2 = await next(events);
      assert.equal(leaderOf(e2), `${h.key}=v2`);
      assert.ok(e2.type === 'leader' && e2.leader.fencingToken === h.fencingToken);
      assert.ok(e2.revision > e1.revision);

      await h.proclaim('v3');
      assert.equal(leaderOf(await next(events)), `${h.key}=v3`);
      await h.resign();
      assert.equal((await next(events)).type, 'none');
      stop.abort();
      assert.equal((await events.next()).done, true);
    }));

  it('after losing leadership (key deleted by hand) throws NotLeaderError and the handle is dead', T, () =>
    scoped('proclaim-lost', async (s, name) => {
      const admin = s.client();
      const { election } = await candidate(s, name);
      const h = await election.campaign('v1');
      await admin.delete(h.key);

      await assert.rejects(h.proclaim('v2'), (err: unknown) => {
        assert.ok(err instanceof NotLeaderError, `expected NotLeaderError, got ${String(err)}`);
        assert.ok(err instanceof LeadershipLostError);
        assert.equal(err.key, h.key);
        return true;
      });
      assert.equal(await admin.get(h.key), undefined, 'proclaim must not recreate the key');
      assert.equal(h.value, 'v1', 'the failed value is not adopted');
      assert.equal(h.signal.aborted, true, 'the handle is dead');
      assert.ok(h.signal.reason instanceof LeadershipLostError);
      assert.throws(() => h.assertLeader(), LeadershipLostError);
      await assert.rejects(h.proclaim('v3'), NotLeaderError);
      await h.resign(); // harmless
    }));

  it('after the handle already saw the loss also throws NotLeaderError', T, () =>
    scoped('proclaim-lost-seen', async (s, name) => {
      const admin = s.client();
      const { election } = await candidate(s, name);
      const h = await election.campaign('v1');
      const lost = aborted(h.signal);
      await admin.delete(h.key);
      await lost;
      await assert.rejects(h.proclaim('v2'), NotLeaderError);
      await h.resign();
    }));
});

describe('resign', () => {
  it('is idempotent and never deletes a later term of the same session (etcd 22123, 22082)', T, () =>
    scoped('resign', async (s, name) => {
      const admin = s.client();
      const { election } = await candidate(s, name);
      const h1 = await election.campaign('t1');
      await h1.resign();
      await h1.resign();
      assert.equal(await admin.get(election.key), undefined);

      // Same session, same key name, a new term: the old handle's resign must not touch it.
      const h2 = await election.campaign('t2');
      assert.ok(h2.fencingToken > h1.fencingToken);
      await h1.resign();
      assert.equal((await admin.get(election.key))?.createRevision, h2.fencingToken);

      // h2 loses its key (deleted by hand, never released); a third term starts on the same key name.
      await admin.delete(h2.key);
      const h3 = await election.campaign('t3');
      await h2.resign(); // a retried or late resign of a dead term
      assert.equal((await admin.get(election.key))?.createRevision, h3.fencingToken, 'the later term survives');
      assert.equal((await currentLeader(admin, name))?.value, 't3');
      await h3.resign();
      await h3.resign();
      assert.equal(await admin.get(election.key), undefined);
    }));

  it('after someone else leads, does not delete their key', T, () =>
    scoped('resign-other', async (s, name) => {
      const admin = s.client();
      const a = await candidate(s, name);
      const b = await candidate(s, name);
      const ha = await a.election.campaign('a');
      const tb = track(b.election.campaign('b'));
      await admin.delete(ha.key); // A loses its term without knowing it
      const hb = await tb.promise;
      await ha.resign();
      assert.equal((await currentLeader(admin, name))?.key, hb.key, 'B still leads');
      hb.assertLeader();
      await hb.resign();
    }));

  it('aborts the handle signal (our key is deleted: leadership ended)', T, () =>
    scoped('resign-signal', async (s, name) => {
      const { election } = await candidate(s, name);
      const h = await election.campaign('v');
      await h.resign();
      // Read after resign (deterministic); read before, it depends on whether the watch's delete
      // event or the Txn's answer arrives first.
      assert.equal(h.signal.aborted, true, 'a task given this handle must learn that the term ended');
    }));
});

describe('observe', () => {
  it('reports the current leader first, then every proclaim, a new leader after resign, and none', T, () =>
    scoped('observe', async (s, name) => {
      const obsClient = s.client();
      const a = await candidate(s, name);
      const b = await candidate(s, name);
      const ha = await a.election.campaign('a1');
      const stop = new AbortController();
      s.defer(() => stop.abort());
      const events = a.election.observe({ signal: stop.signal });
      const first = await next(events);
      assert.equal(leaderOf(first), `${ha.key}=a1`);
      assert.ok(first.type === 'leader');
      assert.equal(first.leader.fencingToken, ha.fencingToken);
      assert.equal(first.leader.leaseId, a.session.leaseId);

      const tb = track(b.election.campaign('b1'));
      await awaitKey(obsClient, b.election.key);
      await ha.proclaim('a2');
      assert.equal(leaderOf(await next(events)), `${ha.key}=a2`, 'B queueing is not an event; the proclaim is');
      await ha.resign();
      const hb = await tb.promise;
      const eb = await next(events);
      assert.equal(leaderOf(eb), `${hb.key}=b1`);
      assert.ok(eb.type === 'leader' && eb.leader.fencingToken === hb.fencingToken);
      await hb.proclaim('b2');
      assert.equal(leaderOf(await next(events)), `${hb.key}=b2`);
      await hb.resign();
      const none = await next(events);
      assert.equal(none.type, 'none');

      // A second observer, started with no leader, reports 'none' first.
      const events2 = observeLeader(obsClient, name, { signal: stop.signal });
      assert.equal((await next(events2)).type, 'none');
      const ha2 = await a.election.campaign('a3');
      assert.equal(leaderOf(await next(events)), `${ha2.key}=a3`);
      assert.equal(leaderOf(await next(events2)), `${ha2.key}=a3`);
      await ha2.resign();
      assert.equal((await next(events)).type, 'none');
      assert.equal((await next(events2)).type, 'none');
      stop.abort();
      assert.equal((await events.next()).done, true);
      assert.equal((await events2.next()).done, true);
    }));

  it('never reports a candidate that is not the leader (etcd 18163)', T, () =>
    scoped('observe-oldest', async (s, name) => {
      const admin = s.client();
      const rec = new Recorder(admin, `${name}/`);
      s.defer(() => rec.close());
      await rec.created;
      const [a, b, c, d] = await Promise.all([1, 2, 3, 4].map(() => candidate(s, name)));
      const stop = new AbortController();
      s.defer(() => stop.abort());
      const events = observeLeader(s.client(), name, { signal: stop.signal });
      assert.equal((await next(events)).type, 'none');

      const ha = await a!.election.campaign('a');
      const tb = track(b!.election.campaign('b'));
      await rec.keyCreated(b!.election.key);
      const tc = track(c!.election.campaign('c'));
      await rec.keyCreated(c!.election.key);
      const td = track(d!.election.campaign('d'));
      await rec.keyCreated(d!.election.key);

      // The leader resigns while three candidates queue: the next leader is the oldest, B.
      await ha.resign();
      const hb = await tb.promise;
      // B and C leave in one revision: D is the leader at that revision, C never was.
      await admin.txn({ compare: [], success: [op.delete(hb.key), op.delete(c!.election.key)], failure: [] });
      await assert.rejects(tc.promise, LeadershipLostError, 'C notices its key was deleted');
      const hd = await td.promise;
      await hd.resign();

      const seen: string[] = [];
      for (;;) {
        const e = await next(events);
        seen.push(leaderOf(e));
        if (e.type === 'none') break;
      }
      assert.deepEqual(seen, [`${ha.key}=a`, `${hb.key}=b`, `${hd.key}=d`, 'none']);
      stop.abort();
    }));

  it('survives compaction: events continue after the store is compacted', T, () =>
    scoped('observe-compact', async (s, name) => {
      const admin = s.client();
      const a = await candidate(s, name);
      const b = await candidate(s, name);
      const stop = new AbortController();
      s.defer(() => stop.abort());
      const events = observeLeader(s.client(), name, { signal: stop.signal });
      assert.equal((await next(events)).type, 'none');
      const ha = await a.election.campaign('a1');
      assert.equal(leaderOf(await next(events)), `${ha.key}=a1`);
      await admin.compact(await storeRevision(admin), { physical: true });
      await ha.proclaim('a2');
      assert.equal(leaderOf(await next(events)), `${ha.key}=a2`);
      const tb = track(b.election.campaign('b1'));
      await awaitKey(admin, b.election.key);
      await ha.resign();
      const hb = await tb.promise;
      await admin.compact(await storeRevision(admin), { physical: true });
      assert.equal(leaderOf(await next(events)), `${hb.key}=b1`);
      await hb.resign();
      assert.equal((await next(events)).type, 'none');
      stop.abort();
    }));

  it('survives a dropped stream, and history compacted while it was cut off', T, async () => {
    const proxy = await startProxy(endpoints[0]!);
    try {
      await scoped('observe-proxy', async (s, name) => {
        const admin = s.client();
        const viaProxy = s.client({ endpoints: [proxy.endpoint] });
        const a = await candidate(s, name);
        const b = await candidate(s, name);
        const stop = new AbortController();
        s.defer(() => stop.abort());
        const events = observeLeader(viaProxy, name, { signal: stop.signal });
        assert.equal((await next(events)).type, 'none');
        const ha = await a.election.campaign('a1');
        assert.equal(leaderOf(await next(events)), `${ha.key}=a1`);

        // Drop the stream: the watch resumes where it left off, nothing is lost or repeated.
        proxy.cut();
        await ha.proclaim('a2');
        await ha.proclaim('a3');
        assert.equal(leaderOf(await next(events)), `${ha.key}=a2`);
        assert.equal(leaderOf(await next(events)), `${ha.key}=a3`);

        // Cut off (black hole), the leader changes and history is compacted; when the link
        // returns, the watch cannot resume (compacted) and the observer reads the state again.
        proxy.blackhole(true);
        const tb = track(b.election.campaign('b1'));
        await ha.proclaim('a4');
        await ha.resign();
        const hb = await tb.promise;
        await hb.proclaim('b2');
        await admin.compact(await storeRevision(admin), { physical: true });
        // Reset the stalled connections (dropping what etcd had sent into them), then heal.
        proxy.cut();
        proxy.blackhole(false);
        const e = await next(events);
        assert.equal(leaderOf(e), `${hb.key}=b2`, 'the first event after the gap is the leader now');
        await hb.proclaim('b3');
        assert.equal(leaderOf(await next(events)), `${hb.key}=b3`);
        await hb.resign();
        assert.equal((await next(events)).type, 'none');
        stop.abort();
        assert.equal((await events.next()).done, true);
      });
    } finally {
      await proxy.close();
    }
  });

  it(
    'does not keep reporting a dead leader when history is compacted exactly at the revision it resumes from',
    T,
    async () => {
      const proxy = await startProxy(endpoints[0]!);
      try {
        await scoped('observe-compact-edge', async (s, name) => {
          const admin = s.client();
          const viaProxy = s.client({ endpoints: [proxy.endpoint] });
          const a = await candidate(s, name);
          const b = await candidate(s, name);
          const stop = new AbortController();
          s.defer(() => stop.abort());
          const events = observeLeader(viaProxy, name, { signal: stop.signal });
          assert.equal((await next(events)).type, 'none');
          const ha = await a.election.campaign('a1');
          assert.equal(leaderOf(await next(events)), `${ha.key}=a1`);

          proxy.blackhole(true);
          await ha.resign(); // the revision the observer's watch resumes from
          await admin.compact(await storeRevision(admin), { physical: true });
          proxy.cut();
          proxy.blackhole(false);
          const hb = await b.election.campaign('b1');
          await hb.proclaim('b2');
          // A sentinel the observer sees either way: A's key is created again (A queues behind B).
          const ta = track(a.election.campaign('a2'));
          await awaitKey(admin, a.election.key);
          const seen: string[] = [];
          for (;;) {
            const e = await next(events);
            seen.push(leaderOf(e));
            if (seen.at(-1) === `${hb.key}=b2`) break;
          }
          await hb.resign();
          await (await ta.promise).resign();
          stop.abort();
          // History up to the cut was compacted away: the observer cannot replay it, only re-read.
          // It must never go on reporting the dead leader A, and must reach B's latest value.
          assert.ok(!seen.some((x) => x.startsWith(`${ha.key}=`)), `the dead leader was reported again: ${seen.join(', ')}`);
          assert.equal(seen.at(-1), `${hb.key}=b2`);
        });
      } finally {
        await proxy.close();
      }
    },
  );

  it('ends only when its signal aborts (or the consumer stops)', T, () =>
    scoped('observe-end', async (s, name) => {
      const client = s.client();
      // Already aborted: ends at once.
      const pre = observeLeader(client, name, { signal: AbortSignal.abort() });
      assert.equal((await pre.next()).done, true);

      const stop = new AbortController();
      const events = observeLeader(client, name, { signal: stop.signal });
      assert.equal((await next(events)).type, 'none');
      const { election } = await candidate(s, name);
      const h = await election.campaign('x');
      assert.equal(leaderOf(await next(events)), `${h.key}=x`);
      await h.resign();
      assert.equal((await next(events)).type, 'none');
      // No leader, nothing happening: the iteration stays open until the signal aborts.
      const pending = track(events.next());
      assert.equal((await currentLeader(client, name)), undefined);
      assert.equal(pending.settled, false);
      stop.abort();
      assert.equal((await pending.promise).done, true);

      // Breaking out of the loop releases the watch too.
      const events2 = observeLeader(client, name);
      for await (const e of events2) {
        assert.equal(e.type, 'none');
        break;
      }
      assert.equal((await events2.next()).done, true);
    }));
});

describe('losing the campaign or the term', () => {
  it('abort while campaigning rejects with the reason and deletes our key', T, () =>
    scoped('abort', async (s, name) => {
      const admin = s.client();
      const rec = new Recorder(admin, `${name}/`);
      s.defer(() => rec.close());
      await rec.created;
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
    }));

  it('abort while the enqueue Txn is in flight (applied, answer not yet back) deletes our key', T, async () => {
    const proxy = await startProxy(endpoints[0]!);
    try {
      await scoped('abort-inflight', async (s, name) => {
        const admin = s.client();
        const rec = new Recorder(admin, `${name}/`);
        s.defer(() => rec.close());
        await rec.created;
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
      const admin = s.client();
      const rec = new Recorder(admin, `${name}/`);
      s.defer(() => rec.close());
      await rec.created;
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
    }));

  it('lease revoked while campaigning rejects, and the session ends (lease-gone) at the next renewal', T, () =>
    scoped('session-revoked', async (s, name) => {
      const admin = s.client();
      const rec = new Recorder(admin, `${name}/`);
      s.defer(() => rec.close());
      await rec.created;
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
        (err: unknown) => (err instanceof SessionExpiredError && err.reason === 'lease-gone') || err instanceof LeadershipLostError,
      );
      const gone = await b.session.done;
      assert.equal(gone.reason, 'lease-gone');
      console.log(`revoked lease: campaign rejected after ${ms(tb.at! - t0)} with ${(tb.error as Error).name}; session ended after ${ms(performance.now() - t0)} (TTL 3 s)`);
      await assert.rejects(b.election.campaign('b'), SessionExpiredError);
      assert.equal((await currentLeader(admin, name))?.key, ha.key);
      await ha.resign();
    }));

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
      assert.throws(() => h.assertLeader(), (err) => err === reason);
      const t = await admin.txn({ compare: [h.ownerCompare()], success: [op.put(`${name}/data`, 'x')], failure: [] });
      assert.equal(t.succeeded, false);
      await h.resign();
    }));

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
    }));

  it(
    'LeaderHandle.signal read for the first time after the delete was compacted at exactly that revision',
    T,
    () =>
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
    }));

  it('ownerCompare() guards a Txn: it succeeds only during the term', T, () =>
    scoped('owner-compare', async (s, name) => {
      const admin = s.client();
      const a = await candidate(s, name);
      const b = await candidate(s, name);
      const ha = await a.election.campaign('a');
      const data = `${name}-data`;
      s.defer(() => admin.delete(data));
      const write = (h: LeaderHandle, v: string) =>
        a.client.txn({ compare: [h.ownerCompare()], success: [op.put(data, v)], failure: [] });
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
    }));
});

describe('runAsLeader', () => {
  it('runs the task while leading, then resigns and returns its result', T, () =>
    scoped('run', async (s, name) => {
      const admin = s.client();
      const { session } = await candidate(s, name);
      const changes: Array<[boolean, bigint]> = [];
      const result = await runAsLeader(session, name, { value: 'me', onLeaderChange: (l, h) => changes.push([l, h.fencingToken]) }, async (leader) => {
        const info = await currentLeader(admin, name);
        assert.equal(info?.key, leader.key);
        assert.equal(info?.value, 'me');
        assert.equal(info?.fencingToken, leader.fencingToken);
        leader.assertLeader();
        return 42;
      });
      assert.equal(result, 42);
      assert.equal(await currentLeader(admin, name), undefined, 'resigned after the task');
      assert.equal(changes.length, 2);
      assert.deepEqual(changes.map((c) => c[0]), [true, false]);
      assert.equal(session.signal.aborted, false, 'a Session passed in is not closed');

      // A task that throws: resigned too, the error propagates.
      const boom = new Error('boom');
      await assert.rejects(
        runAsLeader(session, name, { value: 'me' }, () => {
          throw boom;
        }),
        (err) => err === boom,
      );
      assert.equal(await currentLeader(admin, name), undefined);
    }));

  it('after a lost term waits for the task to settle, then campaigns again (higher token)', T, () =>
    scoped('run-lost', async (s, name) => {
      const admin = s.client();
      const { session } = await candidate(s, name);
      const terms: bigint[] = [];
      const changes: boolean[] = [];
      let firstSettled = false;
      // runAsLeader discards a lost term's result (and its error): record what the task saw and
      // assert after it returns.
      let firstReason: unknown;
      const leadersWhileOldTaskRan: unknown[] = [];
      let secondSawFirstSettled: boolean | undefined;
      const result = await runAsLeader(session, name, { value: 'me', onLeaderChange: (l) => changes.push(l) }, async (leader) => {
        terms.push(leader.fencingToken);
        if (terms.length === 1) {
          await admin.delete(leader.key);
          firstReason = await aborted(leader.signal);
          // Still running after the loss: nobody campaigns again yet.
          leadersWhileOldTaskRan.push(await currentLeader(admin, name));
          await new Promise((r) => setImmediate(r));
          leadersWhileOldTaskRan.push(await currentLeader(admin, name));
          firstSettled = true;
          return 'first';
        }
        secondSawFirstSettled = firstSettled;
        return 'second';
      });
      assert.ok(firstReason instanceof LeadershipLostError, `the first task was told why: ${String(firstReason)}`);
      assert.deepEqual(leadersWhileOldTaskRan, [undefined, undefined], 'no new term while the old task runs');
      assert.equal(secondSawFirstSettled, true, 'the second term starts only after the first task settled');
      assert.equal(result, 'second');
      assert.equal(terms.length, 2);
      assert.ok(terms[1]! > terms[0]!, 'the second term has a higher fencing token');
      assert.deepEqual(changes, [true, false, true, false]);
      assert.equal(await currentLeader(admin, name), undefined);
    }));

  it('once: true stops after one term', T, () =>
    scoped('run-once', async (s, name) => {
      const admin = s.client();
      const { session } = await candidate(s, name);
      let runs = 0;
      const result = await runAsLeader(session, name, { value: 'me', once: true }, async (leader) => {
        runs++;
        await admin.delete(leader.key);
        await aborted(leader.signal);
        return 'lost';
      });
      assert.equal(result, undefined, 'a lost term yields no result');
      assert.equal(runs, 1);
      assert.equal(await currentLeader(admin, name), undefined);
    }));

  it('shutdown signal: the task is aborted, then resigns, and the successor takes over at once', T, () =>
    scoped('run-shutdown', async (s, name) => {
      const admin = s.client();
      const rec = new Recorder(admin, `${name}/`);
      s.defer(() => rec.close());
      await rec.created;
      const a = await candidate(s, name);
      const b = await candidate(s, name);
      const shutdown = new AbortController();
      const reason = new Error('shutting down');
      let leaderKey = '';
      let started!: () => void;
      const running = new Promise<void>((r) => (started = r));
      const taskSaw: unknown[] = [];
      // runAsLeader discards the task's result (and error) on shutdown: record, assert after.
      let keyWhileWindingDown: { rev?: bigint; token: bigint } | undefined;
      const run = track(
        runAsLeader(a.session, name, { value: 'a', signal: shutdown.signal }, async (leader) => {
          leaderKey = leader.key;
          started();
          taskSaw.push(await aborted(leader.signal));
          // The key is still ours while the task winds down: resign comes after.
          keyWhileWindingDown = { rev: (await admin.get(leader.key))?.createRevision, token: leader.fencingToken };
          return 'unused';
        }),
      );
      await running;
      const tb = track(b.election.campaign('b'));
      await rec.keyCreated(b.election.key);
      const t0 = performance.now();
      shutdown.abort(reason);
      assert.equal(await run.promise, undefined);
      assert.deepEqual(taskSaw, [reason]);
      assert.ok(keyWhileWindingDown, 'the task wound down');
      assert.equal(keyWhileWindingDown.rev, keyWhileWindingDown.token, 'our key still existed while the task wound down: resign came after it');
      const del = await rec.deleted(leaderKey);
      assert.equal(a.session.signal.aborted, false, 'the key was deleted by resign, not by losing the lease');
      const hb = await tb.promise;
      assert.ok(hb.fencingToken > del.createRevision);
      // "At once": b leads while a's lease still lives on the server, so it was the resign (not an
      // expiry) that handed over; and nothing else happened under the name in between.
      assert.ok((await admin.leaseTimeToLive(a.session.leaseId)).ttl > 0, "a's lease still lives: the successor did not wait for it");
      const after = rec.events.slice(rec.events.findIndex((e) => e.type === 'delete' && e.key === leaderKey) + 1);
      assert.deepEqual(after.filter((e) => e.key !== b.election.key), [], 'no other event between the resign and the successor leading');
      console.log(`runAsLeader shutdown to successor leading: ${ms(tb.at! - t0)}`);
      await hb.resign();

      // Shutdown while still campaigning: returns undefined and leaves no key.
      const hb2 = await b.election.campaign('b');
      const shutdown2 = new AbortController();
      let ran = false;
      const from = rec.events.length;
      const run2 = track(runAsLeader(a.session, name, { value: 'a', signal: shutdown2.signal }, () => (ran = true)));
      await rec.until((e) => e.key === a.election.key && e.type === 'put', from);
      // Past the enqueue Txn (see the in-flight enqueue test): waiting on its predecessor's watch.
      await waitFor(() => a.client.watches.size > 0, 'A to wait on its predecessor');
      shutdown2.abort();
      assert.equal(await run2.promise, undefined);
      assert.equal(ran, false);
      assert.equal(await admin.get(a.election.key), undefined);
      await hb2.resign();
    }));

  it('with a Client: its own session, closed at the end; a fresh session after the session is lost', T, () =>
    scoped('run-client', async (s, name) => {
      const admin = s.client();
      const client = s.client();
      const leases: bigint[] = [];
      const ttls: number[] = [];
      let lossReason: unknown;
      const result = await runAsLeader(client, name, { value: 'c', ttl: 5 }, async (leader) => {
        leases.push(leader.session.leaseId);
        ttls.push(leader.session.ttl);
        if (leases.length === 1) {
          await leader.session.close();
          // The first term's result (and any error) is discarded: record, assert after.
          lossReason = await aborted(leader.signal);
          return 'first';
        }
        return 'second';
      });
      assert.equal(result, 'second');
      assert.ok(lossReason instanceof LeadershipLostError, `the first task was told it lost: ${String(lossReason)}`);
      assert.deepEqual(ttls, [5, 5]);
      assert.equal(leases.length, 2);
      assert.notEqual(leases[0], leases[1], 'a new session (lease) for the second term');
      assert.deepEqual(await admin.leaseLeases(), [], 'the session runAsLeader made is closed');
    }));

  it('with a Client: a fresh session after its lease was revoked by hand', T, () =>
    scoped('run-client-revoked', async (s, name) => {
      const admin = s.client();
      const client = s.client();
      const leases: bigint[] = [];
      const secondSessionAlive: boolean[] = [];
      const result = await runAsLeader(client, name, { value: 'c', ttl: 30 }, async (leader) => {
        leases.push(leader.session.leaseId);
        if (leases.length === 1) {
          await admin.leaseRevoke(leader.session.leaseId);
          await aborted(leader.signal);
          return 'first';
        }
        // A fresh session: a new lease that etcd knows and renews, and a handle that leads on it.
        secondSessionAlive.push(!leader.session.signal.aborted, (await admin.leaseTimeToLive(leader.session.leaseId)).ttl > 0);
        leader.assertLeader();
        return 'second';
      });
      assert.equal(result, 'second');
      assert.equal(leases.length, 2);
      assert.notEqual(leases[0], leases[1], 'the second term runs on a new lease');
      assert.deepEqual(secondSessionAlive, [true, true], 'the new session was alive, on a lease etcd had');
      assert.deepEqual(await admin.leaseLeases(), [], 'both sessions are gone afterwards');
    }));

  it('with a Session: its lease revoked by hand ends the loop with SessionExpiredError', T, () =>
    scoped('run-session-revoked', async (s, name) => {
      const admin = s.client();
      const { session } = await candidate(s, name, 30);
      let runs = 0;
      await assert.rejects(
        runAsLeader(session, name, { value: 'c' }, async (leader) => {
          runs++;
          await admin.leaseRevoke(leader.session.leaseId);
          await aborted(leader.signal);
          return 'lost';
        }),
        SessionExpiredError,
      );
      assert.equal(runs, 1);
    }));

  it('with a Client: shutdown resigns and closes the session', T, () =>
    scoped('run-client-shutdown', async (s, name) => {
      const admin = s.client();
      const client = s.client();
      const shutdown = new AbortController();
      const seen: boolean[] = [];
      const result = await runAsLeader(client, name, { value: 'c', ttl: 5, signal: shutdown.signal, onLeaderChange: (l) => seen.push(l) }, async (leader) => {
        shutdown.abort();
        await aborted(leader.signal);
        return 1;
      });
      assert.equal(result, undefined);
      assert.deepEqual(seen, [true, false]);
      assert.equal(await currentLeader(admin, name), undefined);
      assert.deepEqual(await admin.leaseLeases(), []);
    }));

  it('rejects a bad name without running the task', T, () =>
    scoped('run-badname', async (s, name) => {
      const { session } = await candidate(s, name);
      let ran = false;
      await assert.rejects(runAsLeader(session, `${name}/`, { value: 'x' }, () => (ran = true)), InvalidArgumentError);
      await assert.rejects(runAsLeader(s.client(), '', { value: 'x' }, () => (ran = true)), InvalidArgumentError);
      assert.equal(ran, false);
    }));
});

describe('names', () => {
  it('bad names are rejected before anything is sent', T, () =>
    scoped('names', async (s, name) => {
      const client = s.client();
      const { session } = await candidate(s, name);
      const bad: unknown[] = ['', 'a/', 'x/y/', 'a\0b', 'n'.repeat(5000), 42, undefined, null];
      for (const b of bad) {
        assert.throws(() => new Election(session, b as string), InvalidArgumentError, `new Election(${JSON.stringify(b)})`);
        await assert.rejects(currentLeader(client, b as string), InvalidArgumentError);
        assert.throws(() => observeLeader(client, b as string), InvalidArgumentError);
      }
      // Good names, including ones with slashes (nested names are separate elections).
      for (const good of [`${name}/nested`, `${name}-x`]) {
        const e = new Election(session, good);
        assert.equal(e.key, `${good}/${session.leaseId.toString(16)}`);
      }
    }));
});
