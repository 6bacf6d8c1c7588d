// Hooks without OpenTelemetry: `node:diagnostics_channel` channels, one per event, and an optional
// pino-shaped logger (ClientOptions.logger). Both cost one boolean check when nobody listens: a
// payload is built only when a channel has subscribers or a logger is set. The names and payloads
// are public API (docs/operating.md, "Diagnostics channels and a logger"); every channel object lives here.
import diagnosticsChannel from 'node:diagnostics_channel';
import type { OwnershipEndReason, SessionEndReason } from './errors.js';

/**
 * A logger such as pino's (or `console`): each method takes an object of fields, then a message.
 * The client calls `warn` for a failover, a late renewal and a lost holding, `error` for a lost
 * session and `info` for a stream re-opened elsewhere; never `debug` on a hot path.
 */
export interface Logger {
  debug(fields: object, message: string): void;
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
  error(fields: object, message: string): void;
}

/** Part of {@link ClientOptions}. */
export interface DiagnosticsOptions {
  /**
   * Where the client logs what an operator wants to know (failovers, late renewals, streams re-opened,
   * sessions and holdings lost). Default: none, at no cost. The same events go to the
   * `etcd-concurrency:*` diagnostics channels whether or not a logger is set.
   */
  logger?: Logger;
}

/** `etcd-concurrency:client:failover`: calls move to another endpoint. */
export interface FailoverEvent {
  /** The endpoint left (`host:port`). */
  from: string;
  /** The endpoint calls go to now. */
  to: string;
  /** The failure that made the client move, when there was one. */
  error?: unknown;
}

/** `etcd-concurrency:watch:reconnect` and `etcd-concurrency:lease:reconnect`: a shared stream broke and is re-opened. */
export interface ReconnectEvent {
  /** The endpoint whose stream broke. */
  endpoint: string;
  /** Watches to resume (each from its next revision), or leases to renew again, on the new stream. */
  count: number;
  /** The stream's failure; absent when it merely stalled (a lease stream that answered nothing in time). */
  error?: unknown;
}

/** `etcd-concurrency:session:late-renewal`: a renewal is unanswered for longer than expected. */
export interface LateRenewalEvent {
  leaseId: bigint;
  /** How long the renewal has waited for its answer, ms. */
  waitedMs: number;
  /** How long the session has left before it declares itself lost, ms. */
  remainingMs: number;
}

/** `etcd-concurrency:session:lost`: a session was lost (its deadline passed, or etcd said its lease is gone). */
export interface SessionLostEvent {
  leaseId: bigint;
  reason: Extract<SessionEndReason, 'deadline' | 'lease_gone'>;
  /** The SessionExpiredError its signal aborts with. */
  error: Error;
}

/** `etcd-concurrency:ownership:lost`: a held lock, permit, RW lock or leadership was lost. */
export interface OwnershipLostEvent {
  key: string;
  fencingToken: bigint;
  reason: Exclude<OwnershipEndReason, 'released'>;
  /** The OwnershipLostError its signal aborts with. */
  error: Error;
}

/** `etcd-concurrency:release:retry` (`DIAGNOSTICS_CHANNEL.releaseRetry`): a delete of one of our keys (a release, a resign, the clean-up of an aborted acquire, a double barrier's leave) failed and will be tried again. */
export interface ReleaseRetryMessage {
  kind: string;
  name: string;
  key: string;
  /** The incarnation being deleted (the fencing token), when known. */
  fencingToken: bigint | undefined;
  /** Which attempt failed: 1 for the first. */
  attempt: number;
  /** The error's stable code when it has one (the gRPC status of a call that failed), else undefined. */
  code: string | number | undefined;
  message: string;
  error: unknown;
}

/** How a delete that keeps trying ended: the key is gone, or it stopped because the lease goes anyway. */
export type DeleteOutcome = 'deleted' | 'session_ended' | 'client_closed';

/** `etcd-concurrency:release:done` (`DIAGNOSTICS_CHANNEL.releaseDone`): a delete that needed retries is over: the key is gone, or the session ended (its lease takes the key along). */
export interface ReleaseDoneMessage {
  kind: string;
  name: string;
  key: string;
  fencingToken: bigint | undefined;
  /** Attempts made, the successful one included. */
  attempts: number;
  outcome: DeleteOutcome;
  /** Milliseconds from the first failure to the end. */
  durationMs: number;
}

