// The chaos checker on the resources holders write (chaos/checker/fenced.ts, counter.ts, permits.ts,
// rw.ts; chaos/pg-ledger.ts): each test feeds it the records a broken build would leave (lost
// updates, a stale holder let through, an operation applied twice) and expects the verdict to fail;
// chaos/checker/stale.ts judges the writes of the hold every run makes stale.
// Pure: no etcd.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkEtcdCounter, checkFencedLedger, checkPermits, checkRW, checkStaleWrites, verdict } from '../chaos/checker/index.js';
import { FencedPermits, FencedRegister, FencedRW, type PermitEntry, type RWEntry } from '../chaos/fenced-store.js';
import { clean } from './chaos-checker-helpers.js';

test('fenced ledger: lost updates, repeated tokens and a miscounted ledger are violations; a refused stale write is not', () => {
  const ledger = new FencedRegister('ledger');
  ledger.read('a', 10n, 0);
  ledger.write('a', 10n, 1, 1, 'a/1');
  ledger.read('b', 12n, 2);
  ledger.read('c', 13n, 3); // c reads 1 ...
  ledger.write('b', 12n, 2, 4, 'b/1'); // refused: 12 < 13 (a plain, not careful, writer)
  ledger.write('c', 13n, 2, 5, 'c/1');
  assert.deepEqual(checkFencedLedger(ledger).violations, []);
  assert.equal(checkFencedLedger(ledger).writesRefused, 1);
  const lost = new FencedRegister('ledger');
  lost.read('a', 10n, 0);
  lost.read('b', 11n, 1); // both read 0
  lost.write('b', 11n, 1, 2, 'b/1');
  lost.write('b', 11n, 1, 3, 'b/2'); // same token again, over 1: lost update
  const checks = checkFencedLedger(lost)
    .violations.map((v) => v.check)
    .sort();
  assert.deepEqual(checks, ['fenced-count', 'fenced-lost-update', 'fenced-token-order']);
});

test('fenced ledger: a careful write that passed assertHeld() and was still refused is a violation', () => {
  const ledger = new FencedRegister('ledger');
  ledger.read('a', 10n, 0);
  ledger.read('b', 12n, 1); // b took over while a still believed it held
  ledger.write('a', 10n, 1, 2, 'a/1', true); // a's assertHeld() passed: its deadline was wrong
  const report = checkFencedLedger(ledger);
  assert.equal(report.carefulRefused, 1);
  assert.deepEqual(
    report.violations.map((v) => v.check),
    ['careful-write-refused'],
  );
  assert.match(verdict([{ ...clean, violations: report.violations }]).join('; '), /careful-write-refused/);
});

test('etcd counter: two owners, a key written twice, a lost acknowledgement and an unreported increment are violations', () => {
  const entry = (token: number, value: number, version = 1n) => ({ key: `ops/${token}`, value: `w:${value}`, version });
  const sent = (token: number, value: number, outcome: 'accepted' | 'unknown' = 'accepted') => ({
    worker: 'w',
    token: BigInt(token),
    opKey: `ops/${token}`,
    value,
    outcome,
  });
  assert.deepEqual(checkEtcdCounter(2, [entry(1, 1), entry(2, 2)], [sent(1, 1), sent(2, 2, 'unknown')]).violations, []);
  const bad = checkEtcdCounter(2, [entry(1, 1), entry(2, 2), entry(3, 2, 2n)], [sent(1, 1), sent(2, 2), sent(4, 3)]);
  assert.deepEqual(bad.violations.map((v) => v.check).sort(), [
    'etcd-count',
    'etcd-double-apply',
    'etcd-lost-ack',
    'etcd-lost-update',
    'etcd-unreported',
  ]);
  // An increment applied by a worker that was killed before it reported sending it.
  const unreported = checkEtcdCounter(2, [entry(1, 1), entry(2, 2)], [sent(1, 1)]).violations;
  assert.deepEqual(unreported, [{ check: 'etcd-unreported', detail: 'ops/2 was applied but no worker reported sending it (w:2)' }]);
});

