// DoubleBarrier against a real single-member etcd: Go's recipe semantics and keys, aborts that leave
// nothing, members that die. Each test uses its own names.
//
// "Still waiting" is asserted only once the waiters are blocked on their watches with every call
// before them answered, or after etcd has answered the calls that precede a wait (counted with its
// own metrics) and one more round trip on the same connection: a call that did not block would have
// settled by then.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  Client,
  DoubleBarrier,
  InvalidArgumentError,
  PermissionDeniedError,
  Session,
  SessionExpiredError,
  TooManyClientsError,
} from '../src/index.js';
import { Status, TransportError } from '../src/client/transport/transport.js';
import { startProxy, type EtcdCluster } from '../src/testing/index.js';
import { EventLog, aborted, assertNoKeys, track, waitFor, within, closeAll } from './helpers.js';
import { barrierFile } from './barrier-helpers.js';
import { closeGoFleets } from './go-fleet.js';
import { holdThenRefuse } from './helpers/late-attempt.js';

const ROOT = 'test/double-barrier/';
let etcd: EtcdCluster;
let client: Client;
const file = barrierFile(ROOT, (e, c) => ((etcd = e), (client = c)), { beforeChecks: closeGoFleets });
const { fresh, sessions, handled, watchers, blocked, answered, roundTrip, waiterPut } = file;

// Hang guards only: every wait below is on an event, a promise or a line from the Go process.
const T = { timeout: 120_000 };

/** What {@link withMembers} hands a test. */
interface Members {
  /** The barrier's name, under the test's own prefix. */
  name: string;
  /** One session per member, on this file's client. */
  ss: Session[];
  /** Every event under `name`. */
  log: EventLog;
}

/** Runs `body` with `n` sessions and a log of the barrier `name`; then closes them and checks that nothing is left. */
async function withMembers(tag: string, n: number, body: (m: Members) => Promise<void>): Promise<void> {
  const name = `${fresh(tag)}db`;
  const ss = await sessions(n);
  const log = new EventLog(client, `${name}/`);
  await log.ready;
  try {
    await body({ name, ss, log });
  } finally {
    await log.close();
    await closeAll(ss);
  }
  await assertNoKeys(client, name);
}

/** Enters every member at once; returns them oldest first (by their keys' CreateRevision). */
async function enterByAge(bs: DoubleBarrier[]): Promise<[DoubleBarrier, DoubleBarrier, DoubleBarrier]> {
  await Promise.all(bs.map((b) => b.enter()));
  const rev = new Map<DoubleBarrier, bigint>();
  for (const b of bs) rev.set(b, (await client.get(b.key!))!.createRevision);
  return [...bs].sort((a, b) => (rev.get(a)! < rev.get(b)! ? -1 : 1)) as [DoubleBarrier, DoubleBarrier, DoubleBarrier];
}

/** A client that calls `armed.run` once, just before it sends the first Txn putting a key under `armed.prefix`. */
class CreateHook extends Client {
  armed?: { prefix: string; run(): void };

  override txn(...args: Parameters<Client['txn']>): ReturnType<Client['txn']> {
    const key = args[0].success?.[0]?.requestPut?.key;
    if (this.armed && key?.toString().startsWith(this.armed.prefix)) {
      this.armed.run();
      this.armed = undefined;
    }
    return super.txn(...args);
  }
}

