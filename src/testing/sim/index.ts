// The simulator for applications (`etcd-concurrency/testing`): a Client on a simulated etcd
// cluster, on virtual time, with faults to inject; one seed, one run.
import type { Client, ClientOptions } from '../../client/client.js';
import type { Proc } from './time.js';
import { World } from './world.js';

export interface SimulateOptions {
  /** Every source of chance (latencies, lease ids, backoff jitter) comes from it: same seed, same run. */
  seed: number;
  /** Which etcd to behave as: '3.7' (3.7.3, default) or '3.4' (3.4.23, whose watches may lose events near a compaction). */
  profile?: '3.4' | '3.7';
  /** Members of the cluster (default 3). */
  members?: number;
  /** The run fails (SimulationTimeoutError) once virtual time passes this many ms (default 600,000: 10 minutes). */
  maxVirtualMs?: number;
  /** ...or once this many timers have fired (default 5,000,000). */
  maxSteps?: number;
  /** Keep the trace's lines (what happened, in order) in the result. */
  keepTrace?: boolean;
}

/** What a simulation gives back: the body's value, and the run's fingerprint. */
export interface SimulationResult<T> {
  readonly value: T;
  /** The hash of everything that happened, in order: the same seed and body give the same hash. */
  readonly traceHash: string;
  readonly virtualMs: number;
  readonly steps: number;
  readonly trace?: readonly string[];
}

/** The simulation did not finish within its virtual-time or step budget: something waits forever. */
export class SimulationTimeoutError extends Error {
  static readonly code = 'ERR_SIMULATION_TIMEOUT';
  readonly code = SimulationTimeoutError.code;
  constructor(
    readonly why: 'time' | 'steps' | 'idle',
    readonly virtualMs: number,
  ) {
    super(
      why === 'idle'
        ? `the simulation's body is still waiting at ${Math.round(virtualMs)} ms of virtual time, and nothing is left to happen: a wait that nothing will end`
        : `the simulation's body did not finish within its ${why === 'time' ? 'virtual time' : 'step'} budget (at ${Math.round(virtualMs)} ms of virtual time)`,
    );
    this.name = 'SimulationTimeoutError';
  }
}

/** A simulated client process: its timers stop while paused; crashed, it stops for good. */
export interface SimProcess {
  readonly name: string;
  /** Runs `fn` as this process (its timers belong to it, so pause and crash act on them). */
  run<T>(fn: () => Promise<T>): Promise<T>;
}

/**
 * The simulated cluster and what a test can do to it. Faults take effect at once; schedule one for
 * later with `at(ms, fn)` or after `await sim.sleep(ms)`.
 */
export class Simulation {
  /** @internal */
  constructor(private readonly world: World) {}

  /** The members' endpoints (`sim-1:2379`, ...): only a Client made by {@link Simulation.client} reaches them. */
  get endpoints(): string[] {
    return this.world.endpoints;
  }

  /** Virtual milliseconds since the simulation started (what performance.now() says inside it). */
  get now(): number {
    return this.world.time.now;
  }

  /** A new client process. */
  process(name: string): SimProcess {
    const proc = this.world.proc(name);
    return { name, run: (fn) => proc.start(fn), [PROC]: proc } as SimProcess;
  }

  /** A Client of `process` on the simulated cluster (endpoints are filled in). */
  client(process: SimProcess, options: Omit<ClientOptions, 'endpoints'> = {}): Client {
    return this.world.client(procOf(process), options);
  }

