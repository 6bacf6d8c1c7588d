// The HTTP/2 connection under the lean unary transport, framed here on a plain (or TLS) socket
// instead of node:http2: node:http2 cost about 0.3 ms more than this per call on this machine, and
// twice that on the first call after a quiet spell, more than the rest of our client (issue 13).
// It speaks the client side of RFC 9113 as far as unary gRPC calls need it: the preface and
// SETTINGS, HEADERS and CONTINUATION (HPACK in hpack.ts), DATA with flow control both ways, PING,
// RST_STREAM, GOAWAY. No server push (disabled in our SETTINGS), no priorities, no padding sent.
import type * as net from 'node:net';
import { HpackDecoder, HpackError, type HeaderMap } from './hpack.js';

export type { HeaderField, HeaderMap } from './hpack.js';

const DATA = 0x0;
const HEADERS = 0x1;
const RST_STREAM = 0x3;
const SETTINGS = 0x4;
const PUSH_PROMISE = 0x5;
const PING = 0x6;
const GOAWAY = 0x7;
const WINDOW_UPDATE = 0x8;
const CONTINUATION = 0x9;

const END_STREAM = 0x1;
const ACK = 0x1;
const END_HEADERS = 0x4;
const PADDED = 0x8;
const PRIORITY = 0x20;

/** RFC 9113 error codes. */
export const ErrorCode = {
  NO_ERROR: 0x0,
  PROTOCOL_ERROR: 0x1,
  INTERNAL_ERROR: 0x2,
  FLOW_CONTROL_ERROR: 0x3,
  STREAM_CLOSED: 0x5,
  FRAME_SIZE_ERROR: 0x6,
  REFUSED_STREAM: 0x7,
  CANCEL: 0x8,
  COMPRESSION_ERROR: 0x9,
  ENHANCE_YOUR_CALM: 0xb,
  INADEQUATE_SECURITY: 0xc,
} as const;

const EMPTY = Buffer.alloc(0);
const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
const MAX_WINDOW = 0x7fffffff;
const DEFAULT_WINDOW = 65535;
const DEFAULT_FRAME = 16384;
/** What we announce, and so the largest frame we accept: larger DATA frames mean fewer of them. */
const OUR_MAX_FRAME = 1 << 20;
/** Replenish a receive window (the connection's, a stream's) once this much of it is used. */
const WINDOW_REFILL = 1 << 30;
/** The largest header block accepted (HEADERS and its CONTINUATIONs): an endless one is an attack. */
const MAX_HEADER_BLOCK = 1 << 20;
/** The highest stream id a client may open (odd). */
const LAST_STREAM_ID = 0x7fffffff;

/** What a stream tells its owner. Each is called in this order, and onClose exactly once. */
export interface StreamHandler {
  /** A header block: the response headers first, then the trailers. `end`: the stream ended with it. */
  onHeaders(headers: HeaderMap, end: boolean): void;
  onData(chunk: Buffer): void;
  /** The stream is over: `rstCode` is the RST_STREAM code that ended it (NO_ERROR when it ended normally). */
  onClose(rstCode: number): void;
}

/** A protocol violation by the peer: the connection is closed with it. */
export class Http2ProtocolError extends Error {
  constructor(
    message: string,
    readonly code: number = ErrorCode.PROTOCOL_ERROR,
  ) {
    super(message);
    this.name = 'Http2ProtocolError';
  }
}

/** One client stream of a WireConnection. */
export class WireStream {
  /** 0 until the stream is opened (it may wait for the server's MAX_CONCURRENT_STREAMS). */
  id = 0;
  /** The send window the peer granted this stream. */
  sendWindow = 0;
  /** The header block, until sent. */
  block: Buffer | undefined;
  /** Request bytes still to send (flow control); localDone once all went and END_STREAM with them. */
  pending: Buffer | undefined;
  /** END_STREAM follows the pending bytes: a unary request is one body; a stream ends when told. */
  endAfter: boolean;
  localDone = false;
  /** DATA received since our last WINDOW_UPDATE for the stream (a long-lived stream refills it). */
  received = 0;
  /** A first header block arrived (later ones are trailers). */
  gotHeaders = false;
  closed = false;
  rstCode: number = ErrorCode.NO_ERROR;

  constructor(
    readonly conn: WireConnection,
    readonly handler: StreamHandler,
    block: Buffer,
    body: Buffer,
    end: boolean,
  ) {
    this.block = block;
    this.pending = body;
    this.endAfter = end;
  }

