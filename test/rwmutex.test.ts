// RWMutex against a real single-member etcd: keys, readers share, a writer excludes everyone, a
// waiting writer is not starved by later readers, FIFO between writers, try-variants and handles
// (giving up and losing: rwmutex-loss.test.ts). Each test uses its own names and leaves nothing.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { type Client, InvalidArgumentError, Mutex, RWLockLostError, RWMutex } from '../src/index.js';
import {
  assertNoKeys,
  etcdFile,
  track,
  type Tracked,
  closeAll,
  settledOrHang,
  keysUnder,
  withSessions,
  assertOwnerCompareFences,
} from './helpers.js';
import { waitersOn } from './rwmutex-helpers.js';

const ROOT = 'test/rwmutex/';
let client: Client;
const file = etcdFile(ROOT, (_, c) => (client = c));
const { fresh, sessions } = file;
const withWaiters = waitersOn(file);

/** Which of `ts` have settled, as a string of 1s and 0s (for readable assertions). */
const states = (ts: Tracked<unknown>[]): string => ts.map((t) => (t.settled ? '1' : '0')).join('');

describe('RWMutex: keys', () => {
  it('keys are <name>/read/<lease hex> and <name>/write/<lease hex>, empty, on the session lease; fencing token = CreateRevision', async () => {
    const p = fresh('keys');
    const name = `${p}rw`;
    await withSessions(client, p, 1, async ([s]) => {
      const rw = new RWMutex(s!, name);
      const hex = s!.leaseId.toString(16);
      assert.equal(rw.readKey, `${name}/read/${hex}`);
      assert.equal(rw.writeKey, `${name}/write/${hex}`);
      for (const [take, key, mode] of [
        [() => rw.rLock(), rw.readKey, 'read'],
        [() => rw.lock(), rw.writeKey, 'write'],
      ] as const) {
        const h = await take();
        assert.equal(h.mode, mode);
        assert.equal(h.key, key);
        assert.deepEqual(await keysUnder(client, `${name}/`), [key]);
        const kv = await client.get(key);
        assert.ok(kv);
        assert.equal(kv.lease, s!.leaseId);
        assert.equal(kv.value.length, 0, 'an empty value, as Go’s recipe writes it');
        assert.equal(h.fencingToken, kv.createRevision);
        assert.equal(h.session, s);
        h.assertHeld();
        await h.unlock();
        assert.equal(await client.get(key), undefined);
      }
    });
  });

  it('rejects a bad name with InvalidArgumentError', async () => {
    const [s] = await sessions(1);
    try {
      for (const bad of ['', 'locks/rw/']) {
        assert.throws(
          () => new RWMutex(s!, bad),
          (e: unknown) => e instanceof InvalidArgumentError && /lock name/.test(e.message),
        );
      }
    } finally {
      await closeAll([s!]);
    }
  });
});

