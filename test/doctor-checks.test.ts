// doctor's checks, each a pure function tested on its own without etcd: members, versions (mixed,
// end-of-life 3.4, older than 3.4), which versions check put permission at each lease renewal,
// leader (members without one, members disagreeing), alarms, round trips, watch catch-up, auth,
// lease, TTL; and the report as the checks' outputs in order. The CLI itself is tested against real
// etcd in doctor.test.ts.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  alarmsCheck,
  authCheck,
  catchUpCheck,
  leaderCheck,
  leaseCheck,
  membersCheck,
  renewalChecksPermission,
  roundTripsCheck,
  runChecks,
  ttlCheck,
  ttlRecommendation,
  versionCheck,
} from '../src/cli/doctor/checks.js';
import type { Findings, LeaseFindings, MemberReport, RoundTripFindings, Stats } from '../src/cli/doctor/report.js';

function member(fields: Partial<MemberReport>): MemberReport {
  return {
    id: null,
    name: null,
    endpoint: '127.0.0.1:2379',
    version: null,
    leader: null,
    hasLeader: null,
    statusRefused: false,
    isLeader: false,
    isLearner: false,
    raftTerm: null,
    dbSize: null,
    alarms: [],
    error: null,
    ...fields,
  };
}

describe('versionCheck', () => {
  const m = (name: string, version: string) => member({ name, id: name, version });

  it('one supported version on every member: ok', () => {
    assert.deepEqual(versionCheck(['3.6.16'], [m('m0', '3.6.16'), m('m1', '3.6.16')]), {
      name: 'versions',
      level: 'ok',
      message: '3.6.16 on every member that answered',
    });
  });

  it('mixed versions: a warning naming who runs what, and the fix', () => {
    const c = versionCheck(['3.5.30', '3.6.16'], [m('m0', '3.5.30'), m('m1', '3.6.16'), m('m2', '3.6.16')]);
    assert.equal(c.level, 'warn');
    assert.equal(c.message, 'mixed versions: 3.5.30 on m0; 3.6.16 on m1, m2');
    assert.match(c.fix ?? '', /finish the rolling upgrade/);
  });

  it('3.4 is end of life: a warning; with 3.5 beside it, both problems', () => {
    const eol = versionCheck(['3.4.23'], [m('m0', '3.4.23')]);
    assert.equal(eol.level, 'warn');
    assert.equal(eol.message, 'etcd 3.4.23: the 3.4 line is end of life');
    assert.equal(eol.fix, 'upgrade to etcd 3.5 or later');
    const both = versionCheck(['3.4.23', '3.5.30'], [m('m0', '3.4.23'), m('m1', '3.5.30')]);
    assert.equal(both.level, 'warn');
    assert.equal(both.message, 'mixed versions: 3.4.23 on m0; 3.5.30 on m1; etcd 3.4.23: the 3.4 line is end of life');
    assert.match(both.fix ?? '', /rolling upgrade.*; upgrade to etcd 3\.5 or later$/);
  });

  it('older than 3.4: not ready, whatever else runs', () => {
    const c = versionCheck(['3.3.27', '3.5.30'], [m('m0', '3.3.27'), m('m1', '3.5.30')]);
    assert.equal(c.level, 'fail');
    assert.equal(c.message, 'etcd 3.3.27 is older than 3.4, the oldest this library supports');
    assert.equal(c.fix, 'upgrade etcd to 3.5 or later');
  });

  it('no version at all: not ready', () => {
    assert.deepEqual(versionCheck([], []), { name: 'versions', level: 'fail', message: 'no member told its version' });
  });
});

