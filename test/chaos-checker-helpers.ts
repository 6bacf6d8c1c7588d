// Synthetic histories' building blocks for the chaos checker's tests (test/chaos-checker-*.test.ts).
import type { FaultRecord, HeldInterval, PhaseVerdictInput } from '../chaos/checker/index.js';
import { FencedRegister } from '../chaos/fenced-store.js';

export const iv = (worker: string, token: bigint, from: number, to: number, lost = false): HeldInterval => ({
  worker,
  token,
  from,
  to,
  lost,
});
export const rd = (worker: string, token: bigint, from: number, to: number): HeldInterval => ({
  ...iv(worker, token, from, to),
  mode: 'read',
});
export const wr = (worker: string, token: bigint, from: number, to: number): HeldInterval => ({
  ...iv(worker, token, from, to),
  mode: 'write',
});
export const fault = (kind: string, worker: string | undefined, start: number, end: number): FaultRecord => ({
  kind,
  target: worker ?? 'm0',
  ...(worker !== undefined ? { worker } : {}),
  start,
  end,
});
export const clean: PhaseVerdictInput = {
  name: 'p',
  violations: [],
  unexpectedErrors: [],
  stuckWaits: [],
  problems: [],
  cleanupOk: true,
  record: { reached: 100n, wanted: 100n },
  judged: { 'fenced-ledger': 5 },
};
export const emptyRegister = (): FencedRegister => new FencedRegister('election');
/** The TTL (seconds) of the sessions in these histories. */
export const TTL = 3;
