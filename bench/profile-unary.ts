// Where one unary call's time goes (the goal: uncontended >= 0.7x Go's package). Starts its
// own etcd and measures, on one Node process and that etcd:
//
//   ours-put    Client.put: our client.ts + connection.ts + transport/http2.ts on node:http2,
//               ts-proto on @bufbuild/protobuf
//   lean-put    the same Client.put, with this Client instance's Connection.unary replaced by a raw
//               node:http2 unary call (below): our client.ts wrappers and codec, no Connection or
//               transport (no deadline, retry, failover, status validation)
//   raw-put     the raw node:http2 unary Put alone: a 5-byte length prefix + the protobuf body
//               (encoded by src/proto), status in the trailers; what a node:http2 transport costs at least
//   ours-lock   Mutex.lock() + unlock() on one session (2 Txns)
//   lean-lock   the same on a Client whose unary calls go over the raw node:http2 path
//   go          etcd's own Go package (go-interop bench-uncontended: Mutex.Lock + Unlock and a
//               sequential Put, interleaved), a fresh process after each round of the above
//
// Three passes: (1) timing: the implementations interleaved in blocks of 25 (Go after each round),
// with the process's CPU time per call; (2) a latency split of one Put: timestamps at the HTTP/2
// stream (request created, request body written, response headers, trailers) for ours and raw;
// (3) a CPU profile per implementation (V8's sampling profiler through node:inspector, the same
// profiler as `node --cpu-prof`), self time by layer. The raw path is a throwaway for measuring: no
// deadline, retry, failover, auth or error mapping (a non-zero grpc-status just throws).
//
//   node scripts/etcd.mjs exec 3.7 -- node --import tsx bench/profile-unary.ts [--n 2000] [--seconds 6]
//        [--rounds 3] [--warmup 1000] [--out DIR] [--no-go] [--json FILE]
//   node --cpu-prof --cpu-prof-dir DIR --import tsx bench/profile-unary.ts --loop ours-put --n 5000   (prints a window)
//   node --import tsx bench/profile-unary.ts --analyze DIR/FILE.cpuprofile --calls N [--window A,B]
import http2 from 'node:http2';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { Session as InspectorSession } from 'node:inspector/promises';
import { parseArgs } from 'node:util';
import type { Profiler } from 'node:inspector';
import { Client, Mutex, Session } from '../dist/index.js';
import { startBenchEtcd } from './etcd.js';
import { goBinary, runGoBench } from './go.js';
import type { BenchContext } from './context.js';
import { gc, summarize, type Summary } from './stats.js';
import { analyze, printBreakdown, type ProfileBreakdown } from './profile-analyze.js';
import * as pb from '../dist/proto/etcd.js';
import { syncBuiltinESMExports } from 'node:module';

// --- the HTTP/2 stream probe: timestamps of the current traced call (calls are sequential) ---

interface StreamTimes {
  request?: number; // session.request() called: the stream is created
  write?: number; // first write/end of the request body
  response?: number; // response headers arrived
  trailers?: number; // trailers (the status) arrived
}
let tracing = false;
let current: StreamTimes = {};

/** Wraps a ClientHttp2Session's request() so that, while tracing, each stream's milestones are stamped. */
function probe(session: http2.ClientHttp2Session): http2.ClientHttp2Session {
  const request = session.request.bind(session);
  session.request = ((headers: http2.OutgoingHttpHeaders, options?: http2.ClientSessionRequestOptions) => {
    if (!tracing) return request(headers, options);
    const t = performance.now();
    const stream = request(headers, options);
    if (!String(headers[':path']).startsWith('/etcdserverpb.KV/')) return stream;
    const times = current;
    times.request = t;
    const write = stream.write.bind(stream) as (...a: unknown[]) => boolean;
    const end = stream.end.bind(stream) as (...a: unknown[]) => http2.ClientHttp2Stream;
    stream.write = ((...a: unknown[]) => {
      times.write ??= performance.now();
      return write(...a);
    }) as typeof stream.write;
    stream.end = ((...a: unknown[]) => {
      if (a.length > 0 && typeof a[0] !== 'function') times.write ??= performance.now();
      return end(...a);
    }) as typeof stream.end;
    stream.once('response', () => (times.response = performance.now()));
    stream.once('trailers', () => (times.trailers = performance.now()));
    return stream;
  }) as typeof session.request;
  return session;
}

