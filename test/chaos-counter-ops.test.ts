// How the chaos run records the etcd counter for Porcupine (chaos/counter-ops.ts), on synthetic
// worker reports: a correct system must never be judged Illegal because of the recording (a worker
// killed after its Txn was applied, before it could say so: the seed 3633817003 run on 3.4.23), and
// a lost increment or a stale read must still be. Builds Porcupine's Go program (cached).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CounterRecorder, settleCounterOps, type CounterOps } from '../chaos/counter-ops.js';
import type { WorkerEvent } from '../chaos/common.js';
import { checkLinearizable, type LinearOp } from '../chaos/porcupine.js';

type Call = Extract<WorkerEvent, { t: 'etcd-inc-call' }>;
type Done = Extract<WorkerEvent, { t: 'etcd-inc' }>;

/** A worker's report of its read (value `read` over [at, at+1]) and the Txn it sends at at+2. */
const call = (token: number, read: number, at: number): Call => ({
  t: 'etcd-inc-call',
  token: String(token),
  opKey: `ops/${token}`,
  value: read + 1,
  read: { call: at, ret: at + 1, value: read },
  at: at + 2,
});
/** Its outcome; the Txn returned at at+3 unless `ret` is null (it never returned). */
const done = (c: Call, outcome: Done['outcome'], ret: number | null = c.at + 1): Done => ({
  t: 'etcd-inc',
  token: c.token,
  opKey: c.opKey,
  value: c.value,
  outcome,
  at: c.at + 1,
  txn: ret === null ? { call: c.at } : { call: c.at, ret },
});

function recorders(n: number, errMs = 0, toParent = (at: number): number => at): { ops: CounterOps; w: CounterRecorder[] } {
  const ops: CounterOps = { counter: [], unknownIncs: [] };
  return { ops, w: Array.from({ length: n }, (_, i) => new CounterRecorder(i, toParent, errMs, ops)) };
}

async function verdicts(histories: Record<string, LinearOp[]>): Promise<Record<string, string>> {
  const dir = await mkdtemp(join(tmpdir(), 'chaos-counter-ops-test-'));
  try {
    const rs = await checkLinearizable(
      Object.entries(histories).map(([name, ops]) => ({ name, model: 'counter' as const, ops })),
      join(dir, 'result.json'),
    );
    return Object.fromEntries(rs.map((r) => [r.name, r.result]));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

test('counter ops: a worker killed after its Txn was applied leaves an increment that the ledger settles (the seed 3633817003 Illegal)', {
  timeout: 300_000,
}, async () => {
  // A increments 0 -> 1; B reads 1 and sends its Txn, which etcd applies, and is SIGKILLed before
  // its outcome comes back; C then reads 2 and increments to 3. etcd's ledger has all three keys.
  const { ops, w } = recorders(3);
  const a = call(10, 0, 0);
  w[0]!.called(a);
  w[0]!.done(done(a, 'accepted'));
  const b = call(20, 1, 10);
  w[1]!.called(b);
  const report = w[1]!.died('fenced-1#1');
  assert.deepEqual(report, { worker: 'fenced-1#1', token: 20n, opKey: 'ops/20', value: 2, outcome: 'unknown' });
  assert.equal(w[1]!.died('fenced-1#1'), undefined, 'an increment dies once');
  const c = call(30, 2, 20);
  w[2]!.called(c);
  w[2]!.done(done(c, 'accepted'));
  const applied = settleCounterOps(ops, new Set(['ops/10', 'ops/20', 'ops/30']));
  const killed = applied.find((o) => o.client === 1 && o.op === 'inc');
  assert.deepEqual(killed, { client: 1, call: 12, ret: Infinity, op: 'inc', value: 2, ok: true });
  // What the run recorded before: a killed worker's read and Txn were reported only with its outcome.
  const unreported = applied.filter((o) => o.client !== 1);
  assert.deepEqual(await verdicts({ applied, unreported }), { applied: 'Ok', unreported: 'Illegal' });
});

test('counter ops: a killed worker whose Txn was not applied, and a rejected one, leave only their reads', {
  timeout: 300_000,
}, async () => {
  const { ops, w } = recorders(3);
  const a = call(10, 0, 0);
  w[0]!.called(a);
  w[0]!.done(done(a, 'rejected'));
  const b = call(20, 0, 10);
  w[1]!.called(b);
  w[1]!.died('fenced-1#1');
  const c = call(30, 0, 20);
  w[2]!.called(c);
  w[2]!.done(done(c, 'unknown', null));
  const settled = settleCounterOps(ops, new Set(['ops/30']));
  assert.deepEqual(
    settled.map((o) => `${o.client} ${o.op} ${o.value}`),
    ['0 read 0', '1 read 0', '2 read 0', '2 inc 1'],
  );
  // Had the ledger's answer been ignored (the killed increment counted as applied), it would not be linearizable.
  const unsettled = settleCounterOps(ops, new Set(['ops/20', 'ops/30']));
  assert.deepEqual(await verdicts({ settled, unsettled }), { settled: 'Ok', unsettled: 'Illegal' });
});

test('counter ops: a lost increment and a stale read are still Illegal', { timeout: 300_000 }, async () => {
  // Lost increment: B (killed after its Txn applied) and C both incremented from 1 to 2.
  const lost = recorders(3);
  const a = call(10, 0, 0);
  lost.w[0]!.called(a);
  lost.w[0]!.done(done(a, 'accepted'));
  lost.w[1]!.called(call(20, 1, 10));
  lost.w[1]!.died('fenced-1#1');
  const c = call(30, 1, 20);
  lost.w[2]!.called(c);
  lost.w[2]!.done(done(c, 'accepted'));
  // Stale read: C reads 0 after A's increment to 1 returned.
  const stale = recorders(2);
  const a2 = call(10, 0, 0);
  stale.w[0]!.called(a2);
  stale.w[0]!.done(done(a2, 'accepted'));
  const c2 = call(20, 0, 10);
  stale.w[1]!.called(c2);
  stale.w[1]!.done(done(c2, 'rejected'));
  assert.deepEqual(
    await verdicts({
      lost: settleCounterOps(lost.ops, new Set(['ops/10', 'ops/20', 'ops/30'])),
      stale: settleCounterOps(stale.ops, new Set(['ops/10'])),
    }),
    { lost: 'Illegal', stale: 'Illegal' },
  );
});

test('counter ops: intervals are mapped onto the parent clock and widened by the mapping error bound', { timeout: 300_000 }, async () => {
  // A's increment returns at 3 on its clock (103 on the parent's); B's read of 0 starts 0.25 ms later
  // on B's own clock: with a mapping error up to 0.25 ms each side, they may have overlapped.
  const history = (errMs: number): LinearOp[] => {
    const { ops, w } = recorders(2, errMs, (at) => at + 100);
    const a = call(10, 0, 0);
    w[0]!.called(a);
    w[0]!.done(done(a, 'accepted'));
    const b: Call = { ...call(20, 0, 3.25), read: { call: 3.25, ret: 3.5, value: 0 } };
    w[1]!.called(b);
    w[1]!.done(done(b, 'rejected'));
    return ops.counter;
  };
  assert.deepEqual(
    history(0.25).map((o) => [o.op, o.call, o.ret]),
    [
      ['read', 99.75, 101.25],
      ['inc', 101.75, 103.25],
      ['read', 103, 103.75],
    ],
  );
  assert.deepEqual(await verdicts({ widened: history(0.25), exact: history(0) }), { widened: 'Ok', exact: 'Illegal' });
});
