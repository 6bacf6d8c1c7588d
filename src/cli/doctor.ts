// `etcd-concurrency doctor`: is this cluster, and this user, ready for locks? Checks every member's
// version and leader, measures the round trips locks depend on, checks what the user may do with a
// lease under a prefix, and recommends a TTL. Everything it writes goes under a scratch prefix and
// is deleted (and its lease revoked) before it exits.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import * as http from 'node:http';
import * as https from 'node:https';
import {
  AuthenticationError,
  PermissionDeniedError,
  NoLeaderError,
  WriteOutcomeUnknownError,
  type Client,
  type ClusterMember,
  type ResponseHeader,
} from '../index.js';
import { parseEndpoint } from '../client/endpoints.js';
import { compareEtcdVersions, etcdVersionAtLeast } from '../launcher/binary.js';
import { COMMON, COMMON_HELP, connect, connectTo, envName, MIN_TTL, parse, parseGoBool, type ConnectionValues } from './options.js';
import { EXIT, print, printJson, table, UsageError } from './output.js';
import { Interrupts } from './signals.js';

/** doctor's own exit codes, beside EXIT.ok (ready), EXIT.error (could not check) and EXIT.usage. */
export const DOCTOR_EXIT = {
  ready: EXIT.ok,
  /** Ready for locks, with warnings (a member down, etcd 3.4, mixed versions, ...). */
  warnings: 5,
  /** Not ready: locks would fail or be unsafe (no leader, a permission missing, an alarm, ...). */
  notReady: 6,
} as const;

export const DEFAULT_PREFIX = 'etcd-concurrency-doctor/';
const DEFAULT_SAMPLES = 5;
const MAX_SAMPLES = 100;
/** TTL of the scratch lease: short, so that a doctor killed mid-way leaves nothing for long. */
const SCRATCH_LEASE_TTL = 10;
/** etcd's default election timeout; the server does not tell its own, so the TTL estimate assumes it. */
const ASSUMED_ELECTION_TIMEOUT_MS = 1000;
/** The library's default session TTL (Session.create, and `lock`/`elect` --ttl). */
const DEFAULT_TTL = 30;
/** Catch-up waits above this (median) mean the watch waited for etcd's 100 ms sync loop. */
const CATCH_UP_THRESHOLD_MS = 10;

export const DOCTOR_HELP = `Usage: etcd-concurrency doctor [options]

Checks whether the cluster and this user are ready for locks, and prints one line per check:
  members         every member answers (Status on each; members from MemberList)
  versions        each member's etcd version: a warning for end-of-life 3.4 and for mixed versions
  leader          each member has a Raft leader, and they agree on it
  alarms          no member reports an alarm (NOSPACE, CORRUPT)
  round trips     a put, a linearizable read and a watch notification (median and worst of --samples)
  watch catch-up  whether a watch from the current revision waits for etcd's 100 ms catch-up loop
  auth            whether authentication is on, and as whom we checked
  lease           whether this user can grant a lease, attach a key under --prefix, renew the
                  lease and revoke it (etcd 3.4.42+, 3.5.28+, 3.6.9+ and 3.7 need put permission on
                  every attached key to renew); a refusal says what to grant
  ttl             a lease TTL recommendation from the measured latencies
  clock rate      not checked: etcd exposes no portable clock reading

Keys are written under <prefix><random>/ only, and deleted with their lease before doctor exits.

Options:
  --prefix <prefix>       where to write scratch keys: use the prefix your locks live under, to
                          check this user's permissions there (default ${DEFAULT_PREFIX})
  --samples <n>           round trips measured per kind, 1 to ${MAX_SAMPLES} (default ${DEFAULT_SAMPLES})
  --json                  print the whole report as one JSON line

${COMMON_HELP}

Exit status: 0 ready; ${DOCTOR_EXIT.warnings} ready with warnings; ${DOCTOR_EXIT.notReady} not ready (a check failed);
1 could not check at all (etcd unreachable, TLS or authentication failure); 2 bad usage;
130/143 interrupted (the scratch keys and lease are removed first).

Examples:
  etcd-concurrency doctor --endpoints 10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379
  etcd-concurrency doctor --user app --prefix locks/ --json | jq .checks`;

export type Level = 'ok' | 'info' | 'warn' | 'fail' | 'skip';

export interface Check {
  name: string;
  level: Level;
  message: string;
  /** What to do about a warning or failure. */
  fix?: string;
}

export interface MemberReport {
  /** Member id in hex, as etcdctl prints it; null when the member never answered and MemberList was unavailable. */
  id: string | null;
  name: string | null;
  endpoint: string;
  version: string | null;
  /** The leader's id in hex as this member sees it; "0" means no leader; null: unknown. */
  leader: string | null;
  /** Whether the member has a Raft leader; null: unknown (it did not answer). */
  hasLeader: boolean | null;
  /**
   * etcd refused Status (it needs the root role on some versions): the version then comes from
   * the member's /version, and hasLeader from a read, while leader, raftTerm, dbSize and alarms
   * are unknown.
   */
  statusRefused: boolean;
  isLeader: boolean;
  isLearner: boolean;
  raftTerm: bigint | null;
  dbSize: bigint | null;
  /** Alarms and errors the member reports in its Status (e.g. NOSPACE). */
  alarms: string[];
  /** Why the member could not be checked. */
  error: string | null;
}