// Every session opened from now on is probed: the transport's and the raw one below.
const connect = http2.connect;
(http2 as { connect: typeof http2.connect }).connect = ((...args: Parameters<typeof http2.connect>) =>
  probe(connect(...args))) as typeof http2.connect;
// src/client/transport/http2.ts imports node:http2's namespace: make it see the probed connect too.
syncBuiltinESMExports();

// --- the raw node:http2 unary call ---

class RawUnary {
  private readonly session: http2.ClientHttp2Session;
  constructor(endpoint: string) {
    this.session = http2.connect(endpoint.includes('://') ? endpoint : `http://${endpoint}`);
    this.session.on('error', () => {});
  }

  /** One unary call: 5-byte prefix + body, status from the trailers (or a trailers-only response). */
  call(path: string, body: Uint8Array): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      const stream = this.session.request({
        ':method': 'POST',
        ':path': path,
        'content-type': 'application/grpc',
        te: 'trailers',
        hasleader: 'true', // what our Connection sends by default
      });
      const chunks: Buffer[] = [];
      let status: string | undefined;
      let message: string | undefined;
      stream.on('response', (h) => {
        if (h['grpc-status'] !== undefined) status = String(h['grpc-status']);
      });
      stream.on('trailers', (h) => {
        status = String(h['grpc-status']);
        message = h['grpc-message'] as string | undefined;
      });
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('error', reject);
      stream.on('end', () => {
        if (status !== '0') return reject(new Error(`${path}: grpc-status ${status}: ${message ?? ''}`));
        const buf = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
        if (buf.length < 5 || buf[0] !== 0) return reject(new Error(`${path}: bad frame`));
        resolve(buf.subarray(5, 5 + buf.readUInt32BE(1)));
      });
      const frame = Buffer.allocUnsafe(5 + body.length);
      frame[0] = 0;
      frame.writeUInt32BE(body.length, 1);
      frame.set(body, 5);
      stream.end(frame);
    });
  }

  close(): void {
    this.session.close();
  }
}

/** Routes this Client instance's unary calls over `raw` (bench-only; the library never sees it). */
function leanClient(client: Client, raw: RawUnary): void {
  // biome-ignore lint/suspicious/noExplicitAny: the bench swaps one internal method of this Client instance
  const conn = client.conn as any;
  conn.unary = async (method: { path: string; encode(r: unknown): Uint8Array; decode(b: Uint8Array): unknown }, request: unknown) =>
    method.decode(await raw.call(method.path, method.encode(request)));
}

// --- the run ---

interface TimingRow {
  impl: string;
  calls: number;
  perSec: number;
  latency: Summary;
  /** Process CPU (user + system) per call over the timed blocks, µs. */
  cpuUsPerCall: number;
}

