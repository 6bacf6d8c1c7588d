// The etcd client's failure classification against a real etcd: unreachable and dead endpoints,
// answers that never come, dropped connections before and after a commit, aborts, a closed client.
// Each test works under its own prefix and removes what it wrote.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, ClientClosedError, DeadlineExceededError, UnavailableError, WriteOutcomeUnknownError, compare, op } from '../src/index.js';
import { startProxy, type EtcdCluster } from '../src/testing/index.js';
import { EventLog, settle, etcdForFile, closedPort } from './helpers.js';

const ROOT = 'test/client-failures/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

const cleanup = (prefix: string): Promise<bigint> => client.delete(prefix, { prefix: true });

describe('connection failures', () => {
  it('an endpoint where nothing listens fails with UnavailableError naming it and the fix', { timeout: 20_000 }, async () => {
    const port = await closedPort();
    // A dial timeout far above the test's timeout: passing proves the refusal itself ended the call.
    const dead = new Client({ endpoints: `127.0.0.1:${port}`, dialTimeoutMs: 60_000 });
    try {
      await assert.rejects(dead.get('k'), (err: unknown) => {
        assert.ok(err instanceof UnavailableError, String(err));
        assert.match(err.message, new RegExp(`127\\.0\\.0\\.1:${port}`));
        assert.match(err.message, /refused/);
        assert.match(err.message, /check that etcd runs there|pass the right endpoints/);
        return true;
      });
    } finally {
      await dead.close();
    }
  });

  it('a second call to an endpoint known to refuse also fails on the refusal, not the dial timeout', { timeout: 5_000 }, async () => {
    // The timeout is far below the dial timeout: only the refusal can end these calls in time.
    const port = await closedPort();
    const dead = new Client({ endpoints: `127.0.0.1:${port}`, dialTimeoutMs: 30_000 });
    try {
      await assert.rejects(dead.get('k'), UnavailableError);
      await assert.rejects(dead.get('k'), UnavailableError);
    } finally {
      await dead.close();
    }
  });

  it('fails over from a dead endpoint to a live one', { timeout: 20_000 }, async () => {
    const port = await closedPort();
    const p = fresh('failover');
    const c = new Client({ endpoints: [`127.0.0.1:${port}`, etcd.endpoints[0]!], dialTimeoutMs: 60_000 });
    try {
      await c.put(`${p}k`, 'v');
      assert.equal((await c.get(`${p}k`))?.value.toString(), 'v');
      assert.equal(c.activeEndpoint, etcd.endpoints[0]);
    } finally {
      await c.close();
      await cleanup(p);
    }
  });

  it('a write whose answer never comes is WriteOutcomeUnknownError, a read DeadlineExceededError', async () => {
    const proxy = await startProxy(etcd.endpoints[0]!);
    const c = new Client({ endpoints: proxy.endpoint });
    const p = fresh('outcome');
    try {
      await c.get(`${p}warm-up`); // connect first, so the failure is the lost answer, not the dial
      proxy.blackhole(true);
      await assert.rejects(c.put(`${p}k`, 'v', { timeoutMs: 300 }), (err: unknown) => {
        assert.ok(err instanceof WriteOutcomeUnknownError, String(err));
        assert.match(err.message, /may or may not have been applied/);
        return true;
      });
      await assert.rejects(c.get(`${p}k`, { timeoutMs: 300 }), DeadlineExceededError);
    } finally {
      // Closed while still black-holed: the buffered request is dropped and never reaches etcd.
      await c.close();
      await proxy.close();
      await cleanup(p);
    }
  });

  it('a put whose connection drops after it committed is WriteOutcomeUnknownError, not retried', async () => {
    const p = fresh('outcome-committed');
    const proxy = await startProxy(etcd.endpoints[0]!);
    const c = new Client({ endpoints: proxy.endpoint });
    const log = new EventLog(client, p);
    try {
      await log.ready;
      await c.get('warm-up');
      proxy.delay(1000); // each direction: the answer comes a second after the commit
      const put = c.put(`${p}k`, 'v');
      put.catch(() => {});
      await log.put(`${p}k`); // committed
      proxy.delay(0);
      proxy.cut(); // the answer is lost
      await assert.rejects(put, WriteOutcomeUnknownError);
      assert.equal((await client.get(`${p}k`))?.version, 1n, 'applied exactly once: it was not repeated');
    } finally {
      await log.close();
      await c.close();
      await proxy.close();
      await cleanup(p);
    }
  });

  it('an idempotent txn whose connection drops after it committed is retried', async () => {
    const p = fresh('outcome-retried');
    const proxy = await startProxy(etcd.endpoints[0]!);
    const c = new Client({ endpoints: proxy.endpoint });
    const log = new EventLog(client, p);
    const key = `${p}k`;
    try {
      await log.ready;
      await c.get('warm-up');
      proxy.delay(1000);
      const txn = c.txn(
        { compare: [compare.createRevision(key, '=', 0n)], success: [op.put(key, 'v')], failure: [op.get(key)] },
        { idempotent: true },
      );
      const committed = await log.put(key);
      proxy.delay(0);
      proxy.cut();
      const t = await txn;
      // The retry ran after the first attempt had created the key: it took the failure branch.
      assert.equal(t.succeeded, false);
      assert.equal(t.responses[0]?.responseRange?.kvs?.[0]?.createRevision, committed.createRevision);
    } finally {
      await log.close();
      await c.close();
      await proxy.close();
      await cleanup(p);
    }
  });

  it('an already-aborted signal rejects the call with its reason', async () => {
    const reason = new Error('not wanted');
    await assert.rejects(client.get('k', { signal: AbortSignal.abort(reason) }), (e) => e === reason);
  });

  it('aborting a call in flight rejects it with the reason', async () => {
    const proxy = await startProxy(etcd.endpoints[0]!);
    const c = new Client({ endpoints: proxy.endpoint });
    try {
      await c.get('warm-up');
      proxy.blackhole(true); // the answer can never come: only the abort can end the call
      const ac = new AbortController();
      const call = c.get('k', { signal: ac.signal, timeoutMs: 600_000 });
      call.catch(() => {});
      await settle(); // the request is on its way (the channel was ready: no I/O before sending)
      const reason = new Error('user gave up');
      ac.abort(reason);
      await assert.rejects(call, (e) => e === reason);
    } finally {
      await c.close();
      await proxy.close();
    }
  });

  it('a signal aborted right after the call started still cancels it', async () => {
    const p = fresh('abort-early');
    // On a ready connection the request is written in the call's own tick, so it may reach etcd
    // although the call rejects: its outcome is unknown. It writes on a lease revoked at the end,
    // which deletes the key if the put landed and refuses the put if it lands after.
    const { id: lease } = await client.leaseGrant(60);
    const ac = new AbortController();
    const call = client.put(`${p}k`, 'v', { signal: ac.signal, lease });
    call.catch(() => {});
    const reason = new Error('changed my mind');
    ac.abort(reason);
    try {
      await assert.rejects(call, (e) => e === reason);
    } finally {
      await call.catch(() => {});
      try {
        await client.leaseRevoke(lease);
      } finally {
        await cleanup(p);
      }
    }
  });

  it('calls on a closed client fail with ClientClosedError', async () => {
    const c = new Client({ endpoints: etcd.endpoints });
    await c.get('k');
    await c.close();
    await c.close(); // idempotent
    assert.equal(c.closed, true);
    await assert.rejects(c.get('k'), ClientClosedError);
    assert.throws(() => c.watch('k'), ClientClosedError);
  });
});
