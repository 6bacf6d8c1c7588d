// Client CPU per lease renewal: one Client holding N sessions (default 1,000 at TTL 6, so each renews
// every 2 s), one process per measurement, against one etcd this script starts. A measurement is the
// process's CPU (process.cpuUsage) over a window, less its idle CPU (measured before any session
// exists), divided by the renewals answered in that window. Each --lib is a build of the library
// (its dist/index.js), so that two builds alternate on the same etcd in one run:
//
//   node scripts/etcd.mjs exec 3.7 -- node --import tsx bench/renew-cpu.ts [--sessions 1000] [--ttl 6]
//        [--seconds 10] [--rounds 3] [--stagger 0|MS] [--warmup S (default 180)] [--lib A/dist/index.js,B/dist/index.js]
//        [--prof DIR]   (each process under --cpu-prof; the window's self time by layer is printed)
//        [--go]         (each round also measures etcd's Go package: `go-interop bench-sessions`, the
//                        same sessions on one clientv3 client, one window after one second's warm-up)
//        [--idle]       (the sessions made at once; the window starts a second after they all renewed,
//                        so that it holds no renewal: CPU per second of sessions with nothing due)
//        [--endpoints E] [--json FILE]   (an etcd already running; every window's figures to FILE)
//
// `npm run bench -- --only renewals` runs it on each version's etcd (bench/renewals.ts).
//
// --stagger MS creates the sessions evenly over MS (default: one renewal interval, so that their
// renewals are spread as in a process that created them over time; 0: all at once).
import { spawn } from 'node:child_process';
import { subscribe } from 'node:diagnostics_channel';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { loadavg } from 'node:os';
import { type PerformanceEntry, PerformanceObserver, constants } from 'node:perf_hooks';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Profiler } from 'node:inspector';
import { analyze, printBreakdown } from './profile-analyze.js';
import { goBinary } from './go.js';
import { LineWorker } from './workers.js';

export interface Measured {
  lib: string;
  sessions: number;
  renewals: number;
  wallMs: number;
  cpuMs: number;
  /** Of cpuMs: in the kernel (system time). */
  sysMs: number;
  idleCpuMsPerSec: number;
  usPerRenewal: number;
  late: number;
  lost: number;
  /** Garbage collections in the window (PerformanceObserver 'gc'), major ones (mark-compact) among them, and their total duration. */
  gcs: number;
  majorGcs: number;
  gcMs: number;
  window: [number, number];
}

const { values: opts } = parseArgs({
  options: {
    worker: { type: 'boolean', default: false },
    endpoints: { type: 'string' },
    lib: { type: 'string', default: '../dist/index.js' },
    sessions: { type: 'string', default: '1000' },
    ttl: { type: 'string', default: '6' },
    seconds: { type: 'string', default: '10' },
    rounds: { type: 'string', default: '3' },
    stagger: { type: 'string' },
    warmup: { type: 'string' },
    prof: { type: 'string' },
    go: { type: 'boolean', default: false },
    idle: { type: 'boolean', default: false },
    json: { type: 'string' },
  },
  strict: true,
});
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const here = fileURLToPath(new URL('.', import.meta.url));
const libUrl = (lib: string): string => pathToFileURL(resolve(here, lib)).href;

/** The label of Go's package among the --lib builds. */
const GO = 'go (clientv3)';

if (opts.worker) await worker();
else await main();