  /** Sends more of the request: `data` after what is pending; with `end`, END_STREAM after it. */
  send(data: Buffer, end = false): void {
    this.conn.send(this, data, end);
  }

  /** Ends the stream from our side with RST_STREAM `code` (CANCEL for an abort); onClose follows at once. */
  close(code: number = ErrorCode.CANCEL): void {
    if (this.closed) return;
    this.conn.reset(this, code);
  }
}

/** Callbacks of a WireConnection: its life, as a session's events. */
export interface WireEvents {
  /** The server's first SETTINGS frame arrived: the connection is ready. */
  onRemoteSettings(): void;
  /** The server sent GOAWAY: streams above `lastStreamId` were not processed. */
  onGoaway(code: number, lastStreamId: number, debug: string): void;
  /** A socket or protocol error; onClose follows. */
  onError(err: Error): void;
  /** The connection is gone (every stream got onClose before this). */
  onClose(): void;
}

/**
 * The client side of one HTTP/2 connection on `socket`. Writes the preface and our SETTINGS at
 * once; the connection is ready when the server's SETTINGS arrive (`onRemoteSettings`).
 */
export class WireConnection {
  destroyed = false;
  /** close() was called, or a GOAWAY received: no new streams. */
  closing = false;
  peerInitialWindow = DEFAULT_WINDOW;
  private peerMaxFrame = DEFAULT_FRAME;
  private peerMaxStreams = Infinity;
  private sendWindow = DEFAULT_WINDOW;
  private received = 0;
  private nextId = 1;
  private readonly streams = new Map<number, WireStream>();
  /** Streams waiting for send window, oldest first. */
  private blocked: WireStream[] = [];
  /** Streams waiting for the server's MAX_CONCURRENT_STREAMS, oldest first. */
  private queued: WireStream[] = [];
  private readonly decoder = new HpackDecoder();
  private settingsSeen = false;
  private pings: ((err: Error | null) => void)[] = [];
  /** Bytes of an incomplete frame: the chunks read so far, their length, and how many the frame needs. */
  private inbox: Buffer[] = [];
  private inboxLength = 0;
  private need = 9;
  /** A header block in progress (HEADERS without END_HEADERS): its stream and fragments. */
  private continuing: { id: number; end: boolean; parts: Buffer[]; length: number } | undefined;
  /** A GOAWAY came: queued streams are not opened here any more. */
  private draining = false;

  constructor(
    readonly socket: net.Socket,
    private readonly events: WireEvents,
  ) {
    socket.on('data', (chunk: Buffer) => this.onSocketData(chunk));
    socket.on('error', (err: Error) => this.destroy(err));
    socket.on('close', () => this.destroy());
    const settings = Buffer.alloc(18);
    // ENABLE_PUSH 0; INITIAL_WINDOW_SIZE the most (a unary answer never waits for a WINDOW_UPDATE);
    // MAX_FRAME_SIZE 1 MiB.
    settings.writeUInt16BE(0x2, 0);
    settings.writeUInt32BE(0, 2);
    settings.writeUInt16BE(0x4, 6);
    settings.writeUInt32BE(MAX_WINDOW, 8);
    settings.writeUInt16BE(0x5, 12);
    settings.writeUInt32BE(OUR_MAX_FRAME, 14);
    const window = Buffer.alloc(4);
    window.writeUInt32BE(MAX_WINDOW - DEFAULT_WINDOW, 0);
    socket.write(Buffer.concat([PREFACE, frame(SETTINGS, 0, 0, settings), frame(WINDOW_UPDATE, 0, 0, window)]));
  }

  /** Streams open now. */
  get active(): number {
    return this.streams.size;
  }

  /** New streams can be opened (not closing, ids left, under the server's limit). */
  get usable(): boolean {
    return !this.destroyed && !this.closing && this.nextId <= LAST_STREAM_ID;
  }

  ref(): void {
    this.socket.ref();
  }

  unref(): void {
    this.socket.unref();
  }

