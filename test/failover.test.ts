// The claims of docs/tuning.md about moving between endpoints, on real etcd:
// - callTimeoutMs is the budget of one call *including* failover retries: a retryable call that meets
//   a member which stopped answering mid-call moves on within that budget (each attempt gets a share
//   of it), and the whole round over hung members ends when the budget does;
// - hasleader: a member cut off from quorum refuses, and the client moves to another endpoint instead
//   of trusting it (a write lands elsewhere, a read never returns its stale copy).
// Connecting to an endpoint that never answers (dialTimeoutMs, then the next endpoint) is covered by
// test/client-timeouts.test.ts; here the members answered once and then stopped.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client, DeadlineExceededError, Mutex, Session, UnavailableError } from '../src/index.js';
import { resolveEtcd, startEtcd, startProxy, type EtcdCluster, type TcpProxy } from '../src/testing/index.js';
import { netnsAvailable, startNetnsCluster, type NetnsCluster } from '../chaos/netns.js';
import { etcdForFile, waitFor } from './helpers.js';

const ROOT = 'test/failover/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

/** Proxies in front of the file's etcd: each one an "endpoint" that can be hung independently. */
async function proxies(n: number): Promise<{ list: TcpProxy[] } & AsyncDisposable> {
  const list = await Promise.all(Array.from({ length: n }, () => startProxy(etcd.endpoints[0]!)));
  return { list, [Symbol.asyncDispose]: async () => void (await Promise.all(list.map((p) => p.close()))) };
}

describe('callTimeoutMs covers failover retries across several endpoints', () => {
  it('a member that stops answering mid-call costs a share of the budget, not all of it: the call succeeds on the third endpoint', {
    timeout: 30_000,
  }, async () => {
    const p = fresh('share');
    await client.put(`${p}k`, 'v');
    await using eps = await proxies(3);
    const [a, b, c] = eps.list as [TcpProxy, TcpProxy, TcpProxy];
    // Each retryable attempt gets max(dialTimeoutMs, callTimeoutMs / 3) = 2 s of the 6 s budget.
    await using far = new Client({ endpoints: eps.list.map((x) => x.endpoint), dialTimeoutMs: 1000, callTimeoutMs: 6000 });
    assert.equal((await far.get(`${p}k`))?.value.toString(), 'v');
    assert.equal(far.activeEndpoint, a.endpoint);
    // A stops answering on its open connection (a paused member); B accepts TCP and never answers.
    a.blackhole(true);
    b.blackhole(true);
    // An attempt that kept the whole budget would spend it on A and fail with DeadlineExceededError.
    const kv = await far.get(`${p}k`);
    assert.equal(kv?.value.toString(), 'v');
    assert.equal(far.activeEndpoint, c.endpoint, 'served by the third endpoint');
    assert.ok(b.accepted > 0, 'B was tried on the way');
    await client.delete(`${p}k`);
  });

  it('every member hung: the round of retries ends with the budget, a DeadlineExceededError after trying each one', {
    timeout: 30_000,
  }, async () => {
    await using eps = await proxies(3);
    const [, b, c] = eps.list as [TcpProxy, TcpProxy, TcpProxy];
    await using far = new Client({ endpoints: eps.list.map((x) => x.endpoint), dialTimeoutMs: 1000, callTimeoutMs: 6000 });
    await far.get('warm-up'); // connected to A
    for (const x of eps.list) x.blackhole(true);
    // Retries that each got a fresh budget would go round the three members for ever (until the
    // test's timeout, its hang guard).
    await assert.rejects(far.get('k'), (err: unknown) => {
      assert.ok(err instanceof DeadlineExceededError, `the call's budget ended it: ${String(err)}`);
      return true;
    });
    assert.ok(b.accepted > 0 && c.accepted > 0, `failed over to every member (B ${b.accepted}, C ${c.accepted} connections accepted)`);
  });
});

