// Shared by the chaos parent (main.ts) and its workers (worker.ts): the common clock, the seeded
// PRNG and the JSON-lines protocol spoken on the workers' stdio.

/**
 * The common clock, in ms. Every process reports `performance.timeOrigin + performance.now()`: a
 * monotonic reading shifted by the process's start on the wall clock, so readings of different
 * processes on one machine compare (to well under a millisecond) and never jump backwards.
 */
export function now(): number {
  return performance.timeOrigin + performance.now();
}

/**
 * now() minus the system-wide monotonic clock. Constant within a process; the difference between
 * two processes' offsets maps one's readings onto the other's, whatever their start times.
 *
 * Each sample brackets one hrtime reading between two now() readings; a process preempted inside
 * that window (common while a dozen workers start on two cores) would be off by half the
 * preemption, tens of ms: enough to show a clean hand-off as an overlap. So the sample with the
 * narrowest window of many is kept; `errMs` bounds its error.
 */
export function clockOffsetSample(samples = 64): { offset: number; errMs: number } {
  let best = { offset: 0, errMs: Infinity };
  for (let i = 0; i < samples; i++) {
    const a = now();
    const hr = Number(process.hrtime.bigint()) / 1e6;
    const b = now();
    if ((b - a) / 2 < best.errMs) best = { offset: (a + b) / 2 - hr, errMs: (b - a) / 2 };
  }
  return best;
}

/** mulberry32: small, fast and good enough to make fault schedules reproducible from a seed. */
export class Prng {
  private state: number;
  constructor(readonly seed: number) {
    this.state = seed >>> 0;
  }

