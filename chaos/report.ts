// A chaos run's result: each phase's figures and violations (PhaseResult), the run's summary (the
// JSON written at the end) and the table printed at the end.
import {
  percentile,
  round,
  verdict,
  type ElectionReport,
  type EtcdCounterReport,
  type ExcessReport,
  type FencedReport,
  type LeaseExpiryReport,
  type OverlapReport,
  type PermitsReport,
  type RWReport,
  type RecordExtent,
  type StaleWritesReport,
  type Violation,
} from './checker/index.js';
import { now, type CoreRole, type RecipeRole, type Role } from './common.js';
import type { PgLedgerReport } from './pg-ledger.js';
import type { PorcupineResult } from './porcupine.js';
import type { RecipesReport } from './recipes-phase.js';

export const ROLES = ['fenced', 'unfenced', 'election', 'semaphore', 'rwlock'] as const satisfies readonly CoreRole[];
export const RECIPE_ROLES = ['barrier', 'dbarrier', 'multilock'] as const satisfies readonly RecipeRole[];
/** The semaphore's permits: fewer than its workers, so that they queue. */
export const PERMITS = 2;

/** What the summary says of the run itself, beside its phases. */
export interface RunFacts {
  fatal?: string;
  seed: number;
  quick: boolean;
  chaosSeconds: number;
  ttl: number;
  startedAt: string;
  /** now() when the run started. */
  t0: number;
  /** `etcd --version`'s first line. */
  etcd: string;
  netns: { ok: boolean; why?: string };
}

export interface PhaseResult {
  name: string;
  chaosMs: number;
  workers: Record<Role, number>;
  operations: {
    cycles: number;
    fencedAcquisitions: number;
    ledgerWritesAccepted: number;
    ledgerWritesRefused: number;
    etcdIncrementsAccepted: number;
    unfencedHolds: number;
    electionTerms: number;
    semaphoreHolds: number;
    rwReadHolds: number;
    rwWriteHolds: number;
  };
  faults: Record<string, number>;
  faultLog: { kind: string; target: string; startS: number; ms: number; note?: string }[];
  fenced: FencedReport;
  carefulSkips: number;
  etcdCounter: EtcdCounterReport;
  unfenced: OverlapReport;
  fencedHolds: OverlapReport;
  election: ElectionReport;
  /** The semaphore's resource (at most `capacity` holders served at once) and its holders' intervals. */
  semaphore: PermitsReport;
  semaphoreHolds: ExcessReport;
  /** The RW lock's resource (a writer served alone) and its holders' intervals (a writer overlapping anyone). */
  rw: RWReport;
  rwHolds: OverlapReport;
  /**
   * Mutual exclusion judged on etcd's history (revisions.ts): the observer's record of every key, and
   * each grant's witness revision against the keys older than it still alive then. No clock.
   */
  /** The fenced ledger's twin on PostgreSQL through PostgresFence, and its unfenced shadow (null: no PostgreSQL). */
  pgLedger: PgLedgerReport | null;
  /** The holds made stale (nemesis stale-write) and what each fence did with their writes. */
  stale: Omit<StaleWritesReport, 'violations'>;
  /** Porcupine's verdict on the etcd counter's and the fenced ledger's operations (chaos/porcupine.ts). */
  porcupine: PorcupineResult[];
  /** From the faults' end (cluster healthy) to the first term begun, 0 if one was under way; null: none within the bound. */
  leaderlessAfterFaultsMs: number | null;
  recipes: RecipesReport;
  revisions: {
    keys: number;
    /** How the keys went (delete, with their lease, by the operator; never: still there at the end). */
    byHow: Record<string, number>;
    witnesses: Record<CoreRole, number>;
    /** Grants made while an older key they waited for still existed, per role. */
    violations: Record<CoreRole, number>;
    tokenOrderViolations: number;
    /** Holds lost to a delete of their key while its lease lived that neither they nor the operator made. */
    foreignDeletes: number;
    observerResumes: number;
  };
  /** How far the observer's record goes; `beyond`: grants and reads after its end, not judged. */
  record: RecordExtent & { beyond: number };
  /** How many things each check judged (a check that judged nothing in the whole run fails it). */
  judged: Record<string, number>;
  failover: { kind: string; atS: number; raftMs?: number; firstAcquireMs?: number; newLeaderMs?: number }[];
  /** The longest stretch without an acquisition, and when it began (s into the phase). */
  liveness: Record<CoreRole, { ms: number; atS: number }>;
  sessionsLost: Record<string, number>;
  /** Sessions (and calls) that etcd told their lease was gone; `early`: while the client's deadline still lay ahead. */
  leaseGone: LeaseExpiryReport & {
    list: { worker: string; lease: string; leftMs: number; atS: number }[];
    /** "failed to revoke lease ... timed out" lines in the members' logs (a deposed leader's stale batch). */
    revokeTimeouts: { member: string; atS: number; lease: string }[];
  };
  errors: Record<string, number>;
  unexpectedErrors: string[];
  /** Lock waits longer than 12 s, each with the queue at that moment (a stuck queue shows here). */
  stuckWaits: string[];
  violations: Violation[];
  cleanup: {
    ok: boolean;
    workersNotExited: string[];
    leasesAtExit: number;
    leasesUnaccounted: string[];
    leasesLeft: string[];
    keysLeft: string[];
    leaseDrainMs: number;
  };
  problems: string[];
  /** The largest error bound of a worker's clock mapping onto the parent's, ms. */
  clockErrMs: number;
}