describe('renewalChecksPermission: the etcd releases that want put permission on every key attached to a renewed lease', () => {
  for (const [version, checks] of [
    ['3.3.27', false],
    ['3.4.0', false],
    ['3.4.41', false],
    ['3.4.42', true],
    ['3.4.100', true],
    ['3.5.0', false],
    ['3.5.27', false],
    ['3.5.28', true],
    ['3.5.30', true],
    ['3.6.0', false],
    ['3.6.8', false],
    ['3.6.9', true],
    ['3.6.16', true],
    ['3.7.0', true],
    ['3.7.3', true],
    ['4.0.0', true],
  ] as const) {
    it(`${version}: ${checks}`, () => assert.equal(renewalChecksPermission(version), checks));
  }
});

describe('leaderCheck', () => {
  const follower = (name: string, leader: string, term = 7n) =>
    member({
      name,
      id: name === 'm0' ? 'a1' : name === 'm1' ? 'b2' : 'c3',
      version: '3.6.16',
      leader,
      hasLeader: leader !== '0',
      isLeader: false,
      raftTerm: term,
    });

  it('every member follows one leader: ok, naming it and its term', () => {
    const ms = [{ ...follower('m0', 'a1'), isLeader: true }, follower('m1', 'a1'), follower('m2', 'a1')];
    assert.deepEqual(leaderCheck(ms), { name: 'leader', level: 'ok', message: 'every member that answered follows m0 (a1), term 7' });
  });

  it('a member with no leader: a warning naming it', () => {
    const ms = [
      { ...follower('m0', 'a1'), isLeader: true },
      follower('m1', 'a1'),
      member({ name: 'm2', id: 'c3', hasLeader: false, error: 'no leader' }),
    ];
    const c = leaderCheck(ms);
    assert.equal(c.level, 'warn');
    assert.equal(c.message, 'no leader on m2');
    assert.match(c.fix ?? '', /check its network to the others/);
  });

  it('members disagreeing on the leader: a warning naming both', () => {
    const ms = [follower('m0', 'a1', 7n), follower('m1', 'a1', 7n), follower('m2', 'ff', 8n)];
    const c = leaderCheck(ms);
    assert.equal(c.level, 'warn');
    assert.equal(c.message, 'members disagree on the leader: m0 (a1) vs ff');
  });

  it('both at once: one warning with both findings', () => {
    const ms = [follower('m0', 'a1'), follower('m1', 'c3'), member({ name: 'm2', id: 'c3', hasLeader: false })];
    assert.equal(leaderCheck(ms).message, 'no leader on m2; members disagree on the leader: m0 (a1) vs m2 (c3)');
  });

  it('no member has a leader: not ready', () => {
    const c = leaderCheck([member({ name: 'm0', hasLeader: false }), member({ name: 'm1', hasLeader: null, error: 'unreachable' })]);
    assert.equal(c.level, 'fail');
    assert.equal(c.message, 'no member has a Raft leader');
    assert.match(c.fix ?? '', /lost its quorum/);
  });

  it('Status refused (the leader unknown, only that each has one): ok, saying so', () => {
    const ms = [member({ name: 'm0', hasLeader: true, statusRefused: true }), member({ name: 'm1', hasLeader: true, statusRefused: true })];
    assert.deepEqual(leaderCheck(ms), {
      name: 'leader',
      level: 'ok',
      message: 'every member that answered has a leader (which one is known only to Status, refused to this user)',
    });
  });
});

const ms = (medianMs: number, maxMs = medianMs): Stats => ({ samples: 5, medianMs, maxMs });
const up = (name: string, fields: Partial<MemberReport> = {}) =>
  member({ name, id: name, endpoint: `${name}:2379`, version: '3.6.16', hasLeader: true, leader: 'm0', ...fields });

