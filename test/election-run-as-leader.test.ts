// runAsLeader against a real single-member etcd: a task run while leading, terms lost and won again,
// shutdown, with a Client or a Session. No mocks, no sleeps: every wait is on a watch event, a
// promise or an abort signal.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { BasicTracerProvider } from '@opentelemetry/sdk-trace-base';
import {
  InvalidArgumentError,
  LeadershipLostError,
  SessionExpiredError,
  UnavailableError,
  currentLeader,
  runAsLeader,
} from '../src/index.js';
import { aborted, ms, track, waitFor, candidate, electionFixture, recorded } from './election-helpers.js';
import { within } from './helpers.js';

const fixture = electionFixture();
const { scoped } = fixture;

const T = { timeout: 60_000 };

describe('runAsLeader', () => {
  it('runs the task while leading, then resigns and returns its result', T, () =>
    scoped('run', async (s, name) => {
      const admin = s.client();
      const { session } = await candidate(s, name);
      const changes: Array<[boolean, bigint]> = [];
      const result = await runAsLeader(
        session,
        name,
        { value: 'me', onLeaderChange: (l, h) => changes.push([l, h.fencingToken]) },
        async (leader) => {
          const info = await currentLeader(admin, name);
          assert.equal(info?.key, leader.key);
          assert.equal(info?.value, 'me');
          assert.equal(info?.fencingToken, leader.fencingToken);
          leader.assertLeader();
          return 42;
        },
      );
      assert.equal(result, 42);
      assert.equal(await currentLeader(admin, name), undefined, 'resigned after the task');
      assert.equal(changes.length, 2);
      assert.deepEqual(
        changes.map((c) => c[0]),
        [true, false],
      );
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
    }),
  );

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
    }),
  );

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
    }),
  );

  it('once: true, a lost term whose task throws (as a task that checks its signal does) still yields undefined', T, () =>
    scoped('run-once-throws', async (s, name) => {
      const admin = s.client();
      const { session } = await candidate(s, name);
      const result = await runAsLeader(session, name, { value: 'me', once: true }, async (leader) => {
        await admin.delete(leader.key);
        await aborted(leader.signal);
        leader.signal.throwIfAborted();
        return 'unreachable';
      });
      assert.equal(result, undefined, 'a lost term yields no result, whatever the task did on its way out');
      assert.equal(await currentLeader(admin, name), undefined);
    }),
  );

  it('once: true with its Session lost during the term rejects with SessionExpiredError, as without once', T, () =>
    scoped('run-once-session-lost', async (s, name) => {
      const admin = s.client();
      const { session } = await candidate(s, name);
      const run = runAsLeader(session, name, { value: 'me', once: true }, async (leader) => {
        await admin.leaseRevoke(session.leaseId);
        await aborted(leader.signal);
        await session.done; // the session has seen its loss too
        return 'lost';
      });
      await assert.rejects(run, (e: unknown) => e instanceof SessionExpiredError && e.reason === 'lease_gone');
    }),
  );

  it('shutdown signal: the task is aborted, then resigns, and the successor takes over at once', T, () =>
    scoped('run-shutdown', async (s, name) => {
      const { admin, rec } = await recorded(s, name);
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
      // As every end of a term: a LeadershipLostError, here `released`, its cause the signal's reason.
      const saw = taskSaw[0];
      assert.ok(saw instanceof LeadershipLostError && saw.reason === 'released' && saw.cause === reason, String(saw));
      assert.ok(keyWhileWindingDown, 'the task wound down');
      assert.equal(
        keyWhileWindingDown.rev,
        keyWhileWindingDown.token,
        'our key still existed while the task wound down: resign came after it',
      );
      const del = await rec.deleted(leaderKey);
      assert.equal(a.session.signal.aborted, false, 'the key was deleted by resign, not by losing the lease');
      const hb = await tb.promise;
      assert.ok(hb.fencingToken > del.createRevision);
      // "At once": b leads while a's lease still lives on the server, so it was the resign (not an
      // expiry) that handed over; and nothing else happened under the name in between.
      assert.ok((await admin.leaseTimeToLive(a.session.leaseId)).ttl > 0, "a's lease still lives: the successor did not wait for it");
      const after = rec.events.slice(rec.events.findIndex((e) => e.type === 'delete' && e.key === leaderKey) + 1);
      assert.deepEqual(
        after.filter((e) => e.key !== b.election.key),
        [],
        'no other event between the resign and the successor leading',
      );
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
    }),
  );

  it('shutdown landing as the campaign is won, before the task starts: no task, resigned, returns', T, () =>
    scoped('run-shutdown-won', async (s, name) => {
      const admin = s.client();
      const shutdown = new AbortController();
      // A hook that runs as the campaign is won, before it resolves: the start of the term's span.
      const tracerProvider = new BasicTracerProvider({
        spanProcessors: [
          {
            onStart: (span) => {
              if (span.name === 'election.lead') shutdown.abort(new Error('shutting down'));
            },
            onEnd: () => {},
            forceFlush: async () => {},
            shutdown: async () => {},
          },
        ],
      });
      const client = s.client({ tracerProvider });
      const session = await s.session(client);
      let ran = false;
      const run = runAsLeader(session, name, { value: 'x', signal: shutdown.signal }, async (leader) => {
        ran = true;
        await aborted(leader.signal);
        return 'ran';
      });
      assert.equal(await within(run, 'runAsLeader to return after its shutdown', 10_000), undefined);
      assert.equal(ran, false, 'no task starts once shut down');
      assert.equal(await currentLeader(admin, name), undefined, 'resigned');
    }),
  );

  it('with a Session lost while a campaign Txn is in flight, which then fails: ends with SessionExpiredError', T, () =>
    scoped('run-session-lost-in-flight', async (s, name) => {
      const admin = s.client();
      const client = s.client();
      const session = await s.session(client, { ttl: 3 });
      // The enqueue Txn goes unanswered until the session is lost, then fails as in an outage.
      const txn = client.txn.bind(client);
      let sent!: () => void;
      const inFlight = new Promise<void>((r) => (sent = r));
      client.txn = async () => {
        sent();
        await session.done;
        throw new UnavailableError('no endpoint answered (test)');
      };
      s.defer(() => (client.txn = txn));
      let ran = false;
      const run = runAsLeader(session, name, { value: 'x' }, () => (ran = true));
      await inFlight;
      await admin.leaseRevoke(session.leaseId); // its next renewal finds the lease gone
      await assert.rejects(run, (err) => err instanceof SessionExpiredError && err.reason === 'lease_gone');
      assert.equal(ran, false);
    }),
  );

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
    }),
  );

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
    }),
  );

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
    }),
  );

  it('with a Client: shutdown resigns and closes the session', T, () =>
    scoped('run-client-shutdown', async (s, name) => {
      const admin = s.client();
      const client = s.client();
      const shutdown = new AbortController();
      const seen: boolean[] = [];
      const result = await runAsLeader(
        client,
        name,
        { value: 'c', ttl: 5, signal: shutdown.signal, onLeaderChange: (l) => seen.push(l) },
        async (leader) => {
          shutdown.abort();
          await aborted(leader.signal);
          return 1;
        },
      );
      assert.equal(result, undefined);
      assert.deepEqual(seen, [true, false]);
      assert.equal(await currentLeader(admin, name), undefined);
      assert.deepEqual(await admin.leaseLeases(), []);
    }),
  );

  it('an onLeaderChange that throws fails the call with its error, resigned: no key left leading', T, () =>
    scoped('run-callback-throws', async (s, name) => {
      const admin = s.client();
      const { session, election } = await candidate(s, name);
      const boom = new Error('boom');
      let ran = false;
      await assert.rejects(
        runAsLeader(
          session,
          name,
          {
            value: 'x',
            onLeaderChange: (leading) => {
              if (leading) throw boom;
            },
          },
          () => {
            ran = true;
          },
        ),
        (err) => err === boom,
      );
      assert.equal(ran, false, 'no task once the callback failed');
      assert.equal(await currentLeader(admin, name), undefined, 'resigned');
      // The process's turn on the key was given back: the same session campaigns again at once.
      const h = await within(election.campaign('y'), 'a campaign of the same session', 10_000);
      await h.resign();
      // Thrown when told the term ended: the call fails with it, resigned all the same.
      await assert.rejects(
        runAsLeader(
          session,
          name,
          {
            value: 'x',
            onLeaderChange: (leading) => {
              if (!leading) throw boom;
            },
          },
          () => 1,
        ),
        (err) => err === boom,
      );
      assert.equal(await currentLeader(admin, name), undefined, 'resigned after the callback threw');
    }),
  );

  it('rejects a bad name without running the task', T, () =>
    scoped('run-badname', async (s, name) => {
      const { session } = await candidate(s, name);
      let ran = false;
      await assert.rejects(
        runAsLeader(session, `${name}/`, { value: 'x' }, () => (ran = true)),
        InvalidArgumentError,
      );
      await assert.rejects(
        runAsLeader(s.client(), '', { value: 'x' }, () => (ran = true)),
        InvalidArgumentError,
      );
      assert.equal(ran, false);
    }),
  );
});