export function summarize(results: PhaseResult[], run: RunFacts) {
  const failures = verdict(
    results.map((r) => ({
      name: r.name,
      violations: r.violations,
      unexpectedErrors: r.unexpectedErrors,
      stuckWaits: r.stuckWaits,
      problems: r.problems,
      cleanupOk: r.cleanup.ok,
      record: r.record,
      judged: r.judged,
    })),
    run.fatal,
  );
  const fencedViolations = results.reduce((n, r) => n + r.fenced.violations.length, 0);
  const etcdViolations = results.reduce((n, r) => n + r.etcdCounter.violations.length, 0);
  const electionViolations = results.reduce((n, r) => n + r.election.violations.length, 0);
  const semaphoreViolations = results.reduce((n, r) => n + r.semaphore.violations.length + r.semaphoreHolds.unexplained, 0);
  const rwViolations = results.reduce((n, r) => n + r.rw.violations.length + r.rwHolds.unexplained, 0);
  const cleanupOk = results.length > 0 && results.every((r) => r.cleanup.ok);
  const sum = (f: (r: PhaseResult) => number): number => results.reduce((n, r) => n + f(r), 0);
  const faults: Record<string, number> = {};
  for (const r of results) for (const [k, v] of Object.entries(r.faults)) faults[k] = (faults[k] ?? 0) + v;
  return {
    ok: failures.length === 0,
    failures,
    seed: run.seed,
    mode: run.quick ? 'quick' : `${run.chaosSeconds / 60} minutes`,
    ttlSeconds: run.ttl,
    command: `npm run chaos -- ${run.quick ? '--quick' : `--minutes ${run.chaosSeconds / 60}`} --seed ${run.seed}`,
    startedAt: run.startedAt,
    durationS: round((now() - run.t0) / 1000),
    node: process.version,
    etcd: run.etcd,
    netns: run.netns.ok ? 'used' : `unavailable (${run.netns.why})`,
    totals: {
      operations: sum((r) => r.operations.cycles),
      faults: sum((r) => Object.values(r.faults).reduce((a, b) => a + b, 0)),
      faultsByKind: faults,
      fencedViolations,
      etcdCounterViolations: etcdViolations,
      electionViolations,
      semaphoreViolations,
      rwViolations,
      ledgerWritesRefused: sum((r) => r.fenced.writesRefused),
      longestUnfencedOverlapMs: Math.max(0, ...results.map((r) => r.unfenced.longestMs)),
      unexplainedUnfencedOverlaps: sum((r) => r.unfenced.unexplained),
      longestLeaderTermOverlapMs: Math.max(0, ...results.map((r) => r.election.overlaps.longestMs)),
      unexplainedLeaderTermOverlaps: sum((r) => r.election.overlaps.unexplained),
      violations: sum((r) => r.violations.length),
      unexplainedFencedHoldOverlaps: sum((r) => r.fencedHolds.unexplained),
      unexplainedSemaphoreOverlaps: sum((r) => r.semaphoreHolds.unexplained),
      unexplainedRWOverlaps: sum((r) => r.rwHolds.unexplained),
      overlapsByDeposedLeader: sum((r) => overlapsByDeposedLeader(r).reduce((a, b) => a + b, 0)),
      semaphoreCarefulRefused: sum((r) => r.semaphore.carefulRefused),
      rwCarefulRefused: sum((r) => r.rw.carefulRefused),
      leaseExpiredEarly: sum((r) => r.leaseGone.violations.length),
      leaseRevokedByDeposedLeader: sum((r) => r.leaseGone.byDeposedLeader),
      leaseRevokedByDeposedLeaderLate: sum((r) => r.leaseGone.byDeposedLeaderLate),
      carefulWritesRefused: sum((r) => r.fenced.carefulRefused),
      cleanupOk,
      grantViolationsByRevision: sum((r) => Object.values(r.revisions.violations).reduce((a, b) => a + b, 0)),
      tokenOrderViolations: sum((r) => r.revisions.tokenOrderViolations),
      witnesses: sum((r) => Object.values(r.revisions.witnesses).reduce((a, b) => a + b, 0)),
      porcupineChecked: sum((r) => r.porcupine.filter((p) => p.result === 'Ok').length),
      porcupineFailed: sum((r) => r.porcupine.filter((p) => p.result !== 'Ok').length),
      keysObserved: sum((r) => r.revisions.keys),
      unexpectedErrors: sum((r) => r.unexpectedErrors.length),
      stuckWaits: sum((r) => r.stuckWaits.length),
      harnessProblems: sum((r) => r.problems.length),
    },
    phases: results,
  };
}

