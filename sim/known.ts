// Known engine defects not fixed yet. `npm run sim -- --skip-known` does not count a violation that
// matches one as a failure (it reports how many it met). Each lists seeds that reach it;
// test/sim.test.ts checks that they still do, and when one passes, its fix has landed: move its
// seeds to sim/regressions.ts and delete the entry.
export interface KnownDefect {
  /** The oracle rule it breaks, what the violation's detail says, and (if need be) what the run's faults did. */
  readonly rule: RegExp;
  readonly detail: RegExp;
  readonly faults?: RegExp;
  /** Only on this profile's runs (the other's meet it by no seed known). */
  readonly profile?: '3.4' | '3.7';
  /** The issue that tracks it, once filed. */
  readonly issue?: number;
  readonly note: string;
  readonly seeds: readonly {
    seed: number;
    profile: '3.4' | '3.7';
    workload: 'mixed' | 'mutex' | 'rwmutex' | 'semaphore' | 'election' | 'barrier';
  }[];
}

export const KNOWN_OPEN: readonly KnownDefect[] = [];

/** The known defect a violation of a run is an instance of, if any. */
export function knownDefect(
  v: { rule: string; detail: string },
  run: { faultLog: readonly string[]; profile: '3.4' | '3.7' },
): KnownDefect | undefined {
  return KNOWN_OPEN.find(
    (k) =>
      k.rule.test(v.rule) &&
      k.detail.test(v.detail) &&
      (!k.profile || k.profile === run.profile) &&
      (!k.faults || k.faults.test(run.faultLog.join('\n'))),
  );
}
