// The shape of one run's results (also the --json output), and the goals judged from it.
import type { ContendedResult } from './contended.js';
import type { ElectionPhase, ElectionResult } from './election.js';
import type { FloorResult } from './floor.js';
import { locksChecks, locksGoals, type LocksResult } from './locks.js';
import type { RWLockPhase } from './rwlock.js';
import { renewalsChecks, renewalsGoals, type RenewalsResult } from './renewals.js';
import type { ScaleResult } from './scale.js';
import type { SemaphorePhase } from './semaphore.js';
import type { SessionsResult } from './sessions.js';
import { sessionsScaleChecks, sessionsScaleGoals, type SessionsScaleResult } from './sessions-scale.js';
import type { UncontendedResult } from './uncontended.js';
import { judgeRtt, rttChecks, type RttRun } from './rtt.js';
import { ms, num } from './stats.js';

export interface Meta {
  date: string;
  node: string;
  etcd: string;
  nproc: number;
  cpu: string;
  members: number;
  contenders: number;
  quick: boolean;
  wallMs?: number;
  /** go.etcd.io/etcd/client/v3's version in the `go` rows, or why there are none. */
  go?: { client?: string; skipped?: string };
  /** os.loadavg() (1, 5, 15 min) when the run started and when it ended. */
  load?: { start: number[]; end?: number[] };
  /** Every version measured in the same invocation (their servers all running, taking turns). */
  versions?: string[];
}

export interface Results {
  meta: Meta;
  floor?: FloorResult;
  uncontended?: UncontendedResult;
  contended?: ContendedResult[];
  election?: ElectionResult[];
  /** Floor samples taken between the election rounds (the election goal's bound). */
  electionFloor?: ElectionPhase['floor'];
  /** The same after 250 ms of quiet each (the long-before case's bound). */
  electionColdFloor?: ElectionPhase['coldFloor'];
  scale?: ScaleResult[];
  /** Semaphore of N = 1, 4, 16 permits and our Mutex, with the same contenders. */
  semaphore?: SemaphorePhase;
  /** RWMutex at 90 % reads, and our Mutex with the same contenders. */
  rwlock?: RWLockPhase;
  /** The scale machinery on a semaphore of 4 permits. */
  semaphoreScale?: ScaleResult[];
  sessions?: SessionsResult;
  /** Independent locks at scale: many processes, many sessions, many names. */
  locks?: LocksResult;
  /** Many independent locks from one process: one Client, a session and a name each. */
  oneClient?: LocksResult;
  /** Lease renewals: CPU per renewal against Go's package, and idle sessions (bench/renewals.ts). */
  renewals?: RenewalsResult;
  /** Thousands of sessions over several processes, and an outage of etcd. */
  sessionsScale?: SessionsScaleResult;
  /** Real round-trip times: the phases on a delayed 3-member cluster, per RTT (bench/rtt.ts). */
  rtt?: RttRun[];
  goals: Goal[];
  /** Correctness checks (mutual exclusion, nothing left behind): any failure fails the run. */
  checks: Check[];
  errors: { phase: string; message: string }[];
}

export interface Goal {
  id: string;
  goal: string;
  measured: string;
  met: boolean;
}

export interface Check {
  phase: string;
  what: string;
  ok: boolean;
  detail: string;
}

const ratio = (a: number, b: number): string => `${(a / b).toFixed(2)}x`;

