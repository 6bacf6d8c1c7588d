// The etcd client's watches against a real single-member etcd: order, start revisions, filters,
// ends, compaction, and resuming a dropped stream. Each test works under its own prefix and removes
// what it wrote.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, ClientClosedError, CompactedError, InvalidArgumentError, type WatchBatch } from '../src/index.js';
import { startProxy, type EtcdCluster } from '../src/testing/index.js';
import { grpcStarted, etcdForFile, settledOrHang, track } from './helpers.js';

const ROOT = 'test/client-watch/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

const cleanup = (prefix: string): Promise<bigint> => client.delete(prefix, { prefix: true });

/** Puts `n` keys `<prefix><i>` concurrently, each in its own revision; returns the revisions. */
async function putMany(prefix: string, n: number, from = 0): Promise<bigint[]> {
  const revs: bigint[] = [];
  const width = 64;
  for (let i = from; i < from + n; i += width) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(width, from + n - i) }, (_, j) =>
        client.put(`${prefix}${String(i + j).padStart(6, '0')}`, `v${i + j}`),
      ),
    );
    revs.push(...batch.map((h) => h.revision));
  }
  return revs.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

/** Collects watch batches into a flat list of events until `until` returns true. */
async function collect(w: AsyncIterable<WatchBatch>, until: (events: { type: string; key: string; rev: bigint }[]) => boolean) {
  const events: { type: string; key: string; rev: bigint }[] = [];
  for await (const batch of w) {
    for (const e of batch.events) events.push({ type: e.type, key: e.kv.key.toString(), rev: e.kv.modRevision });
    if (until(events)) break;
  }
  return events;
}

