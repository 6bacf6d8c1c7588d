// Our own HTTP/2 client framing (src/client/h2/wire.ts, HPACK in h2/hpack.ts), through the lean
// unary transport's H2Channel.unary / H2Channel.call, against node:http2 (nghttp2) servers:
// - flow control when sending: request bodies larger than a 1024-byte stream window and than the
//   65,535-byte connection window, several at once, and across INITIAL_WINDOW_SIZE changes mid-body;
// - flow control when receiving: 20 KB and 5 MB answers, 3 x 5 MB in a row and at once on one
//   connection (the 1 GiB connection-window refill itself is out of reach);
// - the server's MAX_CONCURRENT_STREAMS: never more streams open than it allows, queued calls go in
//   turn (an aborted queued call is never sent), and a limit raised mid-connection;
// - header blocks larger than a frame both ways (our CONTINUATIONs, and nghttp2's), seen on the wire;
// - padded DATA and HEADERS (nghttp2's PADDING_STRATEGY_MAX), seen on the wire;
// - RST_STREAM after the response headers: INTERNAL with the code in the details, as grpc-js says;
// - a GOAWAY that names our stream as processed, then the connection drops: outcome unknown, no retry;
// - cancelling one of several concurrent calls resets only its stream;
// - an idle connection does not hold the process, and close() leaves no socket behind;
// - servers that close before SETTINGS, or speak HTTP/1.1: UNAVAILABLE at once, not a deadline.
// Fake servers, not etcd: etcd cannot be made, on cue, to shrink its windows, cap its streams, pad
// its frames, send 40 KB headers, reset a stream after answering, or not speak HTTP/2. No sleeps:
// each test waits on call promises and server events; every server, channel and socket is closed.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { H2Channel, H2ServiceError } from '../src/client/h2.js';
import * as pb from '../src/proto/etcd.js';

const KV = pb.KVService;
const { NGHTTP2_CANCEL, NGHTTP2_INTERNAL_ERROR, NGHTTP2_NO_ERROR, NGHTTP2_PROTOCOL_ERROR } = http2.constants;
const deadline = (ms = 10_000): number => performance.now() + ms;
const addr = (s: net.Server): string => `127.0.0.1:${(s.address() as net.AddressInfo).port}`;

// Frame types and flags, as the tap below reads them.
const DATA = 0x0;
const HEADERS = 0x1;
const CONTINUATION = 0x9;
const END_HEADERS = 0x4;
const PADDED = 0x8;

/** One request as the server read it, whole. */
interface Req {
  stream: http2.ServerHttp2Stream;
  headers: http2.IncomingHttpHeaders;
  /** The request body: the 5-byte gRPC prefix and the message. */
  body: Buffer;
}

/**
 * An HTTP/2 server on 127.0.0.1 that reads each request whole before `onRequest` sees it;
 * `onStream` (optional) sees each stream as its headers arrive.
 */
