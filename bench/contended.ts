// Contended: C contenders, each with its own client and session (as C processes would), on one
// lock with an (almost) empty critical section. Measures throughput, waits, fairness, and checks
// mutual exclusion in process.
import { setImmediate as nextTurn } from 'node:timers/promises';
import { Etcd3, EtcdLockFailedError } from 'etcd3';
import { Client, Mutex, Session } from '../dist/index.js';
import { endpointsFor, etcd3Hosts, type BenchContext } from './context.js';
import { mergeSummaries, runGoBench } from './go.js';
import { GoStyleQueue } from './reference.js';
import { RpcCounter, sleep, summarize, within, type Summary } from './stats.js';

/** `go` is etcd's own Go package (interop/go), `reference` our re-implementation of its algorithm. */
export type LockImpl = 'ours' | 'go' | 'reference' | 'etcd3';

/**
 * What `go-interop bench-contended` prints (one round): a ContendedResult of its own, with the
 * client's module version always set and none of the fields that only other implementations or
 * merged rounds have.
 */
export type GoContendedRound = Omit<ContendedResult, 'impl' | 'client' | 'failedAttempts' | 'waitMerged'> & { impl: 'go'; client: string };

export interface ContendedResult {
  impl: LockImpl;
  contenders: number;
  elapsedMs: number;
  acquisitions: number;
  acquisitionsPerSec: number;
  /** From calling lock() to holding the lock (etcd3: including every failed attempt and backoff). */
  wait: Summary;
  perContender: number[];
  /** (max - min) / mean of acquisitions per contender. */
  spread: number;
  /** No two holders were ever seen, the counter equals the acquisitions, tokens only grew. */
  mutualExclusion: boolean;
  violations: number;
  /** etcd3 only: failed acquire attempts (each one a grant, a txn and a revoke). */
  failedAttempts?: number;
  /** Keys left under the lock's prefix afterwards (must be 0). */
  keysLeft: number;
  /** go only: the go.etcd.io/etcd/client/v3 module version. */
  client?: string;
  /** go only, over several rounds: wait p50/p99 are n-weighted means of the rounds' (see mergeSummaries). */
  waitMerged?: boolean;
  /**
   * ours and reference: requests to etcd per acquisition, counted on the contenders' clients: unary
   * RPCs (enqueue, look-ups, checks, unlock) plus watch create and cancel requests.
   */
  requests?: { perAcquisition: number; unary: number; watchCreates: number; watchCancels: number; byMethod: Record<string, number> };
}

interface Contender {
  acquire(): Promise<bigint | undefined>;
  release(): Promise<unknown>;
  close(): Promise<void>;
}

/** etcd3's Lock fails when held: users retry after a short randomized backoff. */
export const ETCD3_BACKOFF_MS: [number, number] = [5, 15];

/**
 * Runs every implementation in interleaved rounds (ours, go, reference, etcd3, ours, ...) so that
 * they share whatever background load the machine has; with several etcd versions (one context
 * each, every server running), the versions take turns too, round by round. Our contenders stay
 * connected across rounds; Go's are a fresh go-interop process per round. Returns one list per
 * context.
 */
export async function runContended(ctxs: BenchContext[], impls: LockImpl[]): Promise<ContendedResult[][]> {
  const quick = ctxs[0]!.quick;
  const rounds = quick ? 1 : 3;
  const roundMs = 2000;
  const runs = ctxs.map(() => new Map<LockImpl, Round>());
  try {
    for (const [k, ctx] of ctxs.entries()) {
      for (const impl of impls) runs[k]!.set(impl, impl === 'go' ? new GoRun(ctx) : await Run.create(ctx, impl));
    }
    for (let r = 0; r < rounds; r++) {
      for (const [k, ctx] of ctxs.entries()) {
        for (const impl of impls) {
          ctx.log(`contended: round ${r + 1}/${rounds}, etcd ${ctx.etcd}, ${impl}`);
          await runs[k]!.get(impl)!.round(roundMs);
        }
      }
    }
  } finally {
    for (const m of runs) for (const run of m.values()) await run.close();
  }
  const out: ContendedResult[][] = [];
  for (const [k, ctx] of ctxs.entries()) {
    const list: ContendedResult[] = [];
    for (const impl of impls) list.push(await runs[k]!.get(impl)!.result(ctx));
    out.push(list);
  }
  return out;
}

