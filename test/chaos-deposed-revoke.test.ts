// The checker's attribution of early lease expiries to a deposed Raft leader's stale batch of
// revocations (etcd-logs.ts, checker.ts deposedLeaderRevoke), on the figures of the full 3.7.3 run
// with seed 20261203: m0, leader, frozen 189.1-193.2 s into the phase; its first 16 revokes timed out
// at 200.2 s ("failed to revoke lease ... request timed out", 7.0 s after the wake); two fenced
// sessions were told at 200.3 s that their leases were gone, 2.28 and 2.19 s before their deadline.
// Pure: no etcd.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEPOSED_BATCH_MS, checkLeaseExpiries, verdict, type FaultRecord, type LeaseGoneReport } from '../chaos/checker/index.js';
import { parseRevokeTimeouts } from '../chaos/etcd-logs.js';
import { clean } from './chaos-checker-helpers.js';

const s = (x: number): number => x * 1000;
const pause: FaultRecord = { kind: 'member-pause', target: 'm0 (leader)', start: s(189.1), end: s(193.19) };
const losses: LeaseGoneReport[] = [
  { worker: 'fenced-0#1', lease: '2aa38be0421157d7', leftMs: 2282.4, at: s(200.33) },
  { worker: 'fenced-2#1', lease: '73cfc3e17b0c6346', leftMs: 2189.2, at: s(200.37) },
];
// As etcd 3.7.3 logs it (m0.log of that run), at wall time 08:35:45.698950Z; the phase began at
// 08:32:25.5 on the wall clock, which the test takes as 0 on the common clock.
const line =
  '{"level":"warn","ts":"2026-12-03T08:35:45.698950Z","caller":"etcdserver/server.go:889","msg":"failed to revoke lease","lease-id":"6fa82a002314825d","error":"etcdserver: request timed out"}';
const phaseStartWall = Date.parse('2026-12-03T08:32:25.500Z');
const timeouts = parseRevokeTimeouts('m0', `${line}\n${line.replace('6fa82a002314825d', '756d98a4369af4be')}\n`, (w) => w - phaseStartWall);

test('etcd-logs: "failed to revoke lease ... timed out" lines become timed-out revokes on the common clock', () => {
  assert.equal(timeouts.length, 2);
  assert.equal(timeouts[0]!.member, 'm0');
  assert.equal(timeouts[0]!.lease, '6fa82a002314825d');
  assert.ok(Math.abs(timeouts[0]!.at - s(200.198)) < 1, String(timeouts[0]!.at));
  // Other revoke failures (a lease already gone) and other lines are not a stale batch draining.
  const other = [
    '{"level":"warn","ts":"2026-12-03T08:35:45.7Z","msg":"failed to revoke lease","lease-id":"1","error":"lease not found"}',
    '{"level":"warn","ts":"2026-12-03T08:35:45.7Z","msg":"failed to apply request","error":"lease not found"}',
    'not json: failed to revoke lease',
  ].join('\n');
  assert.deepEqual(
    parseRevokeTimeouts('m0', other, (w) => w),
    [],
  );
});

test("leases: the run's two expiries, 7 s after the frozen leader woke, fail without the members' logs", () => {
  const r = checkLeaseExpiries(losses, [pause]);
  assert.equal(r.early, 2);
  assert.equal(r.byDeposedLeader, 0);
  assert.deepEqual(verdict([{ ...clean, name: 'loopback', violations: r.violations }]), ['loopback: 2 lease-expired-early violation(s)']);
});

test("leases: with the frozen leader's timed-out revokes just before them, they are its stale batch (reported, not failed)", () => {
  const r = checkLeaseExpiries(losses, [pause], timeouts);
  assert.equal(r.early, 2);
  assert.equal(r.byDeposedLeader, 2);
  assert.equal(r.byDeposedLeaderLate, 2);
  assert.deepEqual(r.violations, []);
  // At the wake itself it is the first wave, as before.
  const atWake = checkLeaseExpiries([{ ...losses[0]!, at: pause.end + 400 }], [pause], timeouts);
  assert.equal(atWake.byDeposedLeader, 1);
  assert.equal(atWake.byDeposedLeaderLate, 0);
});

test("leases: a timed-out revoke explains nothing unless it is the frozen leader's, after its wake, right before the loss", () => {
  const at = timeouts[0]!.at;
  const cases: [string, FaultRecord[], { member: string; at: number }[], LeaseGoneReport][] = [
    ['another member logged it', [pause], [{ member: 'm1', at }], losses[0]!],
    ['the frozen member was a follower', [{ ...pause, target: 'm0' }], [{ member: 'm0', at }], losses[0]!],
    ['a kill, not a freeze', [{ ...pause, kind: 'member-kill' }], [{ member: 'm0', at }], losses[0]!],
    ['logged before the pause ended', [pause], [{ member: 'm0', at: pause.start + 500 }], { ...losses[0]!, at: pause.start + 600 }],
    ['loss 2.5 s after it', [pause], [{ member: 'm0', at }], { ...losses[0]!, at: at + 2500 }],
    ['loss well before it', [pause], [{ member: 'm0', at }], { ...losses[0]!, at: at - 1000 }],
    [
      'too long after the wake',
      [pause],
      [{ member: 'm0', at: pause.end + DEPOSED_BATCH_MS + 1000 }],
      { ...losses[0]!, at: pause.end + DEPOSED_BATCH_MS + 1100 },
    ],
  ];
  for (const [why, faults, revokes, r] of cases) {
    assert.deepEqual(
      checkLeaseExpiries([r], faults, revokes).violations.map((v) => v.check),
      ['lease-expired-early'],
      why,
    );
  }
});
