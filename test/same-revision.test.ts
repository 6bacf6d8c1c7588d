// Keys created in one revision: one Txn (an operator's, another library's) can create several keys
// under a lock's prefix, and they share a CreateRevision. A look-up that pages through the prefix by
// CreateRevision must not skip the ones a page's limit cut off. Real etcd.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { type Client, Mutex, currentLeader, op } from '../src/index.js';
import { assertNoKeys, closeAll, etcdFile, track } from './helpers.js';

const ROOT = 'test/same-revision/';
let client: Client;
const file = etcdFile(ROOT, (_e, c) => (client = c));
const { fresh, sessions } = file;

/**
 * In one Txn: eight keys of nested names that sort before any participant's (`!`), and a participant
 * key of another process on its own lease. A page of 8 sorted by CreateRevision holds the nested keys
 * only (ties keep key order), and the participant is cut off.
 */
async function crowded(name: string): Promise<{ key: string; lease: bigint }> {
  const lease = (await client.leaseGrant(30)).id;
  const key = `${name}/${lease.toString(16)}`;
  const nested = Array.from({ length: 8 }, (_, i) => op.put(`${name}/!nested-${i}`, 'x'));
  await client.txn({ compare: [], success: [...nested, op.put(key, '', lease)], failure: [] });
  return { key, lease };
}

describe('keys created in one revision', { timeout: 60_000 }, () => {
  it('a waiter paging back to its predecessor finds a participant created with other keys in one Txn', async () => {
    const p = fresh('lock');
    const name = `${p}lock`;
    const [a] = await sessions(1);
    const other = await crowded(name);
    try {
      const base = await file.watchersNow();
      const mine = track(new Mutex(a!, name).lock());
      // The other process's key is older than ours and on a live lease: it holds; we wait.
      const settledEarly = await Promise.race([
        mine.promise.then(() => true),
        file.blocked(base, 1, 'our waiter blocked').then(() => false),
      ]);
      assert.equal(settledEarly, false, 'lock() resolved while an older participant holds');
      await client.delete(other.key);
      const h = await mine.promise;
      await h.unlock();
    } finally {
      await client.leaseRevoke(other.lease).catch(() => {});
      await client.delete(`${p}`, { prefix: true });
      await closeAll([a!]);
    }
    await assertNoKeys(client, p);
  });

  it('the current leader is found behind a page of keys created in the same revision', async () => {
    const p = fresh('leader');
    const name = `${p}election`;
    const other = await crowded(name);
    try {
      assert.equal((await currentLeader(client, name))?.key, other.key);
    } finally {
      await client.leaseRevoke(other.lease).catch(() => {});
      await client.delete(`${p}`, { prefix: true });
    }
    await assertNoKeys(client, p);
  });
});
