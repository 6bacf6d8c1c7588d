// Scale: N waiters queued on one lock in one process (one Client, one session per waiter: a Mutex
// on a shared session would share its key). Memory per waiter, time to enqueue all, RPCs and watch
// events per release, and the time to abort them all with every key removed. The same machinery
// drives a semaphore (the semaphore-scale phase): `permits` holders, N waiters behind them.
import { setMaxListeners } from 'node:events';
import { Client, Mutex, Semaphore, Session, type LockHandle, type PermitHandle } from '../dist/index.js';
import { prefixEnd } from '../dist/client/kv.js';
import { queueOf } from '../dist/queue/state.js';
import type { BenchContext } from './context.js';
import { RpcCounter, pool, settledHeap, settledMemory, sleep, summarize, within, type Summary } from './stats.js';

/**
 * A queue primitive as this phase drives it. `acquire` returns the library's own promise (no wrapper:
 * a wrapping async frame per waiter would count as the waiter's memory).
 */
export interface ScaleSubject<H extends { fencingToken: bigint }> {
  /** Key prefix under the run's prefix: `scale`, `semaphore-scale`. */
  label: string;
  /** Holders at once: 1 for a Mutex, N for a semaphore of N permits. */
  holders: number;
  acquire(session: Session, name: string, signal?: AbortSignal): Promise<H>;
  release(handle: H): Promise<unknown>;
  /**
   * Watches the waiters create per release (a semaphore's next waiter becomes the head and watches
   * the prefix): the release's count waits for them, and for their requests, before it closes.
   */
  watchesPerRelease: number;
}

export const mutexSubject: ScaleSubject<LockHandle> = {
  label: 'scale',
  holders: 1,
  acquire: (session, name, signal) => new Mutex(session, name).lock(signal ? { signal } : {}),
  release: (h) => h.unlock(),
  watchesPerRelease: 0,
};

export function semaphoreSubject(permits: number): ScaleSubject<PermitHandle> {
  return {
    label: 'semaphore-scale',
    holders: permits,
    acquire: (session, name, signal) => new Semaphore(session, name, { permits }).acquire(signal ? { signal } : {}),
    release: (h) => h.release(),
    watchesPerRelease: 1,
  };
}

export interface ScaleResult {
  waiters: number;
  /** Holders at once (semaphore-scale: the permits; the Mutex phase leaves it out). */
  permits?: number;
  /** Granting the N + 1 leases (setup, not part of the lock's cost). */
  sessionsMs: number;
  /** Heap per session (lease, keepalive registration, timers). */
  bytesPerSession: number;
  /** From N concurrent lock() calls to every waiter queued (key created, watch confirmed, re-read). */
  enqueueMs: number;
  /** Heap per queued waiter, after a full GC, excluding its session. */
  bytesPerWaiter: number;
  /** Buffer memory outside the V8 heap per waiter (`arrayBuffers`: pool slabs pinned by kept Buffers). */
  bufferBytesPerWaiter: number;
  releases: number;
  /**
   * Unary RPCs from one holder's unlock() to the next holder's lock() resolving, the safety net's
   * re-checks apart (they are due by time, not by release: see `recheckTxnsPerSecond`).
   */
  rpcsPerRelease: number;
  /**
   * The batched re-check's Txns (recheck.ts: each waiter's check every max(10 s, TTL), up to 128
   * reads a Txn) per second from the first lock() to the last release: they grow with the waiters
   * and the time they wait, not with the releases.
   */
  recheckTxnsPerSecond: number;
  /** The reads those Txns carried, per second over the same window. */
  recheckReadsPerSecond: number;
  /** Watch events delivered to this process per release. */
  watchEventsPerRelease: number;
  /** Watches created per release (a Mutex: none; a semaphore: the new head's watch on the prefix). */
  watchesPerRelease: number;
  /** Unary RPCs per release by method. */
  rpcsPerReleaseByMethod: Record<string, number>;
  handover: Summary;
  /** From abort() to every waiter's lock() rejected, its key deleted. */
  abortMs: number;
  /** Keys left under the prefix after abort and the last unlock (must be 0). */
  keysLeft: number;
  /** Waiters that acquired out of CreateRevision order, or beyond the holders allowed at once: must be 0. */
  violations: number;
  /** Set when not every waiter could be queued (budget spent, or waiters failed). */
  incomplete?: { queued: number; budgetMs: number; sessionsLost: number; failures: number; firstFailure?: string };
}

