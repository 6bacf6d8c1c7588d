// H2Stream (src/client/h2.ts), the h2 transport's bidirectional gRPC stream (Watch, LeaseKeepAlive),
// opened by H2Channel.stream() on our own HTTP/2 framing (src/client/h2/wire.ts). Covered:
// - messages both ways on fake node:http2 servers speaking gRPC framing: one 'data' event per
//   message, decoded, in order, whether a DATA frame packs two messages, a message (even its 5-byte
//   prefix) is split across frames, a message is empty, or larger than a frame (WatchResponses of
//   40 KB to 2 MB; a 100 KB request past the server's stream window);
// - 2,000 messages each way on one stream, small ones and ones past the flow-control windows;
// - the end: trailers grpc-status 0 give 'end'; grpc-status 16 'etcdserver: invalid auth token'
//   gives 'error', an H2ServiceError that errors.ts's isServiceError and isStaleToken accept (as
//   lease.ts and watch.ts rely on), with the trailer metadata; trailers-only, OK and not;
// - cancel(): RST_STREAM CANCEL reaches the server, no event after it (even with data in flight or
//   in the same DATA frame, and from inside a 'data' listener), write() false after it;
// - the connection dies under an open stream (socket destroyed): 'error' UNAVAILABLE, with or without
//   an 'error' listener;
// - connection.ts's closeStream() on an H2Stream: listeners gone, no unhandled 'error', reset sent;
// - no ready connection (never connected, closed): 'error' UNAVAILABLE on the next tick, no throw,
//   and an 'error' nobody listens to is dropped, not thrown;
// - keepalive: pings run while only a stream is open; an unanswered one (a black-holed proxy) ends
//   the stream UNAVAILABLE;
// - the server's MAX_CONCURRENT_STREAMS (a stream waits, its writes kept; cancelled while waiting,
//   never sent) and a GOAWAY naming the stream (it goes on, the connection closes after it);
// - side by side with grpc-js on a fake server: RST_STREAM codes, and a message above the send limit
//   (reported after write() returns);
// - a real etcd: a Watch stream sees its 'created' answer and the event of a Put made through a unary
//   call on the same channel, a LeaseKeepAlive stream renews a granted lease; both compared with
//   what @grpc/grpc-js's makeBidiStreamRequest receives for the same sequence.
// No sleeps or timed assertions: tests wait on stream and server events, and "nothing more came" is
// proved by a server PING round trip (its ACK follows every byte the server sent before it). Every
// server, channel and socket is closed.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import http2 from 'node:http2';
import type net from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { H2Channel, H2ServiceError, type H2ChannelOptions, type H2Stream, type H2StreamMethod } from '../src/client/h2.js';
import { closeStream } from '../src/client/connection.js';
import { isServiceError, isStaleToken } from '../src/client/errors.js';
import * as pb from '../src/proto/etcd.js';
import { startEtcd, startProxy, type EtcdCluster } from '../src/testing/index.js';

const KA = pb.LeaseService.leaseKeepAlive;
const WATCH = pb.WatchService.watch;
const { NGHTTP2_CANCEL, NGHTTP2_ENHANCE_YOUR_CALM, NGHTTP2_INADEQUATE_SECURITY, NGHTTP2_INTERNAL_ERROR, NGHTTP2_PROTOCOL_ERROR } = http2.constants;
const deadline = (ms = 5000): number => performance.now() + ms;
const tick = (): Promise<void> => new Promise((r) => setImmediate(r));
const enc = (s: string): Buffer => Buffer.from(s);

/** One gRPC message on the wire: flag 0, a 32-bit big-endian length, the message. */
function framed(body: Uint8Array): Buffer {
  const b = Buffer.alloc(5 + body.length);
  b.writeUInt32BE(body.length, 1);
  b.set(body, 5);
  return b;
}
const kaRes = (id: bigint, ttl = id * 10n): Buffer => framed(KA.responseSerialize({ ID: id, TTL: ttl }));

/** Feeds chunks, calls `onMessage` with each whole message (without its prefix). */
function grpcReader(onMessage: (m: Buffer) => void): (chunk: Buffer) => void {
  let buf = Buffer.alloc(0);
  return (chunk) => {
    buf = Buffer.concat([buf, chunk]);
    while (buf.length >= 5 && buf.length >= 5 + buf.readUInt32BE(1)) {
      const len = buf.readUInt32BE(1);
      onMessage(buf.subarray(5, 5 + len));
      buf = buf.subarray(5 + len);
    }
  };
}

/** An async FIFO: push values, await them in order. */
class Queue<T> {
  readonly items: T[] = [];
  private taken = 0;
  private waiters: (() => void)[] = [];
  push(v: T): void {
    this.items.push(v);
    for (const w of this.waiters.splice(0)) w();
  }
  /** The next value not taken yet. */
  async next(): Promise<T> {
    while (this.items.length <= this.taken) await new Promise<void>((r) => this.waiters.push(r));
    return this.items[this.taken++]!;
  }
  /** Resolves once `n` values were pushed in all. */
  async count(n: number): Promise<void> {
    while (this.items.length < n) await new Promise<void>((r) => this.waiters.push(r));
  }
}

/** A stream as the fake server sees it. */
interface ServerCall {
  stream: http2.ServerHttp2Stream;
  headers: http2.IncomingHttpHeaders;
  session: http2.ServerHttp2Session;
  /** The request messages, prefix removed, as they arrive. */
  requests: Queue<Buffer>;
  /** The RST_STREAM code the stream closed with (0 when it ended normally). */
  closed: Promise<number>;
}

