// A broken or hostile server costs the client a bounded amount of memory and CPU and a clear
// error, never a crash. The rows that are about memory run the public Client in a child process
// whose V8 heap is capped at 256 MB and assert how it ended and how much its RSS grew; the others
// drive one member's transport (src/client/transport/http2.ts) directly and assert the gRPC status.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as http2 from 'node:http2';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'node:test';
import * as rpc from '../src/client/methods.js';
import * as pb from '../src/proto/etcd.js';
import { Http2Transport, LAST_STREAM_ID, LIMITS } from '../src/client/transport/http2.js';
import { Status, TransportError } from '../src/client/transport/transport.js';
import { Client, ClientClosedError, InvalidArgumentError, WriteOutcomeUnknownError } from '../src/index.js';
import { waitFor } from './helpers.js';
import {
  FRAME,
  GRPC_RESPONSE_HEADERS,
  flood,
  grpcMessage,
  goaway,
  grpcServer,
  h2frame,
  indexed,
  indexedLiteral,
  literal,
  rawAnswer,
  rawServer,
  rstStream,
  type HostileServer,
} from './hostile-servers.js';

const CHILD = fileURLToPath(new URL('./fixtures/hostile-client.mjs', import.meta.url));
/** What a child may grow by: far below what each attack cost before the limits (150-360 MB). */
const GROWTH_LIMIT_MB = 64;

interface ChildOutcome {
  ok: boolean;
  name?: string;
  message?: string;
  ms: number;
  growthMb: number;
}

/** One Client read against `server` in a child with a 256 MB heap; how it ended. */
async function clientInChild(server: HostileServer, timeoutMs = 4000): Promise<ChildOutcome> {
  const child = spawn(process.execPath, ['--max-old-space-size=256', CHILD, String(server.port), String(timeoutMs)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr.on('data', (c: Buffer) => (err += c.toString()));
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve) =>
    child.on('exit', (c, s) => resolve([c, s])),
  );
  assert.equal(signal, null, `the client process was killed by ${signal}: ${err.slice(-2000)}`);
  assert.equal(code, 0, `the client process exited ${code}: ${err.slice(-2000)}`);
  return JSON.parse(out.trim().split('\n').pop()!) as ChildOutcome;
}

function transport(port: number, overrides: Partial<ConstructorParameters<typeof Http2Transport>[1]> = {}): Http2Transport {
  return new Http2Transport(`127.0.0.1:${port}`, {
    tls: null,
    dialTimeoutMs: 2000,
    keepaliveTimeMs: 0,
    keepaliveTimeoutMs: 1000,
    maxReceiveMessageBytes: 1024 * 1024,
    maxSendMessageBytes: 1024 * 1024,
    ...overrides,
  });
}

/** The TransportError a Range on `t` fails with. */
async function rangeFailure(t: Http2Transport, timeoutMs = 4000): Promise<TransportError> {
  try {
    await t.unary(rpc.KV.range, { key: Buffer.from('k') }, {}, performance.now() + timeoutMs);
  } catch (err) {
    assert.ok(err instanceof TransportError, `a TransportError, got ${String(err)}`);
    return err;
  }
  assert.fail('the call succeeded');
}

async function withServer<T>(server: HostileServer, fn: (s: HostileServer) => Promise<T>): Promise<T> {
  try {
    return await fn(server);
  } finally {
    await server.close();
  }
}

