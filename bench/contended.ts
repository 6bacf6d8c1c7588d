// Contended: C contenders, each with its own client and session (as C processes would), on one
// lock with an (almost) empty critical section. Measures throughput, waits, fairness, and checks
// mutual exclusion in process.
import { setImmediate as nextTurn } from 'node:timers/promises';
import { Etcd3, EtcdLockFailedError } from 'etcd3';
import { Client, Mutex, Session } from '../src/index.js';
import { endpointsFor, etcd3Hosts, type BenchContext } from './context.js';
import { GoStyleQueue } from './reference.js';
import { sleep, summarize, within, type Summary } from './stats.js';

export type LockImpl = 'ours' | 'reference' | 'etcd3';

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
}

interface Contender {
  acquire(): Promise<bigint | undefined>;
  release(): Promise<void>;
  close(): Promise<void>;
}

/** etcd3's Lock fails when held: users retry after a short randomized backoff. */
export const ETCD3_BACKOFF_MS: [number, number] = [5, 15];

/**
 * Runs every implementation in interleaved rounds (ours, reference, etcd3, ours, ...) so that they
 * share whatever background load the machine has. Contenders stay connected across rounds.
 */
export async function runContended(ctx: BenchContext, impls: LockImpl[]): Promise<ContendedResult[]> {
  const rounds = ctx.quick ? 1 : 3;
  const roundMs = 2000;
  const runs = new Map<LockImpl, Run>();
  try {
    for (const impl of impls) runs.set(impl, await Run.create(ctx, impl));
    for (let r = 0; r < rounds; r++) {
      for (const impl of impls) {
        ctx.log(`contended: round ${r + 1}/${rounds}, ${impl}`);
        await runs.get(impl)!.round(roundMs);
      }
    }
  } finally {
    for (const run of runs.values()) await run.close();
  }
  const out: ContendedResult[] = [];
  for (const impl of impls) out.push(await runs.get(impl)!.result(ctx));
  return out;
}

class Run {
  failedAttempts = 0;
  readonly waits: number[] = [];
  readonly perContender: number[];
  holder: number | null = null;
  violations = 0;
  total = 0;
  lastToken = 0n;
  elapsedMs = 0;
  private contenders: Contender[] = [];

  private constructor(
    readonly impl: LockImpl,
    readonly name: string,
    readonly C: number,
  ) {
    this.perContender = new Array<number>(C).fill(0);
  }

  static async create(ctx: BenchContext, impl: LockImpl): Promise<Run> {
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
    return result;
  }
}
