// The deterministic simulator (docs/simulation.md): one seed gives one run, byte for byte, alone,
// twice, or after other seeds in one process; the seeds that found bugs still pass; and the
// simulated store answers as etcd's applier does where the library depends on it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import * as pb from '../src/proto/etcd.js';
import { Oracle } from '../src/testing/sim/oracle.js';
import { runSchedule } from '../src/testing/sim/run.js';
import { PROFILES, Store } from '../src/testing/sim/store.js';
import { KNOWN_OPEN, knownDefect } from '../sim/known.js';
import { REGRESSIONS } from '../sim/regressions.js';

const run = promisify(execFile);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

test('one seed gives one trace hash: twice in one process, after other seeds, and alone in a fresh process', async () => {
  const first = await runSchedule({ seed: 7 });
  const again = await runSchedule({ seed: 7 });
  assert.equal(again.hash, first.hash);
  // DoubleBarrier keeps a per-process suffix: a barrier seed before and after others proves it is reset.
  const barrier = await runSchedule({ seed: 5, workload: 'barrier' });
  for (const seed of [3, 11, 4]) await runSchedule({ seed, profile: seed === 11 ? '3.4' : '3.7' });
  await runSchedule({ seed: 6, workload: 'barrier' });
  assert.equal((await runSchedule({ seed: 5, workload: 'barrier' })).hash, barrier.hash);
  const after = await runSchedule({ seed: 7 });
  assert.equal(after.hash, first.hash);
  assert.ok(first.grants > 0, 'the schedule granted something');
  const { stdout } = await run(process.execPath, ['--import', 'tsx', 'sim/main.ts', '--seed', '7', '--trace'], {
    cwd: root,
    timeout: 120_000,
  });
  assert.equal(stdout, `trace hash: ${first.hash}\n`);
  const other = await runSchedule({ seed: 8 });
  assert.notEqual(other.hash, first.hash);
});

test('the seeds that found bugs pass now', async () => {
  for (const r of REGRESSIONS) {
    const res = await runSchedule({ seed: r.seed, profile: r.profile, workload: r.workload });
    assert.deepEqual(
      res.violations.map((v) => `${v.rule}: ${v.detail}`),
      [],
      `seed ${r.seed} (${r.profile}, ${r.workload}), which found: ${r.found}`,
    );
    assert.deepEqual(res.leftByDesign, r.leaves ?? [], `seed ${r.seed}: what it leaves by design`);
  }
});

test('the known-open defects are still met by their seeds (move them to the regressions when the fix lands)', async () => {
  for (const k of KNOWN_OPEN) {
    for (const s of k.seeds) {
      const res = await runSchedule(s);
      assert.ok(
        res.violations.some((v) => knownDefect(v, res) === k),
        `seed ${s.seed} (${s.profile}, ${s.workload}) no longer meets "${k.note}": fixed? move it to sim/regressions.ts`,
      );
    }
  }
});

