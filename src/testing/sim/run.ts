// One schedule: a plan (client processes, their sessions and operations, and the faults) drawn
// from a seed, run on a fresh simulated world, judged by the oracle. The same seed and plan give
// the same run, byte for byte: its trace hash says so.
import { Oracle, type Violation } from './oracle.js';
import { keysUnder } from './store.js';
import type { Proc } from './time.js';
import { type ActorContext, actor, BARRIER_COUNT, observer, type Plan, planFor, SessionHolder, type WorkloadName } from './workload.js';
import { World } from './world.js';

export type ProfileName = '3.4' | '3.7';
export { WORKLOADS, planFor, type WorkloadName, type Plan, type Op, type Fault, type FaultKind } from './workload.js';

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

/** What each actor is doing now, and since when (for a liveness report). */
const doing = new Map<string, { what: string; since: number }>();

export interface RunResult {
  readonly seed: number;
  readonly profile: ProfileName;
  readonly violations: Violation[];
  readonly hash: string;
  readonly steps: number;
  readonly virtualMs: number;
  readonly plan: Plan;
  readonly trace?: string[];
  readonly grants: number;
  /** What each fault did, in order (`operator-put elect/a/…`, `fault 2 pause`, ...). */
  readonly faultLog: readonly string[];
  /** Keys a client wrote that were left after every session closed by design (a DoubleBarrier's `ready` whose round's last member died). */
  readonly leftByDesign: readonly string[];
}

/** How long after the faults stop, besides the operations' own holds and gaps, every actor must have finished (3 of the longest TTL, plus a call timeout). */
const SETTLE_MS = 3 * 10_000 + 10_000;

/** How long a reset connection keeps a process from etcd, at most (its client dials another member within dialTimeoutMs, 2 s). */
const CUT_MS = 2000;
/** How long after its sessions closed a process's client may still hold a stream: its work winding down, then the watch hub's 1 s idle timer. */
const IDLE_STREAM_MS = 30_000;

