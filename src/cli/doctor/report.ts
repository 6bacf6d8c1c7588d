// What doctor finds and what it reports: the facts gathered from etcd (Findings), the checks made
// from them (Check), and the whole report printed as JSON.

export type Level = 'ok' | 'info' | 'warn' | 'fail' | 'skip';

export interface Check {
  name: string;
  level: Level;
  message: string;
  /** What to do about a warning or failure. */
  fix?: string;
}

export interface MemberReport {
  /** Member id in hex, as etcdctl prints it; null when the member never answered and MemberList was unavailable. */
  id: string | null;
  name: string | null;
  endpoint: string;
  version: string | null;
  /** The leader's id in hex as this member sees it; "0" means no leader; null: unknown. */
  leader: string | null;
  /** Whether the member has a Raft leader; null: unknown (it did not answer). */
  hasLeader: boolean | null;
  /**
   * etcd refused Status (it needs the root role on some versions): the version then comes from
   * the member's /version, and hasLeader from a read, while leader, raftTerm, dbSize and alarms
   * are unknown.
   */
  statusRefused: boolean;
  isLeader: boolean;
  isLearner: boolean;
  raftTerm: bigint | null;
  dbSize: bigint | null;
  /** Alarms and errors the member reports in its Status (e.g. NOSPACE). */
  alarms: string[];
  /** Why the member could not be checked. */
  error: string | null;
}

export interface Stats {
  samples: number;
  medianMs: number;
  maxMs: number;
}

export type StepResult = 'ok' | 'skipped' | { error: string };

/** A call that failed: what it said, and whether etcd refused it for want of a permission. */
export interface Failure {
  message: string;
  denied: boolean;
}

export interface RoundTrips {
  put: Stats | null;
  read: Stats | null;
  watch: Stats | null;
  renewal: Stats | null;
}

/** The measured round trips, or the step that failed. */
export interface RoundTripFindings {
  /** Null where not measured (that step or an earlier one failed). */
  stats: Omit<RoundTrips, 'renewal'>;
  /** The first step that failed (then the later ones were not measured). */
  failed: { what: string; failure: Failure } | null;
  /** The watch catch-up, its failure, or null when it was not measured (an earlier step failed). */
  catchUp: Stats | { error: string } | null;
}

export type LeaseStep = 'grant' | 'attach' | 'renew' | 'revoke';

export interface LeaseFindings {
  /** Each step's outcome, in the order they ran. */
  steps: Record<LeaseStep, StepResult>;
  /** Why a step failed, keyed by step: the message to show, and whether it was a permission refusal. */
  failures: Partial<Record<LeaseStep, Failure>>;
  /** The renewals' round trips; null when they did not all succeed. */
  renewal: Stats | null;
}

/** Everything doctor learnt from etcd; the checks are pure functions of it. */
export interface Findings {
  /** The prefix given (--prefix), and the etcdctl command that grants access to it. */
  prefix: string;
  grant: string;
  samples: number;
  memberSource: 'member-list' | 'endpoints';
  members: MemberReport[];
  /** The distinct versions that answered, oldest first. */
  versions: string[];
  /** No member has a leader: writes, watches and leases were not tried. */
  leaderless: boolean;
  /** Whether authentication is on (null: unknown), and as whom we checked. */
  auth: { enabled: boolean | null; username: string | null; authenticated: boolean };
  /** Null when not measured (no leader). */
  roundTrips: RoundTripFindings | null;
  lease: LeaseFindings | null;
  dialTimeoutMs: number;
  /** Why the scratch keys could not be deleted, with where they are; null when they were (or none was written). */
  cleanup: { scratchPrefix: string; error: string } | null;
}

export interface TtlRecommendation {
  recommended: number;
  worstRoundTripMs: number;
  allowanceMs: number;
  assumedElectionTimeoutMs: number;
  dialTimeoutMs: number;
}

export interface DoctorReport {
  status: 'ready' | 'warnings' | 'not-ready';
  exitCode: number;
  endpoints: string[];
  prefix: string;
  /** Where the member list came from: MemberList, or the endpoints given when it was not available. */
  memberSource: 'member-list' | 'endpoints';
  members: MemberReport[];
  versions: string[];
  auth: { enabled: boolean | null; user: string | null; renewalNeedsPutPermission: boolean };
  roundTrips: RoundTrips;
  catchUp: (Stats & { paysDelay: boolean }) | null;
  lease: Record<LeaseStep, StepResult>;
  ttl: TtlRecommendation | null;
  /** Always null: etcd exposes no portable clock reading (see docs/cli.md). */
  clockRate: null;
  checks: Check[];
}
