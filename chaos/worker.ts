// One chaos worker: its own Client and Session, one workload, reporting to the parent (main.ts) by
// JSON lines on stdout and reaching the fenced store through the parent on stdin.
//
//   CHAOS_WORKER='<WorkerConfig JSON>' node --import tsx chaos/worker.ts
//
// Roles:
//   fenced    lock, read-modify-write the fenced ledger in the parent (token checked there), then the
//             same increment on a counter in etcd, in a Txn guarded by handle.ownerCompare(); unlock.
//   unfenced  lock, hold for a while, unlock; report the interval the handle said "held".
//   election  runAsLeader (one term per call); each term writes to a fenced register with its token.
//   semaphore acquire one of the semaphore's N permits; enter the permits resource in the parent (at
//             most N holders at once, by token), write, leave it, release.
//   rwlock    per cycle, rLock or lock the RWMutex; a reader reads the RW resource twice, a writer
//             reads it and writes the value plus one (tokens and modes checked there); unlock.
//   barrier, dbarrier, multilock: the recipes (worker-recipes.ts).
//
// After {"t":"stop"} the worker stops, resigns/unlocks, closes its session and client, and exits
// on its own: a worker that does not is reported as a leak.
import {
  Client,
  EtcdError,
  prefixEnd,
  Mutex,
  RWMutex,
  Semaphore,
  Session,
  runAsLeader,
  type LockHandle,
  type ReleaseResult,
} from '../src/index.js';
import { PgLedger } from './worker-pg.js';
import { emit, errorCount, pause, reportError, watchSession } from './worker-io.js';
import { recipeCycles } from './worker-recipes.js';
import { settleStore, store } from './worker-store.js';
import { lossClock } from './worker-loss.js';
import { etcdIncrement } from './worker-counter.js';
import { Prng, clockOffsetSample, lineSplitter, now, type ParentMessage, type RWMode, type WorkerConfig } from './common.js';

const cfg = JSON.parse(process.env.CHAOS_WORKER ?? '') as WorkerConfig;
const rng = new Prng(cfg.seed);
const stop = new AbortController();
const LOCK_WAIT_LIMIT_MS = 60_000;
const STUCK_REPORT_MS = 12_000;

process.stdin.setEncoding('utf8');
process.stdin.on(
  'data',
  lineSplitter((line) => {
    const m = JSON.parse(line) as ParentMessage;
    if (m.t === 'stop') stop.abort(new Error('worker stopping'));
    else if (m.t === 'sibling') siblingRun = siblingOnce(m.holdMs);
    else if (m.t === 'stale') staleNext = true;
    else if (m.t === 'stale-go') staleGo?.();
    else if (m.t === 'store-reply') settleStore(m);
  }),
);
// The parent is gone: stop as if told to.
process.stdin.on('end', () => stop.abort(new Error('parent gone')));

const between = ([a, b]: [number, number]): number => rng.between(a, b);

const client = new Client({ endpoints: cfg.endpoints, dialTimeoutMs: cfg.dialTimeoutMs, callTimeoutMs: cfg.callTimeoutMs });

// An election worker's sessions are made by runAsLeader (one per term, see electionCycle), which
// does not say when: report each lease grant as it is answered, as currentSession() does for the
// lock roles, so that the parent knows how old a term's lease is (term-start names its lease). The
// checker needs that to tell a lease a frozen Raft leader knew of (etcd 15247) from one granted
// while it was frozen (see explain() in checker/excuses.ts).
if (cfg.role === 'election') {
  const grant = client.leaseGrant.bind(client);
  client.leaseGrant = async (...args: Parameters<typeof grant>) => {
    const granted = await grant(...args);
    emit({ t: 'session', lease: granted.id.toString(16), at: now() });
    return granted;
  };
}

// ---- sessions (lock roles): one at a time, a new one after a loss ----
let session: Session | undefined;
/** The cycle running now, settled when it ends (a lost session's revoke waits for it). */
let inCycle: Promise<void> = Promise.resolve();
/** A session being created: the fenced role's two loops share one session. */
let creating: Promise<Session> | undefined;
function currentSession(): Promise<Session> {
  if (session && !session.signal.aborted) return Promise.resolve(session);
  creating ??= newSession().finally(() => (creating = undefined));
  return creating;
}
async function newSession(): Promise<Session> {
  const s = await Session.create(client, { ttl: cfg.ttl, signal: stop.signal });
  session = s;
  emit({ t: 'session', lease: s.leaseId.toString(16), at: now() });
  watchSession(s);
  void s.done.then(async (e) => {
    if (e.reason === 'closed' || e.reason === 'client_closed') return;
    // The lease may still live on the server until its TTL runs out; its keys would block the queue.
    // But first the cycle holding on this session finishes: it leaves the semaphore's and the RW
    // lock's resource before its key goes, or a newcomer would find it still admitted there.
    await inCycle;
    if (!client.closed) client.leaseRevoke(s.leaseId, { timeoutMs: 2000 }).catch(() => {});
  });
  return s;
}

