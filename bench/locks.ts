// Independent locks at scale: P processes with S sessions each, every session cycling lock -> one
// event-loop turn -> unlock on a random one of N names (1,000 names, 20 processes, 50 sessions each;
// --quick: 2 processes of 5 sessions on 20 names). The floor is the same processes issuing Txns of
// a lock's shape without locking (bench/locks-worker.ts), and Go's package runs the same workload
// as P processes of `go-interop bench-locks`. Floor, ours and Go take turns, round after round.
// Exclusion is checked across the processes: per name, the holds ordered by fencing token must not
// overlap (each process records when it held, on the kernel's clock all processes share).
// The one-client phase is the same machinery at another size: one process, one Client, 200
// sessions, each cycling on a name of its own (a service with a lock per entity), against Go's
// package with one client and as many sessions.
import { Client } from '../dist/index.js';
import type { BenchContext } from './context.js';
import type { LocksWorkerResult } from './locks-worker.js';
import { mergeSummaries } from './go.js';
import { fixed, pool, type Summary } from './stats.js';
import { LineWorker, processCpuMs } from './workers.js';

export interface LocksSize {
  /** `locks` (many processes, random names) or `one-client` (one process, a name per session). */
  phase: 'locks' | 'one-client';
  processes: number;
  sessionsPerProcess: number;
  names: number;
  /** Session i always locks name i (names = sessions); else a random name each cycle. */
  distinct: boolean;
  roundMs: number;
  rounds: number;
  /**
   * An unmeasured round of each (Txns, then locks) first: the processes' JIT is cold, Go's is not. A
   * process of the 20 runs about 45 cycles a second, and its code reaches TurboFan only after about a
   * minute (30-47 % of its CPU went to compiling in the first 15 s of rounds after a 3 s warm-up); a
   * service's processes run for hours, and bench/renew-cpu.ts waits 180 s for the same reason.
   */
  warmupMs: number;
}

export const LOCKS_SIZE = (quick: boolean): LocksSize =>
  quick
    ? { phase: 'locks', processes: 2, sessionsPerProcess: 5, names: 20, distinct: false, roundMs: 1000, rounds: 1, warmupMs: 0 }
    : { phase: 'locks', processes: 20, sessionsPerProcess: 50, names: 1000, distinct: false, roundMs: 5000, rounds: 2, warmupMs: 60_000 };

export const ONE_CLIENT_SIZE = (quick: boolean): LocksSize =>
  quick
    ? { phase: 'one-client', processes: 1, sessionsPerProcess: 20, names: 20, distinct: true, roundMs: 1000, rounds: 1, warmupMs: 0 }
    : { phase: 'one-client', processes: 1, sessionsPerProcess: 200, names: 200, distinct: true, roundMs: 5000, rounds: 3, warmupMs: 3000 };

/** One implementation over all its rounds. */
export interface LocksRow {
  impl: 'floor' | 'ours' | 'go';
  client?: string;
  /** Lock cycles (floor: Txns). */
  cycles: number;
  elapsedMs: number;
  perSec: number;
  /** Unary requests per cycle (floor: 1, every Txn is one). */
  requestsPerCycle: number;
  /** Txns per Txn request (ours: more than 1 when Txns shared a request, see coalescer.ts). */
  txnsPerRequest?: number;
  /** Txns per cycle, whether they shared requests or not (ours and the floor). */
  txnsPerCycle?: number;
  /** Watches created per cycle (ours only). */
  watchCreatesPerCycle?: number;
  /** The client processes' CPU per cycle, µs (summed over the processes). */
  clientCpuUsPerCycle: number;
  /** etcd's CPU per cycle, µs, and per wall-clock second, ms (from /proc). */
  etcdCpuUsPerCycle: number;
  etcdCpuMsPerSec: number;
  wait?: Summary;
  /** Holds of one name that overlapped, or whose tokens did not grow in the order of the holds. */
  violations: number;
}

export interface LocksResult extends LocksSize {
  floor: LocksRow;
  ours: LocksRow;
  go?: LocksRow;
  /** Keys left under the phase's prefix after every process closed its sessions. */
  keysLeft: number;
}

type Round = { results: LocksWorkerResult[]; etcdCpuMs: number; wallMs: number };