test('semaphore resource: a frozen holder pushed out by newer ones is refused; a careful write refused is a violation', () => {
  const res = new FencedPermits('permits', 2);
  assert.equal(res.enter('a', 10n, 0).ok, true);
  assert.equal(res.enter('b', 11n, 1).ok, true);
  assert.equal(res.write('b', 11n, 2, 'b/1').ok, true);
  assert.equal(res.leave('b', 11n, 3).ok, true);
  // a froze without leaving; c and d were granted after a's key expired: a is pushed out.
  assert.equal(res.enter('c', 12n, 4).ok, true);
  const d = res.enter('d', 13n, 5);
  assert.equal(d.ok, true);
  assert.deepEqual(d.evicted, [10n]);
  assert.equal(res.write('a', 10n, 6, 'a/1').ok, false); // a plain ghost's write: refused, as it should be
  assert.equal(res.enter('b', 11n, 7).ok, false); // a token that left is not let in again
  res.write('c', 12n, 8, 'c/1');
  res.write('d', 13n, 9, 'd/1');
  const report = checkPermits(res);
  assert.deepEqual(report.violations, []);
  assert.equal(report.evicted, 1);
  assert.equal(report.maxAccepted, 2);
  assert.deepEqual([report.writesAccepted, report.writesRefused], [3, 1]);
  // The same, but a's write came right after assertHeld() passed: its deadline was wrong, or three held.
  res.write('a', 10n, 10, 'a/2', true);
  const careful = checkPermits(res);
  assert.deepEqual(
    careful.violations.map((v) => v.check),
    ['semaphore-careful-refused'],
  );
  assert.match(verdict([{ ...clean, violations: careful.violations }]).join(), /semaphore-careful-refused/);
});

test('semaphore resource: three holders served at once by a resource of two fails the run; an operation applied twice too', () => {
  // A resource of three, judged as one of two: what a resource that let a third holder in would log.
  const res = new FencedPermits('permits', 3);
  res.enter('a', 10n, 0);
  res.enter('b', 11n, 1);
  res.enter('c', 12n, 2);
  res.write('a', 10n, 3, 'a/1');
  res.write('b', 11n, 4, 'b/1');
  res.write('c', 12n, 5, 'a/1');
  assert.deepEqual(
    checkPermits(res).violations.map((v) => v.check),
    ['semaphore-double-apply'],
  );
  const report = checkPermits({ capacity: 2, log: res.log });
  assert.equal(report.maxAccepted, 3);
  assert.deepEqual(report.violations.map((v) => v.check).sort(), ['semaphore-double-apply', 'semaphore-fence-capacity']);
  assert.match(
    report.violations.find((v) => v.check === 'semaphore-fence-capacity')!.detail,
    /request #2: 3 holders served at once by a resource of 2/,
  );
  // One at a time, judged with capacity 1: nothing.
  const serial: PermitEntry[] = [
    { seq: 0, at: 0, worker: 'a', op: 'enter', token: 1n, ok: true, value: 0 },
    { seq: 1, at: 1, worker: 'a', op: 'write', token: 1n, ok: true, value: 1 },
    { seq: 2, at: 2, worker: 'a', op: 'leave', token: 1n, ok: true, value: 1 },
    { seq: 3, at: 3, worker: 'b', op: 'enter', token: 2n, ok: true, value: 1 },
    { seq: 4, at: 4, worker: 'b', op: 'write', token: 2n, ok: true, value: 2 },
  ];
  assert.deepEqual(checkPermits({ capacity: 1, log: serial }).violations, []);
});

