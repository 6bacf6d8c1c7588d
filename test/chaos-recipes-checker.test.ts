// The recipes' invariants as the chaos checker judges them (chaos/checker/recipes.ts), on synthetic
// histories: each correct history passes, each mutant (a waiter that passes a held barrier, an
// enter before `count` arrived, a leave before all left, a lockAll that holds some or leaves a key
// behind) fails.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkBarrierPasses, checkDoubleBarrier, checkMultiLock } from '../chaos/checker/index.js';
import type { KeyLife } from '../chaos/revisions.js';

const life = (key: string, create: bigint, deleted?: bigint, lease = 'a'): KeyLife => ({
  key,
  create,
  lease,
  ...(deleted !== undefined ? { deleted, how: 'deleted' as const } : {}),
});

test('barrier: a waiter passes only once the key it saw is deleted', () => {
  const lives = [life('b/gate', 10n, 20n), life('b/gate', 30n)];
  assert.deepEqual(checkBarrierPasses([{ worker: 'w', held: 10n, rev: 20n }], lives), { violations: [], unjudged: 0 });
  // Mutant: passed while the key still existed at its read.
  const early = checkBarrierPasses([{ worker: 'w', held: 10n, rev: 19n }], lives);
  assert.deepEqual(
    early.violations.map((v) => v.check),
    ['barrier-passed-before-release'],
  );
  assert.match(early.violations[0]!.detail, /w passed barrier b\/gate while its key \(created at 10\) still existed at revision 19/);
  // Mutant: a key never deleted (a later hold is another incarnation: 30 was never released).
  assert.equal(checkBarrierPasses([{ worker: 'w', held: 30n, rev: 99n }], lives).violations.length, 1);
  // A key the observer never saw is not judged.
  assert.deepEqual(checkBarrierPasses([{ worker: 'w', held: 5n, rev: 99n }], lives), { violations: [], unjudged: 1 });
});

test('double barrier: enter returns only when count arrived, leave only when all left', () => {
  const W = 'd/waiters/';
  // Round 1: three members (11, 12, 13), ready put at 14; they leave at 20, 21, 22.
  const lives = [life(`${W}1`, 11n, 20n), life(`${W}2`, 12n, 21n), life(`${W}3`, 13n, 22n), life('d/ready', 14n, 22n, '0')];
  const enters = [11n, 12n, 13n].map((own) => ({ worker: `m${own}`, own, ready: 14n, rev: 15n }));
  const leave = { worker: 'm13', ready: 14n, rev: 22n };
  assert.deepEqual(checkDoubleBarrier(enters, [leave], lives, W, 3), { violations: [], unjudged: 0 });
  // Mutant: a barrier that opens one member short (count 3, only 2 in at the ready put).
  const short = [life(`${W}1`, 11n, 20n), life(`${W}2`, 12n, 21n), life('d/ready', 13n, 22n, '0')];
  const opened = checkDoubleBarrier([{ worker: 'm11', own: 11n, ready: 13n, rev: 15n }], [], short, W, 3);
  assert.deepEqual(
    opened.violations.map((v) => v.check),
    ['dbarrier-entered-early'],
  );
  assert.match(opened.violations[0]!.detail, /with 2 of 3 members in/);
  // Mutant: an enter let in by a ready put older than its own key (a newcomer through a stale ready).
  const late = checkDoubleBarrier([{ worker: 'm16', own: 16n, ready: 14n, rev: 17n }], [], [...lives, life(`${W}4`, 16n)], W, 3);
  assert.deepEqual(
    late.violations.map((v) => v.check),
    ['dbarrier-entered-early'],
  );
  // A member that died in enter (its key expired) does not count at the ready put.
  const died = [life(`${W}1`, 11n, 20n), life(`${W}2`, 12n, 13n), life(`${W}3`, 14n, 22n), life('d/ready', 15n, 22n, '0')];
  assert.equal(checkDoubleBarrier([{ worker: 'm14', own: 14n, ready: 15n, rev: 16n }], [], died, W, 3).violations.length, 1);
  // Mutant: a leave that returns while a member of its round is still in.
  const leftEarly = checkDoubleBarrier([], [{ worker: 'm11', ready: 14n, rev: 20n }], lives, W, 3);
  assert.deepEqual(
    leftEarly.violations.map((v) => v.check),
    ['dbarrier-left-early'],
  );
  assert.match(leftEarly.violations[0]!.detail, /2 member\(s\) of it remained at revision 20: d\/waiters\/2@12, d\/waiters\/3@13/);
  // The next round's entrants (created after the ready put) are not waited for.
  assert.deepEqual(checkDoubleBarrier([], [leave], [...lives, life(`${W}5`, 21n)], W, 3).violations, []);
  // An enter whose own key was gone at its read is not judged.
  assert.deepEqual(checkDoubleBarrier([{ worker: 'm11', own: 11n, ready: 14n, rev: 21n }], [], lives, W, 3), {
    violations: [],
    unjudged: 1,
  });
});

test('lockAll: all locks or none, each granted as an exclusive lock', () => {
  const lives = [life('m/a/1', 10n, 12n, '1'), life('m/a/2', 11n, undefined, '2'), life('m/b/2', 13n, undefined, '2')];
  const grant = {
    worker: 'w2',
    names: ['m/a', 'm/b'],
    tokens: { 'm/a': 11n, 'm/b': 13n },
    rev: 14n,
    seen: [
      { key: 'm/a/2', create: 11n, lease: '2' },
      { key: 'm/b/2', create: 13n, lease: '2' },
    ],
  };
  assert.deepEqual(checkMultiLock([grant], [{ worker: 'w2', leftover: [] }], lives), []);
  // Mutant: lockAll resolves holding only some of the locks.
  assert.deepEqual(
    checkMultiLock([{ ...grant, tokens: { 'm/a': 11n } }], [], lives).map((v) => v.check),
    ['multilock-partial-hold'],
  );
  // Mutant: a lock granted while an older key of its queue existed.
  assert.deepEqual(
    checkMultiLock([{ ...grant, rev: 11n }], [], lives).map((v) => v.check),
    ['multilock-grant-by-revision'],
  );
  const seenOlder = { ...grant, seen: [...grant.seen, { key: 'm/b/1', create: 12n, lease: '1' }] };
  assert.deepEqual(
    checkMultiLock([seenOlder], [], lives).map((v) => v.check),
    ['multilock-grant-by-revision'],
  );
  // Mutant: a failed lockAll that leaves one of its keys behind.
  assert.deepEqual(
    checkMultiLock([], [{ worker: 'w3', leftover: ['m/a/3'] }], lives).map((v) => v.check),
    ['multilock-partial-hold'],
  );
});
