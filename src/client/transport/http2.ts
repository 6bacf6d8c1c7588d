// gRPC over node:http2: one ClientHttp2Session per member for unary calls and streams alike.
// nghttp2 guards the HTTP/2 framing (floods, CONTINUATION, HPACK, SETTINGS); the limits below are
// set deliberately and documented in the README's "Limits" table. What HTTP/2 does not know is
// ours: the message size behind gRPC's length prefix (framing.ts), the grpc-status and
// grpc-message a server may send, and whether a failed request provably never reached etcd.
import { EventEmitter } from 'node:events';
import * as http2 from 'node:http2';
import * as net from 'node:net';
import * as tls from 'node:tls';
import { FramingError, MessageDecoder, frame } from './framing.js';
import { type BidiStream, ConnectError, type Method, type RequestHeaders, Status, type Transport, TransportError } from './transport.js';

const { NGHTTP2_NO_ERROR, NGHTTP2_CANCEL, NGHTTP2_REFUSED_STREAM, NGHTTP2_ENHANCE_YOUR_CALM, NGHTTP2_INADEQUATE_SECURITY, NGHTTP2_FLAG_END_STREAM } =
  http2.constants;

/** The bounds a member's connection lives within, whatever the server sends. */
export const LIMITS = {
  /** nghttp2's memory for one session (MB): header tables, queued frames; a header block received above it resets its stream. */
  maxSessionMemoryMb: 32,
  /** Header fields in one received header block. */
  maxHeaderListPairs: 64,
  /** Bytes of one received header block once decoded (SETTINGS_MAX_HEADER_LIST_SIZE, enforced on receipt). */
  maxHeaderListSize: 16 * 1024,
  /** Pings of ours awaiting an answer; we keep at most one in flight. */
  maxOutstandingPings: 2,
  /** Entries in one SETTINGS frame from the server. */
  maxSettings: 32,
  /** Characters of a server's grpc-message kept in an error. */
  grpcMessageChars: 512,
} as const;

/** Each stream's receive window (we read at once, so it bounds nothing but throughput). */
const STREAM_WINDOW = 1024 * 1024;
/** The connection's receive window, shared by every call and stream to the member. */
const CONNECTION_WINDOW = 8 * 1024 * 1024;

/** TLS material and the name to verify the server by. */
export interface TlsSettings {
  ca?: Buffer | string | undefined;
  cert?: Buffer | string | undefined;
  key?: Buffer | string | undefined;
  /** The name the server's certificate must carry, and SNI; default the endpoint's host when it is a name. */
  serverName?: string | undefined;
  /** Accept any server certificate, unverified. */
  insecureSkipVerify?: boolean | undefined;
}

export interface Http2TransportOptions {
  /** TLS when given, plaintext when null. */
  tls: TlsSettings | null;
  /** One connection attempt: TCP, TLS, and the server's SETTINGS. */
  dialTimeoutMs: number;
  /** Ping the connection this often while calls are in flight; <= 0 disables. */
  keepaliveTimeMs: number;
  /** Drop the connection when a ping goes unanswered this long. */
  keepaliveTimeoutMs: number;
  /** Largest message accepted from the server, bytes. */
  maxReceiveMessageBytes: number;
  /** Largest request message sent, bytes. */
  maxSendMessageBytes: number;
}

/** A unary call or a stream, as its session sees it. */
interface Call {
  /** The session was dropped by us (keepalive): end now, not when nghttp2 gets round to it. */
  dropped(session: Session): void;
  /** The server is going away: a stream ends now, so that its owner reopens it elsewhere. */
  goingAway(session: Session): void;
}

/** Stream ids are 31 bits: well before they run out, new calls go to a new connection. */
export const LAST_STREAM_ID = 2 ** 31 - 2 ** 20;

/** One HTTP/2 connection that reached "ready" (both sides' SETTINGS acknowledged). */
class Session {
  private active = 0;
  private readonly calls = new Set<Call>();
  /** The last stream id of a GOAWAY received, or -1: streams above it were never processed. */
  goawayLastId = -1;
  /** Why we dropped the connection (keepalive), for the calls it fails. */
  dropReason?: string;
  lastError?: Error;
  /** No new call goes here (GOAWAY, stream ids nearly used up, closing). */
  retired = false;
  /** When anything last arrived on the connection (performance.now()): a live peer needs no ping. */
  private heardAt = performance.now();
  private pingedAt = -Infinity;
  /** A ping is awaiting its answer: its timeout runs whether or not calls remain. */
  private pinging = false;
  private keepaliveTimer: NodeJS.Timeout | undefined;

  constructor(
    readonly transport: Http2Transport,
    readonly h2: http2.ClientHttp2Session,
  ) {}

  get usable(): boolean {
    return !this.retired && !this.h2.closed && !this.h2.destroyed && this.goawayLastId < 0 && this.dropReason === undefined;
  }

