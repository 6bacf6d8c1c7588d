// Elections: two leaders, term order, one term one leader.
import type { FencedRegister, StoreEntry } from '../fenced-store.js';
import type { LeaseEvidence } from './excuses.js';
import { FREEZES, WAKE_GRACE_MS, minExcusingFreezeMs } from './freezes.js';
import type { FaultRecord, HeldInterval, Violation } from './history.js';
import { type OverlapReport, findOverlaps, overlapViolations } from './overlaps.js';

export interface Term extends HeldInterval {}

export interface ElectionReport {
  terms: number;
  termsLost: number;
  /** Terms whose start was recorded out of token order (only a pause between winning and recording explains one). */
  orderInversions: number;
  registerWritesAccepted: number;
  registerWritesRefused: number;
  overlaps: OverlapReport;
  violations: Violation[];
}

/**
 * Single leadership, judged on the terms' intervals on the common clock:
 * - `election-two-leaders`: two terms (different tokens) overlap in real time and neither a freeze
 *   of the earlier leader's process covering the later one's start nor a deposed Raft leader's
 *   revoke of the earlier leader's live lease (etcd 15247) explains it (see explain()).
 * - `election-term-claimed-twice`: one token reported by two workers.
 * - `election-term-order`: a term began after another term had ended, with an older token. A
 *   candidate key that older must have been gone before the newer term could lead, so the older
 *   term could only start late if its own process was frozen between winning and starting.
 * - `election-two-writers` / `election-foreign-write`: the fenced term register accepted one token
 *   from two workers, or from a worker that did not lead that term. (The register refuses tokens
 *   below the highest it has seen, so its accepted tokens never decrease by construction: the order
 *   of terms is judged on the intervals instead.)
 */
export function checkElection(terms: Term[], reg: FencedRegister, faults: FaultRecord[], leases?: LeaseEvidence): ElectionReport {
  const violations: Violation[] = [];
  const owner = new Map<bigint, string>();
  for (const t of terms) {
    const o = owner.get(t.token);
    if (o !== undefined && o !== t.worker)
      violations.push({ check: 'election-term-claimed-twice', detail: `term ${t.token} was led by both ${o} and ${t.worker}` });
    owner.set(t.token, t.worker);
  }
  let accepted = 0;
  let refused = 0;
  const writer = new Map<bigint, string>();
  for (const e of reg.log as StoreEntry[]) {
    if (!e.ok) {
      refused++;
      continue;
    }
    accepted++;
    const w = e.worker;
    const prev = writer.get(e.token);
    if (prev !== undefined && prev !== w)
      violations.push({ check: 'election-two-writers', detail: `term ${e.token} written by ${prev} and ${w}` });
    writer.set(e.token, w);
    const o = owner.get(e.token);
    if (o !== undefined && o !== w)
      violations.push({ check: 'election-foreign-write', detail: `term ${e.token} led by ${o} but written by ${w}` });
  }
  const byStart = [...terms].sort((x, y) => x.from - y.from);
  let inversions = 0;
  for (let i = 1; i < byStart.length; i++) if (byStart[i]!.token <= byStart[i - 1]!.token) inversions++;
  // Term order: y started after x ended, yet carries an older token.
  const byEnd = [...terms].sort((x, y) => x.to - y.to);
  for (const y of byStart) {
    for (const x of byEnd) {
      if (x.to >= y.from) break;
      if (x.token <= y.token) continue;
      const frozen = faults.some(
        (f) =>
          FREEZES.has(f.kind) &&
          f.worker === y.worker &&
          f.end - f.start >= minExcusingFreezeMs(y.ttl) &&
          f.start <= x.from + WAKE_GRACE_MS &&
          f.end + WAKE_GRACE_MS >= x.to,
      );
      if (!frozen) {
        violations.push({
          check: 'election-term-order',
          detail: `${y.worker} began term ${y.token} after ${x.worker}'s newer term ${x.token} had ended, and was not frozen meanwhile`,
        });
      }
    }
  }
  const found = findOverlaps(terms, faults, undefined, undefined, leases);
  violations.push(...overlapViolations(found.overlaps, 'election-two-leaders'));
  return {
    terms: terms.length,
    termsLost: terms.filter((t) => t.lost).length,
    orderInversions: inversions,
    registerWritesAccepted: accepted,
    registerWritesRefused: refused,
    overlaps: found.report,
    violations,
  };
}
