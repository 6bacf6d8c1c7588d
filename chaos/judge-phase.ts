// A phase's verdict: what the workers, the observer, etcd's logs and the PostgreSQL ledger recorded,
// judged by the pure checker (checker/*.ts) into one PhaseResult; main.ts runs the phase and hands it here.
import { join } from 'node:path';
import type pg from 'pg';
import { checkPgLedger, type PgLedgerReport } from './pg-ledger.js';
import {
  checkElection,
  checkFencedLedger,
  checkLeaseExpiries,
  checkPermits,
  checkRW,
  excessViolations,
  findExcess,
  findOverlaps,
  overlapViolations,
  rwConflict,
  tokenOrderViolations,
  longestGap,
  round,
  checkStaleWrites,
  incompleteRecord,
  withinRecord,
  type EtcdCounterReport,
  type HeldInterval,
  type LeaseEvidence,
  type RecordExtent,
  type Violation,
} from './checker/index.js';
import { now, type CoreRole, type Role } from './common.js';
import { judgeRecipes } from './recipes-phase.js';
import { PERMITS, ROLES, type PhaseResult } from './report.js';
import type { PhasePlan } from './plans.js';
import { readRevokeTimeouts } from './etcd-logs.js';
import type { FencedStore } from './fenced-store.js';
import type { Nemesis } from './nemesis.js';
import { checkLinearizable, type LinearOp, type PorcupineResult } from './porcupine.js';
import { checkGrantsByRevision, foreignDeletes, type GrantRule, type GrantWitness, type KeyEnd, type KeyLife } from './revisions.js';
import type { History } from './run-history.js';

/** Everything a finished phase left to judge: its records, etcd's final word and the cleanup's findings. */
export interface PhaseEvidence {
  plan: PhasePlan;
  phaseDir: string;
  runId: string;
  /** The run's JSON file: Porcupine's files are written beside it. */
  jsonFile: string;
  etcdVersion: string;
  workerCounts: Record<Role, number>;
  names: Record<Role, string>;
  history: History;
  store: FencedStore;
  nemesis: Nemesis;
  observerResumes: number;
  /** Every key's life under the phase's prefix, from the observer. */
  lives: KeyLife[];
  /** How far that record goes: nothing after its end is judged on it. */
  record: RecordExtent;
  start: number;
  end: number;
  leaderlessMs: number | undefined;
  leaderlessBoundMs: number;
  etcdCounter: EtcdCounterReport;
  /** The etcd counter's ledger keys: the guarded increments applied. */
  etcdApplied: ReadonlySet<string>;
  counterOps: LinearOp[];
  cleanup: {
    notExited: string[];
    leasesAtExit: string[];
    unaccounted: string[];
    leasesLeft: string[];
    keysLeft: string[];
    leaseDrainMs: number;
  };
  pgAdmin: pg.Pool | undefined;
  say: (msg: string) => void;
}

