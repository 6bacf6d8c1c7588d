// The chaos checker must be able to fail. Each test feeds it a synthetic history of the kind a broken
// build would produce (a waitForTurn that returns at once, an observe or campaign that lets a
// non-leader lead, a deadline counted from the answer instead of the send) and expects the verdict
// to fail; and the same history, explained by a freeze of the earlier holder, to pass. Pure: no etcd.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  checkElection,
  checkEtcdCounter,
  checkFencedLedger,
  checkLeaseExpiries,
  findOverlaps,
  overlapViolations,
  verdict,
  type FaultRecord,
  type HeldInterval,
  type PhaseVerdictInput,
} from '../chaos/checker.js';
import { FencedRegister } from '../chaos/fenced-store.js';

const iv = (worker: string, token: bigint, from: number, to: number, lost = false): HeldInterval => ({ worker, token, from, to, lost });
const fault = (kind: string, worker: string | undefined, start: number, end: number): FaultRecord => ({
  kind,
  target: worker ?? 'm0',
  ...(worker !== undefined ? { worker } : {}),
  start,
  end,
});
const clean: PhaseVerdictInput = { name: 'p', violations: [], unexpectedErrors: [], stuckWaits: [], problems: [], cleanupOk: true };
const emptyRegister = (): FencedRegister => new FencedRegister('election');

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
  const checks = checkFencedLedger(lost).violations.map((v) => v.check).sort();
  assert.deepEqual(checks, ['fenced-count', 'fenced-lost-update', 'fenced-token-order']);
});

test('fenced ledger: a careful write that passed assertHeld() and was still refused is a violation', () => {
  const ledger = new FencedRegister('ledger');
  ledger.read('a', 10n, 0);
  ledger.read('b', 12n, 1); // b took over while a still believed it held
  ledger.write('a', 10n, 1, 2, 'a/1', true); // a's assertHeld() passed: its deadline was wrong
  const report = checkFencedLedger(ledger);
  assert.equal(report.carefulRefused, 1);
  assert.deepEqual(report.violations.map((v) => v.check), ['careful-write-refused']);
  assert.match(verdict([{ ...clean, violations: report.violations }]).join('; '), /careful-write-refused/);
});

test('etcd counter: two owners, a key written twice and a lost acknowledgement are violations', () => {
  const entry = (token: number, value: number, version = 1n) => ({ key: `ops/${token}`, value: `w:${value}`, version });
  assert.deepEqual(checkEtcdCounter(2, [entry(1, 1), entry(2, 2)], []).violations, []);
  const bad = checkEtcdCounter(2, [entry(1, 1), entry(2, 2), entry(3, 2, 2n)], [
    { worker: 'w', token: 4n, opKey: 'ops/4', value: 3, outcome: 'accepted' },
  ]);
  assert.deepEqual(bad.violations.map((v) => v.check).sort(), ['etcd-count', 'etcd-double-apply', 'etcd-lost-ack', 'etcd-lost-update']);
});

test('lock overlap: two holders at once with no freeze (a waitForTurn that returns at once) fails the run', () => {
  // What a broken waitForTurn produces: b is granted while a still holds.
  const history = [iv('a#1', 100n, 0, 50), iv('b#1', 101n, 10, 60), iv('a#1', 102n, 55, 80)];
  const found = findOverlaps(history, []);
  assert.equal(found.report.unexplained, 2);
  const violations = overlapViolations(found.overlaps, 'unfenced-overlap');
  assert.equal(violations.length, 2);
  const failures = verdict([{ ...clean, violations }]);
  assert.deepEqual(failures, ['p: 2 unfenced-overlap violation(s)']);
});

test('lock overlap: a network fault never explains an overlap; only a freeze of the earlier holder covering the later start does', () => {
  const history = [iv('a#1', 100n, 0, 4000), iv('b#1', 101n, 3500, 3600)];
  // The earlier holder black-holed, a member down, a partition: its deadline should have fired first.
  for (const kind of ['proxy-blackhole', 'member-kill', 'partition', 'proxy-delay']) {
    const found = findOverlaps(history, [fault(kind, kind.startsWith('proxy') ? 'a#1' : undefined, 100, 3900)]);
    assert.equal(found.report.unexplained, 1, kind);
    assert.match(found.overlaps[0]!.cause, new RegExp(`unexplained \\(during ${kind}`));
  }
  // A freeze of the *later* holder explains nothing.
  assert.equal(findOverlaps(history, [fault('worker-pause', 'b#1', 100, 3900)]).report.unexplained, 1);
  // A freeze of the earlier holder that ended before the later one started explains nothing.
  assert.equal(findOverlaps(history, [fault('worker-pause', 'a#1', 100, 3000)]).report.unexplained, 1);
  // A freeze of the earlier holder covering the later start does (worker-pause and ghost-pause).
  for (const kind of ['worker-pause', 'ghost-pause']) {
    const found = findOverlaps(history, [fault(kind, 'a#1', 100, 3990)]);
    assert.equal(found.report.unexplained, 0, kind);
    assert.deepEqual(found.report.byCause, { [kind]: 1 });
    assert.deepEqual(overlapViolations(found.overlaps, 'unfenced-overlap'), []);
  }
});

