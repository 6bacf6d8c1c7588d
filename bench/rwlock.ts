// RWLock: C contenders (16), each with its own client and session as C processes would, on one
// RWMutex; 90 % of the acquisitions are reads (rLock) and 10 % writes (lock): every contender's
// every 10th, at a phase of its own. The same contenders with our Mutex for every acquisition are
// the yardstick (what a reader-writer lock is for). Checks in process that a writer never overlaps
// anyone and readers overlap only readers, that the fencing tokens respect the order of the queue,
// and that no key is left. Two critical sections, as the semaphore phase: one event-loop turn (the
// lock's own cost) and a 20 ms timer (what readers sharing is for; a writer let in with readers is
// seen at once).
import { Client, Mutex, RWMutex, Session } from '../dist/index.js';
import { endpointsFor, type BenchContext } from './context.js';
import { HOLDS_MS, criticalSection, holdLabel } from './semaphore.js';
import { pool, summarize, within, type Summary } from './stats.js';

export interface RWLockResult {
  /** `mutex`: our Mutex for reads and writes alike, the yardstick. */
  impl: 'rwmutex' | 'mutex';
  /** The critical section: 0 for one event-loop turn, else a timer of this many ms. */
  holdMs: number;
  contenders: number;
  elapsedMs: number;
  reads: number;
  writes: number;
  readsPerSec: number;
  writesPerSec: number;
  acquisitionsPerSec: number;
  /** From calling rLock() (lock()) to holding. */
  readWait: Summary;
  writeWait: Summary;
  perContender: number[];
  /** (max - min) / mean of acquisitions per contender. */
  spread: number;
  /** The most readers seen holding at once. */
  maxReaders: number;
  /** Readers holding at once, averaged over the time measured. */
  meanReaders: number;
  /** A writer with anyone else, or a reader with a writer (on the way in, or after a turn of the event loop inside). */
  violations: number;
  /**
   * A token seen twice, a writer's token not above every token held before it, or a reader's not
   * above every writer's before it (a writer waits for all older keys, a reader for older writers).
   */
  tokenViolations: number;
  /** Keys left under the name afterwards (must be 0). */
  keysLeft: number;
}

export interface RWLockPhase {
  contenders: number;
  /** Share of the acquisitions that are writes. */
  writeShare: number;
  rounds: number;
  roundMs: number;
  results: RWLockResult[];
}

const WRITE_EVERY = 10;

export function rwlockSizes(quick: boolean): { contenders: number; rounds: number; roundMs: number } {
  return quick ? { contenders: 6, rounds: 1, roundMs: 500 } : { contenders: 16, rounds: 3, roundMs: 2000 };
}

interface Participant {
  client: Client;
  session: Session;
}

type Held = { fencingToken: bigint; unlock(): Promise<unknown> };

class Config {
  readonly readWaits: number[] = [];
  readonly writeWaits: number[] = [];
  readonly perContender: number[];
  /** Acquisitions made by each contender so far (across rounds): every WRITE_EVERY-th is a write. */
  private readonly ops: number[];
  readonly seen = new Set<bigint>();
  reads = 0;
  writes = 0;
  readers = 0;
  writers = 0;
  maxReaders = 0;
  violations = 0;
  tokenViolations = 0;
  maxToken = 0n;
  maxWriteToken = 0n;
  elapsedMs = 0;
  private area = 0;
  private lastChange = 0;
  private readonly locks: { read(): Promise<Held>; write(): Promise<Held> }[];

  constructor(
    readonly impl: 'rwmutex' | 'mutex',
    readonly holdMs: number,
    readonly name: string,
    participants: Participant[],
  ) {
    this.perContender = new Array<number>(participants.length).fill(0);
    this.ops = new Array<number>(participants.length).fill(0);
    this.locks = participants.map(({ session }) => {
      if (impl === 'mutex') {
        const m = new Mutex(session, name);
        return { read: () => m.lock(), write: () => m.lock() };
      }
      const rw = new RWMutex(session, name);
      return { read: () => rw.rLock(), write: () => rw.lock() };
    });
  }

  private readersChange(delta: number): void {
    const now = performance.now();
    this.area += this.readers * (now - this.lastChange);
    this.lastChange = now;
    this.readers += delta;
  }