const netns = await netnsAvailable();

/**
 * A budget for reads that only a refusal can move on from in time: the attempt's share of it
 * (callTimeoutMs / 3) is 20 s, far above etcd's own timeout for a read on a member without a leader
 * (7 s), so a read that the cut-off member held instead of refusing would end on a timeout there.
 */
const READ_BUDGET = { dialTimeoutMs: 1000, callTimeoutMs: 60_000 };

/**
 * `endpoint`, alone in a client's list, refuses a read at once with etcd's "no leader" (hasleader)
 * instead of holding it: the client gives up on it after a couple of seconds of such refusals, saying
 * the cluster has no leader. Had the member held the read, it would have ended on etcd's "request
 * timed out" or on this budget (15 s, above etcd's 7 s), with another message.
 */
async function assertRefusesReads(endpoint: string, key: string): Promise<void> {
  await using alone = new Client({ endpoints: endpoint, dialTimeoutMs: 1000, callTimeoutMs: 15_000 });
  await assert.rejects(alone.get(key), (err: unknown) => {
    assert.ok(err instanceof UnavailableError, `refused as leaderless: ${String(err)}`);
    assert.match(err.message, /etcd has no Raft leader/);
    assert.match(String((err.cause as { details?: string } | undefined)?.details), /^etcdserver: no leader$/, "etcd's own refusal");
    return true;
  });
}

describe('hasleader: a member partitioned from the other two (network namespaces)', {
  skip: !netns.ok && `needs network namespaces (${netns.why})`,
}, () => {
  // Three members in their own network namespaces (chaos/netns.ts): the partition cuts one member's
  // Raft traffic to the others while clients still reach it, as a client on the minority side would.
  let dir: string;
  let cluster: NetnsCluster;
  /** The isolated member first, then the two on the majority side. */
  let endpoints: string[];
  /** The isolated member's own view, without hasleader (Status needs no leader). */
  let ownView: Client;
  let majority: Client;
  const key = `${ROOT}partition/k`;

  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'etcd-concurrency-failover-'));
    // The namespaces run `etcd` from PATH (chaos/netns.ts leaves out the ETCD_* variables, which
    // etcd reads as flags): put the version the other tests run first on PATH while the members start.
    const { etcd: binary } = await resolveEtcd();
    const savedPath = process.env.PATH;
    process.env.PATH = `${path.dirname(binary)}${path.delimiter}${savedPath ?? ''}`;
    try {
      cluster = await startNetnsCluster(dir);
    } finally {
      if (savedPath === undefined) delete process.env.PATH;
      else process.env.PATH = savedPath;
    }
    const all = new Client({ endpoints: cluster.endpoints });
    try {
      await all.put(key, 'before');
    } finally {
      await all.close();
    }
    const isolated = ((await cluster.leaderIndex()) + 1) % 3;
    endpoints = [isolated, ...[0, 1, 2].filter((i) => i !== isolated)].map((i) => cluster.endpoints[i]!);
    await cluster.partition(isolated);
    ownView = new Client({ endpoints: endpoints[0]!, requireLeader: false });
    await waitFor(async () => (await ownView.status()).leader === 0n, 'the isolated member to lose its leader');
    majority = new Client({ endpoints: endpoints.slice(1) });
    await majority.put(key, 'after'); // the isolated member's copy is now stale
  });

  after(async () => {
    await ownView?.close();
    await majority?.close();
    await cluster?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('a write goes to the majority: the isolated member refused it before applying anything', { timeout: 30_000 }, async () => {
    await using c = new Client({ endpoints, dialTimeoutMs: 1000, callTimeoutMs: 5000 });
    const before = (await ownView.status()).header.revision;
    // A put is not retried when its outcome is unknown: only a refusal proving nothing was applied
    // ("no leader", thanks to hasleader) lets it move on. Without hasleader the isolated member
    // would hold the proposal and fail it ambiguously (WriteOutcomeUnknownError).
    await c.put(key, 'moved');
    assert.notEqual(c.activeEndpoint, endpoints[0], 'moved away from the isolated member');
    assert.equal((await majority.get(key))?.value.toString(), 'moved');
    assert.equal((await ownView.status()).header.revision, before, 'nothing was applied on the isolated member');
    // A lock taken through this client lives on the majority side.
    const s = await Session.create(c, { ttl: 10 });
    try {
      const h = await new Mutex(s, `${ROOT}partition/lock`).lock();
      assert.equal((await majority.get(h.key))?.createRevision, h.fencingToken);
      await h.unlock();
    } finally {
      await s.close();
    }
    assert.deepEqual(await majority.leaseLeases(), [], 'nothing left on the majority side');
  });

  it('a read is refused there at once (not left to time out) and answered by the majority, never with the stale copy', {
    timeout: 30_000,
  }, async () => {
    await assertRefusesReads(endpoints[0]!, key);
    await using c = new Client({ endpoints, ...READ_BUDGET });
    const kv = await c.get(key);
    assert.ok(kv?.value.toString() === 'after' || kv?.value.toString() === 'moved', `the majority's value, got ${kv?.value.toString()}`);
    assert.notEqual(c.activeEndpoint, endpoints[0]);
  });
});

