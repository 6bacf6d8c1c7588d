// The etcd client against a real single-member etcd: key-value, transactions, leases, members and
// status (failures: client-failures.test.ts; watches: client-watch.test.ts). Each test works under
// its own prefix and removes what it wrote.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import {
  Client,
  DeadlineExceededError,
  EtcdError,
  InvalidArgumentError,
  LeaseNotFoundError,
  UnavailableError,
  compare,
  op,
} from '../src/index.js';
import { startProxy, type EtcdCluster } from '../src/testing/index.js';
import { assertNoKeys, etcdForFile, closedPort } from './helpers.js';

const ROOT = 'test/client/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

const cleanup = (prefix: string): Promise<bigint> => client.delete(prefix, { prefix: true });

describe('key-value', () => {
  it('put then get round-trips bytes and reports int64 revisions as bigint', async () => {
    const p = fresh('put-get');
    const h = await client.put(`${p}k`, 'v1');
    assert.equal(typeof h.revision, 'bigint');
    assert.ok(h.revision > 0n);
    const kv = await client.get(`${p}k`);
    assert.ok(kv);
    assert.equal(kv.key.toString(), `${p}k`);
    assert.equal(kv.value.toString(), 'v1');
    assert.equal(kv.createRevision, h.revision);
    assert.equal(kv.modRevision, h.revision);
    assert.equal(kv.version, 1n);
    assert.equal(kv.lease, 0n);
    await cleanup(p);
  });

  it('a second put keeps CreateRevision and bumps ModRevision and Version', async () => {
    const p = fresh('put-twice');
    const h1 = await client.put(`${p}k`, 'a');
    const h2 = await client.put(`${p}k`, 'b');
    assert.ok(h2.revision > h1.revision);
    const kv = await client.get(`${p}k`);
    assert.equal(kv?.createRevision, h1.revision);
    assert.equal(kv?.modRevision, h2.revision);
    assert.equal(kv?.version, 2n);
    await cleanup(p);
  });

  it('accepts Buffer and Uint8Array keys and values, including non-UTF-8 bytes', async () => {
    const p = fresh('bytes');
    const key = Buffer.concat([Buffer.from(p), Buffer.from([0xff, 0x00, 0x01])]);
    const value = new Uint8Array([0, 0xfe, 0xff]);
    await client.put(key, value);
    const kv = await client.get(new Uint8Array(key));
    assert.deepEqual(kv?.key, key);
    assert.deepEqual([...kv!.value], [0, 0xfe, 0xff]);
    await cleanup(p);
  });

  it('get of a missing key resolves undefined', async () => {
    assert.equal(await client.get(`${fresh('missing')}nothing`), undefined);
  });

  it('get at a past revision returns the value as it was then', async () => {
    const p = fresh('past');
    const h1 = await client.put(`${p}k`, 'old');
    await client.put(`${p}k`, 'new');
    assert.equal((await client.get(`${p}k`, { revision: h1.revision }))?.value.toString(), 'old');
    assert.equal((await client.get(`${p}k`))?.value.toString(), 'new');
    await cleanup(p);
  });

  it('getPrefix returns exactly the keys under the prefix, in key order', async () => {
    const p = fresh('prefix');
    await client.put(`${p}a/2`, '');
    await client.put(`${p}a/1`, '');
    await client.put(`${p}a`, ''); // the prefix itself without its slash: not under "a/"
    await client.put(`${p}a0`, ''); // the byte after "/"
    await client.put(`${p}b/1`, '');
    const r = await client.getPrefix(`${p}a/`);
    assert.deepEqual(
      r.kvs.map((kv) => kv.key.toString()),
      [`${p}a/1`, `${p}a/2`],
    );
    assert.equal(r.count, 2n);
    assert.equal(r.more, false);
    await cleanup(p);
  });

  it('getPrefix with a limit reports more and the full count', async () => {
    const p = fresh('limit');
    for (const k of ['1', '2', '3']) await client.put(`${p}${k}`, '');
    const r = await client.getPrefix(p, { limit: 2 });
    assert.deepEqual(
      r.kvs.map((kv) => kv.key.toString().slice(p.length)),
      ['1', '2'],
    );
    assert.equal(r.more, true);
    assert.equal(r.count, 3n);
    await cleanup(p);
  });

  it('delete returns how many keys went; with prefix, every key under it', async () => {
    const p = fresh('delete');
    for (const k of ['a', 'b', 'c']) await client.put(`${p}${k}`, '');
    assert.equal(await client.delete(`${p}a`), 1n);
    assert.equal(await client.delete(`${p}a`), 0n);
    assert.equal(await client.delete(p, { prefix: true }), 2n);
    await assertNoKeys(client, p);
  });
});

