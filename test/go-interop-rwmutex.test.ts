// Go's recipe.RWMutex (driven through interop/go) and our RWMutex on one name, on real etcd: each
// side's writer excludes the other's readers and writer, readers share across languages. The Go
// program is built once into node_modules/.cache (see test/go-fleet.ts); it needs Go >= 1.26.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { type Client, RWMutex, Session } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { EventLog, assertNoKeys, assertNoLeases, etcdForFile, settle, track } from './helpers.js';
import { goStarter, closeGoFleets } from './go-fleet.js';

const ROOT = 'test/go-interop-rwmutex/';
let etcd: EtcdCluster;
let client: Client;
const startGo = goStarter(() => etcd);
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)), { beforeChecks: closeGoFleets });

// Hang guards only: every wait below is on an event, a promise or a line from the Go process.
const T = { timeout: 120_000 };

describe("Go's recipe.RWMutex and our RWMutex on one name", () => {
  it('a Go writer excludes our readers and writer; our reader excludes a Go writer; readers share across languages', T, async (t) => {
    const p = fresh('rw');
    const name = `${p}rw`;
    const go = await startGo(t);
    const [s1, s2] = [await Session.create(client, { ttl: 30 }), await Session.create(client, { ttl: 30 })];
    const log = new EventLog(client, `${name}/`);
    try {
      await log.ready;
      await go.session('gw');
      await go.session('gr');
      // 1. Go writes: our tryRLock is refused, our rLock waits until Go unlocks.
      const gw = await go.call('gw', 'wlock', { name }, 'wlocked');
      assert.match(String(gw.key), new RegExp(`^${name}/write/`));
      const ours = new RWMutex(s1, name);
      const before = log.events.length;
      assert.equal(await ours.tryRLock(), null);
      await log.deleted(ours.readKey, before); // tried, saw Go's writer, left no key
      const reading = track(ours.rLock());
      await log.put(ours.readKey, log.events.length);
      await settle();
      assert.equal(reading.settled, false, "our reader waits while Go's writer holds");
      await go.call('gw', 'rwunlock', {}, 'rwunlocked');
      const r1 = await reading.promise;
      assert.equal(r1.mode, 'read');

      // 2. We read: a Go reader shares with us at once; a Go writer waits for both of us.
      const gr = await go.call('gr', 'rlock', { name }, 'rlocked');
      assert.match(String(gr.key), new RegExp(`^${name}/read/`));
      const fromW = go.events.length;
      go.send('gw', 'wlock', { name });
      await log.next((e) => e.type === 'put' && e.key.startsWith(`${name}/write/`), log.events.length);
      await settle();
      assert.equal(
        go.events.slice(fromW).some((e) => e.id === 'gw' && e.event === 'wlocked'),
        false,
        "Go's writer waits for our reader",
      );
      await r1.unlock();
      await go.call('gr', 'rwunlock', {}, 'rwunlocked');
      const w2 = await go.until((e) => e.id === 'gw' && e.event === 'wlocked', fromW);
      t.diagnostic(`Go writer got the lock after both readers left: ${String(w2.key)}`);

      // 3. Go writes again: our writer waits in line, then gets a larger fencing token.
      const writing = track(new RWMutex(s2, name).lock());
      const queued = await log.put(new RWMutex(s2, name).writeKey, log.events.length);
      await settle();
      assert.equal(writing.settled, false, "our writer waits while Go's writer holds");
      await go.call('gw', 'rwunlock', {}, 'rwunlocked');
      const w3 = await writing.promise;
      assert.equal(w3.fencingToken, queued.createRevision);
      assert.ok(w3.fencingToken > BigInt(w2.rev!));
      await w3.unlock();
    } finally {
      await log.close();
      await Promise.all([s1.close(), s2.close()]);
      assert.equal(await go.close(), 0, go.stderr);
    }
    await assertNoKeys(client, p);
    await assertNoLeases(client);
  });
});
