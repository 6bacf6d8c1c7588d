// Regressions of the HTTP/2 transport (src/client/h2.ts, src/client/h2/wire.ts) found in review,
// each against a raw-frame fake HTTP/2 server (a TCP server that reads our frames, logs them per
// connection and answers by hand), no etcd:
//   1. a stream's 'error' listener that throws does not tear down the connection: an unrelated
//      unary call on it succeeds, no GOAWAY is sent, and the exception surfaces as uncaughtException;
//   2. with MAX_CONCURRENT_STREAMS 1, a GOAWAY(last 0) refuses the open call and the queued one, and
//      the queued one is not opened on that connection afterwards: both succeed on a new one;
//   3. a connection dropped by keepalive does not write its queued request before closing: the
//      request, never sent, is retried on a new connection;
//   4. stream ids running out: the old connection closes once its last stream ends, and calls go on
//      on a new connection;
//   5. after cancel(), no 'error' event: neither an oversized write()'s (said on the next tick) nor
//      that of a stream created with no connection.
// Deterministic: every wait is on an event or a promise (a server PING round trip proves the client
// wrote nothing more); the only timers are the keepalive settings under test in case 3.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { H2Channel, H2ServiceError, Status } from '../src/client/h2.js';
import { encodeHeaders, HpackDecoder, type HeaderMap } from '../src/client/h2/hpack.js';

// --- The raw-frame fake server ---------------------------------------------------------------

const T = { DATA: 0, HEADERS: 1, RST: 3, SETTINGS: 4, PING: 6, GOAWAY: 7, WU: 8, CONT: 9 } as const;
const ACK = 0x1;
const END_STREAM = 0x1;

function frame(type: number, flags: number, id: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const b = Buffer.alloc(9 + payload.length);
  b.writeUIntBE(payload.length, 0, 3);
  b[3] = type;
  b[4] = flags;
  b.writeUInt32BE(id, 5);
  payload.copy(b, 9);
  return b;
}

function settings(pairs: [number, number][]): Buffer {
  const p = Buffer.alloc(6 * pairs.length);
  pairs.forEach(([k, v], i) => {
    p.writeUInt16BE(k, 6 * i);
    p.writeUInt32BE(v, 6 * i + 2);
  });
  return frame(T.SETTINGS, 0, 0, p);
}

const SETTINGS_ACK = frame(T.SETTINGS, ACK, 0);
const MAX_CONCURRENT_STREAMS = 0x3;

function goaway(last: number, code = 0): Buffer {
  const p = Buffer.alloc(8);
  p.writeUInt32BE(last, 0);
  p.writeUInt32BE(code, 4);
  return frame(T.GOAWAY, 0, 0, p);
}

function headers(id: number, fields: [string, string][], end: boolean): Buffer {
  return frame(T.HEADERS, 0x4 | (end ? END_STREAM : 0), id, encodeHeaders(fields.map(([name, value]) => ({ name, value }))));
}

function grpcMsg(b: Buffer): Buffer {
  const m = Buffer.alloc(5 + b.length);
  m.writeUInt32BE(b.length, 1);
  b.copy(m, 5);
  return m;
}

/** Answers a unary call on stream `id` with OK and an empty message. */
function okAnswer(id: number): Buffer {
  return Buffer.concat([
    headers(id, [[':status', '200'], ['content-type', 'application/grpc']], false),
    frame(T.DATA, 0, id, grpcMsg(Buffer.alloc(0))),
    headers(id, [['grpc-status', '0']], true),
  ]);
}

interface Frame {
  type: number;
  flags: number;
  id: number;
  payload: Buffer;
  conn: number;
  /** HEADERS only: the decoded block. */
  headers?: HeaderMap;
}

interface Conn {
  n: number;
  socket: net.Socket;
  frames: Frame[];
  /** Resolves when the server side of the socket closed. */
  closed: Promise<void>;
}

interface RawServer {
  target: string;
  log: Frame[];
  conns: Conn[];
  /** Resolves with connection `n` once its preface arrived. */
  conn(n: number): Promise<Conn>;
  close(): Promise<void>;
}

/**
 * A TCP server reading the client's HTTP/2 frames: `onConn` once a connection's preface arrived,
 * `onFrame` for each frame (after it is logged). SETTINGS are acknowledged here.
 */