describe('txn and compare builders', () => {
  it('createRevision = 0 creates only if absent: success then failure branch', async () => {
    const p = fresh('txn-create');
    const key = `${p}k`;
    const req = {
      compare: [compare.createRevision(key, '=', 0n)],
      success: [op.put(key, 'first')],
      failure: [op.get(key)],
    };
    const t1 = await client.txn(req);
    assert.equal(t1.succeeded, true);
    assert.ok(t1.responses[0]?.responsePut);
    const t2 = await client.txn(req);
    assert.equal(t2.succeeded, false);
    const kv = t2.responses[0]?.responseRange?.kvs?.[0];
    assert.equal(kv?.value?.toString(), 'first');
    assert.equal(kv?.createRevision, t1.header.revision);
    await cleanup(p);
  });

  it('createRevision = rev guards on the incarnation, not the name', async () => {
    const p = fresh('txn-incarnation');
    const key = `${p}k`;
    const rev = (await client.put(key, '')).revision;
    const guard = { compare: [compare.createRevision(key, '=', rev)], success: [op.delete(key)], failure: [] };
    await client.delete(key);
    await client.put(key, 'reborn');
    assert.equal((await client.txn(guard)).succeeded, false, 'a recreated key must not match the old CreateRevision');
    assert.equal((await client.get(key))?.value.toString(), 'reborn');
    await cleanup(p);
  });

  it('modRevision, value, version and lease compares', async () => {
    const p = fresh('txn-compares');
    const key = `${p}k`;
    const h = await client.put(key, 'x');
    const ok = (c: ReturnType<typeof compare.value>) => client.txn({ compare: [c], success: [], failure: [] }).then((t) => t.succeeded);
    assert.equal(await ok(compare.modRevision(key, '=', h.revision)), true);
    assert.equal(await ok(compare.modRevision(key, '<', h.revision)), false);
    assert.equal(await ok(compare.modRevision(key, '>', h.revision - 1n)), true);
    assert.equal(await ok(compare.modRevision(key, '!=', h.revision)), false);
    assert.equal(await ok(compare.value(key, '=', 'x')), true);
    assert.equal(await ok(compare.value(key, '=', Buffer.from('y'))), false);
    assert.equal(await ok(compare.value(key, '<', 'y')), true);
    assert.equal(await ok(compare.version(key, '=', 1n)), true);
    assert.equal(await ok(compare.version(key, '>', 1n)), false);
    assert.equal(await ok(compare.lease(key, '=', 0n)), true);
    assert.equal(await ok(compare.lease(key, '=', 5n)), false);
    await cleanup(p);
  });

  it('all compares must hold; the success branch runs every op in one revision', async () => {
    const p = fresh('txn-multi');
    await client.put(`${p}a`, '1');
    const t = await client.txn({
      compare: [compare.value(`${p}a`, '=', '1'), compare.createRevision(`${p}b`, '=', 0n)],
      success: [op.put(`${p}b`, '2'), op.put(`${p}c`, '3'), op.delete(`${p}a`), op.range({ key: Buffer.from(`${p}b`) })],
      failure: [],
    });
    assert.equal(t.succeeded, true);
    assert.equal(t.responses[2]?.responseDeleteRange?.deleted, 1n);
    const b = await client.get(`${p}b`);
    const c = await client.get(`${p}c`);
    assert.equal(b?.modRevision, t.header.revision);
    assert.equal(c?.modRevision, t.header.revision);
    assert.equal(
      (
        await client.txn({
          compare: [compare.value(`${p}b`, '=', '2'), compare.value(`${p}c`, '=', 'nope')],
          success: [op.delete(`${p}b`)],
          failure: [],
        })
      ).succeeded,
      false,
    );
    assert.ok(await client.get(`${p}b`));
    await cleanup(p);
  });
});

