// Key namespaces: `new Client({ namespace })` prefixes every key it reads,
// writes, compares and watches and strips the prefix from what it returns, as Go's
// clientv3/namespace does. Two namespaces never see each other's locks; Go's namespaced client
// (interop/go --namespace) and ours interoperate on one prefix. Against a real single-member etcd.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, Election, Mutex, Session, compare, currentLeader, op } from '../src/index.js';
import { txnRange } from '../src/client/kv.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { etcdForFile, settle, track, waitFor, keysUnder } from './helpers.js';
import { GoFleet, goInteropBinary, closeGoFleets } from './go-fleet.js';

const ROOT = 'test/namespace/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)), { beforeChecks: closeGoFleets });

describe('namespaces: two tenants on one cluster', { timeout: 60_000 }, () => {
  let a: Client;
  let b: Client;
  let nsA: string;
  let nsB: string;
  before(() => {
    const p = fresh('tenants');
    nsA = `${p}tenant-a/`;
    nsB = `${p}tenant-b/`;
    a = new Client({ endpoints: etcd.endpoints, namespace: nsA });
    b = new Client({ endpoints: etcd.endpoints, namespace: nsB });
  });
  after(async () => {
    await a.close();
    await b.close();
  });

  it("two namespaces' locks on one name never meet; each sees only its own keys, without the prefix", async () => {
    const [sa, sa2, sb] = [await Session.create(a), await Session.create(a), await Session.create(b)];
    try {
      const ha = await new Mutex(sa, 'locks/x').lock();
      const hb = await new Mutex(sb, 'locks/x').lock(); // would wait forever if it saw tenant a's key
      assert.equal(ha.key, `locks/x/${sa.leaseId.toString(16)}`, 'the handle names the key inside the namespace');
      assert.equal(await new Mutex(sa2, 'locks/x').tryLock(), null, 'inside one namespace the lock still excludes');
      assert.deepEqual(await keysUnder(a, 'locks/'), [ha.key]);
      assert.deepEqual(await keysUnder(b, 'locks/'), [hb.key]);
      // On the cluster, each key lies under its tenant's prefix, with the handle's token.
      const raw = await client.get(`${nsA}${ha.key}`);
      assert.equal(raw?.createRevision, ha.fencingToken);
      assert.equal((await client.get(`${nsB}${hb.key}`))?.createRevision, hb.fencingToken);
      // The keys of a lease, as Go's namespace gives them: inside the namespace, unprefixed.
      assert.deepEqual(
        (await a.leaseTimeToLive(sa.leaseId, { keys: true })).keys.map((k) => k.toString()),
        [ha.key],
      );
      await ha.unlock();
      await hb.unlock();
    } finally {
      await Promise.all([sa.close(), sa2.close(), sb.close()]);
    }
    assert.deepEqual(await keysUnder(client, nsA), []);
    assert.deepEqual(await keysUnder(client, nsB), []);
  });

  it('each namespace has its own leader of one election name', async () => {
    const [sa, sb] = [await Session.create(a), await Session.create(b)];
    try {
      const la = await new Election(sa, 'leader').campaign('a');
      const lb = await new Election(sb, 'leader').campaign('b');
      assert.equal((await currentLeader(a, 'leader'))?.value.toString(), 'a');
      assert.equal((await currentLeader(b, 'leader'))?.value.toString(), 'b');
      await la.resign();
      await lb.resign();
    } finally {
      await Promise.all([sa.close(), sb.close()]);
    }
  });

  it("a watch sees its namespace's events only, with keys stripped (prevKv too)", async () => {
    const w = a.watch('w/', { prefix: true, prevKv: true });
    try {
      await w.created;
      await b.put('w/k', 'from b');
      await a.put('w/k', 'one');
      await a.put('w/k', 'two');
      const it = w[Symbol.asyncIterator]();
      const seen: string[] = [];
      while (seen.length < 2) {
        const batch = (await it.next()).value!;
        for (const e of batch.events)
          seen.push(`${e.type} ${e.kv.key.toString()}=${e.kv.value.toString()} prev ${e.prevKv?.key.toString() ?? '-'}`);
      }
      assert.deepEqual(seen, ['put w/k=one prev -', 'put w/k=two prev w/k']);
    } finally {
      w.cancel();
      await a.delete('w/', { prefix: true });
      await b.delete('w/', { prefix: true });
    }
  });

  it('txn compares and operations (nested too) are prefixed, their answers stripped; a prefix delete stays inside', async () => {
    await b.put('t/k', 'b');
    const t = await a.txn({
      compare: [compare.version('t/k', '=', 0n)],
      success: [
        op.put('t/k', 'a'),
        op.range({ key: Buffer.from('t/'), rangeEnd: Buffer.from('t0') }),
        { requestTxn: { success: [op.get('t/k')] } },
      ],
      failure: [],
    });
    assert.ok(t.succeeded, "tenant b's t/k is not tenant a's");
    assert.deepEqual(
      txnRange(t, 1).kvs.map((kv) => kv.key.toString()),
      ['t/k'],
    );
    const nested = t.responses[2]!.responseTxn!.responses![0]!.responseRange!.kvs!;
    assert.deepEqual(
      nested.map((kv) => kv.key!.toString()),
      ['t/k'],
    );
    // Every key from a key on ("\0" as range end) means every key of the namespace from there.
    const all = await a.range({ key: Buffer.from('t/'), rangeEnd: Buffer.from([0]) });
    assert.deepEqual(
      all.kvs.map((kv) => kv.key.toString()),
      ['t/k'],
    );
    assert.equal(await a.delete('t/', { prefix: true }), 1n);
    assert.equal((await b.get('t/k'))?.value.toString(), 'b', "tenant b's key survives tenant a's prefix delete");
    await b.delete('t/k');
  });
});