describe('watch', () => {
  it('delivers puts and deletes in order after created resolves', async () => {
    const p = fresh('watch-order');
    const w = client.watch(p, { prefix: true });
    const createdAt = await w.created;
    assert.equal(typeof createdAt, 'bigint');
    const h1 = await client.put(`${p}a`, '1');
    const h2 = await client.put(`${p}b`, '2');
    await client.delete(`${p}a`);
    const events = await collect(w, (ev) => ev.length >= 3);
    assert.deepEqual(events, [
      { type: 'put', key: `${p}a`, rev: h1.revision },
      { type: 'put', key: `${p}b`, rev: h2.revision },
      { type: 'delete', key: `${p}a`, rev: h2.revision + 1n },
    ]);
    assert.equal(w.ended, true, 'breaking out of the loop cancels the watch');
    await cleanup(p);
  });

  it('a watch from "now" sees only events after its created revision', async () => {
    const p = fresh('watch-now');
    await client.put(`${p}before`, '');
    const w = client.watch(p, { prefix: true });
    const createdAt = await w.created;
    await client.put(`${p}after`, '');
    const events = await collect(w, (ev) => ev.length >= 1);
    assert.deepEqual(
      events.map((e) => e.key),
      [`${p}after`],
    );
    assert.ok(events[0]!.rev > createdAt);
    await cleanup(p);
  });

  it('a watch from a past revision replays history first', async () => {
    const p = fresh('watch-replay');
    const h1 = await client.put(`${p}a`, '1');
    await client.put(`${p}a`, '2');
    const w = client.watch(`${p}a`, { startRevision: h1.revision, prevKv: true });
    const values: string[] = [];
    const prev: (string | undefined)[] = [];
    for await (const b of w) {
      for (const e of b.events) {
        values.push(e.kv.value.toString());
        prev.push(e.prevKv?.value.toString());
      }
      if (values.length >= 2) break;
    }
    assert.deepEqual(values, ['1', '2']);
    assert.deepEqual(prev, [undefined, '1']);
    await cleanup(p);
  });

  it('noPut delivers only deletes, noDelete only puts', async () => {
    const p = fresh('watch-filters');
    const deletes = client.watch(p, { prefix: true, noPut: true });
    const puts = client.watch(p, { prefix: true, noDelete: true });
    await Promise.all([deletes.created, puts.created]);
    await client.put(`${p}a`, '');
    await client.delete(`${p}a`);
    await client.put(`${p}b`, '');
    await client.delete(`${p}b`);
    assert.deepEqual(
      (await collect(deletes, (ev) => ev.length >= 2)).map((e) => `${e.type} ${e.key.slice(p.length)}`),
      ['delete a', 'delete b'],
    );
    assert.deepEqual(
      (await collect(puts, (ev) => ev.length >= 2)).map((e) => `${e.type} ${e.key.slice(p.length)}`),
      ['put a', 'put b'],
    );
  });

  it('an aborted signal ends the iteration without error', async () => {
    const ac = new AbortController();
    const w = client.watch(`${fresh('watch-abort')}k`, { signal: ac.signal });
    await w.created;
    const done = collect(w, () => false);
    ac.abort();
    assert.deepEqual(await done, []);
    assert.equal(w.ended, true);
  });

  it('a negative startRevision is refused (etcd 3.4 leaves such a watch silent, later ones call it compacted)', () => {
    for (const startRevision of [-1n, -5n]) {
      assert.throws(() => client.watch(fresh('watch-negative'), { startRevision }), InvalidArgumentError);
    }
  });

  it('client.close() ends its watches with ClientClosedError', async () => {
    const c = new Client({ endpoints: etcd.endpoints });
    const w = c.watch(`${fresh('watch-close')}k`);
    await w.created;
    const done = collect(w, () => false);
    await c.close();
    await assert.rejects(done, ClientClosedError);
  });

  it('a watch from a compacted revision ends with CompactedError carrying the compact revision', async () => {
    const p = fresh('watch-compacted');
    const h1 = await client.put(`${p}k`, '1');
    const h2 = await client.put(`${p}k`, '2');
    await client.compact(h2.revision);
    const w = client.watch(`${p}k`, { startRevision: h1.revision });
    await assert.rejects(
      collect(w, () => false),
      (err: unknown) => {
        assert.ok(err instanceof CompactedError, String(err));
        assert.equal(err.compactRevision, h2.revision);
        return true;
      },
    );
    assert.equal(w.ended, true);
    await cleanup(p);
  });

  it('a watch starting exactly at a compacted delete never skips it silently (etcd 18089)', async () => {
    const p = fresh('watch-compacted-delete');
    await client.put(`${p}k`, '1');
    await client.delete(`${p}k`);
    const del = (await client.put(`${p}other`, '')).revision - 1n; // the delete's revision
    // Physical: returns once the compaction is done. etcd then serves a watch from `del` without
    // the delete at `del` (its tombstone is gone), going straight on to later events.
    await client.compact(del, { physical: true });
    const w = client.watch(`${p}k`, { startRevision: del });
    const later = await client.put(`${p}k`, '2');
    try {
      const first = await w[Symbol.asyncIterator]()
        .next()
        .then(
          (r) => ({ r }),
          (err: unknown) => ({ err }),
        );
      if ('err' in first) {
        // A CompactedError tells the caller to read the state again: acceptable.
        assert.ok(first.err instanceof CompactedError, String(first.err));
      } else {
        const e = first.r.value?.events[0];
        assert.deepEqual([e?.type, e?.kv.modRevision], ['delete', del], `skipped the delete, went on to the put at ${later.revision}`);
      }
    } finally {
      w.cancel();
      await cleanup(p);
    }
  });

  it('etcd counts each Watch stream opened (the resume test relies on it to see a reopened stream)', async () => {
    const before = await grpcStarted(etcd.clientUrls[0]!, 'Watch');
    const c = new Client({ endpoints: etcd.endpoints });
    try {
      await c.watch('k').created;
      assert.equal(await grpcStarted(etcd.clientUrls[0]!, 'Watch'), before + 1);
    } finally {
      await c.close();
    }
  });

  it('resumes after a dropped stream without losing or repeating any revision', { timeout: 120_000 }, async () => {
    const p = fresh('watch-resume');
    const total = 5000;
    const revs = await putMany(p, total);
    const proxy = await startProxy(etcd.endpoints[0]!);
    const c = new Client({ endpoints: proxy.endpoint });
    try {
      const streamsBefore = await grpcStarted(etcd.clientUrls[0]!, 'Watch');
      // From the first revision: etcd sends the catch-up in pieces (1000 revisions per 100 ms sync).
      const w = c.watch(p, { prefix: true, startRevision: revs[0]! });
      const seen: bigint[] = [];
      let cutAfter = -1;
      for await (const batch of w) {
        for (const e of batch.events) seen.push(e.kv.modRevision);
        if (cutAfter < 0) {
          cutAfter = seen.length;
          proxy.cut(); // in the middle of the catch-up: some events arrived, most did not
        }
        if (seen.length >= total) break;
      }
      assert.ok(cutAfter > 0 && cutAfter < total, `the cut must fall inside the catch-up (after ${cutAfter} of ${total})`);
      assert.ok((await grpcStarted(etcd.clientUrls[0]!, 'Watch')) > streamsBefore + 1, 'the watch stream was reopened after the cut');
      assert.equal(seen.length, total);
      assert.deepEqual(seen, revs, 'every revision exactly once, in order');
    } finally {
      await c.close();
      await proxy.close();
      await cleanup(p);
    }
  });

  it('a watch from "now" that delivered nothing yet resumes after a dropped stream from the revision it was created at', async () => {
    const p = fresh('watch-resume-quiet');
    const proxy = await startProxy(etcd.endpoints[0]!);
    const c = new Client({ endpoints: proxy.endpoint });
    try {
      const w = c.watch(p, { prefix: true });
      const createdAt = await w.created;
      assert.equal(await w.created, createdAt, 'asked again once created: the same revision');
      // Down for sure while h1 is written: the resumed watch must start right after its creation.
      proxy.refuse(true);
      proxy.cut();
      const h1 = await client.put(`${p}1`, '');
      proxy.refuse(false);
      const h2 = await client.put(`${p}2`, '');
      const it = w[Symbol.asyncIterator]();
      const got: bigint[] = [];
      while (got.length < 2) {
        const r = await settledOrHang(track(it.next()), 'the events written while the stream was down');
        assert.equal(r.done, false);
        got.push(...r.value.events.map((e) => e.kv.modRevision));
      }
      assert.deepEqual(got, [h1.revision, h2.revision]);
      assert.equal(await w.created, createdAt, 'created still answers the first creation, not the resumed one');
      await it.return?.();
    } finally {
      await c.close();
      await proxy.close();
      await cleanup(p);
    }
  });

  it('created, first asked once the watch was cancelled before etcd confirmed it, rejects', async () => {
    const c = new Client({ endpoints: etcd.endpoints });
    try {
      const w = c.watch(fresh('watch-cancel-early'));
      w.cancel();
      await assert.rejects(settledOrHang(track(w.created), 'created settling'), /cancelled before it was created/);
    } finally {
      await c.close();
    }
  });

  it('resumes live events after a dropped stream', async () => {
    const p = fresh('watch-resume-live');
    const proxy = await startProxy(etcd.endpoints[0]!);
    const c = new Client({ endpoints: proxy.endpoint });
    try {
      const w = c.watch(p, { prefix: true });
      await w.created;
      const h1 = await client.put(`${p}1`, '');
      const it = w[Symbol.asyncIterator]();
      assert.equal((await it.next()).value?.events[0]?.kv.modRevision, h1.revision);
      proxy.cut();
      // Written while the stream is (probably) down: the resumed watch must still deliver them.
      const h2 = await client.put(`${p}2`, '');
      const h3 = await client.put(`${p}3`, '');
      const got: bigint[] = [];
      while (got.length < 2) {
        const r = await it.next();
        assert.equal(r.done, false);
        got.push(...r.value.events.map((e) => e.kv.modRevision));
      }
      assert.deepEqual(got, [h2.revision, h3.revision]);
      await it.return?.();
    } finally {
      await c.close();
      await proxy.close();
      await cleanup(p);
    }
  });
});
