// The h2 transport: etcd's gRPC on the library's own HTTP/2 framing (h2/wire.ts; issue 13), one
// connection per endpoint for every call. gRPC over HTTP/2 is, for a unary call, a POST with
// `content-type: application/grpc` and `te: trailers`, one message behind a 5-byte prefix (a
// compressed flag and a big-endian length) each way, and the status in the trailers
// (`grpc-status`, percent-encoded `grpc-message`), or in the response headers alone when the
// server sends no message ("trailers-only"); a stream (Watch, LeaseKeepAlive: H2Stream) is the
// same with any number of messages each way.
//
// What it keeps of the grpc-js channel the Connection uses: plain or TLS connections (CA, client
// certificate and key, server name, insecure-skip-verify; ALPN h2), "ready" meaning the server's
// HTTP/2 SETTINGS arrived, a deadline sent as grpc-timeout and enforced here too, cancellation by
// AbortSignal (RST_STREAM CANCEL), keepalive pings with grpc-js's semantics (only while calls are
// in flight; a ping unanswered within the timeout closes the connection), the maximum message
// sizes, a new connection on the next call after one closed (no reconnect backoff: the Connection
// fails over itself), and grpc-js's transparent retry, once, of a request that provably never
// reached the server (REFUSED_STREAM, or a GOAWAY whose last stream id is below ours). Failures are
// H2ServiceErrors, shaped as grpc-js's ServiceError with the same codes and details, so that
// errors.ts maps them unchanged.
import { EventEmitter } from 'node:events';
import * as net from 'node:net';
import * as tls from 'node:tls';
import { encodeHeaders, type HeaderField } from './h2/hpack.js';
import { H2Metadata, H2ServiceError, Status, decodeGrpcMessage, fromHttpStatus, grpcTimeout, seconds } from './h2/status.js';
import { ErrorCode, WireConnection, type HeaderMap, type StreamHandler, type WireStream } from './h2/wire.js';

export { H2Metadata, H2ServiceError, Status } from './h2/status.js';

const {
  NO_ERROR: NGHTTP2_NO_ERROR,
  CANCEL: NGHTTP2_CANCEL,
  REFUSED_STREAM: NGHTTP2_REFUSED_STREAM,
  ENHANCE_YOUR_CALM: NGHTTP2_ENHANCE_YOUR_CALM,
  INADEQUATE_SECURITY: NGHTTP2_INADEQUATE_SECURITY,
  INTERNAL_ERROR: NGHTTP2_INTERNAL_ERROR,
} = ErrorCode;

/** TLS material, as the Connection's TlsOptions, plus the name to verify the server by. */
export interface H2TlsOptions {
  ca?: Buffer | string | undefined;
  cert?: Buffer | string | undefined;
  key?: Buffer | string | undefined;
  /** SNI and the name the certificate must carry; default the target's host when it is a name (an IP address is checked against the certificate's IP SANs). */
  servername?: string | undefined;
  /** Accept any server certificate, unverified. */
  insecureSkipVerify?: boolean | undefined;
}

export interface H2ChannelOptions {
  /** TLS when given (an empty object: system roots), plaintext when omitted or null. */
  tls?: H2TlsOptions | null | undefined;
  /** How long one connection attempt may take, TCP + TLS + the server's SETTINGS. Default 2000. */
  dialTimeoutMs?: number | undefined;
  /** Ping the connection this often while calls are in flight (grpc.keepalive_time_ms). Default 6000; <= 0 disables. */
  keepaliveTimeMs?: number | undefined;
  /** Close the connection when a ping goes unanswered this long (grpc.keepalive_timeout_ms). Default 3000. */
  keepaliveTimeoutMs?: number | undefined;
  /** Largest response message accepted, bytes; -1 for no limit (the Connection's setting, the default). */
  maxReceiveMessageLength?: number | undefined;
  /** Largest request message sent, bytes; -1 for no limit. Default 2 MiB, as the Connection. */
  maxSendMessageLength?: number | undefined;
}

/** Request metadata: a plain header record, or anything with grpc-js Metadata's getMap(). */
export type H2RequestMetadata = Readonly<Record<string, string>> | { getMap(): Record<string, string | Buffer> };

/** A unary method descriptor: the Connection's UnaryMethod (src/proto's KVService.put and so on). */
export interface H2UnaryMethod<Req, Res> {
  path: string;
  requestSerialize: (value: Req) => Uint8Array;
  responseDeserialize: (value: Buffer) => Res;
}

/** A streaming method descriptor: the Connection's StreamMethod (src/proto's WatchService.watch). */
export interface H2StreamMethod<Req, Res> {
  path: string;
  requestSerialize: (value: Req) => Uint8Array;
  responseDeserialize: (value: Buffer) => Res;
}

/** Why connect() gave up: nothing answered in time, the connection failed, or the channel is closed. */
export class H2ConnectError extends Error {
  constructor(
    readonly kind: 'timeout' | 'failed' | 'closed',
    readonly waitedMs: number,
    options?: { cause?: unknown },
  ) {
    super(
      kind === 'timeout'
        ? `no connection within ${Math.round(waitedMs)} ms`
        : kind === 'closed'
          ? 'the channel is closed'
          : `the connection failed${options?.cause instanceof Error ? `: ${options.cause.message}` : ''}`,
      options,
    );
    this.name = 'H2ConnectError';
  }
}