test("the oracle allows a DoubleBarrier's `ready` left behind only when its round's last member to go died, or could not reach etcd as it came out", () => {
  let now = 0;
  const oracle = new Oracle(
    () => now,
    { get: () => undefined, keys: () => [] },
    () => {},
  );
  const waiter = (n: number) => `dbar/a/waiters/${n}`;
  let rev = 0n;
  // A member made by `proc` on `lease`, at the next revision (and instant).
  const made = (n: number, proc: string, lease: bigint) => {
    rev++;
    now += 10;
    const kv = {
      k: waiter(n),
      key: Buffer.from(waiter(n)),
      createRevision: rev,
      modRevision: rev,
      version: 1n,
      value: Buffer.alloc(0),
      lease,
    };
    oracle.changed({ type: 'put', k: waiter(n), rev, kv, cause: `${proc} Txn` });
  };
  const gone = (n: number, cause: string) => {
    rev++;
    now += 10;
    oracle.changed({ type: 'delete', k: waiter(n), rev, cause });
  };
  // `ready` put, opening a round of `members`: its revision.
  const open = (...members: number[]) => {
    rev++;
    now += 10;
    const k = 'dbar/a/ready';
    const kv = { k, key: Buffer.from(k), createRevision: rev, modRevision: rev, version: 1n, value: Buffer.alloc(0), lease: 0n };
    oracle.changed({ type: 'put', k, rev, kv, cause: 'p1 Txn' });
    oracle.barrierOpened('dbar/a', 2, members.map(waiter), rev);
    return rev;
  };
  // A round of members `a` (p1, lease 1) and `b` (p2, lease 2): its `ready` revision.
  const round = (a: number, b: number) => {
    made(a, 'p1', 1n);
    made(b, 'p2', 2n);
    return open(a, b);
  };
  const left = (ready: bigint) => oracle.leftByDesign('dbar/a/ready', { modRevision: ready, lease: 0n });
  const call = (proc: string, lease: bigint, n: number, from: number, ok: boolean) =>
    oracle.barrierCall({ proc, lease, key: waiter(n), calledAt: from, from, at: now, outcome: ok ? 'left' : 'gave-up' });

  // Both members left alive: a `ready` left is a violation (the last one out deletes it).
  let r = round(1, 2);
  gone(1, 'p1 Txn');
  gone(2, 'p2 Txn');
  assert.equal(left(r), false);
  // An operator's delete of a member's key is no death either.
  r = round(3, 4);
  gone(3, 'p2 Txn');
  gone(4, 'fault operator-delete');
  assert.equal(left(r), false);
  // The last member to go went with its lease (expired, or revoked by a fault): allowed.
  r = round(5, 6);
  gone(5, 'p1 Txn');
  gone(6, 'expiry');
  assert.equal(left(r), true);
  // ... but only that round's `ready`, only a lease-less one, and no other key.
  assert.equal(left(r + 1n), false);
  assert.equal(oracle.leftByDesign('dbar/a/ready', { modRevision: r, lease: 7n }), false);
  assert.equal(oracle.leftByDesign(waiter(5), { modRevision: r, lease: 0n }), false);
  r = round(7, 8);
  gone(8, 'p2 Txn');
  gone(7, 'fault early-revoke');
  assert.equal(left(r), true);
  // A member that went with its lease before the last one left alive: that one deletes `ready`.
  r = round(9, 10);
  gone(9, 'expiry');
  gone(10, 'p2 Txn');
  assert.equal(left(r), false);
  // A member on a session lost by its deadline, its key taken by the revoke at its close: allowed when
  // it went last; not when the other member, alive, left after it.
  r = round(11, 12);
  oracle.sessionLost(1n);
  gone(12, 'p2 Txn');
  gone(11, 'p1 LeaseRevoke');
  assert.equal(left(r), true);
  r = round(13, 14);
  oracle.sessionLost(1n);
  gone(13, 'p1 LeaseRevoke');
  gone(14, 'p2 Txn');
  assert.equal(left(r), false);
  // Its own delete landed (its leave() gave up, etcd within reach): its closeIfLast deletes `ready`.
  r = round(15, 16);
  gone(16, 'p2 Txn');
  gone(15, 'p1 Txn');
  call('p1', 1n, 15, now - 5, false);
  assert.equal(left(r), false);
  // The last member's leave() gave up while a fault cut its process off from etcd: allowed; a cut
  // of another process, or one before the give-up began, is no excuse.
  r = round(17, 18);
  gone(17, 'p1 Txn');
  const gaveUp = now;
  gone(18, 'p2 LeaseRevoke');
  call('p2', 2n, 18, gaveUp, false);
  assert.equal(left(r), false);
  oracle.cutOff('p1', gaveUp, now);
  oracle.cutOff('p2', 0, gaveUp - 1);
  assert.equal(left(r), false);
  oracle.cutOff('p2', gaveUp + 1, gaveUp + 2);
  assert.equal(left(r), true);
  // A process crashed before its member's call ended: allowed; after its leave() resolved, not.
  r = round(19, 20);
  gone(19, 'p1 Txn');
  gone(20, 'fault operator-delete'); // p2 is still inside
  oracle.crashed({ name: 'p2' } as never);
  assert.equal(left(r), true);
  r = round(21, 22);
  gone(22, 'p2 Txn');
  gone(21, 'p1 Txn');
  call('p1', 1n, 21, now, true);
  now += 10;
  oracle.crashed({ name: 'p1' } as never);
  assert.equal(left(r), false);
  // A member of an earlier round, still leaving when a later one opened (Go's counting), came out
  // last: its Txn deletes only its own round's `ready`, the closeIfLast after it this one's. Allowed
  // only if a fault cut its process off from etcd after its key went.
  made(23, 'p3', 3n);
  made(24, 'p2', 2n);
  open(23, 24);
  gone(24, 'p2 Txn');
  made(25, 'p2', 2n);
  r = open(23, 25);
  gone(25, 'p2 Txn');
  gone(23, 'p3 Txn');
  const out = now;
  now += 10;
  oracle.barrierCall({ proc: 'p3', lease: 3n, key: waiter(23), calledAt: out - 100, from: out - 100, at: now, outcome: 'left' });
  oracle.cutOff('p3', out - 100, out - 1);
  assert.equal(left(r), false);
  oracle.cutOff('p3', out + 1, out + 2);
  assert.equal(left(r), true);
});

const key = (s: string) => Buffer.from(s);

