// Pure checks over what a chaos run recorded. No I/O: main.ts gathers the history, this judges it.
import type { FencedPermits, FencedRegister, FencedRW, PermitEntry, RWEntry, StoreEntry } from './fenced-store.js';
import { checkGrantsByRevision, hasBug15247, type GrantWitness, type KeyLife } from './revisions.js';

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
  /** key-delete / lease-revoke: the revision of etcd's answer (the delete's, or the revoke's). */
  revision?: bigint;
  /** key-delete / lease-revoke: the key taken away (its CreateRevision is `token`). */
  key?: string;
  /** key-delete / lease-revoke: the hold whose key was taken away. */
  token?: bigint;
  /** lease-revoke: the lease (hex) revoked. */
  lease?: string;
}

/** An operator's faults: a held key deleted, a live holder's lease revoked (nemesis.ts). */
export const OPERATOR_FAULTS = new Set(['key-delete', 'lease-revoke']);

/**
 * How soon after an operator took its key away a holder must stop believing: its key watch sees the
 * delete (a revoke deletes the key too) within a round trip; a second covers a loaded machine.
 */
export const OPERATOR_NOTICE_MS = 1000;

/**
 * Whether operator fault `f` (its key deleted, or its lease revoked, at `f`'s revision) explains
 * `a` still believing when `b` started: the fault took `a`'s own key (its token), was answered
 * (`f.end > f.start`, a revision known) before `b` started, and `a` stopped believing within
 * OPERATOR_NOTICE_MS of the answer.
 */
export function operatorExplains(f: FaultRecord, a: HeldInterval, b: HeldInterval): boolean {
  return (
    OPERATOR_FAULTS.has(f.kind) &&
    f.worker === a.worker &&
    f.token === a.token &&
    f.revision !== undefined &&
    f.end > f.start &&
    f.start <= b.from &&
    a.to <= f.end + OPERATOR_NOTICE_MS
  );
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
  /** RW lock holds: a read (shared) or a write (exclusive) hold. */
  mode?: 'read' | 'write';
  /** Why the handle said it was lost, as the worker reported it (worker.ts lossClock(): `key_deleted`, `lease_expired/deadline`, ...); only when `lost`. */
  lostReason?: string;
  /**
   * When the session (lease) the hold was on is first known to have existed, on the common clock:
   * when the worker reported its lease granted (a 'session' event). Absent when unknown: the hold's
   * own start (`from`) then stands in, the latest moment the session certainly existed.
   */
  sessionFrom?: number;
  /** The lease (hex id) of the session the hold was on, as the worker's 'session' or 'term-start' report named it. */
  lease?: string;
  /** The TTL (seconds) its session asked for (the chaos run's --ttl, the worker's Session option). */
  ttl?: number;
  /**
   * The revision of a linearizable read the holder made right after its grant (revisions.ts
   * GrantWitness): its grant was decided at or before it.
   */
  witnessRev?: bigint;
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
  /** Of the explained ones, those attributed to a deposed Raft leader's revoke (etcd 15247, see explain()). */
  byDeposedLeader: number;
  byCause: Record<string, number>;
  worst: { ms: number; cause: string; a: string; b: string }[];
}

/**
 * Holders whose "held" interval overlaps a later holder's on the common clock. For each such
 * holder the overlap is measured from the first later holder's start to the end of its own belief:
 * the time it wrongly believed it held (several short holds inside one long stale belief count
 * once, at the length of the whole stale stretch). Only a freeze (SIGSTOP) of the earlier holder's
 * process that covers the later holder's start explains an overlap, or a deposed Raft leader's
 * revoke of the earlier holder's live lease (etcd 15247; see explain() for both), or a freeze of the
 * later holder's own, when it was the stale one and recorded its start only on waking (see
 * lateStart(), which needs `acted`). `conflicts` says which pairs may not overlap (every pair, for
 * a mutex; see rwConflict for the RW lock).
 */
export function findOverlaps(
  intervals: HeldInterval[],
  faults: FaultRecord[],
  conflicts: (a: HeldInterval, b: HeldInterval) => boolean = () => true,
  acted?: (h: HeldInterval) => boolean,
  leases?: LeaseEvidence,
): { report: OverlapReport; overlaps: Overlap[] } {
  const sorted = [...intervals].sort((x, y) => x.from - y.from);
  const overlaps: Overlap[] = [];
  let pairs = 0;
  for (let i = 0; i < sorted.length; i++) {
    const a = sorted[i]!;
    let first: HeldInterval | undefined;
    let cause: string | undefined;
    // Every later holder is judged: one explained by a freeze says nothing of the next one.
    for (let j = i + 1; j < sorted.length && sorted[j]!.from < a.to; j++) {
      const b = sorted[j]!;
      if (b.token === a.token || !conflicts(a, b)) continue;
      pairs++;
      first ??= b;
      let why = explain(a, b, faults, leases);
      if (why.startsWith('unexplained')) why = lateStart(b, [a], 1, faults, acted) ?? why;
      if (cause === undefined || (why.startsWith('unexplained') && !cause.startsWith('unexplained'))) cause = why;
    }
    if (first && cause !== undefined) overlaps.push({ a, b: first, ms: a.to - first.from, cause });
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
      byDeposedLeader: overlaps.filter((o) => o.cause === DEPOSED_REVOKE_CAUSE).length,
      byCause,
      worst,
    },
  };
}

/** Fault kinds that freeze a worker process (SIGSTOP): the faults of ours that explain an overlap. */
export const FREEZES = new Set(['worker-pause', 'ghost-pause']);

