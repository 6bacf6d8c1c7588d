// doctor's checks: each a pure function from what was found to one line of the report (name,
// level, message, fix), or to nothing when it does not apply. The report is CHECKS' outputs, in
// this order.
import { compareEtcdVersions, etcdVersionAtLeast } from '../../launcher/binary.js';
import { MIN_TTL } from '../options.js';
import { fmt, round } from './numbers.js';
import type { Check, Findings, LeaseFindings, MemberReport, RoundTripFindings, RoundTrips, Stats, TtlRecommendation } from './report.js';

/** TTL of the scratch lease: short, so that a doctor killed mid-way leaves nothing for long. */
export const SCRATCH_LEASE_TTL = 10;
/** etcd's default election timeout; the server does not tell its own, so the TTL estimate assumes it. */
const ASSUMED_ELECTION_TIMEOUT_MS = 1000;
/** The library's default session TTL (Session.create, and `lock`/`elect` --ttl). */
const DEFAULT_TTL = 30;
/** Catch-up waits above this (median) mean the watch waited for etcd's 100 ms sync loop. */
const CATCH_UP_THRESHOLD_MS = 10;
const NO_LEADER = 'not checked: the cluster has no leader, so every write, watch and lease call fails';

type CheckFn = (f: Findings) => Check | readonly Check[] | null;

/** Every check, in the order the report lists them. */
export const CHECKS: readonly CheckFn[] = [
  (f) => membersCheck(f.members),
  (f) => versionCheck(f.versions, answered(f.members)),
  (f) => leaderCheck(f.members),
  (f) => alarmsCheck(f.members),
  (f) =>
    f.leaderless
      ? { name: 'round trips', level: 'skip', message: NO_LEADER }
      : roundTripsCheck(f.roundTrips!, f.samples, f.prefix, f.grant),
  (f) => catchUpCheck(f.roundTrips),
  (f) => authCheck(f.auth, f.leaderless, f.versions),
  (f) => (f.leaderless ? { name: 'lease', level: 'skip', message: NO_LEADER } : leaseCheck(f.lease!, f)),
  (f) => ttlCheck(ttlRecommendation(measuredTrips(f), f.dialTimeoutMs)),
  () => ({ name: 'clock rate', level: 'skip', message: 'not checked: etcd exposes no clock reading that can be compared across members' }),
  (f) =>
    f.cleanup
      ? {
          name: 'cleanup',
          level: 'warn',
          message: `could not delete the scratch keys under ${f.cleanup.scratchPrefix}: ${f.cleanup.error}`,
          fix: `etcdctl del --prefix ${f.cleanup.scratchPrefix}`,
        }
      : null,
];

/** Every check's lines, in order. */
export function runChecks(f: Findings): Check[] {
  return CHECKS.flatMap((check) => check(f) ?? []);
}

/** The round trips measured, renewals included (null where not measured). */
export function measuredTrips(f: Findings): RoundTrips {
  return { put: null, read: null, watch: null, ...f.roundTrips?.stats, renewal: f.lease?.renewal ?? null };
}

/** The members that told their version. */
export function answered(members: MemberReport[]): MemberReport[] {
  return members.filter((m) => m.version !== null);
}

const nameOf = (m: MemberReport): string => m.name ?? m.id ?? m.endpoint;
const describe = (m: MemberReport): string => `${nameOf(m)} (${m.endpoint})`;

/** Every member answers: ok; some do not: warn while a quorum does, else fail. */
export function membersCheck(members: MemberReport[]): Check {
  const total = members.length;
  // A member that refused for want of a leader is up: the leader check reports it.
  const down = members.filter((m) => m.version === null && m.hasLeader === null);
  if (down.length === 0)
    return { name: 'members', level: 'ok', message: `${total} of ${total} ${total === 1 ? 'member answers' : 'members answer'}` };
  const up = total - down.length;
  const quorum = Math.floor(total / 2) + 1;
  const level = up >= quorum ? 'warn' : 'fail';
  return {
    name: 'members',
    level,
    message: `${up} of ${total} members answer; ${down.map((m) => `${describe(m)}: ${m.error}`).join('; ')}`,
    fix:
      level === 'warn'
        ? `the cluster still has a quorum (${quorum} of ${total}), but one more failure stops every lock: bring the member back`
        : `fewer than a quorum (${quorum} of ${total}) answer: locks cannot be taken until a majority of members is back`,
  };
}