describe('DoubleBarrier', () => {
  it("three members enter together (keys as Go's), and nobody leaves before all have left", T, () =>
    withMembers('three', 3, async ({ name, ss, log }) => {
      const [b1, b2, b3] = ss.map((s) => new DoubleBarrier(s, name, 3)) as [DoubleBarrier, DoubleBarrier, DoubleBarrier];
      // Entering: each waits (after its count check, its key and its read of `ready`: 2 Txns).
      let base = await handled('Txn');
      const e1 = track(b1.enter());
      await answered('Txn', base, 2);
      base = await handled('Txn');
      const e2 = track(b2.enter());
      await answered('Txn', base, 2);
      assert.deepEqual([e1.settled, e2.settled], [false, false], 'two of three wait in enter()');
      await b3.enter();
      await Promise.all([e1.promise, e2.promise]);

      const keys = [b1.key!, b2.key!, b3.key!];
      const stored = (await client.getPrefix(`${name}/`)).kvs;
      for (const [i, k] of keys.entries()) {
        assert.match(k, new RegExp(`^${name}/waiters/\\d+$`), "Go's layout: <name>/waiters/<unix nanoseconds>");
        const kv = stored.find((x) => x.key.toString() === k);
        assert.equal(kv?.lease, ss[i]!.leaseId, "a waiter key is on its member's lease");
        assert.equal(kv.value.length, 0);
      }
      const ready = stored.find((x) => x.key.toString() === `${name}/ready`);
      assert.ok(ready, 'the third member opened the barrier with <name>/ready');
      assert.equal(ready.lease, 0n, "<name>/ready has no lease, as Go's");
      assert.deepEqual(stored.map((x) => x.key.toString()).sort(), [...keys, `${name}/ready`].sort());

      // Leaving: the second member leaves first (deletes its key), then the oldest, which keeps its key.
      const l2 = track(b2.leave());
      await log.deleted(keys[1]!);
      base = await handled('Range');
      const l1 = track(b1.leave());
      await answered('Range', base, 1);
      assert.deepEqual([l1.settled, l2.settled], [false, false], 'nobody leaves while the third is still inside');
      assert.ok(await client.get(keys[0]!), "the oldest member keeps its key until it is alone (Go's protocol)");
      await b3.leave();
      await Promise.all([l1.promise, l2.promise]);
      assert.equal(b1.key, undefined);
    }),
  );

  it('a member beyond the count is refused with TooManyClientsError and leaves no key', T, async () => {
    const name = `${fresh('too-many')}db`;
    const ss = await sessions(4);
    try {
      const [b1, b2, b3, b4] = ss.map((s) => new DoubleBarrier(s, name, 2)) as [DoubleBarrier, DoubleBarrier, DoubleBarrier, DoubleBarrier];
      await Promise.all([b1.enter(), b2.enter()]);
      await assert.rejects(b3.enter(), (err: unknown) => {
        assert.ok(err instanceof TooManyClientsError);
        assert.equal(err.count, 2);
        assert.equal(err.barrier, name);
        assert.match(err.message, /already has its 2 members.*leave\(\)/);
        return true;
      });
      assert.equal(b3.key, undefined);
      await Promise.all([b1.leave(), b2.leave()]);
      // Free again once both have left.
      await Promise.all([b3.enter(), b4.enter()]);
      await Promise.all([b3.leave(), b4.leave()]);
    } finally {
      await closeAll(ss);
    }
    await assertNoKeys(client, name);
  });

  it('two entering at once for the last place: exactly one gets in, the other is refused and leaves no key', T, async () => {
    const name = `${fresh('race')}db`;
    const ss = await sessions(3);
    try {
      const [b1, b2, b3] = ss.map((s) => new DoubleBarrier(s, name, 2)) as [DoubleBarrier, DoubleBarrier, DoubleBarrier];
      const base = await handled('Txn');
      const e1 = track(b1.enter());
      await answered('Txn', base, 2);
      const racers = [b2, b3];
      const results = await Promise.allSettled(racers.map((b) => b.enter()));
      await e1.promise;
      const refused = results.filter((r) => r.status === 'rejected');
      assert.equal(refused.length, 1, 'one of the two is refused');
      assert.ok((refused[0] as PromiseRejectedResult).reason instanceof TooManyClientsError);
      const inside = racers.filter((_, i) => results[i]!.status === 'fulfilled');
      const waiters = (await client.getPrefix(`${name}/waiters/`)).kvs.map((kv) => kv.key.toString()).sort();
      assert.deepEqual(waiters, [b1.key!, inside[0]!.key!].sort(), 'the refused one left no key');
      await Promise.all([b1.leave(), inside[0]!.leave()]);
    } finally {
      await closeAll(ss);
    }
    await assertNoKeys(client, name);
  });

  it('an aborted enter() rejects with the reason, deletes its key and closes its watch', T, () =>
    withMembers('abort-enter', 2, async ({ name, ss, log }) => {
      const [b1, b2] = ss.map((s) => new DoubleBarrier(s, name, 2)) as [DoubleBarrier, DoubleBarrier];
      await assert.rejects(b1.enter({ signal: AbortSignal.abort(new Error('never mind')) }), /never mind/);
      assert.equal(log.events.length, 0, 'an enter() aborted before it starts writes nothing');
      const w0 = await watchers();
      const ac = new AbortController();
      const e = track(b1.enter({ signal: ac.signal }));
      const put = await waiterPut(log, name, 0);
      await blocked(w0, 1);
      assert.equal(e.settled, false);
      assert.equal(await watchers(), w0 + 1, 'one watch while waiting');
      ac.abort(new Error('give up'));
      await assert.rejects(e.promise, /give up/);
      await log.deleted(put.key);
      assert.equal((await client.getPrefix(`${name}/`)).kvs.length, 0, 'no key left');
      assert.equal(b1.key, undefined);
      await waitFor(async () => (await watchers()) === w0, 'the watch closed');
      // The aborted member may enter again, and counts once.
      await Promise.all([b1.enter(), b2.enter()]);
      await Promise.all([b1.leave(), b2.leave()]);
    }),
  );

  it('an aborted leave() deletes its key, so the others do not wait for it', T, () =>
    withMembers('abort-leave', 3, async ({ name, ss, log }) => {
      const [b1, b2, b3] = await enterByAge(ss.map((s) => new DoubleBarrier(s, name, 3)));
      const k1 = b1.key!;
      const l2 = track(b2.leave());
      await log.deleted(b2.key!);
      // The oldest waits in leave() for the third, then gives up.
      const ac = new AbortController();
      const base = await handled('Range');
      const l1 = track(b1.leave({ signal: ac.signal }));
      await answered('Range', base, 1);
      assert.equal(l1.settled, false);
      ac.abort(new Error('give up'));
      await assert.rejects(l1.promise, /give up/);
      await log.deleted(k1);
      assert.equal(l2.settled, false, 'the third is still inside');
      await b3.leave();
      await l2.promise;
    }),
  );

  it('every member giving up its leave(): the last one out deletes `ready` too, so nothing is left', T, () =>
    withMembers('abort-all', 2, async ({ name, ss }) => {
      const [b1, b2] = await enterByAge(ss.map((s) => new DoubleBarrier(s, name, 2)));
      const reason = new Error('shutting down');
      await assert.rejects(b1.leave({ signal: AbortSignal.abort(reason) }), (e) => e === reason);
      assert.ok(await client.get(`${name}/ready`), 'the other member is still inside: `ready` stays');
      await assert.rejects(b2.leave({ signal: AbortSignal.abort(reason) }), (e) => e === reason);
      assert.equal(await client.get(`${name}/ready`), undefined, 'the last one out deleted it');
    }),
  );

  it('a member whose session is lost inside enter() frees its place: the others keep waiting, and a newcomer completes the count', T, () =>
    withMembers('lost-in-enter', 4, async ({ name, ss, log }) => {
      const [b1, b2, b3, b4] = ss.map((s) => new DoubleBarrier(s, name, 3)) as [DoubleBarrier, DoubleBarrier, DoubleBarrier, DoubleBarrier];
      let base = await handled('Txn');
      const e1 = track(b1.enter());
      await answered('Txn', base, 2);
      base = await handled('Txn');
      const e2 = track(b2.enter());
      const k2 = (await waiterPut(log, name, 1)).key;
      await answered('Txn', base, 2);
      await ss[1]!.close(); // b2's process dies: its lease and key go at once
      await assert.rejects(e2.promise, (err: unknown) => err instanceof SessionExpiredError && err.reason === 'closed');
      await log.deleted(k2);
      // Three members are still needed: b1 waits, and so does the next to come.
      base = await handled('Txn');
      const e3 = track(b3.enter());
      await answered('Txn', base, 2);
      assert.deepEqual([e1.settled, e3.settled], [false, false], 'b1 and b3 make two: they wait');
      await b4.enter(); // the third live member opens the barrier (b2's place was free, so no TooManyClientsError)
      await Promise.all([e1.promise, e3.promise]);
      await Promise.all([b1.leave(), b3.leave(), b4.leave()]);
    }),
  );

  it('a member whose session is lost inside leave() fails with SessionExpiredError; its key goes, the others finish', T, () =>
    withMembers('lost-in-leave', 3, async ({ name, ss, log }) => {
      const [b1, b2, b3] = await enterByAge(ss.map((s) => new DoubleBarrier(s, name, 3)));
      const [k1, k3] = [b1.key!, b3.key!];
      const l2 = track(b2.leave());
      await log.deleted(b2.key!);
      const base = await handled('Range');
      const l1 = track(b1.leave()); // the oldest: waits for b3, keeping its key
      await answered('Range', base, 1);
      assert.equal(l1.settled, false);
      await b1.session.close(); // b1 dies inside leave()
      await assert.rejects(l1.promise, (err: unknown) => err instanceof SessionExpiredError && err.reason === 'closed');
      await log.deleted(k1);
      assert.equal(l2.settled, false, 'b3 is still inside');
      await b3.leave(); // alone in its round now: closes the barrier
      await l2.promise;
      await log.deleted(k3);
    }),
  );

  it(
    'a member killed while the others wait in leave() counts as left once its lease expires, and <name>/ready is cleaned up',
    T,
    async () => {
      const name = `${fresh('killed')}db`;
      const ss = await sessions(2);
      const [doomed] = await sessions(1, 2); // a short TTL: its lease expires soon after it stops renewing
      const log = new EventLog(client, `${name}/`);
      await log.ready;
      try {
        const b1 = new DoubleBarrier(doomed!, name, 3);
        const [b2, b3] = ss.map((s) => new DoubleBarrier(s, name, 3)) as [DoubleBarrier, DoubleBarrier];
        const base = await handled('Txn');
        const e1 = track(b1.enter()); // the oldest member
        await answered('Txn', base, 2);
        await Promise.all([b2.enter(), b3.enter()]);
        await e1.promise;
        const k1 = b1.key!;
        const leaving = [track(b2.leave()), track(b3.leave())];
        await Promise.all([log.deleted(b2.key!), log.deleted(b3.key!)]);
        await roundTrip();
        assert.deepEqual(
          leaving.map((l) => l.settled),
          [false, false],
          'both wait for the oldest, still at work',
        );
        doomed!.orphan(); // b1's process is killed: no more renewals, and nobody revokes its lease
        const gone = await log.deleted(k1);
        assert.equal(gone.type, 'delete', 'its key went with its expired lease');
        await Promise.all(leaving.map((l) => l.promise));
        // Go's recipe leaves <name>/ready behind here (only the oldest deletes it, and it died);
        // the others found their round empty and removed it.
        await waitFor(async () => (await client.get(`${name}/ready`)) === undefined, '<name>/ready removed');
        await aborted(doomed!.signal);
        await assert.rejects(b1.leave(), SessionExpiredError);
      } finally {
        await log.close();
        await closeAll(ss);
        await doomed!.close();
      }
      await assertNoKeys(client, name);
    },
  );

  it("leave() waits only for its own round: a newcomer of the next round does not hold it up (Go's Leave waits for it)", T, () =>
    withMembers('next-round', 4, async ({ name, ss, log }) => {
      const [b1, b2, b3, b4] = ss.map((s) => new DoubleBarrier(s, name, 3)) as [DoubleBarrier, DoubleBarrier, DoubleBarrier, DoubleBarrier];
      const base = await handled('Txn');
      const e1 = track(b1.enter()); // the oldest member
      await answered('Txn', base, 2);
      await Promise.all([b2.enter(), b3.enter()]);
      await e1.promise;
      const leaving = [track(b2.leave()), track(b3.leave())];
      await Promise.all([log.deleted(b2.key!), log.deleted(b3.key!)]);
      // A newcomer enters while b1 is still at work: it waits for the next round to fill.
      const txns = await handled('Txn');
      const e4 = track(b4.enter());
      await answered('Txn', txns, 2);
      // b1 leaves: its round is b1, b2, b3, so it is alone. (Go's Leave would wait for b4's key to
      // go, and b4 waits for b2 and b3, who wait for b1: a deadlock.)
      await b1.leave();
      await Promise.all(leaving.map((l) => l.promise));
      assert.equal(e4.settled, false, 'the newcomer still waits for its round');
      // The next round: b4 with b2 and b3 again.
      await Promise.all([b2.enter(), b3.enter(), e4.promise]);
      await Promise.all([b2.leave(), b3.leave(), b4.leave()]);
    }),
  );

  it('a create whose outcome was unknown, landing after its member left, is swept: nobody counts the ghost', T, async () => {
    const name = `${fresh('late-create')}db`;
    await using proxy = await startProxy(etcd.endpoints[0]!);
    // One member behind two endpoints, the proxy first: an idempotent attempt there gets 1 s
    // (dialTimeoutMs), then the call moves on to the direct endpoint.
    const slow = new CreateHook({ endpoints: [proxy.endpoint, etcd.endpoints[0]!], dialTimeoutMs: 1000, callTimeoutMs: 3000 });
    const s = await Session.create(slow, { ttl: 30 });
    const [other] = await sessions(1);
    const log = new EventLog(client, `${name}/`);
    try {
      await log.ready;
      await slow.get(`${ROOT}warm-up`); // connected through the proxy before the hold starts
      // Our key's create is held HOLD_MS on its way: the call gives up on that attempt after 1 s and
      // creates the key directly; the held attempt reaches etcd (its cancel 1 s behind it) after we left.
      const HOLD_MS = 3000;
      let heldAt = 0;
      slow.armed = {
        prefix: `${name}/waiters/`,
        run: () => {
          heldAt = performance.now();
          proxy.delay(HOLD_MS);
        },
      };
      const b = new DoubleBarrier(s, name, 1);
      await b.enter(); // a barrier of one opens at once
      const key = b.key!;
      await b.leave();
      const left = await log.deleted(key);
      assert.ok(
        performance.now() - heldAt < HOLD_MS,
        'entered and left before the held attempt landed (else this machine is too slow for the test)',
      );
      // The held attempt lands: our key is back, on our live lease, and is swept.
      // (Hang guards only: the attempt lands HOLD_MS after it was sent, and the sweep follows at once.)
      const back = await within(
        log.next((e) => e.type === 'put' && e.key === key && e.rev > left.rev),
        'the held create to land',
        10_000,
      );
      assert.equal(back.lease, s.leaseId, 're-created on our live lease');
      await within(
        log.next((e) => e.type === 'delete' && e.key === key && e.rev > back.rev),
        'the ghost key swept',
        10_000,
      );
      // Nobody counts it: a barrier of two with one participant stays shut (the ghost would fill it),
      // until a second one comes.
      const next = new DoubleBarrier(other!, name, 2);
      const base = await watchers();
      const entering = track(next.enter());
      await blocked(base, 1); // counted, found one short, and waiting on a watch
      assert.equal(entering.settled, false, 'a barrier of two opened with one participant');
      const second = new DoubleBarrier(s, name, 2);
      await Promise.all([second.enter(), entering.promise]);
      await Promise.all([next.leave(), second.leave()]);
    } finally {
      await log.close();
      await closeAll([s, other]);
      await slow.close();
    }
    await assertNoKeys(client, name);
  });

  it('enter() refused after a create whose answer was lost: that create, landing later, is swept', T, async () => {
    const name = `${fresh('late-refused')}db`;
    await using c = new Client({ endpoints: etcd.endpoints });
    const s = await Session.create(c, { ttl: 30 });
    const [other] = await sessions(1);
    const log = new EventLog(client, `${name}/`);
    // Our key's first create gets no answer (held, sent for real later: it lands late); its retry is
    // refused with an error that is not transient.
    const member = holdThenRefuse(
      c,
      (r) => r.success?.[0]?.requestPut?.key?.toString().startsWith(`${name}/waiters/`) === true,
      () => new TransportError(Status.PERMISSION_DENIED, 'etcdserver: permission denied', { fromServer: true }),
    );
    try {
      await log.ready;
      await assert.rejects(new DoubleBarrier(s, name, 1).enter(), PermissionDeniedError);
      assert.equal(member.attempts, 2, 'one attempt without an answer, one refused');
      // The held create lands: our key is created after enter() gave up, on our live lease.
      const landed = await member.land();
      assert.equal(landed.succeeded, true, 'the held attempt created the key');
      const key = member.request!.success![0]!.requestPut!.key!.toString();
      // (Hang guard only: the sweep deletes it as soon as it sees it.)
      await within(
        log.next((e) => e.type === 'delete' && e.key === key && e.rev > landed.header!.revision!),
        'the ghost key swept',
        10_000,
      );
      // Nobody counts it: a barrier of one lets the next member in (the ghost would fill it).
      const next = new DoubleBarrier(other!, name, 1);
      await next.enter();
      await next.leave();
    } finally {
      member.restore();
      await log.close();
      await closeAll([s, other]);
    }
    await assertNoKeys(client, name);
  });

  it('names and counts are checked; leave() needs enter(), and enter() cannot be called twice', async () => {
    const [s] = await sessions(1);
    try {
      assert.throws(() => new DoubleBarrier(s!, '', 2), InvalidArgumentError);
      assert.throws(() => new DoubleBarrier(s!, 'db/', 2), InvalidArgumentError);
      for (const n of [0, -1, 1.5, Number.NaN]) assert.throws(() => new DoubleBarrier(s!, 'db', n), InvalidArgumentError);
      const name = `${fresh('misuse')}db`;
      const b = new DoubleBarrier(s!, name, 1);
      await assert.rejects(b.leave(), /without enter\(\)/);
      await b.enter(); // a barrier of one opens at once
      await assert.rejects(b.enter(), /enter\(\) called twice/);
      await b.leave();
      await assertNoKeys(client, name);
    } finally {
      await closeAll([s!]);
    }
  });
});