  /** Something arrived from the server. */
  heard(): void {
    this.heardAt = performance.now();
  }

  /** Takes no new call; the calls in flight finish, then the connection closes. */
  retire(): void {
    this.retired = true;
    this.transport.detach(this);
    if (!this.h2.closed && !this.h2.destroyed) this.h2.close();
  }

  onGoaway(code: number, lastStreamId: number, opaque: Buffer | undefined): void {
    // etcd's answer to pings more often than its --grpc-keepalive-min-time: ping half as often.
    if (code === NGHTTP2_ENHANCE_YOUR_CALM && opaque?.toString() === 'too_many_pings') this.transport.slowKeepalive();
    this.goawayLastId = this.goawayLastId < 0 ? lastStreamId : Math.min(this.goawayLastId, lastStreamId);
    this.transport.detach(this);
    for (const call of [...this.calls]) call.goingAway(this);
  }

  onClose(): void {
    this.clearKeepalive();
    this.transport.detach(this);
  }

  callStarted(call: Call): void {
    this.calls.add(call);
    if (++this.active === 1) {
      this.h2.ref();
      // Quiet for a whole interval: the peer may have gone while we had nothing to ask; ask now.
      const now = performance.now();
      const time = this.transport.keepaliveTimeMs;
      if (time > 0 && !this.pinging && now - this.heardAt >= time && now - this.pingedAt >= time) this.ping();
      else this.scheduleKeepalive();
    }
  }

  callEnded(call: Call): void {
    if (!this.calls.delete(call)) return;
    // The keepalive timer stays (unref'd): it does nothing while idle, and the next call reuses it.
    if (--this.active === 0 && !this.h2.destroyed) this.h2.unref();
  }

  /** While calls are in flight, a ping once nothing has arrived for keepaliveTimeMs. */
  private scheduleKeepalive(): void {
    const time = this.transport.keepaliveTimeMs;
    if (time <= 0 || this.active === 0 || this.keepaliveTimer || this.h2.closed || this.h2.destroyed) return;
    const due = Math.max(this.heardAt, this.pingedAt) + time - performance.now();
    this.keepaliveTimer = setTimeout(() => {
      this.keepaliveTimer = undefined;
      if (this.active === 0) return;
      if (performance.now() - Math.max(this.heardAt, this.pingedAt) >= time) this.ping();
      else this.scheduleKeepalive();
    }, Math.max(0, due));
    this.keepaliveTimer.unref();
  }

  private ping(): void {
    // A connection that is closing sends no ping (Node refuses); its streams end by themselves.
    if (this.h2.closed || this.h2.destroyed) return;
    const timeout = this.transport.keepaliveTimeoutMs;
    this.clearKeepalive();
    this.pinging = true;
    this.pingedAt = performance.now();
    this.keepaliveTimer = setTimeout(() => this.drop(`the connection was dropped: a keepalive ping went unanswered for ${timeout} ms`), timeout);
    this.keepaliveTimer.unref();
    let sent = false;
    try {
      sent = this.h2.ping((err) => {
        this.pinging = false;
        this.clearKeepalive();
        if (err) {
          if (this.usable) this.drop(`the connection was dropped: a keepalive ping failed (${err.message})`);
          return;
        }
        this.heard();
        this.scheduleKeepalive();
      });
    } catch (err) {
      this.lastError = err as Error;
    }
    if (!sent) {
      this.pinging = false;
      this.clearKeepalive();
      if (!this.h2.closed && !this.h2.destroyed) this.drop('the connection was dropped: a keepalive ping could not be sent');
    }
  }

  private clearKeepalive(): void {
    if (this.keepaliveTimer) clearTimeout(this.keepaliveTimer);
    this.keepaliveTimer = undefined;
  }

  /** Declares the connection dead: its calls fail UNAVAILABLE with `reason`, and it is destroyed. */
  drop(reason: string): void {
    if (this.dropReason !== undefined) return;
    this.dropReason = reason;
    this.pinging = false;
    this.clearKeepalive();
    this.transport.detach(this);
    for (const call of [...this.calls]) call.dropped(this);
    if (!this.h2.destroyed) this.h2.destroy();
  }
}

/** One member's transport: a session made on demand, and again on the next call after it closed. */
export class Http2Transport implements Transport {
  keepaliveTimeMs: number;
  readonly keepaliveTimeoutMs: number;
  readonly dialTimeoutMs: number;
  readonly maxReceive: number;
  readonly maxSend: number;
  private readonly authority: string;
  private readonly host: string;
  private readonly port: number;
  private readonly tls: TlsSettings | null;
  private session: Session | undefined;
  private dialing: Promise<Session> | undefined;
  private cancelDial: (() => void) | undefined;
  private closed = false;

