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

test("the oracle allows a DoubleBarrier's `ready` left behind only after its round lost a member with its lease", () => {
  const oracle = new Oracle(
    () => 0,
    { get: () => undefined, keys: () => [] },
    () => {},
  );
  const waiter = (n: number) => `dbar/a/waiters/${n}`;
  const gone = (k: string, rev: bigint, cause: string) => oracle.changed({ type: 'delete', k, rev, cause });
  const ready = (rev: bigint) => ({ modRevision: rev, lease: 0n });
  // A round whose members all left alive: a `ready` left is a violation (the last one out deletes it).
  oracle.barrierOpened('dbar/a', 2, [waiter(1), waiter(2)], 10n);
  gone(waiter(1), 11n, 'p1 Txn');
  gone(waiter(2), 12n, 'p2 Txn');
  assert.equal(oracle.leftByDesign('dbar/a/ready', ready(10n)), false);
  // An operator's delete of a member's key is no death either.
  oracle.barrierOpened('dbar/a', 2, [waiter(3), waiter(4)], 20n);
  gone(waiter(3), 21n, 'fault operator-delete');
  gone(waiter(4), 22n, 'p2 Txn');
  assert.equal(oracle.leftByDesign('dbar/a/ready', ready(20n)), false);
  // A member whose lease expired (its process crashed, its session lost) during the round: allowed.
  oracle.barrierOpened('dbar/a', 2, [waiter(5), waiter(6)], 30n);
  gone(waiter(5), 31n, 'p1 Txn');
  gone(waiter(6), 32n, 'expiry');
  assert.equal(oracle.leftByDesign('dbar/a/ready', ready(30n)), true);
  // ... but only that round's `ready`, only a lease-less one, and no other key.
  assert.equal(oracle.leftByDesign('dbar/a/ready', ready(40n)), false);
  assert.equal(oracle.leftByDesign('dbar/a/ready', { modRevision: 30n, lease: 7n }), false);
  assert.equal(oracle.leftByDesign('dbar/a/waiters/5', ready(30n)), false);
  // A member's key revoked by a fault (a deposed leader's early revoke) is a lost session too; a
  // death in an earlier round does not excuse the `ready` of a later one whose members all left.
  oracle.barrierOpened('dbar/a', 2, [waiter(7), waiter(8)], 50n);
  gone(waiter(7), 51n, 'fault early-revoke');
  assert.equal(oracle.leftByDesign('dbar/a/ready', ready(50n)), true);
  oracle.barrierOpened('dbar/a', 2, [waiter(8), waiter(9)], 60n);
  gone(waiter(8), 61n, 'p2 Txn');
  gone(waiter(9), 62n, 'p3 Txn');
  assert.equal(oracle.leftByDesign('dbar/a/ready', ready(60n)), false);
  // A process crashed while a member of the round was still in: allowed; after they all left: not.
  const standing = new Set([waiter(11)]);
  const withStore = new Oracle(
    () => 0,
    { get: (k) => (standing.has(k) ? { lease: 1n, createRevision: 1n } : undefined), keys: () => [...standing] },
    () => {},
  );
  withStore.barrierOpened('dbar/a', 2, [waiter(11), waiter(12)], 70n);
  withStore.crashed({} as never);
  assert.equal(withStore.leftByDesign('dbar/a/ready', ready(70n)), true);
  standing.clear();
  withStore.barrierOpened('dbar/a', 2, [waiter(13), waiter(14)], 80n);
  withStore.crashed({} as never);
  assert.equal(withStore.leftByDesign('dbar/a/ready', ready(80n)), false);
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