/**
 * The versions check, from the distinct versions that answered (sorted oldest first) and the members
 * that told them: fail below 3.4 or when none did, warn on mixed versions and on end-of-life 3.4.
 */
export function versionCheck(versions: string[], answered: MemberReport[]): Check {
  const check = versionFindings(versions, answered);
  if (answered.some((m) => m.statusRefused))
    check.message += ' (read from /version: etcd refuses Status to users without the root role here)';
  return check;
}

function versionFindings(versions: string[], answered: MemberReport[]): Check {
  if (versions.length === 0) return { name: 'versions', level: 'fail', message: 'no member told its version' };
  const old = versions.filter((v) => !etcdVersionAtLeast(v, '3.4'));
  if (old.length > 0) {
    return {
      name: 'versions',
      level: 'fail',
      message: `etcd ${old.join(', ')} is older than 3.4, the oldest this library supports`,
      fix: 'upgrade etcd to 3.5 or later',
    };
  }
  const eol = versions.filter((v) => compareEtcdVersions(v, '3.5') < 0);
  const problems: string[] = [];
  const fixes: string[] = [];
  if (versions.length > 1) {
    const by = versions.map(
      (v) =>
        `${v} on ${answered
          .filter((m) => m.version === v)
          .map(nameOf)
          .join(', ')}`,
    );
    problems.push(`mixed versions: ${by.join('; ')}`);
    fixes.push('finish the rolling upgrade: behaviour (e.g. whether a renewal checks permissions) differs between versions');
  }
  if (eol.length > 0) {
    problems.push(`etcd ${eol.join(', ')}: the 3.4 line is end of life`);
    fixes.push('upgrade to etcd 3.5 or later');
  }
  if (problems.length === 0) return { name: 'versions', level: 'ok', message: `${versions[0]} on every member that answered` };
  return { name: 'versions', level: 'warn', message: problems.join('; '), fix: fixes.join('; ') };
}

/**
 * The leader check: fail when no member has a leader, warn when some have none or they disagree on
 * who it is, else ok naming the leader (when Status told it).
 */
export function leaderCheck(members: MemberReport[]): Check {
  const leaderless = members.filter((m) => m.hasLeader === false);
  const withLeader = members.filter((m) => m.hasLeader === true);
  // Who leads is known only from Status.
  const leaders = [...new Set(withLeader.flatMap((m) => (m.leader !== null && m.leader !== '0' ? [m.leader] : [])))];
  const leaderName = (id: string): string => {
    const m = members.find((x) => x.id === id);
    return m?.name ? `${m.name} (${id})` : id;
  };
  if (withLeader.length === 0) {
    return {
      name: 'leader',
      level: 'fail',
      message: 'no member has a Raft leader',
      fix: 'the cluster has lost its quorum or is electing: check that a majority of members run and reach each other',
    };
  }
  if (leaderless.length > 0 || leaders.length > 1) {
    const what = [
      ...(leaderless.length > 0 ? [`no leader on ${leaderless.map(nameOf).join(', ')}`] : []),
      ...(leaders.length > 1 ? [`members disagree on the leader: ${leaders.map(leaderName).join(' vs ')}`] : []),
    ];
    return {
      name: 'leader',
      level: 'warn',
      message: what.join('; '),
      fix: 'a member without a leader refuses calls (clients move to another): check its network to the others',
    };
  }
  if (leaders.length === 0)
    return {
      name: 'leader',
      level: 'ok',
      message: 'every member that answered has a leader (which one is known only to Status, refused to this user)',
    };
  const term = withLeader.find((m) => m.isLeader)?.raftTerm ?? withLeader.find((m) => m.raftTerm !== null)?.raftTerm;
  return {
    name: 'leader',
    level: 'ok',
    message: `every member that answered follows ${leaderName(leaders[0]!)}${term ? `, term ${term}` : ''}`,
  };
}