test('the store: nested Txns read every compare before any write, share one revision, and refuse a key written twice', () => {
  const s = new Store(PROFILES['3.7']);
  s.put({ key: key('a'), value: key('1') }, 'test');
  const rev = s.rev;
  const r = s.txn(
    {
      compare: [],
      success: [
        {
          requestTxn: {
            compare: [
              { key: key('b'), target: pb.Compare_CompareTarget.CREATE, result: pb.Compare_CompareResult.EQUAL, createRevision: 0n },
            ],
            success: [{ requestPut: { key: key('b') } }],
            failure: [],
          },
        },
        // Sees no b: its compare was read before the first inner Txn's put.
        {
          requestTxn: {
            compare: [{ key: key('b'), target: pb.Compare_CompareTarget.VERSION, result: pb.Compare_CompareResult.EQUAL, version: 0n }],
            success: [{ requestPut: { key: key('c') } }, { requestRange: { key: key('b') } }],
            failure: [],
          },
        },
      ],
      failure: [],
    },
    'test',
  );
  assert.equal(r.header?.revision, rev + 1n);
  assert.equal(r.responses?.[1]?.responseTxn?.succeeded, true);
  // A read after a put in the same Txn sees it.
  assert.equal(r.responses?.[1]?.responseTxn?.responses?.[1]?.responseRange?.kvs?.[0]?.createRevision, rev + 1n);
  assert.equal(s.get('c')?.createRevision, s.get('b')?.createRevision);
  assert.throws(
    () => s.txn({ success: [{ requestPut: { key: key('x') } }, { requestDeleteRange: { key: key('w'), rangeEnd: key('y') } }] }, 'test'),
    /duplicate key given in txn request/,
  );
  assert.throws(
    () => s.txn({ success: Array.from({ length: 129 }, (_, i) => ({ requestRange: { key: key(`k${i}`) } })) }, 'test'),
    /too many operations/,
  );
  const before = s.rev;
  assert.equal(s.deleteRange({ key: key('nothing') }, 'test').header?.revision, before);
  assert.equal(s.rev, before, 'a delete of nothing makes no revision');
});

test("the store: a Range's count is every key in range before filters and limit; more when the limit cut", () => {
  const s = new Store(PROFILES['3.4']);
  const lease = s.grant(5n, 10n, 0).id;
  for (const k of ['p/a', 'p/b', 'p/c', 'p/d']) s.put({ key: key(k), lease }, 'test');
  const r = s.range({
    key: key('p/'),
    rangeEnd: key('p0'),
    limit: 1n,
    sortOrder: pb.RangeRequest_SortOrder.DESCEND,
    sortTarget: pb.RangeRequest_SortTarget.CREATE,
    maxCreateRevision: s.rev - 1n,
  });
  assert.equal(r.count, 4n);
  assert.equal(r.more, true);
  assert.equal(r.kvs?.[0]?.key?.toString(), 'p/c');
  assert.equal(s.range({ key: key('p/'), rangeEnd: key('p0'), countOnly: true }).kvs?.length, 0);
  // 3.4 answers a keys-only range with the lease; 3.7 with 0 (FastKeysOnly).
  assert.equal(s.range({ key: key('p/a'), keysOnly: true }).kvs?.[0]?.lease, lease);
  const s7 = new Store(PROFILES['3.7']);
  s7.grant(5n, 10n, 0);
  s7.put({ key: key('p/a'), lease: 5n, value: key('v') }, 'test');
  const kv = s7.range({ key: key('p/a'), keysOnly: true }).kvs?.[0];
  assert.equal(kv?.lease, 0n);
  assert.equal(kv?.value?.length, 0);
  assert.equal(s7.range({ key: key('p/a'), keysOnly: true, sortTarget: pb.RangeRequest_SortTarget.VALUE }).kvs?.[0]?.lease, 5n);
  assert.throws(() => s7.range({ key: key('p/a'), revision: s7.rev + 1n }), /future revision/);
  s7.compact(s7.rev);
  assert.throws(() => s7.range({ key: key('p/a'), revision: s7.rev - 1n }), /compacted/);
});

test("the store: a revoke deletes the lease's keys in one revision; a grant of a taken id fails", () => {
  const s = new Store(PROFILES['3.7']);
  s.grant(9n, 1n, 0);
  assert.equal(s.leases.get(9n)?.ttl, 2n, 'the minimum TTL');
  assert.throws(() => s.grant(9n, 5n, 0), /lease already exists/);
  s.put({ key: key('a'), lease: 9n }, 'test');
  s.put({ key: key('b'), lease: 9n }, 'test');
  const rev = s.rev;
  const changes = s.revoke(9n, 'test');
  assert.deepEqual(
    changes.map((c) => [c.type, c.k, c.rev]),
    [
      ['delete', 'a', rev + 1n],
      ['delete', 'b', rev + 1n],
    ],
  );
  assert.throws(() => s.put({ key: key('c'), lease: 9n }, 'test'), /requested lease not found/);
});
