import * as net from 'node:net';
import * as tls from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { parseEndpoints, type Endpoint } from './endpoints.js';
import {
  ClientClosedError,
  InvalidArgumentError,
  UnavailableError,
  WriteOutcomeUnknownError,
  fromGrpcError,
  isEndpointFailure,
  isServiceError,
  provablyNotApplied,
} from './errors.js';
import { Backoff, sleep } from './backoff.js';

/** PEM material for TLS. Pass file contents (Buffer or string), not paths. */
export interface TlsOptions {
  /** CA certificate(s) that signed the servers' certificates; system roots when omitted. */
  ca?: Buffer | string;
  /** Client certificate, for servers started with --client-cert-auth. */
  cert?: Buffer | string;
  /** Client private key, with `cert`. */
  key?: Buffer | string;
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
  /** @internal send no auth token (the Authenticate call itself). */
  anonymous?: boolean;
}

/** A method descriptor as ts-proto generates it for grpc-js. */
export interface UnaryMethod<Req, Res> {
  path: string;
  requestSerialize: (value: Req) => Buffer;
  responseDeserialize: (value: Buffer) => Res;
}

/** A streaming method descriptor as ts-proto generates it for grpc-js. */
export interface StreamMethod<Req, Res> {
  path: string;
  requestSerialize: (value: Req) => Buffer;
  responseDeserialize: (value: Buffer) => Res;
}

/** Supplies the auth token; the connection asks again after the server calls it invalid. */
export interface TokenProvider {
  token(signal?: AbortSignal): Promise<string | undefined> | string | undefined;
  /** Forget `token` (or whatever token is held, when omitted) so the next call authenticates again. */
  invalidate(token?: string): void;
}

const CHANNEL_OPTIONS: grpc.ChannelOptions = {
  // etcd can send watch responses larger than gRPC's 4 MiB default.
  'grpc.max_receive_message_length': -1,
  'grpc.max_send_message_length': 2 * 1024 * 1024,
  // Reconnect quickly after a member restarts; the default backoff grows to two minutes.
  'grpc.initial_reconnect_backoff_ms': 100,
  'grpc.max_reconnect_backoff_ms': 1000,
  // Notice a dead TCP peer (paused member, black-holed link) on idle streams.
  // etcd refuses pings more often than every 5 s (--grpc-keepalive-min-time).
  'grpc.keepalive_time_ms': 6_000,
  'grpc.keepalive_timeout_ms': 3_000,
  'grpc.keepalive_permit_without_calls': 0,
};

/** One endpoint's lazily created gRPC channel. */
class Peer {
  private client?: grpc.Client;
  constructor(
    readonly endpoint: Endpoint,
    private readonly credentials: grpc.ChannelCredentials,
  ) {}

  get grpc(): grpc.Client {
    this.client ??= new grpc.Client(this.endpoint.target, this.credentials, CHANNEL_OPTIONS);
    return this.client;
  }

  /** Drops the channel: gRPC backs off reconnecting to a failed endpoint, a fresh channel does not. */
  reset(): void {
    this.client?.close();
    this.client = undefined;
  }

  close(): void {
    this.reset();
  }
}

/**
 * Owns the channels to every endpoint and the choice of the current one, and runs unary calls
 * with deadlines, cancellation, auth metadata and failover. It knows nothing of keys or locks.
 */
export class Connection {
  readonly endpoints: readonly Endpoint[];
  readonly dialTimeoutMs: number;
  readonly callTimeoutMs: number;
  readonly requireLeader: boolean;
  private readonly peers: Peer[];
  private current = 0;
  private closed = false;
  /** TLS material when TLS is on, null for plaintext (kept for the unreachable-endpoint diagnosis). */
  private readonly tls: TlsOptions | undefined | null;
  tokens?: TokenProvider;
  /** The newest store revision any answer has shown us (a watch uses it to tell past from future). */
  seenRevision = 0n;