test('lock overlap: a frozen holder whose belief covers two later holds counts once, for its whole stale stretch', () => {
  const intervals = [iv('a', 1n, 0, 1000), iv('b', 2n, 300, 310), iv('c', 3n, 500, 520), iv('b', 4n, 1100, 1120)];
  const { report } = findOverlaps(intervals, [fault('worker-pause', 'a', 10, 990)]);
  assert.equal(report.overlaps, 1);
  assert.equal(report.overlappingPairs, 2);
  assert.equal(report.longestMs, 700);
  assert.deepEqual(report.byCause, { 'worker-pause': 1 });
  assert.equal(findOverlaps(intervals, []).report.unexplained, 1);
});

test('election: two leaders of different terms at the same moment (an observe or campaign that lets a non-leader lead) fail the run', () => {
  const terms = [iv('e0#1', 500n, 0, 1000), iv('e1#1', 520n, 400, 1200)];
  const report = checkElection(terms, emptyRegister(), []);
  assert.deepEqual(report.violations.map((v) => v.check), ['election-two-leaders']);
  assert.equal(report.overlaps.unexplained, 1);
  assert.match(verdict([{ ...clean, violations: report.violations }]).join(), /election-two-leaders/);
  // The same history, with the earlier leader frozen from before the new term until after it began: a stale leader, explained.
  const explained = checkElection(terms, emptyRegister(), [fault('worker-pause', 'e0#1', 100, 950)]);
  assert.deepEqual(explained.violations, []);
  assert.equal(explained.overlaps.overlaps, 1);
});

test('election: one term claimed by two workers, and a register written by a non-leader, are violations', () => {
  const reg = new FencedRegister('election');
  reg.write('x', 5n, 0, 0);
  reg.write('y', 5n, 1, 1);
  const e = checkElection([iv('x', 5n, 0, 10), iv('y', 5n, 20, 30)], reg, []);
  assert.deepEqual(e.violations.map((v) => v.check).sort(), ['election-foreign-write', 'election-term-claimed-twice', 'election-two-writers']);
});

test('election: a term that begins after a newer term ended, with an older token, is a violation unless its worker was frozen meanwhile', () => {
  // e1 leads term 600 and ends; then e0 begins term 550, whose key is older: it should have led first.
  const terms = [iv('e1#1', 600n, 0, 100), iv('e0#1', 550n, 200, 300)];
  const report = checkElection(terms, emptyRegister(), []);
  assert.deepEqual(report.violations.map((v) => v.check), ['election-term-order']);
  // e0 won, was frozen before it could start its task, lost its lease, and woke after term 600: explained.
  assert.deepEqual(checkElection(terms, emptyRegister(), [fault('worker-pause', 'e0#1', -50, 190)]).violations, []);
  // Terms in order: nothing to report.
  assert.deepEqual(checkElection([iv('e0#1', 550n, 0, 100), iv('e1#1', 600n, 200, 300)], emptyRegister(), []).violations, []);
});

test('leases: etcd saying a lease is gone while the client deadline still lay ahead (a response-time deadline) fails the run', () => {
  assert.deepEqual(checkLeaseExpiries([{ worker: 'w', lease: 'ab', leftMs: -20, at: 0 }]).violations, []);
  const early = checkLeaseExpiries([
    { worker: 'w', lease: 'ab', leftMs: -20, at: 0 },
    { worker: 'w', lease: 'cd', leftMs: 310, at: 5 },
  ]);
  assert.equal(early.early, 1);
  assert.deepEqual(early.violations.map((v) => v.check), ['lease-expired-early']);
  assert.match(early.violations[0]!.detail, /cd .*310 ms/);
  assert.deepEqual(verdict([{ ...clean, violations: early.violations }]), ['p: 1 lease-expired-early violation(s)']);
});

test('leases: an early expiry right after a frozen Raft leader wakes is etcd 15247 (reported); anything else is not', () => {
  const pause = { kind: 'member-pause', target: 'm0 (leader)', start: 1000, end: 4600 };
  const r = { worker: 'w', lease: 'ab', leftMs: 2200, at: 4650 };
  const attributed = checkLeaseExpiries([r], [pause]);
  assert.equal(attributed.early, 1);
  assert.equal(attributed.byDeposedLeader, 1);
  assert.deepEqual(attributed.violations, []);
  // A follower's pause, a leader pause long over, or another fault: still a violation.
  for (const f of [
    { ...pause, target: 'm1' },
    { ...pause, end: 1500 },
    { ...pause, kind: 'member-kill' },
    { ...pause, kind: 'proxy-blackhole', target: 'w', worker: 'w' },
  ]) {
    assert.deepEqual(checkLeaseExpiries([r], [f]).violations.map((v) => v.check), ['lease-expired-early'], JSON.stringify(f));
  }
});

test('verdict: unexpected errors, stuck waits, harness problems, cleanup and a harness error each fail the run', () => {
  assert.deepEqual(verdict([clean]), []);
  assert.deepEqual(verdict([]), ['no phase completed']);
  assert.deepEqual(verdict([{ ...clean, unexpectedErrors: ['w#1 fenced: TypeError: x is undefined'] }]), ['p: 1 unexpected error(s)']);
  assert.deepEqual(verdict([{ ...clean, stuckWaits: ['w#1 waited 12000 ms'] }]), ['p: 1 stuck lock wait(s)']);
  assert.deepEqual(verdict([{ ...clean, problems: ['cluster unhealthy after the run: timeout'] }]), [
    'p: 1 harness problem(s): cluster unhealthy after the run: timeout',
  ]);
  assert.deepEqual(verdict([{ ...clean, cleanupOk: false }]), ['p: cleanup failed']);
  assert.deepEqual(verdict([clean], 'loopback: Error: boom\n  at x'), ['harness error: loopback: Error: boom']);
});