describe('membersCheck', () => {
  it('every member answers: ok, counting them', () => {
    assert.deepEqual(membersCheck([up('m0'), up('m1'), up('m2')]), { name: 'members', level: 'ok', message: '3 of 3 members answer' });
    assert.equal(membersCheck([up('m0')]).message, '1 of 1 member answers');
  });

  it('one of three down: a warning naming it and why, the quorum kept', () => {
    const c = membersCheck([up('m0'), up('m1'), member({ name: 'm2', endpoint: 'm2:2379', error: 'unreachable: connection refused' })]);
    assert.equal(c.level, 'warn');
    assert.equal(c.message, '2 of 3 members answer; m2 (m2:2379): unreachable: connection refused');
    assert.match(c.fix ?? '', /still has a quorum \(2 of 3\)/);
  });

  it('a majority down: not ready; a member that answers without a leader counts as up', () => {
    const down = (name: string) => member({ name, endpoint: `${name}:2379`, error: 'unreachable' });
    assert.equal(membersCheck([up('m0'), down('m1'), down('m2')]).level, 'fail');
    const noLeader = member({ name: 'm1', hasLeader: false, error: 'no leader' });
    assert.equal(membersCheck([up('m0'), noLeader, down('m2')]).level, 'warn');
  });
});

describe('versionCheck when Status was refused', () => {
  it('says the versions came from /version', () => {
    assert.equal(
      versionCheck(['3.6.16'], [up('m0', { statusRefused: true })]).message,
      '3.6.16 on every member that answered (read from /version: etcd refuses Status to users without the root role here)',
    );
  });
});

describe('alarmsCheck', () => {
  it('no alarm: ok', () => {
    assert.deepEqual(alarmsCheck([up('m0'), up('m1')]), { name: 'alarms', level: 'ok', message: 'no member reports an alarm' });
  });

  it('an alarm: not ready, naming the member and the alarm', () => {
    const c = alarmsCheck([up('m0', { alarms: ['NOSPACE'] }), up('m1')]);
    assert.equal(c.level, 'fail');
    assert.equal(c.message, 'm0 (m0:2379): NOSPACE');
    assert.match(c.fix ?? '', /etcdctl alarm disarm/);
  });

  it('Status refused on some members: unknown there; on all: not checked', () => {
    assert.equal(
      alarmsCheck([up('m0'), up('m1', { statusRefused: true })]).message,
      'no member reports an alarm (unknown on m1: Status needs the root role there)',
    );
    assert.equal(alarmsCheck([up('m0', { statusRefused: true })]).level, 'skip');
  });
});

describe('roundTripsCheck', () => {
  const grant = 'etcdctl role grant-permission <role of app> --prefix=true readwrite locks/';

  it('measured: ok, with the medians and the worst', () => {
    const rt: RoundTripFindings = { stats: { put: ms(2, 3), read: ms(1.5, 2), watch: ms(12, 40) }, failed: null, catchUp: null };
    assert.deepEqual(roundTripsCheck(rt, 5, 'locks/', grant), {
      name: 'round trips',
      level: 'ok',
      message: 'put 2.0 ms, linearizable read 1.5 ms, watch notification 12 ms (median of 5; worst 40 ms)',
    });
  });

  it('a refused write: not ready, with the grant to run', () => {
    const rt: RoundTripFindings = {
      stats: { put: null, read: null, watch: null },
      failed: { what: 'writing locks/x/round-trip', failure: { message: 'writing a key: permission denied', denied: true } },
      catchUp: null,
    };
    assert.deepEqual(roundTripsCheck(rt, 5, 'locks/', grant), {
      name: 'round trips',
      level: 'fail',
      message: 'writing locks/x/round-trip failed: writing a key: permission denied',
      fix: `locks need read and write access under locks/: ${grant}`,
    });
  });

  it('another failure: not ready, without a fix', () => {
    const rt: RoundTripFindings = {
      stats: { put: ms(1), read: ms(1), watch: null },
      failed: { what: 'a watch notification', failure: { message: 'the watch ended', denied: false } },
      catchUp: null,
    };
    assert.equal(roundTripsCheck(rt, 5, 'locks/', grant).fix, undefined);
  });
});