describe('leases', () => {
  it('lease ids etcd picks are bigint and keep full int64 precision', async () => {
    const { id, ttl } = await client.leaseGrant(60);
    try {
      assert.equal(typeof id, 'bigint');
      assert.ok(id > 0n);
      assert.equal(ttl, 60);
      assert.ok((await client.leaseLeases()).includes(id));
      const t = await client.leaseTimeToLive(id);
      assert.equal(t.grantedTtl, 60);
      assert.ok(t.ttl > 0 && t.ttl <= 60);
    } finally {
      await client.leaseRevoke(id);
    }
  });

  it('a client-chosen id above 2^53 survives the round trip, also as etcdctl sees it', async () => {
    const id = 0x7fff_ffff_ffff_fff1n; // not representable as a double
    assert.notEqual(BigInt(Number(id)), id);
    const p = fresh('lease-precision');
    const granted = await client.leaseGrant(60, { id });
    try {
      assert.equal(granted.id, id);
      await client.put(`${p}k`, '', { lease: id });
      assert.equal((await client.get(`${p}k`))?.lease, id);
      assert.ok((await client.leaseLeases()).includes(id));
      const t = await client.leaseTimeToLive(id, { keys: true });
      assert.deepEqual(
        t.keys.map((k) => k.toString()),
        [`${p}k`],
      );
      // etcdctl sees the same id: it lists lease ids as 16 lowercase hex digits.
      const ls = spawnSync('etcdctl', [`--endpoints=${etcd.endpoints[0]}`, 'lease', 'list'], {
        env: { ...process.env, ETCDCTL_API: '3' },
        encoding: 'utf8',
      });
      assert.equal(ls.status, 0, ls.stderr);
      assert.ok(ls.stdout.split('\n').includes(id.toString(16).padStart(16, '0')), `etcdctl lease list: ${ls.stdout}`);
    } finally {
      await client.leaseRevoke(id);
    }
    await assertNoKeys(client, p);
  });

  it('granting a chosen id again returns the existing lease (grant is retry-safe)', async () => {
    const id = 0x4000_0000_0000_0abcn;
    try {
      const a = await client.leaseGrant(30, { id });
      const b = await client.leaseGrant(30, { id });
      assert.equal(a.id, id);
      assert.equal(b.id, id);
      assert.equal(b.ttl, 30);
    } finally {
      await client.leaseRevoke(id);
    }
  });

  it('revoke deletes the lease and its keys; revoking it again is not an error', async () => {
    const p = fresh('revoke');
    const { id } = await client.leaseGrant(60);
    await client.put(`${p}a`, '', { lease: id });
    await client.put(`${p}b`, '', { lease: id });
    await client.leaseRevoke(id);
    await assertNoKeys(client, p);
    await client.leaseRevoke(id);
    assert.equal((await client.leaseTimeToLive(id)).ttl, -1);
    assert.ok(!(await client.leaseLeases()).includes(id));
  });
});

