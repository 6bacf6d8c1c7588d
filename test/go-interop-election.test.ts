// Go's concurrency.Election (driven through interop/go) and ours in one election, on real etcd: each
// side sees the other's leader and proclaims, and takes over promptly when it resigns. The Go
// program is built once into node_modules/.cache (see test/go-fleet.ts); it needs Go >= 1.26.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { type Client, Election, Session, currentLeader, observeLeader, type LeaderEvent } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { EventLog, assertNoKeys, assertNoLeases, etcdForFile, settle, track } from './helpers.js';
import { type GoFleet, goStarter, closeGoFleets, type GoEvent } from './go-fleet.js';

const ROOT = 'test/go-interop-election/';
let etcd: EtcdCluster;
let client: Client;
const startGo = goStarter(() => etcd);
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)), { beforeChecks: closeGoFleets });

// Hang guards only: every wait below is on an event, a promise or a line from the Go process.
const T = { timeout: 120_000 };

const next = async <T>(it: AsyncIterator<T>): Promise<T> => {
  const r = await it.next();
  assert.equal(r.done, false, 'iterator ended');
  return r.value as T;
};
const leaderOf = (e: LeaderEvent): string => (e.type === 'leader' ? `${e.leader.key}=${e.leader.value}@${e.leader.fencingToken}` : 'none');
const goLeaderOf = (e: GoEvent): string => `${e.key}=${String(e.value)}@${e.rev}`;

/** What {@link inOneElection} hands a test. */
interface OneElection {
  name: string;
  /** The Go program; its sessions have a 60 s TTL, so only a resign (never an expiry) hands over. */
  go: GoFleet;
  /** Our session on this file's client. */
  s: Session;
  /** Aborted at the end: stops the test's observers. */
  stop: AbortController;
  /** Every event under `name`. */
  log: EventLog;
}

/** Runs `body` on one election with the Go program and our session; then checks that Go exits cleanly and nothing is left. */
async function inOneElection(t: { diagnostic(m: string): void }, scope: string, body: (x: OneElection) => Promise<void>): Promise<void> {
  const p = fresh(scope);
  const name = `${p}election`;
  const go = await startGo(t, etcd.endpoints, 60);
  const s = await Session.create(client, { ttl: 30 });
  const stop = new AbortController();
  const log = new EventLog(client, `${name}/`);
  try {
    await log.ready;
    await body({ name, go, s, stop, log });
  } finally {
    stop.abort();
    await log.close();
    await s.close();
    assert.equal(await go.close(), 0, go.stderr);
  }
  await assertNoKeys(client, p);
  await assertNoLeases(client);
}

/** Starts Go's observer of `name` (actor "watcher"), once it observes. */
async function goObserves(go: GoFleet, name: string): Promise<void> {
  go.send('watcher', 'observe', { name });
  await go.expect('watcher', 'session');
  await go.expect('watcher', 'observing');
}

