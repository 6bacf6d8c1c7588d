import * as http2 from 'node:http2';
import { LAST_STREAM_ID } from './limits.js';
import type { Reply } from './reply.js';
import type { H2Connection } from './h2-connection.js';

const { NGHTTP2_FLAG_END_STREAM } = http2.constants;

/** What a call's stream reports to: its Reply (read at each event: a unary call starts a new one per attempt), data, errors, close. */
export interface StreamOwner {
  readonly reply: Reply;
  streamError: Error | undefined;
  onData(req: http2.ClientHttp2Stream, chunk: Buffer): void;
  onClose(req: http2.ClientHttp2Stream): void;
}

/** A call's stream knows its session and owner, so that one set of listeners serves every stream. */
interface Wired extends http2.ClientHttp2Stream {
  [SESSION]: H2Connection;
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
export function listen(session: H2Connection, req: http2.ClientHttp2Stream, owner: StreamOwner): void {
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
function outOfStreams(session: H2Connection, err: Error): void {
  if ((err as NodeJS.ErrnoException).code === 'ERR_HTTP2_OUT_OF_STREAMS') session.retire();
}
