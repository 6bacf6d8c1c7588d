import * as http2 from 'node:http2';
import { Status, TransportError } from '../transport.js';
import { LIMITS } from './limits.js';
import type { H2Connection } from './h2-connection.js';

const { NGHTTP2_NO_ERROR, NGHTTP2_CANCEL, NGHTTP2_REFUSED_STREAM, NGHTTP2_ENHANCE_YOUR_CALM, NGHTTP2_INADEQUATE_SECURITY } =
  http2.constants;

/** What a response's header blocks said: the HTTP status and content type, then the gRPC status. */
export class Reply {
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
      this.problem = new TransportError(
        Status.UNKNOWN,
        `the server answered with content-type ${clean(String(type ?? 'none'))}, not gRPC: is this an etcd client port?`,
      );
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
export function closedWithoutStatus(rst: number, httpStatus: number): TransportError {
  if (httpStatus !== 0 && httpStatus !== 200) return fromHttpStatus(httpStatus);
  if (rst === NGHTTP2_NO_ERROR) return new TransportError(Status.INTERNAL, 'the server ended the call without a gRPC status');
  if (rst === NGHTTP2_CANCEL) return new TransportError(Status.CANCELLED, 'the server cancelled the call');
  if (rst === NGHTTP2_ENHANCE_YOUR_CALM)
    return new TransportError(Status.RESOURCE_EXHAUSTED, 'the server reset the call (ENHANCE_YOUR_CALM)');
  if (rst === NGHTTP2_INADEQUATE_SECURITY)
    return new TransportError(Status.PERMISSION_DENIED, 'the server reset the call: the connection is not secure enough');
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
export function lostWith(session: H2Connection, id: number | undefined, rst: number, err: Error | undefined): TransportError | undefined {
  if (id === undefined)
    return new TransportError(Status.UNAVAILABLE, `the connection closed before the request was sent${why(err ?? session.lastError)}`, {
      notSent: true,
    });
  if (session.goawayLastId >= 0 && id > session.goawayLastId) {
    return new TransportError(
      Status.UNAVAILABLE,
      `the server is going away and did not process the request (GOAWAY last stream ${session.goawayLastId}, ours ${id})`,
      { notSent: true },
    );
  }
  // REFUSED_STREAM proves nothing was processed only from a live connection: a GOAWAY's code (7 too)
  // becomes every stream's code when Node destroys the session.
  if (rst === NGHTTP2_REFUSED_STREAM && !session.h2.destroyed && session.goawayLastId < 0) {
    return new TransportError(Status.UNAVAILABLE, 'the server refused the stream before processing it', { notSent: true });
  }
  if (session.dropReason !== undefined) return new TransportError(Status.UNAVAILABLE, session.dropReason);
  if (session.h2.destroyed || session.h2.closed)
    return new TransportError(Status.UNAVAILABLE, `the connection was lost${why(err ?? session.lastError)}`, {
      cause: err ?? session.lastError,
    });
  return undefined;
}

function why(err: Error | undefined): string {
  return err ? ` (${clean(err.message)})` : '';
}

/**
 * A server's message made safe for an Error: control characters (CR, LF, escapes) become spaces
 * and the length is capped, so a hostile member can neither forge log lines nor grow our memory.
 */
export function clean(s: string): string {
  // Control characters are what it removes.
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
