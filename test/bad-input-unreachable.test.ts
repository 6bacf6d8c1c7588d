// Hostile surroundings against real etcd: endpoints that do not answer, a member without a leader,
// and giving up while etcd cannot be reached. Every test cleans up; `after` proves nothing is left
// (no key, no lease).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as delay } from 'node:timers/promises';
import { Client, InvalidArgumentError, type LockHandle, Mutex, Session, UnavailableError } from '../src/index.js';
import { startEtcd, startProxy, type EtcdCluster } from '../src/testing/index.js';
import { EventLog, assertNoKeys, grpcHandled, track, waitFor, within, etcdForFile, closedPort, openSessions, closeAll } from './helpers.js';

const ROOT = 'test/bad-input-unreachable/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

const sessions = (n: number, ttl = 30, on: Client = client): Promise<Session[]> => openSessions(on, n, ttl);

/** The rejection of a promise that must reject. */
async function rejection(p: Promise<unknown>): Promise<{ err: unknown }> {
  try {
    await p;
  } catch (err) {
    return { err };
  }
  throw new Error('expected a rejection');
}

/** The rejection of a read through a black hole (TCP accepted, nothing answers) with a 500 ms dial timeout, and its endpoint. */
async function blackHoleError(): Promise<{ err: unknown; endpoint: string }> {
  const proxy = await startProxy(etcd.endpoints[0]!);
  proxy.blackhole(true);
  const c = new Client({ endpoints: proxy.endpoint, dialTimeoutMs: 500 });
  try {
    return { ...(await rejection(c.get('k'))), endpoint: proxy.endpoint };
  } finally {
    await c.close();
    await proxy.close();
  }
}

describe('unreachable endpoints', () => {
  // The dial timeout is far above the test's own: only the refusal can end these calls in time.
  it('nothing listening: UnavailableError on the refusal, naming the endpoint and the cause', { timeout: 20_000 }, async () => {
    const port = await closedPort();
    const c = new Client({ endpoints: `127.0.0.1:${port}`, dialTimeoutMs: 60_000 });
    try {
      const { err } = await rejection(c.get('k'));
      assert.ok(err instanceof UnavailableError, String(err));
      assert.match(err.message, new RegExp(`127\\.0\\.0\\.1:${port}`));
      assert.match(err.message, /refused/);
      // Sessions and locks fail the same way, without hanging.
      await assert.rejects(Session.create(c, { ttl: 5 }), UnavailableError);
    } finally {
      await c.close();
    }
  });

  it('a black hole (TCP accepted, nothing ever answers): UnavailableError once the dial timeout passes, no hang', {
    timeout: 20_000,
  }, async () => {
    const { err, endpoint } = await blackHoleError();
    assert.ok(err instanceof UnavailableError, String(err));
    assert.match(err.message, new RegExp(endpoint.replaceAll('.', '\\.')));
    // The cause is the dial timeout, and the message says so (not a refusal, not the call's deadline).
    assert.match(err.message, /nothing answered within 500 ms/);
    assert.doesNotMatch(err.message, /refused/);
  });

  it('a black hole: the message says nothing answered (as for a hung or paused etcd), not to check TLS', {
    timeout: 20_000,
  }, async () => {
    const { err } = await blackHoleError();
    assert.match((err as Error).message, /no answer|not answer|timed? ?out|hung/i);
    assert.doesNotMatch((err as Error).message, /TLS|https/);
  });

  it('several endpoints, none reachable: one error that names them all', { timeout: 20_000 }, async () => {
    const ports = [await closedPort(), await closedPort(), await closedPort()];
    // Far above the test's timeout: each endpoint's refusal, not a dial timeout, ends the round.
    const c = new Client({ endpoints: ports.map((p) => `127.0.0.1:${p}`), dialTimeoutMs: 60_000 });
    try {
      const { err } = await rejection(c.get('k'));
      assert.ok(err instanceof UnavailableError, String(err));
      for (const p of ports) assert.match(err.message, new RegExp(`:${p}\\b`));
      assert.match(err.message, /refused/);
    } finally {
      await c.close();
    }
  });

  it('malformed endpoints are refused before dialling', () => {
    for (const e of ['', 'http://', 'ftp://h:1', '127.0.0.1:0', '127.0.0.1:99999', 'h:12ab', '::1:2379', 'h:1/path']) {
      assert.throws(() => new Client({ endpoints: e }), InvalidArgumentError, e);
    }
    assert.throws(() => new Client({ endpoints: ['http://a:1', 'https://b:1'] }), /mix http and https/);
    assert.throws(() => new Client({ dialTimeoutMs: 0 }), InvalidArgumentError);
    assert.throws(() => new Client({ callTimeoutMs: -5 }), InvalidArgumentError);
  });
});