  constructor(options: ConnectionOptions = {}) {
    this.endpoints = parseEndpoints(options.endpoints ?? '127.0.0.1:2379');
    this.dialTimeoutMs = positive(options.dialTimeoutMs ?? 2000, 'dialTimeoutMs');
    this.callTimeoutMs = positive(options.callTimeoutMs ?? 10_000, 'callTimeoutMs');
    this.requireLeader = options.requireLeader ?? true;
    const secure = this.endpoints[0]!.secure || options.tls !== undefined;
    this.tls = secure ? options.tls : null;
    const credentials = secure ? makeTlsCredentials(options.tls) : grpc.credentials.createInsecure();
    this.peers = this.endpoints.map((e) => new Peer(e, credentials));
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** The endpoint calls go to now. */
  get activeTarget(): string {
    return this.peers[this.current]!.endpoint.target;
  }

  /** Moves to the next endpoint, unless someone already moved away from `peer`. */
  failover(peer: number): void {
    if (this.current === peer) this.current = (peer + 1) % this.peers.length;
  }

  /** Metadata every call carries: the auth token and, unless disabled, `hasleader`. */
  metadata(signal?: AbortSignal, anonymous = false): grpc.Metadata | Promise<grpc.Metadata> {
    const md = new grpc.Metadata();
    if (this.requireLeader) md.set('hasleader', 'true');
    const token = this.tokens && !anonymous ? this.tokens.token(signal) : undefined;
    // Synchronous unless a token must be fetched: the hot path pays no extra await.
    if (token instanceof Promise) {
      return token.then((t) => {
        if (t !== undefined) md.set('token', t);
        return md;
      });
    }
    if (token !== undefined) md.set('token', token);
    return md;
  }

  /**
   * Connects endpoint `peer` and returns its gRPC client, or fails within the dial timeout. A channel
   * already in TRANSIENT_FAILURE is replaced, so every call makes a real attempt instead of waiting
   * out gRPC's reconnect backoff (a restarted member is used at once, a dead one fails at once).
   */
  ready(peer: number, deadline: number): Promise<grpc.Client> {
    const p = this.peers[peer]!;
    let client = p.grpc;
    let state = client.getChannel().getConnectivityState(true);
    if (state === grpc.connectivityState.READY) return Promise.resolve(client);
    if (state === grpc.connectivityState.TRANSIENT_FAILURE) {
      p.reset();
      client = p.grpc;
      state = client.getChannel().getConnectivityState(true);
    }
    const channel = client.getChannel();
    const until = Math.min(deadline, performance.now() + this.dialTimeoutMs);
    return new Promise((resolve, reject) => {
      const step = (): void => {
        const left = until - performance.now();
        if (left <= 0) return reject(new Error('connect timeout'));
        channel.watchConnectivityState(state, Date.now() + left, (err) => {
          if (err) return reject(new Error('connect timeout'));
          state = channel.getConnectivityState(true);
          if (state === grpc.connectivityState.READY) return resolve(client);
          if (state === grpc.connectivityState.TRANSIENT_FAILURE) return reject(new Error('connect failed'));
          if (state === grpc.connectivityState.SHUTDOWN) return reject(this.closed ? new ClientClosedError() : new Error('channel replaced'));
          step();
        });
      };
      step();
    });
  }

  /**
   * Opens a bidirectional stream on the current endpoint, connected and with auth metadata. On
   * failure moves to the next endpoint and throws; the caller retries after a backoff.
   */
  async openStream<Req, Res>(method: StreamMethod<Req, Res>): Promise<{ peer: number; stream: grpc.ClientDuplexStream<Req, Res> }> {
    const md = await this.metadata();
    if (this.closed) throw new ClientClosedError();
    const peer = this.current;
    let client: grpc.Client;
    try {
      client = await this.ready(peer, performance.now() + this.dialTimeoutMs);
    } catch (err) {
      this.failover(peer);
      throw err;
    }
    if (this.closed) throw new ClientClosedError();
    const stream = client.makeBidiStreamRequest(method.path, method.requestSerialize, method.responseDeserialize, md, {});
    return { peer, stream };
  }

  /**
   * Runs one unary call with a deadline, cancellation and failover across endpoints. A failure that
   * leaves a write's outcome unknown is retried only under the 'idempotent' policy.
   */
  async unary<Req, Res>(
    method: UnaryMethod<Req, Res>,
    request: Req,
    policy: RetryPolicy,
    options: CallOptions = {},
  ): Promise<Res> {
    const what = method.path.slice(method.path.lastIndexOf('/') + 1);
    const deadline = performance.now() + (options.timeoutMs ?? this.callTimeoutMs);
    const signal = options.signal;
    const backoff = new Backoff(25, 500);
    let unreachable = 0;
    // When the first member said it has no Raft leader: an election takes about a second; a cluster
    // that has lost quorum never gets one, and we say so rather than time out.
    let noLeaderSince: number | undefined;
    for (;;) {
      if (this.closed) throw new ClientClosedError();
      signal?.throwIfAborted();
      const peer = this.current;
      let client: grpc.Client;
      try {
        client = await this.ready(peer, deadline);
      } catch (err) {
        if (err instanceof ClientClosedError) throw err;
        this.failover(peer);
        // A full round over the endpoints without one connecting: report, do not hang.
        if (++unreachable >= this.peers.length || performance.now() >= deadline) {
          const why = await diagnose(this.peers[peer]!.endpoint, this.dialTimeoutMs, this.tls);
          throw new UnavailableError(
            `${what}: could not connect to etcd at ${this.endpoints.map((e) => e.target).join(', ')} ` +
              `(${why}); check that etcd runs there (for a local one: ` +
              '`etcd-concurrency dev`) or pass the right endpoints',
            { cause: err },
          );
        }
        continue;
      }
      const pending = this.metadata(signal, options.anonymous);
      const md = pending instanceof Promise ? await pending : pending;
      // A member that stopped answering (paused, cut off) must not eat the whole budget: give each
      // attempt of a retryable call a share of it, then move on to the next endpoint.
      const attemptDeadline =
        policy === 'idempotent' && this.peers.length > 1
          ? Math.min(deadline, performance.now() + Math.max(this.dialTimeoutMs, this.callTimeoutMs / 3))
          : deadline;
      try {
        return await callUnary(client, method, request, md, attemptDeadline, signal);
      } catch (err) {
        if (signal?.aborted) throw signal.reason;
        if (!isServiceError(err)) throw err;
        const details = err.details ?? '';
        if (details.includes('invalid auth token') && this.tokens && performance.now() < deadline) {
          // The token expired (etcd 17623): the request was refused, so fetch a new one and retry.
          const stale = md.get('token')[0];
          if (typeof stale === 'string') this.tokens.invalidate(stale);
          continue;
        }
        if (!isEndpointFailure(err) && !details.includes('too many requests')) throw fromGrpcError(err, what);
        const notApplied = provablyNotApplied(err);
        if (!notApplied && policy === 'at-most-once') {
          throw new WriteOutcomeUnknownError(
            `${what}: the request may or may not have been applied (${details || err.message}); ` +
              'read the state before deciding to retry',
            { cause: err, code: err.code },
          );
        }
        if (details.includes('no leader')) {
          noLeaderSince ??= performance.now();
          if (performance.now() - noLeaderSince > Math.max(2000, this.dialTimeoutMs) || performance.now() >= deadline) {
            throw new UnavailableError(
              `${what}: etcd has no Raft leader (the cluster may have lost quorum: are a majority of its members up?)`,
              { cause: err, code: err.code },
            );
          }
        }
        if (performance.now() >= deadline) throw fromGrpcError(err, what);
        this.failover(peer);
        await sleep(Math.min(backoff.next(), Math.max(0, deadline - performance.now())), signal);
        unreachable = 0;
      }
    }
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const p of this.peers) p.close();
  }
}

