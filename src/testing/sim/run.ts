// One schedule: a plan (client processes, their sessions and operations, and the faults) drawn
// from a seed, run on a fresh simulated world, judged by the oracle. The same seed and plan give
// the same run, byte for byte: its trace hash says so.
import { Session } from '../../session.js';
import { Mutex, type LockHandle } from '../../primitives/mutex.js';
import { Oracle, type Violation } from './oracle.js';
import { Rng } from './rng.js';
import type { Proc } from './time.js';
import { World } from './world.js';

export type ProfileName = '3.4' | '3.7';
export const WORKLOADS = ['mutex'] as const;
export type WorkloadName = (typeof WORKLOADS)[number];

/** One operation of an actor. */
export interface Op {
  readonly id: number;
  readonly kind: 'lock' | 'try' | 'abort';
  readonly name: string;
  readonly share: boolean;
  readonly holdMs: number;
  readonly gapMs: number;
  /** For 'abort': the wait is aborted after this long. */
  readonly abortMs: number;
}

export interface SessionPlan {
  readonly ttl: number;
  readonly actors: Op[][];
}

export interface ProcPlan {
  readonly name: string;
  readonly sessions: SessionPlan[];
}

export type FaultKind =
  | 'partition'
  | 'member-crash'
  | 'leader-loss'
  | 'stall'
  | 'lose-answer'
  | 'pause'
  | 'crash-proc'
  | 'operator-delete'
  | 'operator-put'
  | 'operator-revoke'
  | 'early-revoke'
  | 'compact'
  | 'follower-lag';

export interface Fault {
  readonly id: number;
  readonly at: number;
  readonly kind: FaultKind;
  /** Which process or member (an index), and for how long. */
  readonly target: number;
  readonly member: number;
  readonly ms: number;
}

export interface Plan {
  readonly procs: ProcPlan[];
  readonly faults: Fault[];
  /** Faults happen before this (virtual ms); after it the run must settle. */
  readonly quietAt: number;
}

export interface RunOptions {
  seed: number;
  profile?: ProfileName;
  workload?: WorkloadName;
  /** A plan to run instead of the seed's (shrinking); the seed still drives the scheduling. */
  plan?: Plan;
  keepTrace?: boolean;
  /** Faults on (default true). */
  faults?: boolean;
}

export interface RunResult {
  readonly seed: number;
  readonly violations: Violation[];
  readonly hash: string;
  readonly steps: number;
  readonly virtualMs: number;
  readonly plan: Plan;
  readonly trace?: string[];
  readonly grants: number;
}

const NAMES = ['locks/a', 'locks/b'];
const FAULT_KINDS: FaultKind[] = [
  'partition',
  'member-crash',
  'leader-loss',
  'stall',
  'lose-answer',
  'pause',
  'crash-proc',
  'operator-delete',
  'operator-put',
  'operator-revoke',
  'early-revoke',
  'compact',
  'follower-lag',
];

/** The seed's plan. */
export function planFor(seed: number, options: { faults?: boolean } = {}): Plan {
  const rng = new Rng(seed, 'plan');
  let id = 0;
  const procs: ProcPlan[] = [];
  const nProcs = rng.between(2, 3);
  for (let p = 0; p < nProcs; p++) {
    const sessions: SessionPlan[] = [];
    const nSessions = rng.chance(0.3) ? 2 : 1;
    for (let s = 0; s < nSessions; s++) {
      const actors: Op[][] = [];
      const nActors = rng.chance(0.35) ? 2 : 1;
      for (let a = 0; a < nActors; a++) {
        const ops: Op[] = [];
        const nOps = rng.between(2, 5);
        for (let o = 0; o < nOps; o++) {
          const r = rng.next();
          ops.push({
            id: id++,
            kind: r < 0.7 ? 'lock' : r < 0.85 ? 'try' : 'abort',
            name: rng.pick(NAMES),
            share: nActors > 1 && rng.chance(0.2),
            holdMs: rng.between(0, 400),
            gapMs: rng.between(0, 300),
            abortMs: rng.between(1, 600),
          });
        }
        actors.push(ops);
      }
      sessions.push({ ttl: rng.pick([3, 5, 10]), actors });
    }
    procs.push({ name: `p${p + 1}`, sessions });
  }
  const faults: Fault[] = [];
  const quietAt = 6000;
  if (options.faults !== false) {
    const nFaults = rng.between(0, 4);
    for (let f = 0; f < nFaults; f++) {
      faults.push({
        id: f,
        at: rng.between(50, quietAt - 1000),
        kind: rng.pick(FAULT_KINDS),
        target: rng.int(nProcs),
        member: rng.int(3),
        ms: rng.pick([200, 800, 2500, 6000, 12000]),
      });
    }
    faults.sort((a, b) => a.at - b.at || a.id - b.id);
  }
  return { procs, faults, quietAt };
}

