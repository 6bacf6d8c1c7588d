// Sessions at scale: P processes holding S sessions each (10 x 1,000; --quick: 2 x 50), each process
// one Client (bench/sessions-worker.ts). Measured: the keepalive streams (each process's count and
// etcd's own /metrics), the client CPU per renewal, etcd's CPU (from /proc, the etcd this run
// started); then etcd is killed (every member, SIGKILL) and, once every session has learned it,
// started again on its data: how long until every session learned that etcd is gone, and that it
// is back. A session learns of an outage when a renewal goes unanswered (the late-renewal
// diagnostic; the hub renews every lease again when its stream breaks), and that etcd is back
// when its lease is renewed again. Before ours, Go's package holds the same sessions in as many `go-interop bench-sessions` processes, for the steady-state figures
// (not the outage: a Go session learns of one only once its lease is gone).
import type { BenchContext } from './context.js';
import { serverStreams } from './sessions.js';
import { fixed, pool, summarize, type Summary } from './stats.js';
import { LineWorker, processCpuMs } from './workers.js';
import type { SessionsLearned, SessionsWindow } from './sessions-worker.js';

export interface SessionsScaleSize {
  processes: number;
  sessionsPerProcess: number;
  /**
   * Lease TTL, s. The outage lasts until the last session learns it (at most TTL/3 + its retry
   * after the kill) and must end before the first deadline (2 TTL/3 - the safety margin, 5 s): 22 s against
   * 35 s at TTL 60; at TTL 30, 12 s against 15 s.
   */
  ttl: number;
  /** The steady-state window: one renewal interval and a half second, so that every session renews once. */
  windowMs: number;
}

export const SESSIONS_SCALE_SIZE = (quick: boolean): SessionsScaleSize =>
  quick
    ? { processes: 2, sessionsPerProcess: 50, ttl: 30, windowMs: 10_500 }
    : { processes: 10, sessionsPerProcess: 1000, ttl: 60, windowMs: 20_500 };

export interface SessionsScaleResult extends SessionsScaleSize, Omit<SessionsSteady, 'impl' | 'client'> {
  sessions: number;
  /** From the kill to each session's first unanswered renewal, ms. */
  learnedGone: Summary;
  /** etcd's restart (spawn to healthy), ms. */
  restartMs: number;
  /** From the restart's start to each session's first renewal answered again, ms. */
  learnedBack: Summary;
  /** Sessions that never learned (gone / back) within the time allowed. */
  neverLearnedGone: number;
  neverLearnedBack: number;
  /** Sessions lost (declared expired) by the end: 0 unless the outage outlasted a deadline. */
  lost: number;
  /** LeaseKeepAlive streams opened by all processes, outage included (the re-opens after it). */
  keepAliveStreamsAfter: number;
  /** Go's package on the same sessions (no outage: its sessions learn of one only when their lease is gone). */
  go?: SessionsSteady;
}

/** The steady state of sessions kept alive: what one implementation's processes cost over a window. */
export interface SessionsSteady {
  impl: 'ours' | 'go';
  client?: string;
  /** Time to start the processes and create every session (128 at a time in each process), ms. */
  createMs: number;
  /** LeaseKeepAlive streams each process opened (1 each is the design). */
  keepAliveStreamsPerProcess: number[];
  /** LeaseKeepAlive streams opened on etcd over the window and still open (its /metrics: started - handled). */
  serverKeepAliveStreams: number | null;
  renewalsPerSec: number;
  /** Client CPU per renewal, µs: all processes' CPU over the window less their idle CPU, per renewal. */
  clientCpuUsPerRenewal: number;
  clientCpuMsPerSec: number;
  etcdCpuMsPerSec: number;
  etcdCpuUsPerRenewal: number;
  /** Sessions lost by the end of the window (must be 0). */
  lostInWindow: number;
}

