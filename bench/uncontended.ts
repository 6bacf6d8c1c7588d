// Uncontended lock + unlock on one session: the cost of a lock nobody else wants.
// Ours, etcd3 and a plain Put are measured in interleaved blocks, so that the ratios between them
// hold even when the machine's background load drifts during the run. etcd's own Go package
// (`go-interop bench-uncontended`: Mutex.Lock + Unlock on one session, interleaved with its own
// sequential Put in blocks of the same size, timed inside the Go process) takes a turn after each
// round of ours, so that ours ÷ Go is measured on the same etcd under the same load. The cycle's
// two Txns sent alone (`txns`) are the floor of any engine on this client and transport.
import { Etcd3 } from 'etcd3';
import { Client, compare, Mutex, op, prefixEnd, Session } from '../dist/index.js';
import { etcd3Hosts, type BenchContext } from './context.js';
import { goBinary, mergeSummaries, runGoBench } from './go.js';
import { RpcCounter, summarize, type Summary } from './stats.js';

/**
 * What `go-interop bench-uncontended` prints (one round): Mutex.Lock + Unlock cycles on one session
 * and, interleaved with them in blocks, sequential Puts (`put`), each with its unary RPCs per cycle
 * (counted by a gRPC interceptor) and the Go process's CPU time per cycle; `keysLeft` is counted
 * under the lock's name after the session is closed and the Put's key deleted.
 */
export type GoUncontendedRound = Required<CycleResult> & { impl: 'go'; client: string; keysLeft: number; put?: Required<CycleResult> };

export interface CycleResult {
  cycles: number;
  cyclesPerSec: number;
  latency: Summary;
  /** Unary RPCs per cycle (ours: counted on our Client; Go: by a gRPC interceptor on its client). */
  rpcsPerCycle?: number;
  /**
   * The client process's CPU time (user + system) per cycle over the timed blocks, in µs. Ours,
   * etcd3 and the Put share one Node process, so each includes a share of its background work
   * (GC, the other clients' timers); Go's is its own process (every goroutine; the Go runtime also
   * spins idle threads briefly before parking them, which counts here).
   */
  cpuUsPerCycle?: number;
}

export interface UncontendedResult {
  ours: CycleResult;
  etcd3: CycleResult;
  /** A sequential Put measured in the same interleaved blocks (the goal's yardstick). */
  put: CycleResult;
  /**
   * The two Txns of our cycle sent alone through Client.txn, in the same blocks: the enqueue's
   * (create our key if absent, count the queue) and the release's guarded delete. What an engine
   * that cost nothing would take on this client and transport.
   */
  txns?: CycleResult;
  /**
   * etcd's own Go package (go.etcd.io/etcd/client/v3/concurrency): Mutex.Lock + Unlock on one
   * session, one fresh process per round, timed inside it; latency p50/p99 are the n-weighted
   * means of the rounds'. Absent when Go is not available (then `goSkipped` says why).
   */
  go?: CycleResult & { client: string; rounds: number };
  /** The Go client's sequential Put, interleaved with its lock cycles (the Go yardstick). */
  goPut?: CycleResult;
  goSkipped?: string;
}

const BLOCK = 25;