async function worker(): Promise<void> {
  const { Client, Session } = (await import(libUrl(opts.lib))) as typeof import('../dist/index.js');
  const n = Number(opts.sessions);
  const ttl = Number(opts.ttl);
  const intervalMs = (ttl * 1000) / 3;
  const stagger = opts.idle ? 0 : opts.stagger === undefined ? intervalMs : Number(opts.stagger);
  const client = new Client({ endpoints: opts.endpoints!.split(','), dialTimeoutMs: 15_000 });
  // Bench-only: count answered renewals by wrapping this instance's hub registration.
  let renewals = 0;
  // biome-ignore lint/suspicious/noExplicitAny: the bench counts renewals by wrapping an internal method
  const hub = client.keepAlives as any;
  const register = hub.register.bind(hub);
  hub.register = (id: bigint, l: { onRenewed: (ttl: bigint, sentAt: number) => void }) =>
    register(id, {
      ...l,
      onRenewed: (t: bigint, sentAt: number) => {
        renewals++;
        l.onRenewed(t, sentAt);
      },
    });
  let late = 0;
  subscribe('etcd-concurrency:session:late-renewal', () => late++);
  await client.status(); // connected
  await sleep(300);
  let cpu = process.cpuUsage();
  let t = performance.now();
  await sleep(1000);
  const idleCpuMsPerSec = ms(process.cpuUsage(cpu)) / ((performance.now() - t) / 1000);
  const sessions: Awaited<ReturnType<typeof Session.create>>[] = [];
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: n }, async (_, i) => {
      const at = t0 + (stagger * i) / n;
      if (at > performance.now()) await sleep(at - performance.now());
      sessions.push(await Session.create(client, { ttl }));
    }),
  );
  // Warm-up (default: three minutes and at least two renewal intervals): the renewals settle into
  // their phase, and V8 compiles the renewal path. At TTL 60 a slot's code runs every 2 s: after 60 s
  // TurboFan still compiled seven of its functions inside a 30 s window (48 ms, half the window's
  // CPU), and one build measured 46-68 µs per renewal after two intervals, 17 µs after three minutes.
  await sleep(opts.warmup === undefined ? Math.max(180_000, 2 * intervalMs + 500) : Number(opts.warmup) * 1000);
  if (opts.idle) {
    // Sessions made at once renew together, in one or two of the renewal grid's slots (2 s apart at
    // TTL 60): wait for a quiet spell longer than that (between two rounds), then for every session's
    // next renewal, then a little more.
    for (let last = -1; last !== renewals; ) {
      last = renewals;
      await sleep(Math.min(3000, intervalMs / 4));
    }
    const mark = renewals;
    const until = performance.now() + 2 * intervalMs;
    while (renewals - mark < n && performance.now() < until) await sleep(20);
    await sleep(Math.min(1000, intervalMs / 8));
  }
  late = 0;
  let gcs = 0;
  let majorGcs = 0;
  let gcMs = 0;
  const gcObserver = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      gcs++;
      if ((e as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR) majorGcs++;
      gcMs += e.duration;
    }
  });
  gcObserver.observe({ entryTypes: ['gc'] });
  const r0 = renewals;
  const w0 = process.hrtime.bigint() / 1000n;
  cpu = process.cpuUsage();
  t = performance.now();
  await sleep(Number(opts.seconds) * 1000);
  const used = process.cpuUsage(cpu);
  const cpuMs = ms(used);
  const wallMs = performance.now() - t;
  const w1 = process.hrtime.bigint() / 1000n;
  const got = renewals - r0;
  gcObserver.disconnect();
  const m: Measured = {
    lib: opts.lib,
    sessions: n,
    renewals: got,
    wallMs,
    cpuMs,
    sysMs: used.system / 1000,
    idleCpuMsPerSec,
    usPerRenewal: (1000 * (cpuMs - (idleCpuMsPerSec * wallMs) / 1000)) / got,
    late,
    lost: sessions.filter((s) => s.signal.aborted).length,
    gcs,
    majorGcs,
    gcMs,
    window: [Number(w0), Number(w1)],
  };
  process.stdout.write(`${JSON.stringify(m)}\n`);
  await Promise.all(sessions.map((s) => s.close().catch(() => {})));
  await client.close();
}

function ms(u: NodeJS.CpuUsage): number {
  return (u.user + u.system) / 1000;
}

