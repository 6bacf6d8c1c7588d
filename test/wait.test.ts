// The wait engine under every primitive (src/queue/wait.ts, Wait), against a real etcd, with a rule
// written for the test: what a rule's own failure does.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, Session, SessionExpiredError } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { waitUntil, type Blocker, type TurnRule } from '../src/queue/wait.js';
import type { WatchEvent } from '../src/client/watch.js';
import { Probe } from './probe.js';
import { etcdForFile, settledOrHang, track, waitFor } from './helpers.js';

const ROOT = 'test/wait/';
let etcd: EtcdCluster;
const fresh = etcdForFile(ROOT, (e) => (etcd = e));

/** A blocker on `key` that moves on its delete, confirmed by a read that it still exists. */
function onKey(key: Buffer, asOf: bigint, changed = (e: WatchEvent): boolean => e.type === 'delete'): Blocker {
  return {
    watch: { key },
    asOf,
    confirmed: false,
    changed,
    check: { keys: [key], blocked: ([kv]) => kv !== undefined },
  };
}

describe('the wait engine', () => {
  it('a rule whose changed() throws ends that wait with its error, and the client’s watches go on', async () => {
    const p = fresh('throws');
    const c = new Client({ endpoints: etcd.endpoints });
    const probe = new Probe(c);
    try {
      const key = Buffer.from(`${p}k`);
      const header = await c.put(key, 'a');
      const boom = new Error('the rule failed');
      let asked = 0;
      const rule: TurnRule = {
        blocker: async () => {
          asked++;
          return onKey(key, header.revision, () => {
            throw boom;
          });
        },
      };
      const wait = track(waitUntil(c, rule));
      await probe.blocked(1, 'the waiter watching its key');
      // A put is an event the rule looks at: its failure is the wait's, not the watch stream's.
      await c.put(key, 'b');
      await assert.rejects(settledOrHang(wait, 'the wait ending'), (err) => err === boom);
      assert.equal(asked, 1, 'the rule was not asked again after failing');
      await waitFor(() => probe.active().length === 0, 'its watch cancelled');
      // The shared Watch stream still delivers to the client's other watches.
      const other = c.watch(`${p}other`);
      await other.created;
      await c.put(`${p}other`, 'x');
      const next = await other[Symbol.asyncIterator]().next();
      assert.equal(next.value?.events[0]?.kv.key.toString(), `${p}other`);
      other.cancel();
    } finally {
      await c.delete(p, { prefix: true });
      c.close();
    }
  });

  it('a wait on a session ends when the session ends, and one that ends first leaves nothing on the session', async () => {
    const p = fresh('session-end');
    const c = new Client({ endpoints: etcd.endpoints });
    const probe = new Probe(c);
    const session = await Session.create(c);
    /** What the session would tell on its end (its end listeners: one inline, a Set from the second). */
    const listening = (): number => {
      const l = (session as unknown as { endListeners: undefined | (() => void) | Set<() => void> }).endListeners;
      return l === undefined ? 0 : typeof l === 'function' ? 1 : l.size;
    };
    try {
      // Blocked while `key` exists; its turn once it is gone.
      const untilGone = (key: Buffer, asOf: bigint): TurnRule => ({
        blocker: async () => ((await c.get(key)) ? onKey(key, asOf) : null),
      });
      const k1 = Buffer.from(`${p}k1`);
      const k2 = Buffer.from(`${p}k2`);
      const rev = (await c.put(k1, 'a')).revision;
      await c.put(k2, 'a');
      const first = track(waitUntil(c, untilGone(k1, rev), { session }));
      await probe.blocked(1, 'the first wait watching its key');
      assert.equal(listening(), 1, 'the wait listens on its session');
      await c.delete(k1);
      await settledOrHang(first, 'the first wait’s turn');
      assert.equal(listening(), 0, 'a wait that got its turn leaves no listener on its session');
      // Two at once (the session's listeners in a Set), one stopped by its caller, the other by the session's end.
      const ac = new AbortController();
      const stopped = track(waitUntil(c, untilGone(k2, rev), { session, signal: ac.signal }));
      const ended = track(waitUntil(c, untilGone(k2, rev), { session }));
      await probe.blocked(2, 'both waits watching');
      assert.equal(listening(), 2);
      ac.abort(new Error('caller stopped'));
      await assert.rejects(settledOrHang(stopped, 'the stopped wait'), /caller stopped/);
      assert.equal(listening(), 1, 'a wait stopped by its caller leaves its session');
      await session.close();
      await assert.rejects(
        settledOrHang(ended, 'the wait on the ended session'),
        (err) => err instanceof SessionExpiredError && err.reason === 'closed',
      );
      assert.equal(listening(), 0);
      await waitFor(() => probe.active().length === 0, 'every watch cancelled');
    } finally {
      await session.close();
      await c.delete(p, { prefix: true });
      c.close();
    }
  });
});
