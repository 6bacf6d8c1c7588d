// The recipes on a real 3-member cluster with a member killed mid-wait (Curator's
// testAcquireAfterLostServer, etcd's TestDoubleBarrierFailover): the waiter, blocked on its watch on
// the member that dies (or behind the Raft leader that dies), still acquires or passes once its turn
// comes, and nothing is left behind. Then Barrier and DoubleBarrier waiters through a watch stream
// that breaks, and through a compaction of the history their watch would resume from.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Barrier, Client, DoubleBarrier, Election, Mutex, Semaphore, Session } from '../src/index.js';
import { startProxy, type EtcdCluster, type TcpProxy } from '../src/testing/index.js';
import { assertNoKeys, clusterForFile, serverState, track, type Tracked, waitFor, waitersBlocked } from './helpers.js';

const ROOT = 'test/recipes-cluster/';
let etcd: EtcdCluster;
/** One client per member, each listing all three endpoints starting at its own member. */
let clients: Client[];
const fresh = clusterForFile(ROOT, async (e, cs) => {
  etcd = e;
  clients = cs;
  // Each client connected before the tests: waiterMember() reads client 1's active endpoint.
  await Promise.all(clients.map((c) => c.get('warm-up')));
});

/** Which member to kill once the waiter is blocked: the waiter's own (client 1's) or the Raft leader. */
type Victim = 'waiter-member' | 'leader';
const VICTIMS: Victim[] = ['waiter-member', 'leader'];

/** The member the waiters' client (client 1) talks to now: after a kill it stays where it failed over to. */
const waiterMember = (): number => etcd.endpoints.indexOf(clients[1]!.activeEndpoint);

/** Kills `victim` and waits for the survivors to agree on a leader; returns the member. */
async function kill(victim: Victim): Promise<number> {
  const m = victim === 'leader' ? await etcd.leaderIndex() : waiterMember();
  await etcd.kill(m);
  await etcd.leaderIndex();
  return m;
}

/** Watchers open now on the waiters' member: the base for blocked(). */
const watchers1 = async (): Promise<number> => (await serverState(etcd.clientUrls[waiterMember()]!)).watchers;

/** One more waiter than `base` blocked on its watch on the waiters' member. */
const blocked = (base: number): Promise<void> => waitersBlocked(etcd.clientUrls[waiterMember()]!, base, 1);

/** Runs `body` with member `killed` restarted afterwards, and checks that nothing is left under `prefix`. */
async function thenRestart(prefix: string, body: (killed: (m: number) => void) => Promise<void>): Promise<void> {
  let victim = -1;
  try {
    await body((m) => (victim = m));
  } finally {
    if (victim >= 0) await etcd.restart(victim);
  }
  await etcd.waitHealthy();
  await assertNoKeys(clients[0]!, prefix);
}

