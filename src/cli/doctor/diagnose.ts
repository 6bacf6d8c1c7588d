// Runs doctor against a cluster: gathers the findings (members, auth, round trips, a lease's life),
// cleans up its scratch keys, then makes the report from the checks.
import { randomBytes } from 'node:crypto';
import { AuthenticationError, NoLeaderError, PermissionDeniedError, type Client } from '../../index.js';
import { compareEtcdVersions } from '../../launcher/binary.js';
import { EXIT } from '../output.js';
import { measuredTrips, paysCatchUp, renewalChecksPermission, runChecks, ttlRecommendation } from './checks.js';
import { type MemberProbeOptions, memberList, memberStatuses, oneLine } from './members.js';
import { leaseSteps, roundTrips, type Scratch } from './measure.js';
import type { DoctorReport, Findings } from './report.js';

/** doctor's own exit codes, beside EXIT.ok (ready), EXIT.error (could not check) and EXIT.usage. */
export const DOCTOR_EXIT = {
  ready: EXIT.ok,
  /** Ready for locks, with warnings (a member down, etcd 3.4, mixed versions, ...). */
  warnings: 5,
  /** Not ready: locks would fail or be unsafe (no leader, a permission missing, an alarm, ...). */
  notReady: 6,
} as const;

export interface DiagnoseOptions extends MemberProbeOptions {
  samples: number;
  username: string | null;
  /** Whether we authenticate (--user or --auth-jwt-token). */
  authenticated: boolean;
}

/** Runs every check. Throws (exit 1) only when the cluster cannot be checked at all. */
export async function diagnose(client: Client, o: DiagnoseOptions): Promise<DoctorReport> {
  const findings = await gather(client, o);
  o.signal.throwIfAborted();
  const checks = runChecks(findings);
  const status = checks.some((c) => c.level === 'fail') ? 'not-ready' : checks.some((c) => c.level === 'warn') ? 'warnings' : 'ready';
  const catchUp = findings.roundTrips?.catchUp;
  return {
    status,
    exitCode: status === 'ready' ? DOCTOR_EXIT.ready : status === 'warnings' ? DOCTOR_EXIT.warnings : DOCTOR_EXIT.notReady,
    endpoints: client.endpoints,
    prefix: o.prefix,
    memberSource: findings.memberSource,
    members: findings.members,
    versions: findings.versions,
    auth: { enabled: findings.auth.enabled, user: o.username, renewalNeedsPutPermission: findings.versions.some(renewalChecksPermission) },
    roundTrips: measuredTrips(findings),
    catchUp: catchUp && !('error' in catchUp) ? { ...catchUp, paysDelay: paysCatchUp(catchUp) } : null,
    lease: findings.lease?.steps ?? { grant: 'skipped', attach: 'skipped', renew: 'skipped', revoke: 'skipped' },
    ttl: ttlRecommendation(measuredTrips(findings), findings.dialTimeoutMs),
    clockRate: null,
    checks,
  };
}

async function gather(client: Client, o: DiagnoseOptions): Promise<Findings> {
  const { signal } = o;
  // The first call says whether we can talk to etcd at all: an unreachable endpoint, a TLS or an
  // authentication failure ends here with the CLI's usual one-line message (exit 1). A cluster
  // without a leader is reported instead: every member is asked directly, and what needs a leader
  // (writes, watches, leases) is skipped.
  let leaderless = false;
  try {
    await client.status({ signal });
  } catch (err) {
    if (err instanceof NoLeaderError) leaderless = true;
    // Refused for want of the root role (some versions): etcd answered, and authenticated us; each
    // member is asked again below, with fallbacks.
    else if (!(err instanceof PermissionDeniedError)) throw err;
  }
  const listed = leaderless ? undefined : await memberList(client, signal);
  const members = await memberStatuses(client, listed, o);
  const versions = [...new Set(members.flatMap((m) => (m.version === null ? [] : [m.version])))].sort(compareEtcdVersions);
  const findings: Findings = {
    prefix: o.prefix,
    grant: `etcdctl role grant-permission <role of ${o.username ?? 'the user'}> --prefix=true readwrite ${o.prefix}`,
    samples: o.samples,
    memberSource: listed ? 'member-list' : 'endpoints',
    members,
    versions,
    leaderless,
    auth: {
      enabled: leaderless ? null : await authStatus(client, o.authenticated, signal),
      username: o.username,
      authenticated: o.authenticated,
    },
    roundTrips: null,
    lease: null,
    dialTimeoutMs: client.dialTimeoutMs,
    cleanup: null,
  };
  if (leaderless) return findings;
  const scratch: Scratch = { prefix: `${o.prefix}${randomBytes(4).toString('hex')}/`, wrote: false };
  try {
    findings.roundTrips = await roundTrips(client, scratch, signal, o.samples);
    findings.lease = await leaseSteps(client, scratch, signal, o.samples);
  } finally {
    // Everything we wrote is under the scratch prefix. Not under the interrupt signal: an
    // interrupted doctor still cleans up (a second Ctrl-C exits at once).
    if (scratch.wrote) {
      await client.delete(scratch.prefix, { prefix: true }).catch((err: unknown) => {
        findings.cleanup = { scratchPrefix: scratch.prefix, error: oneLine(err) };
      });
    }
  }
  return findings;
}

/** Whether etcd is on: AuthStatus on 3.5+, else what the connection showed. */
async function authStatus(client: Client, authenticated: boolean, signal: AbortSignal): Promise<boolean> {
  try {
    return (await client.authStatus({ signal })).enabled;
  } catch (err) {
    if (err instanceof AuthenticationError || signal.aborted) throw err;
    // 3.4: no AuthStatus. With a user, authenticating succeeded, which etcd refuses when auth is
    // off; without one, our reads and writes (next) fail with an AuthenticationError if it is on.
    return authenticated;
  }
}
