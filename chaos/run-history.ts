// Everything the workers of a phase told the parent (History), on the parent's clock, and which
// errors are expected under faults.
import {
  AuthenticationError,
  ClientClosedError,
  CompactedError,
  DeadlineExceededError,
  EtcdError,
  InvalidArgumentError,
  LeadershipLostError,
  LockLostError,
  NoLeaderError,
  NotLeaderError,
  OwnershipLostError,
  PermissionDeniedError,
  PermitLostError,
  RWLockLostError,
  SessionExpiredError,
  TooManyClientsError,
  UnavailableError,
  WriteOutcomeUnknownError,
} from '../src/index.js';
import type { EtcdIncrementReport, HeldInterval, LeaseGoneReport, StaleHold, Term } from './checker/index.js';
import type { RecipeEvent, LockRole, Role } from './common.js';
import type { PgIncrementReport } from './pg-ledger.js';
import type { LinearOp } from './porcupine.js';
import type { GrantWitness } from './revisions.js';

/** Everything the workers told us, on the parent's clock. */
export class History {
  readonly held: Record<LockRole, HeldInterval[]> = { fenced: [], unfenced: [], semaphore: [], rwlock: [] };
  readonly terms: Term[] = [];
  readonly termStarts: { worker: string; token: bigint; at: number }[] = [];
  readonly acquisitions: Record<Role, number[]> = {
    fenced: [],
    unfenced: [],
    election: [],
    semaphore: [],
    rwlock: [],
    barrier: [],
    dbarrier: [],
    multilock: [],
  };
  /** What the recipe workers reported (worker-recipes.ts), with the worker's label, times on the parent's clock. */
  readonly recipes: (RecipeEvent & { worker: string })[] = [];
  /** The etcd counter's reads and guarded increments, and the fenced ledger's requests, for Porcupine. */
  readonly linear: { counter: LinearOp[]; ledger: LinearOp[]; unknownIncs: { op: LinearOp; opKey: string }[] } = {
    counter: [],
    ledger: [],
    unknownIncs: [],
  };
  /** Porcupine client ids, by worker label. */
  readonly clientIds = new Map<string, number>();
  /** Each grant's witness read (worker.ts witness()), by role. */
  readonly witnesses: Record<Role, GrantWitness[]> = {
    fenced: [],
    unfenced: [],
    election: [],
    semaphore: [],
    rwlock: [],
    barrier: [],
    dbarrier: [],
    multilock: [],
  };
  readonly etcdIncrements: EtcdIncrementReport[] = [];
  readonly pgIncrements: PgIncrementReport[] = [];
  /** Holds the nemesis made stale (stale-write): each of their writes must have been refused. */
  readonly staleHolds: StaleHold[] = [];
  readonly errors = new Map<string, number>();
  /** Errors that are not this library's (EtcdError family) nor an abort: possible bugs. */
  readonly unexpectedErrors: string[] = [];
  readonly sessionsLost = new Map<string, number>();
  /** Every time etcd said a session's lease was gone, with what the session's own deadline said. */
  readonly leaseGone: LeaseGoneReport[] = [];
  readonly carefulSkips: number[] = [];
  /** Lock waits that went on for longer than the stall limit, with the queue at that moment. */
  readonly stuck: string[] = [];
  /** Lease ids (hex) that ended without a revoke we know of: killed workers, lost sessions. */
  readonly abandonedLeases = new Set<string>();
  readonly leaseOwner = new Map<string, string>();
  /** The largest error bound of a worker's clock mapping (see clockOffsetSample), ms. */
  clockErrMs = 0;
  cycles = 0;
}

// LeaseNotFoundError is not on this list: it is judged by the session's deadline at that moment
// (History.leaseGone), and is unexpected when the worker could not say which session made the call.
const OUR_ERRORS = new Set<string>([
  ...[
    EtcdError,
    InvalidArgumentError,
    UnavailableError,
    NoLeaderError,
    WriteOutcomeUnknownError,
    CompactedError,
    PermissionDeniedError,
    AuthenticationError,
  ].map((c) => c.code),
  ...[DeadlineExceededError, ClientClosedError, SessionExpiredError, OwnershipLostError, LockLostError, LeadershipLostError].map(
    (c) => c.code,
  ),
  ...[NotLeaderError, PermitLostError, RWLockLostError].map((c) => c.code),
  // a DoubleBarrier whose dead member's key is still there when its new incarnation enters
  TooManyClientsError.code,
  // our own lock-wait limit (AbortSignal.timeout) and shutdown (worker.ts codeOf())
  'ABORTED',
]);

/** Whether an error code is one of this library's (or our own abort): expected under faults. */
export function isOurError(code: string): boolean {
  return OUR_ERRORS.has(code);
}
