// Writes and linearizable reads go to the Raft leader when it is among the client's endpoints
// (src/client/connection.ts, route): a client connected to a follower would otherwise pay that
// member's round trip to the leader on each of them. Judged by the member that answered (every
// answer's header names it). Watches stay on the connected member; after the leader dies the
// client finds the new one; with no leader among its endpoints it sends everything where it is.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { clusterForFile, waitFor } from './helpers.js';

let etcd: EtcdCluster;
let clients: Client[];
const fresh = clusterForFile('test/leader-routing/', (e, cs) => {
  etcd = e;
  clients = cs;
});

/** Each member's id, by endpoint index. */
async function memberIds(): Promise<bigint[]> {
  return Promise.all(etcd.endpoints.map(async (ep) => (await clients[0]!.status({ endpoint: ep })).header.memberId));
}

describe('writes to the leader', () => {
  it('a client on a follower sends its writes and linearizable reads to the leader, its watches stay', { timeout: 60_000 }, async () => {
    const p = fresh('follower');
    const leader = await etcd.leaderIndex();
    const ids = await memberIds();
    const follower = (leader + 1) % 3;
    // The file's client i lists every endpoint, starting with member i.
    const c = clients[follower]!;
    assert.equal(c.activeEndpoint, etcd.endpoints[follower]);
    await c.put(`${p}first`, '');
    await waitFor(() => c.conn.leaderTarget === etcd.endpoints[leader], 'the client learned the leader');
    const put = await c.txn({
      compare: [],
      success: [{ requestPut: { key: Buffer.from(`${p}k`), value: Buffer.from('v') } }],
      failure: [],
    });
    assert.equal(put.header.memberId, ids[leader], 'the write was answered by the leader');
    const read = await c.range({ key: Buffer.from(`${p}k`) });
    assert.equal(read.header.memberId, ids[leader], 'the linearizable read too');
    const serializable = await c.range({ key: Buffer.from(`${p}k`), serializable: true });
    assert.equal(serializable.header.memberId, ids[follower], 'a serializable read stays where the client is');
    assert.equal(c.activeEndpoint, etcd.endpoints[follower], 'the connected member is still the follower');
    const w = c.watch(`${p}k`);
    try {
      await w.created;
      assert.equal(c.activeEndpoint, etcd.endpoints[follower]);
      await c.delete(`${p}k`);
      for await (const batch of w) {
        assert.equal(batch.events[0]!.type, 'delete');
        break;
      }
    } finally {
      w.cancel();
    }
    await c.delete(p, { prefix: true });
  });

  it('with no leader among its endpoints, a client sends everything to the member it is connected to', { timeout: 60_000 }, async () => {
    const p = fresh('no-leader-endpoint');
    const leader = await etcd.leaderIndex();
    const ids = await memberIds();
    const followers = [0, 1, 2].filter((i) => i !== leader);
    await using c = new Client({ endpoints: followers.map((i) => etcd.endpoints[i]!) });
    await c.put(`${p}k`, 'v');
    // The look-up ran (it is spaced a second apart) and found none of ours.
    await waitFor(async () => {
      const r = await c.txn({
        compare: [],
        success: [{ requestPut: { key: Buffer.from(`${p}k`), value: Buffer.from('w') } }],
        failure: [],
      });
      assert.equal(r.header.memberId, ids[followers[0]!]);
      return (c.conn as unknown as { foundAt: number }).foundAt > 0;
    }, 'the leader looked up');
    assert.equal(c.conn.leaderTarget, undefined);
    await c.delete(p, { prefix: true });
  });

  it('after the leader dies, writes go to the new leader', { timeout: 120_000 }, async () => {
    const p = fresh('failover');
    const old = await etcd.leaderIndex();
    const ids = await memberIds();
    const c = clients[(old + 1) % 3]!;
    await c.put(`${p}k`, '');
    await waitFor(() => c.conn.leaderTarget === etcd.endpoints[old], 'the client learned the leader');
    await etcd.kill(old);
    try {
      const now = await etcd.leaderIndex();
      assert.notEqual(now, old);
      await waitFor(async () => {
        const r = await c.txn(
          { compare: [], success: [{ requestPut: { key: Buffer.from(`${p}k`), value: Buffer.from('v') } }], failure: [] },
          { idempotent: true },
        );
        return r.header.memberId === ids[now] && c.conn.leaderTarget === etcd.endpoints[now];
      }, 'a write answered by the new leader');
    } finally {
      await etcd.restart(old);
    }
    await c.delete(p, { prefix: true });
  });
});