/**
 * After SIGCONT, a woken holder needs a moment to run its timers and notice the loss: a later holder
 * that started within this long after the end of the freeze still counts as started "during" it.
 */
export const WAKE_GRACE_MS = 250;

/** The session TTL (s) of a hold that does not say (the chaos run's default --ttl). */
export const DEFAULT_TTL_S = 3;

/**
 * The session's safety margin at `ttlSeconds` when none is set: min(5 s, TTL/6) (src/session.ts,
 * marginMs()). The chaos workers use the default.
 */
export function defaultMarginMs(ttlSeconds: number): number {
  return Math.min(5000, (ttlSeconds * 1000) / 6);
}

/**
 * The shortest freeze that can explain a stale belief: a correct holder frozen for less than its
 * TTL minus the margin wakes with its deadline still ahead, so its lease cannot have expired on the
 * server and nobody else can have been granted meanwhile. 2500 ms at TTL 3 s.
 */
export function minExcusingFreezeMs(ttlSeconds: number = DEFAULT_TTL_S): number {
  return ttlSeconds * 1000 - defaultMarginMs(ttlSeconds);
}

/**
 * Whether freeze `f` of `a`'s process explains `a` still believing it held when `b` started: a
 * SIGSTOP (never a zero-length record: a ghost-pause that trapped nobody) of at least
 * minExcusingFreezeMs(a's TTL), covering `b`'s start (up to WAKE_GRACE_MS after the wake), and `a`'s
 * belief ended within WAKE_GRACE_MS of the wake (a holder that goes on believing after it ran again
 * is not excused by having been frozen once).
 */
export function freezeExplains(f: FaultRecord, a: HeldInterval, b: HeldInterval): boolean {
  return (
    FREEZES.has(f.kind) &&
    f.worker === a.worker &&
    f.end > f.start &&
    f.end - f.start >= minExcusingFreezeMs(a.ttl) &&
    f.start <= b.from &&
    b.from <= f.end + WAKE_GRACE_MS &&
    a.to <= f.end + WAKE_GRACE_MS
  );
}

/** The cause of an overlap that a deposed Raft leader's revoke of a live lease explains (see explain()). */
export const DEPOSED_REVOKE_CAUSE = 'etcd 15247 (a deposed leader revoked a live lease)';

/**
 * How long after the next holder started a holder whose live lease a deposed leader revoked may
 * still believe it holds: it learns of its key's deletion through a watch, which may be served by a
 * member that is still catching up on the log (the woken one among them).
 */
export const DEPOSED_REVOKE_NOTICE_MS = 2000;

/**
 * The losses a revoked lease can cause, as the worker reports them (`lostReason`, worker.ts
 * lossClock()): the lost error's `reason` (OwnershipLostError.reason), with `/<session end reason>`
 * when the session's end caused it. Only these two:
 * - `key_deleted`: the key watch saw the revoke delete the key (how a holder learns it);
 * - `lease_expired/lease-gone`: the session ended because etcd said its lease no longer exists (a
 *   keepalive answer with TTL 0, or LeaseNotFound on a call).
 * Never a session deadline (`lease_expired/deadline`: the client gave up renewing, which a revoke on
 * the server does not cause), a key moved off its lease, a failed watch, a release or a shutdown.
 */
export const REVOKE_LOSS_REASONS = ['key_deleted', 'lease_expired/lease-gone'] as const;

/** Whether a hold's `lostReason` is one a revoked lease causes (REVOKE_LOSS_REASONS). */
export function lostToRevoke(reason: string | undefined): boolean {
  return (REVOKE_LOSS_REASONS as readonly (string | undefined)[]).includes(reason);
}

/**
 * How often per TTL a session renews its lease: every TTL/3 (src/session.ts, renewIntervalMs()).
 * The chaos workers' sessions are the library's defaults but for the TTL (worker.ts: Session.create
 * and runAsLeader with `ttl: cfg.ttl`, the run's --ttl, 3 s by default).
 */
export const RENEWALS_PER_TTL = 3;

/**
 * The shortest freeze of the Raft leader after which its stale lessor can find a renewed lease
 * expired: the TTL minus one renewal interval. The last renewal the leader applied before it froze
 * came at most one renewal interval (TTL/RENEWALS_PER_TTL) earlier and set the lease to expire a TTL
 * after it, so a shorter freeze wakes to a lease still alive in its own view. 2000 ms at TTL 3 s.
 */
export function staleLessorPauseMs(ttlSeconds: number): number {
  return ttlSeconds * 1000 - (ttlSeconds * 1000) / RENEWALS_PER_TTL;
}

/** etcd's own word on leases, for deposedRevokeOf(): what sessions were told and what members logged. */
export interface LeaseEvidence {
  /** Sessions told their lease was gone (checkLeaseExpiries()'s input). */
  leaseGone: LeaseGoneReport[];
  /** Members' timed-out revokes (etcd-logs.ts), for deposedLeaderRevoke(). */
  staleRevokes?: StaleRevoke[];
  /** The etcd version of the run: etcd 15247 is excused only on versions that have it (hasBug15247()). */
  etcdVersion?: string;
  /** The observer's record of every key (observer.ts): etcd 15247 needs the earlier key gone with its lease. */
  keys?: KeyLife[];
}

