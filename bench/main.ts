// `npm run bench`: starts its own etcd, then measures our library, etcd's own Go package (interop/go),
// the `etcd3` package and the floor (raw etcd operations) side by side in one run, and judges the
// goals. It measures the compiled library (dist/, as users run it; `npm run bench` builds it first):
// under tsx every closure would also carry the `name` property esbuild's keepNames gives it.
//
//   node --import tsx bench/main.ts [--quick] [--members 1|3] [--contenders 8] [--etcd 3.4,3.7]
//        [--only floor,uncontended,telemetry,contended,election,scale,semaphore,rwlock,semaphore-scale,sessions,locks,one-client,renewals,rtt,sessions-scale]
//        [--rtt 10,1]
//        [--json out.json]
//        [--markdown out.md] [--charts docs] [--require-go]
//
// --etcd with several versions starts one server of each and lets them take turns round by round in
// the contended and election phases (the other phases run one version after the other); the outputs
// then hold one run per version and the side-by-side tables (bench/compare.ts renders the same from
// separate --json files).
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { cpus, availableParallelism, loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Client } from '../dist/index.js';
import { contendedSvg, electionSvg } from './charts.js';
import { runContended, type LockImpl } from './contended.js';
import type { BenchContext } from './context.js';
import { runElection, type ElectionImpl } from './election.js';
import { startBenchEtcd, type BenchEtcd } from './etcd.js';
import { runFloor } from './floor.js';
import { ONE_CLIENT_SIZE, runLocks } from './locks.js';
import { goBinary } from './go.js';
import { renderMarkdown, renderText } from './report.js';
import { renderVersionsMarkdown, renderVersionsText } from './report-versions.js';
import { collectChecks, judgeGoals, type Results } from './results.js';
import { runRWLock } from './rwlock.js';
import { runScale, runSemaphoreScale } from './scale.js';
import { scaleSvg } from './scale-chart.js';
import { runSemaphore } from './semaphore.js';
import { runSessions } from './sessions.js';
import { runSessionsScale } from './sessions-scale.js';
import { runUncontended } from './uncontended.js';
import { runRenewals } from './renewals.js';
import { renderRtt, runRtt } from './rtt.js';
import { rttSvg } from './rtt-chart.js';
import { runTelemetry } from './telemetry.js';

const PHASES = [
  'floor',
  'uncontended',
  'telemetry',
  'contended',
  'election',
  'scale',
  'semaphore',
  'rwlock',
  'semaphore-scale',
  'sessions',
  'locks',
  'one-client',
  'renewals',
  'rtt',
  'sessions-scale',
] as const;
type Phase = (typeof PHASES)[number];

/** semaphore-scale: waiters queued on a semaphore of 4 permits (--quick: tiny sizes, sanity only). */
const SEMAPHORE_SCALE = { permits: 4, waiters: (quick: boolean): number[] => (quick ? [20, 100] : [100, 1000]) };

function usage(message: string): never {
  process.stderr.write(
    `bench: ${message}\nusage: bench/main.ts [--quick] [--members 1|3] [--contenders N] [--etcd VERSION[,VERSION]] ` +
      `[--only ${PHASES.join(',')}] [--rtt MS[,MS]] [--json FILE] [--markdown FILE] [--charts DIR] [--require-go]\n`,
  );
  process.exit(2);
}

function options() {
  const parsed = (() => {
    try {
      return parseArgs({
        options: {
          quick: { type: 'boolean', default: false },
          members: { type: 'string', default: '1' },
          contenders: { type: 'string', default: '8' },
          etcd: { type: 'string' },
          // rtt phase: the round-trip times to run it at (default 10,1; --quick: 10).
          rtt: { type: 'string' },
          only: { type: 'string' },
          json: { type: 'string' },
          markdown: { type: 'string' },
          charts: { type: 'string' },
          'require-go': { type: 'boolean', default: false },
        },
        strict: true,
        allowPositionals: false,
      }).values;
    } catch (err) {
      return usage((err as Error).message);
    }
  })();
  const members = Number(parsed.members);
  if (members !== 1 && members !== 3) usage(`--members must be 1 or 3, got ${parsed.members}`);
  const contenders = Number(parsed.contenders);
  if (!Number.isInteger(contenders) || contenders < 2 || contenders > 64) usage(`--contenders must be 2..64, got ${parsed.contenders}`);
  // --quick (CI's sanity run) leaves the rtt phase to its own run (--quick --only rtt): it starts
  // clusters of its own and spends most of its time waiting on the delayed network.
  const only = parsed.only ? parsed.only.split(',').map((s) => s.trim()) : PHASES.filter((p) => !(parsed.quick && p === 'rtt'));
  for (const p of only) if (!(PHASES as readonly string[]).includes(p)) usage(`unknown phase "${p}"`);
  const versions = parsed.etcd ? parsed.etcd.split(',').map((v) => v.trim()) : [undefined];
  for (const v of versions)
    if (v !== undefined && !/^\d+\.\d+(\.\d+)?$/.test(v)) usage(`--etcd wants versions like 3.4 or 3.7.3, got "${v}"`);
  const rtts = (parsed.rtt ?? (parsed.quick ? '10' : '10,1')).split(',').map(Number);
  for (const v of rtts) if (!(v > 0 && v <= 200)) usage(`--rtt wants milliseconds in (0, 200], got "${parsed.rtt}"`);
  return {
    ...parsed,
    rtts,
    members: members as 1 | 3,
    contenders,
    only: new Set(only as Phase[]),
    versions,
    requireGo: parsed['require-go'],
  };
}

