// More than N holders of a semaphore at once, in real time and by etcd's revisions.
import { type GrantWitness, checkGrantsByRevision } from '../revisions.js';
import { DEPOSED_REVOKE_CAUSE, type LeaseEvidence, explain, lateStart } from './excuses.js';
import { round } from './figures.js';
import type { FaultRecord, HeldInterval, Violation } from './history.js';
import type { OverlapReport } from './overlaps.js';

/** A moment when more than `capacity` holders believed they held at once. */
export interface Excess {
  /** The holder whose start made it more than `capacity`. */
  b: HeldInterval;
  /** The other holders that still believed they held when `b` started. */
  others: HeldInterval[];
  /** From `b`'s start until enough of them (b included) ended to bring the count back to `capacity`. */
  ms: number;
  /** Why, when freezes (or etcd 15247) explain it; otherwise 'unexplained …'. */
  cause: string;
}

export interface ExcessReport extends OverlapReport {
  capacity: number;
  /** The most holders that believed they held at once (at a holder's start). */
  maxConcurrent: number;
}

/**
 * Moments when more than `capacity` holders' "held" intervals overlap on the common clock: at each
 * holder's start, the others still holding. If they number `capacity` or more, the excess is
 * explained only when at least that many of them were frozen (worker-pause, ghost-pause) over the
 * new holder's start, or had their live lease revoked by a deposed Raft leader (etcd 15247): each
 * such one is a stale belief, as in explain(). The new holder itself is
 * one more when it is a ghost that recorded its start on waking from a freeze during which
 * `capacity` newer holders were granted (see lateStart(), which needs `acted`). Anything less (a
 * network fault, an early grant) fails the run. Measured from the new holder's start until enough
 * of the overlapping holds ended to bring the count back to `capacity`.
 */
export function findExcess(
  intervals: HeldInterval[],
  capacity: number,
  faults: FaultRecord[],
  acted?: (h: HeldInterval) => boolean,
  leases?: LeaseEvidence,
): { report: ExcessReport; excess: Excess[] } {
  const sorted = [...intervals].sort((x, y) => x.from - y.from);
  const open: HeldInterval[] = [];
  const excess: Excess[] = [];
  let maxConcurrent = 0;
  for (const b of sorted) {
    for (let i = open.length - 1; i >= 0; i--) if (open[i]!.to <= b.from) open.splice(i, 1);
    const others = open.filter((a) => a.token !== b.token);
    open.push(b);
    maxConcurrent = Math.max(maxConcurrent, others.length + 1);
    if (others.length < capacity) continue;
    const over = others.length + 1 - capacity;
    const causes = others.map((a) => explain(a, b, faults, leases));
    // Freezes first, then etcd 15247: the cause named is the first of these.
    const frozen = causes.filter((c) => !c.startsWith('unexplained') && c !== DEPOSED_REVOKE_CAUSE);
    const revoked = causes.filter((c) => c === DEPOSED_REVOKE_CAUSE);
    const explained = [...frozen, ...revoked];
    const ghost = explained.length >= over ? undefined : lateStart(b, others, capacity, faults, acted);
    const stale = ghost ? [ghost, ...explained] : explained;
    const cause = stale.length >= over ? stale[0]! : (causes.find((c) => c.startsWith('unexplained (')) ?? 'unexplained');
    const ends = [...others, b].map((x) => x.to).sort((x, y) => x - y);
    excess.push({ b, others, ms: Math.max(0, ends[over - 1]! - b.from), cause });
  }
  const byCause: Record<string, number> = {};
  for (const e of excess) byCause[e.cause] = (byCause[e.cause] ?? 0) + 1;
  const worst = [...excess]
    .sort((x, y) => y.ms - x.ms)
    .slice(0, 5)
    .map((e) => ({
      ms: round(e.ms),
      cause: e.cause,
      a: e.others.map((o) => `${o.worker} token ${o.token}`).join(' + '),
      b: `${e.b.worker} token ${e.b.token}`,
    }));
  return {
    excess,
    report: {
      capacity,
      maxConcurrent,
      intervals: intervals.length,
      lostByHandle: intervals.filter((i) => i.lost).length,
      overlappingPairs: excess.reduce((n, e) => n + e.others.length, 0),
      overlaps: excess.length,
      longestMs: round(excess.reduce((m, e) => Math.max(m, e.ms), 0)),
      totalMs: round(excess.reduce((t, e) => t + e.ms, 0)),
      unexplained: excess.filter((e) => e.cause.startsWith('unexplained')).length,
      byDeposedLeader: excess.filter((e) => e.cause === DEPOSED_REVOKE_CAUSE).length,
      byCause,
      worst,
    },
  };
}

/**
 * The semaphore's over-grants its holders proved themselves: a witness read made right after a
 * grant (worker.ts witness()) that still returned `permits` or more older participant keys. Those
 * keys were there at the grant too (older, and still there later), so etcd held more than `permits`
 * holders' keys in the first `permits` places at once: no clock, no excuse.
 */
export function overGrantViolations(witnesses: GrantWitness[], permits: number): Violation[] {
  return checkGrantsByRevision([], witnesses, { kind: 'permits', permits }, 'semaphore-over-grant');
}

/** One violation per moment of more than `capacity` holders that freezes (or etcd 15247) do not explain. */
export function excessViolations(excess: Excess[], capacity: number, check: string): Violation[] {
  return excess
    .filter((e) => e.cause.startsWith('unexplained'))
    .map((e) => ({
      check,
      detail:
        `${e.b.worker} (token ${e.b.token}) started while ${e.others.map((o) => `${o.worker} (token ${o.token})`).join(', ')} still held: ` +
        `${e.others.length + 1} holders of ${capacity} permits for ${round(e.ms)} ms: ${e.cause}`,
    }));
}