/** A unary call or a stream, as its connection sees it: told of a GOAWAY and of the connection's end. */
interface Call {
  goaway(conn: Conn): void;
  connectionDied(conn: Conn): void;
}

/** One HTTP/2 connection that reached "ready", with its keepalive and its calls and streams in flight. */
class Conn {
  active = 0;
  /** The last stream id of a GOAWAY received, or -1. Streams above it were never processed. */
  goawayLastId = -1;
  /** Set when we decided the connection is dead (keepalive): the details of the calls it fails. */
  dropReason?: string;
  /** The connection's last error, for the details of calls that die with it. */
  lastError?: Error;
  readonly calls = new Set<Call>();
  /** The wire connection; set right after construction (its events come here). */
  wire!: WireConnection;
  private keepaliveTimer: NodeJS.Timeout | undefined;
  private pendingPing = false;

  private gone = false;

  constructor(readonly channel: H2Channel) {}

  onError(err: Error): void {
    this.lastError = err;
  }

  onGoaway(code: number, lastStreamId: number, debug: string): void {
    // etcd's answer to pings more often than its --grpc-keepalive-min-time: ping half as often, as grpc-js does.
    if (code === NGHTTP2_ENHANCE_YOUR_CALM && debug === 'too_many_pings') this.channel.keepaliveTimeMs = Math.min(2 * this.channel.keepaliveTimeMs, 0x7fffffff);
    this.goawayLastId = this.goawayLastId < 0 ? lastStreamId : Math.min(this.goawayLastId, lastStreamId);
    this.channel.detach(this); // no new call goes here; calls in flight up to the last id finish
    // The server never processed streams above its last id: those calls go to a new connection now.
    for (const call of [...this.calls]) call.goaway(this);
  }

  /** The connection is gone: whatever is still pending died with it (streams normally close first). */
  onGone(): void {
    if (this.gone) return;
    this.gone = true;
    this.clearKeepalive();
    this.channel.detach(this);
    for (const call of [...this.calls]) call.connectionDied(this);
  }

  get usable(): boolean {
    return this.wire.usable && this.goawayLastId < 0 && this.dropReason === undefined;
  }

  callStarted(call: Call): void {
    this.calls.add(call);
    if (++this.active === 1) {
      this.wire.ref();
      this.maybeStartKeepalive();
    }
  }

  callEnded(call: Call): void {
    if (!this.calls.delete(call)) return;
    if (--this.active === 0 && !this.wire.destroyed) this.wire.unref();
  }

  /** grpc-js's keepalive: a timer while calls are in flight; a ping when it fires (or at the next call). */
  private maybeStartKeepalive(): void {
    const time = this.channel.keepaliveTimeMs;
    if (time <= 0 || this.active === 0 || this.wire.destroyed) return;
    if (this.pendingPing) {
      this.pendingPing = false;
      this.sendPing();
    } else if (!this.keepaliveTimer) {
      this.keepaliveTimer = setTimeout(() => {
        this.keepaliveTimer = undefined;
        if (this.active > 0) this.sendPing();
        else this.pendingPing = true;
      }, time);
      this.keepaliveTimer.unref();
    }
  }

  private sendPing(): void {
    const timeout = this.channel.keepaliveTimeoutMs;
    this.keepaliveTimer = setTimeout(() => {
      this.keepaliveTimer = undefined;
      this.drop(`Connection dropped: keepalive ping not answered within ${timeout} ms`);
    }, timeout);
    this.keepaliveTimer.unref();
    let sent = false;
    try {
      sent = this.wire.ping((err) => {
        this.clearKeepalive();
        if (err) return this.drop(`Connection dropped: keepalive ping failed (${err.message})`);
        this.maybeStartKeepalive();
      });
    } catch (err) {
      sent = false;
      this.lastError = err as Error;
    }
    if (!sent) this.drop('Connection dropped: keepalive ping could not be sent');
  }

  private clearKeepalive(): void {
    if (this.keepaliveTimer) clearTimeout(this.keepaliveTimer);
    this.keepaliveTimer = undefined;
  }

  /** Declares the connection dead: its calls fail UNAVAILABLE with `reason`, and it is closed. */
  drop(reason: string): void {
    if (this.dropReason !== undefined || this.wire.destroyed) return;
    this.dropReason = reason;
    this.clearKeepalive();
    this.channel.detach(this);
    // The socket first: failing a call must not let a queued request go out on a dead connection.
    this.wire.destroy();
    for (const call of [...this.calls]) call.connectionDied(this);
  }
}

/**
 * One endpoint's HTTP/2 connection for unary gRPC calls. Connects on demand (or by connect()),
 * and again on the next call after the connection closed.
 */