interface Stats {
  samples: number;
  medianMs: number;
  maxMs: number;
}

type StepResult = 'ok' | 'skipped' | { error: string };

export interface DoctorReport {
  status: 'ready' | 'warnings' | 'not-ready';
  exitCode: number;
  endpoints: string[];
  prefix: string;
  /** Where the member list came from: MemberList, or the endpoints given when it was not available. */
  memberSource: 'member-list' | 'endpoints';
  members: MemberReport[];
  versions: string[];
  auth: { enabled: boolean | null; user: string | null; renewalNeedsPutPermission: boolean };
  roundTrips: { put: Stats | null; read: Stats | null; watch: Stats | null; renewal: Stats | null };
  catchUp: (Stats & { paysDelay: boolean }) | null;
  lease: { grant: StepResult; attach: StepResult; renew: StepResult; revoke: StepResult };
  ttl: { recommended: number; worstRoundTripMs: number; allowanceMs: number; assumedElectionTimeoutMs: number; dialTimeoutMs: number } | null;
  /** Always null: etcd exposes no portable clock reading (see docs/cli.md). */
  clockRate: null;
  checks: Check[];
}

export async function doctorCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, {
    ...COMMON,
    json: { type: 'boolean' },
    prefix: { type: 'string' },
    samples: { type: 'string' },
  });
  if (values.help) {
    print(DOCTOR_HELP);
    return EXIT.ok;
  }
  if (positionals.length > 0) throw new UsageError(`doctor takes no arguments, got "${positionals[0]}"`);
  const prefix = values.prefix ?? DEFAULT_PREFIX;
  if (prefix === '') throw new UsageError('--prefix must not be empty: doctor writes its scratch keys under it');
  const samples = samplesArg(values.samples);
  const user = setting(values, 'user');
  // With --auth-jwt-token (which wins over --user, as in etcdctl) the user name is in the token.
  const jwt = setting(values, 'auth-jwt-token') !== undefined;
  const username = user && !jwt ? user.split(':')[0]! : null;

  const interrupts = new Interrupts();
  const client = await connectTo(values);
  try {
    const report = await diagnose(client, {
      prefix,
      samples,
      username,
      authenticated: username !== null || jwt,
      signal: interrupts.signal,
      memberClient: (endpoint) => connect({ ...values, endpoints: endpoint }),
      tls: tlsFiles(values),
    });
    if (values.json) printJson(report);
    else for (const line of render(report)) print(line);
    return report.exitCode;
  } finally {
    interrupts.dispose();
    await client.close();
  }
}

function samplesArg(raw: string | undefined): number {
  if (raw === undefined) return DEFAULT_SAMPLES;
  const n = /^\d+$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isSafeInteger(n) || n < 1 || n > MAX_SAMPLES) throw new UsageError(`--samples must be a whole number from 1 to ${MAX_SAMPLES}, got "${raw}"`);
  return n;
}

interface TlsFiles {
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
}

/** A connection flag's value, else its ETCDCTL_* variable's (empty counts as unset), as connect() reads it. */
function setting(values: ConnectionValues, flag: keyof ConnectionValues): string | undefined {
  const v = values[flag];
  return v !== undefined ? String(v) : process.env[envName(flag)] || undefined;
}

/**
 * The TLS material connect() uses, for the /version fallback: the files of --cacert, --cert and
 * --key; {} (the system's CAs) for --insecure-transport=false; undefined for plain HTTP.
 */
function tlsFiles(values: ConnectionValues): TlsFiles | undefined {
  const files = { ca: setting(values, 'cacert'), cert: setting(values, 'cert'), key: setting(values, 'key') };
  if (files.ca === undefined && files.cert === undefined && files.key === undefined) {
    const insecure = setting(values, 'insecure-transport');
    return insecure !== undefined && !parseGoBool(insecure, '--insecure-transport') ? {} : undefined;
  }
  // connect() has read them already, so they are readable.
  return Object.fromEntries(Object.entries(files).flatMap(([k, f]) => (f === undefined ? [] : [[k, readFileSync(f)]])));
}

interface DiagnoseOptions {
  prefix: string;
  samples: number;
  username: string | null;
  /** Whether we authenticate (--user or --auth-jwt-token). */
  authenticated: boolean;
  signal: AbortSignal;
  /**
   * A Client on one endpoint, with the same TLS and auth options: for a member that MemberList
   * advertises at a URL that is not among the endpoints given (those are asked through the main
   * client, pinned to each in turn).
   */
  memberClient: (endpoint: string) => Client;
  /** The TLS material the options name, for the /version fallback. */
  tls: TlsFiles | undefined;
}

