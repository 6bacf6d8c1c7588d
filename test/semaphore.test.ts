// Semaphore against a real single-member etcd: N permits at once, FIFO grants, and one release waking
// one waiter (handles and permit counts: semaphore-handles.test.ts; giving up and losing:
// semaphore-loss.test.ts). Each test uses its own names and leaves no key and no lease.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, MAX_PERMITS, Semaphore, Session, type PermitHandle } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import {
  EventLog,
  assertNoKeys,
  etcdFile,
  grpcHandled,
  track,
  type Tracked,
  closeAll,
  settleAll,
  settledOrHang,
  keysUnder,
  withSessions,
} from './helpers.js';
import { Probe } from './probe.js';

const ROOT = 'test/semaphore/';
let etcd: EtcdCluster;
let client: Client;
const { fresh, sessions, probed } = etcdFile(ROOT, (e, c) => ((etcd = e), (client = c)));

/** A permit granted to a waiter is marked by a put on its key after the one that created it. */
const isMark = (e: { type: string; rev: bigint; createRevision: bigint }): boolean => e.type === 'put' && e.rev !== e.createRevision;

describe('Semaphore: permits', () => {
  it('a permit key is <name>/<lease hex> on the session lease, holding the permit count; fencing token = its CreateRevision', async () => {
    const p = fresh('key');
    await withSessions(client, p, 1, async ([s]) => {
      const sem = new Semaphore(s!, `${p}sem`, { permits: 3 });
      assert.equal(sem.key, `${p}sem/${s!.leaseId.toString(16)}`);
      assert.equal(sem.permits, 3);
      const h = await sem.acquire();
      assert.equal(h.key, sem.key);
      const kv = await client.get(h.key);
      assert.ok(kv, 'the key exists while held');
      assert.equal(kv.lease, s!.leaseId);
      assert.equal(kv.value.toString(), '3', 'the value is the permit count');
      assert.equal(h.fencingToken, kv.createRevision);
      assert.equal(h.session, s);
      h.assertHeld();
      assert.equal(h.signal.aborted, false);
      await h.release();
      assert.equal(await client.get(h.key), undefined, 'release removes the key');
    });
  });

  it('N sessions hold a permit at once; the N+1th waits until one of them releases', async () => {
    const p = fresh('n-at-once');
    const name = `${p}sem`;
    const probe = probed();
    const ss = await sessions(4, 30, probe.client);
    try {
      const held = await Promise.all(ss.slice(0, 3).map((s) => new Semaphore(s, name, { permits: 3 }).acquire()));
      for (const h of held) h.assertHeld();
      const fourth = track(new Semaphore(ss[3]!, name, { permits: 3 }).acquire());
      await probe.blocked(1, 'the fourth is queued and blocked');
      assert.equal(fourth.settled, false, 'three permits are taken: the fourth waits');
      assert.equal((await keysUnder(client, `${name}/`)).length, 4, 'the waiter’s key is queued behind the holders');
      await held[1]!.release();
      const h = await fourth.promise;
      assert.ok(h.fencingToken > held[2]!.fencingToken);
      held[0]!.assertHeld();
      held[2]!.assertHeld();
      await Promise.all([h, held[0]!, held[2]!].map((x) => x.release()));
    } finally {
      await closeAll(ss);
      await probe.client.close();
    }
    await assertNoKeys(client, p);
  });

  it('each release hands the permit to the oldest waiter, and nobody else moves', { timeout: 60_000 }, async () => {
    const p = fresh('fifo-step');
    const name = `${p}sem`;
    const waiters = 6;
    const probe = probed();
    const hs = await sessions(2);
    const ws = await sessions(waiters, 30, probe.client);
    const pending: Tracked<PermitHandle>[] = [];
    try {
      const holders = await Promise.all(hs.map((s) => new Semaphore(s, name, { permits: 2 }).acquire()));
      for (let i = 0; i < waiters; i++) {
        pending.push(track(new Semaphore(ws[i]!, name, { permits: 2 }).acquire()));
        await probe.blocked(i + 1, `waiter ${i} queued`); // one at a time: the enqueue order is known
      }
      const created = await Promise.all(ws.map(async (s) => (await client.get(`${name}/${s.leaseId.toString(16)}`))!.createRevision));
      for (let i = 1; i < waiters; i++) assert.ok(created[i]! > created[i - 1]!);
      // Release the oldest holder each time: the oldest waiter, and only it, gets the permit.
      const current = [...holders];
      for (let i = 0; i < waiters; i++) {
        await current.shift()!.release();
        const h = await pending[i]!.promise;
        assert.equal(h.fencingToken, created[i], `waiter ${i} got the permit, token = its CreateRevision`);
        await probe.blocked(waiters - i - 1, `the ${waiters - i - 1} waiters left blocked again`);
        assert.deepEqual(
          pending.map((t) => t.settled),
          pending.map((_, j) => j <= i),
          `after release ${i}, only waiters 0..${i} hold`,
        );
        current.push(h);
      }
      await Promise.all(current.map((h) => h.release()));
    } finally {
      await closeAll([...hs, ...ws]);
      await probe.client.close();
      await settleAll(pending);
    }
    await assertNoKeys(client, p);
  });

  it('free-running: 20 waiters on 3 permits are granted in CreateRevision order, never more than 3 at once', {
    timeout: 120_000,
  }, async () => {
    const p = fresh('fifo-run');
    const name = `${p}sem`;
    const permits = 3;
    const n = 20;
    const clients = [client, new Client({ endpoints: etcd.endpoints })];
    const hs = await sessions(permits);
    const ws = await Promise.all(Array.from({ length: n }, (_, i) => Session.create(clients[i % 2]!, { ttl: 30 })));
    const log = new EventLog(client, `${name}/`);
    try {
      await log.ready;
      const holders = await Promise.all(hs.map((s) => new Semaphore(s, name, { permits }).acquire()));
      let inside = permits;
      let maxInside = permits;
      const created: bigint[] = [];
      const tokens: bigint[] = [];
      const work: Promise<void>[] = [];
      for (let i = 0; i < n; i++) {
        const sem = new Semaphore(ws[i]!, name, { permits });
        const from = log.events.length;
        work.push(
          sem.acquire().then(async (h) => {
            inside++;
            maxInside = Math.max(maxInside, inside);
            tokens.push(h.fencingToken);
            await client.get(h.key); // hold across a round trip: an extra holder granted meanwhile is counted
            inside--;
            await h.release();
          }),
        );
        created.push((await log.put(sem.key, from)).createRevision);
      }
      for (const h of holders) {
        inside--;
        await h.release();
      }
      await Promise.all(work);
      assert.ok(maxInside <= permits, `${maxInside} holders at once`);
      // Our log sees what etcd recorded: wait until it has every waiter's delete.
      await Promise.all(ws.map((s) => log.deleted(`${name}/${s.leaseId.toString(16)}`)));
      // Grants as etcd recorded them: each waiter's mark, in revision order.
      const marks = log.events.filter(isMark).map((e) => e.createRevision);
      assert.deepEqual(marks, created, 'each waiter marked its permit, in enqueue order');
      assert.deepEqual(
        [...tokens].sort((a, b) => (a < b ? -1 : 1)),
        created,
      );
      // And at each mark, the waiter was among the `permits` oldest keys then present (a delete
      // event carries no CreateRevision: keys are tracked by name).
      const live = new Map<string, bigint>();
      for (const e of log.events) {
        if (e.type === 'delete') live.delete(e.key);
        else if (!isMark(e)) live.set(e.key, e.createRevision);
        else {
          const older = [...live.values()].filter((c) => c < e.createRevision).length;
          assert.ok(older < permits, `${e.key} took a permit with ${older} older keys present`);
        }
      }
    } finally {
      await log.close();
      await closeAll([...hs, ...ws]);
      await clients[1]!.close();
    }
    await assertNoKeys(client, p);
  });

  it('two holders releasing at once let the two oldest waiters in, in order, and nobody else', { timeout: 60_000 }, async () => {
    const p = fresh('two-at-once');
    const name = `${p}sem`;
    const probe = probed();
    const hs = await sessions(2);
    const ws = await sessions(4, 30, probe.client);
    const log = new EventLog(client, `${name}/`);
    const pending: Tracked<PermitHandle>[] = [];
    try {
      await log.ready;
      const holders = await Promise.all(hs.map((s) => new Semaphore(s, name, { permits: 2 }).acquire()));
      for (let i = 0; i < 4; i++) {
        pending.push(track(new Semaphore(ws[i]!, name, { permits: 2 }).acquire()));
        await probe.blocked(i + 1);
      }
      const from = log.events.length;
      await Promise.all(holders.map((h) => h.release()));
      const [a, b] = await Promise.all([
        settledOrHang(pending[0]!, 'the head’s permit'),
        settledOrHang(pending[1]!, 'the second waiter’s permit'),
      ]);
      await probe.blocked(2, 'the last two waiters blocked again');
      assert.equal(pending[2]!.settled || pending[3]!.settled, false, 'two permits freed, two waiters in');
      // As etcd recorded the grants: the head marked its key first, then the waiter behind it.
      await log.next((e) => isMark(e) && e.key === b.key, from);
      assert.deepEqual(
        log.events
          .slice(from)
          .filter(isMark)
          .map((e) => e.key),
        [a.key, b.key],
      );
      await a.release();
      const c = await pending[2]!.promise;
      await b.release();
      const d = await pending[3]!.promise;
      await Promise.all([c.release(), d.release()]);
    } finally {
      await log.close();
      await closeAll([...hs, ...ws]);
      await probe.client.close();
      await settleAll(pending);
    }
    await assertNoKeys(client, p);
  });

  it('MAX_PERMITS holders and a waiter at the head: the head’s one-Txn check of every holder fits etcd’s limit', {
    timeout: 60_000,
  }, async () => {
    const p = fresh('max-permits');
    const name = `${p}sem`;
    const probe = probed();
    const hs = await sessions(MAX_PERMITS);
    const [w] = await sessions(1, 30, probe.client);
    try {
      const holders = await Promise.all(hs.map((s) => new Semaphore(s, name, { permits: MAX_PERMITS }).acquire()));
      const waiting = track(new Semaphore(w!, name, { permits: MAX_PERMITS }).acquire());
      await probe.blocked(1, 'the waiter blocked at the head');
      assert.equal(waiting.settled, false);
      assert.ok(Probe.isPrefix(probe.active()[0]!), 'the head watches the prefix');
      await holders[17]!.release();
      const h = await waiting.promise;
      await Promise.all([...holders.filter((_, i) => i !== 17), h].map((x) => x.release()));
    } finally {
      await closeAll([...hs, w!]);
      await probe.client.close();
    }
    await assertNoKeys(client, p);
  });
});