export function judgeGoals(r: Results): Goal[] {
  const goals: Goal[] = [];
  const c = (impl: string): ContendedResult | undefined => r.contended?.find((x) => x.impl === impl);
  const ours = c('ours');
  // The real Go package when it ran, else our re-implementation of its algorithm.
  const ref = c('go') ?? c('reference');
  const e3 = c('etcd3');
  if (ours && ref) {
    goals.push({
      id: 'contended-vs-reference',
      goal: `contended: >= 5x the acquisitions/s of the reference fair lock (${ref.impl === 'go' ? "etcd's Go package" : "our re-implementation of Go's"})`,
      measured: `${num(ours.acquisitionsPerSec)} vs ${num(ref.acquisitionsPerSec)} /s = ${ratio(ours.acquisitionsPerSec, ref.acquisitionsPerSec)}`,
      met: ours.acquisitionsPerSec >= 5 * ref.acquisitionsPerSec,
    });
  }
  if (ours && e3) {
    goals.push({
      id: 'contended-vs-etcd3',
      goal: "contended: >= 1.5x etcd3's retry loop (acquisitions/s)",
      measured: `${num(ours.acquisitionsPerSec)} vs ${num(e3.acquisitionsPerSec)} /s = ${ratio(ours.acquisitionsPerSec, e3.acquisitionsPerSec)}`,
      met: ours.acquisitionsPerSec >= 1.5 * e3.acquisitionsPerSec,
    });
  }
  if (ours) {
    goals.push({
      id: 'contended-fairness',
      goal: 'contended: per-contender spread within 10% (FIFO)',
      measured: `${Math.min(...ours.perContender)}..${Math.max(...ours.perContender)} per contender, spread ${(ours.spread * 100).toFixed(1)}%`,
      met: ours.spread <= 0.1,
    });
  }
  if (ours?.requests) {
    const q = ours.requests;
    goals.push({
      id: 'contended-requests',
      goal: `contended: <= 4 requests per acquisition at ${ours.contenders} contenders (RPCs + watch creates + cancels)`,
      measured: `${q.perAcquisition.toFixed(2)}: ${Object.entries(q.byMethod)
        .map(([m, n]) => `${m} ${n.toFixed(2)}`)
        .join(', ')}, watch create ${q.watchCreates.toFixed(2)}, cancel ${q.watchCancels.toFixed(2)}`,
      met: q.perAcquisition <= 4,
    });
  }
  if (ours && e3) {
    goals.push({
      id: 'contended-wait-p99',
      goal: "contended: wait p99 below etcd3's",
      measured: `${ms(ours.wait.p99)} vs ${ms(e3.wait.p99)} ms`,
      met: ours.wait.p99 < e3.wait.p99,
    });
  }
  const u = r.uncontended;
  if (u) {
    const cycle = u.ours.latency.p50;
    const put = u.put.latency.p50;
    goals.push({
      id: 'uncontended-vs-put',
      goal: 'uncontended: a cycle costs at most 2.2x a sequential put (p50s, interleaved)',
      measured: `${ms(cycle)} vs ${ms(put)} ms = ${ratio(cycle, put)}`,
      met: cycle <= 2.2 * put,
    });
  }
  if (u) {
    goals.push({
      id: 'uncontended-vs-etcd3',
      goal: "uncontended: >= 1.5x etcd3's cycles/s",
      measured: `${num(u.ours.cyclesPerSec)} vs ${num(u.etcd3.cyclesPerSec)} /s = ${ratio(u.ours.cyclesPerSec, u.etcd3.cyclesPerSec)}`,
      met: u.ours.cyclesPerSec >= 1.5 * u.etcd3.cyclesPerSec,
    });
  }
  if (u?.go) {
    goals.push({
      id: 'uncontended-vs-go',
      goal: "uncontended: >= 0.7x the cycles/s of etcd's Go package on the same etcd",
      measured:
        `${num(u.ours.cyclesPerSec)} vs ${num(u.go.cyclesPerSec)} /s = ${ratio(u.ours.cyclesPerSec, u.go.cyclesPerSec)}` +
        (u.txns ? ` (the cycle's two Txns alone: ${ratio(u.txns.cyclesPerSec, u.go.cyclesPerSec)})` : ''),
      met: u.ours.cyclesPerSec >= 0.7 * u.go.cyclesPerSec,
    });
  }
  if (r.election && r.electionFloor) {
    for (const queued of ['long-before', '5ms-before'] as const) {
      const e = r.election.find((x) => x.impl === 'ours' && x.queued === queued);
      if (!e) continue;
      // The goal's bound is the floor sampled back to back, for both cases. The long-before resign
      // comes after 250 ms of quiet, which costs every client more: that floor is shown beside it.
      const f = r.electionFloor;
      const bound = f.put.p50 + f.watchNotify.p50 + f.get.p50;
      const c = queued === 'long-before' ? r.electionColdFloor : undefined;
      const idle = c ? `; each after 250 ms idle: ${ms(c.put.p50 + c.watchNotify.p50 + c.get.p50)} ms` : '';
      goals.push({
        id: `election-${queued}`,
        goal: `election (follower queued ${queued.replace('-', ' ')}): resign -> next leader <= 1 put + 1 watch notification + 1 read (p50s, interleaved, back to back)`,
        measured: `${ms(e.handover.p50)} ms vs ${ms(f.put.p50)} + ${ms(f.watchNotify.p50)} + ${ms(f.get.p50)} = ${ms(bound)} ms${idle}`,
        met: e.handover.p50 <= bound,
      });
    }
  }
  const s = r.scale;
  if (s && s.length > 1) {
    const done = s.filter((x) => !x.incomplete);
    const rpcs = done.map((x) => x.rpcsPerRelease);
    const ev = done.map((x) => x.watchEventsPerRelease);
    const flat = (v: number[]): boolean => v.length > 0 && Math.max(...v) - Math.min(...v) <= 0.25;
    const missing = s.filter((x) => x.incomplete).map((x) => `${num(x.waiters)} not reached (${num(x.incomplete!.queued)} queued)`);
    goals.push({
      id: 'scale-rpcs',
      goal: `scale: RPCs per release constant from ${num(s[0]!.waiters)} to ${num(s[s.length - 1]!.waiters)} waiters (the safety net's re-checks apart)`,
      measured:
        `at ${done.map((x) => num(x.waiters)).join(' / ')}: RPCs ${rpcs.map((v) => v.toFixed(2)).join(' / ')}, ` +
        `watch events ${ev.map((v) => v.toFixed(2)).join(' / ')}${missing.length ? `; ${missing.join(', ')}` : ''}; ` +
        `re-check Txns/s ${done.map((x) => (Number.isFinite(x.recheckTxnsPerSecond) ? x.recheckTxnsPerSecond.toFixed(1) : '-')).join(' / ')}`,
      met: missing.length === 0 && flat(rpcs) && flat(ev),
    });
  }
  const done = s?.filter((x) => !x.incomplete) ?? [];
  if (done.length > 0) {
    const big = done[done.length - 1]!;
    goals.push({
      id: 'scale-memory',
      goal: 'scale: memory per waiter under 2 KB',
      measured: `${num(big.bytesPerWaiter)} B at ${num(big.waiters)} waiters (${done.map((x) => `${num(x.bytesPerWaiter)} B at ${num(x.waiters)}`).join(', ')})`,
      met: big.bytesPerWaiter < 2048,
    });
  }
  // The goals are judged on the critical section of one turn (the lock's own cost, as the contended
  // phase); the 20 ms rows are shown alongside.
  const sem = r.semaphore?.results;
  const semAt = (impl: string, permits: number, holdMs: number) =>
    sem?.find((x) => x.impl === impl && x.permits === permits && x.holdMs === holdMs);
  const semMutex = semAt('mutex', 1, 0);
  const sem1 = semAt('semaphore', 1, 0);
  if (semMutex && sem1) {
    const heldMutex = sem?.find((x) => x.impl === 'mutex' && x.holdMs > 0);
    const held1 = heldMutex && semAt('semaphore', 1, heldMutex.holdMs);
    goals.push({
      id: 'semaphore-vs-mutex',
      goal: `semaphore N=1: within 1.5x of our Mutex's acquisitions/s (${r.semaphore!.contenders} contenders, taking turns, critical section of one turn)`,
      measured:
        `${num(sem1.acquisitionsPerSec)} vs ${num(semMutex.acquisitionsPerSec)} /s = ${ratio(sem1.acquisitionsPerSec, semMutex.acquisitionsPerSec)}` +
        (held1
          ? ` (holding ${heldMutex.holdMs} ms: ${num(held1.acquisitionsPerSec)} vs ${num(heldMutex.acquisitionsPerSec)} /s = ${ratio(held1.acquisitionsPerSec, heldMutex.acquisitionsPerSec)})`
          : ''),
      met: sem1.acquisitionsPerSec * 1.5 >= semMutex.acquisitionsPerSec,
    });
  }
  const sems = sem?.filter((x) => x.impl === 'semaphore' && x.holdMs === 0) ?? [];
  if (sems.length > 0) {
    // Holding 20 ms, a contender gets a few acquisitions per round, so one more or less is already
    // 30%: those rows are shown, not judged (the Mutex's is there to compare).
    const held = sem?.filter((x) => x.holdMs > 0) ?? [];
    goals.push({
      id: 'semaphore-fairness',
      goal: 'semaphore: per-contender spread within 10% at every N (FIFO; critical section of one turn)',
      measured:
        sems.map((x) => `N=${x.permits} ${(x.spread * 100).toFixed(1)}%`).join(', ') +
        (held.length
          ? ` (holding ${held[0]!.holdMs} ms, ${Math.min(...held.map((x) => Math.round(x.acquisitions / x.contenders)))}-` +
            `${Math.max(...held.map((x) => Math.round(x.acquisitions / x.contenders)))} per contender: ` +
            `${held.map((x) => `${x.impl === 'mutex' ? 'Mutex' : `N=${x.permits}`} ${(x.spread * 100).toFixed(1)}%`).join(', ')})`
          : ''),
      met: sems.every((x) => x.spread <= 0.1),
    });
  }
  const ss = r.semaphoreScale ?? [];
  const ssDone = ss.filter((x) => !x.incomplete);
  const ssMissing = ss.filter((x) => x.incomplete).map((x) => `${num(x.waiters)} not reached (${num(x.incomplete!.queued)} queued)`);
  if (ss.length > 0) {
    const big = ssDone[ssDone.length - 1];
    const at = num(ss[ss.length - 1]!.waiters);
    goals.push({
      id: 'semaphore-scale-release',
      goal: `semaphore release at ${at} waiters (N=${ss[0]!.permits ?? '?'}): <= 4 requests and <= 2 watch events per release`,
      measured: big
        ? `${big.rpcsPerRelease.toFixed(2)} requests (${Object.entries(big.rpcsPerReleaseByMethod)
            .map(([m, v]) => `${m} ${v.toFixed(2)}`)
            .join(', ')}), ${big.watchEventsPerRelease.toFixed(2)} watch events, ${big.watchesPerRelease.toFixed(2)} watches opened` +
          (big.waiters !== ss[ss.length - 1]!.waiters ? ` at ${num(big.waiters)}` : '') +
          (ssMissing.length ? `; ${ssMissing.join(', ')}` : '')
        : ssMissing.join(', '),
      met: ssMissing.length === 0 && big !== undefined && big.rpcsPerRelease <= 4 && big.watchEventsPerRelease <= 2,
    });
  }
  if (ss.length > 1) {
    const flat = (v: number[]): boolean => v.length > 1 && Math.max(...v) - Math.min(...v) <= 0.25;
    const rpcs = ssDone.map((x) => x.rpcsPerRelease);
    const ev = ssDone.map((x) => x.watchEventsPerRelease);
    goals.push({
      id: 'semaphore-scale-flat',
      goal: `semaphore: requests and watch events per release the same at ${ss.map((x) => num(x.waiters)).join(' and ')} waiters (O(1))`,
      measured:
        `at ${ssDone.map((x) => num(x.waiters)).join(' / ')}: requests ${rpcs.map((v) => v.toFixed(2)).join(' / ')}, ` +
        `watch events ${ev.map((v) => v.toFixed(2)).join(' / ')}${ssMissing.length ? `; ${ssMissing.join(', ')}` : ''}`,
      met: ssMissing.length === 0 && flat(rpcs) && flat(ev),
    });
  }
  const rw = r.rwlock?.results;
  const rwAt = (impl: string, holdMs: number) => rw?.find((x) => x.impl === impl && x.holdMs === holdMs);
  const rwOurs = rwAt('rwmutex', 0);
  const rwMutex = rwAt('mutex', 0);
  if (rwOurs && rwMutex) {
    const held = rw?.find((x) => x.impl === 'rwmutex' && x.holdMs > 0);
    const heldMutex = held && rwAt('mutex', held.holdMs);
    goals.push({
      id: 'rwlock-vs-mutex',
      goal:
        `rwlock (${Math.round((1 - r.rwlock!.writeShare) * 100)}% reads, ${r.rwlock!.contenders} contenders, critical section of one turn): ` +
        '>= 2x the acquisitions/s of our Mutex with the same contenders',
      measured:
        `${num(rwOurs.acquisitionsPerSec)} vs ${num(rwMutex.acquisitionsPerSec)} /s = ${ratio(rwOurs.acquisitionsPerSec, rwMutex.acquisitionsPerSec)}` +
        (held && heldMutex
          ? ` (holding ${held.holdMs} ms: ${num(held.acquisitionsPerSec)} vs ${num(heldMutex.acquisitionsPerSec)} /s = ${ratio(held.acquisitionsPerSec, heldMutex.acquisitionsPerSec)})`
          : ''),
      met: rwOurs.acquisitionsPerSec >= 2 * rwMutex.acquisitionsPerSec,
    });
  }
  if (r.locks) goals.push(...locksGoals(r.locks));
  if (r.oneClient) goals.push(...locksGoals(r.oneClient));
  if (r.renewals) goals.push(...renewalsGoals(r.renewals));
  if (r.sessionsScale) goals.push(...sessionsScaleGoals(r.sessionsScale));
  goals.push(...judgeRtt(r.rtt));
  return goals;
}

