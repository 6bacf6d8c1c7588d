import { EventEmitter } from 'node:events';
import * as http2 from 'node:http2';
import { type FramingError, MessageDecoder, frameAll } from '../framing.js';
import { type BidiStream, type Method, type RequestHeaders, Status, TransportError } from '../transport.js';
import { listen } from './listen.js';
import { Reply, clean, closedWithoutStatus, lostWith } from './reply.js';
import type { Call, H2Connection } from './h2-connection.js';

const { NGHTTP2_NO_ERROR, NGHTTP2_CANCEL } = http2.constants;

/** What a stream needs of its transport. */
export interface StreamHost {
  readonly maxReceive: number;
  readonly maxSend: number;
  headers(path: string, extra: RequestHeaders): http2.OutgoingHttpHeaders;
}

/** A bidirectional gRPC stream on a session (see BidiStream). */
export class Http2BidiStream<Req, Res> extends EventEmitter implements BidiStream<Req, Res>, Call {
  private req: http2.ClientHttp2Stream | undefined;
  private session: H2Connection | undefined;
  private done = false;
  /** cancel() was called: not even an error said on a later tick reaches anyone. */
  private cancelled = false;
  readonly reply = new Reply();
  private readonly decoder: MessageDecoder;
  streamError: Error | undefined;

  constructor(
    private readonly transport: StreamHost,
    session: H2Connection | undefined,
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
    return this.send([message]);
  }

  writeMany(messages: readonly Req[]): boolean {
    return this.send(messages);
  }

  private send(messages: readonly Req[]): boolean {
    const req = this.req;
    if (this.done || !req) return false;
    const bodies = messages.map((m) => this.method.encode(m));
    for (const body of bodies) {
      if (body.length <= this.transport.maxSend) continue;
      // Said on the next tick: not from inside the caller's write().
      this.end(
        new TransportError(Status.RESOURCE_EXHAUSTED, `the request is ${body.length} bytes, above the limit of ${this.transport.maxSend}`),
        true,
      );
      return false;
    }
    req.write(frameAll(bodies));
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
        return this.end(
          new TransportError(Status.INTERNAL, `the server's message could not be decoded (${clean((err as Error).message)})`, {
            cause: err,
          }),
        );
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

  dropped(session: H2Connection): void {
    if (this.done || session !== this.session) return;
    this.end(new TransportError(Status.UNAVAILABLE, session.dropReason ?? 'the connection was dropped'));
  }

  /** A stream lives as long as its connection: on a GOAWAY it ends now, and its owner reopens it on a new one. */
  goingAway(session: H2Connection): void {
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
