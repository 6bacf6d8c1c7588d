// Calls on one session and one name made with `share: true` share one key (`<name>/<lease hex>`, as Go's): the queue engine
// counts them. Against a real single-member etcd: the key is deleted only when the last of them
// releases, aborts or fails; a release ends only its own handle; a loss ends them all.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import {
  Client,
  Election,
  LeadershipLostError,
  LockLostError,
  Mutex,
  RWMutex,
  Semaphore,
  Session,
  SessionExpiredError,
} from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { ATTR, METRIC } from '../src/metrics/names.js';
import {
  aborted,
  assertNoKeys,
  closeAll,
  etcdForFile,
  openSessions,
  serverState,
  settledOrHang,
  track,
  waitersBlocked,
  keysUnder,
  withSessions,
} from './helpers.js';

const ROOT = 'test/siblings/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

const sessions = (n: number): Promise<Session[]> => openSessions(client, n, 30);
/** Watchers open on etcd now: the base for {@link blocked}. */
const watchersNow = async (): Promise<number> => (await serverState(etcd.clientUrls[0]!)).watchers;
/** `n` more waiters than `base` blocked on their watch, with nothing in flight. */
const blocked = (base: number, n: number, what?: string): Promise<void> => waitersBlocked(etcd.clientUrls[0]!, base, n, what);