  /**
   * Opens a stream: the header block (HPACK, from encodeHeaders), then `body`, with END_STREAM
   * unless `end` is false (a stream that sends more later), as flow control allows. Past the
   * server's MAX_CONCURRENT_STREAMS it waits for a stream to end. Throws when no new stream can be
   * opened.
   */
  request(block: Buffer, body: Buffer, handler: StreamHandler, end = true): WireStream {
    if (!this.usable) throw new Error(this.destroyed ? 'The session has been destroyed' : 'The session is closing');
    const stream = new WireStream(this, handler, block, body, end);
    if (this.queued.length > 0 || this.streams.size >= this.peerMaxStreams) this.queued.push(stream);
    else this.open(stream);
    return stream;
  }

  /** Gives the stream its id and sends its headers and as much of its body as the windows allow. */
  private open(stream: WireStream): void {
    const id = this.nextId;
    this.nextId += 2;
    stream.id = id;
    if (this.nextId > LAST_STREAM_ID) this.exhausted();
    stream.sendWindow = this.peerInitialWindow;
    this.streams.set(id, stream);
    const block = stream.block!;
    stream.block = undefined;
    const out: Buffer[] = [];
    // The header block, split into CONTINUATIONs past the peer's frame size.
    for (let off = 0, first = true; first || off < block.length; first = false) {
      const part = block.subarray(off, off + this.peerMaxFrame);
      off += part.length;
      out.push(frame(first ? HEADERS : CONTINUATION, off >= block.length ? END_HEADERS : 0, id, part));
    }
    this.sendBody(stream, out);
    this.socket.write(out.length === 1 ? out[0]! : Buffer.concat(out));
  }

  /**
   * The last stream id is taken: no new streams here (the caller's channel dials a new connection),
   * the waiting ones are refused unsent, and the connection closes once its open streams end.
   */
  private exhausted(): void {
    this.closing = true;
    this.draining = true;
    const waiting = this.queued;
    this.queued = [];
    queueMicrotask(() => {
      for (const s of waiting) this.closeStream(s, ErrorCode.REFUSED_STREAM, false);
    });
  }

  /** Opens queued streams while the server's limit allows. */
  private openQueued(): void {
    while (this.queued.length > 0 && this.streams.size < this.peerMaxStreams && !this.destroyed && !this.draining && this.nextId <= LAST_STREAM_ID) {
      this.open(this.queued.shift()!);
    }
  }

  /** Sends a PING; `cb` gets its ACK (null) or the reason none will come. False if it cannot be sent. */
  ping(cb: (err: Error | null) => void): boolean {
    if (this.destroyed) return false;
    this.pings.push(cb);
    this.socket.write(frame(PING, 0, 0, Buffer.alloc(8)));
    return true;
  }

  /** No new streams; the connection closes (GOAWAY, then the socket) once the open ones end. */
  close(): void {
    if (this.destroyed) return;
    this.closing = true;
    if (this.streams.size === 0) this.finish();
  }

  /** Closes the connection now: every open stream gets onClose, then the events' onClose. */
  destroy(err?: Error): void {
    this.end(err, undefined);
  }

