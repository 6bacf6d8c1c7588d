// `npm run bench`: starts its own etcd, then measures our library, the `etcd3` package and the
// floor (raw etcd operations) side by side in one run, and judges the goals.
//
//   node --import tsx bench/main.ts [--quick] [--members 1|3] [--contenders 8]
//        [--only floor,uncontended,contended,election,scale,sessions] [--json out.json]
//        [--markdown out.md] [--charts docs]
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { cpus, availableParallelism } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Client } from '../src/index.js';
import { contendedSvg, electionSvg } from './charts.js';
import { runContended } from './contended.js';
import type { BenchContext } from './context.js';
import { runElection } from './election.js';
import { startBenchEtcd } from './etcd.js';
import { runFloor } from './floor.js';
import { renderMarkdown, renderText } from './report.js';
import { collectChecks, judgeGoals, type Results } from './results.js';
import { runScale } from './scale.js';
import { runSessions } from './sessions.js';
import { runUncontended } from './uncontended.js';

const PHASES = ['floor', 'uncontended', 'contended', 'election', 'scale', 'sessions'] as const;
type Phase = (typeof PHASES)[number];

function usage(message: string): never {
  process.stderr.write(
    `bench: ${message}\nusage: bench/main.ts [--quick] [--members 1|3] [--contenders N] [--only ${PHASES.join(',')}] ` +
      '[--json FILE] [--markdown FILE] [--charts DIR]\n',
  );
  process.exit(2);
}

function options() {
  let parsed;
  try {
    parsed = parseArgs({
      options: {
        quick: { type: 'boolean', default: false },
        members: { type: 'string', default: '1' },
        contenders: { type: 'string', default: '8' },
        only: { type: 'string' },
        json: { type: 'string' },
        markdown: { type: 'string' },
        charts: { type: 'string' },
      },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (err) {
    usage((err as Error).message);
  }
  const members = Number(parsed.members);
  if (members !== 1 && members !== 3) usage(`--members must be 1 or 3, got ${parsed.members}`);
  const contenders = Number(parsed.contenders);
  if (!Number.isInteger(contenders) || contenders < 2 || contenders > 64) usage(`--contenders must be 2..64, got ${parsed.contenders}`);
  const only = parsed.only ? parsed.only.split(',').map((s) => s.trim()) : [...PHASES];
  for (const p of only) if (!(PHASES as readonly string[]).includes(p)) usage(`unknown phase "${p}"`);
  return { ...parsed, members: members as 1 | 3, contenders, only: new Set(only as Phase[]) };
}

async function main(): Promise<number> {
  const opts = options();
  const started = performance.now();
  const log = (m: string): void => {
    process.stderr.write(`[bench +${((performance.now() - started) / 1000).toFixed(1)}s] ${m}\n`);
  };
  log(`starting etcd (${opts.members} member${opts.members > 1 ? 's' : ''})`);
  const etcd = await startBenchEtcd(opts.members);
  const results: Results = {
    meta: {
      date: new Date().toISOString(),
      node: process.version,
      etcd: '?',
      nproc: availableParallelism(),
      cpu: cpus()[0]?.model.trim() ?? '?',
      members: opts.members,
      contenders: opts.contenders,
      quick: opts.quick,
    },
    goals: [],
    checks: [],
    errors: [],
  };
  try {
    const probe = new Client({ endpoints: etcd.endpoints });
    try {
      results.meta.etcd = (await probe.status()).version;
    } finally {
      await probe.close();
    }
    const ctx: BenchContext = {
      endpoints: etcd.endpoints,
      members: opts.members,
      quick: opts.quick,
      contenders: opts.contenders,
      prefix: `bench/${randomBytes(3).toString('hex')}/`,
      log,
    };
    const phase = async (name: string, fn: () => Promise<void>): Promise<void> => {
      log(`${name}...`);
      try {
        await fn();
      } catch (err) {
        log(`${name} FAILED: ${(err as Error).stack ?? err}`);
        results.errors.push({ phase: name, message: (err as Error).message ?? String(err) });
      }
    };
    if (opts.only.has('floor')) await phase('floor', async () => void (results.floor = await runFloor(ctx)));
    if (opts.only.has('uncontended')) await phase('uncontended', async () => void (results.uncontended = await runUncontended(ctx)));
    if (opts.only.has('contended')) {
      await phase('contended', async () => void (results.contended = await runContended(ctx, ['ours', 'reference', 'etcd3'])));
    }
    if (opts.only.has('election')) {
      await phase('election', async () => {
        const e = await runElection(ctx);
        results.election = e.results;
        results.electionFloor = e.floor;
        results.electionColdFloor = e.coldFloor;
      });
    }
    if (opts.only.has('scale')) {
      results.scale = [];
      for (const n of opts.quick ? [100, 1000] : [100, 1000, 10_000]) {
        await phase(`scale/${n}`, async () => void results.scale!.push(await runScale(ctx, n)));
      }
    }
    if (opts.only.has('sessions')) await phase('sessions', async () => void (results.sessions = await runSessions(ctx)));
  } finally {
    log('stopping etcd');
    await etcd.stop();
  }
  results.meta.wallMs = performance.now() - started;
  results.goals = judgeGoals(results);
  results.checks = collectChecks(results);

  process.stdout.write(`${renderText(results)}\n`);
  const json = JSON.stringify(results, (_, v: unknown) => (typeof v === 'bigint' ? v.toString() : v), 2);
  if (opts.json) await writeFile(opts.json, `${json}\n`);
  if (opts.markdown) await writeFile(opts.markdown, renderMarkdown(results));
  if (opts.charts) {
    const c = contendedSvg(results);
    const e = electionSvg(results);
    if (c) await writeFile(join(opts.charts, 'bench-contended.svg'), c);
    if (e) await writeFile(join(opts.charts, 'bench-election.svg'), e);
  }
  log(`done in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  const failed = results.checks.filter((c) => !c.ok);
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