  constructor(
    /** `host:port` or `[v6]:port`. */
    readonly target: string,
    options: Http2TransportOptions,
  ) {
    const i = target.lastIndexOf(':');
    this.host = target.slice(0, i).replace(/^\[|\]$/g, '');
    this.port = Number(target.slice(i + 1));
    this.tls = options.tls;
    this.authority = `${this.tls ? 'https' : 'http'}://${target}`;
    this.dialTimeoutMs = options.dialTimeoutMs;
    this.keepaliveTimeMs = options.keepaliveTimeMs;
    this.keepaliveTimeoutMs = options.keepaliveTimeoutMs;
    this.maxReceive = options.maxReceiveMessageBytes;
    this.maxSend = options.maxSendMessageBytes;
  }

  get isReady(): boolean {
    return this.session !== undefined && this.session.usable;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  slowKeepalive(): void {
    this.keepaliveTimeMs = Math.min(2 * this.keepaliveTimeMs, 0x7fffffff);
  }

  /** Called by a session that takes no new calls (GOAWAY, closed, dropped). */
  detach(session: Session): void {
    if (this.session === session) this.session = undefined;
  }

  connect(deadline: number, signal?: AbortSignal): Promise<void> {
    if (this.isReady) return Promise.resolve();
    const started = performance.now();
    return this.ready(deadline, signal).then(
      () => undefined,
      (err: unknown) => {
        if (err === TIMED_OUT) throw new ConnectError('timeout', Math.max(0, deadline - started));
        throw err;
      },
    );
  }

  /** The ready session, or TIMED_OUT / a ConnectError / the signal's reason. */
  private ready(deadline: number, signal: AbortSignal | undefined): Promise<Session> {
    if (this.closed) return Promise.reject(new ConnectError('closed', 0));
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.session?.usable) return Promise.resolve(this.session);
    const attempt = this.dial();
    return new Promise<Session>((resolve, reject) => {
      let done = false;
      const finish = (err: unknown, s?: Session): void => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        if (s) resolve(s);
        else reject(err);
      };
      const onAbort = (): void => finish(signal!.reason);
      signal?.addEventListener('abort', onAbort, { once: true });
      const timer = setTimeout(() => finish(TIMED_OUT), Math.max(0, deadline - performance.now()));
      attempt.then(
        (s) => finish(undefined, s),
        (err: unknown) => finish(err),
      );
    });
  }

  /** The connection attempt in progress, or a new one. It outlives a waiter that gives up, up to the dial timeout. */
  private dial(): Promise<Session> {
    if (this.dialing) return this.dialing;
    const started = performance.now();
    const attempt = new Promise<Session>((resolve, reject) => {
      let settled = false;
      const socket = this.socket();
      const h2 = http2.connect(this.authority, {
        createConnection: () => socket,
        maxSessionMemory: LIMITS.maxSessionMemoryMb,
        maxHeaderListPairs: LIMITS.maxHeaderListPairs,
        maxOutstandingPings: LIMITS.maxOutstandingPings,
        maxSettings: LIMITS.maxSettings,
        settings: { enablePush: false, maxHeaderListSize: LIMITS.maxHeaderListSize, initialWindowSize: STREAM_WINDOW },
      });
      const session = new Session(this, h2);
      const fail = (err: ConnectError): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        h2.destroy();
        socket.destroy();
        reject(err);
      };
      h2.on('error', (err: Error) => {
        session.lastError = err;
      });
      // A socket that fails before the session is set up (a TLS alert right after the handshake)
      // destroys the session without its 'close': watch the socket too.
      socket.on('error', (err: Error) => {
        session.lastError ??= err;
        if (!settled) fail(new ConnectError('failed', performance.now() - started, { cause: err }));
        else session.drop(`the connection failed (${clean(err.message)})`);
      });
      socket.once('close', () => {
        if (!settled) fail(new ConnectError('failed', performance.now() - started, { cause: session.lastError ?? new Error('the connection closed during the handshake') }));
      });
      h2.on('goaway', (code: number, last: number, opaque?: Buffer) => session.onGoaway(code, last, opaque));
      // Ready once both sides' SETTINGS are acknowledged: our header-list limit binds only from then on.
      let remote = false;
      let local = false;
      const ready = (): void => {
        if (settled || !remote || !local) return;
        settled = true;
        clearTimeout(timer);
        if (this.closed) {
          h2.destroy();
          return reject(new ConnectError('closed', performance.now() - started));
        }
        // The connection window: Node's default 64 KiB would cap every member's traffic per round trip.
        h2.setLocalWindowSize(CONNECTION_WINDOW);
        // Idle: an open connection must not keep the process alive.
        h2.unref();
        this.session = session;
        resolve(session);
      };
      h2.once('remoteSettings', () => {
        remote = true;
        ready();
      });
      h2.once('localSettings', () => {
        local = true;
        ready();
      });
      h2.once('close', () => {
        session.onClose();
        fail(new ConnectError('failed', performance.now() - started, { cause: session.lastError ?? new Error('the server closed the connection before the HTTP/2 handshake') }));
      });
      if (socket instanceof tls.TLSSocket) {
        socket.once('secureConnect', () => {
          if (socket.alpnProtocol !== 'h2') {
            session.lastError = new Error(`the server did not agree to HTTP/2 (ALPN ${socket.alpnProtocol || 'none'}): is this an etcd client port?`);
            h2.destroy();
          }
        });
      }
      // After the I/O already waiting: a busy event loop must not fail a dial whose answer has arrived.
      const timer = setTimeout(() => setImmediate(() => fail(new ConnectError('timeout', this.dialTimeoutMs))), this.dialTimeoutMs);
      // The socket keeps the process alive while it connects; the timer need not.
      timer.unref();
      this.cancelDial = () => fail(new ConnectError('closed', performance.now() - started));
    });
    this.dialing = attempt;
    const clear = (): void => {
      if (this.dialing === attempt) this.dialing = undefined;
      this.cancelDial = undefined;
    };
    attempt.then(clear, clear);
    return attempt;
  }

  private socket(): net.Socket {
    const t = this.tls;
    if (t === null) return net.connect({ host: this.host, port: this.port, noDelay: true });
    // SNI takes names, not addresses; without one the certificate is checked against the IP.
    const servername = t.serverName ?? (net.isIP(this.host) ? undefined : this.host);
    const socket = tls.connect({
      host: this.host,
      port: this.port,
      ALPNProtocols: ['h2'],
      ...(servername !== undefined && { servername }),
      ...(t.ca !== undefined && { ca: t.ca }),
      ...(t.cert !== undefined && { cert: t.cert }),
      ...(t.key !== undefined && { key: t.key }),
      ...(t.insecureSkipVerify && { rejectUnauthorized: false, checkServerIdentity: () => undefined }),
    });
    socket.setNoDelay(true);
    return socket;
  }

  /** The request headers of a call on `path`. */
  headers(path: string, extra: RequestHeaders, timeoutMs?: number): http2.OutgoingHttpHeaders {
    const h: http2.OutgoingHttpHeaders = {
      ':method': 'POST',
      ':path': path,
      'content-type': 'application/grpc',
      te: 'trailers',
      ...extra,
    };
    if (timeoutMs !== undefined) h['grpc-timeout'] = grpcTimeout(timeoutMs);
    // Credentials are never put in the HPACK dynamic table.
    if (extra.token !== undefined) (h as Record<symbol, unknown>)[http2.sensitiveHeaders] = ['token'];
    return h;
  }

  unary<Req, Res>(method: Method<Req, Res>, request: Req, headers: RequestHeaders, deadline: number, signal?: AbortSignal): Promise<Res> {
    return new Promise<Res>((resolve, reject) => {
      const body = method.encode(request);
      if (body.length > this.maxSend) {
        return reject(new TransportError(Status.RESOURCE_EXHAUSTED, `the request is ${body.length} bytes, above the limit of ${this.maxSend}`, { notSent: true }));
      }
      if (signal?.aborted) return reject(new TransportError(Status.CANCELLED, 'cancelled', { notSent: true, local: true }));
      new UnaryCall(this, method, frame(body), headers, deadline, signal, resolve, reject).start();
    });
  }

  /** Starts (or restarts) `call` on the ready session, connecting first when there is none. */
  start(call: UnaryCall<unknown>): void {
    const s = this.session;
    if (s !== undefined && s.usable) return call.attempt(s);
    if (this.closed) return call.fail(new TransportError(Status.UNAVAILABLE, 'the transport is closed', { notSent: true }));
    const until = Math.min(call.deadline, performance.now() + this.dialTimeoutMs);
    this.ready(until, call.signal).then(
      (session) => call.attempt(session),
      (err: unknown) => {
        if (call.settled) return;
        if (err === TIMED_OUT && performance.now() >= call.deadline - 1) {
          return call.fail(new TransportError(Status.DEADLINE_EXCEEDED, 'the deadline passed while connecting', { notSent: true }));
        }
        const why = err === TIMED_OUT ? `no connection within ${Math.round(this.dialTimeoutMs)} ms` : err instanceof Error ? err.message : String(err);
        call.fail(new TransportError(Status.UNAVAILABLE, `no connection: ${why}`, { notSent: true, cause: err }));
      },
    );
  }

  stream<Req, Res>(method: Method<Req, Res>, headers: RequestHeaders): BidiStream<Req, Res> {
    return new Http2BidiStream(this, this.session?.usable ? this.session : undefined, method, headers);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.cancelDial?.();
    const s = this.session;
    this.session = undefined;
    // close(): streams in flight finish, then the session ends; an idle one ends now.
    if (s && !s.h2.destroyed) s.h2.close();
  }
}