/** How long after the faults stop every wait must have ended (3 of the longest TTL, plus a call timeout). */
const SETTLE_MS = 3 * 10_000 + 10_000;

/** Runs one schedule. */
export async function runSchedule(options: RunOptions): Promise<RunResult> {
  const plan = options.plan ?? planFor(options.seed, { faults: options.faults });
  const world = new World({ seed: options.seed, profile: options.profile ?? '3.7', keepTrace: options.keepTrace ?? false });
  const { time, trace, cluster } = world;
  const oracle = new Oracle(
    () => Math.round(time.now),
    cluster.store,
    (l) => trace.add(l),
  );
  cluster.onChange = (c) => oracle.changed(c);
  const rejections: unknown[] = [];
  const onRejection = (err: unknown): void => {
    rejections.push(err);
  };
  process.on('unhandledRejection', onRejection);
  world.install();
  let reason: string;
  let virtualMs = 0;
  const running = new Map<Proc, number>();
  try {
    const procs = plan.procs.map((pp) => world.proc(pp.name));
    for (const p of procs) p.onWake = () => oracle.woke(p);
    const closers: (() => Promise<void>)[] = [];
    const clientClosers: (() => Promise<void>)[] = [];
    plan.procs.forEach((pp, i) => {
      const proc = procs[i]!;
      const client = world.client(proc, { callTimeoutMs: 5000 });
      clientClosers.push(() => (proc.crashed ? Promise.resolve() : proc.start(() => client.close())));
      for (const sp of pp.sessions) {
        const holder = new SessionHolder(client, sp.ttl, proc);
        for (const ops of sp.actors) {
          running.set(proc, (running.get(proc) ?? 0) + 1);
          void proc.start(() => actor(proc, holder, ops, oracle, trace.add.bind(trace))).finally(() => running.set(proc, running.get(proc)! - 1));
        }
        closers.push(() => (proc.crashed ? Promise.resolve() : proc.start(() => holder.close())));
      }
    });
    scheduleFaults(world, plan, procs, oracle);
    // Until every actor is done (or has crashed), within the settle bound.
    const left = (): number => procs.reduce((n, p) => n + (p.crashed ? 0 : (running.get(p) ?? 0)), 0);
    const actorsDone = (): boolean => left() === 0;
    const budget = { steps: 2_000_000, ms: plan.quietAt + SETTLE_MS };
    const learnCheck = setInterval(() => oracle.checkLearned(), 1000);
    reason = await time.run(() => actorsDone() || oracle.violations.length > 0, budget);
    clearInterval(learnCheck);
    if (reason === 'stopped' && oracle.violations.length === 0) {
      // Everyone closes; then the crashed processes' leases expire; then nothing may be left.
      void Promise.allSettled(closers.map((c) => c())).then(() => Promise.allSettled(clientClosers.map((c) => c())));
      const ours = (): string[] => cluster.store.keys().filter((k) => oracle.ownedByClients(k));
      const clean = (): boolean => cluster.store.leases.size === 0 && ours().length === 0;
      reason = await time.run(clean, { steps: budget.steps, ms: time.now + 30_000 });
      if (reason !== 'stopped') {
        oracle.violations.push({
          rule: 'left-behind',
          at: Math.round(time.now),
          detail: `after every session closed: keys ${JSON.stringify(ours())}, leases ${cluster.store.leases.size}`,
        });
      } else {
        cluster.stop();
        reason = await time.run(() => false, { steps: budget.steps, ms: time.now + 60_000 });
        if (reason !== 'idle') {
          oracle.violations.push({ rule: 'timers-left', at: Math.round(time.now), detail: `${time.pending} timers still pending after everything closed` });
        }
      }
    } else if (reason === 'steps' || reason === 'time') {
      oracle.violations.push({
        rule: 'liveness',
        at: Math.round(time.now),
        detail: `${left()} actors still running ${Math.round(time.now - plan.quietAt)} ms after the faults stopped (${reason} budget)`,
      });
    } else if (reason === 'idle' && !actorsDone()) {
      oracle.violations.push({ rule: 'liveness', at: Math.round(time.now), detail: 'nothing left to run, yet actors are still waiting (a lost wake-up)' });
    }
    for (const err of time.thrown) oracle.violations.push({ rule: 'uncaught-exception', at: Math.round(time.now), detail: String(err) });
  } finally {
    virtualMs = Math.round(time.now);
    world.dispose();
    process.off('unhandledRejection', onRejection);
  }
  // Unhandled rejections surface on the real event loop, after the run.
  await new Promise((r) => setImmediate(r));
  for (const err of rejections) oracle.violations.push({ rule: 'unhandled-rejection', at: Math.round(time.now), detail: String(err) });
  return {
    seed: options.seed,
    violations: oracle.violations,
    hash: trace.digest(),
    steps: time.steps,
    virtualMs,
    plan,
    grants: oracle.grants,
    ...(trace.lines ? { trace: trace.lines } : {}),
  };
}

