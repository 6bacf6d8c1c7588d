// Seeds whose violation is a known engine defect not fixed yet (`--skip-known` skips them). Each
// names its issue; when the fix lands, the seed moves to the regression list (sim/regressions.ts).
export interface KnownSeed {
  readonly seed: number;
  readonly profile: '3.4' | '3.7';
  readonly workload: string;
  readonly issue: number;
  readonly note: string;
}

export const KNOWN_OPEN: readonly KnownSeed[] = [];