async function h2Server(options: http2.ServerOptions, onRequest: (req: Req) => void, onStream?: (stream: http2.ServerHttp2Stream) => void) {
  const server = http2.createServer(options);
  const sessions = new Set<http2.ServerHttp2Session>();
  const sockets: net.Socket[] = [];
  const socketsClosed: Promise<unknown>[] = [];
  const ids: number[] = [];
  let n = 0;
  server.on('connection', (s: net.Socket) => {
    sockets.push(s);
    socketsClosed.push(once(s, 'close'));
  });
  server.on('session', (s) => {
    sessions.add(s);
    s.on('error', () => {});
    s.on('close', () => sessions.delete(s));
  });
  server.on('stream', (stream, headers) => {
    stream.on('error', () => {});
    ids.push(stream.id ?? -1);
    n++;
    onStream?.(stream);
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => onRequest({ stream, headers, body: Buffer.concat(chunks) }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    target: addr(server),
    server,
    /** The TCP connections it accepted. */
    sockets,
    /** The ids of the streams it saw, in order. */
    ids,
    get streams() {
      return n;
    },
    /** Resolves once every connection it accepted so far has closed. */
    allClosed: () => Promise.all(socketsClosed),
    close: () =>
      new Promise<void>((r) => {
        server.close(() => r());
        for (const s of sessions) s.destroy();
      }),
  };
}

/** A plain TCP server whose connections `onSocket` handles; close() destroys them all. */
async function tcpServer(onSocket: (s: net.Socket) => void) {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((s) => {
    sockets.add(s);
    s.on('error', () => {});
    s.on('close', () => sockets.delete(s));
    onSocket(s);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  let accepted = 0;
  server.on('connection', () => accepted++);
  return {
    target: addr(server),
    get accepted() {
      return accepted;
    },
    close: () =>
      new Promise<void>((r) => {
        server.close(() => r());
        for (const s of sockets) s.destroy();
      }),
  };
}

/** One frame seen by frameTap: client to server ('c2s') or back. */
interface Seen {
  dir: 'c2s' | 's2c';
  type: number;
  flags: number;
  length: number;
  id: number;
}

/**
 * A TCP proxy in front of `upstream` that parses the HTTP/2 frames going through it (the client's
 * 24-byte preface skipped), to show what actually crossed the wire.
 */
async function frameTap(upstream: string) {
  const frames: Seen[] = [];
  const [host, port] = [upstream.slice(0, upstream.lastIndexOf(':')), Number(upstream.slice(upstream.lastIndexOf(':') + 1))];
  const parser = (dir: Seen['dir'], skip: number) => {
    let buf = Buffer.alloc(0);
    return (chunk: Buffer): void => {
      buf = Buffer.concat([buf, chunk]);
      if (skip > 0) {
        const n = Math.min(skip, buf.length);
        buf = buf.subarray(n);
        skip -= n;
      }
      while (buf.length >= 9) {
        const length = buf.readUIntBE(0, 3);
        if (buf.length < 9 + length) break;
        frames.push({ dir, type: buf[3]!, flags: buf[4]!, length, id: buf.readUInt32BE(5) & 0x7fffffff });
        buf = buf.subarray(9 + length);
      }
    };
  };
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const up = net.connect(port, host);
    for (const s of [client, up]) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => sockets.delete(s));
    }
    client.on('close', () => up.destroy());
    up.on('close', () => client.destroy());
    client.on('data', parser('c2s', 24));
    up.on('data', parser('s2c', 0));
    client.pipe(up);
    up.pipe(client);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    target: addr(server),
    frames,
    close: () =>
      new Promise<void>((r) => {
        server.close(() => r());
        for (const s of sockets) s.destroy();
      }),
  };
}

/** The 5-byte gRPC prefix (not compressed, length) and the message. */
function grpcFrame(msg: Uint8Array): Buffer {
  const f = Buffer.alloc(5 + msg.length);
  f.writeUInt32BE(msg.length, 1);
  f.set(msg, 5);
  return f;
}

/** A gRPC answer: headers, one message, trailers (each with `extra` headers when given). */
function answer(stream: http2.ServerHttp2Stream, msg: Uint8Array, extra: { headers?: http2.OutgoingHttpHeaders; trailers?: http2.OutgoingHttpHeaders } = {}): void {
  stream.respond({ ':status': 200, 'content-type': 'application/grpc', ...extra.headers }, { waitForTrailers: true });
  stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0', ...extra.trailers }));
  stream.end(grpcFrame(msg));
}

const putResponse = (revision = 7n): Buffer => Buffer.from(pb.PutResponse.encode({ header: { clusterId: 1n, memberId: 2n, revision, raftTerm: 3n } }).finish());
const rangeResponse = (value: Buffer): Buffer => Buffer.from(pb.RangeResponse.encode({ header: { revision: 9n }, kvs: [{ key: Buffer.from('k'), value, modRevision: 9n }], count: 1n }).finish());
/** A request body as we send it: the gRPC prefix and the encoded PutRequest. */
const putBody = (req: pb.PutRequest): Buffer => grpcFrame(KV.put.requestSerialize(req));
/** The raw call() decode: the message's bytes themselves (copied: the transport owns its buffer). */
const bytes = (b: Buffer): Buffer => Buffer.from(b);

async function failure(p: Promise<unknown>): Promise<H2ServiceError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof H2ServiceError, `an H2ServiceError, got ${String(err)}`);
    return err;
  }
  assert.fail('expected the call to fail');
}

/** An async queue: what the server received, taken by the test in order. */
function inbox<T>() {
  const items: T[] = [];
  const takers: ((v: T) => void)[] = [];
  return {
    push(v: T): void {
      const t = takers.shift();
      if (t) t(v);
      else items.push(v);
    },
    take(): Promise<T> {
      if (items.length > 0) return Promise.resolve(items.shift()!);
      return new Promise<T>((r) => takers.push(r));
    },
  };
}

/** A header value of `n` printable characters, varied (so that Huffman coding does not shrink it much). */
function bigValue(n: number): string {
  const chars = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#$%&*+-.^_|~';
  let s = '';
  for (let i = 0; i < n; i++) s += chars[(i * 7919 + (i >> 5)) % chars.length];
  return s;
}