/** Alarms (NOSPACE, CORRUPT) fail; unknown where Status was refused. */
export function alarmsCheck(members: MemberReport[]): Check {
  const told = answered(members);
  const alarmed = told.filter((m) => m.alarms.length > 0);
  if (alarmed.length > 0) {
    return {
      name: 'alarms',
      level: 'fail',
      message: alarmed.map((m) => `${describe(m)}: ${m.alarms.join(', ')}`).join('; '),
      fix: 'a NOSPACE alarm refuses every write, so no lock can be taken: compact and defragment, then `etcdctl alarm disarm`; a CORRUPT alarm needs the member replaced',
    };
  }
  const refused = members.filter((m) => m.statusRefused);
  if (refused.length > 0 && refused.length === told.length) {
    return {
      name: 'alarms',
      level: 'skip',
      message: 'not checked: etcd refuses Status (which reports alarms) to users without the root role here',
    };
  }
  const unknown = refused.length > 0 ? ` (unknown on ${refused.map(nameOf).join(', ')}: Status needs the root role there)` : '';
  return { name: 'alarms', level: 'ok', message: `no member reports an alarm${unknown}` };
}

/** The put, read and watch round trips (median and worst), or the step that failed. */
export function roundTripsCheck(rt: RoundTripFindings, samples: number, prefix: string, grant: string): Check {
  if (rt.failed) {
    const { what, failure } = rt.failed;
    return {
      name: 'round trips',
      level: 'fail',
      message: `${what} failed: ${failure.message}`,
      ...(failure.denied ? { fix: `locks need read and write access under ${prefix}: ${grant}` } : {}),
    };
  }
  const { put, read, watch } = rt.stats as { put: Stats; read: Stats; watch: Stats };
  return {
    name: 'round trips',
    level: 'ok',
    message:
      `put ${fmt(put.medianMs)}, linearizable read ${fmt(read.medianMs)}, watch notification ${fmt(watch.medianMs)} ` +
      `(median of ${samples}; worst ${fmt(Math.max(put.maxMs, read.maxMs, watch.maxMs))})`,
  };
}

/** Whether a watch from the current revision waits for etcd's 100 ms catch-up loop; null when not measured. */
export function catchUpCheck(rt: RoundTripFindings | null): Check | null {
  const c = rt?.catchUp;
  if (!c) return null;
  if ('error' in c) return { name: 'watch catch-up', level: 'skip', message: `not measured: ${c.error}` };
  return {
    name: 'watch catch-up',
    level: 'info',
    message: paysCatchUp(c)
      ? `a watch from the current revision waited ${fmt(c.medianMs)} for its first event (median; worst ${fmt(c.maxMs)}): ` +
        "etcd's 100 ms catch-up loop; this library's waiters watch from the revision after their read and do not pay it"
      : `a watch from the current revision got its first event after ${fmt(c.medianMs)} (median; worst ${fmt(c.maxMs)}): no catch-up delay seen`,
  };
}

export function paysCatchUp(c: Stats): boolean {
  return c.medianMs >= CATCH_UP_THRESHOLD_MS;
}

/** Whether authentication is on, and as whom we checked. */
export function authCheck(auth: Findings['auth'], leaderless: boolean, versions: string[]): Check {
  if (auth.enabled === null)
    return { name: 'auth', level: 'skip', message: leaderless ? 'not checked: the cluster has no leader' : 'unknown' };
  if (!auth.enabled) return { name: 'auth', level: 'info', message: 'off: any client may take or delete any lock' };
  const as = auth.username ? `checked as user ${auth.username}` : auth.authenticated ? 'checked with --auth-jwt-token' : 'no user given';
  const renewal = versions.some(renewalChecksPermission)
    ? ' (this etcd checks put permission on every key attached to a lease at each renewal)'
    : '';
  return { name: 'auth', level: 'info', message: `on; ${as}${renewal}` };
}