interface Round {
  round(durationMs: number): Promise<void>;
  close(): Promise<void>;
  result(ctx: BenchContext): Promise<ContendedResult>;
}

/** etcd's own Go package: one go-interop bench-contended process per round. */
class GoRun implements Round {
  private readonly rounds: GoContendedRound[] = [];
  private readonly name: string;

  constructor(private readonly ctx: BenchContext) {
    this.name = `${ctx.prefix}contended/go`;
  }

  async round(durationMs: number): Promise<void> {
    const args = ['bench-contended', `--name=${this.name}`, `--duration=${durationMs}ms`, `--contenders=${this.ctx.contenders}`];
    this.rounds.push(await runGoBench<GoContendedRound>(this.ctx, args, durationMs + 60_000));
  }

  async close(): Promise<void> {}

  async result(ctx: BenchContext): Promise<ContendedResult> {
    const rs = this.rounds;
    const check = new Client({ endpoints: ctx.endpoints });
    let keysLeft: number;
    try {
      keysLeft = (await check.getPrefix(`${this.name}/`)).kvs.length;
    } finally {
      await check.close();
    }
    const C = ctx.contenders;
    const perContender = Array.from({ length: C }, (_, i) => rs.reduce((a, r) => a + (r.perContender[i] ?? 0), 0));
    const acquisitions = rs.reduce((a, r) => a + r.acquisitions, 0);
    const elapsedMs = rs.reduce((a, r) => a + r.elapsedMs, 0);
    const violations = rs.reduce((a, r) => a + r.violations, 0);
    const mean = acquisitions / C;
    const result: ContendedResult = {
      impl: 'go',
      contenders: C,
      elapsedMs,
      acquisitions,
      acquisitionsPerSec: (acquisitions * 1000) / elapsedMs,
      wait: mergeSummaries(rs.map((r) => r.wait)),
      perContender,
      spread: mean > 0 ? (Math.max(...perContender) - Math.min(...perContender)) / mean : NaN,
      mutualExclusion: rs.length > 0 && rs.every((r) => r.mutualExclusion) && violations === 0,
      violations,
      // Every round used the same name, so each round's count and the final one look at the same
      // keys: a key left by the first round is in all of them. The most seen at any one time, not
      // their sum (which counted such a key once per look); a round's leftover whose lease expired
      // before the final look still counts.
      keysLeft: Math.max(keysLeft, ...rs.map((r) => r.keysLeft)),
    };
    if (rs[0]) result.client = rs[0].client;
    if (rs.length > 1) result.waitMerged = true;
    return result;
  }
}

class Run implements Round {
  failedAttempts = 0;
  readonly waits: number[] = [];
  readonly perContender: number[];
  holder: number | null = null;
  violations = 0;
  total = 0;
  lastToken = 0n;
  elapsedMs = 0;
  private contenders: Contender[] = [];
  /** One per contender's client (ours and reference), counting only during rounds. */
  private readonly counters: RpcCounter[] = [];
  private readonly requests = { unary: 0, watchCreates: 0, watchCancels: 0, byMethod: new Map<string, number>() };

  private constructor(
    readonly impl: Exclude<LockImpl, 'go'>,
    readonly name: string,
    readonly C: number,
  ) {
    this.perContender = new Array<number>(C).fill(0);
  }

  static async create(ctx: BenchContext, impl: Exclude<LockImpl, 'go'>): Promise<Run> {
    const run = new Run(impl, `${ctx.prefix}contended/${impl}`, ctx.contenders);
    run.contenders = await Promise.all(Array.from({ length: run.C }, (_, i) => run.contender(ctx, i)));
    return run;
  }