describe('Go and TypeScript in one election', () => {
  it('Go leads: we observe its value and proclaims, our campaign waits, and leads promptly after Go resigns', T, (t) =>
    inOneElection(t, 'go-leads', async ({ name, go, s, stop, log }) => {
      const lease = await go.session('leader');
      const led = await go.call('leader', 'campaign', { name, value: 'go one' }, 'leading');
      assert.equal(led.key, `${name}/${lease}`);
      const goTerm = (await log.put(led.key!)).createRevision;
      assert.equal(BigInt(led.rev!), goTerm);

      const events = observeLeader(client, name, { signal: stop.signal });
      assert.equal(leaderOf(await next(events)), `${led.key}=go one@${goTerm}`, 'we see Go as leader');
      const info = await currentLeader(client, name);
      assert.equal(info?.leaseId, BigInt(`0x${lease}`));

      // A Go observer too, to check both see the same sequence.
      await goObserves(go, name);
      assert.equal(goLeaderOf(await go.expect('watcher', 'observed')), `${led.key}=go one@${goTerm}`);

      await go.call('leader', 'proclaim', { value: 'go two' }, 'proclaimed');
      assert.equal(leaderOf(await next(events)), `${led.key}=go two@${goTerm}`, 'we see what Go proclaims');
      assert.equal(goLeaderOf(await go.expect('watcher', 'observed')), `${led.key}=go two@${goTerm}`);

      const e = new Election(s, name);
      const campaign = track(e.campaign('ours'));
      const queued = await log.put(e.key);
      await settle();
      assert.equal(campaign.settled, false, 'we wait while Go leads');
      assert.equal((await currentLeader(client, name))?.key, led.key);

      const resignSent = performance.now();
      go.send('leader', 'resign');
      const h = await campaign.promise;
      assert.ok(campaign.at! > resignSent, 'we led only after Go was told to resign');
      const handover = campaign.at! - resignSent;
      await go.expect('leader', 'resigned');
      t.diagnostic(`Go Resign -> our campaign() resolved: ${handover.toFixed(1)} ms`);
      assert.equal(h.fencingToken, queued.createRevision);
      // The hand-over came from the resign (the key deleted while Go's 60 s lease still lives), not an expiry.
      await log.deleted(led.key!);
      assert.ok((await client.leaseTimeToLive(BigInt(`0x${lease}`))).ttl > 0, 'Go resigned; its lease lives on');
      assert.equal(leaderOf(await next(events)), `${e.key}=ours@${h.fencingToken}`, 'our observer sees us');
      assert.equal(goLeaderOf(await go.expect('watcher', 'observed')), `${e.key}=ours@${h.fencingToken}`, 'Go sees us');

      await h.proclaim('ours, again');
      assert.equal(leaderOf(await next(events)), `${e.key}=ours, again@${h.fencingToken}`);
      assert.equal(
        goLeaderOf(await go.expect('watcher', 'observed')),
        `${e.key}=ours, again@${h.fencingToken}`,
        'Go sees what we proclaim',
      );
      const goLeader = await go.call('leader', 'leader', { name }, 'leader');
      assert.equal(goLeaderOf(goLeader), `${e.key}=ours, again@${h.fencingToken}`, "Go's Leader() reports us");
      await h.resign();
      assert.equal((await next(events)).type, 'none');
      assert.equal((await go.call('leader', 'leader', { name }, 'no-leader')).event, 'no-leader');
      go.send('watcher', 'cancel');
      await go.expect('watcher', 'cancelled');
    }),
  );

  it('we lead: Go observes our value and proclaims, its campaign waits, and it leads promptly after we resign', T, (t) =>
    inOneElection(t, 'ts-leads', async ({ name, go, s, stop, log }) => {
      const e = new Election(s, name);
      const h = await e.campaign('ts one');

      await goObserves(go, name);
      assert.equal(goLeaderOf(await go.expect('watcher', 'observed')), `${e.key}=ts one@${h.fencingToken}`, 'Go sees us as leader');
      await h.proclaim('ts two');
      assert.equal(goLeaderOf(await go.expect('watcher', 'observed')), `${e.key}=ts two@${h.fencingToken}`, 'Go sees what we proclaim');

      const events = observeLeader(client, name, { signal: stop.signal });
      assert.equal(leaderOf(await next(events)), `${e.key}=ts two@${h.fencingToken}`);

      const lease = await go.session('candidate');
      const goKey = `${name}/${lease}`;
      const from = go.events.length;
      go.send('candidate', 'campaign', { name, value: 'go' });
      const queued = await log.put(goKey);
      assert.ok(queued.createRevision > h.fencingToken);
      assert.equal((await currentLeader(client, name))?.key, e.key);
      assert.deepEqual(
        go.events
          .slice(from)
          .filter((x) => x.id === 'candidate')
          .map((x) => x.event),
        [],
        'Go waits while we lead',
      );

      const resignAt = performance.now();
      await h.resign();
      const led = await go.expect('candidate', 'leading');
      assert.ok(led.at > resignAt, 'Go led only after we resigned');
      t.diagnostic(`our resign() -> Go Campaign returned (line received): ${(led.at - resignAt).toFixed(1)} ms`);
      assert.equal(led.key, goKey);
      assert.equal(BigInt(led.rev!), queued.createRevision);
      assert.ok((await s.client.leaseTimeToLive(s.leaseId)).ttl > 0, 'we resigned; our lease lives on');
      assert.equal(leaderOf(await next(events)), `${goKey}=go@${queued.createRevision}`, 'we see Go lead');
      assert.equal(goLeaderOf(await go.expect('watcher', 'observed')), `${goKey}=go@${queued.createRevision}`, "Go's observer sees it too");

      // And back: we campaign behind Go and lead once it resigns.
      const campaign = track(e.campaign('ts again'));
      const ours = await log.put(e.key, log.events.length);
      await settle();
      assert.equal(campaign.settled, false);
      const resignSent = performance.now();
      go.send('candidate', 'resign');
      const h2 = await campaign.promise;
      assert.ok(campaign.at! > resignSent, 'we led only after Go was told to resign');
      t.diagnostic(`Go Resign -> our campaign() resolved: ${(campaign.at! - resignSent).toFixed(1)} ms`);
      await go.expect('candidate', 'resigned');
      assert.equal(h2.fencingToken, ours.createRevision);
      assert.equal(goLeaderOf(await go.expect('watcher', 'observed')), `${e.key}=ts again@${h2.fencingToken}`);
      await h2.resign();
      go.send('watcher', 'cancel');
      await go.expect('watcher', 'cancelled');
    }),
  );
});
