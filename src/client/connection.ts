import { parseEndpoint, parseEndpoints, type Endpoint } from './endpoints.js';
import {
  ClientClosedError,
  DeadlineExceededError,
  type EtcdError,
  InvalidArgumentError,
  NoLeaderError,
  UnavailableError,
  WriteOutcomeUnknownError,
  etcdSays,
  fromTransportError,
  isEndpointFailure,
  isStaleToken,
  provablyNotApplied,
} from './errors.js';
import { Backoff, sleep } from './backoff.js';
import { Http2Transport } from './transport/http2.js';
import { type BidiStream, ConnectError, type Method, type RequestHeaders, type Transport, TransportError } from './transport/transport.js';
import type { ClientTelemetry as Telemetry } from './telemetry.js';
import { publishFailover } from '../diagnostics.js';
import {
  type CallOptions,
  type ConnectionOptions,
  DEFAULT_MAX_RECEIVE_MESSAGE_BYTES,
  MAX_SEND_MESSAGE_BYTES,
  type RetryPolicy,
  type TlsOptions,
  type TokenProvider,
  callTimeout,
  positive,
  tlsSettingsOf,
} from './options.js';
import { diagnose, silence } from './unreachable.js';
import * as rpc from './methods.js';
import type { StatusResponse } from '../proto/etcd.js';

export { closeStream, type BidiStream, type Method } from './transport/transport.js';
export type { CallOptions, ConnectionOptions, RetryPolicy, TlsOptions, TokenProvider } from './options.js';

/**
 * Owns the transports to every endpoint and the choice of the current one, and runs unary calls
 * with deadlines, cancellation, auth metadata and failover. It knows nothing of keys or locks.
 */
export class Connection {
  readonly endpoints: readonly Endpoint[];
  readonly dialTimeoutMs: number;
  readonly callTimeoutMs: number;
  readonly requireLeader: boolean;
  private readonly peers: Transport[];
  private current = 0;
  /** The endpoint of the Raft leader, when known and among ours: writes and linearizable reads go there. */
  private leader: number | undefined;
  /** The look-up of the leader under way, and when the last one ended (they are spaced). */
  private finding: Promise<void> | undefined;
  private foundAt = Number.NEGATIVE_INFINITY;
  /** The newest Raft term an answer showed: a newer one means an election since. */
  private term = 0n;
  private closed = false;
  /** TLS material when TLS is on, null for plaintext (kept for the unreachable-endpoint diagnosis). */
  private readonly tls: TlsOptions | undefined | null;
  tokens?: TokenProvider;
  /** The newest store revision any answer has shown us (a watch uses it to tell past from future). */
  seenRevision = 0n;

