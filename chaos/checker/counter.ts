// The etcd counter written through ownerCompare(): every increment once, none lost.
import type { Violation } from './history.js';

export interface EtcdIncrementReport {
  worker: string;
  token: bigint;
  opKey: string;
  value: number;
  outcome: 'accepted' | 'rejected' | 'unknown';
}

export interface EtcdLedgerEntry {
  key: string;
  value: string;
  version: bigint;
}

export interface EtcdCounterReport {
  counter: number;
  ledgerEntries: number;
  accepted: number;
  rejected: number;
  unknownResolvedApplied: number;
  unknownResolvedNotApplied: number;
  violations: Violation[];
}

/**
 * The counter kept in etcd with Txns guarded by ownerCompare(): it must equal the number of
 * increments applied (one ledger key per increment, written in the same Txn), the ledger must hold
 * each value 1..counter exactly once (two "owners" reading the same value would both write it),
 * no ledger key may be written twice, every increment a worker saw succeed must be there, and every
 * ledger key must be one a worker reported sending (or the history Porcupine checks misses it).
 */
export function checkEtcdCounter(counter: number, ledger: EtcdLedgerEntry[], reports: EtcdIncrementReport[]): EtcdCounterReport {
  const violations: Violation[] = [];
  const byKey = new Map(ledger.map((e) => [e.key, e]));
  if (ledger.length !== counter) {
    violations.push({ check: 'etcd-count', detail: `counter is ${counter} but ${ledger.length} guarded increments were applied` });
  }
  const seen = new Map<number, string>();
  for (const e of ledger) {
    const v = Number(e.value.slice(e.value.lastIndexOf(':') + 1));
    const prev = seen.get(v);
    if (prev !== undefined) {
      violations.push({
        check: 'etcd-lost-update',
        detail: `${prev} and ${e.key} both incremented to ${v}: two owners passed ownerCompare at once`,
      });
    }
    seen.set(v, e.key);
    if (e.version !== 1n) violations.push({ check: 'etcd-double-apply', detail: `${e.key} was written ${e.version} times` });
  }
  for (let v = 1; v <= counter; v++) {
    if (!seen.has(v)) violations.push({ check: 'etcd-gap', detail: `no increment to ${v} in the ledger` });
  }
  const reported = new Set(reports.map((r) => r.opKey));
  for (const e of ledger) {
    if (!reported.has(e.key))
      violations.push({ check: 'etcd-unreported', detail: `${e.key} was applied but no worker reported sending it (${e.value})` });
  }
  let accepted = 0;
  let rejected = 0;
  let unknownYes = 0;
  let unknownNo = 0;
  for (const r of reports) {
    const applied = byKey.has(r.opKey);
    if (r.outcome === 'accepted') {
      accepted++;
      if (!applied) violations.push({ check: 'etcd-lost-ack', detail: `${r.worker} saw ${r.opKey} succeed but it is not in etcd` });
    } else if (r.outcome === 'rejected') {
      rejected++;
      if (applied) violations.push({ check: 'etcd-misreport', detail: `${r.worker} saw ${r.opKey} refused but it was applied` });
    } else if (applied) unknownYes++;
    else unknownNo++;
  }
  return {
    counter,
    ledgerEntries: ledger.length,
    accepted,
    rejected,
    unknownResolvedApplied: unknownYes,
    unknownResolvedNotApplied: unknownNo,
    violations,
  };
}
