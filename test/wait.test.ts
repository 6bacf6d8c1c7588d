// The wait engine under every primitive (src/queue/turn.ts, Wait), against a real etcd, with rules
// written for the test: what a rule's own failure does, and that a watch kept for the session's
// next wait is reused only for the very same key.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, Session } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { waitUntil, type Blocker, type TurnRule } from '../src/queue/turn.js';
import type { WatchEvent } from '../src/client/watch.js';
import { Probe } from './probe.js';
import { etcdForFile, settledOrHang, track, waitFor } from './helpers.js';

const ROOT = 'test/wait/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

/** A blocker on `key` that moves on its delete, confirmed by a read that it still exists. */
function onKey(key: Buffer, asOf: bigint, changed = (e: WatchEvent): boolean => e.type === 'delete'): Blocker {
  return {
    watch: { key },
    found: { asOf, confirmed: false, keep: true },
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

  it('a kept watch serves only the same key: two keys that decode alike as UTF-8 get a watch each', async () => {
    const p = fresh('kept');
    const s = await Session.create(client, { ttl: 60 });
    const probe = new Probe(client);
    try {
      // 'a' then 0xff, and 'a' then 0xfe: both decode to "a\uFFFD", so only their bytes tell them apart.
      const a = Buffer.concat([Buffer.from(p), Buffer.from([0x61, 0xff])]);
      const b = Buffer.concat([Buffer.from(p), Buffer.from([0x61, 0xfe])]);
      await client.put(a, '');
      const header = await client.put(b, '');
      let asked = 0;
      const rule: TurnRule = {
        blocker: async () => {
          asked++;
          if (asked === 1) return onKey(a, header.revision);
          // After `a`'s delete: wait on `b`, as of a read newer than everything the kept watch saw.
          if (asked === 2) return onKey(b, (await client.range({ key: b, countOnly: true })).header.revision);
          return null;
        },
      };
      const wait = track(waitUntil(client, rule, { session: s }));
      await probe.blocked(1, 'waiting on the first key');
      await client.delete(a);
      // The first key's watch is kept for the session; the wait on `b` must open its own.
      await waitFor(() => asked === 2 && probe.watches.length === 2 && probe.active().length === 2, 'a watch of its own on the second key');
      await probe.quiet('the second watch confirmed', () => true);
      await client.delete(b);
      // Well within the 60 s re-check: only `b`'s delete event can end the wait in time.
      await settledOrHang(wait, 'the wait ending on the second key’s delete');
      assert.equal(asked, 3);
    } finally {
      await s.close();
      await client.delete(p, { prefix: true });
    }
  });
});