/** Runs every check. Throws (exit 1) only when the cluster cannot be checked at all. */
async function diagnose(client: Client, o: DiagnoseOptions): Promise<DoctorReport> {
  const { signal } = o;
  const checks: Check[] = [];
  // The first call says whether we can talk to etcd at all: an unreachable endpoint, a TLS or an
  // authentication failure ends here with the CLI's usual one-line message (exit 1). A cluster
  // without a leader is reported instead: every member is asked directly, and what needs a leader
  // (writes, watches, leases) is skipped.
  let leaderless = false;
  try {
    await client.status({ signal });
  } catch (err) {
    // Refused for want of the root role (some versions): etcd answered, and authenticated us.
    if (err instanceof PermissionDeniedError) {
      // nothing to do: each member is asked again below, with fallbacks
    } else if (err instanceof NoLeaderError) {
      leaderless = true;
    } else {
      throw err;
    }
  }

  // ------------------------------------------------------------------------------- members
  const listed = leaderless ? undefined : await memberList(client, signal);
  const members = await memberStatuses(client, listed, o);
  const answered = members.filter((m) => m.version !== null);
  const total = members.length;
  // A member that refused for want of a leader is up: the leader check reports it.
  const down = members.filter((m) => m.version === null && m.hasLeader === null);
  const up = total - down.length;
  const describe = (m: MemberReport): string => `${m.name ?? m.id ?? m.endpoint} (${m.endpoint})`;
  if (down.length === 0) {
    checks.push({ name: 'members', level: 'ok', message: `${total} of ${total} ${total === 1 ? 'member answers' : 'members answer'}` });
  } else {
    const quorum = Math.floor(total / 2) + 1;
    const level: Level = up >= quorum ? 'warn' : 'fail';
    checks.push({
      name: 'members',
      level,
      message: `${up} of ${total} members answer; ${down.map((m) => `${describe(m)}: ${m.error}`).join('; ')}`,
      fix:
        level === 'warn'
          ? `the cluster still has a quorum (${quorum} of ${total}), but one more failure stops every lock: bring the member back`
          : `fewer than a quorum (${quorum} of ${total}) answer: locks cannot be taken until a majority of members is back`,
    });
  }

  // ------------------------------------------------------------------------------- versions
  const versions = [...new Set(answered.map((m) => m.version!))].sort(compareEtcdVersions);
  const versionCheckResult = versionCheck(versions, answered);
  if (answered.some((m) => m.statusRefused)) versionCheckResult.message += ' (read from /version: etcd refuses Status to users without the root role here)';
  checks.push(versionCheckResult);

  // ------------------------------------------------------------------------------- leader
  checks.push(leaderCheck(members));

  // ------------------------------------------------------------------------------- alarms
  const alarmed = answered.filter((m) => m.alarms.length > 0);
  const refused = members.filter((m) => m.statusRefused);
  const unknownAlarms = refused.length > 0 ? ` (unknown on ${refused.map((m) => m.name ?? m.id ?? m.endpoint).join(', ')}: Status needs the root role there)` : '';
  checks.push(
    alarmed.length === 0
      ? refused.length === answered.length && refused.length > 0
        ? { name: 'alarms', level: 'skip', message: 'not checked: etcd refuses Status (which reports alarms) to users without the root role here' }
        : { name: 'alarms', level: 'ok', message: `no member reports an alarm${unknownAlarms}` }
      : {
          name: 'alarms',
          level: 'fail',
          message: alarmed.map((m) => `${describe(m)}: ${m.alarms.join(', ')}`).join('; '),
          fix: 'a NOSPACE alarm refuses every write, so no lock can be taken: compact and defragment, then `etcdctl alarm disarm`; a CORRUPT alarm needs the member replaced',
        },
  );

  // ------------------------------------------------------------------------------- auth
  const auth = leaderless ? null : await authStatus(client, o.authenticated, signal);

  // ------------------------------------------------------------------------------- round trips, lease
  const scratch: Scratch = { prefix: `${o.prefix}${randomBytes(4).toString('hex')}/`, wrote: false };
  const renewalNeedsPutPermission = versions.some(renewalChecksPermission);
  const report: DoctorReport = {
    status: 'ready',
    exitCode: DOCTOR_EXIT.ready,
    endpoints: client.endpoints,
    prefix: o.prefix,
    memberSource: listed ? 'member-list' : 'endpoints',
    members,
    versions,
    auth: { enabled: auth, user: o.username, renewalNeedsPutPermission },
    roundTrips: { put: null, read: null, watch: null, renewal: null },
    catchUp: null,
    lease: { grant: 'skipped', attach: 'skipped', renew: 'skipped', revoke: 'skipped' },
    ttl: null,
    clockRate: null,
    checks,
  };
  const grant = `etcdctl role grant-permission <role of ${o.username ?? 'the user'}> --prefix=true readwrite ${o.prefix}`;
  if (leaderless) {
    const why = 'not checked: the cluster has no leader, so every write, watch and lease call fails';
    checks.push({ name: 'round trips', level: 'skip', message: why }, { name: 'lease', level: 'skip', message: why });
  } else {
    try {
      await roundTrips(client, scratch, o, report, grant);
      await leaseChecks(client, scratch, o, report, grant);
    } finally {
      // Everything we wrote is under the scratch prefix. Not under the interrupt signal: an
      // interrupted doctor still cleans up (a second Ctrl-C exits at once).
      if (scratch.wrote) {
        await client.delete(scratch.prefix, { prefix: true }).catch((err: unknown) => {
          checks.push({ name: 'cleanup', level: 'warn', message: `could not delete the scratch keys under ${scratch.prefix}: ${message(err)}`, fix: `etcdctl del --prefix ${scratch.prefix}` });
        });
      }
    }
  }
  signal.throwIfAborted();
  checks.push(
    auth === null
      ? { name: 'auth', level: 'skip', message: leaderless ? 'not checked: the cluster has no leader' : 'unknown' }
      : {
          name: 'auth',
          level: 'info',
          message: auth
            ? `on; ${o.username ? `checked as user ${o.username}` : o.authenticated ? 'checked with --auth-jwt-token' : 'no user given'}${renewalNeedsPutPermission ? ' (this etcd checks put permission on every key attached to a lease at each renewal)' : ''}`
            : 'off: any client may take or delete any lock',
        },
  );

  // ------------------------------------------------------------------------------- ttl, clock
  report.ttl = ttlRecommendation(report, client.dialTimeoutMs);
  if (report.ttl) {
    const t = report.ttl;
    const tooShort = t.recommended > DEFAULT_TTL;
    checks.push({
      name: 'ttl',
      level: tooShort ? 'warn' : 'info',
      message:
        `use a lease TTL of at least ${t.recommended} s (worst round trip ${fmt(t.worstRoundTripMs)}, ` +
        `dial timeout ${fmt(t.dialTimeoutMs)}, election timeout assumed ${fmt(t.assumedElectionTimeoutMs)})` +
        (tooShort ? `; the default ${DEFAULT_TTL} s is too short here` : `; the default ${DEFAULT_TTL} s is enough`),
      ...(tooShort ? { fix: `pass --ttl ${t.recommended} (or SessionOptions.ttl) or more` } : {}),
    });
  } else {
    checks.push({ name: 'ttl', level: 'skip', message: 'no recommendation: the round trips could not be measured' });
  }
  checks.push({ name: 'clock rate', level: 'skip', message: 'not checked: etcd exposes no clock reading that can be compared across members' });

  const worst = checks.some((c) => c.level === 'fail') ? 'not-ready' : checks.some((c) => c.level === 'warn') ? 'warnings' : 'ready';
  report.status = worst;
  report.exitCode = worst === 'ready' ? DOCTOR_EXIT.ready : worst === 'warnings' ? DOCTOR_EXIT.warnings : DOCTOR_EXIT.notReady;
  // Checks in a fixed order, whatever order they were found in.
  const ORDER = ['members', 'versions', 'leader', 'alarms', 'round trips', 'watch catch-up', 'auth', 'lease', 'ttl', 'clock rate', 'cleanup'];
  checks.sort((a, b) => ORDER.indexOf(a.name) - ORDER.indexOf(b.name));
  return report;
}

