// The floor: what one Raft write, one linearizable read and one watch notification cost here.
// Every other figure is judged against these, measured in the same run.
import { Client } from '../dist/index.js';
import type { BenchContext } from './context.js';
import { sleep, summarize, timedLoop, within, type Summary } from './stats.js';

export interface FloorResult {
  /** Sequential Put: one Raft write (fsync) and its round trip. */
  put: Summary;
  /** Linearizable Get: a ReadIndex round and its round trip. */
  get: Summary;
  /**
   * From the Delete call to its event on a watch created before it, starting after the current
   * revision (so etcd serves it from the synced group). Includes the Delete's own Raft write.
   */
  watchNotify: Summary;
  /** From the Delete's response to the event (negative when the event came first). */
  watchAfterResponse: Summary;
  /**
   * The same through our Watch given `startRevision: revision + 1` (what Ownership and observe
   * pass). Equal to `watchNotify` unless the client sends an earlier start revision to etcd.
   */
  watchNotifyFromNextRevision: Summary;
  /**
   * The same, but the watch starts at the read's header revision, as Go's waits do: etcd parks it
   * in the unsynced group, served by a loop every 100 ms (the trap). Sampled at random phases of
   * that loop, so anywhere from 0 to 100 ms.
   */
  watchNotifyFromReadRevision: Summary;
}

export async function runFloor(ctx: BenchContext): Promise<FloorResult> {
  const client = new Client({ endpoints: ctx.endpoints });
  try {
    const key = `${ctx.prefix}floor/k`;
    const loop = { ms: ctx.quick ? 1000 : 3000, maxIterations: ctx.quick ? 500 : 3000 };
    for (let i = 0; i < 20; i++) await client.put(key, 'warm');
    const put = await timedLoop(loop, () => client.put(key, 'v'));
    const get = await timedLoop(loop, () => client.get(key));
    const rounds = ctx.quick ? 15 : 60;
    const notify: number[] = [];
    const after: number[] = [];
    const next: number[] = [];
    const trap: number[] = [];
    for (let i = 0; i < rounds; i++) {
      const n = await watchNotification(client, key, 'now');
      notify.push(n.notify);
      after.push(n.afterResponse);
      next.push((await watchNotification(client, key, 'next')).notify);
      // At a random phase of etcd's 100 ms loop: back to back, each sample would start just after
      // the tick that ended the previous one and measure ~95 ms every time.
      await sleep(Math.random() * 100);
      trap.push((await watchNotification(client, key, 'read')).notify);
    }
    await client.delete(`${ctx.prefix}floor/`, { prefix: true });
    return {
      put: summarize(put.samples),
      get: summarize(get.samples),
      watchNotify: summarize(notify),
      watchAfterResponse: summarize(after),
      watchNotifyFromNextRevision: summarize(next),
      watchNotifyFromReadRevision: summarize(trap),
    };
  } finally {
    await client.close();
  }
}

/**
 * How the watch names its start: `now` (no start revision: etcd starts it after its current
 * revision, the synced group), `next` (start revision = the put's revision + 1, as passed to our
 * Watch), `read` (start revision = the put's revision, as Go's waits do: etcd's unsynced group).
 */
export type WatchStart = 'now' | 'next' | 'read';

/**
 * One watch notification: put `key`, watch it (created before the delete), then time its Delete
 * until the event arrives.
 */
export async function watchNotification(
  client: Client,
  key: string,
  start: WatchStart,
  /** Quiet time between the watch's confirmation and the Delete. */
  idleMs = 0,
): Promise<{ notify: number; afterResponse: number }> {
  const h = await client.put(key, 'v');
  const startRevision = start === 'now' ? undefined : start === 'next' ? h.revision + 1n : h.revision;
  const w = client.watch(key, startRevision === undefined ? { noPut: true } : { startRevision, noPut: true });
  try {
    await w.created;
    if (idleMs > 0) await new Promise((r) => setTimeout(r, idleMs));
    const it = w[Symbol.asyncIterator]();
    const t0 = performance.now();
    let tResp = NaN;
    const del = client.delete(key).then(() => (tResp = performance.now()));
    for (;;) {
      const r = await within(it.next(), 5000, 'a watch notification');
      if (r.done) throw new Error('watch ended before the delete arrived');
      if (r.value.events.length > 0) break;
    }
    const t1 = performance.now();
    await del;
    return { notify: t1 - t0, afterResponse: t1 - tResp };
  } finally {
    w.cancel();
  }
}