async function rawServer(onConn: (c: Conn) => void, onFrame: (c: Conn, f: Frame) => void): Promise<RawServer> {
  const log: Frame[] = [];
  const conns: Conn[] = [];
  const waiters = new Map<number, ((c: Conn) => void)[]>();
  const server = net.createServer((socket) => {
    const c: Conn = { n: conns.length, socket, frames: [], closed: new Promise<void>((r) => socket.once('close', () => r())) };
    conns.push(c);
    socket.on('error', () => {});
    let buf = Buffer.alloc(0);
    let preface = false;
    const dec = new HpackDecoder();
    socket.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      if (!preface) {
        if (buf.length < 24) return;
        buf = buf.subarray(24);
        preface = true;
        onConn(c);
        for (const w of waiters.get(c.n) ?? []) w(c);
        waiters.delete(c.n);
      }
      while (buf.length >= 9) {
        const len = buf.readUIntBE(0, 3);
        if (buf.length < 9 + len) break;
        const f: Frame = { type: buf[3]!, flags: buf[4]!, id: buf.readUInt32BE(5) & 0x7fffffff, payload: Buffer.from(buf.subarray(9, 9 + len)), conn: c.n };
        buf = buf.subarray(9 + len);
        if (f.type === T.HEADERS) f.headers = dec.decode(f.payload);
        log.push(f);
        c.frames.push(f);
        if (f.type === T.SETTINGS && !(f.flags & ACK)) socket.write(SETTINGS_ACK);
        onFrame(c, f);
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    target: `127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    log,
    conns,
    conn: (n) =>
      conns[n] !== undefined && conns[n]!.frames.length > 0
        ? Promise.resolve(conns[n]!)
        : new Promise<Conn>((r) => waiters.set(n, [...(waiters.get(n) ?? []), r])),
    close: async () => {
      for (const c of conns) c.socket.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

let pingSeq = 0;
/**
 * The server PINGs the client and waits for the ACK: every frame the client wrote before the ACK
 * has been read (and logged) by then. Used to prove that nothing else came.
 */
function serverPing(c: Conn): Promise<void> {
  const payload = Buffer.alloc(8);
  payload.writeUInt32BE(0x5eed, 0);
  payload.writeUInt32BE(++pingSeq, 4);
  const seen = c.frames.length;
  return new Promise<void>((resolve, reject) => {
    const check = (): void => {
      for (let i = seen; i < c.frames.length; i++) {
        const f = c.frames[i]!;
        if (f.type === T.PING && f.flags & ACK && f.payload.equals(payload)) {
          c.socket.off('data', onData);
          c.socket.off('close', onClose);
          return resolve();
        }
      }
    };
    // Frames are logged by the server's own 'data' listener, registered first: it has run by now.
    const onData = (): void => check();
    const onClose = (): void => reject(new Error(`connection ${c.n} closed before the PING ACK`));
    c.socket.on('data', onData);
    c.socket.once('close', onClose);
    c.socket.write(frame(T.PING, 0, 0, payload));
  });
}

/** A few turns of the event loop: ticks and immediates queued by the client have all run. */
async function turns(n = 3): Promise<void> {
  for (let i = 0; i < n; i++) {
    await new Promise<void>((r) => process.nextTick(r));
    await new Promise<void>((r) => setImmediate(r));
  }
}

const dec = (b: Buffer): number => b.length;
const ident = (b: Buffer): Buffer => b;
const soon = (ms = 5000): number => performance.now() + ms;
const headersOf = (frames: Frame[]): Frame[] => frames.filter((f) => f.type === T.HEADERS);
const pathOf = (f: Frame): unknown => f.headers?.[':path'];

// --- The cases ---------------------------------------------------------------------------------

describe('h2 regressions (raw-frame fake server)', () => {
  it("a stream's 'error' listener that throws does not end the connection; its exception surfaces as uncaughtException", async () => {
    // Old behaviour: the listener's exception was caught by the wire's read loop as the server's
    // protocol error, the connection was torn down with GOAWAY(INTERNAL_ERROR), the unrelated unary
    // call on it failed UNAVAILABLE "Connection dropped" (outcome unknown), and the exception itself
    // was swallowed (no uncaughtException).
    const srv = await rawServer(
      (c) => c.socket.write(settings([])),
      (c, f) => {
        // Stream 1: the bidi stream, answered with response headers at once. Stream 3: a unary
        // call; once its request is whole, stream 1 ends with grpc-status 5, then stream 3 is answered.
        if (f.type === T.HEADERS && f.id === 1) c.socket.write(headers(1, [[':status', '200'], ['content-type', 'application/grpc']], false));
        if (f.type === T.DATA && f.id === 3 && f.flags & END_STREAM) {
          c.socket.write(headers(1, [['grpc-status', '5'], ['grpc-message', 'gone']], true));
          c.socket.write(okAnswer(3));
        }
      },
    );
    const ch = new H2Channel(srv.target, { keepaliveTimeMs: 0 });
    const thrown = new Error('bug in listener');
    // node:test's own uncaughtException listener would fail the test: it steps aside meanwhile.
    const runnerListeners = process.listeners('uncaughtException');
    process.removeAllListeners('uncaughtException');
    let onUncaught!: (e: unknown) => void;
    const uncaught = new Promise<unknown>((r) => (onUncaught = r));
    process.once('uncaughtException', onUncaught);
    try {
      await ch.connect(soon());
      const s = ch.stream({ path: '/etcdserverpb.Watch/Watch', requestSerialize: ident, responseDeserialize: ident }, undefined);
      const streamErrors: unknown[] = [];
      s.on('error', (e) => {
        streamErrors.push(e);
        throw thrown;
      });
      const r = await ch.call('/x/Put', Buffer.from('p'), dec, undefined, soon());
      assert.equal(r, 0, 'the unrelated unary call succeeds');
      assert.equal(await uncaught, thrown, "the listener's exception surfaces as uncaughtException");
      assert.equal(streamErrors.length, 1);
      assert.ok(streamErrors[0] instanceof H2ServiceError);
      assert.equal((streamErrors[0] as H2ServiceError).code, Status.NOT_FOUND);
      const c0 = await srv.conn(0);
      await serverPing(c0); // the connection still answers, and all the client wrote is logged
      assert.deepEqual(
        srv.log.filter((f) => f.type === T.GOAWAY),
        [],
        'the client sent no GOAWAY',
      );
      assert.ok(ch.isReady, 'the connection still takes calls');
      assert.equal(srv.conns.length, 1);
    } finally {
      process.removeListener('uncaughtException', onUncaught);
      for (const l of runnerListeners) process.on('uncaughtException', l);
      ch.close();
      await srv.close();
    }
  });

  it('MAX_CONCURRENT_STREAMS 1 and GOAWAY(last 0): the queued call is not opened on that connection; both succeed on a new one', async () => {
    // Old behaviour: refusing the open call A freed the server's one slot, and the queued call B was
    // opened on the connection that had just said GOAWAY (HEADERS and DATA on stream 3, then reset
    // CANCEL), a request sent to a server that said it would process no more; both calls then
    // succeeded on connection 1 all the same, so only the frame log shows it.
    const srv = await rawServer(
      (c) => c.socket.write(settings(c.n === 0 ? [[MAX_CONCURRENT_STREAMS, 1]] : [])),
      (c, f) => {
        if (c.n === 0 && f.type === T.HEADERS && f.id === 1) c.socket.write(goaway(0));
        if (c.n > 0 && f.type === T.DATA && f.flags & END_STREAM) c.socket.write(okAnswer(f.id));
      },
    );
    const ch = new H2Channel(srv.target, { keepaliveTimeMs: 0 });
    try {
      await ch.connect(soon());
      // A opens stream 1 (the server's one slot); B waits behind it.
      const A = ch.call('/x/A', Buffer.from('a'), dec, undefined, soon(3000)).then(() => 'A ok', (e: Error) => `A ${e.message}`);
      const B = ch.call('/x/B', Buffer.from('b'), dec, undefined, soon(3000)).then(() => 'B ok', (e: Error) => `B ${e.message}`);
      assert.deepEqual([await A, await B], ['A ok', 'B ok']);
      const c0 = await srv.conn(0);
      await c0.closed; // the client closed connection 0 (nothing open on it): its log is complete
      const h0 = headersOf(c0.frames);
      assert.deepEqual(
        h0.map((f) => [f.id, pathOf(f)]),
        [[1, '/x/A']],
        'no HEADERS on connection 0 after its GOAWAY: only A, written before it',
      );
      const c1 = await srv.conn(1);
      assert.deepEqual(headersOf(c1.frames).map(pathOf).sort(), ['/x/A', '/x/B'], 'both calls went to connection 1');
      assert.equal(srv.conns.length, 2);
    } finally {
      ch.close();
      await srv.close();
    }
  });

  it('MAX_CONCURRENT_STREAMS 1 and a connection dropped by keepalive: the queued call is never written there, and is retried on a new connection', async () => {
    // Old behaviour: failing the open call A freed the slot, and the queued call B's request was
    // written on the connection being dropped just before its socket was destroyed; B then failed
    // UNAVAILABLE as outcome-unknown (not retried), and no second connection was made.
    const srv = await rawServer(
      (c) => c.socket.write(settings([[MAX_CONCURRENT_STREAMS, 1]])),
      (c, f) => {
        // Connection 0 answers nothing (no PING ACK, no call); later ones answer pings and calls.
        if (c.n === 0) return;
        if (f.type === T.PING && !(f.flags & ACK)) c.socket.write(frame(T.PING, ACK, 0, f.payload));
        if (f.type === T.DATA && f.flags & END_STREAM) c.socket.write(okAnswer(f.id));
      },
    );
    const ch = new H2Channel(srv.target, { keepaliveTimeMs: 100, keepaliveTimeoutMs: 100 });
    try {
      await ch.connect(soon());
      const A = ch.call('/x/A', Buffer.from('a'), ident, undefined, soon(10_000)).then(
        () => assert.fail('A succeeded'),
        (e: unknown) => e,
      );
      const B = ch.call('/x/B', Buffer.from('b'), ident, undefined, soon(10_000));
      const errA = await A;
      assert.ok(errA instanceof H2ServiceError);
      assert.equal(errA.code, Status.UNAVAILABLE);
      assert.match(errA.details, /keepalive ping not answered/);
      assert.notEqual(errA.notSent, true, 'A was written: its outcome is unknown');
      assert.deepEqual(await B, Buffer.alloc(0), 'B succeeds, on a new connection');
      const c0 = await srv.conn(0);
      await c0.closed; // dropped by the client: its log is complete
      assert.deepEqual(
        headersOf(c0.frames).map((f) => [f.id, pathOf(f)]),
        [[1, '/x/A']],
        "connection 0 got only A's HEADERS",
      );
      const c1 = await srv.conn(1);
      assert.deepEqual(headersOf(c1.frames).map(pathOf), ['/x/B'], "connection 1 got B's HEADERS");
      assert.equal(srv.conns.length, 2);
    } finally {
      ch.close();
      await srv.close();
    }
  });

  it('stream ids running out: the old connection closes once its stream ends; calls go on on a new connection', async () => {
    // Old behaviour: the channel dialled a new connection and forgot the exhausted one, which was
    // never closed (not after its last call ended, not by channel.close()): a leaked socket.
    const srv = await rawServer(
      (c) => c.socket.write(settings([])),
      (c, f) => {
        if (f.type === T.DATA && f.flags & END_STREAM) c.socket.write(okAnswer(f.id));
      },
    );
    const ch = new H2Channel(srv.target, { keepaliveTimeMs: 0 });
    try {
      await ch.connect(soon());
      const wire0 = (ch as any).conn.wire;
      wire0.nextId = 0x7fffffff; // as after 2^30 streams: one id left
      assert.equal(await ch.call('/x/A', Buffer.from('a'), dec, undefined, soon()), 0, 'call 1, on the last id');
      assert.equal(wire0.destroyed, true, 'the client closed connection 0 once its last stream ended');
      assert.equal(await ch.call('/x/B', Buffer.from('b'), dec, undefined, soon()), 0, 'call 2');
      assert.equal(await ch.call('/x/C', Buffer.from('c'), dec, undefined, soon()), 0, 'call 3');
      const c0 = await srv.conn(0);
      await c0.closed; // the server sees connection 0's socket close
      assert.deepEqual(
        headersOf(c0.frames).map((f) => [f.id, pathOf(f)]),
        [[0x7fffffff, '/x/A']],
      );
      assert.ok(c0.frames.some((f) => f.type === T.GOAWAY), 'closed with a GOAWAY');
      const c1 = await srv.conn(1);
      assert.deepEqual(
        headersOf(c1.frames).map((f) => [f.id, pathOf(f)]),
        [
          [1, '/x/B'],
          [3, '/x/C'],
        ],
      );
      assert.equal(srv.conns.length, 2);
      assert.equal(c1.socket.destroyed, false, 'connection 1 stays open');
    } finally {
      ch.close();
      await srv.close();
    }
  });

  it("after cancel() no 'error' comes: not an oversized write()'s, not a connectionless stream's", async () => {
    // Old behaviour: both errors were scheduled for the next tick before cancel() and emitted anyway
    // ("Sent message larger than max (100 vs. 10)"; "No connection established").
    const srv = await rawServer(
      (c) => c.socket.write(settings([])),
      () => {},
    );
    const ch = new H2Channel(srv.target, { keepaliveTimeMs: 0, maxSendMessageLength: 10 });
    // Never connected: stream() finds no connection (and dials none).
    const idle = new H2Channel(srv.target, { keepaliveTimeMs: 0 });
    try {
      await ch.connect(soon());
      const events: string[] = [];
      const s = ch.stream({ path: '/w', requestSerialize: ident, responseDeserialize: ident }, undefined);
      for (const ev of ['error', 'end', 'data'] as const) s.on(ev, (e?: Error) => events.push(`s ${ev} ${e?.message ?? ''}`));
      assert.equal(s.write(Buffer.alloc(100)), false, 'the oversized write is refused');
      s.cancel();

      const s2 = idle.stream({ path: '/w', requestSerialize: ident, responseDeserialize: ident }, undefined);
      for (const ev of ['error', 'end', 'data'] as const) s2.on(ev, (e?: Error) => events.push(`s2 ${ev} ${e?.message ?? ''}`));
      s2.cancel();

      await turns();
      await serverPing(await srv.conn(0)); // a round trip on the connection too
      await turns();
      assert.deepEqual(events, [], 'no event after cancel()');
      assert.equal(srv.conns.length, 1, 'the idle channel dialled nothing');
    } finally {
      ch.close();
      idle.close();
      await srv.close();
    }
  });
});