// --------------------------------------------------------------------------------- members

/** The members from MemberList, or undefined when it is not available (then the endpoints given are checked). */
async function memberList(client: Client, signal: AbortSignal): Promise<ClusterMember[] | undefined> {
  try {
    return await client.memberList({ signal });
  } catch (err) {
    if (err instanceof AuthenticationError || signal.aborted) throw err;
    return undefined;
  }
}

/**
 * Status from every member: first through the endpoints given (which are reachable from here even
 * when the URLs members advertise are not), then for each listed member not seen that way, through
 * its advertised client URLs.
 */
async function memberStatuses(client: Client, listed: ClusterMember[] | undefined, o: DiagnoseOptions): Promise<MemberReport[]> {
  const byEndpoint = await Promise.all(client.endpoints.map((e) => memberStatus(`${client.secure ? 'https://' : ''}${e}`, o, { client, endpoint: e })));
  const targetOf = (url: string): string | undefined => {
    try {
      return parseEndpoint(url).target;
    } catch {
      return undefined;
    }
  };
  const out: MemberReport[] = [];
  const seen = new Set<string>();
  for (const r of byEndpoint) {
    // An endpoint that did not answer is still a member we know, when it is one a member advertises.
    const m = listed?.find((l) => (r.id !== null ? l.id.toString(16) === r.id : l.clientUrls.some((u) => targetOf(u) === targetOf(r.endpoint))));
    if (m) {
      r.id = m.id.toString(16);
      r.name = m.name || null;
      r.isLearner ||= m.isLearner;
    }
    // Two endpoints of one member (e.g. a name and an address) count once.
    if (r.id !== null && seen.has(r.id)) continue;
    if (r.id !== null) seen.add(r.id);
    out.push(r);
  }
  if (!listed) return out;
  const rest = listed.filter((m) => !seen.has(m.id.toString(16)));
  const more = await Promise.all(
    rest.map(async (m): Promise<MemberReport> => {
      const base = { id: m.id.toString(16), name: m.name || null, isLearner: m.isLearner };
      if (m.clientUrls.length === 0) return { ...emptyMember('-'), ...base, error: 'not started yet (it advertises no client URL)' };
      let last: MemberReport | undefined;
      for (const url of m.clientUrls) {
        last = await memberStatus(url, o);
        if (last.version !== null) break;
      }
      return { ...last!, ...base };
    }),
  );
  // In the cluster's own order.
  const index = (r: MemberReport): number => {
    const i = listed.findIndex((l) => l.id.toString(16) === r.id);
    return i < 0 ? listed.length : i;
  };
  return [...out, ...more].sort((a, b) => index(a) - index(b));
}

