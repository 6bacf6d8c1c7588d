// The simulator's runner (docs/simulation.md):
//   npm run sim -- --seeds N [--from F] [--jobs J]      N schedules, seeds F.. (default 1), J in parallel
//   npm run sim -- --seed S [--trace] [--verbose]       one schedule; --trace prints `trace hash: <hex>`
//   common: --profile 3.4|3.7  --workload NAME  --no-faults  --only f1,o3,...  --skip-known  --no-shrink
// Exits 1 on a violation, printing the seed, the violation, the replay command and a shrunk trace.
import { fork } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { type RunOptions, type RunResult, runSchedule, WORKLOADS, type ProfileName, type WorkloadName, planFor } from '../src/testing/sim/run.js';
import { restrict, shrink } from '../src/testing/sim/shrink.js';
import { KNOWN_OPEN } from './known.js';

const args = process.argv.slice(2);
function flag(name: string): string | undefined {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : undefined;
}
const profile = (flag('profile') ?? '3.7') as ProfileName;
const workload = (flag('workload') ?? 'mixed') as WorkloadName;
if (!['3.4', '3.7'].includes(profile)) throw new Error(`--profile must be 3.4 or 3.7, got ${profile}`);
if (!WORKLOADS.includes(workload)) throw new Error(`--workload must be one of ${WORKLOADS.join(', ')}, got ${workload}`);
const faults = !args.includes('--no-faults');
const only = flag('only');
// Error stacks cost a third of a schedule's time and no check reads them.
Error.stackTraceLimit = 0;

function optionsFor(seed: number): RunOptions {
  const o: RunOptions = { seed, profile, workload, faults };
  return only === undefined ? o : { ...o, plan: restrict(planFor(seed, { faults, workload }), new Set(only.split(','))) };
}

function replay(seed: number, keep?: readonly string[]): string {
  return `npm run sim -- --seed ${seed} --profile ${profile} --workload ${workload}${faults ? '' : ' --no-faults'}${keep ? ` --only ${keep.join(',')}` : ''} --verbose`;
}

/** The lines of a trace worth reading: faults, grants, ends, violations. */
function digest(lines: readonly string[]): string[] {
  return lines.filter((l) => /fault|grant|end |VIOLATION|crash|pause|resume|partition|leader|revoke|compact|op /.test(l));
}

async function report(seed: number, r: RunResult): Promise<void> {
  console.log(`seed ${seed} (profile ${profile}, workload ${workload}): ${r.violations.length} violation(s)`);
  for (const v of r.violations) console.log(`  ${v.rule} at ${v.at} ms: ${v.detail}`);
  console.log(`  replay: ${replay(seed)}`);
  if (args.includes('--no-shrink')) return;
  const s = await shrink(optionsFor(seed), r);
  console.log(`  shrunk to ${s.keep.length} of ${r.plan.faults.length + r.plan.procs.flatMap((p) => p.sessions.flatMap((x) => x.actors.flat())).length} parts in ${s.runs} runs: ${replay(seed, s.keep)}`);
  for (const l of digest(s.result.trace ?? [])) console.log(`    ${l}`);
}

const one = flag('seed');
const job = flag('job');
if (job !== undefined) {
  const failed: number[] = [];
  for (const seed of job.split(',').filter((x) => x !== '').map(Number)) {
    const r = await runSchedule(optionsFor(seed));
    if (r.violations.length > 0) failed.push(seed);
  }
  process.send!({ failed });
} else if (one !== undefined) {
  const seed = Number(one);
  const r = await runSchedule({ ...optionsFor(seed), keepTrace: args.includes('--verbose') });
  if (args.includes('--verbose')) for (const l of r.trace ?? []) console.log(l);
  if (args.includes('--trace')) console.log(`trace hash: ${r.hash}`);
  if (r.violations.length > 0) {
    if (!args.includes('--trace')) await report(seed, r);
    else for (const v of r.violations) console.error(`violation ${v.rule} at ${v.at} ms: ${v.detail}`);
  }
  process.exitCode = r.violations.length > 0 ? 1 : 0;
} else {
  const n = Number(flag('seeds') ?? 100);
  const from = Number(flag('from') ?? 1);
  const jobs = Math.max(1, Math.min(Number(flag('jobs') ?? 1), availableParallelism()));
  const skip = new Set(args.includes('--skip-known') ? KNOWN_OPEN.filter((k) => k.profile === profile && k.workload === workload).map((k) => k.seed) : []);
  const seeds = Array.from({ length: n }, (_, i) => from + i).filter((s) => !skip.has(s));
  const t0 = performance.now();
  const failed: number[] = [];
  if (jobs === 1) {
    for (const seed of seeds) {
      const r = await runSchedule(optionsFor(seed));
      if (r.violations.length > 0) failed.push(seed);
    }
  } else {
    // Each job (a child process of this script) runs every jobs-th seed; a failing seed is then
    // replayed and shrunk here, alone.
    await Promise.all(
      Array.from({ length: jobs }, (_, j) => {
        const mine = seeds.filter((_, i) => i % jobs === j);
        const child = fork(new URL(import.meta.url).pathname, [...args, '--job', mine.join(',')], { execArgv: ['--import', 'tsx'] });
        return new Promise<void>((resolve, reject) => {
          child.on('message', (m: { failed: number[] }) => failed.push(...m.failed));
          child.on('error', reject);
          child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`job ${j} exited with ${code}`))));
        });
      }),
    );
  }
  const s = (performance.now() - t0) / 1000;
  failed.sort((a, b) => a - b);
  for (const seed of failed.slice(0, 5)) await report(seed, await runSchedule({ ...optionsFor(seed), keepTrace: true }));
  if (failed.length > 5) console.log(`... and ${failed.length - 5} more failing seeds: ${failed.slice(5).join(' ')}`);
  console.log(
    `${seeds.length} schedules (${profile}, ${workload}${skip.size ? `, ${skip.size} known-open skipped` : ''}): ${failed.length} failed; ${(seeds.length / s).toFixed(1)} schedules/s on ${jobs} job(s)`,
  );
  process.exitCode = failed.length > 0 ? 1 : 0;
}
