// Known engine defects not fixed yet. `npm run sim -- --skip-known` does not count a violation that
// matches one as a failure (it reports how many it met). Each lists seeds that reach it;
// test/sim.test.ts checks that they still do, and when one passes, its fix has landed: move its
// seeds to sim/regressions.ts and delete the entry.
export interface KnownDefect {
  /** The oracle rule it breaks, what the violation's detail says, and (if need be) what the run's faults did. */
  readonly rule: RegExp;
  readonly detail: RegExp;
  readonly faults?: RegExp;
  /** The issue that tracks it, once filed. */
  readonly issue?: number;
  readonly note: string;
  readonly seeds: readonly { seed: number; profile: '3.4' | '3.7'; workload: 'mixed' | 'rwmutex' | 'election' | 'barrier' }[];
}

export const KNOWN_OPEN: readonly KnownDefect[] = [
  {
    rule: /^left-behind$/,
    detail: /dbar\/a\/ready/,
    note: "DoubleBarrier: when every member's leave() is aborted (here during a leader election), each deletes its own key but none deletes `<name>/ready`, which stays for good",
    seeds: [
      { seed: 83, profile: '3.7', workload: 'mixed' },
      { seed: 101, profile: '3.7', workload: 'mixed' },
    ],
  },
];

/** The known defect a violation of a run is an instance of, if any. */
export function knownDefect(v: { rule: string; detail: string }, run: { faultLog: readonly string[] }): KnownDefect | undefined {
  return KNOWN_OPEN.find((k) => k.rule.test(v.rule) && k.detail.test(v.detail) && (!k.faults || k.faults.test(run.faultLog.join('\n'))));
}