/** Judges a finished phase: every check of the checker over its evidence, in one PhaseResult. */
export async function judgePhase(evidence: PhaseEvidence): Promise<PhaseResult> {
  const { plan, phaseDir, runId, jsonFile, etcdVersion: runEtcdVersion, workerCounts, names, history, store, nemesis, lives } = evidence;
  const { record, start, end, leaderlessMs, leaderlessBoundMs, etcdCounter, etcdApplied, counterOps, pgAdmin, say } = evidence;
  const { notExited, leasesAtExit, unaccounted, leasesLeft, keysLeft, leaseDrainMs } = evidence.cleanup;
  const faults = nemesis.faults;
  // The members' own word on revocations that timed out (a deposed leader's stale batch still
  // draining, see etcd-logs.ts), on the common clock: etcd logs wall-clock time, `now()` is
  // timeOrigin + performance.now(), so the two differ by the drift since this process started.
  const wallOffset = Date.now() - now();
  const memberLogs = [0, 1, 2].map((i) => ({
    member: `m${i}`,
    file: plan.name === 'loopback' ? join(phaseDir, `m${i}.log`) : join(phaseDir, 'etcd', `m${i}.log`),
  }));
  const revokeTimeouts = await readRevokeTimeouts(memberLogs, (wall) => wall - wallOffset);
  // etcd's word on leases, for the etcd 15247 attribution of overlaps (checker/excuses.ts deposedRevokeOf()).
  // Each hold's witness revision (worker.ts witness()): tokens are revisions, unique across roles.
  const witnessRev = new Map<bigint, bigint>();
  for (const role of ROLES) for (const w of history.witnesses[role]) witnessRev.set(w.token, w.rev);
  for (const h of [...ROLES.flatMap((r) => (r === 'election' ? [] : history.held[r])), ...history.terms]) {
    const rev = witnessRev.get(h.token);
    if (rev !== undefined) h.witnessRev = rev;
  }
  const leases: LeaseEvidence = {
    leaseGone: history.leaseGone,
    staleRevokes: revokeTimeouts,
    etcdVersion: runEtcdVersion,
    keys: lives,
    ...(incompleteRecord(plan.name, record) ? { recordEnd: record.reached } : {}),
  };
  // What is judged on the observer's record: only grants and reads it covers (record.ts).
  let beyondRecord = 0;
  const recorded = <T>(items: T[], revisionOf: (item: T) => bigint | undefined): T[] => {
    const { kept, beyond } = withinRecord(items, revisionOf, record);
    beyondRecord += beyond;
    return kept;
  };
  const witnesses = Object.fromEntries(ROLES.map((r) => [r, recorded(history.witnesses[r], (w) => w.rev)])) as Record<
    CoreRole,
    GrantWitness[]
  >;
  const recipeEvents = recorded(history.recipes, (e) => ('rev' in e ? BigInt(e.rev) : undefined));
  const rules: Record<CoreRole, GrantRule> = {
    fenced: { kind: 'exclusive' },
    unfenced: { kind: 'exclusive' },
    election: { kind: 'exclusive' },
    semaphore: { kind: 'permits', permits: PERMITS },
    rwlock: { kind: 'rw' },
  };
  const checkName: Record<CoreRole, string> = {
    fenced: 'fenced-grant-by-revision',
    unfenced: 'unfenced-grant-by-revision',
    election: 'election-grant-by-revision',
    semaphore: 'semaphore-over-grant',
    rwlock: 'rw-grant-by-revision',
  };
  const byRevision = Object.fromEntries(
    ROLES.map((r) => [r, checkGrantsByRevision(lives, witnesses[r], rules[r], checkName[r])]),
  ) as Record<CoreRole, Violation[]>;
  const foreignJudged = ROLES.map((r) =>
    foreignDeletes(r === 'election' ? history.terms : history.held[r], lives, `${r}-key-deleted-by-another`),
  );
  const foreign = foreignJudged.flatMap((f) => f.violations);
  const tokenOrder = [
    ...tokenOrderViolations(history.held.fenced, nemesis.faults, 'fenced-token-order'),
    ...tokenOrderViolations(history.held.unfenced, nemesis.faults, 'unfenced-token-order'),
    ...tokenOrderViolations(history.held.rwlock, nemesis.faults, 'rw-token-order', rwConflict),
  ];
  const porcupineFile = `${jsonFile.replace(/\.json$/, '')}.porcupine-${plan.name}.json`;
  let porcupine: PorcupineResult[] = [];
  try {
    porcupine = await checkLinearizable(
      [
        { name: `${plan.name}-etcd-counter`, model: 'counter', ops: counterOps },
        { name: `${plan.name}-fenced-ledger`, model: 'fenced-register', ops: history.linear.ledger },
      ],
      porcupineFile,
    );
  } catch (err) {
    nemesis.problems.push(`porcupine could not check: ${(err as Error).message.split('\n')[0]}`);
  }
  const porcupineViolations: Violation[] = porcupine
    .filter((r) => r.result !== 'Ok')
    .map((r) => ({
      check: 'porcupine-not-linearizable',
      detail: `${r.name} (${r.operations} operations): ${r.result}${r.visualization ? `; see ${r.visualization}` : ''}`,
    }));
  for (const r of porcupine) if (r.visualization) say(`porcupine: ${r.name} is ${r.result}: ${r.visualization}`);
  let pgLedger: PgLedgerReport | null = null;
  if (pgAdmin) {
    const phaseKey = `${runId}/${plan.name}`;
    const num = (r: { rows: unknown[] }): number => Number((r.rows[0] as { value?: string } | undefined)?.value ?? 0);
    const ops = await pgAdmin.query('SELECT op_id, value, token FROM chaos_ops WHERE phase = $1', [phaseKey]);
    pgLedger = checkPgLedger(
      num(await pgAdmin.query('SELECT value FROM chaos_ledger WHERE phase = $1', [phaseKey])),
      (ops.rows as { op_id: string; value: string; token: string }[]).map((o) => ({
        opId: o.op_id,
        value: Number(o.value),
        token: BigInt(o.token),
      })),
      history.pgIncrements,
      num(await pgAdmin.query('SELECT value FROM chaos_shadow WHERE phase = $1', [phaseKey])),
    );
  }
  const byHow: Record<string, number> = {};
  for (const l of lives) {
    const how: KeyEnd | 'never' = l.deleted === undefined ? 'never' : (l.how ?? 'unknown');
    byHow[how] = (byHow[how] ?? 0) + 1;
  }
  const fenced = checkFencedLedger(store.register('ledger'));
  const election = checkElection(history.terms, store.register('election'), faults, leases);
  // What a holder did under its hold, by token (tokens are revisions: unique across workloads). Only
  // a holder that did none of it may be excused as a ghost that recorded its start late (lateStart).
  const actedTokens = new Set<bigint>([
    ...store
      .register('ledger')
      .log.filter((e) => e.ok && e.op === 'write')
      .map((e) => e.token),
    ...history.etcdIncrements.filter((e) => e.outcome !== 'rejected').map((e) => e.token),
    ...store.permits.log.filter((e) => e.ok && e.op === 'write').map((e) => e.token),
    ...store.rw.log.filter((e) => e.ok && e.op !== 'enter').map((e) => e.token),
  ]);
  const acted = (h: HeldInterval): boolean => actedTokens.has(h.token);
  const unfencedFound = findOverlaps(history.held.unfenced, faults, undefined, acted, leases);
  const fencedFound = findOverlaps(history.held.fenced, faults, undefined, acted, leases);
  const unfenced = unfencedFound.report;
  const fencedHolds = fencedFound.report;
  const semaphore = checkPermits(store.permits);
  const semaphoreFound = findExcess(history.held.semaphore, PERMITS, faults, acted, leases);
  const rw = checkRW(store.rw);
  const rwFound = findOverlaps(history.held.rwlock, faults, rwConflict, acted, leases);
  const leaseExpiries = checkLeaseExpiries(history.leaseGone, faults, revokeTimeouts);
  const recipes = judgeRecipes(recipeEvents, lives, names.dbarrier, workerCounts.dbarrier);
  const stale = checkStaleWrites(
    history.staleHolds,
    store.register('ledger').log,
    history.etcdIncrements,
    etcdApplied,
    pgAdmin ? history.pgIncrements : undefined,
  );
  const leaseViolations = leaseExpiries.violations;

  const failover = nemesis.failovers.map((f) => {
    const out: PhaseResult['failover'][number] = { kind: f.kind, atS: round((f.at - start) / 1000) };
    if (f.raftMs !== undefined) out.raftMs = f.raftMs;
    const all = ROLES.flatMap((r) => history.acquisitions[r]).filter((t) => t > f.at);
    if (all.length > 0) out.firstAcquireMs = Math.round(Math.min(...all) - f.at);
    if (f.kind === 'leader-worker-crash') {
      const next = history.termStarts.filter((t) => t.at > f.at).sort((a, b) => a.at - b.at)[0];
      if (next) out.newLeaderMs = Math.round(next.at - f.at);
    }
    return out;
  });

  const byKind: Record<string, number> = {};
  for (const f of faults) byKind[f.kind] = (byKind[f.kind] ?? 0) + 1;
  const violations = [
    ...fenced.violations,
    ...etcdCounter.violations,
    ...election.violations,
    ...overlapViolations(unfencedFound.overlaps, 'unfenced-overlap'),
    ...overlapViolations(fencedFound.overlaps, 'fenced-hold-overlap'),
    ...semaphore.violations,
    ...excessViolations(semaphoreFound.excess, PERMITS, 'semaphore-overlap'),
    ...rw.violations,
    ...overlapViolations(rwFound.overlaps, 'rw-overlap'),
    ...leaseViolations,
    ...ROLES.flatMap((r) => byRevision[r]),
    ...tokenOrder,
    ...foreign,
    ...(pgLedger?.violations ?? []),
    ...(leaderlessMs === undefined
      ? [
          {
            check: 'election-leaderless',
            detail: `no leader within ${leaderlessBoundMs} ms after the faults ended and the cluster was healthy`,
          },
        ]
      : []),
    ...porcupineViolations,
    ...recipes.violations,
    ...stale.violations,
  ];
  // How many things each check judged: a check that judged nothing in the whole run fails it (verdict.ts).
  const ledgerWrites = store.register('ledger').log.filter((e) => e.op === 'write');
  const judged: Record<string, number> = {
    'fenced-ledger': fenced.writesAccepted,
    'careful-write-refused': ledgerWrites.filter((e) => e.careful).length,
    'fenced-stale-write': stale.judged.ledger,
    'etcd-counter': etcdCounter.ledgerEntries,
    'etcd-stale-increment': stale.judged.etcd,
    election: election.terms,
    'unfenced-overlap': history.held.unfenced.length,
    'fenced-hold-overlap': history.held.fenced.length,
    'semaphore-resource': store.permits.log.filter((e) => e.op === 'write').length,
    'semaphore-overlap': history.held.semaphore.length,
    'rw-resource': store.rw.log.length,
    'rw-overlap': history.held.rwlock.length,
    'lease-expired-early': history.leaseGone.length,
    ...Object.fromEntries(ROLES.map((r) => [checkName[r], witnesses[r].length])),
    'fenced-token-order': history.held.fenced.length,
    'unfenced-token-order': history.held.unfenced.length,
    'rw-token-order': history.held.rwlock.length,
    'key-deleted-by-another': foreignJudged.reduce((n, f) => n + f.judged, 0),
    ...Object.fromEntries(porcupine.map((p) => [`porcupine-${p.name.slice(plan.name.length + 1)}`, p.operations])),
    'barrier-passed-before-release': recipes.report.barrier.passes - recipes.report.barrier.unjudged,
    'dbarrier-entered-early': recipes.report.dbarrier.enters - recipes.report.dbarrier.unjudged,
    'dbarrier-left-early': recipes.report.dbarrier.leaves,
    multilock: recipes.report.multilock.grants + recipes.report.multilock.failures,
    ...(pgLedger ? { 'pg-ledger': pgLedger.ops, 'pg-stale-write': stale.judged.pg } : {}),
  };
  const cleanupOk = notExited.length === 0 && leasesLeft.length === 0 && keysLeft.length === 0;
  const result: PhaseResult = {
    name: plan.name,
    chaosMs: Math.round(end - start),
    workers: workerCounts,
    operations: {
      cycles: history.cycles,
      fencedAcquisitions: history.acquisitions.fenced.length,
      ledgerWritesAccepted: fenced.writesAccepted,
      ledgerWritesRefused: fenced.writesRefused,
      etcdIncrementsAccepted: etcdCounter.ledgerEntries,
      unfencedHolds: history.held.unfenced.length,
      electionTerms: history.terms.length,
      semaphoreHolds: history.held.semaphore.length,
      rwReadHolds: history.held.rwlock.filter((i) => i.mode === 'read').length,
      rwWriteHolds: history.held.rwlock.filter((i) => i.mode === 'write').length,
    },
    faults: byKind,
    faultLog: faults.map((f) => ({
      kind: f.kind,
      target: f.target,
      startS: round((f.start - start) / 1000),
      ms: Math.round(f.end - f.start),
      note: f.note,
    })),
    fenced,
    carefulSkips: history.carefulSkips.length,
    etcdCounter,
    unfenced,
    fencedHolds,
    election,
    semaphore,
    semaphoreHolds: semaphoreFound.report,
    rw,
    rwHolds: rwFound.report,
    leaderlessAfterFaultsMs: leaderlessMs ?? null,
    recipes: recipes.report,
    pgLedger,
    stale: { holds: stale.holds, judged: stale.judged },
    porcupine,
    revisions: {
      keys: lives.length,
      byHow,
      witnesses: Object.fromEntries(ROLES.map((r) => [r, history.witnesses[r].length])) as Record<CoreRole, number>,
      violations: Object.fromEntries(ROLES.map((r) => [r, byRevision[r].length])) as Record<CoreRole, number>,
      tokenOrderViolations: tokenOrder.length,
      foreignDeletes: foreign.length,
      observerResumes: evidence.observerResumes,
    },
    record: { ...record, beyond: beyondRecord },
    judged,
    failover,
    liveness: Object.fromEntries(
      ROLES.map((role) => {
        const g = longestGap(history.acquisitions[role], start, end);
        return [role, { ms: g.ms, atS: round((g.at - start) / 1000) }];
      }),
    ) as PhaseResult['liveness'],
    sessionsLost: Object.fromEntries(history.sessionsLost),
    leaseGone: {
      ...leaseExpiries,
      list: history.leaseGone.map((r) => ({
        worker: r.worker,
        lease: r.lease,
        leftMs: round(r.leftMs),
        atS: round((r.at - start) / 1000),
      })),
      revokeTimeouts: revokeTimeouts.map((e) => ({ member: e.member, atS: round((e.at - start) / 1000), lease: e.lease })),
    },
    errors: Object.fromEntries([...history.errors].sort((a, b) => b[1] - a[1])),
    unexpectedErrors: history.unexpectedErrors,
    stuckWaits: history.stuck,
    violations,
    cleanup: {
      ok: cleanupOk,
      workersNotExited: notExited,
      leasesAtExit: leasesAtExit.length,
      leasesUnaccounted: unaccounted,
      leasesLeft,
      keysLeft,
      leaseDrainMs,
    },
    problems: nemesis.problems,
    clockErrMs: round(history.clockErrMs * 1000) / 1000,
  };
  say(
    `phase ${plan.name}: ${history.cycles} cycles, ${faults.length} faults, ${violations.length} violations, ` +
      `longest unfenced overlap ${unfenced.longestMs} ms, cleanup ${cleanupOk ? 'ok' : 'FAILED'}`,
  );
  return result;
}