export async function runLocks(ctx: BenchContext, size: LocksSize = LOCKS_SIZE(ctx.quick)): Promise<LocksResult> {
  const base = `${ctx.prefix}${size.phase}/`;
  const args = [`--names=${size.names}`, `--sessions=${size.sessionsPerProcess}`, ...(size.distinct ? ['--distinct'] : [])];
  const ours: LineWorker[] = [];
  const rounds: Record<'floor' | 'ours' | 'go', Round[]> = { floor: [], ours: [], go: [] };
  const etcdCpu = async (): Promise<number> => (await Promise.all((ctx.server?.pids() ?? []).map(processCpuMs))).reduce((a, b) => a + b, 0);
  /** Starts every worker's loop together and gathers their results with etcd's CPU over the round. */
  const round = async (workers: LineWorker[], command: string): Promise<Round> => {
    const cpu0 = await etcdCpu();
    const t = performance.now();
    for (const w of workers) w.send(command);
    const results = await Promise.all(workers.map((w) => w.json<LocksWorkerResult>(size.roundMs + 120_000)));
    return { results, etcdCpuMs: (await etcdCpu()) - cpu0, wallMs: performance.now() - t };
  };
  try {
    ctx.log(`${size.phase}: starting ${size.processes} processes of ${size.sessionsPerProcess} sessions`);
    // Started 4 at a time: twenty start-ups at once starve each other on a small machine.
    await pool(
      Array.from({ length: size.processes }, (_, i) => i),
      4,
      async (i) => {
        const w = LineWorker.node('locks-worker.ts', [...args, `--endpoints=${rotate(ctx.endpoints, i)}`]);
        ours.push(w);
        await w.ready(120_000);
      },
    );
    if (size.warmupMs > 0) {
      await round(ours, `txn ${base}warmup/ ${size.warmupMs}`);
      await round(ours, `lock ${base}warmup/ ${size.warmupMs}`);
    }
    for (let r = 0; r < size.rounds; r++) {
      rounds.floor.push(await round(ours, `txn ${base}floor/${r}/ ${size.roundMs}`));
      rounds.ours.push(await round(ours, `lock ${base}ours/${r}/ ${size.roundMs}`));
      if (ctx.go) {
        const go = Array.from({ length: size.processes }, (_, i) =>
          LineWorker.go(ctx.go!, [
            `--endpoints=${rotate(ctx.endpoints, i)}`,
            'bench-locks',
            `--prefix=${base}go/${r}/`,
            `--names=${size.names}`,
            `--sessions=${size.sessionsPerProcess}`,
            ...(size.distinct ? ['--distinct'] : []),
            `--duration=${size.roundMs}ms`,
          ]),
        );
        try {
          await Promise.all(go.map((w) => w.ready(60_000)));
          rounds.go.push(await round(go, 'go'));
          await Promise.all(go.map((w) => w.close()));
        } finally {
          for (const w of go) w.kill();
        }
      }
      ctx.log(`${size.phase}: round ${r + 1}/${size.rounds} done`);
    }
    await Promise.all(ours.map((w) => w.close()));
  } finally {
    for (const w of ours) w.kill();
  }
  const check = new Client({ endpoints: ctx.endpoints });
  let keysLeft: number;
  try {
    keysLeft = (await check.getPrefix(base)).kvs.length;
  } finally {
    await check.close();
  }
  const result: LocksResult = { ...size, floor: row('floor', rounds.floor), ours: row('ours', rounds.ours), keysLeft };
  if (rounds.go.length > 0) result.go = row('go', rounds.go);
  return result;
}

/** The endpoints for the i-th process, rotated so that on a cluster the processes spread over the members. */
function rotate(endpoints: string[], i: number): string {
  return endpoints.map((_, k) => endpoints[(k + i) % endpoints.length]!).join(',');
}

function row(impl: LocksRow['impl'], rounds: Round[]): LocksRow {
  const all = rounds.flatMap((r) => r.results);
  const cycles = all.reduce((a, x) => a + x.cycles, 0);
  // Each round's length is its slowest process's (they started together).
  const elapsedMs = rounds.reduce((a, r) => a + Math.max(...r.results.map((x) => x.elapsedMs)), 0);
  const etcdCpuMs = rounds.reduce((a, r) => a + r.etcdCpuMs, 0);
  const wallMs = rounds.reduce((a, r) => a + r.wallMs, 0);
  const waits = all.filter((x) => x.wait).map((x) => x.wait!);
  const out: LocksRow = {
    impl,
    cycles,
    elapsedMs,
    perSec: (cycles * 1000) / elapsedMs,
    requestsPerCycle: all.reduce((a, x) => a + x.requests, 0) / cycles,
    clientCpuUsPerCycle: (all.reduce((a, x) => a + x.cpuMs, 0) * 1000) / cycles,
    etcdCpuUsPerCycle: (etcdCpuMs * 1000) / cycles,
    etcdCpuMsPerSec: etcdCpuMs / (wallMs / 1000),
    violations: rounds.reduce((a, r) => a + exclusionViolations(r.results.flatMap((x) => x.records ?? [])), 0),
  };
  if (impl === 'ours') out.watchCreatesPerCycle = all.reduce((a, x) => a + (x.watchCreates ?? 0), 0) / cycles;
  const txns = all.reduce((a, x) => a + (x.txns ?? 0), 0);
  const txnRequests = all.reduce((a, x) => a + (x.txnRequests ?? 0), 0);
  if (txnRequests > 0) {
    out.txnsPerRequest = txns / txnRequests;
    out.txnsPerCycle = txns / cycles;
  }
  if (waits.length > 0) out.wait = mergeSummaries(waits);
  const client = all.find((x) => x.client)?.client;
  if (client) out.client = client;
  return out;
}

