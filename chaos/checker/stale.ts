// The stale holder every run makes (nemesis.ts stale-write): a fenced holder whose assertHeld()
// passed, frozen before its writes until its key was gone and a newer holder had passed the fences.
// Each of its writes reaches a fence with its stale token and must be refused there.
import type { StoreEntry } from '../fenced-store.js';
import type { PgIncrementReport } from '../pg-ledger.js';
import type { EtcdIncrementReport } from './counter.js';
import type { Violation } from './history.js';

/** A hold the nemesis made stale: its key was gone and newer tokens had reached the fences when it woke. */
export interface StaleHold {
  worker: string;
  token: bigint;
}

export interface StaleWritesReport {
  holds: number;
  /** Stale writes that reached each fence and got its answer (refused, or let through: a violation). */
  judged: { ledger: number; etcd: number; pg: number };
  violations: Violation[];
}

/**
 * Every write of a stale hold must be refused: by the fenced ledger (its register has seen a newer
 * token), by etcd (the Txn's ownerCompare: the key is gone), and by PostgreSQL (PostgresFence, handed
 * the token alone, so that the database's compare decides: a newer token is stored). A write whose
 * outcome is unknown (an etcd increment is settled by its ledger key, `etcdApplied`; a PostgreSQL
 * one that failed) is not judged. `pg` undefined: no PostgreSQL in the run.
 */
export function checkStaleWrites(
  holds: StaleHold[],
  ledger: StoreEntry[],
  etcd: EtcdIncrementReport[],
  etcdApplied: ReadonlySet<string>,
  pg: PgIncrementReport[] | undefined,
): StaleWritesReport {
  const violations: Violation[] = [];
  const judged = { ledger: 0, etcd: 0, pg: 0 };
  for (const h of holds) {
    const of = <T extends { token: bigint; worker: string }>(xs: T[]): T[] =>
      xs.filter((x) => x.token === h.token && x.worker === h.worker);
    for (const e of of(ledger)) {
      if (e.op !== 'write') continue;
      judged.ledger++;
      if (e.ok)
        violations.push({
          check: 'fenced-stale-write-accepted',
          detail: `write #${e.seq} by ${h.worker} (stale token ${h.token}) was accepted`,
        });
    }
    for (const r of of(etcd)) {
      const applied = r.outcome === 'unknown' ? etcdApplied.has(r.opKey) : r.outcome === 'accepted';
      if (r.outcome === 'unknown' && !applied) continue;
      judged.etcd++;
      if (applied)
        violations.push({
          check: 'etcd-stale-increment-accepted',
          detail: `${r.opKey} by ${h.worker} (stale token ${h.token}) was applied: ownerCompare let a holder whose key was gone write`,
        });
    }
    for (const r of of(pg ?? [])) {
      if (r.outcome === 'failed') continue;
      judged.pg++;
      if (r.outcome === 'committed')
        violations.push({
          check: 'pg-stale-write-accepted',
          detail: `${r.opId} by ${h.worker} (stale token ${h.token}) was committed: PostgresFence let it through after a newer token was stored`,
        });
    }
  }
  return { holds: holds.length, judged, violations };
}
