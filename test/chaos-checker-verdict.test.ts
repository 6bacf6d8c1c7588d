// What fails a chaos run besides overlaps: the verdict's list (chaos/checker/verdict.ts), a record
// of etcd's history that ends early (chaos/checker/record.ts), a check that judged nothing, and the
// checks by etcd's revisions (chaos/revisions.ts: a key deleted by another, grants judged by revision).
// Pure: no etcd.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { verdict, withinRecord } from '../chaos/checker/index.js';
import { checkGrantsByRevision, type GrantWitness, type KeyLife } from '../chaos/revisions.js';
import { clean, iv } from './chaos-checker-helpers.js';

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

test('a record that ends early fails the run as incomplete, naming the revision it reached', () => {
  assert.deepEqual(verdict([{ ...clean, record: { reached: 134327n, wanted: 160955n } }]), [
    "p: incomplete record: the observer's watch reached revision 134327, not 160955; nothing after revision 134327 was judged",
  ]);
  // Reached past what it had to (a progress batch may say more): complete.
  assert.deepEqual(verdict([{ ...clean, record: { reached: 101n, wanted: 100n } }]), []);
});

test('a check that judged nothing in the whole run fails it, by name; one that judged something in one phase only does not', () => {
  const phase = (name: string, judged: Record<string, number>) => ({ ...clean, name, judged });
  assert.deepEqual(
    verdict([phase('loopback', { 'pg-stale-write': 1, 'fenced-ledger': 40 }), phase('netns', { 'pg-stale-write': 0, 'fenced-ledger': 9 })]),
    [],
  );
  assert.deepEqual(
    verdict([
      phase('loopback', { 'pg-stale-write': 0, 'key-deleted-by-another': 0, 'fenced-ledger': 40 }),
      phase('netns', { 'pg-stale-write': 0, 'fenced-ledger': 9 }),
    ]),
    ['judged nothing in the whole run: pg-stale-write, key-deleted-by-another'],
  );
});

test('grants after the end of an incomplete record are not judged on it (no false violations from deletes it missed)', () => {
  // The watch stalled at 134327: key 134000's delete at 134400 never reached the record.
  const lives: KeyLife[] = [{ key: 'm/a', create: 134000n, lease: 'ab' }];
  const w = (token: bigint, rev: bigint): GrantWitness => ({ worker: 'w', queue: 'm/', token, rev });
  const witnesses = [w(134100n, 134200n), w(134500n, 134600n), w(134700n, 134800n)];
  // Judged on the whole list, the two grants after the stall look like violations; the first one is one.
  assert.equal(checkGrantsByRevision(lives, witnesses, { kind: 'exclusive' }, 'x').length, 3);
  const { kept, beyond } = withinRecord(witnesses, (x) => x.rev, { reached: 134327n, wanted: 160955n });
  assert.equal(beyond, 2);
  assert.deepEqual(
    checkGrantsByRevision(lives, kept, { kind: 'exclusive' }, 'x').map((v) => v.detail),
    ['w (token 134100) held at revision 134200 while 1 older key(s) it waited for still existed: m/a@134000 (never deleted)'],
  );
  // Items that name no revision are kept.
  assert.deepEqual(
    withinRecord([{ rev: undefined }], (x) => x.rev, { reached: 1n, wanted: 2n }),
    { kept: [{ rev: undefined }], beyond: 0 },
  );
});

test('a hold lost to a delete of its key while its lease lived, by neither its release nor the operator, is a violation', async () => {
  const { foreignDeletes } = await import('../chaos/revisions.js');
  // As worker-loss.ts lossClock() reports it: the lost error's reason.
  const lost = (token: bigint, why = 'key_deleted') => ({ ...iv('fenced-0#1', token, 0, 10, true), lostReason: why });
  const lives: KeyLife[] = [
    { key: 'chaos/f/ab', create: 20n, lease: 'ab', deleted: 25n, how: 'deleted' }, // a late unguarded release of incarnation 10
    { key: 'chaos/f/ab', create: 30n, lease: 'ab', deleted: 31n, how: 'operator-delete' },
    { key: 'chaos/f/ab', create: 40n, lease: 'ab', deleted: 41n, how: 'lease-ended' },
  ];
  assert.deepEqual(
    foreignDeletes([lost(20n)], lives, 'fenced-key-deleted-by-another').violations.map((v) => v.check),
    ['fenced-key-deleted-by-another'],
  );
  // The operator's delete, a lease gone: judged, not violations. A loss for another reason, a
  // release (not lost), a delete the record does not show: not judged.
  assert.deepEqual(
    foreignDeletes(
      [lost(30n), lost(40n), lost(20n, 'lease_expired/deadline'), { ...lost(20n), lost: false }, lost(50n)],
      [...lives, { key: 'chaos/f/ab', create: 50n, lease: 'ab' }],
      'x',
    ),
    { violations: [], judged: 2 },
  );
});

test("grants judged by revision: an older key alive at the witness's revision fails it; one deleted by then does not", async () => {
  const { checkGrantsByRevision } = await import('../chaos/revisions.js');
  const life = (key: string, create: bigint, deleted?: bigint, lease = 'ab'): KeyLife => ({
    key,
    create,
    lease,
    ...(deleted !== undefined ? { deleted, how: 'deleted' as const } : {}),
  });
  const lives = [life('m/a', 10n, 15n), life('m/b', 12n), life('m/c', 14n, 30n), life('m/x/y', 11n), life('m/s', 9n, undefined, '0')];
  const w = (token: bigint, rev: bigint) => ({ worker: 'w', queue: 'm/', token, rev });
  // Token 14 witnessed at 20: key 12 (older, never deleted) was there: a violation. Key 10 was gone at 15.
  const v = checkGrantsByRevision(lives, [w(14n, 20n)], { kind: 'exclusive' }, 'x');
  assert.equal(v.length, 1);
  assert.match(v[0]!.detail, /m\/b@12 \(never deleted\)/);
  // Token 12 at 16: key 10 deleted at 15, stray m/s (no lease) and m/x/y (not a participant) do not count.
  assert.deepEqual(checkGrantsByRevision(lives, [w(12n, 16n)], { kind: 'exclusive' }, 'x'), []);
  // Two permits: one older key alive is a rightful grant; two are an over-grant.
  assert.deepEqual(checkGrantsByRevision(lives, [w(14n, 14n)], { kind: 'permits', permits: 2 }, 'x').length, 1);
  assert.deepEqual(checkGrantsByRevision(lives, [w(14n, 20n)], { kind: 'permits', permits: 2 }, 'x'), []);
});