describe('siblings: one key, counted', () => {
  it('the first aborts while the sibling waits: the sibling keeps the same key and gets the lock in its turn', async () => {
    const p = fresh('first-aborts');
    const name = `${p}lock`;
    await withSessions(client, p, 2, async ([a, b]) => {
      const holder = await new Mutex(b!, name).lock();
      const base = await watchersNow();
      const stop = new AbortController();
      const first = track(new Mutex(a!, name).lock({ signal: stop.signal, share: true }));
      await blocked(base, 1, 'the first call waits');
      const key = new Mutex(a!, name).key;
      const created = (await client.get(key))!.createRevision;
      const sibling = track(new Mutex(a!, name).lock({ share: true }));
      await blocked(base, 2, 'the sibling waits too');

      stop.abort();
      await assert.rejects(first.promise, (err: unknown) => err === stop.signal.reason);
      const kv = await client.get(key);
      assert.equal(kv?.createRevision, created, 'the aborted first call left the key to its sibling: same incarnation');
      assert.equal(sibling.settled, false, 'the sibling still waits for the holder');

      await holder.unlock();
      const mine = await settledOrHang(sibling, 'the sibling gets the lock when its turn comes');
      assert.equal(mine.key, key);
      assert.equal(mine.fencingToken, created, 'it holds with the key the first call created');
      mine.assertHeld();
      // The first call is gone: the sibling is the last user, and its unlock deletes the key.
      await mine.unlock();
      assert.deepEqual(await keysUnder(client, `${name}/`), []);
    });
  });

  it('the first releases while the sibling holds: the sibling still holds, and another session still waits', async () => {
    const p = fresh('first-releases');
    const name = `${p}lock`;
    await withSessions(client, p, 2, async ([a, b]) => {
      const first = await new Mutex(a!, name).lock({ share: true });
      const sibling = await new Mutex(a!, name).lock({ share: true });
      assert.equal(sibling.key, first.key);
      assert.equal(sibling.fencingToken, first.fencingToken, "the sibling joined the first call's key");
      const base = await watchersNow();
      const other = track(new Mutex(b!, name).lock());
      await blocked(base, 1, "another session's lock() waits");
      const firstEnded = aborted(first.signal);
      const siblingSignal = sibling.signal; // watches the key: a delete would fire it

      await first.unlock();
      const reason = await firstEnded;
      assert.ok(reason instanceof LockLostError && /was released/.test(reason.message), 'the released handle ends ("released")');
      assert.throws(() => first.assertHeld(), LockLostError);
      assert.equal((await client.get(first.key))?.createRevision, sibling.fencingToken, 'the key stays for the sibling');
      sibling.assertHeld();
      assert.equal(siblingSignal.aborted, false, "the sibling's signal has not fired");
      assert.equal(other.settled, false);

      // The key is still in use: a new lock() on the session joins it rather than creating another.
      const again = await new Mutex(a!, name).lock({ share: true });
      assert.equal(again.fencingToken, sibling.fencingToken);
      await again.unlock();
      sibling.assertHeld();
      assert.equal(other.settled, false);

      await sibling.unlock();
      assert.ok(siblingSignal.aborted);
      const theirs = await settledOrHang(other, 'the other session acquires once the last sibling released');
      assert.ok(theirs.fencingToken > sibling.fencingToken);
      await theirs.unlock();
    });
  });

  it('the last release deletes the key, whichever of them releases last', async () => {
    const p = fresh('last-release');
    const name = `${p}lock`;
    const [a] = await sessions(1);
    const others: Session[] = [];
    try {
      for (const order of [
        [0, 1, 2],
        [2, 1, 0],
        [1, 0, 2],
      ]) {
        const handles = [];
        for (let i = 0; i < 3; i++) handles.push(await new Mutex(a!, name).lock({ share: true }));
        // A new session each round: its wait must open a watch of its own (none kept from the last).
        const [b] = await sessions(1);
        others.push(b!);
        const base = await watchersNow();
        const other = track(new Mutex(b!, name).lock());
        await blocked(base, 1, "another session's lock() waits");
        for (const i of order.slice(0, 2)) {
          await handles[i]!.unlock();
          assert.equal((await client.get(handles[0]!.key))?.createRevision, handles[0]!.fencingToken, 'still held by the rest');
          assert.equal(other.settled, false);
        }
        const last = handles[order[2]!]!;
        last.assertHeld();
        await last.unlock();
        const theirs = await settledOrHang(other, 'the other session acquires after the last release');
        assert.deepEqual(await keysUnder(client, `${name}/`), [theirs.key], 'nothing of ours is left under the prefix');
        await theirs.unlock();
        assert.deepEqual(await keysUnder(client, `${name}/`), []);
      }
      // Nothing is remembered either: the next lock() on the session creates a new incarnation.
      const next = await new Mutex(a!, name).lock({ share: true });
      const kv = await client.get(next.key);
      assert.equal(kv?.createRevision, next.fencingToken);
      await next.unlock();
    } finally {
      await closeAll([a, ...others]);
    }
    await assertNoKeys(client, p);
  });

  it('a session loss ends every sibling', async () => {
    const p = fresh('session-loss');
    const name = `${p}lock`;
    await withSessions(client, p, 2, async ([a, b]) => {
      const first = await new Mutex(a!, name).lock({ share: true });
      const sibling = await new Mutex(a!, name).lock({ share: true });
      const ends = [aborted(first.signal), aborted(sibling.signal)];
      const base = await watchersNow();
      const other = track(new Mutex(b!, name).lock());
      await blocked(base, 1, "another session's lock() waits");

      await a!.close();
      for (const reason of await Promise.all(ends)) assert.ok(reason instanceof LockLostError);
      assert.throws(() => first.assertHeld(), LockLostError);
      assert.throws(() => sibling.assertHeld(), LockLostError);
      const theirs = await settledOrHang(other, 'the other session acquires once the lease is gone');
      assert.deepEqual(await keysUnder(client, `${name}/`), [theirs.key]);
      // Unlocking the lost handles is harmless: guarded on their CreateRevision.
      await Promise.all([first.unlock(), sibling.unlock()]);
      theirs.assertHeld();
      await theirs.unlock();
      await assert.rejects(new Mutex(a!, name).lock({ share: true }), SessionExpiredError);
    });
  });

  it('a key deleted by someone else ends every sibling, even one that never looked at its signal', async () => {
    const p = fresh('key-deleted');
    const name = `${p}lock`;
    await withSessions(client, p, 1, async ([a]) => {
      const first = await new Mutex(a!, name).lock({ share: true });
      const sibling = await new Mutex(a!, name).lock({ share: true });
      const firstEnded = aborted(first.signal);
      await client.delete(first.key);
      assert.ok((await firstEnded) instanceof LockLostError);
      // The sibling watched nothing; the loss its sibling saw is the key's, so it ended too.
      assert.throws(() => sibling.assertHeld(), /no longer owned: its key was deleted/);
      assert.equal(sibling.signal.aborted, true);
      // Both released (no-ops on a deleted incarnation): the next lock() creates a new key.
      await Promise.all([first.unlock(), sibling.unlock()]);
      const next = await new Mutex(a!, name).lock({ share: true });
      assert.ok(next.fencingToken > first.fencingToken);
      await next.unlock();
    });
  });

  it('a failed sibling leaves the key to the others: a refused permit count, a tryLock, a read lock', async () => {
    const p = fresh('failed-sibling');
    await withSessions(client, p, 2, async ([a, b]) => {
      // A semaphore sibling refused for its permit count leaves the key alone, and so does the holder's release after it.
      const sem = `${p}sem`;
      const permit = await new Semaphore(a!, sem, { permits: 2 }).acquire({ share: true });
      const joined = await new Semaphore(a!, sem, { permits: 2 }).acquire({ share: true });
      await assert.rejects(new Semaphore(a!, sem, { permits: 3 }).acquire({ share: true }));
      await permit.release();
      joined.assertHeld();
      assert.equal((await client.get(joined.key))?.createRevision, joined.fencingToken);
      await joined.release();
      assert.deepEqual(await keysUnder(client, `${sem}/`), []);

      // tryLock on a held key joins it; its unlock leaves the lock to the first holder.
      const lock = `${p}lock`;
      const held = await new Mutex(a!, lock).lock({ share: true });
      const tried = await new Mutex(a!, lock).tryLock({ share: true });
      assert.equal(tried?.fencingToken, held.fencingToken);
      await tried!.unlock();
      held.assertHeld();
      assert.equal(await new Mutex(b!, lock).tryLock(), null, 'still taken for another session');
      await held.unlock();
      assert.deepEqual(await keysUnder(client, `${lock}/`), []);

      // Two read locks of one session share its read key: one unlock leaves the other reading, and a writer waiting.
      const rw = `${p}rw`;
      const r1 = await new RWMutex(a!, rw).rLock({ share: true });
      const r2 = await new RWMutex(a!, rw).rLock({ share: true });
      assert.equal(r2.fencingToken, r1.fencingToken);
      const base = await watchersNow();
      const writer = track(new RWMutex(b!, rw).lock());
      await blocked(base, 1, 'the writer waits for the readers');
      await r1.unlock();
      r2.assertHeld();
      assert.equal(writer.settled, false);
      await r2.unlock();
      const w = await settledOrHang(writer, 'the writer gets the lock after the last reader');
      await w.unlock();
    });
  });

  it('an election: a resigning candidate leaves the sibling leading, with the value it campaigned with last', async () => {
    const p = fresh('election');
    const name = `${p}election`;
    await withSessions(client, p, 2, async ([a, b]) => {
      const first = await new Election(a!, name).campaign('v1', { share: true });
      const again = await new Election(a!, name).campaign('v2', { share: true });
      assert.equal(again.fencingToken, first.fencingToken);
      const base = await watchersNow();
      const rival = track(new Election(b!, name).campaign('rival'));
      await blocked(base, 1, 'the rival waits');
      await first.resign();
      again.assertLeader();
      assert.equal((await new Election(b!, name).leader())?.value, 'v2');
      assert.equal(rival.settled, false);
      await again.resign();
      const theirs = await settledOrHang(rival, 'the rival leads after the last resign');
      assert.throws(() => again.assertLeader(), LeadershipLostError);
      await theirs.resign();
    });
  });
});