  /** Uniform in [0, 1). */
  next(): number {
    let t = (this.state = (this.state + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** Uniform integer in [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }

  /** Uniform float in [min, max). */
  between(min: number, max: number): number {
    return min + this.next() * (max - min);
  }

  chance(p: number): boolean {
    return this.next() < p;
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error('pick from an empty list');
    return items[Math.floor(this.next() * items.length)]!;
  }

  /** Picks a key with probability proportional to its weight (weights <= 0 never). */
  weighted<K extends string>(weights: Partial<Record<K, number>>): K {
    const entries = (Object.entries(weights) as [K, number][]).filter(([, w]) => w > 0);
    const total = entries.reduce((s, [, w]) => s + w, 0);
    let r = this.next() * total;
    for (const [k, w] of entries) {
      r -= w;
      if (r < 0) return k;
    }
    return entries[entries.length - 1]![0];
  }

  /** A child generator, so one worker's draws do not shift another's. */
  fork(salt: number): Prng {
    return new Prng((Math.imul(this.seed ^ 0x9e3779b9, 0x85ebca6b) + salt * 0xc2b2ae35) >>> 0);
  }
}

/** The roles of the locks and the election, judged by their holds and terms. */
export type CoreRole = 'fenced' | 'unfenced' | 'election' | 'semaphore' | 'rwlock';

/** The recipe roles (worker-recipes.ts), judged by their reads after each call (checker/recipes.ts). */
export type RecipeRole = 'barrier' | 'dbarrier' | 'multilock';

export type Role = CoreRole | RecipeRole;

/** The lock roles whose "held" intervals the checker judges (every core role but election). */
export type LockRole = Exclude<CoreRole, 'election'>;

/** A read or write hold of the RWMutex (rwlock role). */
export type RWMode = 'read' | 'write';

/** What a worker is told at start (JSON in the CHAOS_WORKER environment variable). */
export interface WorkerConfig {
  /** Stable id, e.g. `fenced-1`; a respawned worker keeps it and gets a new `incarnation`. */
  id: string;
  incarnation: number;
  role: Role;
  endpoints: string[];
  /** Session TTL in seconds. */
  ttl: number;
  /** Lock, semaphore, RW lock or election name. */
  name: string;
  /** The semaphore's permit count (semaphore role). */
  permits: number;
  /** The DoubleBarrier's member count (dbarrier role): every dbarrier worker. */
  count?: number;
  /** The share of rwlock cycles that take the write lock (the rest take a read lock). */
  writeShare: number;
  /** Where the etcd-side counter and its per-operation ledger live. */
  dataPrefix: string;
  /** Fenced role: the PostgreSQL of the run (chaos/pg-ledger.ts) and this phase's rows; absent without one. */
  pg?: { url: string; phase: string };
  seed: number;
  /** Pause between cycles, ms. */
  thinkMs: [number, number];
  /** Time spent holding the lock (or per leader step), ms. */
  holdMs: [number, number];
  dialTimeoutMs: number;
  callTimeoutMs: number;
}

/** Worker → parent, one JSON object per stdout line. bigints travel as decimal strings. */
export type WorkerEvent =
  /**
   * `offset` is now() minus the system-wide monotonic clock (process.hrtime), for mapping to the
   * parent's clock, and `offsetErrMs` a bound on its error.
   */
  | { t: 'ready'; pid: number; at: number; offset: number; offsetErrMs: number }
  | { t: 'session'; lease: string; at: number }
  /**
   * `leftMs` (reason 'lease_gone' only): the session's own loss deadline minus the moment etcd said
   * the lease was gone. Positive means the server expired it before the client's deadline predicted.
   */
  | { t: 'session-lost'; lease: string; reason: string; at: number; leftMs?: number }
  /** `mode`: rwlock role only. */
  /** `sibling`: a hold of the fenced worker's sibling loop (worker.ts siblingLoop()). */
  | { t: 'acquired'; token: string; at: number; mode?: RWMode; sibling?: true }
  /** Sent before unlock()/release() is called: the interval the handle said "held" has ended. */
  | { t: 'releasing'; token: string; from: number; to: number; lost: boolean; lostReason?: string; mode?: RWMode; sibling?: true }
  | { t: 'released'; token: string }
  /**
   * The grant's witness (worker.ts witness()): the revision of a linearizable read right after the
   * grant, and the keys older than `token` it returned (CreateRevision decimal, lease hex).
   */
  | { t: 'witness'; token: string; rev: string; seen: { key: string; create: string; lease: string }[]; mode?: RWMode; at: number }
  /**
   * A request to a protected resource in the parent. `register`: 'ledger' and 'election' (fenced
   * registers), 'permits' (the semaphore's resource: enter, write, leave) or 'rw' (the RW lock's
   * resource: enter and read or write, with the holder's `mode`).
   */
  | {
      t: 'store';
      id: number;
      op: StoreOp;
      register: string;
      token: string;
      value?: number;
      opId?: string;
      careful?: boolean;
      mode?: RWMode;
      sentAt: number;
    }
  /**
   * A guarded increment of the etcd counter about to be sent (worker-counter.ts): `read` the get
   * before it (invoke, return, value), `at` the Txn's invoke time. Reported before the Txn goes
   * out, so that an incarnation killed before its outcome still leaves the increment in the history.
   */
  | {
      t: 'etcd-inc-call';
      token: string;
      opKey: string;
      value: number;
      read: { call: number; ret: number; value: number };
      at: number;
    }
  /**
   * Its outcome: `txn` the Txn's invoke and return (absent: it was never sent; `ret` absent: it never
   * returned, its outcome unknown), for Porcupine.
   */
  | {
      t: 'etcd-inc';
      token: string;
      opKey: string;
      value: number;
      outcome: 'accepted' | 'rejected' | 'unknown';
      error?: string;
      at: number;
      txn?: { call: number; ret?: number };
    }
  | { t: 'careful-skip'; token: string; at: number }
  /**
   * A stale-write hold (ParentMessage 'stale'): assertHeld() just passed and the writes come next; the
   * worker waits for 'stale-go' (meanwhile the parent freezes it until it has lost the lock).
   */
  | { t: 'stale-pause'; token: string; at: number }
  /** A PostgreSQL fenced increment (worker.ts pgIncrement()), and whether its unfenced shadow write was made. */
  | {
      t: 'pg-inc';
      token: string;
      opId: string;
      outcome: 'committed' | 'refused' | 'failed';
      shadowWritten: boolean;
      error?: string;
      at: number;
    }
  | { t: 'term-start'; token: string; lease: string; at: number }
  | { t: 'term-end'; token: string; from: number; to: number; lost: boolean; lostReason?: string }
  /**
   * `code`: the error's stable code (the library's `code`, or ABORTED for our own abort or timeout);
   * absent for an error the library should not throw. `name` and `message` are for the log only.
   * `leftMs` (LeaseNotFoundError only): as in session-lost, for the session the failed call used; absent if unknown.
   */
  | { t: 'error'; op: string; name: string; code?: string; message: string; at: number; leftMs?: number }
  /** A lock wait longer than the stall limit: the queue as etcd has it, for diagnosis. */
  | {
      t: 'stuck';
      at: number;
      waitedMs: number;
      key: string;
      queue: { key: string; createRevision: string; lease: string; leaseTtl: number }[];
    }
  | { t: 'bye'; at: number; cycles: number; errors: number }
  /** Recipe roles (worker-recipes.ts): a call that resolved and the read right after it; revisions as decimal strings. */
  | RecipeEvent;

/** What a recipe worker reports (worker-recipes.ts); the parent judges it (checker/recipes.ts). */
export type RecipeEvent =
  | { t: 'recipe'; kind: 'barrier-held'; create: string; at: number }
  | { t: 'recipe'; kind: 'barrier-pass'; held: string; rev: string; waitedMs: number; at: number }
  | { t: 'recipe'; kind: 'dbarrier-enter'; own: string; ready: string; rev: string; waitedMs: number; at: number }
  | { t: 'recipe'; kind: 'dbarrier-leave'; ready: string; rev: string; waitedMs: number; at: number }
  | {
      t: 'recipe';
      kind: 'multi-acquired';
      names: string[];
      tokens: Record<string, string>;
      rev: string;
      seen: { key: string; create: string; lease: string }[];
      at: number;
    }
  | { t: 'recipe'; kind: 'multi-failed'; leftover: string[]; at: number };

/** What a worker asks of a protected resource; `enter` and `leave` only of 'permits' and 'rw'. */
export type StoreOp = 'read' | 'write' | 'enter' | 'leave';

/** Parent → worker, one JSON object per stdin line. */
export type ParentMessage =
  /** `careful` (reads only) overrides the worker's own coin: check assertHeld() before writing. */
  | { t: 'store-reply'; id: number; ok: boolean; value: number; highest: string; careful?: boolean }
  | { t: 'stop' }
  /**
   * Fenced role: take the same lock once more on the same session, from a second call, and hold it
   * `holdMs` (worker.ts siblingOnce()), while the main cycle waits on an answer after an operator
   * deleted its key.
   */
  | { t: 'sibling'; holdMs: number }
  /**
   * Fenced role: make the next hold a stale one: a plain holder (PostgreSQL gets its token alone)
   * that checks assertHeld() after its reads, says 'stale-pause' and writes only on 'stale-go'.
   */
  | { t: 'stale' }
  | { t: 'stale-go' };

/** The etcd key that holds the etcd-side counter, and the ledger entry of one guarded increment. */
export function counterKey(dataPrefix: string): string {
  return `${dataPrefix}counter`;
}
export function opKey(dataPrefix: string, token: bigint): string {
  return `${dataPrefix}ops/${token.toString().padStart(20, '0')}`;
}

/** Splits a stream of text into lines, calling `onLine` for each complete one. */
export function lineSplitter(onLine: (line: string) => void): (chunk: string) => void {
  let buf = '';
  return (chunk) => {
    buf += chunk;
    let i: number;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (line.trim() !== '') onLine(line);
    }
  };
}

/** FNV-1a of a string: a worker's seed from its label. */
export function hash(s: string): number {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619);
  return h >>> 0;
}