  private async contender(ctx: BenchContext, i: number): Promise<Contender> {
    const name = this.name;
    if (this.impl === 'etcd3') {
      const client = new Etcd3({ hosts: etcd3Hosts(endpointsFor(ctx, i)) });
      let lock: ReturnType<Etcd3['lock']> | undefined;
      return {
        acquire: async () => {
          for (;;) {
            const l = client.lock(name);
            try {
              lock = await l.acquire();
              return undefined;
            } catch (err) {
              if (!(err instanceof EtcdLockFailedError)) throw err;
              this.failedAttempts++;
              const [lo, hi] = ETCD3_BACKOFF_MS;
              await sleep(lo + Math.random() * (hi - lo));
            }
          }
        },
        release: () => lock!.release(),
        close: async () => client.close(),
      };
    }
    const client = new Client({ endpoints: endpointsFor(ctx, i) });
    this.counters.push(new RpcCounter(client));
    const session = await Session.create(client);
    const close = async (): Promise<void> => {
      await session.close();
      await client.close();
    };
    if (this.impl === 'ours') {
      const m = new Mutex(session, name);
      let h: Awaited<ReturnType<Mutex['lock']>> | undefined;
      return {
        async acquire() {
          h = await m.lock();
          return h.fencingToken;
        },
        release: () => h!.unlock(),
        close,
      };
    }
    const q = new GoStyleQueue(session, name, true);
    return { acquire: () => q.acquire(), release: () => q.unlock(), close };
  }

  /** Every contender loops lock -> critical section -> unlock until the round's time is up. */
  async round(durationMs: number): Promise<void> {
    const start = performance.now();
    const end = start + durationMs;
    let lastDone = start;
    const before = this.counters.map((c) => ({ s: c.snapshot(), creates: c.watchCreateRequests, cancels: c.watchCancelRequests }));
    await within(
      Promise.all(
        this.contenders.map(async (c, i) => {
          while (performance.now() < end) {
            const t = performance.now();
            const token = await c.acquire();
            this.waits.push(performance.now() - t);
            if (this.holder !== null) this.violations++;
            this.holder = i;
            this.total++;
            this.perContender[i]!++;
            if (token !== undefined) {
              if (token <= this.lastToken) this.violations++;
              this.lastToken = token;
            }
            // The critical section: one event-loop turn, so that a second holder would be seen.
            await nextTurn();
            if (this.holder !== i) this.violations++;
            this.holder = null;
            await c.release();
            lastDone = performance.now();
          }
        }),
      ),
      durationMs + 60_000,
      `contended ${this.impl}`,
    );
    this.elapsedMs += lastDone - start;
    // Every acquisition of the round is complete (released): its requests are all counted.
    this.counters.forEach((c, i) => {
      const b = before[i]!;
      const now = c.snapshot();
      this.requests.unary += now.unary - b.s.unary;
      this.requests.watchCreates += c.watchCreateRequests - b.creates;
      this.requests.watchCancels += c.watchCancelRequests - b.cancels;
      for (const [m, n] of Object.entries(now.byMethod))
        this.requests.byMethod.set(m, (this.requests.byMethod.get(m) ?? 0) + n - (b.s.byMethod[m] ?? 0));
    });
  }

  async close(): Promise<void> {
    await Promise.all(this.contenders.map((c) => c.close().catch(() => {})));
    this.contenders = [];
  }

  async result(ctx: BenchContext): Promise<ContendedResult> {
    const check = new Client({ endpoints: ctx.endpoints });
    let keysLeft: number;
    try {
      // etcd3's keys live under the same name; its lock key is the name itself.
      keysLeft = (await check.getPrefix(this.name)).kvs.length;
    } finally {
      await check.close();
    }
    const acquisitions = this.perContender.reduce((a, b) => a + b, 0);
    const min = Math.min(...this.perContender);
    const max = Math.max(...this.perContender);
    const mean = acquisitions / this.C;
    const result: ContendedResult = {
      impl: this.impl,
      contenders: this.C,
      elapsedMs: this.elapsedMs,
      acquisitions,
      acquisitionsPerSec: (acquisitions * 1000) / this.elapsedMs,
      wait: summarize(this.waits),
      perContender: this.perContender,
      spread: mean > 0 ? (max - min) / mean : NaN,
      mutualExclusion: this.violations === 0 && this.total === acquisitions && acquisitions > 0,
      violations: this.violations,
      keysLeft,
    };
    if (this.impl === 'etcd3') result.failedAttempts = this.failedAttempts;
    if (this.counters.length > 0 && acquisitions > 0) {
      const q = this.requests;
      const per = (n: number): number => n / acquisitions;
      result.requests = {
        perAcquisition: per(q.unary + q.watchCreates + q.watchCancels),
        unary: per(q.unary),
        watchCreates: per(q.watchCreates),
        watchCancels: per(q.watchCancels),
        byMethod: Object.fromEntries([...q.byMethod].map(([m, n]) => [m, per(n)])),
      };
    }
    return result;
  }
}