async function steady(
  ctx: BenchContext,
  size: SessionsScaleSize,
  impl: 'ours' | 'go',
  start: (i: number) => LineWorker,
  workers: LineWorker[],
): Promise<SessionsSteady> {
  const server = ctx.server!;
  const etcdCpu = async (): Promise<number> => (await Promise.all(server.pids().map(processCpuMs))).reduce((a, b) => a + b, 0);
  const streams0 = await serverStreams(ctx.endpoints, 'LeaseKeepAlive');
  const t0 = performance.now();
  // Started 4 at a time: ten start-ups at once starve each other on a small machine.
  await pool(
    Array.from({ length: size.processes }, (_, i) => i),
    4,
    async (i) => {
      const w = start(i);
      workers.push(w);
      await w.ready(180_000);
    },
  );
  const createMs = performance.now() - t0;
  ctx.log(`sessions-scale: ${impl}: ${size.processes * size.sessionsPerProcess} sessions in ${size.processes} processes`);
  const cpu0 = await etcdCpu();
  const tw = performance.now();
  for (const w of workers) w.send(`window ${size.windowMs}`);
  const windows = await Promise.all(workers.map((w) => w.json<SessionsWindow & { client?: string }>(size.windowMs + 60_000)));
  const etcdCpuMs = (await etcdCpu()) - cpu0;
  const wallS = (performance.now() - tw) / 1000;
  const streams1 = await serverStreams(ctx.endpoints, 'LeaseKeepAlive');
  const renewals = windows.reduce((a, w) => a + w.renewals, 0);
  const used = windows.reduce((a, w) => a + w.cpuMs - (w.idleCpuMsPerSec * w.wallMs) / 1000, 0);
  const out: SessionsSteady = {
    impl,
    createMs,
    keepAliveStreamsPerProcess: windows.map((w) => w.keepAliveStreamsOpened),
    serverKeepAliveStreams: streams0 === null || streams1 === null ? null : streams1 - streams0,
    renewalsPerSec: renewals / wallS,
    clientCpuUsPerRenewal: renewals > 0 ? (used * 1000) / renewals : NaN,
    clientCpuMsPerSec: windows.reduce((a, w) => a + w.cpuMs, 0) / wallS,
    etcdCpuMsPerSec: etcdCpuMs / wallS,
    etcdCpuUsPerRenewal: renewals > 0 ? (etcdCpuMs * 1000) / renewals : NaN,
    lostInWindow: windows.reduce((a, w) => a + w.lost, 0),
  };
  if (windows[0]?.client) out.client = windows[0].client;
  return out;
}

export async function runSessionsScale(ctx: BenchContext): Promise<SessionsScaleResult> {
  const size = SESSIONS_SCALE_SIZE(ctx.quick);
  if (!ctx.server) throw new Error('bench: sessions-scale needs the etcd the bench started (to kill and restart it)');
  const server = ctx.server;
  const eps = (i: number): string => ctx.endpoints.map((_, k) => ctx.endpoints[(k + i) % ctx.endpoints.length]!).join(',');
  const idle = ctx.quick ? 300 : 1000;
  // Go's package first, alone (its sessions closed before ours exist, so that etcd's CPU is its own).
  let go: SessionsSteady | undefined;
  if (ctx.go) {
    const workers: LineWorker[] = [];
    const start = (i: number): LineWorker =>
      LineWorker.go(ctx.go!, [
        `--endpoints=${eps(i)}`,
        `--ttl=${size.ttl}`,
        'bench-sessions',
        `--sessions=${size.sessionsPerProcess}`,
        `--idle=${idle}ms`,
      ]);
    try {
      go = await steady(ctx, size, 'go', start, workers);
      await Promise.all(workers.map((w) => w.close(60_000)));
    } finally {
      for (const w of workers) w.kill();
    }
  }
  const workers: LineWorker[] = [];
  const start = (i: number): LineWorker =>
    LineWorker.node('sessions-worker.ts', [
      `--endpoints=${eps(i)}`,
      `--sessions=${size.sessionsPerProcess}`,
      `--ttl=${size.ttl}`,
      `--idle=${idle}`,
    ]);
  try {
    const ours = await steady(ctx, size, 'ours', start, workers);
    // The outage: every session must learn it within a renewal interval plus its retry (2 s).
    const guard = size.ttl * 1000;
    const killRef = process.hrtime.bigint();
    for (const w of workers) w.send(`down ${killRef} ${guard}`);
    await server.killAll();
    const gone = await Promise.all(workers.map((w) => w.json<SessionsLearned>(guard + 60_000)));
    ctx.log('sessions-scale: every session learned etcd is gone; restarting it');
    const upRef = process.hrtime.bigint();
    const tr = performance.now();
    await server.restartAll();
    const restartMs = performance.now() - tr;
    for (const w of workers) w.send(`up ${upRef} ${guard}`);
    const back = await Promise.all(workers.map((w) => w.json<SessionsLearned>(guard + 60_000)));
    await Promise.all(workers.map((w) => w.close(60_000)));

    const learned = (xs: SessionsLearned[]): number[] => xs.flatMap((x) => x.learnedMs.filter((v): v is number => v !== null));
    const never = (xs: SessionsLearned[]): number => xs.reduce((a, x) => a + x.learnedMs.filter((v) => v === null).length, 0);
    return {
      ...size,
      ...ours,
      sessions: size.processes * size.sessionsPerProcess,
      learnedGone: summarize(learned(gone)),
      restartMs,
      learnedBack: summarize(learned(back)),
      neverLearnedGone: never(gone),
      neverLearnedBack: never(back),
      lost: back.reduce((a, x) => a + x.lost, 0),
      keepAliveStreamsAfter: back.reduce((a, x) => a + x.keepAliveStreamsOpened, 0),
      ...(go ? { go } : {}),
    };
  } finally {
    for (const w of workers) w.kill();
  }
}

