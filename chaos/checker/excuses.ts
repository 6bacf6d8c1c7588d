// What explains a stale belief: a freeze of its own process, or a deposed Raft leader's revoke.
import { type KeyLife, hasBug15247 } from '../revisions.js';
import { FREEZES, WAKE_GRACE_MS, freezeExplains, minExcusingFreezeMs } from './freezes.js';
import { type FaultRecord, type HeldInterval, operatorExplains } from './history.js';
import { type LeaseGoneReport, type StaleRevoke, deposedLeaderRevoke } from './leases.js';

/** The cause of an overlap that a deposed Raft leader's revoke of a live lease explains (see explain()). */
export const DEPOSED_REVOKE_CAUSE = 'etcd 15247 (a deposed leader revoked a live lease)';

/**
 * The cause of an overlap that etcd 15247 would explain but for the observer's record, which ends
 * before the later holder's witness revision (record.ts): neither excused nor a violation.
 */
export const BEYOND_RECORD_CAUSE = 'not judged (etcd 15247 needs the record beyond its end)';

/**
 * How long after the next holder started a holder whose live lease a deposed leader revoked may
 * still believe it holds: it learns of its key's deletion through a watch, which may be served by a
 * member that is still catching up on the log (the woken one among them).
 */
export const DEPOSED_REVOKE_NOTICE_MS = 2000;

/**
 * The losses a revoked lease can cause, as the worker reports them (`lostReason`, worker.ts
 * lossClock()): the lost error's `reason` (OwnershipLostError.reason), with `/<session end reason>`
 * when the session's end caused it. Only these two:
 * - `key_deleted`: the key watch saw the revoke delete the key (how a holder learns it);
 * - `lease_expired/lease_gone`: the session ended because etcd said its lease no longer exists (a
 *   keepalive answer with TTL 0, or LeaseNotFound on a call).
 * Never a session deadline (`lease_expired/deadline`: the client gave up renewing, which a revoke on
 * the server does not cause), a key moved off its lease, a failed watch, a release or a shutdown.
 */
export const REVOKE_LOSS_REASONS = ['key_deleted', 'lease_expired/lease_gone'] as const;

/** Whether a hold's `lostReason` is one a revoked lease causes (REVOKE_LOSS_REASONS). */
export function lostToRevoke(reason: string | undefined): boolean {
  return (REVOKE_LOSS_REASONS as readonly (string | undefined)[]).includes(reason);
}

/**
 * How often per TTL a session renews its lease: every TTL/3 (src/session.ts, renewIntervalMs()).
 * The chaos workers' sessions are the library's defaults but for the TTL (worker.ts: Session.create
 * and runAsLeader with `ttl: cfg.ttl`, the run's --ttl, 3 s by default).
 */
export const RENEWALS_PER_TTL = 3;

/**
 * The shortest freeze of the Raft leader after which its stale lessor can find a renewed lease
 * expired: the TTL minus one renewal interval. The last renewal the leader applied before it froze
 * came at most one renewal interval (TTL/RENEWALS_PER_TTL) earlier and set the lease to expire a TTL
 * after it, so a shorter freeze wakes to a lease still alive in its own view. 2000 ms at TTL 3 s.
 */
export function staleLessorPauseMs(ttlSeconds: number): number {
  return ttlSeconds * 1000 - (ttlSeconds * 1000) / RENEWALS_PER_TTL;
}

/** etcd's own word on leases, for deposedRevokeOf(): what sessions were told and what members logged. */
export interface LeaseEvidence {
  /** Sessions told their lease was gone (checkLeaseExpiries()'s input). */
  leaseGone: LeaseGoneReport[];
  /** Members' timed-out revokes (etcd-logs.ts), for deposedLeaderRevoke(). */
  staleRevokes?: StaleRevoke[];
  /**
   * The etcd version of the run: on versions said to be fixed (hasBug15247() false) the excuse also
   * needs the holder's own session told its lease was gone early by that pause's stale revocations
   * (deposedRevokeOf() 5).
   */
  etcdVersion?: string;
  /** The observer's record of every key (observer.ts): etcd 15247 needs the earlier key gone with its lease. */
  keys?: KeyLife[];
  /** The last revision that record reached, when it ended early (record.ts). */
  recordEnd?: bigint;
}