describe('h2 wire: flow control when sending', () => {
  it('a body larger than a 1024-byte stream window arrives whole, and the answer comes back', async () => {
    const got: Buffer[] = [];
    const srv = await h2Server({ settings: { initialWindowSize: 1024 } }, ({ stream, body }) => {
      got.push(body);
      answer(stream, putResponse(BigInt(body.length)));
    });
    const ch = new H2Channel(srv.target);
    try {
      for (const size of [1000, 1024, 5000, 100_000, 300_000]) {
        const req: pb.PutRequest = { key: Buffer.from(`k${size}`), value: randomBytes(size) };
        const res = await ch.unary(KV.put, req, undefined, deadline());
        const sent = putBody(req);
        assert.equal(res.header!.revision, BigInt(sent.length), `the answer to the ${size}-byte body`);
        assert.ok(got.at(-1)!.equals(sent), `the ${size}-byte body arrived intact (${got.at(-1)!.length} of ${sent.length} bytes)`);
      }
      assert.equal(srv.sockets.length, 1, 'one connection');
    } finally {
      ch.close();
      await srv.close();
    }
  });

  it('a 300 KB body, past the 65,535-byte connection window, and three at once sharing it, arrive whole', async () => {
    for (const settings of [{}, { initialWindowSize: 1024 }]) {
      const got = new Map<string, Buffer>();
      const srv = await h2Server({ settings }, ({ stream, headers, body }) => {
        got.set(String(headers['x-id']), body);
        answer(stream, putResponse(BigInt(body.length)));
      });
      const ch = new H2Channel(srv.target);
      try {
        const one: pb.PutRequest = { key: Buffer.from('one'), value: randomBytes(300_000) };
        assert.equal((await ch.unary(KV.put, one, { 'x-id': 'one' }, deadline())).header!.revision, BigInt(putBody(one).length));
        assert.ok(got.get('one')!.equals(putBody(one)), `one 300 KB body intact (${JSON.stringify(settings)})`);
        const reqs = [0, 1, 2].map((i): pb.PutRequest => ({ key: Buffer.from(`k${i}`), value: randomBytes(200_000 + i * 50_000) }));
        const answers = await Promise.all(reqs.map((r, i) => ch.unary(KV.put, r, { 'x-id': String(i) }, deadline())));
        reqs.forEach((r, i) => {
          assert.equal(answers[i]!.header!.revision, BigInt(putBody(r).length));
          assert.ok(got.get(String(i))!.equals(putBody(r)), `concurrent body ${i} intact (${JSON.stringify(settings)})`);
        });
        assert.equal(srv.sockets.length, 1, 'one connection');
      } finally {
        ch.close();
        await srv.close();
      }
    }
  });

  it('a body arrives whole across INITIAL_WINDOW_SIZE changes mid-body (down to 0, then back up)', async () => {
    const got: Buffer[] = [];
    const srv = await h2Server(
      { settings: { initialWindowSize: 1024 } },
      ({ stream, body }) => {
        got.push(body);
        answer(stream, putResponse(BigInt(body.length)));
      },
      // As the headers arrive, the window of the stream (already partly used) shrinks below 0;
      // once our ACK shows that we applied it, it grows again.
      (stream) => stream.session!.settings({ initialWindowSize: 0 }, () => stream.session!.settings({ initialWindowSize: 65535 })),
    );
    const ch = new H2Channel(srv.target);
    try {
      const req: pb.PutRequest = { key: Buffer.from('k'), value: randomBytes(200_000) };
      const res = await ch.unary(KV.put, req, undefined, deadline());
      assert.equal(res.header!.revision, BigInt(putBody(req).length));
      assert.ok(got[0]!.equals(putBody(req)), 'the body arrived intact');
    } finally {
      ch.close();
      await srv.close();
    }
  });
});

