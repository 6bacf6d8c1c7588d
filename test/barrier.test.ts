// Barrier against a real single-member etcd, and Go's own recipes (driven through interop/go, which
// also covers its RWMutex commands here) with ours on the same names (DoubleBarrier alone:
// double-barrier.test.ts). Each test uses its own names.
//
// "Still waiting" is asserted only once the waiters are blocked on their watches with every call
// before them answered, or after etcd has answered the calls that precede a wait (counted with its
// own metrics) and one more round trip on the same connection: a call that did not block would have
// settled by then.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Barrier, type Client, DoubleBarrier, InvalidArgumentError, SessionExpiredError, TooManyClientsError } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { EventLog, assertNoKeys, track, waitFor, closeAll, withSessions } from './helpers.js';
import { barrierFile } from './barrier-helpers.js';
import { GoFleet, goInteropBinary, closeGoFleets } from './go-fleet.js';

const ROOT = 'test/barrier/';
let etcd: EtcdCluster;
let client: Client;
const goBin = goInteropBinary();
const file = barrierFile(ROOT, (e, c) => ((etcd = e), (client = c)), { beforeChecks: closeGoFleets });
const { fresh, sessions, handled, watchers, blocked, answered, roundTrip, waiterPut } = file;

// Hang guards only: every wait below is on an event, a promise or a line from the Go process.
const T = { timeout: 120_000 };

async function startGo(t: { diagnostic(m: string): void }): Promise<GoFleet> {
  const go = new GoFleet(goBin(), etcd.endpoints, { ttl: 30 });
  const ready = await go.ready;
  t.diagnostic(`etcd ${etcd.version}, go.etcd.io/etcd/client/v3 ${String(ready.client)} (experimental/recipes)`);
  return go;
}

describe('Barrier', () => {
  it("hold() creates Go's key (the name, empty value, no lease); wait() blocks while held and returns on release()", T, async () => {
    const name = `${fresh('hold-wait')}b`;
    const b = new Barrier(client, name);
    await b.hold();
    const kv = await client.get(name);
    assert.ok(kv, 'the key exists while held');
    assert.equal(kv.value.length, 0);
    assert.equal(kv.lease, 0n, 'no lease by default, as Go');
    await b.hold(); // already held: not an error, and the key is left as it is
    assert.equal((await client.get(name))?.modRevision, kv.modRevision);

    const w0 = await watchers();
    const waiting = [track(b.wait()), track(new Barrier(client, name).wait())];
    await blocked(w0, 2);
    assert.deepEqual(
      waiting.map((w) => w.settled),
      [false, false],
      'both wait while the barrier is held',
    );
    await b.release();
    await Promise.all(waiting.map((w) => w.promise));
    assert.equal(await client.get(name), undefined);
    await b.release(); // releasing a free barrier does nothing
    await assertNoKeys(client, name);
  });

  it('wait() on a barrier nobody holds returns at once and keeps no watch', T, async () => {
    const name = `${fresh('absent')}b`;
    const w0 = await watchers();
    await new Barrier(client, name).wait();
    await waitFor(async () => (await watchers()) === w0, 'the watch closed');
  });

  it('an aborted wait() rejects with the reason, closes its watch and leaves the barrier as it was', T, async () => {
    const name = `${fresh('abort-wait')}b`;
    const b = new Barrier(client, name);
    await b.hold();
    await assert.rejects(b.wait({ signal: AbortSignal.abort(new Error('not now')) }), /not now/);
    const w0 = await watchers();
    const ac = new AbortController();
    const w = track(b.wait({ signal: ac.signal }));
    await blocked(w0, 1);
    assert.equal(w.settled, false);
    assert.equal(await watchers(), w0 + 1, 'one watch while waiting');
    ac.abort(new Error('give up'));
    await assert.rejects(w.promise, /give up/);
    await waitFor(async () => (await watchers()) === w0, 'the watch closed');
    assert.ok(await client.get(name), 'still held: an abort changes nothing in etcd');
    await b.release();
    await assertNoKeys(client, name);
  });

  it("with a session the key goes on its lease: the barrier releases itself when the holder's session ends", T, async () => {
    const name = `${fresh('leased')}b`;
    await withSessions(client, name, 1, async ([s]) => {
      await new Barrier(client, name, { session: s! }).hold();
      assert.equal((await client.get(name))?.lease, s!.leaseId);
      const w0 = await watchers();
      const w = track(new Barrier(client, name).wait());
      await blocked(w0, 1);
      assert.equal(w.settled, false);
      await s!.close(); // the holder dies: its lease, and the barrier key, go
      await w.promise;
      await assert.rejects(new Barrier(client, name, { session: s! }).hold(), SessionExpiredError);
    });
  });

  it('names are checked', () => {
    assert.throws(() => new Barrier(client, ''), InvalidArgumentError);
    assert.throws(() => new Barrier(client, 'barriers/x/'), InvalidArgumentError);
  });
});

