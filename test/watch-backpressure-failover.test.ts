// A watch taken off the stream while its consumer lags (watch-backpressure.test.ts), and the member
// it was on dies meanwhile: read again, it is created on another member from the revision it owes.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Client } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { clusterForFile } from './helpers.js';
import { pausedThroughFlood } from './watch-helpers.js';

let etcd: EtcdCluster;
/** One client per member, each listing all three endpoints starting at its own. */
let clients: Client[];
const fresh = clusterForFile('test/watch-backpressure-failover/', (e, cs) => {
  etcd = e;
  clients = cs;
});

describe('a consumer paused across a member failover', () => {
  it('its member killed while the watch is off the stream: read again, every event once, in order, with no gap, from another member', {
    timeout: 180_000,
  }, async () => {
    const [reader, writer] = clients as [Client, Client];
    assert.equal(reader.activeEndpoint, etcd.endpoints[0]);
    let killed = false;
    try {
      await pausedThroughFlood(reader, writer, fresh('failover'), async () => {
        await etcd.kill(0);
        killed = true;
        await etcd.waitHealthy(); // a new Raft leader if it was member 0, before the writer goes on
      });
      assert.notEqual(reader.activeEndpoint, etcd.endpoints[0], 'the reader moved to another member');
    } finally {
      if (killed) await etcd.restart(0);
    }
  });
});