describe('h2 wire: flow control when receiving', () => {
  it('answers of 20 KB and 5 MB (a RangeResponse value) decode', async () => {
    const values = new Map<string, Buffer>();
    const srv = await h2Server({}, ({ stream, headers }) => answer(stream, rangeResponse(values.get(String(headers['x-size']))!)));
    const ch = new H2Channel(srv.target);
    try {
      for (const size of [20_000, 5 * 1024 * 1024]) {
        values.set(String(size), randomBytes(size));
        const res = await ch.unary(KV.range, { key: Buffer.from('k') }, { 'x-size': String(size) }, deadline());
        assert.equal(res.count, 1n);
        assert.equal(res.kvs!.length, 1);
        assert.equal(res.kvs![0]!.value!.length, size);
        assert.ok(res.kvs![0]!.value!.equals(values.get(String(size))!), `the ${size}-byte value intact`);
      }
    } finally {
      ch.close();
      await srv.close();
    }
  });

  it('3 x 5 MB in a row, then 3 x 5 MB at once, on one connection (raw call(): the message bytes)', async () => {
    const sent = new Map<string, Buffer>();
    // Room for 15 MB in flight: node's server refuses new streams (ENHANCE_YOUR_CALM) past its default 10 MB.
    const srv = await h2Server({ maxSessionMemory: 64 }, ({ stream, headers }) => {
      const msg = randomBytes(5 * 1024 * 1024);
      sent.set(String(headers['x-id']), msg);
      answer(stream, msg);
    });
    const ch = new H2Channel(srv.target);
    try {
      for (const id of ['a', 'b', 'c']) {
        const got = await ch.call(KV.range.path, Buffer.alloc(0), bytes, { 'x-id': id }, deadline());
        assert.ok(got.equals(sent.get(id)!), `answer ${id} intact (${got.length} bytes)`);
      }
      const ids = ['d', 'e', 'f'];
      const got = await Promise.all(ids.map((id) => ch.call(KV.range.path, Buffer.alloc(0), bytes, { 'x-id': id }, deadline())));
      ids.forEach((id, i) => assert.ok(got[i]!.equals(sent.get(id)!), `concurrent answer ${id} intact (${got[i]!.length} bytes)`));
      assert.equal(srv.sockets.length, 1, 'one connection');
      assert.deepEqual(srv.ids, [1, 3, 5, 7, 9, 11]);
    } finally {
      ch.close();
      await srv.close();
    }
  });
});

describe("h2 wire: the server's MAX_CONCURRENT_STREAMS", () => {
  it('limit 1: calls go one at a time, in order, all succeed; an aborted queued call is never sent', async () => {
    let open = 0;
    let most = 0;
    const arrived = inbox<Req>();
    const srv = await h2Server({ settings: { maxConcurrentStreams: 1 } }, (r) => arrived.push(r), (stream) => {
      most = Math.max(most, ++open);
      stream.on('close', () => open--);
    });
    const ch = new H2Channel(srv.target);
    try {
      const ac = new AbortController();
      const calls = [0, 1, 2, 3].map((i) => ch.unary(KV.put, { key: Buffer.from(`k${i}`) }, { 'x-n': String(i) }, deadline(), i === 1 ? ac.signal : undefined));
      const aborted = failure(calls[1]!);
      // Held until released: by the time the first stream arrives, the other three are queued on our side.
      const first = await arrived.take();
      assert.equal(first.headers['x-n'], '0');
      ac.abort();
      const err = await aborted;
      assert.equal(err.code, grpc.status.CANCELLED);
      answer(first.stream, putResponse(0n));
      for (const n of ['2', '3']) {
        const r = await arrived.take();
        assert.equal(r.headers['x-n'], n, 'the next queued call');
        answer(r.stream, putResponse(BigInt(n)));
      }
      const done = await Promise.all([calls[0]!, calls[2]!, calls[3]!]);
      assert.deepEqual(done.map((r) => r.header!.revision), [0n, 2n, 3n]);
      assert.equal(most, 1, 'never more than one stream open at the server');
      // Consecutive ids: no stream was refused (and retried), and the aborted one never went out.
      assert.deepEqual(srv.ids, [1, 3, 5]);
      assert.equal(srv.sockets.length, 1);
    } finally {
      ch.close();
      await srv.close();
    }
  });

  it(
    'a limit raised mid-connection (1, then 3) opens the queued streams at once',
    async () => {
      const arrived = inbox<Req>();
      const srv = await h2Server({ settings: { maxConcurrentStreams: 1 } }, (r) => arrived.push(r));
      const ch = new H2Channel(srv.target);
      try {
        const held = ch.unary(KV.put, { key: Buffer.from('a') }, { 'x-n': 'a' }, deadline());
        held.catch(() => {});
        const first = await arrived.take();
        // Queued on our side behind the held stream; a short deadline is only a hang guard.
        const queued = ['b', 'c'].map((n) => ch.unary(KV.put, { key: Buffer.from(n) }, { 'x-n': n }, deadline(3000)));
        for (const q of queued) q.catch(() => {});
        await new Promise<void>((r) => first.stream.session!.settings({ maxConcurrentStreams: 3 }, () => r()));
        const outcome = await Promise.race([
          Promise.all([arrived.take(), arrived.take()]),
          Promise.allSettled(queued).then((s) => s.map((x) => (x.status === 'rejected' ? String((x.reason as Error).message) : 'ok')).join('; ')),
        ]);
        answer(first.stream, putResponse(1n));
        assert.ok(Array.isArray(outcome), `the queued streams should open while the first is held; instead the calls ended: ${String(outcome)}`);
        for (const r of outcome) answer(r.stream, putResponse(2n));
        await Promise.all([held, ...queued]);
      } finally {
        ch.close();
        await srv.close();
      }
    },
  );
});

