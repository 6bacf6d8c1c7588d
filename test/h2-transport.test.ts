// The lean node:http2 unary transport (src/client/h2.ts) against real etcd, each case side by side
// with @grpc/grpc-js on the same request, so that the answers decode the same and the failures have
// the same code, details and mapping through errors.ts. Fake HTTP/2 servers stand in only where
// etcd cannot be made to misbehave on cue (silence, GOAWAY, REFUSED_STREAM, percent-encoding).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import http2 from 'node:http2';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import * as grpc from '@grpc/grpc-js';
import { H2Channel, H2ConnectError, H2ServiceError, type H2ChannelOptions } from '../src/client/h2.js';
import { fromGrpcError, isEndpointFailure, isServiceError, isStaleToken, provablyNotApplied } from '../src/client/errors.js';
import * as pb from '../src/proto/etcd.js';
import { startEtcd, startProxy, type EtcdCluster } from '../src/testing/index.js';
import { closedPort, uniquePrefix, waitFor } from './helpers.js';
import { Client, ClientClosedError } from '../src/index.js';

const run = promisify(execFile);
const KV = pb.KVService;
const LONG = 30_000;

/** What a method descriptor needs on both transports. */
interface Method<Req, Res> {
  path: string;
  requestSerialize: (v: Req) => Buffer;
  responseDeserialize: (b: Buffer) => Res;
}

function grpcClient(target: string, opts: { creds?: grpc.ChannelCredentials; options?: grpc.ChannelOptions } = {}): grpc.Client {
  return new grpc.Client(target, opts.creds ?? grpc.credentials.createInsecure(), {
    'grpc.max_receive_message_length': -1,
    'grpc.max_send_message_length': 2 * 1024 * 1024,
    'grpc.keepalive_time_ms': 6000,
    'grpc.keepalive_timeout_ms': 3000,
    'grpc.keepalive_permit_without_calls': 0,
    ...opts.options,
  });
}

/** The Connection's callUnary, on grpc-js. */
function viaGrpc<Req, Res>(client: grpc.Client, m: Method<Req, Res>, req: Req, md: Record<string, string> = {}, timeoutMs = LONG, signal?: AbortSignal): Promise<Res> {
  const meta = new grpc.Metadata();
  for (const [k, v] of Object.entries(md)) meta.set(k, v);
  return new Promise((resolve, reject) => {
    const call = client.makeUnaryRequest(m.path, m.requestSerialize, m.responseDeserialize, req, meta, { deadline: Date.now() + timeoutMs }, (err, res) =>
      err ? reject(err) : resolve(res as Res),
    );
    signal?.addEventListener('abort', () => call.cancel(), { once: true });
  });
}

function viaH2<Req, Res>(ch: H2Channel, m: Method<Req, Res>, req: Req, md: Record<string, string> = {}, timeoutMs = LONG, signal?: AbortSignal): Promise<Res> {
  return ch.unary(m, req, md, performance.now() + timeoutMs, signal);
}

async function failure(p: Promise<unknown>): Promise<grpc.ServiceError> {
  try {
    await p;
  } catch (err) {
    assert.ok(isServiceError(err), `a ServiceError, got ${String(err)}`);
    return err;
  }
  assert.fail('expected the call to fail');
}

/** How errors.ts and connection.ts see a failure: everything they read. */
function mapped(err: grpc.ServiceError) {
  const e = fromGrpcError(err, 'doing it');
  return {
    isServiceError: isServiceError(err),
    code: err.code,
    endpointFailure: isEndpointFailure(err),
    notApplied: provablyNotApplied(err),
    staleToken: isStaleToken(err.details),
    mappedTo: e.constructor.name,
    mappedCode: e.code,
    metadataGet: Array.isArray(err.metadata.get('x-none')),
  };
}

/** Both failures have the same shape; `details` equal unless `detailsDiffer` (timings, addresses). */
function assertSame(h2err: grpc.ServiceError, grpcErr: grpc.ServiceError, { detailsDiffer = false } = {}): void {
  assert.ok(h2err instanceof H2ServiceError);
  // "Provably not applied" may be more precise on h2, never less: it knows when a request never left
  // (a refused stream, no connection), which grpc-js can only guess from its message.
  const h = mapped(h2err);
  const g = mapped(grpcErr);
  assert.equal(h.notApplied, g.notApplied || h2err.notSent, `h2's notApplied is grpc-js's, or true when not sent (${h2err.message})`);
  assert.deepEqual({ ...h, notApplied: g.notApplied }, g, `h2 ${h2err.message} vs grpc-js ${grpcErr.message}`);
  if (!detailsDiffer) {
    assert.equal(h2err.details, grpcErr.details);
    assert.equal(h2err.message, grpcErr.message);
    assert.equal(fromGrpcError(h2err, 'x').message, fromGrpcError(grpcErr, 'x').message);
  }
}

