// doctor's pure checks, without etcd: the version check (mixed versions, end-of-life 3.4, older
// than 3.4), which versions check put permission at each lease renewal, and the leader check
// (members without a leader, members disagreeing on the leader). The CLI itself is tested against
// real etcd in doctor.test.ts.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { leaderCheck, renewalChecksPermission, versionCheck, type MemberReport } from '../src/cli/doctor.js';

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
    member({ name, id: name === 'm0' ? 'a1' : name === 'm1' ? 'b2' : 'c3', version: '3.6.16', leader, hasLeader: leader !== '0', isLeader: false, raftTerm: term });

  it('every member follows one leader: ok, naming it and its term', () => {
    const ms = [{ ...follower('m0', 'a1'), isLeader: true }, follower('m1', 'a1'), follower('m2', 'a1')];
    assert.deepEqual(leaderCheck(ms), { name: 'leader', level: 'ok', message: 'every member that answered follows m0 (a1), term 7' });
  });

  it('a member with no leader: a warning naming it', () => {
    const ms = [{ ...follower('m0', 'a1'), isLeader: true }, follower('m1', 'a1'), member({ name: 'm2', id: 'c3', hasLeader: false, error: 'no leader' })];
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