export class H2Channel {
  /** Doubled after a GOAWAY "too_many_pings" (grpc-js's back-off). */
  keepaliveTimeMs: number;
  readonly keepaliveTimeoutMs: number;
  readonly dialTimeoutMs: number;
  readonly maxReceive: number;
  readonly maxSend: number;
  /** The header block of each method's fixed headers (:method to te), by path: HPACK blocks concatenate. */
  private readonly fixed = new Map<string, Buffer>();
  private readonly scheme: string;
  private readonly host: string;
  private readonly port: number;
  private readonly tls: H2TlsOptions | null;
  private conn: Conn | undefined;
  private dialing: Promise<Conn> | undefined;
  /** Ends the connection attempt in progress (close() during a dial). */
  private cancelDial: (() => void) | undefined;
  private closed = false;

  constructor(
    /** `host:port` or `[v6]:port`. */
    readonly target: string,
    options: H2ChannelOptions = {},
  ) {
    const i = target.lastIndexOf(':');
    if (i <= 0) throw new TypeError(`h2: target "${target}" is not host:port`);
    this.host = target.slice(0, i).replace(/^\[|\]$/g, '');
    this.port = Number(target.slice(i + 1));
    this.tls = options.tls ?? null;
    this.scheme = this.tls ? 'https' : 'http';
    this.dialTimeoutMs = options.dialTimeoutMs ?? 2000;
    this.keepaliveTimeMs = options.keepaliveTimeMs ?? 6000;
    this.keepaliveTimeoutMs = options.keepaliveTimeoutMs ?? 3000;
    const limit = (n: number | undefined, dflt: number): number => (n === undefined ? dflt : n < 0 ? Infinity : n);
    this.maxReceive = limit(options.maxReceiveMessageLength, Infinity);
    this.maxSend = limit(options.maxSendMessageLength, 2 * 1024 * 1024);
  }

  /** A connection is up and takes new calls. */
  get isReady(): boolean {
    return this.conn !== undefined && this.conn.usable;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /**
   * Resolves once a connection is ready (the server's SETTINGS arrived), or rejects with an
   * H2ConnectError: 'timeout' when `deadline` (performance.now() ms) passes first, 'failed' when
   * the attempt failed (refused, TLS, closed), 'closed' after close(); with `signal`'s reason when
   * it aborts. An attempt outlives a waiter that gives up, up to the dial timeout.
   */
  connect(deadline: number, signal?: AbortSignal): Promise<void> {
    if (this.isReady) return Promise.resolve();
    const started = performance.now();
    return this.waitConnected(deadline, signal).then(
      () => undefined,
      (err: unknown) => {
        if (err === TIMED_OUT) throw new H2ConnectError('timeout', Math.max(0, deadline - started));
        throw err;
      },
    );
  }

  /** The ready connection, or TIMED_OUT / an H2ConnectError / the signal's reason. */
  private waitConnected(deadline: number, signal: AbortSignal | undefined): Promise<Conn> {
    if (this.closed) return Promise.reject(new H2ConnectError('closed', 0));
    if (signal?.aborted) return Promise.reject(signal.reason);
    const attempt = this.dial();
    return new Promise<Conn>((resolve, reject) => {
      let done = false;
      const finish = (err: unknown, conn?: Conn): void => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        if (conn) resolve(conn);
        else reject(err);
      };
      const onAbort = (): void => finish(signal!.reason);
      signal?.addEventListener('abort', onAbort, { once: true });
      const timer = setTimeout(() => finish(TIMED_OUT), Math.max(0, deadline - performance.now()));
      attempt.then(
        (conn) => finish(undefined, conn),
        (err: unknown) => finish(err),
      );
    });
  }

