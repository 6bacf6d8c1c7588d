// Mutex against a real single-member etcd, every way a waiter gives up or a holder loses the lock:
// aborts, timeouts, revoked leases, an operator's delete or lease move, a partition, ownerCompare().
// Each test uses its own lock names and leaves nothing.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, LockLostError, Mutex, PermissionDeniedError, Session, SessionExpiredError, UnavailableError } from '../src/index.js';
import { Status, type Transport, TransportError } from '../src/client/transport/transport.js';
import type * as pb from '../src/proto/etcd.js';
import { sessionQueue } from '../src/queue/state.js';
import { startProxy, type EtcdCluster } from '../src/testing/index.js';
import {
  EventLog,
  aborted,
  assertNoKeys,
  killEtcdctls,
  etcdFile,
  closeAll,
  withSessions,
  assertOwnerCompareFences,
  within,
} from './helpers.js';
import { withProxiedWaiter } from './mutex-helpers.js';
import { holdThenRefuse } from './helpers/late-attempt.js';

const ROOT = 'test/mutex-loss/';
let etcd: EtcdCluster;
let client: Client;
const file = etcdFile(ROOT, (e, c) => ((etcd = e), (client = c)), { beforeChecks: killEtcdctls });
const { fresh, sessions, watchersNow, blocked } = file;