/**
 * The Raft leader's pause whose stale lessor revoked `a`'s live lease (etcd 15247), at its wake or in a
 * later wave of the same batch, letting `b` in, if all of
 * these hold (else undefined):
 * 1. `a` saw its hold lost (`lost`) for a reason a revoke causes: its key deleted, or its lease gone
 *    (lostToRevoke(), REVOKE_LOSS_REASONS), never its own deadline; or `a` released (not lost, not
 *    died) before any notice reached it, and etcd then told `a`'s worker that `a`'s own lease
 *    (`lease`) was gone while its deadline still lay ahead (a LeaseGoneReport with leftMs > 0), within
 *    DEPOSED_REVOKE_NOTICE_MS after `b` started, a report deposedLeaderRevoke() attributes to this
 *    same pause (as checkLeaseExpiries() does);
 * 2. `b` started when that pause's stale revocations land (deposedLeaderRevoke()): at the wake of a
 *    pause of the member that was leader, or right after one of that member's timed-out revokes (a
 *    later wave of its stale batch, `staleRevokes`), and that pause lasted at least
 *    staleLessorPauseMs(`a`'s TTL) (no TTL known: not attributed);
 * 3. `a`'s lease existed before the pause began (`sessionFrom`, else its own start `from`, before the
 *    pause's start): a lease granted while the leader was frozen is unknown to its stale lessor;
 * 4. `a` noticed the loss within DEPOSED_REVOKE_NOTICE_MS after `b` started;
 * 5. the observer's record shows `a`'s key removed with its lease at or before `b`'s witness
 *    revision (revokedBefore()); and, on an etcd said to be fixed (hasBug15247() false: 3.4.28,
 *    3.5.11 and later), `a`'s own session was also told its lease was gone early by that same pause's
 *    revocations (leaseReportedGone()), as for a release in 1. The wake-time revoke still happens there
 *    (chaos/deposed-revoke.ts measured it on 3.5.30, 3.6.16 and 3.7.3: PR 16822's leadership check
 *    is skipped by a member that ticked within 3 heartbeats, true right after SIGCONT), and the lease
 *    check already attributes those early expiries to it on every version; without both pieces of
 *    etcd's word the overlap stays a violation.
 */
export function deposedRevokeOf(a: HeldInterval, b: HeldInterval, faults: FaultRecord[], leases?: LeaseEvidence): FaultRecord | undefined {
  if (!revokedBefore(a, b, leases?.keys)) return undefined;
  return deposedRevokeByClock(a, b, faults, leases);
}

/** deposedRevokeOf() without its 5th condition's first part (the record shows `a`'s key gone with its lease). */
function deposedRevokeByClock(a: HeldInterval, b: HeldInterval, faults: FaultRecord[], leases?: LeaseEvidence): FaultRecord | undefined {
  if (a.lost ? !lostToRevoke(a.lostReason) : a.died || a.lease === undefined) return undefined;
  if (a.ttl === undefined || a.to - b.from > DEPOSED_REVOKE_NOTICE_MS) return undefined;
  const pause = deposedLeaderRevoke(b.from, faults, leases?.staleRevokes);
  if (!pause || pause.end - pause.start < staleLessorPauseMs(a.ttl)) return undefined;
  if ((a.sessionFrom ?? a.from) >= pause.start) return undefined;
  // Released before the loss reached it, or on an etcd said to be fixed: etcd's own word that this pause's revocations took its lease.
  if (a.lost && hasBug15247(leases?.etcdVersion)) return pause;
  return leaseReportedGone(a, b, pause, faults, leases) ? pause : undefined;
}

/**
 * `a`'s own worker was told that `a`'s lease (`lease`) was gone while its deadline still lay ahead
 * (leftMs > 0), within DEPOSED_REVOKE_NOTICE_MS after `b` started, in a report that
 * deposedLeaderRevoke() attributes to `pause` (as checkLeaseExpiries() does).
 */
function leaseReportedGone(a: HeldInterval, b: HeldInterval, pause: FaultRecord, faults: FaultRecord[], leases?: LeaseEvidence): boolean {
  return (
    a.lease !== undefined &&
    (leases?.leaseGone ?? []).some(
      (r) =>
        r.worker === a.worker &&
        r.lease === a.lease &&
        r.leftMs > 0 &&
        r.at >= b.from &&
        r.at - b.from <= DEPOSED_REVOKE_NOTICE_MS &&
        deposedLeaderRevoke(r.at, faults, leases?.staleRevokes) === pause,
    )
  );
}

/** `b` was witnessed after the revision an incomplete record ends at: what the record says of it is unknown. */
function beyondRecord(b: HeldInterval, leases?: LeaseEvidence): boolean {
  return leases?.recordEnd !== undefined && b.witnessRev !== undefined && b.witnessRev > leases.recordEnd;
}