describe('hasleader, where namespaces are not available too: a leaderless member next to one with a leader', () => {
  // A three-member cluster whose other two members are gone: the survivor still runs and answers,
  // holds a stale copy of the data, and has no leader. Next to it in the client's endpoint list:
  // a member that has a leader (the file's single-member etcd, standing in for the majority side).
  let cluster: EtcdCluster;
  let survivor: string;
  let survivorRevision: () => Promise<bigint>;
  let noHasleader: Client;
  const key = `${ROOT}hasleader/k`;

  before(async () => {
    cluster = await startEtcd({ members: 3 });
    const all = new Client({ endpoints: cluster.endpoints });
    try {
      await all.put(key, 'stale');
      const s = ((await cluster.leaderIndex()) + 1) % 3;
      survivor = cluster.endpoints[s]!;
      for (let i = 0; i < 3; i++) if (i !== s) await cluster.kill(i);
    } finally {
      await all.close();
    }
    // Without hasleader, to see the survivor's own view (Status needs no leader).
    noHasleader = new Client({ endpoints: survivor, requireLeader: false });
    await waitFor(async () => (await noHasleader.status()).leader === 0n, 'the survivor to lose its leader');
    survivorRevision = async () => (await noHasleader.status()).header.revision;
  });

  after(async () => {
    await noHasleader?.close();
    await cluster?.stop();
  });

  it('a write goes to the member with a leader: the cut-off one refused it before applying anything', { timeout: 30_000 }, async () => {
    const before = await survivorRevision();
    await using c = new Client({ endpoints: [survivor, etcd.endpoints[0]!], dialTimeoutMs: 1000, callTimeoutMs: 5000 });
    await c.put(key, 'fresh');
    assert.equal(c.activeEndpoint, etcd.endpoints[0], 'moved away from the survivor');
    assert.equal((await client.get(key))?.value.toString(), 'fresh', 'the write landed on the member with a leader');
    assert.equal(await survivorRevision(), before, 'nothing was applied on the survivor');
    await client.delete(key);
  });

  it('a read is refused there at once (not left to time out) and answered by the member with a leader', { timeout: 30_000 }, async () => {
    await assertRefusesReads(survivor, key);
    await client.put(key, 'current');
    try {
      await using c = new Client({ endpoints: [survivor, etcd.endpoints[0]!], ...READ_BUDGET });
      assert.equal((await c.get(key))?.value.toString(), 'current', 'never the stale copy');
      assert.equal(c.activeEndpoint, etcd.endpoints[0]);
    } finally {
      await client.delete(key);
    }
  });
});
