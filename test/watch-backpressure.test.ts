// A watch the application stops reading holds a bounded number of batches and holds up no other
// watch: past 1,024 unread batches it is taken off the stream, and once its consumer is down to 256
// it is created again from the revision it owes, so every event still arrives once, in order.
// Issue 35, item 1: a consumer that had kept up, then paused through a flood, was never put back.
// The failover case is in watch-backpressure-failover.test.ts.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Client, CompactedError } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { etcdForFile, waitFor } from './helpers.js';
import { keepUp, pausedThroughFlood } from './watch-helpers.js';

let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile('test/watch-backpressure/', (e, c) => ((etcd = e), (client = c)));

/** Puts `n` keys under `prefix`, 64 at a time (each its own revision, so mostly its own batch). */
async function putMany(prefix: string, n: number, from = 0): Promise<void> {
  for (let i = from; i < from + n; i += 64) {
    await Promise.all(
      Array.from({ length: Math.min(64, from + n - i) }, (_, j) => client.put(`${prefix}${String(i + j).padStart(6, '0')}`, 'v')),
    );
  }
}

describe('a watch nobody reads', () => {
  it('is taken off the stream past 1,024 unread batches; read later, it delivers every event once, in order; another watch is not held up', async () => {
    const prefix = fresh('unread');
    const slow = client.watch(prefix, { prefix: true });
    const other = client.watch(`${prefix}other`);
    await Promise.all([slow.created, other.created]);
    const total = 3000;
    await putMany(prefix, total);
    // Suspended: no longer on the stream, and its queue stopped growing near the threshold.
    await waitFor(() => slow.id === undefined && slow.resuming, 'the slow watch to be taken off the stream');
    const unread = (slow as unknown as { sink: { pending: number } }).sink.pending;
    assert.ok(unread >= 1024 && unread < 1024 + 64, `${unread} batches queued`);
    // The other watch still gets its events at once.
    await client.put(`${prefix}other`, 'x');
    const it = other[Symbol.asyncIterator]();
    const got = await it.next();
    assert.equal(got.value?.events[0]?.kv.key.toString(), `${prefix}other`);
    // Reading the slow one brings it back: every key once, in revision order.
    const seen: string[] = [];
    let last = 0n;
    for await (const batch of slow) {
      for (const e of batch.events) {
        assert.ok(e.kv.modRevision > last, 'in revision order, no repeat');
        last = e.kv.modRevision;
        seen.push(e.kv.key.toString());
      }
      if (seen.length >= total + 1) break;
    }
    const expected = Array.from({ length: total }, (_, i) => `${prefix}${String(i).padStart(6, '0')}`);
    const keys = seen.filter((k) => k !== `${prefix}other`);
    assert.equal(keys.length, total, 'each event once');
    assert.deepEqual([...keys].sort(), expected);
    other.cancel();
    await client.delete(prefix, { prefix: true });
  });

  it('compacted past while taken off the stream: it delivers what it holds without a gap, then ends with a CompactedError', async () => {
    const prefix = fresh('compacted');
    const slow = client.watch(prefix, { prefix: true });
    await slow.created;
    const total = 2000;
    await putMany(prefix, total);
    await waitFor(() => slow.id === undefined && slow.resuming, 'the slow watch to be taken off the stream');
    // History the watch still owes goes away while nobody reads it.
    const head = (await client.put(`${prefix}last`, 'v')).revision;
    await client.compact(head);
    // A watch that skipped the compacted history would deliver this next (and never end).
    await client.put(`${prefix}after`, 'v');
    const revisions: bigint[] = [];
    let failure: unknown;
    try {
      for await (const batch of slow) {
        for (const e of batch.events) revisions.push(e.kv.modRevision);
        if (batch.events.some((e) => e.kv.key.toString() === `${prefix}after`)) break;
      }
    } catch (err) {
      failure = err;
    }
    assert.ok(failure instanceof CompactedError, `ends with a CompactedError, got ${String(failure)}`);
    assert.ok(revisions.length >= 1024 && revisions.length < total, `${revisions.length} events delivered before the compaction was met`);
    // Every put is its own revision: what was delivered is one run with no gap and no repeat.
    for (let i = 1; i < revisions.length; i++)
      assert.equal(revisions[i], revisions[i - 1]! + 1n, `no gap after revision ${revisions[i - 1]}`);
    assert.ok(failure.compactRevision >= revisions.at(-1)!, 'the history it missed is the compacted one');
    await client.delete(prefix, { prefix: true });
  });
});

describe('a consumer that keeps up, then falls behind', () => {
  it('is never taken off the stream while it keeps up, however many bytes pass it (12 MB)', async () => {
    const prefix = fresh('keeps-up');
    const w = client.watch(prefix, { prefix: true });
    try {
      await w.created;
      await keepUp(client, w[Symbol.asyncIterator](), prefix, 120, Buffer.alloc(100 * 1024, 'v'));
      assert.equal(w.resuming, false, 'never taken off the stream');
    } finally {
      w.cancel();
      await client.delete(prefix, { prefix: true });
    }
  });

  it('paused through a flood of 100-byte puts (32 at a time) from another client: read again, it delivers every event once, in order, with no gap', {
    timeout: 120_000,
  }, async () => {
    await using writer = new Client({ endpoints: etcd.endpoints });
    await pausedThroughFlood(client, writer, fresh('paused'));
  });
});
