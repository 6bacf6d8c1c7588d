// A phase's recipe workers judged (checker/recipes.ts): their reports, as History keeps them, turned
// into the checker's terms, and the figures the result shows. Pure: no I/O.
import { checkBarrierPasses, checkDoubleBarrier, checkMultiLock, percentile, type Violation } from './checker/index.js';
import type { RecipeEvent } from './common.js';
import type { KeyLife } from './revisions.js';

export interface RecipesReport {
  barrier: { holds: number; passes: number; unjudged: number; waitP99Ms?: number; violations: number };
  dbarrier: { enters: number; leaves: number; unjudged: number; enterP99Ms?: number; violations: number };
  multilock: { grants: number; failures: number; violations: number };
}

type Reported = RecipeEvent & { worker: string };
type Kind<K extends RecipeEvent['kind']> = Extract<Reported, { kind: K }>;

/** `events` as History.recipes has them; `dbarrierName` the DoubleBarrier's name and `count` its member count. */
export function judgeRecipes(
  events: Reported[],
  lives: KeyLife[],
  dbarrierName: string,
  count: number,
): { report: RecipesReport; violations: Violation[] } {
  const of = <K extends RecipeEvent['kind']>(kind: K): Kind<K>[] => events.filter((e): e is Kind<K> => e.kind === kind);
  const passes = of('barrier-pass');
  const barrier = checkBarrierPasses(
    passes.map((p) => ({ worker: p.worker, held: BigInt(p.held), rev: BigInt(p.rev) })),
    lives,
  );
  const enters = of('dbarrier-enter');
  const leaves = of('dbarrier-leave');
  const dbarrier = checkDoubleBarrier(
    enters.map((e) => ({ worker: e.worker, own: BigInt(e.own), ready: BigInt(e.ready), rev: BigInt(e.rev) })),
    leaves.map((l) => ({ worker: l.worker, ready: BigInt(l.ready), rev: BigInt(l.rev) })),
    lives,
    `${dbarrierName}/waiters/`,
    count,
  );
  const grants = of('multi-acquired');
  const failures = of('multi-failed');
  const multilock = checkMultiLock(
    grants.map((g) => ({
      worker: g.worker,
      names: g.names,
      tokens: Object.fromEntries(Object.entries(g.tokens).map(([n, t]) => [n, BigInt(t)])),
      rev: BigInt(g.rev),
      seen: g.seen.map((k) => ({ key: k.key, create: BigInt(k.create), lease: k.lease })),
    })),
    failures,
    lives,
  );
  const waitP99 = percentile(
    passes.map((p) => p.waitedMs),
    99,
  );
  const enterP99 = percentile(
    enters.map((e) => e.waitedMs),
    99,
  );
  return {
    report: {
      barrier: {
        holds: of('barrier-held').length,
        passes: passes.length,
        unjudged: barrier.unjudged,
        ...(waitP99 !== undefined ? { waitP99Ms: waitP99 } : {}),
        violations: barrier.violations.length,
      },
      dbarrier: {
        enters: enters.length,
        leaves: leaves.length,
        unjudged: dbarrier.unjudged,
        ...(enterP99 !== undefined ? { enterP99Ms: enterP99 } : {}),
        violations: dbarrier.violations.length,
      },
      multilock: { grants: grants.length, failures: failures.length, violations: multilock.length },
    },
    violations: [...barrier.violations, ...dbarrier.violations, ...multilock],
  };
}
