// Shrinking a failing schedule: the fewest operations and faults of its plan that still fail the
// same rule, by delta debugging (ddmin) over the plan's parts, the seed (and so the scheduling's
// random streams) kept.
import { type Plan, type RunOptions, type RunResult, runSchedule } from './run.js';

/** The plan with only the parts `keep` names (`f<id>` a fault, `o<id>` an operation). */
export function restrict(plan: Plan, keep: ReadonlySet<string>): Plan {
  return {
    quietAt: plan.quietAt,
    faults: plan.faults.filter((f) => keep.has(`f${f.id}`)),
    procs: plan.procs.map((p) => ({
      name: p.name,
      observes: p.observes,
      ...(p.member === undefined ? {} : { member: p.member }),
      sessions: p.sessions.map((s) => ({ ttl: s.ttl, actors: s.actors.map((ops) => ops.filter((o) => keep.has(`o${o.id}`))) })),
    })),
  };
}

/** Every part of the plan, as restrict() names them. */
export function parts(plan: Plan): string[] {
  const out = plan.faults.map((f) => `f${f.id}`);
  for (const p of plan.procs) for (const s of p.sessions) for (const ops of s.actors) for (const o of ops) out.push(`o${o.id}`);
  return out;
}

export interface Shrunk {
  readonly keep: string[];
  readonly result: RunResult;
  readonly runs: number;
}

/** ddmin: the smallest set of parts (within `maxRuns` replays) whose run still fails with `rule`. */
export async function shrink(options: RunOptions, failed: RunResult, maxRuns = 80): Promise<Shrunk> {
  const rule = failed.violations[0]!.rule;
  const plan = failed.plan;
  let keep = parts(plan);
  let best = failed;
  let runs = 0;
  const fails = async (candidate: string[]): Promise<RunResult | undefined> => {
    runs++;
    const r = await runSchedule({ ...options, plan: restrict(plan, new Set(candidate)), keepTrace: false });
    return r.violations.some((v) => v.rule === rule) ? r : undefined;
  };
  let n = 2;
  while (keep.length >= 2 && runs < maxRuns) {
    const size = Math.ceil(keep.length / n);
    let reduced = false;
    for (let i = 0; i < keep.length && runs < maxRuns; i += size) {
      const complement = [...keep.slice(0, i), ...keep.slice(i + size)];
      const r = await fails(complement);
      if (r) {
        keep = complement;
        best = r;
        n = Math.max(n - 1, 2);
        reduced = true;
        break;
      }
    }
    if (!reduced) {
      if (n >= keep.length) break;
      n = Math.min(keep.length, 2 * n);
    }
  }
  const final = await runSchedule({ ...options, plan: restrict(plan, new Set(keep)), keepTrace: true });
  return { keep, result: final.violations.some((v) => v.rule === rule) ? final : best, runs: runs + 1 };
}