describe('catchUpCheck', () => {
  const rt = (catchUp: RoundTripFindings['catchUp']): RoundTripFindings => ({
    stats: { put: ms(1), read: ms(1), watch: ms(1) },
    failed: null,
    catchUp,
  });

  it("a wait of etcd's 100 ms loop, or none: info either way", () => {
    assert.match(catchUpCheck(rt(ms(60, 98)))?.message ?? '', /^a watch from the current revision waited 60 ms .*catch-up loop/);
    assert.match(catchUpCheck(rt(ms(2, 3)))?.message ?? '', /no catch-up delay seen$/);
    assert.equal(catchUpCheck(rt(ms(2, 3)))?.level, 'info');
  });

  it('not measured: skipped with why; not reached: no line', () => {
    assert.deepEqual(catchUpCheck(rt({ error: 'the watch ended' })), {
      name: 'watch catch-up',
      level: 'skip',
      message: 'not measured: the watch ended',
    });
    assert.equal(catchUpCheck(null), null);
    assert.equal(catchUpCheck({ ...rt(null), failed: { what: 'a put', failure: { message: 'x', denied: false } } }), null);
  });
});

describe('authCheck', () => {
  it('off, on as a user, on with a token; with the renewal note on versions that check', () => {
    assert.equal(
      authCheck({ enabled: false, username: null, authenticated: false }, false, ['3.6.16']).message,
      'off: any client may take or delete any lock',
    );
    assert.equal(authCheck({ enabled: true, username: 'app', authenticated: true }, false, ['3.6.8']).message, 'on; checked as user app');
    assert.equal(
      authCheck({ enabled: true, username: null, authenticated: true }, false, ['3.6.8']).message,
      'on; checked with --auth-jwt-token',
    );
    assert.match(
      authCheck({ enabled: true, username: 'app', authenticated: true }, false, ['3.6.16']).message,
      /checks put permission on every key attached to a lease/,
    );
  });

  it('unknown without a leader: skipped', () => {
    assert.deepEqual(authCheck({ enabled: null, username: null, authenticated: false }, true, []), {
      name: 'auth',
      level: 'skip',
      message: 'not checked: the cluster has no leader',
    });
  });
});

describe('leaseCheck', () => {
  const where = { prefix: 'locks/', grant: 'GRANT', versions: ['3.6.16'] };
  const all = { grant: 'ok', attach: 'ok', renew: 'ok', revoke: 'ok' } as const;

  it('every step done: one ok line saying what was done', () => {
    const lease: LeaseFindings = { steps: { ...all }, failures: {}, renewal: ms(1.8) };
    assert.deepEqual(leaseCheck(lease, where), [
      { name: 'lease', level: 'ok', message: 'granted a lease, attached a key under locks/, renewed it (1.8 ms), revoked it' },
    ]);
  });

  it('a renewal refused on a version that checks put permission: not ready, saying which versions and what to grant', () => {
    const lease: LeaseFindings = {
      steps: { ...all, renew: { error: 'renewing a lease: permission denied' } },
      failures: { renew: { message: 'renewing a lease: permission denied', denied: true } },
      renewal: null,
    };
    assert.deepEqual(leaseCheck(lease, where), [
      {
        name: 'lease',
        level: 'fail',
        message: 'renewing a lease: permission denied',
        fix: 'etcd 3.6.16 renews a lease only for a user with put permission on every key attached to it: GRANT',
      },
    ]);
  });

  it('a refused attach and a failed revoke: one line each, in the order they ran', () => {
    const lease: LeaseFindings = {
      steps: { grant: 'ok', attach: { error: 'denied' }, renew: 'skipped', revoke: { error: 'timeout' } },
      failures: {
        attach: { message: 'attaching locks/x/lease to the lease: denied', denied: true },
        revoke: { message: 'timeout', denied: false },
      },
      renewal: null,
    };
    assert.deepEqual(
      leaseCheck(lease, where).map((c) => [c.level, c.message, c.fix]),
      [
        ['fail', 'attaching locks/x/lease to the lease: denied', 'locks write their keys under locks/: GRANT'],
        ['fail', 'revoking the lease: timeout; it expires by itself within 10 s', undefined],
      ],
    );
  });
});