let cycles = 0;

async function lockOnce(s: Session): Promise<LockHandle> {
  const m = new Mutex(s, cfg.name);
  return waitFor(m.key, (signal) => m.lock({ signal }));
}

/** One wait for a lock or permit (our key is `key`), bounded, with the stuck-queue watchdog. */
async function waitFor<H>(key: string, acquire: (signal: AbortSignal) => Promise<H>): Promise<H> {
  const started = now();
  // A wait this long on a small queue means something is stuck: report the queue as etcd has it.
  const watchdog = setTimeout(() => void reportStuck(key, started), STUCK_REPORT_MS);
  try {
    return await acquire(AbortSignal.any([stop.signal, AbortSignal.timeout(LOCK_WAIT_LIMIT_MS)]));
  } finally {
    clearTimeout(watchdog);
  }
}

async function reportStuck(key: string, started: number): Promise<void> {
  try {
    const r = await client.getPrefix(`${cfg.name}/`);
    const queue = await Promise.all(
      [...r.kvs]
        .sort((a, b) => (a.createRevision < b.createRevision ? -1 : 1))
        .map(async (kv) => ({
          key: kv.key.toString(),
          createRevision: kv.createRevision.toString(),
          lease: kv.lease.toString(16),
          leaseTtl: kv.lease === 0n ? -2 : (await client.leaseTimeToLive(kv.lease).catch(() => ({ ttl: -3 }))).ttl,
        })),
    );
    emit({ t: 'stuck', at: now(), waitedMs: Math.round(now() - started), key, queue });
  } catch (err) {
    reportError('stuck-report', err);
  }
}

// The PostgreSQL ledger (fenced role; worker-pg.ts).
const pgLedger = cfg.pg ? new PgLedger(cfg.pg, emit) : undefined;

/** The parent asked for a stale hold ('stale'): the next fenced cycle is one. */
let staleNext = false;
/** Resolves the stale hold's wait for 'stale-go'. */
let staleGo: (() => void) | undefined;

/**
 * A stale hold's pause: assertHeld() passed (the hold is ours now), then the writes wait for the
 * parent's 'stale-go', by which time the parent has frozen this process until its lease expired and
 * a newer holder passed the fences. The writes that follow carry a stale token, as a holder's would
 * after a GC pause between its check and its write. False if the check already failed.
 */
async function stalePause(handle: LockHandle): Promise<boolean> {
  if (!stillHeld(handle)) return false;
  const go = new Promise<void>((resolve) => (staleGo = resolve));
  emit({ t: 'stale-pause', token: handle.fencingToken.toString(), at: now() });
  await go;
  staleGo = undefined;
  return true;
}

async function fencedCycle(): Promise<void> {
  await siblingRun; // one cycle per incarnation: never join the sibling's hold
  const s = await currentSession();
  const handle = await lockOnce(s);
  const token = handle.fencingToken;
  const from = now();
  emit({ t: 'acquired', token: token.toString(), at: from });
  void witness(token);
  const loss = lossClock(handle);
  const shadow = await pgLedger?.shadowRead();
  const stale = staleNext;
  staleNext = false;
  try {
    // 1. The fenced ledger: read and write carry the token; the store refuses older tokens.
    const coin = rng.chance(0.5);
    const r = await store('read', 'ledger', token);
    // A stale hold is a plain holder (its own check comes before the pause, not at each write).
    const careful = stale ? false : (r.careful ?? coin);
    const pgRead = await pgLedger?.read(handle, careful);
    if (stale && !(await stalePause(handle))) return;
    if (r.ok) {
      await pause(between(cfg.holdMs));
      let skip = false;
      if (careful) {
        // A careful holder checks the handle (and the session's deadline, against the clock) first.
        try {
          handle.assertHeld();
        } catch {
          skip = true;
        }
      }
      if (skip) emit({ t: 'careful-skip', token: token.toString(), at: now() });
      else await store('write', 'ledger', token, { value: r.value + 1, opId: `${cfg.id}#${cfg.incarnation}/${cycles}`, careful });
    }
    // 2. The same increment in etcd, guarded by ownerCompare (no fencing help from anyone else).
    await etcdIncrement(client, cfg, handle, token);
    // 3. And on PostgreSQL, fenced by the database, with the unfenced shadow beside it.
    if (pgRead) await pgLedger!.increment(handle, token, pgRead, shadow, careful, `${cfg.id}#${cfg.incarnation}/${cycles}`);
  } finally {
    await release(handle, from, loss);
  }
}