/** A MetricReader collected on demand. */
class CollectingReader extends MetricReader {
  protected override async onShutdown(): Promise<void> {}
  protected override async onForceFlush(): Promise<void> {}
}

describe('siblings: metrics', () => {
  it('two campaigns sharing a key are one leadership: the leader gauge stays 1 until the last of them ends', async () => {
    const p = fresh('metrics');
    const name = `${p}election`;
    const reader = new CollectingReader();
    const meterProvider = new MeterProvider({ readers: [reader] });
    const recording = new Client({ endpoints: etcd.endpoints, meterProvider });
    /** The sum of metric `metric`'s points whose attributes include `attrs`. */
    const value = async (metric: string, attrs: Record<string, unknown> = {}): Promise<number> => {
      const { resourceMetrics } = await reader.collect();
      const m = resourceMetrics.scopeMetrics.flatMap((sm) => sm.metrics).find((x) => x.descriptor.name === metric);
      const points = (m?.dataPoints ?? []) as { attributes: Record<string, unknown>; value: unknown }[];
      return points
        .filter((pt) => Object.entries(attrs).every(([k, v]) => pt.attributes[k] === v))
        .reduce((n, pt) => n + (pt.value as number), 0);
    };
    const campaigns = { [ATTR.kind]: 'campaign' };
    const [a, b] = await Promise.all([Session.create(recording), Session.create(client)]);
    try {
      // Released first: the first holder's leadership goes on in the sibling.
      const first = await new Election(a, name).campaign('v1', { share: true });
      const again = await new Election(a, name).campaign('v2', { share: true });
      assert.deepEqual([await value(METRIC.electionLeader), await value(METRIC.held, campaigns)], [1, 2]);
      await first.resign();
      assert.deepEqual([await value(METRIC.electionLeader), await value(METRIC.held, campaigns)], [1, 1], 'still leading, one holding');
      assert.equal(await value(METRIC.electionTransitions, { [ATTR.leading]: false }), 0, 'no transition: the leadership went on');
      await again.resign();
      assert.deepEqual([await value(METRIC.electionLeader), await value(METRIC.held, campaigns)], [0, 0]);
      assert.equal(await value(METRIC.electionTransitions, { [ATTR.leading]: false }), 1);

      // The first campaign aborted while waiting: the sibling that leads later is counted as the leader.
      const rival = await new Election(b, name).campaign('rival');
      const base = await watchersNow();
      const stop = new AbortController();
      const waiting = track(new Election(a, name).campaign('w1', { signal: stop.signal, share: true }));
      await blocked(base, 1, 'the first campaign waits');
      const sibling = track(new Election(a, name).campaign('w2', { share: true }));
      await blocked(base, 2, 'the sibling waits too');
      stop.abort();
      await assert.rejects(waiting.promise);
      await rival.resign();
      const leads = await settledOrHang(sibling, 'the sibling leads');
      assert.equal(await value(METRIC.electionLeader), 1);
      await leads.resign();
      assert.deepEqual([await value(METRIC.electionLeader), await value(METRIC.held, campaigns)], [0, 0]);
    } finally {
      await closeAll([a, b]);
      await recording.close();
      await meterProvider.shutdown();
    }
    await assertNoKeys(client, p);
  });
});
