// Loopback servers that misbehave, for test/hostile-server.test.ts: some on node:http2 (valid
// HTTP/2 carrying bad gRPC), some writing raw HTTP/2 frames (bad HTTP/2 itself). Each scenario
// bounds its own loops in count and time and stops when the client goes away.
import * as http2 from 'node:http2';
import * as net from 'node:net';

export interface HostileServer {
  port: number;
  /** Streams (requests) the server saw. */
  streams(): number;
  /** Connections the server accepted. */
  connections(): number;
  close(): Promise<void>;
}

/** Listens on a free loopback port; close() first destroys what is still open (`open`), so it does not wait for it. */
async function listening(
  server: net.Server,
  streams: () => number,
  connections: () => number,
  open: ReadonlySet<{ destroy(): void }>,
): Promise<HostileServer> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    streams,
    connections,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of open) s.destroy();
        server.close(() => resolve());
      }),
  };
}

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
const T = { DATA: 0, HEADERS: 1, RST_STREAM: 3, SETTINGS: 4, PING: 6, GOAWAY: 7, CONTINUATION: 9 } as const;

/** One HTTP/2 frame. */
export function h2frame(type: number, flags: number, stream: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(stream & 0x7fffffff, 5);
  return Buffer.concat([head, payload]);
}

/** HPACK integer with an n-bit prefix, the first byte's high bits given. */
function hpackInt(value: number, prefixBits: number, high: number): Buffer {
  const max = (1 << prefixBits) - 1;
  if (value < max) return Buffer.from([high | value]);
  const out = [high | max];
  let v = value - max;
  while (v >= 128) {
    out.push((v % 128) + 128);
    v = Math.floor(v / 128);
  }
  out.push(v);
  return Buffer.from(out);
}

/** A literal header field without indexing, new name (RFC 7541 6.2.2). */
export function literal(name: string, value: string): Buffer {
  const n = Buffer.from(name);
  const v = Buffer.from(value);
  return Buffer.concat([Buffer.from([0]), hpackInt(n.length, 7, 0), n, hpackInt(v.length, 7, 0), v]);
}

/** A literal header field with incremental indexing, new name (6.2.1): it enters the dynamic table at index 62. */
export function indexedLiteral(name: string, value: string): Buffer {
  const n = Buffer.from(name);
  const v = Buffer.from(value);
  return Buffer.concat([Buffer.from([0x40]), hpackInt(n.length, 7, 0), n, hpackInt(v.length, 7, 0), v]);
}

/** An indexed header field (6.1). */
export function indexed(index: number): Buffer {
  return hpackInt(index, 7, 0x80);
}

/** gRPC's response headers: :status 200 (static index 8) and content-type application/grpc. */
export const GRPC_RESPONSE_HEADERS = Buffer.concat([indexed(8), literal('content-type', 'application/grpc')]);

/**
 * A raw HTTP/2 server: reads the client's preface, sends its SETTINGS (unless `silent`), ACKs the
 * client's, and calls `onRequest(socket, streamId)` for each HEADERS frame of the client.
 */
export async function rawServer(options: {
  silent?: boolean;
  settings?: Buffer;
  onRequest?: (socket: net.Socket, stream: number) => void;
  onConnect?: (socket: net.Socket) => void;
}): Promise<HostileServer> {
  let streams = 0;
  let connections = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    connections++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    let buf = Buffer.alloc(0);
    let prefaceSeen = false;
    if (!options.silent) socket.write(h2frame(T.SETTINGS, 0, 0, options.settings ?? Buffer.alloc(0)));
    options.onConnect?.(socket);
    socket.on('data', (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      if (!prefaceSeen) {
        if (buf.length < PREFACE.length) return;
        buf = buf.subarray(PREFACE.length);
        prefaceSeen = true;
      }
      while (buf.length >= 9) {
        const len = buf.readUIntBE(0, 3);
        if (buf.length < 9 + len) return;
        const type = buf[3]!;
        const flags = buf[4]!;
        const id = buf.readUInt32BE(5) & 0x7fffffff;
        buf = buf.subarray(9 + len);
        if (options.silent) continue;
        if (type === T.SETTINGS && (flags & 1) === 0) socket.write(h2frame(T.SETTINGS, 1, 0));
        if (type === T.HEADERS) {
          streams++;
          options.onRequest?.(socket, id);
        }
      }
    });
  });
  return listening(
    server,
    () => streams,
    () => connections,
    sockets,
  );
}

/** Writes `frames()` while the socket takes them, up to `limit` frames; stops when it closes. */
export function flood(socket: net.Socket, next: () => Buffer, limit: number): void {
  let sent = 0;
  const pump = (): void => {
    while (sent < limit && !socket.destroyed) {
      sent++;
      if (!socket.write(next())) {
        socket.once('drain', pump);
        return;
      }
    }
  };
  pump();
}

/** A gRPC server on node:http2 whose every call `respond` answers. */
export async function grpcServer(
  respond: (stream: http2.ServerHttp2Stream, session: http2.ServerHttp2Session) => void,
  settings: http2.Settings = {},
): Promise<HostileServer> {
  let streams = 0;
  let connections = 0;
  const server = http2.createServer({ settings });
  server.on('connection', () => connections++);
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on('session', (s) => {
    sessions.add(s);
    s.on('close', () => sessions.delete(s));
    s.on('error', () => {});
  });
  server.on('stream', (stream, _headers) => {
    streams++;
    stream.on('error', () => {});
    respond(stream, stream.session as http2.ServerHttp2Session);
  });
  return listening(
    server,
    () => streams,
    () => connections,
    sessions,
  );
}

/** A gRPC message frame: the 5-byte prefix and `body`. */
export function grpcMessage(body: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(body.length, 1);
  return Buffer.concat([head, body]);
}

export const FRAME = T;

/** A whole gRPC answer in raw frames on stream `id`: headers, one empty message, trailers with grpc-status 0. */
export function rawAnswer(id: number): Buffer {
  return Buffer.concat([
    h2frame(T.HEADERS, 4, id, GRPC_RESPONSE_HEADERS),
    h2frame(T.DATA, 0, id, grpcMessage(Buffer.alloc(0))),
    h2frame(T.HEADERS, 5, id, literal('grpc-status', '0')),
  ]);
}

/** GOAWAY naming `lastStream` as the last stream the server processed. */
export function goaway(lastStream: number, code = 0): Buffer {
  const p = Buffer.alloc(8);
  p.writeUInt32BE(lastStream, 0);
  p.writeUInt32BE(code, 4);
  return h2frame(T.GOAWAY, 0, 0, p);
}

/** RST_STREAM on stream `id` with `code`. */
export function rstStream(id: number, code: number): Buffer {
  const p = Buffer.alloc(4);
  p.writeUInt32BE(code, 0);
  return h2frame(T.RST_STREAM, 0, id, p);
}
