// gRPC over node:http2: one ClientHttp2Session per member for unary calls and streams alike.
// nghttp2 guards the HTTP/2 framing (floods, CONTINUATION, HPACK, SETTINGS); the limits below are
// set deliberately and documented in CONTRIBUTING.md ("The connection's limits"). What HTTP/2 does not know is
// ours: the message size behind gRPC's length prefix (framing.ts), the grpc-status and
// grpc-message a server may send, and whether a failed request provably never reached etcd.
import * as http2 from 'node:http2';
import * as net from 'node:net';
import * as tls from 'node:tls';
import { frame } from './framing.js';
import { CONNECTION_WINDOW, LIMITS, STREAM_WINDOW } from './http2/limits.js';
import { clean } from './http2/reply.js';
import { H2Connection } from './http2/h2-connection.js';
import { Http2BidiStream } from './http2/stream.js';
import { UnaryCall } from './http2/unary.js';
import { type BidiStream, ConnectError, type Method, type RequestHeaders, Status, type Transport, TransportError } from './transport.js';

export { LAST_STREAM_ID, LIMITS } from './http2/limits.js';

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
  private session: H2Connection | undefined;
  private dialing: Promise<H2Connection> | undefined;
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
    return this.session?.usable === true;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  slowKeepalive(): void {
    this.keepaliveTimeMs = Math.min(2 * this.keepaliveTimeMs, 0x7fffffff);
  }

  /** Called by a session that takes no new calls (GOAWAY, closed, dropped). */
  detach(session: H2Connection): void {
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
  private ready(deadline: number, signal: AbortSignal | undefined): Promise<H2Connection> {
    if (this.closed) return Promise.reject(new ConnectError('closed', 0));
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.session?.usable) return Promise.resolve(this.session);
    const attempt = this.dial();
    return new Promise<H2Connection>((resolve, reject) => {
      let done = false;
      const finish = (err: unknown, s?: H2Connection): void => {
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
  private dial(): Promise<H2Connection> {
    if (this.dialing) return this.dialing;
    const started = performance.now();
    const attempt = new Promise<H2Connection>((resolve, reject) => {
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
      const session = new H2Connection(this, h2);
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
        if (!settled)
          fail(
            new ConnectError('failed', performance.now() - started, {
              cause: session.lastError ?? new Error('the connection closed during the handshake'),
            }),
          );
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
        fail(
          new ConnectError('failed', performance.now() - started, {
            cause: session.lastError ?? new Error('the server closed the connection before the HTTP/2 handshake'),
          }),
        );
      });
      if (socket instanceof tls.TLSSocket) {
        socket.once('secureConnect', () => {
          if (socket.alpnProtocol !== 'h2') {
            session.lastError = new Error(
              `the server did not agree to HTTP/2 (ALPN ${socket.alpnProtocol || 'none'}): is this an etcd client port?`,
            );
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
        return reject(
          new TransportError(Status.RESOURCE_EXHAUSTED, `the request is ${body.length} bytes, above the limit of ${this.maxSend}`, {
            notSent: true,
          }),
        );
      }
      if (signal?.aborted) return reject(new TransportError(Status.CANCELLED, 'cancelled', { notSent: true, local: true }));
      new UnaryCall(this, method, frame(body), headers, deadline, signal, resolve, reject).start();
    });
  }

  /** Starts (or restarts) `call` on the ready session, connecting first when there is none. */
  start(call: UnaryCall<unknown>): void {
    const s = this.session;
    if (s?.usable) return call.attempt(s);
    if (this.closed) return call.fail(new TransportError(Status.UNAVAILABLE, 'the transport is closed', { notSent: true }));
    const until = Math.min(call.deadline, performance.now() + this.dialTimeoutMs);
    this.ready(until, call.signal).then(
      (session) => call.attempt(session),
      (err: unknown) => {
        if (call.settled) return;
        if (err === TIMED_OUT && performance.now() >= call.deadline - 1) {
          return call.fail(new TransportError(Status.DEADLINE_EXCEEDED, 'the deadline passed while connecting', { notSent: true }));
        }
        const why =
          err === TIMED_OUT
            ? `no connection within ${Math.round(this.dialTimeoutMs)} ms`
            : err instanceof Error
              ? err.message
              : String(err);
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

/** The grpc-timeout header: at most 8 digits and a unit; milliseconds while they fit. */
export function grpcTimeout(ms: number): string {
  const m = Math.max(1, Math.ceil(ms));
  if (m < 100_000_000) return `${m}m`;
  const s = Math.ceil(m / 1000);
  if (s < 100_000_000) return `${s}S`;
  return `${Math.min(99_999_999, Math.ceil(s / 3600))}H`;
}
