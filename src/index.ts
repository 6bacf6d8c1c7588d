// The public surface of etcd-concurrency. Only re-exports live here.
export { Client, type ClientOptions, type GetOptions } from './client/client.js';
export type { LeaseTimeToLive, MemberStatus, ClusterMember, AuthStatus } from './client/info.js';
export type { TlsOptions, CallOptions } from './client/connection.js';
export type { AuthOptions } from './client/auth.js';
export type { Watch, WatchOptions, WatchEvent, WatchBatch } from './client/watch.js';
export {
  compare,
  op,
  prefixEnd,
  prefixRange,
  SortOrder,
  SortTarget,
  type Bytes,
  type KeyValue,
  type ResponseHeader,
  type RangeResult,
  type TxnResult,
  type RangeRequest,
  type TxnRequest,
  type RequestOp,
  type Compare,
} from './client/kv.js';
export {
  EtcdError,
  InvalidArgumentError,
  UnavailableError,
  NoLeaderError,
  WriteOutcomeUnknownError,
  CompactedError,
  LeaseNotFoundError,
  PermissionDeniedError,
  AuthenticationError,
  DeadlineExceededError,
  ClientClosedError,
} from './client/errors.js';
export {
  SessionExpiredError,
  OwnershipLostError,
  LockLostError,
  LeadershipLostError,
  NotLeaderError,
  PermitLostError,
  RWLockLostError,
  LockUpgradeError,
  PermitCountConflictError,
  TooManyClientsError,
  BarrierKeyLostError,
  type SessionEndReason,
  type OwnershipEndReason,
  type LossReason,
} from './errors.js';
// The fences live in etcd-concurrency/fencing; their errors are here too, for one catch site.
export {
  StaleTokenError,
  ForeignTokenError,
  FenceNotInstalledError,
  FenceUnavailableError,
  FenceTransactionError,
  UntrustedFenceTableError,
} from './fencing/errors.js';
export { Session, MAX_TTL, type SessionOptions } from './session.js';
export {
  CHANNEL as DIAGNOSTICS_CHANNEL,
  type Logger,
  type DiagnosticsOptions,
  type FailoverEvent,
  type ReconnectEvent,
  type LateRenewalEvent,
  type SessionLostEvent,
  type OwnershipLostEvent,
  type ReleaseRetryMessage,
  type ReleaseDoneMessage,
  type DeleteOutcome,
} from './diagnostics.js';
export { Mutex, withLock, type LockHandle, type LockOptions } from './primitives/mutex.js';
export { Semaphore, withPermit, MAX_PERMITS, type PermitHandle, type PermitOptions } from './primitives/semaphore.js';
export { RWMutex, type RWLockHandle } from './primitives/rwmutex.js';
export { Barrier, type BarrierOptions, type BarrierWaitOptions } from './primitives/barrier.js';
export { DoubleBarrier, type DoubleBarrierWaitOptions } from './primitives/double-barrier.js';
export { lockAll, withLocks, type MultiLockHandle, type LockAllOptions } from './primitives/multilock.js';
export type { ReleaseResult } from './queue/release.js';
export { validateName, participantKey } from './keys.js';
export {
  Election,
  type LeaderHandle,
  currentLeader,
  observeLeader,
  runAsLeader,
  type LeaderInfo,
  type LeaderEvent,
  type RunAsLeaderOptions,
  type LeaderRetryEvent,
  type CampaignOptions,
} from './primitives/election.js';
export { listParticipants, oldestParticipant } from './primitives/participants.js';
export {
  leaderHealth,
  healthHandler,
  type LeaderHealth,
  type LeaderHealthOptions,
  type LeaderTerm,
  type HealthCheck,
  type HealthStatus,
} from './primitives/health.js';
export type { TelemetryOptions } from './client/telemetry.js';
export type { Kind as TelemetryKind, AcquireResult } from './metrics/names.js';