describe("namespaces: Go's namespace package and ours on one prefix", () => {
  const goBin = goInteropBinary();

  it('a Go mutex and ours exclude each other under one namespace, in both orders; Go sees our leader', { timeout: 120_000 }, async () => {
    const ns = `${fresh('go')}tenant/`;
    const ours = new Client({ endpoints: etcd.endpoints, namespace: ns });
    const go = new GoFleet(goBin(), etcd.endpoints, { ttl: 30, namespace: ns });
    const s = await Session.create(ours);
    try {
      await go.ready;
      // Go holds first: its key is inside the namespace (as Go reports it), under the prefix on etcd.
      const lease = await go.session('g1');
      const held = await go.call('g1', 'lock', { name: 'locks/x' }, 'acquired');
      assert.equal(held.key, `locks/x/${lease}`);
      assert.equal((await client.get(`${ns}locks/x/${lease}`))?.createRevision, BigInt(held.rev!));
      const mine = track(new Mutex(s, 'locks/x').lock());
      const myKey = `locks/x/${s.leaseId.toString(16)}`;
      await waitFor(async () => (await client.get(`${ns}${myKey}`)) !== undefined, 'our key queued behind Go');
      await settle();
      assert.equal(mine.settled, false, 'ours waits while Go holds');
      await go.call('g1', 'unlock', {}, 'unlocked');
      const h = await mine.promise;
      assert.equal(h.key, myKey);
      assert.ok(h.fencingToken > BigInt(held.rev!));

      // Ours holds: Go waits, then gets it once we unlock.
      const from = go.events.length;
      go.send('g1', 'lock', { name: 'locks/x' });
      await waitFor(async () => (await client.get(`${ns}locks/x/${lease}`)) !== undefined, 'the Go key queued behind ours');
      assert.equal(
        go.events.slice(from).some((e) => e.event === 'acquired'),
        false,
        'Go waits while we hold',
      );
      await h.unlock();
      const goHeld = await go.expect('g1', 'acquired');
      assert.ok(BigInt(goHeld.rev!) > h.fencingToken);
      await go.call('g1', 'unlock', {}, 'unlocked');

      // An election: Go's leader is ours to see, by the name inside the namespace.
      const led = await go.call('g2', 'campaign', { name: 'el', value: 'go leads' }, 'leading');
      const seen = await currentLeader(ours, 'el');
      assert.equal(seen?.key, led.key);
      assert.equal(seen?.value.toString(), 'go leads');
      await go.call('g2', 'resign', {}, 'resigned');
    } finally {
      await s.close();
      assert.equal(await go.close(), 0);
      await ours.close();
    }
    assert.deepEqual(await keysUnder(client, ns), []);
  });
});
