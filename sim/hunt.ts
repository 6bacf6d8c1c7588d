// Runs seeds in order until one fails, as `npm run sim -- --seeds N` (no other flag) counts it: any
// violation, a known open defect's too, and prints one JSON line: the first failing seed and
// its violations, or none. sim/mutants.ts runs it inside a mutated copy of the repository:
//   node --import tsx sim/hunt.ts [--seeds N] [--from F] [--profile 3.4|3.7] [--workload NAME]
import { type ProfileName, runSchedule, type WorkloadName } from '../src/testing/sim/run.js';

export interface HuntResult {
  /** The first seed that failed, or null when none of the seeds did. */
  readonly seed: number | null;
  readonly violations: readonly { rule: string; at: number; detail: string }[];
  /** Schedules run (the failing one included). */
  readonly runs: number;
  readonly ms: number;
}

const args = process.argv.slice(2);
function flag(name: string): string | undefined {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : undefined;
}
const n = Number(flag('seeds') ?? 2000);
const from = Number(flag('from') ?? 1);
const profile = (flag('profile') ?? '3.7') as ProfileName;
const workload = (flag('workload') ?? 'mixed') as WorkloadName;
// Error stacks cost a third of a schedule's time and no check reads them (as sim/main.ts).
Error.stackTraceLimit = 0;

const t0 = performance.now();
let result: HuntResult = { seed: null, violations: [], runs: n, ms: 0 };
for (let seed = from; seed < from + n; seed++) {
  const r = await runSchedule({ seed, profile, workload });
  if (r.violations.length > 0) {
    result = { seed, violations: r.violations, runs: seed - from + 1, ms: 0 };
    break;
  }
}
console.log(JSON.stringify({ ...result, ms: Math.round(performance.now() - t0) }));
