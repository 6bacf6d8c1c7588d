// The waiters' safety net, batched per client (src/queue/recheck.ts), against a real etcd: due
// checks share read-only Txns of up to 128 gets, a check that finds its waiter unblocked fires
// once, and an unregistered check is never read again.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Client } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import type { BatchCheck, Due } from '../src/queue/recheck.js';
import { queueOf } from '../src/queue/state.js';
import { etcdForFile, serverState, waitFor } from './helpers.js';

const ROOT = 'test/recheck/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

/** The re-checker's timer does not hold the process open (a waiter's watch does): the tests hold it. */
let hold: NodeJS.Timeout | undefined;
before(() => void (hold = setInterval(() => {}, 1000)));
after(() => clearInterval(hold));

const txnsNow = async (): Promise<number> => (await serverState(etcd.clientUrls[0]!)).txns;

/** Registers `check`, due at once every tick (interval 0); `stale` is told when it finds its waiter unblocked. */
function register(c: Client, check: BatchCheck, stale: () => void): Due {
  const d: Due = { check, intervalMs: 0, due: 0, stale };
  queueOf(c).rechecker.add(d);
  return d;
}

/** A check that is blocked while `key` exists, and how often it was judged. */
function existsCheck(key: string): BatchCheck & { judged: number } {
  const c = {
    keys: [key],
    judged: 0,
    blocked: ([kv]: readonly ({ key: Buffer } | undefined)[]) => {
      c.judged++;
      return kv !== undefined;
    },
  };
  return c;
}

describe('the batched re-check of waiters', () => {
  it('200 waiters are checked in 2 Txns a round, and only the 3 whose keys went are told', async () => {
    const p = fresh('batch');
    const keys = Array.from({ length: 200 }, (_, i) => `${p}k${i}`);
    for (const k of keys) await client.put(k, '');
    const gone = new Set([keys[7]!, keys[130]!, keys[199]!]);
    const staleKeys: string[] = [];
    const checks = keys.map((k) => existsCheck(k));
    const told = new Map<string, () => void>();
    const allTold = new Promise<void>((resolve) => {
      for (const k of gone) told.set(k, () => staleKeys.push(k) === gone.size && resolve());
    });
    const before = await txnsNow();
    // Due at once (interval 0): each tick checks everyone still registered. The re-check swallows
    // what its callbacks throw, so a wrong call is recorded here and asserted on afterwards.
    const wronglyTold: string[] = [];
    const unregister = checks.map((c, i) => register(client, c, () => (told.get(keys[i]!) ?? (() => wronglyTold.push(keys[i]!)))()));
    try {
      // Rounds of 200 checks: ceil(200 / 128) = 2 Txns each (one Txn per check would be 200).
      await waitFor(async () => checks.every((c) => c.judged >= 1), 'every check judged once');
      const txns = (await txnsNow()) - before;
      const rounds = Math.max(...checks.map((c) => c.judged));
      assert.ok(txns >= 2 && txns <= 2 * rounds, `${txns} Txns for ${rounds} round(s) of 200 checks: batched by 128`);
      for (const k of gone) await client.delete(k);
      await allTold;
      assert.deepEqual(new Set(staleKeys), gone);
      // Told once, then no longer read: two more rounds judge the others, not them.
      const goneChecks = [...gone].map((k) => checks[keys.indexOf(k)]!);
      const judged = goneChecks.map((c) => c.judged);
      await waitFor(async () => checks[0]!.judged >= 2 + Math.max(...judged), 'two more rounds for the others');
      assert.deepEqual(
        goneChecks.map((c) => c.judged),
        judged,
        'a stale check is not read again',
      );
      assert.deepEqual(wronglyTold, [], 'told stale while their keys exist');
    } finally {
      unregister.forEach((d) => queueOf(client).rechecker.remove(d));
      await client.delete(p, { prefix: true });
    }
  });

  it('an unregistered check is never read again, and the last one stops the timer', async () => {
    const p = fresh('unregister');
    await client.put(`${p}a`, '');
    const a = existsCheck(`${p}a`);
    let toldStale = 0; // counted, not thrown: the re-check swallows what its callbacks throw
    const un = register(client, a, () => toldStale++);
    await waitFor(async () => a.judged >= 1, 'judged once');
    const rechecker = queueOf(client).rechecker;
    rechecker.remove(un);
    // This client has no check left: its re-checker holds nothing and has no timer that could tick
    // (a tick is the only thing that reads), so nothing is read again.
    const inside = rechecker as unknown as { entries: Set<unknown>; timer: unknown };
    assert.equal(inside.entries.size, 0, 'nothing registered');
    assert.equal(inside.timer, undefined, 'the last removal stops the timer');
    assert.equal(toldStale, 0, 'its key exists: never told stale');
    await client.delete(p, { prefix: true });
  });
});