const TIMED_OUT = Symbol('timed out');

/** What a response's header blocks said: the HTTP status and content type, then the gRPC status. */
class Reply {
  httpStatus = 0;
  /** The grpc-status read, -1 until one arrived. */
  status = -1;
  private message = '';
  /** A response that is not gRPC, or a status that is not valid. */
  problem: TransportError | undefined;

  onResponse(h: http2.IncomingHttpHeaders, end: boolean): void {
    this.httpStatus = Number(h[':status'] ?? 0);
    const type = h['content-type'];
    if (this.httpStatus === 200 && !(typeof type === 'string' && /^application\/grpc(\+|;|$)/.test(type))) {
      this.problem = new TransportError(Status.UNKNOWN, `the server answered with content-type ${clean(String(type ?? 'none'))}, not gRPC: is this an etcd client port?`);
    }
    if (end) this.readStatus(h);
  }

  onTrailers(h: http2.IncomingHttpHeaders): void {
    this.readStatus(h);
  }

  private readStatus(h: http2.IncomingHttpHeaders): void {
    const s = h['grpc-status'];
    if (s === undefined) return;
    // One decimal status from 0 to 16; anything else (empty, repeated, a name) is not one.
    if (typeof s !== 'string' || !/^(?:[0-9]|1[0-6])$/.test(s)) {
      this.problem ??= new TransportError(Status.INTERNAL, `the server sent an invalid grpc-status (${clean(String(s))})`);
      this.status = Status.INTERNAL;
      return;
    }
    this.status = Number(s);
    const m = h['grpc-message'];
    this.message = typeof m === 'string' ? clean(decodeGrpcMessage(m)) : '';
  }

