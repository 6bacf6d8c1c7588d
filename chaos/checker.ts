// Pure checks over what a chaos run recorded. No I/O: main.ts gathers the history, this judges it.
import type { FencedRegister, StoreEntry } from './fenced-store.js';

/** A hard safety violation: any one fails the run. */
export interface Violation {
  check: string;
  detail: string;
}

/** A fault as injected, on the common clock. */
export interface FaultRecord {
  kind: string;
  target: string;
  /** The worker label, for faults aimed at one worker. */
  worker?: string;
  start: number;
  end: number;
  note?: string;
}

/** An interval during which a worker's handle said "held" (or "leading"). */
export interface HeldInterval {
  worker: string;
  token: bigint;
  from: number;
  to: number;
  /** The handle reported the loss (signal aborted) rather than being unlocked normally. */
  lost: boolean;
  /** The worker died while holding (SIGKILL): `to` is the moment of death. */
  died?: boolean;
}

// ---------------------------------------------------------------- fenced ledger

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
 * lost or applied twice), and the final value is the number of accepted increments.
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
      if (e.careful) carefulRefused++;
      continue;
    }
    writesAccepted++;
    if (e.token <= lastToken) {
      violations.push({ check: 'fenced-token-order', detail: `write #${e.seq} by ${e.worker} has token ${e.token} after accepted token ${lastToken}` });
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

// ---------------------------------------------------------------- etcd counter

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
 * no ledger key may be written twice, and every increment a worker saw succeed must be there.
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
      violations.push({ check: 'etcd-lost-update', detail: `${prev} and ${e.key} both incremented to ${v}: two owners passed ownerCompare at once` });
    }
    seen.set(v, e.key);
    if (e.version !== 1n) violations.push({ check: 'etcd-double-apply', detail: `${e.key} was written ${e.version} times` });
  }
  for (let v = 1; v <= counter; v++) {
    if (!seen.has(v)) violations.push({ check: 'etcd-gap', detail: `no increment to ${v} in the ledger` });
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
  return { counter, ledgerEntries: ledger.length, accepted, rejected, unknownResolvedApplied: unknownYes, unknownResolvedNotApplied: unknownNo, violations };
}

// ---------------------------------------------------------------- overlaps (unfenced)

export interface Overlap {
  /** The holder whose belief outlived its ownership. */
  a: HeldInterval;
  /** The first other holder that started while `a` still believed it held. */
  b: HeldInterval;
  /** From `b`'s start to the end of `a`'s belief: how long `a` was wrong. */
  ms: number;
  /** Why, when a recorded fault explains it; otherwise 'unexplained'. */
  cause: string;
}

export interface OverlapReport {
  intervals: number;
  lostByHandle: number;
  /** Pairs of intervals of different holders that overlap at all. */
  overlappingPairs: number;
  /** Holders whose belief outlived their ownership (another holder started before it ended). */
  overlaps: number;
  /** The longest such stale belief: from the next holder's start to the end of the belief. */
  longestMs: number;
  totalMs: number;
  unexplained: number;
  byCause: Record<string, number>;
  worst: { ms: number; cause: string; a: string; b: string }[];
}

/**
 * Holders whose "held" interval overlaps a later holder's on the common clock. For each such
 * holder the overlap is measured from the first later holder's start to the end of its own belief:
 * the time it wrongly believed it held (several short holds inside one long stale belief count
 * once, at the length of the whole stale stretch). A fault that froze the holder's process
 * (SIGSTOP) during its interval explains an overlap: a frozen process cannot notice its loss.
 */
