// Schedules per second of the simulator (docs/simulation.md) on one core: the default workload and
// profile, seeds 1..N in this one process, wall time and CPU time (this process, all threads: GC
// included). On a shared machine the CPU figure is the one to compare.
//   node --import tsx bench/sim.ts [--seeds 300] [--profile 3.7] [--workload mixed] [--no-faults]
import { runSchedule, type ProfileName, type WorkloadName } from '../src/testing/sim/run.js';

const args = process.argv.slice(2);
const flag = (name: string): string | undefined => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : undefined;
};
const n = Number(flag('seeds') ?? 300);
const profile = (flag('profile') ?? '3.7') as ProfileName;
const workload = (flag('workload') ?? 'mixed') as WorkloadName;
const faults = !args.includes('--no-faults');
// As the runner: error stacks cost much and no check reads them.
Error.stackTraceLimit = 0;
// Warm up (module loading, JIT) on seeds outside the measured range.
for (let s = 0; s < 20; s++) await runSchedule({ seed: 1_000_000 + s, profile, workload, faults });
const cpu0 = process.cpuUsage();
const t0 = performance.now();
let steps = 0;
let virtualMs = 0;
/** CPU time when the second half of the seeds starts: the JIT goes on compiling functions it meets late for hundreds of seeds. */
let halfway = cpu0;
for (let seed = 1; seed <= n; seed++) {
  if (seed === Math.floor(n / 2) + 1) halfway = process.cpuUsage();
  const r = await runSchedule({ seed, profile, workload, faults });
  steps += r.steps;
  virtualMs += r.virtualMs;
}
const wall = (performance.now() - t0) / 1000;
const used = process.cpuUsage(cpu0);
const cpu = (used.user + used.system) / 1e6;
console.log(`simulator, ${n} schedules (${profile}, ${workload}${faults ? '' : ', no faults'}):`);
console.log(`  ${(n / wall).toFixed(1)} schedules/s wall, ${(n / cpu).toFixed(1)} schedules per CPU-second`);
const late = process.cpuUsage(halfway);
console.log(
  `  the second half (seeds ${Math.floor(n / 2) + 1}-${n}) alone: ${((n - Math.floor(n / 2)) / ((late.user + late.system) / 1e6)).toFixed(1)} schedules per CPU-second`,
);
console.log(
  `  ${Math.round(steps / n)} timers and ${Math.round(virtualMs / n)} ms of virtual time per schedule; ${Math.round(steps / cpu)} timers per CPU-second`,
);