const enc = (s: string): Buffer => Buffer.from(s);
const notSent = (e: grpc.ServiceError): boolean => (e as unknown as H2ServiceError).notSent;

describe('h2 transport on plain etcd, side by side with grpc-js', () => {
  let etcd: EtcdCluster;
  let target: string;
  let g: grpc.Client;
  let h: H2Channel;
  const root = uniquePrefix('h2');

  before(async () => {
    etcd = await startEtcd();
    target = etcd.endpoints[0]!;
    g = grpcClient(target);
    h = new H2Channel(target);
  });
  after(async () => {
    try {
      await viaH2(h, KV.deleteRange, { key: enc(root), rangeEnd: enc(root.slice(0, -1) + String.fromCharCode(root.charCodeAt(root.length - 1) + 1)) });
    } finally {
      g.close();
      h.close();
      await etcd.stop();
    }
  });

  it('Put, Range, Txn and DeleteRange decode the same', async () => {
    const k = enc(`${root}a`);
    const put1 = await viaGrpc(g, KV.put, { key: k, value: enc('1'), prevKv: true });
    const put2 = await viaH2(h, KV.put, { key: k, value: enc('2'), prevKv: true });
    assert.equal(put2.header!.revision, put1.header!.revision! + 1n);
    assert.equal(put2.header!.clusterId, put1.header!.clusterId);
    assert.equal(put2.prevKv!.value!.toString(), '1');
    const range = { key: enc(root), rangeEnd: enc(`${root}\xff`) };
    assert.deepEqual(await viaH2(h, KV.range, range), await viaGrpc(g, KV.range, range));
    // A read-only Txn: identical answers.
    const txn: pb.TxnRequest = {
      compare: [{ key: k, target: pb.Compare_CompareTarget.VALUE, result: pb.Compare_CompareResult.EQUAL, value: enc('2') }],
      success: [{ requestRange: { key: k } }],
      failure: [],
    };
    const tg = await viaGrpc(g, KV.txn, txn);
    assert.deepEqual(await viaH2(h, KV.txn, txn), tg);
    assert.equal(tg.succeeded, true);
    // A write Txn through h2, read back through grpc-js.
    const w = await viaH2(h, KV.txn, { compare: [], success: [{ requestPut: { key: enc(`${root}b`), value: enc('x') } }], failure: [] });
    const back = await viaGrpc(g, KV.range, { key: enc(`${root}b`) });
    assert.equal(back.kvs![0]!.modRevision, w.header!.revision);
    const before = await viaGrpc(g, KV.range, range);
    const del = await viaH2(h, KV.deleteRange, { ...range, prevKv: true });
    assert.equal(del.deleted, 2n);
    assert.deepEqual(del.prevKvs, before.kvs);
  });

  it('an etcd error has the same code, details and mapping: duplicate keys in a Txn', async () => {
    const k = enc(`${root}dup`);
    const txn: pb.TxnRequest = { compare: [], success: [{ requestPut: { key: k, value: enc('1') } }, { requestPut: { key: k, value: enc('2') } }], failure: [] };
    const eh = await failure(viaH2(h, KV.txn, txn));
    const eg = await failure(viaGrpc(g, KV.txn, txn));
    assert.equal(eg.code, grpc.status.INVALID_ARGUMENT);
    assertSame(eh, eg);
  });

  it('an etcd error has the same code, details and mapping: a compacted revision', async () => {
    const k = enc(`${root}c`);
    const first = await viaH2(h, KV.put, { key: k, value: enc('1') });
    const second = await viaH2(h, KV.put, { key: k, value: enc('2') });
    await viaH2(h, KV.compact, { revision: second.header!.revision, physical: false });
    const req = { key: k, revision: first.header!.revision };
    const eh = await failure(viaH2(h, KV.range, req));
    const eg = await failure(viaGrpc(g, KV.range, req));
    assert.equal(eg.code, grpc.status.OUT_OF_RANGE);
    assertSame(eh, eg);
    assert.equal(mapped(eh).mappedTo, 'CompactedError');
    await viaH2(h, KV.deleteRange, { key: k });
  });

  it('the maximum message sizes, as grpc-js enforces them', async () => {
    const k = enc(`${root}big`);
    await viaH2(h, KV.put, { key: k, value: Buffer.alloc(1000, 'x') });
    const small = new H2Channel(target, { maxReceiveMessageLength: 100, maxSendMessageLength: 100 });
    const gs = grpcClient(target, { options: { 'grpc.max_receive_message_length': 100, 'grpc.max_send_message_length': 100 } });
    try {
      const eh = await failure(viaH2(small, KV.range, { key: k }));
      const eg = await failure(viaGrpc(gs, KV.range, { key: k }));
      assert.equal(eg.code, grpc.status.RESOURCE_EXHAUSTED);
      assertSame(eh, eg, { detailsDiffer: true });
      const sh = await failure(viaH2(small, KV.put, { key: k, value: Buffer.alloc(200) }));
      assert.equal(sh.code, grpc.status.RESOURCE_EXHAUSTED);
      assert.equal(notSent(sh), true);
      // Still usable.
      assert.equal((await viaH2(small, KV.range, { key: k, countOnly: true })).count, 1n);
    } finally {
      small.close();
      gs.close();
      await viaH2(h, KV.deleteRange, { key: k });
    }
  });

  it('a closed port: UNAVAILABLE, not a deadline, and provably not applied, as grpc-js', async () => {
    const port = await closedPort();
    const ch = new H2Channel(`127.0.0.1:${port}`, { dialTimeoutMs: LONG });
    const gc = grpcClient(`127.0.0.1:${port}`);
    try {
      const eh = await failure(viaH2(ch, KV.put, { key: enc(`${root}x`), value: enc('1') }));
      const eg = await failure(viaGrpc(gc, KV.put, { key: enc(`${root}x`), value: enc('1') }));
      assert.equal(eh.code, grpc.status.UNAVAILABLE);
      assert.match(eh.details, /ECONNREFUSED/);
      assert.equal(notSent(eh), true);
      assertSame(eh, eg, { detailsDiffer: true });
      await assert.rejects(ch.connect(performance.now() + LONG), (e: unknown) => e instanceof H2ConnectError && e.kind === 'failed');
    } finally {
      ch.close();
      gc.close();
    }
  });

  it('keepalive: a peer that stops answering is detected and the connection closed; the next call reconnects', async () => {
    const proxy = await startProxy(target);
    const opts: H2ChannelOptions = { keepaliveTimeMs: 1000, keepaliveTimeoutMs: 500 };
    const ch = new H2Channel(proxy.endpoint, opts);
    const gc = grpcClient(proxy.endpoint, { options: { 'grpc.keepalive_time_ms': 1000, 'grpc.keepalive_timeout_ms': 500 } });
    try {
      const k = enc(`${root}ka`);
      await viaH2(ch, KV.range, { key: k });
      await viaGrpc(gc, KV.range, { key: k });
      const accepted = proxy.accepted;
      proxy.blackhole(true);
      // Deadlines far away: only the keepalive can end these calls.
      const [eh, eg] = await Promise.all([failure(viaH2(ch, KV.range, { key: k })), failure(viaGrpc(gc, KV.range, { key: k }))]);
      assert.equal(eh.code, grpc.status.UNAVAILABLE);
      assert.match(eh.details, /keepalive/);
      assert.equal(notSent(eh), false, 'the request may have been applied');
      assertSame(eh, eg, { detailsDiffer: true });
      assert.equal(ch.isReady, false);
      proxy.cut();
      proxy.blackhole(false);
      await viaH2(ch, KV.range, { key: k });
      assert.ok(proxy.accepted > accepted, 'a new connection');
    } finally {
      ch.close();
      gc.close();
      await proxy.close();
    }
  });
});

