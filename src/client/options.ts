// What a Connection is told: endpoints, TLS, timeouts, limits; and each call's own options. The
// numbers are checked here, once, so that a bad one is refused before anything is sent.
import * as tls from 'node:tls';
import { InvalidArgumentError } from './errors.js';
import type { TlsSettings } from './transport/http2.js';
import type { Transport } from './transport/transport.js';

/** PEM material for TLS. Pass file contents (Buffer or string), not paths. */
export interface TlsOptions {
  /** CA certificate(s) that signed the servers' certificates; system roots when omitted. */
  ca?: Buffer | string;
  /** Client certificate, for servers started with --client-cert-auth. */
  cert?: Buffer | string;
  /** Client private key, with `cert`. */
  key?: Buffer | string;
  /**
   * The name the members' certificates must carry (and the TLS SNI), when it differs from the
   * endpoints' hosts: to connect by IP address to members whose certificates name a DNS name, without
   * turning verification off. Default: each endpoint's host.
   */
  serverName?: string;
  /**
   * Accept any server certificate, unverified (etcdctl's --insecure-skip-tls-verify): the traffic
   * is encrypted but anyone in the path can pose as the server. For tests and emergencies only.
   */
  insecureSkipVerify?: boolean;
}

export interface ConnectionOptions {
  /** `host:port` or `http(s)://host:port`, one or many; default `127.0.0.1:2379` as etcdctl. */
  endpoints?: string | readonly string[];
  tls?: TlsOptions;
  /** How long to wait for a TCP/TLS connection to an endpoint before trying the next. Default 2000. */
  dialTimeoutMs?: number;
  /** Default deadline of one call, including failover retries. Default 10000. */
  callTimeoutMs?: number;
  /**
   * Send etcd's `hasleader` metadata so that a member cut off from the Raft leader refuses the call
   * instead of serving stale state, and we move on to another member. Default true.
   */
  requireLeader?: boolean;
  /** How often to ping a connection with calls in flight (etcdctl's --keepalive-time). Default 6000; etcd refuses pings more often than every 5 s unless its --grpc-keepalive-min-time allows. */
  keepaliveTimeMs?: number;
  /** How long a ping may go unanswered before the connection is dropped (etcdctl's --keepalive-timeout). Default 3000. */
  keepaliveTimeoutMs?: number;
  /**
   * The largest message accepted from etcd, in bytes (a Range answer, a watch response). A larger
   * one fails the call with a RESOURCE_EXHAUSTED error as soon as its length is announced, before
   * any of it is buffered. Default 64 MiB (etcd's own server refuses requests above 1.5 MiB; a
   * Range over a huge prefix is the usual reason to raise it).
   */
  maxReceiveMessageBytes?: number;
  /** @internal what carries calls to endpoint `target` instead of HTTP/2 (the simulator's network). */
  transport?: (target: string) => Transport;
}

/** How a call may be retried on another endpoint after an ambiguous failure. */
export type RetryPolicy =
  /** Reads and writes that are safe to repeat (guarded Txns, keepalives): always retry. */
  | 'idempotent'
  /** Writes that must not be repeated blindly: retry only when the failure proves nothing applied. */
  | 'at-most-once';

export interface CallOptions {
  signal?: AbortSignal | undefined;
  /** Deadline of this call in ms from now (monotonic); default the client's callTimeoutMs. */
  timeoutMs?: number | undefined;
  /**
   * Send this call to this one endpoint only (one of the client's endpoints, as given or as
   * `host:port`), with no failover to the others: to ask one member about itself (a Status, a
   * check that it has a leader). Its failures are reported as they come: no other endpoint is tried.
   */
  endpoint?: string | undefined;
  /** @internal send no auth token (the Authenticate call itself). */
  anonymous?: boolean;
}

/** Supplies the auth token; the connection asks again after the server calls it invalid. */
export interface TokenProvider {
  token(signal?: AbortSignal): Promise<string | undefined> | string | undefined;
  /** Forget `token` (or whatever token is held, when omitted) so the next call authenticates again. */
  invalidate(token?: string): void;
}

/** The default of ConnectionOptions.maxReceiveMessageBytes. */
export const DEFAULT_MAX_RECEIVE_MESSAGE_BYTES = 64 * 1024 * 1024;
/** etcd's server refuses requests above 1.5 MiB (--max-request-bytes); we refuse to send above 2 MiB. */
export const MAX_SEND_MESSAGE_BYTES = 2 * 1024 * 1024;

export function tlsSettingsOf(tls: TlsOptions | undefined): TlsSettings {
  if ((tls?.cert === undefined) !== (tls?.key === undefined)) {
    throw new InvalidArgumentError('TLS: give both a client certificate and its key, or neither');
  }
  // Parsed once here, so that bad PEM is reported now and not on every connection attempt.
  try {
    loadSecureContext(tls);
  } catch (err) {
    throw new InvalidArgumentError(`TLS: could not load the certificates (${(err as Error).message}); pass PEM contents`, { cause: err });
  }
  return {
    ca: tls?.ca,
    cert: tls?.cert,
    key: tls?.key,
    serverName: tls?.serverName,
    insecureSkipVerify: tls?.insecureSkipVerify,
  };
}

function loadSecureContext(t: TlsOptions | undefined): void {
  tls.createSecureContext({
    ...(t?.ca !== undefined && { ca: t.ca }),
    ...(t?.cert !== undefined && { cert: t.cert }),
    ...(t?.key !== undefined && { key: t.key }),
  });
}

/** Timers take at most 2^31 - 1 ms (about 24.8 days); a longer one would fire at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** A call's `timeoutMs`: any number up to MAX_TIMER_MS (zero or less: the deadline has passed). */
export function callTimeout(n: number): number {
  if (Number.isNaN(n) || n > MAX_TIMER_MS)
    throw new InvalidArgumentError(`timeoutMs must be a number of milliseconds up to ${MAX_TIMER_MS} (about 24 days), got ${n}`);
  return n;
}

export function positive(n: number, name: string, unit = 'milliseconds'): number {
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError(`${name} must be a positive number of ${unit}, got ${n}`);
  if (unit === 'milliseconds' && n > MAX_TIMER_MS)
    throw new InvalidArgumentError(`${name} must be at most ${MAX_TIMER_MS} ms (about 24 days), got ${n}`);
  return n;
}
