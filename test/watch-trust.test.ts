// Which etcd versions a waiter trusts to deliver every watch event (src/queue/watch-trust.ts), and what a
// holder does on one it cannot trust.
import { describe, it, test } from 'node:test';
import assert from 'node:assert/strict';
import { Client, LockLostError, Mutex, Session, type Watch } from '../src/index.js';
import { mayLoseWatchEvents } from '../src/queue/watch-trust.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { aborted, etcdForFile, waitFor } from './helpers.js';

let etcd: EtcdCluster;
let admin: Client;
const fresh = etcdForFile('test/watch-trust/', (e, c) => ((etcd = e), (admin = c)));

test('etcd 3.4 before 3.4.36 and 3.5 before 3.5.18 may lose a watch event; 3.6 and later, and the fixed patches, do not', () => {
  const judged = Object.fromEntries(
    ['3.3.27', '3.4.23', '3.4.35', '3.4.36', '3.4.45', '3.5.17', '3.5.18', '3.5.30', '3.6.0', '3.6.16', '3.7.3', '4.0.0', 'v3.7', ''].map(
      (v) => [v, mayLoseWatchEvents(v)],
    ),
  );
  assert.deepEqual(judged, {
    '3.3.27': true,
    '3.4.23': true,
    '3.4.35': true,
    '3.4.36': false,
    '3.4.45': false,
    '3.5.17': true,
    '3.5.18': false,
    '3.5.30': false,
    '3.6.0': false,
    '3.6.16': false,
    '3.7.3': false,
    '4.0.0': false,
    'v3.7': true, // not a version etcd reports: not trusted
    '': true,
  });
});

describe('on a member whose watch may lose an event', () => {
  it("a holder whose key's delete event is lost still learns of the loss, from the client's batched re-check", async (t) => {
    if (!mayLoseWatchEvents((await admin.status()).version)) return t.skip('this etcd delivers every watch event: nothing to make up for');
    const client = new Client({ endpoints: etcd.endpoints });
    // The event lost, as etcd 17529, 18089 or 19179 lose it: this client's watches deliver nothing.
    const watch = client.watch.bind(client);
    const watches: Watch[] = [];
    client.watch = ((key, options) => {
      const w = watch(key, { ...options, noPut: true, noDelete: true });
      watches.push(w);
      return w;
    }) as typeof client.watch;
    let inFlight = 0;
    const unary = client.conn.unary.bind(client.conn);
    client.conn.unary = ((...args) => {
      inFlight++;
      return unary(...args).finally(() => inFlight--);
    }) as typeof client.conn.unary;
    const session = await Session.create(client, { ttl: 3 });
    try {
      const h = await new Mutex(session, `${fresh('lost-event')}lock`).lock();
      const lost = aborted(h.signal); // watched from now on
      // Its watch is up and its read after it answered: from now on only the watch, or the re-check, can tell.
      await waitFor(async () => {
        if (watches.length === 0) return false;
        await watches[0]!.created;
        await new Promise(setImmediate);
        return inFlight === 0;
      }, "the holder's watch on its key, confirmed by a read");
      await admin.delete(h.key);
      const reason = await lost;
      assert.ok(reason instanceof LockLostError, String(reason));
      assert.equal(reason.reason, 'key_deleted');
      await h.unlock();
    } finally {
      await session.close();
      await client.close();
    }
  });
});