describe('RWMutex: sharing and exclusion', () => {
  it('readers share: several rLock() hold at once', async () => {
    const p = fresh('share');
    const name = `${p}rw`;
    const ss = await sessions(4);
    try {
      const taking = ss.map((s) => track(new RWMutex(s, name).rLock()));
      const hs = await Promise.all(taking.map((t, i) => settledOrHang(t, `reader ${i} to hold beside the others`)));
      for (const h of hs) h.assertHeld();
      assert.equal((await keysUnder(client, `${name}/read/`)).length, 4);
      await Promise.all(hs.map((h) => h.unlock()));
    } finally {
      await closeAll(ss);
    }
    await assertNoKeys(client, p);
  });

  it('a writer waits for every reader before it; while it holds, readers and writers wait', { timeout: 60_000 }, () =>
    withWaiters('exclude', { own: 2, waiting: 3 }, async ({ name, probe, own: [r1, r2], waiting: [w, r3, w2], pending }) => {
      const [h1, h2] = await Promise.all([r1!, r2!].map((s) => new RWMutex(s, name).rLock()));
      const writer = track(new RWMutex(w!, name).lock());
      pending.push(writer);
      await probe.blocked(1, 'the writer blocked');
      await h1!.unlock();
      await probe.blocked(1, 'the writer blocked again, behind the other reader');
      assert.equal(writer.settled, false, 'one reader still holds');
      await h2!.unlock();
      const hw = await writer.promise;
      // Now a reader and a writer arrive: both wait for the holder.
      const reader = track(new RWMutex(r3!, name).rLock());
      pending.push(reader);
      await probe.blocked(1);
      const writer2 = track(new RWMutex(w2!, name).lock());
      pending.push(writer2);
      await probe.blocked(2);
      assert.equal(states([reader, writer2]), '00', 'a writer holds: nobody else');
      await hw.unlock();
      const hr = await reader.promise;
      await probe.blocked(1, 'the second writer blocked, now behind the reader');
      assert.equal(writer2.settled, false, 'the reader holds: the second writer waits');
      await hr.unlock();
      const hw2 = await writer2.promise;
      await hw2.unlock();
    }),
  );

  it('no writer starvation: readers arriving after a waiting writer wait until it has held and released', { timeout: 60_000 }, () =>
    withWaiters('no-starvation', { waiting: 3 }, async ({ name, probe, own: [r1], waiting: [w, r2, r3], pending }) => {
      const h1 = await new RWMutex(r1!, name).rLock();
      const writer = track(new RWMutex(w!, name).lock());
      await probe.blocked(1);
      // Only a reader holds, yet these readers queue behind the waiting writer.
      const later = [r2!, r3!].map((s) => track(new RWMutex(s, name).rLock()));
      pending.push(writer, ...later);
      await probe.blocked(3);
      assert.equal(states(pending), '000');
      await h1.unlock();
      const hw = await writer.promise;
      await probe.blocked(2, 'the later readers blocked on the writer');
      assert.equal(states(later), '00', 'the writer holds: the later readers still wait');
      await hw.unlock();
      const [a, b] = await Promise.all(later.map((t) => t.promise));
      // Both hold together.
      a!.assertHeld();
      b!.assertHeld();
      assert.deepEqual((await keysUnder(client, `${name}/`)).sort(), [a!.key, b!.key].sort());
      await Promise.all([a!.unlock(), b!.unlock()]);
    }),
  );

  it('no writer starvation by one process: its read asked for after a writer queued waits for that writer', { timeout: 60_000 }, () =>
    withWaiters('one-process-reads', { own: 0, waiting: 2 }, async ({ name, probe, waiting: [r, w], pending }) => {
      const reads = new RWMutex(r!, name);
      // A server taking a read lock per request under steady load: the reads always overlap.
      const h1 = await reads.rLock();
      const writer = track(new RWMutex(w!, name).lock());
      await probe.blocked(1);
      const asked = probe.txns;
      const h2 = track(reads.rLock()); // asked for after the writer queued
      pending.push(writer, h2);
      // Without the rule it joins h1's key and holds at once, and the key never goes while reads overlap.
      await probe.quiet('the second read to have asked etcd', () => probe.txns > asked);
      assert.equal(h2.settled, false, 'the later read waits');
      await h1.unlock();
      const hw = await writer.promise;
      assert.equal(h2.settled, false, 'no reader inside while the writer holds');
      const h3 = track(reads.rLock()); // joins h2's wait: both behind the writer
      pending.push(h3);
      await hw.unlock();
      const [a, b] = await Promise.all([h2.promise, h3.promise]);
      assert.ok(a.fencingToken > hw.fencingToken, 'a new read key, behind the writer');
      assert.equal(a.fencingToken, b.fencingToken, 'later reads of the process share it');
      await Promise.all([a.unlock(), b.unlock()]);
      // A downgrade still holds at once.
      const wl = await reads.lock();
      const down = await reads.rLock();
      await wl.unlock();
      down.assertHeld();
      await down.unlock();
    }),
  );

  it('writers are served in CreateRevision order, one at a time', { timeout: 60_000 }, () => {
    const n = 5;
    return withWaiters('writers-fifo', { waiting: n }, async ({ name, probe, own: [first], waiting: ws, pending }) => {
      let current = await new RWMutex(first!, name).lock();
      for (let i = 0; i < n; i++) {
        pending.push(track(new RWMutex(ws[i]!, name).lock()));
        await probe.blocked(i + 1); // one at a time: the enqueue order is known
      }
      for (let i = 0; i < n; i++) {
        await current.unlock();
        const next = await pending[i]!.promise;
        assert.ok(next.fencingToken > current.fencingToken);
        assert.equal(next.key, `${name}/write/${ws[i]!.leaseId.toString(16)}`);
        await probe.blocked(n - i - 1);
        assert.equal(states(pending), '1'.repeat(i + 1) + '0'.repeat(n - i - 1), `after unlock ${i}, only writer ${i} moved`);
        current = next;
      }
      await current.unlock();
    });
  });

  it('a reader waits only for older writers, not for older readers', { timeout: 60_000 }, () =>
    withWaiters('reader-rule', { waiting: 3 }, async ({ name, probe, own: [w1], waiting: [r1, r2, w2], pending }) => {
      const hw1 = await new RWMutex(w1!, name).lock();
      const readers = [r1!, r2!].map((s) => track(new RWMutex(s, name).rLock()));
      pending.push(...readers);
      await probe.blocked(2);
      const writer2 = track(new RWMutex(w2!, name).lock());
      pending.push(writer2);
      await probe.blocked(3);
      await hw1.unlock();
      // Both readers hold at once: the younger did not wait for the older one to unlock.
      const [a, b] = await Promise.all(readers.map((t) => t.promise));
      a!.assertHeld();
      b!.assertHeld();
      await probe.blocked(1, 'the second writer blocked behind the readers');
      assert.equal(writer2.settled, false);
      await a!.unlock();
      await probe.blocked(1);
      assert.equal(writer2.settled, false, 'one reader older than the writer still holds');
      await b!.unlock();
      const h = await writer2.promise;
      await h.unlock();
    }),
  );

  it('mixed readers and writers: a writer is never inside with anyone else', { timeout: 120_000 }, async () => {
    const p = fresh('mixed');
    const name = `${p}rw`;
    const workers = 6;
    const rounds = 4;
    const ss = await sessions(workers);
    let readers = 0;
    let writers = 0;
    let maxReaders = 0;
    const violations: string[] = [];
    try {
      await client.put(`${p}counter`, '0');
      await Promise.all(
        ss.map(async (s, i) => {
          const rw = new RWMutex(s, name);
          for (let r = 0; r < rounds; r++) {
            if ((i + r) % 3 === 0) {
              const h = await rw.lock();
              writers++;
              if (writers > 1 || readers > 0) violations.push(`writer with ${writers - 1} writers and ${readers} readers`);
              const v = Number((await client.get(`${p}counter`))!.value.toString());
              await client.put(`${p}counter`, String(v + 1));
              writers--;
              await h.unlock();
            } else {
              const h = await rw.rLock();
              readers++;
              maxReaders = Math.max(maxReaders, readers);
              if (writers > 0) violations.push('reader with a writer');
              await client.get(`${p}counter`); // hold across a round trip
              readers--;
              await h.unlock();
            }
          }
        }),
      );
      assert.deepEqual(violations, []);
      const writes = ss.flatMap((_, i) => Array.from({ length: rounds }, (__, r) => (i + r) % 3 === 0)).filter(Boolean).length;
      assert.equal((await client.get(`${p}counter`))?.value.toString(), String(writes), 'no write lost');
    } finally {
      await closeAll(ss);
      await client.delete(p, { prefix: true });
    }
  });
});