const n = (v: number): string => (Number.isFinite(v) ? Math.round(v).toLocaleString('en-US') : '-');

export function sessionsScaleChecks(s: SessionsScaleResult): { phase: string; what: string; ok: boolean; detail: string }[] {
  return [
    {
      phase: 'sessions-scale',
      what: 'one keepalive stream per process, no session lost while etcd ran',
      ok:
        s.keepAliveStreamsPerProcess.every((k) => k === 1) &&
        (s.serverKeepAliveStreams === null || s.serverKeepAliveStreams === s.processes) &&
        s.lostInWindow === 0,
      detail: `${s.keepAliveStreamsPerProcess.join(', ')} opened by the processes, ${s.serverKeepAliveStreams ?? '?'} open on the server, ${s.lostInWindow} lost`,
    },
    {
      phase: 'sessions-scale',
      what: 'every session learned that etcd was gone, and that it was back (or was declared lost)',
      ok: s.neverLearnedGone === 0 && s.neverLearnedBack <= s.lost,
      detail: `${s.neverLearnedGone} never learned gone, ${s.neverLearnedBack} never learned back, ${s.lost} lost of ${s.sessions}`,
    },
  ];
}

export function sessionsScaleSection(s: SessionsScaleResult): { title: string; header: string[]; rows: string[][] } {
  const row = (label: string, x: Omit<SessionsSteady, 'impl'>, outage: string[]): string[] => [
    label,
    `${Math.max(...x.keepAliveStreamsPerProcess)} / ${x.serverKeepAliveStreams ?? '?'}`,
    n(x.renewalsPerSec),
    n(x.clientCpuUsPerRenewal),
    n(x.clientCpuMsPerSec),
    n(x.etcdCpuUsPerRenewal),
    n(x.etcdCpuMsPerSec),
    ...outage,
  ];
  return {
    title:
      `Sessions at scale: ${n(s.sessions)} sessions over ${s.processes} processes (TTL ${s.ttl} s, renewed every ${fixed(s.ttl / 3, 0)} s); ` +
      'then etcd killed and, once every session knew, restarted',
    header: [
      'implementation',
      'keepalive streams (per process / etcd)',
      'renewals/s',
      'client CPU µs/renewal',
      'client CPU ms/s',
      'etcd CPU µs/renewal',
      'etcd CPU ms/s',
      'learned gone p50 / max ms',
      'restart ms',
      'learned back p50 / max ms',
      'lost',
    ],
    rows: [
      row('ours', s, [
        `${n(s.learnedGone.p50)} / ${n(s.learnedGone.max)}`,
        n(s.restartMs),
        `${n(s.learnedBack.p50)} / ${n(s.learnedBack.max)}`,
        String(s.lost),
      ]),
      ...(s.go ? [row(`Go concurrency ${s.go.client ?? ''}`.trim(), s.go, ['-', '-', '-', String(s.go.lostInWindow)])] : []),
    ],
  };
}