/**
 * The Raft leader's pause whose wake revoked `a`'s live lease (etcd 15247), letting `b` in, if all of
 * these hold (else undefined):
 * 1. `a` saw its hold lost (`lost`) for a reason a revoke causes: its key deleted, or its lease gone
 *    (lostToRevoke(), REVOKE_LOSS_REASONS), never its own deadline; or `a` released (not lost, not
 *    died) before any notice reached it, and etcd then told `a`'s worker that `a`'s own lease
 *    (`lease`) was gone while its deadline still lay ahead (a LeaseGoneReport with leftMs > 0), within
 *    DEPOSED_REVOKE_NOTICE_MS after `b` started, a report deposedLeaderRevoke() attributes to this
 *    same pause (as checkLeaseExpiries() does);
 * 2. `b` started at the wake of a pause of the member that was leader (leaderWake()), and that pause
 *    lasted at least staleLessorPauseMs(`a`'s TTL) (no TTL known: not attributed);
 * 3. `a`'s lease existed before the pause began (`sessionFrom`, else its own start `from`, before the
 *    pause's start): a lease granted while the leader was frozen is unknown to its stale lessor;
 * 4. `a` noticed the loss within DEPOSED_REVOKE_NOTICE_MS after `b` started;
 * 5. the run's etcd has the bug (hasBug15247(): before 3.4.28 and 3.5.11), and the observer's record
 *    shows `a`'s key removed with its lease at or before `b`'s witness revision (revokedBefore()).
 */
export function deposedRevokeOf(a: HeldInterval, b: HeldInterval, faults: FaultRecord[], leases?: LeaseEvidence): FaultRecord | undefined {
  if (!hasBug15247(leases?.etcdVersion) || !revokedBefore(a, b, leases?.keys)) return undefined;
  if (a.lost ? !lostToRevoke(a.lostReason) : a.died || a.lease === undefined) return undefined;
  if (a.ttl === undefined || a.to - b.from > DEPOSED_REVOKE_NOTICE_MS) return undefined;
  const pause = leaderWake(b.from, faults);
  if (!pause || pause.end - pause.start < staleLessorPauseMs(a.ttl)) return undefined;
  if ((a.sessionFrom ?? a.from) >= pause.start) return undefined;
  if (a.lost) return pause;
  // Released before the loss reached it: etcd's own word that its lease went at this wake.
  const revoked = (leases?.leaseGone ?? []).some(
    (r) =>
      r.worker === a.worker &&
      r.lease === a.lease &&
      r.leftMs > 0 &&
      r.at >= b.from &&
      r.at - b.from <= DEPOSED_REVOKE_NOTICE_MS &&
      deposedLeaderRevoke(r, faults, leases?.staleRevokes) === pause,
  );
  return revoked ? pause : undefined;
}

/**
 * etcd's history shows `a`'s key (CreateRevision `a.token`) removed with its lease (`lease-ended`: a
 * revoke or an expiry, never a delete) at a revision no later than `b`'s witness read: `b`'s grant
 * came after it. Without `b`'s witness or the observer's record, nothing is shown.
 */
function revokedBefore(a: HeldInterval, b: HeldInterval, keys: KeyLife[] | undefined): boolean {
  const life = keys?.find((k) => k.create === a.token);
  return life?.deleted !== undefined && life.how === 'lease-ended' && b.witnessRev !== undefined && life.deleted <= b.witnessRev;
}

/**
 * Why `a` still believed it held when `b` started. First, a freeze of `a`'s own process that covers
 * `b`'s start (a frozen process cannot act on any signal). Then etcd's own bug, 15247 (see
 * deposedLeaderRevoke()): a Raft leader frozen past the TTL wakes and revokes leases its successor
 * had been renewing, `a`'s among them; its key goes, `b` is rightly granted, and `a` hears of the
 * deletion through its watch a little later. Attributed only on all of deposedRevokeOf()'s
 * conditions: `a` saw the loss as its key deleted or its lease gone (or released first, and etcd
 * then told its worker its lease was gone early, at that wake: `leases`), `b` started at the wake of a
 * leader pause long enough for the stale lessor to find a renewed lease expired, `a`'s lease is
 * older than that pause, and `a` noticed within DEPOSED_REVOKE_NOTICE_MS. A network fault (black
 * hole, partition, member down) never explains one: the session's deadline is there so that a
 * holder cut off from etcd learns of its loss before the server can expire its lease.
 */
export function explain(a: HeldInterval, b: HeldInterval, faults: FaultRecord[], leases?: LeaseEvidence): string {
  for (const f of faults) {
    if (freezeExplains(f, a, b)) return f.kind;
  }
  for (const f of faults) {
    if (operatorExplains(f, a, b)) return f.kind;
  }
  if (deposedRevokeOf(a, b, faults, leases)) return DEPOSED_REVOKE_CAUSE;
  // Name the fault in force when the later holder started, for diagnosis.
  for (const f of faults) {
    if (f.start <= b.from && b.from <= f.end + 1000) return `unexplained (during ${f.kind} ${f.target})`;
  }
  return 'unexplained';
}

/**
 * Why `b`, recorded as starting while newer holders held, was itself the stale one: a freeze of its
 * own process began after it was granted (or after the answer that granted it was on its way) and
 * before it could record the hold, lasted past its TTL (so etcd expired its key and granted `newer`
 * meanwhile), and it recorded the start only on waking, before its deadline timer had run. Such a
 * ghost is explained, as a frozen earlier holder is, only if all of this holds:
 * - a freeze of `b`'s worker covers the start of at least `need` holders with newer tokens than
 *   `b`'s (`need` is the capacity: a correct lock or semaphore grants the newest of them only once
 *   `b`'s key is gone), and `b` recorded its start within WAKE_GRACE_MS of that freeze's end;
 * - `b`'s belief ended (it saw the loss, or let go) within WAKE_GRACE_MS of that end too;
 * - `b` never acted at the protected resource (`acted`: an accepted write, or whatever else the
 *   workload's holder does under the lock): a stale holder that got anything done is not excused.
 *   Without `acted` nothing is excused this way.
 */