/** Runs one schedule. */
export async function runSchedule(options: RunOptions): Promise<RunResult> {
  const plan = options.plan ?? planFor(options.seed, { faults: options.faults, workload: options.workload ?? 'mixed' });
  const world = new World({ seed: options.seed, profile: options.profile ?? '3.7', keepTrace: options.keepTrace ?? false });
  const { time, trace, cluster } = world;
  const oracle = new Oracle(
    () => Math.round(time.now),
    cluster.store,
    (l) => trace.add(l),
  );
  cluster.onChange = (c) => {
    oracle.changed(c);
    if (c.type === 'put' && c.k.endsWith('/ready') && !c.cause.startsWith('fault')) {
      const name = c.k.slice(0, -'/ready'.length);
      // Go's counting: every key under waiters/ counts, a stray one too.
      const members = keysUnder(cluster.store.keys(), `${name}/waiters/`);
      oracle.barrierOpened(name, BARRIER_COUNT, members, c.rev);
    }
  };
  // What may keep a process from etcd, for the oracle's judgement of a DoubleBarrier member that
  // gave up (its best-effort delete of `ready` needs etcd): no leader, a lost answer (its connection
  // reset), and the faults below.
  cluster.onLeader = (elected) => oracle.leader(elected);
  world.net.onAnswerLost = (proc) => oracle.cutOff(proc.name, Math.round(time.now), Math.round(time.now) + CUT_MS);
  const leaders = (rev: bigint): { key: string; token: bigint } | null | 'compacted' => {
    if (rev < cluster.store.compacted || rev > cluster.store.rev) return 'compacted';
    const r = cluster.store.range({ key: Buffer.from('elect/a/'), rangeEnd: Buffer.from('elect/a0'), revision: rev });
    let best: { key: string; token: bigint } | null = null;
    for (const kv of r.kvs ?? []) {
      if (kv.lease === 0n) continue;
      if (!best || kv.createRevision! < best.token) best = { key: kv.key!.toString('latin1'), token: kv.createRevision! };
    }
    return best;
  };
  const rejections: unknown[] = [];
  const onRejection = (err: unknown): void => {
    rejections.push(err);
  };
  process.on('unhandledRejection', onRejection);
  doing.clear();
  world.install();
  let reason: string;
  let virtualMs = 0;
  const running = new Map<Proc, number>();
  const faultLog: string[] = [];
  const leftByDesign: string[] = [];
  try {
    const procs = plan.procs.map((pp) => world.proc(pp.name));
    for (const p of procs) p.onWake = () => oracle.woke(p);
    // Each process closes its sessions, then its client. Per process: a process that crashes while
    // closing never settles its own closes, and must not keep the others' clients open.
    const closers: (() => Promise<unknown>)[] = [];
    // A client whose sessions are closed and whose observers stopped needs no stream: each ends once
    // idle (the watch hub's idle timer, the keepalive's), so an idle process can exit.
    const idleStreams = async (proc: Proc): Promise<void> => {
      const streams = () => [...world.net.connections].filter((c) => c.proc === proc).flatMap((c) => [...c.streams].map((s) => s.method));
      // Work still winding down (a release retried, a stream's last answers) may use it a while.
      for (let waited = 0; waited < IDLE_STREAM_MS && streams().length > 0; waited += 1000) await new Promise((r) => setTimeout(r, 1000));
      const open = streams();
      if (!proc.crashed && open.length > 0) {
        oracle.violations.push({
          rule: 'idle-streams',
          at: Math.round(time.now),
          detail: `${proc.name} still has ${open.join(', ')} stream(s) open ${IDLE_STREAM_MS} ms after its sessions closed and nothing else used its client`,
        });
      }
    };
    // Observers stop, each as its own process: what their aborts start (a watch's cancel, its idle
    // timer) is that process's, not whoever ran last.
    const stopObserving: (() => void)[] = [];
    plan.procs.forEach((pp, i) => {
      const proc = procs[i]!;
      const client = world.client(proc, { callTimeoutMs: 5000 }, pp.member);
      const sessionClosers: (() => Promise<void>)[] = [];
      closers.push(() =>
        Promise.allSettled(sessionClosers.map((c) => c()))
          .then(() => (proc.crashed ? undefined : proc.start(() => idleStreams(proc))))
          .then(() => (proc.crashed ? undefined : proc.start(() => client.close()))),
      );
      for (const name of pp.observes) {
        const ctx: ActorContext = { proc, oracle, say: (l) => trace.add(l), doing: () => {} };
        const observing = new AbortController();
        stopObserving.push(() => proc.run(() => observing.abort()));
        void proc.start(() => observer(ctx, client, name, observing.signal, leaders)).catch(() => {});
      }
      for (const sp of pp.sessions) {
        const holder = new SessionHolder(client, sp.ttl, (lease) => oracle.sessionLost(lease));
        for (const ops of sp.actors) {
          running.set(proc, (running.get(proc) ?? 0) + 1);
          const me = `${proc.name}/${ops[0]?.id ?? '-'}`;
          const ctx: ActorContext = {
            proc,
            oracle,
            say: (l) => trace.add(l),
            doing: (what) => doing.set(me, { what, since: time.now }),
          };
          void proc
            .start(() => actor(ctx, holder, ops))
            .finally(() => {
              doing.delete(me);
              running.set(proc, running.get(proc)! - 1);
            });
        }
        sessionClosers.push(() => (proc.crashed ? Promise.resolve() : proc.start(() => holder.close())));
      }
    });
    scheduleFaults(world, plan, procs, oracle, faultLog);
    // Until every actor is done (or has crashed), within the settle bound.
    const left = (): number => {
      let n = 0;
      for (const p of procs) if (!p.crashed) n += running.get(p) ?? 0;
      return n;
    };
    const actorsDone = (): boolean => left() === 0;
    // Time enough for every operation to run one after another (they may all queue on one name).
    const work = plan.procs.flatMap((p) => p.sessions.flatMap((x) => x.actors.flat())).reduce((n, o) => n + o.holdMs + o.gapMs, 0);
    const budget = { steps: 2_000_000, ms: plan.quietAt + SETTLE_MS + work };
    const learnCheck = setInterval(() => oracle.checkLearned(), 1000);
    reason = await time.run(() => actorsDone() || oracle.violations.length > 0, budget);
    clearInterval(learnCheck);
    for (const stop of stopObserving) stop();
    if (reason === 'stopped' && oracle.violations.length === 0) {
      // Everyone closes; then the crashed processes' leases expire; then nothing may be left.
      for (const close of closers) void close().catch(() => {});
      // A key a fault wrote is the operator's; a DoubleBarrier's `ready` whose round's last member
      // could not delete it is left by design (docs/barriers.md, Oracle.leftByDesign).
      const ours = (): string[] =>
        cluster.store.keys().filter((k) => oracle.ownedByClients(k) && !oracle.leftByDesign(k, cluster.store.get(k)!));
      const clean = (): boolean => cluster.store.leases.size === 0 && ours().length === 0;
      reason = await time.run(clean, { steps: budget.steps, ms: time.now + 30_000 });
      for (const k of cluster.store.keys()) {
        const why = oracle.ownedByClients(k) ? oracle.whyLeft(k, cluster.store.get(k)!) : undefined;
        if (why === undefined) continue;
        leftByDesign.push(k);
        trace.add(`left by design: ${k}: ${why}`);
      }
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
          oracle.violations.push({
            rule: 'timers-left',
            at: Math.round(time.now),
            detail: `${time.pending} timers still pending after everything closed`,
          });
        }
        const streams = cluster.members.reduce((n, m) => n + m.watchStreams.size + m.keepAliveStreams.size, 0);
        if (streams > 0) {
          oracle.violations.push({
            rule: 'streams-left',
            at: Math.round(time.now),
            detail: `${streams} Watch or LeaseKeepAlive streams still open at the members after everything closed`,
          });
        }
      }
    } else if (reason === 'steps' || reason === 'time') {
      oracle.violations.push({
        rule: 'liveness',
        at: Math.round(time.now),
        detail: `${left()} actors still running ${Math.round(time.now - plan.quietAt)} ms after the faults stopped (${reason} budget): ${[...doing].map(([me, d]) => `${me}: ${d.what} since ${Math.round(d.since)}`).join('; ')}`,
      });
    } else if (reason === 'idle' && !actorsDone()) {
      oracle.violations.push({
        rule: 'liveness',
        at: Math.round(time.now),
        detail: 'nothing left to run, yet actors are still waiting (a lost wake-up)',
      });
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
    profile: options.profile ?? '3.7',
    violations: oracle.violations,
    hash: trace.digest(),
    steps: time.steps,
    virtualMs,
    plan,
    grants: oracle.grants,
    faultLog,
    leftByDesign,
    ...(trace.lines ? { trace: trace.lines } : {}),
  };
}