/**
 * Per name, the holds in fencing-token order: each token above the last and each hold starting
 * after the last ended. A second holder of a name, or a token that did not grow, is a violation.
 */
export function exclusionViolations(records: NonNullable<LocksWorkerResult['records']>): number {
  const byName = new Map<number, { token: bigint; from: bigint; to: bigint }[]>();
  for (const [k, token, from, to] of records) {
    let list = byName.get(k);
    if (!list) byName.set(k, (list = []));
    list.push({ token: BigInt(token), from: BigInt(from), to: BigInt(to) });
  }
  let violations = 0;
  for (const list of byName.values()) {
    list.sort((a, b) => (a.token < b.token ? -1 : a.token > b.token ? 1 : 0));
    for (let i = 1; i < list.length; i++) if (list[i]!.token === list[i - 1]!.token || list[i]!.from < list[i - 1]!.to) violations++;
  }
  return violations;
}

const num = (v: number): string => (Number.isFinite(v) ? Math.round(v).toLocaleString('en-US') : '-');

/**
 * The goal: lock cycles/s >= 80 % of what the floor's Txn rate allows at our requests per cycle
 * (floor Txns/s ÷ requests per cycle); and ours ÷ Go in the same run.
 */
export function locksGoals(l: LocksResult): { id: string; goal: string; measured: string; met: boolean }[] {
  if (l.phase === 'one-client') {
    if (!l.go) return [];
    return [
      {
        id: 'one-client-vs-go',
        goal: `many locks from one process (one Client, ${l.sessionsPerProcess} sessions, a name each): lock cycles/s >= 1.5x Go's package with one client`,
        measured: `${num(l.ours.perSec)}/s vs Go ${num(l.go.perSec)}/s: ${fixed(l.ours.perSec / l.go.perSec)}x (${fixed(l.ours.requestsPerCycle)} vs ${fixed(l.go.requestsPerCycle)} requests per cycle)`,
        met: l.ours.perSec >= 1.5 * l.go.perSec,
      },
    ];
  }
  const bound = l.floor.perSec / l.ours.requestsPerCycle;
  const go = l.go
    ? `; Go ${num(l.go.perSec)}/s (${fixed(l.go.requestsPerCycle)} requests per cycle), ours ÷ Go ${fixed(l.ours.perSec / l.go.perSec)}x`
    : '';
  return [
    {
      id: 'locks-vs-floor',
      goal: `independent locks (${num(l.names)} names, ${l.processes} processes x ${l.sessionsPerProcess} sessions): lock cycles/s >= 80% of the floor's Txns/s ÷ requests per cycle`,
      measured: `${num(l.ours.perSec)}/s vs ${num(l.floor.perSec)} Txns/s ÷ ${fixed(l.ours.requestsPerCycle)} = ${num(bound)}/s: ${((l.ours.perSec / bound) * 100).toFixed(0)}%${go}`,
      met: l.ours.perSec >= 0.8 * bound,
    },
    ...(l.go
      ? [
          {
            id: 'locks-vs-go',
            goal: `independent locks (${l.processes} processes x ${l.sessionsPerProcess} sessions): lock cycles/s >= 1.0x Go's package`,
            measured: `${num(l.ours.perSec)}/s vs Go ${num(l.go.perSec)}/s: ${fixed(l.ours.perSec / l.go.perSec)}x`,
            met: l.ours.perSec >= l.go.perSec,
          },
        ]
      : []),
  ];
}

export function locksChecks(l: LocksResult): { phase: string; what: string; ok: boolean; detail: string }[] {
  const rows = [l.ours, ...(l.go ? [l.go] : [])];
  return [
    ...rows.map((x) => ({
      phase: `${l.phase}/${x.impl}`,
      what: 'one holder per name at a time, tokens growing (across processes)',
      ok: x.violations === 0 && x.cycles > 0,
      detail: `${x.violations} violations in ${x.cycles} cycles`,
    })),
    { phase: l.phase, what: 'no keys left', ok: l.keysLeft === 0, detail: `${l.keysLeft} keys left` },
  ];
}