function callUnary<Req, Res>(
  client: grpc.Client,
  method: UnaryMethod<Req, Res>,
  request: Req,
  md: grpc.Metadata,
  deadline: number,
  signal: AbortSignal | undefined,
): Promise<Res> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    // gRPC takes an epoch deadline; we derive it from our monotonic one at the last moment.
    const options: grpc.CallOptions = { deadline: Date.now() + Math.max(1, deadline - performance.now()) };
    const call = client.makeUnaryRequest(
      method.path,
      method.requestSerialize,
      method.responseDeserialize,
      request,
      md,
      options,
      (err, res) => {
        signal?.removeEventListener('abort', onAbort);
        if (err) reject(err);
        else resolve(res as Res);
      },
    );
    const onAbort = (): void => call.cancel();
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Finds out why an endpoint could not be reached, for the error message: gRPC only says the
 * channel failed, while a plain TCP or TLS handshake names the cause (refused, timeout, wrong CA).
 */
function diagnose(endpoint: Endpoint, timeoutMs: number, tlsOptions: TlsOptions | undefined | null): Promise<string> {
  const i = endpoint.target.lastIndexOf(':');
  const host = endpoint.target.slice(0, i).replace(/^\[|\]$/g, '');
  const port = Number(endpoint.target.slice(i + 1));
  return new Promise((resolve) => {
    const socket =
      tlsOptions === null
        ? net.connect({ host, port })
        : tls.connect({
            host,
            port,
            servername: net.isIP(host) ? '' : host, // SNI takes names, not addresses
            ALPNProtocols: ['h2'],
            ...(tlsOptions?.ca !== undefined && { ca: tlsOptions.ca }),
            ...(tlsOptions?.cert !== undefined && { cert: tlsOptions.cert }),
            ...(tlsOptions?.key !== undefined && { key: tlsOptions.key }),
          });
    const done = (why: string): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(why);
    };
    const timer = setTimeout(() => done(`nothing answered within ${timeoutMs} ms: the server may be hung or paused, the host down, or packets dropped`), timeoutMs);
    socket.once('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'ECONNREFUSED') return done('connection refused: nothing listens on that port');
      if (tlsOptions !== null) {
        return done(`TLS handshake failed: ${err.message}; check the CA certificate (--cacert), the client certificate and key, and that the server certificate names this host`);
      }
      done(err.message);
    });
    if (tlsOptions !== null) {
      socket.once('secureConnect', () =>
        done('the TLS handshake went through but the server then refused: it may require a client certificate (--cert and --key) signed by its CA, or this is not an etcd client port'),
      );
    } else {
      // Speak first, as an HTTP/2 client does: the answer (or silence) tells what is listening.
      socket.once('connect', () => socket.write(Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0])])));
      socket.once('data', (chunk: Buffer) =>
        done(
          chunk[0] === 0x15 || chunk[0] === 0x16
            ? 'the server speaks TLS: use https:// endpoints and pass its CA certificate (--cacert)'
            : 'the server answers HTTP/2 but gRPC failed: is this an etcd client port?',
        ),
      );
      socket.once('end', () => done('the server closed the connection without answering: if it uses TLS, use https:// endpoints and pass its CA certificate'));
    }
  });
}

function makeTlsCredentials(tls: TlsOptions | undefined): grpc.ChannelCredentials {
  const buf = (v: Buffer | string | undefined): Buffer | null => (v === undefined ? null : Buffer.from(v));
  if ((tls?.cert === undefined) !== (tls?.key === undefined)) {
    throw new InvalidArgumentError('TLS: give both a client certificate and its key, or neither');
  }
  try {
    return grpc.credentials.createSsl(buf(tls?.ca), buf(tls?.key), buf(tls?.cert));
  } catch (err) {
    throw new InvalidArgumentError(`TLS: could not load the certificates (${(err as Error).message}); pass PEM contents`, { cause: err });
  }
}

function positive(n: number, name: string): number {
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError(`${name} must be a positive number of milliseconds, got ${n}`);
  return n;
}