/** A session that is replaced when lost (creation retried), shared by its actors. */
class SessionHolder {
  private current: Promise<Session | undefined> | undefined;
  private closed = false;

  constructor(
    private readonly client: import('../../client/client.js').Client,
    private readonly ttl: number,
    private readonly proc: Proc,
  ) {}

  async get(): Promise<Session | undefined> {
    for (let attempt = 0; attempt < 50 && !this.closed; attempt++) {
      const s = await (this.current ??= Session.create(this.client, { ttl: this.ttl }).catch(() => undefined));
      if (s && !s.signal.aborted) return s;
      this.current = undefined;
      if (s) void s.close().catch(() => {});
      await sleep(200);
    }
    return undefined;
  }

  async close(): Promise<void> {
    this.closed = true;
    const s = await this.current;
    await s?.close().catch(() => {});
  }

  get name(): string {
    return this.proc.name;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

async function actor(proc: Proc, holder: SessionHolder, ops: readonly Op[], oracle: Oracle, say: (l: string) => void): Promise<void> {
  for (const op of ops) {
    await sleep(op.gapMs);
    const session = await holder.get();
    if (!session) return;
    const m = new Mutex(session, op.name);
    let handle: LockHandle | null = null;
    try {
      if (op.kind === 'try') handle = await m.tryLock({ share: op.share });
      else if (op.kind === 'abort') {
        const c = new AbortController();
        const t = setTimeout(() => c.abort(new Error('gave up')), op.abortMs);
        try {
          handle = await m.lock({ signal: c.signal, share: op.share });
        } finally {
          clearTimeout(t);
        }
      } else handle = await m.lock({ share: op.share });
    } catch (err) {
      say(`op ${op.id} ${proc.name} ${op.kind} ${op.name} failed: ${(err as Error).name}`);
      continue;
    }
    if (!handle) {
      say(`op ${op.id} ${proc.name} try ${op.name}: busy`);
      continue;
    }
    const h = handle;
    const b = oracle.granted(
      { kind: 'lock', name: op.name, key: h.key, token: h.fencingToken, lease: session.leaseId, proc, assertHeld: () => h.assertHeld() },
      true,
    );
    const end = (): void => oracle.ended(b);
    if (h.signal.aborted) end();
    else h.signal.addEventListener('abort', end, { once: true });
    await sleep(op.holdMs);
    end();
    await h.unlock().catch(() => {});
  }
}

function scheduleFaults(world: World, plan: Plan, procs: Proc[], oracle: Oracle): void {
  const { cluster, net, trace } = world;
  const rng = world.rng.fork('faults');
  for (const f of plan.faults) {
    cluster.server(() =>
      setTimeout(() => {
        const proc = procs[f.target % procs.length]!;
        const m = cluster.members[f.member % cluster.members.length]!;
        trace.add(`fault ${f.id} ${f.kind}`);
        switch (f.kind) {
          case 'partition':
            net.partition(proc, m, f.ms);
            break;
          case 'member-crash':
            cluster.crash(m);
            net.dropMember(m);
            setTimeout(() => cluster.restart(m), f.ms);
            break;
          case 'leader-loss':
            cluster.loseLeader();
            break;
          case 'stall':
            net.stall(proc, Math.min(f.ms, 3000));
            break;
          case 'lose-answer':
            net.loseNextAnswer.add(proc.name);
            break;
          case 'pause':
            world.pause(proc);
            setTimeout(() => world.resume(proc), f.ms);
            break;
          case 'crash-proc':
            oracle.crashed(proc);
            world.crash(proc);
            break;
          case 'operator-delete':
          case 'operator-put': {
            const keys = cluster.store.keys();
            if (keys.length === 0) break;
            const k = rng.pick(keys);
            if (f.kind === 'operator-delete') cluster.store.deleteRange({ key: Buffer.from(k, 'latin1') }, 'fault operator-delete');
            else cluster.store.put({ key: Buffer.from(k, 'latin1'), value: Buffer.from('operator') }, 'fault operator-put');
            trace.add(`${f.kind} ${k}`);
            break;
          }
          case 'operator-revoke':
          case 'early-revoke': {
            const ids = [...cluster.store.leases.keys()];
            if (ids.length === 0) break;
            cluster.revoke(rng.pick(ids), `fault ${f.kind}`);
            break;
          }
          case 'compact': {
            const s = cluster.store;
            if (s.rev > s.compacted + 1n) {
              s.compact(s.compacted + 1n + BigInt(rng.int(Number(s.rev - s.compacted))));
              trace.add(`compact at ${s.compacted}`);
            }
            break;
          }
          case 'follower-lag':
            cluster.lag(m, Math.min(f.ms, 2500), f.ms);
            break;
        }
      }, f.at),
    );
  }
}