export function locksSection(l: LocksResult): { title: string; header: string[]; rows: string[][] } {
  const label = { floor: 'floor: Txns without locking', ours: 'ours', go: `Go concurrency ${l.go?.client ?? ''}`.trim() };
  return {
    title:
      `Independent locks: ${num(l.names)} names, ${l.processes} process${l.processes > 1 ? 'es' : ''} x ${l.sessionsPerProcess} sessions, ` +
      `lock -> one turn -> unlock on ${l.distinct ? 'a name of its own' : 'random names'} (${l.rounds} round${l.rounds > 1 ? 's' : ''} of ${l.roundMs / 1000} s, taking turns` +
      `${l.warmupMs > 0 ? `, after ${l.warmupMs / 1000} s of each to warm up` : ''})`,
    header: [
      'implementation',
      'cycles/s (floor: Txns/s)',
      'requests/cycle',
      'watches/cycle',
      'client CPU µs/cycle',
      'etcd CPU µs/cycle',
      'etcd CPU ms/s',
      'Txns per request',
      'wait p50 ms',
      'wait p99 ms',
      'violations',
    ],
    rows: [l.floor, l.ours, ...(l.go ? [l.go] : [])].map((x) => [
      label[x.impl],
      num(x.perSec),
      fixed(x.requestsPerCycle),
      fixed(x.watchCreatesPerCycle),
      num(x.clientCpuUsPerCycle),
      num(x.etcdCpuUsPerCycle),
      num(x.etcdCpuMsPerSec),
      fixed(x.txnsPerRequest),
      fixed(x.wait?.p50),
      fixed(x.wait?.p99),
      x.impl === 'floor' ? '' : String(x.violations),
    ]),
  };
}

/** Several runs (one per etcd version) side by side: cycles/s, requests and CPU per cycle, and ours ÷ Go. */
export function locksVersionsSection(
  rs: { meta: { etcd: string }; locks?: LocksResult }[],
): { title: string; header: string[]; rows: string[][] } | undefined {
  if (!rs.every((r) => r.locks)) return undefined;
  const ls = rs.map((r) => r.locks!);
  const cols = (name: string): string[] => rs.map((r) => `${name} ${r.meta.etcd}`);
  const per = (impl: LocksRow['impl'], f: (x: LocksRow) => string): string[] => ls.map((l) => (l[impl] ? f(l[impl]) : '-'));
  const label = {
    floor: 'floor: Txns without locking',
    ours: 'ours',
    go: `Go concurrency ${ls.find((l) => l.go)?.go?.client ?? ''}`.trim(),
  };
  const impls = (['floor', 'ours', 'go'] as const).filter((i) => ls.some((l) => l[i]));
  return {
    title: `Independent locks, etcd versions side by side: ${num(ls[0]!.names)} names, ${ls[0]!.processes} processes x ${ls[0]!.sessionsPerProcess} sessions`,
    header: [
      'implementation',
      ...cols('cycles/s'),
      ...cols('requests/cycle'),
      ...cols('client CPU µs/cycle'),
      ...cols('etcd CPU µs/cycle'),
    ],
    rows: [
      ...impls.map((i) => [
        label[i],
        ...per(i, (x) => num(x.perSec)),
        ...per(i, (x) => fixed(x.requestsPerCycle)),
        ...per(i, (x) => num(x.clientCpuUsPerCycle)),
        ...per(i, (x) => num(x.etcdCpuUsPerCycle)),
      ]),
      [
        "ours ÷ the floor's bound (floor Txns/s ÷ our requests per cycle)",
        ...ls.map((l) => `${((l.ours.perSec / (l.floor.perSec / l.ours.requestsPerCycle)) * 100).toFixed(0)}%`),
        ...ls.map(() => ''),
        ...ls.map(() => ''),
        ...ls.map(() => ''),
      ],
      ...(ls.every((l) => l.go)
        ? [
            [
              'ours ÷ Go',
              ...ls.map((l) => `${fixed(l.ours.perSec / l.go!.perSec)}x`),
              ...ls.map(() => ''),
              ...ls.map((l) => `${fixed(l.ours.clientCpuUsPerCycle / l.go!.clientCpuUsPerCycle)}x`),
              ...ls.map((l) => `${fixed(l.ours.etcdCpuUsPerCycle / l.go!.etcdCpuUsPerCycle)}x`),
            ],
          ]
        : []),
    ],
  };
}
