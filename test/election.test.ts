// Leader election against a real single-member etcd: Campaign, Proclaim, Resign, Leader, and names
// (Observe: election-observe.test.ts; losing: election-loss.test.ts; runAsLeader:
// election-run-as-leader.test.ts). No mocks, no sleeps: every wait is on a watch event, a promise or
// an abort signal. The only polls: "is the candidate already waiting on its predecessor"
// (client-internal state that no event announces).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  Election,
  InvalidArgumentError,
  LeadershipLostError,
  NotLeaderError,
  currentLeader,
  observeLeader,
  type LeaderHandle,
} from '../src/index.js';
import { metric } from './helpers.js';
import { aborted, ms, next, storeRevision, track, candidate, electionFixture, leaderOf, recorded } from './election-helpers.js';

const fixture = electionFixture();
const { scoped } = fixture;

const T = { timeout: 60_000 };

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
      assert.deepEqual(info, {
        key: h.key,
        value: 'alpha',
        valueBytes: Buffer.from('alpha'),
        fencingToken: h.fencingToken,
        leaseId: session.leaseId,
      });
      assert.deepEqual(await currentLeader(admin, name), info);

      await h.resign();
      assert.equal(await admin.get(h.key), undefined, 'resign deletes the key');
      assert.equal(await election.leader(), undefined);
      assert.throws(() => h.assertLeader(), LeadershipLostError);
    }),
  );

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
    }),
  );

  it('a second candidate waits; resign hands over with one delete and one watch event', T, () =>
    scoped('handover', async (s, name) => {
      const { admin, rec } = await recorded(s, name);
      const a = await candidate(s, name);
      const b = await candidate(s, name);
      const ha = await a.election.campaign('a');

      const tb = track(b.election.campaign('b'));
      const bPut = await rec.keyCreated(b.election.key);
      // A round trip after B queued: A still leads and B has not returned.
      assert.equal((await currentLeader(admin, name))?.key, ha.key);
      assert.equal(tb.settled, false, 'the second candidate waits while the first leads');

      // Events etcd sent to watchers: during the handover, one to our recorder and one to B.
      const eventsBefore = await metric(fixture.etcd.clientUrls[0]!, 'etcd_debugging_mvcc_events_total');
      const t0 = performance.now();
      await ha.resign();
      const hb = await tb.promise;
      const handover = performance.now() - t0;
      const del = await rec.deleted(ha.key);
      const eventsSent = (await metric(fixture.etcd.clientUrls[0]!, 'etcd_debugging_mvcc_events_total')) - eventsBefore;
      assert.equal(eventsSent, 2, "one watch event woke B (the other went to this test's recorder)");

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
    }),
  );

  it('is FIFO among many candidates, with strictly increasing terms', T, () =>
    scoped('fifo', async (s, name) => {
      const { rec } = await recorded(s, name);
      const first = await candidate(s, name);
      const h0 = await first.election.campaign('c0');
      const n = 6;
      const cands = await Promise.all(Array.from({ length: n }, () => candidate(s, name)));
      // All queue at once: the queue order is whatever order etcd created their keys in.
      const pending = cands.map((c, i) => ({ c, i, t: track(c.election.campaign(`c${i + 1}`)) }));
      const puts = await Promise.all(cands.map((c) => rec.keyCreated(c.election.key)));
      const order = pending.map((p, i) => ({ ...p, rev: puts[i]!.createRevision })).sort((x, y) => (x.rev < y.rev ? -1 : 1));

      let current: LeaderHandle = h0;
      const tokens = [h0.fencingToken];
      while (order.length > 0) {
        assert.ok(
          order.every((o) => !o.t.settled),
          'nobody leads before its predecessor resigns',
        );
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
    }),
  );

  it('campaigning again on the same session with share: true keeps its place and updates its value', T, () =>
    scoped('again', async (s, name) => {
      const { admin, rec } = await recorded(s, name);
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
    }),
  );

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
    }),
  );
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
    }),
  );

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
    }),
  );

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
    }),
  );
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
    }),
  );

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
    }),
  );

  it('aborts the handle signal (our key is deleted: leadership ended)', T, () =>
    scoped('resign-signal', async (s, name) => {
      const { election } = await candidate(s, name);
      const h = await election.campaign('v');
      await h.resign();
      // Read after resign (deterministic); read before, it depends on whether the watch's delete
      // event or the Txn's answer arrives first.
      assert.equal(h.signal.aborted, true, 'a task given this handle must learn that the term ended');
    }),
  );
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
    }),
  );
});