export function lateStart(
  b: HeldInterval,
  newer: HeldInterval[],
  need: number,
  faults: FaultRecord[],
  acted?: (h: HeldInterval) => boolean,
): string | undefined {
  if (!acted || acted(b)) return undefined;
  for (const f of faults) {
    if (!FREEZES.has(f.kind) || f.worker !== b.worker || f.end - f.start < minExcusingFreezeMs(b.ttl)) continue;
    if (b.from < f.start || b.from > f.end + WAKE_GRACE_MS || b.to > f.end + WAKE_GRACE_MS) continue;
    const during = newer.filter((a) => a.token > b.token && a.from >= f.start && a.from <= f.end + WAKE_GRACE_MS);
    if (during.length >= need) return `${f.kind} (late start)`;
  }
  return undefined;
}

/** One violation per overlap that nothing explains (neither a freeze nor etcd 15247, see explain()). */
export function overlapViolations(overlaps: Overlap[], check: string): Violation[] {
  return overlaps
    .filter((o) => o.cause.startsWith('unexplained'))
    .map((o) => ({
      check,
      detail:
        `${o.a.worker} (token ${o.a.token}) still held until ${round(o.ms)} ms after ${o.b.worker} (token ${o.b.token}) ` +
        `started: ${o.cause}`,
    }));
}

/**
 * Queue order, for locks and RW locks: a hold that began after a conflicting hold with a newer token
 * had ended. The older key was there all along (it was created first and held later), so the newer
 * grant came while an older key it had to wait for still existed. (Not for a semaphore: there an
 * older waiter may rightly learn of its permit after a newer one came and went, both being among the
 * first N; its queue order is judged on revisions, overGrantViolations().) Excused only
 * when the older holder's own process was frozen (minExcusingFreezeMs(), nonzero) from before the
 * newer hold began until within WAKE_GRACE_MS of its own start (it won, froze, and recorded late).
 */