test('rw resource: readers share, writers increment; a stale reader or writer is refused; a careful one refused is a violation', () => {
  const res = new FencedRW('rw');
  assert.equal(res.request('r0', 'enter', 'read', 10n, 0).ok, true);
  assert.equal(res.request('r1', 'enter', 'read', 11n, 1).ok, true);
  assert.equal(res.request('r0', 'read', 'read', 10n, 2, undefined, undefined, true).ok, true); // an older reader still reads
  assert.equal(res.request('r1', 'read', 'read', 11n, 3).ok, true);
  assert.equal(res.request('w0', 'enter', 'write', 20n, 4).ok, true);
  assert.equal(res.request('w0', 'write', 'write', 20n, 5, 1, 'w0/1', true).ok, true);
  assert.equal(res.request('r0', 'read', 'read', 10n, 6).ok, false); // a plain stale reader, after a newer writer
  assert.equal(res.request('r2', 'enter', 'read', 21n, 7).ok, true);
  assert.equal(res.request('w9', 'write', 'write', 15n, 8, 2, 'w9/1').ok, false); // a plain stale writer, after newer holders
  assert.equal(res.request('w1', 'enter', 'write', 30n, 9).ok, true);
  assert.equal(res.request('w1', 'write', 'write', 30n, 10, 2, 'w1/1').ok, true);
  const report = checkRW(res);
  assert.deepEqual(report.violations, []);
  assert.deepEqual(
    [report.readHolds, report.writeHolds, report.writesAccepted, report.writesRefused, report.readsRefused, report.finalValue],
    [3, 2, 2, 1, 1, 2],
  );
  // A careful reader (assertHeld() passed) refused after a newer writer, and a careful writer after a newer reader.
  res.request('r2', 'read', 'read', 21n, 11, undefined, undefined, true);
  res.request('w1', 'write', 'write', 30n, 12, 3, 'w1/2', true); // fine: still the newest
  res.request('r3', 'enter', 'read', 31n, 13);
  res.request('w1', 'write', 'write', 30n, 14, 4, 'w1/3', true);
  const careful = checkRW(res);
  assert.deepEqual(
    careful.violations.map((v) => v.check),
    ['rw-careful-refused', 'rw-careful-refused'],
  );
  assert.match(careful.violations[0]!.detail, /read #11 by reader r2 \(token 21\) passed assertHeld\(\) but was refused: writer token 30/);
  assert.match(careful.violations[1]!.detail, /write #14 by writer w1 \(token 30\) passed assertHeld\(\) but was refused: holder token 31/);
});

test("rw resource: a write served inside another holder's window, a lost update and a miscount fail the run", () => {
  const e = (
    seq: number,
    worker: string,
    op: RWEntry['op'],
    mode: RWEntry['mode'],
    token: bigint,
    value: number,
    before: number,
  ): RWEntry => ({
    seq,
    at: seq,
    worker,
    op,
    mode,
    token,
    ok: true,
    value,
    before,
    highestBefore: -1n,
    highestWriteBefore: -1n,
  });
  // What a resource without its watermarks would accept from a writer and a reader at once.
  const log = [
    e(0, 'r0', 'enter', 'read', 10n, 0, 0),
    e(1, 'w0', 'enter', 'write', 20n, 0, 0),
    e(2, 'w0', 'write', 'write', 20n, 1, 0),
    e(3, 'r0', 'read', 'read', 10n, 1, 1),
  ];
  const report = checkRW({ log, value: 1 });
  assert.deepEqual(
    report.violations.map((v) => v.check),
    ['rw-fence-conflict'],
  );
  assert.match(
    report.violations[0]!.detail,
    /writer w0 \(token 20, #1..#2\) was served inside the window of reader r0 \(token 10, #0..#3\)/,
  );
  // Two readers' windows may interleave.
  const readers = [
    e(0, 'r0', 'enter', 'read', 10n, 0, 0),
    e(1, 'r1', 'enter', 'read', 11n, 0, 0),
    e(2, 'r0', 'read', 'read', 10n, 0, 0),
    e(3, 'r1', 'read', 'read', 11n, 0, 0),
  ];
  assert.deepEqual(checkRW({ log: readers, value: 0 }).violations, []);
  // Two writers that read the same value, one after the other: the second write is a lost update.
  const lost = [
    e(0, 'w0', 'enter', 'write', 10n, 0, 0),
    e(1, 'w0', 'write', 'write', 10n, 1, 0),
    e(2, 'w1', 'enter', 'write', 11n, 1, 1),
    e(3, 'w1', 'write', 'write', 11n, 1, 1),
  ];
  assert.deepEqual(
    checkRW({ log: lost, value: 1 })
      .violations.map((v) => v.check)
      .sort(),
    ['rw-count', 'rw-lost-update'],
  );
});

test("PostgreSQL ledger: a value written twice, a gap, a miscount and a lost acknowledgement are violations; the shadow's losses are only reported", async () => {
  const { checkPgLedger } = await import('../chaos/pg-ledger.js');
  const op = (opId: string, value: number, token: bigint) => ({ opId, value, token });
  const report = (opId: string, outcome: 'committed' | 'refused' | 'failed', shadowWritten = true) => ({
    worker: 'fenced-0#1',
    opId,
    token: 1n,
    outcome,
    shadowWritten,
  });
  const good = checkPgLedger(
    2,
    [op('a', 1, 10n), op('b', 2, 12n)],
    [report('a', 'committed'), report('b', 'committed'), report('c', 'refused')],
    1,
  );
  assert.deepEqual(good.violations, []);
  assert.deepEqual([good.committed, good.refusedByFence, good.shadowWrites, good.shadowLostUpdates], [2, 1, 3, 2]);
  const bad = checkPgLedger(
    3,
    [op('a', 1, 10n), op('b', 1, 12n)],
    [report('a', 'committed'), report('d', 'committed'), report('b', 'refused')],
    3,
  );
  assert.deepEqual(bad.violations.map((v) => v.check).sort(), [
    'pg-count',
    'pg-gap',
    'pg-gap',
    'pg-lost-ack',
    'pg-lost-update',
    'pg-misreport',
  ]);
  // A stale holder let through: value 3 written with an older token than value 2's.
  const stale = checkPgLedger(3, [op('a', 1, 10n), op('b', 2, 12n), op('c', 3, 11n)], [], 0);
  assert.deepEqual(
    stale.violations.map((v) => v.check),
    ['pg-token-order'],
  );
});

test('stale holds: every write of a hold made stale must be refused by its fence; one let through is a violation, one of unknown outcome is not judged', () => {
  const hold = { worker: 'fenced-1#1', token: 40n };
  const ledger = new FencedRegister('ledger');
  ledger.read('fenced-1#1', 40n, 0);
  ledger.read('fenced-0#1', 45n, 1); // the newer holder, while fenced-1 was frozen
  ledger.write('fenced-0#1', 45n, 1, 2, 'b/1');
  ledger.write('fenced-1#1', 40n, 1, 3, 'a/1'); // refused: 40 < 45
  const etcd = (outcome: 'accepted' | 'rejected' | 'unknown', opKey = 'ops/40') => ({
    worker: 'fenced-1#1',
    token: 40n,
    opKey,
    value: 2,
    outcome,
  });
  const pg = (outcome: 'committed' | 'refused' | 'failed') => ({
    worker: 'fenced-1#1',
    opId: 'a/1',
    token: 40n,
    outcome,
    shadowWritten: true,
  });
  const refused = checkStaleWrites([hold], ledger.log, [etcd('rejected')], new Set(), [pg('refused')]);
  assert.deepEqual(refused.violations, []);
  assert.deepEqual(refused.judged, { ledger: 1, etcd: 1, pg: 1 });
  // A fence that compares nothing lets each of them through.
  const open = new FencedRegister('ledger');
  open.write('fenced-1#1', 40n, 1, 3, 'a/1');
  const through = checkStaleWrites([hold], open.log, [etcd('accepted'), etcd('unknown', 'ops/41')], new Set(['ops/41']), [pg('committed')]);
  assert.deepEqual(
    through.violations.map((v) => v.check),
    ['fenced-stale-write-accepted', 'etcd-stale-increment-accepted', 'etcd-stale-increment-accepted', 'pg-stale-write-accepted'],
  );
  // Unknown outcomes that did not apply, and failures, are not judged; nor are other holds' writes.
  const unknown = checkStaleWrites([hold], [], [etcd('unknown')], new Set(), [pg('failed'), { ...pg('committed'), token: 41n }]);
  assert.deepEqual(unknown, { holds: 1, judged: { ledger: 0, etcd: 0, pg: 0 }, violations: [] });
  // Without PostgreSQL, its part judges nothing.
  assert.equal(checkStaleWrites([hold], [], [], new Set(), undefined).judged.pg, 0);
});