/** The channel names: `etcd-concurrency:<area>:<event>`. */
export const CHANNEL = {
  failover: 'etcd-concurrency:client:failover',
  watchReconnect: 'etcd-concurrency:watch:reconnect',
  leaseReconnect: 'etcd-concurrency:lease:reconnect',
  lateRenewal: 'etcd-concurrency:session:late-renewal',
  sessionLost: 'etcd-concurrency:session:lost',
  ownershipLost: 'etcd-concurrency:ownership:lost',
  /** Published by the release path (src/queue): a release that failed and is tried again. */
  releaseRetry: 'etcd-concurrency:release:retry',
  /** Published by the release path (src/queue): a release that needed retries ended (its key gone, or the session or client ended). */
  releaseDone: 'etcd-concurrency:release:done',
  /** Published by runAsLeader: a campaign tried again after a failure. */
  leaderRetry: 'etcd-concurrency:leader:retry',
} as const;

/** The channel objects (`diagnostics_channel.channel(name)` returns the same object for a name). */
export const channels = {
  failover: diagnosticsChannel.channel(CHANNEL.failover),
  watchReconnect: diagnosticsChannel.channel(CHANNEL.watchReconnect),
  leaseReconnect: diagnosticsChannel.channel(CHANNEL.leaseReconnect),
  lateRenewal: diagnosticsChannel.channel(CHANNEL.lateRenewal),
  sessionLost: diagnosticsChannel.channel(CHANNEL.sessionLost),
  ownershipLost: diagnosticsChannel.channel(CHANNEL.ownershipLost),
  releaseRetry: diagnosticsChannel.channel(CHANNEL.releaseRetry),
  releaseDone: diagnosticsChannel.channel(CHANNEL.releaseDone),
  leaderRetry: diagnosticsChannel.channel(CHANNEL.leaderRetry),
} as const;

type Level = 'info' | 'warn' | 'error';

/** Publishes `make()` on `channel` and logs it, building it only if someone listens. */
function emit<T extends object>(
  channel: diagnosticsChannel.Channel,
  logger: Logger | undefined,
  level: Level,
  message: string,
  make: () => T,
): void {
  if (!channel.hasSubscribers && !logger) return;
  const event = make();
  if (channel.hasSubscribers) channel.publish(event);
  // bigints as decimal strings: JSON (and so most loggers) cannot write them.
  if (logger)
    logger[level](
      Object.fromEntries([['event', channel.name], ...Object.entries(event).map(([k, v]) => [k, typeof v === 'bigint' ? String(v) : v])]),
      message,
    );
}

/** Calls move from endpoint `from` to `to` (connection.ts, Connection.failover). */
export function publishFailover(logger: Logger | undefined, from: string, to: string, error?: unknown): void {
  emit(channels.failover, logger, 'warn', `etcd: failing over from ${from} to ${to}`, () =>
    error === undefined ? { from, to } : { from, to, error },
  );
}

export function publishWatchReconnect(logger: Logger | undefined, endpoint: string, count: number, error: unknown): void {
  emit(
    channels.watchReconnect,
    logger,
    'info',
    `etcd: the watch stream to ${endpoint} broke; resuming ${count} watch(es) on another stream`,
    () => (error === undefined ? { endpoint, count } : { endpoint, count, error }),
  );
}

export function publishLeaseReconnect(logger: Logger | undefined, endpoint: string, count: number, error: unknown): void {
  emit(
    channels.leaseReconnect,
    logger,
    'info',
    `etcd: the keepalive stream to ${endpoint} broke or stalled; renewing ${count} lease(s) on another stream`,
    () => (error === undefined ? { endpoint, count } : { endpoint, count, error }),
  );
}

export function publishLateRenewal(logger: Logger | undefined, leaseId: bigint, waitedMs: number, remainingMs: number): void {
  emit(
    channels.lateRenewal,
    logger,
    'warn',
    `etcd: lease ${leaseId.toString(16)} renewal unanswered after ${Math.round(waitedMs)} ms (${Math.round(remainingMs)} ms left)`,
    () => ({
      leaseId,
      waitedMs,
      remainingMs,
    }),
  );
}

export function publishSessionLost(logger: Logger | undefined, leaseId: bigint, reason: SessionLostEvent['reason'], error: Error): void {
  emit(channels.sessionLost, logger, 'error', error.message, () => ({ leaseId, reason, error }));
}

export function publishOwnershipLost(
  logger: Logger | undefined,
  key: string,
  fencingToken: bigint,
  reason: OwnershipLostEvent['reason'],
  error: Error,
): void {
  emit(channels.ownershipLost, logger, 'warn', error.message, () => ({ key, fencingToken, reason, error }));
}