describe('h2 transport: deadlines, cancellation, GOAWAY, refused streams and trailers (fake servers)', () => {
  let silent: Server;
  const sockets = new Set<Socket>();
  let silentTarget: string;
  /** Connections the silent listener accepted (reset by the tests that count them). */
  let accepted = 0;

  before(async () => {
    silent = createServer((s) => {
      accepted++;
      sockets.add(s);
      s.on('error', () => {});
    });
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    silentTarget = `127.0.0.1:${(silent.address() as { port: number }).port}`;
  });
  after(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((r) => silent.close(r));
  });

  /** An HTTP/2 server on 127.0.0.1 whose streams `onStream` handles. */
  async function h2Server(onStream: (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, n: number) => void) {
    const server = http2.createServer();
    let n = 0;
    const seen: http2.IncomingHttpHeaders[] = [];
    server.on('stream', (stream, headers) => {
      stream.on('error', () => {});
      seen.push(headers);
      onStream(stream, headers, n++);
    });
    const sessions = new Set<http2.ServerHttp2Session>();
    server.on('session', (s) => {
      sessions.add(s);
      s.on('error', () => {});
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const target = `127.0.0.1:${(server.address() as { port: number }).port}`;
    return {
      target,
      seen,
      get streams() {
        return n;
      },
      close: () =>
        new Promise<void>((r) => {
          server.close(() => r());
          for (const s of sessions) s.destroy();
        }),
      server,
    };
  }

  /** A gRPC answer: headers, one message, trailers. */
  function answer(stream: http2.ServerHttp2Stream, body: Buffer, trailers: Record<string, string> = { 'grpc-status': '0' }): void {
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
    stream.on('wantTrailers', () => stream.sendTrailers(trailers));
    const frame = Buffer.alloc(5 + body.length);
    frame.writeUInt32BE(body.length, 1);
    body.copy(frame, 5);
    stream.end(frame);
  }
  const putResponse = (): Buffer => Buffer.from(pb.PutResponse.encode({ header: { clusterId: 1n, memberId: 2n, revision: 7n, raftTerm: 3n } }).finish());

  it('a silent TCP listener: DEADLINE_EXCEEDED, as grpc-js; connect() times out', async () => {
    const ch = new H2Channel(silentTarget, { dialTimeoutMs: LONG });
    const gc = grpcClient(silentTarget);
    try {
      const eh = await failure(viaH2(ch, KV.range, { key: enc('k') }, {}, 300));
      const eg = await failure(viaGrpc(gc, KV.range, { key: enc('k') }, {}, 300));
      assert.equal(eh.code, grpc.status.DEADLINE_EXCEEDED);
      assertSame(eh, eg, { detailsDiffer: true });
      await assert.rejects(ch.connect(performance.now() + 200), (e: unknown) => e instanceof H2ConnectError && e.kind === 'timeout');
    } finally {
      ch.close();
      gc.close();
    }
  });

  it('Client.close() while a call waits for a silent endpoint: ClientClosedError at once, as on grpc-js, not at the dial timeout', async () => {
    for (const transport of ['h2', 'grpc-js'] as const) {
      // A dial timeout far beyond the test's own: only the close can end the call in time.
      const client = new Client({ endpoints: [silentTarget], transport, dialTimeoutMs: 600_000, callTimeoutMs: 600_000 });
      const call = client.get('k');
      call.catch(() => {});
      // The call is dialling (the listener accepted the TCP connection and says nothing).
      await waitFor(() => accepted > 0, 'the dial to reach the silent listener');
      await client.close();
      await assert.rejects(call, (e: unknown) => e instanceof ClientClosedError, transport);
      accepted = 0;
    }
  });

  it('a server that accepts the stream and never answers: DEADLINE_EXCEEDED locally, grpc-timeout sent, the stream reset', async () => {
    const resets: number[] = [];
    const srv = await h2Server((stream) => stream.on('close', () => resets.push(stream.rstCode)));
    const ch = new H2Channel(srv.target);
    const gc = grpcClient(srv.target);
    try {
      const eh = await failure(viaH2(ch, KV.range, { key: enc('k') }, { token: 'tok' }, 300));
      const eg = await failure(viaGrpc(gc, KV.range, { key: enc('k') }, { token: 'tok' }, 300));
      assert.equal(eh.code, grpc.status.DEADLINE_EXCEEDED);
      assertSame(eh, eg, { detailsDiffer: true });
      const [hHeaders, gHeaders] = srv.seen;
      for (const name of ['content-type', 'te', 'token', ':path', ':method']) assert.equal(hHeaders![name], gHeaders![name], name);
      assert.match(String(hHeaders!['grpc-timeout']), /^\d{1,8}[mS]$/);
      await waitUntil(() => resets.length === 2);
      assert.deepEqual(resets, [http2.constants.NGHTTP2_CANCEL, http2.constants.NGHTTP2_CANCEL]);
    } finally {
      ch.close();
      gc.close();
      await srv.close();
    }
  });

  it('abort: CANCELLED "Cancelled on client" as grpc-js, and RST_STREAM CANCEL reaches the server', async () => {
    const resets: number[] = [];
    let arrived: () => void = () => {};
    const srv = await h2Server((stream) => {
      stream.on('close', () => resets.push(stream.rstCode));
      arrived();
    });
    const ch = new H2Channel(srv.target);
    const gc = grpcClient(srv.target);
    try {
      const errs: grpc.ServiceError[] = [];
      for (const via of [viaH2, viaGrpc] as const) {
        const ac = new AbortController();
        const came = new Promise<void>((r) => (arrived = r));
        const p = failure((via as typeof viaH2)((via === viaH2 ? ch : gc) as H2Channel, KV.range, { key: enc('k') }, {}, LONG, ac.signal));
        await came;
        ac.abort();
        errs.push(await p);
      }
      assert.equal(errs[0]!.code, grpc.status.CANCELLED);
      assertSame(errs[0]!, errs[1]!);
      await waitUntil(() => resets.length === 2);
      assert.deepEqual(resets, [http2.constants.NGHTTP2_CANCEL, http2.constants.NGHTTP2_CANCEL]);
    } finally {
      ch.close();
      gc.close();
      await srv.close();
    }
  });

  it('trailers, trailers-only and grpc-message percent-decoding read as grpc-js reads them', async () => {
    const srv = await h2Server((stream, headers) => {
      const which = String(headers['x-case']);
      if (which === 'only') {
        stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '5', 'grpc-message': 'caf%C3%A9 100%25 %E2%9C%93', 'x-extra': 'e' }, { endStream: true });
      } else if (which === 'trailers') {
        answer(stream, Buffer.alloc(0), { 'grpc-status': '9', 'grpc-message': 'etcdserver: no leader%0Anext line' });
      } else if (which === 'http') {
        stream.respond({ ':status': 503 }, { endStream: true });
      } else {
        answer(stream, putResponse());
      }
    });
    const ch = new H2Channel(srv.target);
    const gc = grpcClient(srv.target);
    try {
      const req = { key: enc('k'), value: enc('v') };
      assert.deepEqual(await viaH2(ch, KV.put, req, { 'x-case': 'ok' }), await viaGrpc(gc, KV.put, req, { 'x-case': 'ok' }));
      for (const c of ['only', 'trailers', 'http']) {
        const eh = await failure(viaH2(ch, KV.put, req, { 'x-case': c }));
        const eg = await failure(viaGrpc(gc, KV.put, req, { 'x-case': c }));
        assertSame(eh, eg);
        if (c === 'only') {
          assert.equal(eh.details, 'café 100% ✓');
          assert.deepEqual(eh.metadata.get('x-extra'), ['e']);
        }
        if (c === 'trailers') assert.equal(mapped(eh).notApplied, true, 'no leader: provably not applied');
      }
    } finally {
      ch.close();
      gc.close();
      await srv.close();
    }
  });

  it('REFUSED_STREAM and a GOAWAY below our stream: retried once, transparently, as grpc-js; then UNAVAILABLE, not sent', async () => {
    let refuse = 1;
    const srv = await h2Server((stream) => {
      if (refuse-- > 0) return stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
      answer(stream, putResponse());
    });
    const ch = new H2Channel(srv.target);
    const gc = grpcClient(srv.target);
    try {
      const req = { key: enc('k'), value: enc('v') };
      const r = await viaH2(ch, KV.put, req);
      assert.equal(r.header!.revision, 7n);
      assert.equal(srv.streams, 2, 'refused once, then answered');
      refuse = 1;
      await viaGrpc(gc, KV.put, req);
      assert.equal(srv.streams, 4, 'grpc-js retried the refused stream too');
      refuse = 4;
      const eh = await failure(viaH2(ch, KV.put, req));
      const eg = await failure(viaGrpc(gc, KV.put, req));
      assert.equal(eh.code, grpc.status.UNAVAILABLE);
      assert.equal(notSent(eh), true);
      assertSame(eh, eg);
    } finally {
      ch.close();
      gc.close();
      await srv.close();
    }

    // GOAWAY naming a last stream id below ours (node's server answers stream 1 of each connection,
    // and sends GOAWAY with last stream id 1 for any later one): a fresh connection gets the retry.
    const srv2 = await h2Server((stream) => {
      if ((stream.id ?? 0) > 1) return stream.session!.goaway(http2.constants.NGHTTP2_NO_ERROR, 1);
      answer(stream, putResponse());
    });
    const ch2 = new H2Channel(srv2.target);
    try {
      assert.equal((await viaH2(ch2, KV.put, { key: enc('k'), value: enc('v') })).header!.revision, 7n);
      assert.equal((await viaH2(ch2, KV.put, { key: enc('k'), value: enc('v') })).header!.revision, 7n);
      assert.equal(srv2.streams, 3, 'stream 3 went away unprocessed; stream 1 of a new connection answered');
    } finally {
      ch2.close();
      await srv2.close();
    }
  });

  it('a connection the server resets mid-call: UNAVAILABLE, outcome unknown', async () => {
    const srv = await h2Server((_stream, _h, n) => rawSockets[n]!.destroy());
    const rawSockets: Socket[] = [];
    srv.server.on('connection', (s: Socket) => rawSockets.push(s));
    const ch = new H2Channel(srv.target);
    const gc = grpcClient(srv.target);
    try {
      const eh = await failure(viaH2(ch, KV.put, { key: enc('k'), value: enc('v') }));
      const eg = await failure(viaGrpc(gc, KV.put, { key: enc('k'), value: enc('v') }));
      assert.equal(eh.code, grpc.status.UNAVAILABLE);
      assert.equal(notSent(eh), false);
      assertSame(eh, eg, { detailsDiffer: true });
    } finally {
      ch.close();
      gc.close();
      await srv.close();
    }
  });
});