  constructor(
    options: ConnectionOptions = {},
    /** @internal where RPC durations and failovers are recorded. */
    readonly telemetry?: Telemetry,
  ) {
    this.endpoints = parseEndpoints(options.endpoints ?? '127.0.0.1:2379');
    this.dialTimeoutMs = positive(options.dialTimeoutMs ?? 2000, 'dialTimeoutMs');
    this.callTimeoutMs = positive(options.callTimeoutMs ?? 10_000, 'callTimeoutMs');
    this.requireLeader = options.requireLeader ?? true;
    const secure = this.endpoints[0]!.secure || options.tls !== undefined;
    this.tls = secure ? options.tls : null;
    const tlsSettings = secure ? tlsSettingsOf(options.tls) : null;
    const keepaliveTimeMs = positive(options.keepaliveTimeMs ?? 6_000, 'keepaliveTimeMs');
    const keepaliveTimeoutMs = positive(options.keepaliveTimeoutMs ?? 3_000, 'keepaliveTimeoutMs');
    const maxReceiveMessageBytes = positive(
      options.maxReceiveMessageBytes ?? DEFAULT_MAX_RECEIVE_MESSAGE_BYTES,
      'maxReceiveMessageBytes',
      'bytes',
    );
    this.peers = this.endpoints.map(
      (e) =>
        options.transport?.(e.target) ??
        new Http2Transport(e.target, {
          tls: tlsSettings,
          dialTimeoutMs: this.dialTimeoutMs,
          keepaliveTimeMs,
          keepaliveTimeoutMs,
          maxReceiveMessageBytes,
          maxSendMessageBytes: MAX_SEND_MESSAGE_BYTES,
        }),
    );
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Whether calls go over TLS. */
  get secure(): boolean {
    return this.tls !== null;
  }

  /** The endpoint calls go to now. */
  get activeTarget(): string {
    return this.endpoints[this.current]!.target;
  }

  /** The endpoint of the Raft leader, when known and among the endpoints. */
  get leaderTarget(): string | undefined {
    return this.leader === undefined ? undefined : this.endpoints[this.leader]!.target;
  }

  /**
   * Where a call goes: writes and linearizable reads to the leader when it is among the endpoints
   * and known (each of them would otherwise pay a member's round trip to it), the rest, and all of
   * them while no leader is known, to the current endpoint. Watches and keepalives stay there too.
   */
  private route(path: string, request: unknown): number {
    if (this.peers.length === 1 || !TO_LEADER.has(path) || (request as { serializable?: boolean }).serializable) return this.current;
    if (this.leader === undefined) {
      this.findLeader();
      return this.current;
    }
    return this.leader;
  }

  /**
   * Asks the current member for its Status (spaced: at most one look-up a second): the leader when
   * its own id is the leader's; else the others are asked, and the one whose id is the leader's is
   * it. None among the endpoints, or none answering: none known. A client already on the leader
   * connects to no other member for this.
   */
  private findLeader(): void {
    if (this.finding || this.closed || performance.now() - this.foundAt < LEADER_LOOKUP_SPACING_MS) return;
    const status = (i: number): Promise<StatusResponse | undefined> =>
      this.call(rpc.Maintenance.status, {}, 'idempotent', { endpoint: this.endpoints[i]!.target, timeoutMs: this.dialTimeoutMs }).catch(
        () => undefined,
      );
    const here = this.current;
    this.finding = (async () => {
      const mine = await status(here);
      const id = mine?.leader ?? 0n;
      if (mine?.raftTerm !== undefined && mine.raftTerm > this.term) this.term = mine.raftTerm;
      if (id === 0n) return;
      if (mine?.header?.memberId === id) {
        this.leader = here;
        return;
      }
      const others = this.endpoints.map((_, i) => i).filter((i) => i !== here);
      const answers = await Promise.all(others.map(status));
      const i = answers.findIndex((a) => a?.header?.memberId === id);
      this.leader = i < 0 ? undefined : others[i];
    })().finally(() => {
      this.finding = undefined;
      this.foundAt = performance.now();
    });
  }

  /** The leader may have changed (a new term, a refusal, a failover): forget it and look again, now. */
  private leaderMoved(): void {
    if (this.peers.length === 1) return;
    this.leader = undefined;
    this.foundAt = Number.NEGATIVE_INFINITY;
  }

  /** @internal An answer's Raft term: a newer one than any seen means an election, maybe a new leader. */
  sawTerm(term: bigint): void {
    if (term <= this.term) return;
    const known = this.term !== 0n;
    this.term = term;
    if (known) this.leaderMoved();
  }

  /** Moves to the next endpoint, unless someone already moved away from `peer`. */
  failover(peer: number): void {
    if (peer === this.leader) this.leaderMoved();
    if (this.current !== peer) return;
    this.leaderMoved();
    this.current = (peer + 1) % this.peers.length;
    if (this.peers.length > 1 && this.telemetry?.metricsOn) this.telemetry.failovers.add(1);
    if (this.peers.length > 1) publishFailover(this.telemetry?.logger, this.endpoints[peer]!.target, this.endpoints[this.current]!.target);
  }

  /** Headers every call carries: the auth token and, unless disabled, `hasleader`. */
  metadata(signal?: AbortSignal, anonymous = false): RequestHeaders | Promise<RequestHeaders> {
    const token = this.tokens && !anonymous ? this.tokens.token(signal) : undefined;
    // Synchronous unless a token must be fetched: the hot path pays no extra await.
    if (token instanceof Promise) return token.then((t) => this.headers(t));
    return this.headers(token);
  }

  private headers(token: string | undefined): RequestHeaders {
    if (token === undefined) return this.requireLeader ? HAS_LEADER : NO_HEADERS;
    return this.requireLeader ? { hasleader: 'true', token } : { token };
  }

  /**
   * Connects endpoint `peer`, or fails within the dial timeout (or the caller's deadline, or when
   * `signal` aborts, with its reason) with a ConnectFailure. Every call makes a real attempt: a
   * restarted member is used at once, a dead one fails at once.
   */
  private ready(peer: number, deadline: number, signal?: AbortSignal): Promise<Transport> {
    const t = this.peers[peer]!;
    if (t.isReady) return Promise.resolve(t);
    const started = performance.now();
    const until = Math.min(deadline, started + this.dialTimeoutMs);
    return t.connect(until, signal).then(
      () => t,
      (err: unknown) => {
        if (!(err instanceof ConnectError)) throw err;
        if (err.kind === 'closed' && this.closed) throw new ClientClosedError();
        // Reported as the time allowed, not the time measured (timers may fire a little late).
        throw new ConnectFailure(
          err.kind === 'timeout' ? 'timeout' : 'failed',
          err.kind === 'timeout' ? Math.max(0, until - started) : performance.now() - started,
        );
      },
    );
  }

  /**
   * The index of `endpoint` (as given, or `host:port`) among the endpoints, for a call pinned to it
   * (CallOptions.endpoint); an InvalidArgumentError when it is not one of them.
   */
  peerOf(endpoint: string): number {
    let target: string | undefined;
    try {
      target = parseEndpoint(endpoint).target;
    } catch {
      target = undefined;
    }
    const i = target === undefined ? -1 : this.endpoints.findIndex((e) => e.target === target);
    if (i < 0) {
      throw new InvalidArgumentError(
        `endpoint ${endpoint} is not one of this client's endpoints (${this.endpoints.map((e) => e.target).join(', ')})`,
      );
    }
    return i;
  }

  /**
   * Opens a bidirectional stream on the current endpoint (or on endpoint `pinned` alone),
   * connected and with auth metadata. On failure moves to the next endpoint (unless pinned) and
   * throws; the caller retries after a backoff.
   */
  async openStream<Req, Res>(
    method: Method<Req, Res>,
    pinned?: number,
  ): Promise<{ peer: number; stream: BidiStream<Req, Res>; token?: string }> {
    const md = await this.metadata();
    if (this.closed) throw new ClientClosedError();
    const peer = pinned ?? this.current;
    let stream: BidiStream<Req, Res>;
    try {
      // The same connection as the member's unary calls, as Go's client: one per member.
      const t = await this.ready(peer, performance.now() + this.dialTimeoutMs);
      if (this.closed) throw new ClientClosedError();
      stream = t.stream(method, md);
    } catch (err) {
      if (pinned === undefined && !(err instanceof ClientClosedError)) this.failover(peer);
      throw err;
    }
    return { peer, stream, ...(md.token !== undefined ? { token: md.token } : {}) };
  }

  /**
   * Runs one unary call with a deadline, cancellation and failover across endpoints. A failure that
   * leaves a write's outcome unknown is retried only under the 'idempotent' policy. Its duration
   * (retries included) is `rpc.client.call.duration`, recorded here and nowhere else.
   */
  unary<Req, Res>(
    method: Method<Req, Res>,
    request: Req,
    policy: RetryPolicy,
    options?: CallOptions,
    progress?: CallProgress,
  ): Promise<Res> {
    const tel = this.telemetry;
    if (!tel?.metricsOn) return this.call(method, request, policy, options, progress);
    const startedAt = performance.now();
    return this.call(method, request, policy, options, progress).then(
      (res) => {
        tel.rpc(method.path, startedAt);
        return res;
      },
      (err: unknown) => {
        tel.rpc(method.path, startedAt, err);
        throw err;
      },
    );
  }

  /** @internal {@link unary} without its duration recorded: for a caller that records per call of its own (coalescer.ts). */
  async call<Req, Res>(
    method: Method<Req, Res>,
    request: Req,
    policy: RetryPolicy,
    options: CallOptions = {},
    progress?: CallProgress,
  ): Promise<Res> {
    const what = doing(method.path);
    // A call pinned to one endpoint (CallOptions.endpoint) never moves to another.
    const pinned = options.endpoint === undefined ? undefined : this.peerOf(options.endpoint);
    const deadline = performance.now() + (options.timeoutMs === undefined ? this.callTimeoutMs : callTimeout(options.timeoutMs));
    const signal = options.signal;
    let backoff: Backoff | undefined;
    // Why each endpoint of the current round failed to connect, for the error when all of them did.
    const unreachable = new Map<number, ConnectFailure>();
    // When the first member said it has no Raft leader: an election takes about a second; a cluster
    // that has lost quorum never gets one, and we say so rather than time out.
    let noLeaderSince: number | undefined;
    // The last attempt's failure: when the budget runs out between attempts, that is what to report.
    let lastFailure: EtcdError | undefined;
    for (;;) {
      if (this.closed) throw new ClientClosedError();
      signal?.throwIfAborted();
      if (lastFailure && deadline - performance.now() < 1) {
        throw new DeadlineExceededError(`${lastFailure.message}; no time left to retry before the deadline`, { cause: lastFailure });
      }
      const peer = pinned ?? this.route(method.path, request);
      let transport: Transport;
      try {
        // Bounded by the dial timeout, the call's deadline and its signal: a hung endpoint costs at
        // most the dial timeout before the next one is tried, and never more than the caller allowed.
        const t = this.peers[peer]!;
        transport = t.isReady ? t : await this.ready(peer, deadline, signal);
      } catch (err) {
        if (err instanceof ClientClosedError) throw err;
        if (signal?.aborted) throw signal.reason;
        if (!(err instanceof ConnectFailure)) throw err;
        if (pinned === undefined) this.failover(peer);
        unreachable.set(peer, err);
        // A full round over the endpoints without one connecting, or no time left: report, do not hang.
        if (pinned !== undefined || unreachable.size >= this.peers.length || performance.now() >= deadline) {
          throw await this.unreachableError(what, unreachable, deadline, signal, pinned !== undefined);
        }
        continue;
      }
      const pending = this.metadata(signal, options.anonymous);
      // Fetching an auth token is a call of its own: it too must end by our deadline.
      const md = pending instanceof Promise ? await within(pending, deadline, signal, what) : pending;
      // A member that stopped answering (paused, cut off) must not eat the whole budget: give each
      // attempt of a retryable call a share of it, then move on to the next endpoint.
      const attemptDeadline =
        policy === 'idempotent' && this.peers.length > 1 && pinned === undefined
          ? Math.min(deadline, performance.now() + Math.max(this.dialTimeoutMs, this.callTimeoutMs / 3))
          : deadline;
      try {
        if (progress) progress.sent = true;
        return await transport.unary(method, request, md, attemptDeadline, signal);
      } catch (err) {
        if (signal?.aborted) throw signal.reason;
        if (!(err instanceof TransportError)) throw err;
        if (this.closed) throw new ClientClosedError();
        const details = err.details;
        if (etcdSays(details, 'notLeader') || etcdSays(details, 'leaderChanged') || etcdSays(details, 'noLeader')) this.leaderMoved();
        if (isStaleToken(details) && this.tokens && md.token !== undefined && performance.now() < deadline) {
          // The token expired or the member forgot it (etcd 17623): the request was refused, so
          // fetch a new one and retry.
          this.tokens.invalidate(md.token);
          continue;
        }
        if (!isEndpointFailure(err) && !etcdSays(details, 'tooManyRequests')) {
          // Refused on our side after it was sent (an answer above our limits): the write may have landed.
          if (!err.fromServer && !err.notSent) {
            if (progress) progress.ambiguous = true;
            if (policy === 'at-most-once') {
              throw new WriteOutcomeUnknownError(
                `${what}: the request may or may not have been applied (${details}); read the state before deciding to retry`,
                {
                  cause: err,
                  grpcCode: err.status,
                },
              );
            }
          }
          throw fromTransportError(err, what);
        }
        const notApplied = provablyNotApplied(err);
        // Retried below although this attempt may yet be applied (a request held by a slow member).
        if (progress && !notApplied) progress.ambiguous = true;
        if (!notApplied && policy === 'at-most-once') {
          throw new WriteOutcomeUnknownError(
            `${what}: the request may or may not have been applied (${details}); read the state before deciding to retry`,
            { cause: err, grpcCode: err.status },
          );
        }
        if (etcdSays(details, 'noLeader')) {
          noLeaderSince ??= performance.now();
          if (performance.now() - noLeaderSince > Math.max(2000, this.dialTimeoutMs) || performance.now() >= deadline) {
            throw new NoLeaderError(
              `${what}: etcd has no Raft leader (the cluster may have lost quorum: are a majority of its members up?)`,
              { cause: err, grpcCode: err.status },
            );
          }
        }
        if (performance.now() >= deadline) throw fromTransportError(err, what);
        lastFailure = fromTransportError(err, what);
        if (pinned === undefined) this.failover(peer);
        await sleep(Math.min((backoff ??= new Backoff(25, 500)).next(), Math.max(0, deadline - performance.now())), signal);
        unreachable.clear();
      }
    }
  }

  /**
   * The UnavailableError for a round in which no endpoint connected. A refused or failed connection
   * is probed once more (a plain TCP or TLS handshake names the cause); a silent one is not, since
   * the dial already waited: the diagnosis never outlasts the call's deadline or its signal.
   * `pinned`: the call was for that one endpoint, which the message names alone.
   */
  private async unreachableError(
    what: string,
    failures: Map<number, ConnectFailure>,
    deadline: number,
    signal?: AbortSignal,
    pinned = false,
  ): Promise<Error> {
    const reasons = await Promise.all(
      [...failures].map(async ([peer, f]) => {
        if (f.kind === 'timeout') return silence(Math.round(f.waitedMs));
        const budget = Math.min(this.dialTimeoutMs, deadline - performance.now());
        if (budget < 50) return 'the connection failed';
        return diagnose(this.endpoints[peer]!, budget, this.tls, signal);
      }),
    );
    if (signal?.aborted) return signal.reason as Error;
    const targets = [...failures.keys()].map((peer) => this.endpoints[peer]!.target);
    const why = new Set(reasons).size === 1 ? reasons[0]! : reasons.map((r, i) => `${targets[i]}: ${r}`).join('; ');
    const first = failures.values().next().value;
    return new UnavailableError(
      `${what}: could not connect to etcd at ${(pinned ? targets : this.endpoints.map((e) => e.target)).join(', ')} ` +
        `(${why}); check that etcd runs there (for a local one: ` +
        '`etcd-concurrency dev`) or pass the right endpoints',
      { cause: first, unreachable: why },
    );
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const p of this.peers) p.close();
  }
}

