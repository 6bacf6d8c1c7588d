// Figures for the report: the longest gap, rounding, percentiles.

/** The longest stretch with no acquisition at all (a stuck queue shows up here), and where it began. */
export function longestGap(times: number[], from: number, to: number): { ms: number; at: number } {
  const ts = [from, ...times.filter((t) => t >= from && t <= to).sort((a, b) => a - b), to];
  let gap = 0;
  let at = from;
  for (let i = 1; i < ts.length; i++) {
    if (ts[i]! - ts[i - 1]! > gap) {
      gap = ts[i]! - ts[i - 1]!;
      at = ts[i - 1]!;
    }
  }
  return { ms: round(gap), at };
}

export function round(ms: number): number {
  return Math.round(ms * 10) / 10;
}

export function percentile(values: number[], p: number): number | undefined {
  if (values.length === 0) return undefined;
  const s = [...values].sort((a, b) => a - b);
  return round(s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!);
}