  /** The connection attempt in progress, or a new one: TCP (+ TLS, ALPN h2), then the server's SETTINGS. */
  private dial(): Promise<Conn> {
    if (this.dialing) return this.dialing;
    const started = performance.now();
    const attempt = new Promise<Conn>((resolve, reject) => {
      let settled = false;
      let lastError: Error | undefined;
      const socket = this.socket();
      const conn = new Conn(this);
      const fail = (err: H2ConnectError): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        wire.destroy();
        reject(err);
      };
      const wire = new WireConnection(socket, {
        onRemoteSettings: () => {
          if (settled) return;
          settled = true;
          clearTimeout(timer);
          if (this.closed) {
            wire.destroy();
            return reject(new H2ConnectError('closed', performance.now() - started));
          }
          // Idle: an open channel must not keep the process alive (grpc-js unrefs idle sessions too).
          wire.unref();
          this.conn = conn;
          resolve(conn);
        },
        onGoaway: (code, last, debug) => conn.onGoaway(code, last, debug),
        onError: (err) => {
          lastError = err;
          conn.onError(err);
        },
        onClose: () => {
          if (settled) return conn.onGone();
          fail(new H2ConnectError('failed', performance.now() - started, { cause: lastError ?? new Error('the server closed the connection before the HTTP/2 handshake') }));
        },
      });
      conn.wire = wire;
      if (socket instanceof tls.TLSSocket) {
        socket.once('secureConnect', () => {
          if (socket.alpnProtocol !== 'h2') wire.destroy(new Error(`the server did not agree to HTTP/2 (ALPN ${socket.alpnProtocol || 'none'})`));
        });
      }
      const timer = setTimeout(() => fail(new H2ConnectError('timeout', this.dialTimeoutMs)), this.dialTimeoutMs);
      // The socket keeps the process alive while it connects; the timer need not.
      timer.unref();
      // close() while connecting: end the attempt now (its callers see 'closed'), not at the dial timeout.
      this.cancelDial = () => fail(new H2ConnectError('closed', performance.now() - started));
    });
    this.dialing = attempt;
    const clear = (): void => {
      if (this.dialing === attempt) this.dialing = undefined;
    };
    attempt.then(clear, clear);
    return attempt;
  }

  private socket(): net.Socket {
    const t = this.tls;
    if (t === null) return net.connect({ host: this.host, port: this.port, noDelay: true });
    // SNI takes names, not addresses ('' sends none; the certificate is still checked against the IP).
    const servername = t.servername ?? (net.isIP(this.host) ? '' : this.host);
    const socket = tls.connect({
      host: this.host,
      port: this.port,
      ALPNProtocols: ['h2'],
      servername,
      ...(t.ca !== undefined && { ca: t.ca }),
      ...(t.cert !== undefined && { cert: t.cert }),
      ...(t.key !== undefined && { key: t.key }),
      ...(t.insecureSkipVerify && { rejectUnauthorized: false, checkServerIdentity: () => undefined }),
    });
    socket.setNoDelay(true);
    return socket;
  }

  /** The fixed part of a call's header block: pseudo-headers, content-type, te. */
  fixedHeaders(path: string): Buffer {
    let block = this.fixed.get(path);
    if (!block) {
      block = encodeHeaders([
        { name: ':method', value: 'POST' },
        { name: ':scheme', value: this.scheme },
        { name: ':path', value: path },
        { name: ':authority', value: this.target },
        { name: 'content-type', value: 'application/grpc' },
        { name: 'te', value: 'trailers' },
      ]);
      if (this.fixed.size >= 64) this.fixed.clear(); // a handful of methods; bounded all the same
      this.fixed.set(path, block);
    }
    return block;
  }

  /** Called by a Conn that must take no new calls (GOAWAY, closed, dropped). */
  detach(conn: Conn): void {
    if (this.conn === conn) this.conn = undefined;
  }

  /**
   * One unary call: `method.requestSerialize(request)` sent with `md` as headers, the answer
   * decoded by `method.responseDeserialize`. Rejects with an H2ServiceError. `deadline` is
   * performance.now() ms.
   */
  unary<Req, Res>(method: H2UnaryMethod<Req, Res>, request: Req, md: H2RequestMetadata | undefined, deadline: number, signal?: AbortSignal): Promise<Res> {
    return this.call(method.path, method.requestSerialize(request), method.responseDeserialize, md, deadline, signal);
  }

  /** One unary call on encoded bytes: `decode` gets the response message's bytes. */
  call<Res>(path: string, body: Uint8Array, decode: (b: Buffer) => Res, md: H2RequestMetadata | undefined, deadline: number, signal?: AbortSignal): Promise<Res> {
    return new Promise<Res>((resolve, reject) => {
      if (body.length > this.maxSend) {
        return reject(new H2ServiceError(Status.RESOURCE_EXHAUSTED, `Sent message larger than max (${body.length} vs. ${this.maxSend})`, { notSent: true }));
      }
      if (signal?.aborted) return reject(new H2ServiceError(Status.CANCELLED, 'Cancelled on client', { notSent: true }));
      const frame = Buffer.allocUnsafe(5 + body.length);
      frame[0] = 0;
      frame.writeUInt32BE(body.length, 1);
      frame.set(body, 5);
      const call = new UnaryCall<Res>(this, path, frame, headersOf(md), decode, deadline, signal, resolve, reject);
      this.start(call as UnaryCall<unknown>);
    });
  }

  /**
   * A bidirectional stream (Watch, LeaseKeepAlive) on the connection that is ready now; when there
   * is none, or it takes no new stream, the stream fails at once (an 'error' on the next tick).
   * Callers connect first (connect()); a stream is never retried here, its owner reopens it.
   */
  stream<Req, Res>(method: H2StreamMethod<Req, Res>, md: H2RequestMetadata | undefined): H2Stream<Req, Res> {
    return new H2Stream(this, this.conn !== undefined && this.conn.usable ? this.conn : undefined, method, headersOf(md));
  }

  /** Starts (or restarts) `call` on the ready connection, connecting first when there is none. */
  start(call: UnaryCall<unknown>): void {
    const conn = this.conn;
    if (conn !== undefined && conn.usable) return call.attempt(conn);
    if (this.closed) return call.fail(new H2ServiceError(Status.UNAVAILABLE, 'Channel has been shut down', { notSent: true }));
    const until = Math.min(call.deadline, performance.now() + this.dialTimeoutMs);
    this.waitConnected(until, call.signal).then(
      (c) => call.attempt(c),
      (err: unknown) => {
        if (call.settled) return;
        if (err === TIMED_OUT && performance.now() >= call.deadline - 1) {
          return call.fail(new H2ServiceError(Status.DEADLINE_EXCEEDED, `Deadline exceeded after ${seconds(performance.now() - call.startedAt)} while connecting`, { notSent: true }));
        }
        const why = err === TIMED_OUT ? `no connection within ${Math.round(this.dialTimeoutMs)} ms` : err instanceof H2ConnectError && err.cause instanceof Error ? err.cause.message : String((err as Error)?.message ?? err);
        call.fail(new H2ServiceError(Status.UNAVAILABLE, `No connection established. Last error: ${why}`, { notSent: true, cause: err }));
      },
    );
  }

  /** Closes the channel: calls in flight finish, then the connection closes; new calls fail. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.cancelDial?.();
    this.cancelDial = undefined;
    const conn = this.conn;
    this.conn = undefined;
    if (conn && !conn.wire.destroyed) {
      if (conn.active === 0) conn.wire.destroy();
      else conn.wire.close();
    }
  }
}

const TIMED_OUT = Symbol('timed out');

function headersOf(md: H2RequestMetadata | undefined): Record<string, string> | undefined {
  if (md === undefined) return undefined;
  if (typeof (md as { getMap?: unknown }).getMap !== 'function') return md as Record<string, string>;
  const map = (md as { getMap(): Record<string, string | Buffer> }).getMap();
  const out: Record<string, string> = {};
  for (const k of Object.keys(map)) {
    const v = map[k]!;
    out[k] = typeof v === 'string' ? v : v.toString('base64').replace(/=+$/, '');
  }
  return out;
}

/** What a stream's header blocks said: the HTTP status, then the gRPC status in the trailers. */
class Reply {
  private gotResponse = false;
  httpStatus = 0;
  /** The grpc-status, -1 until the trailers (or trailers-only headers) carried one. */
  status = -1;
  private message = '';
  private trailers: HeaderMap | undefined;