/** Ends a hold: reports how long we believed we held it, then unlocks (or releases the permit). */
async function release(
  handle: { release(): Promise<ReleaseResult>; readonly key: string; readonly fencingToken: bigint; readonly signal: AbortSignal },
  from: number,
  loss: ReturnType<typeof lossClock>,
  mode?: RWMode,
  sibling?: true,
): Promise<void> {
  const token = handle.fencingToken.toString();
  // Reported before unlocking: if we are killed during unlock(), the parent still knows when our
  // belief ended (a later holder may legitimately start as soon as the delete commits).
  emit({
    t: 'releasing',
    token,
    from,
    to: loss.lostAt() ?? now(),
    lost: loss.lostAt() !== undefined,
    lostReason: loss.reason(),
    mode,
    ...(sibling ? { sibling } : {}),
  });
  try {
    const r = await handle.release();
    // Its first delete failed: the library retries it in the background until the key is gone.
    if (r.state === 'pending') reportError('unlock (retried in the background)', r.error);
  } catch (err) {
    reportError('unlock', err);
  }
  emit({ t: 'released', token });
}

/** A careful holder's check just before it acts: false (and reported) if the handle says it lost. */
function stillHeld(handle: { assertHeld(): void; fencingToken: bigint }): boolean {
  try {
    handle.assertHeld();
    return true;
  } catch {
    emit({ t: 'careful-skip', token: handle.fencingToken.toString(), at: now() });
    return false;
  }
}

/**
 * The grant's witness: a linearizable read of the queue right after the grant, of every key older
 * than ours. Its revision comes after the answer that proved our turn, so an older key it still
 * returns was there at the grant: the parent judges that against the queue's rule (a lock: none; a
 * semaphore: fewer than `permits`; a reader: no writer) and against the observer's record of every
 * key (revisions.ts). Not awaited: the hold goes on meanwhile, as it would without it.
 */
async function witness(token: bigint, mode?: RWMode): Promise<void> {
  const prefix = Buffer.from(`${cfg.name}/`);
  try {
    const r = await client.range({ key: prefix, rangeEnd: prefixEnd(prefix), maxCreateRevision: token - 1n, keysOnly: true });
    const seen = r.kvs.map((kv) => ({ key: kv.key.toString(), create: kv.createRevision.toString(), lease: kv.lease.toString(16) }));
    emit({ t: 'witness', token: token.toString(), rev: r.header.revision.toString(), seen, mode, at: now() });
  } catch {
    // An outage here says nothing about the grant: no witness for this hold.
  }
}

async function semaphoreCycle(): Promise<void> {
  const s = await currentSession();
  const sem = new Semaphore(s, cfg.name, { permits: cfg.permits });
  const handle = await waitFor(sem.key, (signal) => sem.acquire({ signal }));
  const token = handle.fencingToken;
  const from = now();
  emit({ t: 'acquired', token: token.toString(), at: from });
  // Evidence for an over-grant: a linearizable read after the grant that still shows `permits` older
  // keys proves etcd held them when we got ours (late ghosts are newer, so they cannot count here).
  void witness(token);
  const loss = lossClock(handle);
  try {
    const coin = rng.chance(0.5);
    const r = await store('enter', 'permits', token);
    const careful = r.careful ?? coin;
    if (r.ok) {
      await pause(between(cfg.holdMs));
      if (!careful || stillHeld(handle))
        await store('write', 'permits', token, { opId: `${cfg.id}#${cfg.incarnation}/${cycles}`, careful });
    }
    await store('leave', 'permits', token);
  } finally {
    await release(handle, from, loss);
  }
}

/**
 * One hold of the RW lock, a write with probability `writeShare`. The RW resource checks each
 * request's token against its mode: a reader reads twice, a writer reads and writes the value plus
 * one; the second request of a careful holder comes right after assertHeld() passed.
 */
async function rwCycle(): Promise<void> {
  const s = await currentSession();
  const mode: RWMode = rng.chance(cfg.writeShare) ? 'write' : 'read';
  const rw = new RWMutex(s, cfg.name);
  const handle = await waitFor(mode === 'write' ? rw.writeKey : rw.readKey, (signal) =>
    mode === 'write' ? rw.lock({ signal }) : rw.rLock({ signal }),
  );
  if (handle.mode !== mode) throw new Error(`asked for a ${mode} lock, got a ${handle.mode} lock`);
  const token = handle.fencingToken;
  const from = now();
  emit({ t: 'acquired', token: token.toString(), at: from, mode });
  void witness(token, mode);
  const loss = lossClock(handle);
  try {
    const coin = rng.chance(0.5);
    const r = await store('enter', 'rw', token, { mode });
    const careful = r.careful ?? coin;
    if (r.ok) {
      await pause(between(cfg.holdMs));
      if (!careful || stillHeld(handle)) {
        if (mode === 'write')
          await store('write', 'rw', token, { mode, value: r.value + 1, opId: `${cfg.id}#${cfg.incarnation}/${cycles}`, careful });
        else await store('read', 'rw', token, { mode, careful });
      }
    }
  } finally {
    await release(handle, from, loss, mode);
  }
}