  /** The call's failure, when the reply says it failed. */
  error(): TransportError | undefined {
    if (this.problem) return this.problem;
    if (this.status > 0) return new TransportError(this.status, this.message, { fromServer: true });
    return undefined;
  }
}

/**
 * A stream that closed without a gRPC status: the HTTP status when it was not 200, else the
 * RST_STREAM code, mapped as gRPC's PROTOCOL-HTTP2 says.
 */
function closedWithoutStatus(rst: number, httpStatus: number): TransportError {
  if (httpStatus !== 0 && httpStatus !== 200) return fromHttpStatus(httpStatus);
  if (rst === NGHTTP2_NO_ERROR) return new TransportError(Status.INTERNAL, 'the server ended the call without a gRPC status');
  if (rst === NGHTTP2_CANCEL) return new TransportError(Status.CANCELLED, 'the server cancelled the call');
  if (rst === NGHTTP2_ENHANCE_YOUR_CALM) return new TransportError(Status.RESOURCE_EXHAUSTED, 'the server reset the call (ENHANCE_YOUR_CALM)');
  if (rst === NGHTTP2_INADEQUATE_SECURITY) return new TransportError(Status.PERMISSION_DENIED, 'the server reset the call: the connection is not secure enough');
  return new TransportError(Status.INTERNAL, `the server reset the call (HTTP/2 error code ${rst})`);
}

/** gRPC's mapping of an HTTP status without grpc-status. */
function fromHttpStatus(httpStatus: number): TransportError {
  const code =
    httpStatus === 400
      ? Status.INTERNAL
      : httpStatus === 401
        ? Status.UNAUTHENTICATED
        : httpStatus === 403
          ? Status.PERMISSION_DENIED
          : httpStatus === 404
            ? Status.UNIMPLEMENTED
            : [429, 502, 503, 504].includes(httpStatus)
              ? Status.UNAVAILABLE
              : Status.UNKNOWN;
  return new TransportError(code, `the server answered HTTP status ${httpStatus} without a gRPC status`);
}

/** Why a call's stream closed when no status decided it: the session's fate, or whether the request ever left. */
function lostWith(session: Session, id: number | undefined, rst: number, err: Error | undefined): TransportError | undefined {
  if (id === undefined) return new TransportError(Status.UNAVAILABLE, `the connection closed before the request was sent${why(err ?? session.lastError)}`, { notSent: true });
  if (session.goawayLastId >= 0 && id > session.goawayLastId) {
    return new TransportError(Status.UNAVAILABLE, `the server is going away and did not process the request (GOAWAY last stream ${session.goawayLastId}, ours ${id})`, { notSent: true });
  }
  // REFUSED_STREAM proves nothing was processed only from a live connection: a GOAWAY's code (7 too)
  // becomes every stream's code when Node destroys the session.
  if (rst === NGHTTP2_REFUSED_STREAM && !session.h2.destroyed && session.goawayLastId < 0) {
    return new TransportError(Status.UNAVAILABLE, 'the server refused the stream before processing it', { notSent: true });
  }
  if (session.dropReason !== undefined) return new TransportError(Status.UNAVAILABLE, session.dropReason);
  if (session.h2.destroyed || session.h2.closed) return new TransportError(Status.UNAVAILABLE, `the connection was lost${why(err ?? session.lastError)}`, { cause: err ?? session.lastError });
  return undefined;
}