export function collectChecks(r: Results): Check[] {
  const checks: Check[] = [];
  for (const c of r.contended ?? []) {
    checks.push({
      phase: `contended/${c.impl}`,
      what: 'mutual exclusion',
      ok: c.mutualExclusion,
      detail: `${c.violations} violations, ${c.acquisitions} acquisitions`,
    });
    checks.push({ phase: `contended/${c.impl}`, what: 'no keys left', ok: c.keysLeft === 0, detail: `${c.keysLeft} keys left` });
  }
  for (const e of r.election ?? []) {
    checks.push({
      phase: `election/${e.impl}/${e.queued}`,
      what: 'one leader at a time',
      ok: e.violations === 0 && e.handover.n > 0,
      detail: `${e.violations} early leaders in ${e.handover.n} rounds`,
    });
    checks.push({ phase: `election/${e.impl}/${e.queued}`, what: 'no keys left', ok: e.keysLeft === 0, detail: `${e.keysLeft} keys left` });
  }
  for (const s of r.scale ?? []) {
    if (s.incomplete) {
      checks.push({
        phase: `scale/${s.waiters}`,
        what: 'every key removed',
        ok: s.keysLeft === 0,
        detail: `${s.keysLeft} keys left (incomplete run)`,
      });
      continue;
    }
    checks.push({
      phase: `scale/${s.waiters}`,
      what: 'FIFO handover, one holder at a time',
      ok: s.violations === 0,
      detail: `${s.violations} violations in ${s.releases} releases`,
    });
    checks.push({ phase: `scale/${s.waiters}`, what: 'every key removed', ok: s.keysLeft === 0, detail: `${s.keysLeft} keys left` });
  }
  for (const x of r.semaphore?.results ?? []) {
    const phase = `semaphore/${x.impl === 'mutex' ? 'mutex' : `n${x.permits}`}/${x.holdMs > 0 ? `${x.holdMs}ms` : '1turn'}`;
    checks.push({
      phase,
      what: `at most ${x.permits} holder${x.permits > 1 ? 's' : ''} at once`,
      ok: x.violations === 0 && x.maxHolders <= x.permits && x.acquisitions > 0,
      detail: `${x.violations} violations, at most ${x.maxHolders} at once, ${x.acquisitions} acquisitions`,
    });
    checks.push({
      phase,
      what: x.permits === 1 ? 'fencing tokens unique and growing' : "fencing tokens unique, each contender's growing",
      ok: x.tokenViolations === 0,
      detail: `${x.tokenViolations} violations`,
    });
    checks.push({ phase, what: 'no keys left', ok: x.keysLeft === 0, detail: `${x.keysLeft} keys left` });
  }
  for (const x of r.rwlock?.results ?? []) {
    const phase = `rwlock/${x.impl}/${x.holdMs > 0 ? `${x.holdMs}ms` : '1turn'}`;
    checks.push({
      phase,
      what: x.impl === 'mutex' ? 'one holder at a time' : 'a writer alone, readers only with readers',
      ok: x.violations === 0 && x.reads > 0 && x.writes > 0,
      detail: `${x.violations} violations in ${x.reads} reads and ${x.writes} writes`,
    });
    if (x.impl === 'rwmutex') {
      // Not safety but the point of the lock: readers queued behind one writer are let in together.
      checks.push({ phase, what: 'readers share', ok: x.maxReaders > 1, detail: `at most ${x.maxReaders} readers at once` });
    }
    checks.push({
      phase,
      what: 'fencing tokens in queue order',
      ok: x.tokenViolations === 0,
      detail: `${x.tokenViolations} violations`,
    });
    checks.push({ phase, what: 'no keys left', ok: x.keysLeft === 0, detail: `${x.keysLeft} keys left` });
  }
  for (const s of r.semaphoreScale ?? []) {
    const phase = `semaphore-scale/${s.waiters}`;
    if (s.incomplete) {
      checks.push({ phase, what: 'every key removed', ok: s.keysLeft === 0, detail: `${s.keysLeft} keys left (incomplete run)` });
      continue;
    }
    checks.push({
      phase,
      what: `FIFO handover, one waiter let in per release, at most ${s.permits ?? '?'} holders`,
      ok: s.violations === 0,
      detail: `${s.violations} violations in ${s.releases} releases`,
    });
    checks.push({ phase, what: 'every key removed', ok: s.keysLeft === 0, detail: `${s.keysLeft} keys left` });
  }
  if (r.sessions) {
    const s = r.sessions;
    checks.push({ phase: 'sessions', what: 'no session lost', ok: s.lost === 0, detail: `${s.lost} lost of ${s.sessions}` });
    checks.push({
      phase: 'sessions',
      what: 'one keepalive stream',
      ok: s.keepAliveStreamsOpened === 1 && (s.serverKeepAliveStreams === null || s.serverKeepAliveStreams === 1),
      detail: `${s.keepAliveStreamsOpened} opened by the client, ${s.serverKeepAliveStreams ?? '?'} open on the server`,
    });
  }
  if (r.locks) checks.push(...locksChecks(r.locks));
  if (r.oneClient) checks.push(...locksChecks(r.oneClient));
  if (r.renewals) checks.push(...renewalsChecks(r.renewals));
  if (r.sessionsScale) checks.push(...sessionsScaleChecks(r.sessionsScale));
  for (const e of r.errors) checks.push({ phase: e.phase, what: 'ran', ok: false, detail: e.message });
  checks.push(...rttChecks(r.rtt));
  return checks;
}