async function main(): Promise<void> {
  const { startEtcd } = await import('../dist/testing/index.js');
  const libs = opts.lib.split(',');
  let go: string | undefined;
  if (opts.go) {
    const b = await goBinary();
    if ('error' in b) throw new Error(`renew-cpu --go: ${b.error}`);
    go = b.bin;
    libs.push(GO);
  }
  const cluster = opts.endpoints
    ? { endpoints: opts.endpoints.split(','), version: 'given', stop: async () => {} }
    : await startEtcd({ members: 1 });
  process.stdout.write(
    `etcd ${cluster.version}; ${opts.sessions} sessions, TTL ${opts.ttl}, window ${opts.seconds} s${opts.idle ? ', idle' : ''}\n`,
  );
  const results = new Map<string, Measured[]>(libs.map((l) => [l, []]));
  try {
    for (let round = 0; round < Number(opts.rounds); round++) {
      for (const lib of libs) {
        const dir = opts.prof && lib !== GO ? resolve(opts.prof, `r${round}-${libs.indexOf(lib)}`) : undefined;
        if (dir) await mkdir(dir, { recursive: true });
        const load = loadavg()[0]!;
        const m = lib === GO ? await runGo(go!, cluster.endpoints.join(',')) : await runWorker(lib, cluster.endpoints.join(','), dir);
        results.get(lib)!.push(m);
        // Go's program reports neither kernel time, late renewals nor garbage collections.
        const ours = lib === GO ? '' : ` (${m.sysMs.toFixed(0)} in the kernel)`;
        const more = lib === GO ? '' : `, late ${m.late}, GC ${m.gcs} (${m.majorGcs} major) ${m.gcMs.toFixed(1)} ms`;
        process.stdout.write(
          `round ${round} ${lib}: ${m.renewals > 0 ? `${m.usPerRenewal.toFixed(1)} µs/renewal` : `${((m.cpuMs * 1000) / m.wallMs).toFixed(2)} ms/s with no renewal`} (${m.renewals} renewals, ${m.cpuMs.toFixed(0)} ms CPU${ours} in ${m.wallMs.toFixed(0)} ms, idle ${m.idleCpuMsPerSec.toFixed(1)} ms/s, lost ${m.lost}${more}; load ${load.toFixed(1)})\n`,
        );
        if (dir) {
          // The main thread's profile (tsx's loader thread writes a second one).
          const file = (await readdir(dir)).filter((f) => f.endsWith('.cpuprofile')).sort()[0];
          process.stdout.write(`  ${join(dir, file!)} --window ${m.window.join(',')}\n`);
          const profile = JSON.parse(await readFile(join(dir, file!), 'utf8')) as Profiler.Profile;
          printBreakdown(`  profile ${lib}`, analyze(profile, m.renewals, m.window));
        }
      }
    }
  } finally {
    await cluster.stop();
  }
  if (opts.json) await writeFile(opts.json, `${JSON.stringify(Object.fromEntries(results))}\n`);
  for (const [lib, ms] of results) {
    // A window without renewals (idle sessions) is judged by its CPU per second instead.
    const idle = ms.every((m) => m.renewals === 0);
    const per = ms.map((m) => (idle ? (m.cpuMs * 1000) / m.wallMs : m.usPerRenewal)).sort((a, b) => a - b);
    process.stdout.write(
      `${lib}: median ${per[Math.floor(per.length / 2)]!.toFixed(idle ? 2 : 1)} ${idle ? 'ms/s' : 'µs/renewal'} (${per.map((u) => u.toFixed(idle ? 2 : 1)).join(', ')})\n`,
    );
  }
}

/**
 * Go's package on the same sessions: `go-interop bench-sessions` creates them at once (128 at a
 * time), so their renewals fall in one of its lessor's 500 ms ticks per interval; one window.
 */
async function runGo(bin: string, endpoints: string): Promise<Measured> {
  const w = LineWorker.go(bin, [
    `--endpoints=${endpoints}`,
    `--ttl=${opts.ttl}`,
    'bench-sessions',
    `--sessions=${opts.sessions}`,
    '--idle=1s',
  ]);
  try {
    await w.ready(180_000);
    await sleep(1000);
    const ms = Number(opts.seconds) * 1000;
    w.send(`window ${ms}`);
    const r = await w.json<{ renewals: number; wallMs: number; cpuMs: number; idleCpuMsPerSec: number; lost: number }>(ms + 60_000);
    await w.close(60_000);
    return {
      lib: GO,
      sessions: Number(opts.sessions),
      renewals: r.renewals,
      wallMs: r.wallMs,
      cpuMs: r.cpuMs,
      sysMs: NaN,
      idleCpuMsPerSec: r.idleCpuMsPerSec,
      usPerRenewal: (1000 * (r.cpuMs - (r.idleCpuMsPerSec * r.wallMs) / 1000)) / r.renewals,
      late: 0,
      lost: r.lost,
      gcs: NaN,
      majorGcs: NaN,
      gcMs: NaN,
      window: [0, 0],
    };
  } finally {
    w.kill();
  }
}

function runWorker(lib: string, endpoints: string, profDir?: string): Promise<Measured> {
  const args = [
    ...(profDir ? ['--cpu-prof', '--cpu-prof-interval', '200', '--cpu-prof-dir', profDir] : []),
    '--import',
    'tsx',
    fileURLToPath(import.meta.url),
    '--worker',
    '--lib',
    lib,
    '--endpoints',
    endpoints,
    '--sessions',
    opts.sessions,
    '--ttl',
    opts.ttl,
    '--seconds',
    opts.seconds,
    ...(opts.stagger !== undefined ? ['--stagger', opts.stagger] : []),
    ...(opts.warmup !== undefined ? ['--warmup', opts.warmup] : []),
    ...(opts.idle ? ['--idle'] : []),
  ];
  return new Promise((ok, fail) => {
    const p = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.on('error', fail);
    p.on('exit', (code) => {
      const line = out.trim().split('\n').pop() ?? '';
      if (code !== 0 || !line.startsWith('{')) fail(new Error(`renew-cpu worker exited ${code}: ${out}`));
      else ok(JSON.parse(line) as Measured);
    });
  });
}