function scheduleFaults(world: World, plan: Plan, procs: Proc[], oracle: Oracle, log: string[]): void {
  const { cluster, net, trace } = world;
  const rng = world.rng.fork('faults');
  for (const f of plan.faults) {
    cluster.server(() =>
      setTimeout(() => {
        const proc = procs[f.target % procs.length]!;
        const m = cluster.members[f.member % cluster.members.length]!;
        trace.add(`fault ${f.id} ${f.kind}`);
        log.push(`fault ${f.id} ${f.kind}`);
        const now = Math.round(world.time.now);
        // Whether `p` talks to member `m` now: a fault of that link may keep it from etcd.
        const on = (p: Proc): boolean => [...net.connections].some((c) => c.open && c.proc === p && c.member === m);
        switch (f.kind) {
          case 'partition':
            if (on(proc)) oracle.cutOff(proc.name, now, now + f.ms);
            net.partition(proc, m, f.ms);
            break;
          case 'member-crash':
            cluster.crash(m);
            for (const p of procs) if (on(p)) oracle.cutOff(p.name, now, now + CUT_MS);
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
            oracle.cutOff(proc.name, now, now + f.ms);
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
            // Mostly a holder's key (the oldest under its prefix): the edit that matters.
            const holders = keys.filter((k) => {
              const prefix = k.slice(0, k.lastIndexOf('/') + 1);
              const mine = cluster.store.get(k)!.createRevision;
              return !keys.some((o) => o !== k && o.startsWith(prefix) && cluster.store.get(o)!.createRevision < mine);
            });
            const k = rng.pick(holders.length > 0 && rng.chance(0.7) ? holders : keys);
            if (f.kind === 'operator-delete') cluster.store.deleteRange({ key: Buffer.from(k, 'latin1') }, 'fault operator-delete');
            else cluster.store.put({ key: Buffer.from(k, 'latin1'), value: Buffer.from('operator') }, 'fault operator-put');
            trace.add(`${f.kind} ${k}`);
            log.push(`${f.kind} ${k}`);
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
          case 'stream-break':
            if (on(proc)) oracle.cutOff(proc.name, now, now + CUT_MS);
            net.breakOne(proc, m);
            break;
          case 'follower-lag':
            cluster.lag(m, Math.min(f.ms, 2500), f.ms);
            break;
          case 'slow-answers':
            net.slowAnswers(proc, 400, f.ms);
            break;
          case 'watch-cancel':
            net.cancelWatches(proc);
            break;
        }
      }, f.at),
    );
  }
}