async function main(): Promise<void> {
  const { values: opts } = parseArgs({
    options: {
      n: { type: 'string', default: '2000' },
      seconds: { type: 'string', default: '6' },
      rounds: { type: 'string', default: '3' },
      out: { type: 'string', default: '/tmp/profile-unary' },
      'no-go': { type: 'boolean', default: false },
      json: { type: 'string' },
      analyze: { type: 'string' },
      calls: { type: 'string', default: '1' },
      interval: { type: 'string', default: '100' },
      loop: { type: 'string' },
      warmup: { type: 'string', default: '1000' },
      window: { type: 'string' },
    },
  });
  if (opts.analyze) {
    const profile = JSON.parse(await readFile(opts.analyze, 'utf8')) as Profiler.Profile;
    const w = opts.window?.split(',').map(Number) as [number, number] | undefined;
    printBreakdown(opts.analyze, analyze(profile, Number(opts.calls), w));
    return;
  }
  const N = Number(opts.n);
  const rounds = Number(opts.rounds);
  const seconds = Number(opts.seconds);
  const log = (m: string): void => void process.stderr.write(`[profile-unary] ${m}\n`);
  const load0 = loadavg();
  log(`load average ${load0.map((v) => v.toFixed(2)).join(' ')}`);
  const goBin = opts['no-go'] ? undefined : await goBinary();
  if (goBin && 'error' in goBin) log(`no Go: ${goBin.error}`);
  const etcd = await startBenchEtcd(1);
  const prefix = `profile/${process.pid}/`;
  const ours = new Client({ endpoints: etcd.endpoints });
  const lean = new Client({ endpoints: etcd.endpoints });
  const raw = new RawUnary(etcd.endpoints[0]!);
  leanClient(lean, raw);
  let oursSession: Session | undefined;
  let leanSession: Session | undefined;
  const result: Record<string, unknown> = { etcd: etcd.version, node: process.version, load: { start: load0 } };
  try {
    oursSession = await Session.create(ours);
    leanSession = await Session.create(lean);
    const oursMutex = new Mutex(oursSession, `${prefix}ours`);
    const leanMutex = new Mutex(leanSession, `${prefix}lean`);
    const putReq = (key: string): Uint8Array =>
      pb.PutRequest.encode({ key: Buffer.from(key), value: Buffer.from('v'), lease: 0n }).finish();
    const impls: Record<string, () => Promise<unknown>> = {
      'ours-put': () => ours.put(`${prefix}ours-put`, 'v'),
      'lean-put': () => lean.put(`${prefix}lean-put`, 'v'),
      'raw-put': async () => pb.PutResponse.decode(await raw.call('/etcdserverpb.KV/Put', putReq(`${prefix}raw-put`))),
      'ours-lock': async () => (await oursMutex.lock()).unlock(),
      'lean-lock': async () => (await leanMutex.lock()).unlock(),
    };
    const names = Object.keys(impls);
    if (opts.loop) {
      // For `node --cpu-prof`: warm up, then N calls of one implementation; the window (monotonic µs,
      // the profile's clock) lets --analyze leave out start-up and shutdown.
      const run = impls[opts.loop];
      if (!run) throw new Error(`--loop: one of ${names.join(', ')}`);
      for (let i = 0; i < Number(opts.warmup); i++) await run();
      gc();
      const t0 = process.hrtime.bigint() / 1000n;
      for (let i = 0; i < N; i++) await run();
      const t1 = process.hrtime.bigint() / 1000n;
      process.stdout.write(
        `--loop ${opts.loop}: ${N} ${opts.loop.endsWith('-lock') ? 'cycles' : 'calls'}; analyse with --window ${t0},${t1}\n`,
      );
      return;
    }
    // JIT warm-up: the CPU per call keeps falling for the first thousand or so calls.
    for (const n of names) for (let i = 0; i < Number(opts.warmup); i++) await impls[n]!();

    // (1) timing, interleaved, Go after each round
    const BLOCK = 25;
    const samples = Object.fromEntries(names.map((n) => [n, [] as number[]]));
    const spent = Object.fromEntries(names.map((n) => [n, 0]));
    const cpu = Object.fromEntries(names.map((n) => [n, 0]));
    const goRounds: {
      cyclesPerSec: number;
      latency: Summary;
      cpuUsPerCycle: number;
      cycles: number;
      put: { cyclesPerSec: number; latency: Summary; cpuUsPerCycle: number; cycles: number };
    }[] = [];
    const ctx: BenchContext = {
      endpoints: etcd.endpoints,
      etcd: etcd.version,
      members: 1,
      quick: false,
      contenders: 1,
      prefix,
      log,
      ...(goBin && 'bin' in goBin ? { go: goBin.bin } : {}),
    };
    for (let r = 0; r < rounds; r++) {
      const start = performance.now();
      while (performance.now() - start < (seconds * 1000) / rounds) {
        for (const n of names) {
          const c0 = process.cpuUsage();
          const t0 = performance.now();
          for (let i = 0; i < BLOCK; i++) {
            const t = performance.now();
            await impls[n]!();
            samples[n]!.push(performance.now() - t);
          }
          spent[n]! += performance.now() - t0;
          const c = process.cpuUsage(c0);
          cpu[n]! += c.user + c.system;
        }
      }
      if (ctx.go)
        goRounds.push(
          await runGoBench(ctx, [
            'bench-uncontended',
            `--name=${prefix}go/${r}`,
            `--duration=${Math.round((seconds * 1000) / rounds / 2)}ms`,
            `--block=${BLOCK}`,
          ]),
        );
    }
    const timing: TimingRow[] = names.map((n) => ({
      impl: n,
      calls: samples[n]!.length,
      perSec: (samples[n]!.length * 1000) / spent[n]!,
      latency: summarize(samples[n]!),
      cpuUsPerCall: cpu[n]! / samples[n]!.length,
    }));
    if (goRounds.length > 0) {
      // Go prints summaries per round: n-weighted means of p50 (an approximation), exact rates.
      const merge = (
        pick: (g: (typeof goRounds)[number]) => { cyclesPerSec: number; latency: Summary; cpuUsPerCycle: number; cycles: number },
        impl: string,
      ): TimingRow => {
        const parts = goRounds.map(pick);
        const n = parts.reduce((a, p) => a + p.cycles, 0);
        const w = (f: (p: (typeof parts)[number]) => number): number => parts.reduce((a, p) => a + f(p) * p.cycles, 0) / n;
        return {
          impl,
          calls: n,
          perSec: (n * 1000) / parts.reduce((a, p) => a + (p.cycles * 1000) / p.cyclesPerSec, 0),
          latency: {
            n,
            mean: w((p) => p.latency.mean),
            p50: w((p) => p.latency.p50),
            p99: w((p) => p.latency.p99),
            min: Math.min(...parts.map((p) => p.latency.min)),
            max: Math.max(...parts.map((p) => p.latency.max)),
          },
          cpuUsPerCall: w((p) => p.cpuUsPerCycle),
        };
      };
      timing.push(
        merge((g) => g.put, 'go-put'),
        merge((g) => g, 'go-lock'),
      );
    }
    result.timing = timing;
    const lines = ['impl        calls   per s   p50 ms  mean ms  p99 ms  CPU µs/call'];
    for (const t of timing)
      lines.push(
        `${t.impl.padEnd(10)} ${String(t.calls).padStart(6)} ${t.perSec.toFixed(0).padStart(7)} ${t.latency.p50.toFixed(3).padStart(8)} ${t.latency.mean.toFixed(3).padStart(8)} ${t.latency.p99.toFixed(2).padStart(7)} ${t.cpuUsPerCall.toFixed(0).padStart(11)}`,
      );
    const get = (n: string): TimingRow | undefined => timing.find((t) => t.impl === n);
    const ratio = (a?: TimingRow, b?: TimingRow): string => (a && b ? `${(a.perSec / b.perSec).toFixed(2)}x` : '-');
    lines.push(
      `ours-lock ÷ go-lock ${ratio(get('ours-lock'), get('go-lock'))}; lean-lock ÷ go-lock ${ratio(get('lean-lock'), get('go-lock'))}`,
    );
    lines.push(`ours-put ÷ go-put ${ratio(get('ours-put'), get('go-put'))}; raw-put ÷ go-put ${ratio(get('raw-put'), get('go-put'))}`);
    process.stdout.write(
      `Timing (interleaved blocks of ${BLOCK}, ${rounds} rounds; Go: a process after each round)\n${lines.join('\n')}\n\n`,
    );

    // (2) latency split of one Put, at the HTTP/2 stream
    const split: Record<string, Record<string, number>> = {};
    for (const n of ['ours-put', 'raw-put', 'lean-put']) {
      const parts: Record<string, number[]> = {
        'call -> stream created': [],
        'stream created -> body written': [],
        'body written -> response headers': [],
        'response headers -> trailers': [],
        'trailers -> caller resumes': [],
        total: [],
      };
      tracing = true;
      for (let i = 0; i < Math.min(N, 1000); i++) {
        current = {};
        const t0 = performance.now();
        await impls[n]!();
        const t1 = performance.now();
        const c = current;
        if (c.request === undefined || c.write === undefined || c.response === undefined || c.trailers === undefined) continue;
        parts['call -> stream created']!.push(c.request - t0);
        parts['stream created -> body written']!.push(c.write - c.request);
        parts['body written -> response headers']!.push(c.response - c.write);
        parts['response headers -> trailers']!.push(c.trailers - c.response);
        parts['trailers -> caller resumes']!.push(t1 - c.trailers);
        parts.total!.push(t1 - t0);
      }
      tracing = false;
      if (parts.total!.length === 0) continue;
      split[n] = Object.fromEntries(Object.entries(parts).map(([k, v]) => [k, summarize(v).p50]));
      (split[n] as Record<string, number>).n = parts.total!.length;
    }
    result.split = split;
    const segs = Object.keys(split['ours-put']!).filter((k) => k !== 'n');
    const sl = [
      `segment (p50 ms)                      ${Object.keys(split)
        .map((k) => k.padStart(9))
        .join(' ')}`,
    ];
    for (const s of segs)
      sl.push(
        `${s.padEnd(37)} ${Object.values(split)
          .map((v) => v[s]!.toFixed(3).padStart(9))
          .join(' ')}`,
      );
    process.stdout.write(
      `Latency split of one Put (p50 of each segment, so they need not add up to the total's p50)\n${sl.join('\n')}\n\n`,
    );

    // (3) CPU profiles, one implementation at a time
    await mkdir(opts.out, { recursive: true });
    const inspector = new InspectorSession();
    inspector.connect();
    await inspector.post('Profiler.enable');
    await inspector.post('Profiler.setSamplingInterval', { interval: Number(opts.interval) });
    const profiles: Record<string, ProfileBreakdown> = {};
    for (const n of names) {
      const calls = n.endsWith('-lock') ? Math.ceil(N / 2) : N;
      gc();
      await inspector.post('Profiler.start');
      for (let i = 0; i < calls; i++) await impls[n]!();
      const { profile } = await inspector.post('Profiler.stop');
      await writeFile(join(opts.out, `${n}.cpuprofile`), JSON.stringify(profile));
      // Per unary call: a lock cycle is 2 calls.
      const b = analyze(profile, n.endsWith('-lock') ? calls * 2 : calls);
      profiles[n] = b;
      printBreakdown(`${n} (${calls} ${n.endsWith('-lock') ? 'cycles = 2 unary calls each; per unary call' : 'calls'})`, b);
    }
    inspector.disconnect();
    result.profiles = profiles;
    // Correctness: nothing left behind but the Put keys, which we delete.
    await ours.delete(prefix, { prefix: true });
  } finally {
    await oursSession?.close();
    await leanSession?.close();
    await ours.close();
    await lean.close();
    raw.close();
    await etcd.stop();
  }
  const load1 = loadavg();
  (result.load as Record<string, unknown>).end = load1;
  log(`load average ${load1.map((v) => v.toFixed(2)).join(' ')}; profiles in ${opts.out}`);
  if (opts.json) await writeFile(opts.json, `${JSON.stringify(result, null, 2)}\n`);
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`profile-unary: ${(err as Error).stack ?? err}\n`);
    process.exit(1);
  },
);