const HAS_LEADER: RequestHeaders = Object.freeze({ hasleader: 'true' });

/** Writes and linearizable reads: what a follower would forward to the leader, or confirm with it. */
const TO_LEADER = new Set(
  [rpc.KV.range, rpc.KV.put, rpc.KV.deleteRange, rpc.KV.txn, rpc.KV.compact, rpc.Lease.leaseGrant, rpc.Lease.leaseRevoke].map(
    (m) => m.path,
  ),
);

/** The least time between two look-ups of the leader. */
const LEADER_LOOKUP_SPACING_MS = 1000;
const NO_HEADERS: RequestHeaders = Object.freeze({});

/** What a unary call did, for callers that must know: whether a request left, and whether one may land late. */
export interface CallProgress {
  /** An attempt was sent. */
  sent: boolean;
  /**
   * An attempt failed with its outcome unknown (the call went on, or failed with that attempt's
   * error): it may have been applied, or may still be, later.
   */
  ambiguous?: boolean;
}

/** Why `ready` gave up on an endpoint: nothing answered in time, or the connection failed. */
class ConnectFailure extends Error {
  constructor(
    readonly kind: 'timeout' | 'failed',
    readonly waitedMs: number,
  ) {
    super(kind === 'timeout' ? `no connection within ${Math.round(waitedMs)} ms` : 'the connection failed');
    this.name = 'ConnectFailure';
  }
}