export function tokenOrderViolations(
  intervals: HeldInterval[],
  faults: FaultRecord[],
  check: string,
  conflicts: (a: HeldInterval, b: HeldInterval) => boolean = () => true,
): Violation[] {
  const violations: Violation[] = [];
  const byEnd = [...intervals].sort((x, y) => x.to - y.to);
  // The highest token among the holds ended so far (a write hold's, for RW readers): most holds have
  // none above their own, and need no scan (runs hold tens of thousands of holds).
  const maxAll: bigint[] = [];
  const maxWrite: bigint[] = [];
  let m = -1n;
  let mw = -1n;
  for (const x of byEnd) {
    if (x.token > m) m = x.token;
    if (x.mode !== 'read' && x.token > mw) mw = x.token;
    maxAll.push(m);
    maxWrite.push(mw);
  }
  const endedBefore = (t: number): number => {
    let lo = 0;
    let hi = byEnd.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (byEnd[mid]!.to < t) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  for (const y of intervals) {
    const n = endedBefore(y.from);
    if (n === 0 || (y.mode === 'read' ? maxWrite : maxAll)[n - 1]! <= y.token) continue;
    for (const x of byEnd) {
      if (x.to >= y.from) break;
      if (x.token <= y.token || x.worker === y.worker || !conflicts(x, y)) continue;
      const frozen = faults.some(
        (f) =>
          FREEZES.has(f.kind) &&
          f.worker === y.worker &&
          f.end - f.start >= minExcusingFreezeMs(y.ttl) &&
          f.start <= x.from + WAKE_GRACE_MS &&
          f.end + WAKE_GRACE_MS >= y.from,
      );
      if (!frozen) {
        violations.push({
          check,
          detail: `${y.worker} began holding token ${y.token} after ${x.worker}'s newer token ${x.token} had come and gone, and was not frozen meanwhile`,
        });
        break;
      }
    }
  }
  return violations;
}

/** RW lock holds conflict unless both are reads. */
export function rwConflict(a: HeldInterval, b: HeldInterval): boolean {
  return a.mode !== 'read' || b.mode !== 'read';
}

// ---------------------------------------------------------------- more than N holders (semaphore)

/** A moment when more than `capacity` holders believed they held at once. */
export interface Excess {
  /** The holder whose start made it more than `capacity`. */
  b: HeldInterval;
  /** The other holders that still believed they held when `b` started. */
  others: HeldInterval[];
  /** From `b`'s start until enough of them (b included) ended to bring the count back to `capacity`. */
  ms: number;
  /** Why, when freezes (or etcd 15247) explain it; otherwise 'unexplained …'. */
  cause: string;
}

export interface ExcessReport extends OverlapReport {
  capacity: number;
  /** The most holders that believed they held at once (at a holder's start). */
  maxConcurrent: number;
}

/**
 * Moments when more than `capacity` holders' "held" intervals overlap on the common clock: at each
 * holder's start, the others still holding. If they number `capacity` or more, the excess is
 * explained only when at least that many of them were frozen (worker-pause, ghost-pause) over the
 * new holder's start, or had their live lease revoked by a deposed Raft leader (etcd 15247): each
 * such one is a stale belief, as in explain(). The new holder itself is
 * one more when it is a ghost that recorded its start on waking from a freeze during which
 * `capacity` newer holders were granted (see lateStart(), which needs `acted`). Anything less (a
 * network fault, an early grant) fails the run. Measured from the new holder's start until enough
 * of the overlapping holds ended to bring the count back to `capacity`.
 */
export function findExcess(
  intervals: HeldInterval[],
  capacity: number,
  faults: FaultRecord[],
  acted?: (h: HeldInterval) => boolean,
  leases?: LeaseEvidence,
): { report: ExcessReport; excess: Excess[] } {
  const sorted = [...intervals].sort((x, y) => x.from - y.from);
  const open: HeldInterval[] = [];
  const excess: Excess[] = [];
  let maxConcurrent = 0;
  for (const b of sorted) {
    for (let i = open.length - 1; i >= 0; i--) if (open[i]!.to <= b.from) open.splice(i, 1);
    const others = open.filter((a) => a.token !== b.token);
    open.push(b);
    maxConcurrent = Math.max(maxConcurrent, others.length + 1);
    if (others.length < capacity) continue;
    const over = others.length + 1 - capacity;
    const causes = others.map((a) => explain(a, b, faults, leases));
    // Freezes first, then etcd 15247: the cause named is the first of these.
    const frozen = causes.filter((c) => !c.startsWith('unexplained') && c !== DEPOSED_REVOKE_CAUSE);
    const revoked = causes.filter((c) => c === DEPOSED_REVOKE_CAUSE);
    const explained = [...frozen, ...revoked];
    const ghost = explained.length >= over ? undefined : lateStart(b, others, capacity, faults, acted);
    const stale = ghost ? [ghost, ...explained] : explained;
    const cause = stale.length >= over ? stale[0]! : (causes.find((c) => c.startsWith('unexplained (')) ?? 'unexplained');
    const ends = [...others, b].map((x) => x.to).sort((x, y) => x - y);
    excess.push({ b, others, ms: Math.max(0, ends[over - 1]! - b.from), cause });
  }
  const byCause: Record<string, number> = {};
  for (const e of excess) byCause[e.cause] = (byCause[e.cause] ?? 0) + 1;
  const worst = [...excess]
    .sort((x, y) => y.ms - x.ms)
    .slice(0, 5)
    .map((e) => ({ ms: round(e.ms), cause: e.cause, a: e.others.map((o) => `${o.worker} token ${o.token}`).join(' + '), b: `${e.b.worker} token ${e.b.token}` }));
  return {
    excess,
    report: {
      capacity,
      maxConcurrent,
      intervals: intervals.length,
      lostByHandle: intervals.filter((i) => i.lost).length,
      overlappingPairs: excess.reduce((n, e) => n + e.others.length, 0),
      overlaps: excess.length,
      longestMs: round(excess.reduce((m, e) => Math.max(m, e.ms), 0)),
      totalMs: round(excess.reduce((t, e) => t + e.ms, 0)),
      unexplained: excess.filter((e) => e.cause.startsWith('unexplained')).length,
      byDeposedLeader: excess.filter((e) => e.cause === DEPOSED_REVOKE_CAUSE).length,
      byCause,
      worst,
    },
  };
}

/**
 * The semaphore's over-grants its holders proved themselves: a witness read made right after a
 * grant (worker.ts witness()) that still returned `permits` or more older participant keys. Those
 * keys were there at the grant too (older, and still there later), so etcd held more than `permits`
 * holders' keys in the first `permits` places at once: no clock, no excuse.
 */
export function overGrantViolations(witnesses: GrantWitness[], permits: number): Violation[] {
  return checkGrantsByRevision([], witnesses, { kind: 'permits', permits }, 'semaphore-over-grant');
}

/** One violation per moment of more than `capacity` holders that freezes (or etcd 15247) do not explain. */
export function excessViolations(excess: Excess[], capacity: number, check: string): Violation[] {
  return excess
    .filter((e) => e.cause.startsWith('unexplained'))
    .map((e) => ({
      check,
      detail:
        `${e.b.worker} (token ${e.b.token}) started while ${e.others.map((o) => `${o.worker} (token ${o.token})`).join(', ')} still held: ` +
        `${e.others.length + 1} holders of ${capacity} permits for ${round(e.ms)} ms: ${e.cause}`,
    }));
}

// ---------------------------------------------------------------- the semaphore's resource

export interface PermitsReport {
  capacity: number;
  enters: number;
  entersRefused: number;
  /** Admitted tokens pushed out by a newer one (their holders had stopped holding without leaving). */
  evicted: number;
  writesAccepted: number;
  writesRefused: number;
  /** Careful writers (assertHeld just before sending) that the resource still refused. */
  carefulRefused: number;
  leaves: number;
  /** The most holders whose accepted requests interleaved at the resource. */
  maxAccepted: number;
  violations: Violation[];
}

/** A holder's window at a resource: the first and last of its accepted requests (sequence numbers). */
interface Span<E> {
  token: bigint;
  worker: string;
  first: number;
  last: number;
  /** Its first accepted request. */
  entry: E;
}

/** Per token, its window of accepted requests (those `counts` picks), by start. */
function spans<E extends { seq: number; token: bigint; worker: string; ok: boolean }>(log: E[], counts: (e: E) => boolean): Span<E>[] {
  const by = new Map<bigint, Span<E>>();
  for (const e of log) {
    if (!e.ok || !counts(e)) continue;
    const s = by.get(e.token);
    if (s) s.last = e.seq;
    else by.set(e.token, { token: e.token, worker: e.worker, first: e.seq, last: e.seq, entry: e });
  }
  return [...by.values()].sort((x, y) => x.first - y.first);
}

/**
 * The semaphore's resource: never more than `capacity` holders served at once, judged on its log
 * (a holder's window runs from its first to its last accepted request; windows of more than
 * `capacity` tokens may not interleave), no operation applied twice, and no careful write (sent
 * right after assertHeld() passed) refused: the resource refuses only a token pushed out by newer
 * ones, which a correct semaphore grants only once that holder's key is gone.
 */
export function checkPermits(res: Pick<FencedPermits, 'capacity' | 'log'>): PermitsReport {
  const violations: Violation[] = [];
  let enters = 0;
  let entersRefused = 0;
  let evicted = 0;
  let writesAccepted = 0;
  let writesRefused = 0;
  let carefulRefused = 0;
  let leaves = 0;
  const opIds = new Set<string>();
  for (const e of res.log) {
    if (e.op === 'enter') {
      enters++;
      if (!e.ok) entersRefused++;
      evicted += e.evicted?.filter((t) => t !== e.token).length ?? 0;
    } else if (e.op === 'leave') leaves++;
    else if (e.ok) {
      writesAccepted++;
      if (e.opId !== undefined) {
        if (opIds.has(e.opId)) violations.push({ check: 'semaphore-double-apply', detail: `operation ${e.opId} was applied twice` });
        opIds.add(e.opId);
      }
    } else {
      writesRefused++;
      if (e.careful) {
        carefulRefused++;
        violations.push({
          check: 'semaphore-careful-refused',
          detail: `write #${e.seq} by ${e.worker} (token ${e.token}) passed assertHeld() but was refused: ${res.capacity} newer holders had entered`,
        });
      }
    }
  }
  // Windows of accepted requests: more than `capacity` open at one request is too many at once.
  let maxAccepted = 0;
  const open: Span<PermitEntry>[] = [];
  let over = false;
  for (const s of spans(res.log, (e) => e.op !== 'leave')) {
    for (let i = open.length - 1; i >= 0; i--) if (open[i]!.last < s.first) open.splice(i, 1);
    open.push(s);
    maxAccepted = Math.max(maxAccepted, open.length);
    if (open.length > res.capacity && !over) {
      violations.push({
        check: 'semaphore-fence-capacity',
        detail: `request #${s.first}: ${open.length} holders served at once by a resource of ${res.capacity}: ${open.map((o) => `${o.worker} (token ${o.token}, #${o.first}..#${o.last})`).join(', ')}`,
      });
    }
    over = open.length > res.capacity;
  }
  return { capacity: res.capacity, enters, entersRefused, evicted, writesAccepted, writesRefused, carefulRefused, leaves, maxAccepted, violations };
}

// ---------------------------------------------------------------- the RW lock's resource

export interface RWReport {
  readHolds: number;
  writeHolds: number;
  readsAccepted: number;
  readsRefused: number;
  writesAccepted: number;
  writesRefused: number;
  /** Careful requests (assertHeld just before sending: a reader's second read, a writer's write) refused. */
  carefulRefused: number;
  finalValue: number;
  violations: Violation[];
}

/**
 * The RW lock's resource: a write is never accepted while another holder's window is open (a
 * holder's window runs from its first to its last accepted request: a writer's may not interleave
 * with anyone's, readers' may with each other's), every accepted write writes the value before it
 * plus one (no increment lost or applied twice) and the final value counts them, and no careful
 * request (sent right after assertHeld() passed) is refused: the resource refuses a reader only
 * after a newer writer, and a writer only after any newer holder, which a correct RW lock lets in
 * only once the older key is gone.
 */
export function checkRW(res: Pick<FencedRW, 'log' | 'value'>): RWReport {
  const violations: Violation[] = [];
  let readHolds = 0;
  let writeHolds = 0;
  let readsAccepted = 0;
  let readsRefused = 0;
  let writesAccepted = 0;
  let writesRefused = 0;
  let carefulRefused = 0;
  let expected = 0;
  const opIds = new Set<string>();
  for (const e of res.log) {
    if (e.op === 'enter') {
      if (e.mode === 'read') readHolds++;
      else writeHolds++;
    }
    if (e.op !== 'write') {
      if (e.ok) readsAccepted++;
      else readsRefused++;
    } else if (e.ok) {
      writesAccepted++;
      expected++;
      if (e.value !== e.before + 1) {
        violations.push({
          check: 'rw-lost-update',
          detail: `write #${e.seq} by ${e.worker} (token ${e.token}) wrote ${e.value} over ${e.before}: an increment was lost or applied twice`,
        });
      }
      if (e.opId !== undefined) {
        if (opIds.has(e.opId)) violations.push({ check: 'rw-double-apply', detail: `operation ${e.opId} was applied twice` });
        opIds.add(e.opId);
      }
    } else writesRefused++;
    if (!e.ok && e.careful && e.op !== 'enter') {
      carefulRefused++;
      const by = e.mode === 'write' ? `holder token ${e.highestBefore}` : `writer token ${e.highestWriteBefore}`;
      violations.push({
        check: 'rw-careful-refused',
        detail: `${e.op} #${e.seq} by ${e.mode === 'write' ? 'writer' : 'reader'} ${e.worker} (token ${e.token}) passed assertHeld() but was refused: ${by} had been seen`,
      });
    }
  }
  if (res.value !== expected) violations.push({ check: 'rw-count', detail: `the RW register holds ${res.value} but ${expected} increments were accepted` });
  // Windows of accepted requests: a writer's may not interleave with any other holder's.
  const open: Span<RWEntry>[] = [];
  const who = (m: RWEntry['mode']): string => (m === 'write' ? 'writer' : 'reader');
  for (const s of spans(res.log, () => true)) {
    for (let i = open.length - 1; i >= 0; i--) if (open[i]!.last < s.first) open.splice(i, 1);
    for (const o of open) {
      if (o.entry.mode === 'read' && s.entry.mode === 'read') continue;
      violations.push({
        check: 'rw-fence-conflict',
        detail: `${who(s.entry.mode)} ${s.worker} (token ${s.token}, #${s.first}..#${s.last}) was served inside the window of ${who(o.entry.mode)} ${o.worker} (token ${o.token}, #${o.first}..#${o.last})`,
      });
    }
    open.push(s);
  }
  return { readHolds, writeHolds, readsAccepted, readsRefused, writesAccepted, writesRefused, carefulRefused, finalValue: res.value, violations };
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
 * Single leadership, judged on the terms' intervals on the common clock:
 * - `election-two-leaders`: two terms (different tokens) overlap in real time and neither a freeze
 *   of the earlier leader's process covering the later one's start nor a deposed Raft leader's
 *   revoke of the earlier leader's live lease (etcd 15247) explains it (see explain()).
 * - `election-term-claimed-twice`: one token reported by two workers.
 * - `election-term-order`: a term began after another term had ended, with an older token. A
 *   candidate key that older must have been gone before the newer term could lead, so the older
 *   term could only start late if its own process was frozen between winning and starting.
 * - `election-two-writers` / `election-foreign-write`: the fenced term register accepted one token
 *   from two workers, or from a worker that did not lead that term. (The register refuses tokens
 *   below the highest it has seen, so its accepted tokens never decrease by construction: the order
 *   of terms is judged on the intervals instead.)
 */
export function checkElection(terms: Term[], reg: FencedRegister, faults: FaultRecord[], leases?: LeaseEvidence): ElectionReport {
  const violations: Violation[] = [];
  const owner = new Map<bigint, string>();
  for (const t of terms) {
    const o = owner.get(t.token);
    if (o !== undefined && o !== t.worker) violations.push({ check: 'election-term-claimed-twice', detail: `term ${t.token} was led by both ${o} and ${t.worker}` });
    owner.set(t.token, t.worker);
  }
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
    const o = owner.get(e.token);
    if (o !== undefined && o !== w) violations.push({ check: 'election-foreign-write', detail: `term ${e.token} led by ${o} but written by ${w}` });
  }
  const byStart = [...terms].sort((x, y) => x.from - y.from);
  let inversions = 0;
  for (let i = 1; i < byStart.length; i++) if (byStart[i]!.token <= byStart[i - 1]!.token) inversions++;
  // Term order: y started after x ended, yet carries an older token.
  const byEnd = [...terms].sort((x, y) => x.to - y.to);
  for (const y of byStart) {
    for (const x of byEnd) {
      if (x.to >= y.from) break;
      if (x.token <= y.token) continue;
      const frozen = faults.some(
        (f) => FREEZES.has(f.kind) && f.worker === y.worker && f.end - f.start >= minExcusingFreezeMs(y.ttl) && f.start <= x.from + WAKE_GRACE_MS && f.end + WAKE_GRACE_MS >= x.to,
      );
      if (!frozen) {
        violations.push({
          check: 'election-term-order',
          detail: `${y.worker} began term ${y.token} after ${x.worker}'s newer term ${x.token} had ended, and was not frozen meanwhile`,
        });
      }
    }
  }
  const found = findOverlaps(terms, faults, undefined, undefined, leases);
  violations.push(...overlapViolations(found.overlaps, 'election-two-leaders'));
  return {
    terms: terms.length,
    termsLost: terms.filter((t) => t.lost).length,
    orderInversions: inversions,
    registerWritesAccepted: accepted,
    registerWritesRefused: refused,
    overlaps: found.report,
    violations,
  };
}

// ---------------------------------------------------------------- leases

/** A session that ended because etcd said its lease was gone, with what its own deadline said then. */
export interface LeaseGoneReport {
  worker: string;
  lease: string;
  /** The session's loss deadline minus the moment it learned the lease was gone (> 0: still "alive"). */
  leftMs: number;
  at: number;
}

/** How soon after a frozen Raft leader wakes its stale lessor's revocations land. */
export const DEPOSED_LEADER_WINDOW_MS = 2000;
/**
 * How long after a frozen Raft leader wakes its stale batch of revocations may still be draining
 * (see etcd-logs.ts): 16 revokes in flight, each up to etcd's request timeout (7 s by default), so
 * waves of revocations come 7 s, 14 s, ... after the wake. Bounded so that a pause long past cannot
 * explain a loss; 4 waves cover 80 leases, more than the chaos suite ever has.
 */
export const DEPOSED_BATCH_MS = 30_000;

/** `member-pause` faults of the member that was the Raft leader. */
function leaderPauses(faults: FaultRecord[]): FaultRecord[] {
  return faults.filter((f) => f.kind === 'member-pause' && f.target.includes('(leader)'));
}

/**
 * The pause of the Raft leader whose wake `at` falls just after (from WAKE_GRACE_MS before its end
 * to DEPOSED_LEADER_WINDOW_MS after it): when the woken leader's stale lessor revokes live leases.
 */
export function leaderWake(at: number, faults: FaultRecord[]): FaultRecord | undefined {
  return leaderPauses(faults).find((f) => at >= f.end - WAKE_GRACE_MS && at <= f.end + DEPOSED_LEADER_WINDOW_MS);
}

/** A member logged that its revocation of a lease it thought expired timed out (etcd-logs.ts). */
export interface StaleRevoke {
  member: string;
  at: number;
}

/**
 * The one known cause of an early expiry that is etcd's, not ours: a deposed Raft leader's stale
 * lessor (etcd issue 15247, also 12528). A Raft leader frozen (SIGSTOP) past the TTL wakes up still
 * believing its lessor is primary, finds every lease it did not see renewed "expired" and proposes
 * their revocation, which the new leader applies, although the new leader had been renewing them.
 *
 * etcd PR 16822 (backported to v3.4.31 and v3.5.13; 3.6, 3.7) checks leadership once before each
 * batch, and since commit b8b0cf83d (v3.4.34, v3.5.16, 3.6.0) a member that ticked within 3
 * heartbeats skips even that check (true right after SIGCONT). The first 16 revokes
 * (maxPendingRevokes) then go into the deposed member's own log and time out. Each freed slot sends
 * the next lease of the same stale list as a follower, and raft forwards it to the new leader. So
 * with more than 16 leases, revocations also land one request timeout (7 s) or more after the wake,
 * each right after the member logs "failed to revoke lease ... request timed out".
 *
 * Attributed when the loss came within DEPOSED_LEADER_WINDOW_MS after the end of a `member-pause`
 * of the member that was leader, or within DEPOSED_LEADER_WINDOW_MS after such a timed-out revoke
 * logged by that member, up to DEPOSED_BATCH_MS after its wake.
 */
export function deposedLeaderRevoke(r: LeaseGoneReport, faults: FaultRecord[], staleRevokes: StaleRevoke[] = []): FaultRecord | undefined {
  const atWake = leaderWake(r.at, faults);
  if (atWake) return atWake;
  return leaderPauses(faults).find((f) => {
    const member = f.target.split(' ')[0];
    return staleRevokes.some(
      (e) =>
        e.member === member &&
        e.at >= f.end - WAKE_GRACE_MS &&
        e.at <= f.end + DEPOSED_BATCH_MS &&
        r.at >= e.at - WAKE_GRACE_MS &&
        r.at <= e.at + DEPOSED_LEADER_WINDOW_MS,
    );
  });
}

export interface LeaseExpiryReport {
  /** Every time etcd said a lease was gone. */
  reports: number;
  /** Of those, while the session's own deadline still lay ahead. */
  early: number;
  /** Early ones attributed to a deposed Raft leader's revocations (etcd 15247): reported, not failed. */
  byDeposedLeader: number;
  /** Of those, the ones from a later wave of its stale batch (after a timed-out revoke, not at the wake). */
  byDeposedLeaderLate: number;
  /** The largest leftMs seen (positive: early). */
  latestMs?: number;
  violations: Violation[];
}

/**
 * The central promise: the session's deadline (send time + TTL - margin) comes before the server can
 * expire the lease. Learning from etcd that the lease is gone while that deadline still lay ahead
 * means the server expired it early (or the deadline was computed wrongly): a violation, unless it
 * is etcd's own known bug (deposedLeaderRevoke).
 */
export function checkLeaseExpiries(reports: LeaseGoneReport[], faults: FaultRecord[] = [], staleRevokes: StaleRevoke[] = []): LeaseExpiryReport {
  const violations: Violation[] = [];
  let early = 0;
  let byDeposedLeader = 0;
  let byDeposedLeaderLate = 0;
  for (const r of reports) {
    if (r.leftMs <= 0) continue;
    // The nemesis revoked it as an operator would: gone early by design.
    if (faults.some((f) => f.kind === 'lease-revoke' && f.worker === r.worker && r.at >= f.start && (r.lease === f.lease || r.lease.startsWith('(')))) continue;
    early++;
    if (deposedLeaderRevoke(r, faults, staleRevokes)) {
      byDeposedLeader++;
      if (!deposedLeaderRevoke(r, faults)) byDeposedLeaderLate++;
      continue;
    }
    violations.push({
      check: 'lease-expired-early',
      detail: `${r.worker}: etcd said lease ${r.lease} was gone while the session still had ${round(r.leftMs)} ms before its own deadline`,
    });
  }
  const out: LeaseExpiryReport = { reports: reports.length, early, byDeposedLeader, byDeposedLeaderLate, violations };
  if (reports.length > 0) out.latestMs = round(Math.max(...reports.map((r) => r.leftMs)));
  return out;
}

// ---------------------------------------------------------------- verdict

export interface PhaseVerdictInput {
  name: string;
  violations: Violation[];
  unexpectedErrors: string[];
  stuckWaits: string[];
  problems: string[];
  cleanupOk: boolean;
}

/**
 * Everything that fails a run: safety violations of any kind (fenced, etcd counter, election,
 * unexplained overlaps, early lease expiry, refused careful writes), unexpected errors, lock waits
 * past the stall bound, the harness's own problems (a fault that could not be injected or healed, a
 * cluster that did not recover), and incomplete cleanup.
 */
export function verdict(phases: PhaseVerdictInput[], fatal?: string): string[] {
  const failures: string[] = [];
  if (fatal) failures.push(`harness error: ${fatal.split('\n')[0]}`);
  if (phases.length === 0) failures.push('no phase completed');
  for (const p of phases) {
    const byCheck = new Map<string, number>();
    for (const v of p.violations) byCheck.set(v.check, (byCheck.get(v.check) ?? 0) + 1);
    for (const [check, n] of byCheck) failures.push(`${p.name}: ${n} ${check} violation(s)`);
    if (p.unexpectedErrors.length > 0) failures.push(`${p.name}: ${p.unexpectedErrors.length} unexpected error(s)`);
    if (p.stuckWaits.length > 0) failures.push(`${p.name}: ${p.stuckWaits.length} stuck lock wait(s)`);
    if (p.problems.length > 0) failures.push(`${p.name}: ${p.problems.length} harness problem(s): ${p.problems[0]}`);
    if (!p.cleanupOk) failures.push(`${p.name}: cleanup failed`);
  }
  return failures;
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