describe('ttlRecommendation and ttlCheck', () => {
  it('twice the allowance (two elections, a dial, three worst round trips) up to 30 s: the default is enough', () => {
    const t = ttlRecommendation({ put: ms(2, 5), read: ms(1, 2), watch: ms(50, 90), renewal: ms(1, 3) }, 2000);
    // 2 * 1000 + 2000 + 3 * 5 = 4015 ms, twice: 9 s (the watch does not count).
    assert.deepEqual(t, { recommended: 9, worstRoundTripMs: 5, allowanceMs: 4015, assumedElectionTimeoutMs: 1000, dialTimeoutMs: 2000 });
    assert.equal(ttlCheck(t).level, 'info');
  });

  it('slow round trips: above 30 s, 1.5 times (allowance + 5 s), and a warning with the --ttl to pass', () => {
    const t = ttlRecommendation({ put: ms(2000, 9000), read: null, watch: null, renewal: null }, 2000);
    // 2000 + 2000 + 27000 = 31000 ms; 2x is 62 s > 30, so 1.5 x 36 s = 54 s.
    assert.equal(t?.recommended, 54);
    const c = ttlCheck(t);
    assert.equal(c.level, 'warn');
    assert.equal(c.fix, 'pass --ttl 54 (or SessionOptions.ttl) or more');
  });

  it('nothing measured: no recommendation, skipped', () => {
    assert.equal(ttlRecommendation({ put: null, read: null, watch: null, renewal: null }, 2000), null);
    assert.equal(ttlCheck(null).level, 'skip');
  });
});

describe('runChecks: the report is every check in order', () => {
  const findings = (over: Partial<Findings>): Findings => ({
    prefix: 'locks/',
    grant: 'GRANT',
    samples: 5,
    memberSource: 'member-list',
    members: [up('m0', { isLeader: true, raftTerm: 3n })],
    versions: ['3.6.16'],
    leaderless: false,
    auth: { enabled: false, username: null, authenticated: false },
    roundTrips: { stats: { put: ms(1), read: ms(1), watch: ms(1) }, failed: null, catchUp: ms(1) },
    lease: { steps: { grant: 'ok', attach: 'ok', renew: 'ok', revoke: 'ok' }, failures: {}, renewal: ms(1) },
    dialTimeoutMs: 2000,
    cleanup: null,
    ...over,
  });

  it('a healthy cluster: ten lines, cleanup absent', () => {
    assert.deepEqual(
      runChecks(findings({})).map((c) => `${c.name}:${c.level}`),
      [
        'members:ok',
        'versions:ok',
        'leader:ok',
        'alarms:ok',
        'round trips:ok',
        'watch catch-up:info',
        'auth:info',
        'lease:ok',
        'ttl:info',
        'clock rate:skip',
      ],
    );
  });

  it('without a leader: what needs one is skipped, and no catch-up line; a failed cleanup comes last', () => {
    const f = findings({
      members: [member({ name: 'm0', hasLeader: false, version: '3.6.16', error: 'no leader' })],
      leaderless: true,
      auth: { enabled: null, username: null, authenticated: false },
      roundTrips: null,
      lease: null,
      cleanup: { scratchPrefix: 'locks/ab/', error: 'no answer' },
    });
    assert.deepEqual(
      runChecks(f).map((c) => `${c.name}:${c.level}`),
      [
        'members:ok',
        'versions:ok',
        'leader:fail',
        'alarms:ok',
        'round trips:skip',
        'auth:skip',
        'lease:skip',
        'ttl:skip',
        'clock rate:skip',
        'cleanup:warn',
      ],
    );
  });
});
