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
  readonly seeds: readonly { seed: number; profile: '3.4' | '3.7'; workload: 'mixed' | 'rwmutex' | 'election' }[];
}

export const KNOWN_OPEN: readonly KnownDefect[] = [
  {
    rule: /^grant-without-key$/,
    detail: /but the store has lease 0 rev/,
    issue: 35,
    note: "issue 35, item 3: an operator's plain put moves a holder's key off its lease; the same process's next lock() (or RWMutex lock) on that session, waiting in the process, is granted the old key with the old token, not on our lease",
    seeds: [
      { seed: 182, profile: '3.7', workload: 'rwmutex' },
      { seed: 193, profile: '3.7', workload: 'rwmutex' },
    ],
  },
  {
    rule: /^(two-holders|token-order|grant-behind-older-key)$/,
    detail: /^(rw|lock) /,
    faults: /^operator-put (rw|locks)\//m,
    issue: 35,
    note: "issue 35, item 3, its consequences: the old key granted again with its old token after an operator's put, so the token goes backwards and another holder holds too",
    seeds: [{ seed: 1501, profile: '3.7', workload: 'mixed' }],
  },
  {
    rule: /^(two-holders|token-order|grant-behind-older-key|observe-named-non-leader)$/,
    detail: /^(leader|observe) /,
    faults: /^operator-put elect\//m,
    issue: 35,
    note: "issue 35, item 2: an operator's plain put on the leader's key ends its term; another candidate leads; the first campaigns again on the same session, adopts its old key, puts it back on its lease and leads with its old term: two leaders, a token going backwards, and observe() naming the other",
    seeds: [
      { seed: 2, profile: '3.7', workload: 'election' },
      { seed: 14, profile: '3.7', workload: 'election' },
      { seed: 101, profile: '3.7', workload: 'election' },
    ],
  },
  {
    rule: /^reader-overtook-writer$/,
    detail: /./,
    issue: 35,
    note: "issue 35, item 4: a read lock asked for after another process's writer queued joins this process's older read key and is granted first: overlapping reads starve the writer",
    seeds: [
      { seed: 16, profile: '3.7', workload: 'rwmutex' },
      { seed: 125, profile: '3.7', workload: 'rwmutex' },
    ],
  },
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