/** What a call's stream reports to: its Reply (read at each event: a unary call starts a new one per attempt), data, errors, close. */
interface StreamOwner {
  readonly reply: Reply;
  streamError: Error | undefined;
  onData(req: http2.ClientHttp2Stream, chunk: Buffer): void;
  onClose(req: http2.ClientHttp2Stream): void;
}

/** A call's stream knows its session and owner, so that one set of listeners serves every stream. */
interface Wired extends http2.ClientHttp2Stream {
  [SESSION]: Session;
  [OWNER]: StreamOwner;
}
const SESSION = Symbol('session');
const OWNER = Symbol('owner');

function onResponse(this: Wired, h: http2.IncomingHttpHeaders, flags: number): void {
  this[SESSION].heard();
  this[OWNER].reply.onResponse(h, (flags & NGHTTP2_FLAG_END_STREAM) !== 0);
}
function onTrailers(this: Wired, h: http2.IncomingHttpHeaders): void {
  this[SESSION].heard();
  this[OWNER].reply.onTrailers(h);
}
function onData(this: Wired, chunk: Buffer): void {
  this[SESSION].heard();
  this[OWNER].onData(this, chunk);
}
function onError(this: Wired, err: Error): void {
  this[OWNER].streamError = err;
  outOfStreams(this[SESSION], err);
}
function onClose(this: Wired): void {
  this[OWNER].onClose(this);
}
function retireNearLastId(this: Wired): void {
  if (this.id === undefined || this.id < LAST_STREAM_ID) return;
  const session = this[SESSION];
  session.retired = true;
  // Closed once this tick has written the stream: a close before that would lose it.
  setImmediate(() => session.retire());
}

/** Wires a call's stream to its owner, and tells the session that the server is alive. */
function listen(session: Session, req: http2.ClientHttp2Stream, owner: StreamOwner): void {
  const w = req as Wired;
  w[SESSION] = session;
  w[OWNER] = owner;
  w.on('response', onResponse);
  w.on('trailers', onTrailers);
  w.on('data', onData);
  w.on('error', onError);
  w.on('close', onClose);
  // Stream ids are running out: new calls go to a new connection. A stream on a connected session
  // has its id as request() returns ('ready' was emitted inside it); one still pending gets it later.
  if (w.id !== undefined) retireNearLastId.call(w);
  else w.once('ready', retireNearLastId);
}

/** Node fails a new stream, not its session, when stream ids run out: the session must go. */
function outOfStreams(session: Session, err: Error): void {
  if ((err as NodeJS.ErrnoException).code === 'ERR_HTTP2_OUT_OF_STREAMS') session.retire();
}

function why(err: Error | undefined): string {
  return err ? ` (${clean(err.message)})` : '';
}

/** One unary call: the call-wide deadline, signal and promise, and the state of its current attempt. */
class UnaryCall<Res> implements Call {
  settled = false;
  private retried = false;
  private timer: NodeJS.Timeout | undefined;
  private session: Session | undefined;
  private req: http2.ClientHttp2Stream | undefined;
  reply = new Reply();
  private decoder: MessageDecoder;
  private message: Buffer | undefined;
  streamError: Error | undefined;

  constructor(
    private readonly transport: Http2Transport,
    private readonly method: Method<unknown, Res>,
    private readonly body: Buffer,
    private readonly extra: RequestHeaders,
    readonly deadline: number,
    readonly signal: AbortSignal | undefined,
    private readonly resolve: (v: Res) => void,
    private readonly reject: (e: unknown) => void,
  ) {
    this.decoder = new MessageDecoder(transport.maxReceive);
    this.timer = setTimeout(this.onDeadline, Math.max(0, deadline - performance.now()));
    this.timer.unref();
    signal?.addEventListener('abort', this.onAbort, { once: true });
  }

  start(): void {
    this.transport.start(this as UnaryCall<unknown>);
  }

  attempt(session: Session): void {
    if (this.settled) return;
    let req: http2.ClientHttp2Stream;
    try {
      req = session.h2.request(this.transport.headers(this.method.path, this.extra, this.deadline - performance.now()), { endStream: false });
    } catch (err) {
      // The session takes no new stream (GOAWAY, closing): nothing was sent.
      session.retire();
      return this.fail(new TransportError(Status.UNAVAILABLE, `no connection: ${(err as Error).message}`, { notSent: true, cause: err }));
    }
    this.session = session;
    this.req = req;
    session.callStarted(this);
    listen(session, req, this);
    req.end(this.body);
  }