describe('members, status, auth status, and one-shot renewals', () => {
  it('status and memberList describe the one member; status pinned to an endpoint, given either way', async () => {
    const s = await client.status();
    assert.equal(s.version, etcd.version);
    assert.equal(s.isLearner, false);
    assert.deepEqual(s.alarms, []);
    assert.equal(s.leader, s.header.memberId, 'a single member leads itself');
    assert.ok(s.raftTerm > 0n && s.dbSize > 0n);
    const members = await client.memberList();
    assert.equal(members.length, 1);
    const [m] = members;
    assert.equal(m!.id, s.header.memberId);
    assert.equal(typeof m!.id, 'bigint');
    assert.equal(m!.isLearner, false);
    assert.ok(m!.name.length > 0);
    assert.ok(m!.peerUrls.length > 0);
    assert.ok(
      m!.clientUrls.some((u) => u.endsWith(etcd.endpoints[0]!)),
      `${m!.clientUrls.join(', ')} names ${etcd.endpoints[0]}`,
    );
    for (const endpoint of [etcd.endpoints[0]!, `http://${etcd.endpoints[0]}`]) {
      assert.equal((await client.status({ endpoint })).header.memberId, s.header.memberId, endpoint);
    }
    await assert.rejects(client.status({ endpoint: '127.0.0.1:1' }), (err: unknown) => {
      assert.ok(err instanceof InvalidArgumentError, String(err));
      assert.match(err.message, /127\.0\.0\.1:1 is not one of this client's endpoints/);
      return true;
    });
  });

  it('a call pinned to a dead endpoint fails naming it alone, and does not move the client off it', { timeout: 20_000 }, async () => {
    const dead = `127.0.0.1:${await closedPort()}`;
    const c = new Client({ endpoints: [dead, etcd.endpoints[0]!], dialTimeoutMs: 1000 });
    try {
      await assert.rejects(c.status({ endpoint: dead }), (err: unknown) => {
        assert.ok(err instanceof UnavailableError, String(err));
        assert.match(err.message, new RegExp(`could not connect to etcd at ${dead.replace(/\./g, '\\.')} \\(connection refused`));
        assert.doesNotMatch(err.message, new RegExp(etcd.endpoints[0]!.replace(/\./g, '\\.')));
        return true;
      });
      assert.equal(c.activeEndpoint, dead, 'no failover for a pinned call');
      assert.equal((await c.status({ endpoint: etcd.endpoints[0]! })).version, etcd.version);
      assert.equal(c.activeEndpoint, dead);
      // An unpinned call fails over as ever.
      assert.equal((await c.status()).version, etcd.version);
      assert.equal(c.activeEndpoint, etcd.endpoints[0]);
    } finally {
      await c.close();
    }
  });

  it('authStatus: off here; etcd 3.4 has no such call (UNIMPLEMENTED, code 12)', async () => {
    if (etcd.version.startsWith('3.4.')) {
      await assert.rejects(client.authStatus(), (err: unknown) => {
        assert.ok(err instanceof EtcdError, String(err));
        assert.equal(err.grpcCode, 12, 'the gRPC status is grpcCode');
        assert.equal(err.code, 'ERR_ETCD', 'code is the stable string code of the class');
        return true;
      });
      return;
    }
    const a = await client.authStatus();
    assert.equal(a.enabled, false);
    assert.equal(typeof a.authRevision, 'bigint');
  });

  it('callTimeoutMs and secure are the options as given', async () => {
    const c = new Client({ endpoints: etcd.endpoints, callTimeoutMs: 1234 });
    try {
      assert.equal(c.callTimeoutMs, 1234);
      assert.equal(c.secure, false);
      assert.equal(client.callTimeoutMs, 10_000);
    } finally {
      await c.close();
    }
  });

  it('leaseKeepAliveOnce renews (TTL back to full) and says LeaseNotFoundError once the lease is gone', async () => {
    const { id } = await client.leaseGrant(60);
    try {
      assert.deepEqual(await client.leaseKeepAliveOnce(id), { ttl: 60 });
      assert.deepEqual(await client.leaseKeepAliveOnce(id, { endpoint: etcd.endpoints[0]! }), { ttl: 60 });
    } finally {
      await client.leaseRevoke(id);
    }
    await assert.rejects(client.leaseKeepAliveOnce(id), (err: unknown) => {
      assert.ok(err instanceof LeaseNotFoundError, String(err));
      assert.match(err.message, /^renewing a lease: lease not found/);
      return true;
    });
  });

  it("leaseKeepAliveOnce without an answer: DeadlineExceededError at its timeout, or the signal's reason", async () => {
    const proxy = await startProxy(etcd.endpoints[0]!);
    const c = new Client({ endpoints: proxy.endpoint });
    const { id } = await client.leaseGrant(60);
    try {
      assert.equal((await c.leaseKeepAliveOnce(id)).ttl, 60); // connected
      proxy.blackhole(true);
      await assert.rejects(c.leaseKeepAliveOnce(id, { timeoutMs: 300 }), (err: unknown) => {
        assert.ok(err instanceof DeadlineExceededError, String(err));
        assert.match(err.message, /renewing a lease: no answer within 300 ms/);
        return true;
      });
      const ac = new AbortController();
      const renewing = c.leaseKeepAliveOnce(id, { signal: ac.signal });
      const reason = new Error('stop');
      ac.abort(reason);
      await assert.rejects(renewing, (err: unknown) => err === reason);
    } finally {
      await c.close();
      await proxy.close();
      await client.leaseRevoke(id);
    }
  });
});