describe('h2 transport with TLS and auth, side by side with grpc-js', () => {
  let dir: string;
  const file = (n: string): string => join(dir, n);
  const pem = (n: string): Promise<Buffer> => readFile(file(n));
  let mtls: EtcdCluster;
  let auth: EtcdCluster;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'etcd-concurrency-h2-pki-'));
    const ossl = (...args: string[]) => run('openssl', args, { cwd: dir });
    const ca = (name: string) => ossl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-sha256', '-days', '2', '-subj', `/CN=${name}`, '-keyout', `${name}.key`, '-out', `${name}.crt`);
    const leaf = async (name: string, signer: string, ext: string) => {
      await writeFile(file(`${name}.ext`), ext);
      await ossl('req', '-newkey', 'rsa:2048', '-nodes', '-sha256', '-subj', `/CN=${name}`, '-keyout', `${name}.key`, '-out', `${name}.csr`);
      await ossl('x509', '-req', '-sha256', '-days', '2', '-in', `${name}.csr`, '-CA', `${signer}.crt`, '-CAkey', `${signer}.key`, '-CAcreateserial', '-extfile', `${name}.ext`, '-out', `${name}.crt`);
    };
    await ca('ca');
    await ca('other');
    await leaf('server', 'ca', 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n');
    await leaf('client', 'ca', 'extendedKeyUsage=clientAuth\n');
    // etcd given a trusted CA asks every client for a certificate (a TLS 1.3 "certificate required"
    // alert without one), with or without --client-cert-auth: one member serves both TLS cases.
    const tlsFiles = { certFile: file('server.crt'), keyFile: file('server.key'), trustedCaFile: file('ca.crt') };
    [mtls, auth] = await Promise.all([startEtcd({ tls: { ...tlsFiles, clientCertAuth: true } }), startEtcd({ extraArgs: ['--auth-token', 'simple'] })]);
    const ctl = (...args: string[]) => run('etcdctl', [`--endpoints=${auth.endpoints[0]}`, ...args], { env: { ...process.env, ETCDCTL_API: '3' } });
    await ctl('user', 'add', 'root:rootpw', '--interactive=false');
    await ctl('user', 'add', 'alice:alicepw', '--interactive=false');
    await ctl('role', 'add', 'locker');
    await ctl('role', 'grant-permission', 'locker', '--prefix=true', 'readwrite', 'locks/');
    await ctl('user', 'grant-role', 'alice', 'locker');
    await ctl('auth', 'enable');
  });
  after(async () => {
    await Promise.all([mtls?.stop(), auth?.stop()]);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('TLS with a CA and client certificates: answers as grpc-js; a wrong CA, or no certificate, fails to connect; insecureSkipVerify connects', async () => {
    const target = mtls.endpoints[0]!;
    const [ca, cert, key, other] = await Promise.all([pem('ca.crt'), pem('client.crt'), pem('client.key'), pem('other.crt')]);
    const ch = new H2Channel(target, { tls: { ca, cert, key } });
    const gc = grpcClient(target, { creds: grpc.credentials.createSsl(ca, key, cert) });
    const wrongCa = new H2Channel(target, { tls: { ca: other, cert, key }, dialTimeoutMs: LONG });
    const noCert = new H2Channel(target, { tls: { ca }, dialTimeoutMs: LONG });
    const skip = new H2Channel(target, { tls: { cert, key, insecureSkipVerify: true } });
    try {
      await viaH2(ch, KV.put, { key: enc('tls/k'), value: enc('v') });
      const req = { key: enc('tls/k') };
      assert.deepEqual(await viaH2(ch, KV.range, req), await viaGrpc(gc, KV.range, req));
      assert.equal((await viaH2(skip, KV.range, req)).count, 1n);
      // Refused by the handshake itself, long before the dial timeout.
      await assert.rejects(wrongCa.connect(performance.now() + LONG), (e: unknown) => e instanceof H2ConnectError && e.kind === 'failed' && /certificate/.test(String((e.cause as Error).message)));
      // TLS 1.3 servers (etcd >= 3.5's Go) send "certificate required"; etcd 3.4's, "bad certificate".
      await assert.rejects(noCert.connect(performance.now() + LONG), (e: unknown) => e instanceof H2ConnectError && e.kind === 'failed' && /certificate required|bad certificate/.test(String((e.cause as Error).message)));
      const eh = await failure(viaH2(noCert, KV.range, req));
      assert.equal(eh.code, grpc.status.UNAVAILABLE);
      assert.match(eh.details, /No connection established/);
      await viaH2(ch, KV.deleteRange, req);
    } finally {
      for (const c of [ch, wrongCa, noCert, skip]) c.close();
      gc.close();
    }
  });

  it('auth: the token header authorizes; denied, wrong-token and no-token failures match grpc-js', async () => {
    const target = auth.endpoints[0]!;
    const ch = new H2Channel(target);
    const gc = grpcClient(target);
    const Auth = pb.AuthService.authenticate;
    try {
      const { token } = await viaH2(ch, Auth, { name: 'alice', password: 'alicepw' });
      assert.ok(token);
      const wrongPw = await failure(viaH2(ch, Auth, { name: 'alice', password: 'nope' }));
      assertSame(wrongPw, await failure(viaGrpc(gc, Auth, { name: 'alice', password: 'nope' })));
      const md = { token, hasleader: 'true' };
      await viaH2(ch, KV.put, { key: enc('locks/a'), value: enc('1') }, md);
      assert.deepEqual(await viaH2(ch, KV.range, { key: enc('locks/a') }, md), await viaGrpc(gc, KV.range, { key: enc('locks/a') }, md));
      const cases: [string, Record<string, string>, pb.PutRequest][] = [
        ['denied', md, { key: enc('elsewhere/a'), value: enc('1')}],
        ['wrong token', { token: `${token}x` }, { key: enc('locks/b'), value: enc('1')}],
        ['no token', {}, { key: enc('locks/b'), value: enc('1')}],
      ];
      for (const [what, meta, req] of cases) {
        const eh = await failure(viaH2(ch, KV.put, req, meta));
        const eg = await failure(viaGrpc(gc, KV.put, req, meta));
        assertSame(eh, eg);
        if (what === 'wrong token') assert.equal(isStaleToken(eh.details), true);
        if (what === 'denied') assert.equal(eh.code, grpc.status.PERMISSION_DENIED);
      }
      await viaH2(ch, KV.deleteRange, { key: enc('locks/a') }, md);
    } finally {
      ch.close();
      gc.close();
    }
  });
});

/** Waits for `cond`: server-side events that no promise of ours announces. */
async function waitUntil(cond: () => boolean): Promise<void> {
  await waitFor(cond, 'the server to see the streams end');
}