export async function runUncontended(ctx: BenchContext): Promise<UncontendedResult> {
  const budgetMs = ctx.quick ? 2400 : 9000;
  const maxPerImpl = ctx.quick ? 600 : 5000;
  // Rounds: ours, etcd3 and the Put interleaved for budgetMs / rounds, then one Go process.
  const rounds = ctx.quick ? 1 : 3;
  const goRoundMs = ctx.quick ? 1000 : 2000;
  // main.ts builds interop/go only for the contended and election phases.
  let go = ctx.go;
  let goSkipped: string | undefined;
  if (!go) {
    const g = await goBinary();
    if ('bin' in g) go = g.bin;
    else {
      goSkipped = g.error;
      ctx.log(`uncontended: no Go row: ${g.error}`);
    }
  }
  const base = `${ctx.prefix}uncontended/`;
  const client = new Client({ endpoints: ctx.endpoints });
  const e3 = new Etcd3({ hosts: etcd3Hosts(ctx.endpoints) });
  let session: Session | undefined;
  try {
    session = await Session.create(client);
    const m = new Mutex(session, `${base}ours`);
    const e3name = `${base}etcd3`;
    const putKey = `${base}put`;
    const txnsPrefix = Buffer.from(`${base}txns/`);
    const txnsKey = Buffer.concat([txnsPrefix, Buffer.from(session.leaseId.toString(16))]);
    const count = op.range({ key: txnsPrefix, rangeEnd: prefixEnd(txnsPrefix), countOnly: true });
    const impls = {
      ours: async () => {
        const h = await m.lock();
        await h.unlock();
      },
      etcd3: async () => {
        const lock = await e3.lock(e3name).acquire();
        await lock.release();
      },
      put: () => client.put(putKey, 'v'),
      txns: async () => {
        const t = await client.txn(
          {
            compare: [compare.createRevision(txnsKey, '=', 0n)],
            success: [op.put(txnsKey, '', session!.leaseId), count],
            failure: [op.get(txnsKey), count],
          },
          { idempotent: true },
        );
        const token = t.succeeded ? t.header.revision : 0n;
        await client.txn(
          { compare: [compare.createRevision(txnsKey, '=', token)], success: [op.delete(txnsKey)], failure: [] },
          { idempotent: true },
        );
      },
    };
    type Impl = keyof typeof impls;
    const names = Object.keys(impls) as Impl[];
    // JIT warm-up. A Node client's CPU per call keeps falling for its first thousand or so calls
    // (bench/profile-unary.ts: a Put took 0.94 ms after 200 warm-up calls of each implementation and
    // 0.76 ms after 2,000); Go's is compiled ahead of time. A service that locks often runs warm.
    // The warm-up takes turns in blocks as the measurement does, long enough that the first version
    // measured in a run meets code as warm as the next one does.
    const warmMs = ctx.quick ? 200 : 5000;
    for (const t0 = performance.now(); performance.now() - t0 < warmMs; ) {
      for (const n of names) for (let i = 0; i < BLOCK; i++) await impls[n]();
    }
    const samples: Record<Impl, number[]> = { ours: [], etcd3: [], put: [], txns: [] };
    const spent: Record<Impl, number> = { ours: 0, etcd3: 0, put: 0, txns: 0 };
    const cpu: Record<Impl, number> = { ours: 0, etcd3: 0, put: 0, txns: 0 };
    const counter = new RpcCounter(client);
    let oursRpcs = 0;
    const goRounds: GoUncontendedRound[] = [];
    for (let round = 0; round < rounds; round++) {
      const start = performance.now();
      while (performance.now() - start < budgetMs / rounds && names.some((n) => samples[n].length < maxPerImpl)) {
        for (const n of names) {
          if (samples[n].length >= maxPerImpl) continue;
          const before = counter.unary;
          const c0 = process.cpuUsage();
          const t0 = performance.now();
          for (let i = 0; i < BLOCK; i++) {
            const t = performance.now();
            await impls[n]();
            samples[n].push(performance.now() - t);
          }
          spent[n] += performance.now() - t0;
          const c = process.cpuUsage(c0);
          cpu[n] += c.user + c.system;
          if (n === 'ours') oursRpcs += counter.unary - before;
        }
      }
      if (go) {
        const r = await runGoBench<GoUncontendedRound>({ ...ctx, go }, [
          'bench-uncontended',
          `--name=${base}go/${round}`,
          `--duration=${goRoundMs}ms`,
          `--block=${BLOCK}`,
        ]);
        // Correctness: the Go package's session is closed and its Put key deleted; nothing may be left.
        if (r.keysLeft !== 0) throw new Error(`uncontended: go-interop left ${r.keysLeft} key(s) under ${base}go/${round}`);
        goRounds.push(r);
      }
    }
    const result = (n: Impl): CycleResult => ({
      cycles: samples[n].length,
      cyclesPerSec: (samples[n].length * 1000) / spent[n],
      latency: summarize(samples[n]),
      cpuUsPerCycle: cpu[n] / samples[n].length,
    });
    const ours = result('ours');
    ours.rpcsPerCycle = oursRpcs / ours.cycles;
    await client.delete(putKey);
    // Correctness: every lock was released and the Put key deleted: nothing of this phase is left
    // (our session's lease is still live, so a key of ours left on it would show here).
    const left = (await client.getPrefix(base)).kvs;
    if (left.length > 0)
      throw new Error(`uncontended: ${left.length} key(s) left under ${base}: ${left.map((kv) => kv.key.toString()).join(', ')}`);
    const out: UncontendedResult = { ours, etcd3: result('etcd3'), put: result('put'), txns: result('txns') };
    if (goRounds.length > 0) {
      out.go = { ...mergeGo(goRounds.map((r) => r)), client: goRounds[0]!.client, rounds: goRounds.length };
      if (goRounds.every((r) => r.put)) out.goPut = mergeGo(goRounds.map((r) => r.put!));
      ctx.log(
        `uncontended: ours ${ours.cyclesPerSec.toFixed(0)} /s, Go ${out.go.cyclesPerSec.toFixed(0)} /s: ` +
          `ours ÷ Go = ${(ours.cyclesPerSec / out.go.cyclesPerSec).toFixed(2)}x (its two Txns alone ${(out.txns!.cyclesPerSec / out.go.cyclesPerSec).toFixed(2)}x); ` +
          `Put p50 ours ${out.put.latency.p50.toFixed(2)} ms, Go ${out.goPut?.latency.p50.toFixed(2) ?? '-'} ms`,
      );
    }
    if (goSkipped) out.goSkipped = goSkipped;
    return out;
  } finally {
    await session?.close();
    await client.close();
    e3.close();
  }
}

/** Merges Go rounds: counts and rates over the total time; latency as bench/go.ts mergeSummaries. */
function mergeGo(parts: Required<CycleResult>[]): Required<CycleResult> {
  const cycles = parts.reduce((a, p) => a + p.cycles, 0);
  const ms = parts.reduce((a, p) => a + (p.cycles * 1000) / p.cyclesPerSec, 0);
  const w = (f: (p: Required<CycleResult>) => number): number => parts.reduce((a, p) => a + f(p) * p.cycles, 0) / cycles;
  return {
    cycles,
    cyclesPerSec: (cycles * 1000) / ms,
    latency: mergeSummaries(parts.map((p) => p.latency)),
    rpcsPerCycle: w((p) => p.rpcsPerCycle),
    cpuUsPerCycle: w((p) => p.cpuUsPerCycle),
  };
}