for (const victim of VICTIMS) {
  describe(`a waiter through a kill of the ${victim === 'leader' ? 'Raft leader' : "waiter's own member"}`, () => {
    it('Mutex: the waiter acquires after the holder unlocks', { timeout: 120_000 }, async () => {
      const p = fresh(`mutex-${victim}`);
      await thenRestart(p, async (killed) => {
        await using holderSession = await Session.create(clients[0]!, { ttl: 10 });
        await using waiterSession = await Session.create(clients[1]!, { ttl: 10 });
        const holder = await new Mutex(holderSession, `${p}lock`).lock();
        const base = await watchers1();
        const waiter = track(new Mutex(waiterSession, `${p}lock`).lock());
        await blocked(base);
        killed(await kill(victim));
        assert.equal(waiter.settled, false, 'the waiter waits while the holder holds');
        await holder.unlock();
        const h = await waiter.promise;
        assert.ok(h.fencingToken > holder.fencingToken);
        h.assertHeld();
        await h.unlock();
      });
    });

    it('Election: the waiting candidate leads after the leader resigns', { timeout: 120_000 }, async () => {
      const p = fresh(`election-${victim}`);
      await thenRestart(p, async (killed) => {
        await using leaderSession = await Session.create(clients[0]!, { ttl: 10 });
        await using candidateSession = await Session.create(clients[1]!, { ttl: 10 });
        const leader = await new Election(leaderSession, `${p}elect`).campaign('first');
        const base = await watchers1();
        const candidate = track(new Election(candidateSession, `${p}elect`).campaign('second'));
        await blocked(base);
        killed(await kill(victim));
        assert.equal(candidate.settled, false, 'the candidate waits while the leader leads');
        await leader.resign();
        const next = await candidate.promise;
        assert.ok(next.fencingToken > leader.fencingToken);
        assert.equal((await new Election(leaderSession, `${p}elect`).leader())?.value.toString(), 'second');
        await next.resign();
      });
    });

    it('Semaphore: the third waiter gets a permit once one of two is released', { timeout: 120_000 }, async () => {
      const p = fresh(`semaphore-${victim}`);
      await thenRestart(p, async (killed) => {
        await using a = await Session.create(clients[0]!, { ttl: 10 });
        await using b = await Session.create(clients[2]!, { ttl: 10 });
        await using c = await Session.create(clients[1]!, { ttl: 10 });
        const sem = (s: Session): Semaphore => new Semaphore(s, `${p}sem`, { permits: 2 });
        const first = await sem(a).acquire();
        const second = await sem(b).acquire();
        const base = await watchers1();
        const third = track(sem(c).acquire());
        await blocked(base);
        killed(await kill(victim));
        assert.equal(third.settled, false, 'no third permit while two are held');
        await first.release();
        const permit = await third.promise;
        permit.assertHeld();
        second.assertHeld();
        await Promise.all([permit.release(), second.release()]);
      });
    });

    it('Barrier: the waiter passes once the barrier is released', { timeout: 120_000 }, async () => {
      const p = fresh(`barrier-${victim}`);
      await thenRestart(p, async (killed) => {
        const gate = new Barrier(clients[0]!, `${p}gate`);
        await gate.hold();
        try {
          const base = await watchers1();
          const waiter = track(new Barrier(clients[1]!, `${p}gate`).wait());
          await blocked(base);
          killed(await kill(victim));
          // Still held after the failover: the waiter must not pass on the broken watch alone.
          const other = new Barrier(clients[2]!, `${p}gate`);
          await other.hold(); // a no-op on a held barrier; a round trip through the new leader
          assert.equal(waiter.settled, false, 'the waiter waits while the barrier is held');
          await gate.release();
          await waiter.promise;
        } finally {
          await gate.release();
        }
      });
    });

    it('DoubleBarrier: enter returns once the third member arrives, leave once all left', { timeout: 120_000 }, async () => {
      const p = fresh(`dbarrier-${victim}`);
      await thenRestart(p, async (killed) => {
        await using s0 = await Session.create(clients[0]!, { ttl: 10 });
        await using s1 = await Session.create(clients[1]!, { ttl: 10 });
        await using s2 = await Session.create(clients[2]!, { ttl: 10 });
        const [b0, b1, b2] = [s0, s1, s2].map((s) => new DoubleBarrier(s, `${p}db`, 3));
        const base = await watchers1();
        const in1 = track(b1!.enter());
        await blocked(base);
        const in0 = track(b0!.enter());
        await waitFor(async () => (await clients[0]!.getPrefix(`${p}db/waiters/`)).kvs.length === 2, 'two members in');
        killed(await kill(victim));
        assert.equal(in1.settled || in0.settled, false, 'nobody enters before the third member');
        await b2!.enter();
        await Promise.all([in0.promise, in1.promise]);
        // Leave, with member 1's etcd member still dead (or just back): nobody leaves before the last one.
        const out1 = track(b1!.leave());
        const out0 = track(b0!.leave());
        // Go's protocol: the oldest member (b1) keeps its key until the others are gone; b0's goes now.
        await waitFor(async () => (await clients[0]!.getPrefix(`${p}db/waiters/`)).kvs.length === 2, "b0's key gone");
        assert.equal(out1.settled || out0.settled, false, 'nobody leaves before the last member');
        await b2!.leave();
        await Promise.all([out0.promise, out1.promise]);
      });
    });
  });
}

/** What {@link withFarWaiter} hands a test. */
interface FarWaiter {
  p: string;
  /** The proxy between the waiter's client and member 1. */
  proxy: TcpProxy;
  /** The Barrier, held through client 0. */
  gate: Barrier;
  /** The waiter, through the proxy, blocked on its watch on member 1. */
  waiter: Tracked<void>;
  /** Member 1's watchers before the waiter: the base for waitersBlocked. */
  base: number;
}

