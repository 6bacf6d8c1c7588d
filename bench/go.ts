// The real Go package in the bench: runs interop/go's bench modes (etcd's own
// go.etcd.io/etcd/client/v3/concurrency, built by interop/go-build.ts) against the bench's etcd and
// reads the one JSON object each prints. Each call is a fresh process with its own clients and
// sessions; the timing is done inside the Go program, so process start-up is not measured. Each
// phase declares the shape its Go mode prints: this module knows no phase.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { buildGoInterop } from '../interop/go-build.js';
import type { BenchContext } from './context.js';
import type { Summary } from './stats.js';

/** The binary, or why there is none (no Go >= 1.26, or the build failed). */
export async function goBinary(): Promise<{ bin: string } | { error: string }> {
  try {
    return { bin: await buildGoInterop() };
  } catch (err) {
    return { error: (err as Error).message };
  }
}

/** Runs `go-interop --endpoints=... <args>` and parses the JSON object it prints. */
export async function runGoBench<T>(ctx: BenchContext, args: string[], timeoutMs = 60_000): Promise<T> {
  if (!ctx.go) throw new Error('bench: no go-interop binary');
  const child = spawn(ctx.go, [`--endpoints=${ctx.endpoints.join(',')}`, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const guard = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  try {
    const [code, signal] = (await once(child, 'close')) as [number | null, NodeJS.Signals | null];
    if (code !== 0) throw new Error(`go-interop ${args[0]} exited ${code ?? signal}: ${stderr.trim() || stdout.trim()}`);
  } finally {
    clearTimeout(guard);
  }
  const line = stdout.trim().split('\n').pop() ?? '';
  try {
    return JSON.parse(line) as T;
  } catch {
    throw new Error(`go-interop ${args[0]}: no JSON on stdout: ${stdout.trim()}; stderr: ${stderr.trim()}`);
  }
}

/**
 * Merges per-round summaries (the Go program prints summaries, not samples): n, mean, min and max
 * are exact; p50 and p99 are the n-weighted means of the rounds' (an approximation).
 */
export function mergeSummaries(parts: readonly Summary[]): Summary {
  const s = parts.filter((p) => p.n > 0);
  const n = s.reduce((a, p) => a + p.n, 0);
  if (n === 0) return { n: 0, mean: NaN, p50: NaN, p99: NaN, min: NaN, max: NaN };
  const w = (f: (p: Summary) => number): number => s.reduce((a, p) => a + f(p) * p.n, 0) / n;
  return {
    n,
    mean: w((p) => p.mean),
    p50: w((p) => p.p50),
    p99: w((p) => p.p99),
    min: Math.min(...s.map((p) => p.min)),
    max: Math.max(...s.map((p) => p.max)),
  };
}
