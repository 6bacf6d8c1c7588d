import * as http2 from 'node:http2';
import { type FramingError, MessageDecoder } from '../framing.js';
import { type Method, type RequestHeaders, Status, TransportError } from '../transport.js';
import { listen } from './listen.js';
import { Reply, clean, closedWithoutStatus, lostWith } from './reply.js';
import type { Call, H2Connection } from './h2-connection.js';

const { NGHTTP2_NO_ERROR, NGHTTP2_CANCEL } = http2.constants;

/** What a unary call needs of its transport. */
export interface UnaryHost {
  readonly maxReceive: number;
  readonly isClosed: boolean;
  /** Starts (or restarts) the call on the ready session, connecting first when there is none. */
  start(call: UnaryCall<unknown>): void;
  headers(path: string, extra: RequestHeaders, timeoutMs?: number): http2.OutgoingHttpHeaders;
}

/** One unary call: the call-wide deadline, signal and promise, and the state of its current attempt. */
export class UnaryCall<Res> implements Call {
  settled = false;
  private retried = false;
  private timer: NodeJS.Timeout | undefined;
  private session: H2Connection | undefined;
  private req: http2.ClientHttp2Stream | undefined;
  reply = new Reply();
  private decoder: MessageDecoder;
  private message: Buffer | undefined;
  streamError: Error | undefined;

  constructor(
    private readonly transport: UnaryHost,
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

  attempt(session: H2Connection): void {
    if (this.settled) return;
    let req: http2.ClientHttp2Stream;
    try {
      req = session.h2.request(this.transport.headers(this.method.path, this.extra, this.deadline - performance.now()), {
        endStream: false,
      });
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
      if (this.message !== undefined)
        return this.fail(new TransportError(Status.INTERNAL, 'the server answered a unary call with more than one message'), true);
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
        return this.fail(
          new TransportError(
            Status.INTERNAL,
            this.decoder.buffered > 0 ? 'the server sent a truncated message' : 'the server sent no message',
          ),
          true,
        );
      }
      let res: Res;
      try {
        res = this.method.decode(this.message);
      } catch (err) {
        return this.fail(
          new TransportError(Status.INTERNAL, `the server's message could not be decoded (${clean((err as Error).message)})`, {
            cause: err,
          }),
          true,
        );
      }
      this.settle();
      return this.resolve(res);
    }
    this.fail(
      lostWith(session, req.id, req.rstCode ?? NGHTTP2_NO_ERROR, this.streamError) ??
        closedWithoutStatus(req.rstCode ?? NGHTTP2_NO_ERROR, this.reply.httpStatus),
    );
  }

  dropped(session: H2Connection): void {
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