describe('h2 wire: header blocks larger than a frame', () => {
  it('a 40 KB request header goes out in CONTINUATION frames and arrives intact', async () => {
    const big = bigValue(40_000);
    const seen: string[] = [];
    const srv = await h2Server({ settings: { maxHeaderListSize: 1 << 20 } }, ({ stream, headers }) => {
      seen.push(String(headers['x-big']));
      answer(stream, putResponse(BigInt(String(headers['x-big']).length)));
    });
    const tap = await frameTap(srv.target);
    const ch = new H2Channel(tap.target);
    try {
      for (let i = 0; i < 3; i++) {
        const res = await ch.unary(KV.put, { key: Buffer.from('k') }, { 'x-big': big, 'x-after': 'tail' }, deadline());
        assert.equal(res.header!.revision, BigInt(big.length));
        assert.equal(seen[i], big, `request ${i}: the header arrived intact`);
      }
      const ours = tap.frames.filter((f) => f.dir === 'c2s' && (f.type === HEADERS || f.type === CONTINUATION) && f.id === 1);
      assert.ok(ours.length >= 3, `HEADERS and CONTINUATIONs: ${JSON.stringify(ours)}`);
      assert.equal(ours[0]!.type, HEADERS);
      assert.ok(ours.slice(1).every((f) => f.type === CONTINUATION));
      assert.deepEqual(ours.map((f) => (f.flags & END_HEADERS) !== 0), [...ours.slice(1).map(() => false), true], 'END_HEADERS on the last one only');
      assert.ok(ours.every((f) => f.length <= 16384), 'none above the default frame size');
    } finally {
      ch.close();
      await tap.close();
      await srv.close();
    }
  });

  it("40 KB response headers and trailers (nghttp2's CONTINUATIONs) decode, in answers, errors and trailers-only", async () => {
    const big = bigValue(40_000);
    const srv = await h2Server({ maxSendHeaderBlockLength: 1 << 20 }, ({ stream, headers }) => {
      const which = String(headers['x-case']);
      if (which === 'ok') answer(stream, putResponse(), { headers: { 'x-big-header': big }, trailers: { 'x-big-trailer': big } });
      else if (which === 'error') answer(stream, putResponse(), { trailers: { 'grpc-status': '9', 'grpc-message': 'no', 'x-big': big } });
      else if (which === 'only') stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '5', 'grpc-message': 'gone', 'x-big': big }, { endStream: true });
      else answer(stream, putResponse(1n), { headers: { 'x-small': 's' }, trailers: { 'x-small-trailer': 't' } });
    });
    const tap = await frameTap(srv.target);
    const ch = new H2Channel(tap.target);
    try {
      for (let round = 0; round < 2; round++) {
        assert.equal((await ch.unary(KV.put, {}, { 'x-case': 'ok' }, deadline())).header!.revision, 7n);
        const e1 = await failure(ch.unary(KV.put, {}, { 'x-case': 'error' }, deadline()));
        assert.equal(e1.code, 9);
        assert.equal(e1.details, 'no');
        assert.deepEqual(e1.metadata.get('x-big'), [big], 'a 40 KB trailer');
        const e2 = await failure(ch.unary(KV.put, {}, { 'x-case': 'only' }, deadline()));
        assert.equal(e2.code, 5);
        assert.equal(e2.details, 'gone');
        assert.deepEqual(e2.metadata.get('x-big'), [big], 'a 40 KB header of a trailers-only answer');
        // The dynamic table is still in step with the server's.
        assert.equal((await ch.unary(KV.put, {}, { 'x-case': 'small' }, deadline())).header!.revision, 1n);
      }
      const theirs = tap.frames.filter((f) => f.dir === 's2c' && f.type === CONTINUATION);
      assert.ok(theirs.length >= 6, `the server sent CONTINUATIONs: ${theirs.length}`);
      assert.equal(srv.sockets.length, 1, 'one connection throughout');
    } finally {
      ch.close();
      await tap.close();
      await srv.close();
    }
  });
});