describe('a member that answers but has no leader', () => {
  let cluster: EtcdCluster;
  let survivor: number;
  let onlySurvivor: Client;
  let noLeaderCheck: Client;

  before(async () => {
    cluster = await startEtcd({ members: 3 });
    const all = new Client({ endpoints: cluster.endpoints });
    try {
      await all.put('nl/k', 'v1');
      const leader = await cluster.leaderIndex();
      survivor = (leader + 1) % 3;
      // The survivor is frozen while the others move on: it holds v1, the cluster v2.
      cluster.pause(survivor);
      const others = new Client({ endpoints: cluster.endpoints.filter((_, i) => i !== survivor) });
      await others.put('nl/k', 'v2');
      await others.close();
      for (let i = 0; i < 3; i++) if (i !== survivor) await cluster.kill(i);
      cluster.resume(survivor);
    } finally {
      await all.close();
    }
    onlySurvivor = new Client({ endpoints: cluster.endpoints[survivor]!, callTimeoutMs: 3000 });
    // Status without hasleader, to see when the survivor has noticed that it has no leader.
    noLeaderCheck = new Client({ endpoints: cluster.endpoints[survivor]!, requireLeader: false });
    await waitFor(async () => (await noLeaderCheck.status()).leader === 0n, 'the survivor to lose its leader');
  });

  after(async () => {
    await onlySurvivor?.close();
    await noLeaderCheck?.close();
    await cluster?.stop();
  });

  it('refuses reads instead of serving its stale copy (hasleader)', { timeout: 30_000 }, async () => {
    const { err } = await rejection(onlySurvivor.get('nl/k'));
    assert.ok(err instanceof UnavailableError, String(err));
    assert.doesNotMatch(String(err), /v1/);
    // Ended by the member's refusal (no leader), not by the call's deadline.
    assert.match(err.message, /no (Raft )?leader/);
  });

  it('refuses to grant a session (so no lock can be taken there), saying there is no leader', { timeout: 30_000 }, async () => {
    const { err } = await rejection(Session.create(onlySurvivor, { ttl: 5 }));
    assert.ok(err instanceof UnavailableError, `expected UnavailableError, got ${String(err)}`);
    assert.match((err as Error).message, /no (Raft )?leader/);
    // Nothing was granted: the survivor still knows of no lease (read without hasleader).
    assert.deepEqual(await noLeaderCheck.leaseLeases(), []);
  });

  it('the error says there is no leader and what to check (not just "deadline")', { timeout: 30_000 }, async () => {
    const { err } = await rejection(onlySurvivor.get('nl/k'));
    assert.ok(err instanceof UnavailableError, `expected UnavailableError, got ${String(err)}`);
    assert.match((err as Error).message, /no (Raft )?leader/);
    assert.match((err as Error).message, /quorum|majority/);
  });
});

