// Two holders' beliefs on the common clock: overlaps, the token order of locks, RW conflicts.
import { DEPOSED_REVOKE_CAUSE, type LeaseEvidence, explain, lateStart } from './excuses.js';
import { round } from './figures.js';
import { FREEZES, WAKE_GRACE_MS, minExcusingFreezeMs } from './freezes.js';
import type { FaultRecord, HeldInterval, Violation } from './history.js';

export interface Overlap {
  /** The holder whose belief outlived its ownership. */
  a: HeldInterval;
  /** The first other holder that started while `a` still believed it held. */
  b: HeldInterval;
  /** From `b`'s start to the end of `a`'s belief: how long `a` was wrong. */
  ms: number;
  /** Why, when a recorded fault explains it; otherwise 'unexplained'. */
  cause: string;
}

export interface OverlapReport {
  intervals: number;
  lostByHandle: number;
  /** Pairs of intervals of different holders that overlap at all. */
  overlappingPairs: number;
  /** Holders whose belief outlived their ownership (another holder started before it ended). */
  overlaps: number;
  /** The longest such stale belief: from the next holder's start to the end of the belief. */
  longestMs: number;
  totalMs: number;
  unexplained: number;
  /** Of the explained ones, those attributed to a deposed Raft leader's revoke (etcd 15247, see explain()). */
  byDeposedLeader: number;
  byCause: Record<string, number>;
  worst: { ms: number; cause: string; a: string; b: string }[];
}

/**
 * Holders whose "held" interval overlaps a later holder's on the common clock. For each such
 * holder the overlap is measured from the first later holder's start to the end of its own belief:
 * the time it wrongly believed it held (several short holds inside one long stale belief count
 * once, at the length of the whole stale stretch). Only a freeze (SIGSTOP) of the earlier holder's
 * process that covers the later holder's start explains an overlap, or a deposed Raft leader's
 * revoke of the earlier holder's live lease (etcd 15247; see explain() for both), or a freeze of the
 * later holder's own, when it was the stale one and recorded its start only on waking (see
 * lateStart(), which needs `acted`). `conflicts` says which pairs may not overlap (every pair, for
 * a mutex; see rwConflict for the RW lock).
 */
export function findOverlaps(
  intervals: HeldInterval[],
  faults: FaultRecord[],
  conflicts: (a: HeldInterval, b: HeldInterval) => boolean = () => true,
  acted?: (h: HeldInterval) => boolean,
  leases?: LeaseEvidence,
): { report: OverlapReport; overlaps: Overlap[] } {
  const sorted = [...intervals].sort((x, y) => x.from - y.from);
  const overlaps: Overlap[] = [];
  let pairs = 0;
  for (let i = 0; i < sorted.length; i++) {
    const a = sorted[i]!;
    let first: HeldInterval | undefined;
    let cause: string | undefined;
    // Every later holder is judged: one explained by a freeze says nothing of the next one.
    for (let j = i + 1; j < sorted.length && sorted[j]!.from < a.to; j++) {
      const b = sorted[j]!;
      if (b.token === a.token || !conflicts(a, b)) continue;
      pairs++;
      first ??= b;
      let why = explain(a, b, faults, leases);
      if (why.startsWith('unexplained')) why = lateStart(b, [a], 1, faults, acted) ?? why;
      if (cause === undefined || (why.startsWith('unexplained') && !cause.startsWith('unexplained'))) cause = why;
    }
    if (first && cause !== undefined) overlaps.push({ a, b: first, ms: a.to - first.from, cause });
  }
  const byCause: Record<string, number> = {};
  for (const o of overlaps) byCause[o.cause] = (byCause[o.cause] ?? 0) + 1;
  const worst = [...overlaps]
    .sort((x, y) => y.ms - x.ms)
    .slice(0, 5)
    .map((o) => ({ ms: round(o.ms), cause: o.cause, a: `${o.a.worker} token ${o.a.token}`, b: `${o.b.worker} token ${o.b.token}` }));
  return {
    overlaps,
    report: {
      intervals: intervals.length,
      lostByHandle: intervals.filter((i) => i.lost).length,
      overlappingPairs: pairs,
      overlaps: overlaps.length,
      longestMs: round(overlaps.reduce((m, o) => Math.max(m, o.ms), 0)),
      totalMs: round(overlaps.reduce((s, o) => s + o.ms, 0)),
      unexplained: overlaps.filter((o) => o.cause.startsWith('unexplained')).length,
      byDeposedLeader: overlaps.filter((o) => o.cause === DEPOSED_REVOKE_CAUSE).length,
      byCause,
      worst,
    },
  };
}

