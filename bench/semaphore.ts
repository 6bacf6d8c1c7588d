// Semaphore: C contenders (32), each with its own client and session as C processes would, loop
// acquire -> critical section -> release on one semaphore of N permits, for N = 1, 4 and 16, and on
// our Mutex with the same contenders (the yardstick for N = 1). Measures throughput, waits and
// fairness, and checks in process that no more than N hold at once, that fencing tokens are never
// reused and only grow, and that no key is left.
//
// Two critical sections: one event-loop turn (the machinery's own rate, as the contended phase), and
// a 20 ms timer. The first alone cannot check "at most N": the permits are hardly ever all held at
// once, so a semaphore letting one too many in would rarely be caught. With 20 ms they stay full,
// and one holder too many is seen at once.
import { setImmediate as nextTurn } from 'node:timers/promises';
import { Client, Mutex, Semaphore, Session } from '../dist/index.js';
import { endpointsFor, type BenchContext } from './context.js';
import { pool, sleep, summarize, within, type Summary } from './stats.js';

export interface SemaphoreResult {
  /** `mutex`: our Mutex, the yardstick (one holder at a time, like N = 1). */
  impl: 'semaphore' | 'mutex';
  permits: number;
  /** The critical section: 0 for one event-loop turn, else a timer of this many ms. */
  holdMs: number;
  contenders: number;
  elapsedMs: number;
  acquisitions: number;
  acquisitionsPerSec: number;
  /** From calling acquire() (lock()) to holding. */
  wait: Summary;
  perContender: number[];
  /** (max - min) / mean of acquisitions per contender. */
  spread: number;
  /** The most holders seen at once (in process: a shared counter). */
  maxHolders: number;
  /** Holders at once, averaged over the time measured. */
  meanHolders: number;
  /** Times more than `permits` held at once (on the way in, or after a turn of the event loop inside). */
  violations: number;
  /** A token seen twice, a contender's tokens not growing, or (one permit) tokens not growing at all. */
  tokenViolations: number;
  /** Keys left under the name afterwards (must be 0). */
  keysLeft: number;
}

export interface SemaphorePhase {
  contenders: number;
  rounds: number;
  roundMs: number;
  results: SemaphoreResult[];
}

/** The critical sections: one event-loop turn (0), and a 20 ms timer. */
export const HOLDS_MS = [0, 20];

/** The configurations measured: our Mutex and semaphores of these permits, with each critical section. */
export function semaphoreSizes(quick: boolean): { contenders: number; permits: number[]; rounds: number; roundMs: number } {
  return quick
    ? { contenders: 8, permits: [1, 2, 4], rounds: 1, roundMs: 500 }
    : { contenders: 32, permits: [1, 4, 16], rounds: 3, roundMs: 2000 };
}

/** One event-loop turn, or a timer. */
export const criticalSection = (holdMs: number): Promise<unknown> => (holdMs > 0 ? sleep(holdMs) : nextTurn());

/** How a critical section is shown in tables. */
export const holdLabel = (holdMs: number): string => (holdMs > 0 ? `${holdMs} ms` : '1 turn');

interface Participant {
  client: Client;
  session: Session;
}

interface Acquirer {
  acquire(): Promise<{ fencingToken: bigint; release(): Promise<unknown> }>;
}

class Config {
  readonly waits: number[] = [];
  readonly perContender: number[];
  readonly lastOwn: bigint[];
  readonly seen = new Set<bigint>();
  holders = 0;
  maxHolders = 0;
  violations = 0;
  tokenViolations = 0;
  lastToken = 0n;
  elapsedMs = 0;
  /** Integral of holders over time (holder-ms), for the mean. */
  private area = 0;
  private lastChange = 0;
  private readonly acquirers: Acquirer[];

  constructor(
    readonly impl: 'semaphore' | 'mutex',
    readonly permits: number,
    readonly holdMs: number,
    readonly name: string,
    participants: Participant[],
  ) {
    this.perContender = new Array<number>(participants.length).fill(0);
    this.lastOwn = new Array<bigint>(participants.length).fill(0n);
    this.acquirers = participants.map(({ session }) => {
      if (impl === 'mutex') {
        const m = new Mutex(session, name);
        return {
          acquire: async () => {
            const h = await m.lock();
            return { fencingToken: h.fencingToken, release: () => h.unlock() };
          },
        };
      }
      const s = new Semaphore(session, name, { permits });
      return { acquire: () => s.acquire() };
    });
  }

