// Latency figures as doctor measures and prints them.
import type { Stats } from './report.js';

export function stats(ms: number[]): Stats {
  const sorted = [...ms].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  const median = sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
  return { samples: ms.length, medianMs: round(median), maxMs: round(sorted[sorted.length - 1]!) };
}

/** Milliseconds to two decimals, as the JSON report gives them. */
export function round(ms: number): number {
  return Math.round(ms * 100) / 100;
}

/** A duration for people: "0.4 ms", "12 ms", "1.5 s", "12 s". */
export function fmt(ms: number): string {
  return ms >= 1000 ? `${(ms / 1000).toFixed(ms >= 10_000 ? 0 : 1)} s` : `${ms >= 10 ? Math.round(ms) : ms.toFixed(1)} ms`;
}

/** A size for people, in powers of 1000 as etcdctl prints them. */
export function bytes(n: bigint): string {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let v = Number(n);
  let u = 0;
  while (v >= 1000 && u < units.length - 1) {
    v /= 1000;
    u++;
  }
  return `${u === 0 ? v : v.toFixed(1)} ${units[u]}`;
}