describe('hostile servers: memory stays bounded and the process survives (Client in a child, heap capped at 256 MB)', () => {
  it('endless empty CONTINUATION frames: the call fails, the process lives', async () => {
    const server = await rawServer({
      onRequest: (socket, id) => {
        socket.write(h2frame(FRAME.HEADERS, 0, id, GRPC_RESPONSE_HEADERS.subarray(0, 1)));
        const empty = h2frame(FRAME.CONTINUATION, 0, id);
        flood(socket, () => empty, 2_000_000);
      },
    });
    const r = await withServer(server, () => clientInChild(server));
    assert.equal(r.ok, false);
    assert.ok(r.growthMb < GROWTH_LIMIT_MB, `RSS grew ${r.growthMb} MB`);
  });

  it('an HPACK bomb (a few KB of trailers that decode to 80 million characters): refused, bounded', async () => {
    const server = await rawServer({
      onRequest: (socket, id) => {
        socket.write(h2frame(FRAME.HEADERS, 4, id, GRPC_RESPONSE_HEADERS));
        // One 4,000-character grpc-message in the dynamic table, then 20,000 one-byte references to it.
        const block = Buffer.concat([
          indexedLiteral('grpc-message', 'x'.repeat(4000)),
          Buffer.alloc(20_000, indexed(62)[0]),
          literal('grpc-status', '13'),
        ]);
        const frames: Buffer[] = [];
        for (let at = 0; at < block.length; at += 16_000) {
          const part = block.subarray(at, at + 16_000);
          const last = at + 16_000 >= block.length;
          frames.push(h2frame(at === 0 ? FRAME.HEADERS : FRAME.CONTINUATION, (last ? 4 : 0) | (at === 0 ? 1 : 0), id, part));
        }
        socket.write(Buffer.concat(frames));
      },
    });
    const r = await withServer(server, () => clientInChild(server));
    assert.equal(r.ok, false);
    assert.ok(r.growthMb < GROWTH_LIMIT_MB, `RSS grew ${r.growthMb} MB`);
    assert.ok((r.message ?? '').length < 2000, `the error message is bounded (${(r.message ?? '').length} characters)`);
  });

  it('a message announced as 4 GB, then 200 MB of DATA: refused when the length arrives, bounded', async () => {
    const server = await grpcServer((stream) => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' });
      const head = Buffer.from([0, 0xff, 0xff, 0xff, 0xff]);
      stream.write(head);
      const chunk = Buffer.alloc(1024 * 1024, 7);
      let sent = 0;
      const pump = (): void => {
        while (sent < 200 && !stream.destroyed && !stream.closed) {
          sent++;
          if (!stream.write(chunk)) return void stream.once('drain', pump);
        }
      };
      pump();
    });
    const r = await withServer(server, () => clientInChild(server, 20_000));
    assert.equal(r.ok, false);
    assert.match(r.message ?? '', /4294967295 bytes, above the limit of 67108864/);
    assert.ok(r.growthMb < GROWTH_LIMIT_MB, `RSS grew ${r.growthMb} MB`);
  });

  it('a PING flood from a server that stops reading: the connection is ended, bounded', async () => {
    const server = await rawServer({
      onRequest: (socket) => {
        socket.pause(); // reads nothing more: our PING ACKs pile up on our side
        let n = 0;
        flood(socket, () => h2frame(FRAME.PING, 0, 0, Buffer.alloc(8, n++ & 0xff)), 3_000_000);
      },
    });
    const r = await withServer(server, () => clientInChild(server));
    assert.equal(r.ok, false);
    assert.ok(r.growthMb < GROWTH_LIMIT_MB, `RSS grew ${r.growthMb} MB`);
  });
});