describe('giving up while etcd cannot be reached', () => {
  /** A holder on the direct client, a waiter `b` behind a proxy, a third session `c`, and a log of the lock's keys. */
  async function outageSetup(scope: string) {
    const p = fresh(scope);
    const name = `${p}lock`;
    const proxy = await startProxy(etcd.endpoints[0]!);
    const far = new Client({ endpoints: proxy.endpoint });
    const [a, c] = await sessions(2);
    const [b] = await sessions(1, 60, far); // outlives the outage by far
    const log = new EventLog(client, `${name}/`);
    await log.ready;
    const held = await new Mutex(a!, name).lock();
    const outage = (): void => {
      proxy.refuse(true); // connections reset, new ones refused: etcd is unreachable for b
      proxy.cut();
    };
    const cleanup = async (): Promise<void> => {
      proxy.refuse(false);
      proxy.delay(0);
      await log.close();
      await closeAll([a, b, c]);
      await far.close();
      await proxy.close();
      await assertNoKeys(client, p);
    };
    /** The lock moves on: `c` gets it within 5 s (a queued key left behind would block it). */
    const cGetsTheLock = async (): Promise<void> => {
      const hc = await new Mutex(c!, name).lock({ signal: AbortSignal.timeout(5000) }).catch((e: unknown) => e);
      const queued = (await client.getPrefix(`${name}/`)).kvs.map((kv) => kv.key.toString());
      assert.ok(!(hc instanceof Error), `c never got the lock: ${String(hc)}; queued: ${queued.join(', ')}`);
      await (hc as LockHandle).unlock();
    };
    return { name, proxy, b: b!, log, held, outage, cleanup, cGetsTheLock };
  }

  it('a waiter aborted during an outage takes its key back once etcd answers again, and the lock moves on', {
    timeout: 60_000,
  }, async () => {
    const t = await outageSetup('abort-outage');
    try {
      const mb = new Mutex(t.b, t.name);
      const txns = await grpcHandled(etcd.clientUrls[0]!, 'Txn');
      const ac = new AbortController();
      const wb = mb.lock({ signal: ac.signal });
      wb.catch(() => {});
      await waitFor(async () => (await grpcHandled(etcd.clientUrls[0]!, 'Txn')) >= txns + 2, 'the waiter to block on its predecessor');
      t.outage();
      const reason = new Error('give up');
      ac.abort(reason);
      t.proxy.refuse(false);
      await assert.rejects(wb, (e) => e === reason);
      await t.held.unlock();
      await t.cGetsTheLock();
    } finally {
      await t.cleanup();
    }
  });

  it('an abort during an outage settles at once; the key is taken back in the background', {
    timeout: 60_000,
  }, async () => {
    const t = await outageSetup('abort-outage-prompt');
    try {
      const mb = new Mutex(t.b, t.name);
      const txns = await grpcHandled(etcd.clientUrls[0]!, 'Txn');
      const ac = new AbortController();
      const wb = track(mb.lock({ signal: ac.signal }));
      wb.promise.catch(() => {});
      await waitFor(async () => (await grpcHandled(etcd.clientUrls[0]!, 'Txn')) >= txns + 2, 'the waiter to block on its predecessor');
      t.outage();
      ac.abort(new Error('give up'));
      const settledInTime = await Promise.race([
        wb.promise.then(
          () => true,
          () => true,
        ),
        delay(2000).then(() => false),
      ]);
      t.proxy.refuse(false);
      await wb.promise.catch(() => {});
      // Taken back in the background once etcd answers again: its key is deleted while the holder
      // still holds (so not by the queue moving on).
      await within(t.log.deleted(mb.key), "b's key to be taken back", 20_000);
      assert.equal(await client.get(mb.key), undefined);
      assert.ok(await client.get(t.held.key), 'the holder still holds');
      await t.held.unlock();
      await t.cGetsTheLock();
      assert.ok(settledInTime, 'lock() was still pending 2 s after its signal aborted');
    } finally {
      await t.cleanup();
    }
  });

  it('an enqueue that committed but whose answer was lost in an outage leaves no key queued', {
    timeout: 60_000,
  }, async () => {
    const t = await outageSetup('enqueue-outage');
    try {
      const mb = new Mutex(t.b, t.name);
      t.proxy.delay(500); // the answer trails the commit by half a second
      const wb = mb.lock();
      wb.catch(() => {});
      await t.log.put(mb.key); // committed; the answer is still in the proxy
      t.outage(); // ... and now it is lost, and the retry cannot connect
      const err = await wb.then(
        (h) => h,
        (e: unknown) => e,
      );
      t.proxy.refuse(false);
      t.proxy.delay(0);
      if (!(err instanceof Error)) await (err as LockHandle).unlock();
      // No key queued: b's committed key is deleted (by its unlock, or taken back after the error)
      // while the holder still holds.
      await within(t.log.deleted(mb.key), "b's committed key to be deleted", 20_000);
      assert.equal(await client.get(mb.key), undefined);
      assert.ok(await client.get(t.held.key), 'the holder still holds');
      await t.held.unlock();
      await t.cGetsTheLock();
    } finally {
      await t.cleanup();
    }
  });
});
