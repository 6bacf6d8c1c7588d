// Leases that etcd ended before the client's deadline, and the deposed leader that did it.
import { round } from './figures.js';
import { WAKE_GRACE_MS } from './freezes.js';
import type { FaultRecord, Violation } from './history.js';

/** A session that ended because etcd said its lease was gone, with what its own deadline said then. */
export interface LeaseGoneReport {
  worker: string;
  lease: string;
  /** The session's loss deadline minus the moment it learned the lease was gone (> 0: still "alive"). */
  leftMs: number;
  at: number;
}

/** How soon after a frozen Raft leader wakes its stale lessor's revocations land. */
export const DEPOSED_LEADER_WINDOW_MS = 2000;
/**
 * How long after a frozen Raft leader wakes its stale batch of revocations may still be draining
 * (see etcd-logs.ts): 16 revokes in flight, each up to etcd's request timeout (7 s by default), so
 * waves of revocations come 7 s, 14 s, ... after the wake. Bounded so that a pause long past cannot
 * explain a loss; 4 waves cover 80 leases, more than the chaos suite ever has.
 */
export const DEPOSED_BATCH_MS = 30_000;

/** `member-pause` faults of the member that was the Raft leader. */
function leaderPauses(faults: FaultRecord[]): FaultRecord[] {
  return faults.filter((f) => f.kind === 'member-pause' && f.target.includes('(leader)'));
}

/**
 * The pause of the Raft leader whose wake `at` falls just after (from WAKE_GRACE_MS before its end
 * to DEPOSED_LEADER_WINDOW_MS after it): when the woken leader's stale lessor revokes live leases.
 */
export function leaderWake(at: number, faults: FaultRecord[]): FaultRecord | undefined {
  return leaderPauses(faults).find((f) => at >= f.end - WAKE_GRACE_MS && at <= f.end + DEPOSED_LEADER_WINDOW_MS);
}

/** A member logged that its revocation of a lease it thought expired timed out (etcd-logs.ts). */
export interface StaleRevoke {
  member: string;
  at: number;
}

/**
 * The one known cause of an early expiry that is etcd's, not ours: a deposed Raft leader's stale
 * lessor (etcd issue 15247, also 12528). A Raft leader frozen (SIGSTOP) past the TTL wakes up still
 * believing its lessor is primary, finds every lease it did not see renewed "expired" and proposes
 * their revocation, which the new leader applies, although the new leader had been renewing them.
 *
 * etcd PR 16822 (backported to v3.4.31 and v3.5.13; 3.6, 3.7) checks leadership once before each
 * batch, and since commit b8b0cf83d (v3.4.34, v3.5.16, 3.6.0) a member that ticked within 3
 * heartbeats skips even that check (true right after SIGCONT). The first 16 revokes
 * (maxPendingRevokes) then go into the deposed member's own log and time out. Each freed slot sends
 * the next lease of the same stale list as a follower, and raft forwards it to the new leader. So
 * with more than 16 leases, revocations also land one request timeout (7 s) or more after the wake,
 * each right after the member logs "failed to revoke lease ... request timed out".
 *
 * The pause whose stale revocations may land at `at` (a session told its lease was gone, a holder
 * let in by a revoked key): `at` within DEPOSED_LEADER_WINDOW_MS after the end of a `member-pause`
 * of the member that was leader, or within DEPOSED_LEADER_WINDOW_MS after such a timed-out revoke
 * logged by that member, up to DEPOSED_BATCH_MS after its wake.
 */
export function deposedLeaderRevoke(at: number, faults: FaultRecord[], staleRevokes: StaleRevoke[] = []): FaultRecord | undefined {
  const atWake = leaderWake(at, faults);
  if (atWake) return atWake;
  return leaderPauses(faults).find((f) => {
    const member = f.target.split(' ')[0];
    return staleRevokes.some(
      (e) =>
        e.member === member &&
        e.at >= f.end - WAKE_GRACE_MS &&
        e.at <= f.end + DEPOSED_BATCH_MS &&
        at >= e.at - WAKE_GRACE_MS &&
        at <= e.at + DEPOSED_LEADER_WINDOW_MS,
    );
  });
}

export interface LeaseExpiryReport {
  /** Every time etcd said a lease was gone. */
  reports: number;
  /** Of those, while the session's own deadline still lay ahead. */
  early: number;
  /** Early ones attributed to a deposed Raft leader's revocations (etcd 15247): reported, not failed. */
  byDeposedLeader: number;
  /** Of those, the ones from a later wave of its stale batch (after a timed-out revoke, not at the wake). */
  byDeposedLeaderLate: number;
  /** The largest leftMs seen (positive: early). */
  latestMs?: number;
  violations: Violation[];
}

/**
 * The central promise: the session's deadline (send time + TTL - margin) comes before the server can
 * expire the lease. Learning from etcd that the lease is gone while that deadline still lay ahead
 * means the server expired it early (or the deadline was computed wrongly): a violation, unless it
 * is etcd's own known bug (deposedLeaderRevoke).
 */
export function checkLeaseExpiries(
  reports: LeaseGoneReport[],
  faults: FaultRecord[] = [],
  staleRevokes: StaleRevoke[] = [],
): LeaseExpiryReport {
  const violations: Violation[] = [];
  let early = 0;
  let byDeposedLeader = 0;
  let byDeposedLeaderLate = 0;
  for (const r of reports) {
    if (r.leftMs <= 0) continue;
    // The nemesis revoked it as an operator would: gone early by design.
    if (
      faults.some(
        (f) => f.kind === 'lease-revoke' && f.worker === r.worker && r.at >= f.start && (r.lease === f.lease || r.lease.startsWith('(')),
      )
    )
      continue;
    early++;
    if (deposedLeaderRevoke(r.at, faults, staleRevokes)) {
      byDeposedLeader++;
      if (!deposedLeaderRevoke(r.at, faults)) byDeposedLeaderLate++;
      continue;
    }
    violations.push({
      check: 'lease-expired-early',
      detail: `${r.worker}: etcd said lease ${r.lease} was gone while the session still had ${round(r.leftMs)} ms before its own deadline`,
    });
  }
  const out: LeaseExpiryReport = { reports: reports.length, early, byDeposedLeader, byDeposedLeaderLate, violations };
  if (reports.length > 0) out.latestMs = round(Math.max(...reports.map((r) => r.leftMs)));
  return out;
}