  async round(durationMs: number): Promise<void> {
    const start = performance.now();
    const end = start + durationMs;
    this.lastChange = start;
    let lastDone = start;
    // The mutex yardstick takes every acquisition exclusively: check it as a writer.
    const exclusive = this.impl === 'mutex';
    await within(
      Promise.all(
        this.locks.map(async (l, i) => {
          while (performance.now() < end) {
            const write = (this.ops[i]! + i) % WRITE_EVERY === 0;
            this.ops[i]!++;
            const t = performance.now();
            const h = await (write ? l.write() : l.read());
            (write ? this.writeWaits : this.readWaits).push(performance.now() - t);
            const token = h.fencingToken;
            if (this.seen.has(token)) this.tokenViolations++;
            this.seen.add(token);
            this.perContender[i]!++;
            if (write || exclusive) {
              if (this.writers > 0 || this.readers > 0) this.violations++;
              if (token <= this.maxToken) this.tokenViolations++;
              this.writers++;
              if (token > this.maxWriteToken) this.maxWriteToken = token;
            } else {
              if (this.writers > 0) this.violations++;
              if (token <= this.maxWriteToken) this.tokenViolations++;
              this.readersChange(+1);
              this.maxReaders = Math.max(this.maxReaders, this.readers);
            }
            if (token > this.maxToken) this.maxToken = token;
            if (write) this.writes++;
            else this.reads++;
            // The critical section (at least one event-loop turn, so that an overlap would be seen).
            await criticalSection(this.holdMs);
            if (write || exclusive) {
              if (this.writers !== 1 || this.readers > 0) this.violations++;
              this.writers--;
            } else {
              if (this.writers > 0) this.violations++;
              this.readersChange(-1);
            }
            await h.unlock();
            lastDone = performance.now();
          }
        }),
      ),
      durationMs + 60_000,
      `rwlock ${this.impl}, critical section ${holdLabel(this.holdMs)}`,
    );
    this.area += this.readers * (lastDone - this.lastChange);
    this.elapsedMs += lastDone - start;
  }

  async result(client: Client): Promise<RWLockResult> {
    const keysLeft = (await client.getPrefix(`${this.name}/`)).kvs.length;
    const total = this.reads + this.writes;
    const mean = total / this.perContender.length;
    const perSec = (n: number): number => (n * 1000) / this.elapsedMs;
    return {
      impl: this.impl,
      holdMs: this.holdMs,
      contenders: this.perContender.length,
      elapsedMs: this.elapsedMs,
      reads: this.reads,
      writes: this.writes,
      readsPerSec: perSec(this.reads),
      writesPerSec: perSec(this.writes),
      acquisitionsPerSec: perSec(total),
      readWait: summarize(this.readWaits),
      writeWait: summarize(this.writeWaits),
      perContender: this.perContender,
      spread: mean > 0 ? (Math.max(...this.perContender) - Math.min(...this.perContender)) / mean : NaN,
      maxReaders: this.maxReaders,
      meanReaders: this.elapsedMs > 0 ? this.area / this.elapsedMs : NaN,
      violations: this.violations,
      tokenViolations: this.tokenViolations,
      keysLeft,
    };
  }
}

/** RWMutex and the Mutex yardstick, with each critical section, take turns round by round; the contenders stay connected. */
export async function runRWLock(ctx: BenchContext): Promise<RWLockPhase> {
  const { contenders, rounds, roundMs } = rwlockSizes(ctx.quick);
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
      new Config('rwmutex', hold, `${ctx.prefix}rwlock/rw-${hold}`, participants),
      new Config('mutex', hold, `${ctx.prefix}rwlock/mutex-${hold}`, participants),
    ]);
    for (let r = 0; r < rounds; r++) {
      for (const c of configs) {
        ctx.log(`rwlock: round ${r + 1}/${rounds}, ${c.impl}, critical section ${holdLabel(c.holdMs)}, ${contenders} contenders`);
        await c.round(roundMs);
      }
    }
    const results: RWLockResult[] = [];
    for (const c of configs) results.push(await c.result(participants[0]!.client));
    return { contenders, writeShare: 1 / WRITE_EVERY, rounds, roundMs, results };
  } finally {
    await Promise.all(
      participants.map(async ({ client, session }) => {
        await session.close().catch(() => {});
        await client.close();
      }),
    );
  }
}