  onData(req: http2.ClientHttp2Stream, chunk: Buffer): void {
    // Not gRPC (a wrong content-type): its body is no message of ours.
    if (req !== this.req || this.reply.problem) return;
    let messages: Buffer[];
    try {
      messages = this.decoder.push(chunk);
    } catch (err) {
      const e = err as FramingError;
      return this.fail(new TransportError(e.kind === 'too-large' ? Status.RESOURCE_EXHAUSTED : Status.INTERNAL, e.message), true);
    }
    for (const m of messages) {
      if (this.message !== undefined) return this.fail(new TransportError(Status.INTERNAL, 'the server answered a unary call with more than one message'), true);
      this.message = m;
    }
  }

  onClose(req: http2.ClientHttp2Stream): void {
    if (req !== this.req || this.settled) return;
    const session = this.session!;
    const failure = this.reply.error();
    if (failure) return this.fail(failure, true);
    if (this.reply.status === Status.OK) {
      if (this.message === undefined || this.decoder.buffered > 0) {
        return this.fail(new TransportError(Status.INTERNAL, this.decoder.buffered > 0 ? 'the server sent a truncated message' : 'the server sent no message'), true);
      }
      let res: Res;
      try {
        res = this.method.decode(this.message);
      } catch (err) {
        return this.fail(new TransportError(Status.INTERNAL, `the server's message could not be decoded (${clean((err as Error).message)})`, { cause: err }), true);
      }
      this.settle();
      return this.resolve(res);
    }
    this.fail(lostWith(session, req.id, req.rstCode ?? NGHTTP2_NO_ERROR, this.streamError) ?? closedWithoutStatus(req.rstCode ?? NGHTTP2_NO_ERROR, this.reply.httpStatus));
  }

  dropped(session: Session): void {
    if (this.settled || session !== this.session) return;
    const notSent = this.req?.id === undefined;
    this.fail(new TransportError(Status.UNAVAILABLE, session.dropReason ?? 'the connection was dropped', { notSent }));
  }

  /** A unary call the server took finishes on the draining connection, by its deadline. */
  goingAway(): void {}

  private readonly onDeadline = (): void => {
    this.timer = undefined;
    this.fail(new TransportError(Status.DEADLINE_EXCEEDED, `no answer within the deadline`), true);
  };

  private readonly onAbort = (): void => {
    this.fail(new TransportError(Status.CANCELLED, 'cancelled', { local: true }), true);
  };

  /** Ends the call with `err`, unless it proves nothing was sent and a retry is allowed (once). */
  fail(err: TransportError, final = false): void {
    if (this.settled) return;
    this.endAttempt();
    if (!final && err.notSent && !this.retried && !this.transport.isClosed && !this.signal?.aborted && performance.now() < this.deadline) {
      this.retried = true;
      return this.transport.start(this as UnaryCall<unknown>);
    }
    this.settle();
    this.reject(err);
  }

  /** Leaves the current attempt: resets its stream if still open, and forgets its state. */
  private endAttempt(): void {
    const req = this.req;
    const session = this.session;
    this.req = undefined;
    this.session = undefined;
    if (session) session.callEnded(this);
    if (req && !req.closed && !req.destroyed) req.close(NGHTTP2_CANCEL);
    this.reply = new Reply();
    this.decoder = new MessageDecoder(this.transport.maxReceive);
    this.message = undefined;
    this.streamError = undefined;
  }

  private settle(): void {
    this.settled = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.signal?.removeEventListener('abort', this.onAbort);
    if (this.session) this.session.callEnded(this);
    this.session = undefined;
  }
}

/** A bidirectional gRPC stream on a session (see BidiStream). */
class Http2BidiStream<Req, Res> extends EventEmitter implements BidiStream<Req, Res>, Call {
  private req: http2.ClientHttp2Stream | undefined;
  private session: Session | undefined;
  private done = false;
  /** cancel() was called: not even an error said on a later tick reaches anyone. */
  private cancelled = false;
  readonly reply = new Reply();
  private readonly decoder: MessageDecoder;
  streamError: Error | undefined;

  constructor(
    private readonly transport: Http2Transport,
    session: Session | undefined,
    private readonly method: Method<Req, Res>,
    headers: RequestHeaders,
  ) {
    super();
    this.decoder = new MessageDecoder(transport.maxReceive);
    if (!session) {
      this.done = true;
      this.emitLater(new TransportError(Status.UNAVAILABLE, 'no connection', { notSent: true }));
      return;
    }
    let req: http2.ClientHttp2Stream;
    try {
      req = session.h2.request(transport.headers(method.path, headers), { endStream: false });
    } catch (err) {
      this.done = true;
      session.retire();
      this.emitLater(new TransportError(Status.UNAVAILABLE, `no connection: ${(err as Error).message}`, { notSent: true, cause: err }));
      return;
    }
    this.req = req;
    this.session = session;
    session.callStarted(this);
    listen(session, req, this);
  }