const WARM = 20;

/**
 * Counts the Txns of `client`'s batched re-check (bench-only: wraps the internal re-checker's `run`,
 * one Txn per call, on this instance), which the release counts leave out.
 */
function countRechecks(client: Client): { txns: number; reads: number } {
  const n = { txns: 0, reads: 0 };
  // biome-ignore lint/suspicious/noExplicitAny: the bench counts the re-checker's Txns by wrapping an internal method
  const rechecker = queueOf(client).rechecker as any;
  const run = rechecker.run.bind(rechecker);
  rechecker.run = async (batch: { check: { keys: unknown[] } }[]) => {
    const live = batch.filter((e) => rechecker.entries.has(e)); // none: it returns without a Txn
    if (live.length > 0) n.txns++;
    for (const e of live) n.reads += e.check.keys.length;
    return run(batch);
  };
  return n;
}

/** Queues and aborts a few waiters, so that the waiting path is compiled before heap is measured. */
async function warmUp<H extends { fencingToken: bigint }>(subject: ScaleSubject<H>, sessions: Session[], name: string): Promise<void> {
  const holders: H[] = [];
  for (const s of sessions.slice(0, subject.holders)) holders.push(await subject.acquire(s, name));
  const ac = new AbortController();
  setMaxListeners(sessions.length + 16, ac.signal);
  const ps = sessions.slice(subject.holders).map((s) => subject.acquire(s, name, ac.signal).catch(() => {}));
  await sleep(200);
  ac.abort();
  await Promise.all(ps);
  for (const h of holders) await subject.release(h);
}

function incomplete(
  n: number,
  queued: number,
  enqueueMs: number,
  sessionsMs: number,
  sessionsLost: number,
  failures: string[],
  budgetMs: number,
): ScaleResult {
  const r: ScaleResult = {
    waiters: n,
    sessionsMs,
    bytesPerSession: NaN,
    enqueueMs,
    bytesPerWaiter: NaN,
    bufferBytesPerWaiter: NaN,
    releases: 0,
    rpcsPerRelease: NaN,
    recheckTxnsPerSecond: NaN,
    recheckReadsPerSecond: NaN,
    watchEventsPerRelease: NaN,
    watchesPerRelease: NaN,
    rpcsPerReleaseByMethod: {},
    handover: summarize([]),
    abortMs: NaN,
    keysLeft: 0,
    violations: 0,
    incomplete: { queued, budgetMs, sessionsLost, failures: failures.length },
  };
  if (failures[0]) r.incomplete!.firstFailure = failures[0];
  return r;
}

/** Lock() calls allowed to be taking their ticket at once. */
const ENQUEUE_WINDOW = 32;

export function runScale(ctx: BenchContext, n: number): Promise<ScaleResult> {
  return runQueueScale(ctx, n, mutexSubject);
}

/** semaphore-scale: N waiters behind the `permits` holders of one semaphore. */
export async function runSemaphoreScale(ctx: BenchContext, n: number, permits: number): Promise<ScaleResult> {
  return { permits, ...(await runQueueScale(ctx, n, semaphoreSubject(permits))) };
}

/** Waits until no request is in flight and nothing was sent or received for `quietMs`. */
async function quiet(counter: RpcCounter, quietMs: number): Promise<void> {
  const state = (): string => `${counter.unary}/${counter.inFlight}/${counter.watchResponses}`;
  let last = state();
  let since = performance.now();
  for (;;) {
    await sleep(2);
    const now = state();
    if (now !== last || counter.inFlight > 0) {
      last = now;
      since = performance.now();
    } else if (performance.now() - since >= quietMs) {
      return;
    }
  }
}

