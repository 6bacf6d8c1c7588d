// The names of every instrument, attribute and span this library records: one table, so that the
// table of docs/operating.md and the tests read the same strings. OpenTelemetry has no semantic convention for
// locks or elections, so ours live under the `etcd_concurrency.` namespace, following OTel's naming
// rules (lowercase, dot-separated namespaces, units in UCUM and never in the name, no `_total`).
// The gRPC calls follow the RPC semantic conventions of v1.40.0 (`rpc.client.call.duration` with
// `rpc.system.name`, a fully-qualified `rpc.method`, the string `rpc.response.status_code` and `error.type`).

import { CLIENT_METRIC, RPC_ATTR, SCOPE } from '../client/names.js';

/** Instrument names (the client's own calls, failovers and watch resumes are named where it records them). */
export const METRIC = {
  acquireDuration: 'etcd_concurrency.acquire.duration',
  holdDuration: 'etcd_concurrency.hold.duration',
  held: 'etcd_concurrency.held',
  waiting: 'etcd_concurrency.waiting',
  losses: 'etcd_concurrency.losses',
  electionLeader: 'etcd_concurrency.election.leader',
  electionTransitions: 'etcd_concurrency.election.transitions',
  electionRetries: 'etcd_concurrency.election.retries',
  keepaliveDuration: 'etcd_concurrency.session.keepalive.duration',
  sessionTimeLeft: 'etcd_concurrency.session.time_left',
  sessionLosses: 'etcd_concurrency.session.losses',
  ...CLIENT_METRIC,
  fencingRefused: 'etcd_concurrency.fencing.refused',
  releaseRetries: 'etcd_concurrency.release.retries',
  releasePending: 'etcd_concurrency.release.pending',
} as const;

/** Attribute keys. */
export const ATTR = {
  /** lock, permit, read, write or campaign. */
  kind: 'etcd_concurrency.kind',
  /** How an acquire ended: see {@link AcquireResult}. */
  result: 'etcd_concurrency.result',
  /** The lock or election name, only when the user allows it (ClientOptions.nameAttribute). */
  name: 'etcd_concurrency.name',
  /** Why a holder lost what it held: see LossReason (errors.ts). */
  lossReason: 'etcd_concurrency.loss.reason',
  /** On a leader transition: true when this process became leader, false when it stopped leading. */
  leading: 'etcd_concurrency.leading',
  /** Why a session was lost: deadline or lease_gone. */
  sessionEndReason: 'etcd_concurrency.session.end_reason',
  /** Where a fence refused a stale write: postgres or redis (etcd_concurrency/fencing). */
  fencingStore: 'etcd_concurrency.fencing.store',
  /** Span attribute: the fencing token (the key's CreateRevision). */
  fencingToken: 'etcd_concurrency.fencing_token',
  /** Span attribute: true when the acquire found others ahead and had to wait for its turn. */
  queued: 'etcd_concurrency.queued',
  /**
   * Span attribute: how many of the keys the enqueue counted were ahead of ours when it created our
   * key (the queue position at enqueue; for a reader, the writers ahead). Absent when the call found
   * its key already there (shared with another call of this process, or left on an adopted lease).
   */
  queueAhead: 'etcd_concurrency.queue.ahead',
  /** Span attribute: seconds from the call to holding (or to giving up). */
  waitDuration: 'etcd_concurrency.wait.duration',
  ...RPC_ATTR,
} as const;

/** What was acquired: a lock (Mutex, and each lock of lockAll), a semaphore permit, an RWMutex read or write lock, or leadership. */
export type Kind = 'lock' | 'permit' | 'read' | 'write' | 'campaign';

/**
 * How an acquire ended: held; the caller's signal aborted (`timed_out` when its reason is a
 * TimeoutError, as `AbortSignal.timeout()` gives); the session was lost meanwhile; any other
 * error; or, for tryLock()/tryAcquire(), taken by others (`busy`).
 */
export type AcquireResult = 'acquired' | 'aborted' | 'timed_out' | 'session_lost' | 'error' | 'busy';

/** Span names: the acquire, then the holding it starts (where a loss is an event). */
export const SPAN: Record<Kind, { acquire: string; hold: string }> = {
  lock: { acquire: 'lock.acquire', hold: 'lock.hold' },
  permit: { acquire: 'permit.acquire', hold: 'permit.hold' },
  read: { acquire: 'rwlock.read.acquire', hold: 'rwlock.read.hold' },
  write: { acquire: 'rwlock.write.acquire', hold: 'rwlock.write.hold' },
  campaign: { acquire: 'election.campaign', hold: 'election.lead' },
};

/** The span event recorded on a hold span when what it held was lost. */
export const LOST_EVENT = 'etcd_concurrency.lost';

/** The instrumentation scope: the meter's and the tracer's name. */
export { SCOPE };