describe('Mutex: giving up and losing', () => {
  it('aborting a waiter deletes its key and rejects with the signal’s reason', async () => {
    const p = fresh('abort');
    const name = `${p}lock`;
    const [a, b] = await sessions(2);
    const log = new EventLog(client, `${name}/`);
    try {
      await log.ready;
      const held = await new Mutex(a!, name).lock();
      const ac = new AbortController();
      const m = new Mutex(b!, name);
      const base = await watchersNow();
      const waiting = m.lock({ signal: ac.signal });
      await blocked(base); // queued and waiting
      const reason = new Error('caller gave up');
      ac.abort(reason);
      await assert.rejects(waiting, (e) => e === reason);
      assert.equal(await client.get(m.key), undefined, 'our queued key is gone when lock() rejects');
      await held.unlock();
    } finally {
      await log.close();
      await closeAll([a!, b!]);
    }
    await assertNoKeys(client, p);
  });

  it('AbortSignal.timeout while waiting rejects with TimeoutError and deletes our key', async () => {
    const p = fresh('timeout');
    await withSessions(client, p, 2, async ([a, b]) => {
      const held = await new Mutex(a!, `${p}lock`).lock();
      const m = new Mutex(b!, `${p}lock`);
      await assert.rejects(
        m.lock({ signal: AbortSignal.timeout(300) }),
        (e: unknown) => e instanceof DOMException && e.name === 'TimeoutError',
      );
      assert.equal(await client.get(m.key), undefined);
      await held.unlock();
    });
  });

  it('an already-aborted signal rejects before anything is written', async () => {
    const p = fresh('pre-aborted');
    const [s] = await sessions(1);
    try {
      const reason = new Error('never mind');
      await assert.rejects(new Mutex(s!, `${p}lock`).lock({ signal: AbortSignal.abort(reason) }), (e) => e === reason);
      await assertNoKeys(client, p);
    } finally {
      await closeAll([s!]);
    }
  });

  it('a waiter whose lease is revoked fails with SessionExpiredError without waiting for the holder', async () => {
    const p = fresh('waiter-session-lost');
    const name = `${p}lock`;
    const [a] = await sessions(1);
    const [b] = await sessions(1, 3);
    try {
      const held = await new Mutex(a!, name).lock();
      const m = new Mutex(b!, name);
      const base = await watchersNow();
      const waiting = m.lock();
      await blocked(base); // queued and waiting
      await client.leaseRevoke(b!.leaseId);
      // The holder never lets go during this: lock() can only end because the session did.
      await assert.rejects(waiting, (e: unknown) => {
        assert.ok(e instanceof SessionExpiredError, String(e));
        assert.equal(e.leaseId, b!.leaseId);
        assert.equal(e.reason, 'lease_gone');
        return true;
      });
      held.assertHeld();
      await held.unlock();
    } finally {
      await closeAll([a!, b!]);
    }
    await assertNoKeys(client, p);
  });

  it('a waiter whose application closes the client when the session ends still reports SessionExpiredError', async () => {
    const p = fresh('waiter-client-closed-on-loss');
    const name = `${p}lock`;
    const [a] = await sessions(1);
    // A common shutdown pattern: when the session is lost, the application closes its client. The
    // waiter's watch then ends with ClientClosedError; what lock() reports is still the session's loss.
    const own = new Client({ endpoints: etcd.endpoints });
    const b = await Session.create(own, { ttl: 3 });
    b.signal.addEventListener('abort', () => void own.close());
    try {
      const held = await new Mutex(a!, name).lock();
      const base = await watchersNow();
      const waiting = new Mutex(b, name).lock();
      await blocked(base);
      await client.leaseRevoke(b.leaseId);
      await assert.rejects(waiting, (e: unknown) => {
        assert.ok(e instanceof SessionExpiredError, `expected SessionExpiredError, got ${String(e)}`);
        assert.equal(e.reason, 'lease_gone');
        return true;
      });
      await held.unlock();
    } finally {
      await closeAll([a!]);
      await own.close();
    }
    await assertNoKeys(client, p);
  });

  for (const call of ['lock', 'tryLock'] as const)
    it(`a ${call}() whose session is lost while its enqueue is in flight, which then fails, reports SessionExpiredError`, async () => {
      const p = fresh(`session-lost-enqueue-in-flight-${call}`);
      const own = new Client({ endpoints: etcd.endpoints });
      const b = await Session.create(own, { ttl: 3 });
      // The enqueue Txn goes unanswered until the session is lost, then fails as in an outage.
      const txn = own.txn.bind(own);
      let sent!: () => void;
      const inFlight = new Promise<void>((r) => (sent = r));
      own.txn = async () => {
        sent();
        await b.done;
        throw new UnavailableError('no endpoint answered (test)');
      };
      try {
        const locking = new Mutex(b, `${p}lock`)[call]();
        await within(inFlight, 'the enqueue sent', 20_000);
        await client.leaseRevoke(b.leaseId); // its next renewal finds the lease gone
        await assert.rejects(locking, (e: unknown) => {
          assert.ok(e instanceof SessionExpiredError, `expected SessionExpiredError, got ${String(e)}`);
          assert.equal(e.reason, 'lease_gone');
          return true;
        });
      } finally {
        own.txn = txn;
        await b.close();
        await own.close();
      }
      await assertNoKeys(client, p);
    });

  it('a waiter whose lease is revoked reports SessionExpiredError even when its turn comes before the session notices', async () => {
    const p = fresh('waiter-lease_gone-race');
    const name = `${p}lock`;
    const [a, b] = await sessions(2, 30); // next renewal in 10 s: the session cannot notice first
    try {
      const held = await new Mutex(a!, name).lock();
      const base = await watchersNow();
      const waiting = new Mutex(b!, name).lock();
      waiting.catch(() => {});
      await blocked(base);
      await client.leaseRevoke(b!.leaseId); // b's key goes with its lease
      await held.unlock(); // wakes b, which finds its own key gone
      await assert.rejects(waiting, (e: unknown) => {
        assert.ok(e instanceof SessionExpiredError, `expected SessionExpiredError, got ${String(e)}`);
        assert.equal(e.reason, 'lease_gone');
        return true;
      });
    } finally {
      await closeAll([a!, b!]);
    }
    await assertNoKeys(client, p);
  });

  it('aborting lock() after its enqueue committed but before the answer arrived leaves no key behind', () =>
    withProxiedWaiter(file, 'abort-in-enqueue', async ({ name, proxy, held, b, log }) => {
      proxy.delay(1000); // each direction: the answer to b's enqueue arrives a second after it commits
      const ac = new AbortController();
      const m = new Mutex(b, name);
      const waiting = m.lock({ signal: ac.signal });
      await log.put(m.key); // committed (seen by our direct watch); the answer is still in the proxy
      const reason = new Error('gave up');
      ac.abort(reason);
      proxy.delay(0); // bytes already queued keep their delay; the clean-up need not wait
      await assert.rejects(waiting, (e) => e === reason);
      const left = await client.get(m.key);
      await held.unlock();
      // Left behind, the key keeps its place while b's session lives: it would "hold" the lock
      // for nobody and block every later waiter.
      assert.equal(left, undefined, 'the queued key was left behind');
    }));

  it('lock() refused after an enqueue attempt whose answer was lost: that attempt, landing later, is swept', async () => {
    const p = fresh('late-refused');
    const name = `${p}lock`;
    await using c = new Client({ endpoints: etcd.endpoints });
    const s = await Session.create(c, { ttl: 30 });
    const [other] = await sessions(1);
    // The enqueue's first attempt gets no answer (held, sent for real later: it lands late); its retry
    // is refused with an error that is not transient.
    const member = holdThenRefuse(
      c,
      (r) => r.success?.[0]?.requestPut?.key?.toString().startsWith(`${name}/`) === true,
      () => new TransportError(Status.PERMISSION_DENIED, 'etcdserver: permission denied', { fromServer: true }),
    );
    try {
      await assert.rejects(new Mutex(s, name).lock(), PermissionDeniedError);
      assert.equal(member.attempts, 2, 'one attempt without an answer, one refused');
      // The held attempt lands: our key is created after lock() gave up, on the live lease.
      assert.equal((await member.land()).succeeded, true, 'the held attempt created the key');
      // Nobody is blocked behind it (a hang guard only: the sweep deletes it at once).
      const next = await new Mutex(other!, name)
        .lock({ signal: AbortSignal.timeout(20_000) })
        .catch((err: unknown) => assert.fail(`blocked behind the key that landed late (${err})`));
      await next.unlock();
    } finally {
      member.restore();
      await closeAll([s, other]);
    }
    await assertNoKeys(client, p);
  });

  it('a later lock() of the session refused after an attempt that landed while it ran: the key goes, though an earlier sweep watches it', async () => {
    const p = fresh('late-refused-again');
    const name = `${p}lock`;
    await using c = new Client({ endpoints: etcd.endpoints });
    const s = await Session.create(c, { ttl: 30 });
    const [other] = await sessions(1);
    const key = new Mutex(s, name).key;
    // Each lock()'s first enqueue attempt is applied but its answer lost. The first lock() then holds
    // (its retry finds the key); once released, a sweep watches the key for the rest of the session.
    // The second lock()'s retry is refused (not transient) once that sweep has seen the first
    // attempt's key, in use then, so the sweep leaves it.
    const t = (c.conn as unknown as { peers: Transport[] }).peers[0]!;
    const unary = t.unary.bind(t);
    const users = sessionQueue(s).users;
    const of = users.of.bind(users);
    let round = 1;
    let attempts = 0;
    let sent = false;
    let sweepSaw!: () => void;
    const seen = new Promise<void>((resolve) => (sweepSaw = resolve));
    users.of = (k: string) => {
      if (k === key && sent) sweepSaw();
      return of(k);
    };
    t.unary = (async (method, req, headers, deadline, signal) => {
      if (!method.path.endsWith('/Txn') || (req as pb.TxnRequest).success?.[0]?.requestPut?.key?.toString() !== key)
        return unary(method, req, headers, deadline, signal);
      attempts++;
      if (attempts === 1) {
        sent = round === 2;
        await unary(method, req, headers, deadline, signal);
        throw new TransportError(Status.DEADLINE_EXCEEDED, 'no answer within the deadline');
      }
      if (round === 1) return unary(method, req, headers, deadline, signal);
      await within(seen, 'the sweep looked at the landed key while this call used it', 20_000);
      throw new TransportError(Status.PERMISSION_DENIED, 'etcdserver: permission denied', { fromServer: true });
    }) as typeof t.unary;
    try {
      await (await new Mutex(s, name).lock()).unlock();
      assert.equal(attempts, 2, 'the first lock(): one attempt without an answer, its retry');
      round = 2;
      attempts = 0;
      await assert.rejects(new Mutex(s, name).lock(), PermissionDeniedError);
      assert.equal(attempts, 2, 'the second lock(): one attempt without an answer, one refused');
      // Nobody is blocked behind the key the second lock() created (a hang guard only).
      const next = await new Mutex(other!, name)
        .lock({ signal: AbortSignal.timeout(20_000) })
        .catch((err: unknown) => assert.fail(`blocked behind the key the refused lock() left (${err})`));
      await next.unlock();
    } finally {
      t.unary = unary;
      users.of = of;
      await closeAll([s, other]);
    }
    await assertNoKeys(client, p);
  });

  it('an operator deleting the holder’s key aborts handle.signal with LockLostError', async () => {
    const p = fresh('key-deleted');
    await withSessions(client, p, 1, async ([s]) => {
      const h = await new Mutex(s!, `${p}lock`).lock();
      const signal = h.signal; // start watching
      assert.equal(signal.aborted, false);
      await client.delete(h.key);
      const reason = await aborted(signal);
      assert.ok(reason instanceof LockLostError, String(reason));
      assert.equal(reason.key, h.key);
      assert.throws(() => h.assertHeld(), LockLostError);
      await h.unlock(); // nothing to delete; must not throw
    });
  });

  it('an operator moving the holder’s key off its lease ends the holding, and the next waiter takes over', async () => {
    const p = fresh('key-moved');
    const name = `${p}lock`;
    const [a, b] = await sessions(2);
    try {
      const held = await new Mutex(a!, name).lock();
      const signal = held.signal;
      const base = await watchersNow();
      const next = new Mutex(b!, name).lock();
      await blocked(base);
      await client.put(held.key, ''); // no lease: now stray data, which waiters skip (etcd 6631)
      const reason = await aborted(signal);
      assert.ok(reason instanceof LockLostError, String(reason));
      const h = await next;
      assert.ok(h.fencingToken > held.fencingToken);
      await h.unlock();
    } finally {
      await closeAll([a!, b!]);
      await client.delete(p, { prefix: true }); // the moved key belongs to no lease
    }
  });

  it('revoking the holder’s lease aborts handle.signal with LockLostError', async () => {
    const p = fresh('holder-session-lost');
    await withSessions(client, p, { n: 1, ttl: 3 }, async ([s]) => {
      const h = await new Mutex(s!, `${p}lock`).lock();
      await client.leaseRevoke(s!.leaseId);
      const reason = await aborted(h.signal);
      assert.ok(reason instanceof LockLostError, String(reason));
      assert.throws(() => h.assertHeld(), LockLostError);
    });
  });

  it('a partitioned holder’s signal fires before a waiter can take over the lock', { timeout: 30_000 }, async () => {
    const p = fresh('partitioned-holder');
    const name = `${p}lock`;
    const proxy = await startProxy(etcd.endpoints[0]!);
    const cut = new Client({ endpoints: proxy.endpoint });
    // TTL 6 s: the holder's deadline comes 1 s (the margin) before the server can expire its lease.
    const [a] = await sessions(1, 6, cut);
    const [b] = await sessions(1);
    try {
      const held = await new Mutex(a!, name).lock();
      let holderKnew = false;
      held.signal.addEventListener('abort', () => (holderKnew = true));
      const base = await watchersNow();
      const next = new Mutex(b!, name).lock().then((h) => ({ h, holderKnew }));
      await blocked(base);
      proxy.blackhole(true); // the holder can no longer renew; the server expires its lease after 6 s
      const { h, holderKnew: knewFirst } = await next;
      assert.ok(knewFirst, 'the waiter got the lock while the old holder still believed it held it');
      const reason = held.signal.reason as LockLostError;
      assert.ok(reason instanceof LockLostError, String(reason));
      assert.ok(reason.cause instanceof SessionExpiredError && reason.cause.reason === 'deadline', String(reason.cause));
      assert.throws(() => held.assertHeld(), LockLostError);
      assert.ok(h.fencingToken > held.fencingToken);
      await h.unlock();
    } finally {
      await cut.close();
      await proxy.close();
      await closeAll([a!, b!]);
    }
    await assertNoKeys(client, p);
  });

  it('ownerCompare() lets a Txn through while held and stops it after the key is lost', async () => {
    const p = fresh('owner-compare');
    const [s] = await sessions(1);
    try {
      // Even a new key for the same session and name is another incarnation: still refused.
      await assertOwnerCompareFences(
        client,
        p,
        () => new Mutex(s!, `${p}lock`).lock(),
        (h) => h.unlock(),
      );
    } finally {
      await closeAll([s!]);
      await client.delete(p, { prefix: true });
    }
  });
});
