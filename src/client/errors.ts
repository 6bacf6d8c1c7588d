import { Status, TransportError } from './transport/transport.js';

/** What every error class of this library takes besides its message. */
export interface EtcdErrorOptions {
  /** The failure behind this one. */
  cause?: unknown;
  /** gRPC status code of the underlying failure, when there was one. */
  grpcCode?: number;
}

/**
 * Base class of every error this library throws, so callers can catch ours apart from theirs.
 * Each class has a stable string `code` (its static `code`, on every instance too), as Node's and
 * undici's errors do: test `err.code === 'ERR_ETCD_UNAVAILABLE'` rather than the message, which may
 * change. Errors about etcd and the connection to it are `ERR_ETCD_*`; the primitives' own are
 * `ERR_*` (docs/errors.md).
 */
export class EtcdError extends Error {
  /** This class's code; every subclass sets its own. */
  static readonly code: string = 'ERR_ETCD';
  /** Stable string code of the error's class (see docs/errors.md); never changes with the message. */
  readonly code: string;
  /** gRPC status code of the underlying failure, when there was one. */
  readonly grpcCode?: number;
  constructor(message: string, options?: EtcdErrorOptions) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = (new.target as typeof EtcdError).code;
    if (options?.grpcCode !== undefined) this.grpcCode = options.grpcCode;
  }
}

/** Bad input, detected before anything was sent. The message says what to change. */
export class InvalidArgumentError extends EtcdError {
  static override readonly code: string = 'ERR_ETCD_INVALID_ARGUMENT';
}

/** No endpoint answered (down, unreachable, or cut off from the cluster's leader). */
export class UnavailableError extends EtcdError {
  static override readonly code: string = 'ERR_ETCD_UNAVAILABLE';
  /**
   * When no connection could be made: why (refused, silence, a TLS failure), without the advice
   * the message adds, for callers that report several endpoints on one line each.
   */
  readonly unreachable?: string;
  constructor(message: string, options?: EtcdErrorOptions & { unreachable?: string }) {
    super(message, options);
    if (options?.unreachable !== undefined) this.unreachable = options.unreachable;
  }
}

/** The cluster has no Raft leader (it may have lost quorum): a kind of {@link UnavailableError}. */
export class NoLeaderError extends UnavailableError {
  static override readonly code: string = 'ERR_ETCD_NO_LEADER';
}

/**
 * A write was sent but its outcome is unknown (deadline, reset stream, leader change).
 * It may or may not have been applied; we never retry such a write blindly.
 */
export class WriteOutcomeUnknownError extends EtcdError {
  static override readonly code: string = 'ERR_ETCD_WRITE_OUTCOME_UNKNOWN';
}

/** A read or watch asked for a revision that compaction has already discarded. */
export class CompactedError extends EtcdError {
  static override readonly code: string = 'ERR_ETCD_COMPACTED';
  constructor(
    readonly compactRevision: bigint,
    options?: EtcdErrorOptions,
  ) {
    super(
      `etcd compacted the revision asked for${compactRevision > 0n ? ` (history starts at ${compactRevision})` : ''}; ` +
        'read the current state again and watch from there',
      options,
    );
  }
}

/** The lease does not exist (expired, revoked, or never granted). */
export class LeaseNotFoundError extends EtcdError {
  static override readonly code: string = 'ERR_ETCD_LEASE_NOT_FOUND';
}

/** The authenticated user lacks permission for this key or operation. */
export class PermissionDeniedError extends EtcdError {
  static override readonly code: string = 'ERR_ETCD_PERMISSION_DENIED';
}

/** Authentication failed: wrong user or password, or auth misconfigured. Never carries secrets. */
export class AuthenticationError extends EtcdError {
  static override readonly code: string = 'ERR_ETCD_AUTHENTICATION';
}

/** The request did not complete within its deadline (reads only; writes get WriteOutcomeUnknownError). */
export class DeadlineExceededError extends EtcdError {
  static override readonly code: string = 'ERR_ETCD_DEADLINE_EXCEEDED';
}

/** The client was closed; create a new one. */
export class ClientClosedError extends EtcdError {
  static override readonly code: string = 'ERR_ETCD_CLIENT_CLOSED';
  constructor() {
    super('the etcd client is closed; create a new Client');
  }
}

/** True for failures that say "no reachable cluster right now", not "no" (worth retrying later). */
export function isTransient(err: unknown): boolean {
  return err instanceof UnavailableError || err instanceof DeadlineExceededError;
}

