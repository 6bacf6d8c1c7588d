// OpenTelemetry metrics and spans with the real SDK (@opentelemetry/sdk-metrics with a reader we
// collect from, @opentelemetry/sdk-trace-base with an in-memory exporter) on real etcd: values after
// a lock, a wait behind a holder (and the queue position), every acquire result, a failed call's
// status; names in attributes only when allowed. Losses, elections, failover:
// metrics-losses.test.ts; without an SDK: metrics-no-sdk.test.ts.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { SpanStatusCode } from '@opentelemetry/api';
import { type Client, Mutex, PermitCountConflictError, RWMutex, Semaphore, Session, SessionExpiredError } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { ATTR, METRIC } from '../src/metrics/names.js';
import { Sdk } from './metrics-sdk.js';
import { assertNoKeys, closeAll, etcdForFile, settledOrHang, track } from './helpers.js';

const ROOT = 'test/metrics/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

const LOCK = { [ATTR.kind]: 'lock' };

describe('metrics and spans with the real SDK', () => {
  it('a lock: acquire duration (acquired), held while held, hold duration after unlock, lock.acquire and lock.hold spans; no names by default', async () => {
    const p = fresh('lock');
    await using sdk = new Sdk(etcd.endpoints);
    const s = await Session.create(sdk.client);
    try {
      const h = await new Mutex(s, `${p}lock`).lock();
      assert.equal(await sdk.value(METRIC.acquireDuration, { ...LOCK, [ATTR.result]: 'acquired' }), 1);
      assert.equal(await sdk.value(METRIC.held, LOCK), 1);
      assert.equal(await sdk.value(METRIC.waiting, LOCK), 0, 'an uncontended lock never queues');
      const [acq] = sdk.finished('lock.acquire');
      assert.ok(acq, 'lock.acquire span ended');
      assert.equal(acq.attributes[ATTR.fencingToken], Number(h.fencingToken));
      assert.equal(acq.attributes[ATTR.result], 'acquired');
      assert.equal(acq.attributes[ATTR.queued], false);
      assert.equal(typeof acq.attributes[ATTR.waitDuration], 'number');
      assert.equal(sdk.finished('lock.hold').length, 0, 'the hold span lasts while held');
      await h.unlock();
      assert.equal(await sdk.value(METRIC.held, LOCK), 0);
      assert.equal(await sdk.value(METRIC.holdDuration, LOCK), 1);
      assert.equal(await sdk.value(METRIC.losses), 0, 'a release is no loss');
      const [hold] = sdk.finished('lock.hold');
      assert.ok(hold, 'lock.hold ended at unlock');
      assert.equal(hold.events.length, 0);
      assert.equal(hold.parentSpanContext?.spanId, acq.parentSpanContext?.spanId, 'the hold span is a sibling of the acquire span');
      // The calls behind it: a lease grant and two Txns (enqueue, release), all OK.
      assert.ok(
        (await sdk.value(METRIC.rpcDuration, { [ATTR.rpcMethod]: 'etcdserverpb.KV/Txn', [ATTR.rpcResponseStatusCode]: 'OK' })) >= 2,
      );
      assert.equal(
        await sdk.value(METRIC.rpcDuration, { [ATTR.rpcSystemName]: 'grpc', [ATTR.rpcMethod]: 'etcdserverpb.Lease/LeaseGrant' }),
        1,
      );
      const left = await sdk.points(METRIC.sessionTimeLeft);
      assert.equal(left.length, 1, 'one time-left series');
      assert.deepEqual(left[0]!.attributes, {});
      assert.ok((left[0]!.value as number) > 0 && (left[0]!.value as number) <= 30);
      for (const a of await sdk.allAttributes()) assert.equal(a[ATTR.name], undefined, `no name without opting in: ${JSON.stringify(a)}`);
    } finally {
      await closeAll([s]);
    }
    assert.equal(await sdk.value(METRIC.sessionLosses), 0, 'closing a session is no loss');
  });

  it('names go into attributes when allowed: as is with true, mapped (or left out) by a function', async () => {
    const p = fresh('names');
    const name = `${p}card-8801`;
    {
      await using sdk = new Sdk(etcd.endpoints, { nameAttribute: true });
      const s = await Session.create(sdk.client);
      try {
        await (await new Mutex(s, name).lock()).unlock();
        assert.equal(await sdk.value(METRIC.acquireDuration, { ...LOCK, [ATTR.name]: name }), 1);
        assert.equal(sdk.finished('lock.acquire')[0]?.attributes[ATTR.name], name);
      } finally {
        await closeAll([s]);
      }
    }
    {
      await using sdk = new Sdk(etcd.endpoints, { nameAttribute: (n) => (n.endsWith('card-8801') ? 'cards' : undefined) });
      const s = await Session.create(sdk.client);
      try {
        await (await new Mutex(s, name).lock()).unlock();
        await (await new Mutex(s, `${p}other`).lock()).unlock();
        assert.equal(await sdk.value(METRIC.acquireDuration, { [ATTR.name]: 'cards' }), 1);
        assert.equal(await sdk.value(METRIC.acquireDuration, LOCK), 2);
        const labels = (await sdk.allAttributes()).map((a) => a[ATTR.name]).filter((v) => v !== undefined);
        assert.ok(labels.length > 0 && labels.every((v) => v === 'cards'), `only the mapped label: ${labels.join(', ')}`);
      } finally {
        await closeAll([s]);
      }
    }
    await assertNoKeys(client, p);
  });

  it('a wait behind a holder: waiting is 1 while queued and 0 after; timed_out, aborted and busy results', async () => {
    const p = fresh('wait');
    await using sdk = new Sdk(etcd.endpoints);
    const [a, b] = await Promise.all([Session.create(sdk.client), Session.create(sdk.client)]);
    try {
      const m = (s: Session) => new Mutex(s, `${p}lock`);
      const holder = await m(a!).lock();
      // tryLock finds it taken.
      assert.equal(await m(b!).tryLock(), null);
      assert.equal(await sdk.value(METRIC.acquireDuration, { [ATTR.result]: 'busy' }), 1);
      // An abort while queued.
      const ac = new AbortController();
      const aborting = track(m(b!).lock({ signal: ac.signal }));
      await sdk.until(METRIC.waiting, LOCK, 1);
      ac.abort();
      await assert.rejects(aborting.promise);
      assert.equal(await sdk.value(METRIC.acquireDuration, { [ATTR.result]: 'aborted' }), 1);
      assert.equal(await sdk.value(METRIC.waiting, LOCK), 0);
      // A timeout while queued: the timeout is only the way to end the wait, its length is not asserted.
      await assert.rejects(m(b!).lock({ signal: AbortSignal.timeout(300) }), { name: 'TimeoutError' });
      assert.equal(await sdk.value(METRIC.acquireDuration, { [ATTR.result]: 'timed_out' }), 1);
      // A real wait, then the hand-over.
      const waiter = track(m(b!).lock());
      await sdk.until(METRIC.waiting, LOCK, 1);
      assert.equal(await sdk.value(METRIC.held, LOCK), 1);
      await holder.unlock();
      const h = await settledOrHang(waiter, 'the waiter gets the lock');
      assert.equal(await sdk.value(METRIC.waiting, LOCK), 0);
      assert.equal(await sdk.value(METRIC.acquireDuration, { ...LOCK, [ATTR.result]: 'acquired' }), 2);
      const queued = sdk
        .finished('lock.acquire')
        .filter((s) => s.attributes[ATTR.result] === 'acquired' && s.attributes[ATTR.queued] === true);
      assert.equal(queued.length, 1, 'the waiter span says it queued');
      assert.equal(queued[0]!.attributes[ATTR.fencingToken], Number(h.fencingToken));
      assert.ok((queued[0]!.attributes[ATTR.waitDuration] as number) > 0);
      assert.equal(sdk.finished('lock.acquire').filter((s) => s.attributes[ATTR.result] === 'timed_out').length, 1);
      await h.unlock();
    } finally {
      await closeAll([a, b]);
    }
    await assertNoKeys(client, p);
  });

  it('the queue position at enqueue: a holder has 0 keys ahead, the second caller 1, the third 2', async () => {
    const p = fresh('ahead');
    await using sdk = new Sdk(etcd.endpoints);
    const [a, b, c] = await Promise.all([Session.create(sdk.client), Session.create(sdk.client), Session.create(sdk.client)]);
    try {
      const m = (s: Session) => new Mutex(s, `${p}lock`);
      const first = await m(a!).lock();
      const second = track(m(b!).lock());
      await sdk.until(METRIC.waiting, LOCK, 1);
      const third = track(m(c!).lock());
      await sdk.until(METRIC.waiting, LOCK, 2);
      await first.unlock();
      await (await settledOrHang(second, 'the second caller gets the lock')).unlock();
      const h = await settledOrHang(third, 'the third caller gets the lock');
      await h.unlock();
      const spans = sdk
        .finished('lock.acquire')
        .sort((x, y) => Number(x.attributes[ATTR.fencingToken]) - Number(y.attributes[ATTR.fencingToken]));
      assert.deepEqual(
        spans.map((s) => [s.attributes[ATTR.queueAhead], s.attributes[ATTR.queued]]),
        [
          [0, false],
          [1, true],
          [2, true],
        ],
      );
      assert.equal(spans[2]!.attributes[ATTR.fencingToken], Number(h.fencingToken));
    } finally {
      await closeAll([a, b, c]);
    }
    await assertNoKeys(client, p);
  });

  it('results session_lost (the lease revoked while queued) and error (a permit count conflict), with error spans', async () => {
    const p = fresh('results');
    await using sdk = new Sdk(etcd.endpoints);
    const a = await Session.create(sdk.client);
    // A short TTL: the waiter learns of the revoke from its next renewal at the latest (TTL/3).
    const b = await Session.create(sdk.client, { ttl: 3 });
    try {
      const holder = await new Mutex(a, `${p}lock`).lock();
      const waiter = track(new Mutex(b, `${p}lock`).lock());
      await sdk.until(METRIC.waiting, LOCK, 1);
      await client.leaseRevoke(b.leaseId);
      await assert.rejects(waiter.promise, SessionExpiredError);
      assert.equal(await sdk.value(METRIC.acquireDuration, { ...LOCK, [ATTR.result]: 'session_lost' }), 1);
      assert.equal(await sdk.value(METRIC.waiting, LOCK), 0);
      const [lost] = sdk.finished('lock.acquire').filter((x) => x.attributes[ATTR.result] === 'session_lost');
      assert.ok(lost);
      assert.equal(lost.status.code, SpanStatusCode.ERROR);
      assert.equal(lost.events.filter((e) => e.name === 'exception').length, 1, 'the exception is on the span');
      await holder.unlock();

      // A permit asked for with another count than the holder's: an error that is none of the others.
      const permit = await new Semaphore(a, `${p}sem`, { permits: 2 }).acquire({ share: true });
      await assert.rejects(new Semaphore(a, `${p}sem`, { permits: 3 }).acquire({ label: 'other', share: true }), PermitCountConflictError);
      assert.equal(await sdk.value(METRIC.acquireDuration, { [ATTR.kind]: 'permit', [ATTR.result]: 'error' }), 1);
      const [failed] = sdk.finished('permit.acquire').filter((x) => x.attributes[ATTR.result] === 'error');
      assert.ok(failed);
      assert.equal(failed.status.code, SpanStatusCode.ERROR);
      assert.match(failed.status.message ?? '', /asked for with 3 permits/);
      await permit.release();
    } finally {
      await closeAll([a, b]);
    }
    await assertNoKeys(client, p);
  });

  it('a failed call is timed with its gRPC status: revoking an unknown lease is NOT_FOUND', async () => {
    await using sdk = new Sdk(etcd.endpoints);
    await sdk.client.leaseRevoke(0x0bad_1eafn); // not an error to the caller: already gone is fine
    assert.equal(
      await sdk.value(METRIC.rpcDuration, {
        [ATTR.rpcMethod]: 'etcdserverpb.Lease/LeaseRevoke',
        [ATTR.rpcResponseStatusCode]: 'NOT_FOUND',
      }),
      1,
    );
    assert.equal(
      await sdk.value(METRIC.rpcDuration, { [ATTR.rpcMethod]: 'etcdserverpb.Lease/LeaseRevoke', [ATTR.rpcResponseStatusCode]: 'OK' }),
      0,
    );
  });

  it('rpc.client.call.duration carries exactly the attributes of semantic conventions v1.40.0', async () => {
    await using sdk = new Sdk(etcd.endpoints);
    await sdk.client.leaseRevoke(0x0bad_1eafn);
    await sdk.client.get('semconv-probe');
    const byMethod = new Map((await sdk.points(METRIC.rpcDuration)).map((p) => [p.attributes[ATTR.rpcMethod], p.attributes]));
    // A success: the system, the fully-qualified method and the status by name; no error.type.
    assert.deepEqual(byMethod.get('etcdserverpb.KV/Range'), {
      'rpc.system.name': 'grpc',
      'rpc.method': 'etcdserverpb.KV/Range',
      'rpc.response.status_code': 'OK',
    });
    // A failure: error.type too, the status again (gRPC counts every status but OK an error).
    assert.deepEqual(byMethod.get('etcdserverpb.Lease/LeaseRevoke'), {
      'rpc.system.name': 'grpc',
      'rpc.method': 'etcdserverpb.Lease/LeaseRevoke',
      'rpc.response.status_code': 'NOT_FOUND',
      'error.type': 'NOT_FOUND',
    });
  });

  it('a permit, a read lock and a write lock are their own kinds', async () => {
    const p = fresh('kinds');
    await using sdk = new Sdk(etcd.endpoints);
    const s = await Session.create(sdk.client);
    try {
      const permit = await new Semaphore(s, `${p}sem`, { permits: 2 }).acquire();
      const rw = new RWMutex(s, `${p}rw`);
      const read = await rw.rLock();
      await read.unlock();
      const write = await rw.lock();
      assert.equal(await sdk.value(METRIC.held, { [ATTR.kind]: 'permit' }), 1);
      assert.equal(await sdk.value(METRIC.held, { [ATTR.kind]: 'write' }), 1);
      assert.equal(await sdk.value(METRIC.holdDuration, { [ATTR.kind]: 'read' }), 1);
      await Promise.all([permit.release(), write.unlock()]);
      for (const kind of ['permit', 'read', 'write']) {
        assert.equal(await sdk.value(METRIC.acquireDuration, { [ATTR.kind]: kind, [ATTR.result]: 'acquired' }), 1, kind);
        assert.equal(await sdk.value(METRIC.held, { [ATTR.kind]: kind }), 0, kind);
      }
      assert.deepEqual(
        ['permit.acquire', 'rwlock.read.acquire', 'rwlock.write.acquire', 'permit.hold', 'rwlock.read.hold', 'rwlock.write.hold'].map(
          (n) => sdk.finished(n).length,
        ),
        [1, 1, 1, 1, 1, 1],
      );
      // Nobody was ahead of any of them.
      assert.deepEqual(
        ['permit.acquire', 'rwlock.read.acquire', 'rwlock.write.acquire'].map((n) => sdk.finished(n)[0]!.attributes[ATTR.queueAhead]),
        [0, 0, 0],
      );
    } finally {
      await closeAll([s]);
    }
    await assertNoKeys(client, p);
  });
});
