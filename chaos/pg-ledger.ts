// The fenced resource on a real PostgreSQL (PostgresFence, src/fencing/postgres.ts), with an
// unfenced shadow register beside it: the fenced ledger must never lose or double an increment; the
// shadow, written by the same holders without the fence, shows what a stale holder does when
// nothing fences it. Tables, the parent's reading of them, and the check; the workers' side is in
// worker.ts (pgIncrement()).
import type { Violation } from './checker/history.js';

/** The tables, one row (or set of rows) per phase. */
export const PG_SCHEMA = [
  'CREATE TABLE IF NOT EXISTS chaos_ledger (phase text PRIMARY KEY, value bigint NOT NULL)',
  'CREATE TABLE IF NOT EXISTS chaos_ops (phase text NOT NULL, op_id text NOT NULL, value bigint NOT NULL, token bigint NOT NULL, PRIMARY KEY (phase, op_id))',
  'CREATE TABLE IF NOT EXISTS chaos_shadow (phase text PRIMARY KEY, value bigint NOT NULL)',
];

/** The fence table (PostgresFence's own). */
export const PG_FENCE_TABLE = 'chaos_fence';

/** A worker's report of one fenced increment. */
export interface PgIncrementReport {
  worker: string;
  opId: string;
  token: bigint;
  /** committed: run() returned; refused: StaleTokenError or the handle's loss; failed: anything else (outcome unknown). */
  outcome: 'committed' | 'refused' | 'failed';
  /** The shadow register's increment was written (unfenced). */
  shadowWritten: boolean;
}

export interface PgLedgerReport {
  value: number;
  ops: number;
  committed: number;
  refusedByFence: number;
  failed: number;
  shadowWrites: number;
  shadowValue: number;
  /** Shadow writes that were lost (written over a value another holder had already written past). */
  shadowLostUpdates: number;
  violations: Violation[];
}

/**
 * The PostgreSQL ledger: its value equals the number of increments in the ops table, which hold
 * each value 1..value once (two holders through the fence at once would write one value twice) with
 * tokens that never go down in that order (a stale token let through by the fence), and
 * every increment a worker saw committed is there, none it saw refused. The shadow's lost updates
 * are reported, not failed: it has no fence, so a ghost's stale write lands there by design.
 */
export function checkPgLedger(
  value: number,
  ops: { opId: string; value: number; token: bigint }[],
  reports: PgIncrementReport[],
  shadowValue: number,
): PgLedgerReport {
  const violations: Violation[] = [];
  if (ops.length !== value)
    violations.push({
      check: 'pg-count',
      detail: `the PostgreSQL ledger holds ${value} but ${ops.length} fenced increments were committed`,
    });
  const byValue = new Map<number, string>();
  for (const o of ops) {
    const prev = byValue.get(o.value);
    if (prev !== undefined)
      violations.push({
        check: 'pg-lost-update',
        detail: `${prev} and ${o.opId} both incremented to ${o.value}: two holders passed the fence at once`,
      });
    byValue.set(o.value, o.opId);
  }
  for (let v = 1; v <= value; v++)
    if (!byValue.has(v)) violations.push({ check: 'pg-gap', detail: `no increment to ${v} in the PostgreSQL ledger` });
  // In the order they were applied (by value), tokens never go down: the fence stores each accepted
  // token and refuses a lower one, so a lower token after a higher one is a stale holder let through.
  const inOrder = [...ops].sort((a, b) => a.value - b.value);
  for (let i = 1; i < inOrder.length; i++) {
    const [prev, o] = [inOrder[i - 1]!, inOrder[i]!];
    if (o.token < prev.token) {
      violations.push({
        check: 'pg-token-order',
        detail: `${o.opId} (token ${o.token}) wrote ${o.value} after ${prev.opId} (token ${prev.token}) wrote ${prev.value}: the fence let an older token through`,
      });
    }
  }
  const applied = new Set(ops.map((o) => o.opId));
  for (const r of reports) {
    if (r.outcome === 'committed' && !applied.has(r.opId))
      violations.push({ check: 'pg-lost-ack', detail: `${r.worker} saw ${r.opId} committed but it is not in PostgreSQL` });
    if (r.outcome === 'refused' && applied.has(r.opId))
      violations.push({ check: 'pg-misreport', detail: `${r.worker} saw ${r.opId} refused but it was committed` });
  }
  const shadowWrites = reports.filter((r) => r.shadowWritten).length;
  return {
    value,
    ops: ops.length,
    committed: reports.filter((r) => r.outcome === 'committed').length,
    refusedByFence: reports.filter((r) => r.outcome === 'refused').length,
    failed: reports.filter((r) => r.outcome === 'failed').length,
    shadowWrites,
    shadowValue,
    shadowLostUpdates: Math.max(0, shadowWrites - shadowValue),
    violations,
  };
}
