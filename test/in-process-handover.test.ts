// A key handed from one call of a process to the next on the same session and name: a read lock's
// key left to a read whose enqueue is still in flight, and a leader's key while runAsLeader's task
// winds down after its shutdown. Neither may be joined where that overtakes a writer or reuses a
// term. Real etcd; the one intervention is holding a Txn's answer in this process (a slow network).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, Election, RWMutex, runAsLeader, type LeaderHandle, type TxnResult } from '../src/index.js';
import { closeAll, etcdFile, settle, track, waitFor } from './helpers.js';

const ROOT = 'test/in-process-handover/';
let client: Client;
const file = etcdFile(ROOT, (_e, c) => (client = c));
const { fresh, sessions } = file;

/**
 * Holds the answer of the next Txn of `c` that `matches` until `release()`: the request reaches etcd
 * and is applied; only its answer comes late. `sent` resolves once that Txn was called.
 */
function holdNextAnswer(c: Client, matches: (req: Parameters<Client['txn']>[0]) => boolean) {
  const txn = c.txn.bind(c);
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let sent!: () => void;
  const called = new Promise<void>((r) => (sent = r));
  let armed = true;
  c.txn = (async (...args: Parameters<Client['txn']>): Promise<TxnResult> => {
    if (!armed || !matches(args[0])) return txn(...args);
    armed = false;
    sent();
    const t = await txn(...args);
    await released;
    return t;
  }) as Client['txn'];
  return { sent: called, release, restore: () => (c.txn = txn) };
}

async function keyCount(prefix: string): Promise<bigint> {
  const end = Buffer.from(prefix);
  end[end.length - 1]!++;
  return (await client.range({ key: Buffer.from(prefix), rangeEnd: end, countOnly: true })).count;
}

describe('a key handed over in the process', { timeout: 60_000 }, () => {
  it('RWMutex: a read whose enqueue is in flight when the last sibling read unlocks is not granted before a writer queued earlier', async () => {
    const p = fresh('rw-inflight');
    const name = `${p}rw`;
    const rc = new Client({ endpoints: file.cluster().etcd.endpoints });
    const [r] = await sessions(1, 30, rc);
    const [w] = await sessions(1);
    const pending: Promise<unknown>[] = [];
    try {
      const reads = new RWMutex(r!, name);
      const h1 = await reads.rLock();
      const writer = track(new RWMutex(w!, name).lock());
      pending.push(writer.promise);
      // The writer's key is in etcd, behind h1's read key: it waits.
      await waitFor(async () => (await keyCount(`${name}/write/`)) === 1n, 'the writer to queue');
      // The next read is asked for now, after the writer queued; its enqueue's answer comes late.
      const hold = holdNextAnswer(rc, (req) => req.compare?.length === 1 && String(req.compare[0]?.key) === reads.readKey);
      const h2 = track(reads.rLock());
      pending.push(h2.promise);
      await hold.sent;
      // The last sibling read unlocks while that enqueue is in flight.
      await h1.unlock();
      hold.release();
      hold.restore();
      const first = await Promise.race([h2.promise.then(() => 'read'), writer.promise.then(() => 'writer')]);
      const got = h2.settled && h2.value ? ` (read token ${h2.value.fencingToken}, the unlocked read's was ${h1.fencingToken})` : '';
      assert.equal(first, 'writer', `the read asked for after the writer queued was granted first${got}`);
      await (await writer.promise).unlock();
      await (await h2.promise).unlock();
    } finally {
      await closeAll([r, w]);
      await rc.close();
      await Promise.allSettled(pending);
    }
  });

  it('runAsLeader shutdown: a standby campaign of the same session leads only on a new term, after the old task ended', async () => {
    const p = fresh('revoke-standby');
    const name = `${p}election`;
    const probe = file.probed();
    const [a] = await sessions(1, 30, probe.client);
    const stop = new AbortController();
    let endTask!: () => void;
    const taskMayEnd = new Promise<void>((r) => (endTask = r));
    let started!: (l: LeaderHandle) => void;
    const leading = new Promise<LeaderHandle>((r) => (started = r));
    const run = track(
      runAsLeader(a!, name, { value: 'first', signal: stop.signal }, async (leader) => {
        started(leader);
        await taskMayEnd; // a task that takes a moment to stop once leader.signal aborts
        return 1;
      }),
    );
    const pending: Promise<unknown>[] = [run.promise];
    try {
      const l1 = await leading;
      // A standby campaign of the same session and name: exclusive, it waits in the process.
      const standby = track(new Election(a!, name).campaign('standby'));
      pending.push(standby.promise);
      await probe.quiet('the standby to wait in the process', () => true);
      assert.equal(standby.settled, false);
      // Shutdown: the term ends (leader.signal aborts) while the task still takes a moment to stop.
      stop.abort();
      assert.equal(l1.signal.aborted, true);
      await settle(); // whatever the standby does now has started
      await probe.quiet('the standby to have done what it does now', () => true);
      await settle();
      const s = standby.value;
      assert.equal(
        standby.settled,
        false,
        `the standby leads (term ${s?.fencingToken}) while the revoked term's task (term ${l1.fencingToken}) still runs`,
      );
    } finally {
      endTask();
      await run.promise.catch(() => {});
      await closeAll([a]);
      await probe.client.close();
      await Promise.allSettled(pending);
    }
  });
});