function emptyMember(endpoint: string): MemberReport {
  return { id: null, name: null, endpoint, version: null, leader: null, hasLeader: null, statusRefused: false, isLeader: false, isLearner: false, raftTerm: null, dbSize: null, alarms: [], error: null };
}

/**
 * One member's Status, with no failover to another member: through `via`, the main client pinned
 * to one of its endpoints, or else through a Client on that endpoint alone (closed after).
 */
async function memberStatus(endpoint: string, o: DiagnoseOptions, via?: { client: Client; endpoint: string }): Promise<MemberReport> {
  let target = endpoint;
  try {
    target = parseEndpoint(endpoint).target;
  } catch {
    // shown as advertised
  }
  const r = emptyMember(target);
  const c = via?.client ?? o.memberClient(endpoint);
  const call = { signal: o.signal, timeoutMs: c.callTimeoutMs, ...(via ? { endpoint: via.endpoint } : {}) };
  const failed = (err: unknown): void => {
    if (o.signal.aborted) throw o.signal.reason;
    if (err instanceof AuthenticationError) throw err;
    // A member cut off from the leader refuses calls that carry `hasleader`, as every call of this
    // library does: it answers, but has no leader.
    if (err instanceof NoLeaderError) {
      r.hasLeader = false;
      r.error = 'no leader: the member answers, but has no Raft leader';
    } else {
      r.error = reason(err);
    }
  };
  try {
    const s = await c.status(call);
    const id = s.header.memberId;
    const leader = s.leader;
    r.id = id.toString(16);
    r.version = s.version;
    r.leader = leader.toString(16);
    r.hasLeader = leader !== 0n;
    r.isLeader = leader !== 0n && leader === id;
    r.isLearner = s.isLearner;
    r.raftTerm = s.raftTerm;
    r.dbSize = s.dbSize;
    r.alarms = s.alarms;
  } catch (err) {
    if (!(err instanceof PermissionDeniedError)) {
      failed(err);
      // A member without a leader still tells its version over HTTP.
      if (r.hasLeader === false) r.version = await httpVersion(endpoint, o.tls, call).catch(() => null);
      return r;
    }
    // Status needs the root role on some versions (3.6.0 on, 3.5.28 on, until etcd relaxed it
    // again): the version from the member's /version instead, and its leader from a read that
    // carries `hasleader`. Any answer but "no leader" proves it has one, a refusal included: etcd
    // checks the leader before the permission.
    r.statusRefused = true;
    try {
      await c.get(`${o.prefix}leader-probe`, call);
      r.hasLeader = true;
    } catch (e) {
      if (e instanceof PermissionDeniedError) r.hasLeader = true;
      else failed(e);
    }
    if (r.hasLeader === false || r.error === null) {
      try {
        r.version = await httpVersion(endpoint, o.tls, call);
      } catch (e) {
        if (o.signal.aborted) throw o.signal.reason;
        r.error ??= `etcd refused Status (it needs the root role here), and ${message(e)}`;
      }
    }
  } finally {
    if (!via) await c.close();
  }
  return r;
}

/** The server version from a member's `/version` (served on its client port without auth). */
function httpVersion(endpoint: string, tls: TlsFiles | undefined, options: { signal: AbortSignal; timeoutMs: number }): Promise<string> {
  const secure = /^https:\/\//i.test(endpoint) || tls !== undefined;
  const url = new URL(`${secure ? 'https' : 'http'}://${endpoint.replace(/^[a-z]+:\/\//i, '')}`);
  url.pathname = '/version';
  return new Promise((resolve, reject) => {
    const req = (secure ? https : http).get(
      url,
      { signal: options.signal, timeout: options.timeoutMs, ...(secure && tls ? { ca: tls.ca, cert: tls.cert, key: tls.key } : {}) },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d));
        res.on('end', () => {
          try {
            const v = (JSON.parse(body) as { etcdserver?: unknown }).etcdserver;
            if (typeof v === 'string' && v !== '') return resolve(v);
          } catch {
            // not JSON: reported below
          }
          reject(new Error(`${url.href} did not say the version (HTTP ${res.statusCode})`));
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error(`${url.href}: no answer within ${options.timeoutMs} ms`)));
    req.on('error', (err) => reject(new Error(`reading ${url.href} failed: ${err.message}`)));
  });
}

