// npm run sim -- --seeds N | --seed S [--trace] [--profile 3.4|3.7] [--workload mutex] [--from F] [--no-faults]
import { runSchedule, WORKLOADS, type ProfileName, type WorkloadName } from '../src/testing/sim/run.js';

const args = process.argv.slice(2);
function flag(name: string): string | undefined {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : undefined;
}
const profile = (flag('profile') ?? '3.7') as ProfileName;
const workload = (flag('workload') ?? 'mutex') as WorkloadName;
if (!['3.4', '3.7'].includes(profile)) throw new Error(`--profile must be 3.4 or 3.7, got ${profile}`);
if (!WORKLOADS.includes(workload)) throw new Error(`--workload must be one of ${WORKLOADS.join(', ')}, got ${workload}`);
const faults = !args.includes('--no-faults');
const one = flag('seed');
const t0 = performance.now();
if (one !== undefined) {
  const r = await runSchedule({ seed: Number(one), profile, workload, faults, keepTrace: args.includes('--verbose') });
  if (r.trace) for (const l of r.trace) console.log(l);
  for (const v of r.violations) console.log(`violation ${v.rule} at ${v.at} ms: ${v.detail}`);
  if (args.includes('--trace')) console.log(`trace hash: ${r.hash}`);
  process.exitCode = r.violations.length > 0 ? 1 : 0;
} else {
  const n = Number(flag('seeds') ?? 100);
  const from = Number(flag('from') ?? 1);
  let bad = 0;
  let steps = 0;
  for (let seed = from; seed < from + n; seed++) {
    const r = await runSchedule({ seed, profile, workload, faults });
    steps += r.steps;
    if (r.violations.length > 0) {
      bad++;
      console.log(`seed ${seed}: ${r.violations.map((v) => `${v.rule} at ${v.at} ms: ${v.detail}`).join('\n    ')}`);
      console.log(`  replay: npm run sim -- --seed ${seed} --profile ${profile} --workload ${workload} --verbose`);
    }
  }
  const s = (performance.now() - t0) / 1000;
  console.log(`${n} schedules, ${bad} failed, ${(n / s).toFixed(1)} schedules/s, ${Math.round(steps / n)} steps each`);
  process.exitCode = bad > 0 ? 1 : 0;
}
