// Mutex on a real 3-member etcd cluster while members die: holders keep their locks, waiters keep
// their places, and the queue still hands over in order.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, Mutex, Session, type LockHandle } from '../src/index.js';
import { startProxy, type EtcdCluster } from '../src/testing/index.js';
import { EventLog, assertNoKeys, clusterForFile, waitFor } from './helpers.js';

const ROOT = 'test/mutex-cluster/';
let etcd: EtcdCluster;
/** One client per member, each listing all three endpoints starting at a different member. */
let clients: Client[];
const fresh = clusterForFile(ROOT, (e, cs) => {
  etcd = e;
  clients = cs;
});

/** The members each client currently talks to (for the test's own diagnostics). */
const activeMembers = (): number[] => clients.map((c) => etcd.endpoints.indexOf(c.activeEndpoint));

/**
 * Holds a lock on one session and queues `waiters` more behind it, spread over the three clients,
 * each enqueued only after the previous one's key is in etcd (so the expected order is known).
 */
async function queue(name: string, waiters: number) {
  const ss = await Promise.all(Array.from({ length: waiters + 1 }, (_, i) => Session.create(clients[i % 3]!, { ttl: 10 })));
  const log = new EventLog(clients[1]!, `${name}/`);
  await log.ready;
  const holder = await new Mutex(ss[0]!, name).lock();
  const holderSignal = holder.signal; // start watching the key, so a spurious loss would show
  const order: number[] = [];
  const tokens: bigint[] = [];
  const created: bigint[] = [];
  const handles: Promise<LockHandle>[] = [];
  // Holders inside the critical section right now, the first holder included; each waiter holds
  // across a round trip, so that a second holder granted meanwhile is counted.
  let inside = 1;
  let maxInside = 1;
  for (let i = 1; i <= waiters; i++) {
    const m = new Mutex(ss[i]!, name);
    const from = log.events.length;
    const acquired = m.lock().then(async (h) => {
      inside++;
      maxInside = Math.max(maxInside, inside);
      order.push(i);
      tokens.push(h.fencingToken);
      h.assertHeld();
      await clients[i % 3]!.get(h.key);
      inside--;
      await h.unlock();
      return h;
    });
    acquired.catch(() => {}); // awaited by the test; this only keeps an early failure from being "unhandled"
    handles.push(acquired);
    created.push((await log.put(m.key, from)).createRevision);
  }
  /**
   * The first holder leaves the critical section and unlocks; then every waiter holds in turn, one
   * at a time, in the order they queued, with the fencing token of its key.
   */
  const handsOverInOrder = async (why = 'acquired in enqueue order'): Promise<void> => {
    inside--;
    await holder.unlock();
    await Promise.all(handles);
    assert.equal(maxInside, 1, 'one holder at a time, the first holder included');
    assert.deepEqual(
      order,
      Array.from({ length: waiters }, (_, i) => i + 1),
      why,
    );
    assert.deepEqual(tokens, created);
  };
  return { ss, log, holder, holderSignal, order, handsOverInOrder };
}

/** Resolves once `s` has renewed its lease after this call (its local deadline moved forward). */
async function renewedAfterNow(s: Session): Promise<void> {
  const start = s.remainingMs();
  await waitFor(() => s.signal.aborted || s.remainingMs() > start, `a renewal of lease ${s.leaseId.toString(16)}`);
  assert.equal(s.signal.aborted, false, `session ${s.leaseId.toString(16)} was lost: ${String(s.signal.reason)}`);
}

async function killDuringLock(victim: () => Promise<number>, label: string): Promise<void> {
  const p = fresh(label);
  const name = `${p}lock`;
  const waiters = 6;
  const q = await queue(name, waiters);
  let killed = -1;
  try {
    killed = await victim();
    await etcd.kill(killed);
    await etcd.leaderIndex(); // the survivors agree on a leader (a new one if the leader died)

    // Every session renews through a surviving member: the holder's and every waiter's.
    await Promise.all(q.ss.map(renewedAfterNow));
    assert.notEqual(clients[killed]!.activeEndpoint, etcd.endpoints[killed], 'the victim’s client failed over');
    assert.equal(q.holderSignal.aborted, false, `holder lost its lock: ${String(q.holderSignal.reason)}`);
    q.holder.assertHeld();
    assert.equal((await clients[(killed + 1) % 3]!.get(q.holder.key))?.createRevision, q.holder.fencingToken);
    assert.deepEqual(q.order, [], 'nobody acquired while the holder held the lock');

    // The queue still hands over in order.
    await q.handsOverInOrder(`acquired in enqueue order (clients on members ${activeMembers().join(',')})`);
  } finally {
    await q.log.close();
    await Promise.all(q.ss.map((s) => s.close()));
    if (killed >= 0) await etcd.restart(killed);
  }
  await assertNoKeys(clients[0]!, p);
}