  /** Ends the connection: the socket destroyed, or ended after `last` (a GOAWAY) is written. */
  private end(err: Error | undefined, last: Buffer | undefined): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.closing = true;
    if (err) this.events.onError(err);
    if (last) {
      // A peer that reads nothing more must not keep the socket: destroyed within a second anyway.
      const socket = this.socket;
      const timer = setTimeout(() => socket.destroy(), 1000);
      timer.unref();
      socket.end(last, () => {
        clearTimeout(timer);
        socket.destroy();
      });
    } else {
      this.socket.destroy();
    }
    const streams = [...this.streams.values(), ...this.queued];
    this.streams.clear();
    this.queued = [];
    this.blocked = [];
    for (const s of streams) this.closeStream(s, ErrorCode.INTERNAL_ERROR, false);
    const pings = this.pings;
    this.pings = [];
    for (const cb of pings) cb(new Error('the connection closed'));
    this.events.onClose();
  }

  /** RST_STREAM from our side. */
  reset(stream: WireStream, code: number): void {
    if (stream.closed) return;
    if (!this.destroyed && stream.id !== 0) {
      const b = Buffer.alloc(4);
      b.writeUInt32BE(code, 0);
      this.socket.write(frame(RST_STREAM, 0, stream.id, b));
    }
    this.closeStream(stream, code, true);
  }

  /** GOAWAY (NO_ERROR, no stream processed: we are a client), then end the socket. */
  private finish(): void {
    this.end(undefined, frame(GOAWAY, 0, 0, Buffer.alloc(8)));
  }

  private closeStream(stream: WireStream, code: number, remove: boolean): void {
    if (stream.closed) return;
    stream.closed = true;
    stream.rstCode = code;
    stream.pending = undefined;
    stream.block = undefined;
    if (remove) {
      if (stream.id !== 0) this.streams.delete(stream.id);
      else {
        const q = this.queued.indexOf(stream);
        if (q >= 0) this.queued.splice(q, 1);
      }
      const i = this.blocked.indexOf(stream);
      if (i >= 0) this.blocked.splice(i, 1);
    }
    stream.handler.onClose(code);
    if (!remove || this.destroyed) return;
    this.openQueued();
    if (this.closing && this.streams.size === 0 && this.queued.length === 0) this.finish();
  }

  /** WireStream.send. */
  send(stream: WireStream, data: Buffer, end: boolean): void {
    if (stream.closed || stream.localDone || stream.endAfter) return;
    const p = stream.pending;
    stream.pending = p !== undefined && p.length > 0 ? Buffer.concat([p, data]) : data;
    stream.endAfter = end;
    // Not opened yet (queued), or waiting for window: its turn comes.
    if (stream.id === 0 || this.blocked.includes(stream)) return;
    const out: Buffer[] = [];
    this.sendBody(stream, out);
    if (out.length > 0) this.socket.write(out.length === 1 ? out[0]! : Buffer.concat(out));
  }

  /** Adds DATA frames of the stream's pending bytes to `out`, as far as both send windows allow. */
  private sendBody(stream: WireStream, out: Buffer[]): void {
    let body = stream.pending ?? EMPTY;
    for (;;) {
      if (body.length === 0 && !stream.endAfter) {
        stream.pending = undefined;
        return;
      }
      // An empty DATA frame (END_STREAM alone) needs no window.
      const n = Math.max(0, Math.min(body.length, this.peerMaxFrame, this.sendWindow, stream.sendWindow));
      if (n === 0 && body.length > 0) break; // no window: wait for a WINDOW_UPDATE
      const last = n === body.length;
      const end = last && stream.endAfter;
      out.push(frame(DATA, end ? END_STREAM : 0, stream.id, body.subarray(0, n)));
      this.sendWindow -= n;
      stream.sendWindow -= n;
      body = body.subarray(n);
      if (last) {
        stream.pending = undefined;
        if (end) stream.localDone = true;
        return;
      }
    }
    stream.pending = body;
    if (!this.blocked.includes(stream)) this.blocked.push(stream);
  }

  private flushBlocked(): void {
    if (this.blocked.length === 0) return;
    const out: Buffer[] = [];
    const waiting = this.blocked;
    this.blocked = [];
    for (const s of waiting) if (!s.closed && !s.localDone) this.sendBody(s, out);
    if (out.length > 0) this.socket.write(Buffer.concat(out));
  }

  private onSocketData(chunk: Buffer): void {
    let buf = chunk;
    if (this.inboxLength > 0) {
      // A frame spread over reads is joined once, when complete (not once per read).
      this.inbox.push(chunk);
      this.inboxLength += chunk.length;
      if (this.inboxLength < this.need) return;
      buf = Buffer.concat(this.inbox, this.inboxLength);
      this.inbox = [];
      this.inboxLength = 0;
    }
    // Our replies of this read (ACKs, window updates) leave in one write.
    this.socket.cork();
    try {
      while (buf.length >= 9 && !this.destroyed) {
        const len = buf.readUIntBE(0, 3);
        if (len > OUR_MAX_FRAME) throw new Http2ProtocolError(`a frame of ${len} bytes, above our ${OUR_MAX_FRAME}`, ErrorCode.FRAME_SIZE_ERROR);
        if (buf.length < 9 + len) break;
        const type = buf[3]!;
        const flags = buf[4]!;
        const id = buf.readUInt32BE(5) & 0x7fffffff;
        const payload = buf.subarray(9, 9 + len);
        buf = buf.subarray(9 + len);
        this.onFrame(type, flags, id, payload);
      }
      if (buf.length > 0 && !this.destroyed) {
        this.inbox = [buf];
        this.inboxLength = buf.length;
        this.need = buf.length < 9 ? 9 : 9 + buf.readUIntBE(0, 3);
      }
    } catch (err) {
      this.protocolError(err);
    } finally {
      this.socket.uncork();
    }
  }

  private protocolError(err: unknown): void {
    const e = err instanceof Error ? err : new Error(String(err));
    const code = e instanceof Http2ProtocolError ? e.code : e instanceof HpackError ? ErrorCode.COMPRESSION_ERROR : ErrorCode.INTERNAL_ERROR;
    const b = Buffer.alloc(8);
    b.writeUInt32BE(code, 4);
    this.end(e, frame(GOAWAY, 0, 0, b));
  }

  private onFrame(type: number, flags: number, id: number, payload: Buffer): void {
    if (this.continuing && type !== CONTINUATION) throw new Http2ProtocolError(`frame type ${type} inside a header block`);
    if (!this.settingsSeen && type !== SETTINGS) throw new Http2ProtocolError(`frame type ${type} before the server's SETTINGS`);
    switch (type) {
      case DATA:
        return this.onDataFrame(flags, id, payload);
      case HEADERS: {
        let p = payload;
        if (flags & PADDED) p = unpad(p);
        if (flags & PRIORITY) p = p.subarray(5);
        if (flags & END_HEADERS) return this.onHeaderBlock(id, p, (flags & END_STREAM) !== 0);
        this.continuing = { id, end: (flags & END_STREAM) !== 0, parts: [Buffer.from(p)], length: p.length };
        return;
      }
      case CONTINUATION: {
        const c = this.continuing;
        if (!c || c.id !== id) throw new Http2ProtocolError('CONTINUATION without its HEADERS');
        c.parts.push(Buffer.from(payload));
        c.length += payload.length;
        if (c.length > MAX_HEADER_BLOCK) throw new Http2ProtocolError(`a header block above ${MAX_HEADER_BLOCK} bytes`, ErrorCode.ENHANCE_YOUR_CALM);
        if (flags & END_HEADERS) {
          this.continuing = undefined;
          this.onHeaderBlock(id, Buffer.concat(c.parts), c.end);
        }
        return;
      }
      case RST_STREAM: {
        if (payload.length !== 4) throw new Http2ProtocolError('a RST_STREAM not of 4 bytes', ErrorCode.FRAME_SIZE_ERROR);
        const s = this.streams.get(id);
        if (s) this.closeStream(s, payload.readUInt32BE(0), true);
        return;
      }
      case SETTINGS:
        return this.onSettings(flags, id, payload);
      case PUSH_PROMISE:
        throw new Http2ProtocolError('PUSH_PROMISE, though our SETTINGS disabled push');
      case PING:
        if (payload.length !== 8) throw new Http2ProtocolError('a PING not of 8 bytes', ErrorCode.FRAME_SIZE_ERROR);
        if (flags & ACK) this.pings.shift()?.(null);
        else this.socket.write(frame(PING, ACK, 0, payload));
        return;
      case GOAWAY: {
        if (payload.length < 8) throw new Http2ProtocolError('a GOAWAY shorter than 8 bytes', ErrorCode.FRAME_SIZE_ERROR);
        const last = payload.readUInt32BE(0) & 0x7fffffff;
        const code = payload.readUInt32BE(4);
        // Before anyone hears of it: a stream that ends meanwhile must not let a queued one open here.
        this.closing = true;
        this.draining = true;
        this.events.onGoaway(code, last, payload.toString('latin1', 8));
        // The server will not answer streams above its last id: they end now (as refused).
        for (const s of [...this.queued, ...this.streams.values()]) if (s.id === 0 || s.id > last) this.closeStream(s, ErrorCode.REFUSED_STREAM, true);
        if (!this.destroyed && this.streams.size === 0) this.finish();
        return;
      }
      case WINDOW_UPDATE: {
        if (payload.length !== 4) throw new Http2ProtocolError('a WINDOW_UPDATE not of 4 bytes', ErrorCode.FRAME_SIZE_ERROR);
        const n = payload.readUInt32BE(0) & 0x7fffffff;
        if (id === 0) {
          if (n === 0) throw new Http2ProtocolError('a WINDOW_UPDATE of 0 for the connection');
          this.sendWindow += n;
          if (this.sendWindow > MAX_WINDOW) throw new Http2ProtocolError('connection send window above 2^31-1', ErrorCode.FLOW_CONTROL_ERROR);
        } else {
          const s = this.streams.get(id);
          if (!s) return;
          // A stream error (RFC 9113, 6.9): that stream ends, the connection goes on.
          if (n === 0 || s.sendWindow + n > MAX_WINDOW) return this.reset(s, n === 0 ? ErrorCode.PROTOCOL_ERROR : ErrorCode.FLOW_CONTROL_ERROR);
          s.sendWindow += n;
        }
        return this.flushBlocked();
      }
      default:
        return; // PRIORITY and unknown types: ignored
    }
  }

  private onSettings(flags: number, id: number, payload: Buffer): void {
    if (id !== 0) throw new Http2ProtocolError('SETTINGS on a stream');
    if (flags & ACK) return;
    if (payload.length % 6 !== 0) throw new Http2ProtocolError('SETTINGS not a multiple of 6 bytes', ErrorCode.FRAME_SIZE_ERROR);
    for (let i = 0; i < payload.length; i += 6) {
      const key = payload.readUInt16BE(i);
      const value = payload.readUInt32BE(i + 2);
      if (key === 0x3) this.peerMaxStreams = value;
      else if (key === 0x4) {
        if (value > MAX_WINDOW) throw new Http2ProtocolError('INITIAL_WINDOW_SIZE above 2^31-1', ErrorCode.FLOW_CONTROL_ERROR);
        const delta = value - this.peerInitialWindow;
        this.peerInitialWindow = value;
        for (const s of this.streams.values()) {
          s.sendWindow += delta;
          if (s.sendWindow > MAX_WINDOW) throw new Http2ProtocolError('a stream send window above 2^31-1', ErrorCode.FLOW_CONTROL_ERROR);
        }
      } else if (key === 0x5) {
        if (value < DEFAULT_FRAME || value > 0xffffff) throw new Http2ProtocolError(`MAX_FRAME_SIZE ${value}`);
        this.peerMaxFrame = value;
      }
      // HEADER_TABLE_SIZE: our encoder never indexes, so any size suits it. ENABLE_PUSH: for servers.
    }
    this.socket.write(frame(SETTINGS, ACK, 0, Buffer.alloc(0)));
    this.flushBlocked();
    this.openQueued();
    if (!this.settingsSeen) {
      this.settingsSeen = true;
      this.events.onRemoteSettings();
    }
  }

  private onDataFrame(flags: number, id: number, payload: Buffer): void {
    // Flow control counts the whole frame, padding included, even on a stream we closed.
    this.received += payload.length;
    if (this.received >= WINDOW_REFILL) {
      const b = Buffer.alloc(4);
      b.writeUInt32BE(this.received, 0);
      this.received = 0;
      this.socket.write(frame(WINDOW_UPDATE, 0, 0, b));
    }
    const s = this.streams.get(id);
    if (!s) return;
    if (!s.gotHeaders) throw new Http2ProtocolError(`DATA before HEADERS on stream ${id}`);
    s.received += payload.length;
    if (s.received >= WINDOW_REFILL && !(flags & END_STREAM)) {
      const b = Buffer.alloc(4);
      b.writeUInt32BE(s.received, 0);
      s.received = 0;
      this.socket.write(frame(WINDOW_UPDATE, 0, id, b));
    }
    const data = flags & PADDED ? unpad(payload) : payload;
    if (data.length > 0) s.handler.onData(data);
    if (flags & END_STREAM) this.remoteEnd(s);
  }

  private onHeaderBlock(id: number, block: Buffer, end: boolean): void {
    // Decoded even for a stream we closed: the dynamic table must stay in step with the server's.
    const headers = this.decoder.decode(block);
    const s = this.streams.get(id);
    if (!s) return;
    s.gotHeaders = true;
    s.handler.onHeaders(headers, end);
    if (end) this.remoteEnd(s);
  }

  private remoteEnd(s: WireStream): void {
    if (s.closed) return;
    // The server answered before taking the whole request: it wants no more of it.
    if (!s.localDone) return this.reset(s, ErrorCode.NO_ERROR);
    this.closeStream(s, ErrorCode.NO_ERROR, true);
  }
}

function frame(type: number, flags: number, id: number, payload: Buffer): Buffer {
  const b = Buffer.allocUnsafe(9 + payload.length);
  b.writeUIntBE(payload.length, 0, 3);
  b[3] = type;
  b[4] = flags;
  b.writeUInt32BE(id, 5);
  payload.copy(b, 9);
  return b;
}

function unpad(p: Buffer): Buffer {
  if (p.length < 1) throw new Http2ProtocolError('padded frame without its pad length');
  const pad = p[0]!;
  if (pad >= p.length) throw new Http2ProtocolError('padding longer than the frame');
  return p.subarray(1, p.length - pad);
}