  /** A header block: the response headers first (with the status too when `end`: trailers-only), then the trailers. */
  onHeaders(h: HeaderMap, end: boolean): void {
    if (!this.gotResponse) {
      this.gotResponse = true;
      this.httpStatus = Number(h[':status'] ?? 0);
      if (!end) return;
    }
    const s = h['grpc-status'];
    if (s === undefined) return;
    this.status = Number(s);
    const m = h['grpc-message'];
    this.message = typeof m === 'string' ? decodeGrpcMessage(m) : '';
    this.trailers = h;
  }

  /** The failure the status says (when it is not OK), with the trailers' metadata. */
  error(): H2ServiceError {
    return new H2ServiceError(this.status, this.message, { metadata: H2Metadata.fromHeaders(this.trailers ?? {}) });
  }
}

/**
 * A stream that closed without a gRPC status (a unary call's or a stream's): the HTTP status when
 * it was not 200, else the RST_STREAM code, mapped as grpc-js maps them. (A connection that died,
 * where grpc-js reads ECONNRESET for INTERNAL_ERROR, and REFUSED_STREAM are the callers' cases.)
 */
function closedWithoutStatus(rst: number, httpStatus: number): H2ServiceError {
  if (rst === NGHTTP2_NO_ERROR && httpStatus !== 0 && httpStatus !== 200) return fromHttpStatus(httpStatus);
  const [code, details] =
    rst === NGHTTP2_NO_ERROR
      ? [Status.INTERNAL, `Received RST_STREAM with code ${rst} (Call ended without gRPC status)`]
      : rst === NGHTTP2_CANCEL
        ? [Status.CANCELLED, 'Call cancelled']
        : rst === NGHTTP2_ENHANCE_YOUR_CALM
          ? [Status.RESOURCE_EXHAUSTED, 'Bandwidth exhausted or memory limit exceeded']
          : rst === NGHTTP2_INADEQUATE_SECURITY
            ? [Status.PERMISSION_DENIED, 'Protocol not secure enough']
            : rst === NGHTTP2_INTERNAL_ERROR
              ? [Status.INTERNAL, `Received RST_STREAM with code ${rst} (Internal server error)`]
              : [Status.INTERNAL, `Received RST_STREAM with code ${rst}`];
  return new H2ServiceError(code, details, { rstCode: rst });
}

/** Headers whose values are credentials: sent as never-indexed literals. */
const SENSITIVE = new Set(['token', 'authorization']);

/** One unary call: the call-wide deadline, signal and promise, and the state of its current attempt. */
class UnaryCall<Res> implements StreamHandler {
  settled = false;
  readonly startedAt = performance.now();
  private retried = false;
  private timer: NodeJS.Timeout | undefined;
  // the current attempt
  private conn: Conn | undefined;
  private stream: WireStream | undefined;
  /** What the current attempt's header blocks said. */
  private reply = new Reply();
  private chunks: Buffer[] = [];
  private received = 0;

  constructor(
    private readonly channel: H2Channel,
    private readonly path: string,
    private readonly frame: Buffer,
    private readonly md: Record<string, string> | undefined,
    private readonly decode: (b: Buffer) => Res,
    readonly deadline: number,
    readonly signal: AbortSignal | undefined,
    private readonly resolve: (v: Res) => void,
    private readonly reject: (e: unknown) => void,
  ) {
    this.timer = setTimeout(this.onDeadline, Math.max(0, deadline - this.startedAt));
    // The session is ref'd while calls are in flight; the timer need not hold the process too.
    this.timer.unref();
    signal?.addEventListener('abort', this.onAbort, { once: true });
  }