/**
 * A session learns of an outage when a renewal goes unanswered for its retry wait (TTL/10,
 * 0.25-2 s): the hub renews every lease again when its stream breaks, so that is within the retry
 * wait of the break (plus the time to see the break). The goal keeps the looser bound of a session
 * that hears only from its own renewal: a renewal interval (TTL/3) plus that wait, and 1 s of
 * slack for a loaded machine. Once etcd answers again, every lease is renewed on the new stream:
 * within 2 s of the restart's end (the stream's reconnect backoff is at most 1 s).
 */
export function sessionsScaleGoals(s: SessionsScaleResult): { id: string; goal: string; measured: string; met: boolean }[] {
  const goneBound = (s.ttl * 1000) / 3 + Math.max(250, Math.min(2000, s.ttl * 100)) + 1000;
  const backBound = s.restartMs + 2000;
  return [
    {
      id: 'sessions-scale-outage',
      goal:
        `sessions at scale (${n(s.sessions)} over ${s.processes} processes): each learns etcd is gone within a renewal interval + its retry + 1 s ` +
        `(${n(goneBound)} ms), and that it is back within 2 s of the restart`,
      measured:
        `gone: p50 ${n(s.learnedGone.p50)}, max ${n(s.learnedGone.max)} ms after the kill; back: p50 ${n(s.learnedBack.p50)}, ` +
        `max ${n(s.learnedBack.max)} ms after the restart began (restart ${n(s.restartMs)} ms); ${s.lost} lost` +
        (s.go
          ? `; client CPU per renewal ${n(s.clientCpuUsPerRenewal)} µs vs Go's ${n(s.go.clientCpuUsPerRenewal)} µs (${(s.clientCpuUsPerRenewal / s.go.clientCpuUsPerRenewal).toFixed(2)}x)`
          : ''),
      met: s.neverLearnedGone === 0 && s.neverLearnedBack === 0 && s.learnedGone.max <= goneBound && s.learnedBack.max <= backBound,
    },
  ];
}

/** Several runs (one per etcd version) side by side. */
export function sessionsScaleVersionsSection(
  rs: { meta: { etcd: string }; sessionsScale?: SessionsScaleResult }[],
): { title: string; header: string[]; rows: string[][] } | undefined {
  if (!rs.every((r) => r.sessionsScale)) return undefined;
  const s0 = rs[0]!.sessionsScale!;
  const row = (name: string, f: (s: SessionsScaleResult) => string): string[] => [name, ...rs.map((r) => f(r.sessionsScale!))];
  return {
    title: `Sessions at scale, etcd versions side by side: ${n(s0.sessions)} sessions over ${s0.processes} processes, TTL ${s0.ttl} s`,
    header: ['', ...rs.map((r) => `etcd ${r.meta.etcd}`)],
    rows: [
      row(
        'keepalive streams (per process / on etcd)',
        (s) => `${Math.max(...s.keepAliveStreamsPerProcess)} / ${s.serverKeepAliveStreams ?? '?'}`,
      ),
      row('renewals/s', (s) => n(s.renewalsPerSec)),
      row('client CPU µs per renewal', (s) => n(s.clientCpuUsPerRenewal)),
      row("Go's client CPU µs per renewal (ours ÷ Go)", (s) =>
        s.go ? `${n(s.go.clientCpuUsPerRenewal)} (${(s.clientCpuUsPerRenewal / s.go.clientCpuUsPerRenewal).toFixed(2)}x)` : '-',
      ),
      row('etcd CPU µs per renewal', (s) => n(s.etcdCpuUsPerRenewal)),
      row("etcd CPU µs per renewal, Go's sessions", (s) => (s.go ? n(s.go.etcdCpuUsPerRenewal) : '-')),
      row('etcd CPU ms/s', (s) => n(s.etcdCpuMsPerSec)),
      row('learned etcd gone, ms after the kill: p50 / max', (s) => `${n(s.learnedGone.p50)} / ${n(s.learnedGone.max)}`),
      row('restart of etcd, ms', (s) => n(s.restartMs)),
      row('learned etcd back, ms after the restart began: p50 / max', (s) => `${n(s.learnedBack.p50)} / ${n(s.learnedBack.max)}`),
      row('sessions lost', (s) => String(s.lost)),
    ],
  };
}
