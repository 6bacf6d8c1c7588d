// Seeds that found bugs (in the library, or in the simulator itself), replayed by test/sim.test.ts
// in `npm test`: each must now pass. A seed whose bug is still open is in sim/known.ts instead.
export interface RegressionSeed {
  readonly seed: number;
  readonly profile: '3.4' | '3.7';
  readonly workload: 'mixed' | 'mutex' | 'rwmutex' | 'semaphore' | 'election' | 'barrier';
  /** What it found. */
  readonly found: string;
}

export const REGRESSIONS: readonly RegressionSeed[] = [
  {
    seed: 944,
    profile: '3.7',
    workload: 'mixed',
    found:
      "the oracle took a downgrade (a read on the session's own write key, which holds at once by design) for a reader overtaking a queued writer",
  },
  {
    seed: 62,
    profile: '3.7',
    workload: 'mixed',
    found:
      "the oracle counted a DoubleBarrier's members without the operator's lease-less waiter key, which Go's counting (and the library's) includes",
  },
];