  write(message: Req): boolean {
    const req = this.req;
    if (this.done || !req) return false;
    const body = this.method.encode(message);
    if (body.length > this.transport.maxSend) {
      // Said on the next tick: not from inside the caller's write().
      this.end(new TransportError(Status.RESOURCE_EXHAUSTED, `the request is ${body.length} bytes, above the limit of ${this.transport.maxSend}`), true);
      return false;
    }
    req.write(frame(body));
    return true;
  }

  cancel(): void {
    this.cancelled = true;
    if (this.done) return;
    this.done = true;
    this.detach();
  }

  onData(_req: http2.ClientHttp2Stream, chunk: Buffer): void {
    if (this.done || this.reply.problem) return;
    let messages: Buffer[];
    try {
      messages = this.decoder.push(chunk);
    } catch (err) {
      const e = err as FramingError;
      return this.end(new TransportError(e.kind === 'too-large' ? Status.RESOURCE_EXHAUSTED : Status.INTERNAL, e.message));
    }
    for (const m of messages) {
      if (this.done) return;
      let res: Res;
      try {
        res = this.method.decode(m);
      } catch (err) {
        return this.end(new TransportError(Status.INTERNAL, `the server's message could not be decoded (${clean((err as Error).message)})`, { cause: err }));
      }
      this.emitSafely('data', res);
    }
  }

  onClose(req: http2.ClientHttp2Stream): void {
    if (this.done || req !== this.req) return;
    const session = this.session!;
    const rst = req.rstCode ?? NGHTTP2_NO_ERROR;
    const failure = this.reply.error();
    if (failure) return this.end(failure);
    if (this.reply.status === Status.OK) return this.end(undefined);
    this.end(lostWith(session, req.id, rst, this.streamError) ?? closedWithoutStatus(rst, this.reply.httpStatus));
  }

  dropped(session: Session): void {
    if (this.done || session !== this.session) return;
    this.end(new TransportError(Status.UNAVAILABLE, session.dropReason ?? 'the connection was dropped'));
  }

  /** A stream lives as long as its connection: on a GOAWAY it ends now, and its owner reopens it on a new one. */
  goingAway(session: Session): void {
    if (this.done || session !== this.session) return;
    this.end(new TransportError(Status.UNAVAILABLE, 'the server is going away (GOAWAY): reopen the stream on a new connection'));
  }

  /** Leaves the session, resetting the stream if it is still open. */
  private detach(): void {
    const req = this.req;
    const session = this.session;
    this.req = undefined;
    this.session = undefined;
    if (session) session.callEnded(this);
    if (req && !req.closed && !req.destroyed) req.close(NGHTTP2_CANCEL);
  }

  /** The stream is over: `err`, or 'end' without one. `later`: said on the next tick. */
  private end(err: TransportError | undefined, later = false): void {
    if (this.done) return;
    this.done = true;
    this.detach();
    if (err === undefined) this.emitSafely('end');
    else if (later) this.emitLater(err);
    else this.emitError(err);
  }

  /** An 'error' nobody listens to is dropped, not thrown (a stream given up on keeps no listener). */
  private emitError(err: TransportError): void {
    if (this.listenerCount('error') > 0) this.emitSafely('error', err);
  }

  private emitLater(err: TransportError): void {
    process.nextTick(() => {
      if (!this.cancelled) this.emitError(err);
    });
  }

  /** A listener that throws must not be taken for the connection's failure: its exception surfaces on the next tick. */
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

/**
 * A server's message made safe for an Error: control characters (CR, LF, escapes) become spaces
 * and the length is capped, so a hostile member can neither forge log lines nor grow our memory.
 */
function clean(s: string): string {
  // eslint-disable-next-line no-control-regex
  const flat = s.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, ' ');
  return flat.length > LIMITS.grpcMessageChars ? `${flat.slice(0, LIMITS.grpcMessageChars)}… (${flat.length} characters)` : flat;
}

/** grpc-message is percent-encoded UTF-8; an invalid sequence is kept as it came. */
function decodeGrpcMessage(s: string): string {
  if (!s.includes('%')) return s;
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/** The grpc-timeout header: at most 8 digits and a unit; milliseconds while they fit. */
export function grpcTimeout(ms: number): string {
  const m = Math.max(1, Math.ceil(ms));
  if (m < 100_000_000) return `${m}m`;
  const s = Math.ceil(m / 1000);
  if (s < 100_000_000) return `${s}S`;
  return `${Math.min(99_999_999, Math.ceil(s / 3600))}H`;
}
