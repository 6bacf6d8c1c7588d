// Interoperability with Go's concurrency.Election as shipped in Debian's etcdctl (`etcdctl elect`):
// same key layout, same meaning of keys, so either side can lead and either side waits.
//
// etcdctl 3.4 facts these tests rely on (checked against the real binary):
// - `elect NAME PROPOSAL` prints the leader key and the value (two lines) once it leads; on SIGTERM
//   or SIGINT it resigns and exits 0, but does not revoke its 60 s session lease.
// - `elect -l NAME` prints key and value of every leader and every proclaimed value; it opens a
//   session too, whose lease it never revokes either.
// Those leftover leases are revoked by the tests, by id.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Election, currentLeader, observeLeader, type Client } from '../src/index.js';
import { type Child, type Scope, awaitKey, etcdctl, next, track, electionFixture, leaderOf, recorded } from './election-helpers.js';

const fixture = electionFixture();
const { scoped } = fixture;

const T = { timeout: 60_000 };

/** `etcdctl elect NAME PROPOSAL`, killed at the end of the test. */
function ctlElect(s: Scope, name: string, proposal: string): Child {
  return s.child(etcdctl(fixture.etcd.endpoints, ['elect', name, proposal]));
}

/** The lease id of a participant key `<name>/<lease hex>`. */
function leaseOfKey(key: string): bigint {
  return BigInt(`0x${key.slice(key.lastIndexOf('/') + 1)}`);
}

/** Revokes a lease etcdctl left behind, at the end of the test; it must still exist then. */
function revokeAtEnd(s: Scope, admin: Client, lease: bigint): void {
  s.defer(async () => {
    assert.ok((await admin.leaseTimeToLive(lease)).ttl > 0, 'etcdctl leaves its session lease behind');
    await admin.leaseRevoke(lease);
  });
}

describe('etcdctl elect leads, we follow', () => {
  it('our observe() and currentLeader() see etcdctl as leader, with its value and term', T, () =>
    scoped('ctl-seen', async (s, name) => {
      const admin = s.client();
      const stop = new AbortController();
      s.defer(() => stop.abort());
      const events = observeLeader(s.client(), name, { signal: stop.signal });
      assert.equal((await next(events)).type, 'none');

      const ctl = ctlElect(s, name, 'ctl proposal');
      const key = await ctl.line(0);
      assert.equal(await ctl.line(1), 'ctl proposal');
      assert.match(key, new RegExp(`^${name}/[0-9a-f]+$`), 'etcdctl uses the same key layout: <name>/<lease hex>');
      revokeAtEnd(s, admin, leaseOfKey(key));

      const e = await next(events);
      assert.equal(leaderOf(e), `${key}=ctl proposal`);
      const kv = await admin.get(key);
      const info = await currentLeader(admin, name);
      assert.deepEqual(info, {
        key,
        value: 'ctl proposal',
        valueBytes: Buffer.from('ctl proposal'),
        fencingToken: kv!.createRevision,
        leaseId: leaseOfKey(key),
      });
      assert.ok(e.type === 'leader' && e.leader.fencingToken === kv!.createRevision && e.leader.leaseId === kv!.lease);

      const exit = await ctl.kill('SIGTERM');
      assert.equal(exit.code, 0, ctl.stderr);
      assert.equal((await next(events)).type, 'none', 'etcdctl resigned on SIGTERM');
      assert.equal(await currentLeader(admin, name), undefined);
      stop.abort();
    }),
  );

  it('our campaign waits while etcdctl leads, and leads once etcdctl exits (it resigns)', T, () =>
    scoped('ctl-exit', async (s, name) => {
      const admin = s.client();
      const ctl = ctlElect(s, name, 'ctl');
      const key = await ctl.line(0);
      revokeAtEnd(s, admin, leaseOfKey(key));
      const ctlRev = (await admin.get(key))!.createRevision;

      const session = await s.session(s.client(), { ttl: 10 });
      const election = new Election(session, name);
      const tc = track(election.campaign('ours'));
      await awaitKey(admin, election.key);
      assert.equal((await currentLeader(admin, name))?.key, key);
      assert.equal(tc.settled, false, 'we wait while etcdctl leads');

      const exit = await ctl.kill('SIGTERM');
      assert.equal(exit.code, 0, ctl.stderr);
      const h = await tc.promise;
      assert.equal(await admin.get(key), undefined);
      assert.equal((await currentLeader(admin, name))?.key, h.key);
      assert.equal(h.fencingToken, (await admin.get(h.key))!.createRevision);
      assert.ok(h.fencingToken > ctlRev, "our term is later than etcdctl's");
      await h.resign();
    }),
  );

  it('our campaign leads after etcdctl is killed (SIGKILL) and its lease is gone', T, () =>
    scoped('ctl-kill', async (s, name) => {
      const admin = s.client();
      const ctl = ctlElect(s, name, 'ctl');
      const key = await ctl.line(0);
      const ctlLease = leaseOfKey(key);

      const session = await s.session(s.client(), { ttl: 10 });
      const election = new Election(session, name);
      const tc = track(election.campaign('ours'));
      await awaitKey(admin, election.key);
      const exit = await ctl.kill('SIGKILL');
      assert.equal(exit.signal, 'SIGKILL');
      // Killed, etcdctl could not resign: its key lives as long as its 60 s lease.
      assert.equal((await currentLeader(admin, name))?.key, key);
      assert.equal(tc.settled, false);

      // Its lease ends (revoked here rather than waiting 60 s for the expiry): we lead.
      await admin.leaseRevoke(ctlLease);
      const h = await tc.promise;
      assert.equal((await currentLeader(admin, name))?.key, h.key);
      await h.resign();
    }),
  );
});

