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
    detail: /^after every session closed: keys \["dbar\/a\/ready"\], leases 0$/,
    faults: /crash-proc|member-crash/,
    note: "DoubleBarrier: a round whose last members died (their process crashed, or their session was lost while most members were down) leaves `<name>/ready`, as Go's protocol does: the last one out deletes it, and none came out. Harmless to later rounds (they wait for a put after their own key); a design question, not a fix: see docs/barriers.md",
    seeds: [
      { seed: 666, profile: '3.7', workload: 'mixed' },
      { seed: 1075, profile: '3.7', workload: 'mixed' },
    ],
  },
];

/** The known defect a violation of a run is an instance of, if any. */
export function knownDefect(v: { rule: string; detail: string }, run: { faultLog: readonly string[] }): KnownDefect | undefined {
  return KNOWN_OPEN.find((k) => k.rule.test(v.rule) && k.detail.test(v.detail) && (!k.faults || k.faults.test(run.faultLog.join('\n'))));
}