describe('Go and TypeScript on the same recipes (go.etcd.io/etcd/client/v3/experimental/recipes)', () => {
  it("one Barrier: each waits on the other's hold and passes on the other's release", T, async (t) => {
    const name = `${fresh('go-barrier')}b`;
    const go = await startGo(t);
    try {
      const b = new Barrier(client, name);
      // Go holds; ours waits.
      assert.equal((await go.call('g1', 'barrier-hold', { name }, 'held')).created, true);
      const kv = await client.get(name);
      assert.equal(kv?.lease, 0n);
      assert.equal(kv.value.length, 0, 'Go writes the same key: the name, empty, no lease');
      await b.hold(); // held already: ours leaves Go's key alone
      assert.equal((await client.get(name))?.modRevision, kv.modRevision);
      await go.session('g2');
      const w0 = await watchers();
      const ours = track(b.wait());
      await blocked(w0, 1);
      // A Go waiter too: Barrier.Wait reads the key (a Range), then watches from there.
      const from = go.events.length;
      go.send('g2', 'barrier-wait', { name });
      await blocked(w0, 2);
      assert.equal(ours.settled, false);
      assert.deepEqual(
        go.pending('g2').filter((e) => e.event === 'waited'),
        [],
        'Go waits while the barrier is held',
      );
      // Ours releases Go's hold: both pass.
      await b.release();
      await ours.promise;
      await go.until((e) => e.id === 'g2' && e.event === 'waited', from);

      // Ours holds; Go's Hold finds the key (ErrKeyExists), Go releases it, ours passes.
      await b.hold();
      assert.equal((await go.call('g1', 'barrier-hold', { name }, 'held')).created, false);
      const w1 = await watchers();
      const again = track(b.wait());
      await blocked(w1, 1);
      assert.equal(again.settled, false);
      await go.call('g1', 'barrier-release', { name }, 'released');
      await again.promise;
    } finally {
      assert.equal(await go.close(), 0, go.stderr);
    }
    await assertNoKeys(client, name);
  });

  it('one DoubleBarrier with Go and TypeScript members, either one the oldest; a Go member beyond the count is refused', T, async (t) => {
    const name = `${fresh('go-dbarrier')}db`;
    const go = await startGo(t);
    const ss = await sessions(3);
    const log = new EventLog(client, `${name}/`);
    await log.ready;
    try {
      const [t1, t2, t3] = ss.map((s) => new DoubleBarrier(s, name, 3)) as [DoubleBarrier, DoubleBarrier, DoubleBarrier];
      await go.session('g1');
      await go.session('g2');

      // Round 1: ours is the oldest, Go's the second, ours the third (which opens it).
      let from = log.events.length;
      let base = await handled('Txn');
      const e1 = track(t1.enter());
      await answered('Txn', base, 2);
      const goFrom = go.events.length;
      go.send('g1', 'dbarrier-enter', { name, n: 3 });
      const goKey = (await waiterPut(log, name, from + 1)).key;
      assert.match(goKey, new RegExp(`^${name}/waiters/\\d+$`), "Go's key has the layout ours has");
      await t2.enter();
      await e1.promise;
      const entered = await go.until((e) => e.id === 'g1' && e.event === 'entered', goFrom);
      assert.equal(entered.key, goKey);
      // Full: a further member is refused, Go's and ours alike.
      const refused = await go.call('g2', 'dbarrier-enter', { name, n: 3 }, 'too-many');
      assert.match(String(refused.error), /too many clients/);
      await assert.rejects(t3.enter(), TooManyClientsError);
      // Go leaves first (not the oldest: deletes its key and waits), then the oldest, ours.
      const goLeft = go.events.length;
      go.send('g1', 'dbarrier-leave');
      await log.deleted(goKey);
      base = await handled('Range');
      const l1 = track(t1.leave());
      await answered('Range', base, 1);
      assert.equal(l1.settled, false);
      assert.deepEqual(
        go.pending('g1').filter((e) => e.event === 'left'),
        [],
        'Go waits while t2 is inside',
      );
      await t2.leave();
      await l1.promise;
      await go.until((e) => e.id === 'g1' && e.event === 'left', goLeft);
      await assertNoKeys(client, name);

      // Round 2: Go's member is the oldest; it deletes <name>/ready when it is alone.
      from = log.events.length;
      const goFrom2 = go.events.length;
      go.send('g1', 'dbarrier-enter', { name, n: 3 });
      const goKey2 = (await waiterPut(log, name, from)).key;
      base = await handled('Txn');
      const e2 = track(t1.enter());
      await answered('Txn', base, 2);
      await t2.enter();
      await e2.promise;
      assert.equal((await go.until((e) => e.id === 'g1' && e.event === 'entered', goFrom2)).key, goKey2);
      const [k1, k2] = [t1.key!, t2.key!];
      const leaving = [track(t1.leave()), track(t2.leave())];
      await Promise.all([log.deleted(k1), log.deleted(k2)]);
      await roundTrip();
      assert.deepEqual(
        leaving.map((l) => l.settled),
        [false, false],
        "ours wait for the oldest, Go's",
      );
      assert.ok(await client.get(goKey2), "Go's oldest member keeps its key until it leaves");
      const goLeft2 = go.events.length;
      go.send('g1', 'dbarrier-leave');
      await go.until((e) => e.id === 'g1' && e.event === 'left', goLeft2);
      await Promise.all(leaving.map((l) => l.promise));
    } finally {
      await log.close();
      await closeAll(ss);
      assert.equal(await go.close(), 0, go.stderr);
    }
    await assertNoKeys(client, name);
  });

  it("Go's RWMutex commands: a writer blocks a reader, and a reader blocks the next writer", T, async (t) => {
    const name = `${fresh('go-rwmutex')}rw`;
    const go = await startGo(t);
    const log = new EventLog(client, `${name}/`);
    await log.ready;
    try {
      await go.session('w');
      await go.session('r');
      const w = await go.call('w', 'wlock', { name }, 'wlocked');
      assert.match(String(w.key), new RegExp(`^${name}/write/\\d+$`));
      assert.equal(BigInt(w.rev!), (await client.get(String(w.key)))?.createRevision);
      // The reader queues behind the writer: its key, then a read of the last older writer (a Range).
      let from = log.events.length;
      const base = await handled('Range');
      const rFrom = go.events.length;
      go.send('r', 'rlock', { name });
      const rKey = (await log.next((e) => e.type === 'put' && e.key.startsWith(`${name}/read/`), from)).key;
      await answered('Range', base, 1);
      await go.session('w'); // and a round trip through the Go process
      assert.deepEqual(
        go.pending('r').filter((e) => e.event === 'rlocked'),
        [],
        'the reader waits while the writer holds',
      );
      const wu = await go.call('w', 'rwunlock', {}, 'rwunlocked');
      assert.deepEqual([wu.key, wu.rev], [w.key, w.rev]);
      const r = await go.until((e) => e.id === 'r' && e.event === 'rlocked', rFrom);
      assert.equal(r.key, rKey);
      // Now a writer queues behind the reader.
      from = log.events.length;
      const wFrom = go.events.length;
      go.send('w', 'wlock', { name });
      await log.next((e) => e.type === 'put' && e.key.startsWith(`${name}/write/`), from);
      await go.call('r', 'session', {}, 'session'); // a round trip through the Go process
      assert.deepEqual(
        go.events.slice(wFrom).filter((e) => e.id === 'w' && e.event === 'wlocked'),
        [],
        'the writer waits while the reader holds',
      );
      const ru = await go.call('r', 'rwunlock', {}, 'rwunlocked');
      assert.deepEqual([ru.key, ru.rev], [r.key, r.rev]);
      await go.until((e) => e.id === 'w' && e.event === 'wlocked', wFrom);
      await go.call('w', 'rwunlock', {}, 'rwunlocked');
    } finally {
      await log.close();
      assert.equal(await go.close(), 0, go.stderr);
    }
    await assertNoKeys(client, name);
  });
});
