// The shape of one run's results (also the --json output), and the goals judged from it.
import type { ContendedResult } from './contended.js';
import type { ElectionPhase, ElectionResult } from './election.js';
import type { FloorResult } from './floor.js';
import type { ScaleResult } from './scale.js';
import type { SessionsResult } from './sessions.js';
import type { UncontendedResult } from './uncontended.js';
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
  sessions?: SessionsResult;
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
  if (r.election && r.electionFloor) {
    for (const queued of ['long-before', '5ms-before'] as const) {
      const e = r.election.find((x) => x.impl === 'ours' && x.queued === queued);
      // The long-before resign comes after 250 ms of quiet: compare with the floor sampled likewise.
      const cold = queued === 'long-before' && r.electionColdFloor !== undefined;
      const f = cold ? r.electionColdFloor! : r.electionFloor;
      if (!e) continue;
      const bound = f.put.p50 + f.watchNotify.p50 + f.get.p50;
      goals.push({
        id: `election-${queued}`,
        goal:
          `election (follower queued ${queued.replace('-', ' ')}): resign -> next leader <= 1 put + 1 watch notification + 1 read ` +
          `(p50s, interleaved${cold ? ', each after 250 ms idle' : ''})`,
        measured: `${ms(e.handover.p50)} ms vs ${ms(f.put.p50)} + ${ms(f.watchNotify.p50)} + ${ms(f.get.p50)} = ${ms(bound)} ms`,
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
      goal: `scale: RPCs per release constant from ${num(s[0]!.waiters)} to ${num(s[s.length - 1]!.waiters)} waiters`,
      measured:
        `at ${done.map((x) => num(x.waiters)).join(' / ')}: RPCs ${rpcs.map((v) => v.toFixed(2)).join(' / ')}, ` +
        `watch events ${ev.map((v) => v.toFixed(2)).join(' / ')}${missing.length ? `; ${missing.join(', ')}` : ''}`,
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
      checks.push({ phase: `scale/${s.waiters}`, what: 'every key removed', ok: s.keysLeft === 0, detail: `${s.keysLeft} keys left (incomplete run)` });
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
  for (const e of r.errors) checks.push({ phase: e.phase, what: 'ran', ok: false, detail: e.message });
  return checks;
}