export function overlapViolations(overlaps: Overlap[], check: string): Violation[] {
  return overlaps
    .filter((o) => o.cause.startsWith('unexplained'))
    .map((o) => ({
      check,
      detail:
        `${o.a.worker} (token ${o.a.token}) still held until ${round(o.ms)} ms after ${o.b.worker} (token ${o.b.token}) ` +
        `started: ${o.cause}`,
    }));
}

/**
 * Queue order, for locks and RW locks: a hold that began after a conflicting hold with a newer token
 * had ended. The older key was there all along (it was created first and held later), so the newer
 * grant came while an older key it had to wait for still existed. (Not for a semaphore: there an
 * older waiter may rightly learn of its permit after a newer one came and went, both being among the
 * first N; its queue order is judged on revisions, overGrantViolations().) Excused only
 * when the older holder's own process was frozen (minExcusingFreezeMs(), nonzero) from before the
 * newer hold began until within WAKE_GRACE_MS of its own start (it won, froze, and recorded late).
 */
export function tokenOrderViolations(
  intervals: HeldInterval[],
  faults: FaultRecord[],
  check: string,
  conflicts: (a: HeldInterval, b: HeldInterval) => boolean = () => true,
): Violation[] {
  const violations: Violation[] = [];
  const byEnd = [...intervals].sort((x, y) => x.to - y.to);
  // The highest token among the holds ended so far (a write hold's, for RW readers): most holds have
  // none above their own, and need no scan (runs hold tens of thousands of holds).
  const maxAll: bigint[] = [];
  const maxWrite: bigint[] = [];
  let m = -1n;
  let mw = -1n;
  for (const x of byEnd) {
    if (x.token > m) m = x.token;
    if (x.mode !== 'read' && x.token > mw) mw = x.token;
    maxAll.push(m);
    maxWrite.push(mw);
  }
  const endedBefore = (t: number): number => {
    let lo = 0;
    let hi = byEnd.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (byEnd[mid]!.to < t) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  for (const y of intervals) {
    const n = endedBefore(y.from);
    if (n === 0 || (y.mode === 'read' ? maxWrite : maxAll)[n - 1]! <= y.token) continue;
    for (const x of byEnd) {
      if (x.to >= y.from) break;
      if (x.token <= y.token || x.worker === y.worker || !conflicts(x, y)) continue;
      const frozen = faults.some(
        (f) =>
          FREEZES.has(f.kind) &&
          f.worker === y.worker &&
          f.end - f.start >= minExcusingFreezeMs(y.ttl) &&
          f.start <= x.from + WAKE_GRACE_MS &&
          f.end + WAKE_GRACE_MS >= y.from,
      );
      if (!frozen) {
        violations.push({
          check,
          detail: `${y.worker} began holding token ${y.token} after ${x.worker}'s newer token ${x.token} had come and gone, and was not frozen meanwhile`,
        });
        break;
      }
    }
  }
  return violations;
}

/** RW lock holds conflict unless both are reads. */
export function rwConflict(a: HeldInterval, b: HeldInterval): boolean {
  return a.mode !== 'read' || b.mode !== 'read';
}