  get label(): string {
    return `${this.impl === 'mutex' ? 'Mutex' : `semaphore N=${this.permits}`}, critical section ${holdLabel(this.holdMs)}`;
  }

  private change(delta: number): void {
    const now = performance.now();
    this.area += this.holders * (now - this.lastChange);
    this.lastChange = now;
    this.holders += delta;
  }

  /** Every contender loops acquire -> critical section -> release until the round's time is up. */
  async round(durationMs: number): Promise<void> {
    const start = performance.now();
    const end = start + durationMs;
    this.lastChange = start;
    let lastDone = start;
    await within(
      Promise.all(
        this.acquirers.map(async (a, i) => {
          while (performance.now() < end) {
            const t = performance.now();
            const h = await a.acquire();
            this.waits.push(performance.now() - t);
            this.change(+1);
            if (this.holders > this.permits) this.violations++;
            this.maxHolders = Math.max(this.maxHolders, this.holders);
            this.perContender[i]!++;
            const token = h.fencingToken;
            if (this.seen.has(token)) this.tokenViolations++;
            this.seen.add(token);
            if (token <= this.lastOwn[i]!) this.tokenViolations++;
            this.lastOwn[i] = token;
            // One holder at a time: every token larger than the last. With N permits a later ticket
            // may be let in just before an earlier one that was let in by the same releases.
            if (this.permits === 1 && token <= this.lastToken) this.tokenViolations++;
            if (token > this.lastToken) this.lastToken = token;
            // The critical section (at least one event-loop turn, so that an extra holder would be seen).
            await criticalSection(this.holdMs);
            if (this.holders > this.permits) this.violations++;
            this.change(-1);
            await h.release();
            lastDone = performance.now();
          }
        }),
      ),
      durationMs + 60_000,
      `semaphore ${this.label}`,
    );
    this.area += this.holders * (lastDone - this.lastChange);
    this.elapsedMs += lastDone - start;
  }

  async result(client: Client): Promise<SemaphoreResult> {
    const keysLeft = (await client.getPrefix(`${this.name}/`)).kvs.length;
    const acquisitions = this.perContender.reduce((a, b) => a + b, 0);
    const mean = acquisitions / this.perContender.length;
    return {
      impl: this.impl,
      permits: this.permits,
      holdMs: this.holdMs,
      contenders: this.perContender.length,
      elapsedMs: this.elapsedMs,
      acquisitions,
      acquisitionsPerSec: (acquisitions * 1000) / this.elapsedMs,
      wait: summarize(this.waits),
      perContender: this.perContender,
      spread: mean > 0 ? (Math.max(...this.perContender) - Math.min(...this.perContender)) / mean : NaN,
      maxHolders: this.maxHolders,
      meanHolders: this.elapsedMs > 0 ? this.area / this.elapsedMs : NaN,
      violations: this.violations,
      tokenViolations: this.tokenViolations,
      keysLeft,
    };
  }
}

/**
 * The configurations take turns round by round (Mutex, N = 1, N = 4, N = 16, with each critical
 * section, then again) so that they share whatever background load the machine has; the contenders
 * stay connected throughout.
 */
export async function runSemaphore(ctx: BenchContext): Promise<SemaphorePhase> {
  const { contenders, permits, rounds, roundMs } = semaphoreSizes(ctx.quick);
  let participants: Participant[] = [];
  try {
    participants = await pool(
      Array.from({ length: contenders }, (_, i) => i),
      8,
      async (i) => {
        const client = new Client({ endpoints: endpointsFor(ctx, i) });
        return { client, session: await Session.create(client) };
      },
    );
    const configs = HOLDS_MS.flatMap((hold) => [
      new Config('mutex', 1, hold, `${ctx.prefix}semaphore/mutex-${hold}`, participants),
      ...permits.map((n) => new Config('semaphore', n, hold, `${ctx.prefix}semaphore/n${n}-${hold}`, participants)),
    ]);
    for (let r = 0; r < rounds; r++) {
      for (const c of configs) {
        ctx.log(`semaphore: round ${r + 1}/${rounds}, ${c.label}, ${contenders} contenders`);
        await c.round(roundMs);
      }
    }
    const results: SemaphoreResult[] = [];
    for (const c of configs) results.push(await c.result(participants[0]!.client));
    return { contenders, rounds, roundMs, results };
  } finally {
    await Promise.all(
      participants.map(async ({ client, session }) => {
        await session.close().catch(() => {});
        await client.close();
      }),
    );
  }
}
