// Semaphore against a real single-member etcd: every way a waiter or a holder can go away (aborts,
// closed sessions, revoked leases, deleted keys, a killed process), and the queue after it. Each test
// uses its own names and leaves no key and no lease.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Client, PermitLostError, Semaphore, Session, SessionExpiredError, type PermitHandle } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import {
  aborted,
  assertNoKeys,
  etcdFile,
  track,
  waitFor,
  type Tracked,
  closeAll,
  settleAll,
  settledOrHang,
  keysUnder,
  within,
} from './helpers.js';
import { Probe } from './probe.js';

const ROOT = 'test/semaphore-loss/';
let etcd: EtcdCluster;
let client: Client;
const { fresh, sessions, probed } = etcdFile(ROOT, (e, c) => ((etcd = e), (client = c)));

describe('Semaphore: giving up and losing', () => {
  /** Two holders of a 2-permit semaphore on `client`, and a probed client for the waiters. */
  async function full(p: string, waiters: number, ttl = 30) {
    const name = `${p}sem`;
    const probe = probed();
    const hs = await sessions(2);
    const ws = await sessions(waiters, ttl, probe.client);
    const holders = await Promise.all(hs.map((s) => new Semaphore(s, name, { permits: 2 }).acquire()));
    return {
      name,
      probe,
      hs,
      ws,
      holders,
      sem: (i: number) => new Semaphore(ws[i]!, name, { permits: 2 }),
      async close() {
        await closeAll([...hs, ...ws]);
        await probe.client.close();
      },
    };
  }

  type Full = Awaited<ReturnType<typeof full>>;

  /**
   * Runs `body` on a full semaphore (see full) under a fresh prefix; then closes it, settles what the
   * test left `pending`, and checks that nothing is left.
   */
  async function withFull(
    scope: string,
    size: { waiters: number; ttl?: number },
    body: (f: Full, pending: Tracked<PermitHandle>[]) => Promise<void>,
  ): Promise<void> {
    const p = fresh(scope);
    const f = await full(p, size.waiters, size.ttl);
    const pending: Tracked<PermitHandle>[] = [];
    try {
      await body(f, pending);
    } finally {
      await f.close();
      await settleAll(pending);
    }
    await assertNoKeys(client, p);
  }

  it('aborting a waiter deletes its key and rejects with the signal’s reason', () =>
    withFull('abort', { waiters: 1 }, async (f) => {
      const ac = new AbortController();
      const waiting = f.sem(0).acquire({ signal: ac.signal });
      waiting.catch(() => {});
      await f.probe.blocked(1);
      const reason = new Error('caller gave up');
      ac.abort(reason);
      await assert.rejects(waiting, (e) => e === reason);
      assert.equal(await client.get(f.sem(0).key), undefined, 'our queued key is gone when acquire() rejects');
      for (const h of f.holders) h.assertHeld();
      await Promise.all(f.holders.map((h) => h.release()));
    }));

  it('an enqueue whose answer is above maxReceiveMessageBytes fails without leaving its key, which etcd created', async () => {
    const p = fresh('answer-too-large');
    const name = `${p}sem`;
    const [holder, next] = await sessions(2);
    await using small = new Client({ endpoints: etcd.endpoints, maxReceiveMessageBytes: 3000 });
    const s = await Session.create(small, { ttl: 30 });
    try {
      // A peer's label the enqueue reads back (its peek): its answer is too large for `small`.
      const held = await new Semaphore(holder!, name, { permits: 2 }).acquire({ label: 'x'.repeat(4000) });
      await assert.rejects(new Semaphore(s, name, { permits: 2 }).acquire(), /above the limit/);
      // Our key, created by etcd, must not take the second permit for as long as our session lives.
      const second = await new Semaphore(next!, name, { permits: 2 })
        .acquire({ signal: AbortSignal.timeout(20_000) })
        .catch((err: unknown) => assert.fail(`blocked behind the key the failed acquire left (${err})`));
      await second.release();
      await held.release();
    } finally {
      await closeAll([s, holder!, next!]);
    }
    await assertNoKeys(client, p);
  });

  it('an already-aborted signal rejects before anything is written', async () => {
    const p = fresh('pre-aborted');
    const [s] = await sessions(1);
    try {
      const reason = new Error('never mind');
      await assert.rejects(
        new Semaphore(s!, `${p}sem`, { permits: 1 }).acquire({ signal: AbortSignal.abort(reason) }),
        (e) => e === reason,
      );
      await assertNoKeys(client, p);
    } finally {
      await closeAll([s!]);
    }
  });

  it('closing a waiting session fails acquire() at once with SessionExpiredError, the others untouched', () =>
    withFull('waiter-closed', { waiters: 2 }, async (f) => {
      const head = track(f.sem(0).acquire());
      await f.probe.blocked(1);
      // The second waiter watches only the head, which never moves: only its session can end its wait.
      const waiting = track(f.sem(1).acquire());
      await f.probe.blocked(2);
      await f.ws[1]!.close();
      // At once: not at its periodic re-check, 30 s (its TTL) after it began to wait.
      await assert.rejects(
        settledOrHang(waiting, 'acquire() to fail once its session closed'),
        (e: unknown) => e instanceof SessionExpiredError && e.reason === 'closed' && e.leaseId === f.ws[1]!.leaseId,
      );
      await f.probe.blocked(1, 'the head still blocked');
      assert.equal(head.settled, false);
      assert.deepEqual((await keysUnder(client, `${f.name}/`)).sort(), [...f.holders.map((h) => h.key), f.sem(0).key].sort());
      for (const h of f.holders) h.assertHeld();
      await f.holders[0]!.release();
      const h = await head.promise;
      await Promise.all([h.release(), f.holders[1]!.release()]);
    }));

  it('a waiter whose lease is revoked fails with SessionExpiredError without waiting for a permit', () =>
    withFull('waiter-revoked', { waiters: 2, ttl: 3 }, async (f) => {
      const head = track(f.sem(0).acquire());
      await f.probe.blocked(1);
      // Behind the head, watching only it: nothing but the session's end can wake this waiter.
      const waiting = track(f.sem(1).acquire());
      await f.probe.blocked(2);
      await client.leaseRevoke(f.ws[1]!.leaseId);
      await aborted(f.ws[1]!.signal); // the session learns at its next renewal (every second)
      // Then at once: not at the waiter's periodic re-check, 10 s after it began to wait.
      await assert.rejects(settledOrHang(waiting, 'acquire() to fail once its session was lost', 5_000), (e: unknown) => {
        assert.ok(e instanceof SessionExpiredError, String(e));
        assert.equal(e.reason, 'lease_gone');
        return true;
      });
      assert.equal(head.settled, false);
      for (const h of f.holders) h.assertHeld();
      await f.holders[0]!.release();
      const h = await head.promise;
      await Promise.all([h.release(), f.holders[1]!.release()]);
    }));

  it('a waiter whose lease is revoked reports SessionExpiredError even when a permit frees before its session notices', () =>
    withFull('waiter-revoked-race', { waiters: 1, ttl: 30 }, async (f) => {
      // TTL 30 s: its next renewal is 10 s away, so the session cannot notice the revoke first.
      const waiting = f.sem(0).acquire();
      waiting.catch(() => {});
      await f.probe.blocked(1);
      await client.leaseRevoke(f.ws[0]!.leaseId); // its key goes with its lease
      await f.holders[0]!.release(); // wakes the head, which finds its own key gone
      await assert.rejects(waiting, (e: unknown) => {
        assert.ok(e instanceof SessionExpiredError, `expected SessionExpiredError, got ${String(e)}`);
        assert.equal(e.reason, 'lease_gone');
        return true;
      });
      await f.holders[1]!.release();
    }));

  it('an operator deleting a holder’s key aborts its signal with PermitLostError, and lets a waiter in', () =>
    withFull('key-deleted', { waiters: 1 }, async (f) => {
      const victim = f.holders[0]!;
      const signal = victim.signal;
      const waiting = track(f.sem(0).acquire());
      await f.probe.blocked(1);
      await client.delete(victim.key);
      const reason = await aborted(signal);
      assert.ok(reason instanceof PermitLostError, String(reason));
      assert.equal(reason.key, victim.key);
      assert.throws(() => victim.assertHeld(), PermitLostError);
      const h = await waiting.promise;
      await victim.release(); // nothing to delete; must not throw
      f.holders[1]!.assertHeld();
      await Promise.all([h.release(), f.holders[1]!.release()]);
    }));

  it('an operator moving a holder’s key off its lease ends the holding, and the waiter at the head takes the permit', {
    timeout: 60_000,
  }, async () => {
    const p = fresh('key-moved');
    const name = `${p}sem`;
    const probe = probed();
    const [a, b] = await sessions(2);
    // A long TTL: the waiter's periodic re-check (every max(10 s, TTL)) cannot be what lets it in.
    const [w] = await sessions(1, 600, probe.client);
    try {
      const held = await Promise.all([a!, b!].map((s) => new Semaphore(s, name, { permits: 2 }).acquire()));
      const signal = held[0]!.signal;
      const waiting = track(new Semaphore(w!, name, { permits: 2 }).acquire());
      await probe.blocked(1);
      await client.put(held[0]!.key, '2'); // no lease: stray data now, which waiters skip (etcd 6631)
      const reason = await aborted(signal);
      assert.ok(reason instanceof PermitLostError, String(reason));
      const h = await settledOrHang(waiting, 'the head to take the permit the moved key no longer holds');
      await Promise.all([h.release(), held[1]!.release()]);
    } finally {
      await closeAll([a!, b!, w!]);
      await probe.client.close();
      await client.delete(p, { prefix: true }); // the moved key belongs to no lease
    }
  });

  it('a waiter whose predecessor gives up keeps its place and gets its permit in order', { timeout: 30_000 }, () =>
    withFull('pred-aborts', { waiters: 3 }, async (f, pending) => {
      const acs = [0, 1, 2].map(() => new AbortController());
      for (let i = 0; i < 3; i++) {
        pending.push(track(f.sem(i).acquire({ signal: acs[i]!.signal })));
        await f.probe.blocked(i + 1);
      }
      // Waiter 1 gives up: waiter 2 was watching it, looks again, and keeps waiting (behind waiter 0).
      acs[1]!.abort(new Error('gives up'));
      await assert.rejects(pending[1]!.promise, /gives up/);
      await f.probe.blocked(2, 'waiters 0 and 2 blocked again');
      assert.equal(pending[0]!.settled || pending[2]!.settled, false);
      // Permits still go in order: waiter 0, then waiter 2.
      await f.holders[0]!.release();
      const h0 = await pending[0]!.promise;
      await f.probe.blocked(1, 'waiter 2 at the head');
      assert.equal(pending[2]!.settled, false, 'waiter 2 waits: both permits are taken');
      await f.holders[1]!.release();
      const h2 = await pending[2]!.promise;
      assert.ok(h2.fencingToken > h0.fencingToken);
      await Promise.all([h0.release(), h2.release()]);
    }),
  );

  it('when the head gives up, the next waiter becomes head and gets the next permit', { timeout: 30_000 }, () =>
    withFull('head-aborts', { waiters: 2 }, async (f, pending) => {
      const ac = new AbortController();
      pending.push(track(f.sem(0).acquire({ signal: ac.signal })));
      await f.probe.blocked(1);
      pending.push(track(f.sem(1).acquire()));
      await f.probe.blocked(2);
      ac.abort(new Error('head gives up'));
      await assert.rejects(pending[0]!.promise, /head gives up/);
      await f.probe.quiet('waiter 1 at the head', (open) => open.length === 1 && Probe.isPrefix(open[0]!));
      assert.equal(pending[1]!.settled, false);
      await f.holders[1]!.release();
      const h = await pending[1]!.promise;
      await Promise.all([h.release(), f.holders[0]!.release()]);
    }),
  );

  it('revoking a holder’s lease (its process died) aborts its signal and lets the next waiter in', () =>
    withFull('holder-revoked', { waiters: 1 }, async (f) => {
      const victim = f.holders[1]!;
      const signal = victim.signal;
      const waiting = track(f.sem(0).acquire());
      await f.probe.blocked(1);
      await client.leaseRevoke(victim.session.leaseId);
      const h = await waiting.promise;
      const reason = await aborted(signal);
      assert.ok(reason instanceof PermitLostError, String(reason));
      assert.throws(() => victim.assertHeld(), PermitLostError);
      await Promise.all([h.release(), f.holders[0]!.release()]);
    }));

  it('a holder process killed with SIGKILL frees its permit once its lease expires', { timeout: 30_000 }, async () => {
    const p = fresh('holder-killed');
    const name = `${p}sem`;
    const probe = probed();
    const [w] = await sessions(1, 30, probe.client);
    const index = fileURLToPath(new URL('../src/index.ts', import.meta.url));
    const code = `
      import { Client, Semaphore, Session } from ${JSON.stringify(index)};
      const [endpoint, name] = process.argv.slice(1);
      const client = new Client({ endpoints: [endpoint] });
      const session = await Session.create(client, { ttl: 2 });
      const h = await new Semaphore(session, name, { permits: 1 }).acquire();
      console.log(h.key);
      setInterval(() => {}, 1 << 30);
    `;
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code, etcd.endpoints[0]!, name], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const exited = once(child, 'exit');
    try {
      const firstLine = once(createInterface({ input: child.stdout! }), 'line') as Promise<[string]>;
      const [childKey] = await within(firstLine, 'the child holds the permit', 20_000);
      const childKv = await client.get(childKey);
      assert.ok(childKv && childKv.lease !== 0n);
      const waiting = track(new Semaphore(w!, name, { permits: 1 }).acquire());
      await probe.blocked(1);
      child.kill('SIGKILL');
      await exited;
      assert.equal(waiting.settled, false);
      const h = await waiting.promise; // once the child's lease expires (2 s) its key goes
      assert.equal(await client.get(childKey), undefined);
      assert.ok(h.fencingToken > childKv.createRevision);
      await h.release();
      await waitFor(async () => !(await client.leaseLeases()).includes(childKv.lease), 'the child’s lease gone');
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await closeAll([w!]);
      await probe.client.close();
    }
    await assertNoKeys(client, p);
  });

  it('a stray key without a lease does not take a permit (etcd 6631)', async () => {
    const p = fresh('stray');
    const name = `${p}sem`;
    const [a, b] = await sessions(2);
    try {
      await client.put(`${name}/1234abcd`, '1'); // hex-looking and older than anyone: no lease
      const h = await new Semaphore(a!, name, { permits: 1 }).acquire();
      await h.release();
      const t = await new Semaphore(b!, name, { permits: 1 }).tryAcquire();
      assert.ok(t, 'tryAcquire looks past the stray key too');
      await t.release();
    } finally {
      await closeAll([a!, b!]);
      await client.delete(p, { prefix: true });
    }
  });

  it('a stray key ahead of the queue does not keep a waiter from the permit a release frees', { timeout: 60_000 }, async () => {
    const p = fresh('stray-behind');
    const name = `${p}sem`;
    const probe = probed();
    const [a, b] = await sessions(2);
    const [w] = await sessions(1, 600, probe.client); // its periodic re-check is 600 s away
    try {
      await client.put(`${name}/1234abcd`, '2'); // stray: no lease
      const h1 = await new Semaphore(a!, name, { permits: 2 }).acquire();
      const h2 = await new Semaphore(b!, name, { permits: 2 }).acquire(); // the stray takes no permit
      // Real participants ahead of w: h1 and h2, so it waits; once h1 releases, a permit is free for it.
      const waiting = track(new Semaphore(w!, name, { permits: 2 }).acquire());
      await probe.blocked(1);
      assert.equal(waiting.settled, false);
      await h1.release();
      const h = await settledOrHang(waiting, 'the waiter to take the permit h1 freed');
      await Promise.all([h.release(), h2.release()]);
    } finally {
      await closeAll([a!, b!, w!]);
      await probe.client.close();
      await client.delete(p, { prefix: true });
    }
  });
});