/** A node:http2 server on 127.0.0.1 whose streams queue up in `calls`; it counts the PINGs it gets. */
async function grpcServer(options: http2.ServerOptions = {}) {
  const server = http2.createServer(options);
  const calls = new Queue<ServerCall>();
  const sockets: net.Socket[] = [];
  const sessions = new Set<http2.ServerHttp2Session>();
  const pings = new Queue<void>();
  server.on('connection', (s: net.Socket) => {
    sockets.push(s);
    s.on('error', () => {});
  });
  server.on('session', (s) => {
    sessions.add(s);
    s.on('error', () => {});
    s.on('close', () => sessions.delete(s));
    s.on('ping', () => pings.push());
  });
  server.on('stream', (stream, headers) => {
    stream.on('error', () => {});
    const requests = new Queue<Buffer>();
    stream.on('data', grpcReader((m) => requests.push(Buffer.from(m))));
    const closed = new Promise<number>((r) => stream.on('close', () => r(stream.rstCode)));
    calls.push({ stream, headers, session: stream.session as http2.ServerHttp2Session, requests, closed });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    target: `127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    calls,
    sockets,
    pings,
    close: () =>
      new Promise<void>((r) => {
        server.close(() => r());
        for (const s of sessions) s.destroy();
        for (const s of sockets) s.destroy();
      }),
  };
}

/** Response headers that leave the stream open for messages and trailers. */
function respond(stream: http2.ServerHttp2Stream): void {
  stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
}

/** Ends a responded stream with `trailers`. */
function endWith(stream: http2.ServerHttp2Stream, trailers: Record<string, string>): void {
  stream.once('wantTrailers', () => stream.sendTrailers(trailers));
  stream.end();
}

/** Writes `data` on the server stream; resolves once node handed it on. */
function write(stream: http2.ServerHttp2Stream, data: Buffer): Promise<void> {
  return new Promise((r, j) => stream.write(data, (err) => (err ? j(err) : r())));
}

/**
 * Resolves once the client answered a PING the server sent now: by then the client has read every
 * byte the server wrote before it (one TCP connection, frames handled in order).
 */
function roundTrip(session: http2.ServerHttp2Session): Promise<void> {
  return new Promise((r, j) => {
    session.ping((err) => (err ? j(err) : r()));
  });
}

type Ev<Res> = { type: 'data'; value: Res } | { type: 'error'; err: H2ServiceError } | { type: 'end' };

/** Every event of `s`, in order, with ways to wait for them. */
function record<Req, Res>(s: H2Stream<Req, Res>) {
  const events: Ev<Res>[] = [];
  const values: Res[] = [];
  const waiters: { pred: () => boolean; resolve: () => void }[] = [];
  const push = (e: Ev<Res>): void => {
    events.push(e);
    if (e.type === 'data') values.push(e.value);
    for (const w of [...waiters]) {
      if (w.pred()) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
    }
  };
  s.on('data', (value: Res) => push({ type: 'data', value }));
  s.on('error', (err: H2ServiceError) => push({ type: 'error', err }));
  s.on('end', () => push({ type: 'end' }));
  const data = (): Res[] => values;
  const until = (pred: () => boolean): Promise<void> => (pred() ? Promise.resolve() : new Promise((resolve) => waiters.push({ pred, resolve })));
  return {
    events,
    data,
    /** Resolves once `n` messages arrived. */
    messages: (n: number) => until(() => data().length >= n),
    /** The event that ended the stream ('error' or 'end'), once it came. */
    settled: async (): Promise<Ev<Res>> => {
      await until(() => events.some((e) => e.type !== 'data'));
      return events.find((e) => e.type !== 'data')!;
    },
    types: () => events.map((e) => e.type),
  };
}

/** Records each DATA frame's payload the stream is handed (wire.ts calls onData once per frame). */
function tapFrames<Req, Res>(s: H2Stream<Req, Res>): Queue<Buffer> {
  const frames = new Queue<Buffer>();
  const onData = s.onData.bind(s);
  s.onData = (chunk: Buffer) => {
    frames.push(Buffer.from(chunk));
    onData(chunk);
  };
  return frames;
}

/** Resolves once the frames recorded from index `from` on carry `bytes` bytes in all. */
async function framesCarry(frames: Queue<Buffer>, from: number, bytes: number): Promise<void> {
  for (;;) {
    if (frames.items.slice(from).reduce((n, f) => n + f.length, 0) >= bytes) return;
    await frames.count(frames.items.length + 1);
  }
}

/** A channel connected to `target`, with its stream on `method`, and the server's view of it. */
async function open<Req, Res>(srv: Awaited<ReturnType<typeof grpcServer>>, method: H2StreamMethod<Req, Res>, options?: H2ChannelOptions, md?: Record<string, string>) {
  const ch = new H2Channel(srv.target, options);
  await ch.connect(deadline());
  const s = ch.stream(method, md);
  const rec = record(s);
  const frames = tapFrames(s);
  const call = await srv.calls.next();
  return { ch, s, rec, frames, call };
}

/** A big WatchResponse: one PUT event whose value is `size` random bytes. */
function bigWatchResponse(watchId: bigint, size: number): pb.WatchResponse {
  return {
    header: { clusterId: 1n, memberId: 2n, revision: 3n + watchId, raftTerm: 4n },
    watchId,
    events: [{ type: pb.Event_EventType.PUT, kv: { key: enc(`k${watchId}`), value: randomBytes(size), createRevision: 2n, modRevision: 3n, version: 1n } }],
  };
}

describe('H2Stream on a fake gRPC server: messages', () => {
  it('one decoded data event per message, in order: packed in one frame, split across frames (prefix and body), empty', async () => {
    const srv = await grpcServer();
    const { ch, s, rec, frames, call } = await open(srv, KA, undefined, { token: 'tok' });
    try {
      assert.equal(call.headers[':path'], KA.path);
      assert.equal(call.headers['content-type'], 'application/grpc');
      assert.equal(call.headers.te, 'trailers');
      assert.equal(call.headers.token, 'tok');
      respond(call.stream);
      for (const id of [1n, 2n, 3n, 4n, 5n, 0n]) assert.equal(s.write({ ID: id }), true);
      const ids: bigint[] = [];
      for (let i = 0; i < 6; i++) ids.push(KA.requestDeserialize(await call.requests.next()).ID ?? 0n);
      assert.deepEqual(ids, [1n, 2n, 3n, 4n, 5n, 0n], 'the server read the requests in order');

      // 1: a message alone.
      await write(call.stream, kaRes(1n));
      await rec.messages(1);
      // 2 and 3: packed in one DATA frame.
      const packed = Buffer.concat([kaRes(2n), kaRes(3n)]);
      await write(call.stream, packed);
      await rec.messages(3);
      // 4: split inside its 5-byte prefix; each part waits until the client read the one before.
      const m4 = kaRes(4n);
      let seen = frames.items.length;
      await write(call.stream, m4.subarray(0, 3));
      await frames.count(seen + 1);
      assert.equal(rec.data().length, 3, 'no data event for a partial prefix');
      await write(call.stream, m4.subarray(3));
      await rec.messages(4);
      // 5: split inside its body.
      const m5 = kaRes(5n);
      seen = frames.items.length;
      await write(call.stream, m5.subarray(0, 7));
      await frames.count(seen + 1);
      assert.equal(rec.data().length, 4, 'no data event for a partial message');
      await write(call.stream, m5.subarray(7));
      await rec.messages(5);
      // 0: an empty message (every field at its default), 5 bytes on the wire.
      const m0 = kaRes(0n, 0n);
      assert.equal(m0.length, 5);
      await write(call.stream, m0);
      await rec.messages(6);

      assert.deepEqual(
        rec.data().map((r) => [r.ID, r.TTL]),
        [
          [1n, 10n],
          [2n, 20n],
          [3n, 30n],
          [4n, 40n],
          [5n, 50n],
          [0n, 0n],
        ],
      );
      // The frames were as intended: two messages in one, and both splits seen by the client.
      const sizes = frames.items.map((f) => f.length);
      assert.deepEqual(sizes, [kaRes(1n).length, packed.length, 3, m4.length - 3, 7, m5.length - 7, 5]);
      assert.deepEqual(rec.types(), ['data', 'data', 'data', 'data', 'data', 'data']);
    } finally {
      s.cancel();
      ch.close();
      await srv.close();
    }
  });

  it('messages larger than a frame both ways: 100 KB and 2 MB WatchResponses, two of them in one write, one split mid-message', async () => {
    const srv = await grpcServer();
    const { ch, s, rec, frames, call } = await open(srv, WATCH);
    try {
      respond(call.stream);
      // The client's own large message: 100 KB, past the server's 65,535-byte stream window.
      const bigKey = randomBytes(100_000);
      assert.equal(s.write({ createRequest: { key: bigKey, prevKv: true } }), true);
      const got = WATCH.requestDeserialize(await call.requests.next());
      assert.deepEqual(got.createRequest?.key, bigKey);

      const r1 = bigWatchResponse(1n, 100_000);
      const r2 = bigWatchResponse(2n, 2 * 1024 * 1024);
      const r3 = bigWatchResponse(3n, 40_000);
      const r4 = bigWatchResponse(4n, 60_000);
      await write(call.stream, framed(WATCH.responseSerialize(r1)));
      await rec.messages(1);
      const framesFor1 = frames.items.length;
      assert.ok(framesFor1 > 1, `100 KB came in more than one DATA frame (${framesFor1})`);
      await write(call.stream, framed(WATCH.responseSerialize(r2)));
      await rec.messages(2);
      assert.ok(frames.items.length - framesFor1 > 1, 'the 2 MB message spans frames (above our 1 MiB MAX_FRAME_SIZE too)');
      // Two large messages in one write.
      await write(call.stream, Buffer.concat([framed(WATCH.responseSerialize(r3)), framed(WATCH.responseSerialize(r4))]));
      await rec.messages(4);
      // One split mid-body, the second half written once the first was read.
      const r5 = bigWatchResponse(5n, 50_000);
      const m5 = framed(WATCH.responseSerialize(r5));
      const seen = frames.items.length;
      await write(call.stream, m5.subarray(0, 30_000));
      await framesCarry(frames, seen, 30_000);
      assert.equal(rec.data().length, 4);
      await write(call.stream, m5.subarray(30_000));
      await rec.messages(5);
      assert.deepEqual(rec.data(), [r1, r2, r3, r4, r5].map((r) => WATCH.responseDeserialize(WATCH.responseSerialize(r))));
      assert.deepEqual(rec.types(), ['data', 'data', 'data', 'data', 'data']);
    } finally {
      s.cancel();
      ch.close();
      await srv.close();
    }
  });

  it('2,000 small messages each way on one stream, echoed, complete and in order', async () => {
    const srv = await grpcServer();
    const { ch, s, rec, call } = await open(srv, KA);
    try {
      respond(call.stream);
      const N = 2000;
      const echoed = (async () => {
        for (let i = 0; i < N; i++) {
          const req = KA.requestDeserialize(await call.requests.next());
          call.stream.write(kaRes(req.ID ?? 0n));
        }
      })();
      for (let i = 1; i <= N; i++) assert.equal(s.write({ ID: BigInt(i) }), true);
      await echoed;
      await rec.messages(N);
      assert.deepEqual(
        call.requests.items.map((b) => KA.requestDeserialize(b).ID),
        Array.from({ length: N }, (_, i) => BigInt(i + 1)),
      );
      assert.deepEqual(
        rec.data().map((r) => r.ID),
        Array.from({ length: N }, (_, i) => BigInt(i + 1)),
      );
      assert.ok(rec.types().every((t) => t === 'data'));
    } finally {
      s.cancel();
      ch.close();
      await srv.close();
    }
  });

  it('2,000 messages each way past the flow-control windows (about 500 KB each way), in order', async () => {
    const srv = await grpcServer();
    const { ch, s, rec, call } = await open(srv, WATCH);
    try {
      respond(call.stream);
      const N = 2000;
      const key = (i: number): Buffer => Buffer.from(`key-${i}-`.padEnd(250, 'x'));
      const echoed = (async () => {
        for (let i = 0; i < N; i++) {
          const req = WATCH.requestDeserialize(await call.requests.next());
          call.stream.write(framed(WATCH.responseSerialize({ watchId: req.createRequest?.watchId ?? -1n, events: [{ kv: { key: req.createRequest?.key ?? Buffer.alloc(0) } }] })));
        }
      })();
      // All written at once: most of it waits in the client for the server's window updates.
      for (let i = 0; i < N; i++) assert.equal(s.write({ createRequest: { key: key(i), watchId: BigInt(i) } }), true);
      await echoed;
      await rec.messages(N);
      const res = rec.data();
      assert.equal(res.length, N);
      for (let i = 0; i < N; i++) {
        assert.equal(res[i]!.watchId, BigInt(i));
        assert.deepEqual(res[i]!.events![0]!.kv!.key, key(i));
      }
    } finally {
      s.cancel();
      ch.close();
      await srv.close();
    }
  });
});

describe('H2Stream on a fake gRPC server: how it ends', () => {
  it("trailers grpc-status 0: 'end' after the messages, no 'error'", async () => {
    const srv = await grpcServer();
    const { ch, s, rec, call } = await open(srv, KA);
    try {
      respond(call.stream);
      await write(call.stream, Buffer.concat([kaRes(1n), kaRes(2n)]));
      endWith(call.stream, { 'grpc-status': '0' });
      const ev = await rec.settled();
      assert.equal(ev.type, 'end');
      await tick();
      assert.deepEqual(rec.types(), ['data', 'data', 'end']);
      assert.deepEqual(
        rec.data().map((r) => r.ID),
        [1n, 2n],
      );
      assert.equal(s.write({ ID: 3n }), false, 'write after the end');
      assert.equal(await call.closed, 0);
    } finally {
      s.cancel();
      ch.close();
      await srv.close();
    }
  });

  it("trailers grpc-status 16 'etcdserver: invalid auth token': 'error', an H2ServiceError that isServiceError and isStaleToken accept", async () => {
    const srv = await grpcServer();
    const { ch, s, rec, call } = await open(srv, KA);
    try {
      respond(call.stream);
      await write(call.stream, kaRes(1n));
      await rec.messages(1);
      endWith(call.stream, { 'grpc-status': '16', 'grpc-message': 'etcdserver: invalid auth token', 'x-extra': 'e' });
      const ev = await rec.settled();
      assert.equal(ev.type, 'error');
      const err = (ev as { err: H2ServiceError }).err;
      assert.ok(err instanceof H2ServiceError);
      assert.equal(err.code, 16);
      assert.equal(err.code, grpc.status.UNAUTHENTICATED);
      assert.equal(err.details, 'etcdserver: invalid auth token');
      assert.equal(err.message, '16 UNAUTHENTICATED: etcdserver: invalid auth token');
      assert.ok(isServiceError(err));
      assert.ok(isStaleToken(err.details));
      assert.deepEqual(err.metadata.get('x-extra'), ['e']);
      assert.equal(err.notSent, false);
      await tick();
      assert.deepEqual(rec.types(), ['data', 'error']);
      assert.equal(s.write({ ID: 2n }), false);
    } finally {
      s.cancel();
      ch.close();
      await srv.close();
    }
  });

  it("trailers-only (the status in the response headers, END_STREAM): 'error' when not OK, 'end' when OK", async () => {
    const srv = await grpcServer();
    const ch = new H2Channel(srv.target);
    await ch.connect(deadline());
    try {
      const cases = [
        { headers: { 'grpc-status': '16', 'grpc-message': 'etcdserver: invalid auth token' }, want: 'error', code: 16, details: 'etcdserver: invalid auth token' },
        { headers: { 'grpc-status': '14', 'grpc-message': 'caf%C3%A9 100%25' }, want: 'error', code: 14, details: 'café 100%' },
        { headers: { 'grpc-status': '0' }, want: 'end' },
      ] as const;
      for (const c of cases) {
        const s = ch.stream(KA, undefined);
        const rec = record(s);
        s.write({ ID: 1n });
        const call = await srv.calls.next();
        call.stream.respond({ ':status': 200, 'content-type': 'application/grpc', ...c.headers }, { endStream: true });
        const ev = await rec.settled();
        assert.equal(ev.type, c.want, JSON.stringify(c.headers));
        if (ev.type === 'error' && 'code' in c) {
          assert.ok(ev.err instanceof H2ServiceError);
          assert.equal(ev.err.code, c.code);
          assert.equal(ev.err.details, c.details);
          assert.ok(isServiceError(ev.err));
          if (c.code === 16) assert.ok(isStaleToken(ev.err.details));
        }
        await call.closed;
        await roundTrip(call.session);
        assert.deepEqual(rec.types(), [c.want]);
      }
    } finally {
      ch.close();
      await srv.close();
    }
  });
});

describe('H2Stream on a fake gRPC server: cancel, closeStream, a dead connection', () => {
  it('cancel(): RST_STREAM CANCEL at the server, no event after it though data was in flight, write() false', async () => {
    const srv = await grpcServer();
    const { ch, s, rec, call } = await open(srv, KA);
    try {
      respond(call.stream);
      s.write({ ID: 1n });
      await call.requests.next();
      await write(call.stream, kaRes(1n));
      await rec.messages(1);
      // A burst the client has not read yet when it cancels.
      for (let i = 2n; i <= 50n; i++) call.stream.write(kaRes(i));
      s.cancel();
      assert.equal(await call.closed, NGHTTP2_CANCEL);
      await roundTrip(call.session);
      await tick();
      assert.deepEqual(rec.types(), ['data'], 'nothing after cancel()');
      assert.equal(s.write({ ID: 2n }), false);
      s.cancel(); // again: nothing
      assert.ok(ch.isReady, 'the connection stays');
    } finally {
      s.cancel();
      ch.close();
      await srv.close();
    }
  });

  it("cancel() inside a 'data' listener, the next messages in the same DATA frame: none of them is emitted", async () => {
    const srv = await grpcServer();
    const { ch, s, rec, frames, call } = await open(srv, KA);
    try {
      s.on('data', () => s.cancel());
      respond(call.stream);
      await write(call.stream, Buffer.concat([kaRes(1n), kaRes(2n), kaRes(3n)]));
      assert.equal(await call.closed, NGHTTP2_CANCEL);
      await roundTrip(call.session);
      assert.equal(frames.items.length, 1, 'the three came in one frame');
      assert.deepEqual(
        rec.data().map((r) => r.ID),
        [1n],
      );
      assert.deepEqual(rec.types(), ['data']);
    } finally {
      ch.close();
      await srv.close();
    }
  });

  it('cancel() before the response headers: the server sees CANCEL, no event', async () => {
    const srv = await grpcServer();
    const { ch, s, rec, call } = await open(srv, KA);
    try {
      s.write({ ID: 1n });
      await call.requests.next();
      s.cancel();
      assert.equal(await call.closed, NGHTTP2_CANCEL);
      await roundTrip(call.session);
      assert.deepEqual(rec.types(), []);
    } finally {
      ch.close();
      await srv.close();
    }
  });

  it("the connection dies under an open stream (the server destroys the socket): 'error' UNAVAILABLE", async () => {
    const srv = await grpcServer();
    const { ch, s, rec, call } = await open(srv, KA);
    try {
      respond(call.stream);
      s.write({ ID: 1n });
      await call.requests.next();
      await write(call.stream, kaRes(1n));
      await rec.messages(1);
      assert.equal(srv.sockets.length, 1);
      srv.sockets[0]!.destroy();
      const ev = await rec.settled();
      assert.equal(ev.type, 'error');
      const err = (ev as { err: H2ServiceError }).err;
      assert.ok(err instanceof H2ServiceError);
      assert.equal(err.code, grpc.status.UNAVAILABLE);
      assert.match(err.details, /Connection dropped/);
      assert.ok(isServiceError(err));
      await tick();
      assert.deepEqual(rec.types(), ['data', 'error']);
      assert.equal(s.write({ ID: 2n }), false);
      assert.equal(ch.isReady, false);
      // A stream opened now, with no ready connection, fails the same way.
      const again = record(ch.stream(KA, undefined));
      const ev2 = await again.settled();
      assert.equal(ev2.type, 'error');
      assert.equal((ev2 as { err: H2ServiceError }).err.code, grpc.status.UNAVAILABLE);
    } finally {
      s.cancel();
      ch.close();
      await srv.close();
    }
  });

  it("the connection dies under a stream nobody listens to for 'error': nothing is thrown", async () => {
    const srv = await grpcServer();
    const ch = new H2Channel(srv.target);
    await ch.connect(deadline());
    try {
      const s = ch.stream(KA, undefined);
      const seen: unknown[] = [];
      s.on('data', (d) => seen.push(d));
      s.write({ ID: 1n });
      const call = await srv.calls.next();
      respond(call.stream);
      await call.requests.next();
      srv.sockets[0]!.destroy();
      await call.closed;
      // The client notices the close on its own read; a later stream fails at once and proves it.
      const probe = record(ch.stream(KA, undefined));
      await probe.settled();
      await tick();
      assert.deepEqual(seen, []);
      assert.equal(s.write({ ID: 2n }), false);
    } finally {
      ch.close();
      await srv.close();
    }
  });

  it("closeStream() from connection.ts: listeners removed, no unhandled 'error', the server sees the reset", async () => {
    const srv = await grpcServer();
    const { ch, s, rec, call } = await open(srv, KA);
    try {
      respond(call.stream);
      await write(call.stream, kaRes(1n));
      await rec.messages(1);
      for (let i = 2n; i <= 20n; i++) call.stream.write(kaRes(i));
      closeStream(s);
      assert.equal(s.listenerCount('data'), 0);
      assert.equal(s.listenerCount('end'), 0);
      assert.equal(s.listenerCount('error'), 1, 'only the no-op error listener');
      assert.equal(await call.closed, NGHTTP2_CANCEL);
      await roundTrip(call.session);
      // The connection dying afterwards reaches nobody.
      srv.sockets[0]!.destroy();
      const probe = record(ch.stream(KA, undefined));
      await probe.settled();
      await tick();
      assert.deepEqual(rec.types(), ['data']);
      assert.equal(s.write({ ID: 99n }), false);
    } finally {
      ch.close();
      await srv.close();
    }
  });
});

describe('H2Stream without a ready connection', () => {
  it("a never-connected channel: 'error' UNAVAILABLE on the next tick, nothing thrown", async () => {
    const ch = new H2Channel('127.0.0.1:1');
    try {
      let s: H2Stream<pb.LeaseKeepAliveRequest, pb.LeaseKeepAliveResponse> | undefined;
      assert.doesNotThrow(() => {
        s = ch.stream(KA, { token: 't' });
      });
      const rec = record(s!);
      assert.deepEqual(rec.types(), [], 'not synchronously');
      const ev = await rec.settled();
      assert.equal(ev.type, 'error');
      const err = (ev as { err: H2ServiceError }).err;
      assert.ok(err instanceof H2ServiceError);
      assert.equal(err.code, grpc.status.UNAVAILABLE);
      assert.equal(err.notSent, true);
      assert.match(err.details, /No connection established/);
      assert.ok(isServiceError(err));
      assert.equal(s!.write({ ID: 1n }), false);
      assert.doesNotThrow(() => s!.cancel());
      await tick();
      assert.deepEqual(rec.types(), ['error']);
    } finally {
      ch.close();
    }
  });

  it("an 'error' with no listener attached is dropped, not thrown", async () => {
    const ch = new H2Channel('127.0.0.1:1');
    try {
      const s = ch.stream(KA, undefined);
      const seen: unknown[] = [];
      s.on('data', (d) => seen.push(d));
      s.on('end', () => seen.push('end'));
      await tick();
      await tick();
      assert.deepEqual(seen, []);
      // Had the 'error' been emitted without a listener, the process would have had an uncaught
      // exception and this test would have failed.
    } finally {
      ch.close();
    }
  });

  it("a closed channel: 'error' UNAVAILABLE, and the server never sees a stream", async () => {
    const srv = await grpcServer();
    const ch = new H2Channel(srv.target);
    try {
      await ch.connect(deadline());
      ch.close();
      const rec = record(ch.stream(KA, undefined));
      const ev = await rec.settled();
      assert.equal(ev.type, 'error');
      assert.equal((ev as { err: H2ServiceError }).err.code, grpc.status.UNAVAILABLE);
      assert.equal(srv.calls.items.length, 0);
    } finally {
      ch.close();
      await srv.close();
    }
  });
});

describe('H2Stream keepalive', () => {
  it('pings run while only a stream is open (no unary call in flight)', async () => {
    const srv = await grpcServer();
    const { ch, s, rec, call } = await open(srv, KA, { keepaliveTimeMs: 50, keepaliveTimeoutMs: 1000 });
    try {
      respond(call.stream);
      await srv.pings.count(2);
      assert.ok(srv.pings.items.length >= 2);
      // The stream still works, and the connection was never dropped.
      s.write({ ID: 7n });
      await call.requests.next();
      await write(call.stream, kaRes(7n));
      await rec.messages(1);
      assert.deepEqual(rec.types(), ['data']);
      assert.ok(ch.isReady);
    } finally {
      s.cancel();
      ch.close();
      await srv.close();
    }
  });

  it("a ping left unanswered (the link black-holed) ends the stream: 'error' UNAVAILABLE naming the keepalive", async () => {
    const srv = await grpcServer();
    const proxy = await startProxy(srv.target);
    const ch = new H2Channel(proxy.endpoint, { keepaliveTimeMs: 50, keepaliveTimeoutMs: 500 });
    try {
      await ch.connect(deadline());
      const s = ch.stream(KA, undefined);
      const rec = record(s);
      const call = await srv.calls.next();
      respond(call.stream);
      await write(call.stream, kaRes(1n));
      await rec.messages(1);
      proxy.blackhole(true);
      const ev = await rec.settled();
      assert.equal(ev.type, 'error');
      const err = (ev as { err: H2ServiceError }).err;
      assert.equal(err.code, grpc.status.UNAVAILABLE);
      assert.match(err.details, /keepalive ping not answered within 500 ms/);
      assert.equal(err.notSent, false);
      assert.equal(ch.isReady, false);
      assert.deepEqual(rec.types(), ['data', 'error']);
    } finally {
      ch.close();
      await proxy.close();
      await srv.close();
    }
  });
});

describe('H2Stream and the connection: the server stream limit, GOAWAY', () => {
  it("past the server's MAX_CONCURRENT_STREAMS a stream waits, writes included; a waiting stream cancelled is never sent", async () => {
    const srv = await grpcServer({ settings: { maxConcurrentStreams: 1 } });
    const ch = new H2Channel(srv.target);
    await ch.connect(deadline());
    const s1 = ch.stream(KA, undefined);
    const s2 = ch.stream(KA, undefined);
    const s3 = ch.stream(KA, undefined);
    const [r1, r2, r3] = [record(s1), record(s2), record(s3)];
    try {
      s1.write({ ID: 1n });
      assert.equal(s2.write({ ID: 2n }), true, 'a waiting stream takes writes');
      assert.equal(s3.write({ ID: 3n }), true);
      const c1 = await srv.calls.next();
      assert.equal(KA.requestDeserialize(await c1.requests.next()).ID, 1n);
      s3.cancel();
      assert.equal(s3.write({ ID: 4n }), false);
      s1.cancel();
      assert.equal(await c1.closed, NGHTTP2_CANCEL);
      const c2 = await srv.calls.next();
      assert.equal(c2.stream.id, 3, 'the next id: the cancelled waiting stream took none');
      assert.equal(KA.requestDeserialize(await c2.requests.next()).ID, 2n, "the waiting stream's write went with it");
      respond(c2.stream);
      await write(c2.stream, kaRes(2n));
      await r2.messages(1);
      await roundTrip(c2.session);
      assert.equal(srv.calls.items.length, 2, 'the cancelled waiting stream never reached the server');
      assert.deepEqual([r1.types(), r2.types(), r3.types()], [[], ['data'], []]);
    } finally {
      s2.cancel();
      ch.close();
      await srv.close();
    }
  });

  it("a GOAWAY that names the stream as processed: it goes on; new streams see no ready connection; the connection closes once it ends", async () => {
    const srv = await grpcServer();
    const { ch, s, rec, call } = await open(srv, KA);
    try {
      respond(call.stream);
      const closed = new Promise<void>((r) => srv.sockets[0]!.on('close', () => r()));
      call.session.goaway(0, call.stream.id);
      await roundTrip(call.session);
      assert.equal(ch.isReady, false, 'no new calls on a connection that said GOAWAY');
      const late = record(ch.stream(KA, undefined));
      const ev = await late.settled();
      assert.equal(ev.type, 'error');
      assert.equal((ev as { err: H2ServiceError }).err.code, grpc.status.UNAVAILABLE);
      // The open stream still works both ways.
      s.write({ ID: 5n });
      assert.equal(KA.requestDeserialize(await call.requests.next()).ID, 5n);
      await write(call.stream, kaRes(5n));
      await rec.messages(1);
      endWith(call.stream, { 'grpc-status': '0' });
      assert.equal((await rec.settled()).type, 'end');
      await closed;
      // A new connection on demand.
      await ch.connect(deadline());
      const again = ch.stream(KA, undefined);
      const ra = record(again);
      again.write({ ID: 6n });
      const c2 = await srv.calls.next();
      assert.equal(KA.requestDeserialize(await c2.requests.next()).ID, 6n);
      again.cancel();
      assert.equal(await c2.closed, NGHTTP2_CANCEL);
      assert.deepEqual(ra.types(), []);
    } finally {
      s.cancel();
      ch.close();
      await srv.close();
    }
  });
});

describe('H2Stream side by side with grpc-js on a fake server', () => {
  function grpcClient(target: string, options: grpc.ChannelOptions = {}): grpc.Client {
    return new grpc.Client(target, grpc.credentials.createInsecure(), options);
  }

  /** How a stream on `method` ended, on grpc-js: the 'error' (code, details) or 'end'. */
  function viaGrpc<Req, Res>(gc: grpc.Client, method: H2StreamMethod<Req, Res> & { requestSerialize: (v: Req) => Buffer }, md: Record<string, string>, first: Req) {
    const meta = new grpc.Metadata();
    for (const [k, v] of Object.entries(md)) meta.set(k, v);
    const call = gc.makeBidiStreamRequest(method.path, method.requestSerialize, method.responseDeserialize, meta, {});
    call.on('data', () => {});
    const ended = new Promise<{ code: number; details: string } | 'end'>((resolve) => {
      call.on('error', (e: grpc.ServiceError) => resolve({ code: e.code, details: e.details }));
      call.on('end', () => resolve('end'));
    });
    call.write(first);
    return { call, ended };
  }

  it(
    'a server RST_STREAM after the response headers: the same codes and details as grpc-js (INTERNAL_ERROR, ENHANCE_YOUR_CALM, INADEQUATE_SECURITY)',
    async () => {
      const srv = await grpcServer();
      // Each stream: headers, one message, then the reset named by x-rst once the request came.
      const serve = (async () => {
        for (;;) {
          const c = await srv.calls.next();
          if (c.headers['x-stop']) return;
          respond(c.stream);
          c.stream.write(kaRes(1n));
          await c.requests.next();
          c.stream.close(Number(c.headers['x-rst']));
        }
      })();
      const ch = new H2Channel(srv.target);
      const gc = grpcClient(srv.target);
      try {
        await ch.connect(deadline());
        const diffs: string[] = [];
        for (const code of [NGHTTP2_PROTOCOL_ERROR, NGHTTP2_INTERNAL_ERROR, NGHTTP2_ENHANCE_YOUR_CALM, NGHTTP2_INADEQUATE_SECURITY]) {
          const md = { 'x-rst': String(code) };
          const g = await viaGrpc(gc, KA, md, { ID: 1n }).ended;
          const s = ch.stream(KA, md);
          const rec = record(s);
          s.write({ ID: 1n });
          const ev = await rec.settled();
          const h = ev.type === 'error' ? { code: ev.err.code, details: ev.err.details } : 'end';
          assert.notEqual(g, 'end');
          assert.equal(ev.type, 'error');
          if (JSON.stringify(h) !== JSON.stringify(g)) diffs.push(`RST ${code}: h2 ${JSON.stringify(h)} vs grpc-js ${JSON.stringify(g)}`);
        }
        assert.deepEqual(diffs, []);
      } finally {
        const stop = ch.stream(KA, { 'x-stop': '1' });
        stop.on('error', () => {});
        await serve;
        stop.cancel();
        ch.close();
        gc.close();
        await srv.close();
      }
    },
  );

  it(
    "a message above maxSendMessageLength: RESOURCE_EXHAUSTED, but reported after write() returned, as grpc-js does (not from inside write())",
    async () => {
      const srv = await grpcServer();
      const { ch, s, rec, call } = await open(srv, WATCH, { maxSendMessageLength: 100 });
      const gc = grpcClient(srv.target, { 'grpc.max_send_message_length': 100 });
      try {
        const big: pb.WatchRequest = { createRequest: { key: Buffer.alloc(200) } };
        // grpc-js: write() returns, the 'error' comes later.
        const meta = new grpc.Metadata();
        const gcall = gc.makeBidiStreamRequest(WATCH.path, WATCH.requestSerialize, WATCH.responseDeserialize, meta, {});
        let inGrpcWrite = false;
        let grpcSync = false;
        const gErr = new Promise<grpc.ServiceError>((r) =>
          gcall.on('error', (e: grpc.ServiceError) => {
            if (inGrpcWrite) grpcSync = true;
            r(e);
          }),
        );
        inGrpcWrite = true;
        gcall.write(big);
        inGrpcWrite = false;
        assert.equal((await gErr).code, grpc.status.RESOURCE_EXHAUSTED);
        assert.equal(grpcSync, false, 'grpc-js reports it asynchronously');
        // h2.
        let inWrite = false;
        let sync = false;
        s.on('error', () => {
          if (inWrite) sync = true;
        });
        inWrite = true;
        s.write(big);
        inWrite = false;
        const ev = await rec.settled();
        assert.equal(ev.type, 'error');
        assert.equal((ev as { err: H2ServiceError }).err.code, grpc.status.RESOURCE_EXHAUSTED);
        assert.equal(await call.closed, NGHTTP2_CANCEL, 'the stream reset');
        assert.equal(s.write({ createRequest: { key: enc('k') } }), false);
        assert.equal(sync, false, "'error' emitted from inside write()");
      } finally {
        s.cancel();
        ch.close();
        gc.close();
        await srv.close();
      }
    },
  );
});

describe('H2Stream on etcd, side by side with grpc-js', () => {
  let etcd: EtcdCluster;
  let target: string;
  const root = `test/h2-stream/${randomBytes(4).toString('hex')}/`;

  before(async () => {
    etcd = await startEtcd({ members: 1 });
    target = etcd.endpoints[0]!;
  });
  after(async () => {
    await etcd.stop();
  });

  function grpcClient(): grpc.Client {
    return new grpc.Client(target, grpc.credentials.createInsecure(), {
      'grpc.max_receive_message_length': -1,
      'grpc.keepalive_time_ms': 6000,
      'grpc.keepalive_timeout_ms': 3000,
      'grpc.keepalive_permit_without_calls': 0,
    });
  }

  /** grpc-js's stream on `method`, its messages queued. */
  function grpcStream<Req, Res>(client: grpc.Client, method: H2StreamMethod<Req, Res> & { requestSerialize: (v: Req) => Buffer }) {
    const call = client.makeBidiStreamRequest(method.path, method.requestSerialize, method.responseDeserialize, new grpc.Metadata(), {});
    const got = new Queue<Res>();
    call.on('data', (m: Res) => got.push(m));
    call.on('error', () => {});
    return { call, got };
  }

  /** The h2 stream's messages, queued. */
  function h2Queue<Req, Res>(s: H2Stream<Req, Res>) {
    const got = new Queue<Res>();
    const errors: unknown[] = [];
    s.on('data', (m: Res) => got.push(m));
    s.on('error', (e) => errors.push(e));
    s.on('end', () => errors.push('end'));
    return { got, errors };
  }

  it("Watch: 'created', then the event of a Put made through a unary call on the same channel; as grpc-js receives them", async () => {
    const ch = new H2Channel(target);
    const gc = grpcClient();
    const key = enc(`${root}w`);
    await ch.connect(deadline());
    const s = ch.stream(WATCH, undefined);
    const h = h2Queue(s);
    const g = grpcStream(gc, WATCH);
    try {
      s.write({ createRequest: { key } });
      const created = await h.got.next();
      assert.equal(created.created, true);
      g.call.write({ createRequest: { key } });
      const gCreated = await g.got.next();
      assert.equal(gCreated.created, true);

      const put = await ch.unary(pb.KVService.put, { key, value: enc('v1') }, undefined, deadline());
      const event = await h.got.next();
      const gEvent = await g.got.next();
      assert.equal(event.watchId, created.watchId);
      assert.equal(event.events?.length, 1);
      assert.equal(event.events![0]!.type, pb.Event_EventType.PUT);
      assert.deepEqual(event.events![0]!.kv!.key, key);
      assert.deepEqual(event.events![0]!.kv!.value, enc('v1'));
      assert.equal(event.events![0]!.kv!.modRevision, put.header!.revision);
      assert.equal(event.header!.revision, put.header!.revision);
      // The same answers on grpc-js (each stream numbers its own watches).
      assert.deepEqual({ ...event, watchId: 0n }, { ...gEvent, watchId: 0n });
      assert.deepEqual({ ...created, watchId: 0n }, { ...gCreated, watchId: 0n });

      // Cancelling the watch on the stream, then the stream.
      s.write({ cancelRequest: { watchId: created.watchId } });
      const cancelled = await h.got.next();
      assert.equal(cancelled.canceled, true);
      assert.deepEqual(h.errors, []);
    } finally {
      s.cancel();
      g.call.cancel();
      await ch.unary(pb.KVService.deleteRange, { key }, undefined, deadline()).catch(() => {});
      ch.close();
      gc.close();
    }
  });

  it('LeaseKeepAlive: a lease granted through a unary call is renewed on the stream; as on grpc-js', async () => {
    const ch = new H2Channel(target);
    const gc = grpcClient();
    await ch.connect(deadline());
    const grant = await ch.unary(pb.LeaseService.leaseGrant, { TTL: 60n }, undefined, deadline());
    const id = grant.ID!;
    const s = ch.stream(KA, undefined);
    const h = h2Queue(s);
    const g = grpcStream(gc, KA);
    try {
      assert.ok(id > 0n);
      s.write({ ID: id });
      const res = await h.got.next();
      assert.equal(res.ID, id);
      assert.ok(res.TTL! > 0n, `TTL ${res.TTL}`);
      g.call.write({ ID: id });
      const gRes = await g.got.next();
      assert.equal(gRes.ID, id);
      assert.deepEqual({ ...res, header: { ...res.header, revision: 0n } }, { ...gRes, header: { ...gRes.header, revision: 0n } });
      // Again on the same stream.
      s.write({ ID: id });
      assert.equal((await h.got.next()).ID, id);
      assert.deepEqual(h.errors, []);
    } finally {
      s.cancel();
      g.call.cancel();
      await ch.unary(pb.LeaseService.leaseRevoke, { ID: id }, undefined, deadline()).catch(() => {});
      ch.close();
      gc.close();
    }
  });
});
