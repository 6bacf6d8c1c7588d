// Scale: N waiters queued on one lock in one process (one Client, one session per waiter: a Mutex
// on a shared session would share its key). Memory per waiter, time to enqueue all, RPCs and watch
// events per release, and the time to abort them all with every key removed.
import { setMaxListeners } from 'node:events';
import { Client, Mutex, Session, type LockHandle } from '../src/index.js';
import type { BenchContext } from './context.js';
import { RpcCounter, pool, settledHeap, settledMemory, sleep, summarize, within, type Summary } from './stats.js';

export interface ScaleResult {
  waiters: number;
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
  /** Unary RPCs from one holder's unlock() to the next holder's lock() resolving. */
  rpcsPerRelease: number;
  /** Watch events delivered to this process per release. */
  watchEventsPerRelease: number;
  handover: Summary;
  /** From abort() to every waiter's lock() rejected, its key deleted. */
  abortMs: number;
  /** Keys left under the prefix after abort and the last unlock (must be 0). */
  keysLeft: number;
  /** Waiters that acquired out of CreateRevision order, or while another held: must be 0. */
  violations: number;
  /** Set when not every waiter could be queued (budget spent, or waiters failed). */
  incomplete?: { queued: number; budgetMs: number; sessionsLost: number; failures: number; firstFailure?: string };
}

const WARM = 20;

/** Queues and aborts a few waiters, so that the waiting path is compiled before heap is measured. */
async function warmUp(sessions: Session[], name: string): Promise<void> {
  const holder = await new Mutex(sessions[0]!, name).lock();
  const ac = new AbortController();
  const ps = sessions.slice(1).map((s) => new Mutex(s, name).lock({ signal: ac.signal }).catch(() => {}));
  await sleep(200);
  ac.abort();
  await Promise.all(ps);
  await holder.unlock();
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
    watchEventsPerRelease: NaN,
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

export async function runScale(ctx: BenchContext, n: number): Promise<ScaleResult> {
  const name = `${ctx.prefix}scale/${n}`;
  const client = new Client({ endpoints: ctx.endpoints, callTimeoutMs: 120_000 });
  const counter = new RpcCounter(client);
  let sessions: Session[] = [];
  try {
    const heapBase = await settledHeap();
    let t = performance.now();
    sessions = await pool(
      Array.from({ length: n + 1 + WARM }, (_, i) => i),
      256,
      () => Session.create(client),
    );
    const sessionsMs = performance.now() - t;
    const heapSessions = await settledHeap();
    const holder0 = await new Mutex(sessions[0]!, name).lock();

    // Warm the waiting code path up first, so that JIT code is not counted as per-waiter memory.
    await warmUp(sessions.slice(n + 1), `${name}-warm`);

    // Enqueue: at most `window` lock() calls still taking their ticket at any time (a burst of
    // thousands of enqueue Txns, each scanning the queue inside etcd's apply loop, stalls etcd).
    const ac = new AbortController();
    // One signal for every waiter (a shutdown signal): each lock() listens on it.
    setMaxListeners(n + 16, ac.signal);
    const acquired: { h: LockHandle; i: number }[] = [];
    let wake: (() => void) | undefined;
    const settled: Promise<unknown>[] = [];
    const failures: string[] = [];
    const memBefore = await settledMemory();
    const heapBefore = memBefore.heapUsed;
    const created0 = counter.watchCreated;
    const queuedNow = (): number => counter.watchCreated - created0;
    const budgetMs = n >= 10_000 ? (ctx.quick ? 30_000 : 150_000) : ctx.quick ? 30_000 : 60_000;
    t = performance.now();
    let started = 0;
    while (started < n && failures.length === 0 && performance.now() - t < budgetMs) {
      if (started - queuedNow() >= ENQUEUE_WINDOW) {
        await sleep(1);
        continue;
      }
      const i = ++started;
      const p = new Mutex(sessions[i]!, name).lock({ signal: ac.signal }).then((h) => {
        acquired.push({ h, i });
        wake?.();
      });
      settled.push(
        p.catch((err: unknown) => {
          if (!ac.signal.aborted) failures.push(`${(err as Error).name}: ${(err as Error).message}`);
        }),
      );
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
      await holder0.unlock();
      const lost = sessions.filter((x) => x.signal.aborted).length;
      const r = incomplete(n, queued, enqueueMs, sessionsMs, lost, failures, budgetMs);
      r.keysLeft = (await client.getPrefix(`${name}/`)).kvs.length;
      return r;
    }
    const memQueued = await settledMemory();
    const heapQueued = memQueued.heapUsed;

    // Releases: each holder unlocks, the next in line takes over.
    const releases = Math.min(n, ctx.quick ? 10 : 20);
    const handover: number[] = [];
    let violations = 0;
    let rpcs = 0;
    let events = 0;
    let holder: LockHandle = holder0;
    let lastToken = holder0.fencingToken;
    for (let r = 0; r < releases; r++) {
      const before = counter.snapshot();
      const next = new Promise<void>((resolve) => (wake = resolve));
      const t0 = performance.now();
      await holder.unlock();
      if (acquired.length <= r) await within(next, 10_000, 'the next waiter');
      handover.push(performance.now() - t0);
      const after = counter.snapshot();
      rpcs += after.unary - before.unary;
      events += after.watchEvents - before.watchEvents;
      if (acquired.length !== r + 1) violations++;
      holder = acquired[r]!.h;
      if (holder.fencingToken <= lastToken) violations++;
      lastToken = holder.fencingToken;
      // Let stragglers (a late answer, an extra event) land in this release's count.
      await sleep(5);
      const late = counter.snapshot();
      rpcs += late.unary - after.unary;
      events += late.watchEvents - after.watchEvents;
    }

    // Abort every waiter still queued; each removes its own key.
    t = performance.now();
    ac.abort();
    await within(Promise.all(settled), 300_000, `aborting ${n} waiters`);
    const abortMs = performance.now() - t;
    if (acquired.length !== releases) violations++;
    const left = (await client.getPrefix(`${name}/`)).kvs.length; // the holder's key only
    if (left !== 1) violations++;
    await holder.unlock();
    const keysLeft = (await client.getPrefix(`${name}/`)).kvs.length;
    return {
      waiters: n,
      sessionsMs,
      bytesPerSession: (heapSessions - heapBase) / (n + 1 + WARM),
      enqueueMs,
      bytesPerWaiter: (heapQueued - heapBefore) / n,
      bufferBytesPerWaiter: (memQueued.arrayBuffers - memBefore.arrayBuffers) / n,
      releases,
      rpcsPerRelease: rpcs / releases,
      watchEventsPerRelease: events / releases,
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