async function main(): Promise<number> {
  const opts = options();
  const started = performance.now();
  const log = (m: string): void => {
    process.stderr.write(`[bench +${((performance.now() - started) / 1000).toFixed(1)}s] ${m}\n`);
  };
  const load = loadavg();
  log(`load average ${load.map((v) => v.toFixed(2)).join(' ')}`);
  // etcd's own Go package, for the contended, election, locks, one-client, renewals, sessions-scale and rtt phases.
  let go: string | undefined;
  let goSkipped: string | undefined;
  if (['contended', 'election', 'locks', 'one-client', 'renewals', 'sessions-scale', 'rtt'].some((p) => opts.only.has(p as Phase))) {
    log('building interop/go (cached after the first time)');
    const g = await goBinary();
    if ('bin' in g) go = g.bin;
    else {
      goSkipped = g.error;
      log(`no Go rows: ${g.error}`);
      if (opts.requireGo) return 1;
    }
  }
  const etcds: BenchEtcd[] = [];
  const runs: Results[] = [];
  const ctxs: BenchContext[] = [];
  try {
    for (const version of opts.versions) {
      log(`starting etcd${version ? ` ${version}` : ''} (${opts.members} member${opts.members > 1 ? 's' : ''})`);
      const etcd = await startBenchEtcd(opts.members, version);
      etcds.push(etcd);
      const probe = new Client({ endpoints: etcd.endpoints });
      let served: string;
      try {
        served = (await probe.status()).version;
      } finally {
        await probe.close();
      }
      if (served !== etcd.version) log(`etcd ${etcd.version} reports server version ${served}`);
      runs.push({
        meta: {
          date: new Date().toISOString(),
          node: process.version,
          etcd: served,
          nproc: availableParallelism(),
          cpu: cpus()[0]?.model.trim() ?? '?',
          members: opts.members,
          contenders: opts.contenders,
          quick: opts.quick,
          load: { start: load },
          ...(opts.versions.length > 1 ? { versions: [] } : {}),
          ...(go || goSkipped ? { go: goSkipped ? { skipped: goSkipped } : {} } : {}),
        },
        goals: [],
        checks: [],
        errors: [],
      });
      ctxs.push({
        endpoints: etcd.endpoints,
        etcd: served,
        members: opts.members,
        quick: opts.quick,
        contenders: opts.contenders,
        prefix: `bench/${randomBytes(3).toString('hex')}/`,
        ...(go ? { go } : {}),
        server: etcd,
        log,
      });
    }
    for (const r of runs) if (r.meta.versions) r.meta.versions = runs.map((x) => x.meta.etcd);
    const phase = async (name: string, on: Results[], fn: () => Promise<void>): Promise<void> => {
      log(`${name}...`);
      try {
        await fn();
      } catch (err) {
        log(`${name} FAILED: ${(err as Error).stack ?? err}`);
        for (const r of on) r.errors.push({ phase: name, message: (err as Error).message ?? String(err) });
      }
    };
    const each = async (name: string, fn: (ctx: BenchContext, r: Results) => Promise<void>): Promise<void> => {
      for (const [k, ctx] of ctxs.entries())
        await phase(ctxs.length > 1 ? `${name} (etcd ${ctx.etcd})` : name, [runs[k]!], () => fn(ctx, runs[k]!));
    };
    if (opts.only.has('floor')) await each('floor', async (ctx, r) => void (r.floor = await runFloor(ctx)));
    if (opts.only.has('uncontended')) await each('uncontended', async (ctx, r) => void (r.uncontended = await runUncontended(ctx)));
    // The cost of metrics and spans (logged, and kept in the JSON as `telemetry`).
    if (opts.only.has('telemetry'))
      await each('telemetry', async (ctx, r) => void Object.assign(r, { telemetry: await runTelemetry(ctx) }));
    if (opts.only.has('contended')) {
      const impls: LockImpl[] = go ? ['ours', 'go', 'reference', 'etcd3'] : ['ours', 'reference', 'etcd3'];
      await phase('contended', runs, async () => {
        const out = await runContended(ctxs, impls);
        out.forEach((c, k) => (runs[k]!.contended = c));
      });
    }
    if (opts.only.has('election')) {
      const impls: ElectionImpl[] = go ? ['ours', 'go', 'reference', 'etcd3'] : ['ours', 'reference', 'etcd3'];
      await phase('election', runs, async () => {
        const out = await runElection(ctxs, impls);
        out.forEach((e, k) => {
          const r = runs[k]!;
          r.election = e.results;
          r.electionFloor = e.floor;
          r.electionColdFloor = e.coldFloor;
        });
      });
    }
    for (const r of runs) {
      const client = r.contended?.find((x) => x.client)?.client ?? r.election?.find((x) => x.client)?.client;
      if (client) r.meta.go = { client };
    }
    if (opts.only.has('scale')) {
      await each('scale', async (ctx, r) => {
        r.scale = [];
        for (const n of opts.quick ? [100, 1000] : [100, 1000, 10_000]) {
          await phase(`scale/${n}`, [r], async () => void r.scale!.push(await runScale(ctx, n)));
        }
      });
    }
    if (opts.only.has('semaphore')) await each('semaphore', async (ctx, r) => void (r.semaphore = await runSemaphore(ctx)));
    if (opts.only.has('rwlock')) await each('rwlock', async (ctx, r) => void (r.rwlock = await runRWLock(ctx)));
    if (opts.only.has('semaphore-scale')) {
      await each('semaphore-scale', async (ctx, r) => {
        r.semaphoreScale = [];
        for (const n of SEMAPHORE_SCALE.waiters(opts.quick)) {
          await phase(
            `semaphore-scale/${n}`,
            [r],
            async () => void r.semaphoreScale!.push(await runSemaphoreScale(ctx, n, SEMAPHORE_SCALE.permits)),
          );
        }
      });
    }
    if (opts.only.has('sessions')) await each('sessions', async (ctx, r) => void (r.sessions = await runSessions(ctx)));
    if (opts.only.has('locks')) await each('locks', async (ctx, r) => void (r.locks = await runLocks(ctx)));
    if (opts.only.has('one-client'))
      await each('one-client', async (ctx, r) => void (r.oneClient = await runLocks(ctx, ONE_CLIENT_SIZE(ctx.quick))));
    if (opts.only.has('renewals')) await each('renewals', async (ctx, r) => void (r.renewals = await runRenewals(ctx)));
    // Real round-trip times (bench/rtt.ts): a delayed 3-member cluster of its own per version and RTT.
    if (opts.only.has('rtt'))
      await each('rtt', async (ctx, r) => void (r.rtt = await runRtt(ctx, opts.rtts, opts.versions[ctxs.indexOf(ctx)], go !== undefined)));
    // Last: it kills etcd (and starts it again).
    if (opts.only.has('sessions-scale'))
      await each('sessions-scale', async (ctx, r) => void (r.sessionsScale = await runSessionsScale(ctx)));
  } finally {
    log(`stopping etcd`);
    for (const e of etcds) await e.stop().catch((err: unknown) => log(`stopping etcd: ${(err as Error).message}`));
  }
  const end = loadavg();
  for (const r of runs) {
    r.meta.wallMs = performance.now() - started;
    r.meta.load!.end = end;
    r.goals = judgeGoals(r);
    r.checks = collectChecks(r);
  }
  const several = runs.length > 1;
  const rttText = (md: boolean): string => runs.map((r) => (r.rtt ? `${renderRtt(r.rtt, md)}\n` : '')).join('');
  process.stdout.write(`${several ? renderVersionsText(runs) : renderText(runs[0]!)}\n${rttText(false)}`);
  const json = JSON.stringify(several ? runs : runs[0], (_, v: unknown) => (typeof v === 'bigint' ? v.toString() : v), 2);
  if (opts.json) await writeFile(opts.json, `${json}\n`);
  if (opts.markdown) await writeFile(opts.markdown, (several ? renderVersionsMarkdown(runs) : renderMarkdown(runs[0]!)) + rttText(true));
  if (opts.charts) {
    const c = contendedSvg(runs);
    const e = electionSvg(runs);
    if (c) await writeFile(join(opts.charts, 'bench-contended.svg'), c);
    if (e) await writeFile(join(opts.charts, 'bench-election.svg'), e);
    const s = scaleSvg(runs);
    if (s) await writeFile(join(opts.charts, 'bench-scale.svg'), s);
    const t = rttSvg(runs);
    if (t) await writeFile(join(opts.charts, 'bench-rtt.svg'), t);
  }
  log(`done in ${((performance.now() - started) / 1000).toFixed(1)} s; load average ${end.map((v) => v.toFixed(2)).join(' ')}`);
  const failed = runs.flatMap((r) => r.checks.filter((c) => !c.ok));
  if (failed.length > 0) log(`${failed.length} check(s) FAILED`);
  return failed.length > 0 ? 1 : 0;
}

main().then(
  (code) => {
    process.exitCode = code;
    // Everything of ours is closed and the loop should drain. etcd3 1.1.2 leaves a timer behind per
    // released lock (its keepalive debounce is re-armed by a late response, up to the 30 s TTL):
    // do not sit those out.
    setTimeout(() => {
      const open = process.getActiveResourcesInfo().filter((r) => r !== 'PipeWrap' && r !== 'TTYWrap');
      process.stderr.write(`bench: exiting with ${open.length} handle(s) still open (${open.join(', ')}; etcd3's lease timers)\n`);
      process.exit(code);
    }, 2000).unref();
  },
  (err: unknown) => {
    process.stderr.write(`bench: ${(err as Error).stack ?? err}\n`);
    process.exit(1);
  },
);