describe('Semaphore: one release wakes one waiter (no herd)', () => {
  /**
   * `waiters` queued behind 2 holders; one holder releases. Counts what etcd answered (Txns, Ranges)
   * and the watches the waiters created, from the release until the oldest waiter holds and the
   * next one is blocked again at the head.
   */
  async function oneRelease(label: string, waiters: number): Promise<{ txns: number; ranges: number; watches: number; granted: number }> {
    const p = fresh(label);
    const name = `${p}sem`;
    const url = etcd.clientUrls[0]!;
    const probe = probed();
    const hs = await sessions(2);
    const ws = await sessions(waiters, 30, probe.client);
    const pending: Tracked<PermitHandle>[] = [];
    let cost: { txns: number; ranges: number; watches: number; granted: number } | undefined;
    try {
      const holders = await Promise.all(hs.map((s) => new Semaphore(s, name, { permits: 2 }).acquire()));
      for (let i = 0; i < waiters; i++) {
        pending.push(track(new Semaphore(ws[i]!, name, { permits: 2 }).acquire()));
        await probe.blocked(i + 1, `waiter ${i} queued`);
      }
      assert.equal(probe.active().filter(Probe.isPrefix).length, 1, 'only the head watches the prefix');
      const txns = await grpcHandled(url, 'Txn');
      const ranges = await grpcHandled(url, 'Range');
      const watches = probe.watches.length;
      await holders[0]!.release();
      const first = await pending[0]!.promise;
      // The next waiter is the head now: its new prefix watch is open, and everything is answered.
      await probe.quiet(
        'the next waiter blocked at the head',
        (open) => open.length === waiters - 1 && open.some((w) => Probe.isPrefix(w) && probe.watches.indexOf(w) >= watches),
      );
      cost = {
        txns: (await grpcHandled(url, 'Txn')) - txns,
        ranges: (await grpcHandled(url, 'Range')) - ranges,
        watches: probe.watches.length - watches,
        granted: pending.filter((t) => t.settled).length,
      };
      assert.equal(first.fencingToken, (await client.get(`${name}/${ws[0]!.leaseId.toString(16)}`))?.createRevision);
      await closeAll(ws.slice(1)); // the waiters give up (their permits never came)
      await settleAll(pending);
      await Promise.all([first.release(), holders[1]!.release()]);
    } finally {
      await closeAll([...hs, ...ws]);
      await probe.client.close();
      await settleAll(pending);
    }
    await assertNoKeys(client, p);
    return cost;
  }

  it('one release costs the same few requests with 5 or 30 waiters, and lets exactly one waiter in', { timeout: 120_000 }, async (t) => {
    const few = await oneRelease('herd-5', 5);
    const many = await oneRelease('herd-30', 30);
    t.diagnostic(`one release with 5 waiters: ${JSON.stringify(few)}; with 30: ${JSON.stringify(many)}`);
    assert.equal(few.granted, 1, 'one release, one new holder');
    assert.equal(many.granted, 1, 'one release, one new holder');
    // The release (1); the head, woken by the delete of a holder it had confirmed, marks its key at
    // once (1); the next waiter's look and its check once its watch is up (2); one watch: the new
    // head's on the prefix.
    assert.ok(many.txns + many.ranges <= 4, `one release cost ${many.txns} Txns and ${many.ranges} Ranges with 30 waiters`);
    assert.ok(many.watches <= 1, `one release made the waiters open ${many.watches} watches`);
    assert.deepEqual(many, few, 'the cost of a release does not grow with the queue');
  });
});
