// What a chaos run recorded: holds, faults, violations; and the operator's faults, the one excuse that needs nothing else.

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
  /** Why the handle said it was lost, as the worker reported it (worker-loss.ts lossClock(): `key_deleted`, `lease_expired/deadline`, ...); only when `lost`. */
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