  attempt(conn: Conn): void {
    if (this.settled) return;
    const left = this.deadline - performance.now();
    const fields: HeaderField[] = [{ name: 'grpc-timeout', value: grpcTimeout(left) }];
    if (this.md) for (const k in this.md) fields.push({ name: k.toLowerCase(), value: this.md[k]!, sensitive: SENSITIVE.has(k.toLowerCase()) });
    const fixed = this.channel.fixedHeaders(this.path);
    const block = Buffer.concat([fixed, encodeHeaders(fields)]);
    this.conn = conn;
    conn.callStarted(this as UnaryCall<unknown>);
    try {
      // request() only writes: the stream's events (onClose too) come from later reads.
      this.stream = conn.wire.request(block, this.frame, this);
    } catch (err) {
      // The connection took no new stream (GOAWAY, closing): nothing was sent. Use a new connection.
      conn.callEnded(this as UnaryCall<unknown>);
      this.conn = undefined;
      this.channel.detach(conn);
      return this.fail(new H2ServiceError(Status.UNAVAILABLE, `No connection established. Last error: ${(err as Error).message}`, { notSent: true, cause: err }));
    }
  }

  onHeaders(h: HeaderMap, end: boolean): void {
    this.reply.onHeaders(h, end);
  }

  onData(c: Buffer): void {
    if (this.settled) return;
    this.chunks.push(c);
    this.received += c.length;
    if (this.received >= 5 && this.channel.maxReceive !== Infinity) {
      const head = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
      const len = head.readUInt32BE(1);
      if (len > this.channel.maxReceive) {
        this.fail(new H2ServiceError(Status.RESOURCE_EXHAUSTED, `Received message larger than max (${len} vs ${this.channel.maxReceive})`));
      }
    }
  }

  onClose(rstCode: number): void {
    this.closed(rstCode);
  }

  /** The stream ended with a status. */
  private finish(): void {
    if (this.settled) return;
    if (this.reply.status !== Status.OK) return this.fail(this.reply.error());
    const buf = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
    if (buf.length === 0) return this.fail(new H2ServiceError(Status.UNIMPLEMENTED, 'No message received'));
    if (buf[0] !== 0) return this.fail(new H2ServiceError(Status.INTERNAL, 'Received a compressed message, but no compression was negotiated'));
    const len = buf.length >= 5 ? buf.readUInt32BE(1) : -1;
    if (len < 0 || buf.length < 5 + len) return this.fail(new H2ServiceError(Status.INTERNAL, 'Received a truncated message'));
    let res: Res;
    try {
      res = this.decode(buf.subarray(5, 5 + len));
    } catch (err) {
      return this.fail(new H2ServiceError(Status.INTERNAL, `Response message parsing error: ${(err as Error).message}`, { cause: err }));
    }
    this.settle();
    this.resolve(res);
  }

  /** The stream closed: a status already read wins; otherwise why it closed decides, as in grpc-js. */
  private closed(rst: number): void {
    const stream = this.stream;
    if (stream === undefined || this.settled) return;
    this.stream = undefined;
    if (this.reply.status >= 0) return this.finish();
    const conn = this.conn!;
    const id = stream.id;
    if (conn.goawayLastId >= 0 && (id === 0 || id > conn.goawayLastId)) {
      return this.fail(new H2ServiceError(Status.UNAVAILABLE, `Stream refused by server (GOAWAY with last stream id ${conn.goawayLastId}, ours ${id})`, { notSent: true, rstCode: rst }));
    }
    if (rst === NGHTTP2_REFUSED_STREAM) return this.fail(new H2ServiceError(Status.UNAVAILABLE, 'Stream refused by server', { notSent: true, rstCode: rst }));
    if (conn.wire.destroyed || conn.dropReason !== undefined) return this.connectionDied(conn, id);
    this.fail(closedWithoutStatus(rst, this.reply.httpStatus));
  }

  /** A GOAWAY arrived on `conn`: a stream above its last id was never processed. */
  goaway(conn: Conn): void {
    if (this.settled || conn !== this.conn) return;
    const id = this.stream?.id ?? 0;
    if (id === 0 || id > conn.goawayLastId) {
      this.fail(new H2ServiceError(Status.UNAVAILABLE, `Stream refused by server (GOAWAY with last stream id ${conn.goawayLastId}, ours ${id})`, { notSent: true }));
    }
  }