describe('h2 wire: padding', () => {
  it('padded DATA and HEADERS (PADDING_STRATEGY_MAX) decode, repeatedly', async () => {
    const srv = await h2Server({ paddingStrategy: http2.constants.PADDING_STRATEGY_MAX }, ({ stream, headers }) => {
      const size = Number(headers['x-size']);
      if (size < 0) return stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '3', 'grpc-message': 'padded' }, { endStream: true });
      answer(stream, rangeResponse(Buffer.alloc(size, size % 251)), { trailers: { 'x-t': 'trailer' } });
    });
    const tap = await frameTap(srv.target);
    const ch = new H2Channel(tap.target);
    try {
      for (let round = 0; round < 3; round++) {
        for (const size of [0, 1, 100, 16_000, 70_000, 300_000]) {
          const res = await ch.unary(KV.range, { key: Buffer.from('k') }, { 'x-size': String(size) }, deadline());
          assert.ok((res.kvs![0]!.value ?? Buffer.alloc(0)).equals(Buffer.alloc(size, size % 251)), `round ${round}, ${size} bytes`);
        }
        const e = await failure(ch.unary(KV.range, { key: Buffer.from('k') }, { 'x-size': '-1' }, deadline()));
        assert.equal(e.code, 3);
        assert.equal(e.details, 'padded');
      }
      const padded = tap.frames.filter((f) => f.dir === 's2c' && (f.flags & PADDED) !== 0);
      assert.ok(
        padded.some((f) => f.type === DATA),
        'the server padded DATA frames',
      );
      assert.ok(
        padded.some((f) => f.type === HEADERS),
        'the server padded HEADERS frames',
      );
    } finally {
      ch.close();
      await tap.close();
      await srv.close();
    }
  });
});

describe('h2 wire: RST_STREAM after the response headers', () => {
  it('INTERNAL with the RST_STREAM code in the details, as grpc-js reports it', async () => {
    const half = grpcFrame(putResponse()).subarray(0, 8);
    // How node's server can reset a stream it answered. (stream.close(code) alone ends the stream
    // first, an empty DATA with END_STREAM, so the RST_STREAM that follows is moot: the last case.)
    const cases: { name: string; act: (s: http2.ServerHttp2Stream) => void; rst: number; details: string }[] = [
      {
        name: 'destroy(err) right after the headers: RST_STREAM INTERNAL_ERROR',
        act: (s) => {
          s.respond({ ':status': 200, 'content-type': 'application/grpc' });
          s.destroy(new Error('boom'));
        },
        rst: NGHTTP2_INTERNAL_ERROR,
        details: 'Received RST_STREAM with code 2 (Internal server error)',
      },
      {
        name: 'a whole message, then RST_STREAM INTERNAL_ERROR instead of trailers',
        act: (s) => resetInsteadOfTrailers(s, grpcFrame(putResponse()), NGHTTP2_INTERNAL_ERROR),
        rst: NGHTTP2_INTERNAL_ERROR,
        details: 'Received RST_STREAM with code 2 (Internal server error)',
      },
      {
        name: 'half a message, then RST_STREAM PROTOCOL_ERROR',
        act: (s) => resetInsteadOfTrailers(s, half, NGHTTP2_PROTOCOL_ERROR),
        rst: NGHTTP2_PROTOCOL_ERROR,
        details: 'Received RST_STREAM with code 1',
      },
      {
        name: 'half a message, then RST_STREAM NO_ERROR',
        act: (s) => s.write(half, () => s.destroy()),
        rst: NGHTTP2_NO_ERROR,
        details: 'Received RST_STREAM with code 0 (Call ended without gRPC status)',
      },
      {
        name: 'close(INTERNAL_ERROR) right after the headers: END_STREAM without a status, then the RST_STREAM',
        act: (s) => {
          s.respond({ ':status': 200, 'content-type': 'application/grpc' });
          s.close(NGHTTP2_INTERNAL_ERROR);
        },
        rst: NGHTTP2_NO_ERROR,
        details: 'Received RST_STREAM with code 0 (Call ended without gRPC status)',
      },
    ];
    /** Headers and `data` without END_STREAM (trailers pending), then RST_STREAM `code`. */
    function resetInsteadOfTrailers(s: http2.ServerHttp2Stream, data: Buffer, code: number): void {
      s.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      s.on('wantTrailers', () => s.close(code));
      s.end(data);
    }
    let current = cases[0]!;
    const srv = await h2Server({}, ({ stream }) => current.act(stream));
    const ch = new H2Channel(srv.target);
    const gc = new grpc.Client(srv.target, grpc.credentials.createInsecure());
    const viaGrpc = (): Promise<grpc.ServiceError> =>
      new Promise((resolve, reject) => {
        gc.makeUnaryRequest(KV.put.path, KV.put.requestSerialize, KV.put.responseDeserialize, {}, new grpc.Metadata(), { deadline: Date.now() + 10_000 }, (err) =>
          err ? resolve(err) : reject(new Error('grpc-js: expected a failure')),
        );
      });
    try {
      for (const c of cases) {
        current = c;
        const eh = await failure(ch.unary(KV.put, {}, undefined, deadline()));
        assert.equal(eh.code, grpc.status.INTERNAL, c.name);
        assert.equal(eh.details, c.details, c.name);
        assert.equal(eh.rstCode, c.rst, c.name);
        assert.equal(eh.notSent, false, `${c.name}: the server had the request`);
        const eg = await viaGrpc();
        assert.deepEqual({ code: eh.code, details: eh.details, message: eh.message }, { code: eg.code, details: eg.details, message: eg.message }, `${c.name}: as grpc-js`);
      }
      // Stream resets leave the connections up.
      assert.equal(srv.sockets.length, 2, 'one connection for ours, one for grpc-js');
    } finally {
      ch.close();
      gc.close();
      await srv.close();
    }
  });
});

