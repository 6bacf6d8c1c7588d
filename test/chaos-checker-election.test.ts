// The chaos checker on leadership (chaos/checker/election.ts): two leaders at once (an observe or
// campaign that lets a non-leader lead), one term claimed twice, a non-leader's write, a stale term
// each fail the run. Pure: no etcd.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkElection, verdict } from '../chaos/checker/index.js';
import { FencedRegister } from '../chaos/fenced-store.js';
import { clean, emptyRegister, fault, iv } from './chaos-checker-helpers.js';

test('election: two leaders of different terms at the same moment (an observe or campaign that lets a non-leader lead) fail the run', () => {
  const terms = [iv('e0#1', 500n, 0, 4000), iv('e1#1', 520n, 1600, 4800)];
  const report = checkElection(terms, emptyRegister(), []);
  assert.deepEqual(
    report.violations.map((v) => v.check),
    ['election-two-leaders'],
  );
  assert.equal(report.overlaps.unexplained, 1);
  assert.match(verdict([{ ...clean, violations: report.violations }]).join(), /election-two-leaders/);
  // The same history, with the earlier leader frozen from before the new term until after it began: a stale leader, explained.
  const explained = checkElection(terms, emptyRegister(), [fault('worker-pause', 'e0#1', 400, 3800)]);
  assert.deepEqual(explained.violations, []);
  assert.equal(explained.overlaps.overlaps, 1);
});

test('election: one term claimed by two workers, and a register written by a non-leader, are violations', () => {
  const reg = new FencedRegister('election');
  reg.write('x', 5n, 0, 0);
  reg.write('y', 5n, 1, 1);
  const e = checkElection([iv('x', 5n, 0, 10), iv('y', 5n, 20, 30)], reg, []);
  assert.deepEqual(e.violations.map((v) => v.check).sort(), [
    'election-foreign-write',
    'election-term-claimed-twice',
    'election-two-writers',
  ]);
});

test('election: a term that begins after a newer term ended, with an older token, is a violation unless its worker was frozen meanwhile', () => {
  // e1 leads term 600 and ends; then e0 begins term 550, whose key is older: it should have led first.
  const terms = [iv('e1#1', 600n, 0, 100), iv('e0#1', 550n, 200, 300)];
  const report = checkElection(terms, emptyRegister(), []);
  assert.deepEqual(
    report.violations.map((v) => v.check),
    ['election-term-order'],
  );
  // e0 won, was frozen before it could start its task, lost its lease, and woke after term 600: explained.
  assert.deepEqual(checkElection(terms, emptyRegister(), [fault('worker-pause', 'e0#1', -2400, 190)]).violations, []);
  // Terms in order: nothing to report.
  assert.deepEqual(checkElection([iv('e0#1', 550n, 0, 100), iv('e1#1', 600n, 200, 300)], emptyRegister(), []).violations, []);
});
