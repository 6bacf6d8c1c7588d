// DoubleBarrier: the member that completes the count opens the barrier only if every member it counted
// is still there (a member whose session expires in between is not let in short; Go opens unguarded).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client, DoubleBarrier, Session } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { assertNoKeys, closeAll, track, waitFor } from './helpers.js';
import { barrierFile } from './barrier-helpers.js';

const ROOT = 'test/double-barrier-count/';
let etcd: EtcdCluster;
let client: Client;
const { fresh, sessions, watchers, blocked, roundTrip } = barrierFile(ROOT, (e, c) => ((etcd = e), (client = c)));

// A hang guard only: every wait below is on an event or a promise.
const T = { timeout: 120_000 };

/** A client that awaits `armed.run` once, just before it sends the Txn that puts `armed.key`; `sent` is that Txn's answer. */
class PutHook extends Client {
  armed?: { key: string; run(): Promise<unknown> };
  sent?: Promise<unknown>;

  override async txn(...args: Parameters<Client['txn']>): ReturnType<Client['txn']> {
    const key = args[0].success?.[0]?.requestPut?.key;
    const armed = this.armed;
    if (armed && key?.toString() === armed.key) {
      this.armed = undefined;
      await armed.run();
      const t = super.txn(...args);
      this.sent = t.catch(() => undefined);
      return t;
    }
    return super.txn(...args);
  }
}

describe('DoubleBarrier opening', () => {
  it(
    'a member counted but gone before the opening (its session expired) is not let in short: the barrier opens when the count is there again',
    T,
    async () => {
      const name = `${fresh('gone')}db`;
      const [sa, sc] = await sessions(2);
      await using hooked = new PutHook({ endpoints: etcd.endpoints });
      const sb = await Session.create(hooked, { ttl: 30 });
      try {
        const a = new DoubleBarrier(sa!, name, 2);
        const base = await watchers();
        const ea = track(a.enter());
        await blocked(base, 1);
        // Between B's count (A and B: complete) and its opening, A's key goes, as when A's lease expires.
        const oldest = async (): Promise<Buffer> =>
          (await client.getPrefix(`${name}/waiters/`)).kvs.sort((x, y) => (x.createRevision < y.createRevision ? -1 : 1))[0]!.key;
        hooked.armed = { key: `${name}/ready`, run: async () => client.delete(await oldest()) };
        const b = new DoubleBarrier(sb, name, 2);
        const eb = track(b.enter());
        await waitFor(() => hooked.sent !== undefined || eb.settled, "B's opening sent");
        await hooked.sent;
        await roundTrip();
        await ea.promise.catch(() => undefined); // A's key is gone: its enter() ends either way
        assert.equal(eb.settled, false, 'B does not enter with A gone: one member of two');
        assert.equal(await client.get(`${name}/ready`), undefined, 'nobody opened the barrier');
        const c = new DoubleBarrier(sc!, name, 2);
        await c.enter();
        await eb.promise;
        const ready = (await client.get(`${name}/ready`))!;
        const members = (await client.getPrefix(`${name}/waiters/`)).kvs.filter((kv) => kv.createRevision < ready.modRevision);
        assert.equal(members.length, 2, 'B and C were both in when the barrier opened');
        await Promise.all([b.leave(), c.leave()]);
      } finally {
        await sb.close();
        await closeAll([sa!, sc!]);
      }
      await assertNoKeys(client, name);
    },
  );

  it(
    'a member entering while a round still leaves opens the next round: openedAt tells the rounds apart, and each leave waits for its own',
    T,
    async () => {
      const name = `${fresh('rounds')}db`;
      const [sa, sb, sc] = await sessions(3);
      try {
        const a = new DoubleBarrier(sa!, name, 2);
        const b = new DoubleBarrier(sb!, name, 2);
        await Promise.all([a.enter(), b.enter()]);
        const first = (await client.get(`${name}/ready`))!.modRevision;
        assert.deepEqual([a.openedAt, b.openedAt], [first, first], 'one round: the ready put that opened it');
        await sa!.close(); // A dies in the round: its key goes with its lease, B has not left yet
        const c = new DoubleBarrier(sc!, name, 2);
        await c.enter(); // counts B, still leaving, as Go does: it puts ready again
        const second = (await client.get(`${name}/ready`))!.modRevision;
        assert.ok(second > first, 'ready was put again');
        assert.equal(c.openedAt, second, "C's round opened at the second put");
        assert.equal(b.openedAt, first, "B's round is still the first: a later ready put does not change it");
        await b.leave(); // B's round is B alone now: it leaves without waiting for C
        assert.equal(b.openedAt, undefined);
        await c.leave(); // C's round counted B, gone now
      } finally {
        await closeAll([sb!, sc!]);
      }
      await assertNoKeys(client, name);
    },
  );
});