describe('hostile servers: each bad answer is a clear error with the right status', () => {
  it('SETTINGS_HEADER_TABLE_SIZE = 0 (as nghttp2 may be configured): calls work', async () => {
    const server = await grpcServer(
      (stream) => {
        stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
        stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
        stream.end(grpcMessage(Buffer.alloc(0)));
      },
      { headerTableSize: 0 },
    );
    await withServer(server, async () => {
      const t = transport(server.port);
      try {
        for (let i = 0; i < 3; i++) await t.unary(rpc.KV.range, { key: Buffer.from('k') }, { token: 'secret' }, performance.now() + 4000);
      } finally {
        t.close();
      }
    });
  });

  const answer =
    (
      body: Buffer | undefined,
      trailers: http2.OutgoingHttpHeaders,
      headers: http2.OutgoingHttpHeaders = { ':status': 200, 'content-type': 'application/grpc' },
    ) =>
    (stream: http2.ServerHttp2Stream): void => {
      stream.respond(headers, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers(trailers));
      stream.end(body);
    };

  const cases: { name: string; respond: (s: http2.ServerHttp2Stream) => void; status: number; details: RegExp }[] = [
    {
      name: 'two messages on a unary call',
      respond: answer(Buffer.concat([grpcMessage(Buffer.alloc(0)), grpcMessage(Buffer.alloc(0))]), { 'grpc-status': '0' }),
      status: Status.INTERNAL,
      details: /more than one message/,
    },
    {
      name: 'a duplicated grpc-status',
      respond: answer(grpcMessage(Buffer.alloc(0)), { 'grpc-status': ['0', '0'] }),
      status: Status.INTERNAL,
      details: /invalid grpc-status/,
    },
    {
      name: 'a non-numeric grpc-status',
      respond: answer(grpcMessage(Buffer.alloc(0)), { 'grpc-status': 'OK' }),
      status: Status.INTERNAL,
      details: /invalid grpc-status \(OK\)/,
    },
    {
      name: 'an empty grpc-status',
      respond: answer(grpcMessage(Buffer.alloc(0)), { 'grpc-status': '' }),
      status: Status.INTERNAL,
      details: /invalid grpc-status/,
    },
    {
      name: 'a wrong content-type',
      respond: answer(Buffer.from('<html>'), {}, { ':status': 200, 'content-type': 'text/html' }),
      status: Status.UNKNOWN,
      details: /content-type text\/html, not gRPC/,
    },
    {
      name: 'no message with status OK',
      respond: answer(undefined, { 'grpc-status': '0' }),
      status: Status.INTERNAL,
      details: /no message/,
    },
  ];
  for (const c of cases) {
    it(`${c.name}: ${Object.keys(Status).find((k) => Status[k as keyof typeof Status] === c.status)}`, async () => {
      const server = await grpcServer(c.respond);
      await withServer(server, async () => {
        const t = transport(server.port);
        try {
          const err = await rangeFailure(t);
          assert.equal(err.status, c.status, err.message);
          assert.match(err.details, c.details);
          assert.equal(err.notSent, false);
        } finally {
          t.close();
        }
      });
    });
  }

  it('RST_STREAM INTERNAL_ERROR after the response headers: INTERNAL, the outcome unknown', async () => {
    const server = await rawServer({
      onRequest: (socket, id) =>
        socket.write(
          Buffer.concat([h2frame(FRAME.HEADERS, 4, id, GRPC_RESPONSE_HEADERS), rstStream(id, http2.constants.NGHTTP2_INTERNAL_ERROR)]),
        ),
    });
    await withServer(server, async () => {
      const t = transport(server.port);
      try {
        const err = await rangeFailure(t);
        assert.equal(err.status, Status.INTERNAL, err.message);
        assert.match(err.details, /reset the call \(HTTP\/2 error code 2\)/);
        assert.equal(err.notSent, false);
      } finally {
        t.close();
      }
    });
  });

  it('a grpc-message with CR/LF and 10,000 characters: control characters gone, length capped', async () => {
    const server = await grpcServer(
      answer(undefined, { 'grpc-status': '9', 'grpc-message': encodeURIComponent('line one\r\nFAKE LOG LINE\u0007') + 'y'.repeat(10_000) }),
    );
    await withServer(server, async () => {
      const t = transport(server.port);
      try {
        const err = await rangeFailure(t);
        assert.equal(err.status, Status.FAILED_PRECONDITION);
        assert.doesNotMatch(err.message, /[\r\n\u0007]/);
        assert.match(err.details, /^line one {2}FAKE LOG LINE /);
        assert.ok(err.details.length <= LIMITS.grpcMessageChars + 40, `${err.details.length} characters`);
      } finally {
        t.close();
      }
    });
  });

  it('a GOAWAY before the server processed our stream: the request is sent again on a new connection, once', async () => {
    let connections = 0;
    const server = await rawServer({
      onConnect: () => connections++,
      onRequest: (socket, id) => socket.write(connections === 1 ? goaway(0) : rawAnswer(id)),
    });
    await withServer(server, async () => {
      const t = transport(server.port);
      try {
        await t.unary(rpc.KV.range, { key: Buffer.from('k') }, {}, performance.now() + 4000);
        assert.equal(server.streams(), 2, 'the refused stream was sent again');
        assert.equal(connections, 2, 'on a new connection');
      } finally {
        t.close();
      }
    });
  });

  it('a GOAWAY after the server took our stream: UNAVAILABLE with the outcome unknown (never sent again)', async () => {
    const server = await grpcServer((stream, session) => {
      session.goaway(http2.constants.NGHTTP2_INTERNAL_ERROR, stream.id);
    });
    await withServer(server, async () => {
      const t = transport(server.port);
      try {
        const err = await rangeFailure(t);
        assert.equal(err.status, Status.UNAVAILABLE, err.message);
        assert.equal(err.notSent, false);
        assert.equal(server.streams(), 1);
      } finally {
        t.close();
      }
    });
  });

  it('a server that never answers SETTINGS: the connection attempt times out; the call fails UNAVAILABLE, not sent', async () => {
    const server = await rawServer({ silent: true });
    await withServer(server, async () => {
      const t = transport(server.port, { dialTimeoutMs: 300 });
      try {
        const err = await rangeFailure(t);
        assert.equal(err.status, Status.UNAVAILABLE);
        assert.equal(err.notSent, true);
        assert.match(err.details, /no connection within 300 ms/);
      } finally {
        t.close();
      }
    });
  });

  it('Client.close() while a call waits on a server that never answers SETTINGS: ClientClosedError at once, not at the dial timeout', async () => {
    const server = await rawServer({ silent: true });
    await withServer(server, async () => {
      const client = new Client({ endpoints: `127.0.0.1:${server.port}`, dialTimeoutMs: 600_000, callTimeoutMs: 600_000 });
      const call = client.get('k');
      await waitFor(() => server.connections() > 0, 'the client to connect');
      await client.close();
      await assert.rejects(call, (e: unknown) => e instanceof ClientClosedError);
    });
  });

  it('a SETTINGS frame with 175,000 entries: the connection is refused, not walked', async () => {
    const entries = Buffer.alloc(175_000 * 6);
    for (let i = 0; i < 175_000; i++) {
      entries.writeUInt16BE(0x4, i * 6); // SETTINGS_INITIAL_WINDOW_SIZE
      entries.writeUInt32BE(65535, i * 6 + 2);
    }
    // Larger than the 16 KB frame size a client accepts by default: split into legal frames.
    const frames: Buffer[] = [];
    for (let at = 0; at < entries.length; at += 16_380) frames.push(h2frame(FRAME.SETTINGS, 0, 0, entries.subarray(at, at + 16_380)));
    const server = await rawServer({ silent: true, onConnect: (socket) => socket.write(Buffer.concat(frames)) });
    await withServer(server, async () => {
      const t = transport(server.port);
      try {
        const err = await rangeFailure(t);
        assert.equal(err.status, Status.UNAVAILABLE, err.message);
      } finally {
        t.close();
      }
    });
  });

  it('a GOAWAY with code REFUSED_STREAM naming our stream as processed: not sent again (the write may have landed)', async () => {
    const server = await rawServer({ onRequest: (socket, id) => socket.write(goaway(id, http2.constants.NGHTTP2_REFUSED_STREAM)) });
    await withServer(server, async () => {
      const t = transport(server.port);
      try {
        const err = await rangeFailure(t);
        assert.equal(err.notSent, false, err.message);
        assert.equal(server.streams(), 1, 'not sent again');
      } finally {
        t.close();
      }
    });
  });

  it('a GOAWAY while a stream is open: the stream ends at once with UNAVAILABLE, for its owner to reopen elsewhere', {
    timeout: 20_000,
  }, async () => {
    const server = await rawServer({
      onRequest: (socket, id) => socket.write(Buffer.concat([h2frame(FRAME.HEADERS, 4, id, GRPC_RESPONSE_HEADERS), goaway(id)])),
    });
    await withServer(server, async () => {
      const t = transport(server.port);
      try {
        await t.connect(performance.now() + 2000);
        const s = t.stream(rpc.Watch.watch, {});
        const ended = new Promise<Error>((resolve) => s.on('error', resolve));
        s.write({ createRequest: { key: Buffer.from('k') } });
        const err = await ended;
        assert.ok(err instanceof TransportError);
        assert.equal(err.status, Status.UNAVAILABLE);
        assert.match(err.details, /going away/);
      } finally {
        t.close();
      }
    });
  });

  it('a peer that goes silent between short calls is found out by a ping at the next call, and the next connection is new', async () => {
    let silent = false;
    const server = await rawServer({ onRequest: (socket, id) => !silent && socket.write(rawAnswer(id)) });
    await withServer(server, async () => {
      // Pings after 300 ms of silence, 200 ms to answer; every call is shorter than that.
      const t = transport(server.port, { keepaliveTimeMs: 300, keepaliveTimeoutMs: 200 });
      try {
        await t.unary(rpc.KV.range, { key: Buffer.from('k') }, {}, performance.now() + 2000);
        silent = true;
        // A server that reads but never answers, not even pings: without a ping, every call would
        // time out on this connection for as long as the kernel keeps it.
        for (let i = 0; i < 40 && server.connections() < 2; i++) {
          await t.unary(rpc.KV.range, { key: Buffer.from('k') }, {}, performance.now() + 100).catch(() => {});
        }
        assert.equal(server.connections(), 2, 'the silent connection was dropped and a new one made');
      } finally {
        t.close();
      }
    });
  });

  it('an answer above maxReceiveMessageBytes to a write: WriteOutcomeUnknownError (it was sent, it may have landed)', async () => {
    const server = await grpcServer(answer(grpcMessage(Buffer.alloc(4096)), { 'grpc-status': '0' }));
    await withServer(server, async () => {
      const client = new Client({ endpoints: `127.0.0.1:${server.port}`, maxReceiveMessageBytes: 1024 });
      try {
        await assert.rejects(
          client.txn({ compare: [], success: [], failure: [] }),
          (e: unknown) => e instanceof WriteOutcomeUnknownError && /4096 bytes, above the limit of 1024/.test(e.message),
        );
      } finally {
        await client.close();
      }
    });
  });

  it('trailers above 16 KiB are refused on the first call of a connection too', async () => {
    const server = await grpcServer(answer(grpcMessage(Buffer.alloc(0)), { 'grpc-status': '0', 'x-big': 'y'.repeat(20_000) }));
    await withServer(server, async () => {
      const t = transport(server.port);
      try {
        const err = await rangeFailure(t);
        assert.notEqual(err.status, Status.OK);
      } finally {
        t.close();
      }
    });
  });

  it('timeoutMs beyond what a timer can hold (or NaN) is refused before anything is sent, instead of firing at once', async () => {
    const client = new Client({ endpoints: '127.0.0.1:1' });
    try {
      for (const timeoutMs of [Infinity, 2 ** 31, Number.NaN]) {
        await assert.rejects(
          client.get('k', { timeoutMs }),
          (e: unknown) => e instanceof InvalidArgumentError && /timeoutMs/.test(e.message),
        );
      }
    } finally {
      await client.close();
    }
  });

  it('a connection whose stream ids are nearly used up takes no new call: the next one goes to a new connection', async () => {
    const server = await grpcServer((stream) => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
      stream.end(grpcMessage(Buffer.alloc(0)));
    });
    await withServer(server, async () => {
      const t = transport(server.port);
      const range = () => t.unary(rpc.KV.range, { key: Buffer.from('k') }, {}, performance.now() + 4000);
      try {
        await range();
        // Jump this connection's next stream id to the threshold (client ids are odd; Node has the
        // method, undocumented and untyped).
        (t as unknown as { session: { h2: { setNextStreamID(id: number): void } } }).session.h2.setNextStreamID(LAST_STREAM_ID + 1);
        await range();
        assert.equal(server.connections(), 1, `the call at the threshold still ran on the old connection (streams ${server.streams()})`);
        await range();
        assert.equal(server.connections(), 2, 'the call after it opened a new connection');
        assert.equal(server.streams(), 3);
      } finally {
        t.close();
      }
    });
  });

  it('a watch event without its key-value: the stream is dropped and the watch resumes, no crash', { timeout: 20_000 }, async () => {
    // Every Watch stream confirms the watch, then sends a PUT event whose kv is missing.
    const server = await grpcServer((stream) => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' });
      stream.once('data', () => {
        const created = pb.WatchResponse.encode({ header: { revision: 5n }, watchId: 1n, created: true }).finish();
        const broken = pb.WatchResponse.encode({
          header: { revision: 6n },
          watchId: 1n,
          events: [{ type: pb.Event_EventType.PUT }],
        }).finish();
        stream.write(Buffer.concat([grpcMessage(Buffer.from(created)), grpcMessage(Buffer.from(broken))]));
      });
    });
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown): void => void uncaught.push(err);
    process.on('uncaughtException', onUncaught);
    await withServer(server, async () => {
      const c = new Client({ endpoints: `127.0.0.1:${server.port}` });
      try {
        const w = c.watch('k');
        assert.equal(await w.created, 5n);
        await waitFor(() => uncaught.length > 0 || server.streams() >= 2, 'the watch stream to be opened again');
        assert.deepEqual(uncaught, []);
        assert.equal(w.ended, false);
        await c.close();
        await assert.rejects(w[Symbol.asyncIterator]().next(), ClientClosedError);
      } finally {
        process.off('uncaughtException', onUncaught);
        await c.close();
      }
    });
  });
});
