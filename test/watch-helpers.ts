// A watch's consumer driven by the test (watch-backpressure, watch-backpressure-failover): it keeps
// up, stops reading while a writer floods the prefix, then reads again.
import assert from 'node:assert/strict';
import type { Client, Watch, WatchBatch } from '../src/index.js';
import { settledOrHang, track, waitFor } from './helpers.js';

/** Taken off the stream while its consumer lags (not re-created yet). */
export const offStream = (w: Watch): boolean => w.id === undefined && w.resuming && !w.ended;

/**
 * Puts `n` keys under `prefix` with `value`, one at a time, each read by a consumer already waiting
 * for it: every batch goes straight to the consumer, none is queued. Returns the puts' revisions.
 */
export async function keepUp(client: Client, it: AsyncIterator<WatchBatch>, prefix: string, n: number, value: Buffer): Promise<bigint[]> {
  const revisions: bigint[] = [];
  for (let i = 0; i < n; i++) {
    const next = track(it.next());
    const { revision } = await client.put(`${prefix}${String(i).padStart(6, '0')}`, value);
    const r = await settledOrHang(next, `the event of put ${i} (revision ${revision}), read by a consumer that keeps up`);
    assert.equal(r.done, false, 'the watch ended');
    assert.deepEqual(
      r.value.events.map((e) => e.kv.modRevision),
      [revision],
    );
    revisions.push(revision);
  }
  return revisions;
}

/**
 * Puts 100-byte values under `prefix`, 32 at a time, as fast as etcd answers, until `done()` says
 * so after a round; each put's revision is added to `into`.
 */
export async function flood(client: Client, prefix: string, into: bigint[], done: () => boolean): Promise<void> {
  const value = Buffer.alloc(100, 'f');
  while (!done()) {
    const from = into.length;
    const rs = await Promise.all(Array.from({ length: 32 }, (_, j) => client.put(`${prefix}${String(from + j).padStart(6, '0')}`, value)));
    for (const r of rs) into.push(r.revision);
  }
}

/** Puts `n` more (see flood). */
export function floodMore(client: Client, prefix: string, into: bigint[], n: number): Promise<void> {
  const until = into.length + n;
  return flood(client, prefix, into, () => into.length >= until);
}

/**
 * The scenario (issue 35, item 1): `reader` watches `prefix` from a revision; its consumer
 * keeps up with 3 MB of events (64 KB values), then stops reading while `writer` floods the prefix;
 * once the watch is taken off the stream, 4,000 more puts while nobody reads, then `whilePaused`
 * (a member killed, say); then the consumer reads again while 4,000 more are written. It must read
 * every put once, in revision order, with no gap, and the watch stays open.
 */
export async function pausedThroughFlood(
  reader: Client,
  writer: Client,
  prefix: string,
  whilePaused: (w: Watch) => Promise<void> = async () => {},
): Promise<void> {
  const start = (await writer.put(`${prefix}start`, 'v')).revision;
  const w = reader.watch(prefix, { prefix: true, startRevision: start + 1n });
  try {
    await w.created;
    const it = w[Symbol.asyncIterator]();
    await keepUp(writer, it, `${prefix}big/`, 48, Buffer.alloc(64 * 1024, 'k'));
    const puts: bigint[] = [];
    // Paused: nobody reads until the watch is off the stream, and 4,000 puts after that.
    await flood(writer, `${prefix}flood/`, puts, () => offStream(w));
    await floodMore(writer, `${prefix}flood/`, puts, 4000);
    assert.ok(offStream(w), 'still off the stream while nobody reads');
    await whilePaused(w);
    // Reads again while the flood goes on.
    const seen: bigint[] = [];
    const reading = (async () => {
      for await (const batch of w) for (const e of batch.events) seen.push(e.kv.modRevision);
    })();
    await floodMore(writer, `${prefix}flood/`, puts, 4000);
    const last = puts.reduce((a, b) => (a > b ? a : b));
    await waitFor(() => (seen.at(-1) ?? 0n) >= last || w.ended, `the consumer to read every put up to revision ${last}`);
    assert.equal(w.ended, false, 'the watch is still open');
    w.cancel();
    await reading;
    assert.deepEqual(
      seen,
      [...puts].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)),
      'every put once, in revision order, no gap',
    );
  } finally {
    w.cancel();
    await writer.delete(prefix, { prefix: true });
  }
}