/** The part of a connection error that says why, without the advice meant for a whole command. */
function reason(err: unknown): string {
  const m = message(err);
  const why = /could not connect to etcd at [^(]*\((.*)\); check that etcd runs there/.exec(m);
  return why ? `unreachable: ${why[1]}` : m;
}

/**
 * The versions check, from the distinct versions that answered (sorted oldest first) and the members
 * that told them: fail below 3.4 or when none did, warn on mixed versions and on end-of-life 3.4.
 * Exported for its unit tests.
 */
export function versionCheck(versions: string[], answered: MemberReport[]): Check {
  if (versions.length === 0) return { name: 'versions', level: 'fail', message: 'no member told its version' };
  const old = versions.filter((v) => !etcdVersionAtLeast(v, '3.4'));
  if (old.length > 0) {
    return { name: 'versions', level: 'fail', message: `etcd ${old.join(', ')} is older than 3.4, the oldest this library supports`, fix: 'upgrade etcd to 3.5 or later' };
  }
  const eol = versions.filter((v) => compareEtcdVersions(v, '3.5') < 0);
  const problems: string[] = [];
  const fixes: string[] = [];
  if (versions.length > 1) {
    const by = versions.map((v) => `${v} on ${answered.filter((m) => m.version === v).map((m) => m.name ?? m.id ?? m.endpoint).join(', ')}`);
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
 * who it is, else ok naming the leader (when Status told it). Exported for its unit tests.
 */
export function leaderCheck(members: MemberReport[]): Check {
  const leaderless = members.filter((m) => m.hasLeader === false);
  const withLeader = members.filter((m) => m.hasLeader === true);
  // Who leads is known only from Status.
  const leaders = [...new Set(withLeader.flatMap((m) => (m.leader !== null && m.leader !== '0' ? [m.leader] : [])))];
  const nameOf = (id: string): string => {
    const m = members.find((x) => x.id === id);
    return m?.name ? `${m.name} (${id})` : id;
  };
  if (withLeader.length === 0) {
    return { name: 'leader', level: 'fail', message: 'no member has a Raft leader', fix: 'the cluster has lost its quorum or is electing: check that a majority of members run and reach each other' };
  }
  if (leaderless.length > 0 || leaders.length > 1) {
    const what = [
      ...(leaderless.length > 0 ? [`no leader on ${leaderless.map((m) => m.name ?? m.id ?? m.endpoint).join(', ')}`] : []),
      ...(leaders.length > 1 ? [`members disagree on the leader: ${leaders.map(nameOf).join(' vs ')}`] : []),
    ];
    return { name: 'leader', level: 'warn', message: what.join('; '), fix: 'a member without a leader refuses calls (clients move to another): check its network to the others' };
  }
  if (leaders.length === 0) return { name: 'leader', level: 'ok', message: 'every member that answered has a leader (which one is known only to Status, refused to this user)' };
  const term = withLeader.find((m) => m.isLeader)?.raftTerm ?? withLeader.find((m) => m.raftTerm !== null)?.raftTerm;
  return { name: 'leader', level: 'ok', message: `every member that answered follows ${nameOf(leaders[0]!)}${term ? `, term ${term}` : ''}` };
}

/** Whether etcd is on: AuthStatus on 3.5+, else what the connection showed (null: unknown). */
async function authStatus(client: Client, authenticated: boolean, signal: AbortSignal): Promise<boolean | null> {
  try {
    return (await client.authStatus({ signal })).enabled;
  } catch (err) {
    if (err instanceof AuthenticationError || signal.aborted) throw err;
    // 3.4: no AuthStatus. With a user, authenticating succeeded, which etcd refuses when auth is
    // off; without one, our reads and writes (next) fail with an AuthenticationError if it is on.
    return authenticated;
  }
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

// --------------------------------------------------------------------------------- round trips

/** The scratch prefix, and whether anything may have been written under it (then cleanup matters). */
interface Scratch {
  prefix: string;
  wrote: boolean;
}

/** A put under the scratch prefix that remembers whether it may have written. */
async function scratchPut(client: Client, scratch: Scratch, key: string, value: string, options: { signal: AbortSignal; lease?: bigint }): Promise<ResponseHeader> {
  try {
    const h = await client.put(key, value, options);
    scratch.wrote = true;
    return h;
  } catch (err) {
    if (err instanceof WriteOutcomeUnknownError) scratch.wrote = true;
    throw err;
  }
}

async function roundTrips(client: Client, scratch: Scratch, o: DiagnoseOptions, report: DoctorReport, grant: string): Promise<void> {
  const { signal, samples } = o;
  const key = `${scratch.prefix}round-trip`;
  const call = { signal };
  // Watches have no deadline of their own: each step waits at most the client's call deadline.
  const withTimeout = <T>(p: Promise<T>, what: string): Promise<T> => timeout(p, what, client.callTimeoutMs);
  const failed = (what: string, err: unknown): void => {
    if (signal.aborted) throw signal.reason;
    if (err instanceof AuthenticationError) throw err;
    const denied = err instanceof PermissionDeniedError;
    report.checks.push({
      name: 'round trips',
      level: 'fail',
      message: `${what} failed: ${message(err)}`,
      ...(denied ? { fix: `locks need read and write access under ${o.prefix}: ${grant}` } : {}),
    });
  };
  // One put first, not measured: it proves we may write there, and warms the connection.
  try {
    await scratchPut(client, scratch, key, 'doctor', call);
  } catch (err) {
    return failed(`writing ${key}`, err);
  }
  const put: number[] = [];
  const read: number[] = [];
  try {
    for (let i = 0; i < samples; i++) put.push(await timed(() => scratchPut(client, scratch, key, `put ${i}`, call)));
  } catch (err) {
    return failed('a put', err);
  }
  try {
    for (let i = 0; i < samples; i++) read.push(await timed(() => client.get(key, call)));
  } catch (err) {
    return failed(`a linearizable read of ${key}`, err);
  }
  report.roundTrips.put = stats(put);
  report.roundTrips.read = stats(read);

  // A watch notification: from sending a put to the event arriving on a watch created before it.
  const notify: number[] = [];
  try {
    const ac = new AbortController();
    const w = client.watch(key, { signal: AbortSignal.any([signal, ac.signal]) });
    try {
      await withTimeout(w.created, `creating a watch on ${key}`);
      const events = w[Symbol.asyncIterator]();
      for (let i = 0; i < samples; i++) {
        const t0 = performance.now();
        const putting = scratchPut(client, scratch, key, `watch ${i}`, call);
        const next = await withTimeout(events.next(), `a watch notification on ${key}`);
        notify.push(performance.now() - t0);
        await putting;
        if (next.done) throw new Error('the watch ended');
      }
    } finally {
      ac.abort();
    }
  } catch (err) {
    return failed('a watch notification', err);
  }
  report.roundTrips.watch = stats(notify);
  const r = report.roundTrips;
  report.checks.push({
    name: 'round trips',
    level: 'ok',
    message:
      `put ${fmt(r.put!.medianMs)}, linearizable read ${fmt(r.read!.medianMs)}, watch notification ${fmt(r.watch!.medianMs)} ` +
      `(median of ${samples}; worst ${fmt(Math.max(r.put!.maxMs, r.read!.maxMs, r.watch!.maxMs))})`,
  });

  // Catch-up: a watch that starts at a revision etcd already has (here: our last put's) is
  // "unsynced" and gets its events from a loop that runs every 100 ms, not at once. Measured from
  // the watch's "created" answer (sent at once either way) to its first event.
  const catchUp: number[] = [];
  try {
    for (let i = 0; i < samples; i++) {
      const rev = (await scratchPut(client, scratch, key, `catch-up ${i}`, call)).revision;
      const ac = new AbortController();
      const w = client.watch(key, { startRevision: rev, signal: AbortSignal.any([signal, ac.signal]) });
      try {
        await withTimeout(w.created, `creating a watch on ${key}`);
        const t0 = performance.now();
        const next = await withTimeout(w[Symbol.asyncIterator]().next(), `the catch-up of a watch on ${key}`);
        if (next.done) throw new Error('the watch ended');
        catchUp.push(performance.now() - t0);
      } finally {
        ac.abort();
      }
    }
  } catch (err) {
    if (signal.aborted) throw signal.reason;
    report.checks.push({ name: 'watch catch-up', level: 'skip', message: `not measured: ${message(err)}` });
    return;
  }
  const c = stats(catchUp);
  const pays = c.medianMs >= CATCH_UP_THRESHOLD_MS;
  report.catchUp = { ...c, paysDelay: pays };
  report.checks.push({
    name: 'watch catch-up',
    level: 'info',
    message: pays
      ? `a watch from the current revision waited ${fmt(c.medianMs)} for its first event (median; worst ${fmt(c.maxMs)}): ` +
        "etcd's 100 ms catch-up loop; this library's waiters watch from the revision after their read and do not pay it"
      : `a watch from the current revision got its first event after ${fmt(c.medianMs)} (median; worst ${fmt(c.maxMs)}): no catch-up delay seen`,
  });
}

// --------------------------------------------------------------------------------- lease

async function leaseChecks(client: Client, scratch: Scratch, o: DiagnoseOptions, report: DoctorReport, grant: string): Promise<void> {
  const { signal } = o;
  const key = `${scratch.prefix}lease`;
  const call = { signal };
  const lease = report.lease;
  const versions = report.versions.filter(renewalChecksPermission);
  const problems: Check[] = [];
  const fail = (step: keyof typeof lease, what: string, err: unknown, fix?: string): void => {
    if (signal.aborted) throw signal.reason;
    if (err instanceof AuthenticationError) throw err;
    const m = message(err);
    lease[step] = { error: m };
    problems.push({ name: 'lease', level: 'fail', message: m.startsWith(what) ? m : `${what}: ${m}`, ...(fix ? { fix } : {}) });
  };
  const done: string[] = [];
  // Our own id, so that a grant whose answer is lost can be retried and revoked.
  const id = (randomBytes(8).readBigUInt64BE() & 0x7fff_ffff_ffff_ffffn) || 1n;
  let granted = false;
  try {
    await client.leaseGrant(SCRATCH_LEASE_TTL, { ...call, id });
    granted = true;
    lease.grant = 'ok';
    done.push('granted a lease');
  } catch (err) {
    fail('grant', 'granting a lease', err);
  }
  try {
    if (granted) {
      try {
        await scratchPut(client, scratch, key, 'doctor', { ...call, lease: id });
        lease.attach = 'ok';
        done.push(`attached a key under ${o.prefix}`);
      } catch (err) {
        fail('attach', `attaching ${key} to the lease`, err, err instanceof PermissionDeniedError ? `locks write their keys under ${o.prefix}: ${grant}` : undefined);
      }
    }
    if (lease.attach === 'ok') {
      try {
        const times: number[] = [];
        // Each on a stream of its own, so that a refusal is seen as the error it is (the shared
        // keepalive stream of a Session retries refusals quietly until the lease runs out).
        for (let i = 0; i < o.samples; i++) times.push(await timed(() => client.leaseKeepAliveOnce(id, call)));
        report.roundTrips.renewal = stats(times);
        lease.renew = 'ok';
        done.push(`renewed it (${fmt(report.roundTrips.renewal.medianMs)})`);
      } catch (err) {
        const needsPut = versions.length > 0 ? `etcd ${versions.join(', ')} renews a lease only for a user with put permission on every key attached to it` : undefined;
        fail(
          'renew',
          'renewing a lease',
          err,
          err instanceof PermissionDeniedError ? `${needsPut ?? 'the renewal was refused'}: ${grant}` : undefined,
        );
      }
    }
  } finally {
    if (granted) {
      try {
        await client.leaseRevoke(id);
        lease.revoke = 'ok';
        done.push('revoked it');
      } catch (err) {
        lease.revoke = { error: message(err) };
        problems.push({
          name: 'lease',
          level: 'fail',
          message: `revoking the lease: ${message(err)}; it expires by itself within ${SCRATCH_LEASE_TTL} s`,
          ...(err instanceof PermissionDeniedError ? { fix: `revoking a lease needs write permission on every key attached to it: ${grant}` } : {}),
        });
      }
    }
  }
  if (problems.length > 0) report.checks.push(...problems);
  else report.checks.push({ name: 'lease', level: 'ok', message: done.join(', ') });
}

// --------------------------------------------------------------------------------- ttl

/**
 * The shortest TTL that rides out a leader election and a failover. A session renews every TTL/3
 * and reports loss `margin` = min(5 s, TTL/6) before the proven deadline, so a renewal (with its
 * retries) has TTL - TTL/3 - margin to succeed: TTL/2 up to 30 s, 2/3 TTL - 5 s above. It needs
 * two election timeouts (electing a new leader), a dial timeout (moving to another endpoint) and
 * three of the worst round trips measured (retries).
 */
function ttlRecommendation(report: DoctorReport, dialTimeoutMs: number): DoctorReport['ttl'] {
  const r = report.roundTrips;
  const measured = [r.put, r.read, r.renewal].filter((s): s is Stats => s !== null);
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

// --------------------------------------------------------------------------------- helpers

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

/** `p`, or an error naming `what` after `ms`. */
function timeout<T>(p: Promise<T>, what: string, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([p, expired]).finally(() => clearTimeout(timer));
}

function stats(ms: number[]): Stats {
  const sorted = [...ms].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  const median = sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
  return { samples: ms.length, medianMs: round(median), maxMs: round(sorted[sorted.length - 1]!) };
}

function round(ms: number): number {
  return Math.round(ms * 100) / 100;
}

function fmt(ms: number): string {
  return ms >= 1000 ? `${(ms / 1000).toFixed(ms >= 10_000 ? 0 : 1)} s` : `${ms >= 10 ? Math.round(ms) : ms.toFixed(1)} ms`;
}

function message(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).replace(/\s*\n\s*/g, ' ');
}

function bytes(n: bigint): string {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let v = Number(n);
  let u = 0;
  while (v >= 1000 && u < units.length - 1) {
    v /= 1000;
    u++;
  }
  return `${u === 0 ? v : v.toFixed(1)} ${units[u]}`;
}

function render(r: DoctorReport): string[] {
  const lines: string[] = [];
  lines.push(`etcd-concurrency doctor: ${r.members.length} member${r.members.length === 1 ? '' : 's'}${r.memberSource === 'endpoints' ? ' (from --endpoints; MemberList unavailable)' : ''}, scratch keys under ${r.prefix}`);
  const state = (m: MemberReport): string => {
    if (m.error !== null) return m.error;
    if (m.statusRefused) return m.hasLeader ? 'has a leader (Status refused: needs the root role)' : 'no leader';
    const role = m.leader === '0' ? 'no leader' : m.isLeader ? 'leader' : m.isLearner ? 'learner' : 'follower';
    return m.alarms.length > 0 ? `${role}, alarm: ${m.alarms.join(', ')}` : role;
  };
  lines.push(
    ...table([
      ['MEMBER', 'ID', 'ENDPOINT', 'VERSION', 'TERM', 'DB', 'STATE'],
      ...r.members.map((m) => [m.name ?? '-', m.id ?? '-', m.endpoint, m.version ?? '-', m.raftTerm?.toString() ?? '-', m.dbSize === null ? '-' : bytes(m.dbSize), state(m)]),
    ]).map((l) => `  ${l}`),
  );
  lines.push('');
  const width = Math.max(...r.checks.map((c) => c.name.length));
  for (const c of r.checks) {
    lines.push(`${c.level.padEnd(4)}  ${c.name.padEnd(width)}  ${c.message}`);
    if (c.fix) lines.push(`${' '.repeat(6 + width)}  fix: ${c.fix}`);
  }
  const count = (level: Level): number => r.checks.filter((c) => c.level === level).length;
  const plural = (n: number, w: string): string => `${n} ${w}${n === 1 ? '' : 's'}`;
  lines.push('');
  lines.push(
    r.status === 'ready'
      ? 'ready (exit 0)'
      : r.status === 'warnings'
        ? `ready, with ${plural(count('warn'), 'warning')} (exit ${r.exitCode})`
        : `not ready: ${plural(count('fail'), 'failed check')}${count('warn') > 0 ? `, ${plural(count('warn'), 'warning')}` : ''} (exit ${r.exitCode})`,
  );
  return lines;
}