describe('h2 wire: a GOAWAY that covers our stream, then the connection drops', () => {
  it(
    'UNAVAILABLE "Connection dropped" as grpc-js, outcome unknown: the server had the request, which is not retried',
    async () => {
      /** Requests to drop (set before each client's call); after those, a retry, which should never come: answered, so that it shows. */
      let drop = 0;
      const srv = await h2Server({}, ({ stream }) => {
        if (drop-- <= 0) return answer(stream, putResponse(99n));
        // GOAWAY naming our stream as processed, then (once our PING ACK shows the client read it) the connection drops.
        const session = stream.session!;
        session.goaway(NGHTTP2_NO_ERROR, stream.id!);
        session.ping(() => srv.sockets.at(-1)!.destroy());
      });
      const ch = new H2Channel(srv.target);
      const gc = new grpc.Client(srv.target, grpc.credentials.createInsecure());
      try {
        drop = 1;
        const eg = await new Promise<grpc.ServiceError>((resolve, reject) =>
          gc.makeUnaryRequest(KV.put.path, KV.put.requestSerialize, KV.put.responseDeserialize, {}, new grpc.Metadata(), { deadline: Date.now() + 10_000 }, (err) =>
            err ? resolve(err) : reject(new Error('grpc-js: expected a failure')),
          ),
        );
        assert.equal(eg.code, grpc.status.UNAVAILABLE);
        assert.equal(eg.details, 'Connection dropped');
        assert.equal(srv.streams, 1, 'grpc-js did not retry');
        drop = 1;
        const eh = await ch.unary(KV.put, {}, undefined, deadline()).then(
          (r) => assert.fail(`retried transparently: answered by the retry (revision ${r.header?.revision}); the server saw the request ${srv.streams - 1} times`),
          (e: unknown) => e as H2ServiceError,
        );
        assert.ok(eh instanceof H2ServiceError, String(eh));
        assert.equal(eh.code, grpc.status.UNAVAILABLE, eh.message);
        assert.equal(eh.notSent, false, `the server had the request: ${eh.message}`);
        assert.equal(srv.streams, 2, 'the server saw our request once');
      } finally {
        ch.close();
        gc.close();
        await srv.close();
      }
    },
  );
});

describe('h2 wire: cancelling one of several calls', () => {
  it('resets only its stream: the others on the connection succeed, the server sees the reset', async () => {
    const arrived = inbox<Req>();
    const srv = await h2Server({}, (r) => arrived.push(r));
    const ch = new H2Channel(srv.target);
    try {
      const ac = new AbortController();
      const calls = [0, 1, 2].map((i) => ch.unary(KV.put, { key: Buffer.from(`k${i}`) }, { 'x-n': String(i) }, deadline(), i === 1 ? ac.signal : undefined));
      const aborted = failure(calls[1]!);
      const reqs = new Map<string, Req>();
      for (let i = 0; i < 3; i++) {
        const r = await arrived.take();
        reqs.set(String(r.headers['x-n']), r);
      }
      const victim = reqs.get('1')!.stream;
      const closed = once(victim, 'close');
      ac.abort();
      const err = await aborted;
      assert.equal(err.code, grpc.status.CANCELLED);
      assert.equal(err.details, 'Cancelled on client');
      await closed;
      assert.equal(victim.rstCode, NGHTTP2_CANCEL, 'RST_STREAM CANCEL reached the server');
      for (const n of ['0', '2']) {
        assert.equal(reqs.get(n)!.stream.closed, false, `stream ${n} still open`);
        answer(reqs.get(n)!.stream, putResponse(BigInt(n)));
      }
      const [r0, r2] = await Promise.all([calls[0]!, calls[2]!]);
      assert.deepEqual([r0.header!.revision, r2.header!.revision], [0n, 2n]);
      // And the connection takes new calls.
      const next = ch.unary(KV.put, {}, { 'x-n': '3' }, deadline());
      answer((await arrived.take()).stream, putResponse(3n));
      assert.equal((await next).header!.revision, 3n);
      assert.equal(srv.sockets.length, 1, 'one connection throughout');
    } finally {
      ch.close();
      await srv.close();
    }
  });
});