describe('we lead, etcdctl follows or listens', () => {
  it('etcdctl elect waits while we lead, and leads after our resign', T, () =>
    scoped('ours-first', async (s, name) => {
      const { admin, rec } = await recorded(s, name);
      const session = await s.session(s.client(), { ttl: 10 });
      const election = new Election(session, name);
      const h = await election.campaign('ours');

      const ctl = ctlElect(s, name, 'ctl waits');
      const queued = await rec.until((e) => e.type === 'put' && e.key !== h.key);
      revokeAtEnd(s, admin, queued.lease);
      assert.equal(leaseOfKey(queued.key), queued.lease, 'etcdctl key is <name>/<its lease in hex>');
      assert.ok(queued.createRevision > h.fencingToken);
      assert.equal((await currentLeader(admin, name))?.key, h.key);
      assert.deepEqual(ctl.lines, [], 'etcdctl prints nothing until it leads');

      await h.resign();
      assert.equal(await ctl.line(0), queued.key);
      assert.equal(await ctl.line(1), 'ctl waits');
      const info = await currentLeader(admin, name);
      assert.equal(info?.key, queued.key);
      assert.equal(info?.value, 'ctl waits');

      // And back: we queue behind etcdctl and lead when it resigns.
      const tc = track(election.campaign('ours again'));
      await awaitKey(admin, election.key);
      assert.equal(tc.settled, false);
      assert.equal((await ctl.kill('SIGTERM')).code, 0);
      const h2 = await tc.promise;
      assert.ok(h2.fencingToken > queued.createRevision);
      await h2.resign();
    }),
  );

  it('etcdctl elect -l prints our leader and every value we proclaim', T, () =>
    scoped('listen', async (s, name) => {
      const admin = s.client();
      const a = new Election(await s.session(s.client(), { ttl: 10 }), name);
      const b = new Election(await s.session(s.client(), { ttl: 10 }), name);
      const ha = await a.campaign('first value');
      const ours = new Set(await admin.leaseLeases());

      const listener = s.child(etcdctl(fixture.etcd.endpoints, ['elect', '-l', name]));
      assert.equal(await listener.line(0), ha.key);
      assert.equal(await listener.line(1), 'first value');
      // The listener opened a session of its own; find its lease to revoke it at the end.
      const foreign = (await admin.leaseLeases()).filter((l) => !ours.has(l));
      assert.equal(foreign.length, 1, 'etcdctl elect -l holds one lease');
      revokeAtEnd(s, admin, foreign[0]!);

      await ha.proclaim('second value');
      assert.equal(await listener.line(2), ha.key);
      assert.equal(await listener.line(3), 'second value');

      const tb = track(b.campaign('b value'));
      await awaitKey(admin, b.key);
      await ha.resign();
      const hb = await tb.promise;
      assert.equal(await listener.line(4), hb.key);
      assert.equal(await listener.line(5), 'b value');
      await hb.resign();

      await listener.kill('SIGTERM');
      assert.equal(listener.lines.length, 6, `nothing else was printed: ${JSON.stringify(listener.lines)}`);
    }),
  );
});