/** The sibling hold running now (siblingOnce()); the fenced cycle waits for it before its next lock. */
let siblingRun: Promise<void> = Promise.resolve();

/**
 * A second call of this process taking the same lock on the same session, asked for by the parent
 * (an operator just deleted the key of the main cycle's hold, which now waits on an answer): the key
 * is enqueued again while the lost hold is not yet released. That release, coming later, must not
 * delete the new incarnation (releases are guarded on the CreateRevision): held `holdMs`, past it.
 * It touches no resource; its hold counts among the fenced lock's.
 */
async function siblingOnce(holdMs: number): Promise<void> {
  try {
    const s = await currentSession();
    const handle = await lockOnce(s);
    const from = now();
    emit({ t: 'acquired', token: handle.fencingToken.toString(), at: from, sibling: true });
    const loss = lossClock(handle);
    await pause(holdMs, handle.signal);
    await release(handle, from, loss, undefined, true);
  } catch (err) {
    if (!stop.signal.aborted) reportError('sibling', err, session);
  }
}

async function unfencedCycle(): Promise<void> {
  const s = await currentSession();
  const handle = await lockOnce(s);
  const token = handle.fencingToken;
  const from = now();
  emit({ t: 'acquired', token: token.toString(), at: from });
  void witness(token);
  const loss = lossClock(handle);
  try {
    await pause(between(cfg.holdMs), handle.signal);
  } finally {
    await release(handle, from, loss);
  }
}

/** The session of the current election term (runAsLeader makes one per term), for error reports. */
let termSession: Session | undefined;

async function electionCycle(): Promise<void> {
  termSession = undefined;
  await runAsLeader(client, cfg.name, { value: cfg.id, ttl: cfg.ttl, signal: stop.signal, once: true }, async (leader) => {
    const token = leader.fencingToken;
    const from = now();
    termSession = leader.session;
    watchSession(leader.session);
    emit({ t: 'term-start', token: token.toString(), lease: leader.session.leaseId.toString(16), at: from });
    void witness(token);
    const loss = lossClock(leader);
    const steps = rng.int(2, 6);
    for (let i = 0; i < steps && !leader.signal.aborted; i++) {
      await store('write', 'election', token, { value: i, opId: `${cfg.id}#${cfg.incarnation}/${cycles}/${i}` });
      await pause(between(cfg.holdMs), leader.signal);
    }
    emit({
      t: 'term-end',
      token: token.toString(),
      from,
      to: loss.lostAt() ?? now(),
      lost: loss.lostAt() !== undefined,
      lostReason: loss.reason(),
    });
  });
}

const workloads: Record<WorkerConfig['role'], () => Promise<void>> = {
  fenced: fencedCycle,
  unfenced: unfencedCycle,
  election: electionCycle,
  semaphore: semaphoreCycle,
  rwlock: rwCycle,
  ...recipeCycles({ cfg, client, rng, stop: stop.signal, emit, currentSession, pause }),
};
const cycle = workloads[cfg.role];

const clock = clockOffsetSample();
emit({ t: 'ready', pid: process.pid, at: now(), offset: clock.offset, offsetErrMs: clock.errMs });
let backoff = 50;
while (!stop.signal.aborted) {
  try {
    const c = cycle();
    inCycle = c.then(
      () => {},
      () => {},
    );
    await c;
    cycles++;
    backoff = 50;
  } catch (err) {
    if (stop.signal.aborted) break;
    reportError(cfg.role, err, cfg.role === 'election' ? termSession : session);
    // Expected under faults: unavailable, session lost, lock lost, outcome unknown. Back off a little.
    await pause(backoff + rng.between(0, backoff), stop.signal);
    backoff = Math.min(1000, backoff * 2);
    if (!(err instanceof EtcdError) && !(err instanceof DOMException)) backoff = 1000;
  }
  await pause(between(cfg.thinkMs), stop.signal);
}

// Shutdown: revoke our lease (deleting any key left on it), close the client, and let the process end.
await siblingRun;
try {
  await session?.close();
} catch (err) {
  reportError('session-close', err, session);
}
await client.close();
await pgLedger?.end();
emit({ t: 'bye', at: now(), cycles, errors: errorCount() });
process.stdin.destroy();