/**
 * Overlaps attributed to a deposed Raft leader's revoke of a live lease (etcd 15247): explained, so
 * not violations, but shown. Unfenced / fenced / election / semaphore / rwlock.
 */
function overlapsByDeposedLeader(r: PhaseResult): number[] {
  return [r.unfenced, r.fencedHolds, r.election.overlaps, r.semaphoreHolds, r.rwHolds].map((o) => o.byDeposedLeader);
}

export function printTable(results: PhaseResult[]): void {
  const rows: string[][] = [['', ...results.map((r) => r.name)]];
  const row = (label: string, f: (r: PhaseResult) => unknown): void => {
    rows.push([label, ...results.map((r) => String(f(r)))]);
  };
  row('chaos time (s)', (r) => round(r.chaosMs / 1000));
  row('workers (fenced/unfenced/election/semaphore/rwlock)', (r) => ROLES.map((k) => r.workers[k]).join('/'));
  row('recipe workers (barrier/dbarrier/multilock)', (r) => RECIPE_ROLES.map((k) => r.workers[k]).join('/'));
  row(
    'barrier: holds, passes judged, violations',
    (r) => `${r.recipes.barrier.holds}, ${r.recipes.barrier.passes - r.recipes.barrier.unjudged}, ${r.recipes.barrier.violations}`,
  );
  row(
    'double barrier: enters, leaves judged, violations',
    (r) => `${r.recipes.dbarrier.enters - r.recipes.dbarrier.unjudged}, ${r.recipes.dbarrier.leaves}, ${r.recipes.dbarrier.violations}`,
  );
  row(
    'lockAll: grants, failures, violations',
    (r) => `${r.recipes.multilock.grants}, ${r.recipes.multilock.failures}, ${r.recipes.multilock.violations}`,
  );
  row(
    '  barrier wait, double-barrier enter p99 (ms)',
    (r) => `${r.recipes.barrier.waitP99Ms ?? '-'}, ${r.recipes.dbarrier.enterP99Ms ?? '-'}`,
  );
  row('operations (lock cycles + terms)', (r) => r.operations.cycles);
  row('  fenced ledger writes accepted', (r) => r.fenced.writesAccepted);
  row('  fenced ledger writes refused (stale token)', (r) => `${r.fenced.writesRefused} (+${r.fenced.readsRefused} reads)`);
  row('  careful writes refused / skipped', (r) => `${r.fenced.carefulRefused} / ${r.carefulSkips}`);
  row(
    '  etcd ownerCompare increments',
    (r) =>
      `${r.etcdCounter.ledgerEntries} (refused ${r.etcdCounter.rejected}, unknown ${r.etcdCounter.unknownResolvedApplied + r.etcdCounter.unknownResolvedNotApplied})`,
  );
  row('  unfenced holds', (r) => r.operations.unfencedHolds);
  row('  election terms (lost)', (r) => `${r.election.terms} (${r.election.termsLost})`);
  row(`  semaphore holds (${PERMITS} permits)`, (r) => r.operations.semaphoreHolds);
  row(
    '    permit writes accepted / refused',
    (r) =>
      `${r.semaphore.writesAccepted} / ${r.semaphore.writesRefused} (enters refused ${r.semaphore.entersRefused}, evicted ${r.semaphore.evicted})`,
  );
  row('  rwlock holds read / write', (r) => `${r.operations.rwReadHolds} / ${r.operations.rwWriteHolds}`);
  row(
    '    rw reads / writes accepted (refused)',
    (r) => `${r.rw.readsAccepted} (${r.rw.readsRefused}) / ${r.rw.writesAccepted} (${r.rw.writesRefused})`,
  );
  const kinds = [...new Set(results.flatMap((r) => Object.keys(r.faults)))].sort();
  row('faults', (r) => Object.values(r.faults).reduce((a, b) => a + b, 0));
  for (const k of kinds) row(`  ${k}`, (r) => r.faults[k] ?? 0);
  row('VIOLATIONS (all checks)', (r) => r.violations.length);
  row(
    '  fenced / etcd / election',
    (r) => `${r.fenced.violations.length} / ${r.etcdCounter.violations.length} / ${r.election.violations.length}`,
  );
  row(
    '  semaphore / rwlock (resource, careful refused)',
    (r) => `${r.semaphore.violations.length} / ${r.rw.violations.length} (careful ${r.semaphore.carefulRefused} / ${r.rw.carefulRefused})`,
  );
  row(
    'grants judged by revision (witnesses), violations',
    (r) =>
      `${Object.values(r.revisions.witnesses).reduce((a, b) => a + b, 0)}, ${Object.values(r.revisions.violations).reduce((a, b) => a + b, 0)}`,
  );
  row(
    '  keys observed, how they went',
    (r) =>
      `${r.revisions.keys}: ${Object.entries(r.revisions.byHow)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')}`,
  );
  row('  token-order violations', (r) => r.revisions.tokenOrderViolations);
  row('  held keys deleted by another (not the operator)', (r) => r.revisions.foreignDeletes);
  row('PostgreSQL ledger: committed / refused by the fence / failed', (r) =>
    r.pgLedger
      ? `${r.pgLedger.committed} / ${r.pgLedger.refusedByFence} / ${r.pgLedger.failed} (value ${r.pgLedger.value}, ${r.pgLedger.violations.length} violations)`
      : 'no PostgreSQL',
  );
  row('  unfenced shadow: writes, lost updates', (r) => (r.pgLedger ? `${r.pgLedger.shadowWrites}, ${r.pgLedger.shadowLostUpdates}` : '-'));
  row(
    'stale holds: writes judged by ledger / etcd / PostgreSQL',
    (r) => `${r.stale.holds}: ${r.stale.judged.ledger} / ${r.stale.judged.etcd} / ${r.pgLedger ? r.stale.judged.pg : '-'}`,
  );
  row('record: revision reached (of)', (r) =>
    r.record.reached >= r.record.wanted
      ? `${r.record.reached}`
      : `${r.record.reached} of ${r.record.wanted}: INCOMPLETE (${r.record.beyond} not judged)`,
  );
  row('leaderless after the faults ended (ms)', (r) => r.leaderlessAfterFaultsMs ?? 'none within the bound');
  row(
    'porcupine (operations: verdict)',
    (r) => r.porcupine.map((p) => `${p.name.replace(`${r.name}-`, '')} ${p.operations}: ${p.result}`).join(', ') || 'not run',
  );
  row('  lease gone before client deadline', (r) => `${r.leaseGone.violations.length} (of ${r.leaseGone.reports} lease_gone)`);
  row(
    'lease revoked by a deposed leader (etcd 15247)',
    (r) =>
      `${r.leaseGone.byDeposedLeader} (late wave ${r.leaseGone.byDeposedLeaderLate})${r.leaseGone.latestMs !== undefined && r.leaseGone.latestMs > 0 ? `, up to ${r.leaseGone.latestMs} ms early` : ''}`,
  );
  row('stale holders from a deposed leader (etcd 15247) unf/fen/elect/sem/rw', (r) => overlapsByDeposedLeader(r).join('/'));
  row('unfenced stale holders (unexplained)', (r) => `${r.unfenced.overlaps} (${r.unfenced.unexplained})`);
  row('fenced stale holders (unexplained)', (r) => `${r.fencedHolds.overlaps} (${r.fencedHolds.unexplained})`);
  row(
    `over ${PERMITS} permit holders (unexplained), max at once`,
    (r) => `${r.semaphoreHolds.overlaps} (${r.semaphoreHolds.unexplained}), ${r.semaphoreHolds.maxConcurrent}`,
  );
  row('rw stale holders vs a writer (unexplained)', (r) => `${r.rwHolds.overlaps} (${r.rwHolds.unexplained})`);
  row('longest unfenced overlap (ms)', (r) => `${r.unfenced.longestMs}${r.unfenced.worst[0] ? ` [${r.unfenced.worst[0].cause}]` : ''}`);
  row(
    'stale leaders (unexplained), longest ms',
    (r) => `${r.election.overlaps.overlaps} (${r.election.overlaps.unexplained}), ${r.election.overlaps.longestMs}`,
  );
  row('raft failover p50/max (ms)', (r) => {
    const v = r.failover.filter((f) => f.raftMs !== undefined).map((f) => f.raftMs!);
    return v.length ? `${percentile(v, 50)}/${Math.max(...v)} (n=${v.length})` : '-';
  });
  row('first lock/term after etcd leader loss p50/max', (r) => {
    const v = r.failover.filter((f) => f.kind !== 'leader-worker-crash' && f.firstAcquireMs !== undefined).map((f) => f.firstAcquireMs!);
    return v.length ? `${percentile(v, 50)}/${Math.max(...v)}` : '-';
  });
  row('new leader after leader crash p50/max (ms)', (r) => {
    const v = r.failover.filter((f) => f.newLeaderMs !== undefined).map((f) => f.newLeaderMs!);
    return v.length ? `${percentile(v, 50)}/${Math.max(...v)} (n=${v.length})` : '-';
  });
  row('longest stall fenced/unfenced/election (ms)', (r) => `${r.liveness.fenced.ms}/${r.liveness.unfenced.ms}/${r.liveness.election.ms}`);
  row('longest stall semaphore/rwlock (ms)', (r) => `${r.liveness.semaphore.ms}/${r.liveness.rwlock.ms}`);
  row(
    'sessions lost',
    (r) =>
      Object.entries(r.sessionsLost)
        .map(([k, v]) => `${k}:${v}`)
        .join(' ') || '0',
  );
  row('unexpected errors', (r) => r.unexpectedErrors.length);
  row('lock waits over 12 s', (r) => r.stuckWaits.length);
  row('harness problems', (r) => r.problems.length);
  row('cleanup (keys/leases/exits)', (r) =>
    r.cleanup.ok
      ? `ok (leases drained in ${r.cleanup.leaseDrainMs} ms)`
      : `FAILED keys=${r.cleanup.keysLeft.length} leases=${r.cleanup.leasesLeft.length} stuck=${r.cleanup.workersNotExited.length}`,
  );
  const width = rows.map((r) => r[0]!.length).reduce((a, b) => Math.max(a, b), 0);
  const colw = results.map((_, i) => Math.max(...rows.map((r) => r[i + 1]!.length)));
  console.log('');
  for (const r of rows)
    console.log(
      `${r[0]!.padEnd(width)}  ${r
        .slice(1)
        .map((c, i) => c.padEnd(colw[i]!))
        .join('  ')}`,
    );
  console.log('');
  for (const r of results) {
    // Up to 8 of each kind, so that one abundant kind does not hide the others.
    const byCheck = new Map<string, Violation[]>();
    for (const v of r.violations) byCheck.set(v.check, [...(byCheck.get(v.check) ?? []), v]);
    for (const [check, vs] of byCheck) {
      for (const v of vs.slice(0, 8)) console.log(`VIOLATION [${r.name}] ${check}: ${v.detail}`);
      if (vs.length > 8) console.log(`VIOLATION [${r.name}] ${check}: ... and ${vs.length - 8} more (see the JSON)`);
    }
    for (const e of r.unexpectedErrors.slice(0, 10)) console.log(`unexpected [${r.name}]: ${e}`);
    for (const p of r.problems) console.log(`harness [${r.name}]: ${p}`);
    for (const w of r.stuckWaits.slice(0, 5)) console.log(`stuck [${r.name}]: ${w}`);
    for (const w of r.unfenced.worst) console.log(`unfenced overlap [${r.name}] ${w.ms} ms ${w.a} / ${w.b}: ${w.cause}`);
    for (const w of r.fencedHolds.worst) console.log(`fenced-hold overlap [${r.name}] ${w.ms} ms ${w.a} / ${w.b}: ${w.cause}`);
    for (const w of r.election.overlaps.worst) console.log(`leader-term overlap [${r.name}] ${w.ms} ms ${w.a} / ${w.b}: ${w.cause}`);
    for (const w of r.semaphoreHolds.worst)
      console.log(`over-${PERMITS}-permits overlap [${r.name}] ${w.ms} ms ${w.a} / ${w.b}: ${w.cause}`);
    for (const w of r.rwHolds.worst) console.log(`rw overlap [${r.name}] ${w.ms} ms ${w.a} / ${w.b}: ${w.cause}`);
    if (r.cleanup.leasesUnaccounted.length > 0)
      console.log(
        `note [${r.name}]: ${r.cleanup.leasesUnaccounted.length} lease(s) of cleanly stopped workers were still present right after exit`,
      );
  }
}
