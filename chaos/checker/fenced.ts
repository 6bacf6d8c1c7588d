// The fenced ledger (the in-process store): token order, lost updates, the count.
import type { FencedRegister } from '../fenced-store.js';
import type { Violation } from './history.js';

export interface FencedReport {
  reads: number;
  readsRefused: number;
  writesAccepted: number;
  writesRefused: number;
  /** Careful writers (assertHeld just before sending) that the fence still refused. */
  carefulRefused: number;
  finalValue: number;
  violations: Violation[];
}

/**
 * The ledger: every accepted write carries a token strictly greater than the previous accepted
 * write's (one write per lock acquisition), writes exactly the value before it plus one (nothing
 * lost or applied twice), and the final value is the number of accepted increments. A careful write
 * (assertHeld() passed just before it was sent) that the fence refused is a violation too.
 *
 * The register refuses tokens below the highest it has seen, so `fenced-token-order` can only catch
 * a token accepted twice (two writes under one acquisition); mutual exclusion itself is judged by
 * `fenced-lost-update` (a holder writing over a value it did not read) and by the overlaps of the
 * holders' intervals (findOverlaps).
 */
export function checkFencedLedger(reg: FencedRegister): FencedReport {
  const violations: Violation[] = [];
  let lastToken = -1n;
  let expected = 0;
  const opIds = new Set<string>();
  let reads = 0;
  let readsRefused = 0;
  let writesAccepted = 0;
  let writesRefused = 0;
  let carefulRefused = 0;
  for (const e of reg.log) {
    if (e.op === 'read') {
      reads++;
      if (!e.ok) readsRefused++;
      continue;
    }
    if (!e.ok) {
      writesRefused++;
      if (e.careful) {
        carefulRefused++;
        // assertHeld() passed just before this write was sent, and the fence still refused it: the
        // local deadline said "held" after someone else had taken over (the margin was too small).
        violations.push({
          check: 'careful-write-refused',
          detail: `write #${e.seq} by ${e.worker} (token ${e.token}) passed assertHeld() but was refused: token ${e.highestBefore} had been seen`,
        });
      }
      continue;
    }
    writesAccepted++;
    if (e.token <= lastToken) {
      violations.push({
        check: 'fenced-token-order',
        detail: `write #${e.seq} by ${e.worker} has token ${e.token} after accepted token ${lastToken}`,
      });
    }
    if (e.value !== e.before + 1) {
      violations.push({
        check: 'fenced-lost-update',
        detail: `write #${e.seq} by ${e.worker} (token ${e.token}) wrote ${e.value} over ${e.before}: an increment was lost or applied twice`,
      });
    }
    if (e.opId !== undefined) {
      if (opIds.has(e.opId)) violations.push({ check: 'fenced-double-apply', detail: `operation ${e.opId} was applied twice` });
      opIds.add(e.opId);
    }
    expected++;
    lastToken = e.token;
  }
  if (reg.value !== expected) {
    violations.push({ check: 'fenced-count', detail: `ledger holds ${reg.value} but ${expected} increments were accepted` });
  }
  return { reads, readsRefused, writesAccepted, writesRefused, carefulRefused, finalValue: reg.value, violations };
}
