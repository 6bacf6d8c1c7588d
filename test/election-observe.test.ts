// Observing an election against a real single-member etcd: the current leader first, every proclaim
// and change, never a candidate that does not lead, across compaction and dropped streams. No mocks,
// no sleeps: every wait is on a watch event, a promise or an abort signal; one bounded poll in a test
// where no event can announce a missed delete.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { type Client, LeadershipLostError, currentLeader, observeLeader, op } from '../src/index.js';
import { startProxy, type TcpProxy } from '../src/testing/index.js';
import { type Scope, awaitKey, next, storeRevision, track, candidate, electionFixture, leaderOf, recorded } from './election-helpers.js';

const fixture = electionFixture();
const { scoped } = fixture;

const T = { timeout: 60_000 };

/**
 * Candidates A and B, and an observer (through `via`, or a client of its own) that has seen no leader
 * and then A leading with "a1"; the observer stops with the scope.
 */
async function aLeadsObserved(s: Scope, name: string, via?: Client) {
  const a = await candidate(s, name);
  const b = await candidate(s, name);
  const stop = new AbortController();
  s.defer(() => stop.abort());
  const events = observeLeader(via ?? s.client(), name, { signal: stop.signal });
  assert.equal((await next(events)).type, 'none');
  const ha = await a.election.campaign('a1');
  assert.equal(leaderOf(await next(events)), `${ha.key}=a1`);
  return { a, b, stop, events, ha };
}

/** `scoped`, with a proxy to the file's etcd (closed at the end) for clients to cut off. */
async function scopedViaProxy(tag: string, fn: (s: Scope, name: string, proxy: TcpProxy) => Promise<void>): Promise<void> {
  const proxy = await startProxy(fixture.etcd.endpoints[0]!);
  try {
    await scoped(tag, (s, name) => fn(s, name, proxy));
  } finally {
    await proxy.close();
  }
}

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
    }),
  );

  it('never reports a candidate that is not the leader (etcd 18163)', T, () =>
    scoped('observe-oldest', async (s, name) => {
      const { admin, rec } = await recorded(s, name);
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
    }),
  );

  it('survives compaction: events continue after the store is compacted', T, () =>
    scoped('observe-compact', async (s, name) => {
      const admin = s.client();
      const { b, stop, events, ha } = await aLeadsObserved(s, name);
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
    }),
  );

  it('survives a dropped stream, and history compacted while it was cut off', T, () =>
    scopedViaProxy('observe-proxy', async (s, name, proxy) => {
      const admin = s.client();
      const { b, stop, events, ha } = await aLeadsObserved(s, name, s.client({ endpoints: [proxy.endpoint] }));

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
    }),
  );

  it('does not keep reporting a dead leader when history is compacted exactly at the revision it resumes from', T, () =>
    scopedViaProxy('observe-compact-edge', async (s, name, proxy) => {
      const admin = s.client();
      const { a, b, stop, events, ha } = await aLeadsObserved(s, name, s.client({ endpoints: [proxy.endpoint] }));

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
    }),
  );

  it('a read at a change whose history was compacted meanwhile reads now: nothing older is reported after it', T, () =>
    scoped('observe-compacted-read', async (s, name) => {
      const admin = s.client();
      const via = s.client();
      const { b, stop, events, ha } = await aLeadsObserved(s, name, via);
      // The observer's reads at a change's revision wait until that revision is compacted away.
      let compacted!: () => void;
      const afterCompaction = new Promise<void>((r) => (compacted = r));
      let asked!: () => void;
      const readAtChange = new Promise<void>((r) => (asked = r));
      const range = via.range.bind(via);
      via.range = async (req, options) => {
        if (req.revision !== undefined && req.revision > 0n) {
          asked();
          await afterCompaction;
        }
        return range(req, options);
      };
      const tb = track(b.election.campaign('b1'));
      await awaitKey(admin, b.election.key);
      await ha.resign(); // the observer reads who leads at this delete's revision: held
      const hb = await tb.promise;
      await hb.proclaim('b2');
      await hb.proclaim('b3');
      await readAtChange;
      await admin.compact(await storeRevision(admin), { physical: true });
      compacted();
      const seen: string[] = [];
      const revisions: bigint[] = [];
      for (;;) {
        const e = await next(events);
        seen.push(leaderOf(e));
        revisions.push(e.revision);
        if (seen.length === 1) await hb.proclaim('b4');
        if (seen.at(-1) === `${hb.key}=b4`) break;
      }
      assert.deepEqual(seen, [`${hb.key}=b3`, `${hb.key}=b4`], 'B read now, then its next value: none of its older values after');
      assert.ok(revisions[0]! < revisions[1]!, `revisions go forward: ${revisions.join(', ')}`);
      await hb.resign();
      assert.equal((await next(events)).type, 'none');
      stop.abort();
    }),
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
      assert.equal(await currentLeader(client, name), undefined);
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
    }),
  );
});