/**
 * Runs `body` with a Barrier held and a waiter on it, through a proxy to member 1, blocked on its
 * watch; then checks that nothing is left under the test's prefix.
 */
async function withFarWaiter(scope: string, body: (t: FarWaiter) => Promise<void>): Promise<void> {
  const p = fresh(scope);
  await using proxy = await startProxy(etcd.endpoints[1]!);
  await using far = new Client({ endpoints: [proxy.endpoint] });
  const gate = new Barrier(clients[0]!, `${p}gate`);
  await gate.hold();
  const base = (await serverState(etcd.clientUrls[1]!)).watchers;
  const waiter = track(new Barrier(far, `${p}gate`).wait());
  await waitersBlocked(etcd.clientUrls[1]!, base, 1);
  await body({ p, proxy, gate, waiter, base });
  await assertNoKeys(clients[0]!, p);
}

describe('barrier waiters through a broken watch stream and a compaction', () => {
  it('Barrier: a waiter whose watch stream is reset passes once, and only once, the barrier is released', { timeout: 60_000 }, () =>
    withFarWaiter('barrier-cut', async ({ proxy, gate, waiter, base }) => {
      const dialled = proxy.accepted;
      proxy.cut();
      // The watch is back (a new stream on a new connection), the barrier still held: still waiting.
      await waitFor(() => proxy.accepted > dialled, 'the client to dial again');
      await waitersBlocked(etcd.clientUrls[1]!, base, 1, 'the waiter watching again after the reset');
      assert.equal(waiter.settled, false, 'a broken stream is not a release');
      await gate.release();
      await waiter.promise;
    }),
  );

  it('Barrier: released while the waiter is cut off and the history compacted past its watch: it passes', { timeout: 60_000 }, () =>
    withFarWaiter('barrier-compact', async ({ p, proxy, gate, waiter }) => {
      proxy.blackhole(true);
      await gate.release();
      await clients[0]!.put(`${p}filler`, 'x');
      const rev = (await clients[0]!.getPrefix(p)).header.revision;
      await clients[0]!.compact(rev);
      proxy.cut(); // the waiter's watch resumes from a compacted revision on a new connection
      proxy.blackhole(false);
      await waiter.promise;
      await clients[0]!.delete(`${p}filler`);
    }),
  );

  it(
    'Barrier: released and held again while the waiter is cut off and the history compacted: it waits for the new hold',
    { timeout: 60_000 },
    () =>
      withFarWaiter('barrier-compact-again', async ({ p, proxy, gate, waiter, base }) => {
        proxy.blackhole(true);
        await gate.release();
        await gate.hold();
        await clients[0]!.compact((await clients[0]!.getPrefix(p)).header.revision);
        const dialled = proxy.accepted;
        proxy.cut();
        proxy.blackhole(false);
        await waitFor(() => proxy.accepted > dialled, 'the client to dial again');
        // The release fell into the compacted history: what is left to see is a held barrier.
        await waitersBlocked(etcd.clientUrls[1]!, base, 1, 'the waiter watching the new hold');
        assert.equal(waiter.settled, false, 'a held barrier is waited for');
        await gate.release();
        await waiter.promise;
      }),
  );

  it('DoubleBarrier: the ready put lands while a member is cut off and compacted away: it enters', { timeout: 60_000 }, async () => {
    const p = fresh('dbarrier-compact');
    await using proxy = await startProxy(etcd.endpoints[1]!);
    await using far = new Client({ endpoints: [proxy.endpoint] });
    await using s1 = await Session.create(far, { ttl: 10 });
    await using s0 = await Session.create(clients[0]!, { ttl: 10 });
    const b1 = new DoubleBarrier(s1, `${p}db`, 2);
    const b0 = new DoubleBarrier(s0, `${p}db`, 2);
    const base = (await serverState(etcd.clientUrls[1]!)).watchers;
    const in1 = track(b1.enter());
    await waitersBlocked(etcd.clientUrls[1]!, base, 1);
    proxy.blackhole(true);
    await b0.enter(); // completes the count: ready is put while member 1's watch hears nothing
    await clients[0]!.compact((await clients[0]!.getPrefix(p)).header.revision);
    proxy.cut();
    proxy.blackhole(false);
    await in1.promise;
    await Promise.all([b0.leave(), b1.leave()]);
    await assertNoKeys(clients[0]!, p);
  });
});