  /** Waits `ms` of virtual time. */
  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => this.world.cluster.server(() => setTimeout(resolve, ms)));
  }

  /** Runs `fn` at `ms` of virtual time from now. */
  at(ms: number, fn: () => void): void {
    this.world.cluster.server(() => setTimeout(fn, ms));
  }

  /** Pauses `process` (SIGSTOP): its timers and deliveries wait; with `ms`, it resumes after that long. */
  pause(process: SimProcess, ms?: number): void {
    const p = procOf(process);
    this.world.pause(p);
    if (ms !== undefined) this.at(ms, () => this.world.resume(p));
  }

  resume(process: SimProcess): void {
    this.world.resume(procOf(process));
  }

  /** Crashes `process` for good: its connections drop; its leases expire after their TTL. */
  crash(process: SimProcess): void {
    this.world.crash(procOf(process));
  }

  /** Cuts `process` off from member `member` (an index) for `ms`: nothing crosses; the connection drops after 9 s. */
  partition(process: SimProcess, member: number, ms: number): void {
    this.world.net.partition(procOf(process), this.member(member), ms);
  }

  /** Crashes member `member`; with `ms`, it restarts after that long. */
  crashMember(member: number, ms?: number): void {
    const m = this.member(member);
    this.world.cluster.crash(m);
    this.world.net.dropMember(m);
    if (ms !== undefined) this.at(ms, () => this.world.cluster.restart(m));
  }

  restartMember(member: number): void {
    this.world.cluster.restart(this.member(member));
  }

  /** The leader steps down; a new one is elected after an election timeout (every lease gets its full TTL again). */
  loseLeader(): void {
    this.world.cluster.loseLeader();
  }

  /** The index of the current leader, or -1 during an election. */
  get leader(): number {
    return this.world.cluster.leader;
  }

  /** Holds back every stream answer (watch events, renewals) to `process` for `ms`. */
  stall(process: SimProcess, ms: number): void {
    this.world.net.stall(procOf(process), ms);
  }

  /** `process`'s next write is applied, but its answer is lost with its connection (an unknown outcome). */
  loseNextAnswer(process: SimProcess): void {
    this.world.net.loseNextAnswer.add(process.name);
  }

  /** Member `member` applies late by `ms` for `forMs` (its watches fall behind the leader). */
  lagFollower(member: number, ms: number, forMs: number): void {
    this.world.cluster.lag(this.member(member), ms, forMs);
  }

  /** Compacts history up to `revision` (default: the current revision). */
  compact(revision?: bigint): void {
    this.world.cluster.store.compact(revision ?? this.world.cluster.store.rev);
  }

  /** An operator's `etcdctl del key`. */
  operatorDelete(key: string): void {
    this.world.cluster.store.deleteRange({ key: Buffer.from(key) }, 'fault operator-delete');
  }

  /** An operator's `etcdctl put key value` (no lease). */
  operatorPut(key: string, value: string): void {
    this.world.cluster.store.put({ key: Buffer.from(key), value: Buffer.from(value) }, 'fault operator-put');
  }

  /** Revokes a lease from outside: an operator's `etcdctl lease revoke`, or a deposed leader's early revoke (etcd 15247). */
  revokeLease(id: bigint): void {
    this.world.cluster.revoke(id, 'fault revoke');
  }

  /** A key's value as the cluster has it now (undefined: no such key). */
  get(key: string): { value: Buffer; lease: bigint; createRevision: bigint; modRevision: bigint; version: bigint } | undefined {
    const kv = this.world.cluster.store.get(Buffer.from(key).toString('latin1'));
    return kv && { value: kv.value, lease: kv.lease, createRevision: kv.createRevision, modRevision: kv.modRevision, version: kv.version };
  }

  /** Every key the cluster holds, in key order. */
  keys(): string[] {
    return this.world.cluster.store.keys().map((k) => Buffer.from(k, 'latin1').toString());
  }

  /** Every lease the cluster holds. */
  leases(): bigint[] {
    return [...this.world.cluster.store.leases.keys()];
  }

  /** The store's current revision. */
  get revision(): bigint {
    return this.world.cluster.store.rev;
  }

  /** Adds a line to the trace (and its hash). */
  note(line: string): void {
    this.world.trace.add(line);
  }

  private member(i: number) {
    const m = this.world.cluster.members[i];
    if (!m) throw new RangeError(`no member ${i}: the cluster has ${this.world.cluster.members.length}`);
    return m;
  }
}

const PROC = Symbol('proc');

function procOf(p: SimProcess): Proc {
  const proc = (p as unknown as { [PROC]?: Proc })[PROC];
  if (!proc) throw new TypeError('not a process of this simulation: make it with sim.process()');
  return proc;
}

/**
 * Runs `body` against a simulated etcd cluster on virtual time: every timer, Date and
 * performance.now of this process, Math.random and the library's lease ids are the simulation's
 * until it ends, so the same seed gives the same run. Faults are injected through `sim`. Resolves
 * with the body's value and the run's trace hash; rejects with the body's error, or with a
 * SimulationTimeoutError when it waits forever. Needs `@sinonjs/fake-timers` (15.x) installed.
 *
 * @example
 * ```ts
 * import { Mutex, Session } from 'etcd-concurrency';
 * import { simulate } from 'etcd-concurrency/testing';
 *
 * const { value } = await simulate({ seed: 7 }, async (sim) => {
 *   const a = sim.process('a');
 *   const client = sim.client(a);
 *   return a.run(async () => {
 *     await using session = await Session.create(client, { ttl: 5 });
 *     const lock = await new Mutex(session, 'jobs/nightly').lock();
 *     sim.partition(a, 0, 2000); // applies to member 0 for 2 s of virtual time
 *     await lock.unlock();
 *     await client.close();
 *     return lock.fencingToken;
 *   });
 * });
 * ```
 */
export async function simulate<T>(options: SimulateOptions, body: (sim: Simulation) => Promise<T>): Promise<SimulationResult<T>> {
  const world = new World({
    seed: options.seed,
    profile: options.profile ?? '3.7',
    members: options.members ?? 3,
    keepTrace: options.keepTrace ?? false,
  });
  world.install();
  let virtualMs = 0;
  try {
    let outcome: { value: T } | { error: unknown } | undefined;
    body(new Simulation(world)).then(
      (value) => (outcome = { value }),
      (error: unknown) => (outcome = { error }),
    );
    const reason = await world.time.run(() => outcome !== undefined, {
      steps: options.maxSteps ?? 5_000_000,
      ms: options.maxVirtualMs ?? 600_000,
    });
    virtualMs = world.time.now;
    if (world.time.thrown.length > 0) throw world.time.thrown[0];
    if (!outcome) throw new SimulationTimeoutError(reason === 'idle' ? 'idle' : reason === 'steps' ? 'steps' : 'time', virtualMs);
    if ('error' in outcome) throw outcome.error;
    return {
      value: outcome.value,
      traceHash: world.trace.digest(),
      virtualMs,
      steps: world.time.steps,
      ...(world.trace.lines ? { trace: world.trace.lines } : {}),
    };
  } finally {
    world.dispose();
  }
}