describe('h2 wire: idle connections and close()', () => {
  /** Sockets that keep the event loop alive (unref'd ones are not listed). */
  const refSockets = (): number => process.getActiveResourcesInfo().filter((t) => t === 'TCPSocketWrap').length;

  it("the connection is unref'd while idle, ref'd while a call is in flight; close() leaves no socket", async () => {
    const arrived = inbox<Req>();
    const srv = await h2Server({}, (r) => {
      if (r.headers['x-hold']) arrived.push(r);
      else answer(r.stream, putResponse());
    });
    // The server's side of the connection must not count: only ours.
    srv.server.on('connection', (s: net.Socket) => s.unref());
    const ch = new H2Channel(srv.target);
    try {
      await ch.unary(KV.put, {}, undefined, deadline());
      const idle = refSockets();
      const held = ch.unary(KV.put, {}, { 'x-hold': '1' }, deadline());
      const r = await arrived.take();
      assert.equal(refSockets(), idle + 1, "ref'd while a call is in flight");
      answer(r.stream, putResponse());
      await held;
      assert.equal(refSockets(), idle, "unref'd once idle again");
      assert.equal(srv.sockets.length, 1, 'the connection stayed up');
      ch.close();
      await srv.allClosed();
      assert.equal(ch.isReady, false);
      const e = await failure(ch.unary(KV.put, {}, undefined, deadline()));
      assert.equal(e.code, grpc.status.UNAVAILABLE);
      assert.equal(e.notSent, true);
    } finally {
      ch.close();
      await srv.close();
    }
  });

  it('close() with a call in flight: the call finishes, then the connection closes', async () => {
    const arrived = inbox<Req>();
    const srv = await h2Server({}, (r) => arrived.push(r));
    const ch = new H2Channel(srv.target);
    try {
      const held = ch.unary(KV.put, {}, undefined, deadline());
      const r = await arrived.take();
      ch.close();
      const late = await failure(ch.unary(KV.put, {}, undefined, deadline()));
      assert.equal(late.code, grpc.status.UNAVAILABLE);
      assert.equal(r.stream.closed, false, 'the call in flight is left alone');
      answer(r.stream, putResponse(5n));
      assert.equal((await held).header!.revision, 5n);
      await srv.allClosed();
      assert.equal(srv.sockets.length, 1);
    } finally {
      ch.close();
      await srv.close();
    }
  });
});

describe('h2 wire: servers that are not (yet) HTTP/2', () => {
  it('a server that closes the connection at once: UNAVAILABLE, not sent', async () => {
    const srv = await tcpServer((s) => s.destroy());
    // A dial timeout beyond the deadline: a hang would show as DEADLINE_EXCEEDED, not pass as UNAVAILABLE.
    const ch = new H2Channel(srv.target, { dialTimeoutMs: 30_000 });
    try {
      const e = await failure(ch.unary(KV.put, {}, undefined, deadline(5000)));
      assert.equal(e.code, grpc.status.UNAVAILABLE, e.message);
      assert.equal(e.notSent, true);
      assert.match(e.details, /^No connection established/);
      assert.equal(srv.accepted, 2, 'tried, and retried once');
    } finally {
      ch.close();
      await srv.close();
    }
  });

  it('a server speaking HTTP/1.1: UNAVAILABLE at once, not a deadline', async () => {
    const ends = await tcpServer((s) => s.end('HTTP/1.1 400 Bad Request\r\n\r\n'));
    const stays = await tcpServer((s) => s.write('HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n'));
    const h1 = http.createServer((_req, res) => res.end('not h2'));
    await new Promise<void>((r) => h1.listen(0, '127.0.0.1', r));
    const targets = [
      ['a 400 and the end', ends.target],
      ['a 400, the connection left open', stays.target],
      ['node:http', addr(h1)],
    ] as const;
    const channels: H2Channel[] = [];
    try {
      for (const [what, target] of targets) {
        // A dial timeout beyond the deadline: a hang would show as DEADLINE_EXCEEDED, not pass as UNAVAILABLE.
        const ch = new H2Channel(target, { dialTimeoutMs: 30_000 });
        channels.push(ch);
        const e = await failure(ch.unary(KV.put, {}, undefined, deadline(5000)));
        assert.equal(e.code, grpc.status.UNAVAILABLE, `${what}: ${e.message}`);
        assert.equal(e.notSent, true, what);
        assert.match(e.details, /^No connection established/, what);
        assert.doesNotMatch(e.details, /no connection within/, `${what}: refused by the protocol check, not the dial timeout`);
      }
    } finally {
      for (const ch of channels) ch.close();
      h1.closeAllConnections();
      await Promise.all([ends.close(), stays.close(), new Promise((r) => h1.close(r))]);
    }
  });
});