/** Granting, attaching, renewing and revoking a lease: ok with what was done, else one line per step that failed. */
export function leaseCheck(lease: LeaseFindings, where: { prefix: string; grant: string; versions: string[] }): Check[] {
  const { steps, failures, renewal } = lease;
  const { prefix, grant } = where;
  const problems: Check[] = [];
  const fail = (message: string, fix?: string): void => {
    problems.push({ name: 'lease', level: 'fail', message, ...(fix ? { fix } : {}) });
  };
  if (failures.grant) fail(failures.grant.message);
  if (failures.attach)
    fail(failures.attach.message, failures.attach.denied ? `locks write their keys under ${prefix}: ${grant}` : undefined);
  if (failures.renew) {
    const checking = where.versions.filter(renewalChecksPermission);
    const why =
      checking.length > 0
        ? `etcd ${checking.join(', ')} renews a lease only for a user with put permission on every key attached to it`
        : 'the renewal was refused';
    fail(failures.renew.message, failures.renew.denied ? `${why}: ${grant}` : undefined);
  }
  if (failures.revoke) {
    fail(
      `revoking the lease: ${failures.revoke.message}; it expires by itself within ${SCRATCH_LEASE_TTL} s`,
      failures.revoke.denied ? `revoking a lease needs write permission on every key attached to it: ${grant}` : undefined,
    );
  }
  if (problems.length > 0) return problems;
  const done = [
    ...(steps.grant === 'ok' ? ['granted a lease'] : []),
    ...(steps.attach === 'ok' ? [`attached a key under ${prefix}`] : []),
    ...(steps.renew === 'ok' && renewal ? [`renewed it (${fmt(renewal.medianMs)})`] : []),
    ...(steps.revoke === 'ok' ? ['revoked it'] : []),
  ];
  return [{ name: 'lease', level: 'ok', message: done.join(', ') }];
}

/** etcd 3.4.42+, 3.5.28+, 3.6.9+ and 3.7 check put permission on every attached key at each renewal. */
export function renewalChecksPermission(version: string): boolean {
  const [major = 0, minor = 0] = version.split('.').map(Number);
  if (major !== 3) return major > 3;
  if (minor >= 7) return true;
  const since: Record<number, string> = { 4: '3.4.42', 5: '3.5.28', 6: '3.6.9' };
  const from = since[minor];
  return from !== undefined && etcdVersionAtLeast(version, from);
}

/**
 * The shortest TTL that rides out a leader election and a failover. A session renews every TTL/3
 * and reports loss `margin` = min(5 s, TTL/6) before the proven deadline, so a renewal (with its
 * retries) has TTL - TTL/3 - margin to succeed: TTL/2 up to 30 s, 2/3 TTL - 5 s above. It needs
 * two election timeouts (electing a new leader), a dial timeout (moving to another endpoint) and
 * three of the worst round trips measured (retries). Null when nothing was measured.
 */
export function ttlRecommendation(trips: RoundTrips, dialTimeoutMs: number): TtlRecommendation | null {
  const measured = [trips.put, trips.read, trips.renewal].filter((s): s is Stats => s !== null);
  if (measured.length === 0) return null;
  const worst = Math.max(...measured.map((s) => s.maxMs));
  const allowanceMs = 2 * ASSUMED_ELECTION_TIMEOUT_MS + dialTimeoutMs + 3 * worst;
  let ttl = Math.ceil((2 * allowanceMs) / 1000);
  if (ttl > 30) ttl = Math.ceil((1.5 * (allowanceMs + 5000)) / 1000);
  return {
    recommended: Math.max(MIN_TTL, ttl),
    worstRoundTripMs: round(worst),
    allowanceMs: round(allowanceMs),
    assumedElectionTimeoutMs: ASSUMED_ELECTION_TIMEOUT_MS,
    dialTimeoutMs,
  };
}

/** The TTL recommendation: a warning when the library's default is too short here. */
export function ttlCheck(t: TtlRecommendation | null): Check {
  if (!t) return { name: 'ttl', level: 'skip', message: 'no recommendation: the round trips could not be measured' };
  const tooShort = t.recommended > DEFAULT_TTL;
  return {
    name: 'ttl',
    level: tooShort ? 'warn' : 'info',
    message:
      `use a lease TTL of at least ${t.recommended} s (worst round trip ${fmt(t.worstRoundTripMs)}, ` +
      `dial timeout ${fmt(t.dialTimeoutMs)}, election timeout assumed ${fmt(t.assumedElectionTimeoutMs)})` +
      (tooShort ? `; the default ${DEFAULT_TTL} s is too short here` : `; the default ${DEFAULT_TTL} s is enough`),
    ...(tooShort ? { fix: `pass --ttl ${t.recommended} (or SessionOptions.ttl) or more` } : {}),
  };
}