/**
 * etcd's history shows `a`'s key (CreateRevision `a.token`) removed with its lease (`lease-ended`: a
 * revoke or an expiry, never a delete) at a revision no later than `b`'s witness read: `b`'s grant
 * came after it. Without `b`'s witness or the observer's record, nothing is shown.
 */
function revokedBefore(a: HeldInterval, b: HeldInterval, keys: KeyLife[] | undefined): boolean {
  const life = keys?.find((k) => k.create === a.token);
  return life?.deleted !== undefined && life.how === 'lease-ended' && b.witnessRev !== undefined && life.deleted <= b.witnessRev;
}

/**
 * Why `a` still believed it held when `b` started. First, a freeze of `a`'s own process that covers
 * `b`'s start (a frozen process cannot act on any signal). Then etcd's own bug, 15247 (see
 * deposedLeaderRevoke()): a Raft leader frozen past the TTL wakes and revokes leases its successor
 * had been renewing, `a`'s among them; its key goes, `b` is rightly granted, and `a` hears of the
 * deletion through its watch a little later. Attributed only on all of deposedRevokeOf()'s
 * conditions: `a` saw the loss as its key deleted or its lease gone (or released first, and etcd
 * then told its worker its lease was gone early, by that pause's revocations: `leases`), `b` started
 * at the wake of a leader pause long enough for the stale lessor to find a renewed lease expired, or
 * right after one of that member's timed-out revokes (a later wave of its batch), `a`'s lease is
 * older than that pause, and `a` noticed within DEPOSED_REVOKE_NOTICE_MS. A network fault (black
 * hole, partition, member down) never explains one: the session's deadline is there so that a
 * holder cut off from etcd learns of its loss before the server can expire its lease. When only
 * the observer's record is missing (it ended before `b`'s witness revision), the overlap is not
 * judged (BEYOND_RECORD_CAUSE): the run fails as incomplete instead.
 */
export function explain(a: HeldInterval, b: HeldInterval, faults: FaultRecord[], leases?: LeaseEvidence): string {
  for (const f of faults) {
    if (freezeExplains(f, a, b)) return f.kind;
  }
  for (const f of faults) {
    if (operatorExplains(f, a, b)) return f.kind;
  }
  if (deposedRevokeOf(a, b, faults, leases)) return DEPOSED_REVOKE_CAUSE;
  if (beyondRecord(b, leases) && deposedRevokeByClock(a, b, faults, leases)) return BEYOND_RECORD_CAUSE;
  // Name the fault in force when the later holder started, for diagnosis.
  for (const f of faults) {
    if (f.start <= b.from && b.from <= f.end + 1000) return `unexplained (during ${f.kind} ${f.target})`;
  }
  return 'unexplained';
}

/**
 * Why `b`, recorded as starting while newer holders held, was itself the stale one: a freeze of its
 * own process began after it was granted (or after the answer that granted it was on its way) and
 * before it could record the hold, lasted past its TTL (so etcd expired its key and granted `newer`
 * meanwhile), and it recorded the start only on waking, before its deadline timer had run. Such a
 * ghost is explained, as a frozen earlier holder is, only if all of this holds:
 * - a freeze of `b`'s worker covers the start of at least `need` holders with newer tokens than
 *   `b`'s (`need` is the capacity: a correct lock or semaphore grants the newest of them only once
 *   `b`'s key is gone), and `b` recorded its start within WAKE_GRACE_MS of that freeze's end;
 * - `b`'s belief ended (it saw the loss, or let go) within WAKE_GRACE_MS of that end too;
 * - `b` never acted at the protected resource (`acted`: an accepted write, or whatever else the
 *   workload's holder does under the lock): a stale holder that got anything done is not excused.
 *   Without `acted` nothing is excused this way.
 */
export function lateStart(
  b: HeldInterval,
  newer: HeldInterval[],
  need: number,
  faults: FaultRecord[],
  acted?: (h: HeldInterval) => boolean,
): string | undefined {
  if (!acted || acted(b)) return undefined;
  for (const f of faults) {
    if (!FREEZES.has(f.kind) || f.worker !== b.worker || f.end - f.start < minExcusingFreezeMs(b.ttl)) continue;
    if (b.from < f.start || b.from > f.end + WAKE_GRACE_MS || b.to > f.end + WAKE_GRACE_MS) continue;
    const during = newer.filter((a) => a.token > b.token && a.from >= f.start && a.from <= f.end + WAKE_GRACE_MS);
    if (during.length >= need) return `${f.kind} (late start)`;
  }
  return undefined;
}

/** One violation per overlap that nothing explains (neither a freeze nor etcd 15247, see explain()). */
