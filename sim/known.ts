// Known engine defects not fixed yet. `npm run sim -- --skip-known` does not count a violation that
// matches one as a failure (it reports how many it met). Each lists seeds that reach it;
// test/sim.test.ts checks that they still do, and when one passes, its fix has landed: move its
// seeds to sim/regressions.ts and delete the entry.
export interface KnownDefect {
  /** The oracle rule it breaks, and what the violation's detail says. */
  readonly rule: string;
  readonly detail: RegExp;
  /** The issue that tracks it, once filed. */
  readonly issue?: number;
  readonly note: string;
  readonly seeds: readonly { seed: number; profile: '3.4' | '3.7'; workload: 'mixed' }[];
}

export const KNOWN_OPEN: readonly KnownDefect[] = [
  {
    rule: 'grant-without-key',
    detail: /but the store has lease 0 rev/,
    issue: 35,
    note: "issue 35, item 3: an operator's plain put moves a holder's key off its lease; the same process's next lock() on that session (waiting in the process) is granted the old key with the old token, not on our lease",
    seeds: [{ seed: 1417, profile: '3.7', workload: 'mixed' }],
  },
  {
    rule: 'left-behind',
    detail: /dbar\/a\/ready/,
    note: "DoubleBarrier: when every member's leave() is aborted (here during a leader election), each deletes its own key but none deletes `<name>/ready`, which stays for good",
    seeds: [
      { seed: 144, profile: '3.7', workload: 'mixed' },
      { seed: 484, profile: '3.4', workload: 'mixed' },
    ],
  },
];

/** The known defect a violation is an instance of, if any. */
export function knownDefect(v: { rule: string; detail: string }): KnownDefect | undefined {
  return KNOWN_OPEN.find((k) => k.rule === v.rule && k.detail.test(v.detail));
}