/**
 * etcd's error strings (api/v3rpc/rpctypes), matched here and nowhere else: etcd reports these only
 * as text, so a new wording in a release is one line to change.
 */
const ETCD_SAYS = {
  noLeader: 'etcdserver: no leader',
  notLeader: 'etcdserver: not leader',
  leaderChanged: 'etcdserver: leader changed',
  notCapable: 'etcdserver: not capable',
  tooManyRequests: 'etcdserver: too many requests',
  invalidAuthToken: 'etcdserver: invalid auth token',
  authOldRevision: 'etcdserver: revision of auth store is old',
  userEmpty: 'etcdserver: user name is empty',
  authFailed: 'etcdserver: authentication failed',
  compacted: 'etcdserver: mvcc: required revision has been compacted',
  leaseNotFound: 'etcdserver: requested lease not found',
  leaseExists: 'etcdserver: lease already exists',
  permissionDenied: 'etcdserver: permission denied',
  tooManyOps: 'etcdserver: too many operations in txn request',
} as const;

/** True when etcd's message `text` (a gRPC status' details, a watch's cancel reason) says `what`. */
export function etcdSays(text: string | undefined, what: keyof typeof ETCD_SAYS): boolean {
  // Without the `etcdserver: ` prefix: some paths (watch cancel reasons, old versions) omit it.
  return (text ?? '').includes(ETCD_SAYS[what].replace(/^etcdserver: (mvcc: )?/, ''));
}

/**
 * True when etcd refused a request because of the auth token it carried, not the user's rights:
 * the token expired (JWT, or a simple token's TTL), the member restarted and forgot its simple
 * tokens, or the auth store changed since the token was issued. Fetch a new token and retry, as
 * Go's client does (shouldRefreshToken); `user name is empty` counts only when we send a token.
 */
export function isStaleToken(text: string | undefined): boolean {
  return etcdSays(text, 'invalidAuthToken') || etcdSays(text, 'authOldRevision') || etcdSays(text, 'userEmpty');
}

/** etcd's refusals that prove a request was rejected before it was applied. */
const NOT_APPLIED = [ETCD_SAYS.noLeader, ETCD_SAYS.notCapable, ETCD_SAYS.tooManyRequests, ETCD_SAYS.invalidAuthToken];

export function isTransportError(err: unknown): err is TransportError {
  return err instanceof TransportError;
}

/** True when the failure proves the request never took effect, so even a write may be retried. */
export function provablyNotApplied(err: TransportError): boolean {
  return err.notSent || NOT_APPLIED.some((s) => err.details.includes(s));
}

/** True when the failure is about the endpoint (so another endpoint may do better). */
export function isEndpointFailure(err: TransportError): boolean {
  return (
    err.status === Status.UNAVAILABLE ||
    err.status === Status.DEADLINE_EXCEEDED ||
    (err.status === Status.CANCELLED && !err.local) ||
    err.status === Status.INTERNAL ||
    err.status === Status.UNKNOWN
  );
}

/** Converts a transport failure into our typed errors; the original stays attached as `cause`. */
export function fromTransportError(err: TransportError, what: string): EtcdError {
  const d = err.details;
  const opts = { cause: err, grpcCode: err.status };
  if (etcdSays(d, 'compacted')) return new CompactedError(0n, opts);
  if (etcdSays(d, 'leaseNotFound')) return new LeaseNotFoundError(`${what}: lease not found (expired or revoked)`, opts);
  switch (err.status) {
    case Status.PERMISSION_DENIED:
      return new PermissionDeniedError(`${what}: permission denied; grant the user's role access to this key range`, opts);
    case Status.UNAUTHENTICATED:
      return new AuthenticationError(`${what}: not authenticated (${d}); check the user and password`, opts);
    case Status.INVALID_ARGUMENT:
      if (etcdSays(d, 'authFailed')) return new AuthenticationError(`${what}: authentication failed: wrong user name or password`, opts);
      if (etcdSays(d, 'userEmpty')) {
        return new AuthenticationError(`${what}: etcd has authentication enabled; pass a user and password (auth option, or --user)`, opts);
      }
      return new InvalidArgumentError(`${what}: ${d}`, opts);
    case Status.DEADLINE_EXCEEDED:
      return new DeadlineExceededError(`${what}: no answer before the deadline`, opts);
    case Status.UNAVAILABLE:
      return new UnavailableError(`${what}: etcd unavailable (${d})`, opts);
    default:
      return new EtcdError(`${what}: ${err.message}`, opts);
  }
}