  /**
   * The connection under this call died (dropped by keepalive, reset, closed). `id`: our stream's,
   * 0 when it was never sent (queued behind the server's stream limit).
   */
  connectionDied(conn: Conn, id = this.stream?.id ?? 0): void {
    if (this.settled || conn !== this.conn) return;
    // Still queued behind the server's stream limit: never written, so safe to send elsewhere.
    if (id === 0) return this.fail(new H2ServiceError(Status.UNAVAILABLE, 'Connection dropped before the request was sent', { notSent: true, cause: conn.lastError }));
    if (conn.goawayLastId >= 0 && (id === 0 || id > conn.goawayLastId)) {
      return this.fail(new H2ServiceError(Status.UNAVAILABLE, `Stream refused by server (GOAWAY with last stream id ${conn.goawayLastId}, ours ${id})`, { notSent: true }));
    }
    const why = conn.dropReason ?? (conn.lastError ? `Connection dropped (${conn.lastError.message})` : 'Connection dropped');
    this.fail(new H2ServiceError(Status.UNAVAILABLE, why, { cause: conn.lastError }));
  }

  private readonly onDeadline = (): void => {
    this.timer = undefined;
    if (this.settled) return;
    this.fail(new H2ServiceError(Status.DEADLINE_EXCEEDED, `Deadline exceeded after ${seconds(performance.now() - this.startedAt)}`), true);
  };

  private readonly onAbort = (): void => {
    if (this.settled) return;
    this.fail(new H2ServiceError(Status.CANCELLED, 'Cancelled on client'), true);
  };

  /** Ends the call with `err`, unless it proves nothing was sent and a retry is allowed (grpc-js's transparent retry, once). */
  fail(err: H2ServiceError, final = false): void {
    if (this.settled) return;
    this.endAttempt(err.code === Status.OK ? NGHTTP2_NO_ERROR : NGHTTP2_CANCEL);
    if (!final && err.notSent && !this.retried && !this.channel.isClosed && !this.signal?.aborted && performance.now() < this.deadline) {
      this.retried = true;
      return this.channel.start(this as UnaryCall<unknown>);
    }
    this.settle();
    this.reject(err);
  }

  /** Leaves the current attempt: resets its stream if still open, and forgets its state. */
  private endAttempt(rst: number): void {
    const stream = this.stream;
    const conn = this.conn;
    // Forgotten first: closing the stream calls onClose at once, and may end its connection (after a
    // GOAWAY), which must find no attempt of ours to judge.
    this.stream = undefined;
    this.conn = undefined;
    if (conn) conn.callEnded(this as UnaryCall<unknown>);
    if (stream && !stream.closed) stream.close(rst);
    this.chunks = [];
    this.received = 0;
    this.reply = new Reply();
  }

  private settle(): void {
    this.settled = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.signal?.removeEventListener('abort', this.onAbort);
    if (this.conn) this.conn.callEnded(this as UnaryCall<unknown>);
  }
}

/**
 * A bidirectional gRPC stream, shaped as the part of grpc-js's ClientDuplexStream that watch.ts and
 * lease.ts use: write(), cancel(), and the events 'data' (a decoded message), 'error' (an
 * H2ServiceError: the stream failed or the server ended it with a status other than OK) and 'end'
 * (the server ended it with OK). After cancel() no event comes.
 */
export class H2Stream<Req, Res> extends EventEmitter implements StreamHandler, Call {
  private stream: WireStream | undefined;
  private conn: Conn | undefined;
  private done = false;
  /** cancel() was called: not even an error said on a later tick reaches anyone. */
  private cancelled = false;
  private chunks: Buffer[] = [];
  private buffered = 0;
  private readonly reply = new Reply();

  constructor(
    private readonly channel: H2Channel,
    conn: Conn | undefined,
    private readonly method: H2StreamMethod<Req, Res>,
    md: Record<string, string> | undefined,
  ) {
    super();
    if (!conn) {
      this.done = true;
      this.emitLater(new H2ServiceError(Status.UNAVAILABLE, 'No connection established', { notSent: true }));
      return;
    }
    const fields: HeaderField[] = [];
    if (md) for (const k in md) fields.push({ name: k.toLowerCase(), value: md[k]!, sensitive: SENSITIVE.has(k.toLowerCase()) });
    const block = fields.length > 0 ? Buffer.concat([channel.fixedHeaders(method.path), encodeHeaders(fields)]) : channel.fixedHeaders(method.path);
    this.conn = conn;
    conn.callStarted(this);
    try {
      this.stream = conn.wire.request(block, EMPTY, this, false);
    } catch (err) {
      // The connection took no new stream (GOAWAY, closing): said once the caller listens.
      this.done = true;
      this.detach();
      this.emitLater(new H2ServiceError(Status.UNAVAILABLE, `No connection established. Last error: ${(err as Error).message}`, { notSent: true, cause: err }));
    }
  }

  /** Sends one message; false (and nothing sent) once the stream is over. */
  write(message: Req): boolean {
    const stream = this.stream;
    if (this.done || !stream) return false;
    const body = this.method.requestSerialize(message);
    if (body.length > this.channel.maxSend) {
      // Said on the next tick, as grpc-js does: not from inside the caller's write().
      const err = new H2ServiceError(Status.RESOURCE_EXHAUSTED, `Sent message larger than max (${body.length} vs. ${this.channel.maxSend})`);
      this.done = true;
      this.detach()?.close(NGHTTP2_CANCEL);
      this.emitLater(err);
      return false;
    }
    const frame = Buffer.allocUnsafe(5 + body.length);
    frame[0] = 0;
    frame.writeUInt32BE(body.length, 1);
    frame.set(body, 5);
    stream.send(frame);
    return true;
  }