describe('RWMutex: other names under the prefix', () => {
  it('a writer is not blocked by the keys of a nested name such as <name>/lock (etcd 6278)', { timeout: 60_000 }, async () => {
    const p = fresh('6278');
    const name = `${p}rw`;
    await withSessions(client, p, 2, async ([a, b]) => {
      const nested = await new Mutex(a!, `${name}/lock`).lock(); // key <name>/lock/<hex>: another lock
      const w = await new RWMutex(b!, name).tryLock();
      assert.ok(w, 'tryLock: nobody holds or waits for this RWMutex');
      await w.unlock();
      const r = await new RWMutex(b!, name).tryRLock();
      assert.ok(r);
      await r.unlock();
      await nested.unlock();
    });
  });

  it('readers are not blocked by a nested name under <name>/write/', async () => {
    const p = fresh('6278-readers');
    const name = `${p}rw`;
    await withSessions(client, p, 2, async ([a, b]) => {
      const nested = await new Mutex(a!, `${name}/write/x`).lock(); // key <name>/write/x/<hex>
      const r = await new RWMutex(b!, name).tryRLock();
      assert.ok(r, 'tryRLock: no writer of this RWMutex');
      await r.unlock();
      await nested.unlock();
    });
  });
});

describe('RWMutex: tryRLock and tryLock', () => {
  it('take a free lock; tryRLock also joins readers', async () => {
    const p = fresh('try-free');
    await withSessions(client, p, 3, async ([a, b, c]) => {
      const w = await new RWMutex(a!, `${p}w`).tryLock();
      assert.ok(w, 'tryLock on a free lock');
      assert.equal(w.mode, 'write');
      assert.equal((await client.get(w.key))?.createRevision, w.fencingToken);
      const r1 = await new RWMutex(b!, `${p}r`).tryRLock();
      const r2 = await new RWMutex(c!, `${p}r`).tryRLock();
      assert.ok(r1 && r2, 'tryRLock on a free lock, and beside another reader');
      assert.equal(r2.mode, 'read');
      await Promise.all([w.unlock(), r1.unlock(), r2.unlock()]);
    });
  });

  it('return null when the lock is not theirs now, leaving no key', () =>
    withWaiters('try-null', { own: 3 }, async ({ name, probe, own: [a, b, c], waiting: [w] }) => {
      // A reader holds: tryLock fails, tryRLock succeeds.
      const r = await new RWMutex(a!, name).rLock();
      assert.equal(await new RWMutex(b!, name).tryLock(), null);
      assert.deepEqual(await keysUnder(client, `${name}/`), [r.key]);
      // A writer waits behind the reader: a newcomer reader must not pass it.
      const writer = track(new RWMutex(w!, name).lock());
      await probe.blocked(1);
      const before = await keysUnder(client, `${name}/`);
      assert.equal(await new RWMutex(b!, name).tryRLock(), null, 'tryRLock behind a waiting writer');
      assert.equal(await new RWMutex(b!, name).tryLock(), null);
      assert.deepEqual(await keysUnder(client, `${name}/`), before);
      await r.unlock();
      const hw = await writer.promise;
      // A writer holds: both fail.
      assert.equal(await new RWMutex(c!, name).tryRLock(), null);
      assert.equal(await new RWMutex(c!, name).tryLock(), null);
      assert.deepEqual(await keysUnder(client, `${name}/`), [hw.key]);
      await hw.unlock();
    }));
});

describe('RWMutex: handles', () => {
  it('unlock is idempotent; await using unlocks; a released handle is no longer held', async () => {
    const p = fresh('unlock');
    const name = `${p}rw`;
    await withSessions(client, p, 1, async ([s]) => {
      const h = await new RWMutex(s!, name).lock();
      const signal = h.signal;
      await h.unlock();
      await Promise.all([h.unlock(), h.unlock()]);
      assert.ok(signal.aborted);
      assert.throws(() => h.assertHeld(), RWLockLostError);
      let key: string;
      {
        await using r = await new RWMutex(s!, name).rLock();
        key = r.key;
        assert.ok(await client.get(key));
      }
      assert.equal(await client.get(key), undefined);
    });
  });

  it('ownerCompare() fences a writer’s writes: refused once its key is gone', async () => {
    const p = fresh('owner-compare');
    const name = `${p}rw`;
    const [s] = await sessions(1);
    try {
      await assertOwnerCompareFences(
        client,
        p,
        () => new RWMutex(s!, name).lock(),
        (h) => h.unlock(),
      );
    } finally {
      await closeAll([s!]);
      await client.delete(p, { prefix: true });
    }
  });
});
