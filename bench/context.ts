// What every phase is given by bench/main.ts.
import type { BenchEtcd } from './etcd.js';

export interface BenchContext {
  /** Every member's endpoint. */
  endpoints: string[];
  /** The server's version (`3.7.3`). */
  etcd: string;
  members: 1 | 3;
  /** CI mode: short phases, sanity only. */
  quick: boolean;
  /** Contenders in the contended phase. */
  contenders: number;
  /** A key prefix unique to this run; every phase works under it. */
  prefix: string;
  /** The built interop/go binary (etcd's own Go concurrency package), when Go is available. */
  go?: string;
  /** The etcd this run started: its processes' ids (for their CPU time), kill and restart. */
  server?: BenchEtcd;
  log(message: string): void;
}

/**
 * The endpoints for the i-th independent client, rotated so that on a cluster the clients spread
 * over the members as separate processes would (each client talks to its first endpoint).
 */
export function endpointsFor(ctx: BenchContext, i: number): string[] {
  const n = ctx.endpoints.length;
  return ctx.endpoints.map((_, k) => ctx.endpoints[(k + i) % n]!);
}

/** Host list in the form the `etcd3` package wants. */
export function etcd3Hosts(endpoints: string[]): string[] {
  return endpoints.map((e) => (e.includes('://') ? e : `http://${e}`));
}