export async function runQueueScale<H extends { fencingToken: bigint }>(
  ctx: BenchContext,
  n: number,
  subject: ScaleSubject<H>,
): Promise<ScaleResult> {
  const name = `${ctx.prefix}${subject.label}/${n}`;
  const k = subject.holders;
  const client = new Client({ endpoints: ctx.endpoints, callTimeoutMs: 120_000 });
  const counter = new RpcCounter(client);
  const rechecks = countRechecks(client);
  let sessions: Session[] = [];
  try {
    const heapBase = await settledHeap();
    let t = performance.now();
    // Sessions 0..k-1 hold, k..k+n-1 wait, the last WARM warm the code up.
    sessions = await pool(
      Array.from({ length: n + k + WARM }, (_, i) => i),
      256,
      () => Session.create(client),
    );
    const sessionsMs = performance.now() - t;
    const heapSessions = await settledHeap();
    const held: H[] = [];
    for (const s of sessions.slice(0, k)) held.push(await subject.acquire(s, name));

    // Warm the waiting code path up first, so that JIT code is not counted as per-waiter memory.
    await warmUp(subject, sessions.slice(n + k), `${name}-warm`);

    // Enqueue: at most `window` lock() calls still taking their ticket at any time (a burst of
    // thousands of enqueue Txns, each scanning the queue inside etcd's apply loop, stalls etcd).
    const ac = new AbortController();
    // One signal for every waiter (a shutdown signal): each lock() listens on it.
    setMaxListeners(n + 16, ac.signal);
    const acquired: H[] = [];
    let wake: (() => void) | undefined;
    const settled: Promise<unknown>[] = [];
    const failures: string[] = [];
    // Handlers shared by every waiter: the bench's own bookkeeping per waiter is one derived promise
    // in `settled` (about 100 bytes of the heap per waiter), so the figure is the library's.
    const onAcquired = (h: H): void => {
      acquired.push(h);
      wake?.();
    };
    const onFailed = (err: unknown): void => {
      if (!ac.signal.aborted) failures.push(`${(err as Error).name}: ${(err as Error).message}`);
    };
    const memBefore = await settledMemory();
    const heapBefore = memBefore.heapUsed;
    const created0 = counter.watchCreated;
    const queuedNow = (): number => counter.watchCreated - created0;
    const budgetMs = n >= 10_000 ? (ctx.quick ? 30_000 : 150_000) : ctx.quick ? 30_000 : 60_000;
    t = performance.now();
    const firstLock = t;
    const rechecks0 = { ...rechecks };
    let started = 0;
    while (started < n && failures.length === 0 && performance.now() - t < budgetMs) {
      if (started - queuedNow() >= ENQUEUE_WINDOW) {
        await sleep(1);
        continue;
      }
      const i = k - 1 + ++started;
      settled.push(subject.acquire(sessions[i]!, name, ac.signal).then(onAcquired, onFailed));
    }
    // Queued: every started waiter's predecessor watch is confirmed and no RPC is left in flight.
    await within(
      (async () => {
        let quiet = 0;
        while (quiet < 3) {
          await sleep(2);
          quiet = counter.inFlight === 0 && queuedNow() + failures.length >= started ? quiet + 1 : 0;
        }
      })(),
      120_000,
      `enqueueing ${n} waiters`,
    );
    const enqueueMs = performance.now() - t;
    const queued = queuedNow();
    if (failures.length > 0 || queued < n) {
      ac.abort();
      await Promise.all(settled);
      for (const h of held) await subject.release(h);
      const lost = sessions.filter((x) => x.signal.aborted).length;
      const r = incomplete(n, queued, enqueueMs, sessionsMs, lost, failures, budgetMs);
      r.keysLeft = (await client.getPrefix(`${name}/`)).kvs.length;
      return r;
    }
    const memQueued = await settledMemory();
    const heapQueued = memQueued.heapUsed;

    // Releases: the oldest holder releases, the next in line takes over (one at a time: each
    // release must let exactly one waiter in).
    const releases = Math.min(n, ctx.quick ? 10 : 20);
    const handover: number[] = [];
    let violations = 0;
    const violation = (why: string): void => {
      violations++;
      console.error(`[scale/${n}] violation: ${why}`);
    };
    let rpcs = 0;
    let events = 0;
    let watches = 0;
    const byMethod = new Map<string, number>();
    let lastToken = held.reduce((a, h) => (h.fencingToken > a ? h.fencingToken : a), 0n);
    for (let r = 0; r < releases; r++) {
      const before = counter.snapshot();
      const rechecksBefore = rechecks.txns;
      const created = counter.watchCreated;
      const next = new Promise<void>((resolve) => (wake = resolve));
      const t0 = performance.now();
      await subject.release(held.shift()!);
      if (acquired.length <= r) await within(next, 10_000, 'the next waiter');
      handover.push(performance.now() - t0);
      if (acquired.length !== r + 1) violation(`release ${r}: ${acquired.length} acquired right after it, expected ${r + 1}`);
      const h = acquired[r]!;
      if (h.fencingToken <= lastToken) violation(`release ${r}: token ${h.fencingToken} after ${lastToken}`);
      lastToken = h.fencingToken;
      held.push(h);
      // Let stragglers (a late answer, an extra event) land in this release's count: the watches the
      // waiters open after a release, and everything until the client is quiet.
      await sleep(5);
      if (subject.watchesPerRelease > 0) {
        await within(
          (async () => {
            while (counter.watchCreated - created < subject.watchesPerRelease) await sleep(1);
          })(),
          10_000,
          'the next waiter watching',
        );
      }
      await quiet(counter, subject.watchesPerRelease > 0 ? 20 : 0);
      // A second waiter let in by the same release would show here.
      if (acquired.length !== r + 1) violation(`release ${r}: ${acquired.length} acquired once quiet, expected ${r + 1}`);
      const after = counter.snapshot();
      const recheckTxns = rechecks.txns - rechecksBefore;
      rpcs += after.unary - before.unary - recheckTxns;
      byMethod.set('Txn', (byMethod.get('Txn') ?? 0) - recheckTxns);
      events += after.watchEvents - before.watchEvents;
      watches += counter.watchCreated - created;
      for (const [m, c] of Object.entries(after.byMethod)) byMethod.set(m, (byMethod.get(m) ?? 0) + c - (before.byMethod[m] ?? 0));
    }

    const recheckMs = performance.now() - firstLock;
    // Abort every waiter still queued; each removes its own key.
    t = performance.now();
    ac.abort();
    await within(Promise.all(settled), 300_000, `aborting ${n} waiters`);
    // A lock() rejects once its delete landed or after the client's dial timeout (an abort must not
    // hang on an outage; the delete goes on in the background). Thousands of deletes at once can take
    // longer than that on a busy etcd, so the abort is over when only the holders' keys are left.
    const prefix = Buffer.from(`${name}/`);
    const count = async (): Promise<bigint> => (await client.range({ key: prefix, rangeEnd: prefixEnd(prefix), countOnly: true })).count;
    for (let c = await count(); c > BigInt(k) && performance.now() - t < 60_000; c = await count()) await sleep(20);
    const abortMs = performance.now() - t;
    if (acquired.length !== releases) violation(`after the abort: ${acquired.length} acquired, expected ${releases}`);
    const left = (await client.getPrefix(`${name}/`)).kvs.length; // the holders' keys only
    if (left !== k) violation(`after the abort: ${left} keys left, expected the ${k} holders'`);
    for (const h of held) await subject.release(h);
    const keysLeft = (await client.getPrefix(`${name}/`)).kvs.length;
    return {
      waiters: n,
      sessionsMs,
      bytesPerSession: (heapSessions - heapBase) / (n + k + WARM),
      enqueueMs,
      bytesPerWaiter: (heapQueued - heapBefore) / n,
      bufferBytesPerWaiter: (memQueued.arrayBuffers - memBefore.arrayBuffers) / n,
      releases,
      rpcsPerRelease: rpcs / releases,
      recheckTxnsPerSecond: ((rechecks.txns - rechecks0.txns) * 1000) / recheckMs,
      recheckReadsPerSecond: ((rechecks.reads - rechecks0.reads) * 1000) / recheckMs,
      watchEventsPerRelease: events / releases,
      watchesPerRelease: watches / releases,
      rpcsPerReleaseByMethod: Object.fromEntries([...byMethod].filter(([, c]) => c > 0).map(([m, c]) => [m, c / releases])),
      handover: summarize(handover),
      abortMs,
      keysLeft,
      violations,
    };
  } finally {
    await pool(sessions, 256, (s) => s.close().catch(() => {}));
    await client.close();
  }
}