export function findOverlaps(intervals: HeldInterval[], faults: FaultRecord[]): { report: OverlapReport; overlaps: Overlap[] } {
  const sorted = [...intervals].sort((x, y) => x.from - y.from);
  const overlaps: Overlap[] = [];
  let pairs = 0;
  for (let i = 0; i < sorted.length; i++) {
    const a = sorted[i]!;
    let first: HeldInterval | undefined;
    for (let j = i + 1; j < sorted.length && sorted[j]!.from < a.to; j++) {
      const b = sorted[j]!;
      if (b.token === a.token) continue;
      pairs++;
      first ??= b;
    }
    if (first) overlaps.push({ a, b: first, ms: a.to - first.from, cause: explain(a, first, faults) });
  }
  const byCause: Record<string, number> = {};
  for (const o of overlaps) byCause[o.cause] = (byCause[o.cause] ?? 0) + 1;
  const worst = [...overlaps]
    .sort((x, y) => y.ms - x.ms)
    .slice(0, 5)
    .map((o) => ({ ms: round(o.ms), cause: o.cause, a: `${o.a.worker} token ${o.a.token}`, b: `${o.b.worker} token ${o.b.token}` }));
  return {
    overlaps,
    report: {
      intervals: intervals.length,
      lostByHandle: intervals.filter((i) => i.lost).length,
      overlappingPairs: pairs,
      overlaps: overlaps.length,
      longestMs: round(overlaps.reduce((m, o) => Math.max(m, o.ms), 0)),
      totalMs: round(overlaps.reduce((s, o) => s + o.ms, 0)),
      unexplained: overlaps.filter((o) => o.cause.startsWith('unexplained')).length,
      byCause,
      worst,
    },
  };
}

function explain(a: HeldInterval, _b: HeldInterval, faults: FaultRecord[]): string {
  // The earlier holder was frozen while it held: the classic GC-pause ghost.
  for (const f of faults) {
    if ((f.kind === 'worker-pause' || f.kind === 'ghost-pause') && f.worker === a.worker && f.start < a.to && f.end > a.from) {
      return f.kind;
    }
  }
  // Anything else should have been caught by the safety margin: report it, with the fault in force.
  for (const f of faults) {
    if (f.start < a.to && f.end + 1 > a.from && f.kind !== 'worker-pause' && f.kind !== 'ghost-pause') return `unexplained (during ${f.kind})`;
  }
  return 'unexplained';
}

// ---------------------------------------------------------------- election

export interface Term extends HeldInterval {}

export interface ElectionReport {
  terms: number;
  termsLost: number;
  /** Terms whose start was recorded out of token order (only a pause between winning and recording explains one). */
  orderInversions: number;
  registerWritesAccepted: number;
  registerWritesRefused: number;
  overlaps: OverlapReport;
  violations: Violation[];
}

/**
 * At most one leader per term (no token claimed by two workers, in reports or in fenced writes),
 * and terms strictly increasing: the fenced register accepted tokens in non-decreasing order, and a
 * term's token, once superseded, never wrote again.
 */
export function checkElection(terms: Term[], reg: FencedRegister, faults: FaultRecord[]): ElectionReport {
  const violations: Violation[] = [];
  const owner = new Map<bigint, string>();
  for (const t of terms) {
    const o = owner.get(t.token);
    if (o !== undefined && o !== t.worker) violations.push({ check: 'election-two-leaders', detail: `term ${t.token} was led by both ${o} and ${t.worker}` });
    owner.set(t.token, t.worker);
  }
  let last = -1n;
  let accepted = 0;
  let refused = 0;
  const writer = new Map<bigint, string>();
  for (const e of reg.log as StoreEntry[]) {
    if (!e.ok) {
      refused++;
      continue;
    }
    accepted++;
    const w = e.worker;
    const prev = writer.get(e.token);
    if (prev !== undefined && prev !== w) violations.push({ check: 'election-two-writers', detail: `term ${e.token} written by ${prev} and ${w}` });
    writer.set(e.token, w);
    if (e.token < last) violations.push({ check: 'election-term-order', detail: `write with term ${e.token} accepted after term ${last}` });
    last = e.token;
    const o = owner.get(e.token);
    if (o !== undefined && o !== w) violations.push({ check: 'election-foreign-write', detail: `term ${e.token} led by ${o} but written by ${w}` });
  }
  const byStart = [...terms].sort((x, y) => x.from - y.from);
  let inversions = 0;
  for (let i = 1; i < byStart.length; i++) if (byStart[i]!.token <= byStart[i - 1]!.token) inversions++;
  return {
    terms: terms.length,
    termsLost: terms.filter((t) => t.lost).length,
    orderInversions: inversions,
    registerWritesAccepted: accepted,
    registerWritesRefused: refused,
    overlaps: findOverlaps(terms, faults).report,
    violations,
  };
}

// ---------------------------------------------------------------- liveness

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