describe('Mutex on a 3-member cluster', () => {
  it('killing the Raft leader: holders keep their locks, waiters get them in order', { timeout: 120_000 }, async () => {
    await killDuringLock(() => etcd.leaderIndex(), 'kill-leader');
  });

  it('killing a follower that clients talk to: holders keep their locks, waiters get them in order', { timeout: 120_000 }, async () => {
    await killDuringLock(async () => {
      const leader = await etcd.leaderIndex();
      return (leader + 1) % 3;
    }, 'kill-follower');
  });

  it('pausing the Raft leader (a hung member): holders keep their locks, waiters get them in order', { timeout: 120_000 }, async () => {
    const p = fresh('pause-leader');
    const name = `${p}lock`;
    const q = await queue(name, 4);
    let paused = -1;
    try {
      paused = await etcd.leaderIndex();
      etcd.pause(paused);
      await etcd.leaderIndex();
      await Promise.all(q.ss.map(renewedAfterNow));
      assert.equal(q.holderSignal.aborted, false, `holder lost its lock: ${String(q.holderSignal.reason)}`);
      q.holder.assertHeld();
      await q.handsOverInOrder();
    } finally {
      if (paused >= 0) etcd.resume(paused);
      await q.log.close();
      await Promise.all(q.ss.map((s) => s.close()));
    }
    await etcd.waitHealthy();
    await assertNoKeys(clients[0]!, p);
  });

  it('a member killed and restarted twice in a row: the queue survives both', { timeout: 120_000 }, async () => {
    const p = fresh('kill-twice');
    const name = `${p}lock`;
    const q = await queue(name, 4);
    try {
      for (let round = 0; round < 2; round++) {
        const victim = await etcd.leaderIndex();
        await etcd.kill(victim);
        await etcd.leaderIndex();
        await Promise.all(q.ss.map(renewedAfterNow));
        await etcd.restart(victim);
      }
      q.holder.assertHeld();
      await q.handsOverInOrder();
    } finally {
      await q.log.close();
      await Promise.all(q.ss.map((s) => s.close()));
    }
    await assertNoKeys(clients[0]!, p);
  });
});

describe('an enqueue attempt that lands late', () => {
  it('a key re-created after its release by a slow first attempt is swept: the next session still gets the lock', {
    timeout: 60_000,
  }, async () => {
    const name = `${fresh('late-enqueue')}lock`;
    // The leader is proxied: writes go to it (the client routes them there); an idempotent attempt
    // there gets 1 s before the call moves on, and the proxy holds every byte for 1.5 s each way: the
    // first attempt is still in flight when the retry on another member takes the key, and lands
    // after the key was released.
    const leader = await etcd.leaderIndex();
    await using proxy = await startProxy(etcd.endpoints[leader]!);
    const slow = new Client({
      endpoints: [proxy.endpoint, ...etcd.endpoints.filter((_, i) => i !== leader)],
      dialTimeoutMs: 1000,
      callTimeoutMs: 3000,
    });
    const s = await Session.create(slow, { ttl: 30 });
    const other = await Session.create(clients[1]!, { ttl: 30 });
    const log = new EventLog(clients[1]!, `${name}/`);
    try {
      await log.ready;
      await slow.get('warm-up'); // connected to the proxied member before the delay starts
      await waitFor(
        async () => (await slow.get('warm-up'), slow.conn.leaderTarget === proxy.endpoint),
        'the client routes writes to the proxied leader',
      );
      proxy.delay(1500);
      const m = new Mutex(s, name);
      const h = await m.lock();
      await h.unlock();
      const released = await log.deleted(m.key);
      proxy.delay(0);
      // The stale attempt lands: the key comes back on the live lease, and is swept.
      const back = await log.next((e) => e.type === 'put' && e.key === m.key && e.rev > released.rev, 0);
      assert.equal(back.lease, s.leaseId, 're-created on our lease');
      await log.next((e) => e.type === 'delete' && e.key === m.key && e.rev > back.rev, 0);
      // Nobody is blocked behind a ghost.
      const h2 = await new Mutex(other, name).lock({ signal: AbortSignal.timeout(20_000) });
      await h2.unlock();
    } finally {
      await log.close();
      await Promise.all([s.close(), other.close()]);
      await slow.close();
    }
  });
});