  /** Ends the stream from our side (RST_STREAM CANCEL). No event follows. */
  cancel(): void {
    this.cancelled = true;
    if (this.done) return;
    this.done = true;
    this.detach()?.close(NGHTTP2_CANCEL);
  }

  onHeaders(h: HeaderMap, end: boolean): void {
    this.reply.onHeaders(h, end);
  }

  onData(chunk: Buffer): void {
    if (this.done) return;
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    // Every whole message in what arrived: 5 bytes (compressed flag, length), then the message.
    while (this.buffered >= 5 && !this.done) {
      const head = this.chunks[0]!.length >= 5 ? this.chunks[0]! : this.join();
      const len = head.readUInt32BE(1);
      if (len > this.channel.maxReceive) {
        return this.end(new H2ServiceError(Status.RESOURCE_EXHAUSTED, `Received message larger than max (${len} vs ${this.channel.maxReceive})`));
      }
      if (this.buffered < 5 + len) return;
      const all = this.chunks.length === 1 ? this.chunks[0]! : this.join();
      if (all[0] !== 0) return this.end(new H2ServiceError(Status.INTERNAL, 'Received a compressed message, but no compression was negotiated'));
      const msg = all.subarray(5, 5 + len);
      const rest = all.subarray(5 + len);
      this.chunks = rest.length > 0 ? [rest] : [];
      this.buffered = rest.length;
      let res: Res;
      try {
        res = this.method.responseDeserialize(msg);
      } catch (err) {
        return this.end(new H2ServiceError(Status.INTERNAL, `Response message parsing error: ${(err as Error).message}`, { cause: err }));
      }
      this.emitSafely('data', res);
    }
  }

  onClose(rst: number): void {
    const stream = this.stream;
    if (this.done || !stream) return;
    const conn = this.conn!;
    this.detach();
    if (this.reply.status === Status.OK) return this.end(undefined, true);
    if (this.reply.status >= 0) return this.end(this.reply.error(), true);
    if (conn.wire.destroyed || conn.dropReason !== undefined) return this.connectionDied(conn, true);
    if (rst === NGHTTP2_REFUSED_STREAM) return this.end(new H2ServiceError(Status.UNAVAILABLE, 'Stream refused by server', { notSent: true, rstCode: rst }), true);
    this.end(closedWithoutStatus(rst, this.reply.httpStatus), true);
  }

  goaway(conn: Conn): void {
    const id = this.stream?.id ?? 0;
    if (this.done || conn !== this.conn || (id !== 0 && id <= conn.goawayLastId)) return;
    this.end(new H2ServiceError(Status.UNAVAILABLE, `Stream refused by server (GOAWAY with last stream id ${conn.goawayLastId}, ours ${id})`, { notSent: true }));
  }

  connectionDied(conn: Conn, closed = false): void {
    if (this.done || (!closed && conn !== this.conn)) return;
    const why = conn.dropReason ?? (conn.lastError ? `Connection dropped (${conn.lastError.message})` : 'Connection dropped');
    this.end(new H2ServiceError(Status.UNAVAILABLE, why, { cause: conn.lastError }), closed);
  }

  private join(): Buffer {
    const all = Buffer.concat(this.chunks, this.buffered);
    this.chunks = [all];
    return all;
  }

  /** Leaves the connection; the wire stream, if still open, for the caller to close. */
  private detach(): WireStream | undefined {
    const stream = this.stream;
    const conn = this.conn;
    this.stream = undefined;
    this.conn = undefined;
    this.chunks = [];
    this.buffered = 0;
    if (conn) conn.callEnded(this);
    return stream !== undefined && !stream.closed ? stream : undefined;
  }

  /** The stream is over: `err` (or 'end' without one). `closed`: the wire stream is already gone. */
  private end(err: H2ServiceError | undefined, closed = false): void {
    if (this.done && !closed) return;
    this.done = true;
    const open = this.detach();
    if (!closed) open?.close(err ? NGHTTP2_CANCEL : NGHTTP2_NO_ERROR);
    if (err) this.emitError(err);
    else this.emitSafely('end');
  }

  /** An 'error' nobody listens to is dropped, not thrown (a stream given up on keeps no listener). */
  private emitError(err: H2ServiceError): void {
    if (this.listenerCount('error') > 0) this.emitSafely('error', err);
  }

  /** An error said on the next tick, as grpc-js says it: never from inside the caller's own call. */
  private emitLater(err: H2ServiceError): void {
    process.nextTick(() => {
      if (!this.cancelled) this.emitError(err);
    });
  }

  /**
   * Events come from inside the connection's read loop: a listener that throws must not be taken
   * for the server's protocol error (which would end every call on the connection). Its exception
   * surfaces on the next tick, as it would from grpc-js.
   */
  private emitSafely(event: 'data' | 'error' | 'end', arg?: unknown): void {
    try {
      this.emit(event, arg);
    } catch (err) {
      process.nextTick(() => {
        throw err;
      });
    }
  }
}

const EMPTY = Buffer.alloc(0);