/** What the library was doing, by gRPC method, for error messages (users know no RPC names). */
const DOING: Record<string, string> = {
  Range: 'reading from etcd',
  Put: 'writing a key',
  DeleteRange: 'deleting keys',
  Txn: 'running a transaction',
  Compact: 'compacting history',
  LeaseGrant: 'granting a lease',
  LeaseRevoke: 'revoking a lease',
  LeaseTimeToLive: "reading a lease's time to live",
  LeaseLeases: 'listing leases',
  LeaseKeepAlive: 'renewing leases',
  Watch: 'watching keys',
  Status: "reading the member's status",
  MemberList: 'listing the members',
  AuthStatus: 'reading whether authentication is on',
  Authenticate: 'authenticating',
};

function doing(path: string): string {
  const name = path.slice(path.lastIndexOf('/') + 1);
  return DOING[name] ?? `calling ${name}`;
}

/** `p`, unless the deadline passes first (UnavailableError) or `signal` aborts (its reason). */
function within<T>(p: Promise<T>, deadline: number, signal: AbortSignal | undefined, what: string): Promise<T> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    };
    const onAbort = (): void => {
      done();
      reject(signal!.reason);
    };
    const timer = setTimeout(
      () => {
        done();
        reject(new UnavailableError(`${what}: no auth token before the deadline (authenticating took too long)`));
      },
      Math.max(0, deadline - performance.now()),
    );
    signal?.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => {
        done();
        resolve(v);
      },
      (err: unknown) => {
        done();
        reject(err);
      },
    );
  });
}
