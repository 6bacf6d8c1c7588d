// A holder whose key's delete event never arrives (etcd 3.4 before 3.4.36 and 3.5 before 3.5.18 can
// lose one near a compaction: etcd 17529, 18089, 19179) still learns of the loss: the client's batched
// re-check reads every watched holding's key every max(10 s, TTL), on every version.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, LockLostError, Mutex, Session, type Watch } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { aborted, etcdForFile, waitFor } from './helpers.js';

let etcd: EtcdCluster;
let admin: Client;
const fresh = etcdForFile('test/holder-recheck/', (e, c) => ((etcd = e), (admin = c)));

describe('a holding whose watch loses its key’s delete', () => {
  it("learns of the loss from the client's batched re-check", async () => {
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
